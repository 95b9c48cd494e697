//! Mixed partitions: a session in which rcpu leaves compute-heavy nodes to ORT's CPU EP.
//!
//! ORT runs such nodes on its own intra-op thread pool, whose threads (with
//! `session.intra_op.allow_spinning` at its default, on) keep spinning for a while after each
//! node, on the same cores rcpu's lanes need for the next rcpu node. Measured on a decode-shaped
//! chain alternating int4 `MatMulNBits` (rcpu) and int8 `DynamicQuantizeMatMul` (ORT)
//! (`rcpu-bench compare --gen mixed:...`, docs/performance.md, "Mixed partitions"), turning the
//! spinning off made the whole step about 1.9x faster, while on a model rcpu runs entirely it
//! changed nothing.
//! rcpu cannot change ORT's pool, so it tells the user: once per session, at INFO, when a graph
//! leaves heavy nodes to ORT and the session did not turn the spinning off.

use std::sync::atomic::{AtomicBool, Ordering};

/// The session config key that turns the spinning of ORT's intra-op threads on ("1", ORT's
/// default) or off ("0").
pub const ALLOW_SPINNING: &str = "session.intra_op.allow_spinning";

/// Ops whose ORT CPU kernels do enough work per node to run on ORT's intra-op pool (matrix
/// products, convolutions, attention, recurrent layers). A node of one of them that rcpu does
/// not claim is a "heavy node left to ORT". Cheap elementwise and shape ops are not listed:
/// ORT runs small ones inline, and a large one is memory-bound glue rather than a pool user.
const HEAVY_OPS: &[&str] = &[
    "Attention",
    "Conv",
    "ConvInteger",
    "ConvTranspose",
    "DynamicQuantizeLSTM",
    "DynamicQuantizeMatMul",
    "Einsum",
    "FusedConv",
    "FusedGemm",
    "FusedMatMul",
    "GRU",
    "Gemm",
    "GroupQueryAttention",
    "LSTM",
    "MatMul",
    "MatMulInteger",
    "MatMulIntegerToFloat",
    "MatMulNBits",
    "MultiHeadAttention",
    "NhwcConv",
    "QGemm",
    "QLinearConv",
    "QLinearMatMul",
    "RNN",
];

/// Whether a node of `op` (any domain) counts as heavy when ORT runs it.
pub fn is_heavy(op: &str) -> bool {
    HEAVY_OPS.contains(&op)
}

/// Whether ORT's intra-op threads spin in this session: unless the session config sets
/// [`ALLOW_SPINNING`] to "0" (ORT's own parse: any other value, or none, leaves it on).
pub fn ort_pool_spins<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
    !entries
        .into_iter()
        .any(|(k, v)| k == ALLOW_SPINNING && v.trim() == "0")
}

/// The advice for a session whose graph leaves the heavy nodes `ops` (one entry per node) to
/// ORT while ORT's pool spins.
pub fn advice(ep_name: &str, ops: &[String]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for op in ops {
        match counts.iter_mut().find(|(o, _)| o == op) {
            Some((_, n)) => *n += 1,
            None => counts.push((op, 1)),
        }
    }
    let list: Vec<String> = counts.iter().map(|(o, n)| format!("{o} x{n}")).collect();
    format!(
        "{ep_name}: {} compute-heavy node(s) stay on ORT's CPU EP in this session ({}) while \
         {ALLOW_SPINNING} is on: after each of them ORT's intra-op threads spin on the cores \
         rcpu's lanes run the next rcpu node on, which slows rcpu's nodes (measured up to ~1.9x \
         per decode step). Set the session config entry {ALLOW_SPINNING}=0 (nothing to do when \
         intra_op_num_threads is 1: ORT then has no pool threads; README: Mixed partitions).",
        ops.len(),
        list.join(", ")
    )
}

/// Per EP instance: whether the advice applies to this session, and whether it was given.
#[derive(Debug)]
pub struct MixedAdvice {
    spins: bool,
    given: AtomicBool,
}

impl MixedAdvice {
    /// From the session's config entries.
    pub fn new<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> MixedAdvice {
        MixedAdvice {
            spins: ort_pool_spins(entries),
            given: AtomicBool::new(false),
        }
    }

    /// The advice to log after a graph left the heavy nodes `heavy_ops` to ORT: `Some` the
    /// first time this session has any while ORT's pool spins, `None` otherwise (ORT may call
    /// `GetCapability` more than once per session; the advice is given once).
    pub fn check(&self, ep_name: &str, heavy_ops: &[String]) -> Option<String> {
        if !self.spins || heavy_ops.is_empty() || self.given.swap(true, Ordering::Relaxed) {
            return None;
        }
        Some(advice(ep_name, heavy_ops))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_only_when_spinning_and_heavy_nodes_stay_on_ort() {
        let heavy = vec!["Conv".to_string(), "MatMulInteger".into(), "Conv".into()];
        let on = MixedAdvice::new([("ep.rcpuexecutionprovider.threads", "2")]);
        let msg = on
            .check("Rcpu", &heavy)
            .expect("spinning on, heavy nodes left");
        assert!(msg.contains("3 compute-heavy node(s)"), "{msg}");
        assert!(msg.contains("(Conv x2, MatMulInteger x1)"), "{msg}");
        assert!(msg.contains("session.intra_op.allow_spinning=0"), "{msg}");
        assert_eq!(on.check("Rcpu", &heavy), None, "given once per session");

        let off = MixedAdvice::new([(ALLOW_SPINNING, "0")]);
        assert_eq!(off.check("Rcpu", &heavy), None);
        let pure = MixedAdvice::new([(ALLOW_SPINNING, "1")]);
        assert_eq!(pure.check("Rcpu", &[]), None);
        assert!(pure.check("Rcpu", &heavy).is_some());
        assert!(ort_pool_spins([(ALLOW_SPINNING, " 1 ")]));
        assert!(!ort_pool_spins([(ALLOW_SPINNING, " 0")]));
    }

    #[test]
    fn heavy_ops_are_compute_ops() {
        for op in ["Conv", "DynamicQuantizeMatMul", "MatMul", "LSTM"] {
            assert!(is_heavy(op), "{op}");
        }
        for op in ["Add", "Reshape", "Softmax", "Gather", "conv"] {
            assert!(!is_heavy(op), "{op}");
        }
    }
}
