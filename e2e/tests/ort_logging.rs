//! rcpu's `log` records reach ORT's logger: this process's environment logs to a custom sink
//! at VERBOSE, and the records rcpu makes while a session is created (the ISA choice, a weight
//! the cache declines) arrive there with ORT's severity and the location of the `log!` call in
//! rcpu's source, not the bridge's.
//!
//! Its own test binary: ORT has one environment per process and its logging is fixed when the
//! environment is created, so this file must create it before anything else does.

use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;

use ort_sys::OrtLoggingLevel;
use rcpu_e2e::onnx::{dtype::FLOAT, Dim, GraphBuilder};
use rcpu_e2e::{ort_with_rcpu, rand_f32, Ort, SessionSpec, Tensor};

/// One message as ORT's sink received it.
#[derive(Debug, Clone)]
struct Rec {
    severity: i32,
    code_location: String,
    message: String,
}

static RECORDS: Mutex<Vec<Rec>> = Mutex::new(Vec::new());

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: ORT passes NUL-terminated strings, live for the duration of the callback.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

extern "system" fn sink(
    _param: *mut c_void,
    severity: OrtLoggingLevel,
    _category: *const c_char,
    _logid: *const c_char,
    code_location: *const c_char,
    message: *const c_char,
) {
    let rec = Rec {
        severity: severity as i32,
        code_location: text(code_location),
        message: text(message),
    };
    RECORDS.lock().unwrap_or_else(|e| e.into_inner()).push(rec);
}

/// x[m, 8] @ w[8, 5] with w a constant: rcpu claims the MatMul and prepacks w.
fn matmul_model() -> Vec<u8> {
    let mut g = GraphBuilder::new("mm", 17);
    g.input("x", FLOAT, &[Dim::Sym("m"), Dim::Fixed(8)])
        .initializer_f32("w", &[8, 5], &rand_f32(40, 7))
        .node("MatMul", "", "mm0", &["x", "w"], &["y"], &[])
        .output("y", FLOAT);
    g.build()
}

fn find<'a>(recs: &'a [Rec], needle: &str) -> Option<&'a Rec> {
    recs.iter().find(|r| r.message.contains(needle))
}

#[test]
fn rcpu_records_reach_ort_logger_with_caller_location() {
    Ort::get_with_log_sink(OrtLoggingLevel::ORT_LOGGING_LEVEL_VERBOSE, sink)
        .expect("this test creates the process's ORT environment");
    let ort = ort_with_rcpu();
    // Budget 0: the MatMul weight is declined by the weight cache (an INFO record).
    let s = ort
        .session(
            &matmul_model(),
            &SessionSpec::rcpu(&[("weight_cache_mb", "0")]),
        )
        .unwrap();
    let x = Tensor::f32(&[2, 8], rand_f32(16, 3));
    assert_eq!(s.run(&[x]).unwrap()[0].shape, vec![2, 5]);
    drop(s);

    let recs = RECORDS.lock().unwrap().clone();
    let info = OrtLoggingLevel::ORT_LOGGING_LEVEL_INFO as i32;
    let isa = find(&recs, "dispatch at ISA level").unwrap_or_else(|| {
        panic!(
            "no ISA record among {} ORT log records: {recs:#?}",
            recs.len()
        )
    });
    assert_eq!(isa.severity, info, "{isa:?}");
    assert!(isa.code_location.contains("isa.rs"), "{isa:?}");

    let decline = find(&recs, "weight cache declined packing f32-gemm-b")
        .unwrap_or_else(|| panic!("no decline record: {recs:#?}"));
    assert_eq!(decline.severity, info, "{decline:?}");
    assert!(
        decline.code_location.contains("weight_cache.rs"),
        "{decline:?}"
    );

    // Every record from rcpu names the rcpu source line that made it, never the bridge's.
    let ours: Vec<_> = recs
        .iter()
        .filter(|r| r.code_location.contains("rcpu::"))
        .collect();
    assert!(ours.len() >= 2, "{ours:#?}");
    for r in ours {
        assert!(!r.code_location.contains("log_bridge"), "{r:?}");
    }
}
