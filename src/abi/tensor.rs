//! Safe views of ORT tensors (`OrtValue`) and of tensor type information.

use std::borrow::Cow;
use std::ffi::c_void;
use std::marker::PhantomData;

pub use ort_sys::ONNXTensorElementDataType as ElemType;
use ort_sys::{OrtTensorTypeAndShapeInfo, OrtTypeInfo};

use super::api::api;
use super::ep_types::OrtValue;
use super::status::{check, Error, Result};

/// Element type and dimensions (-1 or symbolic dims as -1) of a tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorType {
    pub elem: ElemType,
    pub dims: Vec<i64>,
}

impl TensorType {
    /// Dims as `usize` when every dim is known (>= 0).
    pub fn static_dims(&self) -> Option<Vec<usize>> {
        self.dims.iter().map(|&d| usize::try_from(d).ok()).collect()
    }
}

/// Short name of an element type for error messages.
pub fn elem_name(e: ElemType) -> &'static str {
    use ElemType::*;
    match e {
        ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT => "float32",
        ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8 => "uint8",
        ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 => "int8",
        ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 => "int32",
        ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 => "int64",
        ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 => "float16",
        ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE => "float64",
        ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16 => "bfloat16",
        ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL => "bool",
        _ => "other",
    }
}

/// Bytes per element of the element types rcpu's tensors can hold; `None` for strings and
/// sub-byte or unknown types.
pub fn elem_width(e: ElemType) -> Option<usize> {
    use ElemType::*;
    match e {
        ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8
        | ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8
        | ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL => Some(1),
        ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16
        | ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16
        | ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16
        | ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16 => Some(2),
        ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT
        | ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32
        | ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32 => Some(4),
        ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE
        | ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64
        | ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64 => Some(8),
        _ => None,
    }
}

/// Reads element type and dims from a tensor type-and-shape info.
///
/// # Safety
/// `info` must be a valid `OrtTensorTypeAndShapeInfo`.
pub(crate) unsafe fn read_type_and_shape(
    info: *const OrtTensorTypeAndShapeInfo,
) -> Result<TensorType> {
    let ort = api().ort;
    let mut elem = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    let mut n = 0usize;
    // SAFETY: info valid (caller contract); out-pointers are live locals.
    unsafe {
        check((ort.GetTensorElementType)(info, &mut elem))?;
        check((ort.GetDimensionsCount)(info, &mut n))?;
    }
    let mut dims = vec![0i64; n];
    // SAFETY: dims has room for n values.
    unsafe { check((ort.GetDimensions)(info, dims.as_mut_ptr(), n))? };
    Ok(TensorType { elem, dims })
}

/// Element type and dims of a tensor value, the dims borrowed from the value itself
/// (`GetTensorElementTypeAndShapeDataReference`, API 24): no type-and-shape object is created
/// and released per call, which mattered on the per-node path of small (decode-shaped) ops.
///
/// # Safety
/// `value` must be a valid tensor `OrtValue` that outlives `'v` and is not reshaped meanwhile.
unsafe fn elem_and_dims<'v>(value: *const OrtValue) -> Result<(ElemType, &'v [i64])> {
    if value.is_null() {
        return Err(Error::invalid_argument("missing tensor"));
    }
    let mut elem = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    let mut dims: *const i64 = std::ptr::null();
    let mut n = 0usize;
    // SAFETY: value valid (caller contract); out-pointers are live locals. The negotiated API is
    // >= 24 (api::MIN_RUNTIME_API), where this entry exists.
    unsafe {
        check((api().ort.GetTensorElementTypeAndShapeDataReference)(
            value, &mut elem, &mut dims, &mut n,
        ))?
    };
    if n == 0 || dims.is_null() {
        return Ok((elem, &[]));
    }
    // SAFETY: ORT returns a pointer to the value's n dims, valid while the value lives ('v).
    Ok((elem, unsafe { std::slice::from_raw_parts(dims, n) }))
}

// rcpu builds for 64-bit targets only: ORT's int64 dims are read in place as `usize` (and the
// other way round) by the two functions below.
const _: () = assert!(
    std::mem::size_of::<usize>() == std::mem::size_of::<i64>()
        && std::mem::align_of::<usize>() == std::mem::align_of::<i64>()
);

/// ORT's dims as `usize`, in place (no copy: this runs for every input and output of every kernel
/// call); `None` when one is negative (a symbolic or unknown dim).
pub(crate) fn dims_as_usize(dims: &[i64]) -> Option<&[usize]> {
    if dims.iter().any(|&d| d < 0) {
        return None;
    }
    // SAFETY: usize and i64 have the same size and alignment (asserted above); every value is
    // non-negative, so each reads as the same number; the borrow keeps `dims`' lifetime.
    Some(unsafe { std::slice::from_raw_parts(dims.as_ptr().cast::<usize>(), dims.len()) })
}

/// A shape as ORT's int64 dims, in place; `None` when a dim exceeds `i64::MAX`.
pub(crate) fn dims_as_i64(shape: &[usize]) -> Option<&[i64]> {
    if shape.iter().any(|&d| i64::try_from(d).is_err()) {
        return None;
    }
    // SAFETY: as in `dims_as_usize`: same size and alignment, every value fits in i64 (checked).
    Some(unsafe { std::slice::from_raw_parts(shape.as_ptr().cast::<i64>(), shape.len()) })
}

/// Reads the tensor type of a type info; `None` when it is not a tensor (sequence, map, ...).
///
/// # Safety
/// `ti` must be a valid `OrtTypeInfo` (not released during the call).
pub(crate) unsafe fn read_type_info(ti: *const OrtTypeInfo) -> Result<Option<TensorType>> {
    let ort = api().ort;
    let mut tinfo: *const OrtTensorTypeAndShapeInfo = std::ptr::null();
    // SAFETY: ti valid; CastTypeInfoToTensorInfo returns NULL for non-tensors, owned by ti.
    unsafe { check((ort.CastTypeInfoToTensorInfo)(ti, &mut tinfo))? };
    if tinfo.is_null() {
        return Ok(None);
    }
    // SAFETY: tinfo borrowed from ti, valid while ti is.
    unsafe { read_type_and_shape(tinfo) }.map(Some)
}

/// A read-only view of a tensor owned by ORT for the lifetime `'a`.
#[derive(Clone)]
pub struct Tensor<'a> {
    data: *const c_void,
    elem: ElemType,
    /// The value's own dims, borrowed from ORT for `'a` (no copy, no allocation per call), or
    /// rcpu's own (a constant read from a context file, `from_mapped`).
    shape: Cow<'a, [usize]>,
    _life: PhantomData<&'a OrtValue>,
}

/// Trait for element types rcpu reads and writes as slices.
pub trait Element: Copy + 'static {
    const ELEM: ElemType;
}
impl Element for f32 {
    const ELEM: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
}
impl Element for u8 {
    const ELEM: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
}
impl Element for i8 {
    const ELEM: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8;
}
impl Element for i32 {
    const ELEM: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;
}
impl Element for i64 {
    const ELEM: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
}

/// A float16 element as its bits; defined with the float16 conversions, in `kernels::cast`.
pub use crate::kernels::cast::F16Bits;
impl Element for F16Bits {
    const ELEM: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
}

impl<'a> Tensor<'a> {
    /// Wraps an ORT tensor value.
    ///
    /// # Safety
    /// `value` must be a valid tensor `OrtValue` that outlives `'a` and is not written meanwhile.
    pub unsafe fn from_value(value: *const OrtValue) -> Result<Tensor<'a>> {
        let ort = api().ort;
        if value.is_null() {
            return Err(Error::invalid_argument("missing tensor"));
        }
        // SAFETY: value valid (caller contract).
        let (elem, dims) = unsafe { elem_and_dims(value)? };
        let shape = dims_as_usize(dims)
            .ok_or_else(|| Error::invalid_argument(format!("tensor has negative dims {dims:?}")))?;
        let mut data: *const c_void = std::ptr::null();
        // SAFETY: value is a tensor; GetTensorData yields its buffer (may be NULL when empty).
        unsafe { check((ort.GetTensorData)(value, &mut data))? };
        Ok(Tensor {
            data,
            elem,
            shape: Cow::Borrowed(shape),
            _life: PhantomData,
        })
    }

    /// A view of memory rcpu owns (the fused path's copies of constant initializers and its
    /// intermediate values, `abi::frame`).
    ///
    /// # Safety
    /// `data` must hold `shape`'s element count of `elem` (64-byte aligned or NULL when empty),
    /// live and unwritten for `'a`.
    pub(crate) unsafe fn from_parts(
        data: *const c_void,
        elem: ElemType,
        shape: &'a [usize],
    ) -> Tensor<'a> {
        Tensor {
            data,
            elem,
            shape: Cow::Borrowed(shape),
            _life: PhantomData,
        }
    }

    /// A view of `bytes` (a constant's section of a mapped context file, `ep::context`) as a
    /// tensor of `elem` and `shape`: `Err` unless the bytes are exactly that many elements and
    /// aligned for them.
    pub fn from_mapped(bytes: &'a [u8], elem: ElemType, shape: Vec<usize>) -> Result<Tensor<'a>> {
        let width = elem_width(elem).ok_or_else(|| {
            Error::invalid_argument(format!(
                "constants of {} are not supported",
                elem_name(elem)
            ))
        })?;
        let want = shape
            .iter()
            .try_fold(width, |n, &d| n.checked_mul(d))
            .ok_or_else(|| Error::invalid_argument(format!("shape {shape:?} overflows")))?;
        if want != bytes.len() {
            return Err(Error::invalid_argument(format!(
                "shape {shape:?} of {} needs {want} bytes, the section holds {}",
                elem_name(elem),
                bytes.len()
            )));
        }
        if !(bytes.as_ptr() as usize).is_multiple_of(width) {
            return Err(Error::invalid_argument(
                "section misaligned for its elements",
            ));
        }
        Ok(Tensor {
            data: bytes.as_ptr().cast(),
            elem,
            shape: Cow::Owned(shape),
            _life: PhantomData,
        })
    }

    /// All bytes of the tensor (any element type of known width), e.g. to copy a constant.
    pub fn all_bytes(&self) -> Result<&'a [u8]> {
        let width = elem_width(self.elem).ok_or_else(|| {
            Error::invalid_argument(format!(
                "tensors of {} elements are not supported",
                elem_name(self.elem)
            ))
        })?;
        let n = self
            .len()
            .checked_mul(width)
            .ok_or_else(|| Error::invalid_argument("tensor byte size overflows"))?;
        if n == 0 {
            return Ok(&[]);
        }
        if self.data.is_null() {
            return Err(Error::fail("tensor data pointer is NULL"));
        }
        // SAFETY: the buffer holds len() elements of `width` bytes that live for 'a
        // (constructor contract); u8 has no alignment or validity requirement.
        Ok(unsafe { std::slice::from_raw_parts(self.data as *const u8, n) })
    }

    pub fn elem(&self) -> ElemType {
        self.elem
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The buffer's address, for detecting an output that shares this input's buffer (no
    /// reference is formed).
    pub fn data_addr(&self) -> usize {
        self.data as usize
    }

    /// The tensor's byte count when its data is not aligned for its element type (then
    /// [`Tensor::data`] cannot form a slice over it: `KernelContext` stages a copy); `None` for
    /// aligned, empty or single-byte data.
    pub(crate) fn misaligned_bytes(&self) -> Option<usize> {
        misaligned_bytes(self.data as usize, self.elem, &self.shape)
    }

    /// The same tensor over another buffer (an aligned copy of its data).
    ///
    /// # Safety
    /// As for [`Tensor::from_parts`]: `data` holds the tensor's bytes, aligned for its element
    /// type, live for `'a`.
    pub(crate) unsafe fn with_data(self, data: *const c_void) -> Tensor<'a> {
        Tensor { data, ..self }
    }

    /// The data as a typed slice; error if the element type differs.
    pub fn data<T: Element>(&self) -> Result<&'a [T]> {
        if self.elem != T::ELEM {
            return Err(Error::invalid_argument(format!(
                "expected a {} tensor, got {}",
                elem_name(T::ELEM),
                elem_name(self.elem)
            )));
        }
        let n = self.len();
        if n == 0 {
            return Ok(&[]);
        }
        if self.data.is_null() || !(self.data as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return Err(Error::fail("tensor data pointer is NULL or misaligned"));
        }
        // SAFETY: ORT guarantees the buffer holds n elements of T (type checked above), is
        // aligned (checked) and lives for 'a (constructor contract).
        Ok(unsafe { std::slice::from_raw_parts(self.data as *const T, n) })
    }

    /// The raw bytes of a tensor of 1-byte elements (uint8 or int8), for kernels that read both
    /// signednesses through one byte path; error for any other element type.
    pub fn bytes(&self) -> Result<&'a [u8]> {
        if !is_byte_elem(self.elem) {
            return Err(Error::invalid_argument(format!(
                "expected a uint8 or int8 tensor, got {}",
                elem_name(self.elem)
            )));
        }
        let n = self.len();
        if n == 0 {
            return Ok(&[]);
        }
        if self.data.is_null() {
            return Err(Error::fail("tensor data pointer is NULL"));
        }
        // SAFETY: ORT guarantees the buffer holds n one-byte elements (checked above) that live
        // for 'a (constructor contract); u8 has no alignment or validity requirement.
        Ok(unsafe { std::slice::from_raw_parts(self.data as *const u8, n) })
    }

    /// The data as raw bytes (any numeric element type), e.g. to key a weight by content.
    pub fn raw_bytes(&self) -> Result<&'a [u8]> {
        let width = match self.elem {
            ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT
            | ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32
            | ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32 => 4,
            ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8
            | ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8 => 1,
            e => {
                return Err(Error::invalid_argument(format!(
                    "raw bytes of a {} tensor are not supported",
                    elem_name(e)
                )))
            }
        };
        let n = self.len() * width;
        if n == 0 {
            return Ok(&[]);
        }
        if self.data.is_null() {
            return Err(Error::fail("tensor data pointer is NULL"));
        }
        // SAFETY: ORT guarantees the buffer holds len() elements of `width` bytes each and
        // lives for 'a (constructor contract); u8 has no alignment requirement.
        Ok(unsafe { std::slice::from_raw_parts(self.data as *const u8, n) })
    }
}

/// The byte count of a tensor at `addr` of `elem` elements in `shape` when `addr` is not a
/// multiple of the element width (the alignment of every element type rcpu reads); `None` when
/// it is, for NULL or empty data, and for element types of one byte or of no known width.
fn misaligned_bytes(addr: usize, elem: ElemType, shape: &[usize]) -> Option<usize> {
    let width = elem_width(elem).filter(|&w| w > 1)?;
    if addr == 0 || addr.is_multiple_of(width) {
        return None;
    }
    shape
        .iter()
        .try_fold(width, |n, &d| n.checked_mul(d))
        .filter(|&n| n > 0)
}

/// uint8 or int8: the element types [`Tensor::bytes`] and [`TensorMut::into_bytes`] accept.
pub fn is_byte_elem(e: ElemType) -> bool {
    matches!(
        e,
        ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8
            | ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8
    )
}

/// A writable view of an output tensor ORT allocated for this kernel call.
pub struct TensorMut<'a> {
    data: *mut c_void,
    /// The output's dims as ORT allocated them, borrowed for `'a`.
    shape: &'a [usize],
    elem: ElemType,
    _life: PhantomData<&'a mut OrtValue>,
}

impl<'a> TensorMut<'a> {
    /// # Safety
    /// `value` must be a valid, writable tensor `OrtValue` exclusively ours for `'a`.
    pub(crate) unsafe fn from_value(
        value: *mut OrtValue,
        shape: &[usize],
    ) -> Result<TensorMut<'a>> {
        let ort = api().ort;
        // SAFETY: caller contract; the value (and so its dims) lives and keeps its shape for 'a.
        let (elem, dims) = unsafe { elem_and_dims::<'a>(value)? };
        let got = dims_as_usize(dims).filter(|&d| d == shape).ok_or_else(|| {
            Error::fail(format!(
                "ORT allocated an output of shape {dims:?}, the kernel asked for {shape:?}"
            ))
        })?;
        let mut data: *mut c_void = std::ptr::null_mut();
        // SAFETY: value is a tensor we own for this call.
        unsafe { check((ort.GetTensorMutableData)(value, &mut data))? };
        Ok(TensorMut {
            data,
            shape: got,
            elem,
            _life: PhantomData,
        })
    }

    pub fn shape(&self) -> &[usize] {
        self.shape
    }

    /// A writable view of memory rcpu owns (an intermediate value of a fused partition).
    ///
    /// # Safety
    /// `data` must hold `shape`'s element count of `elem` (64-byte aligned or NULL when empty),
    /// live and exclusively ours for `'a`.
    pub(crate) unsafe fn from_parts(
        data: *mut c_void,
        elem: ElemType,
        shape: &'a [usize],
    ) -> TensorMut<'a> {
        TensorMut {
            data,
            shape,
            elem,
            _life: PhantomData,
        }
    }

    /// The element type ORT (or the fused frame) allocated.
    pub fn elem(&self) -> ElemType {
        self.elem
    }

    /// The buffer's address (see [`Tensor::data_addr`]).
    pub fn data_addr(&self) -> usize {
        self.data as usize
    }

    /// The output's byte count when its buffer is not aligned for its element type (see
    /// [`Tensor::misaligned_bytes`]).
    pub(crate) fn misaligned_bytes(&self) -> Option<usize> {
        misaligned_bytes(self.data as usize, self.elem, self.shape)
    }

    /// The same output over another buffer (an aligned copy, written back by the caller).
    ///
    /// # Safety
    /// As for [`TensorMut::from_parts`]: `data` holds the output's bytes, aligned for its
    /// element type, exclusively this output's for `'a`.
    pub(crate) unsafe fn with_data(self, data: *mut c_void) -> TensorMut<'a> {
        TensorMut { data, ..self }
    }

    /// Consumes the view: the slice is the only handle to the output buffer.
    pub fn into_data<T: Element>(self) -> Result<&'a mut [T]> {
        if self.elem != T::ELEM {
            return Err(Error::fail(format!(
                "output is {}, kernel wrote {}",
                elem_name(self.elem),
                elem_name(T::ELEM)
            )));
        }
        let n: usize = self.shape.iter().product();
        if n == 0 {
            return Ok(&mut []);
        }
        if self.data.is_null() || !(self.data as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return Err(Error::fail("output data pointer is NULL or misaligned"));
        }
        // SAFETY: ORT allocated n elements of T for this output (type checked), aligned
        // (checked); exclusive for 'a (constructor contract).
        Ok(unsafe { std::slice::from_raw_parts_mut(self.data as *mut T, n) })
    }

    /// Consumes the view as raw bytes: outputs of 1-byte elements (uint8 or int8) only.
    pub fn into_bytes(self) -> Result<&'a mut [u8]> {
        if !is_byte_elem(self.elem) {
            return Err(Error::fail(format!(
                "output is {}, kernel writes bytes",
                elem_name(self.elem)
            )));
        }
        let n: usize = self.shape.iter().product();
        if n == 0 {
            return Ok(&mut []);
        }
        if self.data.is_null() {
            return Err(Error::fail("output data pointer is NULL"));
        }
        // SAFETY: ORT allocated n one-byte elements for this output (checked), exclusively ours
        // for 'a (constructor contract); any byte pattern is a valid u8 and i8.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.data as *mut u8, n) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_are_read_in_place_and_out_of_range_dims_refused() {
        let ort = [2i64, 0, 896, 1];
        let s = dims_as_usize(&ort).unwrap();
        assert_eq!(s, [2usize, 0, 896, 1]);
        assert_eq!(s.as_ptr() as usize, ort.as_ptr() as usize, "not in place");
        assert_eq!(dims_as_usize(&[]).unwrap(), [0usize; 0]);
        assert!(
            dims_as_usize(&[3, -1]).is_none(),
            "a negative dim must be refused"
        );
        let shape = [1usize, 4864];
        assert_eq!(dims_as_i64(&shape).unwrap(), [1i64, 4864]);
        assert!(
            dims_as_i64(&[1, i64::MAX as usize + 1]).is_none(),
            "must not wrap negative"
        );
        assert_eq!(dims_as_i64(&[i64::MAX as usize]).unwrap(), [i64::MAX]);
    }

    #[test]
    fn misaligned_data_is_told_by_the_element_width() {
        use ElemType::*;
        let f32_ = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
        let i64_ = ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
        let f16 = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
        assert_eq!(misaligned_bytes(0x1002, f32_, &[4, 64]), Some(1024));
        assert_eq!(misaligned_bytes(0x1004, f32_, &[4, 64]), None);
        assert_eq!(misaligned_bytes(0x1004, i64_, &[2, 2]), Some(32));
        assert_eq!(misaligned_bytes(0x1008, i64_, &[2, 2]), None);
        assert_eq!(misaligned_bytes(0x1001, f16, &[3]), Some(6));
        assert_eq!(
            misaligned_bytes(0x1001, ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8, &[3]),
            None
        );
        assert_eq!(
            misaligned_bytes(0x1002, f32_, &[0, 4]),
            None,
            "empty: nothing to read"
        );
        assert_eq!(misaligned_bytes(0, f32_, &[4]), None);
        assert_eq!(misaligned_bytes(0x1002, f32_, &[]), Some(4), "a scalar");
        assert_eq!(misaligned_bytes(0x1002, f32_, &[usize::MAX, 2]), None);
        assert_eq!(
            misaligned_bytes(0x1002, ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING, &[3]),
            None
        );
    }
}
