//! The segmented M=1 split: each lane streams its own contiguous segment of the units front to
//! back, then takes what is left of the other segments from their far ends.
//!
//! Why (issue 17): a decode GEMV costs its bytes, and a lane streams fastest through one long
//! ascending run. The guided split hands runs out in index order, so the two lanes alternate
//! through the weight and each restarts its stream at every chunk; a plain two-lane read of a
//! matrix in two contiguous halves was about 14% faster than the same read cut as the guided
//! split (Qwen2-0.5B gate, K=896 N=4864, 200 copies so every call streams from DRAM,
//! interleaved in one process: p10 63-66 us for halves, 72-75 us guided;
//! `examples/matmul_nbits_stream -- --sweep`). Here every lane's own runs follow each other
//! in memory (claiming the next run of its segment continues the same stream), and only the
//! last few runs of a segment, taken by a lane that finished its own, start a new one; the
//! claims still even out a lane that started late or ran slow.
//!
//! Claims: per segment, `taken` counts the units claimed from either end (one `fetch_add` per
//! run, so no unit is claimed twice: a claim gets `min(want, len - before)`, nothing once
//! `before >= len`) and `back` the units claimed from the far end (each thief's offset). The
//! owner (the chunk of the segment's index, run once) keeps its front position to itself. The
//! front runs cover `[lo, lo + F)` and the back runs `[hi - B, hi)` with `F + B <= len`, so the
//! runs are disjoint and, once every chunk has returned, cover the segment.

use crate::os::cache::CachePadded;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Segments (so lanes) a segmented split supports; with more lanes decode uses the guided split.
pub const MAX_SEGMENTS: usize = 16;

/// A run takes `left / RUN_DIV` of the segment's unclaimed units (clamped): long runs while the
/// owner is alone, shorter ones as the segment runs out, so a thief's last runs are short.
const RUN_DIV: usize = 4;

/// One segment's counters (kept on a cache line pair of their own by [`SegmentClaims`]).
#[derive(Debug, Default)]
struct Counters {
    taken: AtomicUsize,
    back: AtomicUsize,
}

/// The claim counters of one call of a segmented split (on the caller's stack; all zero at the
/// start of the call), each segment's on a cache line pair of their own: a lane claiming runs of
/// its own segment does not contend with the other owners. (With the counters packed side by
/// side, a plain two-lane read through this split took 72.7-73.1 us at K=896 N=4864 against
/// 66.3-66.7 us padded and 65.0-65.4 us for two fixed halves, interleaved in one process.)
#[derive(Debug)]
pub struct SegmentClaims {
    seg: [CachePadded<Counters>; MAX_SEGMENTS],
}

impl Default for SegmentClaims {
    fn default() -> Self {
        Self::new()
    }
}

impl SegmentClaims {
    /// All counters zero: a constant expression, so a call's claims are zeroed where they lie
    /// on its stack, not built elsewhere and copied there.
    #[inline(always)]
    pub const fn new() -> Self {
        SegmentClaims {
            seg: [const {
                CachePadded(Counters {
                    taken: AtomicUsize::new(0),
                    back: AtomicUsize::new(0),
                })
            }; MAX_SEGMENTS],
        }
    }
}

/// The shape of a segmented split: `segments` segments of `units`, runs of `min..=max` units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segments {
    pub(crate) segments: usize,
    pub(crate) min: usize,
    pub(crate) max: usize,
}

impl Segments {
    /// Units of segment `s` of `units`: `[s * units / n, (s + 1) * units / n)`.
    pub(crate) fn segment(&self, units: usize, s: usize) -> Range<usize> {
        // In u128: `s * units` may exceed usize for absurd unit counts, never in u128.
        let at = |j: usize| (j as u128 * units as u128 / self.segments.max(1) as u128) as usize;
        at(s)..at(s + 1)
    }

    /// The length of a run claimed when `left` units of a segment are unclaimed.
    pub(crate) fn run_len(&self, left: usize) -> usize {
        left.div_ceil(RUN_DIV).clamp(self.min, self.max)
    }

    /// Claims the next run of segment `s` (of length `len`): `Some(units in the run)`, `None`
    /// once the segment is fully claimed.
    fn claim(&self, c: &SegmentClaims, s: usize, len: usize) -> Option<usize> {
        // Relaxed: only the uniqueness of claims matters (one RMW order per counter); the
        // dispatch's barrier publishes what the runs wrote.
        let seen = c.seg[s].0.taken.load(Ordering::Relaxed);
        if seen >= len {
            return None;
        }
        let want = self.run_len(len - seen);
        let before = c.seg[s].0.taken.fetch_add(want, Ordering::Relaxed);
        (before < len).then(|| want.min(len - before))
    }

    /// Runs chunk `i` (`i < segments`): the runs of segment `i` front to back, then the rest of
    /// the other segments (from `i + 1` on, wrapping) from their far ends, calling `f` on each.
    pub(crate) fn run(
        &self,
        units: usize,
        i: usize,
        c: &SegmentClaims,
        f: &mut dyn FnMut(Range<usize>),
    ) {
        let own = self.segment(units, i);
        let mut at = own.start;
        while let Some(got) = self.claim(c, i, own.len()) {
            f(at..at + got);
            at += got;
        }
        for j in 1..self.segments {
            let s = (i + j) % self.segments;
            let seg = self.segment(units, s);
            while let Some(got) = self.claim(c, s, seg.len()) {
                // Relaxed: as in `claim`.
                let b = c.seg[s].0.back.fetch_add(got, Ordering::Relaxed);
                f(seg.end - b - got..seg.end - b);
            }
        }
    }
}
