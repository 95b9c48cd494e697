//! The dispatch ledger: which kernel variant ran, for which op, on how many lanes, how often.
//!
//! Every kernel call records one row update. A counter that reads zero elsewhere can then be
//! told apart from an instrument that never ran: the ledger says whether the route ran at all.

use std::collections::HashMap;

use once_cell::sync::Lazy;
use parking_lot::Mutex;
use serde::Serialize;

/// One route: an op, the variant that ran (ISA and shape class), and the lanes it could use.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
pub struct Route {
    pub op: &'static str,
    pub variant: &'static str,
    pub lanes: usize,
}

/// A route's totals.
#[derive(Debug, Clone, Serialize)]
pub struct RouteRow {
    #[serde(flatten)]
    pub route: Route,
    pub calls: u64,
}

static LEDGER: Lazy<Mutex<HashMap<Route, u64>>> = Lazy::new(|| Mutex::new(HashMap::new()));

/// Records one call of `op` through `variant` with `lanes` lanes available.
pub fn record(op: &'static str, variant: &'static str, lanes: usize) {
    *LEDGER
        .lock()
        .entry(Route { op, variant, lanes })
        .or_insert(0) += 1;
}

/// All routes taken so far, sorted.
pub fn rows() -> Vec<RouteRow> {
    let mut v: Vec<RouteRow> = LEDGER
        .lock()
        .iter()
        .map(|(r, &calls)| RouteRow {
            route: r.clone(),
            calls,
        })
        .collect();
    v.sort_by(|a, b| a.route.cmp(&b.route));
    v
}

/// Calls recorded for `op` over all its variants (0 = the route never ran).
pub fn calls_for(op: &str) -> u64 {
    LEDGER
        .lock()
        .iter()
        .filter(|(r, _)| r.op == op)
        .map(|(_, &c)| c)
        .sum()
}

/// Clears the ledger (benchmarks reset between phases).
pub fn reset() {
    LEDGER.lock().clear();
}
