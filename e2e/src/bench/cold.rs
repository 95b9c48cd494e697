//! `rcpu-bench cold`: cold start (rule 4) from fresh processes. Each sample spawns a new worker per
//! arm (arm order alternating) and times: runtime load (+ plugin registration for rcpu), session
//! creation (prepack included), the first run, and a warm run (p50 of 5).

use serde_json::json;

use super::args::Opts;
use super::arm::{ArmKind, Worker, WorkerCfg};
use super::conditions;
use super::quant::{max, median, min};
use super::target::{placement, progress, Target};

const PHASES: [&str; 4] = [
    "runtime load+register",
    "session create",
    "first run",
    "warm run (p50 of 5)",
];

pub fn run(o: &Opts) -> Result<i32, String> {
    let t = Target::resolve(o)?;
    let (cpus, threads) = placement(o)?;
    let cfg = WorkerCfg {
        threads,
        cpus: cpus.clone(),
        model_path: t.path.clone(),
        m: t.m,
        seed: o.seed,
        ort: Default::default(),
    };
    println!(
        "rcpu-bench cold: {} | threads={threads} cpus={cpus:?} samples={} | a fresh worker process per sample and arm",
        t.label, o.samples
    );
    println!(
        "conditions: cpu '{}'; loadavg start [{}]",
        conditions::cpu_model(),
        conditions::loadavg()
    );
    // ms[arm][phase] -> samples
    let mut ms = vec![vec![vec![]; PHASES.len()]; 2];
    for s in 0..o.samples {
        let order = if s % 2 == 0 {
            [ArmKind::Ort, ArmKind::Rcpu]
        } else {
            [ArmKind::Rcpu, ArmKind::Ort]
        };
        for kind in order {
            progress(&format!("sample {}/{}: {}", s + 1, o.samples, kind.name()));
            let mut w = Worker::spawn(kind.name(), kind, &cfg)?;
            let l = w.cmd("load")?;
            let first = w.call(json!({"cmd": "time", "iters": 1}))?;
            let warm = w.call(json!({"cmd": "time", "iters": 5}))?;
            let a = if kind == ArmKind::Ort { 0 } else { 1 };
            let ns = |v: &serde_json::Value| -> Vec<f64> {
                v["ns"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x.as_f64())
                    .map(|x| x / 1e6)
                    .collect()
            };
            ms[a][0].push(l["env_s"].as_f64().unwrap_or(f64::NAN) * 1e3);
            ms[a][1].push(l["session_s"].as_f64().unwrap_or(f64::NAN) * 1e3);
            ms[a][2].push(ns(&first)[0]);
            ms[a][3].push(median(&ns(&warm)));
            drop(w);
        }
    }
    println!(
        "{:<24} {:>26} {:>26}",
        "phase (ms)", "ort median [min, max]", "rcpu median [min, max]"
    );
    for (p, name) in PHASES.iter().enumerate() {
        let cell = |v: &[f64]| format!("{:.2} [{:.2}, {:.2}]", median(v), min(v), max(v));
        println!(
            "{:<24} {:>26} {:>26}",
            name,
            cell(&ms[0][p]),
            cell(&ms[1][p])
        );
    }
    println!("loadavg end [{}]", conditions::loadavg());
    if let Some(f) = &o.json {
        let j = json!({"label": t.label, "phases": PHASES, "ort_ms": ms[0], "rcpu_ms": ms[1]});
        std::fs::write(f, serde_json::to_string_pretty(&j).unwrap_or_default())
            .map_err(|e| format!("{f}: {e}"))?;
    }
    Ok(0)
}
