//! A compute probe read beside the round's memory read (`rcpu-bench llm`): how fast the arms' CPUs
//! run a fixed stretch of arithmetic on hot registers, right now.
//!
//! Why: on a shared VM the round's plain read is not always the lanes' ceiling, and the read
//! alone cannot say why. On the development host (2 vCPU Zen 4) a plain read of the weights' size
//! sometimes reaches 50-64 GB/s instead of ~34. In one such window a diagnostic
//! (`examples/decode_anatomy`) showed the lanes' own instructions ~3x slower than usual (A
//! preparation 3.6 us a call instead of 1.2) and the int4 GEMVs at 65% of the read: other
//! tenants computing on the cores behind ours, not reading memory. In another (`rcpu-bench llm`,
//! four rounds at 52-64 GB/s) this probe was unchanged and both runtimes sped up, rcpu by ~15%
//! (7.2-8.3 against 8.6-9.2 ms a token), still at 53-73% of those reads. The probe tells such
//! rounds apart: each of `threads` threads times the same arithmetic loop (no memory traffic),
//! the round's figure is the slowest thread's median over a few passes, and the report sets it
//! against the run's fastest round.

use std::sync::Barrier;
use std::time::Instant;

use super::quant::median;

/// Multiply-add steps per pass and accumulator (32 accumulators): ~2 ms on the development host.
const STEPS: usize = 1 << 20;

/// Passes per probe (the median is kept).
const PASSES: usize = 3;

/// A probe over `threads` threads: milliseconds of the slowest thread's median pass.
pub fn probe_ms(threads: usize) -> f64 {
    let threads = threads.max(1);
    let gate = Barrier::new(threads);
    let per_thread: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                let gate = &gate;
                s.spawn(move || {
                    let mut dts = Vec::with_capacity(PASSES);
                    for _ in 0..PASSES {
                        gate.wait();
                        let t = Instant::now();
                        std::hint::black_box(arithmetic(std::hint::black_box(STEPS)));
                        dts.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                    median(&dts)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or(f64::NAN))
            .collect()
    });
    per_thread.into_iter().fold(0.0, f64::max)
}

/// `steps` rounds of 32 independent multiply-adds (f32: eight vector chains even at the baseline
/// x86-64 level, so the loop is bound by the FP pipes' throughput, which a busy neighbour on the
/// same core shares, more than by one chain's latency).
fn arithmetic(steps: usize) -> f32 {
    let mut acc: [f32; 32] = std::array::from_fn(|i| 1.0 + i as f32 / 32.0);
    let (m, c) = (
        std::hint::black_box(0.999_999f32),
        std::hint::black_box(1e-7f32),
    );
    for _ in 0..steps {
        for a in acc.iter_mut() {
            *a = *a * m + c;
        }
    }
    acc.iter().sum()
}

/// Of the rounds, those whose probe ran within `slack` times the run's fastest (`probes[r]`,
/// ms): the rounds in which the CPUs ran at their usual speed. Non-finite probes count as slow.
pub fn unhindered(probes: &[f64], slack: f64) -> Vec<bool> {
    let best = probes
        .iter()
        .copied()
        .filter(|p| p.is_finite() && *p > 0.0)
        .fold(f64::INFINITY, f64::min);
    probes
        .iter()
        .map(|&p| p.is_finite() && p <= best * slack)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_is_positive_and_finite() {
        let ms = probe_ms(2);
        assert!(ms.is_finite() && ms > 0.0, "{ms}");
    }

    #[test]
    fn unhindered_rounds_are_within_the_slack_of_the_fastest() {
        let probes = [2.0, 2.1, 3.9, f64::NAN, 2.49, 2.51];
        assert_eq!(
            unhindered(&probes, 1.25),
            [true, true, false, false, true, false]
        );
        assert!(unhindered(&[], 1.25).is_empty());
        assert_eq!(unhindered(&[f64::NAN], 1.25), [false]);
    }
}
