//! Lifecycle: create, run and release many rcpu sessions, then unregister and re-register the
//! plugin library repeatedly (releasing every session first, as ORT requires). The worker lanes
//! (`rcpu-w*` threads) must return to zero once no session lives, VmRSS must stay flat after a
//! warm-up, and nothing may crash.
//!
//! Everything is one `#[test]` so no other test of this binary starts threads or sessions while
//! the counts are taken. `RCPU_LIFECYCLE_SESSIONS` / `RCPU_LIFECYCLE_CYCLES` shrink the loops
//! (e.g. under valgrind).

use rcpu_e2e::bench::conditions::status_kb;
use rcpu_e2e::onnx::dtype::FLOAT;
use rcpu_e2e::onnx::{Attr, Dim, GraphBuilder};
use rcpu_e2e::threads::{rcpu_workers, settled_rcpu_workers};
use rcpu_e2e::{paths, rand_f32, Ort, SessionSpec, Tensor};

/// Registration name used only by this binary (the plugin is registered nowhere else here).
const REG: &str = "rcpu_lifecycle";
/// Allowed VmRSS growth from the warmed-up state to the end of each phase.
const RSS_BOUND_KIB: i64 = 24 * 1024;

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small model rcpu claims entirely: Add, MatMul, Gemm, and a MatMulNBits with constants
/// (so the weight cache and prepack run on every session).
fn model() -> Vec<u8> {
    let (k, n, block) = (64i64, 16i64, 32i64);
    let kb = k / block;
    let b: Vec<u8> = (0..(n * kb * block / 2) as usize)
        .map(|i| (i * 29 % 256) as u8)
        .collect();
    let mut g = GraphBuilder::new("life", 17);
    g.input("x", FLOAT, &[Dim::Sym("m"), Dim::Fixed(k)])
        .initializer_f32("bias", &[k], &rand_f32(k as usize, 1))
        .initializer_f32("w", &[k, k], &rand_f32((k * k) as usize, 2))
        .initializer_u8("B", &[n, kb, block / 2], &b)
        .initializer_f32("scales", &[n * kb], &vec![0.02; (n * kb) as usize])
        .initializer_f32("w2", &[n, 8], &rand_f32((n * 8) as usize, 3))
        .node("Add", "", "add0", &["x", "bias"], &["t0"], &[])
        .node("MatMul", "", "mm0", &["t0", "w"], &["t1"], &[])
        .node(
            "MatMulNBits",
            "com.microsoft",
            "mnb0",
            &["t1", "B", "scales"],
            &["t2"],
            &[
                ("K", Attr::Int(k)),
                ("N", Attr::Int(n)),
                ("bits", Attr::Int(4)),
                ("block_size", Attr::Int(block)),
            ],
        )
        .node("Gemm", "", "gemm0", &["t2", "w2"], &["y"], &[])
        .output("y", FLOAT);
    g.build()
}

/// Threads of this process named `rcpu-w*` right now (for the printed summaries).
fn rcpu_threads() -> usize {
    rcpu_workers().len()
}

/// Waits until `n` `rcpu-w*` threads are listed (a worker joined a moment ago can still be
/// listed; see `rcpu_e2e::threads`): the guarantee is that the lanes are gone once no session
/// lives, which a leaked worker never satisfies (hang guard).
fn settles_at(n: usize, what: &str) {
    settled_rcpu_workers(n, what);
}

fn vm_rss_kib() -> i64 {
    let kb = status_kb("/proc/self/status", "VmRSS").expect("VmRSS line of /proc/self/status");
    i64::try_from(kb).expect("VmRSS fits i64")
}

fn plugin_mapped() -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .map(|m| m.contains("librcpu_ep.so"))
        .unwrap_or(false)
}

/// One session on a fresh thread that exits afterwards: thread-local destructors the plugin
/// registers on the caller's thread would otherwise keep the library mapped (glibc does not
/// unload a DSO with pending TLS destructors), hiding what happens on a real unload/reload.
fn one_session(
    ort: &Ort,
    model: &[u8],
    threads: &str,
    x: &Tensor,
    want: Option<&[f32]>,
) -> Vec<f32> {
    std::thread::scope(|s| {
        s.spawn(|| one_session_here(ort, model, threads, x, want))
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Create, run (checking the output against `want`), release.
fn one_session_here(
    ort: &Ort,
    model: &[u8],
    threads: &str,
    x: &Tensor,
    want: Option<&[f32]>,
) -> Vec<f32> {
    let s = ort
        .session(model, &SessionSpec::rcpu(&[("threads", threads)]))
        .unwrap_or_else(|e| panic!("session (threads={threads}): {e}"));
    let y = s.run(std::slice::from_ref(x)).expect("run");
    let y = y[0].as_f32().to_vec();
    if let Some(w) = want {
        assert_eq!(y, w, "threads={threads}: output changed across sessions");
    }
    if threads == "2" {
        // While the session lives, its pool has exactly one worker (the previous session's
        // workers, joined a moment ago, may still be listed).
        settles_at(1, "a threads=2 session runs one rcpu worker");
    }
    y
}

/// Guarantees: a session's worker lanes are joined when its last session goes (thread counts
/// waited for under the hang guard, see `settles_at`; never a fixed sleep), an unregistered
/// plugin refuses sessions, outputs stay equal to the first session's, and VmRSS after a
/// warm-up grows by at most `RSS_BOUND_KIB` (a memory bound, not a time).
#[test]
fn sessions_and_registrations_come_and_go_without_leaks() {
    let sessions = env_count("RCPU_LIFECYCLE_SESSIONS", 1000);
    let cycles = env_count("RCPU_LIFECYCLE_CYCLES", 20);
    let ort = Ort::get();
    let plugin = paths::plugin().unwrap_or_else(|e| panic!("{e}"));
    let model = model();
    let x = Tensor::f32(&[3, 64], rand_f32(192, 5));
    let threads_before = rcpu_threads();
    assert_eq!(threads_before, 0, "no rcpu worker before registration");

    ort.register(REG, &plugin).expect("register");
    // Warm-up: allocator arenas, lazily initialised tables, ORT's own caches.
    let want = one_session(ort, &model, "2", &x, None);
    for i in 0..20 {
        one_session(ort, &model, ["1", "2"][i % 2], &x, Some(&want));
    }
    settles_at(0, "workers joined after warm-up");
    let rss_warm = vm_rss_kib();

    // Phase 1: many sessions, alternating lane counts (a pool starts and stops each time).
    for i in 0..sessions {
        one_session(ort, &model, ["2", "1", "3"][i % 3], &x, Some(&want));
    }
    settles_at(0, "worker lanes outlived their sessions");
    let threads_after_sessions = rcpu_threads();
    let rss_sessions = vm_rss_kib();
    println!(
        "lifecycle: {sessions} sessions: rcpu-w threads {threads_before} -> {threads_after_sessions}; \
         VmRSS warm {rss_warm} KiB -> {rss_sessions} KiB ({:+} KiB)",
        rss_sessions - rss_warm
    );
    assert!(
        rss_sessions - rss_warm <= RSS_BOUND_KIB,
        "VmRSS grew by {} KiB over {sessions} sessions",
        rss_sessions - rss_warm
    );

    // Phase 2: unregister / register cycles, a session run in between (released before the
    // library is unregistered, as ORT requires).
    let mut unmapped = 0;
    for c in 0..cycles {
        ort.unregister(REG).expect("unregister");
        settles_at(0, &format!("cycle {c}: workers alive after unregister"));
        if !plugin_mapped() {
            unmapped += 1;
        }
        let refused = std::thread::scope(|s| {
            s.spawn(|| ort.session(&model, &SessionSpec::rcpu(&[])).is_err())
                .join()
                .unwrap()
        });
        assert!(
            refused,
            "cycle {c}: an rcpu session was created while the plugin was unregistered"
        );
        ort.register(REG, &plugin).expect("re-register");
        one_session(ort, &model, ["2", "1"][c % 2], &x, Some(&want));
        settles_at(0, &format!("cycle {c}: workers outlived the session"));
    }
    ort.unregister(REG).expect("final unregister");
    let rss_end = vm_rss_kib();
    println!(
        "lifecycle: {cycles} unregister/register cycles: plugin unmapped after {unmapped} of them; \
         rcpu-w threads {}; VmRSS {rss_end} KiB ({:+} KiB vs warm)",
        rcpu_threads(),
        rss_end - rss_warm
    );
    settles_at(0, "after the final unregister");
    assert!(
        rss_end - rss_warm <= RSS_BOUND_KIB,
        "VmRSS grew by {} KiB over the register cycles",
        rss_end - rss_warm
    );
}

/// Set in the child process of [`unregister_while_a_session_lives_does_not_crash`].
const ENV_MISUSE_CHILD: &str = "RCPU_LIFECYCLE_MISUSE_CHILD";
const MISUSE_MARK: &str = "MISUSE-SURVIVED";

/// The misuse the README warns about: the library is unregistered while a session that uses it
/// is still alive. rcpu may leak (the factory and the library mapping stay), but the session
/// must keep computing and its release must not touch freed memory. Runs in a child process so
/// a crash is a failed assertion here, not a lost test binary.
#[test]
fn unregister_while_a_session_lives_does_not_crash() {
    if std::env::var_os(ENV_MISUSE_CHILD).is_some() {
        return; // the child runs `misuse_child` only
    }
    let exe = std::env::current_exe().expect("test binary path");
    let out = std::process::Command::new(exe)
        .args(["misuse_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(ENV_MISUSE_CHILD, "1")
        .output()
        .expect("spawn child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(MISUSE_MARK),
        "child did not survive the misuse: {}\nstdout tail: {}\nstderr tail: {}",
        out.status,
        &stdout[stdout.len().saturating_sub(800)..],
        &stderr[stderr.len().saturating_sub(800)..]
    );
}

/// The child of [`unregister_while_a_session_lives_does_not_crash`] (a no-op in the parent).
#[test]
fn misuse_child() {
    if std::env::var_os(ENV_MISUSE_CHILD).is_none() {
        return;
    }
    const REG_MISUSE: &str = "rcpu_lifecycle_misuse";
    let ort = Ort::get();
    let plugin = paths::plugin().unwrap_or_else(|e| panic!("{e}"));
    let model = model();
    let x = Tensor::f32(&[3, 64], rand_f32(192, 5));
    ort.register(REG_MISUSE, &plugin).expect("register");
    let s = ort
        .session(&model, &SessionSpec::rcpu(&[("threads", "2")]))
        .expect("session");
    let before = s.run(std::slice::from_ref(&x)).expect("run")[0]
        .as_f32()
        .to_vec();
    let unreg = ort.unregister(REG_MISUSE);
    println!("unregister with a live session: {unreg:?}");
    let after = s
        .run(std::slice::from_ref(&x))
        .expect("run after unregister")[0]
        .as_f32()
        .to_vec();
    assert_eq!(
        before, after,
        "the session's answer changed after unregister"
    );
    drop(s);
    // A second session of the same kind on a fresh registration still works.
    ort.register(REG_MISUSE, &plugin).expect("re-register");
    let again = one_session_here(ort, &model, "1", &x, Some(&before));
    assert_eq!(again, before);
    println!("{MISUSE_MARK}");
}
