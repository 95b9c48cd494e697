//! Pins the size and every field offset of rcpu's own EP-ABI declarations (x86-64 / LP64).
//! A field added, dropped or reordered moves an offset and fails here before ORT sees it.

use std::mem::{offset_of, size_of};

use rcpu::abi::ep_types::*;

const P: usize = 8; // pointer size

#[test]
fn ep_factory_layout() {
    assert_eq!(offset_of!(OrtEpFactory, ort_version_supported), 0);
    let fields = [
        offset_of!(OrtEpFactory, get_name),
        offset_of!(OrtEpFactory, get_vendor),
        offset_of!(OrtEpFactory, get_supported_devices),
        offset_of!(OrtEpFactory, create_ep),
        offset_of!(OrtEpFactory, release_ep),
        offset_of!(OrtEpFactory, get_vendor_id),
        offset_of!(OrtEpFactory, get_version),
        offset_of!(OrtEpFactory, validate_compiled_model_compatibility_info),
        offset_of!(OrtEpFactory, create_allocator),
        offset_of!(OrtEpFactory, release_allocator),
        offset_of!(OrtEpFactory, create_data_transfer),
        offset_of!(OrtEpFactory, is_stream_aware),
        offset_of!(OrtEpFactory, create_sync_stream_for_device),
        offset_of!(OrtEpFactory, get_hardware_device_incompatibility_details),
        offset_of!(OrtEpFactory, create_external_resource_importer_for_device),
        offset_of!(OrtEpFactory, get_num_custom_op_domains),
        offset_of!(OrtEpFactory, get_custom_op_domains),
    ];
    for (i, off) in fields.iter().enumerate() {
        assert_eq!(*off, P * (i + 1), "OrtEpFactory field {}", i + 1);
    }
    assert_eq!(size_of::<OrtEpFactory>(), P * 18);
}

#[test]
fn ep_layout() {
    assert_eq!(offset_of!(OrtEp, ort_version_supported), 0);
    let fields = [
        offset_of!(OrtEp, get_name),
        offset_of!(OrtEp, get_capability),
        offset_of!(OrtEp, compile),
        offset_of!(OrtEp, release_node_compute_infos),
        offset_of!(OrtEp, get_preferred_data_layout),
        offset_of!(OrtEp, should_convert_data_layout_for_op),
        offset_of!(OrtEp, set_dynamic_options),
        offset_of!(OrtEp, on_run_start),
        offset_of!(OrtEp, on_run_end),
        offset_of!(OrtEp, create_allocator),
        offset_of!(OrtEp, create_sync_stream_for_device),
        offset_of!(OrtEp, get_compiled_model_compatibility_info),
        offset_of!(OrtEp, get_kernel_registry),
        offset_of!(OrtEp, is_concurrent_run_supported),
    ];
    for (i, off) in fields.iter().enumerate() {
        assert_eq!(*off, P * (i + 1), "OrtEp field {}", i + 1);
    }
    assert_eq!(size_of::<OrtEp>(), P * 15);
}

/// The structs of the fused path (`OrtEp::Compile`): 1.23 layouts.
#[test]
fn node_compute_info_and_fusion_options_layout() {
    assert_eq!(offset_of!(OrtNodeComputeInfo, ort_version_supported), 0);
    assert_eq!(offset_of!(OrtNodeComputeInfo, create_state), P);
    assert_eq!(offset_of!(OrtNodeComputeInfo, compute), 2 * P);
    assert_eq!(offset_of!(OrtNodeComputeInfo, release_state), 3 * P);
    assert_eq!(size_of::<OrtNodeComputeInfo>(), 4 * P);
    assert_eq!(offset_of!(OrtNodeFusionOptions, ort_version_supported), 0);
    assert_eq!(
        offset_of!(OrtNodeFusionOptions, drop_constant_initializers),
        4
    );
    assert_eq!(size_of::<OrtNodeFusionOptions>(), 8);
}

#[test]
fn kernel_impl_layout() {
    assert_eq!(offset_of!(OrtKernelImpl, ort_version_supported), 0);
    assert_eq!(offset_of!(OrtKernelImpl, flags), 4);
    assert_eq!(offset_of!(OrtKernelImpl, compute), 8);
    assert_eq!(offset_of!(OrtKernelImpl, release), 16);
    assert_eq!(offset_of!(OrtKernelImpl, pre_pack_weight), 24);
    assert_eq!(offset_of!(OrtKernelImpl, set_shared_pre_packed_weight), 32);
    assert_eq!(size_of::<OrtKernelImpl>(), 40);
}

#[test]
fn ep_api_table_indices() {
    let idx = |off: usize| off / P;
    assert_eq!(idx(offset_of!(OrtEpApi, create_ep_device)), 0);
    assert_eq!(idx(offset_of!(OrtEpApi, release_ep_device)), 1);
    assert_eq!(
        idx(offset_of!(
            OrtEpApi,
            ep_graph_support_info_add_nodes_to_fuse
        )),
        2
    );
    assert_eq!(
        idx(offset_of!(OrtEpApi, ep_graph_support_info_add_single_node)),
        3
    );
    assert_eq!(idx(offset_of!(OrtEpApi, create_kernel_registry)), 18);
    assert_eq!(idx(offset_of!(OrtEpApi, release_kernel_registry)), 19);
    assert_eq!(idx(offset_of!(OrtEpApi, kernel_registry_add_kernel)), 20);
    assert_eq!(idx(offset_of!(OrtEpApi, create_kernel_def_builder)), 21);
    assert_eq!(idx(offset_of!(OrtEpApi, release_kernel_def_builder)), 22);
    assert_eq!(
        idx(offset_of!(OrtEpApi, kernel_def_builder_set_operator_type)),
        23
    );
    assert_eq!(idx(offset_of!(OrtEpApi, kernel_def_builder_set_domain)), 24);
    assert_eq!(
        idx(offset_of!(OrtEpApi, kernel_def_builder_set_since_version)),
        25
    );
    assert_eq!(
        idx(offset_of!(
            OrtEpApi,
            kernel_def_builder_set_execution_provider
        )),
        26
    );
    assert_eq!(
        idx(offset_of!(OrtEpApi, kernel_def_builder_add_type_constraint)),
        29
    );
    assert_eq!(idx(offset_of!(OrtEpApi, kernel_def_builder_build)), 32);
    assert_eq!(idx(offset_of!(OrtEpApi, release_kernel_def)), 33);
    assert_eq!(idx(offset_of!(OrtEpApi, get_tensor_data_type)), 40);
    assert_eq!(
        idx(offset_of!(OrtEpApi, ep_graph_support_info_look_up_kernel)),
        41
    );
    assert_eq!(idx(offset_of!(OrtEpApi, kernel_info_get_ep)), 43);
    assert_eq!(size_of::<OrtEpApi>(), P * 50);
}

#[test]
fn reported_version_is_the_declared_layout() {
    // Fields up to is_concurrent_run_supported / get_custom_op_domains / the kernel prepack
    // members are 1.24 additions: reporting anything newer would let ORT read past our structs.
    assert_eq!(EP_ABI_VERSION, 24);
}
