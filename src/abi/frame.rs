//! The fused path's value frame: where the nodes of one fused partition find their inputs and
//! put their outputs during one run (`abi::fused` drives it).
//!
//! Every value of the partition is a slot, wired at `Compile`: an input of the fused node (read
//! through ORT's context), a constant initializer (rcpu's own copy, or nothing when every kernel
//! that reads it prepacked it), or the output of an inner node. An inner output that is also an
//! output of the fused node is allocated by ORT (`KernelContext_GetOutput` of the fused node);
//! every other one lives in a buffer the frame owns. A buffer goes back to the frame's pool after
//! the value's last reader ran and is reused (smallest that fits) by later values and later runs,
//! so a steady run allocates nothing. Between runs the pool keeps only what the process-wide
//! scratch budget allows (`memory::ValuePool`): a long prompt's large buffers are freed after its
//! run when they do not fit. A frame serves one run at a time: concurrent runs each take
//! their own (`Frame` is pooled per partition by `abi::fused`).

use std::cell::{RefCell, UnsafeCell};
use std::ffi::c_void;

use super::kernel_context::KernelContext;
use super::status::{Error, Result};
use super::tensor::{elem_name, elem_width, ElemType, Tensor, TensorMut};
use crate::memory::{AlignedBuf, ConstantBytes, GovernorRef, ValuePool};

/// Where a slot's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotSrc {
    /// Input `k` of the fused node.
    Outer(usize),
    /// Constant `k` of [`Slots::consts`].
    Const(usize),
    /// Written by an inner node; `outer`: output `o` of the fused node (ORT allocates it).
    Inner {
        elem: ElemType,
        outer: Option<usize>,
    },
}

/// rcpu's copy of a constant initializer; `data` is `None` when every kernel reading it
/// prepacked it (no copy is kept, and a read is an error).
pub(crate) struct OwnedConst {
    pub(crate) name: String,
    pub(crate) elem: ElemType,
    pub(crate) shape: Vec<usize>,
    pub(crate) data: Option<ConstantBytes>,
}

/// The slots of one partition: their sources, names (for errors) and the constants.
pub(crate) struct Slots {
    pub(crate) src: Vec<SlotSrc>,
    pub(crate) names: Vec<String>,
    pub(crate) consts: Vec<OwnedConst>,
}

/// One inner node's wiring: its input and output slots (`None`: omitted) and the slots whose
/// last reader it is (their buffers return to the pool after it ran).
pub(crate) struct Wiring {
    pub(crate) inputs: Vec<Option<usize>>,
    pub(crate) outputs: Vec<Option<usize>>,
    pub(crate) release: Vec<usize>,
}

/// A value written during the current run.
struct Val {
    set: bool,
    data: *mut u8,
    elem: ElemType,
    shape: Vec<usize>,
    /// The frame-owned buffer holding it (`None` for a fused output ORT allocated).
    buf: Option<AlignedBuf<u8>>,
}

impl Val {
    fn empty() -> Val {
        Val {
            set: false,
            data: std::ptr::null_mut(),
            elem: ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED,
            shape: Vec::new(),
            buf: None,
        }
    }
}

/// The values of one run of one partition.
pub(crate) struct Frame {
    vals: Vec<UnsafeCell<Val>>,
    pool: RefCell<ValuePool>,
}

// SAFETY: the raw pointers in `Val` point into the frame's own buffers or into ORT outputs of the
// run that set them; they are only dereferenced during that run, on the thread running it (a
// frame is taken out of the partition's pool for the run), and reset before the next one.
unsafe impl Send for Frame {}

impl Frame {
    /// An empty frame for `n` slots, keeping buffers between runs against `gov`.
    pub(crate) fn new(n: usize, gov: GovernorRef) -> Result<Frame> {
        let mut vals = Vec::new();
        vals.try_reserve_exact(n)
            .map_err(|_| Error::fail(format!("cannot allocate a frame of {n} values")))?;
        vals.extend((0..n).map(|_| UnsafeCell::new(Val::empty())));
        Ok(Frame {
            vals,
            pool: RefCell::new(ValuePool::new(gov)),
        })
    }

    /// Returns slot `s`'s buffer to the pool and forgets its value.
    pub(crate) fn release(&mut self, s: usize) {
        if let Some(cell) = self.vals.get_mut(s) {
            let v = cell.get_mut();
            v.set = false;
            v.data = std::ptr::null_mut();
            if let Some(b) = v.buf.take() {
                self.pool.get_mut().put(b);
            }
        }
    }

    /// Whether slot `from` holds a value in a frame buffer and slot `to` none yet: what
    /// [`Frame::hand_over`] needs.
    pub(crate) fn can_hand_over(&mut self, from: usize, to: usize) -> bool {
        if from == to || to >= self.vals.len() {
            return false;
        }
        let unset = !self.vals[to].get_mut().set;
        match self.vals.get_mut(from) {
            Some(c) => {
                let src = c.get_mut();
                unset && src.set && src.buf.is_some()
            }
            None => false,
        }
    }

    /// Gives slot `from`'s value (its frame buffer) to slot `to` under `dims` (a view: the same
    /// elements, `OpKernel::view_dims`) and forgets `from`. The caller checked
    /// [`Frame::can_hand_over`], that both are frame-owned inner values of one element type and
    /// that no later step reads `from`; `dims` must not need more bytes than the buffer holds.
    pub(crate) fn hand_over(&mut self, from: usize, to: usize, dims: &[usize]) -> Result<()> {
        if from == to || from >= self.vals.len() || to >= self.vals.len() {
            return Err(Error::fail("view of a value slot out of range"));
        }
        let (src, dst) = if from < to {
            let (a, b) = self.vals.split_at_mut(to);
            (a[from].get_mut(), b[0].get_mut())
        } else {
            let (a, b) = self.vals.split_at_mut(from);
            (b[0].get_mut(), a[to].get_mut())
        };
        let bytes = elem_width(src.elem)
            .and_then(|w| dims.iter().try_fold(w, |acc, &d| acc.checked_mul(d)));
        let fits = match (&src.buf, bytes) {
            (Some(b), Some(n)) => src.set && !dst.set && n <= b.as_slice().len(),
            _ => false,
        };
        if !fits {
            return Err(Error::fail(format!(
                "a view of shape {dims:?} does not fit its value"
            )));
        }
        dst.shape.clear();
        dst.shape
            .try_reserve(dims.len())
            .map_err(|_| Error::fail("cannot allocate an output shape"))?;
        dst.shape.extend_from_slice(dims);
        dst.buf = src.buf.take();
        dst.data = src.data;
        dst.elem = src.elem;
        dst.set = true;
        src.set = false;
        src.data = std::ptr::null_mut();
        Ok(())
    }

    /// Ends a run: every value forgotten, every buffer back in the pool, which keeps what the
    /// budget allows.
    pub(crate) fn reset(&mut self) {
        for s in 0..self.vals.len() {
            self.release(s);
        }
        self.pool.get_mut().settle();
    }

    /// The smallest pooled buffer of at least `bytes`, else a new one (fallible).
    fn take_buf(&self, bytes: usize, what: &dyn Fn() -> String) -> Result<AlignedBuf<u8>> {
        self.pool.borrow_mut().take(bytes).map_err(|e| {
            Error::fail(format!(
                "cannot allocate {bytes} bytes for intermediate value {}: {e}",
                what()
            ))
        })
    }
}

/// One inner node's view of the frame for the duration of its `compute` (what
/// [`KernelContext`] reads on the fused path).
pub(crate) struct NodeFrame<'a> {
    pub(crate) frame: &'a Frame,
    pub(crate) slots: &'a Slots,
    pub(crate) wiring: &'a Wiring,
    /// The fused node's own context (ORT's).
    pub(crate) outer: &'a KernelContext<'a>,
}

impl<'a> NodeFrame<'a> {
    pub(crate) fn input_count(&self) -> usize {
        self.wiring.inputs.len()
    }

    pub(crate) fn output_count(&self) -> usize {
        self.wiring.outputs.len()
    }

    fn name(&self, s: usize) -> &str {
        self.slots.names.get(s).map_or("?", String::as_str)
    }

    pub(crate) fn input(&self, i: usize) -> Result<Option<Tensor<'a>>> {
        let Some(&Some(s)) = self.wiring.inputs.get(i) else {
            return Ok(None);
        };
        match self.slots.src.get(s) {
            Some(&SlotSrc::Outer(k)) => self.outer.input(k),
            Some(&SlotSrc::Const(k)) => {
                let c = self
                    .slots
                    .consts
                    .get(k)
                    .ok_or_else(|| Error::fail("constant slot out of range"))?;
                let Some(buf) = &c.data else {
                    return Err(Error::fail(format!(
                        "input {i} ('{}') was prepacked and is not kept",
                        c.name
                    )));
                };
                let data = buf.as_slice().as_ptr() as *const c_void;
                // SAFETY: the copy (or the view of the mapped context file) holds the constant's
                // bytes (element count of `shape` times the element width, checked when it was
                // made), 64-byte aligned, owned by the partition (a view keeps its mapping) and
                // never written after Compile; it outlives every run ('a).
                Ok(Some(unsafe { Tensor::from_parts(data, c.elem, &c.shape) }))
            }
            Some(&SlotSrc::Inner { .. }) => {
                let cell = self
                    .frame
                    .vals
                    .get(s)
                    .ok_or_else(|| Error::fail("value slot out of range"))?;
                // SAFETY: a slot is written only by its producer's `output` call, which ran
                // before this node (the partition runs in topological order) and cannot run
                // again in this run (`set` refuses a second write); so nothing writes this
                // slot while the shared borrow lives ('a, this node's compute).
                let v = unsafe { &*cell.get() };
                if !v.set {
                    return Err(Error::fail(format!(
                        "input {i} ('{}') was not produced by its node",
                        self.name(s)
                    )));
                }
                // SAFETY: `data` holds `shape`'s element count of `elem`: a frame buffer sized
                // for it (and not reused before the value's last reader ran) or the ORT output
                // of this run; 64-byte aligned (frame) or ORT-aligned; unwritten from here on.
                Ok(Some(unsafe {
                    Tensor::from_parts(v.data as *const c_void, v.elem, &v.shape)
                }))
            }
            None => Err(Error::fail("value slot out of range")),
        }
    }

    /// Whether output `i` is wired to a value (false: omitted in the model).
    pub(crate) fn output_present(&self, i: usize) -> bool {
        matches!(self.wiring.outputs.get(i), Some(Some(_)))
    }

    pub(crate) fn output(&self, i: usize, shape: &[usize]) -> Result<TensorMut<'a>> {
        let Some(&Some(s)) = self.wiring.outputs.get(i) else {
            return Err(Error::fail(format!("no buffer for output {i}")));
        };
        let Some(&SlotSrc::Inner { elem, outer }) = self.slots.src.get(s) else {
            return Err(Error::fail(format!("output {i} is not an inner value")));
        };
        let cell = self
            .frame
            .vals
            .get(s)
            .ok_or_else(|| Error::fail("value slot out of range"))?;
        // SAFETY: this node is the slot's only producer; readers run after it, and `set`
        // below refuses a second `output` call for the slot, so no other reference to it exists
        // while this exclusive one lives (until the end of this function).
        let v = unsafe { &mut *cell.get() };
        if v.set {
            return Err(Error::fail(format!("output {i} was requested twice")));
        }
        if let Some(o) = outer {
            let t = self.outer.output(o, shape)?;
            v.data = t.data_addr() as *mut u8;
            v.elem = t.elem();
        } else {
            let width = elem_width(elem).ok_or_else(|| {
                Error::fail(format!(
                    "output {i} has unsupported element type {}",
                    elem_name(elem)
                ))
            })?;
            let bytes = shape
                .iter()
                .try_fold(width, |acc, &d| acc.checked_mul(d))
                .filter(|&b| b <= isize::MAX as usize)
                .ok_or_else(|| {
                    Error::invalid_argument(format!("output {i} of shape {shape:?} is too large"))
                })?;
            let mut buf = self
                .frame
                .take_buf(bytes, &|| format!("'{}'", self.name(s)))?;
            v.data = buf.as_mut_slice().as_mut_ptr();
            v.elem = elem;
            v.buf = Some(buf);
        }
        v.shape.clear();
        v.shape
            .try_reserve(shape.len())
            .map_err(|_| Error::fail("cannot allocate an output shape"))?;
        v.shape.extend_from_slice(shape);
        v.set = true;
        // SAFETY: `data` holds `shape`'s element count of `elem` (sized above, or allocated so
        // by ORT), aligned, and only this node writes it during its compute; readers come
        // later. The shape borrow lives in the slot, which is not touched again this run.
        let shape_ref: &'a [usize] = unsafe { &*(v.shape.as_slice() as *const [usize]) };
        // SAFETY: as above.
        Ok(unsafe { TensorMut::from_parts(v.data as *mut c_void, v.elem, shape_ref) })
    }
}
