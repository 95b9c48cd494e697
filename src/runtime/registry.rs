//! The process-wide pool registry: sessions with equal configurations share one [`Lanes`].
//!
//! The registry holds pools weakly, so it never keeps workers alive: when the last session
//! drops its `Arc<Lanes>`, the pool's `Drop` stops and joins its workers, and the dead entry is
//! pruned on the next lookup.

use super::lanes::{Lanes, PoolConfig};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};

static POOLS: LazyLock<Mutex<HashMap<PoolConfig, Weak<Lanes>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The shared pool for `cfg` (started on first use; `threads == 0` is resolved first, so it
/// shares with an explicit request for the default count).
pub fn pool_for(cfg: &PoolConfig) -> Arc<Lanes> {
    let key = cfg.resolved();
    let mut pools = POOLS.lock();
    if let Some(p) = pools.get(&key).and_then(Weak::upgrade) {
        return p;
    }
    pools.retain(|_, w| w.strong_count() > 0);
    // Started under the registry lock so two racing sessions cannot start twin pools.
    let p = Arc::new(Lanes::start(&key));
    pools.insert(key, Arc::downgrade(&p));
    p
}

/// Every live pool: its configuration, lanes, pinned CPUs, worker thread ids and counters.
pub fn pool_stats() -> serde_json::Value {
    let live: Vec<Arc<Lanes>> = POOLS.lock().values().filter_map(Weak::upgrade).collect();
    let mut rows: Vec<serde_json::Value> = live
        .iter()
        .map(|p| {
            serde_json::json!({
                "config": p.config(),
                "lanes": p.lanes(),
                "cpus": p.cpus(),
                "worker_tids": p.worker_tids(),
                "counters": p.counters(),
            })
        })
        .collect();
    rows.sort_by_key(|r| r["config"].to_string());
    // `live` drops here, outside the registry lock (it may be the last handle of a pool).
    drop(live);
    serde_json::Value::Array(rows)
}

/// Zeroes the counters of every live pool (`RcpuEp_ResetStats`).
pub fn reset_counters() {
    let live: Vec<Arc<Lanes>> = POOLS.lock().values().filter_map(Weak::upgrade).collect();
    for p in &live {
        p.reset_counters();
    }
    // `live` drops outside the registry lock (it may hold the last handle of a pool).
    drop(live);
}
