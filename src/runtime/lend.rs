//! Lending a *borrowed* (non-`'static`) closure to the long-lived worker lanes for exactly the
//! duration of one call: the one non-FFI unsafe primitive of the runtime, used by `lanes` to hand
//! each dispatch's job to the workers (the wake-up half of that protocol is in `park`).
//!
//! Why this is sound, in prose (the type's documentation states the handshake precisely):
//! the job is a closure on the caller's stack that borrows the caller's data, and the workers
//! are threads that outlive the call. A worker may therefore only ever reach the closure while
//! the call that lent it is still inside [`FnLender::lend`]. `lend` publishes a pointer to the
//! closure, runs the caller's own share, withdraws the pointer, and then waits until the count of
//! workers inside the closure is zero; a worker counts itself in *before* it looks at the pointer
//! and out only after it is done with the closure (also when the closure panics). With every one
//! of these accesses sequentially consistent, a worker that saw the pointer was counted before
//! the withdrawal and so is waited for; a worker that looks after the withdrawal finds no pointer
//! to this closure.
//! So when `lend` returns no worker holds the closure, and the borrow it carried ends in time.
//! The only `unsafe` is the one dereference of the published pointer in [`FnLender::borrow`].
#![allow(unsafe_code)]

use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// The closure type the lanes run: called with the lane index.
pub type LaneFn<'a> = dyn Fn(usize) + Sync + 'a;

/// Lends a borrowed closure to other threads for exactly the duration of [`FnLender::lend`].
///
/// Protocol (two atomics, both sides `SeqCst`, a Dekker-style handshake):
/// - the lender stores a pointer to its closure reference in `ptr`, runs its body, then stores
///   null in `ptr` ("revoke") and waits until `users` is 0 before returning;
/// - a borrower first increments `users`, then loads `ptr`; if non-null it calls the closure
///   and finally decrements `users` (also on unwind, through a guard).
///
/// Why no borrower can touch the closure after `lend` returns: all four operations are
/// `SeqCst`, so they sit in one total order S. A borrower that loaded the non-null pointer did
/// so before the revoking store in S (any later load sees null or another lender's pointer,
/// and `lend` refuses to overwrite a live pointer); its increment precedes its load, hence
/// precedes the revoke, hence precedes the lender's wait loads of `users`, which therefore
/// count it until its decrement (`SeqCst`, so also a release that publishes everything the
/// closure wrote to the lender's acquiring load).
pub struct FnLender {
    ptr: AtomicPtr<()>,
    users: AtomicUsize,
}

impl Default for FnLender {
    fn default() -> Self {
        Self::new()
    }
}

impl FnLender {
    pub const fn new() -> Self {
        Self {
            ptr: AtomicPtr::new(ptr::null_mut()),
            users: AtomicUsize::new(0),
        }
    }

    /// Publishes `f` to borrowers, runs `body`, revokes `f` and waits (calling `idle(i)` for
    /// wait iteration `i`) until no borrower is still inside `f`; then returns `body`'s value
    /// or re-raises its panic. Panics (before publishing anything) if `f` is already lent.
    /// A panic inside `idle` aborts the process (unwinding out of the wait would be unsound).
    pub fn lend<R>(
        &self,
        f: &LaneFn<'_>,
        body: impl FnOnce() -> R,
        idle: &mut dyn FnMut(u64),
    ) -> R {
        let slot: &LaneFn<'_> = f;
        let p = &slot as *const &LaneFn<'_> as *mut ();
        // SeqCst: part of the handshake described on the type.
        if self
            .ptr
            .compare_exchange(ptr::null_mut(), p, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            panic!("FnLender::lend: a closure is already lent (nested or concurrent lend)");
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
        // SeqCst: the revoke; see the type's documentation.
        self.ptr.store(ptr::null_mut(), Ordering::SeqCst);
        let mut i = 0u64;
        // SeqCst load: synchronises with every borrower's decrement (a release).
        while self.users.load(Ordering::SeqCst) != 0 {
            let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| idle(i)));
            if step.is_err() {
                std::process::abort();
            }
            i += 1;
        }
        match r {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        }
    }

    /// If a closure is lent right now, calls `g` with it and returns `Some`; else `None`.
    pub fn borrow<R>(&self, g: impl FnOnce(&LaneFn<'_>) -> R) -> Option<R> {
        struct Release<'a>(&'a AtomicUsize);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                // SeqCst (a release): publishes the closure's effects to the lender's wait.
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        // SeqCst: increment before the load below; see the type's documentation.
        self.users.fetch_add(1, Ordering::SeqCst);
        let _release = Release(&self.users);
        let p = self.ptr.load(Ordering::SeqCst) as *const &LaneFn<'_>;
        if p.is_null() {
            return None;
        }
        // SAFETY: a non-null `ptr` points at the `&LaneFn` local of a `lend` call that is still
        // running: `lend` does not return (so neither that local nor the closure it refers to
        // can be dropped) until `users` is 0, and our increment is counted until `_release`
        // drops at the end of this function, after `g` is done with the reference.
        let f: &LaneFn<'_> = unsafe { *p };
        Some(g(f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lender_lends_only_during_lend() {
        let l = FnLender::new();
        assert!(l.borrow(|f| f(0)).is_none());
        let hits = AtomicUsize::new(0);
        let f = |i: usize| {
            hits.fetch_add(i, Ordering::Relaxed);
        };
        l.lend(&f, || l.borrow(|g| g(5)), &mut |_| {});
        assert_eq!(hits.load(Ordering::Relaxed), 5);
        assert!(l.borrow(|f| f(0)).is_none());
    }
}
