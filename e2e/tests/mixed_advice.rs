//! Mixed partitions (issue 17): when a session leaves compute-heavy nodes to ORT's CPU EP and
//! ORT's intra-op threads may spin (`session.intra_op.allow_spinning` not "0"), rcpu logs one
//! INFO record advising to turn the spinning off; with the spinning off, or with no heavy node
//! left to ORT, it logs none.
//!
//! Its own test binary: ORT has one environment per process and its logging is fixed when the
//! environment is created, so this file must create it before anything else does.

use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;

use ort_sys::OrtLoggingLevel;
use rcpu_e2e::bench::gen::Spec;
use rcpu_e2e::{ort_with_rcpu, rand_f32, Ort, SessionSpec, Tensor};

/// (severity, message) of every record ORT's sink received.
static RECORDS: Mutex<Vec<(i32, String)>> = Mutex::new(Vec::new());

extern "system" fn sink(
    _param: *mut c_void,
    severity: OrtLoggingLevel,
    _category: *const c_char,
    _logid: *const c_char,
    _code_location: *const c_char,
    message: *const c_char,
) {
    let text = if message.is_null() {
        String::new()
    } else {
        // SAFETY: ORT passes a NUL-terminated string, live for the duration of the callback.
        unsafe { CStr::from_ptr(message) }
            .to_string_lossy()
            .into_owned()
    };
    RECORDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((severity as i32, text));
}

const ADVICE: &str = "compute-heavy node(s) stay on ORT's CPU EP";

/// Creates a session of the generated `spec` with the extra session config `config`, runs it
/// once, and returns the advice records its creation and run logged.
fn advice_records(spec: &str, config: &[(&str, &str)]) -> Vec<(i32, String)> {
    let ort = ort_with_rcpu();
    let model = Spec::parse(spec).unwrap().generate().bytes;
    let mut ss = SessionSpec::rcpu(&[]);
    ss.intra_op_threads = None;
    ss.config = config
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    RECORDS.lock().unwrap().clear();
    let s = ort.session(&model, &ss).unwrap();
    let y = s.run(&[Tensor::f32(&[1, 64], rand_f32(64, 5))]).unwrap();
    assert_eq!(y[0].shape, vec![1, 64]);
    drop(s);
    let recs = RECORDS.lock().unwrap().clone();
    recs.into_iter()
        .filter(|(_, m)| m.contains(ADVICE))
        .collect()
}

#[test]
fn advice_is_logged_once_exactly_when_heavy_nodes_stay_on_a_spinning_ort() {
    Ort::get_with_log_sink(OrtLoggingLevel::ORT_LOGGING_LEVEL_VERBOSE, sink)
        .expect("this test creates the process's ORT environment");
    let mixed = "mixed:k=64,n=64,layers=2,block=32,acc=4";

    // Spinning at ORT's default: one INFO record naming the nodes and the fix.
    let recs = advice_records(mixed, &[]);
    assert_eq!(recs.len(), 1, "{recs:#?}");
    let (severity, msg) = &recs[0];
    assert_eq!(
        *severity,
        OrtLoggingLevel::ORT_LOGGING_LEVEL_INFO as i32,
        "{msg}"
    );
    assert!(
        msg.contains("2 compute-heavy node(s)") && msg.contains("DynamicQuantizeMatMul x2"),
        "{msg}"
    );
    assert!(msg.contains("session.intra_op.allow_spinning=0"), "{msg}");

    // Set to "1" explicitly: the same.
    let on = [("session.intra_op.allow_spinning", "1")];
    assert_eq!(advice_records(mixed, &on).len(), 1);

    // Spinning off: nothing to advise.
    let off = [("session.intra_op.allow_spinning", "0")];
    let recs = advice_records(mixed, &off);
    assert!(recs.is_empty(), "{recs:#?}");

    // Every node on rcpu: nothing to advise either.
    let recs = advice_records("nbits:k=64,n=64,layers=2,block=32,acc=4", &[]);
    assert!(recs.is_empty(), "{recs:#?}");
}
