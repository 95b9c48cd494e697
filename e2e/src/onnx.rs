//! A minimal ONNX model writer: the subset of `onnx.proto` rcpu's tests and benchmarks need,
//! declared with prost's derive (field numbers from onnx.proto), plus a small graph builder.

use prost::Message;

#[derive(Clone, PartialEq, Message)]
pub struct OperatorSetIdProto {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(int64, tag = "2")]
    pub version: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct TensorProto {
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    #[prost(string, tag = "8")]
    pub name: String,
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
    /// Where the bytes are when `data_location` is [`EXTERNAL`] (`location`, `offset`, `length`:
    /// what onnxruntime-genai's builder writes for every large weight).
    #[prost(message, repeated, tag = "13")]
    pub external_data: Vec<StringStringEntryProto>,
    #[prost(int32, tag = "14")]
    pub data_location: i32,
}

/// `TensorProto.data_location` of a tensor whose bytes live in another file.
pub const EXTERNAL: i32 = 1;

#[derive(Clone, PartialEq, Message)]
pub struct AttributeProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(float, tag = "2")]
    pub f: f32,
    #[prost(int64, tag = "3")]
    pub i: i64,
    #[prost(bytes = "vec", tag = "4")]
    pub s: Vec<u8>,
    #[prost(int64, repeated, tag = "8")]
    pub ints: Vec<i64>,
    #[prost(int32, tag = "20")]
    pub r#type: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    #[prost(string, tag = "3")]
    pub name: String,
    #[prost(string, tag = "4")]
    pub op_type: String,
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    #[prost(string, tag = "7")]
    pub domain: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Dimension {
    #[prost(oneof = "DimValue", tags = "1, 2")]
    pub value: Option<DimValue>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum DimValue {
    #[prost(int64, tag = "1")]
    DimValue(i64),
    #[prost(string, tag = "2")]
    DimParam(String),
}

#[derive(Clone, PartialEq, Message)]
pub struct TensorShapeProto {
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<Dimension>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TypeTensor {
    #[prost(int32, tag = "1")]
    pub elem_type: i32,
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TypeProto {
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TypeTensor>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueInfoProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
}

#[derive(Clone, PartialEq, Message)]
pub struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
}

#[derive(Clone, PartialEq, Message)]
pub struct StringStringEntryProto {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct ModelProto {
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    #[prost(string, tag = "2")]
    pub producer_name: String,
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// ONNX element type codes.
pub mod dtype {
    pub const FLOAT: i32 = 1;
    pub const UINT8: i32 = 2;
    pub const INT8: i32 = 3;
    pub const INT32: i32 = 6;
    pub const INT64: i32 = 7;
    pub const FLOAT16: i32 = 10;
}

/// A dimension: fixed or symbolic.
#[derive(Debug, Clone)]
pub enum Dim {
    Fixed(i64),
    Sym(&'static str),
}

/// An attribute value.
#[derive(Debug, Clone)]
pub enum Attr {
    Int(i64),
    Float(f32),
    Ints(Vec<i64>),
    Str(String),
}

/// Builds a single-graph model.
#[derive(Default, Clone)]
pub struct GraphBuilder {
    g: GraphProto,
    opsets: Vec<(String, i64)>,
    metadata: Vec<StringStringEntryProto>,
    /// Where large initializers go instead of the model (`external_data`); shared by clones.
    external: Option<std::sync::Arc<std::sync::Mutex<ExternalSink>>>,
}

/// A side file taking the bytes of every initializer of at least `min_bytes`, as
/// onnxruntime-genai's builder writes its weights (`model.onnx.data`): each one at an offset
/// aligned to [`EXTERNAL_ALIGN`] (so ORT can map it instead of copying it), the model keeping
/// `location`, `offset` and `length`.
struct ExternalSink {
    file: std::io::BufWriter<std::fs::File>,
    /// The file's name as the model names it (relative to the model's folder).
    location: String,
    offset: u64,
    min_bytes: usize,
    /// The first write error (reported by [`GraphBuilder::finish_external`]).
    error: Option<String>,
}

/// Offset alignment of external initializers: 64 KiB, the mapping granularity ORT checks
/// before it maps external data (and what onnx's own external-data writer aligns large tensors
/// to).
pub const EXTERNAL_ALIGN: u64 = 64 << 10;

fn value_info(name: &str, elem: i32, dims: Option<&[Dim]>) -> ValueInfoProto {
    let shape = dims.map(|d| TensorShapeProto {
        dim: d
            .iter()
            .map(|x| Dimension {
                value: Some(match x {
                    Dim::Fixed(v) => DimValue::DimValue(*v),
                    Dim::Sym(s) => DimValue::DimParam(s.to_string()),
                }),
            })
            .collect(),
    });
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeTensor {
                elem_type: elem,
                shape,
            }),
        }),
    }
}

impl GraphBuilder {
    /// A graph importing the ONNX domain at `opset` (and com.microsoft v1).
    pub fn new(name: &str, opset: i64) -> Self {
        GraphBuilder {
            g: GraphProto {
                name: name.into(),
                ..Default::default()
            },
            opsets: vec![("".into(), opset), ("com.microsoft".into(), 1)],
            metadata: vec![],
            external: None,
        }
    }

    /// From here on, initializers of at least `min_bytes` go to the file `path` (created or
    /// truncated) instead of the model, which names it by its file name (so it must sit beside
    /// the model). [`GraphBuilder::finish_external`] flushes it and reports any write error.
    pub fn external_data(
        &mut self,
        path: &std::path::Path,
        min_bytes: usize,
    ) -> Result<(), String> {
        let location = path
            .file_name()
            .and_then(|f| f.to_str())
            .ok_or_else(|| format!("{}: not a file name", path.display()))?
            .to_string();
        let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        self.external = Some(std::sync::Arc::new(std::sync::Mutex::new(ExternalSink {
            file: std::io::BufWriter::with_capacity(8 << 20, file),
            location,
            offset: 0,
            min_bytes,
            error: None,
        })));
        Ok(())
    }

    /// Flushes the external data file (if any); returns its length, or the first write error.
    pub fn finish_external(&mut self) -> Result<u64, String> {
        use std::io::Write;
        let Some(sink) = self.external.take() else {
            return Ok(0);
        };
        let mut s = sink
            .lock()
            .map_err(|_| "external data writer poisoned".to_string())?;
        if let Some(e) = s.error.take() {
            return Err(e);
        }
        let loc = s.location.clone();
        s.file.flush().map_err(|e| format!("{loc}: {e}"))?;
        Ok(s.offset)
    }

    /// Writes `raw` to the external file when it goes there; returns the tensor's
    /// `external_data` entries (None: it stays in the model).
    fn put_external(&mut self, raw: &[u8]) -> Option<Vec<StringStringEntryProto>> {
        use std::io::Write;
        let sink = self.external.as_ref()?;
        let mut s = sink.lock().ok()?;
        if raw.len() < s.min_bytes {
            return None;
        }
        let start = s.offset.next_multiple_of(EXTERNAL_ALIGN);
        let pad = vec![0u8; (start - s.offset) as usize];
        let written = s.file.write_all(&pad).and_then(|_| s.file.write_all(raw));
        if let Err(e) = written {
            let msg = format!("{}: {e}", s.location);
            s.error.get_or_insert(msg);
        }
        s.offset = start + raw.len() as u64;
        let entry = |key: &str, value: String| StringStringEntryProto {
            key: key.into(),
            value,
        };
        Some(vec![
            entry("location", s.location.clone()),
            entry("offset", start.to_string()),
            entry("length", raw.len().to_string()),
        ])
    }

    /// A model metadata entry (`metadata_props`).
    pub fn metadata(&mut self, key: &str, value: &str) -> &mut Self {
        self.metadata.push(StringStringEntryProto {
            key: key.into(),
            value: value.into(),
        });
        self
    }

    pub fn input(&mut self, name: &str, elem: i32, dims: &[Dim]) -> &mut Self {
        self.g.input.push(value_info(name, elem, Some(dims)));
        self
    }

    /// An output of unspecified shape.
    pub fn output(&mut self, name: &str, elem: i32) -> &mut Self {
        self.g.output.push(value_info(name, elem, None));
        self
    }

    /// An output of known shape (what `onnx.checker` asks of graph outputs).
    pub fn output_shaped(&mut self, name: &str, elem: i32, dims: &[Dim]) -> &mut Self {
        self.g.output.push(value_info(name, elem, Some(dims)));
        self
    }

    pub fn initializer_raw(
        &mut self,
        name: &str,
        elem: i32,
        dims: &[i64],
        raw: Vec<u8>,
    ) -> &mut Self {
        let t = match self.put_external(&raw) {
            Some(external_data) => TensorProto {
                dims: dims.to_vec(),
                data_type: elem,
                name: name.into(),
                external_data,
                data_location: EXTERNAL,
                ..Default::default()
            },
            None => TensorProto {
                dims: dims.to_vec(),
                data_type: elem,
                name: name.into(),
                raw_data: raw,
                ..Default::default()
            },
        };
        self.g.initializer.push(t);
        self
    }

    pub fn initializer_f32(&mut self, name: &str, dims: &[i64], v: &[f32]) -> &mut Self {
        self.initializer_raw(
            name,
            dtype::FLOAT,
            dims,
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        )
    }

    pub fn initializer_i64(&mut self, name: &str, dims: &[i64], v: &[i64]) -> &mut Self {
        self.initializer_raw(
            name,
            dtype::INT64,
            dims,
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        )
    }

    pub fn initializer_u8(&mut self, name: &str, dims: &[i64], v: &[u8]) -> &mut Self {
        self.initializer_raw(name, dtype::UINT8, dims, v.to_vec())
    }

    pub fn node(
        &mut self,
        op: &str,
        domain: &str,
        name: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: &[(&str, Attr)],
    ) -> &mut Self {
        let attribute = attrs
            .iter()
            .map(|(n, a)| {
                let mut p = AttributeProto {
                    name: n.to_string(),
                    ..Default::default()
                };
                match a {
                    Attr::Float(f) => {
                        p.f = *f;
                        p.r#type = 1;
                    }
                    Attr::Int(i) => {
                        p.i = *i;
                        p.r#type = 2;
                    }
                    Attr::Str(s) => {
                        p.s = s.as_bytes().to_vec();
                        p.r#type = 3;
                    }
                    Attr::Ints(v) => {
                        p.ints = v.clone();
                        p.r#type = 7;
                    }
                }
                p
            })
            .collect();
        self.g.node.push(NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            name: name.into(),
            op_type: op.into(),
            attribute,
            domain: domain.into(),
        });
        self
    }

    /// Serialized ModelProto (IR version 10).
    pub fn build(&self) -> Vec<u8> {
        self.clone().into_bytes()
    }

    /// Serialized ModelProto (IR version 10), without copying the graph first (large models).
    pub fn into_bytes(self) -> Vec<u8> {
        ModelProto {
            ir_version: 10,
            producer_name: "rcpu-e2e".into(),
            graph: Some(self.g),
            opset_import: self
                .opsets
                .iter()
                .map(|(d, v)| OperatorSetIdProto {
                    domain: d.clone(),
                    version: *v,
                })
                .collect(),
            metadata_props: self.metadata,
        }
        .encode_to_vec()
    }
}
