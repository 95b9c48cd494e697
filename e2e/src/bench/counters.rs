//! What ran (rule 6): ledger routes and pool counters per iteration, from `RcpuEp_StatsJson`
//! deltas (the rcpu worker resets the stats before the timed rounds and reads them after).
//!
//! A zero is only a zero when the ledger shows the route ran; otherwise the instrument never had a
//! chance to count and the cell says "route did not run".

use serde_json::{json, Value};

/// One pool counter cell.
pub fn counter_cell(value: u64, per: u64, route_ran: bool) -> String {
    if !route_ran {
        "route did not run".into()
    } else {
        format!("{:.2}", value as f64 / per.max(1) as f64)
    }
}

/// One line naming every op's route, for headline rows: `MatMul=stub x1 lanes, Relu=did not run`.
pub fn route_summary(ops: &[String], stats: &Value) -> String {
    let empty = vec![];
    let ledger = stats["ledger"].as_array().unwrap_or(&empty);
    ops.iter()
        .map(|op| {
            let rows: Vec<String> = ledger
                .iter()
                .filter(|r| r["op"] == op.as_str() && r["calls"].as_u64().unwrap_or(0) > 0)
                .map(|r| {
                    format!(
                        "{}/{}lanes",
                        r["variant"].as_str().unwrap_or("?"),
                        r["lanes"]
                    )
                })
                .collect();
            if rows.is_empty() {
                format!("{op}=did not run on rcpu")
            } else {
                format!("{op}={}", rows.join("+"))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Lines for the report and the same facts as JSON. `ops`: the model's op types;
/// `per`: iterations (or tokens) the counters span.
pub fn route_report(ops: &[String], stats: &Value, per: u64) -> (Vec<String>, Value) {
    let mut lines = vec![];
    let mut routes = vec![];
    let empty = vec![];
    let ledger = stats["ledger"].as_array().unwrap_or(&empty);
    let mut ran_any = false;
    let mut seen: Vec<String> = ops.to_vec();
    for r in ledger {
        let op = r["op"].as_str().unwrap_or("?").to_string();
        if !seen.contains(&op) {
            seen.push(op);
        }
    }
    for op in &seen {
        let rows: Vec<&Value> = ledger.iter().filter(|r| r["op"] == op.as_str()).collect();
        let calls: u64 = rows.iter().map(|r| r["calls"].as_u64().unwrap_or(0)).sum();
        if rows.is_empty() || calls == 0 {
            lines.push(format!(
                "{op}: route did not run on rcpu (node left on ORT CPU)"
            ));
            routes.push(json!({"op": op, "ran": false}));
            continue;
        }
        ran_any = true;
        for r in rows {
            let c = r["calls"].as_u64().unwrap_or(0);
            lines.push(format!(
                "{op}: variant={} lanes={} calls/iter={:.2}",
                r["variant"].as_str().unwrap_or("?"),
                r["lanes"],
                c as f64 / per.max(1) as f64
            ));
            routes.push(json!({"op": op, "ran": true, "variant": r["variant"], "lanes": r["lanes"], "calls": c}));
        }
    }
    let mut pools_json = vec![];
    match stats["pools"].as_array() {
        Some(pools) if !pools.is_empty() => {
            for (i, p) in pools.iter().enumerate() {
                let name = p
                    .get("name")
                    .or_else(|| p.get("id"))
                    .map(|v| v.to_string())
                    .unwrap_or(format!("pool{i}"));
                let mut cells = vec![];
                let mut cj = serde_json::Map::new();
                if let Some(c) = p["counters"].as_object() {
                    for (k, v) in c {
                        let v = v.as_u64().unwrap_or(0);
                        cells.push(format!("{k}={}", counter_cell(v, per, ran_any)));
                        cj.insert(
                            k.clone(),
                            if ran_any {
                                json!(v as f64 / per.max(1) as f64)
                            } else {
                                Value::Null
                            },
                        );
                    }
                }
                lines.push(format!("pool {name} (per iter): {}", cells.join("  ")));
                pools_json.push(json!({"pool": name, "per_iter": cj, "route_ran": ran_any}));
            }
        }
        _ => {
            lines.push("pools: none reported by this rcpu build (no pool counters to show)".into())
        }
    }
    if stats["memory"].is_object() {
        let mut kv = vec![];
        flatten("", &stats["memory"], &mut kv);
        lines.push(format!(
            "memory (non-zero figures): {}",
            if kv.is_empty() {
                "all zero".into()
            } else {
                kv.join(" ")
            }
        ));
    }
    let prefetch = &stats["kernels"]["matmul_nbits_decode_prefetch"];
    if prefetch.is_object() {
        lines.push(decode_prefetch_line(prefetch));
    }
    (
        lines,
        json!({"routes": routes, "pools": pools_json, "isa": stats["isa"], "version": stats["version"],
               "decode_prefetch": prefetch}),
    )
}

/// The one-row (decode) prefetch distance the arm's tuner chose, from the stats'
/// `kernels.matmul_nbits_decode_prefetch` (whole process, warm-up and profiling included).
fn decode_prefetch_line(p: &Value) -> String {
    let ratio = p["last_ratio"]
        .as_f64()
        .map_or("-".to_string(), |r| format!("{r:.3}"));
    format!(
        "decode prefetch (one-row tuner, whole process): distance {} bytes after {} trials \
         ({} switches); last trial's time with / without the prefetch {ratio}",
        p["distance_bytes"], p["trials"], p["switches"]
    )
}

/// `a.b=v` for every non-zero leaf.
fn flatten(prefix: &str, v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                flatten(
                    &if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    },
                    x,
                    out,
                );
            }
        }
        Value::Number(n) if n.as_f64() == Some(0.0) => {}
        other => out.push(format!("{prefix}={other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_counter_reads_did_not_run_not_zero() {
        let stats = json!({"ledger": [], "pools": [{"counters": {"dispatches": 0, "parks": 0}}]});
        let (lines, j) = route_report(&["MatMulNBits".into()], &stats, 100);
        let text = lines.join("\n");
        assert!(
            text.contains("MatMulNBits: route did not run on rcpu"),
            "{text}"
        );
        assert!(text.contains("dispatches=route did not run"), "{text}");
        assert!(
            !text.contains("dispatches=0"),
            "a dead counter printed as 0: {text}"
        );
        assert_eq!(j["pools"][0]["per_iter"]["dispatches"], Value::Null);
        assert_eq!(
            route_summary(&["MatMulNBits".into()], &stats),
            "MatMulNBits=did not run on rcpu"
        );
    }

    #[test]
    fn live_route_prints_true_zeros_and_rates() {
        let stats = json!({
            "ledger": [{"op": "MatMul", "variant": "avx2", "lanes": 2, "calls": 200}],
            "pools": [{"name": "decode", "counters": {"dispatches": 400, "parks": 0}}]
        });
        let (lines, _) = route_report(&["MatMul".into(), "Relu".into()], &stats, 100);
        let text = lines.join("\n");
        assert!(
            text.contains("MatMul: variant=avx2 lanes=2 calls/iter=2.00"),
            "{text}"
        );
        assert!(text.contains("Relu: route did not run"), "{text}");
        assert!(
            text.contains("dispatches=4.00") && text.contains("parks=0.00"),
            "{text}"
        );
        assert_eq!(
            route_summary(&["MatMul".into()], &stats),
            "MatMul=avx2/2lanes"
        );
    }

    #[test]
    fn the_decode_prefetch_choice_is_printed_and_kept() {
        let stats = json!({"ledger": [], "kernels": {"matmul_nbits_decode_prefetch": {
            "distance_bytes": 0, "decode_calls": 40000, "trials": 5, "switches": 1,
            "last_ratio": 1.1234}}});
        let (lines, j) = route_report(&[], &stats, 1);
        let text = lines.join("\n");
        assert!(
            text.contains("distance 0 bytes after 5 trials (1 switches)")
                && text.contains("with / without the prefetch 1.123"),
            "{text}"
        );
        assert_eq!(j["decode_prefetch"]["trials"], 5);
        // Before any trial there is no ratio.
        let stats = json!({"ledger": [], "kernels": {"matmul_nbits_decode_prefetch": {
            "distance_bytes": 3072, "decode_calls": 10, "trials": 0, "switches": 0,
            "last_ratio": null}}});
        let (lines, _) = route_report(&[], &stats, 1);
        assert!(
            lines.iter().any(|l| l.ends_with("the prefetch -")),
            "{lines:?}"
        );
    }

    #[test]
    fn missing_pools_section_is_said() {
        let (lines, _) = route_report(&[], &json!({"ledger": []}), 1);
        assert!(lines.iter().any(|l| l.contains("pools: none reported")));
    }
}
