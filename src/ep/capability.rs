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

/// `Ok(())` when rcpu claims `node`, else the reason it stays on ORT.
pub fn claim(node: &Node<'_>) -> Result<(), Decline> {
    let e = |e: crate::abi::status::Error| e.msg;
    let op = node.op_type().map_err(e)?;
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
