//! A packed MatMulNBits weight written to a file and read back in place
//! (`PackedNBits::export_parts` / `import_parts` over `os::mapped::FileMap`): the imported weight
//! computes bit for bit what the packed one does, and every corrupted description is an error,
//! never a panic or an out-of-bounds read.

use crate::nbits_common::{Problem, Rng, THREE};

use rcpu::kernels::matmul_nbits::persist::LAYOUT_VERSION;
use rcpu::kernels::matmul_nbits::{matmul_packed_with, pack, Kernels, PackedNBits};
use rcpu::memory::WeightBytes;
use rcpu::os::mapped::{FileMap, FileSlice};
use rcpu::runtime::par::{Par, Serial};
use rcpu::telemetry::ledger::Variant;
use serde_json::Value;
use std::sync::Arc;

/// A file under the temp dir, removed on drop.
struct TempFile(std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `sections` written to a fresh file, each at a 4096-aligned offset after a 4096-byte header
/// of junk (so no section starts at 0); the file and (offset, length) of each.
fn write_sections(name: &str, sections: &[&[u8]]) -> (TempFile, Vec<(usize, usize)>) {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path =
        std::env::temp_dir().join(format!("rcpu-persist-{name}-{}-{seq}", std::process::id()));
    let mut bytes = vec![0xA5u8; 4096];
    let mut at = Vec::new();
    for s in sections {
        bytes.resize(bytes.len().next_multiple_of(4096), 0x5A);
        at.push((bytes.len(), s.len()));
        bytes.extend_from_slice(s);
    }
    std::fs::write(&path, &bytes).unwrap();
    (TempFile(path), at)
}

/// The sections of `file` at `at`, as a mapped file's slices.
fn map_sections(file: &TempFile, at: &[(usize, usize)]) -> Vec<WeightBytes> {
    let map = Arc::new(FileMap::open(&file.0).unwrap());
    at.iter()
        .map(|&(off, len)| WeightBytes::from(FileSlice::<u8>::new(&map, off, len).unwrap()))
        .collect()
}

/// `w` exported, written to a file, mapped and imported.
fn round_trip(name: &str, w: &PackedNBits) -> (TempFile, PackedNBits) {
    let (meta, sections) = w.export_parts();
    let (file, at) = write_sections(name, &sections);
    let back = PackedNBits::import_parts(&meta, map_sections(&file, &at)).unwrap();
    (file, back)
}

/// Rows `m` of random A through `w` with `kern` on `par`.
fn run(
    kern: &Kernels,
    pr: &Problem,
    a: &[f32],
    m: usize,
    w: &PackedNBits,
    par: &dyn Par,
) -> Vec<f32> {
    let mut out = vec![f32::NAN; m * pr.p.n];
    matmul_packed_with(kern, a, m, w, pr.bias.as_deref(), &mut out, par).unwrap();
    out
}

/// The problems: 4- and 8-bit, blocks 16/32/128, K not a multiple of the block, N not a
/// multiple of 32, with and without zero points, levels 0 and 4, f16 and f32 scales (and
/// groups of both in one weight).
fn problems() -> Vec<(String, Problem)> {
    let mut v = Vec::new();
    let mut add = |label: &str, pr: Problem| v.push((label.to_string(), pr));
    add(
        "4b bs16 acc0 zp",
        Problem::new(100, 33, 1, 16, 0, true, false, 1),
    );
    add(
        "4b bs32 acc4 f16",
        Problem::new(1000, 70, 1, 32, 4, false, true, 2),
    );
    let mut pr = Problem::new(300, 17, 1, 128, 4, true, false, 3);
    pr.p = pr.p.with_acc4_f16_scales(false);
    add("4b bs128 acc4 f32 zp", pr);
    // Group 1's scales are below f16's normals: that group keeps f32, the others f16.
    let mut pr = Problem::new(200, 90, 1, 32, 4, false, false, 4);
    let kbs = pr.p.k_blocks();
    for s in &mut pr.scales[32 * kbs..64 * kbs] {
        *s *= 1e-4;
    }
    add("4b bs32 acc4 mixed", pr);
    // Scales f16 holds exactly (a model's f16 scales): f16 groups at level 0.
    let mut pr = Problem::new(64, 40, 1, 16, 0, true, false, 5);
    pr.p = pr.p.with_f16_source_scales(true);
    for s in &mut pr.scales {
        *s = (*s * 1024.0).round() / 1024.0;
    }
    add("4b bs16 acc0 f16-source", pr);
    add(
        "8b bs32 acc4 zp",
        Problem::new8(77, 40, 1, 32, 4, true, false, 6),
    );
    add(
        "8b bs128 acc0",
        Problem::new8(256, 15, 1, 128, 0, false, true, 7),
    );
    add(
        "8b bs16 acc4 f16",
        Problem::new8(50, 33, 1, 16, 4, false, false, 8),
    );
    v
}

#[test]
fn an_imported_weight_computes_what_the_packed_one_does() {
    for (label, pr) in problems() {
        let w = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p);
        let (meta, _) = w.export_parts();
        if label.contains("mixed") {
            let f16 = meta["f16_groups"].as_array().unwrap();
            assert!(
                f16.contains(&true.into()) && f16.contains(&false.into()),
                "{label}"
            );
        }
        if label.contains("f16-source") {
            assert!(meta["f16_groups"]
                .as_array()
                .unwrap()
                .contains(&true.into()));
        }
        let (_file, back) = round_trip("compute", &w);
        assert!(back.in_file() && !w.in_file(), "{label}");
        assert_eq!(back.params(), w.params(), "{label}");
        assert_eq!(back.weight_bytes(), w.weight_bytes(), "{label}");
        assert_eq!(back.zero_point_bytes(), w.zero_point_bytes(), "{label}");
        assert_eq!(
            back.export_parts().0,
            meta,
            "{label}: the description round-trips"
        );
        // Held memory: the heap vectors only; the arena pieces of the original are gone from it.
        assert!(
            back.bytes() < w.bytes(),
            "{label}: {} {}",
            back.bytes(),
            w.bytes()
        );
        let mut r = Rng::seeded(99);
        for m in [1, 5] {
            let a: Vec<f32> = (0..m * pr.p.k).map(|_| r.f32(-1.0, 1.0)).collect();
            let pars: [(&str, &dyn Par); 2] = [("serial", &Serial), ("3threads", &THREE)];
            for kern in Kernels::supported() {
                for (pname, par) in pars {
                    let ctx = format!(
                        "{label} m={m} {} {pname}",
                        kern.route(pr.p.accuracy_level, m).text()
                    );
                    let want = run(kern, &pr, &a, m, &w, par);
                    let got = run(kern, &pr, &a, m, &back, par);
                    assert!(want.iter().all(|x| x.is_finite()), "{ctx}");
                    let same = got
                        .iter()
                        .zip(&want)
                        .all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "{ctx}: imported weight differs");
                }
            }
        }
        // Column codes (the tied embedding's read) agree too.
        let mut c0 = vec![0u8; w.column_bytes()];
        let mut c1 = c0.clone();
        for n in [0, pr.p.n / 2, pr.p.n - 1] {
            assert!(w.column_codes(n, &mut c0) && back.column_codes(n, &mut c1));
            assert_eq!(c0, c1, "{label} column {n}");
        }
    }
}

/// Two imports over one map read the very same bytes: nothing is copied.
#[test]
fn imports_read_the_mapped_bytes_in_place() {
    let pr = Problem::new(64, 64, 1, 32, 4, true, false, 11);
    let w = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p);
    let (meta, sections) = w.export_parts();
    let (file, at) = write_sections("twice", &sections);
    let map = Arc::new(FileMap::open(&file.0).unwrap());
    let slices = || -> Vec<WeightBytes> {
        at.iter()
            .map(|&(o, l)| FileSlice::<u8>::new(&map, o, l).unwrap().into())
            .collect()
    };
    let a = PackedNBits::import_parts(&meta, slices()).unwrap();
    let b = PackedNBits::import_parts(&meta, slices()).unwrap();
    assert_eq!(
        a.weight_bytes().as_ptr(),
        b.weight_bytes().as_ptr(),
        "no copy"
    );
    assert_eq!(a.region_addr(), map.addr());
}

/// The description of `pr`'s packed weight with `f` applied, imported over the weight's own
/// sections (with `g` applied to the list); the error.
fn import_err(
    pr: &Problem,
    f: impl FnOnce(&mut Value),
    g: impl FnOnce(&mut Vec<(usize, usize)>),
) -> String {
    let w = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p);
    let (mut meta, sections) = w.export_parts();
    let (file, mut at) = write_sections("corrupt", &sections);
    f(&mut meta);
    g(&mut at);
    match PackedNBits::import_parts(&meta, map_sections(&file, &at)) {
        Ok(_) => panic!("a corrupted description was imported: {meta}"),
        Err(e) => e,
    }
}

fn expect_err(pr: &Problem, f: impl FnOnce(&mut Value), field: &str) {
    let e = import_err(pr, f, |_| {});
    assert!(e.contains(field), "error names {field}: {e}");
}

#[test]
fn corrupted_descriptions_are_errors_naming_the_field() {
    let zp = Problem::new(100, 70, 1, 16, 4, true, false, 21);
    let plain = Problem::new8(64, 40, 1, 32, 0, false, false, 22);
    let set = |field: &'static str, v: Value| move |m: &mut Value| m[field] = v;
    // group_at: one offset wrong, one entry missing, not increasing, the last past the records.
    expect_err(
        &zp,
        |m| m["group_at"][1] = (m["group_at"][1].as_u64().unwrap() + 64).into(),
        "group_at",
    );
    expect_err(
        &zp,
        |m| {
            m["group_at"].as_array_mut().unwrap().pop();
        },
        "group_at",
    );
    expect_err(&zp, |m| m["group_at"][2] = 0.into(), "group_at");
    expect_err(&zp, |m| m["group_at"][0] = (-1).into(), "group_at");
    expect_err(&zp, set("group_at", "0".into()), "group_at");
    // The scale formats: a flipped group (its size no longer matches), a short list, f16 where
    // the params never pack f16.
    expect_err(
        &zp,
        |m| m["f16_groups"][0] = (!m["f16_groups"][0].as_bool().unwrap()).into(),
        "group_at",
    );
    expect_err(
        &zp,
        |m| {
            m["f16_groups"].as_array_mut().unwrap().pop();
        },
        "f16_groups",
    );
    expect_err(&zp, |m| m["f16_groups"][1] = 1.into(), "f16_groups");
    expect_err(&plain, |m| m["f16_groups"][0] = true.into(), "f16_groups");
    // Params: each bad value refused by the params' own validation or by the layout.
    expect_err(&zp, set("block_size", 24.into()), "params");
    expect_err(&zp, set("bits", 3.into()), "params");
    expect_err(&zp, set("k", 0.into()), "params");
    expect_err(&zp, set("accuracy_level", 9.into()), "params");
    expect_err(&zp, set("n", u64::MAX.into()), "n");
    expect_err(&zp, set("k", 113.into()), "group_at"); // 8 blocks, not 7: other group sizes
    expect_err(&zp, set("n", 64.into()), "f16_groups"); // 2 groups, not 3
    expect_err(&zp, set("acc4_f16_scales", Value::Null), "acc4_f16_scales");
    expect_err(&zp, set("layout", (LAYOUT_VERSION + 1).into()), "layout");
    // Zero points: present against the params, absent against them.
    expect_err(&zp, set("zero_points", false.into()), "zero_points");
    expect_err(&zp, set("has_zero_points", false.into()), "zero_points");
    expect_err(
        &plain,
        |m| {
            m["zero_points"] = true.into();
            m["has_zero_points"] = true.into();
        },
        "sections",
    );
    // The largest scale.
    expect_err(
        &zp,
        set("scale_max_bits", f32::NAN.to_bits().into()),
        "scale_max_bits",
    );
    expect_err(
        &zp,
        set("scale_max_bits", f32::INFINITY.to_bits().into()),
        "scale_max_bits",
    );
    expect_err(
        &zp,
        set("scale_max_bits", (-1.0f32).to_bits().into()),
        "scale_max_bits",
    );
    expect_err(
        &zp,
        set("scale_max_bits", (1u64 << 40).into()),
        "scale_max_bits",
    );
    // Not an object at all.
    expect_err(&zp, |m| *m = Value::Array(vec![]), "description");
}

#[test]
fn wrong_sections_are_errors() {
    let zp = Problem::new(100, 70, 1, 16, 4, true, false, 31);
    let shorter = |i: usize| move |at: &mut Vec<(usize, usize)>| at[i].1 -= 64;
    let e = import_err(&zp, |_| {}, shorter(0));
    assert!(e.contains("records"), "{e}");
    let e = import_err(&zp, |_| {}, |at| at[0].1 += 1);
    assert!(e.contains("records"), "{e}");
    let e = import_err(&zp, |_| {}, shorter(1));
    assert!(e.contains("zero points"), "{e}");
    let e = import_err(
        &zp,
        |_| {},
        |at| {
            at.pop();
        },
    );
    assert!(e.contains("sections"), "{e}");
    let e = import_err(&zp, |_| {}, |at| at.push(at[1]));
    assert!(e.contains("sections"), "{e}");
    let e = import_err(&zp, |_| {}, |at| at.swap(0, 1));
    assert!(e.contains("records"), "{e}");
}

/// Random damage to a description (numbers changed, entries dropped, types swapped): imported
/// or refused, never a panic; and what imports computes without reading out of bounds.
#[test]
fn damaged_descriptions_never_panic() {
    let pr = Problem::new8(70, 50, 1, 16, 4, true, false, 41);
    let w = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p);
    let (meta, sections) = w.export_parts();
    let (file, at) = write_sections("damage", &sections);
    let mut r = Rng::seeded(42);
    let keys: Vec<String> = meta.as_object().unwrap().keys().cloned().collect();
    let mut imported = 0;
    for _ in 0..400 {
        let mut m = meta.clone();
        for _ in 0..1 + r.next_u64() % 2 {
            let key = &keys[r.next_u64() as usize % keys.len()];
            let v = &mut m[key.as_str()];
            let pick = r.next_u64();
            *v = match (v.clone(), pick % 4) {
                (Value::Array(mut a), 0) if !a.is_empty() => {
                    let i = r.next_u64() as usize % a.len();
                    a[i] = match &a[i] {
                        Value::Bool(b) => (!b).into(),
                        x => (x.as_u64().unwrap_or(0) ^ (1 << ((pick >> 8) % 16))).into(),
                    };
                    Value::Array(a)
                }
                (Value::Number(n), 0 | 1) => {
                    (n.as_u64().unwrap_or(0) ^ (1 << ((pick >> 8) % 20))).into()
                }
                (Value::Bool(b), _) => (!b).into(),
                (_, 2) => Value::Null,
                (x, _) => x,
            };
        }
        if let Ok(back) = PackedNBits::import_parts(&m, map_sections(&file, &at)) {
            imported += 1;
            // Whatever imported is consistent enough to compute.
            let a = vec![0.5f32; back.params().k];
            let mut out = vec![0f32; back.params().n];
            rcpu::kernels::matmul_nbits::matmul_packed(&a, 1, &back, None, &mut out, &Serial)
                .unwrap();
        }
    }
    assert!(imported < 400, "some damage must be refused");
}
