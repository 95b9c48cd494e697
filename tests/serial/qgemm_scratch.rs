//! A warm QLinearMatMul call allocates nothing: row sums, per-column requantization terms and a
//! per-call packed B come from the calling thread's parked scratch (scratch budget); the
//! int32 accumulators live in a stack tile. With a zero budget nothing is parked and every call
//! allocates again (results unchanged). In `tests/serial/`: the counters are global.

use crate::qgemm_common;

use qgemm_common::QCase;
use rcpu::kernels::qgemm::{pack, run, BSource, Signs};
use rcpu::memory::scratch_stats;
use rcpu::runtime::par::{Par, ScopedThreads, Serial};

/// Fresh scratch allocations over `calls` warm calls on a fresh thread, and the output.
fn growth(c: &QCase, src: BSource<'_>, par: &(dyn Par + Sync), calls: usize) -> (u64, Vec<u8>) {
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut y = vec![0u8; c.out_len()];
            run(&c.call(src), &mut y, par).unwrap();
            let warm = scratch_stats().fresh_allocations;
            for _ in 0..calls {
                run(&c.call(src), &mut y, par).unwrap();
            }
            (scratch_stats().fresh_allocations - warm, y)
        })
        .join()
        .unwrap()
    })
}

#[test]
fn warm_calls_take_no_fresh_scratch() {
    let _serial = crate::serial();
    // Per-column scale and zero point: every scratch type is in use.
    let c = QCase::new(Signs::U8S8, 37, 300, 130, true, true, 9);
    let packed = pack(&c.b, c.k, c.n, c.batches, c.signs);
    let want = c.expected();
    for (src, label) in [
        (BSource::Packed(packed.view()), "packed"),
        (BSource::Raw(&c.b), "raw"),
    ] {
        for (par, pl) in [
            (&Serial as &(dyn Par + Sync), "serial"),
            (&ScopedThreads(2), "threads"),
        ] {
            rcpu::memory::configure(None, Some(64 << 20));
            let (grew, y) = growth(&c, src, par, 20);
            assert_eq!(grew, 0, "{label}/{pl}: a warm call allocated scratch");
            assert_eq!(y, want, "{label}/{pl}: wrong result");

            rcpu::memory::configure(None, Some(0));
            let (grew, y) = growth(&c, src, par, 5);
            assert!(
                grew >= 5,
                "{label}/{pl}: buffers stayed parked beyond a zero budget"
            );
            assert_eq!(y, want, "{label}/{pl}: results depend on parking");
        }
    }
}
