//! The property of the MatMul / QLinearMatMul shape fuzzing, shared by the stable smoke test
//! (`tests/serial/fuzz_matmul_shapes_smoke.rs`, xorshift draws, a counting allocator) and the cargo-fuzz
//! target (`fuzz/fuzz_targets/matmul_shapes.rs`, draws from the fuzzer's bytes, run under
//! `-malloc_limit_mb`).
//!
//! Operand shapes of arbitrary rank, with dims 0, 1, small, huge and symbolic (`None`, resolved
//! at "run" time), go through the claim-time check (`matmul_shapes` on static shapes) and the
//! run-time planning and compute (`matmul_shapes`, `MatMulPlan::offsets`, `matmul_f32`, and for a
//! batched B QLinearMatMul's size check `checked_packed_sizes`). Asserts: nothing panics; no
//! single planning allocation exceeds [`ALLOC_BOUND`]; accepted shapes give numpy.matmul's shape,
//! offsets and values (a naive reference in u128 arithmetic); rejected shapes are exactly the
//! incompatible ones and the ones whose sizes do not fit.

#![allow(dead_code)]

use rcpu::kernels::gemm::matmul_f32;
use rcpu::kernels::qgemm::checked_packed_sizes;
use rcpu::kernels::shape::{matmul_shapes, MAX_ELEMS};
use rcpu::runtime::par::Serial;

/// Largest single allocation the planning may make (operands aside, which stay small).
pub(crate) const ALLOC_BOUND: usize = 1 << 20;

/// The source of a case's random choices.
pub(crate) trait Draw {
    fn next(&mut self) -> u64;
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Measures the largest single allocation since `reset` (0 when the harness cannot tell: the
/// fuzzer enforces its own malloc limit instead).
pub(crate) trait AllocProbe {
    fn reset(&self);
    fn largest(&self) -> usize;
}

/// A dim: `None` is symbolic (known only at run time).
fn dim(r: &mut impl Draw) -> Option<usize> {
    Some(match r.below(16) {
        0 => return None,
        1 | 2 => 0,
        3..=6 => 1,
        7..=11 => 2 + r.below(4) as usize,
        12 => 1 << 20,
        13 => 1 << (20 + r.below(24)),
        14 => 1 << 40,
        _ => usize::MAX / (1 + r.below(4) as usize),
    })
}

fn shape(r: &mut impl Draw, like: Option<&[Option<usize>]>) -> Vec<Option<usize>> {
    let rank = r.below(6) as usize;
    (0..rank)
        .map(|i| match like {
            // Often reuse the other operand's dims, so shapes are compatible often enough.
            Some(o) if r.below(3) != 0 && i < o.len() => o[o.len() - 1 - i],
            _ => dim(r),
        })
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect()
}

/// Resolves symbolic dims as a feed would (0, 1 or small).
fn resolve(r: &mut impl Draw, s: &[Option<usize>]) -> Vec<usize> {
    s.iter()
        .map(|d| d.unwrap_or_else(|| [0, 1, 2, 3][r.below(4) as usize]))
        .collect()
}

/// numpy.matmul's answer in u128 arithmetic: (out shape, batch shape, padded A/B batch
/// dims, m, k, n), or None when numpy rejects the shapes.
type Ref = (
    Vec<usize>,
    Vec<usize>,
    Vec<usize>,
    Vec<usize>,
    usize,
    usize,
    usize,
);

fn numpy(a: &[usize], b: &[usize]) -> Option<Ref> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let a2 = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2 = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    let (m, k, kb, n) = (
        a2[a2.len() - 2],
        a2[a2.len() - 1],
        b2[b2.len() - 2],
        b2[b2.len() - 1],
    );
    if k != kb {
        return None;
    }
    let (ab, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
    let rank = ab.len().max(bb.len());
    let pad = |s: &[usize]| [vec![1; rank - s.len()], s.to_vec()].concat();
    let (pa, pb) = (pad(ab), pad(bb));
    let mut batch = vec![];
    for d in 0..rank {
        batch.push(match (pa[d], pb[d]) {
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

/// Elements of a shape in u128 (0 when any dim is 0), saturating at u128::MAX.
fn numel128(s: &[usize]) -> u128 {
    if s.contains(&0) {
        return 0;
    }
    s.iter()
        .fold(1u128, |acc, &d| acc.saturating_mul(d as u128))
}

fn fits(s: &[usize]) -> bool {
    numel128(s) <= MAX_ELEMS as u128
}

/// `n` values in [-1, 1] from a xorshift seeded with `seed`.
fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s % 2001) as f32 - 1000.0) / 1000.0
        })
        .collect()
}

/// One case, drawn from `r`; `probe` measures the planning's allocations. Returns whether
/// values were computed and compared. Panics on any violation.
pub(crate) fn property(r: &mut impl Draw, probe: &dyn AllocProbe) -> bool {
    let sa = shape(r, None);
    let sb = shape(r, Some(&sa));
    // Claim time: only fully static shapes are checked.
    let stat = |s: &[Option<usize>]| s.iter().copied().collect::<Option<Vec<usize>>>();
    if let (Some(a), Some(b)) = (stat(&sa), stat(&sb)) {
        check_plan(&a, &b, probe);
    }
    // Run time: symbolic dims resolved.
    let (a, b) = (resolve(r, &sa), resolve(r, &sb));
    let Some(want) = check_plan(&a, &b, probe) else {
        return false;
    };
    let (out, ..) = &want;
    let (na, nb, no) = (numel128(&a), numel128(&b), numel128(out));
    // QLinearMatMul with a batched B sizes its packed copy from B's dims: checked, never wrapped.
    if b.len() >= 3 {
        let (k, n) = (b[b.len() - 2], b[b.len() - 1]);
        let batches = numel128(&b[..b.len() - 2]);
        let bytes = (k as u128).div_ceil(4) * 4 * (n as u128).div_ceil(64) * 64 * batches;
        let ok = batches == 0
            || (batches <= usize::MAX as u128
                && bytes <= isize::MAX as u128
                && (n as u128) * batches <= isize::MAX as u128 / 4);
        let got = checked_packed_sizes(k, n, batches.min(usize::MAX as u128) as usize);
        assert_eq!(got.is_some(), ok, "checked_packed_sizes for b {b:?}");
    }
    if na > 4096 || nb > 4096 || no > 4096 {
        return false;
    }
    if no == 0 {
        // Nothing to compute (the batch count may still be huge): the call must return at once.
        matmul_f32(&[], &a, &[], &b, &mut [], &Serial).ok();
        return false;
    }
    let (av, bv) = (data(na as usize, r.next()), data(nb as usize, r.next()));
    let mut y = vec![f32::NAN; no as usize];
    matmul_f32(&av, &a, &bv, &b, &mut y, &Serial).unwrap();
    let (_, batch, pa, pb, m, k, n) = want;
    let mut i = 0;
    for bi in 0..numel128(&batch) as usize {
        let (ia, ib) = ref_batch(bi, &batch, &pa, &pb);
        for row in 0..m {
            for col in 0..n {
                let (mut s, mut g) = (0f64, 0f64);
                for p in 0..k {
                    let t =
                        av[ia * m * k + row * k + p] as f64 * bv[ib * k * n + p * n + col] as f64;
                    s += t;
                    g += t.abs();
                }
                let tol = 1e-5 * g + 1e-6;
                assert!(
                    (y[i] as f64 - s).abs() <= tol,
                    "a {a:?} b {b:?}: y[{i}] = {} want {s}",
                    y[i]
                );
                i += 1;
            }
        }
    }
    assert_eq!(i, y.len());
    true
}

/// Matrix indices of batch `bi` in A and B (numpy broadcasting, explicit).
fn ref_batch(bi: usize, batch: &[usize], pa: &[usize], pb: &[usize]) -> (usize, usize) {
    let (mut rem, mut ia, mut ib, mut sa, mut sb) = (bi, 0, 0, 1, 1);
    for d in (0..batch.len()).rev() {
        let idx = rem % batch[d];
        rem /= batch[d];
        ia += if pa[d] == 1 { 0 } else { idx * sa };
        ib += if pb[d] == 1 { 0 } else { idx * sb };
        sa *= pa[d];
        sb *= pb[d];
    }
    (ia, ib)
}

/// `matmul_shapes` against numpy; returns numpy's answer when rcpu accepted.
fn check_plan(a: &[usize], b: &[usize], probe: &dyn AllocProbe) -> Option<Ref> {
    probe.reset();
    let got = matmul_shapes(a, b);
    let largest = probe.largest();
    assert!(
        largest <= ALLOC_BOUND,
        "planning {a:?} x {b:?} allocated {largest} bytes at once"
    );
    let want = numpy(a, b);
    let representable = want.as_ref().is_some_and(|(out, batch, ..)| {
        fits(a) && fits(b) && fits(out) && numel128(batch) <= usize::MAX as u128
    });
    match (&got, representable) {
        (Ok(p), true) => {
            let (out, batch, pa, pb, m, k, n) = want.clone().unwrap();
            assert_eq!(
                (&p.out_shape, p.m, p.k, p.n),
                (&out, m, k, n),
                "{a:?} x {b:?}"
            );
            assert_eq!(p.batch as u128, numel128(&batch));
            if numel128(&out) > 0 {
                // Offsets of a few batches (first, last, some between) against the reference.
                let last = p.batch - 1;
                for bi in [0, 1, last / 3, last / 2, last.saturating_sub(1), last] {
                    let bi = bi.min(last);
                    let (ia, ib) = ref_batch(bi, &batch, &pa, &pb);
                    assert_eq!(
                        p.offsets(bi),
                        (ia * m * k, ib * k * n),
                        "{a:?} x {b:?} batch {bi}"
                    );
                }
            }
            want
        }
        (Err(_), false) => None,
        (Ok(p), false) => panic!(
            "{a:?} x {b:?} accepted ({:?}), numpy/size check rejects",
            p.out_shape
        ),
        (Err(e), true) => panic!("{a:?} x {b:?} rejected ({e}), numpy accepts"),
    }
}
