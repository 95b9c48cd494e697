//! `rcpu-bench gap`: decode with gaps between tokens (rule 9). Per token one inference, then a sleep
//! (or a busy wait with --busy) of G us. Each arm in its own pinned worker process; per arm and gap:
//! p50/p90 latency, CPU seconds per token, cpu/wall, context switches, peak RSS, pool counters.

use serde_json::{json, Value};

use super::args::Opts;
use super::arm::{ArmKind, Worker, WorkerCfg};
use super::quant::{median, quantile};
use super::target::{placement, progress, Target};
use super::{conditions, counters, svg};

/// One arm at one gap.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GapRow {
    pub arm: String,
    pub gap_us: u64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub cpu_ms_per_token: f64,
    pub cpu_over_wall: f64,
    pub vcs_per_token: f64,
    pub ivcs_per_token: f64,
    pub hwm_mb: f64,
}

pub fn run(o: &Opts) -> Result<i32, String> {
    let t = Target::resolve(o)?;
    let (cpus, threads) = placement(o)?;
    let gaps: Vec<u64> = if o.sweep.is_empty() {
        vec![o.gap_us.unwrap_or(0)]
    } else {
        o.sweep.clone()
    };
    let cfg = WorkerCfg {
        threads,
        cpus: cpus.clone(),
        model_path: t.path.clone(),
        m: t.m,
        seed: o.seed,
        ort: Default::default(),
    };
    println!(
        "rcpu-bench gap: {} | threads={threads} cpus={cpus:?} tokens={} gap={} | each arm in its own pinned worker process",
        t.label,
        o.tokens,
        if o.busy { "busy-wait" } else { "sleep" }
    );
    println!(
        "conditions: cpu '{}'; loadavg start [{}]",
        conditions::cpu_model(),
        conditions::loadavg()
    );
    let mut arms = [
        Worker::spawn("ort", ArmKind::Ort, &cfg)?,
        Worker::spawn("rcpu", ArmKind::Rcpu, &cfg)?,
    ];
    for a in arms.iter_mut() {
        a.cmd("load")?;
        a.call(json!({"cmd": "time", "iters": 5}))?;
    }
    let mut rows: Vec<GapRow> = vec![];
    let mut route_lines: Vec<(u64, Vec<String>)> = vec![];
    for (gi, &g) in gaps.iter().enumerate() {
        let order: [usize; 2] = if gi % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            progress(&format!(
                "gap {g} us: {} x {} tokens",
                arms[i].label, o.tokens
            ));
            arms[i].cmd("reset_stats")?;
            let r = arms[i]
                .call(json!({"cmd": "gap", "gap_us": g, "busy": o.busy, "tokens": o.tokens}))?;
            arms[i].settle(500);
            rows.push(row(&arms[i].label, g, &r, o.tokens));
            if arms[i].kind == ArmKind::Rcpu {
                let stats = arms[i].cmd("stats")?;
                route_lines.push((
                    g,
                    counters::route_report(&t.info.ops, &stats, o.tokens as u64).0,
                ));
            }
        }
    }
    drop(arms);
    rows.sort_by(|a, b| (a.gap_us, &a.arm).cmp(&(b.gap_us, &b.arm)));
    println!(
        "{:<5} {:>8} {:>10} {:>10} {:>12} {:>9} {:>9} {:>9} {:>9}",
        "arm",
        "gap_us",
        "p50 us",
        "p90 us",
        "cpu ms/tok",
        "cpu/wall",
        "vcs/tok",
        "ivcs/tok",
        "VmHWM MB"
    );
    for r in &rows {
        println!(
            "{:<5} {:>8} {:>10.1} {:>10.1} {:>12.3} {:>9.2} {:>9.2} {:>9.2} {:>9.1}",
            r.arm,
            r.gap_us,
            r.p50_us,
            r.p90_us,
            r.cpu_ms_per_token,
            r.cpu_over_wall,
            r.vcs_per_token,
            r.ivcs_per_token,
            r.hwm_mb
        );
    }
    for (g, lines) in &route_lines {
        println!("rcpu routes and pool counters per token at gap {g} us:");
        for l in lines {
            println!("  {l}");
        }
    }
    println!("loadavg end [{}]", conditions::loadavg());
    if gaps.len() > 1 {
        let path = o.svg.clone().unwrap_or_else(|| "rcpu-bench-gap.svg".into());
        std::fs::write(&path, svg::gap_plot(&t.label, &rows))
            .map_err(|e| format!("{path}: {e}"))?;
        println!("wrote {path}");
    }
    if let Some(f) = &o.json {
        let j = json!({"label": t.label, "threads": threads, "cpus": cpus, "busy": o.busy, "rows": rows});
        std::fs::write(f, serde_json::to_string_pretty(&j).unwrap_or_default())
            .map_err(|e| format!("{f}: {e}"))?;
    }
    Ok(0)
}

fn row(arm: &str, gap: u64, r: &Value, tokens: usize) -> GapRow {
    let us: Vec<f64> = r["ns"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_f64())
        .map(|v| v / 1e3)
        .collect();
    let u = &r["usage"];
    let f = |k: &str| u[k].as_f64().unwrap_or(0.0);
    let cpu = f("user_s") + f("sys_s");
    let n = tokens.max(1) as f64;
    GapRow {
        arm: arm.into(),
        gap_us: gap,
        p50_us: median(&us),
        p90_us: quantile(&us, 0.9),
        cpu_ms_per_token: cpu * 1e3 / n,
        cpu_over_wall: cpu / r["wall_s"].as_f64().unwrap_or(f64::NAN),
        vcs_per_token: f("voluntary_cs") / n,
        ivcs_per_token: f("involuntary_cs") / n,
        hwm_mb: r["hwm_kb"].as_f64().unwrap_or(f64::NAN) / 1024.0,
    }
}
