//! Wall time per step of fused partitions, for the sessions that ask (provider option
//! `step_times=on`): where a fused run's time goes, op by op, in the configuration that runs by
//! default (ORT's own profiler sees a fused partition as one node).
//!
//! A fused plan with timing on reads the clock around each step of a run on the calling thread
//! (a step: one inner node, or a combined step such as a SwiGLU MLP's pair), sums per step label
//! into its own per-run totals and adds those here once per run, under one lock; a session
//! without the option reads no clock and never touches this table. The row labelled
//! [`FUSED_RUN`] is the whole run of each partition (steps, frames, the fused node's own
//! outputs), so `FUSED_RUN` minus the step rows is the partition's overhead.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use parking_lot::Mutex;
use serde::Serialize;

/// The row of whole fused runs.
pub const FUSED_RUN: &str = "(fused run)";

/// One label's totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepRow {
    /// The step's op type (a combined step: its name, e.g. `SwiGLU MLP`), or [`FUSED_RUN`].
    pub step: String,
    /// Steps (runs, for [`FUSED_RUN`]) timed.
    pub calls: u64,
    /// Their wall time in nanoseconds.
    pub ns: u64,
}

static TABLE: LazyLock<Mutex<BTreeMap<String, (u64, u64)>>> =
    LazyLock::new(|| Mutex::new(BTreeMap::new()));

/// Adds one run's totals: `(label, calls, ns)` per label.
pub fn add<'a>(rows: impl IntoIterator<Item = (&'a str, u64, u64)>) {
    let mut t = TABLE.lock();
    for (label, calls, ns) in rows {
        match t.get_mut(label) {
            Some(r) => {
                r.0 = r.0.saturating_add(calls);
                r.1 = r.1.saturating_add(ns);
            }
            None => {
                t.insert(label.to_string(), (calls, ns));
            }
        }
    }
}

/// Every label's totals so far, by label.
pub fn rows() -> Vec<StepRow> {
    TABLE
        .lock()
        .iter()
        .map(|(step, &(calls, ns))| StepRow {
            step: step.clone(),
            calls,
            ns,
        })
        .collect()
}

/// Forgets every total (with the ledger, `telemetry::reset`).
pub fn reset() {
    TABLE.lock().clear();
}
