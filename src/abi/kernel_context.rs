//! Safe view of the inputs and outputs of one kernel call: ORT's `OrtKernelContext` (the per-node
//! path) or, for a node inside a fused partition, the partition's frame (`abi::frame`), whose
//! inputs and outputs may in turn be the fused node's own (ORT's) ones.

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::marker::PhantomData;

use super::api::api;
use super::ep_types::{OrtKernelContext, OrtValue};
use super::frame::NodeFrame;
use super::status::{check, Error, Result};
use super::tensor::{dims_as_i64, Tensor, TensorMut};
use crate::memory::AlignedBuf;

/// Aligned copies of the tensors of one `Compute` call whose data is not aligned for their
/// element type. ORT hands such buffers over as they come: a numpy view a few bytes into an
/// array, an IO binding's output buffer; its own kernels read and write them through unaligned
/// accesses. rcpu's kernels take typed slices, which must be aligned, so such a tensor is
/// staged: copied into an aligned buffer when the kernel first asks for it, handed to the kernel
/// in its place, and (an output) copied back into ORT's buffer once the kernel succeeded.
/// Aligned tensors (what ORT's allocator and numpy's own arrays give) are handed over as they
/// are: the aligned path costs one test of the address, and a staging area that stages nothing
/// allocates nothing.
///
/// One copy per buffer: a later request for the same buffer (an inner node of a fused
/// partition reading the partition's input again; an output that shares an input's buffer, as
/// GroupQueryAttention's present and past do) gets the same copy, so the kernel sees what it
/// would see on the aligned path, the sharing included. A copy starts as the buffer's content
/// for outputs too, so what a kernel leaves unwritten stays as it was.
pub struct Staging {
    copies: RefCell<Vec<Staged>>,
}

struct Staged {
    /// ORT's buffer: the copy's source and, for an output, its destination.
    orig: *mut u8,
    bytes: usize,
    /// The copy's first byte (inside `_buf`, whose heap block never moves while it lives).
    copy: *mut u8,
    _buf: AlignedBuf<u8>,
    /// Copied back into `orig` after a successful call (the buffer is an output's).
    write_back: bool,
}

impl Default for Staging {
    fn default() -> Self {
        Self::new()
    }
}

impl Staging {
    /// An empty staging area (allocates nothing until a tensor needs a copy).
    pub fn new() -> Staging {
        Staging {
            copies: RefCell::new(Vec::new()),
        }
    }

    /// The aligned copy of the `bytes` at `orig`, made on first request; `output`: copied back
    /// by [`Staging::write_back`].
    ///
    /// # Safety
    /// `orig` must point to `bytes` bytes of a tensor ORT keeps alive for the whole call, and
    /// be writable when `output`.
    unsafe fn copy_of(&self, orig: *mut u8, bytes: usize, output: bool) -> Result<*mut u8> {
        let mut copies = self.copies.borrow_mut();
        if let Some(s) = copies
            .iter_mut()
            .find(|s| std::ptr::eq(s.orig, orig) && s.bytes == bytes)
        {
            if output {
                s.orig = orig;
                s.write_back = true;
            }
            return Ok(s.copy);
        }
        let oom = |e: &dyn std::fmt::Display| {
            Error::fail(format!(
                "cannot allocate an aligned copy of a misaligned tensor of {bytes} bytes: {e}"
            ))
        };
        copies.try_reserve(1).map_err(|e| oom(&e))?;
        let mut buf = AlignedBuf::<u8>::try_zeroed(bytes).map_err(|e| oom(&e))?;
        let copy = buf.as_mut_slice().as_mut_ptr();
        // SAFETY: `orig` holds `bytes` readable bytes for the call (caller contract); `copy` is
        // a fresh allocation of `bytes`, so the two do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(orig as *const u8, copy, bytes) };
        copies.push(Staged {
            orig,
            bytes,
            copy,
            _buf: buf,
            write_back: output,
        });
        Ok(copy)
    }

    /// Copies every staged output back into ORT's buffer: once, after the kernel returned
    /// successfully (its views of the copies are gone by then). A failed call writes nothing
    /// back: its outputs are undefined anyway.
    pub fn write_back(&self) {
        for s in self.copies.borrow().iter().filter(|s| s.write_back) {
            // SAFETY: `orig` is an output buffer of `bytes` bytes that ORT keeps for the call
            // (`copy_of`'s contract, writable as an output), `copy` our copy of the same size
            // in a separate allocation; the kernel that wrote the copy has returned.
            unsafe { std::ptr::copy_nonoverlapping(s.copy as *const u8, s.orig, s.bytes) };
        }
    }
}

/// The context of one `Compute` call. Not `Send`: it is only valid on the calling thread for the
/// duration of the call, although the tensors it hands out may be read from worker lanes.
pub struct KernelContext<'a> {
    ctx: *mut OrtKernelContext,
    /// The input count, asked of ORT once per call (every `input` needs it).
    inputs: Cell<Option<usize>>,
    /// Set for a node of a fused partition: every query goes to the frame (`ctx` is NULL).
    frame: Option<&'a NodeFrame<'a>>,
    /// Where ORT's misaligned tensors are copied (ORT's own context only: a frame's buffers
    /// are rcpu's, aligned, and its outer tensors come through the outer context).
    staging: Option<&'a Staging>,
    _life: PhantomData<&'a mut OrtKernelContext>,
}

impl<'a> KernelContext<'a> {
    /// `staging` holds the aligned copies of misaligned tensors for the call; the caller runs
    /// its [`Staging::write_back`] after a successful compute.
    ///
    /// # Safety
    /// `ctx` must be the live context ORT passed to `Compute`, valid for `'a`.
    pub unsafe fn new(ctx: *mut OrtKernelContext, staging: &'a Staging) -> Self {
        KernelContext {
            ctx,
            inputs: Cell::new(None),
            frame: None,
            staging: Some(staging),
            _life: PhantomData,
        }
    }

    /// The context of a node inside a fused partition, reading the run's frame.
    pub(crate) fn from_frame(frame: &'a NodeFrame<'a>) -> Self {
        KernelContext {
            ctx: std::ptr::null_mut(),
            inputs: Cell::new(None),
            frame: Some(frame),
            staging: None,
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
        let t = unsafe { Tensor::from_value(v) }?;
        let (Some(staging), Some(bytes)) = (self.staging, t.misaligned_bytes()) else {
            return Ok(Some(t));
        };
        // SAFETY: the input's `bytes` bytes live for the call ('a, which the staging area
        // outlives); ORT may share the buffer with an output, which is how it is written.
        let copy = unsafe { staging.copy_of(t.data_addr() as *mut u8, bytes, false)? };
        // SAFETY: the copy holds the tensor's bytes, 64-byte aligned, owned by the staging area
        // (borrowed for 'a) and freed only with it; written only as the output that shares it.
        Ok(Some(unsafe { t.with_data(copy as *const c_void) }))
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
        let t = unsafe { TensorMut::from_value(v, shape) }?;
        let (Some(staging), Some(bytes)) = (self.staging, t.misaligned_bytes()) else {
            return Ok(t);
        };
        // SAFETY: ORT's output buffer of `bytes` bytes, writable and alive for the call ('a).
        let copy = unsafe { staging.copy_of(t.data_addr() as *mut u8, bytes, true)? };
        // SAFETY: the copy holds the output's bytes, 64-byte aligned, owned by the staging area
        // (borrowed for 'a); only this output (and an input sharing its buffer) reaches it.
        Ok(unsafe { t.with_data(copy as *mut c_void) })
    }
}

#[cfg(test)]
mod tests {
    use super::Staging;

    #[test]
    fn one_aligned_copy_per_buffer_and_outputs_written_back() {
        let mut raw = [0u8; 64 + 2 + 16];
        let at = (64 - raw.as_ptr() as usize % 64) % 64 + 2; // 2 bytes past a 64-byte boundary
        for (i, b) in raw[at..at + 16].iter_mut().enumerate() {
            *b = i as u8;
        }
        let orig = raw[at..].as_mut_ptr();
        let staging = Staging::new();
        // SAFETY: `orig` holds 16 writable bytes that outlive the staging area.
        let copy = unsafe { staging.copy_of(orig, 16, false) }.unwrap();
        assert_eq!(copy as usize % 64, 0, "the copy is aligned");
        // SAFETY: the copy holds 16 bytes, alive with `staging`.
        let seen = unsafe { std::slice::from_raw_parts(copy, 16) };
        assert_eq!(seen, &raw[at..at + 16]);
        // The same buffer asked for again, now as an output (a present sharing its past).
        // SAFETY: as above.
        let again = unsafe { staging.copy_of(orig, 16, true) }.unwrap();
        assert_eq!(again, copy, "one copy per buffer");
        // SAFETY: the copy is ours; nothing else reads it meanwhile.
        unsafe { copy.add(5).write(200) };
        // SAFETY: as above.
        let other = unsafe { staging.copy_of(orig, 8, false) }.unwrap();
        assert_ne!(other, copy, "another size is another tensor");
        assert_eq!(
            raw[at + 5],
            5,
            "ORT's buffer is untouched until the write-back"
        );
        staging.write_back();
        assert_eq!(raw[at + 5], 200);
        assert_eq!(raw[at + 6], 6);
    }

    #[test]
    fn inputs_are_not_written_back() {
        let mut raw = [7u8; 64 + 1 + 8];
        let at = (64 - raw.as_ptr() as usize % 64) % 64 + 1;
        let orig = raw[at..].as_mut_ptr();
        let staging = Staging::new();
        // SAFETY: `orig` holds 8 writable bytes that outlive the staging area.
        let copy = unsafe { staging.copy_of(orig, 8, false) }.unwrap();
        // SAFETY: the copy is ours.
        unsafe { copy.write(1) };
        staging.write_back();
        assert_eq!(raw[at], 7);
    }
}
