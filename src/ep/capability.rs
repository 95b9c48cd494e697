//! Claim rules: rcpu takes a node only when a registered kernel really supports its op version,
//! element types, attributes and (where known) shapes. Everything else stays on ORT's CPU EP.

use crate::abi::graph::Node;
use crate::ep::op::{Decline, OpDef};

use super::ops::OPS;

/// The kernel definition for a node's (domain, op, opset), if rcpu registers one.
pub fn find_def(domain: &str, op: &str, since: i32) -> Option<&'static OpDef> {
    let domain = if domain == "ai.onnx" { "" } else { domain };
    OPS.iter()
        .find(|d| d.domain == domain && d.op == op && d.since <= since && since <= d.until)
}

/// Ops rcpu takes only beside other rcpu nodes: alone (a partition of nothing else, or any node
/// with `fuse=off`) a Reshape copies its data where ORT's planner lets the output alias the input,
/// and a Split copies as ORT's would, so neither gains anything there and each only adds a
/// hand-over between the EPs.
const NOT_ALONE: &[&str] = &["Reshape", "Split"];

/// Whether a partition of the nodes with these (domain, op) is worth taking: not when every node is
/// one of the ops rcpu takes only beside others ([`NOT_ALONE`]).
pub fn worth_taking<'a>(ops: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
    ops.into_iter()
        .any(|(domain, op)| !(matches!(domain, "" | "ai.onnx") && NOT_ALONE.contains(&op)))
}

/// `RCPU_DECLINE=Op1,Op2,..` (diagnostics only: bisecting a difference from ORT by op family)
/// leaves nodes of those op types to ORT. Read at every claim, so a process can change it between
/// sessions.
const DECLINE_ENV: &str = "RCPU_DECLINE";

/// Whether `op` is in the comma-separated `list` (names compared exactly, blanks around them ignored).
fn listed(list: &str, op: &str) -> bool {
    list.split(',').any(|o| o.trim() == op)
}

/// `Ok(())` when rcpu claims `node`, else the reason it stays on ORT.
pub fn claim(node: &Node<'_>) -> Result<(), Decline> {
    let e = |e: crate::abi::status::Error| e.msg;
    let op = node.op_type().map_err(e)?;
    if std::env::var(DECLINE_ENV).is_ok_and(|l| listed(&l, &op)) {
        return Err(format!("{op} is listed in {DECLINE_ENV}"));
    }
    let domain = node.domain().map_err(e)?;
    let since = node.since_version().map_err(e)?;
    let def = find_def(&domain, &op, since)
        .ok_or_else(|| format!("no rcpu kernel for {domain}:{op} opset {since}"))?;
    // Every input and output must be a tensor of a known element type.
    for (i, v) in node.inputs().map_err(e)?.iter().enumerate() {
        if let Some(v) = v {
            if v.tensor_type().map_err(e)?.is_none() {
                return Err(format!("input {i} is not a tensor"));
            }
        }
    }
    (def.claim)(node)
}

#[cfg(test)]
mod tests {
    use super::{listed, worth_taking};

    #[test]
    fn reshapes_and_splits_alone_are_not_worth_taking() {
        assert!(!worth_taking([("", "Reshape")]));
        assert!(!worth_taking([("", "Reshape"), ("ai.onnx", "Reshape")]));
        assert!(worth_taking([
            ("", "Reshape"),
            ("", "SimplifiedLayerNormalization")
        ]));
        assert!(worth_taking([("", "Mul")]));
        assert!(worth_taking([("com.microsoft", "Reshape")]));
        assert!(!worth_taking([("", "Split"), ("", "Reshape")]));
        assert!(worth_taking([("", "Split"), ("", "Sigmoid")]));
        assert!(!worth_taking([]));
    }

    #[test]
    fn decline_list_matches_whole_op_names() {
        assert!(listed("Sigmoid", "Sigmoid"));
        assert!(listed("Mul, Sigmoid ,Gemm", "Sigmoid"));
        assert!(!listed(
            "SkipSimplifiedLayerNormalization",
            "SimplifiedLayerNormalization"
        ));
        assert!(!listed("", "Sigmoid"));
        assert!(!listed("sigmoid", "Sigmoid"));
    }
}
