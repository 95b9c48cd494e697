//! The `OrtKernelImpl` shell around an [`OpKernel`] and the kernel-registry builder.

use std::ffi::{c_void, CString};
use std::sync::Arc;

use super::api::api;
use super::ep_types::*;
use super::kernel_context::{KernelContext, Staging};
use super::kernel_info::KernelInfo;
use super::status::{check_raw, guard, guard_node, Error, Result};
use super::tensor::Tensor;
use crate::ep::op::{KernelEnv, OpDef, OpKernel};

/// The create-callback state of one registered kernel: its definition and the EP's environment.
pub struct CreateState {
    pub def: &'static OpDef,
    pub env: Arc<KernelEnv>,
}

/// `OrtKernelImpl` first (so a `*mut OrtKernelImpl` is a `*mut KernelShell`), then our state.
#[repr(C)]
struct KernelShell {
    base: OrtKernelImpl,
    kernel: Box<dyn OpKernel>,
    /// "Op node 'name'" for error messages.
    label: String,
}

unsafe extern "C" fn kernel_compute(
    this: *mut OrtKernelImpl,
    ctx: *mut OrtKernelContext,
) -> StatusPtr {
    // SAFETY: `this` was created by `create_kernel` as a KernelShell and is alive until Release
    // (reading it cannot panic; the label is needed to name the node in a panic's message).
    let shell = unsafe { &*(this as *const KernelShell) };
    guard_node("Compute", &shell.label, || {
        // SAFETY: ctx is the live context ORT passes for this call; the scope (which lets
        // `OrtPoolPar` reach ORT's pool through it) ends before this call returns.
        let _scope = unsafe { super::ort_pool::ComputeScope::enter(ctx) };
        let staging = Staging::new();
        // SAFETY: as above.
        let ctx = unsafe { KernelContext::new(ctx, &staging) };
        // The ledger records the lanes this call's dispatches used: count from here.
        crate::runtime::par::take_lanes_used();
        shell.kernel.compute(&ctx)?;
        staging.write_back();
        Ok(())
    })
}

unsafe extern "C" fn kernel_release(this: *mut OrtKernelImpl) {
    super::status::guard_value("Release", (), || {
        if !this.is_null() {
            // SAFETY: created by Box::into_raw in create_kernel; ORT releases exactly once.
            drop(unsafe { Box::from_raw(this as *mut KernelShell) });
        }
    })
}

unsafe extern "C" fn kernel_prepack(
    this: *mut OrtKernelImpl,
    tensor: *const OrtValue,
    input_index: i32,
    _allocator: *mut OrtAllocator,
    _cache: *mut OrtSharedPrePackedWeightCache,
    is_packed: *mut bool,
) -> StatusPtr {
    // SAFETY: `this` is our live KernelShell; ORT does not run Compute concurrently with
    // prepack. Only the label is read here (to name the node in errors and panics).
    let label = unsafe { &(*(this as *const KernelShell)).label };
    guard_node("PrePackWeight", label, || {
        if is_packed.is_null() {
            return Err(Error::invalid_argument("PrePackWeight: NULL is_packed"));
        }
        // SAFETY: non-NULL out-pointer from ORT.
        unsafe { *is_packed = false };
        // SAFETY: as above; the only reference into the shell used from here on.
        let kernel = unsafe { &mut (*(this as *mut KernelShell)).kernel };
        // SAFETY: ORT keeps the weight alive during this call; we never keep the pointer.
        let t = unsafe { Tensor::from_value(tensor) }?;
        let idx = usize::try_from(input_index)
            .map_err(|_| Error::invalid_argument("negative input index"))?;
        let packed = kernel.prepack(idx, &t)?;
        if packed {
            // The pages packing read need not stay resident until ORT releases the weight at
            // the end of session creation (see `fused::page_out`); their contents stay.
            if let Ok(b) = t.all_bytes() {
                let _ = crate::os::advise_page_out(b);
            }
        }
        // SAFETY: as above.
        unsafe { *is_packed = packed };
        Ok(())
    })
}

unsafe extern "C" fn kernel_set_shared(
    _this: *mut OrtKernelImpl,
    _bufs: *const *const c_void,
    _sizes: *const usize,
    _n: usize,
    _input_index: i32,
) -> StatusPtr {
    // rcpu never stores into ORT's shared prepacked-weight cache (it shares packed weights
    // through its own governed cache), so ORT has nothing to hand back.
    guard("SetSharedPrePackedWeight", || {
        Err(Error::not_implemented(
            "rcpu does not use ORT's shared prepacked-weight cache",
        ))
    })
}

/// `OrtKernelCreateFunc` for every rcpu kernel: `state` is a `CreateState`.
unsafe extern "C" fn create_kernel(
    state: *mut c_void,
    info: *const OrtKernelInfo,
    out: *mut *mut OrtKernelImpl,
) -> StatusPtr {
    guard("CreateKernel", || {
        if out.is_null() || state.is_null() || info.is_null() {
            return Err(Error::invalid_argument("CreateKernel: NULL argument"));
        }
        // SAFETY: non-NULL out-pointer.
        unsafe { *out = std::ptr::null_mut() };
        // SAFETY: state is the CreateState registered with this kernel; the EP owns it and
        // outlives kernel creation.
        let st = unsafe { &*(state as *const CreateState) };
        // SAFETY: info valid during this callback.
        let info = unsafe { KernelInfo::new(info) };
        let label = format!("{} node '{}'", st.def.op, info.node_name());
        let kernel = (st.def.create)(&info, &st.env).map_err(|e| e.context(&label))?;
        let shell = Box::new(KernelShell {
            base: OrtKernelImpl {
                ort_version_supported: EP_ABI_VERSION,
                flags: 0,
                compute: Some(kernel_compute),
                release: Some(kernel_release),
                pre_pack_weight: Some(kernel_prepack),
                set_shared_pre_packed_weight: Some(kernel_set_shared),
            },
            kernel,
            label,
        });
        // SAFETY: non-NULL out-pointer; ORT owns the kernel now and calls Release.
        unsafe { *out = Box::into_raw(shell) as *mut OrtKernelImpl };
        Ok(())
    })
}

/// An ORT kernel registry holding rcpu's kernels for one EP, with the create states it points to.
pub struct Registry {
    raw: *mut OrtKernelRegistry,
    /// Boxed so each state's address stays fixed while the Vec grows: ORT holds the pointers.
    #[allow(clippy::vec_box)]
    _states: Vec<Box<CreateState>>,
}

// SAFETY: the registry is immutable after construction and only read by ORT.
unsafe impl Send for Registry {}
// SAFETY: as above.
unsafe impl Sync for Registry {}

impl Registry {
    pub fn raw(&self) -> *const OrtKernelRegistry {
        self.raw
    }

    /// Builds the registry for `ep_name` from `defs`.
    pub fn build(ep_name: &str, defs: &'static [OpDef], env: &Arc<KernelEnv>) -> Result<Registry> {
        let ep = api().ep;
        let mut raw: *mut OrtKernelRegistry = std::ptr::null_mut();
        // SAFETY: out-pointer live; released in Drop.
        unsafe { check_raw((ep.create_kernel_registry)(&mut raw))? };
        let mut reg = Registry {
            raw,
            _states: Vec::new(),
        };
        let ep_c = CString::new(ep_name).map_err(|_| Error::fail("bad EP name"))?;
        for def in defs {
            let state = Box::new(CreateState {
                def,
                env: env.clone(),
            });
            let kdef = build_def(def, &ep_c)?;
            let sp = &*state as *const CreateState as *mut c_void;
            // SAFETY: registry and def valid; state lives as long as the registry (boxed, owned).
            let r = unsafe {
                check_raw((ep.kernel_registry_add_kernel)(
                    reg.raw,
                    kdef,
                    create_kernel,
                    sp,
                ))
            };
            // SAFETY: the registry copied what it needs from the def.
            unsafe { (ep.release_kernel_def)(kdef) };
            r?;
            reg._states.push(state);
        }
        Ok(reg)
    }
}

fn build_def(def: &OpDef, ep_name: &CString) -> Result<*mut OrtKernelDef> {
    let ep = api().ep;
    let mut b: *mut OrtKernelDefBuilder = std::ptr::null_mut();
    // SAFETY: out-pointer live; builder released below.
    unsafe { check_raw((ep.create_kernel_def_builder)(&mut b))? };
    let r = (|| -> Result<*mut OrtKernelDef> {
        let op = CString::new(def.op).map_err(|_| Error::fail("bad op"))?;
        let dom = CString::new(def.domain).map_err(|_| Error::fail("bad domain"))?;
        // SAFETY: builder valid; strings NUL-terminated and live for the calls (ORT copies them).
        unsafe {
            check_raw((ep.kernel_def_builder_set_operator_type)(b, op.as_ptr()))?;
            check_raw((ep.kernel_def_builder_set_domain)(b, dom.as_ptr()))?;
            check_raw((ep.kernel_def_builder_set_since_version)(
                b, def.since, def.until,
            ))?;
            check_raw((ep.kernel_def_builder_set_execution_provider)(
                b,
                ep_name.as_ptr(),
            ))?;
        }
        for (name, elems) in def.types {
            let mut dts = Vec::with_capacity(elems.len());
            for &e in elems.iter() {
                let mut dt: *const OrtDataType = std::ptr::null();
                // SAFETY: out-pointer live; data types are static ORT singletons.
                unsafe { check_raw((ep.get_tensor_data_type)(e, &mut dt))? };
                dts.push(dt);
            }
            let n = CString::new(*name).map_err(|_| Error::fail("bad type name"))?;
            // SAFETY: builder valid; arrays live for the call.
            unsafe {
                check_raw((ep.kernel_def_builder_add_type_constraint)(
                    b,
                    n.as_ptr(),
                    dts.as_ptr(),
                    dts.len(),
                ))?
            };
        }
        let mut d: *mut OrtKernelDef = std::ptr::null_mut();
        // SAFETY: builder valid; out-pointer live.
        unsafe { check_raw((ep.kernel_def_builder_build)(b, &mut d))? };
        Ok(d)
    })();
    // SAFETY: created above, released once.
    unsafe { (ep.release_kernel_def_builder)(b) };
    r
}

impl Drop for Registry {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: created in build, released once; ORT no longer uses it (EP released).
            unsafe { (api().ep.release_kernel_registry)(self.raw) };
        }
    }
}
