//! The `OrtEp` shell: vtable, casts and panic guards. Capability rules live in
//! `crate::ep::capability`, the fused partitions in `crate::ep::partition` (compiled by
//! `abi::fused`), configuration in `crate::ep::config`.

use std::collections::HashMap;
use std::ffi::{c_char, CString};

use super::api::api;
use super::ep_types::*;
use super::graph::{Graph, Node};
use super::kernel::Registry;
use super::log_bridge::Logger;
use super::status::{check_raw, guard, guard_value, Error, Result};
use super::tensor::elem_width;
use crate::ep::{capability, mixed, partition, EpInstance, EP_NAME};

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
        let nodes = graph.nodes()?;
        let mut claimed = vec![false; nodes.len()];
        // The ops of the heavy nodes this graph leaves to ORT (see `ep::mixed`).
        let mut heavy_left = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            if super::ep_context::is_own_context_node(node) {
                // A partition of a context model (`ep::context`): one fused node of its own.
                let opts = OrtNodeFusionOptions {
                    ort_version_supported: EP_ABI_VERSION,
                    drop_constant_initializers: true,
                };
                // SAFETY: info and node are live for this call; ORT copies the options.
                unsafe {
                    check_raw((ep.ep_graph_support_info_add_nodes_to_fuse)(
                        info, &node.raw, 1, &opts,
                    ))?
                };
                continue;
            }
            let mut kdef: *const OrtKernelDef = std::ptr::null();
            // SAFETY: info and node are live for this call.
            unsafe {
                check_raw((ep.ep_graph_support_info_look_up_kernel)(
                    info, node.raw, &mut kdef,
                ))?
            };
            claimed[i] = !kdef.is_null()
                && match capability::claim(node) {
                    Ok(()) => true,
                    Err(why) => {
                        log::info!(
                            "{EP_NAME}: leaving node '{}' ({}) to ORT: {why}",
                            node.name().unwrap_or_default(),
                            node.op_type().unwrap_or_default()
                        );
                        false
                    }
                };
            if !claimed[i] {
                let op = node.op_type().unwrap_or_default();
                if mixed::is_heavy(&op) {
                    heavy_left.push(op);
                }
            }
        }
        let groups = if shell.instance.config.fuse {
            fusion_groups(&nodes, &claimed)?
        } else {
            (0..nodes.len())
                .filter(|&i| claimed[i])
                .map(|i| vec![i])
                .collect()
        };
        for g in groups {
            let mut ops = Vec::with_capacity(g.len());
            for &i in &g {
                ops.push((nodes[i].domain()?, nodes[i].op_type()?));
            }
            if !capability::worth_taking(ops.iter().map(|(d, o)| (d.as_str(), o.as_str()))) {
                log::info!(
                    "{EP_NAME}: leaving {} node(s) to ORT: only Reshapes and Splits, which rcpu \
                     takes beside its other nodes only",
                    g.len()
                );
                continue;
            }
            if let [i] = g[..] {
                // SAFETY: info and node are live for this call.
                unsafe {
                    check_raw((ep.ep_graph_support_info_add_single_node)(
                        info,
                        nodes[i].raw,
                    ))?
                };
                continue;
            }
            let raw: Vec<*const OrtNode> = g.iter().map(|&i| nodes[i].raw).collect();
            let opts = OrtNodeFusionOptions {
                ort_version_supported: EP_ABI_VERSION,
                drop_constant_initializers: true,
            };
            // SAFETY: info live; `raw` holds g.len() live nodes of this graph; ORT copies what it
            // keeps of the options during the call.
            unsafe {
                check_raw((ep.ep_graph_support_info_add_nodes_to_fuse)(
                    info,
                    raw.as_ptr(),
                    raw.len(),
                    &opts,
                ))?
            };
        }
        if let Some(advice) = shell.instance.mixed.check(EP_NAME, &heavy_left) {
            log::info!("{advice}");
        }
        Ok(())
    })
}

/// The fused partitions of a graph's claimed nodes (`ep::partition`). A node stays a single
/// node when the fused frame could not hold one of its values: an output that is not a typed
/// tensor (the frame allocates by element type) or a constant input of an element type rcpu
/// cannot copy (the fused node does not get constants from ORT).
fn fusion_groups(nodes: &[Node<'_>], claimed: &[bool]) -> Result<Vec<Vec<usize>>> {
    let mut producer: HashMap<String, usize> = HashMap::new();
    let mut fusable = claimed.to_vec();
    for (i, n) in nodes.iter().enumerate() {
        for v in n.outputs()?.into_iter().flatten() {
            let t = v.tensor_type()?;
            if t.is_none_or(|t| elem_width(t.elem).is_none()) {
                fusable[i] = false;
            }
            producer.insert(v.name()?, i);
        }
        if fusable[i] {
            for v in n.inputs()?.into_iter().flatten() {
                if v.is_constant_initializer()
                    && v.tensor_type()?
                        .is_none_or(|t| elem_width(t.elem).is_none())
                {
                    fusable[i] = false;
                }
            }
        }
    }
    let mut preds = Vec::with_capacity(nodes.len());
    for n in nodes {
        let mut p = Vec::new();
        for v in n.inputs()?.into_iter().flatten() {
            if let Some(&i) = producer.get(&v.name()?) {
                p.push(i);
            }
        }
        preds.push(p);
    }
    let mut groups = partition::groups(&preds, &fusable);
    groups.extend(
        (0..nodes.len())
            .filter(|&i| claimed[i] && !fusable[i])
            .map(|i| vec![i]),
    );
    Ok(groups)
}

unsafe extern "C" fn compile(
    this: *mut OrtEp,
    graphs: *const *const OrtGraph,
    fused_nodes: *const *const OrtNode,
    count: usize,
    infos: *mut *mut OrtNodeComputeInfo,
    ep_context_nodes: *mut *mut OrtNode,
) -> StatusPtr {
    guard("Compile", || {
        // SAFETY: our EpShell, alive until ReleaseEp.
        let shell = unsafe { &*(this as *const EpShell) };
        let _route = shell.instance.logger.scope();
        let ce = super::fused::CompileEnv {
            env: &shell.instance.env,
            context: &shell.instance.context,
            context_files: &shell.instance.context_files,
        };
        // SAFETY: ORT's arguments for this call (see `fused::compile`).
        unsafe { super::fused::compile(&ce, graphs, fused_nodes, count, infos, ep_context_nodes) }
    })
}

unsafe extern "C" fn release_node_compute_infos(
    _this: *mut OrtEp,
    infos: *mut *mut OrtNodeComputeInfo,
    n: usize,
) {
    // SAFETY: ORT hands back the infos `compile` made, each once.
    unsafe { super::fused::release(infos, n) }
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
            compile: Some(compile),
            release_node_compute_infos: Some(release_node_compute_infos),
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
