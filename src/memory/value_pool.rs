//! `ValuePool`: the buffers a fused partition's run keeps its intermediate values in
//! (`abi::frame`), reused from value to value and from run to run, and bounded between runs by a
//! governor (the process-wide scratch budget, [`super::scratch_governor`]).
//!
//! During a run the pool lends buffers out ([`ValuePool::take`]: the smallest free one that fits,
//! else a fresh one, fallibly) and gets them back ([`ValuePool::put`]) after a value's last reader
//! ran; what a run needs at once is the run's working memory, like ORT's own activations, and is
//! not declined. At the end of a run ([`ValuePool::settle`]) every buffer is back, and the pool
//! *keeps* only what its grant can hold: all of them when they fit, else the smallest first until
//! the budget declines, and the rest are freed. So a steady decode keeps its few small buffers
//! (the grant already holds exactly them, so settling costs one comparison and no allocation
//! follows), while a long prefill's large buffers go back to the system when the budget is spent
//! and are allocated again by the next run that needs them: the process keeps no more than the
//! budget between runs, however long the prompts were.
//!
//! Accounting: the pool's grant holds the bytes it kept at the last settle (each buffer's
//! `held_bytes`, padding included); it is released when the pool drops. The counters below are
//! statistics only (Relaxed); the budget itself is enforced by the governor's compare-exchange.

use super::{AlignedBuf, AllocError, GovernorRef, Grant};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static KEPT_BYTES: AtomicU64 = AtomicU64::new(0);
static PEAK_KEPT_BYTES: AtomicU64 = AtomicU64::new(0);
static FRESH: AtomicU64 = AtomicU64::new(0);
static RELEASED_BUFFERS: AtomicU64 = AtomicU64::new(0);
static RELEASED_BYTES: AtomicU64 = AtomicU64::new(0);

/// A pool of byte buffers whose contents between runs are held against a governor (see the
/// module documentation).
#[derive(Debug)]
pub struct ValuePool {
    free: Vec<AlignedBuf<u8>>,
    gov: GovernorRef,
    /// What the pool kept at the last settle (`None`: nothing kept).
    grant: Option<Grant>,
}

impl ValuePool {
    /// An empty pool drawing on `gov` for what it keeps between runs.
    pub fn new(gov: GovernorRef) -> ValuePool {
        ValuePool {
            free: Vec::new(),
            gov,
            grant: None,
        }
    }

    /// The smallest free buffer of at least `bytes`, else a fresh zeroed one. A reused buffer
    /// holds whatever its last value left there.
    pub fn take(&mut self, bytes: usize) -> Result<AlignedBuf<u8>, AllocError> {
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.len() >= bytes)
            .min_by_key(|(_, b)| b.len())
            .map(|(i, _)| i);
        if let Some(i) = best {
            return Ok(self.free.swap_remove(i));
        }
        FRESH.fetch_add(1, Relaxed);
        AlignedBuf::try_zeroed(bytes)
    }

    /// Gives a buffer back (to be lent again this run, or kept or freed at [`Self::settle`]).
    pub fn put(&mut self, buf: AlignedBuf<u8>) {
        // Never fails to keep `buf`: a push that cannot grow the list frees the buffer instead.
        if self.free.try_reserve(1).is_ok() {
            self.free.push(buf);
        } else {
            note_released(buf.held_bytes() as u64);
        }
    }

    /// Ends a run: keeps the free buffers the governor allows (all, else the smallest first)
    /// and frees the others. Call when every buffer taken this run has been put back.
    pub fn settle(&mut self) {
        let total: u64 = self.free.iter().map(|b| b.held_bytes() as u64).sum();
        if total == self.kept_bytes() {
            return; // the steady state: the grant already holds exactly these buffers
        }
        if self.hold(total) {
            return;
        }
        self.free.sort_unstable_by_key(AlignedBuf::held_bytes);
        let mut kept = 0u64;
        let mut keep = 0;
        for i in 0..self.free.len() {
            let next = kept + self.free[i].held_bytes() as u64;
            if !self.hold(next) {
                break;
            }
            kept = next;
            keep += 1;
        }
        // The walk grew the grant buffer by buffer and stopped at the first decline; set it to
        // what is kept (a shrink or nothing, so it always succeeds; it drops a grant older than
        // this run when not even the smallest buffer fits).
        let _ = self.hold(kept);
        for b in self.free.drain(keep..) {
            note_released(b.held_bytes() as u64);
        }
    }

    /// Bytes the pool's grant holds (what it kept at the last settle).
    pub fn kept_bytes(&self) -> u64 {
        self.grant.as_ref().map_or(0, Grant::held_bytes)
    }

    /// Free buffers in the pool.
    pub fn free_buffers(&self) -> usize {
        self.free.len()
    }

    /// Sets the grant to `bytes` (a new reservation when there is none, `None` for 0); false,
    /// with the grant unchanged, when the governor declines the growth.
    fn hold(&mut self, bytes: u64) -> bool {
        let before = self.kept_bytes();
        let ok = if bytes == 0 {
            self.grant = None;
            true
        } else {
            match &mut self.grant {
                Some(g) => g.settle(bytes).is_ok(),
                None => match self.gov.reserve(bytes).grant() {
                    Some(g) => {
                        self.grant = Some(g);
                        true
                    }
                    None => false,
                },
            }
        };
        let after = self.kept_bytes();
        if after >= before {
            super::gauge_add(&KEPT_BYTES, &PEAK_KEPT_BYTES, after - before);
        } else {
            KEPT_BYTES.fetch_sub(before - after, Relaxed);
        }
        ok
    }
}

/// Counts a buffer of `bytes` freed rather than kept.
fn note_released(bytes: u64) {
    RELEASED_BUFFERS.fetch_add(1, Relaxed);
    RELEASED_BYTES.fetch_add(bytes, Relaxed);
}

impl Drop for ValuePool {
    fn drop(&mut self) {
        KEPT_BYTES.fetch_sub(self.kept_bytes(), Relaxed);
        // The grant drops after this, releasing the bytes.
    }
}

/// Value-pool counters (process-wide).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ValuePoolStats {
    /// Bytes all pools keep between runs now (held against the scratch budget).
    pub kept_bytes: u64,
    /// Highest `kept_bytes` seen.
    pub peak_kept_bytes: u64,
    /// Buffers allocated because no free one fitted.
    pub fresh_allocations: u64,
    /// Buffers freed at the end of a run because the budget declined to keep them.
    pub released_buffers: u64,
    /// Their bytes.
    pub released_bytes: u64,
}

pub fn value_pool_stats() -> ValuePoolStats {
    ValuePoolStats {
        kept_bytes: KEPT_BYTES.load(Relaxed),
        peak_kept_bytes: PEAK_KEPT_BYTES.load(Relaxed),
        fresh_allocations: FRESH.load(Relaxed),
        released_buffers: RELEASED_BUFFERS.load(Relaxed),
        released_bytes: RELEASED_BYTES.load(Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Governor;
    use std::sync::Arc;

    fn pool(budget: u64) -> (Arc<Governor>, ValuePool) {
        let g = Arc::new(Governor::named("test", budget));
        let p = ValuePool::new(g.clone().into());
        (g, p)
    }

    /// Takes buffers of `sizes` at once, then puts them all back.
    fn run(p: &mut ValuePool, sizes: &[usize]) -> Vec<usize> {
        let bufs: Vec<_> = sizes.iter().map(|&s| p.take(s).unwrap()).collect();
        let addrs = bufs
            .iter()
            .map(|b| b.as_slice().as_ptr() as usize)
            .collect();
        for b in bufs {
            p.put(b);
        }
        p.settle();
        addrs
    }

    #[test]
    fn a_steady_run_reuses_what_it_kept_and_holds_exactly_that() {
        let (g, mut p) = pool(1 << 20);
        let first = run(&mut p, &[1000, 5000, 300]);
        let kept = p.kept_bytes();
        assert!(
            kept >= 6300 && kept == g.live_bytes(),
            "{kept} {}",
            g.live_bytes()
        );
        let mut again = run(&mut p, &[1000, 5000, 300]);
        let mut first = first;
        first.sort_unstable();
        again.sort_unstable();
        assert_eq!(first, again, "the second run must reuse the kept buffers");
        assert_eq!(p.kept_bytes(), kept);
        drop(p);
        assert_eq!(g.live_bytes(), 0, "dropping the pool releases its grant");
    }

    #[test]
    fn over_budget_keeps_the_smallest_and_frees_the_rest() {
        // Room for the two small buffers (with padding), not for the large one.
        let (g, mut p) = pool(64 << 10);
        run(&mut p, &[1 << 20, 4096, 8192]);
        assert_eq!(p.free_buffers(), 2);
        assert!(p.kept_bytes() <= 64 << 10 && p.kept_bytes() >= 12288);
        assert_eq!(g.live_bytes(), p.kept_bytes());
        // The next large run allocates again and again keeps only what fits.
        run(&mut p, &[1 << 20]);
        assert!(p.kept_bytes() <= 64 << 10);
        // A budget too small for anything: nothing is kept, and an older grant goes.
        g.set_budget(0);
        run(&mut p, &[1 << 20, 100]);
        assert!(
            p.kept_bytes() <= (64 << 10),
            "a lower budget keeps existing grants"
        );
        let (g0, mut p0) = pool(0);
        run(&mut p0, &[100, 200]);
        assert_eq!(
            (p0.free_buffers(), p0.kept_bytes(), g0.live_bytes()),
            (0, 0, 0)
        );
    }

    #[test]
    fn a_shrinking_run_keeps_its_buffers_while_they_fit() {
        let (g, mut p) = pool(1 << 20);
        run(&mut p, &[100_000, 200_000]);
        let kept = p.kept_bytes();
        run(&mut p, &[50]); // served by a kept buffer; nothing new to hold
        assert_eq!((p.kept_bytes(), p.free_buffers()), (kept, 2));
        assert_eq!(g.live_bytes(), kept);
    }
}
