//! A constant B (weight) prepacked once into the panel layout the micro-kernel reads, so the
//! GEMM driver skips packing B on every call and the M = 1 GEMV streams it front to back.
//!
//! Layout: `op(B)` (`k x n`) cut into `nr`-wide column panels (the kernel table's `NR`); panel
//! `q` holds, for every `p` in `0..k`, the `nr` values `op(B)(p, q*nr ..)` contiguously, zero
//! padded past `n`. Panel `q` starts at `q * k * nr`, so the `KC` slice the driver wants
//! (`pc..pc+kc`) is the contiguous run at `q * k * nr + pc * nr` of length `kc * nr`: exactly the
//! bytes `driver::pack_b` would have written for it.

use super::{GemmKernels, Op};
use crate::memory::{weight_arena, ArenaBuf};

/// `op(B)` in full-K column panels for one kernel table. See the module doc.
pub struct PackedB {
    k: usize,
    n: usize,
    pub(super) kern: &'static GemmKernels,
    /// A piece of the huge-page weight arena ([`crate::memory::weight_arena`]).
    data: ArenaBuf<f32>,
}

impl std::fmt::Debug for PackedB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedB")
            .field("k", &self.k)
            .field("n", &self.n)
            .field("nr", &self.kern.nr)
            .finish()
    }
}

impl PackedB {
    /// Packs `op(b)` (`k x n`; stored `n x k` when `b.trans`) for the kernels of `kern`.
    /// `None` when the packed buffer cannot be allocated (or its size overflows).
    pub(super) fn new(
        kern: &'static GemmKernels,
        b: Op<'_>,
        k: usize,
        n: usize,
    ) -> Option<PackedB> {
        let nr = kern.nr;
        let panels = n.div_ceil(nr);
        let len = panels.checked_mul(k)?.checked_mul(nr)?;
        // From the huge-page weight arena, whatever the size (measured: 16 MiB streamed
        // 1.3-1.7x faster on 2 MiB pages than on 4 KiB); a refused region is a decline.
        let mut data = weight_arena().try_alloc::<f32>(len).ok()?;
        for (q, panel) in data
            .chunks_exact_mut((k * nr).max(1))
            .take(panels)
            .enumerate()
        {
            pack_panel(b, k, q * nr, nr.min(n - q * nr), nr, panel);
        }
        Some(PackedB { k, n, kern, data })
    }

    /// The reduction length (rows of `op(B)`).
    pub fn k(&self) -> usize {
        self.k
    }

    /// The output width (columns of `op(B)`).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Bytes taken from the weight arena, alignment padding included (what the weight cache
    /// settles its grant to).
    pub fn bytes(&self) -> usize {
        self.data.taken_bytes()
    }

    /// Bytes [`PackedB::new`] will hold for a `k x n` weight with panels `nr` wide (padding
    /// and alignment slack included): the weight cache's reservation.
    pub fn predicted_bytes(k: usize, n: usize, nr: usize) -> usize {
        (n.div_ceil(nr) * k * nr + 64) * std::mem::size_of::<f32>()
    }

    /// Rows `pc..pc+kc` of panel `q` (`kc * nr` values, row-major, `nr` per row).
    pub(super) fn panel(&self, q: usize, pc: usize, kc: usize) -> &[f32] {
        let nr = self.kern.nr;
        &self.data[q * self.k * nr + pc * nr..][..kc * nr]
    }
}

/// Writes `op(B)(0..k, j0..j0+w)` into `out` as `k` rows of `nr` (columns past `w` zero).
/// `out` holds at least `k * nr` values; the transposed source is gathered column by column.
pub(super) fn pack_panel(b: Op<'_>, k: usize, j0: usize, w: usize, nr: usize, out: &mut [f32]) {
    let out = &mut out[..k * nr];
    if b.trans {
        // op(B)(p, j) = b[j * ld + p]: each stored row is one panel column.
        if w < nr {
            out.fill(0.0);
        }
        for c in 0..w {
            let src = &b.data[(j0 + c) * b.ld..][..k];
            for (p, &v) in src.iter().enumerate() {
                out[p * nr + c] = v;
            }
        }
    } else {
        for (p, dst) in out.chunks_exact_mut(nr).enumerate() {
            let at = p * b.ld + j0;
            dst[..w].copy_from_slice(&b.data[at..at + w]);
            dst[w..].fill(0.0);
        }
    }
}
