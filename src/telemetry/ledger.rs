//! The dispatch ledger: which kernel variant ran, for which op, on how many lanes, how often.
//!
//! Every kernel call records one row update. A counter that reads zero elsewhere can then be
//! told apart from an instrument that never ran: the ledger says whether the route ran at all.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;
use serde::Serialize;
use std::sync::LazyLock;

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

/// Slots of the lock-free table; routes beyond it go to [`OVERFLOW`].
const SLOTS: usize = 64;

/// One route's counter. The route is set once (first caller wins) and never changes.
struct Slot {
    route: OnceLock<Route>,
    calls: AtomicU64,
}

/// Fixed open-addressing table, probed from a hash of the name pointers: a call costs an
/// atomic load, a short string compare and one relaxed `fetch_add`, with no lock (this runs
/// on every kernel call). The same route may land in two slots (equal strings at different
/// addresses, or two first callers racing); `rows` merges them.
static TABLE: [Slot; SLOTS] = [const {
    Slot {
        route: OnceLock::new(),
        calls: AtomicU64::new(0),
    }
}; SLOTS];

static OVERFLOW: LazyLock<Mutex<HashMap<Route, u64>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn start_slot(op: &str, variant: &str, lanes: usize) -> usize {
    let h = (op.as_ptr() as u64)
        ^ (variant.as_ptr() as u64).rotate_left(21)
        ^ (lanes as u64).rotate_left(42);
    (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize % SLOTS
}

/// What a kernel call returns to say which variant ran. Families with a typed route (e.g.
/// `gemm::GemmRoute`) render it to its text here, when the call is recorded, and nowhere
/// else; the text (`avx512-gemv-m1`) is what the ledger's rows and readers see.
pub trait Variant: Copy {
    /// The variant's ledger text.
    fn text(self) -> &'static str;
}

/// A variant already named by its text (families without a typed route).
impl Variant for &'static str {
    fn text(self) -> &'static str {
        self
    }
}

/// Records one call of `op` through `variant` with `lanes` lanes available.
pub fn record(op: &'static str, variant: impl Variant, lanes: usize) {
    let variant = variant.text();
    let same = |r: &Route| r.lanes == lanes && r.op == op && r.variant == variant;
    let start = start_slot(op, variant, lanes);
    for i in 0..SLOTS {
        let slot = &TABLE[(start + i) % SLOTS];
        let r = slot.route.get_or_init(|| Route { op, variant, lanes });
        if same(r) {
            // Relaxed: a statistics counter; readers only need eventual totals.
            slot.calls.fetch_add(1, Ordering::Relaxed);
            return;
        }
    }
    *OVERFLOW
        .lock()
        .entry(Route { op, variant, lanes })
        .or_insert(0) += 1;
}

/// All routes taken so far, sorted.
pub fn rows() -> Vec<RouteRow> {
    let mut merged: BTreeMap<Route, u64> = BTreeMap::new();
    for slot in &TABLE {
        if let Some(r) = slot.route.get() {
            let calls = slot.calls.load(Ordering::Relaxed);
            if calls > 0 {
                *merged.entry(r.clone()).or_insert(0) += calls;
            }
        }
    }
    for (r, &calls) in OVERFLOW.lock().iter() {
        *merged.entry(r.clone()).or_insert(0) += calls;
    }
    merged
        .into_iter()
        .map(|(route, calls)| RouteRow { route, calls })
        .collect()
}

/// Calls recorded for `op` over all its variants (0 = the route never ran).
pub fn calls_for(op: &str) -> u64 {
    rows()
        .iter()
        .filter(|r| r.route.op == op)
        .map(|r| r.calls)
        .sum()
}

/// Clears the ledger (benchmarks reset between phases). Routes stay registered in their slots
/// with zero calls, which `rows` leaves out, exactly as if they had never run.
pub fn reset() {
    for slot in &TABLE {
        slot.calls.store(0, Ordering::Relaxed);
    }
    OVERFLOW.lock().clear();
}
