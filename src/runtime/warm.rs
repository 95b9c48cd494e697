//! What an idle worker reads ahead of the next job ("Idle reads" in [`super::park`]).
//!
//! A hint ([`IdleHint`]) names a byte range inside the bytes of an owner ([`WarmBytes`], e.g. a
//! packed weight) that the hint holds only weakly: a hint never keeps memory alive, and a worker
//! reads the range only while it holds the owner (upgraded when it starts the range, dropped
//! when the range is done, a newer hint arrives or the worker parks), so a range whose owner is
//! gone is skipped, never read. The worker reads one byte of every cache line of a step with
//! ordinary loads: the lines are really fetched, at the rate the memory delivers them.
//!
//! Why loads and not prefetch instructions (what the worker issued before): on the Zen 4 host
//! of issue 17 a spinning worker issued `prefetcht1` for ~33 MB a Qwen2-0.5B decode token, far
//! faster than one core fetches (a temporary 14 MB hint between two runs went through within the
//! 200 us the worker spins), so most of those lines were never fetched; with loads it reads
//! 12-15 MB a token and is cut by the next job in 119 of 121 calls. Qwen decode past 64, this
//! build against the one that prefetched (old / new per round, seven runs of 24 rounds; the
//! journal's idle-read measurements, docs/journal/measurements-2026-12.md): 1.006 with the vCPUs
//! near (56 rounds, 29 faster), 1.011 apart (80, 48 faster).

use parking_lot::Mutex;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// Bytes a worker reads between two looks at the epoch: 16 cache lines, a fraction of a
/// microsecond even when every line comes from memory.
pub const STEP_BYTES: usize = 1024;
/// The most bytes one hint names (the rest of a longer range is dropped): a bound on the
/// traffic of one hint, whatever the caller asked.
pub const HINT_MAX_BYTES: usize = 1 << 20;

/// Something that holds bytes an idle worker may read ahead (a packed weight).
pub trait WarmBytes: Send + Sync {
    /// The bytes; a hint's range is an offset range into them.
    fn warm_bytes(&self) -> &[u8];
}

impl WarmBytes for Vec<u8> {
    fn warm_bytes(&self) -> &[u8] {
        self
    }
}

/// The range an idle worker should read (see the module documentation).
#[derive(Clone)]
pub struct IdleHint {
    owner: Weak<dyn WarmBytes>,
    range: Range<usize>,
}

impl IdleHint {
    /// `range` of `owner`'s bytes, clipped to those bytes and to [`HINT_MAX_BYTES`].
    pub fn new<T: WarmBytes + 'static>(owner: &Arc<T>, range: Range<usize>) -> IdleHint {
        let end = range
            .end
            .min(owner.warm_bytes().len())
            .min(range.start.saturating_add(HINT_MAX_BYTES));
        let owner: Weak<dyn WarmBytes> = Arc::downgrade(owner) as Weak<dyn WarmBytes>;
        IdleHint {
            owner,
            range: range.start..end.max(range.start),
        }
    }

    /// Bytes the hint names.
    pub fn bytes(&self) -> usize {
        self.range.len()
    }
}

/// The pool's hint slot: the latest hint, and a generation bumped after every post.
#[derive(Default)]
pub(crate) struct HintSlot {
    gen: AtomicU64,
    hint: Mutex<Option<IdleHint>>,
}

impl HintSlot {
    /// Replaces the hint (`None` cancels what a worker has left).
    pub(crate) fn post(&self, hint: Option<IdleHint>) {
        let old = std::mem::replace(&mut *self.hint.lock(), hint);
        // Release: a worker that loads the new generation (Acquire) and then takes the lock
        // finds this hint or a newer one (the unlock above happens before the bump).
        self.gen.fetch_add(1, Ordering::Release);
        // The old hint's weak reference goes outside the lock.
        drop(old);
    }
}

/// A worker's progress through the latest hint it took.
#[derive(Default)]
pub(crate) struct Cursor {
    gen: u64,
    hint: Option<IdleHint>,
    at: usize,
    /// The hint's owner while the worker reads its range: upgraded once per range, not per step
    /// (an upgrade is a locked instruction, which would wait for the previous step's loads and
    /// so serialise the steps), and dropped when the range is done, when a newer hint replaces
    /// it, or when the worker parks.
    held: Option<Arc<dyn WarmBytes>>,
}

impl Cursor {
    /// One step: takes a newer hint from `slot` if there is one, then reads the next
    /// [`STEP_BYTES`] of its range; the bytes read (0: nothing left).
    pub(crate) fn step(&mut self, slot: &HintSlot) -> usize {
        // Acquire: pairs with the Release bump in `post` (see there).
        let g = slot.gen.load(Ordering::Acquire);
        if g != self.gen {
            self.held = None;
            self.hint = slot.hint.lock().clone();
            self.gen = g;
            self.at = 0;
        }
        let Some(h) = &self.hint else {
            return 0;
        };
        let start = h.range.start + self.at;
        let n = STEP_BYTES.min(h.range.end.saturating_sub(start));
        if n != 0 && self.held.is_none() {
            self.held = h.owner.upgrade();
        }
        match self
            .held
            .as_deref()
            .map(|o| o.warm_bytes().get(start..start + n))
        {
            Some(Some(bytes)) if n != 0 => {
                touch(bytes);
                self.at += n;
                n
            }
            // Done, or its owner is gone (or holds fewer bytes now).
            _ => {
                self.drop_rest();
                0
            }
        }
    }

    /// Whether some of the current hint is left.
    pub(crate) fn pending(&self) -> bool {
        self.hint.is_some()
    }

    /// Drops what is left of the current hint (done, or a worker about to park: stale by the
    /// time it wakes again).
    pub(crate) fn drop_rest(&mut self) {
        self.hint = None;
        self.held = None;
    }
}

/// Reads one byte of every cache line of `bytes` (and its last byte), so each line is fetched.
fn touch(bytes: &[u8]) {
    let mut acc = 0u8;
    for i in (0..bytes.len()).step_by(64) {
        acc ^= bytes[i];
    }
    if let Some(&b) = bytes.last() {
        acc ^= b;
    }
    std::hint::black_box(acc);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(c: &mut Cursor, slot: &HintSlot) -> usize {
        let mut total = 0;
        loop {
            match c.step(slot) {
                0 => return total,
                n => total += n,
            }
        }
    }

    /// Seen failing with the clip to `HINT_MAX_BYTES` dropped from `IdleHint::new`.
    #[test]
    fn a_hint_is_read_once_clipped_to_its_owner_and_the_bound() {
        let a = Arc::new(vec![1u8; 5000]);
        assert_eq!(
            IdleHint::new(&a, 1000..9000).bytes(),
            4000,
            "the owner's bytes"
        );
        assert_eq!(IdleHint::new(&a, 6000..7000).bytes(), 0, "past them");
        let b = Arc::new(vec![2u8; 3 * HINT_MAX_BYTES]);
        let h = IdleHint::new(&b, 100..3 * HINT_MAX_BYTES);
        assert_eq!(h.bytes(), HINT_MAX_BYTES, "the bound");
        let slot = HintSlot::default();
        slot.post(Some(h));
        let mut c = Cursor::default();
        assert_eq!(c.step(&slot), STEP_BYTES, "a step reads STEP_BYTES");
        assert!(c.pending());
        assert_eq!(read_all(&mut c, &slot) + STEP_BYTES, HINT_MAX_BYTES);
        assert!(!c.pending());
        assert_eq!(c.step(&slot), 0, "a hint is read once");
        assert_eq!(
            Arc::strong_count(&b),
            1,
            "the cursor holds no owner once done"
        );
    }

    /// Seen failing with the hint holding its owner strongly.
    #[test]
    fn a_range_whose_owner_is_gone_is_skipped() {
        let a = Arc::new(vec![1u8; 3000]);
        let h = IdleHint::new(&a, 0..3000);
        drop(a);
        let slot = HintSlot::default();
        slot.post(Some(h));
        let mut c = Cursor::default();
        assert_eq!(read_all(&mut c, &slot), 0, "nothing read");
        assert!(!c.pending());
    }

    #[test]
    fn a_new_post_replaces_the_rest_and_none_cancels() {
        let a = Arc::new(vec![1u8; 8 * STEP_BYTES]);
        let h = IdleHint::new(&a, 0..8 * STEP_BYTES);
        let slot = HintSlot::default();
        slot.post(Some(h.clone()));
        let mut c = Cursor::default();
        c.step(&slot);
        c.step(&slot);
        slot.post(Some(h));
        assert_eq!(
            read_all(&mut c, &slot),
            8 * STEP_BYTES,
            "from the new hint's start"
        );
        slot.post(Some(IdleHint::new(&a, 0..STEP_BYTES)));
        slot.post(None);
        assert_eq!(c.step(&slot), 0);
        assert!(!c.pending());
    }
}
