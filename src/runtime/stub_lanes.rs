//! TEMPORARY stand-in until the lanes land (runs everything serially).
use std::sync::Arc;
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Affinity {
    Physical,
    Off,
    List(Vec<usize>),
}
impl std::str::FromStr for Affinity {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "physical" => Ok(Affinity::Physical),
            "off" => Ok(Affinity::Off),
            _ => s
                .split(',')
                .map(|x| {
                    x.trim()
                        .parse::<usize>()
                        .map_err(|_| format!("bad cpu '{x}'"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Affinity::List),
        }
    }
}
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolConfig {
    pub threads: usize,
    pub affinity: Affinity,
    pub blocktime_us: u64,
}
pub struct Lanes;
impl Lanes {
    pub fn pin_warnings(&self) -> Vec<String> {
        vec![]
    }
}
impl super::Par for Lanes {
    fn lanes(&self) -> usize {
        1
    }
    fn decode_chunks(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        (0..n).for_each(f)
    }
    fn task_chunks(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        (0..n).for_each(f)
    }
}
pub fn pool_for(_c: &PoolConfig) -> Arc<Lanes> {
    Arc::new(Lanes)
}
pub fn default_threads() -> usize {
    1
}
pub fn pool_stats() -> serde_json::Value {
    serde_json::json!([])
}
pub fn reset_counters() {}
