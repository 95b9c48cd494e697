//! Fuzz target: MatMul / QLinearMatMul shape checking and planning (see ../README.md).
//!
//! Operand shapes of any rank (0..=6) with dims 0, 1, small, huge and symbolic go through the
//! claim-time check (`matmul_shapes` on fully static shapes) and, symbolic dims resolved, the
//! run-time planning (`matmul_shapes`, `MatMulPlan::offsets`), QLinearMatMul's packed-size check
//! (`checked_packed_sizes`) and, when small, `matmul_f32` against a naive numpy.matmul.
//! Asserts: no panic; accepted exactly when numpy accepts and every size fits; numpy's shape,
//! offsets and values. Run with `-malloc_limit_mb=64` so an allocation sized by the shapes
//! (planning once listed 2^40 offsets) is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rcpu::kernels::gemm::matmul_f32;
use rcpu::kernels::qgemm::checked_packed_sizes;
use rcpu::kernels::shape::{matmul_shapes, MAX_ELEMS};
use rcpu::runtime::par::Serial;

fn take(d: &mut &[u8]) -> u8 {
    let (v, rest) = d.split_first().map_or((0, &[][..]), |(v, r)| (*v, r));
    *d = rest;
    v
}

/// A dim from one byte: `None` is symbolic.
fn dim(d: &mut &[u8]) -> Option<usize> {
    let v = take(d);
    Some(match v % 16 {
        0 => return None,
        1 | 2 => 0,
        3..=6 => 1,
        7..=11 => 2 + (v as usize >> 4) % 4,
        12 => 1 << 20,
        13 => 1 << (20 + (v as usize >> 4)),
        14 => 1 << 40,
        _ => usize::MAX / (1 + (v as usize >> 4)),
    })
}

fn shape(d: &mut &[u8], like: Option<&[Option<usize>]>) -> Vec<Option<usize>> {
    let rank = take(d) as usize % 7;
    let mut s: Vec<Option<usize>> = (0..rank)
        .map(|i| match like {
            Some(o) if take(d) % 3 != 0 && i < o.len() => o[o.len() - 1 - i],
            _ => dim(d),
        })
        .collect();
    s.reverse();
    s
}

fn numel128(s: &[usize]) -> u128 {
    if s.contains(&0) {
        return 0;
    }
    s.iter().fold(1u128, |a, &x| a.saturating_mul(x as u128))
}

/// numpy.matmul: (out, batch, padded A batch, padded B batch, m, k, n).
#[allow(clippy::type_complexity)]
fn numpy(a: &[usize], b: &[usize]) -> Option<(Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>, usize, usize, usize)> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let a2 = if a.len() == 1 { vec![1, a[0]] } else { a.to_vec() };
    let b2 = if b.len() == 1 { vec![b[0], 1] } else { b.to_vec() };
    let (m, k, kb, n) = (a2[a2.len() - 2], a2[a2.len() - 1], b2[b2.len() - 2], b2[b2.len() - 1]);
    if k != kb {
        return None;
    }
    let (ab, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
    let rank = ab.len().max(bb.len());
    let pad = |s: &[usize]| [vec![1; rank - s.len()], s.to_vec()].concat();
    let (pa, pb) = (pad(ab), pad(bb));
    let mut batch = vec![];
    for i in 0..rank {
        batch.push(match (pa[i], pb[i]) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        });
    }
    let mut out = batch.clone();
    if a.len() > 1 {
        out.push(m);
    }
    if b.len() > 1 {
        out.push(n);
    }
    Some((out, batch, pa, pb, m, k, n))
}

fn ref_batch(bi: usize, batch: &[usize], pa: &[usize], pb: &[usize]) -> (usize, usize) {
    let (mut rem, mut ia, mut ib, mut sa, mut sb) = (bi, 0, 0, 1, 1);
    for i in (0..batch.len()).rev() {
        let idx = rem % batch[i];
        rem /= batch[i];
        ia += if pa[i] == 1 { 0 } else { idx * sa };
        ib += if pb[i] == 1 { 0 } else { idx * sb };
        sa *= pa[i];
        sb *= pb[i];
    }
    (ia, ib)
}

/// `matmul_shapes` against numpy; true when accepted.
fn check(a: &[usize], b: &[usize]) -> bool {
    let got = matmul_shapes(a, b);
    let want = numpy(a, b);
    let fits = |s: &[usize]| numel128(s) <= MAX_ELEMS as u128;
    let ok = want.as_ref().is_some_and(|(out, batch, ..)| {
        fits(a) && fits(b) && fits(out) && numel128(batch) <= usize::MAX as u128
    });
    assert_eq!(got.is_ok(), ok, "{a:?} x {b:?}: {got:?}");
    if let (Ok(p), Some((out, batch, pa, pb, m, k, n))) = (&got, want) {
        assert_eq!((&p.out_shape, p.m, p.k, p.n), (&out, m, k, n));
        if numel128(&out) > 0 {
            let last = p.batch - 1;
            for bi in [0, last / 2, last] {
                let (ia, ib) = ref_batch(bi, &batch, &pa, &pb);
                assert_eq!(p.offsets(bi), (ia * m * k, ib * k * n));
            }
        }
    }
    ok
}

fuzz_target!(|data: &[u8]| {
    let mut d = data;
    let sa = shape(&mut d, None);
    let sb = shape(&mut d, Some(&sa));
    let stat = |s: &[Option<usize>]| s.iter().copied().collect::<Option<Vec<usize>>>();
    if let (Some(a), Some(b)) = (stat(&sa), stat(&sb)) {
        check(&a, &b);
    }
    let mut resolve = |s: &[Option<usize>]| -> Vec<usize> {
        s.iter().map(|x| x.unwrap_or_else(|| take(&mut d) as usize % 4)).collect()
    };
    let (a, b) = (resolve(&sa), resolve(&sb));
    if !check(&a, &b) {
        return;
    }
    if b.len() >= 3 {
        let (k, n) = (b[b.len() - 2], b[b.len() - 1]);
        if let Some(batches) = usize::try_from(numel128(&b[..b.len() - 2])).ok() {
            let bytes = (k as u128).div_ceil(4) * 4 * (n as u128).div_ceil(64) * 64 * batches as u128;
            let ok = batches == 0
                || (bytes <= isize::MAX as u128 && (n as u128) * batches as u128 <= isize::MAX as u128 / 4);
            assert_eq!(checked_packed_sizes(k, n, batches).is_some(), ok, "b {b:?}");
        }
    }
    let (na, nb) = (numel128(&a), numel128(&b));
    let (out, batch, pa, pb, m, k, n) = numpy(&a, &b).unwrap();
    let no = numel128(&out);
    if na > 4096 || nb > 4096 || no > 4096 || no == 0 {
        return;
    }
    let av: Vec<f32> = (0..na as usize).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
    let bv: Vec<f32> = (0..nb as usize).map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0).collect();
    let mut y = vec![f32::NAN; no as usize];
    matmul_f32(&av, &a, &bv, &b, &mut y, &Serial).unwrap();
    let mut i = 0;
    for bi in 0..numel128(&batch) as usize {
        let (ia, ib) = ref_batch(bi, &batch, &pa, &pb);
        for r in 0..m {
            for c in 0..n {
                let (mut s, mut g) = (0f64, 0f64);
                for p in 0..k {
                    let t = av[ia * m * k + r * k + p] as f64 * bv[ib * k * n + p * n + c] as f64;
                    s += t;
                    g += t.abs();
                }
                assert!((y[i] as f64 - s).abs() <= 1e-5 * g + 1e-6, "{a:?} x {b:?} at {i}");
                i += 1;
            }
        }
    }
});
