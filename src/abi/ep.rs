//! The `OrtEp` shell: vtable, casts and panic guards. Capability rules live in
//! `crate::ep::capability`, configuration in `crate::ep::config`.

use std::ffi::{c_char, CString};

use super::api::api;
use super::ep_types::*;
use super::graph::Graph;
use super::kernel::Registry;
use super::log_bridge::Logger;
use super::status::{check_raw, guard, guard_value, Error, Result};
use crate::ep::{capability, mixed, EpInstance, EP_NAME};

/// `OrtEp` first so a `*mut OrtEp` from ORT is a `*mut EpShell`.
#[repr(C)]
struct EpShell {
    base: OrtEp,
    name: CString,
    instance: EpInstance,
    registry: Registry,
}

unsafe extern "C" fn get_name(this: *const OrtEp) -> *const c_char {
    guard_value("Ep::GetName", std::ptr::null(), || {
        // SAFETY: `this` is our EpShell, alive until ReleaseEp.
        unsafe { &*(this as *const EpShell) }.name.as_ptr()
    })
}

unsafe extern "C" fn get_capability(
    this: *mut OrtEp,
    graph: *const OrtGraph,
    info: *mut OrtEpGraphSupportInfo,
) -> StatusPtr {
    guard("GetCapability", || {
        // SAFETY: our EpShell.
        let shell = unsafe { &*(this as *const EpShell) };
        let _route = shell.instance.logger.scope();
        // SAFETY: graph valid for this call.
        let graph = unsafe { Graph::new(graph) };
        let ep = api().ep;
        // The ops of the heavy nodes this graph leaves to ORT (see `ep::mixed`).
        let mut heavy_left = Vec::new();
        for node in graph.nodes()? {
            let mut kdef: *const OrtKernelDef = std::ptr::null();
            // SAFETY: info and node are live for this call.
            unsafe {
                check_raw((ep.ep_graph_support_info_look_up_kernel)(
                    info, node.raw, &mut kdef,
                ))?
            };
            let claimed = !kdef.is_null()
                && match capability::claim(&node) {
                    Ok(()) => {
                        // SAFETY: as above.
                        unsafe {
                            check_raw((ep.ep_graph_support_info_add_single_node)(info, node.raw))?
                        };
                        true
                    }
                    Err(why) => {
                        log::info!(
                            "{EP_NAME}: leaving node '{}' ({}) to ORT: {why}",
                            node.name().unwrap_or_default(),
                            node.op_type().unwrap_or_default()
                        );
                        false
                    }
                };
            if !claimed {
                let op = node.op_type().unwrap_or_default();
                if mixed::is_heavy(&op) {
                    heavy_left.push(op);
                }
            }
        }
        if let Some(advice) = shell.instance.mixed.check(EP_NAME, &heavy_left) {
            log::info!("{advice}");
        }
        Ok(())
    })
}

unsafe extern "C" fn get_kernel_registry(
    this: *mut OrtEp,
    out: *mut *const OrtKernelRegistry,
) -> StatusPtr {
    guard("GetKernelRegistry", || {
        if out.is_null() {
            return Err(Error::invalid_argument("GetKernelRegistry: NULL out"));
        }
        // SAFETY: our EpShell; out non-NULL. The registry lives as long as the EP.
        unsafe { *out = (*(this as *const EpShell)).registry.raw() };
        Ok(())
    })
}

unsafe extern "C" fn is_concurrent_run_supported(_this: *mut OrtEp, out: *mut bool) -> StatusPtr {
    guard("IsConcurrentRunSupported", || {
        if out.is_null() {
            return Err(Error::invalid_argument(
                "IsConcurrentRunSupported: NULL out",
            ));
        }
        // SAFETY: non-NULL out-pointer. Every rcpu kernel's compute is thread-safe.
        unsafe { *out = true };
        Ok(())
    })
}

/// Creates an EP from the session's config entries.
pub(crate) fn create(entries: Vec<(String, String)>, logger: Logger) -> Result<*mut OrtEp> {
    let instance = EpInstance::new(&entries, logger)?;
    let registry = Registry::build(EP_NAME, crate::ep::ops::OPS, &instance.env)?;
    let shell = Box::new(EpShell {
        base: OrtEp {
            ort_version_supported: EP_ABI_VERSION,
            get_name: Some(get_name),
            get_capability: Some(get_capability),
            compile: None,
            release_node_compute_infos: None,
            get_preferred_data_layout: None,
            should_convert_data_layout_for_op: None,
            set_dynamic_options: None,
            on_run_start: None,
            on_run_end: None,
            create_allocator: None,
            create_sync_stream_for_device: None,
            get_compiled_model_compatibility_info: None,
            get_kernel_registry: Some(get_kernel_registry),
            is_concurrent_run_supported: Some(is_concurrent_run_supported),
        },
        name: CString::new(EP_NAME).expect("static name"),
        instance,
        registry,
    });
    Ok(Box::into_raw(shell) as *mut OrtEp)
}

/// Releases an EP created by [`create`].
///
/// # Safety
/// `ep` must come from [`create`] and be released once.
pub(crate) unsafe fn release(ep: *mut OrtEp) {
    if !ep.is_null() {
        // SAFETY: created by Box::into_raw in create.
        drop(unsafe { Box::from_raw(ep as *mut EpShell) });
    }
}
