//! Session options for `CreateEp` (the session's logger is in `log_bridge`).

use std::ffi::{c_char, CStr};

use ort_sys::OrtKeyValuePairs;

use super::api::api;
use super::ep_types::OrtSessionOptions;
use super::status::{check, Result};

/// Every session config entry as (key, value) pairs.
///
/// # Safety
/// `so` must be the live session options ORT passed to `CreateEp`.
pub unsafe fn config_entries(so: *const OrtSessionOptions) -> Result<Vec<(String, String)>> {
    let ort = api().ort;
    let mut kv: *mut OrtKeyValuePairs = std::ptr::null_mut();
    // SAFETY: so valid (caller); kv released below.
    unsafe { check((ort.GetSessionOptionsConfigEntries)(so, &mut kv))? };
    if kv.is_null() {
        return Ok(Vec::new());
    }
    let mut keys: *const *const c_char = std::ptr::null();
    let mut vals: *const *const c_char = std::ptr::null();
    let mut n = 0usize;
    // SAFETY: kv valid; arrays owned by kv, read before release.
    let out = unsafe {
        (ort.GetKeyValuePairs)(kv, &mut keys, &mut vals, &mut n);
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let k = *keys.add(i);
            let v = *vals.add(i);
            if k.is_null() {
                continue;
            }
            let v = if v.is_null() {
                String::new()
            } else {
                CStr::from_ptr(v).to_string_lossy().into_owned()
            };
            out.push((CStr::from_ptr(k).to_string_lossy().into_owned(), v));
        }
        (ort.ReleaseKeyValuePairs)(kv);
        out
    };
    Ok(out)
}
