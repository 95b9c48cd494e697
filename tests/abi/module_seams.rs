//! The seams between rcpu's modules, checked on the source: which top-level module may name
//! which (docs/architecture.md, "Seams"). `abi/` is ORT's FFI and only `ep/` (and the plugin's
//! exports) builds on it; `kernels/` is pure compute; `os/` is the OS calls and names nothing
//! of rcpu. A path counts wherever code names it (`use`, a full path in an expression, a
//! `crate::{..}` group, a `super::` chain that climbs to the crate root); comments do not.

use std::path::{Path, PathBuf};

/// (top-level module, the top-level modules its files must not name).
const RULES: &[(&str, &[&str])] = &[
    ("kernels", &["abi", "ep"]),
    ("memory", &["abi", "ep", "kernels", "runtime", "telemetry"]),
    ("runtime", &["abi", "ep", "kernels", "memory", "telemetry"]),
    ("telemetry", &["abi"]),
    (
        "os",
        &["abi", "ep", "kernels", "memory", "runtime", "telemetry"],
    ),
];

/// The source without comments (line comments, doc comments, block comments); string
/// literals are kept as they are (none of rcpu's names a module path).
fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    loop {
        let line = rest.find("//").unwrap_or(usize::MAX);
        let block = rest.find("/*").unwrap_or(usize::MAX);
        if line == usize::MAX && block == usize::MAX {
            out.push_str(rest);
            return out;
        }
        if line < block {
            out.push_str(&rest[..line]);
            rest = rest[line..].find('\n').map_or("", |e| &rest[line + e..]);
        } else {
            out.push_str(&rest[..block]);
            rest = rest[block + 2..]
                .find("*/")
                .map_or("", |e| &rest[block + 2 + e + 2..]);
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The top-level modules a piece of code names, given the module path of its file
/// (`["kernels", "cast", "x86"]` for `src/kernels/cast/x86.rs`).
fn named_modules(code: &str, module: &[String]) -> Vec<String> {
    let code: String = code.split_whitespace().collect::<Vec<_>>().join(" ");
    let code = code.replace(" ::", "::").replace(":: ", "::");
    let mut names = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let at = &code[i..];
        let starts_word = i == 0 || !is_ident(bytes[i - 1] as char);
        let (depth, after) = if starts_word && at.starts_with("crate::") {
            (Some(0), i + "crate::".len())
        } else if starts_word && at.starts_with("super::") {
            let mut ups = 0;
            let mut j = i;
            while code[j..].starts_with("super::") {
                ups += 1;
                j += "super::".len();
            }
            // `super` from a file climbs from the file's own module.
            (module.len().checked_sub(ups), j)
        } else {
            (None, i + 1)
        };
        match depth {
            Some(0) => {
                names.extend(first_segments(&code[after..]));
                i = after;
            }
            Some(_) => i = after,
            None => i = after.max(i + 1),
        }
    }
    names
}

/// The first path segment of `rest` (`abi` of `abi::os::x`), or every top-level name of a
/// `{..}` group (`abi`, `memory` of `{abi::x, memory}`).
fn first_segments(rest: &str) -> Vec<String> {
    if let Some(group) = rest.strip_prefix('{') {
        let mut names = Vec::new();
        let (mut depth, mut start) = (0usize, 0usize);
        for (k, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    names.extend(first_segments(group[start..k].trim()));
                    return names;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    names.extend(first_segments(group[start..k].trim()));
                    start = k + 1;
                }
                _ => {}
            }
        }
        return names;
    }
    let end = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
    if end == 0 {
        Vec::new()
    } else {
        vec![rest[..end].to_string()]
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file under src/ (`mod.rs` is its directory's module).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut m: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if m.last().is_some_and(|l| l == "mod") {
        m.pop();
    }
    m
}

/// Every (file, forbidden module) pair found under `src/`.
fn violations(src: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for &(dir, forbidden) in RULES {
        let mut files = Vec::new();
        rust_files(&src.join(dir), &mut files);
        assert!(
            files.len() >= 2,
            "src/{dir}: only {} files found",
            files.len()
        );
        for f in files {
            let code = strip_comments(&std::fs::read_to_string(&f).unwrap());
            for name in named_modules(&code, &module_of(src, &f)) {
                if forbidden.contains(&name.as_str()) {
                    found.push(format!("{} names crate::{name}", f.display()));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn no_module_crosses_a_seam() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let v = violations(&src);
    assert!(
        v.is_empty(),
        "imports across a seam (docs/architecture.md, \"Seams\"):\n{}",
        v.join("\n")
    );
}

#[test]
fn the_scanner_sees_every_form_of_a_path() {
    let m = |s: &str| vec![s.to_string()];
    let file = ["kernels".to_string(), "cast".to_string(), "x86".to_string()];
    let names = |code: &str| named_modules(&strip_comments(code), &file);
    assert_eq!(names("use crate::abi::tensor::F16Bits;"), m("abi"));
    assert_eq!(names("let x = crate::abi::api();"), m("abi"));
    assert_eq!(
        names("use crate::{\n  abi::x,\n  memory::{a, b},\n};"),
        ["abi", "memory"]
    );
    assert_eq!(names("use crate :: abi;"), m("abi"));
    assert_eq!(names("use super::super::super::abi::x;"), m("abi"));
    assert_eq!(
        names("use super::super::gemm;"),
        Vec::<String>::new(),
        "stays in kernels"
    );
    assert_eq!(
        names("// use crate::abi::x;\n/* crate::abi */ /// crate::abi"),
        Vec::<String>::new()
    );
    assert_eq!(
        names("use $crate::abi::x;"),
        m("abi"),
        "a macro's path counts too"
    );
    assert_eq!(names("notcrate::abi::x"), Vec::<String>::new());
    // An added forbidden import in a scanned tree is reported.
    let dir = std::env::temp_dir().join(format!("rcpu-seams-{}", std::process::id()));
    for (d, body) in [
        ("kernels", "use crate::{memory, abi::status::Error};\n"),
        ("memory", "// crate::abi in a comment is fine\nfn f() {}\n"),
        ("runtime", "use crate::os;\n"),
        ("telemetry", "use crate::ep::VERSION;\n"),
        ("os", "pub fn f() {}\n"),
    ] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
        std::fs::write(dir.join(d).join("mod.rs"), body).unwrap();
        std::fs::write(dir.join(d).join("x.rs"), "fn g() {}\n").unwrap();
    }
    let v = violations(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].ends_with("names crate::abi") && v[0].contains("kernels"),
        "{v:?}"
    );
}
