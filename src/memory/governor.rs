//! `Governor`: a lock-free byte budget. Callers declare what they will allocate (`reserve`), get a
//! [`Grant`] or [`Reservation::Declined`], settle the grant to the bytes really held, and release on drop.
//!
//! Accounting model:
//! - `live_bytes()` is the sum of what outstanding grants currently hold. A grant holds its declared bytes
//!   until it is settled, then the measured bytes. This is the figure the budget is enforced on: live bytes
//!   never exceed the budget in force when the bytes were taken (a later, lower budget keeps existing grants
//!   and only declines new reservations/growth until live bytes fall below it).
//! - `reserved_bytes()` is the sum of what outstanding grants declared, so `reserved - live` shows how far
//!   predictions were off (positive: over-predicted).
//!
//! Orderings: every counter here is a standalone number. No other memory is published or acquired through
//! these atomics (a grant does not hand data to another thread via the governor), so `Relaxed` is enough
//! for all of them. Over-commit is impossible regardless of ordering because the budget check and the add
//! happen in a single compare-exchange on `live`: read-modify-write operations on one atomic are totally
//! ordered (its modification order), and a CAS only succeeds against the latest value.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// A byte budget with live/reserved/peak accounting. See the module doc.
#[derive(Debug)]
pub struct Governor {
    name: &'static str,
    budget: AtomicU64,
    live: AtomicU64,
    reserved: AtomicU64,
    peak_live: AtomicU64,
    grants: AtomicU64,
    declines: AtomicU64,
    growth_declines: AtomicU64,
}

/// The answer to [`Governor::reserve`].
#[must_use = "a dropped Grant releases its bytes at once"]
#[derive(Debug)]
pub enum Reservation {
    /// The bytes are held against the budget until the grant drops.
    Grant(Grant),
    /// Over budget: take the slower path that does not need the memory.
    Declined,
}

impl Reservation {
    /// `Some(grant)` when granted.
    pub fn grant(self) -> Option<Grant> {
        match self {
            Reservation::Grant(g) => Some(g),
            Reservation::Declined => None,
        }
    }

    pub fn is_granted(&self) -> bool {
        matches!(self, Reservation::Grant(_))
    }
}

/// Settling a grant upward would exceed the budget; the grant is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget;

/// A handle to a governor: a process-lifetime one or a shared (e.g. test-local) one.
#[derive(Debug, Clone)]
pub enum GovernorRef {
    Static(&'static Governor),
    Shared(Arc<Governor>),
}

impl From<&'static Governor> for GovernorRef {
    fn from(g: &'static Governor) -> Self {
        GovernorRef::Static(g)
    }
}

impl From<Arc<Governor>> for GovernorRef {
    fn from(g: Arc<Governor>) -> Self {
        GovernorRef::Shared(g)
    }
}

impl GovernorRef {
    /// Reserve on the referenced governor; the grant keeps a clone of this handle.
    pub fn reserve(&self, bytes: u64) -> Reservation {
        self.get().reserve_with(self.clone(), bytes)
    }

    pub fn get(&self) -> &Governor {
        match self {
            GovernorRef::Static(g) => g,
            GovernorRef::Shared(g) => g,
        }
    }
}

/// Bytes held against a [`Governor`]'s budget; released when dropped.
#[derive(Debug)]
pub struct Grant {
    gov: GovernorRef,
    declared: u64,
    held: u64,
}

impl Grant {
    /// Bytes declared at `reserve` time.
    pub fn declared_bytes(&self) -> u64 {
        self.declared
    }

    /// Bytes this grant currently holds against the budget (declared until settled).
    pub fn held_bytes(&self) -> u64 {
        self.held
    }

    /// Adjust the grant to the bytes really held. Shrinking always succeeds; growing is checked against
    /// the budget like a new reservation and fails with [`OverBudget`] (grant unchanged) if it does not fit.
    pub fn settle(&mut self, actual_bytes: u64) -> Result<(), OverBudget> {
        if actual_bytes == self.held {
            // The steady state (a buffer reused at its size): no write to the shared counters,
            // which every lane settling its own grant would otherwise pass between caches.
            return Ok(());
        }
        let gov = self.gov.get();
        if actual_bytes < self.held {
            gov.live.fetch_sub(self.held - actual_bytes, Relaxed);
        } else if !gov.try_take(actual_bytes - self.held) {
            gov.growth_declines.fetch_add(1, Relaxed);
            return Err(OverBudget);
        }
        self.held = actual_bytes;
        Ok(())
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        let gov = self.gov.get();
        gov.live.fetch_sub(self.held, Relaxed);
        gov.reserved.fetch_sub(self.declared, Relaxed);
    }
}

impl Governor {
    /// A governor with `budget_bytes`; budget 0 declines every non-zero request.
    pub const fn new(budget_bytes: u64) -> Self {
        Self::named("governor", budget_bytes)
    }

    pub const fn named(name: &'static str, budget_bytes: u64) -> Self {
        Governor {
            name,
            budget: AtomicU64::new(budget_bytes),
            live: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
            peak_live: AtomicU64::new(0),
            grants: AtomicU64::new(0),
            declines: AtomicU64::new(0),
            growth_declines: AtomicU64::new(0),
        }
    }

    /// Reserve on a process-lifetime governor (e.g. [`crate::memory::weights`]).
    pub fn reserve(&'static self, bytes: u64) -> Reservation {
        self.reserve_with(GovernorRef::Static(self), bytes)
    }

    /// Reserve on a shared (e.g. test-local) governor; the grant keeps it alive.
    pub fn reserve_shared(self: &Arc<Self>, bytes: u64) -> Reservation {
        self.reserve_with(GovernorRef::Shared(Arc::clone(self)), bytes)
    }

    fn reserve_with(&self, gov: GovernorRef, bytes: u64) -> Reservation {
        if !self.try_take(bytes) {
            self.declines.fetch_add(1, Relaxed);
            return Reservation::Declined;
        }
        self.reserved.fetch_add(bytes, Relaxed);
        self.grants.fetch_add(1, Relaxed);
        Reservation::Grant(Grant {
            gov,
            declared: bytes,
            held: bytes,
        })
    }

    /// CAS loop: add `bytes` to live iff the result stays within the budget.
    fn try_take(&self, bytes: u64) -> bool {
        if bytes == 0 {
            return true;
        }
        // Relaxed: the budget is an independent setting; a racing `set_budget` is seen by the next
        // reservation at the latest, which is the documented policy.
        let budget = self.budget.load(Relaxed);
        let mut cur = self.live.load(Relaxed);
        loop {
            let Some(next) = cur.checked_add(bytes).filter(|&n| n <= budget) else {
                return false;
            };
            // Relaxed on success and failure: see the module doc; the CAS itself is what serializes.
            match self.live.compare_exchange_weak(cur, next, Relaxed, Relaxed) {
                Ok(_) => {
                    self.peak_live.fetch_max(next, Relaxed);
                    return true;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// Set the budget for future reservations; existing grants are kept even if now over budget.
    pub fn set_budget(&self, budget_bytes: u64) {
        self.budget.store(budget_bytes, Relaxed);
    }

    pub fn name(&self) -> &'static str {
        self.name
    }
    pub fn budget_bytes(&self) -> u64 {
        self.budget.load(Relaxed)
    }
    /// Sum of bytes outstanding grants hold (measured once settled).
    pub fn live_bytes(&self) -> u64 {
        self.live.load(Relaxed)
    }
    /// Sum of bytes outstanding grants declared.
    pub fn reserved_bytes(&self) -> u64 {
        self.reserved.load(Relaxed)
    }
    /// Highest `live_bytes` ever reached.
    pub fn peak_live_bytes(&self) -> u64 {
        self.peak_live.load(Relaxed)
    }
    /// Reservations granted (lifetime count).
    pub fn grants(&self) -> u64 {
        self.grants.load(Relaxed)
    }
    /// Reservations declined (lifetime count).
    pub fn declines(&self) -> u64 {
        self.declines.load(Relaxed)
    }
    /// `Grant::settle` growths refused (lifetime count).
    pub fn growth_declines(&self) -> u64 {
        self.growth_declines.load(Relaxed)
    }

    pub fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "budget_bytes": self.budget_bytes(),
            "live_bytes": self.live_bytes(),
            "reserved_bytes": self.reserved_bytes(),
            "peak_live_bytes": self.peak_live_bytes(),
            "grants": self.grants(),
            "declines": self.declines(),
            "growth_declines": self.growth_declines(),
        })
    }
}
