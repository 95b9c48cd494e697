//! Session options and logger access for `CreateEp`.

use std::ffi::{c_char, CStr, CString};

use ort_sys::{OrtKeyValuePairs, OrtLoggingLevel};

use super::api::api;
use super::ep_types::{OrtLogger, OrtSessionOptions};
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

/// A borrowed ORT logger (valid for the EP's lifetime per ORT's contract).
#[derive(Clone, Copy)]
pub struct Logger(*const OrtLogger);

// SAFETY: ORT loggers are thread-safe; the pointer is only passed back to ORT.
unsafe impl Send for Logger {}
// SAFETY: as above.
unsafe impl Sync for Logger {}

impl Logger {
    /// # Safety
    /// `l` must be NULL or a logger that outlives every use of this handle.
    pub unsafe fn new(l: *const OrtLogger) -> Self {
        Logger(l)
    }

    fn log(&self, level: OrtLoggingLevel, msg: &str) {
        if self.0.is_null() {
            eprintln!("rcpu: {msg}");
            return;
        }
        let m = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        let file = CString::new(file!()).unwrap_or_default();
        let func = CString::new("rcpu").unwrap_or_default();
        // SAFETY: logger valid (constructor contract); strings NUL-terminated and live.
        let st = unsafe {
            (api().ort.Logger_LogMessage)(
                self.0,
                level,
                m.as_ptr(),
                file.as_ptr() as _,
                line!() as i32,
                func.as_ptr(),
            )
        };
        // SAFETY: status returned by ORT, released by check.
        let _ = unsafe { check(st) };
    }

    pub fn warn(&self, msg: &str) {
        self.log(OrtLoggingLevel::ORT_LOGGING_LEVEL_WARNING, msg)
    }

    pub fn info(&self, msg: &str) {
        self.log(OrtLoggingLevel::ORT_LOGGING_LEVEL_INFO, msg)
    }
}
