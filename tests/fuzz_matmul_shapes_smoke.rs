//! The property of the `fuzz/` target `matmul_shapes`, run on stable as a bounded,
//! deterministic test: pseudo-random (fixed-seed xorshift) MatMul / QLinearMatMul operand
//! shapes of arbitrary rank, with dims 0, 1, small, huge and symbolic (`None`, resolved at "run"
//! time), go through the claim-time check (`matmul_shapes` on static shapes) and the run-time
//! planning and compute (`matmul_shapes`, `MatMulPlan::offsets`, `matmul_f32`, and for a
//! batched B QLinearMatMul's size check `checked_packed_sizes`).
//!
//! Asserts: nothing panics; no single allocation exceeds [`ALLOC_BOUND`] beyond the operands
//! themselves (a counting global allocator); accepted shapes give numpy.matmul's shape,
//! offsets and values (a naive reference in u128 arithmetic); rejected shapes are exactly the
//! incompatible ones and the ones whose sizes do not fit.

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use rcpu::kernels::gemm::matmul_f32;
use rcpu::kernels::qgemm::checked_packed_sizes;
use rcpu::kernels::shape::{matmul_shapes, MAX_ELEMS};
use rcpu::runtime::par::Serial;

/// Largest single allocation the planning may make (operands aside, which stay small).
const ALLOC_BOUND: usize = 1 << 20;

struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `System` with layout `l` (every allocation goes through it).
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LARGEST.fetch_max(new, Relaxed);
        // SAFETY: as for `dealloc`; `new` is the caller's requested size.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[path = "common/rng.rs"]
mod rng;
use rng::Rng;

/// A dim: `None` is symbolic (known only at run time).
fn dim(r: &mut Rng) -> Option<usize> {
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

fn shape(r: &mut Rng, like: Option<&[Option<usize>]>) -> Vec<Option<usize>> {
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
fn resolve(r: &mut Rng, s: &[Option<usize>]) -> Vec<usize> {
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

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng(seed | 1);
    (0..n)
        .map(|_| (r.below(2001) as f32 - 1000.0) / 1000.0)
        .collect()
}

/// One case. Returns whether values were computed and compared.
fn property(r: &mut Rng) -> bool {
    let sa = shape(r, None);
    let sb = shape(r, Some(&sa));
    // Claim time: only fully static shapes are checked.
    let stat = |s: &[Option<usize>]| s.iter().copied().collect::<Option<Vec<usize>>>();
    if let (Some(a), Some(b)) = (stat(&sa), stat(&sb)) {
        check_plan(&a, &b);
    }
    // Run time: symbolic dims resolved.
    let (a, b) = (resolve(r, &sa), resolve(r, &sb));
    let Some(want) = check_plan(&a, &b) else {
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
        matmul_f32(&[], &a, &[], &b, &mut [], &Serial).unwrap_or_default();
        return false;
    }
    let (av, bv) = (
        data(na as usize, r.next_u64()),
        data(nb as usize, r.next_u64()),
    );
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
fn check_plan(a: &[usize], b: &[usize]) -> Option<Ref> {
    LARGEST.store(0, Relaxed);
    let got = matmul_shapes(a, b);
    let largest = LARGEST.load(Relaxed);
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

#[test]
fn matmul_shapes_never_panic_allocate_boundedly_and_match_numpy() {
    let mut r = Rng(0x5eed_4d61_744d_756c);
    let (mut computed, cases) = (0, 20_000);
    for i in 0..cases {
        let seed = r.0;
        let ok = catch_unwind(AssertUnwindSafe(|| property(&mut r)));
        match ok {
            Ok(true) => computed += 1,
            Ok(false) => {}
            Err(_) => panic!("case {i} (rng state {seed:#x}) failed"),
        }
    }
    println!("{cases} cases, {computed} computed and compared");
    assert!(
        computed > cases / 20,
        "only {computed} cases reached the compute path"
    );
}
