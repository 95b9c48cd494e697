//! Provider options -> [`Config`].
//!
//! Options reach `CreateEp` as session config entries `ep.rcpuexecutionprovider.<key>`. Every
//! key under that prefix must be one of [`OPTION_KEYS`]; an unknown key or a bad value fails
//! session creation with a message naming the key. The keys, meanings and defaults are also
//! declared in `include/rcpu_ep.h` (checked against this file by `build.rs`).
//! `accumulator_cache_mb` is the former name of `scratch_cache_mb`, still accepted; giving both
//! is an error naming both.

use crate::runtime::Affinity;

/// The session-config prefix ORT gives provider options of this EP.
pub const CONFIG_PREFIX: &str = "ep.rcpuexecutionprovider.";

mod header {
    include!(concat!(env!("OUT_DIR"), "/header_consts.rs"));
}

/// Every provider option rcpu accepts (generated from `include/rcpu_ep.h`).
pub const OPTION_KEYS: [&str; 9] = header::HEADER_OPTION_KEYS;

/// The EP name as the public header declares it (`ep::EP_NAME` must equal it; tested).
pub const HEADER_EP_NAME: &str = header::HEADER_EP_NAME;

/// Default spin time of an idle worker before it parks (measured; see `runtime::lanes`).
pub use crate::runtime::DEFAULT_BLOCKTIME_US;

/// The parsed provider options of one EP instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Lanes (calling thread included); default: physical cores in the affinity mask.
    pub threads: usize,
    pub affinity: Affinity,
    pub blocktime_us: u64,
    /// Process-wide budget for prepacked weights (None: default from MemAvailable).
    pub weight_cache_mb: Option<u64>,
    /// Process-wide budget for what kernels park per thread between calls (packed panels and
    /// weight groups, work buffers, prepared A), over all threads (None: default). Option
    /// `scratch_cache_mb`, or its former name `accumulator_cache_mb`.
    pub scratch_cache_mb: Option<u64>,
    /// Run maximal groups of claimed nodes as fused partitions (option `fuse`, default on).
    pub fuse: bool,
    /// How MatMulNBits at accuracy level 4 stores its packed scales (option `acc4_scales`,
    /// default f16).
    pub acc4_scales: Acc4Scales,
    /// Fused partitions time their steps into `telemetry::step_times` (option `step_times`,
    /// default off).
    pub step_times: bool,
}

/// Scale format of MatMulNBits' packed weights at accuracy level 4 (option `acc4_scales`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Acc4Scales {
    /// f16 where f16 holds a group's scales as normals (fewer bytes per decode token).
    #[default]
    F16,
    /// The model's f32 scales (logits within ORT's own spread).
    F32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            threads: crate::runtime::default_threads(),
            affinity: Affinity::Physical,
            blocktime_us: DEFAULT_BLOCKTIME_US,
            weight_cache_mb: None,
            scratch_cache_mb: None,
            fuse: true,
            acc4_scales: Acc4Scales::F16,
            step_times: false,
        }
    }
}

/// Most lanes one EP may run (`threads`, and the default a CPU list gives).
pub const MAX_THREADS: u64 = 1024;

fn parse_u64(key: &str, value: &str, max: u64) -> Result<u64, String> {
    let t = value.trim();
    let v: u64 = t.parse().map_err(|_| {
        if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            // All digits but past u64: say so rather than "not an integer".
            format!("rcpu: provider option '{key}' = {t} is out of range (at most {max})")
        } else {
            format!("rcpu: provider option '{key}' must be a non-negative integer, got '{value}'")
        }
    })?;
    if v > max {
        return Err(format!(
            "rcpu: provider option '{key}' = {v} is out of range (at most {max})"
        ));
    }
    Ok(v)
}

fn parse_switch(key: &str, value: &str) -> Result<bool, String> {
    match value.trim() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!(
            "rcpu: provider option '{key}' must be 'on' or 'off', got '{value}'"
        )),
    }
}

impl Config {
    /// Builds a config from the session's config entries (all of them; entries outside the
    /// rcpu prefix are ignored).
    pub fn from_entries<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Config, String> {
        let mut c = Config::default();
        let mut threads_set = false;
        let mut scratch_key: Option<&str> = None;
        for (full_key, value) in entries {
            let Some(key) = full_key.strip_prefix(CONFIG_PREFIX) else {
                continue;
            };
            match key {
                "threads" => {
                    let t = parse_u64(key, value, MAX_THREADS)?;
                    threads_set = t != 0;
                    c.threads = if t == 0 {
                        crate::runtime::default_threads()
                    } else {
                        t as usize
                    };
                }
                "affinity" => {
                    c.affinity = value
                        .parse::<Affinity>()
                        .map_err(|e| format!("rcpu: provider option 'affinity': {e}"))?;
                }
                "blocktime_us" => c.blocktime_us = parse_u64(key, value, 10_000_000)?,
                "weight_cache_mb" => c.weight_cache_mb = Some(parse_u64(key, value, 1 << 30)?),
                "scratch_cache_mb" | "accumulator_cache_mb" => {
                    if let Some(other) = scratch_key.filter(|&k| k != key) {
                        return Err(format!(
                            "rcpu: provider options '{other}' and '{key}' set the same budget \
                             ('accumulator_cache_mb' is the former name of 'scratch_cache_mb'); \
                             give one"
                        ));
                    }
                    scratch_key = Some(key);
                    c.scratch_cache_mb = Some(parse_u64(key, value, 1 << 30)?)
                }
                "fuse" => c.fuse = parse_switch(key, value)?,
                "step_times" => c.step_times = parse_switch(key, value)?,
                "acc4_scales" => {
                    c.acc4_scales = match value.trim() {
                        "f16" => Acc4Scales::F16,
                        "f32" => Acc4Scales::F32,
                        _ => {
                            return Err(format!(
                                "rcpu: provider option 'acc4_scales' must be 'f16' or 'f32', \
                                 got '{value}'"
                            ))
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "rcpu: unknown provider option '{other}' (known: {})",
                        OPTION_KEYS.join(", ")
                    ))
                }
            }
        }
        if let Affinity::List(cpus) = &c.affinity {
            if !threads_set {
                // One lane per listed CPU the process may really use, within the cap of
                // `threads` (a list of 4096 CPUs on a 2-CPU machine is 2 lanes, not 4096).
                let allowed = crate::os::allowed_cpus().ok();
                c.threads = crate::runtime::affinity::lanes_for_list(
                    cpus,
                    allowed.as_deref(),
                    MAX_THREADS as usize,
                );
            }
            if cpus.len() < c.threads {
                return Err(format!(
                    "rcpu: provider option 'affinity' lists {} CPUs but 'threads' is {}",
                    cpus.len(),
                    c.threads
                ));
            }
        }
        Ok(c)
    }
}
