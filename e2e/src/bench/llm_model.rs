//! A generated LLM on disk and how to feed it: the model cache (one directory per canonical spec
//! under `$RCPU_BENCH_MODELS`, default `<tmp>/rcpu-bench-models`, holding `model.onnx`,
//! `genai_config.json` and `rcpu_bench.json`), the feeds of a step (input_ids, attention_mask,
//! past key/values) and the greedy generation loop the workers run.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::gen_llm::Llm;
use super::model::ModelInfo;
use crate::onnx::dtype;
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

/// The cached model for `l`, if a complete one is there (its side file of weights too, when it
/// has one).
fn lookup(l: &Llm) -> Option<LlmModel> {
    let dir = cache_dir(l);
    let text = std::fs::read_to_string(dir.join("rcpu_bench.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    let path = dir.join("model.onnx");
    let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let file_bytes = len(&path);
    if v["spec"] != l.canonical().as_str() || file_bytes == 0 || file_bytes != v["file_bytes"] {
        return None;
    }
    if let Some(data) = v["data_file"].as_str() {
        if len(&dir.join(data)) != v["data_bytes"].as_u64()? {
            return None;
        }
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

/// Generates `l` into `dir` (the model as `file`, with its large weights in `{file}.data` when
/// they pass protobuf's 2 GiB, genai_config.json, then rcpu_bench.json last, so a half-written
/// directory is never taken for a cached one).
pub fn write(l: &Llm, dir: &Path, file: &str) -> Result<LlmModel, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // rcpu_bench.json goes first, so a model replaced in place is not taken for the old one.
    let meta_path = dir.join("rcpu_bench.json");
    if meta_path.exists() {
        std::fs::remove_file(&meta_path).map_err(|e| format!("{}: {e}", meta_path.display()))?;
    }
    let data_file = format!("{file}.data");
    let g = if l.needs_external_data() {
        l.generate_external(&dir.join(&data_file))?
    } else {
        l.generate()
    };
    let path = dir.join(file);
    let put = |p: &Path, bytes: &[u8]| {
        std::fs::write(p, bytes).map_err(|e| format!("writing {}: {e}", p.display()))
    };
    put(&path, &g.bytes)?;
    let cfg = serde_json::to_string_pretty(&l.genai_config(file)).map_err(|e| e.to_string())?;
    put(&dir.join("genai_config.json"), cfg.as_bytes())?;
    let mut meta = json!({
        "spec": l.canonical(),
        "label": l.label(),
        "weight_bytes_per_token": g.weight_bytes,
        "file_bytes": g.bytes.len(),
    });
    if l.needs_external_data() {
        let data = dir.join(&data_file);
        let len = std::fs::metadata(&data).map_err(|e| format!("{}: {e}", data.display()))?;
        meta["data_file"] = data_file.clone().into();
        meta["data_bytes"] = len.len().into();
    }
    put(&meta_path, meta.to_string().as_bytes())?;
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

/// How a step hands the model its KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kv {
    /// Past and present are separate tensors: the step reads `past` positions and returns
    /// presents of `past + seq` (a model run with `past_present_share_buffer: false`).
    Copy,
    /// onnxruntime-genai's `past_present_share_buffer: true`, what its model builder writes for
    /// GroupQueryAttention models: one buffer of `capacity` positions per layer's keys and per
    /// layer's values, passed as the past input and pre-allocated as the present output, which
    /// the step writes in place (the attention reads `past` positions of it, the mask says how
    /// many).
    Shared { capacity: usize },
}

impl Kv {
    /// `Shared` with `capacity` positions, `Copy` for 0 (the bench's request field).
    pub fn from_capacity(capacity: usize) -> Kv {
        match capacity {
            0 => Kv::Copy,
            c => Kv::Shared { capacity: c },
        }
    }

    /// The request field back: the capacity, 0 for `Copy` (what a worker reports it ran).
    pub fn capacity(self) -> usize {
        match self {
            Kv::Copy => 0,
            Kv::Shared { capacity } => capacity,
        }
    }
}

/// For every output of a session (names `outputs`), the input it shares its buffer with under
/// `kv`: `present.L.key` / `present.L.value` write into `past_key_values.L.key` / `.value` when
/// shared; nothing otherwise.
pub fn kv_alias(kv: Kv, inputs: &[String], outputs: &[String]) -> Vec<Option<usize>> {
    if kv == Kv::Copy {
        return vec![];
    }
    outputs
        .iter()
        .map(|o| {
            let past = format!("past_key_values.{}", o.strip_prefix("present.")?);
            inputs.iter().position(|i| *i == past)
        })
        .collect()
}

/// [`kv_alias`] for session `s`'s inputs and outputs.
pub fn session_alias(s: &Session, kv: Kv) -> Vec<Option<usize>> {
    kv_alias(kv, &s.input_names(), &s.output_names())
}

/// Feeds of one step: `seq` new tokens (seeded ids below `vocab`) after `past` cached positions
/// (attention_mask all ones over past + seq, past key/values seeded in [-0.5, 0.5)); under
/// [`Kv::Shared`] each past buffer holds `capacity` positions, the first `past` seeded and the
/// rest zero.
pub fn step_feeds(
    info: &ModelInfo,
    seq: usize,
    past: usize,
    vocab: usize,
    seed: u64,
    kv: Kv,
) -> Result<Vec<Tensor>, String> {
    if vocab == 0 || seq == 0 {
        return Err("an LLM step needs a vocabulary and at least one new token".into());
    }
    let total = past.checked_add(seq).ok_or("past + seq overflows")?;
    let positions = match kv {
        Kv::Copy => past,
        Kv::Shared { capacity } if capacity >= total => capacity,
        Kv::Shared { capacity } => {
            return Err(format!(
                "a shared KV cache of {capacity} positions cannot hold {past} past + {seq} new"
            ))
        }
    };
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
                "position_ids" => positions_of(past, seq),
                name if name.starts_with("past_key_values.") => {
                    let [_, Some(kv), _, Some(head)] = inp.dims[..] else {
                        return Err(format!("input '{name}' is not [batch, kv, past, head]"));
                    };
                    let (heads, head) = (kv as usize, head as usize);
                    let size = |p: usize| {
                        heads
                            .checked_mul(head)
                            .and_then(|x| x.checked_mul(p))
                            .ok_or_else(|| format!("input '{name}': size overflows"))
                    };
                    let v = crate::rand_f32(size(past)?, seed ^ (1000 + i as u64));
                    // Head h's rows are [h * positions, h * positions + past) (BNSH).
                    let mut buf = vec![0f32; size(positions)?];
                    for (h, rows) in v.chunks(past.max(1) * head).enumerate().take(heads) {
                        let at = h * positions * head;
                        for (d, x) in buf[at..at + rows.len()].iter_mut().zip(rows) {
                            *d = x * 0.5;
                        }
                    }
                    let shape = [1, kv, positions as i64, head as i64];
                    match inp.elem {
                        // A quantized cache (gen_llm.rs `kvq=`): seeded codes in [-32, 32] at 8
                        // bits, each nibble in [6, 10] (codes -2..2) at 4; the rows past `past`
                        // zero bytes, as ORT leaves them.
                        dtype::INT8 => Tensor {
                            shape: shape.to_vec(),
                            data: Data::I8(buf.iter().map(|x| (x * 64.0).round() as i8).collect()),
                        },
                        dtype::UINT8 => Tensor {
                            shape: shape.to_vec(),
                            data: Data::U8(
                                buf.iter()
                                    .map(|&x| {
                                        if x == 0.0 {
                                            return 0;
                                        }
                                        let lo = ((x * 4.0).round() as i32 + 8) as u8;
                                        let hi = ((x * -3.0).round() as i32 + 8) as u8;
                                        lo | hi << 4
                                    })
                                    .collect(),
                            ),
                        },
                        _ => Tensor::f32(&shape, buf),
                    }
                }
                other => return Err(format!("LLM input '{other}' is not one the bench feeds")),
            })
        })
        .collect()
}

/// `position_ids` of `seq` new tokens after `past` (a model that takes them: the builder writes
/// it for attention other than GroupQueryAttention).
fn positions_of(past: usize, seq: usize) -> Tensor {
    Tensor {
        shape: vec![1, seq as i64],
        data: Data::I64((past..past + seq).map(|p| p as i64).collect()),
    }
}

/// The feeds before the past key / values (`inputs`: input_ids, attention_mask and, when the
/// model takes them, position_ids; step_feeds refuses others) of a decode step feeding token `id`
/// with `total` positions in all.
fn next_token_feeds(inputs: &[super::model::Input], id: i64, total: usize) -> Vec<Tensor> {
    inputs
        .iter()
        .map(|i| match i.name.as_str() {
            "input_ids" => Tensor {
                shape: vec![1, 1],
                data: Data::I64(vec![id]),
            },
            "position_ids" => positions_of(total - 1, 1),
            _ => Tensor {
                shape: vec![1, total as i64],
                data: Data::I64(vec![1; total]),
            },
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
/// previous step's presents back as past (under [`Kv::Shared`]: the same buffers, which the step
/// wrote) and the argmax of its logits as the next token.
pub struct Generation {
    /// How the steps handed over the KV cache.
    pub kv: Kv,
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
    kv: Kv,
) -> Result<Generation, String> {
    if let Kv::Shared { capacity } = kv {
        if prompt.checked_add(tokens).is_none_or(|n| n > capacity) {
            return Err(format!(
                "a shared KV cache of {capacity} positions cannot hold {prompt} + {tokens} tokens"
            ));
        }
    }
    let mut feeds = step_feeds(info, prompt, 0, vocab, seed, kv)?;
    let alias = session_alias(s, kv);
    let t = std::time::Instant::now();
    let mut outs = s.run_aliased(&mut feeds, &alias)?;
    let prefill_ns = t.elapsed().as_nanos() as f64;
    // The feeds after the ids, the mask and the positions are the past key / value inputs, in
    // the order of the presents.
    let kv_from = info
        .inputs
        .iter()
        .position(|i| i.name.starts_with("past_key_values."))
        .unwrap_or(info.inputs.len());
    let past_inputs = info.inputs.len() - kv_from;
    if outs.len() != past_inputs + 1
        || !info.inputs[kv_from..]
            .iter()
            .all(|i| i.name.starts_with("past_key_values."))
    {
        return Err(format!(
            "model has {} inputs and {} outputs: not input_ids, attention_mask[, position_ids], \
             past... -> logits, present...",
            info.inputs.len(),
            outs.len()
        ));
    }
    let logits = |outs: &[Option<Tensor>]| -> Result<i64, String> {
        let l = outs
            .first()
            .and_then(Option::as_ref)
            .ok_or("no logits output")?;
        argmax_last(l, vocab)
    };
    let mut ids = vec![logits(&outs)?];
    let mut step_ns = Vec::with_capacity(tokens);
    let cpu0 = super::os::usage().cpu_s();
    for step in 0..tokens {
        let total = prompt + step + 1;
        let mut next = next_token_feeds(&info.inputs[..kv_from], *ids.last().unwrap_or(&0), total);
        match kv {
            // The presents come back as the next step's past.
            Kv::Copy => next.extend(outs.drain(1..).flatten()),
            // The same buffers again: the step wrote its rows into them.
            Kv::Shared { .. } => next.extend(feeds.drain(kv_from..)),
        }
        feeds = next;
        let t = std::time::Instant::now();
        outs = s.run_aliased(&mut feeds, &alias)?;
        step_ns.push(t.elapsed().as_nanos() as f64);
        ids.push(logits(&outs)?);
    }
    Ok(Generation {
        kv,
        prefill_ns,
        step_ns,
        steps_cpu_s: super::os::usage().cpu_s() - cpu0,
        ids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> ModelInfo {
        let l = Llm::parse("s", "preset=qwen2-0.5b,layers=1,vocab=64,ctx=16").unwrap();
        ModelInfo::parse(&l.generate().bytes).unwrap()
    }

    #[test]
    fn shared_feeds_hold_the_copied_past_rows_at_the_start_of_each_head() {
        let info = tiny();
        let (past, cap, head, heads) = (5usize, 16usize, 64usize, 2usize);
        let copied = step_feeds(&info, 1, past, 64, 9, Kv::Copy).unwrap();
        let shared = step_feeds(&info, 1, past, 64, 9, Kv::Shared { capacity: cap }).unwrap();
        assert_eq!(copied.len(), shared.len());
        for (c, s) in copied.iter().zip(&shared).skip(2) {
            assert_eq!(c.shape, vec![1, heads as i64, past as i64, head as i64]);
            assert_eq!(s.shape, vec![1, heads as i64, cap as i64, head as i64]);
            let (c, s) = (c.as_f32(), s.as_f32());
            for h in 0..heads {
                let at = h * cap * head;
                assert_eq!(
                    &s[at..at + past * head],
                    &c[h * past * head..(h + 1) * past * head]
                );
                assert!(s[at + past * head..at + cap * head]
                    .iter()
                    .all(|&x| x == 0.0));
            }
        }
        // The mask and the ids do not change with the cache's form.
        assert_eq!(copied[..2], shared[..2]);
        assert!(step_feeds(&info, 12, 5, 64, 9, Kv::Shared { capacity: cap }).is_err());
        assert!(step_feeds(&info, 5, 0, 64, 9, Kv::Shared { capacity: cap }).is_ok());
    }

    /// A model taking position_ids gets the positions after the past, at the prefill and at
    /// each decode step, in the model's input order.
    #[test]
    fn position_ids_follow_the_past() {
        let mut info = tiny();
        info.inputs.insert(
            2,
            super::super::model::Input {
                name: "position_ids".into(),
                elem: crate::onnx::dtype::INT64,
                dims: vec![None, None],
                fixed: None,
            },
        );
        let feeds = step_feeds(&info, 3, 5, 64, 9, Kv::Copy).unwrap();
        assert_eq!(feeds[2].shape, vec![1, 3]);
        assert_eq!(feeds[2].data, Data::I64(vec![5, 6, 7]));
        assert_eq!(feeds[1].data, Data::I64(vec![1; 8]));
        let next = next_token_feeds(&info.inputs[..3], 42, 9);
        assert_eq!(
            next,
            vec![
                Tensor {
                    shape: vec![1, 1],
                    data: Data::I64(vec![42])
                },
                Tensor {
                    shape: vec![1, 9],
                    data: Data::I64(vec![1; 9])
                },
                Tensor {
                    shape: vec![1, 1],
                    data: Data::I64(vec![8])
                },
            ]
        );
    }

    #[test]
    fn presents_alias_their_own_layers_past_only_when_shared() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let inputs = names(&[
            "input_ids",
            "attention_mask",
            "past_key_values.0.key",
            "past_key_values.0.value",
            "past_key_values.1.key",
            "past_key_values.1.value",
        ]);
        let outputs = names(&[
            "logits",
            "present.0.key",
            "present.0.value",
            "present.1.key",
            "present.1.value",
        ]);
        assert_eq!(
            kv_alias(Kv::Shared { capacity: 8 }, &inputs, &outputs),
            vec![None, Some(2), Some(3), Some(4), Some(5)]
        );
        assert!(kv_alias(Kv::Copy, &inputs, &outputs).is_empty());
        assert_eq!(Kv::from_capacity(0), Kv::Copy);
        assert_eq!(Kv::from_capacity(8), Kv::Shared { capacity: 8 });
        assert_eq!(Kv::from_capacity(8).capacity(), 8);
        assert_eq!(Kv::Copy.capacity(), 0);
    }
}
