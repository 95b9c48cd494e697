//! `rcpu-bench llm`: a whole LLM, generated (`--gen llm:...`, gen_llm.rs) or an onnxruntime-genai
//! model folder such as the model builder writes (MODEL = the folder, llm_folder.rs), ORT vs rcpu
//! vs a null arm, each in its own worker process, interleaved rounds (as compare). Cases:
//!
//! - `decode`: one token after `--past` cached positions, `--iters` runs per round;
//! - `generate`: a greedy generation loop, a `--past`-token prompt then `--tokens` steps, each
//!   feeding the step's presents back as past (a growing KV cache); one loop per arm per round;
//! - `prefill`: `--prompt` tokens from an empty cache (each length a case), iters * 16 / tokens
//!   runs per round (at least 1, at most iters).
//!
//! `--kv shared` runs every case the way onnxruntime-genai runs a model whose
//! genai_config says `past_present_share_buffer: true` (what its builder writes for
//! GroupQueryAttention models): one buffer of the model's `ctx` positions per layer's keys and
//! values, passed as the past input and pre-allocated as the present output, written in place
//! (`llm_model::Kv`); the default `copy` feeds past and reads back presents as separate tensors.
//!
//! Per case: parity first (logits; generate: the greedy token ids), then the per-token table
//! (p50/p90, CPU, weight bytes, GB/s and its fraction of the read bandwidth of a same-size buffer
//! measured in this run), the headline ORT/rcpu with its null band and the steady verdict beside
//! it, rcpu's counters per token and, in a separate untimed pass per arm, ORT's profiler's
//! per-op-type time. Every run's time includes copying logits and presents out of ORT (both arms).

use serde_json::{json, Value};

use super::args::Opts;
use super::arm::{null_worker, ArmKind, Worker, WorkerCfg};
use super::conditions::{foreign_share, pct, CpuTicks};
use super::lane_probe::{Placement, FAR_NS};
use super::llm_folder::LlmShape;
use super::llm_report::{round_fractions, summarize, ReadFloor, Timed, ROUND_READ_PASSES};
use super::quant::{median, quantile};
use super::target::{placement, progress, Target};
use super::{cpu_probe, lane_probe, membw, profile, rounds};

/// One thing to time.
#[derive(Debug, Clone, PartialEq)]
enum Case {
    /// `seq` tokens after `past` cached ones.
    Step {
        seq: usize,
        past: usize,
    },
    Generate {
        prompt: usize,
        tokens: usize,
    },
}

impl Case {
    /// Cached positions a timed token's attention reads on average: a decode step's past and its
    /// own row; a generated token's, from the prompt's to the last one's. None for a prefill (the
    /// weights are read once for all its tokens; its own rows are not counted).
    fn kv_positions(&self) -> Option<usize> {
        match *self {
            Case::Step { seq: 1, past } => Some(past + 1),
            Case::Step { .. } => None,
            Case::Generate { prompt, tokens } => Some(prompt + tokens.div_ceil(2)),
        }
    }

    fn name(&self) -> String {
        match self {
            Case::Step { seq: 1, past } => format!("decode past={past}"),
            Case::Step { seq, .. } => format!("prefill {seq}"),
            Case::Generate { prompt, tokens } => {
                format!("generate prompt={prompt} tokens={tokens} (growing KV cache)")
            }
        }
    }
    /// Tokens one timed sample covers.
    fn tokens(&self) -> usize {
        match self {
            Case::Step { seq, .. } => *seq,
            Case::Generate { .. } => 1,
        }
    }
}

fn cases(o: &Opts) -> Vec<Case> {
    let mut v = vec![];
    for m in &o.modes {
        match m.as_str() {
            "decode" => v.push(Case::Step {
                seq: 1,
                past: o.past,
            }),
            "generate" => v.push(Case::Generate {
                prompt: o.past.max(1),
                tokens: o.tokens,
            }),
            _ => v.extend(o.prompts.iter().map(|&p| Case::Step { seq: p, past: 0 })),
        }
    }
    v
}

/// The spec with `--layers` / `--vocab` appended (later items win).
pub(super) fn spec_of(o: &Opts) -> String {
    let mut s = o.gen.clone().unwrap_or_default();
    for (k, v) in [("layers", o.layers), ("vocab", o.vocab)] {
        if let Some(v) = v {
            s.push_str(&format!(",{k}={v}"));
        }
    }
    s
}

/// What `llm` and `demo` share before timing: the model (generated, cached or a genai folder),
/// the placement and the three arms with their sessions.
pub(super) struct Setup {
    pub shape: LlmShape,
    pub t: Target,
    pub cpus: Vec<usize>,
    pub threads: usize,
    pub arms: Vec<Worker>,
    /// Seconds spent generating the model (None: it came from the cache or a folder).
    pub gen_s: Option<f64>,
    /// Each arm's session-creation seconds.
    pub session_s: [f64; 3],
}

/// The model: `spec` (an `llm:` spec, generated or found in the cache) or, without one, the
/// genai model folder given as MODEL (llm_folder.rs). Cases needing more positions than the
/// model holds (`needs`: case name and positions) are refused before anything is generated.
/// Returns the target and the seconds spent generating it.
fn llm_target(
    o: &Opts,
    spec: Option<&str>,
    needs: &[(String, Option<usize>)],
) -> Result<(Target, Option<f64>), String> {
    let check = |ctx: usize| {
        for (name, need) in needs {
            if need.is_none_or(|n| n > ctx) {
                return Err(format!(
                    "llm: {name} needs more positions than the model holds (ctx={ctx}); add \
                     ctx=N to a generated model's spec"
                ));
            }
        }
        Ok(())
    };
    let Some(spec) = spec else {
        let t = Target::resolve(o)?;
        let shape = t.llm.as_ref().ok_or(
            "llm: MODEL must be a genai model folder (genai_config.json beside the model), or \
             give --gen llm:...",
        )?;
        check(shape.ctx)?;
        progress(&format!("model {}", shape.label));
        return Ok((t, None));
    };
    let parsed = super::gen::Spec::parse(spec)?;
    let super::gen::Kind::Llm(l) = parsed.kind else {
        return Err("llm: --gen must be an llm: spec".into());
    };
    check(l.ctx)?;
    progress(&format!(
        "model {} (cached under {})",
        l.label(),
        super::llm_model::models_dir().display()
    ));
    let t0 = std::time::Instant::now();
    let cached = super::llm_model::is_cached(&l);
    let t = Target::resolve(&Opts {
        gen: Some(spec.into()),
        model: None,
        ..o.clone()
    })?;
    Ok((t, (!cached).then(|| t0.elapsed().as_secs_f64())))
}

/// The model (`llm_target`), then the arms (ort, rcpu, null), each in its own process, with
/// their sessions.
pub(super) fn setup(
    o: &Opts,
    spec: Option<&str>,
    needs: &[(String, Option<usize>)],
) -> Result<Setup, String> {
    let (t, gen_s) = llm_target(o, spec, needs)?;
    let shape = t.llm.clone().ok_or("llm: the model is not an LLM")?;
    let (cpus, threads) = placement(o)?;
    let null_kind = if o.null_arm == "ort" {
        ArmKind::Ort
    } else {
        ArmKind::Rcpu
    };
    let cfg = WorkerCfg {
        threads,
        cpus: cpus.clone(),
        model_path: t.path.clone(),
        m: 1,
        seed: o.seed,
        ort: Default::default(),
    };
    progress("starting workers (ort, rcpu, null) and creating sessions");
    let mut arms = vec![
        Worker::spawn("ort", ArmKind::Ort, &cfg)?,
        Worker::spawn("rcpu", ArmKind::Rcpu, &cfg.with_ort(o.rcpu_ort))?,
        null_worker(o, null_kind, &cfg)?,
    ];
    let mut session_s = [0.0; 3];
    for (i, a) in arms.iter_mut().enumerate() {
        let l = a.cmd("load")?;
        session_s[i] = l["session_s"].as_f64().unwrap_or(0.0);
        progress(&format!("{}: session in {:.1} s", a.label, session_s[i]));
    }
    Ok(Setup {
        shape,
        t,
        cpus,
        threads,
        arms,
        gen_s,
        session_s,
    })
}

pub fn run(o: &Opts) -> Result<i32, String> {
    // A genai folder as MODEL, or the spec with the overrides.
    let spec = o.gen.is_some().then(|| spec_of(o));
    let needs: Vec<(String, Option<usize>)> = cases(o)
        .iter()
        .map(|c| {
            let need = match c {
                Case::Step { seq, past } => seq.checked_add(*past),
                Case::Generate { prompt, tokens } => prompt.checked_add(*tokens),
            };
            (c.name(), need)
        })
        .collect();
    let Setup {
        shape: l,
        t,
        cpus,
        threads,
        mut arms,
        ..
    } = setup(o, spec.as_deref(), &needs)?;
    let (vocab, acc) = (l.vocab, l.acc);
    // The shared KV cache holds the model's context (genai's default max_length), at most 4096
    // positions unless a case needs more (`LlmShape::kv_capacity`).
    let need = needs.iter().filter_map(|(_, n)| *n).max().unwrap_or(0);
    let (kv_capacity, kv) = if o.kv_shared {
        (l.kv_capacity(need), "shared")
    } else {
        (0, "copy")
    };
    println!(
        "rcpu-bench llm: {} | {} | threads={threads} cpus={cpus:?} rounds={} iters={} warmup={} \
         null={} kv={kv}",
        t.label, t.path, o.rounds, o.iters, o.warmup, o.null_arm
    );
    let bytes = read_bytes(&t, &mut arms)?;
    println!("{}", describe_read_bytes(&t, &bytes));
    progress(&format!(
        "read bandwidth for a {:.1} MB buffer on {threads} threads",
        t.weight_bytes as f64 / 1e6
    ));
    // The same buffers give the run's best pass now and every round's read later.
    let reader = membw::Buffers::new(t.weight_bytes as usize, threads);
    let bw_ref = reader.reference(5);
    println!("{}", bw_ref.describe());
    let bw = bw_ref.best();
    let tol = o.tol.unwrap_or_else(|| parity_tol(acc, &t.info));
    let mut floor = ReadFloor {
        bytes,
        gbps: bw,
        reader,
    };
    let mut results = vec![];
    let mut code = 0;
    for case in cases(o) {
        // Each case's bytes a token: the weights and the KV rows its steps read.
        let kv = case.kv_positions().map_or(0, |p| kv_read_bytes(&t.info, p));
        floor.bytes = bytes.map(|b| b + kv);
        let mut r = run_case(
            o,
            &mut arms,
            &case,
            &t,
            &floor,
            (vocab, kv_capacity),
            tol,
            &cpus,
        )?;
        if r["parity_ok"] == false {
            code = 2;
        }
        r["kv_read_bytes_per_token"] = json!(kv);
        results.push(r);
    }
    if let Some(path) = &o.json {
        let doc = json!({"model": t.label, "path": t.path, "threads": threads, "cpus": cpus,
            "weight_bytes_per_token": t.weight_bytes, "read_bytes_per_token": bytes, "read_gbps": bw,
            "read_gbps_4k_pages": bw_ref.small_pages, "read_gbps_huge_pages": bw_ref.huge_pages,
            "kv": kv, "kv_capacity": kv_capacity,
            "cases": results});
        std::fs::write(
            path,
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?,
        )
        .map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(code)
}

/// Bytes of the KV cache rows one token's attention reads at `positions` cached positions (its
/// own row included): every past key / value input's heads times its last dim (the head size, or
/// half of it for a 4-bit cache) times its element size (4 for float32, 2 for float16, 1 for an
/// int8 / uint8 quantized cache), times `positions`. Sliding-window layers are counted whole (an
/// upper bound for them).
pub(super) fn kv_read_bytes(info: &super::model::ModelInfo, positions: usize) -> u64 {
    use crate::onnx::dtype;
    info.inputs
        .iter()
        .filter(|i| i.name.starts_with("past_key_values."))
        .map(|i| {
            let elem = match i.elem {
                dtype::FLOAT => 4,
                dtype::FLOAT16 | 16 => 2,
                _ => 1,
            };
            let dim = |k: usize| i.dims.get(k).copied().flatten().unwrap_or(0).max(0) as u64;
            dim(1) * dim(3) * elem * positions as u64
        })
        .sum()
}

/// The weight bytes a token reads on each arm (`[ort, rcpu, null]`): the model's initializers
/// (every one but the embedding table and the rotary caches, plus one row of each; of a QMoE
/// node's experts the k / E a token runs; gen_llm.rs) for an arm that reads them as they are
/// (ORT), and for an arm that repacks MatMulNBits weights (rcpu: f16 scales at accuracy level
/// 4) the same with the MatMulNBits initializers replaced by what its weight cache holds
/// (`memory.weight_cache.live_bytes` of its stats; see [`token_bytes`] for QMoE experts, which
/// rcpu packs into the same cache). The bandwidth fraction of an arm divides its own bytes, so
/// fewer bytes never count as more bandwidth.
fn read_bytes(t: &Target, arms: &mut [Worker]) -> Result<[u64; 3], String> {
    let mut out = [t.weight_bytes; 3];
    for (i, a) in arms.iter_mut().enumerate() {
        let stats = a.cmd("stats")?;
        let packed = stats["memory"]["weight_cache"]["live_bytes"].as_u64();
        out[i] = token_bytes(
            t.weight_bytes,
            t.info.nbits_bytes,
            t.info.qmoe_bytes,
            packed,
        );
    }
    Ok(out)
}

/// `model` bytes a token reads, with the part an EP packs replaced by the `packed` bytes its
/// weight cache holds (none or 0: read as they are). That part is the `nbits` MatMulNBits
/// initializers, read whole, and, where the cache holds more than MatMulNBits weights can
/// account for (over 1.25 times `nbits`: the EP packed the experts too), the QMoE experts'
/// codes, scales and zero points (`qmoe`: all experts' bytes, the k / E share a token reads).
/// The cache reports one figure for both, so the experts' share of it is taken in the
/// proportion of the model's bytes: the token's share of `packed` is
/// `packed * (nbits + qmoe[1]) / (nbits + qmoe[0])` (exact when both pack at the same ratio).
pub(super) fn token_bytes(model: u64, nbits: u64, qmoe: [u64; 2], packed: Option<u64>) -> u64 {
    let p = match packed {
        Some(p) if p > 0 => p,
        _ => return model,
    };
    let experts_packed = qmoe[0] > 0 && p as u128 * 4 > nbits as u128 * 5;
    if !experts_packed {
        return model.saturating_sub(nbits).saturating_add(p);
    }
    let (all, read) = (nbits + qmoe[0], nbits + qmoe[1]);
    let share = (p as u128 * read as u128 / all.max(1) as u128) as u64;
    model.saturating_sub(read).saturating_add(share)
}

fn describe_read_bytes(t: &Target, b: &[u64; 3]) -> String {
    let mb = |x: u64| x as f64 / 1e6;
    format!(
        "weight bytes a token reads: ORT {:.1} MB (the model's initializers but the embedding table \
         and the rotary caches, plus one row of each, and k / E of each QMoE's experts; MatMulNBits \
         {:.1} MB of them), rcpu {:.1} MB (its packed MatMulNBits weights in place of the model's, \
         and its packed experts' share where it packed QMoE experts), null {:.1} MB; GB/s and \
         \"of read bw\" below divide each arm's own bytes",
        mb(b[0]),
        mb(t.info.nbits_bytes),
        mb(b[1]),
        mb(b[2])
    )
}

/// Runs per round of a step of `seq` tokens: `iters` for decode, fewer for long prefills
/// (64 tokens: iters/4, 512: one), so a 2-core run of the full Qwen preset stays in minutes.
fn step_iters(iters: usize, seq: usize) -> usize {
    (iters * 16 / seq.max(1)).clamp(1, iters)
}

/// The logits' parity tolerance (relative L2) of an LLM at accuracy level `acc`: 1e-4 at 0 or
/// 1; 2e-2 at 4, where both runtimes quantize activations to int8; with a QMoE node at 4, 0.9,
/// which only tells garbage (NaN, zeros, unrelated logits: 1 or more) from noise: a token whose
/// k-th and (k+1)-th router logits nearly tie runs different experts on the two runtimes'
/// int8 rounding, and attention carries the difference on to later tokens, so the distance grows
/// with depth (gpt-oss, 64-token prefill, rcpu vs ORT: 7e-2 to 1e-1 at 4 layers, 0.35 to 0.42 at
/// 16; ORT's own accuracy_level 4 against 0 there: 0.34 to 0.53; a decode step up to 0.65). The
/// strict check of such a model is its `acc=0` spec (rcpu matched ORT to 3e-6 at 2 layers).
pub(super) fn parity_tol(acc: i64, info: &super::model::ModelInfo) -> f64 {
    match acc {
        4 if info.ops.iter().any(|o| o == "QMoE") => 0.9,
        4 => 2e-2,
        _ => 1e-4,
    }
}

/// Relative L2 of the rcpu and null arms' logits (the first output, current feeds) against ORT's;
/// `tail`: only the last that many (the last position's row), for large vocabularies.
pub(super) fn logits_parity(
    arms: &mut [Worker],
    tol: f64,
    tail: Option<usize>,
) -> Result<bool, String> {
    let mut outs = vec![];
    for (i, a) in arms.iter_mut().enumerate() {
        // The logits come back as a file of f32 (see the worker's `output`), read and removed
        // here.
        let path =
            std::env::temp_dir().join(format!("rcpu-bench-{}-logits-{i}.f32", std::process::id()));
        let path_s = path.to_string_lossy().into_owned();
        let mut req = json!({"cmd": "output", "first": true, "floats_file": path_s});
        if let Some(n) = tail {
            req["tail"] = json!(n);
        }
        let v = a.call(req);
        let bytes = std::fs::read(&path);
        // Removed whatever happened (a failed call may still have written it).
        let _ = std::fs::remove_file(&path);
        let count = v?["count"].as_u64().unwrap_or(0) as usize;
        let bytes = bytes.map_err(|e| format!("{path_s}: {e}"))?;
        if count.checked_mul(4) != Some(bytes.len()) {
            return Err(format!(
                "{path_s}: {} bytes for {count} logits",
                bytes.len()
            ));
        }
        outs.push(
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect::<Vec<f32>>(),
        );
    }
    let (e1, e2) = (
        crate::compare::rel_l2(&outs[1], &outs[0]),
        crate::compare::rel_l2(&outs[2], &outs[0]),
    );
    let ok = e1 <= tol && e2 <= tol;
    println!(
        "parity: {}logits rel L2 rcpu vs ORT {e1:.3e}, null vs ORT {e2:.3e} (tol {tol:.0e}{}) {}",
        if tail.is_some() {
            "last position's "
        } else {
            ""
        },
        if tol >= 0.5 {
            ", accuracy_level 4 with QMoE: int8 rounding flips near-tied expert choices, so only \
             garbage fails; the spec's acc=0 is the strict check"
        } else if tol > 1e-4 {
            ", accuracy_level 4: activations quantized to int8"
        } else {
            ""
        },
        if ok { "OK" } else { "MISMATCH" }
    );
    Ok(ok)
}

#[allow(clippy::too_many_arguments)]
fn run_case(
    o: &Opts,
    arms: &mut [Worker],
    case: &Case,
    t: &Target,
    floor: &ReadFloor,
    (vocab, kv_capacity): (usize, usize),
    tol: f64,
    cpus: &[usize],
) -> Result<Value, String> {
    let kv_note = if kv_capacity > 0 {
        format!(" kv=shared ({kv_capacity} positions)")
    } else {
        String::new()
    };
    println!("\n== {}{kv_note} ==", case.name());
    if let Some(p) = case.kv_positions() {
        let kv = kv_read_bytes(&t.info, p);
        println!(
            "bytes a token reads: the arm's weights (above) + {:.1} MB of KV rows ({p} positions of \
             every layer's keys and values at the cache's element size); GB/s and \"of read bw\" \
             below divide that sum (\"weight MB\")",
            kv as f64 / 1e6
        );
    }
    let req = match case {
        Case::Step { seq, past } => {
            // A prefill (past 0) runs as genai's first step does: into the shared buffers too.
            for a in arms.iter_mut() {
                a.call(
                    json!({"cmd": "llm_feed", "seq": seq, "past": past, "vocab": vocab,
                    "kv_capacity": kv_capacity}),
                )?;
            }
            json!({"cmd": "time", "iters": step_iters(o.iters, *seq)})
        }
        Case::Generate { prompt, tokens } => {
            json!({"cmd": "generate", "prompt": prompt, "tokens": tokens, "vocab": vocab,
                "kv_capacity": kv_capacity})
        }
    };
    // Parity (rule 7) before timing.
    let parity_ok = match case {
        Case::Step { .. } => logits_parity(arms, tol, None)?,
        Case::Generate { prompt, .. } => {
            // The prompt's logits are gated as a prefill's; the greedy ids are reported.
            for a in arms.iter_mut() {
                a.call(
                    json!({"cmd": "llm_feed", "seq": prompt, "past": 0, "vocab": vocab,
                    "kv_capacity": kv_capacity}),
                )?;
            }
            let ok = logits_parity(arms, tol, None)?;
            let mut ids = vec![];
            for a in arms.iter_mut() {
                ids.push(a.call(req.clone())?["ids"].clone());
            }
            let same = |i: usize| {
                let (a, b) = (ids[0].as_array(), ids[i].as_array());
                a.zip(b)
                    .map(|(a, b)| a.iter().zip(b).take_while(|(x, y)| x == y).count())
                    .unwrap_or(0)
            };
            let n = ids[0].as_array().map(|a| a.len()).unwrap_or(0);
            println!(
                "parity: greedy ids, rcpu agrees with ORT for the first {}/{n}, null for {}/{n} \
                 (reported; random weights leave near-ties that int8 activations can flip)",
                same(1),
                same(2)
            );
            ok
        }
    };
    if !parity_ok {
        println!("refusing to time a mismatch (rule 7)");
        return Ok(json!({"case": case.name(), "parity_ok": false}));
    }
    progress(&format!("{}: warm-up", case.name()));
    for a in arms.iter_mut() {
        let mut w = req.clone();
        if w["cmd"] == "time" {
            w["iters"] = json!(o.warmup.max(1));
        }
        let r = a.call(w)?;
        // The worker says how it handed over the KV cache: what was asked, or the run is void.
        if r["kv_capacity"].as_u64() != Some(kv_capacity as u64) {
            return Err(format!(
                "{}: ran the KV cache with capacity {} (0: copied), asked {kv_capacity}",
                a.label, r["kv_capacity"]
            ));
        }
        a.settle(500);
    }
    arms[1].cmd("reset_stats")?;
    let per_token = case.tokens() as f64;
    let (mut p50s, mut p90s, mut cpu) = (vec![vec![]; 3], vec![vec![]; 3], [0.0f64; 3]);
    let mut samples = [0usize; 3];
    let mut read_gbps = vec![];
    let mut probe_ms = vec![];
    let mut lane_rt_ns = vec![];
    let mut placement: [Vec<Placement>; 3] = Default::default();
    // Foreign load over the timed calls (compare's measure: /proc/stat busy ticks of the arms'
    // CPUs not accounted for by the bench's own processes).
    let (mut ticks, mut ours) = (CpuTicks::default(), 0.0);
    println!(
        "{:>5}  {:<14} {:>10} {:>10} {:>10} {:>9} {:>13} {:>9} {:>10} {:>9} {:>8} {:>9}",
        "round",
        "order",
        "ort ms/tok",
        "rcpu ms/tok",
        "null ms/tok",
        "ORT/rcpu",
        "null_b_over_a",
        "read GB/s",
        "rcpu/read",
        "probe ms",
        "lane rt",
        "rcpu ran"
    );
    for r in 0..o.rounds {
        let round = rounds::run(arms, cpus, r, &req, false, true)?;
        rounds::accumulate(&mut ticks, &mut ours, &round);
        // The same-size buffers read right after the arms (all three idle and settled).
        read_gbps.push(floor.reader.round(ROUND_READ_PASSES));
        // And how fast the same CPUs compute right now (`cpu_probe`).
        probe_ms.push(cpu_probe::probe_ms(floor.reader.threads()));
        // And how far apart the arms' first two CPUs sit right now (`lane_probe`).
        let rt = lane_probe::round_trip_ns(cpus);
        lane_rt_ns.push(rt);
        for (i, c) in round.calls.iter().enumerate() {
            // Each arm's window: the round trips right before and after it, and at the read.
            placement[i].push(Placement::of(&[c.rt_ns.0, c.rt_ns.1, rt], FAR_NS));
            // Generate: the worker's own CPU over the steps (its prompt prefill left out).
            cpu[i] += c.res["steps_cpu_s"].as_f64().unwrap_or(c.cpu_s);
            let ms: Vec<f64> = rounds::floats(&c.res, "ns")
                .iter()
                .map(|ns| ns / 1e6 / per_token)
                .collect();
            samples[i] += ms.len();
            p50s[i].push(median(&ms));
            p90s[i].push(quantile(&ms, 0.9));
        }
        let (a, b, n) = (p50s[0][r], p50s[1][r], p50s[2][r]);
        let twin = if o.null_arm == "ort" { a } else { b };
        let (rd, pr, rt) = (read_gbps[r], probe_ms[r], lane_rt_ns[r]);
        println!(
            "{:>5}  {:<14} {a:>10.3} {b:>10.3} {n:>10.3} {:>9.3} {:>13.3} {rd:>9.1} {:>9.1}% {pr:>9.2} {rt:>8.0} {:>9}",
            r + 1,
            rounds::order_name(r),
            a / b,
            n / twin,
            round_fractions(floor.bytes[1], &[b], per_token, &[rd])[0] * 100.0,
            placement[1][r].name()
        );
    }
    let stats = arms[1].cmd("stats")?;
    let foreign = foreign_share(CpuTicks::default(), ticks, ours);
    println!(
        "foreign busy share of cpus {cpus:?} while arms were timed: {} (other processes' CPU)",
        pct(foreign)
    );
    let timed = Timed {
        p50s,
        p90s,
        cpu,
        samples,
        foreign,
        read_gbps,
        probe_ms,
        lane_rt_ns,
        placement,
    };
    let mut summary = summarize(o, &case.name(), per_token, t, floor, &timed, &stats);
    let mut prof = json!(null);
    if o.profile_iters > 0 {
        progress(&format!(
            "{}: profiling pass (separate sessions, untimed)",
            case.name()
        ));
        let iters = match case {
            Case::Step { seq, .. } => (o.profile_iters * 64 / seq).clamp(1, o.profile_iters),
            Case::Generate { .. } => 1,
        };
        let mut preq = json!({"cmd": "profile", "iters": iters});
        if let Case::Generate { prompt, tokens } = case {
            preq = json!({"cmd": "profile", "iters": 1, "prompt": prompt, "tokens": tokens, "vocab": vocab});
        }
        let mut pj = vec![];
        for i in [0, 1] {
            let v = arms[i].call(preq.clone())?;
            for l in profile::lines(["ort", "rcpu"][i], &v) {
                println!("{l}");
            }
            pj.push(v);
        }
        prof = json!(pj);
    }
    summary["profile"] = prof;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::super::gen_llm::Llm;
    use super::*;

    /// The KV term of a token's bytes: heads x last dim x element size x positions, per cache.
    #[test]
    fn kv_read_bytes_count_the_cache_element_size() {
        let bytes = |kvq: &str| {
            let l = Llm::parse(
                "s",
                &format!("preset=qwen2-0.5b,layers=2,vocab=64,ctx=16,kvq={kvq}"),
            )
            .unwrap();
            let info = super::super::model::ModelInfo::parse(&l.generate().bytes).unwrap();
            kv_read_bytes(&info, 100)
        };
        // 2 layers x (keys, values) x 2 kv heads x 64 x 100 positions.
        assert_eq!(bytes("0"), 2 * 2 * 2 * 64 * 100 * 4);
        assert_eq!(bytes("int8"), 2 * 2 * 2 * 64 * 100);
        assert_eq!(bytes("int8c"), 2 * 2 * 2 * 64 * 100);
        assert_eq!(bytes("int4c"), 2 * 2 * 2 * 32 * 100);
        assert_eq!(Case::Step { seq: 1, past: 4096 }.kv_positions(), Some(4097));
        assert_eq!(Case::Step { seq: 64, past: 0 }.kv_positions(), None);
        let g = Case::Generate {
            prompt: 100,
            tokens: 8,
        };
        assert_eq!(g.kv_positions(), Some(104));
    }

    #[test]
    fn cases_follow_the_modes_and_overrides_append() {
        let o = Opts {
            gen: Some("llm:preset=qwen2-0.5b".into()),
            modes: vec!["prefill".into(), "decode".into()],
            prompts: vec![8, 16],
            past: 3,
            layers: Some(2),
            ..Opts::default()
        };
        assert_eq!(
            cases(&o),
            [
                Case::Step { seq: 8, past: 0 },
                Case::Step { seq: 16, past: 0 },
                Case::Step { seq: 1, past: 3 }
            ]
        );
        assert_eq!(cases(&o)[2].name(), "decode past=3");
        assert_eq!(spec_of(&o), "llm:preset=qwen2-0.5b,layers=2");
        assert_eq!([1, 5, 64, 512].map(|s| step_iters(10, s)), [10, 10, 2, 1]);
    }

    /// The bytes an arm reads: the model's MatMulNBits initializers (each counted once, the tied
    /// lm_head's table too) replaced by what the EP packed.
    #[test]
    fn read_bytes_replace_the_matmulnbits_initializers_by_the_packed_ones() {
        let l = Llm::parse("s", "preset=qwen2-0.5b,layers=1,vocab=256,acc=4").unwrap();
        let g = l.generate();
        let info = super::super::model::ModelInfo::parse(&g.bytes).unwrap();
        let d = &l.layer;
        let (q, kv) = (d.heads * d.head, d.kv * d.head);
        let one = |k: usize, n: usize| (n * k.div_ceil(d.block) * (d.block / 2 + 4)) as u64;
        let expected = one(d.hidden, q + 2 * kv)
            + one(q, d.hidden)
            + 2 * one(d.hidden, d.inter)
            + one(d.inter, d.hidden)
            + one(d.hidden, l.vocab);
        assert_eq!(info.nbits_bytes, expected);
        assert!(info.nbits_bytes < info.weight_bytes);
        assert_eq!(token_bytes(1000, 900, [0, 0], Some(800)), 900);
        assert_eq!(token_bytes(1000, 900, [0, 0], None), 1000);
        assert_eq!(token_bytes(1000, 900, [0, 0], Some(0)), 1000);
        // QMoE experts (8000 bytes, a token reads 1000 of them; the model's count holds
        // nbits 900 + 1000 + 100 other bytes): packed too (the cache holds more than the
        // MatMulNBits weights could), the token's share of the cache in the model's proportion;
        // not packed (the cache holds no more than them), read as they are.
        assert_eq!(
            token_bytes(2000, 900, [8000, 1000], Some(8900 / 2)),
            100 + 1900 / 2
        );
        assert_eq!(
            token_bytes(2000, 900, [8000, 1000], Some(800)),
            2000 - 900 + 800
        );
        assert_eq!(token_bytes(2000, 900, [8000, 1000], None), 2000);
    }

    /// A QMoE model's MatMulNBits and expert bytes (what an EP packs): the router is a
    /// MatMulNBits; the experts' codes and scales, not their biases, are the QMoE part.
    #[test]
    fn read_bytes_of_a_qmoe_model_split_the_packable_parts() {
        let l = Llm::parse(
            "s",
            "preset=gpt-oss-20b,layers=1,vocab=256,hidden=256,heads=4,kv=2,inter=128,experts=8,\
             topk=2",
        )
        .unwrap();
        let g = l.generate();
        let info = super::super::model::ModelInfo::parse(&g.bytes).unwrap();
        // fc1: 8 x 256 rows of 128 code bytes and 8 f32 scales; fc2: 8 x 256 rows of 64 and 4.
        let experts = 8 * 256 * (128 + 32) + 8 * 256 * (64 + 16);
        assert_eq!(info.qmoe_bytes, [experts, experts * 2 / 8]);
        // qkv (256 -> 256 + 2 * 128), o_proj, the router (256 -> 8), the lm_head (256 -> 256).
        let one = |k: u64, n: u64| n * k / 32 * (16 + 4);
        let nbits = one(256, 512) + one(256, 256) + one(256, 8) + one(256, 256);
        assert_eq!(info.nbits_bytes, nbits);
        assert_eq!(info.token_bytes, g.weight_bytes);
        // Its parity tolerance at accuracy level 4 only tells garbage from routing noise.
        assert_eq!(parity_tol(4, &info), 0.9);
        assert_eq!(parity_tol(0, &info), 1e-4);
        let dense = Llm::parse("s", "layers=1,vocab=256").unwrap();
        let dense = super::super::model::ModelInfo::parse(&dense.generate().bytes).unwrap();
        assert_eq!((parity_tol(4, &dense), parity_tol(1, &dense)), (2e-2, 1e-4));
    }
}
