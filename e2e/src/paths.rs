//! Where the runtime and the plugin are: environment first (scripts/env.sh sets them), then the
//! repository's conventional locations.

use std::path::PathBuf;

/// The repository root (e2e/..).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e has a parent")
        .to_path_buf()
}

/// libonnxruntime.so from the pinned wheel.
pub fn ort_lib() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("RCPU_ORT_LIB") {
        return Ok(PathBuf::from(p));
    }
    let f = repo_root().join(".venv/ort_lib_path");
    let s = std::fs::read_to_string(&f).map_err(|_| {
        format!(
            "{} missing: run scripts/setup.sh (or set RCPU_ORT_LIB)",
            f.display()
        )
    })?;
    Ok(PathBuf::from(s.trim()))
}

/// The plugin: `RCPU_PLUGIN` or target/release/librcpu_ep.so.
pub fn plugin() -> Result<PathBuf, String> {
    let p = std::env::var("RCPU_PLUGIN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("target/release/librcpu_ep.so"));
    // ORT resolves a relative library path against its own directory, not the working one, so a
    // relative `RCPU_PLUGIN` (or `--null-plugin`) is made absolute here.
    std::fs::canonicalize(&p).map_err(|e| {
        format!(
            "{}: {e}: run `cargo build --release` first (or set RCPU_PLUGIN)",
            p.display()
        )
    })
}
