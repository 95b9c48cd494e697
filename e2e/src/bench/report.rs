//! The compare report (rules 1-8 made visible): the interleaved table, conditions, rule-3 evidence,
//! routes, the bandwidth floor, the steady window, and the headline with its null band and verdict
//! (or `steady state NOT REACHED` and no headline). Also the JSON summary for --json.

use serde_json::{json, Value};

use super::args::Opts;
use super::arm::ArmKind;
use super::compare::{Measured, Round, HEAVY_FOREIGN};
use super::conditions::{self, CpuTicks};
use super::counters;
use super::quant::median;
use super::steady::{steady_start, SteadyCfg};
use super::target::{progress, Target};
use super::verdict::{verdict, NullBand};

/// Prints the report; returns the exit code (0 headline, 3 steady state not reached).
pub fn print(run: &Measured, t: &Target, o: &Opts) -> Result<i32, String> {
    let Measured {
        header,
        threads,
        cpus,
        null_kind,
        rounds,
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
    } = run;
    let (threads, null_kind, run_ticks, run_ours, bw) =
        (*threads, *null_kind, *run_ticks, *run_ours, *bw);
    // Table.
    let names = ["ort", "rcpu", "null"];
    println!();
    println!(
        "{:>5}  {:<16} {:>10} {:>10} {:>10} {:>9} {:>13} {:>8} {:>12}",
        "round",
        "order",
        "ort p50us",
        "rcpu p50us",
        "null p50us",
        "ORT/rcpu",
        "null_b_over_a",
        "foreign",
        "idle-arm ms"
    );
    for (i, r) in rounds.iter().enumerate() {
        let order: Vec<&str> = r.order.iter().map(|&j| names[j]).collect();
        println!(
            "{:>5}  {:<16} {:>10.1} {:>10.1} {:>10.1} {:>9.3} {:>13.3} {:>8} {:>12.1}{}",
            i + 1,
            order.join(","),
            r.p50[0],
            r.p50[1],
            r.p50[2],
            r.p50[0] / r.p50[1],
            null_ratio(r, null_kind),
            conditions::pct(r.foreign),
            r.idle_cpu_ms,
            if r.foreign.unwrap_or(0.0) > HEAVY_FOREIGN {
                "  heavy foreign load"
            } else {
                ""
            }
        );
    }

    // Rule 4: steady window per arm; the latest start wins.
    let sc = SteadyCfg {
        k: o.steady_k,
        tol: o.steady_tol,
        ..SteadyCfg::default()
    };
    let starts: Vec<Option<usize>> = (0..3)
        .map(|a| steady_start(&rounds.iter().map(|r| r.p50[a]).collect::<Vec<_>>(), &sc))
        .collect();
    let start = starts
        .iter()
        .try_fold(0usize, |acc, s| s.map(|s| acc.max(s)));
    let heavy = rounds
        .iter()
        .filter(|r| r.foreign.unwrap_or(0.0) > HEAVY_FOREIGN)
        .count();
    let run_foreign = conditions::foreign_share(CpuTicks::default(), run_ticks, run_ours);
    println!();
    println!(
        "conditions: cpu '{}'; clock ort={} rcpu={} null={}; loadavg start [{load_start}] end [{load_end}]; \
         foreign busy share of cpus {cpus:?} while arms were timed: {} (worst round {}), of which hypervisor steal {:.0}%; {heavy}/{} rounds under heavy foreign load (>{:.0}%, kept)",
        conditions::cpu_model(),
        clock(&wheres[0]),
        clock(&wheres[1]),
        clock(&wheres[2]),
        conditions::pct(run_foreign),
        conditions::pct(rounds.iter().filter_map(|r| r.foreign).reduce(f64::max)),
        run_ticks.steal as f64 * 100.0 / run_ticks.total.max(1) as f64,
        rounds.len(),
        HEAVY_FOREIGN * 100.0,
    );
    let settle: Vec<f64> = (0..3)
        .map(|a| median(&rounds.iter().map(|r| r.settle_ms[a]).collect::<Vec<_>>()))
        .collect();
    println!(
        "rule 3: own process per arm, and before the next arm is timed the bench waits until the last one's \
         process stops using CPU (median wait after a batch: ort {:.0} ms, rcpu {:.0} ms, null {:.0} ms); idle arms \
         still burned {:.0} ms CPU in total while others were timed (/proc ticks, 10 ms resolution). ORT {}",
        settle[0],
        settle[1],
        settle[2],
        rounds.iter().map(|r| r.idle_cpu_ms).sum::<f64>(),
        ort_version
    );
    let (route_lines, route_json) =
        counters::route_report(&t.info.ops, stats, (o.rounds * o.iters) as u64);
    println!(
        "routes on rcpu (ledger of the rcpu arm, rcpu {} isa {}, per timed iteration):",
        stats["version"].as_str().unwrap_or("?"),
        stats["isa"].as_str().unwrap_or("?")
    );
    for l in &route_lines {
        println!("  {l}");
    }
    let ran_none = route_json["routes"]
        .as_array()
        .is_some_and(|r| r.iter().all(|x| x["ran"] == false));
    if ran_none {
        println!(
            "  NOTE: rcpu ran none of this model's ops: the 'rcpu' and null arms measured ORT's CPU EP fallback \
             (intra_op threads 1), not an rcpu kernel"
        );
    }

    let mut summary = json!({
        "label": header, "threads": threads, "cpus": cpus, "rounds": o.rounds, "iters": o.iters,
        "parity": {"rel_l2_rcpu": e_rcpu, "rel_l2_null": e_null, "tol": tol,
            "int_max_diff_rcpu": d_rcpu, "int_max_diff_null": d_null, "int_tol": int_tol},
        "conditions": {"cpu_model": conditions::cpu_model(), "where": wheres, "loadavg_start": load_start,
            "loadavg_end": load_end, "foreign_share_rounds": rounds.iter().map(|r| r.foreign).collect::<Vec<_>>(), "foreign_share_run": run_foreign},
        "per_round_p50_us": rounds.iter().map(|r| r.p50.to_vec()).collect::<Vec<_>>(),
        "per_round_p90_us": rounds.iter().map(|r| r.p90.to_vec()).collect::<Vec<_>>(),
        "routes": route_json, "read_gbps": bw, "weight_bytes": t.weight_bytes,
    });
    if t.decode {
        println!(
            "physical limit: {:.1} MB of weights per token; read bandwidth measured in this run {bw:.2} GB/s \
             ({threads} threads, same-size buffer, the higher of 4 KiB and huge pages, best of 5) -> floor {:.1} us/token",
            t.weight_bytes as f64 / 1e6,
            t.weight_bytes as f64 / bw / 1e3
        );
    }
    let code = match start {
        None => {
            println!(
                "steady state NOT REACHED (per-arm steady starts {starts:?}; rolling median k={} within {:.0}%): no headline ratio",
                sc.k,
                sc.tol * 100.0
            );
            summary["steady"] = json!(false);
            3
        }
        Some(s) => {
            let w = &rounds[s..];
            let med = |a: usize, p90: bool| {
                median(
                    &w.iter()
                        .map(|r| if p90 { r.p90[a] } else { r.p50[a] })
                        .collect::<Vec<_>>(),
                )
            };
            let ratio = med(0, false) / med(1, false);
            let nulls: Vec<f64> = w.iter().map(|r| null_ratio(r, null_kind)).collect();
            println!(
                "steady window: rounds {}..{} ({} warm-up rounds excluded)",
                s + 1,
                rounds.len(),
                s
            );
            for (a, name) in names.iter().enumerate() {
                let gbps = if t.decode {
                    t.weight_bytes as f64 / (med(a, false) * 1e-6) / 1e9
                } else {
                    f64::NAN
                };
                println!(
                    "  {name:<5} p50 {:>9.1} us  p90 {:>9.1} us{}",
                    med(a, false),
                    med(a, true),
                    if t.decode {
                        format!(
                            "  {gbps:>6.2} GB/s = {:>5.1}% of measured read bw",
                            gbps / bw * 100.0
                        )
                    } else {
                        String::new()
                    }
                );
            }
            summary["steady"] = json!({"start": s, "p50_us": [med(0,false), med(1,false), med(2,false)], "p90_us": [med(0,true), med(1,true), med(2,true)]});
            match NullBand::from_ratios(&nulls) {
                Some(b) => {
                    let v = verdict(ratio, &b);
                    let (slo, shi) = b.symmetric();
                    println!(
                        "HEADLINE [{}; threads={threads}; {} rounds x {} iters; rcpu routes: {}]: ORT/rcpu = {ratio:.3}  null_b_over_a median {:.3}, band [{:.3}, {:.3}] (symmetric [{slo:.3}, {shi:.3}])  verdict: {}",
                        t.label,
                        w.len(),
                        o.iters,
                        counters::route_summary(&t.info.ops, stats),
                        median(&nulls),
                        b.lo,
                        b.hi,
                        v.word()
                    );
                    summary["headline"] = json!({"ratio_ort_over_rcpu": ratio, "null_b_over_a": nulls, "band": b, "verdict": v.word()});
                }
                None => println!("null band unavailable (bad null ratios): no verdict"),
            }
            0
        }
    };
    if let Some(f) = &o.json {
        std::fs::write(
            f,
            serde_json::to_string_pretty(&summary).unwrap_or_default(),
        )
        .map_err(|e| format!("{f}: {e}"))?;
        progress(&format!("wrote {f}"));
    }
    Ok(code)
}

/// null_b_over_a: the null arm over the arm it repeats.
fn null_ratio(r: &Round, null_kind: ArmKind) -> f64 {
    match null_kind {
        ArmKind::Rcpu => r.p50[2] / r.p50[1],
        ArmKind::Ort => r.p50[2] / r.p50[0],
    }
}

fn clock(w: &Value) -> String {
    match w["cpu"].as_u64() {
        Some(c) => format!("cpu{c}@{}", w["mhz"].as_str().unwrap_or("unavailable")),
        None => "unavailable".into(),
    }
}
