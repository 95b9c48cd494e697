//! The physical limit for M=1 decode (rule 8): read bandwidth for a buffer the size of the weights,
//! measured here, now: `threads` threads each sum their share of the buffer; best of a few passes.

use std::time::Instant;

/// Best read bandwidth in GB/s over `passes` passes of a `bytes`-sized buffer.
pub fn read_gbps(bytes: usize, threads: usize, passes: usize) -> f64 {
    let words = (bytes / 8).max(1024);
    let buf: Vec<u64> = (0..words as u64).map(|i| i.wrapping_mul(0x9E37_79B9)).collect();
    let chunk = words.div_ceil(threads.max(1));
    let mut best = 0f64;
    let mut sink = 0u64;
    for _ in 0..passes.max(1) {
        let t = Instant::now();
        let total: u64 = std::thread::scope(|s| {
            let hs: Vec<_> = buf.chunks(chunk).map(|c| s.spawn(move || sum(c))).collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0)).fold(0, u64::wrapping_add)
        });
        let dt = t.elapsed().as_secs_f64();
        sink = sink.wrapping_add(total);
        best = best.max((words * 8) as f64 / dt / 1e9);
    }
    std::hint::black_box(sink);
    best
}

/// Sum with independent accumulators so the loop vectorises and is limited by loads.
fn sum(c: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let mut it = c.chunks_exact(8);
    for w in &mut it {
        for j in 0..8 {
            acc[j] = acc[j].wrapping_add(w[j]);
        }
    }
    let tail: u64 = it.remainder().iter().copied().fold(0, u64::wrapping_add);
    acc.iter().copied().fold(tail, u64::wrapping_add)
}

#[cfg(test)]
mod tests {
    #[test]
    fn bandwidth_is_positive_and_finite() {
        let g = super::read_gbps(1 << 20, 2, 2);
        assert!(g.is_finite() && g > 0.0, "{g}");
    }
}
