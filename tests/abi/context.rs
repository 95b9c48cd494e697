//! The EPContext options and file naming (`ep::context`): what a session's config asks, where the
//! context file goes, and which names an `EPContext` node may give it. The file itself (layout,
//! checks, refusals) is tested end to end in e2e/python/test_ep_context.py.

use std::path::Path;

use rcpu::ep::context::{check_file_name, default_model_path, file_name_for, ContextOptions};

fn opts(entries: &[(&str, &str)]) -> Result<ContextOptions, String> {
    ContextOptions::from_entries(entries.iter().copied()).map_err(|e| e.to_string())
}

#[test]
fn options_read_orts_keys() {
    let o = opts(&[
        ("ep.context_enable", "1"),
        ("ep.context_file_path", "/m/model_ctx.onnx"),
        ("ep.context_embed_mode", "1"),
        ("session.other", "x"),
    ])
    .unwrap();
    assert!(o.enable && o.embed_asked);
    assert_eq!(o.file_path.as_deref(), Some("/m/model_ctx.onnx"));
    let o = opts(&[("ep.context_enable", "0")]).unwrap();
    assert_eq!(o, ContextOptions::default());
    let e = opts(&[("ep.context_enable", "yes")]).unwrap_err();
    assert!(e.contains("ep.context_enable") && e.contains("yes"), "{e}");
}

#[test]
fn the_file_sits_beside_the_context_model() {
    let name = |p: &str, n: usize| file_name_for(Path::new(p), n);
    assert_eq!(
        name("/m/model_ctx.onnx", 0).as_deref(),
        Some("model_ctx.rcpu")
    );
    assert_eq!(
        name("/m/model_ctx.onnx", 1).as_deref(),
        Some("model_ctx-2.rcpu")
    );
    assert_eq!(name("x/decoder", 0).as_deref(), Some("decoder.rcpu"));
    assert_eq!(name("/m/.onnx", 0), None);
    assert_eq!(
        default_model_path(Path::new("/m/model.onnx")).as_deref(),
        Some(Path::new("/m/model_ctx.onnx"))
    );
}

#[test]
fn a_node_names_a_plain_file_only() {
    assert_eq!(check_file_name("model_ctx.rcpu").unwrap(), "model_ctx.rcpu");
    for bad in [
        "",
        ".",
        "..",
        "../x.rcpu",
        "/etc/passwd",
        "a/b.rcpu",
        "a\\b",
    ] {
        let e = check_file_name(bad).unwrap_err().to_string();
        assert!(e.contains("plain file name"), "{bad:?}: {e}");
    }
}
