//! The software prefetch distances of the MatMulNBits tile kernels (`matmul_nbits::prefetch`:
//! L1, and the VNNI tile's L2) change no result, and a prefetch far past the weights (unmapped
//! memory) is harmless: it must never become a load. Every kernel set the CPU supports, both accuracy levels, M = 1 and
//! M > 1, K not a multiple of the block, N not a multiple of the 32-column group.
//! (In `tests/serial/`: the distance is process-wide.)

use crate::nbits_common as matmul_nbits_common;
use matmul_nbits_common::{Problem, THREE};

use rcpu::kernels::matmul_nbits::prefetch::{
    reset_prefetch, set_l2_prefetch_bytes, set_prefetch_bytes, vnni_prefetch_bytes,
    DEFAULT_PREFETCH_BYTES, DEFAULT_VNNI_PREFETCH_BYTES, INTEL_L2_PREFETCH_BYTES,
};
use rcpu::kernels::matmul_nbits::row1_tuner::TUNER;
use rcpu::kernels::matmul_nbits::{matmul_packed_with, matmul_pair, pack, Kernels};
use rcpu::telemetry::ledger::Variant;

#[test]
fn prefetch_distance_changes_no_result() {
    let _serial = crate::serial();
    // 1 << 36: 64 GiB past the weights, far outside any mapping of this process.
    // (L1, L2) pairs.
    // The defaults (0: records need no software prefetch) and the distances used before.
    let dists = [
        (64, 0),
        (DEFAULT_PREFETCH_BYTES, 0),
        (DEFAULT_VNNI_PREFETCH_BYTES, 0),
        (2048, 0),
        (3072, INTEL_L2_PREFETCH_BYTES),
        (0, 64),
        (1 << 36, 0),
        (3072, 1 << 36),
    ];
    let shapes = [
        (100, 33, 1, 32),
        (896, 1152, 1, 32),
        (1000, 17, 5, 64),
        (64, 64, 2, 16),
    ];
    for (i, &(k, n, m, bs)) in shapes.iter().enumerate() {
        for acc in [0, 4] {
            let pr = Problem::new(k, n, m, bs, acc, i % 2 == 0, i % 3 == 0, 11 + i as u64);
            let packed = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p);
            for kern in Kernels::supported() {
                let run = |(dist, l2): (usize, usize)| {
                    set_prefetch_bytes(dist);
                    set_l2_prefetch_bytes(l2);
                    let mut out = vec![f32::NAN; m * n];
                    let bias = pr.bias.as_deref();
                    matmul_packed_with(kern, &pr.a, m, &packed, bias, &mut out, &THREE).unwrap();
                    out
                };
                let base = run((0, 0));
                for d in dists {
                    let got = run(d);
                    let same = got
                        .iter()
                        .zip(&base)
                        .all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(
                        same,
                        "K={k} N={n} M={m} acc={acc} {}: prefetch {d:?} bytes changed the result",
                        kern.route(acc, m).text()
                    );
                }
            }
        }
    }
    reset_prefetch();
}

/// The L2 distance nothing set is the per-vendor default, a diagnostic's setting wins over it,
/// and `reset_prefetch` brings the default back.
#[test]
fn the_l2_distance_defaults_per_vendor() {
    let _serial = crate::serial();
    reset_prefetch();
    let want = if rcpu::kernels::simd::is_intel() {
        INTEL_L2_PREFETCH_BYTES
    } else {
        0
    };
    assert_eq!(vnni_prefetch_bytes(2), (DEFAULT_VNNI_PREFETCH_BYTES, want));
    set_l2_prefetch_bytes(4096);
    assert_eq!(vnni_prefetch_bytes(2).1, 4096);
    set_l2_prefetch_bytes(0);
    assert_eq!(vnni_prefetch_bytes(2).1, 0);
    reset_prefetch();
    assert_eq!(vnni_prefetch_bytes(2).1, want);
}

/// Every decode call over packed weights (M = 1, single and pair) is counted by the one-row
/// distance's tuner, whose trials time them (`row1_tuner`); calls over several rows are not.
#[test]
fn decode_calls_feed_the_row1_tuner() {
    let _serial = crate::serial();
    let (k, n) = (896, 100);
    let pr = Problem::new(k, n, 3, 32, 4, false, false, 21);
    let packed = pack(&pr.b, &pr.scales, None, &pr.p);
    let kern = Kernels::active();
    let mut out = vec![0f32; 3 * n];
    let before = TUNER.calls();
    matmul_packed_with(kern, &pr.a[..k], 1, &packed, None, &mut out, &THREE).unwrap();
    assert_eq!(TUNER.calls(), before + 1, "a decode call was not counted");
    matmul_packed_with(kern, &pr.a, 3, &packed, None, &mut out, &THREE).unwrap();
    assert_eq!(
        TUNER.calls(),
        before + 1,
        "a call over three rows was counted"
    );
    let epi = |x: &[f32], y: &[f32], o: &mut [f32]| {
        for ((o, x), y) in o.iter_mut().zip(x).zip(y) {
            *o = x * y;
        }
    };
    matmul_pair(&pr.a[..k], 1, &packed, &packed, &epi, &mut out[..n], &THREE).unwrap();
    assert_eq!(
        TUNER.calls(),
        before + 2,
        "a decode pair call was not counted"
    );
}
