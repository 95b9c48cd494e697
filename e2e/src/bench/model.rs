//! What the bench reads from a model file: inputs to feed, the ops it holds (for the route report),
//! the weight bytes (initializers) and the parity tolerance its accuracy level calls for.

use prost::Message;

use crate::onnx::{dtype, DimValue, ModelProto};
use crate::Tensor;

pub struct ModelInfo {
    /// (name, dims with symbolic dims as None).
    pub inputs: Vec<(String, Vec<Option<i64>>)>,
    /// Distinct op types in graph order.
    pub ops: Vec<String>,
    /// Sum of initializer raw bytes (what an M=1 decode step streams).
    pub weight_bytes: u64,
    /// Highest MatMulNBits accuracy_level (None: no MatMulNBits).
    pub nbits_acc: Option<i64>,
}

impl ModelInfo {
    pub fn parse(bytes: &[u8]) -> Result<ModelInfo, String> {
        let m = ModelProto::decode(bytes).map_err(|e| format!("not an ONNX model: {e}"))?;
        let g = m.graph.ok_or("model has no graph")?;
        let inits: std::collections::HashSet<&str> =
            g.initializer.iter().map(|t| t.name.as_str()).collect();
        let mut inputs = vec![];
        for vi in g.input.iter().filter(|v| !inits.contains(v.name.as_str())) {
            let tt = vi
                .r#type
                .as_ref()
                .and_then(|t| t.tensor_type.as_ref())
                .ok_or("input without tensor type")?;
            if tt.elem_type != dtype::FLOAT {
                return Err(format!(
                    "input '{}' is not f32 (the bench feeds f32 only)",
                    vi.name
                ));
            }
            let dims = tt
                .shape
                .as_ref()
                .map(|s| {
                    s.dim
                        .iter()
                        .map(|d| match d.value {
                            Some(DimValue::DimValue(v)) => Some(v),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default();
            inputs.push((vi.name.clone(), dims));
        }
        let mut ops: Vec<String> = vec![];
        let mut nbits_acc = None;
        for n in &g.node {
            if !ops.contains(&n.op_type) {
                ops.push(n.op_type.clone());
            }
            if n.op_type == "MatMulNBits" {
                let acc = n
                    .attribute
                    .iter()
                    .find(|a| a.name == "accuracy_level")
                    .map(|a| a.i)
                    .unwrap_or(0);
                nbits_acc = Some(nbits_acc.unwrap_or(0).max(acc));
            }
        }
        let weight_bytes = g.initializer.iter().map(|t| t.raw_data.len() as u64).sum();
        Ok(ModelInfo {
            inputs,
            ops,
            weight_bytes,
            nbits_acc,
        })
    }

    /// Parity tolerance (relative L2): 2e-2 when ORT quantizes activations (accuracy_level 4).
    pub fn default_tol(&self) -> f64 {
        if self.nbits_acc == Some(4) {
            2e-2
        } else {
            1e-4
        }
    }

    /// Seeded inputs; symbolic dims take `m`.
    pub fn inputs_for(&self, m: usize, seed: u64) -> Vec<Tensor> {
        self.inputs
            .iter()
            .enumerate()
            .map(|(i, (_, dims))| {
                let shape: Vec<i64> = dims.iter().map(|d| d.unwrap_or(m as i64)).collect();
                let n: i64 = shape.iter().product();
                Tensor::f32(&shape, crate::rand_f32(n as usize, seed + i as u64))
            })
            .collect()
    }
}
