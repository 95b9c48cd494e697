//! rcpu's EPContext models: a session compiles its fused partitions once and writes what it
//! prepared into a file; later sessions map that file and pack nothing.
//!
//! **Writing.** With ORT's session config `ep.context_enable=1`, `Compile` builds every fused
//! partition as usual, then writes one context file ([`file::write`]) holding, per partition, its
//! nodes as plain data (`ep::spec`), each packed weight a kernel can export
//! (`OpKernel::export_packed`: MatMulNBits' packed layout, QMoE's packed experts, the f32 weights
//! of MatMul / Gemm and QLinearMatMul's B in their packed panels) and the bytes of every constant
//! some kernel still reads as a model constant (scales and biases kernels copy, tables they
//! gather from, weights a kernel did not pack, which are offered for packing again on load). It then hands ORT one `EPContext` node per partition naming the file; ORT writes the
//! context model (`ep.context_file_path`, default `<model>_ctx.onnx`) with those nodes in place
//! of the partitions, and without the initializers only they read.
//!
//! **Loading.** A session created from the context model claims each `EPContext` node whose
//! `source` is rcpu, maps the file read-only (shared between the sessions and processes that
//! load it, [`file::ContextFile::open`]), and builds each partition's plan from the file: the
//! kernels import their packed weights as views of the mapping, never copying them, and the
//! original initializers are never loaded.
//!
//! **What is refused.** A file made by another rcpu version, for another instruction-set level
//! or with other packing options (`acc4_scales`), a file whose size, format, directory or any
//! section checksum is wrong, a context node naming a partition the file lacks: each is a clean
//! error naming the file and the mismatch (recreate the context model from the original one).
//! The file is written under a temporary name and renamed into place, so a reader never sees a
//! half-written file. A file truncated by another process *while mapped* is beyond any mapping
//! reader's protection (the kernel raises SIGBUS on the lost pages): replace a context file by
//! renaming a new one over it, never by rewriting it in place.
//!
//! **Where the file goes.** Beside the context model: `<context model stem>.rcpu` (for
//! `model_ctx.onnx`, `model_ctx.rcpu`; a session's later `Compile` calls, for a model with
//! subgraphs, write `model_ctx-2.rcpu` and so on); the `EPContext` node names it relative to the model's
//! folder (`ep_cache_context`, `embed_mode=0`). rcpu always writes the file: a packed weight
//! embedded in the model could not be mapped.

pub mod file;

use crate::abi::status::{Error, Result};

/// ORT's session config keys for EPContext models.
pub const KEY_ENABLE: &str = "ep.context_enable";
pub const KEY_FILE_PATH: &str = "ep.context_file_path";
pub const KEY_EMBED_MODE: &str = "ep.context_embed_mode";

/// The `EPContext` op.
pub const OP: &str = "EPContext";
pub const DOMAIN: &str = "com.microsoft";

/// What a session's config asks of EPContext models.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContextOptions {
    /// `ep.context_enable=1`: write a context file at `Compile`.
    pub enable: bool,
    /// `ep.context_file_path`: where ORT writes the context model (`None`: ORT's default).
    pub file_path: Option<String>,
    /// `ep.context_embed_mode=1` was asked (rcpu writes its file anyway; logged).
    pub embed_asked: bool,
}

impl ContextOptions {
    /// Reads ORT's EPContext keys from the session config entries.
    pub fn from_entries<'e>(entries: impl Iterator<Item = (&'e str, &'e str)>) -> Result<Self> {
        let mut o = ContextOptions::default();
        for (k, v) in entries {
            match k {
                KEY_ENABLE => {
                    o.enable = match v.trim() {
                        "1" => true,
                        "0" | "" => false,
                        _ => {
                            return Err(Error::invalid_argument(format!(
                                "session config {KEY_ENABLE}='{v}': expected 0 or 1"
                            )))
                        }
                    }
                }
                KEY_FILE_PATH if !v.is_empty() => o.file_path = Some(v.to_string()),
                KEY_EMBED_MODE => o.embed_asked = v.trim() == "1",
                _ => {}
            }
        }
        Ok(o)
    }
}

/// The file name of the `nth` (from 0) context file a session writes for a context model at
/// `model_path`: its name with a trailing `.onnx` replaced by `.rcpu` (else `.rcpu` appended),
/// and `-2`, `-3`, ... before the extension for a session's later `Compile` calls (a model
/// with subgraphs), so no call overwrites the partitions of another.
pub fn file_name_for(model_path: &std::path::Path, nth: usize) -> Option<String> {
    let name = model_path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".onnx").unwrap_or(name);
    let n = match nth {
        0 => String::new(),
        n => format!("-{}", n.checked_add(1)?),
    };
    (!stem.is_empty()).then(|| format!("{stem}{n}.rcpu"))
}

/// The context model ORT writes when `ep.context_file_path` is not set: `<model>_ctx.onnx`
/// beside the input model.
pub fn default_model_path(input_model: &std::path::Path) -> Option<std::path::PathBuf> {
    let name = input_model.file_name()?.to_str()?;
    let stem = name.strip_suffix(".onnx").unwrap_or(name);
    Some(input_model.with_file_name(format!("{stem}_ctx.onnx")))
}

/// A context file name from a model's `EPContext` node: a plain file name in the model's folder
/// (no directories, no `..`), so a model cannot point rcpu at another folder's files.
pub fn check_file_name(name: &str) -> Result<&str> {
    let ok = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0']);
    if ok {
        Ok(name)
    } else {
        Err(Error::invalid_argument(format!(
            "EPContext node names context file '{name}': expected a plain file name in the \
             model's folder"
        )))
    }
}
