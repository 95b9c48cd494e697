//! The physical limit for M=1 decode (rule 8): read bandwidth for a buffer the size of the weights,
//! measured here, now. `threads` threads (spawned once) each sum their share of the buffer; one
//! pass reads the buffer `reps` times (at least ~256 MB in all, so a small, cache-resident buffer
//! is timed over many reads, just as decode re-reads its weights every token); best of `passes`.
//!
//! Two buffers (a [`Buffers`] pair): one on ordinary 4 KiB pages and one from a huge-page weight
//! arena, the memory rcpu's packed weights live in. [`Reference`] is the best pass of each; its
//! denominator for "fraction of read bandwidth" is the higher of the two (the best this machine
//! reached in this run), so weights on huge pages are not flattered by a 4 KiB reference.
//! `rcpu-bench llm` keeps the pair and reads it again after every round ([`Buffers::round`]).

use std::sync::Barrier;
use std::time::Instant;

use rcpu::memory::ArenaBuf;

use super::quant::{max, median};

/// Read bandwidth of a same-size buffer on 4 KiB and on huge pages, this run.
#[derive(Debug, Clone, Copy)]
pub struct Reference {
    /// GB/s reading a buffer on 4 KiB pages.
    pub small_pages: f64,
    /// GB/s reading a buffer from a huge-page weight arena (0 when none could be mapped).
    pub huge_pages: f64,
}

impl Reference {
    /// Both reads of a `bytes`-sized buffer, best of `passes` each.
    pub fn measure(bytes: usize, threads: usize, passes: usize) -> Reference {
        Buffers::new(bytes, threads).reference(passes)
    }

    /// The denominator of "of read bw": the higher of the two.
    pub fn best(&self) -> f64 {
        self.small_pages.max(self.huge_pages)
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        format!(
            "read bandwidth of a same-size buffer, this run: {:.1} GB/s on 4 KiB pages, {:.1} GB/s \
             on huge pages (best of 5 passes each); \"of read bw\" below divides by the higher, \
             {:.1} GB/s",
            self.small_pages,
            self.huge_pages,
            self.best()
        )
    }
}

/// The two same-size buffers, kept so that they can be read again: `rcpu-bench llm` reads them
/// after every round, so that each round has its own denominator. The host's read bandwidth
/// moves within a run (seen here: 33 and 63 GB/s for the same buffer minutes apart), and a
/// token's time set against a read taken minutes earlier mixes the two moments; a round's arms
/// and its read are seconds apart.
pub struct Buffers {
    small: Vec<u64>,
    huge: Option<ArenaBuf<u64>>,
    threads: usize,
}

impl Buffers {
    /// Both buffers of `bytes` (the huge-page one when a fresh weight arena, 2 MiB-aligned and
    /// advised for huge pages before the first write, can map it).
    pub fn new(bytes: usize, threads: usize) -> Buffers {
        Buffers {
            small: small_page_buf(bytes),
            huge: huge_page_buf(bytes),
            threads,
        }
    }

    /// The threads that read the buffers.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The best of `passes` passes of each buffer.
    pub fn reference(&self, passes: usize) -> Reference {
        let (small_pages, huge_pages) = self.per_buffer(passes, |r| max(r).max(0.0));
        Reference {
            small_pages,
            huge_pages,
        }
    }

    /// This round's read bandwidth in GB/s: per buffer the median of `passes` passes (the arms'
    /// figures are medians too), the higher of the two buffers.
    pub fn round(&self, passes: usize) -> f64 {
        let (small, huge) = self.per_buffer(passes, median);
        small.max(huge)
    }

    /// `stat` of each buffer's pass rates (4 KiB pages, huge pages; 0 for a missing buffer).
    fn per_buffer(&self, passes: usize, stat: impl Fn(&[f64]) -> f64) -> (f64, f64) {
        let small = stat(&pass_rates(&self.small, self.threads, passes));
        let huge = self
            .huge
            .as_ref()
            .map(|b| stat(&pass_rates(b.as_slice(), self.threads, passes)))
            .unwrap_or(0.0);
        (small, huge)
    }
}

fn small_page_buf(bytes: usize) -> Vec<u64> {
    let words = (bytes / 8).max(1024);
    (0..words as u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9))
        .collect()
}

fn huge_page_buf(bytes: usize) -> Option<ArenaBuf<u64>> {
    let words = (bytes / 8).max(1024);
    let arena = rcpu::memory::WeightArena::new(rcpu::memory::REGION_BYTES);
    let mut buf = arena.try_alloc::<u64>(words).ok()?;
    for (i, w) in buf.as_mut_slice().iter_mut().enumerate() {
        *w = (i as u64).wrapping_mul(0x9E37_79B9);
    }
    Some(buf)
}

/// Read bandwidth in GB/s of each of `passes` passes of `buf` (passes that timed nothing left out).
fn pass_rates(buf: &[u64], threads: usize, passes: usize) -> Vec<f64> {
    let words = buf.len();
    let threads = threads.max(1);
    let chunk = words.div_ceil(threads);
    let reps = ((256usize << 20) / (words * 8)).max(1);
    let passes = passes.max(1);
    let gate = Barrier::new(buf.chunks(chunk).count());
    // Each thread times its own reads (the spawning thread would be descheduled on a machine with
    // as many CPUs as readers, so it cannot hold the stopwatch); a pass lasts as long as its
    // slowest reader.
    let per_thread: Vec<Vec<f64>> = std::thread::scope(|s| {
        let hs: Vec<_> = buf
            .chunks(chunk)
            .map(|c| {
                let gate = &gate;
                s.spawn(move || {
                    let mut sink = 0u64;
                    let mut dts = Vec::with_capacity(passes);
                    for _ in 0..passes {
                        gate.wait();
                        let t = Instant::now();
                        for _ in 0..reps {
                            sink = sink.wrapping_add(sum(std::hint::black_box(c)));
                        }
                        dts.push(t.elapsed().as_secs_f64());
                    }
                    std::hint::black_box(sink);
                    dts
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    (0..passes)
        .map(|p| {
            per_thread
                .iter()
                .filter_map(|d| d.get(p))
                .copied()
                .fold(0.0, f64::max)
        })
        .filter(|&dt| dt > 0.0)
        .map(|dt| (words * 8 * reps) as f64 / dt / 1e9)
        .collect()
}

/// The sum of `c` with the widest loads this CPU has, so a pass is limited by the loads and not by
/// the instructions: built for the baseline x86-64 (SSE2), the loop read 19-22 GB/s on a 2-vCPU
/// Intel Xeon (Emerald Rapids) host whose two cores read 31-32 GB/s with 512-bit loads, and rcpu's
/// streams showed 130% "of read bw" there.
fn sum(c: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above), all `sum_avx512` is compiled for.
            return unsafe { sum_avx512(c) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above), all `sum_avx2` is compiled for.
            return unsafe { sum_avx2(c) };
        }
    }
    sum_lanes(c)
}

/// The sum of `c`, four 512-bit accumulators over 256 bytes a step (explicit loads: left to
/// the compiler, the lanes loop became strided gathers), the tail by [`sum_lanes`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn sum_avx512(c: &[u64]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm512_setzero_si512(); 4];
    let mut steps = c.chunks_exact(32);
    for s in &mut steps {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: `s` holds 32 words, so words 8k..8k+8 (k < 4) are inside it; unaligned load.
            let v = unsafe { _mm512_loadu_si512(s.as_ptr().add(8 * k).cast()) };
            *a = _mm512_add_epi64(*a, v);
        }
    }
    let all = _mm512_add_epi64(
        _mm512_add_epi64(acc[0], acc[1]),
        _mm512_add_epi64(acc[2], acc[3]),
    );
    (_mm512_reduce_add_epi64(all) as u64).wrapping_add(sum_lanes(steps.remainder()))
}

/// [`sum_avx512`] with four 256-bit accumulators over 128 bytes a step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn sum_avx2(c: &[u64]) -> u64 {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_si256(); 4];
    let mut steps = c.chunks_exact(16);
    for s in &mut steps {
        for (k, a) in acc.iter_mut().enumerate() {
            // SAFETY: `s` holds 16 words, so words 4k..4k+4 (k < 4) are inside it; unaligned load.
            let v = unsafe { _mm256_loadu_si256(s.as_ptr().add(4 * k).cast()) };
            *a = _mm256_add_epi64(*a, v);
        }
    }
    let mut lanes = [0u64; 4];
    let all = _mm256_add_epi64(
        _mm256_add_epi64(acc[0], acc[1]),
        _mm256_add_epi64(acc[2], acc[3]),
    );
    // SAFETY: `lanes` is 32 bytes, one unaligned 256-bit store.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), all) };
    lanes
        .iter()
        .copied()
        .fold(sum_lanes(steps.remainder()), u64::wrapping_add)
}

/// Sum with independent accumulators (the baseline, and the ISA kernels' tails).
fn sum_lanes(c: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let mut it = c.chunks_exact(8);
    for w in &mut it {
        for (a, x) in acc.iter_mut().zip(w) {
            *a = a.wrapping_add(*x);
        }
    }
    let tail: u64 = it.remainder().iter().copied().fold(0, u64::wrapping_add);
    acc.iter().copied().fold(tail, u64::wrapping_add)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_isa_sums_alike() {
        let v: Vec<u64> = (0..1003u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        let want = v.iter().copied().fold(0, u64::wrapping_add);
        assert_eq!(super::sum(&v), want);
        assert_eq!(super::sum_lanes(&v), want);
        assert_eq!(super::sum(&v[..5]), v[..5].iter().sum::<u64>());
        #[cfg(target_arch = "x86_64")]
        {
            for n in [0, 15, 16, 31, 32, 33, 1003] {
                let w = v[..n].iter().copied().fold(0, u64::wrapping_add);
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F.
                    let got = unsafe { super::sum_avx512(&v[..n]) };
                    assert_eq!(got, w, "avx512, {n} words");
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2.
                    let got = unsafe { super::sum_avx2(&v[..n]) };
                    assert_eq!(got, w, "avx2, {n} words");
                }
            }
        }
    }

    #[test]
    fn bandwidth_is_positive_and_finite() {
        let b = super::Buffers::new(1 << 20, 2);
        assert!(b.huge.is_some(), "arena maps 1 MiB");
        let r = b.reference(2);
        for g in [r.small_pages, r.huge_pages, b.round(3)] {
            assert!(g.is_finite() && g > 0.0, "{g} in {r:?}");
        }
    }
}
