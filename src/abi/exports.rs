//! Bodies of the C functions the plugin exports (the `plugin/` crate only forwards to these).

use std::ffi::c_char;

use super::ep_types::*;

/// `CreateEpFactories`.
///
/// # Safety
/// Called by ORT with the documented arguments.
pub unsafe fn create_ep_factories(
    registered_name: *const c_char,
    api_base: *const OrtApiBase,
    default_logger: *const OrtLogger,
    factories: *mut *mut OrtEpFactory,
    max_factories: usize,
    num_factories: *mut usize,
) -> StatusPtr {
    // SAFETY: forwarded ORT contract.
    unsafe {
        super::factory::create_ep_factories(
            registered_name,
            api_base,
            default_logger,
            factories,
            max_factories,
            num_factories,
        )
    }
}

/// `ReleaseEpFactory`.
///
/// # Safety
/// `f` must come from `CreateEpFactories`.
pub unsafe fn release_ep_factory(f: *mut OrtEpFactory) -> StatusPtr {
    // SAFETY: forwarded contract.
    unsafe { super::factory::release_ep_factory(f) }
}

/// `RcpuEp_StatsJson(char* buf, size_t cap) -> size_t`: see `include/rcpu_ep.h`.
///
/// # Safety
/// `buf` must be NULL (with any `cap`) or point to `cap` writable bytes.
pub unsafe fn stats_json(buf: *mut c_char, cap: usize) -> usize {
    super::status::guard_value("RcpuEp_StatsJson", 0, || {
        let slice: &mut [u8] = if buf.is_null() || cap == 0 {
            &mut []
        } else {
            // SAFETY: caller guarantees cap writable bytes at buf.
            unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, cap) }
        };
        crate::telemetry::write_stats(slice)
    })
}

/// `RcpuEp_ResetStats()`: clears the dispatch ledger and the pool counters.
pub fn reset_stats() {
    super::status::guard_value("RcpuEp_ResetStats", (), crate::telemetry::reset)
}

/// `RcpuEp_Version() -> const char*`.
pub fn version() -> *const c_char {
    static V: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    super::status::guard_value("RcpuEp_Version", V.as_ptr() as *const c_char, || {
        V.as_ptr() as *const c_char
    })
}
