//! The ORT API tables rcpu calls into, negotiated once per process in `CreateEpFactories`.
//!
//! rcpu compiles against `ort_sys::ORT_API_VERSION` (31) and asks for
//! `GetApi(min(compiled, runtime))`, where the runtime's minor version comes from
//! `GetVersionString`. Runtimes older than [`MIN_RUNTIME_API`] (no kernel-registry plugin EPs)
//! get a clean refusal, never a crash.

use std::ffi::CStr;

use std::sync::OnceLock;

use super::ep_types::{OrtApi, OrtApiBase, OrtEpApi};

/// The oldest ORT API version rcpu runs on: 1.24 introduced the kernel registry for plugin EPs.
pub const MIN_RUNTIME_API: u32 = 24;

/// The API tables and the version they were obtained at.
pub struct Api {
    pub ort: &'static OrtApi,
    pub ep: &'static OrtEpApi,
    /// The negotiated API version (`min(compiled, runtime)`).
    pub version: u32,
    /// The runtime's version string, e.g. "1.31.1".
    pub runtime_version: String,
}

// SAFETY: the tables are immutable function-pointer tables owned by ORT for the process lifetime.
unsafe impl Send for Api {}
// SAFETY: as above; nothing in them is ever written.
unsafe impl Sync for Api {}

static API: OnceLock<Api> = OnceLock::new();

/// The negotiated API. Panics if called before `negotiate` succeeded (a bug: every entry point
/// reachable by ORT runs after `CreateEpFactories`).
pub fn api() -> &'static Api {
    API.get()
        .expect("rcpu: ORT API used before CreateEpFactories negotiated it")
}

/// Same as [`api`] but `None` before negotiation (for paths that may run in unit tests).
pub fn try_api() -> Option<&'static Api> {
    API.get()
}

/// Parses the minor version out of "1.31.1" -> 31.
pub fn runtime_minor(version: &str) -> Option<u32> {
    let mut it = version.trim().split('.');
    let major: u32 = it.next()?.parse().ok()?;
    let minor: u32 = it.next()?.parse().ok()?;
    if major != 1 {
        return None;
    }
    Some(minor)
}

/// Negotiates the API version with the runtime behind `base` and stores the tables.
///
/// Returns an error message (the caller cannot build an `OrtStatus` without an API) when the
/// runtime is too old or refuses the version.
///
/// # Safety
/// `base` must be NULL or point to a valid `OrtApiBase` whose functions may be called.
pub unsafe fn negotiate(base: *const OrtApiBase) -> Result<&'static Api, String> {
    if let Some(api) = API.get() {
        return Ok(api);
    }
    if base.is_null() {
        return Err("rcpu: CreateEpFactories got a NULL OrtApiBase".into());
    }
    // SAFETY: caller guarantees `base` is a valid OrtApiBase.
    let base = unsafe { &*base };
    // SAFETY: GetVersionString returns a static NUL-terminated string.
    let vptr = unsafe { (base.GetVersionString)() };
    if vptr.is_null() {
        return Err("rcpu: ORT returned no version string".into());
    }
    // SAFETY: non-NULL, NUL-terminated, static (see above).
    let runtime_version = unsafe { CStr::from_ptr(vptr) }
        .to_string_lossy()
        .into_owned();
    let minor = runtime_minor(&runtime_version).ok_or_else(|| {
        format!("rcpu: cannot parse the ONNX Runtime version '{runtime_version}'")
    })?;
    if minor < MIN_RUNTIME_API {
        return Err(format!(
            "rcpu needs ONNX Runtime >= 1.{MIN_RUNTIME_API} (kernel-registry plugin EPs); this runtime is {runtime_version}"
        ));
    }
    let version = minor.min(ort_sys::ORT_API_VERSION);
    // SAFETY: GetApi is safe to call with any version; it returns NULL if unsupported.
    let ort = unsafe { (base.GetApi)(version) };
    if ort.is_null() {
        return Err(format!(
            "rcpu: ONNX Runtime {runtime_version} refused API version {version}"
        ));
    }
    // SAFETY: non-NULL table from ORT, valid for the process lifetime.
    let ort: &'static OrtApi = unsafe { &*ort };
    // SAFETY: GetEpApi exists from API 22 on and we negotiated >= 24.
    let ep = unsafe { (ort.GetEpApi)() } as *const OrtEpApi;
    if ep.is_null() {
        return Err(format!(
            "rcpu: ONNX Runtime {runtime_version} has no plugin-EP API"
        ));
    }
    // SAFETY: non-NULL, ORT-owned, lives as long as the process; layout declared in ep_types.
    let ep: &'static OrtEpApi = unsafe { &*ep };
    Ok(API.get_or_init(|| Api {
        ort,
        ep,
        version,
        runtime_version,
    }))
}
