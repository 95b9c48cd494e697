//! The worker process: one arm (ORT CPU EP or rcpu) in its own process, pinned to the configured
//! CPUs, driven by the parent over stdin/stdout, one JSON request per line in, one `@@ `-prefixed
//! JSON reply per line out (anything else on stdout is ignored by the parent).

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::conditions;
use super::llm_model::{generate, session_alias, step_feeds, Generation, Kv};
use super::model::ModelInfo;
use super::os;
use crate::stats::PluginStats;
use crate::{Ort, Provider, Session, SessionSpec, Tensor};

#[derive(Debug)]
pub struct WorkerArgs {
    pub arm: String,
    pub threads: usize,
    pub cpus: Vec<usize>,
    pub model: String,
    pub m: usize,
    pub seed: u64,
    /// ORT's own session options (`--ort-intra`, `--ort-spin`).
    pub ort: super::ort_opts::OrtOpts,
    /// rcpu provider options beyond `threads` (`--rcpu-opt KEY=VALUE`).
    pub rcpu_opts: Vec<(String, String)>,
}

struct State {
    args: WorkerArgs,
    model: Vec<u8>,
    info: ModelInfo,
    inputs: Vec<Tensor>,
    /// How the current LLM feeds hand over the KV cache (`llm_feed`).
    kv: Kv,
    session: Option<Session>,
    stats: Option<PluginStats>,
}

pub fn run(args: WorkerArgs) -> Result<(), String> {
    os::pin(&args.cpus)?;
    let model = std::fs::read(&args.model).map_err(|e| format!("reading {}: {e}", args.model))?;
    let mut info = ModelInfo::parse(&model)?;
    super::llm_folder::fill_kv_dims(&mut info, std::path::Path::new(&args.model));
    let inputs = info.inputs_for(args.m, args.seed)?;
    let mut st = State {
        args,
        model,
        info,
        inputs,
        kv: Kv::Copy,
        session: None,
        stats: None,
    };
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let req: Value =
            serde_json::from_str(&line).map_err(|e| format!("bad request '{line}': {e}"))?;
        if req["cmd"] == "quit" {
            break;
        }
        let reply = match handle(&mut st, &req) {
            Ok(v) => json!({"ok": v}),
            Err(e) => json!({"err": e}),
        };
        writeln!(out, "@@ {reply}").map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn session(st: &State) -> Result<&Session, String> {
    st.session.as_ref().ok_or_else(no_session)
}

/// One timed run; the outputs are released unread (copying them is not the runtime's cost).
/// Under a shared KV cache (`alias`, from [`alias_of`]) the presents are written into the past
/// feeds, as genai runs it.
fn run_timed(s: &Session, inputs: &mut [Tensor], alias: &[Option<usize>]) -> Result<f64, String> {
    let t = Instant::now();
    s.run_aliased_discard(inputs, alias)?;
    Ok(t.elapsed().as_nanos() as f64)
}

/// One run of the current feeds; every output not written into a feed (see [`run_timed`]).
fn run_feeds(s: &Session, inputs: &mut [Tensor], kv: Kv) -> Result<Vec<Tensor>, String> {
    let alias = session_alias(s, kv);
    Ok(s.run_aliased(inputs, &alias)?
        .into_iter()
        .flatten()
        .collect())
}

fn no_session() -> String {
    "no session: send 'load' first".to_string()
}

pub(super) fn session_spec(a: &WorkerArgs) -> SessionSpec {
    let mut spec = if a.arm == "rcpu" {
        let threads = a.threads.to_string();
        let mut opts = vec![("threads", threads.as_str())];
        opts.extend(a.rcpu_opts.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        SessionSpec::rcpu(&opts)
    } else {
        SessionSpec::ort(Some(a.threads))
    };
    a.ort.apply(&mut spec);
    // The session is made from the model's bytes: a model keeping its weights in side files (a
    // genai folder written by the model builder) finds them beside the model file.
    let dir = std::path::Path::new(&a.model).parent();
    if let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty()) {
        spec.config.push((
            "session.model_external_initializers_file_folder_path".into(),
            dir.display().to_string(),
        ));
    }
    spec
}

/// The generation a request asks for (`prompt`, `tokens`, `vocab`) on session `s`.
/// `kv_capacity` (0: `Kv::Copy`).
fn generate_req(
    info: &ModelInfo,
    seed: u64,
    s: &Session,
    req: &Value,
) -> Result<Generation, String> {
    let n = |k: &str| req[k].as_u64().unwrap_or(0) as usize;
    let (prompt, tokens, vocab) = (n("prompt"), n("tokens"), n("vocab"));
    let kv = Kv::from_capacity(n("kv_capacity"));
    generate(s, info, prompt, tokens, vocab, seed, kv)
}

/// One run of a profiling pass: the current feeds, or a generation when `tokens` is set.
fn profile_run(
    (info, seed): (&ModelInfo, u64),
    (inputs, kv): (&mut [Tensor], Kv),
    s: &Session,
    req: &Value,
) -> Result<(), String> {
    if req["tokens"].as_u64().unwrap_or(0) > 0 {
        generate_req(info, seed, s, req)?;
    } else {
        run_feeds(s, inputs, kv)?;
    }
    Ok(())
}

fn where_we_ran() -> Value {
    let cpu = os::current_cpu();
    json!({"cpu": cpu, "mhz": cpu.map(conditions::cpu_mhz).unwrap_or_else(|| "unavailable".into())})
}

fn handle(st: &mut State, req: &Value) -> Result<Value, String> {
    let n = |k: &str| req[k].as_u64().unwrap_or(0) as usize;
    match req["cmd"].as_str().unwrap_or("") {
        "load" => {
            let t0 = Instant::now();
            let ort = if st.args.arm == "rcpu" {
                crate::ort_with_rcpu()
            } else {
                Ort::get()
            };
            let env_s = t0.elapsed().as_secs_f64();
            let spec = session_spec(&st.args);
            let t1 = Instant::now();
            let model = if st.model.is_empty() {
                std::fs::read(&st.args.model).map_err(|e| format!("{}: {e}", st.args.model))?
            } else {
                std::mem::take(&mut st.model)
            };
            st.session = Some(ort.session(&model, &spec)?);
            // The model bytes are dropped after the session is made (large LLMs: three
            // workers would hold them); a second load reads the file again.
            let session_s = t1.elapsed().as_secs_f64();
            if st.args.arm == "rcpu" {
                st.stats = Some(PluginStats::open()?);
            }
            Ok(
                json!({"env_s": env_s, "session_s": session_s, "ort_version": ort.version(), "pid": std::process::id()}),
            )
        }
        "output" => {
            // Every output, concatenated in output order (parity covers them all): float
            // elements in "data", integer elements in "ints". `first`: the first output only
            // (an LLM's logits). Under a shared KV cache the presents are the past feeds
            // themselves and not among them.
            let s = st.session.as_ref().ok_or_else(no_session)?;
            let mut ys = run_feeds(s, &mut st.inputs, st.kv)?;
            if req["first"].as_bool().unwrap_or(false) {
                ys.truncate(1);
            }
            let mut parts = super::model::OutputParts::of(&ys);
            // `tail`: only the last N floats (an LLM's last position's logits).
            if let Some(n) = req["tail"].as_u64() {
                let keep = parts.floats.len().min(n as usize);
                parts.floats.drain(..parts.floats.len() - keep);
            }
            let shapes = ys.iter().map(|y| y.shape.clone()).collect::<Vec<_>>();
            // `floats_file`: the floats go to that file as little-endian f32 instead of into
            // the reply (a 512-token prompt's logits over a 151936-word vocabulary are 78 M
            // floats: about a minute of JSON per arm, a fraction of a second as bytes).
            if let Some(path) = req["floats_file"].as_str() {
                let bytes: Vec<u8> = parts.floats.iter().flat_map(|x| x.to_le_bytes()).collect();
                std::fs::write(path, bytes).map_err(|e| format!("{path}: {e}"))?;
                return Ok(json!({
                    "shapes": shapes,
                    "floats_file": path,
                    "count": parts.floats.len(),
                    "ints": parts.ints,
                }));
            }
            Ok(json!({
                "shapes": shapes,
                "data": parts.floats,
                "ints": parts.ints,
            }))
        }
        "time" => {
            let s = st.session.as_ref().ok_or_else(no_session)?;
            let alias = session_alias(s, st.kv);
            let ns: Vec<f64> = (0..n("iters"))
                .map(|_| run_timed(s, &mut st.inputs, &alias))
                .collect::<Result<_, _>>()?;
            Ok(json!({"ns": ns, "kv_capacity": st.kv.capacity(), "where": where_we_ran()}))
        }
        "gap" => {
            let s = st.session.as_ref().ok_or_else(no_session)?;
            let alias = session_alias(s, st.kv);
            let gap = Duration::from_micros(n("gap_us") as u64);
            let busy = req["busy"].as_bool().unwrap_or(false);
            let (u0, t0) = (os::usage(), Instant::now());
            let mut ns = Vec::with_capacity(n("tokens"));
            for _ in 0..n("tokens") {
                ns.push(run_timed(s, &mut st.inputs, &alias)?);
                if busy {
                    let t = Instant::now();
                    while t.elapsed() < gap {
                        std::hint::spin_loop();
                    }
                } else if !gap.is_zero() {
                    std::thread::sleep(gap);
                }
            }
            let wall = t0.elapsed().as_secs_f64();
            let u = os::usage().since(&u0);
            Ok(
                json!({"ns": ns, "wall_s": wall, "usage": u, "hwm_kb": conditions::vm_hwm_kb(), "where": where_we_ran()}),
            )
        }
        "llm_feed" => {
            // An LLM step: `seq` new tokens after `past` cached positions (llm_model.rs), the
            // KV cache shared with the presents when `kv_capacity` is set.
            let kv = Kv::from_capacity(n("kv_capacity"));
            st.inputs = step_feeds(&st.info, n("seq"), n("past"), n("vocab"), st.args.seed, kv)?;
            st.kv = kv;
            Ok(Value::Null)
        }
        "generate" => {
            let g = generate_req(&st.info, st.args.seed, session(st)?, req)?;
            Ok(
                json!({"prefill_ns": g.prefill_ns, "ns": g.step_ns, "steps_cpu_s": g.steps_cpu_s,
                    "ids": g.ids, "kv_capacity": g.kv.capacity(), "where": where_we_ran()}),
            )
        }
        "profile" => {
            // A separate, untimed session with ORT's profiler on, `iters` runs of the current
            // feeds (or generations when `tokens` is set), then the per-op summary; for rcpu,
            // also the fused path's own step times (`fused_steps`).
            let ort = if st.args.arm == "rcpu" {
                crate::ort_with_rcpu()
            } else {
                Ort::get()
            };
            let mut spec = session_spec(&st.args);
            let prefix = std::env::temp_dir().join(format!(
                "rcpu-bench-profile-{}-{}",
                st.args.arm,
                std::process::id()
            ));
            spec.profile = Some(prefix.display().to_string());
            // ORT's profiler times ORT nodes: a fused partition would be one entry, so the
            // per-op attribution is taken on rcpu's per-node path (same kernels, same results).
            if let Provider::Rcpu(opts) = &mut spec.provider {
                if !opts.iter().any(|(k, _)| k == "fuse") {
                    opts.push(("fuse".into(), "off".into()));
                }
            }
            let model =
                std::fs::read(&st.args.model).map_err(|e| format!("{}: {e}", st.args.model))?;
            let s = ort.session(&model, &spec)?;
            // One more run than asked: the summary leaves the first (one-time costs) out.
            for _ in 0..n("iters") + 1 {
                profile_run((&st.info, st.args.seed), (&mut st.inputs, st.kv), &s, req)?;
            }
            let file = s.end_profiling()?;
            drop(s);
            let mut summary = super::profile::summarize(&file);
            let _ = std::fs::remove_file(&file);
            if let (Ok(v), Some(stats)) = (&mut summary, &st.stats) {
                // The configuration that runs by default (fused partitions), timed step by step
                // by rcpu itself (provider option `step_times`).
                let mut spec = session_spec(&st.args);
                if let Provider::Rcpu(opts) = &mut spec.provider {
                    opts.push(("step_times".into(), "on".into()));
                }
                let s = ort.session(&model, &spec)?;
                profile_run((&st.info, st.args.seed), (&mut st.inputs, st.kv), &s, req)?;
                stats.reset()?;
                // A decode or prefill step is timed as the rounds time it (`run_timed`): what a
                // Run costs beyond the fused node (ORT's own path and the nodes left to ORT's
                // CPU EP) is the difference.
                let steps = req["tokens"].as_u64().unwrap_or(0) == 0;
                let alias = session_alias(&s, st.kv);
                let mut run_ns = 0.0;
                for _ in 0..n("iters") {
                    if steps {
                        run_ns += run_timed(&s, &mut st.inputs, &alias)?;
                    } else {
                        profile_run((&st.info, st.args.seed), (&mut st.inputs, st.kv), &s, req)?;
                    }
                }
                let mut fused = super::profile::fused_steps(&stats.json()?);
                if steps && !fused.is_null() {
                    fused["session_run_us"] = json!(run_ns / n("iters").max(1) as f64 / 1e3);
                }
                v["fused_steps"] = fused;
            }
            summary
        }
        "reset_stats" => {
            if let Some(p) = &st.stats {
                p.reset()?;
            }
            Ok(Value::Null)
        }
        "stats" => match &st.stats {
            Some(p) => p.json(),
            None => Ok(Value::Null),
        },
        "threads" => Ok(json!(conditions::threads()
            .into_iter()
            .map(|(tid, name, cpu)| json!({"tid": tid, "name": name, "cpu_s": cpu}))
            .collect::<Vec<_>>())),
        "info" => Ok(json!({"ops": st.info.ops, "weight_bytes": st.info.weight_bytes})),
        other => Err(format!("unknown worker command '{other}'")),
    }
}
