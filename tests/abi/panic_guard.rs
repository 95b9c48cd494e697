//! Panic safety at the C boundary.
//!
//! 1. `guard`/`guard_node`/`guard_value` turn a panic (any payload, also one raised on a worker
//!    lane during a parallel dispatch) into an error / fallback value: nothing unwinds into the
//!    caller and the process does not abort. The error text is checked in a child process
//!    (this binary re-executed), because before API negotiation `into_status` can only report
//!    through `log`, which the installed ORT log bridge sends to stderr while it has no ORT
//!    logger.
//! 2. A source check: every `extern "C"` function defined in `src/abi/` and `plugin/src/lib.rs`
//!    runs its body under a guard, directly or by forwarding to a function that does.

use std::collections::HashMap;
use std::panic::{catch_unwind, panic_any, AssertUnwindSafe};
use std::path::Path;
use std::process::Command;

use rcpu::abi::status::{guard, guard_node, guard_payload, guard_value, Error};
use rcpu::runtime::{pool_for, Dispatch, Par, PoolConfig};

const CHILD_ENV: &str = "RCPU_PANIC_GUARD_CHILD";

/// The child's body: every guard must return normally. Does nothing in a normal test run.
#[test]
fn child_guards_panics() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    // As `CreateEpFactories` does; no ORT environment here, so records go to stderr.
    rcpu::abi::log_bridge::install();
    let st = catch_unwind(|| guard("TestStr", || panic!("boom-str")));
    assert!(st.is_ok(), "guard let a panic unwind");
    let st = catch_unwind(|| guard("TestString", || panic!("{}", String::from("boom-string"))));
    assert!(st.is_ok());
    let st = catch_unwind(|| guard("TestAny", || panic_any(42u32)));
    assert!(st.is_ok());
    let st = catch_unwind(|| guard_node("Compute", "MatMul node 'mm9'", || panic!("boom-node")));
    assert!(st.is_ok());
    let st = catch_unwind(|| guard("TestErr", || Err(Error::fail("plain error"))));
    assert!(st.is_ok());
    // A panic inside a chunk on a worker lane reaches the dispatching caller, whose guard
    // turns it into an error (the pool stays usable afterwards).
    let lanes = pool_for(&PoolConfig {
        threads: 2,
        ..Default::default()
    });
    let st = catch_unwind(AssertUnwindSafe(|| {
        guard_node("Compute", "Gemm node 'lanes'", || {
            lanes.chunks(Dispatch::Task, 64, &|i| {
                if i % 2 == 1 {
                    panic!("boom-lane-{}", i % 2);
                }
            });
            Ok(())
        })
    }));
    assert!(st.is_ok(), "a lane panic escaped the guard");
    let hits = std::sync::atomic::AtomicUsize::new(0);
    lanes.chunks(Dispatch::Task, 64, &|_| {
        hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(hits.into_inner(), 64, "pool broken after a panic");
    assert_eq!(
        guard_value("TestValue", 7, || -> i32 { panic!("boom-value") }),
        7
    );
    // A pool chunk's guard hands the payload back for the dispatcher to re-raise.
    let payload = guard_payload(|| panic_any("boom-payload")).expect_err("the panic was lost");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom-payload"));
    assert!(guard_payload(|| ()).is_ok());
    println!("CHILD-DONE");
}

#[test]
fn panics_become_errors_not_aborts() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            // The test's name in this binary (`tests/abi/main.rs`, module `panic_guard`).
            "panic_guard::child_guards_panics",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .expect("spawn child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("CHILD-DONE"),
        "child died: {}\n{stdout}\n{stderr}",
        out.status
    );
    for want in [
        "internal panic in TestStr: boom-str",
        "internal panic in TestString: boom-string",
        "internal panic in TestAny: unknown panic",
        "MatMul node 'mm9': rcpu: internal panic in Compute: boom-node",
        "plain error",
        "Gemm node 'lanes': rcpu: internal panic in Compute: boom-lane-1",
        "internal panic in TestValue: boom-value",
    ] {
        assert!(stderr.contains(want), "stderr lacks '{want}':\n{stderr}");
    }
}

// ---------------------------------------------------------------------------------------------
// Source check

/// `(name, body)` of every function item in `src` (brace-matched; good enough for rustfmt code).
fn fn_bodies(src: &str) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    let mut rest = src;
    let mut offset = 0;
    while let Some(i) = rest.find("fn ") {
        let at = offset + i;
        let line_start = src[..at].rfind('\n').map(|p| p + 1).unwrap_or(0);
        let head = &src[line_start..at];
        let after = &src[at + 3..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // An item (not a fn-pointer type): the line starts with the qualifiers and a name follows.
        let is_item = !name.is_empty()
            && head
                .split_whitespace()
                .all(|w| ["pub", "pub(crate)", "unsafe", "extern", "\"C\""].contains(&w));
        if is_item {
            let is_c = head.contains("extern \"C\"");
            // The body starts at the first '{' after the signature.
            let Some(open) = src[at..].find('{').map(|p| at + p) else {
                break;
            };
            let mut depth = 0;
            let mut end = open;
            for (j, ch) in src[open..].char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + j;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            out.push((name, src[open..=end].to_string(), is_c));
        }
        offset = at + 3;
        rest = &src[offset..];
    }
    out
}

fn guarded(body: &str, all: &HashMap<String, Vec<String>>, depth: usize) -> bool {
    if ["guard(", "guard_value(", "guard_node(", "guard_payload("]
        .iter()
        .any(|g| body.contains(g))
    {
        return true;
    }
    if depth > 4 {
        return false;
    }
    // A pure forwarder: `...::exports::name(`, `super::factory::name(` and so on.
    for (name, bodies) in all {
        let call = format!("::{name}(");
        if body.contains(&call) && bodies.iter().any(|b| guarded(b, all, depth + 1)) {
            return true;
        }
    }
    false
}

#[test]
fn every_extern_c_fn_runs_under_a_guard() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<_> = std::fs::read_dir(root.join("src/abi"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.push(root.join("plugin/src/lib.rs"));
    let mut all: HashMap<String, Vec<String>> = HashMap::new();
    let mut externs = Vec::new();
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        for (name, body, is_c) in fn_bodies(&src) {
            all.entry(name.clone()).or_default().push(body.clone());
            if is_c {
                externs.push((
                    f.file_name().unwrap().to_string_lossy().into_owned(),
                    name,
                    body,
                ));
            }
        }
    }
    // The ABI shells really define their entries here (guards against a parser that finds none).
    assert!(
        externs.len() >= 20,
        "found only {} extern \"C\" fns",
        externs.len()
    );
    let unguarded: Vec<String> = externs
        .iter()
        .filter(|(_, _, body)| !guarded(body, &all, 0))
        .map(|(file, name, _)| format!("{file}: {name}"))
        .collect();
    println!("{} extern \"C\" fns checked", externs.len());
    assert!(
        unguarded.is_empty(),
        "extern \"C\" fns whose body runs outside a panic guard:\n{}",
        unguarded.join("\n")
    );
}
