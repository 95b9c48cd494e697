//! Broadcasting binary ops (Add/Sub/Mul/Div) against a naive index-math reference: every path
//! (same shape, scalar either side, row broadcast, general N-d), every ISA variant this CPU
//! has, serial and with a 3-lane test Par; results must be bit-identical.

use rcpu::kernels::elementwise::{binary_f32, binary_f32_with, BinaryOp, BinaryPath, BinaryRoute};
use rcpu::kernels::isa::Isa;
use rcpu::kernels::shape::{broadcast_shapes, broadcast_strides, coalesce};
use rcpu::runtime::par::{Par, ScopedThreads, Serial};
use rcpu::telemetry::ledger::Variant;

use crate::rng;
use rng::Rng;

const OPS: [BinaryOp; 4] = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];
const ISAS: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

fn apply(op: BinaryOp, x: f32, y: f32) -> f32 {
    match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
    }
}

/// Naive numpy broadcast: per output element, decode its multi-index and re-encode it into
/// each operand (index 0 on size-1 / missing dims).
fn reference(
    op: BinaryOp,
    a: &[f32],
    sa: &[usize],
    b: &[f32],
    sb: &[usize],
) -> (Vec<usize>, Vec<f32>) {
    let rank = sa.len().max(sb.len());
    let pad = |s: &[usize]| {
        let mut v = vec![1; rank - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (pa, pb) = (pad(sa), pad(sb));
    let out: Vec<usize> = (0..rank)
        .map(|i| if pa[i] == 1 { pb[i] } else { pa[i] })
        .collect();
    let n: usize = out.iter().product();
    let mut res = Vec::with_capacity(n);
    for flat in 0..n {
        let mut rem = flat;
        let mut idx = vec![0; rank];
        for d in (0..rank).rev() {
            idx[d] = rem % out[d];
            rem /= out[d];
        }
        let (mut ia, mut ib) = (0, 0);
        for d in 0..rank {
            ia = ia * pa[d] + if pa[d] == 1 { 0 } else { idx[d] };
            ib = ib * pb[d] + if pb[d] == 1 { 0 } else { idx[d] };
        }
        res.push(apply(op, a[ia], b[ib]));
    }
    (out, res)
}

fn same_bits(x: f32, y: f32) -> bool {
    x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
}

/// Runs one shape pair through every op, ISA and Par; returns the routes seen.
fn check(sa: &[usize], sb: &[usize], seed: u64) -> Vec<BinaryRoute> {
    let mut rng = Rng(seed | 1);
    let a = rng.vec_f32(sa.iter().product(), -2.0, 2.0);
    let b = rng.vec_f32(sb.iter().product(), -2.0, 2.0);
    let mut names = vec![];
    let pars: [&dyn Par; 2] = [&Serial, &ScopedThreads(3)];
    for op in OPS {
        let (oshape, want) = reference(op, &a, sa, &b, sb);
        assert_eq!(broadcast_shapes(sa, sb).unwrap(), oshape);
        for isa in ISAS {
            for par in pars {
                let mut out = vec![f32::from_bits(0x7fc0_dead); want.len()];
                let route = match binary_f32_with(isa, op, &a, sa, &b, sb, &mut out, par) {
                    Ok(n) => n,
                    Err(e) if e.contains("not supported") => continue,
                    Err(e) => panic!("{sa:?} {op:?} {sb:?}: {e}"),
                };
                assert_eq!(route.isa, isa, "{route:?}");
                let name = route.text();
                for (i, (g, w)) in out.iter().zip(&want).enumerate() {
                    assert!(
                        same_bits(*g, *w),
                        "{name} {sa:?} {op:?} {sb:?} lanes {}: out[{i}] = {g} want {w}",
                        par.lanes()
                    );
                }
                names.push(route);
            }
        }
        // The dispatched entry point agrees too.
        let mut out = vec![0.0; want.len()];
        binary_f32(op, &a, sa, &b, sb, &mut out, &Serial).unwrap();
        assert!(out.iter().zip(&want).all(|(g, w)| same_bits(*g, *w)));
    }
    names
}

fn path_of(routes: &[BinaryRoute]) -> BinaryPath {
    let first = routes[0].path;
    assert!(
        routes.iter().all(|r| r.path == first),
        "paths differ: {routes:?}"
    );
    first
}

#[test]
fn same_shape() {
    assert_eq!(path_of(&check(&[4, 5], &[4, 5], 1)), BinaryPath::SameShape);
    assert_eq!(
        path_of(&check(&[2, 3, 37], &[1, 2, 3, 37], 2)),
        BinaryPath::SameShape
    );
    assert_eq!(path_of(&check(&[1], &[1], 3)), BinaryPath::SameShape);
}

#[test]
fn scalars_both_sides_and_rank0() {
    assert_eq!(path_of(&check(&[], &[3, 4], 4)), BinaryPath::ScalarLhs);
    assert_eq!(path_of(&check(&[3, 19], &[], 5)), BinaryPath::ScalarRhs);
    assert_eq!(path_of(&check(&[1], &[2, 3], 6)), BinaryPath::ScalarLhs);
    assert_eq!(path_of(&check(&[2, 3], &[1, 1], 7)), BinaryPath::ScalarRhs);
    // Rank 0 with rank 0: one element, shape [].
    check(&[], &[], 8);
    assert_eq!(broadcast_shapes(&[], &[]).unwrap(), Vec::<usize>::new());
}

#[test]
fn row_broadcast() {
    assert_eq!(
        path_of(&check(&[7, 33], &[33], 9)),
        BinaryPath::RowBroadcast
    );
    assert_eq!(
        path_of(&check(&[33], &[7, 33], 10)),
        BinaryPath::RowBroadcast
    );
    assert_eq!(
        path_of(&check(&[2, 3, 17], &[1, 3, 17], 11)),
        BinaryPath::RowBroadcast
    );
}

#[test]
fn general_broadcast() {
    assert_eq!(
        path_of(&check(&[3, 1, 5], &[4, 1], 12)),
        BinaryPath::Broadcast
    );
    assert_eq!(
        path_of(&check(&[7, 1], &[7, 33], 13)),
        BinaryPath::Broadcast
    );
    assert_eq!(
        path_of(&check(&[2, 1, 3, 1, 4], &[1, 5, 1, 2, 1], 14)),
        BinaryPath::Broadcast
    );
    assert_eq!(
        path_of(&check(&[2, 3, 1, 4, 5], &[3, 4, 1], 15)),
        BinaryPath::Broadcast
    );
    check(&[1, 17], &[19, 1], 16);
}

#[test]
fn zero_sized_dims() {
    assert_eq!(path_of(&check(&[0, 3], &[3], 17)), BinaryPath::Empty);
    check(&[2, 0], &[1], 18);
    check(&[0], &[], 19);
    assert_eq!(broadcast_shapes(&[0, 3], &[1, 3]).unwrap(), vec![0, 3]);
    assert!(broadcast_shapes(&[0, 3], &[2, 3]).is_err());
}

#[test]
fn big_outputs_hit_parallel_chunks() {
    // All >= 64K outputs, sizes not multiples of the chunk or SIMD width.
    assert_eq!(
        path_of(&check(&[301, 257], &[301, 257], 20)),
        BinaryPath::SameShape
    );
    assert_eq!(path_of(&check(&[70001], &[], 21)), BinaryPath::ScalarRhs);
    assert_eq!(path_of(&check(&[], &[70001], 22)), BinaryPath::ScalarLhs);
    assert_eq!(
        path_of(&check(&[301, 257], &[257], 23)),
        BinaryPath::RowBroadcast
    );
    assert_eq!(
        path_of(&check(&[257, 1, 301], &[3, 1], 24)),
        BinaryPath::Broadcast
    );
    assert_eq!(
        path_of(&check(&[70003, 1], &[1, 2], 25)),
        BinaryPath::Broadcast
    );
}

#[test]
fn incompatible_shapes_err() {
    let e = broadcast_shapes(&[3, 4], &[5]).unwrap_err();
    assert!(e.contains("[3, 4]") && e.contains("[5]"), "{e}");
    assert!(broadcast_shapes(&[2, 3], &[3, 2]).is_err());
    let mut out = vec![0.0; 12];
    let r = binary_f32(
        BinaryOp::Add,
        &[0.0; 12],
        &[3, 4],
        &[0.0; 5],
        &[5],
        &mut out,
        &Serial,
    );
    assert!(r.unwrap_err().contains("[3, 4]"));
    // Wrong buffer lengths are errors, not panics.
    assert!(binary_f32(
        BinaryOp::Add,
        &[0.0; 11],
        &[3, 4],
        &[0.0; 4],
        &[4],
        &mut out,
        &Serial
    )
    .is_err());
    assert!(binary_f32(
        BinaryOp::Add,
        &[0.0; 12],
        &[3, 4],
        &[0.0; 4],
        &[4],
        &mut out[..5],
        &Serial
    )
    .is_err());
}

#[test]
fn strides_and_coalesce() {
    assert_eq!(broadcast_strides(&[4, 1], &[3, 4, 5]), vec![0, 1, 0]);
    assert_eq!(broadcast_strides(&[3, 1, 5], &[3, 4, 5]), vec![5, 0, 1]);
    assert_eq!(broadcast_strides(&[], &[2, 2]), vec![0, 0]);
    // [2,3,4] contiguous + [3,4] broadcast over dim 0: dims 1,2 merge for both.
    let (d, s) = coalesce(&[2, 3, 4], &[vec![12, 4, 1], vec![0, 4, 1]]);
    assert_eq!(d, vec![2, 12]);
    assert_eq!(s, vec![vec![12, 1], vec![0, 1]]);
    let (d, s) = coalesce(&[], &[vec![], vec![]]);
    assert_eq!((d, s), (vec![1], vec![vec![0], vec![0]]));
}

/// The ledger text of every binary elementwise route: what rcpu-bench, pytest and the e2e tests
/// read, byte for byte.
#[test]
fn route_texts_are_the_ledger_names() {
    use BinaryPath::*;
    let paths = [
        Empty,
        SameShape,
        ScalarLhs,
        ScalarRhs,
        RowBroadcast,
        Broadcast,
    ];
    let mut got = Vec::new();
    for isa in [Isa::Scalar, Isa::Avx2, Isa::Avx512] {
        for path in paths {
            got.push(BinaryRoute { isa, path }.text());
        }
    }
    let want = [
        "scalar-empty",
        "scalar-same-shape",
        "scalar-scalar-lhs",
        "scalar-scalar-rhs",
        "scalar-row-broadcast",
        "scalar-broadcast",
        "avx2-empty",
        "avx2-same-shape",
        "avx2-scalar-lhs",
        "avx2-scalar-rhs",
        "avx2-row-broadcast",
        "avx2-broadcast",
        "avx512-empty",
        "avx512-same-shape",
        "avx512-scalar-lhs",
        "avx512-scalar-rhs",
        "avx512-row-broadcast",
        "avx512-broadcast",
    ];
    assert_eq!(got, want);
    let vnni = BinaryRoute {
        isa: Isa::Avx512Vnni,
        path: SameShape,
    };
    assert_eq!(vnni.text(), "avx512-same-shape");
}
