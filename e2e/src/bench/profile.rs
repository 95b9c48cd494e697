//! Where a run's time goes, from ORT's profiler (`enable_profiling`): the JSON it writes holds one
//! event per node execution (`cat` "Node", `name` "<node>_kernel_time", `args.op_name`,
//! `args.provider`, `dur` in microseconds) and one `model_run` event per Run. Summed per op type
//! and provider, divided by the runs; what Run took beyond the nodes is ORT's own path (feeds,
//! fetches, the executor). The first run is left out when there are more (one-time costs).

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

/// Report lines: `op (provider) us/run share`, then ORT's own share.
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
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
