//! `rcpu-bench compare`: parity first, then interleaved rounds of ORT, rcpu and a null arm, each in
//! its own worker process, with the conditions of every round. The report (steady window, null
//! band, verdict, bandwidth floor, routes) is in report.rs.

use serde_json::{json, Value};

use super::args::Opts;
use super::arm::{null_worker, ArmKind, Worker, WorkerCfg};
use super::conditions::{self, CpuTicks};
use super::model::OutputParts;
use super::quant::{median, quantile};
use super::target::{placement, progress, Target};
use super::{membw, report, rounds};

/// Foreign busy share above which a round is marked as taken under heavy load.
pub const HEAVY_FOREIGN: f64 = 0.25;

/// Everything a compare run measured, for the report.
pub struct Measured {
    pub header: String,
    pub threads: usize,
    pub cpus: Vec<usize>,
    pub null_kind: ArmKind,
    pub rounds: Vec<Round>,
    /// Where each arm ran last (cpu, clock).
    pub wheres: [Value; 3],
    pub load_start: String,
    pub load_end: String,
    /// /proc/stat ticks of the arms' CPUs over the timed windows, and our own CPU seconds then.
    pub run_ticks: CpuTicks,
    pub run_ours: f64,
    pub ort_version: String,
    /// The rcpu arm's stats JSON after the timed rounds.
    pub stats: Value,
    /// Read bandwidth measured for a buffer the size of the weights, GB/s.
    pub bw: f64,
    /// rel L2 of rcpu and null against ORT, and the tolerance.
    pub parity: (f64, f64, f64),
    /// Integer outputs: max |diff| of rcpu and null against ORT, and the tolerance.
    pub int_parity: (i64, i64, i64),
}

pub struct Round {
    pub order: Vec<usize>,
    /// Per arm (ort, rcpu, null): p50 and p90 in microseconds.
    pub p50: [f64; 3],
    pub p90: [f64; 3],
    /// Busy share of the arms' CPUs taken by other processes (None: round too short to tell).
    pub foreign: Option<f64>,
    /// CPU ms the two idle arms burned while each arm was timed (summed over arms).
    pub idle_cpu_ms: f64,
    /// How long each arm kept burning CPU after its batch (spinning threads) before it went quiet.
    pub settle_ms: [f64; 3],
}

pub fn run(o: &Opts) -> Result<i32, String> {
    let t = Target::resolve(o)?;
    let (cpus, threads) = placement(o)?;
    let load_start = conditions::loadavg();
    let null_kind = if o.null_arm == "ort" {
        ArmKind::Ort
    } else {
        ArmKind::Rcpu
    };
    let cfg = WorkerCfg {
        threads,
        cpus: cpus.clone(),
        model_path: t.path.clone(),
        m: t.m,
        seed: o.seed,
        ort: Default::default(),
    };
    let header = format!(
        "{} | threads={threads} cpus={cpus:?} rounds={} iters={} warmup={} null={}",
        t.label, o.rounds, o.iters, o.warmup, o.null_arm
    );
    println!("rcpu-bench compare: {header}");
    println!(
        "process model: each arm runs in its own worker process (rcpu-bench __worker), pinned with \
         sched_setaffinity to cpus {cpus:?}; idle arms block on a pipe read while another is timed"
    );
    progress("starting workers (ort, rcpu, null) and creating sessions");
    let mut arms = vec![
        Worker::spawn("ort", ArmKind::Ort, &cfg)?,
        Worker::spawn("rcpu", ArmKind::Rcpu, &cfg.with_ort(o.rcpu_ort))?,
        null_worker(o, null_kind, &cfg)?,
    ];
    let mut ort_version = String::new();
    for a in arms.iter_mut() {
        let l = a.cmd("load")?;
        ort_version = l["ort_version"].as_str().unwrap_or("").to_string();
    }

    // Rule 7: parity before timing.
    let tol = o.tol.unwrap_or_else(|| t.info.default_tol());
    let int_tol = t.info.default_int_tol();
    let outs: Vec<OutputParts> = arms.iter_mut().map(out_vec).collect::<Result<_, _>>()?;
    let e_rcpu = crate::compare::rel_l2(&outs[1].floats, &outs[0].floats);
    let e_null = crate::compare::rel_l2(&outs[2].floats, &outs[0].floats);
    let (d_rcpu, d_null) = (
        outs[1].int_max_diff(&outs[0]),
        outs[2].int_max_diff(&outs[0]),
    );
    let ok = e_rcpu <= tol && e_null <= tol && d_rcpu <= int_tol && d_null <= int_tol;
    if !outs[0].floats.is_empty() {
        println!(
            "parity: rcpu vs ORT rel L2 = {e_rcpu:.3e}, null vs ORT = {e_null:.3e} (tol {tol:.0e}) {}",
            if ok { "OK" } else { "MISMATCH" }
        );
    }
    if !outs[0].ints.is_empty() {
        let exact = outs[1]
            .ints
            .iter()
            .zip(&outs[0].ints)
            .filter(|(a, b)| a == b)
            .count();
        println!(
            "parity (integer outputs, {} elements): rcpu vs ORT max |diff| = {d_rcpu} ({exact} \
             exact), null vs ORT = {d_null} (tol {int_tol}) {}",
            outs[0].ints.len(),
            if ok { "OK" } else { "MISMATCH" }
        );
    }
    if !ok {
        println!("refusing to time a mismatch (rule 7)");
        return Ok(2);
    }

    progress(&format!("warm-up: {} runs per arm", o.warmup));
    for a in arms.iter_mut() {
        a.call(json!({"cmd": "time", "iters": o.warmup}))?;
        a.cmd("reset_stats")?;
        a.settle(500);
    }
    progress(&format!(
        "read bandwidth for a {:.1} MB buffer on {threads} threads",
        t.weight_bytes as f64 / 1e6
    ));
    let bw_ref = membw::Reference::measure(t.weight_bytes as usize, threads, 5);
    println!("{}", bw_ref.describe());
    let bw = bw_ref.best();

    let mut taken: Vec<Round> = vec![];
    // Foreign load is measured over the timed windows only (not the settle waits in between).
    let (mut run_ticks, mut run_ours) = (CpuTicks::default(), 0.0);
    let mut wheres: [Value; 3] = [Value::Null, Value::Null, Value::Null];
    for r in 0..o.rounds {
        let round = rounds::run(
            &mut arms,
            &cpus,
            r,
            &json!({"cmd": "time", "iters": o.iters}),
            true,
            false,
        )?;
        let (mut p50, mut p90, mut settle_ms) = ([0.0; 3], [0.0; 3], [0.0; 3]);
        let mut idle_cpu_ms = 0.0;
        for (i, c) in round.calls.iter().enumerate() {
            let us: Vec<f64> = rounds::floats(&c.res, "ns")
                .iter()
                .map(|v| v / 1e3)
                .collect();
            p50[i] = median(&us);
            p90[i] = quantile(&us, 0.9);
            settle_ms[i] = c.settle_ms;
            idle_cpu_ms += c.idle_cpu_ms;
            wheres[i] = c.res["where"].clone();
        }
        let (ticks, ours, order) = (round.ticks, round.ours, round.order.to_vec());
        let foreign = conditions::foreign_share(CpuTicks::default(), ticks, ours);
        rounds::accumulate(&mut run_ticks, &mut run_ours, &round);
        progress(&format!(
            "round {}/{}: ort {:.0} us, rcpu {:.0} us, null {:.0} us, foreign load {}",
            r + 1,
            o.rounds,
            p50[0],
            p50[1],
            p50[2],
            conditions::pct(foreign)
        ));
        taken.push(Round {
            order,
            p50,
            p90,
            foreign,
            idle_cpu_ms,
            settle_ms,
        });
    }
    let stats = arms[1].cmd("stats")?;
    let load_end = conditions::loadavg();
    drop(arms);

    let run = Measured {
        header,
        threads,
        cpus,
        null_kind,
        rounds: taken,
        wheres,
        load_start,
        load_end,
        run_ticks,
        run_ours,
        ort_version,
        stats,
        bw,
        parity: (e_rcpu, e_null, tol),
        int_parity: (d_rcpu, d_null, int_tol),
    };
    report::print(&run, &t, o)
}

fn out_vec(a: &mut Worker) -> Result<OutputParts, String> {
    let v = a.cmd("output")?;
    let floats = v["data"]
        .as_array()
        .ok_or("no output data")?
        .iter()
        .map(|x| x.as_f64().unwrap_or(f64::NAN) as f32)
        .collect();
    let ints = v["ints"]
        .as_array()
        .ok_or("no integer output data")?
        .iter()
        .map(|x| x.as_i64().unwrap_or(i64::MAX))
        .collect();
    Ok(OutputParts { floats, ints })
}
