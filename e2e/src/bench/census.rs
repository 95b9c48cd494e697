//! `rcpu-bench census`: the threads each arm's process has, by phase: after session creation, after
//! the first run, and in steady state after 500 ms idle (with the CPU each thread used during that
//! idle window: a thread that burns CPU while the process is idle is spinning). One worker process
//! runs rcpu only, another ORT only.

use serde_json::{json, Value};

use super::args::Opts;
use super::arm::{ArmKind, Worker, WorkerCfg};
use super::target::{placement, progress, Target};

/// The model census uses when none is given.
pub const CENSUS_SPEC: &str = "nbits:k=1024,n=3072,layers=2,block=32,acc=4,m=1";

pub fn run(o: &Opts) -> Result<i32, String> {
    let mut o = o.clone();
    if o.model.is_none() && o.gen.is_none() {
        o.gen = Some(CENSUS_SPEC.into());
    }
    let t = Target::resolve(&o)?;
    let (cpus, threads) = placement(&o)?;
    let cfg = WorkerCfg {
        threads,
        cpus: cpus.clone(),
        model_path: t.path.clone(),
        m: t.m,
        seed: o.seed,
        ort: Default::default(),
    };
    println!(
        "rcpu-bench census: {} | threads={threads} cpus={cpus:?} | one worker process per arm",
        t.label
    );
    let mut out = json!({});
    for kind in [ArmKind::Rcpu, ArmKind::Ort] {
        progress(&format!("{} worker", kind.name()));
        let mut w = Worker::spawn(kind.name(), kind, &cfg)?;
        w.cmd("load")?;
        let after_load = w.cmd("threads")?;
        w.cmd("output")?;
        let after_first = w.cmd("threads")?;
        w.call(json!({"cmd": "time", "iters": 50}))?;
        let busy_end = w.cmd("threads")?;
        std::thread::sleep(std::time::Duration::from_millis(500));
        let idle = w.cmd("threads")?;
        println!(
            "\n[{}] {} threads after load, {} after first run, {} in steady state",
            kind.name(),
            len(&after_load),
            len(&after_first),
            len(&idle)
        );
        println!(
            "  {:<8} {:<18} {:>12} {:>12} {:>16}",
            "tid", "name", "cpu ms load", "cpu ms now", "cpu ms idle 500ms"
        );
        for th in idle.as_array().into_iter().flatten() {
            let tid = th["tid"].as_u64().unwrap_or(0);
            let at = |v: &Value| {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .find(|x| x["tid"].as_u64() == Some(tid))
                    .and_then(|x| x["cpu_s"].as_f64())
            };
            let now = th["cpu_s"].as_f64().unwrap_or(0.0);
            let idle_ms = at(&busy_end)
                .map(|b| format!("{:.1}", (now - b) * 1e3))
                .unwrap_or_else(|| "new".into());
            println!(
                "  {:<8} {:<18} {:>12} {:>12.1} {:>16}",
                tid,
                th["name"].as_str().unwrap_or("?"),
                at(&after_load)
                    .map(|c| format!("{:.1}", c * 1e3))
                    .unwrap_or_else(|| "-".into()),
                now * 1e3,
                idle_ms
            );
        }
        out[kind.name()] = json!({"after_load": after_load, "after_first_run": after_first, "busy_end": busy_end, "idle_500ms": idle});
    }
    if let Some(f) = &o.json {
        std::fs::write(f, serde_json::to_string_pretty(&out).unwrap_or_default())
            .map_err(|e| format!("{f}: {e}"))?;
    }
    Ok(0)
}

fn len(v: &Value) -> usize {
    v.as_array().map(|a| a.len()).unwrap_or(0)
}
