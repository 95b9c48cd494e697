//! rcpu's own `#[repr(C)]` declarations of ORT's plugin-EP ABI (the structs an EP implements and
//! the read-only `OrtEpApi` table), written from the facts in `docs/ort-plugin-abi.md`.
//!
//! Layouts are those of ORT API version [`EP_ABI_VERSION`]: that is the `ort_version_supported`
//! rcpu reports, so ORT never reads a member past the ones declared here. `tests/abi/abi_layout.rs`
//! pins every size and field offset.

use std::ffi::{c_char, c_void};

pub use ort_sys::{
    OrtAllocator, OrtApi, OrtApiBase, OrtEpDevice, OrtGraph, OrtHardwareDevice, OrtKernelContext,
    OrtKernelInfo, OrtKeyValuePairs, OrtLogger, OrtMemoryInfo, OrtNode, OrtOpAttr,
    OrtSessionOptions, OrtStatus, OrtSyncStream, OrtValue, OrtValueInfo,
};

/// The ORT API version whose layouts this file declares (1.24: the first kernel-registry release).
pub const EP_ABI_VERSION: u32 = 24;

/// Status pointer as returned over the C ABI (NULL = success).
pub type StatusPtr = *mut OrtStatus;

macro_rules! opaque {
    ($($name:ident),* $(,)?) => {$(
        /// Opaque ORT type, only ever handled by pointer.
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
        }
    )*};
}
opaque!(
    OrtEpGraphSupportInfo,
    OrtKernelRegistry,
    OrtKernelDefBuilder,
    OrtKernelDef,
    OrtDataType,
    OrtMemoryDevice,
    OrtNodeComputeContext,
    OrtSharedPrePackedWeightCache,
    OrtDataTransferImpl,
    OrtSyncStreamImpl,
    OrtDeviceEpIncompatibilityDetails,
    OrtExternalResourceImporterImpl,
    OrtCustomOpDomain,
);

/// `OrtEpFactory` (fields 0-17: the 1.24 release layout).
#[repr(C)]
pub struct OrtEpFactory {
    pub ort_version_supported: u32,
    pub get_name: Option<unsafe extern "C" fn(this: *const OrtEpFactory) -> *const c_char>,
    pub get_vendor: Option<unsafe extern "C" fn(this: *const OrtEpFactory) -> *const c_char>,
    pub get_supported_devices: Option<
        unsafe extern "C" fn(
            this: *mut OrtEpFactory,
            devices: *const *const OrtHardwareDevice,
            num_devices: usize,
            ep_devices: *mut *mut OrtEpDevice,
            max_ep_devices: usize,
            num_ep_devices: *mut usize,
        ) -> StatusPtr,
    >,
    pub create_ep: Option<
        unsafe extern "C" fn(
            this: *mut OrtEpFactory,
            devices: *const *const OrtHardwareDevice,
            ep_metadata: *const *const OrtKeyValuePairs,
            num_devices: usize,
            session_options: *const OrtSessionOptions,
            logger: *const OrtLogger,
            ep: *mut *mut OrtEp,
        ) -> StatusPtr,
    >,
    pub release_ep: Option<unsafe extern "C" fn(this: *mut OrtEpFactory, ep: *mut OrtEp)>,
    pub get_vendor_id: Option<unsafe extern "C" fn(this: *const OrtEpFactory) -> u32>,
    pub get_version: Option<unsafe extern "C" fn(this: *const OrtEpFactory) -> *const c_char>,
    pub validate_compiled_model_compatibility_info: Option<unsafe extern "C" fn()>,
    pub create_allocator: Option<
        unsafe extern "C" fn(
            this: *mut OrtEpFactory,
            memory_info: *const OrtMemoryInfo,
            options: *const OrtKeyValuePairs,
            allocator: *mut *mut OrtAllocator,
        ) -> StatusPtr,
    >,
    pub release_allocator:
        Option<unsafe extern "C" fn(this: *mut OrtEpFactory, a: *mut OrtAllocator)>,
    pub create_data_transfer: Option<
        unsafe extern "C" fn(
            this: *mut OrtEpFactory,
            out: *mut *mut OrtDataTransferImpl,
        ) -> StatusPtr,
    >,
    pub is_stream_aware: Option<unsafe extern "C" fn(this: *const OrtEpFactory) -> bool>,
    pub create_sync_stream_for_device: Option<unsafe extern "C" fn()>,
    pub get_hardware_device_incompatibility_details: Option<unsafe extern "C" fn()>,
    pub create_external_resource_importer_for_device: Option<unsafe extern "C" fn()>,
    pub get_num_custom_op_domains: Option<unsafe extern "C" fn()>,
    pub get_custom_op_domains: Option<unsafe extern "C" fn()>,
}

/// `OrtEp` (fields 0-14: the 1.24 release layout).
#[repr(C)]
pub struct OrtEp {
    pub ort_version_supported: u32,
    pub get_name: Option<unsafe extern "C" fn(this: *const OrtEp) -> *const c_char>,
    pub get_capability: Option<
        unsafe extern "C" fn(
            this: *mut OrtEp,
            graph: *const OrtGraph,
            info: *mut OrtEpGraphSupportInfo,
        ) -> StatusPtr,
    >,
    pub compile: Option<
        unsafe extern "C" fn(
            this: *mut OrtEp,
            graphs: *const *const OrtGraph,
            fused_nodes: *const *const OrtNode,
            count: usize,
            node_compute_infos: *mut *mut OrtNodeComputeInfo,
            ep_context_nodes: *mut *mut OrtNode,
        ) -> StatusPtr,
    >,
    pub release_node_compute_infos: Option<
        unsafe extern "C" fn(this: *mut OrtEp, infos: *mut *mut OrtNodeComputeInfo, n: usize),
    >,
    pub get_preferred_data_layout: Option<unsafe extern "C" fn()>,
    pub should_convert_data_layout_for_op: Option<unsafe extern "C" fn()>,
    pub set_dynamic_options: Option<unsafe extern "C" fn()>,
    pub on_run_start: Option<unsafe extern "C" fn()>,
    pub on_run_end: Option<unsafe extern "C" fn()>,
    pub create_allocator: Option<unsafe extern "C" fn()>,
    pub create_sync_stream_for_device: Option<unsafe extern "C" fn()>,
    pub get_compiled_model_compatibility_info: Option<unsafe extern "C" fn()>,
    pub get_kernel_registry: Option<
        unsafe extern "C" fn(this: *mut OrtEp, out: *mut *const OrtKernelRegistry) -> StatusPtr,
    >,
    pub is_concurrent_run_supported:
        Option<unsafe extern "C" fn(this: *mut OrtEp, out: *mut bool) -> StatusPtr>,
}

/// `OrtNodeFusionOptions` (1.23): how ORT fuses a group of nodes an EP claimed together.
#[repr(C)]
pub struct OrtNodeFusionOptions {
    pub ort_version_supported: u32,
    /// The EP keeps its own copy of the constant initializers it needs: ORT does not pass them
    /// as inputs of the fused node and may release those no other node uses.
    pub drop_constant_initializers: bool,
}

/// `OrtNodeComputeInfo` (1.23): the compute functions of one compiled (fused) node.
#[repr(C)]
pub struct OrtNodeComputeInfo {
    pub ort_version_supported: u32,
    pub create_state: Option<
        unsafe extern "C" fn(
            this: *mut OrtNodeComputeInfo,
            ctx: *mut OrtNodeComputeContext,
            state: *mut *mut c_void,
        ) -> StatusPtr,
    >,
    pub compute: Option<
        unsafe extern "C" fn(
            this: *mut OrtNodeComputeInfo,
            state: *mut c_void,
            ctx: *mut OrtKernelContext,
        ) -> StatusPtr,
    >,
    pub release_state:
        Option<unsafe extern "C" fn(this: *mut OrtNodeComputeInfo, state: *mut c_void)>,
}

/// `OrtKernelImpl` (1.24 release layout).
#[repr(C)]
pub struct OrtKernelImpl {
    pub ort_version_supported: u32,
    pub flags: u32,
    pub compute: Option<
        unsafe extern "C" fn(this: *mut OrtKernelImpl, ctx: *mut OrtKernelContext) -> StatusPtr,
    >,
    pub release: Option<unsafe extern "C" fn(this: *mut OrtKernelImpl)>,
    pub pre_pack_weight: Option<
        unsafe extern "C" fn(
            this: *mut OrtKernelImpl,
            tensor: *const OrtValue,
            input_index: i32,
            allocator: *mut OrtAllocator,
            prepacked_cache: *mut OrtSharedPrePackedWeightCache,
            is_packed: *mut bool,
        ) -> StatusPtr,
    >,
    pub set_shared_pre_packed_weight: Option<
        unsafe extern "C" fn(
            this: *mut OrtKernelImpl,
            buffers: *const *const c_void,
            sizes: *const usize,
            num_buffers: usize,
            input_index: i32,
        ) -> StatusPtr,
    >,
}

/// `OrtKernelCreateFunc`.
pub type KernelCreateFn = unsafe extern "C" fn(
    state: *mut c_void,
    info: *const OrtKernelInfo,
    out: *mut *mut OrtKernelImpl,
) -> StatusPtr;

/// The read-only `OrtEpApi` table owned by ORT: entries 0-49 (1.24). Entries rcpu does not call
/// are declared as untyped pointers so the indices stay right.
#[repr(C)]
pub struct OrtEpApi {
    pub create_ep_device: unsafe extern "C" fn(
        factory: *mut OrtEpFactory,
        hw: *const OrtHardwareDevice,
        metadata: *const OrtKeyValuePairs,
        options: *const OrtKeyValuePairs,
        out: *mut *mut OrtEpDevice,
    ) -> StatusPtr,
    pub release_ep_device: unsafe extern "C" fn(d: *mut OrtEpDevice),
    pub ep_graph_support_info_add_nodes_to_fuse: unsafe extern "C" fn(
        info: *mut OrtEpGraphSupportInfo,
        nodes: *const *const OrtNode,
        n: usize,
        options: *const OrtNodeFusionOptions,
    ) -> StatusPtr,
    pub ep_graph_support_info_add_single_node:
        unsafe extern "C" fn(info: *mut OrtEpGraphSupportInfo, node: *const OrtNode) -> StatusPtr,
    pub _slots_4_17: [*const c_void; 14],
    pub create_kernel_registry: unsafe extern "C" fn(out: *mut *mut OrtKernelRegistry) -> StatusPtr,
    pub release_kernel_registry: unsafe extern "C" fn(r: *mut OrtKernelRegistry),
    pub kernel_registry_add_kernel: unsafe extern "C" fn(
        r: *mut OrtKernelRegistry,
        def: *const OrtKernelDef,
        create: KernelCreateFn,
        state: *mut c_void,
    ) -> StatusPtr,
    pub create_kernel_def_builder:
        unsafe extern "C" fn(out: *mut *mut OrtKernelDefBuilder) -> StatusPtr,
    pub release_kernel_def_builder: unsafe extern "C" fn(b: *mut OrtKernelDefBuilder),
    pub kernel_def_builder_set_operator_type:
        unsafe extern "C" fn(b: *mut OrtKernelDefBuilder, op: *const c_char) -> StatusPtr,
    pub kernel_def_builder_set_domain:
        unsafe extern "C" fn(b: *mut OrtKernelDefBuilder, domain: *const c_char) -> StatusPtr,
    pub kernel_def_builder_set_since_version:
        unsafe extern "C" fn(b: *mut OrtKernelDefBuilder, start: i32, end: i32) -> StatusPtr,
    pub kernel_def_builder_set_execution_provider:
        unsafe extern "C" fn(b: *mut OrtKernelDefBuilder, ep: *const c_char) -> StatusPtr,
    pub kernel_def_builder_set_input_mem_type: *const c_void,
    pub kernel_def_builder_set_output_mem_type: *const c_void,
    pub kernel_def_builder_add_type_constraint: unsafe extern "C" fn(
        b: *mut OrtKernelDefBuilder,
        name: *const c_char,
        types: *const *const OrtDataType,
        n: usize,
    ) -> StatusPtr,
    pub kernel_def_builder_add_input_output_aliases: *const c_void,
    pub kernel_def_builder_add_input_output_mutable_aliases: *const c_void,
    pub kernel_def_builder_build:
        unsafe extern "C" fn(b: *mut OrtKernelDefBuilder, out: *mut *mut OrtKernelDef) -> StatusPtr,
    pub release_kernel_def: unsafe extern "C" fn(d: *mut OrtKernelDef),
    pub _slots_34_39: [*const c_void; 6],
    pub get_tensor_data_type: unsafe extern "C" fn(
        elem: ort_sys::ONNXTensorElementDataType,
        out: *mut *const OrtDataType,
    ) -> StatusPtr,
    pub ep_graph_support_info_look_up_kernel: unsafe extern "C" fn(
        info: *mut OrtEpGraphSupportInfo,
        node: *const OrtNode,
        out: *mut *const OrtKernelDef,
    ) -> StatusPtr,
    pub shared_pre_packed_weight_cache_store_weight_data: *const c_void,
    pub kernel_info_get_ep: *const c_void,
    pub _slots_44_49: [*const c_void; 6],
}
