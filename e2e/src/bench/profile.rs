//! Where a run's time goes, from ORT's profiler (`enable_profiling`): the JSON it writes holds one
//! event per node execution (`cat` "Node", `name` "<node>_kernel_time", `args.op_name`,
//! `args.provider`, `dur` in microseconds) and one `model_run` event per Run. Summed per op type
//! and provider, divided by the runs; what Run took beyond the nodes is ORT's own path (feeds,
//! fetches, the executor). The first run is left out when there are more (one-time costs).
//! ORT's profiler sees a fused partition as one node, so it is read on rcpu's per-node path;
//! the fused path's own split comes from rcpu's step times (`fused_steps`).

use serde_json::{json, Value};

/// Per-op-type time of `runs` runs from the profile file at `path`.
pub fn summarize(path: &str) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
    let events: Vec<Value> =
        serde_json::from_str(&text).map_err(|e| format!("profile {path}: {e}"))?;
    Ok(summarize_events(&events))
}

pub fn summarize_events(events: &[Value]) -> Value {
    let mut by_op: Vec<(String, String, f64, u64)> = vec![];
    let (mut run_us, mut runs, mut node_us) = (0.0, 0u64, 0.0);
    // The first run of a fresh session pays one-time costs (lazy set-up in the first node): when
    // there are several runs, everything up to the end of the first is left out.
    let ts = |e: &Value| e["ts"].as_f64().unwrap_or(0.0);
    let run_ends: Vec<f64> = events
        .iter()
        .filter(|e| e["cat"] == "Session" && e["name"] == "model_run")
        .map(|e| ts(e) + e["dur"].as_f64().unwrap_or(0.0))
        .collect();
    let skip_until = match run_ends.as_slice() {
        [first, _, ..] => *first,
        _ => f64::NEG_INFINITY,
    };
    for e in events
        .iter()
        .filter(|e| ts(e) + e["dur"].as_f64().unwrap_or(0.0) > skip_until)
    {
        let dur = e["dur"].as_f64().unwrap_or(0.0);
        match e["cat"].as_str() {
            Some("Session") if e["name"] == "model_run" => {
                run_us += dur;
                runs += 1;
            }
            Some("Node")
                if e["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("_kernel_time")) =>
            {
                let op = e["args"]["op_name"].as_str().unwrap_or("?").to_string();
                let prov = e["args"]["provider"].as_str().unwrap_or("?");
                let prov = prov.trim_end_matches("ExecutionProvider").to_string();
                node_us += dur;
                match by_op.iter_mut().find(|r| r.0 == op && r.1 == prov) {
                    Some(r) => {
                        r.2 += dur;
                        r.3 += 1;
                    }
                    None => by_op.push((op, prov, dur, 1)),
                }
            }
            _ => {}
        }
    }
    by_op.sort_by(|a, b| b.2.total_cmp(&a.2));
    let per = runs.max(1) as f64;
    let total = if run_us > 0.0 { run_us } else { node_us };
    let ops: Vec<Value> = by_op
        .iter()
        .map(|(op, prov, us, n)| {
            json!({"op": op, "provider": prov, "us_per_run": us / per,
                   "calls_per_run": *n as f64 / per, "share": us / total.max(1e-9)})
        })
        .collect();
    json!({
        "runs": runs,
        "run_us": run_us / per,
        "node_us": node_us / per,
        "outside_nodes_share": if run_us > 0.0 { (run_us - node_us).max(0.0) / run_us } else { 0.0 },
        "ops": ops,
    })
}

/// rcpu's own step times of fused runs (the `step_times` rows of its stats JSON, provider option
/// `step_times=on`) per fused run: each step kind's time, calls and share of the run, and the
/// run's time outside its steps (frames, the fused node's outputs). `Null` when no fused run
/// was timed (e.g. `fuse=off`).
pub fn fused_steps(stats: &Value) -> Value {
    let rows = stats["step_times"].as_array().cloned().unwrap_or_default();
    let get = |r: &Value, k: &str| r[k].as_u64().unwrap_or(0) as f64;
    let Some(whole) = rows.iter().find(|r| r["step"] == "(fused run)") else {
        return Value::Null;
    };
    let (runs, run_ns) = (get(whole, "calls").max(1.0), get(whole, "ns"));
    let mut steps: Vec<&Value> = rows.iter().filter(|r| r["step"] != "(fused run)").collect();
    steps.sort_by(|a, b| get(b, "ns").total_cmp(&get(a, "ns")));
    let steps_ns: f64 = steps.iter().map(|r| get(r, "ns")).sum();
    json!({
        "runs": runs,
        "run_us": run_ns / runs / 1e3,
        "outside_steps_share": ((run_ns - steps_ns) / run_ns.max(1.0)).max(0.0),
        "steps": steps.iter().map(|r| json!({
            "step": r["step"],
            "us_per_run": get(r, "ns") / runs / 1e3,
            "calls_per_run": get(r, "calls") / runs,
            "share": get(r, "ns") / run_ns.max(1.0),
        })).collect::<Vec<_>>(),
    })
}

/// Report lines: `op (provider) us/run share`, then ORT's own share; for rcpu, then the fused
/// path's step times.
pub fn lines(arm: &str, v: &Value) -> Vec<String> {
    let mut out = vec![format!(
        "{arm}: {:.0} us per run over {} profiled runs; nodes {:.0} us, outside nodes (ORT's \
         path: feeds, fetches, executor) {:.1}%",
        v["run_us"].as_f64().unwrap_or(0.0),
        v["runs"],
        v["node_us"].as_f64().unwrap_or(0.0),
        v["outside_nodes_share"].as_f64().unwrap_or(0.0) * 100.0
    )];
    for o in v["ops"].as_array().into_iter().flatten() {
        out.push(format!(
            "  {:<34} {:>6} {:>9.1} us/run {:>6.1}%  ({:.0} calls/run)",
            o["op"].as_str().unwrap_or("?"),
            o["provider"].as_str().unwrap_or("?"),
            o["us_per_run"].as_f64().unwrap_or(0.0),
            o["share"].as_f64().unwrap_or(0.0) * 100.0,
            o["calls_per_run"].as_f64().unwrap_or(0.0)
        ));
    }
    let f = &v["fused_steps"];
    if !f.is_null() {
        out.push(format!(
            "{arm} fused (default configuration, step_times=on): {:.0} us per fused run over {:.0} \
             runs; outside the steps (frames, the fused node's outputs) {:.1}%",
            f["run_us"].as_f64().unwrap_or(0.0),
            f["runs"].as_f64().unwrap_or(0.0),
            f["outside_steps_share"].as_f64().unwrap_or(0.0) * 100.0
        ));
        if let (Some(run), Some(fused)) = (f["session_run_us"].as_f64(), f["run_us"].as_f64()) {
            out.push(format!(
                "  a session Run took {run:.0} us: {:.0} us ({:.1}%) of it outside the fused node \
                 (ORT's path and the nodes left to ORT's CPU EP)",
                run - fused,
                (run - fused) / run.max(1e-9) * 100.0
            ));
        }
        for o in f["steps"].as_array().into_iter().flatten() {
            out.push(format!(
                "  {:<41} {:>9.1} us/run {:>6.1}%  ({:.0} calls/run)",
                o["step"].as_str().unwrap_or("?"),
                o["us_per_run"].as_f64().unwrap_or(0.0),
                o["share"].as_f64().unwrap_or(0.0) * 100.0,
                o["calls_per_run"].as_f64().unwrap_or(0.0)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_steps_are_per_run_with_the_rest_outside() {
        let stats = json!({"step_times": [
            {"step": "(fused run)", "calls": 2, "ns": 10_000},
            {"step": "GroupQueryAttention", "calls": 4, "ns": 1_000},
            {"step": "MatMulNBits", "calls": 10, "ns": 8_000}
        ]});
        let v = fused_steps(&stats);
        assert_eq!(v["runs"], 2.0);
        assert_eq!(v["run_us"], 5.0);
        assert_eq!(v["steps"][0]["step"], "MatMulNBits");
        assert_eq!(v["steps"][0]["us_per_run"], 4.0);
        assert_eq!(v["steps"][0]["calls_per_run"], 5.0);
        assert_eq!(v["steps"][1]["share"], 0.1);
        let outside = v["outside_steps_share"].as_f64().unwrap();
        assert!((outside - 0.1).abs() < 1e-12, "{outside}");
        assert!(fused_steps(&json!({"step_times": []})).is_null());
    }

    /// Seen failing with the difference taken the other way round (fused run minus Run).
    #[test]
    fn a_run_beyond_the_fused_node_is_reported() {
        let mut v = json!({"run_us": 100.0, "runs": 1, "node_us": 90.0, "ops": []});
        v["fused_steps"] = json!({"runs": 4.0, "run_us": 80.0, "outside_steps_share": 0.0,
            "steps": [], "session_run_us": 100.0});
        let out = lines("rcpu", &v).join("\n");
        assert!(
            out.contains("a session Run took 100 us: 20 us (20.0%) of it outside the fused node"),
            "{out}"
        );
        v["fused_steps"]
            .as_object_mut()
            .unwrap()
            .remove("session_run_us");
        assert!(!lines("rcpu", &v).join("\n").contains("session Run"));
    }

    #[test]
    fn sums_nodes_per_op_and_provider_after_the_first_run() {
        let ev = json!([
            {"cat": "Session", "name": "model_run", "ts": 0, "dur": 5000},
            {"cat": "Node", "name": "w_kernel_time", "ts": 10, "dur": 4900,
             "args": {"op_name": "SimplifiedLayerNormalization", "provider": "RcpuExecutionProvider"}},
            {"cat": "Session", "name": "model_run", "ts": 6000, "dur": 100},
            {"cat": "Session", "name": "model_run", "ts": 7000, "dur": 120},
            {"cat": "Node", "name": "a_kernel_time", "ts": 6010, "dur": 60,
             "args": {"op_name": "MatMulNBits", "provider": "RcpuExecutionProvider"}},
            {"cat": "Node", "name": "a_kernel_time", "ts": 7010, "dur": 70,
             "args": {"op_name": "MatMulNBits", "provider": "RcpuExecutionProvider"}},
            {"cat": "Node", "name": "g_kernel_time", "ts": 7090, "dur": 20,
             "args": {"op_name": "Gather", "provider": "CPUExecutionProvider"}},
            {"cat": "Node", "name": "g_fence_before", "ts": 7085, "dur": 5,
             "args": {"op_name": "Gather", "provider": "CPUExecutionProvider"}}
        ]);
        let v = summarize_events(ev.as_array().unwrap());
        assert_eq!(v["runs"], 2);
        assert_eq!(v["run_us"], 110.0);
        assert_eq!(v["node_us"], 75.0);
        assert_eq!(v["ops"][0]["op"], "MatMulNBits");
        assert_eq!(v["ops"][0]["provider"], "Rcpu");
        assert_eq!(v["ops"][0]["us_per_run"], 65.0);
        assert_eq!(v["ops"][1]["provider"], "CPU");
        let outside = v["outside_nodes_share"].as_f64().unwrap();
        assert!((outside - 35.0 / 110.0).abs() < 1e-9, "{outside}");
    }
}
