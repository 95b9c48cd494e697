//! The parallel-execution interface kernels are written against.
//!
//! Kernels never see threads: they describe their work as `n` independent chunks and hand a
//! closure to [`Par::chunks`]. `Serial` runs everything on the caller (tests, tiny work); the
//! pinned worker lanes (`runtime::lanes`) and `ScopedThreads` implement the same trait.
//!
//! There is one dispatch engine. How work is cut into chunks is the caller's policy (an M=1
//! weight stream uses [`StreamSplit`]; prefill-sized work uses tiles or fixed element counts);
//! the [`Dispatch`] a kernel passes only says which of the two it is, so the pool counts it as a
//! decode or a task dispatch. No implementation runs the two differently.

/// What kind of work a [`Par::chunks`] call carries. It labels the dispatch for the pool
/// counters (`decode_dispatches`, `task_dispatches`); it does not change how chunks are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// Small latency-critical work (M=1 GEMV, one decode step's attention), usually chunked
    /// with [`StreamSplit`].
    Decode,
    /// Larger work (prefill GEMM tiles, elementwise pieces).
    Task,
}

pub use super::segments::SegmentClaims;
use super::segments::{Segments, MAX_SEGMENTS};
use super::warm::IdleHint;
use std::ops::Range;

/// A way to run `n` independent chunks of work, possibly in parallel.
pub trait Par: Sync {
    /// Number of lanes (the calling thread included) work may be spread over.
    fn lanes(&self) -> usize;

    /// Calls `f(i)` exactly once for every `i` in `0..n` (in any order, on any lane, possibly
    /// concurrently) and returns only after every call has returned; lanes claim indices
    /// dynamically so one slow lane cannot hold the others back. A panic in `f` is propagated
    /// to the caller after all lanes are quiescent. A dispatch issued from inside a running
    /// chunk runs inline on that lane. `kind` only labels the dispatch (see [`Dispatch`]).
    fn chunks(&self, kind: Dispatch, n: usize, f: &(dyn Fn(usize) + Sync));

    /// A hint that the next dispatches will probably stream what `hint` names (e.g. another
    /// lane's first chunk): idle lanes may read it into their caches (`None` cancels the hint;
    /// "Idle reads" in `park`). Never required for correctness; the default ignores it.
    fn idle_read(&self, _hint: Option<IdleHint>) {}
}

thread_local! {
    /// The most lanes a dispatch issued from this thread was split over since the last
    /// [`take_lanes_used`] (1: none went parallel). Per thread because a node's compute and its
    /// dispatches run on the calling thread; nested dispatches inside chunks run inline and note
    /// nothing.
    static LANES_USED: std::cell::Cell<usize> = const { std::cell::Cell::new(1) };
}

/// Notes that a dispatch issued from this thread was split over `lanes` lanes (implementations of
/// [`Par`] call it when they hand chunks to other lanes).
pub fn note_lanes_used(lanes: usize) {
    LANES_USED.with(|c| c.set(c.get().max(lanes)));
}

/// The most lanes any dispatch from this thread was split over since the previous call (1 when
/// everything ran on the caller), and starts counting afresh: what a node records in the route
/// ledger as the lanes its call ran on.
pub fn take_lanes_used() -> usize {
    LANES_USED.with(|c| c.replace(1))
}

/// Bytes a streaming chunk (M=1 decode: a run of weight panels or column groups) reads at most.
pub const STREAM_CHUNK_MAX_BYTES: usize = 4 << 20;
/// Chunks per lane a streaming split keeps at least (when there are that many units), so the
/// dynamic hand-out can still even out a lane that starts late or runs slower.
pub const STREAM_MIN_CHUNKS_PER_LANE: usize = 4;

/// How many of `units` consecutive units (each `unit_bytes` of weights) one decode chunk
/// streams over `lanes` lanes: as many as fit [`STREAM_CHUNK_MAX_BYTES`], but no more than leaves
/// [`STREAM_MIN_CHUNKS_PER_LANE`] chunks per lane; at least one.
///
/// Long runs per lane are what an M=1 product wants: with short chunks the lanes alternate
/// through the weights and each restarts its hardware prefetch stream every chunk. Measured
/// (2-vCPU Zen 4 VM, two lanes, p50 of 3000 calls, alternating builds): f32 GEMV K=N=2048
/// packed, 64 KiB chunks 118-140 us, 1 MiB 110-121 us, this rule (8 chunks of 2 MiB)
/// 104-117 us; MatMulNBits K=4096 N=57344 acc 4 (`nbits_ab`,
/// DRAM) 32 KiB 4554 us, 256 KiB 4143-4407 us, 4 MiB 3304-4179 us.
pub fn stream_units_per_chunk(units: usize, unit_bytes: usize, lanes: usize) -> usize {
    let by_bytes = STREAM_CHUNK_MAX_BYTES / unit_bytes.max(1);
    let by_balance = units / (STREAM_MIN_CHUNKS_PER_LANE * lanes.max(1));
    by_bytes.min(by_balance).max(1)
}

/// An M=1 streaming split: `units` consecutive units in `chunks` contiguous runs whose lengths
/// differ by at most one, with `chunks` a multiple of the lane count (when there are that many
/// units).
///
/// [`stream_units_per_chunk`] alone cut a run of that many units per chunk and left the rest to
/// a short last one, so the chunk count was often odd for two lanes (Qwen2-0.5B's qkv: 36
/// groups in 9 chunks of 4, o_proj and down_proj: 28 groups in 9 of 3 plus 1, lm_head: 4748 in
/// 16 of 292 plus 1 of 76): with lanes of equal speed one lane streams up to one chunk more
/// while the other waits at the barrier. Here the count is rounded up to a multiple of the lanes and the
/// units are spread evenly, so chunk lengths never exceed `stream_units_per_chunk`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSplit {
    units: usize,
    chunks: usize,
    /// `Some` for a guided split (see [`StreamSplit::guided`]).
    guided: Option<Guided>,
    /// `Some` for a segmented split (see [`StreamSplit::segmented`]).
    segments: Option<Segments>,
}

/// The chunk-length rule of a guided split: each chunk takes `remaining / div` units (rounded
/// up), clamped to `min..=max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Guided {
    div: usize,
    min: usize,
    max: usize,
}

impl Guided {
    fn len(&self, remaining: usize) -> usize {
        remaining
            .div_ceil(self.div)
            .clamp(self.min, self.max)
            .min(remaining)
    }

    /// Start and length of chunk `i` of `units` (`(units, 0)` past the last), and the chunk
    /// count. The rule gives three phases: chunks of `max` while `remaining / div` exceeds it
    /// (closed form), the shrinking middle (iterated: about `div * ln(max * div / min)` chunks at
    /// most), then chunks of `min` (closed form), so this is cheap for any unit count.
    fn walk(&self, units: usize, i: usize) -> (usize, usize, usize) {
        // Chunk k has length `max` iff units - k * max > (max - 1) * div.
        let t = (self.max - 1).saturating_mul(self.div);
        let k1 = if units > t {
            (units - t).div_ceil(self.max)
        } else {
            0
        };
        let (mut at, mut j) = (k1 * self.max, k1);
        let mut found = (i < k1).then(|| (i * self.max, self.max));
        loop {
            let len = self.len(units - at);
            if len == 0 || (units - at).div_ceil(self.div) <= self.min {
                break;
            }
            if found.is_none() && j == i {
                found = Some((at, len));
            }
            at += len;
            j += 1;
        }
        // The rest: chunks of `min`, the last one possibly shorter.
        let tail = (units - at).div_ceil(self.min);
        let found = found.unwrap_or_else(|| {
            let s = at
                .saturating_add((i - j).saturating_mul(self.min))
                .min(units);
            (s, self.min.min(units - s))
        });
        (found.0, found.1, j + tail)
    }
}

/// Bytes a guided split's chunks shrink to at least (the tail), so the last chunks still stream
/// a few pages rather than one column group.
pub const GUIDED_TAIL_MIN_BYTES: usize = 16 << 10;

/// How decode splits ([`StreamSplit::decode`]) cut their units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamSchedule {
    /// [`StreamSplit::new`]: equal chunks, a multiple of the lanes.
    Even,
    /// [`StreamSplit::guided`]: long chunks first, short ones at the end.
    Guided,
    /// [`StreamSplit::segmented`]: one contiguous segment per lane, the rest claimed from the
    /// far ends (the default).
    Segmented,
}

static SCHEDULE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(2);

/// Sets the schedule [`StreamSplit::decode`] uses, process-wide. Diagnostics only (so that
/// `examples/decode_anatomy` can compare schedules interleaved in one process); nothing in the
/// library changes it.
#[doc(hidden)]
pub fn set_stream_schedule(s: StreamSchedule) {
    SCHEDULE.store(s as u8, std::sync::atomic::Ordering::Relaxed);
}

/// The schedule [`StreamSplit::decode`] uses now.
pub fn stream_schedule() -> StreamSchedule {
    match SCHEDULE.load(std::sync::atomic::Ordering::Relaxed) {
        0 => StreamSchedule::Even,
        1 => StreamSchedule::Guided,
        _ => StreamSchedule::Segmented,
    }
}

impl StreamSplit {
    /// The split of `units` units of `unit_bytes` bytes each over `lanes` lanes.
    pub fn new(units: usize, unit_bytes: usize, lanes: usize) -> StreamSplit {
        let per = stream_units_per_chunk(units, unit_bytes, lanes);
        let mut chunks = units.div_ceil(per);
        if chunks > 1 {
            // `chunks <= units`, so the rounding cannot overflow where `units` fits.
            chunks = chunks
                .checked_next_multiple_of(lanes.max(1))
                .unwrap_or(chunks)
                .min(units);
        }
        StreamSplit {
            units,
            chunks,
            guided: None,
            segments: None,
        }
    }

    /// The split an M=1 stream uses: [`StreamSplit::new`] or [`StreamSplit::guided`] per
    /// [`stream_schedule`].
    pub fn decode(units: usize, unit_bytes: usize, lanes: usize) -> StreamSplit {
        match stream_schedule() {
            StreamSchedule::Even => StreamSplit::new(units, unit_bytes, lanes),
            StreamSchedule::Guided => StreamSplit::guided(units, unit_bytes, lanes),
            StreamSchedule::Segmented if lanes <= MAX_SEGMENTS => {
                StreamSplit::segmented(units, unit_bytes, lanes)
            }
            StreamSchedule::Segmented => StreamSplit::guided(units, unit_bytes, lanes),
        }
    }

    /// A segmented split: one chunk per lane (at most [`MAX_SEGMENTS`], at most one per unit),
    /// chunk `i` owning the `i`-th of that many equal contiguous segments. Run through
    /// [`StreamSplit::run`], a chunk claims its own segment front to back in runs of a quarter
    /// of what is left of it (at most [`STREAM_CHUNK_MAX_BYTES`], at least
    /// [`GUIDED_TAIL_MIN_BYTES`], one unit at least), then what is left of the other segments
    /// from their far ends (see [`crate::runtime::segments`]).
    pub fn segmented(units: usize, unit_bytes: usize, lanes: usize) -> StreamSplit {
        let ub = unit_bytes.max(1);
        let chunks = lanes.clamp(1, MAX_SEGMENTS).min(units);
        StreamSplit {
            units,
            chunks,
            guided: None,
            segments: Some(Segments {
                segments: chunks,
                min: (GUIDED_TAIL_MIN_BYTES / ub).max(1),
                max: (STREAM_CHUNK_MAX_BYTES / ub).max(1),
            }),
        }
    }

    /// Runs chunk `i` (`i < chunks()`): calls `f` on each run of units it takes. Even and guided
    /// splits: the one run [`StreamSplit::range`]`(i)`; segmented ones: the runs it claims in
    /// `claims` (one `SegmentClaims` shared by every chunk of one call, fresh per call). Over all
    /// chunks of a call, every unit is in exactly one run.
    pub fn run(&self, i: usize, claims: &SegmentClaims, f: &mut dyn FnMut(Range<usize>)) {
        match self.segments {
            Some(s) => s.run(self.units, i, claims, f),
            None => f(self.range(i)),
        }
    }

    /// A guided split (guided self-scheduling): chunk `i` takes `1 / (2 * lanes)` of the units
    /// the chunks before it left, at most [`STREAM_CHUNK_MAX_BYTES`] and at least
    /// [`GUIDED_TAIL_MIN_BYTES`] (one unit at least). The chunks are handed out in index order,
    /// so the lanes stream long runs first and the last chunks are short: a lane that started
    /// late or ran slow is evened out by the tail instead of leaving the other lane to wait up
    /// to one equal-sized chunk at the barrier.
    pub fn guided(units: usize, unit_bytes: usize, lanes: usize) -> StreamSplit {
        let ub = unit_bytes.max(1);
        let g = Guided {
            div: 2 * lanes.clamp(1, usize::MAX / 2),
            min: (GUIDED_TAIL_MIN_BYTES / ub).max(1),
            max: (STREAM_CHUNK_MAX_BYTES / ub).max(1),
        };
        let chunks = g.walk(units, 0).2;
        StreamSplit {
            units,
            chunks,
            guided: Some(g),
            segments: None,
        }
    }

    /// Number of chunks (0 when there are no units).
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// The units of chunk `i` (`i < chunks()`): even splits `[i * units / chunks, (i + 1) *
    /// units / chunks)`; guided ones the `i`-th run of the guided rule; segmented ones segment
    /// `i` (which [`StreamSplit::run`] may share with other chunks).
    pub fn range(&self, i: usize) -> Range<usize> {
        if let Some(s) = self.segments {
            return s.segment(self.units, i);
        }
        if let Some(g) = self.guided {
            let (at, len, _) = g.walk(self.units, i);
            return at..at + len;
        }
        // In u128: `i * units` may exceed usize for absurd unit counts, never in u128.
        let at = |j: usize| (j as u128 * self.units as u128 / self.chunks.max(1) as u128) as usize;
        at(i)..at(i + 1)
    }
}

/// Runs every chunk on the calling thread, in order.
#[derive(Debug, Default, Clone, Copy)]
pub struct Serial;

impl Par for Serial {
    fn lanes(&self) -> usize {
        1
    }
    fn chunks(&self, _kind: Dispatch, n: usize, f: &(dyn Fn(usize) + Sync)) {
        (0..n).for_each(f)
    }
}

/// Runs chunks on `threads` scoped OS threads (the caller is one of them), handing chunk
/// indices out through one atomic counter. It spawns threads on every dispatch, so it serves
/// tests and tools that need real concurrency without the pinned lanes, never the hot path.
#[derive(Debug, Clone, Copy)]
pub struct ScopedThreads(pub usize);

impl ScopedThreads {
    fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let next = AtomicUsize::new(0);
        // Relaxed: the counter only partitions indices; scope join publishes every write of f.
        let work = || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                break;
            }
            f(i);
        };
        std::thread::scope(|s| {
            for _ in 1..self.0.max(1) {
                s.spawn(work);
            }
            work();
        });
    }
}

impl Par for ScopedThreads {
    fn lanes(&self) -> usize {
        self.0.max(1)
    }
    fn chunks(&self, _kind: Dispatch, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if n > 1 {
            note_lanes_used(self.lanes().min(n));
        }
        self.run(n, f)
    }
}
