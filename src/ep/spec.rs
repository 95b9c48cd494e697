//! A fused partition as plain data: its nodes, each with its op, opset, attributes, input and
//! output values and constant inputs. `abi::fused` builds a partition's plan from this form
//! only, whether it was read from ORT's subgraph at `Compile` ([`PartitionSpec::from_graph`])
//! or from a context file (`ep::context`), so both paths create the same kernels the same way.
//!
//! The JSON form ([`PartitionSpec::to_json`] / [`PartitionSpec::from_json`]) is what a context
//! file stores: everything but the constants' bytes, which the file keeps in sections of its
//! own (a constant names its section, or none when a kernel's packed export stands in for it).

use serde_json::{json, Value};

use crate::abi::graph::{Graph, Node, ValueInfo};
use crate::abi::status::{Error, Result};
use crate::abi::tensor::{ElemType, Tensor, TensorType};

/// An attribute value of the kinds kernels read (`KernelInfo::attr_i64` / `attr_f32` /
/// `attr_string`); attributes of other kinds are not recorded, since no kernel reads them.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Int(i64),
    Float(f32),
    Str(String),
}

/// A constant input's value.
#[derive(Clone)]
pub enum Constant<'a> {
    /// Not a constant: an input of the fused node or an earlier node's output.
    No,
    /// A constant initializer and its value.
    Value(Tensor<'a>),
    /// A constant initializer whose bytes a context file does not hold: every kernel that reads
    /// it imports a packed form instead (`OpKernel::import_packed`).
    Omitted { elem: ElemType, shape: Vec<usize> },
}

/// One input or output of a node.
#[derive(Clone)]
pub struct ValueSpec<'a> {
    pub name: String,
    /// Tensor type (`None`: not a tensor, or unknown).
    pub ty: Option<TensorType>,
    pub constant: Constant<'a>,
}

impl<'a> ValueSpec<'a> {
    pub fn is_constant(&self) -> bool {
        !matches!(self.constant, Constant::No)
    }

    /// The value when this is a constant whose bytes are at hand.
    pub fn constant_value(&self) -> Option<Tensor<'a>> {
        match &self.constant {
            Constant::Value(t) => Some(t.clone()),
            _ => None,
        }
    }

    /// (element type, shape) of a constant, bytes at hand or not.
    pub fn constant_layout(&self) -> Option<(ElemType, Vec<usize>)> {
        match &self.constant {
            Constant::No => None,
            Constant::Value(t) => Some((t.elem(), t.shape().to_vec())),
            Constant::Omitted { elem, shape } => Some((*elem, shape.clone())),
        }
    }
}

/// One node of a partition.
#[derive(Clone)]
pub struct NodeSpec<'a> {
    pub name: String,
    pub op: String,
    pub domain: String,
    pub since: i32,
    pub attrs: Vec<(String, AttrValue)>,
    pub inputs: Vec<Option<ValueSpec<'a>>>,
    pub outputs: Vec<Option<ValueSpec<'a>>>,
}

impl<'a> NodeSpec<'a> {
    pub fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attrs.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// "Op node 'name'", as errors name a node.
    pub fn label(&self) -> String {
        format!("{} node '{}'", self.op, self.name)
    }

    /// Reads `node` of ORT's subgraph (valid while the graph is).
    pub fn from_node(node: &Node<'a>) -> Result<NodeSpec<'a>> {
        let mut attrs = Vec::new();
        for name in node.attr_names()? {
            let v = if let Some(i) = node.attr_i64(&name) {
                AttrValue::Int(i)
            } else if let Some(f) = node.attr_f32(&name) {
                AttrValue::Float(f)
            } else if let Some(s) = node.attr_string(&name) {
                AttrValue::Str(s)
            } else {
                continue;
            };
            attrs.push((name, v));
        }
        let values = |vs: Vec<Option<ValueInfo<'a>>>| -> Result<Vec<Option<ValueSpec<'a>>>> {
            vs.into_iter()
                .map(|v| v.map(|v| value_from(&v)).transpose())
                .collect()
        };
        Ok(NodeSpec {
            name: node.name()?,
            op: node.op_type()?,
            domain: node.domain()?,
            since: node.since_version()?,
            attrs,
            inputs: values(node.inputs()?)?,
            outputs: values(node.outputs()?)?,
        })
    }
}

fn value_from<'a>(v: &ValueInfo<'a>) -> Result<ValueSpec<'a>> {
    let constant = if v.is_constant_initializer() {
        match v.constant_value()? {
            Some(t) => Constant::Value(t),
            None => Constant::No,
        }
    } else {
        Constant::No
    };
    Ok(ValueSpec {
        name: v.name()?,
        ty: v.tensor_type()?,
        constant,
    })
}

/// Gives the tensor of a context file's section `i` for a constant of the element type and shape
/// given (checking that the section holds exactly its bytes).
pub type SectionFn<'f, 'a> = dyn Fn(usize, ElemType, &[usize]) -> Result<Tensor<'a>> + 'f;

/// The nodes of one fused partition.
#[derive(Clone, Default)]
pub struct PartitionSpec<'a> {
    pub nodes: Vec<NodeSpec<'a>>,
}

/// The element types a context file may name (every type rcpu's kernels or constants use).
const ELEMS: [ElemType; 12] = [
    ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
    ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
    ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8,
    ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16,
    ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16,
    ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32,
    ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
    ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL,
    ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,
    ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE,
    ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32,
    ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64,
];

fn elem_code(e: ElemType) -> i64 {
    e as i64
}

fn elem_from(code: &Value) -> Result<ElemType> {
    let c = code
        .as_i64()
        .ok_or_else(|| Error::fail("element type is not an integer"))?;
    ELEMS
        .iter()
        .copied()
        .find(|&e| elem_code(e) == c)
        .ok_or_else(|| Error::fail(format!("unknown element type {c}")))
}

fn usize_list(v: &Value, what: &str) -> Result<Vec<usize>> {
    v.as_array()
        .ok_or_else(|| Error::fail(format!("{what} is not a list")))?
        .iter()
        .map(|d| {
            d.as_u64()
                .and_then(|d| usize::try_from(d).ok())
                .ok_or_else(|| Error::fail(format!("{what} holds {d}, not a size")))
        })
        .collect()
}

fn str_of<'v>(v: &'v Value, key: &str) -> Result<&'v str> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| Error::fail(format!("'{key}' is missing or not a string")))
}

impl<'a> PartitionSpec<'a> {
    /// Reads every node of ORT's subgraph of a fused node (valid during `Compile`).
    pub fn from_graph(graph: &Graph<'a>) -> Result<PartitionSpec<'a>> {
        let nodes = graph
            .nodes()?
            .iter()
            .map(NodeSpec::from_node)
            .collect::<Result<Vec<_>>>()?;
        Ok(PartitionSpec { nodes })
    }

    /// The JSON form; `section_of(name)` gives the section that holds constant `name`'s bytes
    /// (`None`: omitted from the file).
    pub fn to_json(&self, section_of: &dyn Fn(&str) -> Option<usize>) -> Value {
        let value = |v: &Option<ValueSpec<'_>>| -> Value {
            let Some(v) = v else {
                return Value::Null;
            };
            let ty =
                v.ty.as_ref()
                    .map_or(Value::Null, |t| json!([elem_code(t.elem), t.dims]));
            let constant = match v.constant_layout() {
                None => Value::Null,
                Some((elem, shape)) => json!({
                    "elem": elem_code(elem),
                    "shape": shape,
                    "section": section_of(&v.name),
                }),
            };
            json!({"name": v.name, "type": ty, "const": constant})
        };
        let nodes: Vec<Value> = self
            .nodes
            .iter()
            .map(|n| {
                let attrs: Vec<Value> = n
                    .attrs
                    .iter()
                    .map(|(k, a)| match a {
                        AttrValue::Int(i) => json!([k, "i", i]),
                        AttrValue::Float(f) => json!([k, "f", f.to_bits()]),
                        AttrValue::Str(s) => json!([k, "s", s]),
                    })
                    .collect();
                json!({
                    "name": n.name,
                    "op": n.op,
                    "domain": n.domain,
                    "since": n.since,
                    "attrs": attrs,
                    "inputs": n.inputs.iter().map(value).collect::<Vec<_>>(),
                    "outputs": n.outputs.iter().map(value).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({ "nodes": nodes })
    }

    /// Reads the JSON form back; `section(i, elem, shape)` gives the tensor of section `i` for a
    /// constant of that type and shape (checking that the section holds exactly its bytes).
    pub fn from_json(v: &Value, section: &SectionFn<'_, 'a>) -> Result<PartitionSpec<'a>> {
        let nodes = v
            .get("nodes")
            .and_then(Value::as_array)
            .ok_or_else(|| Error::fail("partition has no node list"))?;
        let value = |v: &Value| -> Result<Option<ValueSpec<'a>>> {
            if v.is_null() {
                return Ok(None);
            }
            let name = str_of(v, "name")?.to_string();
            let ty = match v.get("type") {
                None | Some(Value::Null) => None,
                Some(t) => {
                    let elem = elem_from(&t[0])?;
                    let dims = t[1]
                        .as_array()
                        .ok_or_else(|| Error::fail(format!("value '{name}': dims not a list")))?
                        .iter()
                        .map(|d| {
                            d.as_i64().ok_or_else(|| {
                                Error::fail(format!("value '{name}': dim {d} not an integer"))
                            })
                        })
                        .collect::<Result<Vec<_>>>()?;
                    Some(TensorType { elem, dims })
                }
            };
            let constant = match v.get("const") {
                None | Some(Value::Null) => Constant::No,
                Some(c) => {
                    let elem = elem_from(&c["elem"])?;
                    let shape = usize_list(&c["shape"], "constant shape")?;
                    match c.get("section").and_then(Value::as_u64) {
                        Some(s) => {
                            let s = usize::try_from(s)
                                .map_err(|_| Error::fail("section index out of range"))?;
                            Constant::Value(
                                section(s, elem, &shape)
                                    .map_err(|e| e.context(format!("constant '{name}'")))?,
                            )
                        }
                        None => Constant::Omitted { elem, shape },
                    }
                }
            };
            Ok(Some(ValueSpec { name, ty, constant }))
        };
        let list = |n: &Value, key: &str| -> Result<Vec<Option<ValueSpec<'a>>>> {
            n.get(key)
                .and_then(Value::as_array)
                .ok_or_else(|| Error::fail(format!("node '{key}' is not a list")))?
                .iter()
                .map(value)
                .collect()
        };
        let mut out = Vec::with_capacity(nodes.len());
        for n in nodes {
            let mut attrs = Vec::new();
            for a in n
                .get("attrs")
                .and_then(Value::as_array)
                .ok_or_else(|| Error::fail("node attributes are not a list"))?
            {
                let bad = || Error::fail(format!("bad attribute {a}"));
                let name = a[0].as_str().ok_or_else(bad)?.to_string();
                let v = match a[1].as_str() {
                    Some("i") => AttrValue::Int(a[2].as_i64().ok_or_else(bad)?),
                    Some("f") => AttrValue::Float(f32::from_bits(
                        a[2].as_u64()
                            .and_then(|b| u32::try_from(b).ok())
                            .ok_or_else(bad)?,
                    )),
                    Some("s") => AttrValue::Str(a[2].as_str().ok_or_else(bad)?.to_string()),
                    _ => return Err(bad()),
                };
                attrs.push((name, v));
            }
            let since = n
                .get("since")
                .and_then(Value::as_i64)
                .and_then(|s| i32::try_from(s).ok())
                .ok_or_else(|| Error::fail("node opset is missing"))?;
            out.push(NodeSpec {
                name: str_of(n, "name")?.to_string(),
                op: str_of(n, "op")?.to_string(),
                domain: str_of(n, "domain")?.to_string(),
                since,
                attrs,
                inputs: list(n, "inputs")?,
                outputs: list(n, "outputs")?,
            });
        }
        Ok(PartitionSpec { nodes: out })
    }
}
