//! The model under test (a file or a generated spec), where its bytes live for the workers, and
//! the CPUs/threads the arms use.

use super::args::Opts;
use super::gen::{Kind, Spec};
use super::llm_folder::LlmShape;
use super::model::ModelInfo;
use super::os;

pub struct Target {
    pub label: String,
    pub path: String,
    pub info: ModelInfo,
    pub weight_bytes: u64,
    pub m: usize,
    /// True when the model is a generated M=1 decode chain (the bandwidth floor applies).
    pub decode: bool,
    /// An LLM's shape (a generated `llm:` spec or a genai model folder; `llm`, `demo`).
    pub llm: Option<LlmShape>,
    temp: bool,
}

impl Target {
    pub fn resolve(o: &Opts) -> Result<Target, String> {
        if let Some(spec) = &o.gen {
            let s = Spec::parse(spec)?;
            if let Kind::Llm(l) = &s.kind {
                // Large: cached by spec, read from there by every worker.
                let c = super::llm_model::cached(l)?;
                let bytes = std::fs::read(&c.path).map_err(|e| format!("{}: {e}", c.path))?;
                let info = ModelInfo::parse(&bytes)?;
                return Ok(Target {
                    label: c.label,
                    path: c.path,
                    info,
                    weight_bytes: c.weight_bytes,
                    m: 1,
                    decode: true,
                    llm: Some(LlmShape::of(l)),
                    temp: false,
                });
            }
            let g = s.generate();
            let path = std::env::temp_dir().join(format!(
                "rcpu-bench-{}-{}.onnx",
                std::process::id(),
                s.seed
            ));
            std::fs::write(&path, &g.bytes)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            let info = ModelInfo::parse(&g.bytes)?;
            let m = o.m.unwrap_or(s.m);
            return Ok(Target {
                label: s.label(),
                path: path.display().to_string(),
                info,
                weight_bytes: g.weight_bytes,
                m,
                decode: m == 1,
                llm: None,
                temp: true,
            });
        }
        let path = o.model.clone().ok_or("no model")?;
        if super::llm_folder::is_folder(&path) {
            // A genai model folder (llm): its decoder, the bytes a token reads of it.
            let f = super::llm_folder::read(&path)?;
            return Ok(Target {
                label: f.shape.label.clone(),
                path: f.model.display().to_string(),
                weight_bytes: f.info.token_bytes,
                info: f.info,
                m: 1,
                decode: true,
                llm: Some(f.shape),
                temp: false,
            });
        }
        let bytes = std::fs::read(&path).map_err(|e| format!("reading {path}: {e}"))?;
        let info = ModelInfo::parse(&bytes)?;
        let m = o.m.unwrap_or(1);
        Ok(Target {
            label: path.clone(),
            path,
            weight_bytes: info.weight_bytes,
            info,
            m,
            decode: m == 1,
            llm: None,
            temp: false,
        })
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if self.temp {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// CPUs (the flag, else this process's affinity mask) and threads (the flag, else one per CPU).
/// Pins this process too, so what it measures (bandwidth) runs where the arms run.
pub fn placement(o: &Opts) -> Result<(Vec<usize>, usize), String> {
    let cpus = match &o.cpus {
        Some(c) => c.clone(),
        None => os::affinity()?,
    };
    let threads = o.threads.unwrap_or(cpus.len());
    os::pin(&cpus)?;
    Ok((cpus, threads))
}

/// Progress on stderr.
pub fn progress(msg: &str) {
    eprintln!("[rcpu-bench] {msg}");
}
