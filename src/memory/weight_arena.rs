//! `WeightArena`: packed weights of any size on transparent huge pages, without one mapping each.
//!
//! Decode at M = 1 streams every packed weight once per token, so its time is those bytes over
//! the read bandwidth; read from 4 KiB pages they come ~1.5x slower than from 2 MiB pages
//! (`examples/matmul_nbits_stream --layers`). Most per-layer matrices are far below what a
//! buffer of its own could put on huge pages ([`super::HUGE_PAGE_MIN_BYTES`]), so they are carved
//! out of shared regions instead:
//!
//! * A **region** is an anonymous mapping whose start and length are multiples of 2 MiB, advised
//!   `MADV_HUGEPAGE` before it is touched ([`crate::os::mapped::Mapping`], where the `unsafe`
//!   lives). Pieces are bump-allocated at [`ALIGN`] (64-byte) boundaries in claim order, so the
//!   matrices of one decode step, packed one after the other, lie back to back (one stream for
//!   the hardware prefetcher too). Pieces are never reused or moved.
//! * **Lifetime**: every piece holds a reference to its region; a region is unmapped when its
//!   last piece drops. The arena itself keeps only a weak reference to the region it is filling,
//!   so a session release that drops the last weights returns the memory to the OS.
//! * **Sizes**: a shared region maps [`REGION_BYTES`] (32 MiB). A claim larger than
//!   [`OWN_REGION_MIN_BYTES`] (8 MiB) that does not fit the current region gets a region of its
//!   own, its size rounded up to 2 MiB, and the current region stays current; a smaller claim
//!   that does not fit starts a new shared region (the old one's tail stays unused).
//!
//! **Slack policy and bound.** Mapped but never-touched pages hold no memory, so the unused tail of
//! a region (up to 32 MiB of address space) costs nothing; what a region can hold beyond its live
//! pieces is (a) the rest of the last huge page it has touched, under 2 MiB per live region, and
//! (b) pieces already dropped while a neighbour in the same region lives (they come back when the
//! region's last piece drops). A tiny weight alone in a fresh region therefore costs at most one
//! 2 MiB huge page, not 32 MiB. Alignment padding is under 64 bytes per piece.
//!
//! **Accounting.** The governor is charged per weight: each packed weight's grant is settled to the
//! bytes its pieces took (alignment padding included; see `PackedNBits::bytes`). The slack above is
//! not charged to any grant; [`WeightArena::stats`] (`memory.weight_arena` in `RcpuEp_StatsJson`)
//! shows it: `touched_bytes` (the most the regions can hold: used bytes rounded up to huge pages),
//! `live_bytes` (pieces alive) and `slack_bytes` (their difference).
//!
//! **Failure** is a decline, never an abort: a region that cannot be mapped (the kernel refuses,
//! or the optional mapped-bytes limit, [`WeightArena::set_mapped_limit`], would be passed) makes
//! [`WeightArena::try_alloc`] return an error; the packer then returns `None` and the node
//! computes from the original weight.

use super::try_alloc::AllocError;
use crate::os::mapped::{MappedBuf, Mapping, Plain, HUGE_PAGE};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Weak};

/// A piece of a weight region: `len` elements of `T`, 64-byte aligned, zeroed when claimed.
pub type ArenaBuf<T> = MappedBuf<T>;

/// Alignment of every piece (a cache line, and a 64-byte load never straddles two).
pub const ALIGN: usize = 64;
/// Bytes mapped per shared region.
pub const REGION_BYTES: usize = 32 << 20;
/// In the process-wide arena, claims above this that do not fit the current region get a
/// region of their own.
pub const OWN_REGION_MIN_BYTES: usize = REGION_BYTES / 4;

/// A bump arena of huge-page regions; see the module doc.
#[derive(Debug)]
pub struct WeightArena {
    region_bytes: usize,
    /// Claims above this that do not fit the current region get a region of their own.
    own_min: usize,
    /// The shared region being filled (weak: it dies with its last piece).
    current: Mutex<Weak<Mapping>>,
    /// Every region made and its mapped length; dead ones are pruned when seen.
    regions: Mutex<Vec<(Weak<Mapping>, usize)>>,
    /// Most bytes all live regions may map together (`usize::MAX`: no limit).
    limit: AtomicUsize,
    regions_made: AtomicU64,
    failures: AtomicU64,
}

/// Figures for the stats JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArenaStats {
    /// Regions alive now.
    pub regions: usize,
    /// Regions made so far.
    pub regions_made: u64,
    /// Claims refused because no region could be mapped.
    pub failures: u64,
    /// Address space mapped by live regions.
    pub mapped_bytes: usize,
    /// Bytes handed out (bump offsets summed).
    pub used_bytes: usize,
    /// Upper bound of the memory the live regions hold: used bytes rounded up to huge pages.
    pub touched_bytes: usize,
    /// Bytes of live pieces.
    pub live_bytes: usize,
    /// Regions whose huge-page advice was taken.
    pub advised_regions: usize,
}

impl WeightArena {
    /// An arena whose shared regions map `region_bytes` (rounded up to 2 MiB); claims above a
    /// quarter of that which do not fit the current region get a region of their own.
    pub fn new(region_bytes: usize) -> Self {
        let region_bytes = region_bytes.max(1).next_multiple_of(HUGE_PAGE);
        WeightArena {
            region_bytes,
            own_min: region_bytes / 4,
            current: Mutex::new(Weak::new()),
            regions: Mutex::new(Vec::new()),
            limit: AtomicUsize::new(usize::MAX),
            regions_made: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    /// Caps the bytes all live regions may map together (`None`: no cap). A claim that would
    /// need a region beyond it fails (a decline for the packer). Existing regions are kept.
    pub fn set_mapped_limit(&self, bytes: Option<usize>) {
        self.limit.store(bytes.unwrap_or(usize::MAX), Relaxed);
    }

    /// `len` zeroed elements of `T`, 64-byte aligned, in the current region or a new one; an
    /// error (never an abort) when no region can be had.
    pub fn try_alloc<T: Plain>(&self, len: usize) -> Result<ArenaBuf<T>, AllocError> {
        let err = AllocError {
            elems: len,
            elem_bytes: std::mem::size_of::<T>(),
        };
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or(err)?;
        let mut cur = self.current.lock();
        if let Some(m) = cur.upgrade() {
            if let Some(b) = MappedBuf::claim(&m, len, ALIGN) {
                return Ok(b);
            }
        }
        let own = bytes > self.own_min;
        let size = if own { bytes } else { self.region_bytes };
        let Some(m) = self.map_region(size) else {
            self.failures.fetch_add(1, Relaxed);
            log::info!("weight arena: no region of {size} bytes could be mapped");
            return Err(err);
        };
        let b = MappedBuf::claim(&m, len, ALIGN).ok_or(err)?;
        if !own {
            *cur = Arc::downgrade(&m);
        }
        Ok(b)
    }

    /// A fresh region of at least `bytes`, within the mapped-bytes limit.
    fn map_region(&self, bytes: usize) -> Option<Arc<Mapping>> {
        let mut regions = self.regions.lock();
        regions.retain(|(w, _)| w.strong_count() > 0);
        let mapped: usize = regions.iter().map(|(_, l)| l).sum();
        let want = bytes.max(1).checked_next_multiple_of(HUGE_PAGE)?;
        if mapped.checked_add(want)? > self.limit.load(Relaxed) {
            return None;
        }
        let m = Arc::new(Mapping::new(want).ok()?);
        regions.push((Arc::downgrade(&m), m.len()));
        self.regions_made.fetch_add(1, Relaxed);
        Some(m)
    }

    pub fn stats(&self) -> ArenaStats {
        let live: Vec<Arc<Mapping>> = {
            let mut regions = self.regions.lock();
            regions.retain(|(w, _)| w.strong_count() > 0);
            regions.iter().filter_map(|(w, _)| w.upgrade()).collect()
        };
        let mut s = ArenaStats {
            regions: live.len(),
            regions_made: self.regions_made.load(Relaxed),
            failures: self.failures.load(Relaxed),
            ..ArenaStats::default()
        };
        for m in &live {
            s.mapped_bytes += m.len();
            s.used_bytes += m.used();
            s.touched_bytes += m.touched_bound();
            s.live_bytes += m.live();
            s.advised_regions += usize::from(m.advised());
        }
        s
    }

    /// [`Self::stats`] as JSON (with `slack_bytes` = touched - live).
    pub fn stats_json(&self) -> serde_json::Value {
        let s = self.stats();
        serde_json::json!({
            "regions": s.regions,
            "regions_made": s.regions_made,
            "failures": s.failures,
            "advised_regions": s.advised_regions,
            "mapped_bytes": s.mapped_bytes,
            "used_bytes": s.used_bytes,
            "touched_bytes": s.touched_bytes,
            "live_bytes": s.live_bytes,
            "slack_bytes": s.touched_bytes.saturating_sub(s.live_bytes),
        })
    }
}

static ARENA: LazyLock<WeightArena> = LazyLock::new(|| WeightArena::new(REGION_BYTES));

/// The process-wide arena the packed weights are claimed from.
pub fn weight_arena() -> &'static WeightArena {
    &ARENA
}
