//! Software prefetch distance of the AVX-512 tile kernels' weight stream.
//!
//! At M = 1 a tile kernel streams its group's weight codes once; the hardware prefetcher alone
//! left both lanes short of a plain read of the same bytes (Intel Xeon with AVX-512 VNNI, 2
//! lanes, acc 4, `examples/matmul_nbits_stream --sweep`, p10 of per-call times, distances
//! interleaved in one process on a loaded machine): K=896 N=4864 137 us without, 114 us at
//! 1024 bytes; K=4864 N=896 126 / 111 us; K=896 N=1152 24.3 / 20.3 us; K=896 N=151936 3368 /
//! 2809 us. One lane: K=896 N=4864 240 / 207 us. 512..1536 bytes were within a few percent of
//! each other; 256 gained about half as much. The kernel's own rate on L2-resident weights is
//! about twice a lane's DRAM rate, so without prefetch its loads come too late to keep enough
//! misses in flight.
//!
//! The scales stream (64 bytes of f16 per block of 512 weight bytes at block 32) is prefetched
//! as far ahead in blocks: on top of the weight prefetch, p10 K=896 N=4864 110.2 -> 106.9 and
//! 114.8 -> 109.3 us, K=4864 N=896 114.4 -> 111.5 and 113.0 -> 109.5 us (K=896 N=1152 within
//! noise). Both together at acc 0, K=896 N=4864: 196 -> 132 us.
//!
//! With both streams prefetched, 2048 bytes beat 1024 (p10, 40 rounds): K=896 N=4864 109.1 ->
//! 103.4 us, K=4864 N=896 111.8 -> 107.4, K=896 N=1152 21.9 -> 19.9; acc 0 K=896 N=4864 132.5
//! -> 126.0; K=896 N=151936 2885 -> 2814 us. 3072 was no better than 2048; prefill (M=64) is
//! indifferent (no prefetch 1214 us, 1024: 1076, 2048: 1127, p10 of 20 rounds).
//!
//! Issue 17, after the segmented decode split (`runtime::segments`), every call streaming from
//! DRAM (200 copies, about 490 MB, past L3; p10 over 60 rounds of 8 calls, arms interleaved:
//! `examples/matmul_nbits_stream -- --sweep 896 4864 2 60 200 4 1
//! --pf=2048/0,2048/4096,guided:2048/0,read`): perf put about 70% of the VNNI tile's samples on
//! its two weight loads, so the tile waits on memory, not on arithmetic. A second prefetch
//! into L2 (`prefetcht2`) at twice the distance keeps more lines coming: K=896 N=4864 83.4 ->
//! 79.8 and 78.8 -> 75.6 us (plain read of the codes in the same runs 69.6 and 65.3 us, the
//! kernel now at 98% / 97% of the read's GB/s over its 12% more bytes), K=4864 N=896 81.5 ->
//! 79.1 and 82.2 -> 80.5, K=896 N=1152 21.8 -> 20.9 and 21.5 -> 20.8. The fp32 tile (acc 0) got
//! slower with it (91.1 -> 93.0, 89.1 -> 92.0 us), so only the VNNI tile issues it. Against
//! L1 2048 / L2 4096, the VNNI tile's L1 3072 / L2 6144 was faster or equal in every one of 9
//! interleaved comparisons (`--pf=2048/4096,3072/6144,...`): K=896 N=4864 75.9 -> 73.6, 74.5
//! -> 73.6, 73.7 -> 73.4 us; K=4864 N=896 81.0 -> 78.2, 79.0 -> 78.1, 81.1 -> 80.8; K=896
//! N=896 15.6 -> 15.3; K=896 N=1152 20.7 -> 20.0, 20.8 -> 20.8. 2048 / 6144 and 1024 / 4096
//! were no better than 2048 / 4096, 4096 / 8192 worse. The fp32 tile keeps 2048 (3072: 91.7
//! -> 91.9 and 90.7 -> 92.7 us at acc 0).
//!
//! On other than Intel CPUs that L2 prefetch is off since the VNNI tile's lean loop (`tile_avx512`,
//! which issues a chunk's L1 prefetch without a branch; with an L2 distance of 0 the L2 one is left
//! out of the loop altogether). Measured on a Zen 4 VM whose read bandwidth moves between ~34 and
//! ~60 GB/s (`--sweep 896 4864 2 12 200 4 1 --pf=3072/6144,3072/0,2048/0,4096/0,read`, 14 runs a
//! few seconds apart): in the runs at ~34 GB/s, 3072/6144 and 3072/0 were within 1% of each other
//! (e.g. 68.8 / 68.4, 71.1 / 71.1, 73.5 / 72.5 us p50); in the runs whose plain read reached 54-62
//! GB/s, 3072/0 was 4-9% faster (55.2 / 50.9, 55.9 / 52.0, 56.5 / 52.6, 55.0 / 50.0 us), 2048/0 and
//! 4096/0 like it. At model level (Qwen2-0.5B decode, 24 rounds, the build with the L2 prefetch as
//! the null arm) L2 off / on: per-round median 1.026 faster, ~1.035 over the nine rounds at 50-64
//! GB/s, ~1.0 over those at ~35. The VNNI L1 distance in the same kind of runs
//! (`--pf=3072/0,1024/0,0/0,6144/0,read`, 46 runs): equal at ~34 GB/s; 3072 fastest by 3-4% when
//! the read reached 55-65 GB/s; 0 fastest by 13-15% in the four runs where the kernel alone slowed
//! to ~103 us against a normal read (a neighbour on our cores, whose cache traffic evicts lines
//! fetched far ahead, presumably). It stays 3072.
//!
//! Everything above was measured on the two-stream layout (codes, and the scales in a
//! second array). With the records (`pack`: each block's codes followed by its scales, one
//! stream a group) the hardware prefetcher alone keeps one lane at a plain read's rate, and a
//! software prefetch only costs (one lane, vCPUs near each other, p10, two runs, `--sweep K N 1
//! 24 200 4 1 --pf=3072/0,0/0,1024/0,rec:0,reads`): the VNNI tile at K=896 N=4864 79.5 / 78.5 us
//! at 3072 bytes, 70.2 / 70.4 without, 86.3 / 85.7 at 1024 (the plain read of the same bytes
//! 68.8 / 69.0); K=4864 N=896 84.4 / 83.9, 78.7 / 79.5, 92.3 / 92.7. The `vpmaddubsw` tile
//! (`RCPU_ISA=avx512`, K=896 N=4864) 80.9 / 82.8 at 2048, 72.2 / 73.1 without. The fp32 tile
//! (acc 0) computes at ~21 GB/s a lane, below the read, and did not move (129.7 / 129.8 us).
//! With two lanes near each other every distance was within 1.5%. So a tile over one row (M = 1)
//! issued no L1 prefetch at all, until the same host, in a state of longer memory latency, ran
//! decode ~10% slower without it: since then the one-row distance is chosen per process by
//! timing its decode calls (`row1_tuner`, which has the figures). Over several rows (prefill)
//! the tiles keep their distances: there the prefetch still pays (M=64, two lanes, p10: 919 us at
//! 3072 bytes against 945 with the VNNI loop prefetching the line it loads; Qwen prefill 64
//! measured ~5% slower without it), provided the VNNI loop issues it unconditionally: with the
//! prefetch behind a run-time test inside the loop the four-row body compiled ~3% slower at 0 and
//! ~15% at 3072 bytes (weights hot in cache), so the test is on the row count, a constant there.
//! The VNNI tile's L2 distance on Intel CPUs stays as measured there on the old layout (not
//! re-measured: no Intel host at hand).
//!
//! The distance is a process-wide setting so that diagnostics can compare distances
//! interleaved in one process (the only comparison that survives a noisy shared machine);
//! nothing in the library changes it.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Default L1 distance of the fp32 and `vpmaddubsw` tiles over several rows (M > 1), in bytes
/// ahead of the 64-byte chunk being loaded.
pub const DEFAULT_PREFETCH_BYTES: usize = 2048;
/// Default L1 distance of the VNNI tile over several rows (M > 1).
pub const DEFAULT_VNNI_PREFETCH_BYTES: usize = 3072;
/// The VNNI tile's second, L2 (`prefetcht2`) prefetch distance on Intel CPUs, where it was
/// measured as a gain (with the chunk-by-chunk loop); elsewhere it is off (measured on Zen 4 with
/// the lean loop, see above). [`default_l2_prefetch_bytes`] picks one per process.
pub const INTEL_L2_PREFETCH_BYTES: usize = 6144;

/// The VNNI tile's L2 prefetch distance where no diagnostic set one: [`INTEL_L2_PREFETCH_BYTES`]
/// on Intel CPUs, 0 (off) on others.
pub fn default_l2_prefetch_bytes() -> usize {
    if crate::kernels::simd::is_intel() {
        INTEL_L2_PREFETCH_BYTES
    } else {
        0
    }
}

/// `L2_DISTANCE` before anything set it: the per-vendor default applies.
const L2_UNSET: usize = usize::MAX;
/// `ROW1_DISTANCE` before anything set it: the tuner's choice applies.
const ROW1_UNSET: usize = usize::MAX;

static DISTANCE: AtomicUsize = AtomicUsize::new(DEFAULT_PREFETCH_BYTES);
static VNNI_DISTANCE: AtomicUsize = AtomicUsize::new(DEFAULT_VNNI_PREFETCH_BYTES);
/// The one-row distance a diagnostic set (`ROW1_UNSET`: the tuner's, `row1_tuner`).
static ROW1_DISTANCE: AtomicUsize = AtomicUsize::new(ROW1_UNSET);
static L2_DISTANCE: AtomicUsize = AtomicUsize::new(L2_UNSET);

/// Sets every tile's L1 prefetch distance in bytes, over one row and over several (0 turns it
/// off; the VNNI tile over several rows then prefetches the line it loads), the one-row one in
/// place of the tuner's choice. Diagnostics only.
#[doc(hidden)]
pub fn set_prefetch_bytes(bytes: usize) {
    DISTANCE.store(bytes, Ordering::Relaxed);
    VNNI_DISTANCE.store(bytes, Ordering::Relaxed);
    ROW1_DISTANCE.store(bytes, Ordering::Relaxed);
}

/// Sets the VNNI tile's L2 prefetch distance in bytes (0 turns it off). Diagnostics only.
#[doc(hidden)]
pub fn set_l2_prefetch_bytes(bytes: usize) {
    L2_DISTANCE.store(bytes, Ordering::Relaxed);
}

/// Puts every distance back to its default (the one-row one: the tuner's). Diagnostics only.
#[doc(hidden)]
pub fn reset_prefetch() {
    DISTANCE.store(DEFAULT_PREFETCH_BYTES, Ordering::Relaxed);
    VNNI_DISTANCE.store(DEFAULT_VNNI_PREFETCH_BYTES, Ordering::Relaxed);
    ROW1_DISTANCE.store(ROW1_UNSET, Ordering::Relaxed);
    L2_DISTANCE.store(L2_UNSET, Ordering::Relaxed);
}

/// The fp32 and `vpmaddubsw` tiles' L1 distance for a tile over `rows` rows, in bytes (0: off):
/// the one-row distance for one row, else theirs.
pub fn prefetch_bytes(rows: usize) -> usize {
    l1_distance(rows, &DISTANCE)
}

/// The VNNI tile's (L1, L2) distances for a tile over `rows` rows, in bytes (0: off); the L1 one
/// is the one-row distance for one row.
pub fn vnni_prefetch_bytes(rows: usize) -> (usize, usize) {
    let l2 = match L2_DISTANCE.load(Ordering::Relaxed) {
        L2_UNSET => default_l2_prefetch_bytes(),
        d => d,
    };
    (l1_distance(rows, &VNNI_DISTANCE), l2)
}

/// For one row the distance a diagnostic set, else the tuner's choice; `several` for more rows.
fn l1_distance(rows: usize, several: &AtomicUsize) -> usize {
    if rows != 1 {
        return several.load(Ordering::Relaxed);
    }
    match ROW1_DISTANCE.load(Ordering::Relaxed) {
        ROW1_UNSET => super::row1_tuner::TUNER.distance(),
        d => d,
    }
}
