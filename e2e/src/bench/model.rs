//! What the bench reads from a model file: inputs to feed, the ops it holds (for the route report),
//! the weight bytes (initializers) and the parity tolerance its accuracy level calls for.
//!
//! Feeds: an input named in the model's metadata as `rcpu_bench.feed.<input>` = `v1,v2,...` (one
//! value for every element, or a single value for all of them) gets exactly those values, in its
//! own element type (f32, int32, int64). Other inputs get seeded values: f32 uniform [-1, 1),
//! uint8 / int8 uniform over the type, int32 / int64 the ramp 0, 1, ..., m - 1 (position-id-like;
//! lengths and indices that need other values belong in the metadata).

use prost::Message;

use crate::onnx::{dtype, DimValue, ModelProto};
use crate::{Data, Tensor};

use super::gen_decoder::FEED_PREFIX;
use super::model_bytes::{has_external_data, init_bytes, qmoe_packable_bytes, token_bytes};

/// A graph input the bench feeds.
pub struct Input {
    pub name: String,
    /// ONNX element type code.
    pub elem: i32,
    /// Dims, symbolic ones as None.
    pub dims: Vec<Option<i64>>,
    /// Values from the model's metadata (`rcpu_bench.feed.<name>`), when given.
    pub fixed: Option<Vec<f64>>,
}

pub struct ModelInfo {
    pub inputs: Vec<Input>,
    /// Distinct op types in graph order.
    pub ops: Vec<String>,
    /// Sum of initializer bytes (what an M=1 decode step streams), external ones included.
    pub weight_bytes: u64,
    /// What one decode token of an LLM reads of them (`model_bytes::token_bytes`: gathered
    /// tables and rotary caches count a row).
    pub token_bytes: u64,
    /// Whether some initializers live in another file (the session then needs the model's
    /// folder: `external_folder`).
    pub external_data: bool,
    /// The part of `weight_bytes` that MatMulNBits nodes hold as their weight, scales and zero
    /// points (inputs 1..=3), each initializer counted once: what an EP that repacks those
    /// weights reads in another form (see `read_bytes`).
    pub nbits_bytes: u64,
    /// The QMoE experts' codes, scales and zero points (what an EP packs, as it packs
    /// MatMulNBits weights): `[all experts' bytes, the k / E share a decode token reads]`
    /// (`model_bytes::qmoe_packable_bytes`).
    pub qmoe_bytes: [u64; 2],
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
            let key = format!("{FEED_PREFIX}{}", vi.name);
            let fixed = match m.metadata_props.iter().find(|e| e.key == key) {
                Some(e) => Some(
                    e.value
                        .split(',')
                        .map(|v| v.trim().parse::<f64>())
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|_| format!("metadata {key}='{}' is not numbers", e.value))?,
                ),
                None => None,
            };
            let fixable = [dtype::FLOAT, dtype::INT32, dtype::INT64].contains(&tt.elem_type);
            if !FED_TYPES.contains(&tt.elem_type) || (fixed.is_some() && !fixable) {
                return Err(format!(
                    "input '{}' has ONNX element type {}: the bench feeds float, uint8, int8, int32 \
                     and int64, and takes metadata values ({key}) for float, int32 and int64 only",
                    vi.name, tt.elem_type
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
            inputs.push(Input {
                name: vi.name.clone(),
                elem: tt.elem_type,
                dims,
                fixed,
            });
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
        let weight_bytes = g
            .initializer
            .iter()
            .map(init_bytes)
            .fold(0u64, u64::saturating_add);
        let size: std::collections::HashMap<&str, u64> = g
            .initializer
            .iter()
            .map(|t| (t.name.as_str(), init_bytes(t)))
            .collect();
        let nbits_inits: std::collections::BTreeSet<&str> = g
            .node
            .iter()
            .filter(|n| n.op_type == "MatMulNBits")
            .flat_map(|n| n.input.iter().skip(1).take(3))
            .map(|s| s.as_str())
            .filter(|s| size.contains_key(s))
            .collect();
        let nbits_bytes = nbits_inits
            .iter()
            .map(|s| size[s])
            .fold(0u64, u64::saturating_add);
        Ok(ModelInfo {
            inputs,
            ops,
            weight_bytes,
            token_bytes: token_bytes(&g),
            external_data: has_external_data(&g),
            nbits_bytes,
            qmoe_bytes: qmoe_packable_bytes(&g),
            nbits_acc,
        })
    }

    /// Parity tolerance (relative L2): 2e-2 when ORT quantizes activations (accuracy_level 4);
    /// 5e-2 when the model also has `DynamicQuantizeMatMul` nodes (a `mixed:` spec), which
    /// quantize their input to 8 bits again on both arms, so that a 4-layer chain's acc-4
    /// differences grow from layer to layer (measured 2.4e-2 for k=n=4096, 4 layers).
    pub fn default_tol(&self) -> f64 {
        if self.nbits_acc == Some(4) && self.ops.iter().any(|o| o == "DynamicQuantizeMatMul") {
            5e-2
        } else if self.nbits_acc == Some(4) {
            2e-2
        } else {
            1e-4
        }
    }

    /// Parity tolerance for integer outputs: max |rcpu - ORT| over the elements. 1 allows one
    /// rounding step of a requantization (QLinearMatMul itself is exact, see its tests).
    pub fn default_int_tol(&self) -> i64 {
        1
    }

    /// The feeds (see the module doc); symbolic dims take `m`.
    pub fn inputs_for(&self, m: usize, seed: u64) -> Result<Vec<Tensor>, String> {
        self.inputs
            .iter()
            .enumerate()
            .map(|(i, inp)| {
                let shape: Vec<i64> = inp.dims.iter().map(|d| d.unwrap_or(m as i64)).collect();
                let n = shape.iter().product::<i64>() as usize;
                let s = seed + i as u64;
                let Some(v) = &inp.fixed else {
                    let bytes = || -> Vec<u8> {
                        crate::rand_f32(n, s)
                            .iter()
                            .map(|v| ((v + 1.0) * 128.0) as u8)
                            .collect()
                    };
                    let ramp = (0..n as i64).map(move |j| j % (m.max(1) as i64));
                    let data = match inp.elem {
                        dtype::UINT8 => Data::U8(bytes()),
                        dtype::INT8 => Data::I8(bytes().into_iter().map(|b| b as i8).collect()),
                        dtype::INT32 => Data::I32(ramp.map(|v| v as i32).collect()),
                        dtype::INT64 => Data::I64(ramp.collect()),
                        _ => Data::F32(crate::rand_f32(n, s)),
                    };
                    return Ok(Tensor { shape, data });
                };
                if v.len() != n && v.len() != 1 {
                    return Err(format!(
                        "input '{}' {shape:?} has {n} elements, its metadata gives {}",
                        inp.name,
                        v.len()
                    ));
                }
                let at = |j: usize| v[if v.len() == 1 { 0 } else { j }];
                let data = match inp.elem {
                    dtype::INT32 => Data::I32((0..n).map(|j| at(j) as i32).collect()),
                    dtype::INT64 => Data::I64((0..n).map(|j| at(j) as i64).collect()),
                    _ => Data::F32((0..n).map(|j| at(j) as f32).collect()),
                };
                Ok(Tensor { shape, data })
            })
            .collect()
    }
}

/// Input element types the bench can feed.
const FED_TYPES: [i32; 5] = [
    dtype::FLOAT,
    dtype::UINT8,
    dtype::INT8,
    dtype::INT32,
    dtype::INT64,
];

/// An output split for parity: float elements (compared by relative L2) and integer elements
/// (compared by max absolute difference), each concatenated in output order.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct OutputParts {
    pub floats: Vec<f32>,
    pub ints: Vec<i64>,
}

impl OutputParts {
    pub fn of(outputs: &[Tensor]) -> OutputParts {
        let mut p = OutputParts::default();
        for t in outputs {
            match &t.data {
                Data::F32(v) => p.floats.extend_from_slice(v),
                Data::U8(v) => p.ints.extend(v.iter().map(|&x| x as i64)),
                Data::I8(v) => p.ints.extend(v.iter().map(|&x| x as i64)),
                Data::I32(v) => p.ints.extend(v.iter().map(|&x| x as i64)),
                Data::I64(v) => p.ints.extend_from_slice(v),
            }
        }
        p
    }

    /// Max |a - b| over the integer parts (`i64::MAX` when their lengths differ).
    pub fn int_max_diff(&self, reference: &OutputParts) -> i64 {
        if self.ints.len() != reference.ints.len() {
            return i64::MAX;
        }
        self.ints
            .iter()
            .zip(&reference.ints)
            .map(|(a, b)| (a - b).saturating_abs())
            .max()
            .unwrap_or(0)
    }
}
