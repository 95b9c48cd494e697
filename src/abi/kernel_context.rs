//! Safe view of the inputs and outputs of one kernel call: ORT's `OrtKernelContext` (the per-node
//! path) or, for a node inside a fused partition, the partition's frame (`abi::frame`), whose
//! inputs and outputs may in turn be the fused node's own (ORT's) ones.

use std::cell::Cell;
use std::marker::PhantomData;

use super::api::api;
use super::ep_types::{OrtKernelContext, OrtValue};
use super::frame::NodeFrame;
use super::status::{check, Error, Result};
use super::tensor::{dims_as_i64, Tensor, TensorMut};

/// The context of one `Compute` call. Not `Send`: it is only valid on the calling thread for the
/// duration of the call, although the tensors it hands out may be read from worker lanes.
pub struct KernelContext<'a> {
    ctx: *mut OrtKernelContext,
    /// The input count, asked of ORT once per call (every `input` needs it).
    inputs: Cell<Option<usize>>,
    /// Set for a node of a fused partition: every query goes to the frame (`ctx` is NULL).
    frame: Option<&'a NodeFrame<'a>>,
    _life: PhantomData<&'a mut OrtKernelContext>,
}

impl<'a> KernelContext<'a> {
    /// # Safety
    /// `ctx` must be the live context ORT passed to `Compute`, valid for `'a`.
    pub unsafe fn new(ctx: *mut OrtKernelContext) -> Self {
        KernelContext {
            ctx,
            inputs: Cell::new(None),
            frame: None,
            _life: PhantomData,
        }
    }

    /// The context of a node inside a fused partition, reading the run's frame.
    pub(crate) fn from_frame(frame: &'a NodeFrame<'a>) -> Self {
        KernelContext {
            ctx: std::ptr::null_mut(),
            inputs: Cell::new(None),
            frame: Some(frame),
            _life: PhantomData,
        }
    }

    pub fn input_count(&self) -> Result<usize> {
        if let Some(f) = self.frame {
            return Ok(f.input_count());
        }
        if let Some(n) = self.inputs.get() {
            return Ok(n);
        }
        let mut n = 0usize;
        // SAFETY: ctx valid for 'a.
        unsafe { check((api().ort.KernelContext_GetInputCount)(self.ctx, &mut n))? };
        self.inputs.set(Some(n));
        Ok(n)
    }

    pub fn output_count(&self) -> Result<usize> {
        if let Some(f) = self.frame {
            return Ok(f.output_count());
        }
        let mut n = 0usize;
        // SAFETY: ctx valid for 'a.
        unsafe { check((api().ort.KernelContext_GetOutputCount)(self.ctx, &mut n))? };
        Ok(n)
    }

    /// Input `i`, or `None` when it is an omitted optional input.
    pub fn input(&self, i: usize) -> Result<Option<Tensor<'a>>> {
        if let Some(f) = self.frame {
            return f.input(i);
        }
        if i >= self.input_count()? {
            return Ok(None);
        }
        let mut v: *const OrtValue = std::ptr::null();
        // SAFETY: ctx valid; index in range.
        unsafe { check((api().ort.KernelContext_GetInput)(self.ctx, i, &mut v))? };
        if v.is_null() {
            return Ok(None);
        }
        // SAFETY: ORT keeps inputs alive and unmodified for the whole Compute call ('a).
        unsafe { Tensor::from_value(v) }.map(Some)
    }

    /// Input `i`, required.
    pub fn required_input(&self, i: usize) -> Result<Tensor<'a>> {
        self.input(i)?
            .ok_or_else(|| Error::invalid_argument(format!("required input {i} is missing")))
    }

    /// Whether output `i` is wired to a value: false for an omitted output of a node inside a
    /// fused partition; on ORT's own path always true (ORT answers an omitted one with no buffer,
    /// which `output` reports as an error).
    pub fn output_present(&self, i: usize) -> bool {
        self.frame.is_none_or(|f| f.output_present(i))
    }

    /// Allocates output `i` with `shape` and returns a writable view.
    pub fn output(&self, i: usize, shape: &[usize]) -> Result<TensorMut<'a>> {
        if let Some(f) = self.frame {
            return f.output(i, shape);
        }
        // In place: no copy or allocation per call.
        let dims = dims_as_i64(shape)
            .ok_or_else(|| Error::invalid_argument("output dimension overflows int64"))?;
        let mut v: *mut OrtValue = std::ptr::null_mut();
        // SAFETY: ctx valid; dims has dims.len() entries; ORT owns the returned value.
        unsafe {
            check((api().ort.KernelContext_GetOutput)(
                self.ctx,
                i,
                dims.as_ptr(),
                dims.len(),
                &mut v,
            ))?
        };
        if v.is_null() {
            return Err(Error::fail(format!(
                "ORT returned no buffer for output {i}"
            )));
        }
        // SAFETY: freshly allocated output, exclusively ours for this call.
        unsafe { TensorMut::from_value(v, shape) }
    }
}
