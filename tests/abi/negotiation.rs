//! API version negotiation against fake runtimes: a too-old or unparseable runtime gets a clean
//! refusal from `CreateEpFactories` (no factory, no crash), never a call into a missing table.

use std::ffi::c_char;
use std::sync::atomic::{AtomicU32, Ordering};

use rcpu::abi::api::{negotiate, runtime_minor, MIN_RUNTIME_API};
use rcpu::abi::ep_types::{OrtApi, OrtApiBase, OrtEpFactory};
use rcpu::abi::exports::create_ep_factories;

static REQUESTED: AtomicU32 = AtomicU32::new(0);

unsafe extern "system" fn get_api_null(version: u32) -> *const OrtApi {
    REQUESTED.store(version, Ordering::SeqCst);
    std::ptr::null()
}
unsafe extern "system" fn version_old() -> *const c_char {
    c"1.20.1".as_ptr()
}
unsafe extern "system" fn version_garbage() -> *const c_char {
    c"banana".as_ptr()
}
unsafe extern "system" fn version_new() -> *const c_char {
    c"1.99.0".as_ptr()
}

#[test]
fn parses_minor_versions() {
    assert_eq!(runtime_minor("1.31.1"), Some(31));
    assert_eq!(runtime_minor("1.24.0-dev"), Some(24));
    assert_eq!(runtime_minor("2.0.0"), None);
    assert_eq!(runtime_minor("x"), None);
}

#[test]
fn old_runtime_is_refused_before_get_api() {
    let base = OrtApiBase {
        GetApi: get_api_null,
        GetVersionString: version_old,
    };
    REQUESTED.store(0, Ordering::SeqCst);
    // SAFETY: base is a valid (fake) OrtApiBase.
    let err = unsafe { negotiate(&base) }
        .err()
        .expect("1.20 must be refused");
    assert!(
        err.contains(&format!("1.{MIN_RUNTIME_API}")) && err.contains("1.20.1"),
        "{err}"
    );
    let mut factories: [*mut OrtEpFactory; 1] = [std::ptr::null_mut()];
    let mut n = 7usize;
    // SAFETY: valid out-pointers; the fake base's GetApi(1) returns NULL, so no status can be
    // built and the call must still return without touching any table.
    let st = unsafe {
        create_ep_factories(
            c"rcpu".as_ptr(),
            &base,
            std::ptr::null(),
            factories.as_mut_ptr(),
            1,
            &mut n,
        )
    };
    assert!(st.is_null());
    assert_eq!(n, 0, "no factory for a refused runtime");
    assert!(factories[0].is_null());
}

#[test]
fn unparseable_version_is_refused() {
    let base = OrtApiBase {
        GetApi: get_api_null,
        GetVersionString: version_garbage,
    };
    // SAFETY: fake but valid base.
    let err = unsafe { negotiate(&base) }
        .err()
        .expect("garbage version refused");
    assert!(err.contains("banana"), "{err}");
}

#[test]
fn newer_runtime_is_asked_for_the_compiled_version() {
    let base = OrtApiBase {
        GetApi: get_api_null,
        GetVersionString: version_new,
    };
    REQUESTED.store(0, Ordering::SeqCst);
    // SAFETY: fake base; GetApi returns NULL, which negotiate must report, not dereference.
    let err = unsafe { negotiate(&base) }
        .err()
        .expect("NULL api is an error");
    assert_eq!(
        REQUESTED.load(Ordering::SeqCst),
        ort_sys::ORT_API_VERSION,
        "min(compiled, runtime)"
    );
    assert!(err.contains("refused API version"), "{err}");
}

#[test]
fn null_base_is_refused() {
    // SAFETY: NULL is explicitly handled.
    assert!(unsafe { negotiate(std::ptr::null()) }.is_err());
}
