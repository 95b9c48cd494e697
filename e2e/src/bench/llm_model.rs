//! A generated LLM on disk and how to feed it: the model cache (one directory per canonical spec
//! under `$RCPU_BENCH_MODELS`, default `<tmp>/rcpu-bench-models`, holding `model.onnx`,
//! `genai_config.json` and `rcpu_bench.json`), the feeds of a step (input_ids, attention_mask,
//! past key/values) and the greedy generation loop the workers run.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::gen_llm::Llm;
use super::model::ModelInfo;
use crate::{Data, Session, Tensor};

/// A generated LLM in the cache.
#[derive(Debug, Clone)]
pub struct LlmModel {
    pub dir: PathBuf,
    pub path: String,
    pub label: String,
    /// Weight bytes one token reads (gen_llm.rs says how counted).
    pub weight_bytes: u64,
    /// Bytes of model.onnx.
    pub file_bytes: u64,
    pub llm: Llm,
    /// True when this call generated it (false: found in the cache).
    pub generated: bool,
}

/// Where generated models are cached.
pub fn models_dir() -> PathBuf {
    std::env::var_os("RCPU_BENCH_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("rcpu-bench-models"))
}

/// FNV-1a, for a short directory name of a canonical spec.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn cache_dir(l: &Llm) -> PathBuf {
    models_dir().join(format!("{}-{:016x}", l.preset, fnv(&l.canonical())))
}

/// The cached model for `l`, if a complete one is there.
fn lookup(l: &Llm) -> Option<LlmModel> {
    let dir = cache_dir(l);
    let text = std::fs::read_to_string(dir.join("rcpu_bench.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let path = dir.join("model.onnx");
    let file_bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    if v["spec"] != l.canonical().as_str() || file_bytes == 0 || file_bytes != v["file_bytes"] {
        return None;
    }
    Some(LlmModel {
        path: path.display().to_string(),
        dir,
        label: l.label(),
        weight_bytes: v["weight_bytes_per_token"].as_u64().unwrap_or(0),
        file_bytes,
        llm: l.clone(),
        generated: false,
    })
}

/// Whether `cached(l)` would find the model without generating it.
pub fn is_cached(l: &Llm) -> bool {
    lookup(l).is_some()
}

/// The model for `l`, generated into `models_dir()` unless already there.
pub fn cached(l: &Llm) -> Result<LlmModel, String> {
    match lookup(l) {
        Some(m) => Ok(m),
        None => write(l, &cache_dir(l), "model.onnx"),
    }
}

/// Generates `l` into `dir` (the model as `file`, genai_config.json, then rcpu_bench.json last,
/// so a half-written directory is never taken for a cached one).
pub fn write(l: &Llm, dir: &Path, file: &str) -> Result<LlmModel, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let g = l.generate();
    let path = dir.join(file);
    let put = |p: &Path, bytes: &[u8]| {
        std::fs::write(p, bytes).map_err(|e| format!("writing {}: {e}", p.display()))
    };
    put(&path, &g.bytes)?;
    let cfg = serde_json::to_string_pretty(&l.genai_config(file)).map_err(|e| e.to_string())?;
    put(&dir.join("genai_config.json"), cfg.as_bytes())?;
    let meta = json!({
        "spec": l.canonical(),
        "label": l.label(),
        "weight_bytes_per_token": g.weight_bytes,
        "file_bytes": g.bytes.len(),
    });
    put(&dir.join("rcpu_bench.json"), meta.to_string().as_bytes())?;
    Ok(LlmModel {
        path: path.display().to_string(),
        dir: dir.to_path_buf(),
        label: l.label(),
        weight_bytes: g.weight_bytes,
        file_bytes: g.bytes.len() as u64,
        llm: l.clone(),
        generated: true,
    })
}

/// Feeds of one step: `seq` new tokens (seeded ids below `vocab`) after `past` cached positions
/// (attention_mask all ones over past + seq, past key/values seeded in [-0.5, 0.5)).
pub fn step_feeds(
    info: &ModelInfo,
    seq: usize,
    past: usize,
    vocab: usize,
    seed: u64,
) -> Result<Vec<Tensor>, String> {
    if vocab == 0 || seq == 0 {
        return Err("an LLM step needs a vocabulary and at least one new token".into());
    }
    let total = past.checked_add(seq).ok_or("past + seq overflows")?;
    info.inputs
        .iter()
        .enumerate()
        .map(|(i, inp)| {
            Ok(match inp.name.as_str() {
                "input_ids" => Tensor {
                    shape: vec![1, seq as i64],
                    data: Data::I64(token_ids(seq, vocab, seed)),
                },
                "attention_mask" => Tensor {
                    shape: vec![1, total as i64],
                    data: Data::I64(vec![1; total]),
                },
                name if name.starts_with("past_key_values.") => {
                    let [_, Some(kv), _, Some(head)] = inp.dims[..] else {
                        return Err(format!("input '{name}' is not [batch, kv, past, head]"));
                    };
                    let n = (kv as usize)
                        .checked_mul(head as usize)
                        .and_then(|x| x.checked_mul(past))
                        .ok_or_else(|| format!("input '{name}': size overflows"))?;
                    let v = crate::rand_f32(n, seed ^ (1000 + i as u64));
                    Tensor::f32(
                        &[1, kv, past as i64, head],
                        v.iter().map(|x| x * 0.5).collect(),
                    )
                }
                other => return Err(format!("LLM input '{other}' is not one the bench feeds")),
            })
        })
        .collect()
}

fn token_ids(n: usize, vocab: usize, seed: u64) -> Vec<i64> {
    crate::rand_f32(n, seed ^ 0x70c)
        .iter()
        .map(|r| (((r + 1.0) * 0.5 * vocab as f32) as i64).clamp(0, vocab as i64 - 1))
        .collect()
}

/// Index of the largest of the last `vocab` logits (the last position's row).
pub fn argmax_last(logits: &Tensor, vocab: usize) -> Result<i64, String> {
    let Data::F32(v) = &logits.data else {
        return Err("logits are not f32".into());
    };
    let row = v
        .len()
        .checked_sub(vocab)
        .map(|s| &v[s..])
        .ok_or("logits shorter than the vocabulary")?;
    let mut best = 0usize;
    for (i, x) in row.iter().enumerate() {
        if *x > row[best] {
            best = i;
        }
    }
    Ok(best as i64)
}

/// A greedy generation: prefill `prompt` tokens, then `tokens` decode steps, each feeding the
/// previous step's presents back as past and the argmax of its logits as the next token.
pub struct Generation {
    pub prefill_ns: f64,
    pub step_ns: Vec<f64>,
    /// CPU seconds (all threads of the process) over the decode steps only.
    pub steps_cpu_s: f64,
    pub ids: Vec<i64>,
}

pub fn generate(
    s: &Session,
    info: &ModelInfo,
    prompt: usize,
    tokens: usize,
    vocab: usize,
    seed: u64,
) -> Result<Generation, String> {
    let feeds = step_feeds(info, prompt, 0, vocab, seed)?;
    let t = std::time::Instant::now();
    let mut outs = s.run(&feeds)?;
    let prefill_ns = t.elapsed().as_nanos() as f64;
    if outs.len() + 1 != info.inputs.len() {
        return Err(format!(
            "model has {} inputs and {} outputs: not input_ids, attention_mask, past... -> \
             logits, present...",
            info.inputs.len(),
            outs.len()
        ));
    }
    let mut ids = vec![argmax_last(&outs[0], vocab)?];
    let mut step_ns = Vec::with_capacity(tokens);
    let cpu0 = super::os::usage().cpu_s();
    for step in 0..tokens {
        let total = prompt + step + 1;
        let mut feeds = Vec::with_capacity(outs.len() + 1);
        feeds.push(Tensor {
            shape: vec![1, 1],
            data: Data::I64(vec![*ids.last().unwrap_or(&0)]),
        });
        feeds.push(Tensor {
            shape: vec![1, total as i64],
            data: Data::I64(vec![1; total]),
        });
        feeds.extend(outs.drain(1..));
        let t = std::time::Instant::now();
        outs = s.run(&feeds)?;
        step_ns.push(t.elapsed().as_nanos() as f64);
        ids.push(argmax_last(&outs[0], vocab)?);
    }
    Ok(Generation {
        prefill_ns,
        step_ns,
        steps_cpu_s: super::os::usage().cpu_s() - cpu0,
        ids,
    })
}
