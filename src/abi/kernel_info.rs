//! Safe view of a node at kernel creation: its attributes, name, input types and constant inputs.
//! Backed by ORT's `OrtKernelInfo` (the per-node path: ORT creates the kernel) or by a node of a
//! fused partition (`ep::spec`, read from ORT's subgraph during `Compile` or from a context file:
//! the fused path, where rcpu creates the kernel, `abi::fused`).

use std::ffi::{c_char, CString};

use super::api::api;
use super::ep_types::{OrtKernelInfo, OrtValue};
use super::status::{check, Error, Result};
use super::tensor::{read_type_info, ElemType, Tensor, TensorType};
use crate::ep::spec::{AttrValue, NodeSpec};

/// Borrowed kernel info, valid during the kernel-create callback (or `Compile`).
pub struct KernelInfo<'a> {
    info: *const OrtKernelInfo,
    /// Set on the fused path: the partition's node (then `info` is NULL and every query reads
    /// the node instead).
    node: Option<&'a NodeSpec<'a>>,
    _life: std::marker::PhantomData<&'a OrtKernelInfo>,
}

fn cstr(name: &str) -> CString {
    CString::new(name).unwrap_or_default()
}

impl<'a> KernelInfo<'a> {
    /// # Safety
    /// `info` must be the live kernel info ORT passed to the create callback.
    pub unsafe fn new(info: *const OrtKernelInfo) -> Self {
        KernelInfo {
            info,
            node: None,
            _life: std::marker::PhantomData,
        }
    }

    /// The kernel info of a node of a fused partition.
    pub fn from_spec(node: &'a NodeSpec<'a>) -> Self {
        KernelInfo {
            info: std::ptr::null(),
            node: Some(node),
            _life: std::marker::PhantomData,
        }
    }

    /// The node's input `i` on the fused path (`None`: omitted or past the end).
    fn node_input(node: &'a NodeSpec<'a>, i: usize) -> Option<&'a crate::ep::spec::ValueSpec<'a>> {
        node.inputs.get(i).and_then(Option::as_ref)
    }

    /// The node's name (may be empty).
    pub fn node_name(&self) -> String {
        if let Some(n) = self.node {
            return n.name.clone();
        }
        self.read_string(|buf, len| {
            // SAFETY: info valid; size protocol of KernelInfo_GetNodeName (query then fill).
            unsafe { (api().ort.KernelInfo_GetNodeName)(self.info, buf, len) }
        })
        .unwrap_or_default()
    }

    fn read_string(
        &self,
        call: impl Fn(*mut c_char, *mut usize) -> ort_sys::OrtStatusPtr,
    ) -> Result<String> {
        let mut len = 0usize;
        // SAFETY: querying the size with a NULL buffer is the documented protocol.
        unsafe { check(call(std::ptr::null_mut(), &mut len))? };
        let mut buf = vec![0u8; len.max(1)];
        // SAFETY: buf has `len` bytes.
        unsafe { check(call(buf.as_mut_ptr() as *mut c_char, &mut len))? };
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }

    /// Integer attribute, `None` when absent.
    pub fn attr_i64(&self, name: &str) -> Option<i64> {
        if let Some(node) = self.node {
            return match node.attr(name) {
                Some(AttrValue::Int(v)) => Some(*v),
                _ => None,
            };
        }
        let n = cstr(name);
        let mut v = 0i64;
        // SAFETY: info valid; out is a live local. An absent attribute returns an error status.
        unsafe {
            check((api().ort.KernelInfoGetAttribute_int64)(
                self.info,
                n.as_ptr(),
                &mut v,
            ))
        }
        .ok()
        .map(|_| v)
    }

    /// Float attribute, `None` when absent.
    pub fn attr_f32(&self, name: &str) -> Option<f32> {
        if let Some(node) = self.node {
            return match node.attr(name) {
                Some(AttrValue::Float(v)) => Some(*v),
                _ => None,
            };
        }
        let n = cstr(name);
        let mut v = 0f32;
        // SAFETY: as attr_i64.
        unsafe {
            check((api().ort.KernelInfoGetAttribute_float)(
                self.info,
                n.as_ptr(),
                &mut v,
            ))
        }
        .ok()
        .map(|_| v)
    }

    /// String attribute, `None` when absent.
    pub fn attr_string(&self, name: &str) -> Option<String> {
        if let Some(node) = self.node {
            return match node.attr(name) {
                Some(AttrValue::Str(v)) => Some(v.clone()),
                _ => None,
            };
        }
        let n = cstr(name);
        self.read_string(|buf, len| {
            // SAFETY: info valid; size protocol as documented for string attributes.
            unsafe { (api().ort.KernelInfoGetAttribute_string)(self.info, n.as_ptr(), buf, len) }
        })
        .ok()
    }

    /// Number of inputs the node declares.
    pub fn input_count(&self) -> Result<usize> {
        if let Some(node) = self.node {
            return Ok(node.inputs.len());
        }
        let mut n = 0usize;
        // SAFETY: info valid.
        unsafe { check((api().ort.KernelInfo_GetInputCount)(self.info, &mut n))? };
        Ok(n)
    }

    /// The declared type of input `i` (`None` for a non-tensor input).
    pub fn input_type(&self, i: usize) -> Result<Option<TensorType>> {
        if let Some(node) = self.node {
            return Ok(Self::node_input(node, i).and_then(|v| v.ty.clone()));
        }
        let ort = api().ort;
        let mut ti = std::ptr::null_mut();
        // SAFETY: info valid; ti is released below.
        unsafe { check((ort.KernelInfo_GetInputTypeInfo)(self.info, i, &mut ti))? };
        if ti.is_null() {
            return Ok(None);
        }
        // SAFETY: ti was just created by ORT.
        let r = unsafe { read_type_info(ti) };
        // SAFETY: created above, released once.
        unsafe { (ort.ReleaseTypeInfo)(ti) };
        r
    }

    /// Input `i` when it is a constant initializer, else `None`. The tensor is valid while the
    /// kernel lives (ORT keeps constant initializers alive unless the kernel prepacks them).
    pub fn constant_input(&self, i: usize) -> Result<Option<Tensor<'a>>> {
        if let Some(node) = self.node {
            return Ok(Self::node_input(node, i).and_then(|v| v.constant_value()));
        }
        let mut is_const = 0i32;
        let mut v: *const OrtValue = std::ptr::null();
        // SAFETY: info valid; out-pointers are live locals.
        unsafe {
            check((api().ort.KernelInfoGetConstantInput_tensor)(
                self.info,
                i,
                &mut is_const,
                &mut v,
            ))?
        };
        if is_const == 0 || v.is_null() {
            return Ok(None);
        }
        // SAFETY: a constant initializer owned by the session, valid during creation.
        unsafe { Tensor::from_value(v) }.map(Some)
    }

    /// (element type, shape) of input `i` when it is a constant initializer, whether or not its
    /// bytes are at hand: a node of a partition read from a context file may have a constant
    /// whose bytes the file leaves out because the kernel imports a packed form instead
    /// (`OpKernel::import_packed`); [`Self::constant_input`] is `None` for it.
    pub fn constant_layout(&self, i: usize) -> Result<Option<(ElemType, Vec<usize>)>> {
        if let Some(node) = self.node {
            return Ok(Self::node_input(node, i).and_then(|v| v.constant_layout()));
        }
        Ok(self
            .constant_input(i)?
            .map(|t| (t.elem(), t.shape().to_vec())))
    }

    /// Error helper: a message that names this node.
    pub fn error(&self, op: &str, msg: impl std::fmt::Display) -> Error {
        Error::invalid_argument(format!("rcpu {op} node '{}': {msg}", self.node_name()))
    }
}
