//! The cdylib ONNX Runtime loads. Exports only (see `plugin/exports.map`); all logic lives in
//! the `rcpu` crate, whose `abi` module guards every entry against panics.
#![allow(non_snake_case)]

use std::ffi::c_char;

use rcpu::abi::ep_types::{OrtApiBase, OrtEpFactory, OrtLogger, StatusPtr};

/// # Safety
/// Called by ONNX Runtime per its plugin-EP contract.
#[no_mangle]
pub unsafe extern "C" fn CreateEpFactories(
    registered_name: *const c_char,
    api_base: *const OrtApiBase,
    default_logger: *const OrtLogger,
    factories: *mut *mut OrtEpFactory,
    max_factories: usize,
    num_factories: *mut usize,
) -> StatusPtr {
    // SAFETY: forwarded ORT contract.
    unsafe {
        rcpu::abi::exports::create_ep_factories(
            registered_name,
            api_base,
            default_logger,
            factories,
            max_factories,
            num_factories,
        )
    }
}

/// # Safety
/// `factory` must come from `CreateEpFactories`.
#[no_mangle]
pub unsafe extern "C" fn ReleaseEpFactory(factory: *mut OrtEpFactory) -> StatusPtr {
    // SAFETY: forwarded contract.
    unsafe { rcpu::abi::exports::release_ep_factory(factory) }
}

/// # Safety
/// `buf` is NULL or has `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn RcpuEp_StatsJson(buf: *mut c_char, cap: usize) -> usize {
    // SAFETY: forwarded contract.
    unsafe { rcpu::abi::exports::stats_json(buf, cap) }
}

#[no_mangle]
pub extern "C" fn RcpuEp_ResetStats() {
    rcpu::abi::exports::reset_stats()
}

#[no_mangle]
pub extern "C" fn RcpuEp_Version() -> *const c_char {
    rcpu::abi::exports::version()
}
