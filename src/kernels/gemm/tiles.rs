//! The one place parallel GEMM tasks obtain write access to C: a grid of disjoint rectangular
//! tiles over a row-major matrix, each of which can be claimed at most once.
//!
//! Soundness argument: the grid is built from an exclusive borrow of C, so nothing else can see
//! C while it lives; tiles partition the `m x n` region into disjoint row/column ranges, so no
//! element belongs to two tiles; an atomic flag per tile makes a second claim panic, so at most
//! one [`Tile`] per region exists; and a `Tile` hands out one row slice at a time (`&mut self`).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};

/// Claim words kept inline: grids up to `64 * INLINE_WORDS` tiles allocate nothing per call.
const INLINE_WORDS: usize = 16;

/// One claim bit per tile; inline for small grids, on the heap beyond.
enum Claims {
    Inline([AtomicU64; INLINE_WORDS]),
    Heap(Vec<AtomicU64>),
}

impl Claims {
    fn new(tiles: usize) -> Claims {
        let words = tiles.div_ceil(64);
        if words <= INLINE_WORDS {
            Claims::Inline([const { AtomicU64::new(0) }; INLINE_WORDS])
        } else {
            Claims::Heap((0..words).map(|_| AtomicU64::new(0)).collect())
        }
    }

    /// Sets tile `t`'s bit; `true` when it was already set.
    fn set(&self, t: usize) -> bool {
        let words = match self {
            Claims::Inline(w) => &w[..],
            Claims::Heap(w) => &w[..],
        };
        let bit = 1u64 << (t % 64);
        words[t / 64].fetch_or(bit, Ordering::AcqRel) & bit != 0
    }
}

pub(super) struct TileGrid<'a> {
    ptr: *mut f32,
    m: usize,
    n: usize,
    ld: usize,
    row_blk: usize,
    col_blk: usize,
    tiles_n: usize,
    count: usize,
    claimed: Claims,
    _c: PhantomData<&'a mut [f32]>,
}

// SAFETY: the grid only gives out `Tile`s over disjoint regions, each at most once (atomic claim
// flags), so sharing the grid across threads cannot create aliasing `&mut` access.
unsafe impl Sync for TileGrid<'_> {}

impl<'a> TileGrid<'a> {
    /// Splits the `m x n` matrix at `c` (row stride `ld`) into `row_blk x col_blk` tiles.
    pub(super) fn new(
        c: &'a mut [f32],
        m: usize,
        n: usize,
        ld: usize,
        row_blk: usize,
        col_blk: usize,
    ) -> Self {
        assert!(row_blk > 0 && col_blk > 0);
        if m > 0 && n > 0 {
            assert!(n <= ld, "ldc {ld} < n {n}");
            assert!(
                c.len() >= (m - 1) * ld + n,
                "C holds {} elements, needs {}",
                c.len(),
                (m - 1) * ld + n
            );
        }
        let tiles_m = m.div_ceil(row_blk);
        let tiles_n = n.div_ceil(col_blk);
        let count = tiles_m * tiles_n;
        TileGrid {
            ptr: c.as_mut_ptr(),
            m,
            n,
            ld,
            row_blk,
            col_blk,
            tiles_n,
            count,
            claimed: Claims::new(count),
            _c: PhantomData,
        }
    }

    pub(super) fn count(&self) -> usize {
        self.count
    }

    /// Exclusive access to tile `t` (row-major tile order). Panics if `t` was already claimed.
    pub(super) fn claim(&self, t: usize) -> Tile<'_> {
        assert!(t < self.count, "GEMM tile {t} of {}", self.count);
        assert!(!self.claimed.set(t), "GEMM tile {t} claimed twice");
        let (ti, tj) = (t / self.tiles_n, t % self.tiles_n);
        let (row0, col0) = (ti * self.row_blk, tj * self.col_blk);
        let rows = self.row_blk.min(self.m - row0);
        let cols = self.col_blk.min(self.n - col0);
        Tile {
            grid: self,
            row0,
            col0,
            rows,
            cols,
        }
    }
}

/// Exclusive write access to rows `row0..row0+rows`, columns `col0..col0+cols` of C.
pub(super) struct Tile<'g> {
    grid: &'g TileGrid<'g>,
    pub(super) row0: usize,
    pub(super) col0: usize,
    pub(super) rows: usize,
    pub(super) cols: usize,
}

impl Tile<'_> {
    /// Row `r` of the tile (`cols` elements).
    pub(super) fn row(&mut self, r: usize) -> &mut [f32] {
        assert!(r < self.rows);
        let off = (self.row0 + r) * self.grid.ld + self.col0;
        // SAFETY: off + cols <= (m-1)*ld + n <= c.len() (checked in `new`), so the range is inside
        // the borrowed C; it lies in this tile's region, which no other Tile covers (claim flags),
        // and `&mut self` ensures only one row slice of this tile is live at a time.
        unsafe { std::slice::from_raw_parts_mut(self.grid.ptr.add(off), self.cols) }
    }
}
