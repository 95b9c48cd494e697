//! Per-thread scratch buffers kernels park between calls, bounded process-wide by
//! [`super::scratch_governor`] (the sum over all threads, never per thread).
//!
//! `try_with_scratch_f32(len, f)` lends `f` a `&mut [f32]` of exactly `len` elements (likewise for
//! i32, u8 and u16), or returns `None` without calling `f` when a fresh buffer cannot be allocated:
//! every scratch length derives from a model or a feed, so an allocation failure is the caller's
//! clean error (naming its node), never an abort. [`Shortfall`] carries such a failure out of a
//! parallel region.
//! - if this thread's parked buffer is at least `len` long it is reused (no allocation on the hot path);
//! - otherwise a fresh buffer is allocated (fallibly); after `f` returns the thread tries to park it: by growing the
//!   grant of its current parked buffer (which it then replaces) or, with none parked, by a new reservation.
//!   If the governor declines, the fresh buffer is freed ("oversize buffers are released") and the old
//!   parked one, if any, stays parked.
//!
//! **Contents on entry are unspecified**: a reused buffer holds whatever the last user left there (a fresh
//! one happens to be zeroed). Kernels must write before they read.
//!
//! A parked buffer's grant is released when it is replaced or when its thread exits (thread-local
//! destructor). A nested call on the same thread (while the parked buffer is lent out) gets a fresh buffer.

use super::Grant;
use crate::os::cache::CachePadded;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

// Relaxed throughout: statistics only; the budget itself is enforced by the governor's CAS.
static FRESH: AtomicU64 = AtomicU64::new(0);
static PARKED_BYTES: AtomicU64 = AtomicU64::new(0);
static PEAK_PARKED_BYTES: AtomicU64 = AtomicU64::new(0);
static PARKS: AtomicU64 = AtomicU64::new(0);
static DECLINED_PARKS: AtomicU64 = AtomicU64::new(0);

/// Reuses are counted per thread: the lanes reuse their scratch in every parallel call (each
/// decode step's attention, every prefill task), and one process-wide counter would be a line
/// all of them write at the same moments. Each thread bumps a counter of its own (a heap block on
/// its own cache-line pair); [`reuses`] sums the live threads' counters and those of the threads
/// that exited, under one lock, so the total is exact at any moment.
type ReuseCount = CachePadded<AtomicU64>;

/// The live threads' counters, and what the exited threads had counted (changed together, under
/// the lock).
static REUSE_COUNTS: parking_lot::Mutex<(Vec<std::sync::Arc<ReuseCount>>, u64)> =
    parking_lot::Mutex::new((Vec::new(), 0));

/// This thread's counter, registered on first use and retired when the thread exits.
struct ThreadReuses(std::sync::Arc<ReuseCount>);

impl ThreadReuses {
    fn register() -> ThreadReuses {
        let c = std::sync::Arc::new(ReuseCount::default());
        REUSE_COUNTS.lock().0.push(c.clone());
        ThreadReuses(c)
    }
}

impl Drop for ThreadReuses {
    fn drop(&mut self) {
        let mut g = REUSE_COUNTS.lock();
        g.1 += self.0 .0.load(Relaxed);
        g.0.retain(|c| !std::sync::Arc::ptr_eq(c, &self.0));
    }
}

thread_local! {
    static REUSES: ThreadReuses = ThreadReuses::register();
}

fn count_reuse() {
    if REUSES.try_with(|c| c.0 .0.fetch_add(1, Relaxed)).is_err() {
        // Thread teardown: the counter is gone; count with the exited threads.
        REUSE_COUNTS.lock().1 += 1;
    }
}

/// Calls served by a parked buffer, over all threads since the process started.
fn reuses() -> u64 {
    let g = REUSE_COUNTS.lock();
    g.0.iter().fold(g.1, |t, c| t + c.0.load(Relaxed))
}

/// A parked buffer and the grant that pays for it.
struct Parked<T> {
    buf: Vec<T>,
    grant: Grant,
}

impl<T> Drop for Parked<T> {
    fn drop(&mut self) {
        PARKED_BYTES.fetch_sub(self.grant.held_bytes(), Relaxed);
        // `grant` drops after this, releasing the bytes.
    }
}

fn count_parked(bytes: u64) {
    super::gauge_add(&PARKED_BYTES, &PEAK_PARKED_BYTES, bytes);
}

#[derive(Default)]
struct ThreadScratch {
    f32s: Option<Parked<f32>>,
    i32s: Option<Parked<i32>>,
    u8s: Option<Parked<u8>>,
    u16s: Option<Parked<u16>>,
}

thread_local! {
    static SCRATCH: RefCell<ThreadScratch> = RefCell::new(ThreadScratch::default());
}

/// A zeroed `Vec` of `len` elements, or `None` when the allocation fails.
fn try_fresh<T: Copy + Default>(len: usize) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    v.resize(len, T::default());
    Some(v)
}

/// Lends `f` the parked buffer, or a fresh one from `fresh` (`None`: allocation failed, `f` is
/// not called and the parked buffer stays parked).
fn lend<T: Copy + Default, R>(
    len: usize,
    slot: fn(&mut ThreadScratch) -> &mut Option<Parked<T>>,
    fresh: impl FnOnce(usize) -> Option<Vec<T>>,
    f: impl FnOnce(&mut [T]) -> R,
) -> Option<R> {
    // Take the parked buffer out for the duration of `f` (re-entrancy safe). During thread teardown the
    // thread-local is gone: work with a fresh, unparked buffer.
    let mut parked = SCRATCH
        .try_with(|s| slot(&mut s.borrow_mut()).take())
        .ok()
        .flatten();
    if let Some(p) = parked.as_mut().filter(|p| p.buf.len() >= len) {
        count_reuse();
        let r = f(&mut p.buf[..len]);
        put_back(slot, parked);
        return Some(r);
    }
    let Some(mut buf) = fresh(len) else {
        put_back(slot, parked);
        return None;
    };
    FRESH.fetch_add(1, Relaxed);
    let r = f(&mut buf);
    let bytes = (buf.capacity() * std::mem::size_of::<T>()) as u64;
    let newly_parked = match parked.take() {
        Some(mut old) => {
            let old_bytes = old.grant.held_bytes();
            if old.grant.settle(bytes).is_ok() {
                count_parked(bytes);
                PARKED_BYTES.fetch_sub(old_bytes, Relaxed);
                PARKS.fetch_add(1, Relaxed);
                old.buf = buf; // the old, smaller buffer is freed here
            } else {
                DECLINED_PARKS.fetch_add(1, Relaxed); // `buf` is freed; the old one stays parked
            }
            Some(old)
        }
        None => match super::scratch_governor().reserve(bytes).grant() {
            Some(grant) => {
                count_parked(bytes);
                PARKS.fetch_add(1, Relaxed);
                Some(Parked { buf, grant })
            }
            None => {
                DECLINED_PARKS.fetch_add(1, Relaxed);
                None
            }
        },
    };
    put_back(slot, newly_parked);
    Some(r)
}

fn put_back<T>(slot: fn(&mut ThreadScratch) -> &mut Option<Parked<T>>, p: Option<Parked<T>>) {
    if p.is_none() {
        return;
    }
    // If the thread-local is being torn down, `p` drops here and releases its grant.
    let _ = SCRATCH.try_with(|s| {
        let mut s = s.borrow_mut();
        let dst = slot(&mut s);
        // A nested call may have parked meanwhile; keep the larger buffer.
        match dst {
            Some(cur) if p.as_ref().is_some_and(|p| p.buf.len() <= cur.buf.len()) => {}
            _ => *dst = p,
        }
    });
}

/// Lend `f` a per-thread f32 scratch slice of `len` elements, or `None` (without calling `f`)
/// when a fresh buffer cannot be allocated. Contents on entry are unspecified.
pub fn try_with_scratch_f32<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> Option<R> {
    lend(len, |s| &mut s.f32s, try_fresh, f)
}

/// [`try_with_scratch_f32`] for i32.
pub fn try_with_scratch_i32<R>(len: usize, f: impl FnOnce(&mut [i32]) -> R) -> Option<R> {
    lend(len, |s| &mut s.i32s, try_fresh, f)
}

/// [`try_with_scratch_f32`] for bytes.
pub fn try_with_scratch_u8<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
    lend(len, |s| &mut s.u8s, try_fresh, f)
}

/// [`try_with_scratch_f32`] for u16.
pub fn try_with_scratch_u16<R>(len: usize, f: impl FnOnce(&mut [u16]) -> R) -> Option<R> {
    lend(len, |s| &mut s.u16s, try_fresh, f)
}

/// The message of a scratch allocation that failed (`bytes` requested).
pub fn scratch_error(bytes: usize) -> String {
    format!("cannot allocate {bytes} bytes of scratch memory")
}

/// Records scratch allocations that failed inside a parallel region (largest request wins), so
/// the region's caller can return [`scratch_error`] once every task is done.
#[derive(Default)]
pub struct Shortfall(AtomicUsize);

impl Shortfall {
    /// Passes `r` through; a `None` records a failed request of `bytes`.
    pub fn note<R>(&self, r: Option<R>, bytes: usize) -> Option<R> {
        if r.is_none() {
            self.0.fetch_max(bytes.max(1), Relaxed);
        }
        r
    }

    /// `Err(scratch_error(..))` when any request failed.
    pub fn check(&self) -> Result<(), String> {
        match self.0.load(Relaxed) {
            0 => Ok(()),
            b => Err(scratch_error(b)),
        }
    }
}

/// Release this thread's parked buffers now (their grants return to the budget).
pub fn release_thread_scratch() {
    let _ = SCRATCH.try_with(|s| {
        let mut s = s.borrow_mut();
        s.f32s = None;
        s.i32s = None;
        s.u8s = None;
        s.u16s = None;
    });
}

/// Scratch counters (process-wide).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ScratchStats {
    /// Calls served by the thread's parked buffer.
    pub reuses: u64,
    /// Calls that allocated a fresh buffer.
    pub fresh_allocations: u64,
    /// Bytes currently parked, summed over all threads.
    pub parked_bytes: u64,
    /// Highest `parked_bytes` seen.
    pub peak_parked_bytes: u64,
    /// Fresh buffers parked (granted).
    pub parks: u64,
    /// Fresh buffers freed because the governor declined to park them.
    pub declined_parks: u64,
}

pub fn scratch_stats() -> ScratchStats {
    ScratchStats {
        reuses: reuses(),
        fresh_allocations: FRESH.load(Relaxed),
        parked_bytes: PARKED_BYTES.load(Relaxed),
        peak_parked_bytes: PEAK_PARKED_BYTES.load(Relaxed),
        parks: PARKS.load(Relaxed),
        declined_parks: DECLINED_PARKS.load(Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_threads_reuse_counter_sits_on_lines_of_its_own_and_all_are_summed() {
        // A heap block aligned to and filling a 128-byte line pair: no two threads' counters
        // share a line (the adjacent-line prefetcher moves lines in pairs).
        assert_eq!(std::mem::align_of::<ReuseCount>(), 128);
        assert_eq!(std::mem::size_of::<ReuseCount>(), 128);
        // Two threads' counters are two registered blocks, each counted once in the sum (other
        // tests may reuse scratch meanwhile, so only the lower bound is exact here; the serial
        // tests check exact totals, also after threads exit).
        let before = reuses();
        // Both threads hold their counters at once (else one could reuse the other's freed block).
        let both = std::sync::Barrier::new(2);
        let (a, b) = std::thread::scope(|s| {
            let t = || {
                let at = REUSES.with(|c| {
                    c.0 .0.fetch_add(3, Relaxed);
                    std::sync::Arc::as_ptr(&c.0) as usize
                });
                both.wait();
                at
            };
            let (x, y) = (s.spawn(t), s.spawn(t));
            (x.join().unwrap(), y.join().unwrap())
        });
        assert_ne!(a, b);
        assert!(reuses() >= before + 6);
    }
}
