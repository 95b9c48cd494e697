//! An onnxruntime-genai model folder as an `rcpu-bench llm` model: a directory holding
//! `genai_config.json` beside the decoder it names, as onnxruntime-genai's model builder writes it
//! (and `rcpu-bench gen llm:...`). `rcpu-bench llm DIR` times such a model the way it times a
//! generated one, so the builder's own output gets the same per-token table, read-bandwidth
//! fraction and null band.
//!
//! What the bench takes from the config: the decoder's file, the vocabulary, the context length,
//! the KV heads and head size (the builder leaves the past inputs' head size symbolic) and the
//! input and output names, which must be the builder's usual ones (`input_ids`,
//! `attention_mask`, optional `position_ids`, `past_key_values.%d.key` / `.value` in;
//! `logits`, `present.%d.key` / `.value` out: the feeds are built by those names). The weight
//! bytes a token reads are counted from the graph (`model_bytes.rs`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::gen_llm::Llm;
use super::model::ModelInfo;

/// What the bench needs to know of an LLM, generated or read from a folder.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmShape {
    pub label: String,
    pub vocab: usize,
    /// Highest MatMulNBits accuracy level (the parity tolerance).
    pub acc: i64,
    /// Positions the model holds (its rotary caches, genai's context_length).
    pub ctx: usize,
    /// KV heads and head size of each past key / value input.
    pub kv_heads: usize,
    pub head: usize,
}

impl LlmShape {
    /// A generated LLM's shape.
    pub fn of(l: &Llm) -> LlmShape {
        LlmShape {
            label: l.label(),
            vocab: l.vocab,
            acc: l.layer.acc,
            ctx: l.ctx,
            kv_heads: l.layer.kv,
            head: l.layer.head,
        }
    }

    /// Positions of a shared KV buffer for cases needing at most `need`: the model's context,
    /// capped at 4096 unless a case needs more (genai sizes the buffers by its `max_length`, the
    /// context unless the app sets it; a builder model's context is 32-128 K positions, whose
    /// buffers would be gigabytes per arm).
    pub fn kv_capacity(&self, need: usize) -> usize {
        self.ctx.min(need.max(4096))
    }
}

/// Whether `path` is a genai model folder (a directory with `genai_config.json`).
pub fn is_folder(path: &str) -> bool {
    Path::new(path).join("genai_config.json").is_file()
}

/// The config's `genai_config.json` beside the model file `model` (for its worker), if there.
fn config_beside(model: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(model.parent()?.join("genai_config.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// A genai model folder: its shape, the decoder's path and what its graph holds.
pub struct Folder {
    pub shape: LlmShape,
    pub model: PathBuf,
    pub info: ModelInfo,
}

/// Reads folder `dir` (module doc; the decoder's graph gives the accuracy level).
pub fn read(dir: &str) -> Result<Folder, String> {
    let path = Path::new(dir).join("genai_config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let cfg: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let m = &cfg["model"];
    let d = &m["decoder"];
    let field = |v: &Value, name: &str| {
        v[name]
            .as_u64()
            .filter(|&n| n > 0)
            .map(|n| n as usize)
            .ok_or_else(|| format!("{}: no positive {name}", path.display()))
    };
    let names = [
        (&d["inputs"], "input_ids", "input_ids"),
        (&d["inputs"], "attention_mask", "attention_mask"),
        (&d["inputs"], "position_ids", "position_ids"),
        (&d["inputs"], "past_key_names", "past_key_values.%d.key"),
        (&d["inputs"], "past_value_names", "past_key_values.%d.value"),
        (&d["outputs"], "logits", "logits"),
        (&d["outputs"], "present_key_names", "present.%d.key"),
        (&d["outputs"], "present_value_names", "present.%d.value"),
    ];
    for (section, key, usual) in names {
        if let Some(name) = section[key].as_str().filter(|n| *n != usual) {
            return Err(format!(
                "{}: the decoder's {key} is '{name}'; rcpu-bench feeds models with the builder's \
                 usual names ('{usual}')",
                path.display()
            ));
        }
    }
    let file = d["filename"]
        .as_str()
        .ok_or_else(|| format!("{}: no decoder filename", path.display()))?;
    let model = Path::new(dir).join(file);
    let bytes = std::fs::read(&model).map_err(|e| format!("{}: {e}", model.display()))?;
    let info = ModelInfo::parse(&bytes)?;
    let name = Path::new(dir)
        .file_name()
        .map_or(dir.into(), |n| n.to_string_lossy().into_owned());
    Ok(Folder {
        shape: LlmShape {
            label: format!("{name} (genai folder {dir})"),
            vocab: field(m, "vocab_size")?,
            acc: info.nbits_acc.unwrap_or(0),
            ctx: field(m, "context_length")?,
            kv_heads: field(d, "num_key_value_heads")?,
            head: field(d, "head_size")?,
        },
        model,
        info,
    })
}

/// Fills the dims `info`'s past key / value inputs leave symbolic (KV heads, head size) from the
/// `genai_config.json` beside `model`, when there is one.
pub fn fill_kv_dims(info: &mut ModelInfo, model: &Path) {
    let Some(cfg) = config_beside(model) else {
        return;
    };
    let d = &cfg["model"]["decoder"];
    let dim = |name: &str| d[name].as_i64().filter(|&n| n > 0);
    let (heads, head) = (dim("num_key_value_heads"), dim("head_size"));
    for inp in &mut info.inputs {
        if inp.name.starts_with("past_key_values.") && inp.dims.len() == 4 {
            inp.dims[1] = inp.dims[1].or(heads);
            inp.dims[3] = inp.dims[3].or(head);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(rest: &str, tag: &str) -> (Llm, PathBuf) {
        let l = Llm::parse("s", rest).unwrap();
        let dir = std::env::temp_dir().join(format!("rcpu-folder-{}-{tag}", std::process::id()));
        crate::bench::llm_model::write(&l, &dir, "model.onnx").unwrap();
        (l, dir)
    }

    #[test]
    fn a_generated_folder_reads_as_its_spec() {
        let (l, dir) = folder("preset=qwen2-0.5b,layers=1,vocab=300,ctx=64,acc=4", "spec");
        let f = read(dir.to_str().unwrap()).unwrap();
        assert_eq!(
            (f.shape.vocab, f.shape.acc, f.shape.ctx),
            (l.vocab, l.layer.acc, l.ctx)
        );
        assert_eq!((f.shape.kv_heads, f.shape.head), (l.layer.kv, l.layer.head));
        assert_eq!(f.model, dir.join("model.onnx"));
        assert!(is_folder(dir.to_str().unwrap()));
        assert!(!is_folder(f.model.to_str().unwrap()));
        // Capacity: the context, or the case's need past 4096.
        let big = LlmShape {
            ctx: 32768,
            ..f.shape.clone()
        };
        assert_eq!(
            [
                f.shape.kv_capacity(10),
                big.kv_capacity(10),
                big.kv_capacity(5000)
            ],
            [64, 4096, 5000]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn symbolic_head_dims_come_from_the_config_and_odd_names_are_refused() {
        let (l, dir) = folder("preset=qwen2-0.5b,layers=1,vocab=300,ctx=64", "dims");
        let model = dir.join("model.onnx");
        let mut info = ModelInfo::parse(&std::fs::read(&model).unwrap()).unwrap();
        let past: Vec<usize> = (0..info.inputs.len())
            .filter(|&i| info.inputs[i].name.starts_with("past_key_values."))
            .collect();
        assert_eq!(past.len(), 2);
        for &i in &past {
            info.inputs[i].dims[1] = None;
            info.inputs[i].dims[3] = None;
        }
        fill_kv_dims(&mut info, &model);
        for &i in &past {
            let d = &info.inputs[i].dims;
            assert_eq!(
                (d[1], d[3]),
                (Some(l.layer.kv as i64), Some(l.layer.head as i64))
            );
        }
        let cfg_path = dir.join("genai_config.json");
        let mut cfg: Value =
            serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
        cfg["model"]["decoder"]["outputs"]["logits"] = "scores".into();
        std::fs::write(&cfg_path, cfg.to_string()).unwrap();
        let err = read(dir.to_str().unwrap()).err().unwrap();
        assert!(err.contains("'scores'") && err.contains("logits"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
