//! numpy.matmul (`matmul_f32`, `matmul_shapes`) against a naive f64 reference with explicit
//! 1-D promotion and batch broadcasting. Tolerance as in f32_sgemm: 1e-5 relative to
//! sum |a*b| per output element.

use rcpu::kernels::gemm::{matmul_f32, GemmPath, GemmRoute};
use rcpu::kernels::shape::matmul_shapes;
use rcpu::runtime::par::{Par, ScopedThreads, Serial};

fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 2001) as f32 / 1000.0 - 1.0)
        .collect()
}

/// Naive numpy.matmul: returns (out shape, values, magnitudes sum |a*b|).
fn reference(a: &[f32], sa: &[usize], b: &[f32], sb: &[usize]) -> (Vec<usize>, Vec<f64>, Vec<f64>) {
    let a2: Vec<usize> = if sa.len() == 1 {
        vec![1, sa[0]]
    } else {
        sa.to_vec()
    };
    let b2: Vec<usize> = if sb.len() == 1 {
        vec![sb[0], 1]
    } else {
        sb.to_vec()
    };
    let (m, k, n) = (a2[a2.len() - 2], a2[a2.len() - 1], b2[b2.len() - 1]);
    let (ab, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
    let rank = ab.len().max(bb.len());
    let pad = |s: &[usize]| [vec![1; rank - s.len()], s.to_vec()].concat();
    let (pa, pb) = (pad(ab), pad(bb));
    let batch: Vec<usize> = (0..rank)
        .map(|d| if pa[d] == 1 { pb[d] } else { pa[d] })
        .collect();
    let nb: usize = batch.iter().product();
    let (mut vals, mut mags) = (vec![], vec![]);
    for bi in 0..nb {
        let mut rem = bi;
        let (mut ia, mut ib, mut sa_, mut sb_) = (0, 0, 1, 1);
        for d in (0..rank).rev() {
            let idx = rem % batch[d];
            rem /= batch[d];
            ia += if pa[d] == 1 { 0 } else { idx * sa_ };
            ib += if pb[d] == 1 { 0 } else { idx * sb_ };
            sa_ *= pa[d];
            sb_ *= pb[d];
        }
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut g) = (0.0f64, 0.0f64);
                for p in 0..k {
                    let t = a[ia * m * k + i * k + p] as f64 * b[ib * k * n + p * n + j] as f64;
                    s += t;
                    g += t.abs();
                }
                vals.push(s);
                mags.push(g);
            }
        }
    }
    let mut shape = batch;
    if sa.len() > 1 {
        shape.push(m);
    }
    if sb.len() > 1 {
        shape.push(n);
    }
    (shape, vals, mags)
}

fn check(sa: &[usize], sb: &[usize], par: &dyn Par) -> GemmRoute {
    let a = data(sa.iter().product(), 1);
    let b = data(sb.iter().product(), 2);
    let (shape, want, mag) = reference(&a, sa, &b, sb);
    assert_eq!(
        matmul_shapes(sa, sb).unwrap().out_shape,
        shape,
        "{sa:?} x {sb:?}"
    );
    let mut out = vec![f32::NAN; want.len()];
    let name = matmul_f32(&a, sa, &b, sb, &mut out, par).unwrap();
    for (i, ((g, w), s)) in out.iter().zip(&want).zip(&mag).enumerate() {
        assert!(
            (*g as f64 - w).abs() <= 1e-5 * s + 1e-30,
            "{name:?} {sa:?} x {sb:?}: out[{i}] = {g}, want {w}"
        );
    }
    name
}

#[test]
fn vectors_promote_and_drop() {
    let p = matmul_shapes(&[4], &[4]).unwrap();
    assert_eq!((p.batch, p.m, p.n, p.k, p.out_shape.len()), (1, 1, 1, 4, 0));
    check(&[4], &[4], &Serial);
    assert_eq!(check(&[3], &[3, 5], &Serial).path, GemmPath::GemvM1);
    assert_eq!(check(&[4, 3], &[3], &Serial).path, GemmPath::GemvN1);
    check(&[3], &[2, 3, 5], &Serial);
    check(&[2, 4, 3], &[3], &Serial);
}

#[test]
fn batched_broadcast() {
    let p = matmul_shapes(&[2, 1, 3, 4], &[5, 4, 6]).unwrap();
    assert_eq!(p.out_shape, vec![2, 5, 3, 6]);
    assert_eq!(p.batch, 10);
    let offs: Vec<(usize, usize)> = (0..6).map(|i| p.offsets(i)).collect();
    assert_eq!(
        offs.iter().map(|o| o.0).collect::<Vec<_>>(),
        [0, 0, 0, 0, 0, 12]
    );
    assert_eq!(
        offs.iter().map(|o| o.1).collect::<Vec<_>>(),
        [0, 24, 48, 72, 96, 0]
    );
    let (a_all, b_all) = p.offset_lists().unwrap();
    assert_eq!(
        (a_all.len(), &a_all[..6], &b_all[..6]),
        (10, &[0, 0, 0, 0, 0, 12][..], &[0, 24, 48, 72, 96, 0][..])
    );
    assert!(!p.b_shared() && !p.a_dense());
    let shared = matmul_shapes(&[3, 7, 5], &[5, 9]).unwrap();
    assert!(shared.b_shared() && shared.a_dense());
    let dense = matmul_shapes(&[2, 7, 5], &[2, 5, 9]).unwrap();
    assert!(!dense.b_shared() && dense.a_dense());
    for par in [&Serial as &dyn Par, &ScopedThreads(3)] {
        check(&[2, 1, 3, 4], &[5, 4, 6], par);
        check(&[3, 7, 5], &[5, 9], par); // shared B: folded into one product
        check(&[2, 7, 5], &[2, 5, 9], par);
        check(&[300, 16, 16], &[300, 16, 16], par); // many small products in parallel
        check(&[3, 100, 70], &[70, 200], par);
    }
}

#[test]
fn empty_and_k_zero() {
    check(&[0, 3, 4], &[4, 5], &Serial);
    check(&[3, 0], &[0, 4], &Serial); // k == 0: zeros
    check(&[2, 0], &[0, 2], &ScopedThreads(3));
}

/// Huge static batch dims plan without allocating per batch (the plan once listed 2^40 offsets
/// and aborted the process), and an empty output computes nothing however many batches.
#[test]
fn huge_batches_plan_lazily() {
    let big = 1 << 20;
    let p = matmul_shapes(&[big, 1, 1, 1], &[1, big, 1, 1]).unwrap();
    assert_eq!((p.batch, p.out_len), (1 << 40, 1 << 40));
    assert_eq!(p.offsets((1 << 40) - 1), (big - 1, big - 1));
    let p = matmul_shapes(&[big, 1, 0, 4], &[1, big, 4, 0]).unwrap();
    assert_eq!(
        (p.batch, p.out_len, p.out_shape.clone()),
        (1 << 40, 0, vec![big, big, 0, 0])
    );
    let mut out = [];
    matmul_f32(
        &[],
        &[big, 1, 0, 4],
        &[],
        &[1, big, 4, 0],
        &mut out,
        &Serial,
    )
    .unwrap();
    // Sizes beyond the address space are errors, not wrapped products.
    let e = matmul_shapes(&[1 << 40, 1 << 40, 1, 1], &[1, 1]).unwrap_err();
    assert!(e.contains("more elements"), "{e}");
    assert!(matmul_shapes(&[1 << 32, 1, 1, 1], &[1 << 32, 1, 1]).is_err()); // 2^64 batches
    assert!(matmul_shapes(&[usize::MAX, 0, 4], &[4, 3]).is_ok()); // empty, however large
}

#[test]
fn mismatched_k_errs() {
    let e = matmul_shapes(&[2, 3], &[4, 5]).unwrap_err();
    assert!(e.contains("[2, 3]") && e.contains("[4, 5]"), "{e}");
    assert!(matmul_shapes(&[3], &[4]).is_err());
    assert!(matmul_shapes(&[2, 2, 3], &[3, 3, 1]).is_err()); // batch 2 vs 3
    assert!(matmul_shapes(&[], &[3]).is_err());
    let mut out = vec![0.0; 10];
    assert!(matmul_f32(&[0.0; 6], &[2, 3], &[0.0; 20], &[4, 5], &mut out, &Serial).is_err());
    // Buffer length mismatch is an error too.
    assert!(matmul_f32(
        &[0.0; 6],
        &[2, 3],
        &[0.0; 15],
        &[3, 5],
        &mut out[..9],
        &Serial
    )
    .is_err());
}
