//! A warm MatMulNBits decode loop allocates no per-call buffer for A: the prepared A is parked
//! per thread under the process-wide scratch budget; with a zero budget nothing is parked
//! and every call allocates again (results unchanged). Each phase runs on a fresh thread, so
//! it starts with nothing parked.

use crate::nbits_common;
use nbits_common::Problem;
use rcpu::kernels::matmul_nbits::prepare_a::prepared_a_growths;
use rcpu::kernels::matmul_nbits::{matmul_packed, pack, PackedNBits};
use rcpu::runtime::par::Serial;

/// Growths of the prepared-A buffers over `calls` decode calls on a fresh thread, and the output.
fn growths_over(pr: &Problem, packed: &PackedNBits, calls: usize) -> (u64, Vec<f32>) {
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut y = vec![0f32; pr.p.n];
            matmul_packed(&pr.a, 1, packed, None, &mut y, &Serial).unwrap();
            let warm = prepared_a_growths();
            for _ in 0..calls {
                matmul_packed(&pr.a, 1, packed, None, &mut y, &Serial).unwrap();
            }
            (prepared_a_growths() - warm, y)
        })
        .join()
        .unwrap()
    })
}

#[test]
fn warm_decode_reuses_prepared_a_within_the_budget() {
    let _serial = crate::serial();
    for acc in [4, 0] {
        let pr = Problem::new(4096, 64, 1, 32, acc, true, false, 7 + acc as u64);
        let packed = pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p);
        rcpu::memory::configure(None, Some(64 << 20));
        let (grew, parked_y) = growths_over(&pr, &packed, 50);
        assert_eq!(grew, 0, "acc {acc}: a warm call allocated its prepared A");

        rcpu::memory::configure(None, Some(0));
        let (grew, y) = growths_over(&pr, &packed, 10);
        assert_eq!(
            grew, 10,
            "acc {acc}: buffers stayed parked beyond a zero budget"
        );
        assert_eq!(y, parked_y, "acc {acc}: results depend on parking");
    }
}
