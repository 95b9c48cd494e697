//! Safe views of `OrtGraph`, `OrtNode` and `OrtValueInfo` for `GetCapability` and `Compile`.

use std::ffi::{c_char, c_void, CStr, CString};

use ort_sys::{OrtOpAttrType, OrtTypeInfo};

use super::api::api;
use super::ep_types::{OrtGraph, OrtNode, OrtOpAttr, OrtValue, OrtValueInfo};
use super::status::{check, Result};
use super::tensor::{read_type_info, Tensor, TensorType};

/// A borrowed graph, valid during `GetCapability`.
#[derive(Clone, Copy)]
pub struct Graph<'a> {
    g: *const OrtGraph,
    _life: std::marker::PhantomData<&'a OrtGraph>,
}

/// A borrowed node of a [`Graph`].
#[derive(Clone, Copy)]
pub struct Node<'a> {
    pub(crate) raw: *const OrtNode,
    _life: std::marker::PhantomData<&'a OrtNode>,
}

/// A node input or output.
#[derive(Clone, Copy)]
pub struct ValueInfo<'a> {
    v: *const OrtValueInfo,
    _life: std::marker::PhantomData<&'a OrtValueInfo>,
}

/// # Safety
/// `p` must be NULL or a NUL-terminated string valid for the borrow.
unsafe fn string_at(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: caller contract.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

impl<'a> Graph<'a> {
    /// # Safety
    /// `g` must be the live graph ORT passed to `GetCapability` (or `Compile`), valid for `'a`.
    pub unsafe fn new(g: *const OrtGraph) -> Self {
        Graph {
            g,
            _life: std::marker::PhantomData,
        }
    }

    /// The path of the model file the graph was loaded from (`None`: loaded from bytes).
    pub fn model_path(&self) -> Result<Option<std::path::PathBuf>> {
        let mut p: *const ort_sys::os_char = std::ptr::null();
        // SAFETY: graph valid; the path string is owned by the graph's model.
        unsafe { check((api().ort.Graph_GetModelPath)(self.g, &mut p))? };
        // SAFETY: NULL or a NUL-terminated string owned by the model (os_char is c_char here).
        let s = unsafe { string_at(p.cast::<c_char>()) };
        Ok((!s.is_empty()).then(|| std::path::PathBuf::from(s)))
    }

    pub fn nodes(&self) -> Result<Vec<Node<'a>>> {
        let ort = api().ort;
        let mut n = 0usize;
        // SAFETY: graph valid.
        unsafe { check((ort.Graph_GetNumNodes)(self.g, &mut n))? };
        let mut raw = vec![std::ptr::null::<OrtNode>(); n];
        // SAFETY: raw has room for n pointers.
        unsafe { check((ort.Graph_GetNodes)(self.g, raw.as_mut_ptr(), n))? };
        Ok(raw
            .into_iter()
            .map(|raw| Node {
                raw,
                _life: std::marker::PhantomData,
            })
            .collect())
    }
}

macro_rules! node_string {
    ($name:ident, $f:ident) => {
        pub fn $name(&self) -> Result<String> {
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: node valid; the string is owned by the node.
            unsafe {
                check((api().ort.$f)(self.raw, &mut p))?;
                Ok(string_at(p))
            }
        }
    };
}

impl<'a> Node<'a> {
    /// # Safety
    /// `raw` must be a live node (of a graph, or a fused node ORT passes to `Compile`) for `'a`.
    pub unsafe fn from_raw(raw: *const OrtNode) -> Self {
        Node {
            raw,
            _life: std::marker::PhantomData,
        }
    }

    node_string!(name, Node_GetName);
    node_string!(op_type, Node_GetOperatorType);
    node_string!(domain, Node_GetDomain);

    pub fn since_version(&self) -> Result<i32> {
        let mut v = 0i32;
        // SAFETY: node valid.
        unsafe { check((api().ort.Node_GetSinceVersion)(self.raw, &mut v))? };
        Ok(v)
    }

    fn values(&self, inputs: bool) -> Result<Vec<Option<ValueInfo<'a>>>> {
        let ort = api().ort;
        let mut n = 0usize;
        // SAFETY: node valid; arrays sized by the count query.
        unsafe {
            if inputs {
                check((ort.Node_GetNumInputs)(self.raw, &mut n))?;
            } else {
                check((ort.Node_GetNumOutputs)(self.raw, &mut n))?;
            }
        }
        let mut raw = vec![std::ptr::null::<OrtValueInfo>(); n];
        // SAFETY: raw has room for n entries.
        unsafe {
            if inputs {
                check((ort.Node_GetInputs)(self.raw, raw.as_mut_ptr(), n))?;
            } else {
                check((ort.Node_GetOutputs)(self.raw, raw.as_mut_ptr(), n))?;
            }
        }
        Ok(raw
            .into_iter()
            .map(|v| {
                (!v.is_null()).then_some(ValueInfo {
                    v,
                    _life: std::marker::PhantomData,
                })
            })
            .collect())
    }

    /// Inputs in order; `None` for an omitted optional input.
    pub fn inputs(&self) -> Result<Vec<Option<ValueInfo<'a>>>> {
        self.values(true)
    }

    pub fn outputs(&self) -> Result<Vec<Option<ValueInfo<'a>>>> {
        self.values(false)
    }

    fn attr(&self, name: &str) -> Option<*const OrtOpAttr> {
        let n = CString::new(name).ok()?;
        let mut a: *const OrtOpAttr = std::ptr::null();
        // SAFETY: node valid; an absent attribute yields an error status or NULL.
        let ok = unsafe {
            check((api().ort.Node_GetAttributeByName)(
                self.raw,
                n.as_ptr(),
                &mut a,
            ))
        }
        .is_ok();
        (ok && !a.is_null()).then_some(a)
    }

    fn attr_type(a: *const OrtOpAttr) -> Option<OrtOpAttrType> {
        let mut t = OrtOpAttrType::ORT_OP_ATTR_UNDEFINED;
        // SAFETY: a is a live attribute of this node.
        unsafe { check((api().ort.OpAttr_GetType)(a, &mut t)) }.ok()?;
        Some(t)
    }

    /// Whether the node carries attribute `name` at all.
    pub fn has_attr(&self, name: &str) -> bool {
        self.attr(name).is_some()
    }

    /// Integer attribute; `None` when absent or not an int.
    pub fn attr_i64(&self, name: &str) -> Option<i64> {
        let a = self.attr(name)?;
        if Self::attr_type(a)? != OrtOpAttrType::ORT_OP_ATTR_INT {
            return None;
        }
        let mut v = 0i64;
        let mut out = 0usize;
        // SAFETY: reading one int64 into a live local of the right size.
        unsafe {
            check((api().ort.ReadOpAttr)(
                a,
                OrtOpAttrType::ORT_OP_ATTR_INT,
                &mut v as *mut i64 as *mut c_void,
                std::mem::size_of::<i64>(),
                &mut out,
            ))
        }
        .ok()?;
        Some(v)
    }

    /// Float attribute; `None` when absent or not a float.
    pub fn attr_f32(&self, name: &str) -> Option<f32> {
        let a = self.attr(name)?;
        if Self::attr_type(a)? != OrtOpAttrType::ORT_OP_ATTR_FLOAT {
            return None;
        }
        let mut v = 0f32;
        let mut out = 0usize;
        // SAFETY: reading one float into a live local of the right size.
        unsafe {
            check((api().ort.ReadOpAttr)(
                a,
                OrtOpAttrType::ORT_OP_ATTR_FLOAT,
                &mut v as *mut f32 as *mut c_void,
                std::mem::size_of::<f32>(),
                &mut out,
            ))
        }
        .ok()?;
        Some(v)
    }

    /// String attribute (up to 255 bytes); `None` when absent, not a string, or longer.
    pub fn attr_string(&self, name: &str) -> Option<String> {
        let a = self.attr(name)?;
        if Self::attr_type(a)? != OrtOpAttrType::ORT_OP_ATTR_STRING {
            return None;
        }
        let mut buf = [0u8; 255];
        let mut out = 0usize;
        // SAFETY: ORT writes at most buf.len() bytes into the live local buffer (and errors,
        // writing nothing, when the string does not fit).
        unsafe {
            check((api().ort.ReadOpAttr)(
                a,
                OrtOpAttrType::ORT_OP_ATTR_STRING,
                buf.as_mut_ptr() as *mut c_void,
                buf.len(),
                &mut out,
            ))
        }
        .ok()?;
        let bytes = buf.get(..out)?;
        Some(
            String::from_utf8_lossy(bytes)
                .trim_end_matches('\0')
                .to_string(),
        )
    }

    /// Names of attributes present on the node, for "unknown attribute" checks.
    pub fn attr_names(&self) -> Result<Vec<String>> {
        let ort = api().ort;
        let mut n = 0usize;
        // SAFETY: node valid.
        unsafe { check((ort.Node_GetNumAttributes)(self.raw, &mut n))? };
        let mut raw = vec![std::ptr::null::<OrtOpAttr>(); n];
        // SAFETY: raw has room for n entries.
        unsafe { check((ort.Node_GetAttributes)(self.raw, raw.as_mut_ptr(), n))? };
        raw.into_iter()
            .map(|a| {
                let mut p: *const c_char = std::ptr::null();
                // SAFETY: a is a live attribute; name owned by it.
                unsafe {
                    check((ort.OpAttr_GetName)(a, &mut p))?;
                    Ok(string_at(p))
                }
            })
            .collect()
    }
}

impl<'a> ValueInfo<'a> {
    pub fn name(&self) -> Result<String> {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: value info valid; name owned by it.
        unsafe {
            check((api().ort.GetValueInfoName)(self.v, &mut p))?;
            Ok(string_at(p))
        }
    }

    /// Tensor type and (possibly symbolic, as -1) dims; `None` for non-tensors or unknown type.
    pub fn tensor_type(&self) -> Result<Option<TensorType>> {
        let mut ti: *const OrtTypeInfo = std::ptr::null();
        // SAFETY: value info valid; the type info is owned by it.
        unsafe { check((api().ort.GetValueInfoTypeInfo)(self.v, &mut ti))? };
        if ti.is_null() {
            return Ok(None);
        }
        // SAFETY: borrowed from the value info.
        unsafe { read_type_info(ti) }
    }

    pub fn is_constant_initializer(&self) -> bool {
        let mut b = false;
        // SAFETY: value info valid.
        unsafe { check((api().ort.ValueInfo_IsConstantInitializer)(self.v, &mut b)) }.is_ok() && b
    }

    /// The initializer's value when this is a constant initializer.
    pub fn constant_value(&self) -> Result<Option<Tensor<'a>>> {
        if !self.is_constant_initializer() {
            return Ok(None);
        }
        let mut v: *const OrtValue = std::ptr::null();
        // SAFETY: value info valid; the value is owned by the graph.
        unsafe { check((api().ort.ValueInfo_GetInitializerValue)(self.v, &mut v))? };
        if v.is_null() {
            return Ok(None);
        }
        // SAFETY: initializer owned by the graph for the borrow.
        unsafe { Tensor::from_value(v) }.map(Some)
    }
}
