//! The property of the `fuzz/` target `matmul_shapes` (tests/common/matmul_shapes_fuzz.rs), run
//! on stable as a bounded, deterministic test: 20 000 fixed-seed xorshift cases, the planning's
//! single allocations measured by a counting global allocator.

use crate::matmul_shapes_fuzz;
use crate::rng::Rng;
use matmul_shapes_fuzz::{property, AllocProbe, Draw};

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `System` with layout `l` (every allocation goes through it).
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LARGEST.fetch_max(new, Relaxed);
        // SAFETY: as for `dealloc`; `new` is the caller's requested size.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

struct Largest;

impl AllocProbe for Largest {
    fn reset(&self) {
        LARGEST.store(0, Relaxed);
    }
    fn largest(&self) -> usize {
        LARGEST.load(Relaxed)
    }
}

impl Draw for Rng {
    fn next(&mut self) -> u64 {
        self.next_u64()
    }
}

#[test]
fn matmul_shapes_never_panic_allocate_boundedly_and_match_numpy() {
    let _serial = crate::serial();
    let mut r = Rng(0x5eed_4d61_744d_756c);
    let (mut computed, cases) = (0, 20_000);
    for i in 0..cases {
        let seed = r.0;
        let ok = catch_unwind(AssertUnwindSafe(|| property(&mut r, &Largest)));
        match ok {
            Ok(true) => computed += 1,
            Ok(false) => {}
            Err(_) => panic!("case {i} (rng state {seed:#x}) failed"),
        }
    }
    println!("{cases} cases, {computed} computed and compared");
    assert!(
        computed > cases / 20,
        "only {computed} cases reached the compute path"
    );
}
