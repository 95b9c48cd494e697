//! Errors, `OrtStatus` conversion and the panic guard every `extern "C"` entry runs under.

use std::ffi::CString;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use ort_sys::OrtErrorCode;

use super::api::try_api;
use super::ep_types::StatusPtr;

/// rcpu's error: an ORT error code and a message that names the node and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: OrtErrorCode,
    pub msg: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn invalid_argument(msg: impl Into<String>) -> Self {
        Error {
            code: OrtErrorCode::ORT_INVALID_ARGUMENT,
            msg: msg.into(),
        }
    }
    pub fn fail(msg: impl Into<String>) -> Self {
        Error {
            code: OrtErrorCode::ORT_FAIL,
            msg: msg.into(),
        }
    }
    pub fn not_implemented(msg: impl Into<String>) -> Self {
        Error {
            code: OrtErrorCode::ORT_NOT_IMPLEMENTED,
            msg: msg.into(),
        }
    }
    pub fn ep_fail(msg: impl Into<String>) -> Self {
        Error {
            code: OrtErrorCode::ORT_EP_FAIL,
            msg: msg.into(),
        }
    }
    /// Prefixes the message with context, e.g. the node name.
    pub fn context(mut self, ctx: impl fmt::Display) -> Self {
        self.msg = format!("{ctx}: {}", self.msg);
        self
    }

    /// Converts into an ORT-owned status (ORT frees it).
    pub fn into_status(self) -> StatusPtr {
        let Some(api) = try_api() else {
            // Without an API table there is no way to build an OrtStatus; this only happens if
            // ORT called us before CreateEpFactories, which it never does.
            log::error!("error before API negotiation: {}", self.msg);
            return std::ptr::null_mut();
        };
        let msg = CString::new(self.msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: CreateStatus copies the NUL-terminated message; api table is valid.
        unsafe { (api.ort.CreateStatus)(self.code, msg.as_ptr()) }.0
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

impl From<String> for Error {
    fn from(msg: String) -> Self {
        Error::invalid_argument(msg)
    }
}

/// Takes ownership of a status returned by ORT: `Ok` for NULL, else its message as an error.
///
/// # Safety
/// `status` must be NULL or a status ORT returned and nobody has released yet.
pub unsafe fn check(status: ort_sys::OrtStatusPtr) -> Result<()> {
    let ptr = status.0;
    if ptr.is_null() {
        return Ok(());
    }
    let api = super::api::api();
    // SAFETY: ptr is a live status (caller contract); message pointer valid until release.
    let msg = unsafe {
        let m = (api.ort.GetErrorMessage)(ptr);
        let s = if m.is_null() {
            String::from("(no message)")
        } else {
            std::ffi::CStr::from_ptr(m).to_string_lossy().into_owned()
        };
        let code = (api.ort.GetErrorCode)(ptr);
        (api.ort.ReleaseStatus)(ptr);
        Error { code, msg: s }
    };
    Err(msg)
}

/// Same as [`check`] for the `OrtEpApi` functions, which return a bare pointer.
///
/// # Safety
/// As for [`check`].
pub unsafe fn check_raw(status: StatusPtr) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { check(ort_sys::OrtStatusPtr(status)) }
}

pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Runs `f` and turns its error or panic into an `OrtStatus` (NULL on success).
/// Every `extern "C"` entry that returns a status goes through here.
pub fn guard(what: &str, f: impl FnOnce() -> Result<()>) -> StatusPtr {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(e)) => e.into_status(),
        Err(p) => Error::ep_fail(format!(
            "rcpu: internal panic in {what}: {}",
            panic_message(&*p)
        ))
        .into_status(),
    }
}

/// [`guard`] for a kernel entry: an error or a panic is prefixed with `label` (the node, e.g.
/// "MatMul node 'mm0'"), so even an internal panic names the node it happened in.
pub fn guard_node(what: &str, label: &str, f: impl FnOnce() -> Result<()>) -> StatusPtr {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(e)) => e.context(label).into_status(),
        Err(p) => Error::ep_fail(format!(
            "{label}: rcpu: internal panic in {what}: {}",
            panic_message(&*p)
        ))
        .into_status(),
    }
}

/// Runs `f` for an `extern "C"` entry whose panic is re-raised elsewhere (a chunk ORT's pool
/// runs for rcpu: the dispatching thread resumes it after the parallel-for returns): a panic in
/// `f` stops here and its payload is returned instead of unwinding into ORT.
pub fn guard_payload(f: impl FnOnce()) -> std::result::Result<(), Box<dyn std::any::Any + Send>> {
    catch_unwind(AssertUnwindSafe(f))
}

/// Runs `f` for an `extern "C"` entry that cannot return a status; a panic yields `fallback`
/// and is reported through `log` (ORT's logger).
pub fn guard_value<T>(what: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            log::error!("internal panic in {what}: {}", panic_message(&*p));
            fallback
        }
    }
}
