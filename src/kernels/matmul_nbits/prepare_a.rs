//! Per-call preparation of A: once per call, shared by every column group.
//!
//! fp32 path: rows copied into a zero-padded buffer of `k_blocks * block_size` columns (so the
//! kernels read whole blocks and the padded weight codes, which are 0, meet a = 0), plus the f32
//! sum of each row over each block (for the zero-point term `-zp * sum(a)`).
//! int8 path: each row quantised per block (symmetric, scale = max|a| / 127, round to nearest
//! even), zero padded, plus the integer sum of each row over each block.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use super::dispatch::{Kernels, AMX_ROWS};
use super::params::NBitsParams;
use crate::kernels::simd::Level;
use crate::memory::Grant;

/// A, prepared for the tile kernels. Row `r` of the active representation starts at `r * kp`;
/// per-block values of row `r` at `r * kb`.
#[derive(Debug, Default)]
pub struct PreparedA {
    /// Padded row length (`k_blocks * block_size`).
    pub kp: usize,
    /// Blocks per row.
    pub kb: usize,
    /// fp32 path: padded A.
    pub f: Vec<f32>,
    /// fp32 path: per (row, block) sum of A.
    pub fsum: Vec<f32>,
    /// int8 path: quantised A.
    pub q: Vec<i8>,
    /// int8 path: per (row, block) scale of A.
    pub qscale: Vec<f32>,
    /// int8 path: per (row, block) sum of quantised A.
    pub qsum: Vec<i32>,
}

impl PreparedA {
    /// Hints row 0's prepared values (the int8 ones with their block scales and sums, else the
    /// f32 ones with their block sums) into this core's L1 cache, all at once. A decode call's
    /// worker lanes read the row that the calling thread has just written: without the hint the
    /// tile meets those lines one by one as its loop reaches them, each a transfer from the
    /// caller's cache (see `driver`).
    pub(crate) fn prefetch_row0(&self, int8: bool) {
        fn hint<T>(v: &[T], n: usize) {
            let v = &v[..n.min(v.len())];
            crate::os::cache::prefetch_l1(v.as_ptr() as usize, std::mem::size_of_val(v));
        }
        if int8 {
            hint(&self.q, self.kp);
            hint(&self.qsum, self.kb);
            hint(&self.qscale, self.kb);
        } else {
            hint(&self.f, self.kp);
            hint(&self.fsum, self.kb);
        }
    }

    /// Prepares the first `m` rows of `a` (row length `p.k`) for `p`'s accuracy level, with the
    /// scalar quantiser.
    pub fn new(a: &[f32], m: usize, p: &NBitsParams) -> PreparedA {
        Self::new_with(&quantize_row_scalar, a, m, p)
    }

    /// [`PreparedA::new`] with the quantiser of `kernels` (bit-identical to the scalar one).
    /// Panics if the CPU lacks the kernels' level (a set from [`Kernels::for_isa`] never does).
    pub fn for_kernels(kernels: &Kernels, a: &[f32], m: usize, p: &NBitsParams) -> PreparedA {
        let lv = Level::require(kernels.isa).unwrap_or_else(|e| panic!("{e}"));
        let quant = |row: &[f32], bs: usize, q: &mut [i8], qs: &mut [f32], qsum: &mut [i32]| {
            (kernels.quant_row)(lv, row, bs, q, qs, qsum)
        };
        Self::new_with(&quant, a, m, p)
    }

    /// [`PreparedA::new`] with a given row quantiser (with [`QuantRowFn`]'s contract; it must be
    /// bit-identical to [`quantize_row_scalar`]).
    fn new_with(quant: &QuantRow, a: &[f32], m: usize, p: &NBitsParams) -> PreparedA {
        // Tests and diagnostics only (kernels go through `with_prepared`, which is fallible).
        let mut out = PreparedA::default();
        if let Err(bytes) = out.refill(quant, a, m, m, p) {
            panic!("PreparedA: cannot allocate {bytes} bytes");
        }
        out
    }

    /// Re-prepares in place, reusing the buffers' capacity (no allocation when they are big
    /// enough). Every element is written on every call: the rows from A, their padding (zeros)
    /// and, on the int8 path, the rows `m..rows` as zero rows (with zero scales and sums) for
    /// kernels that read whole row tiles (AMX). A buffer whose length is unchanged is not
    /// cleared first (a decode step would otherwise fill it twice).
    /// `Err(bytes)` when a buffer cannot grow.
    fn refill(
        &mut self,
        quant: &QuantRow,
        a: &[f32],
        m: usize,
        rows: usize,
        p: &NBitsParams,
    ) -> Result<(), usize> {
        // Sizes the buffer to `n` elements; what it held is overwritten below.
        fn reset<T: Copy + Default>(v: &mut Vec<T>, n: usize) -> Result<(), usize> {
            if v.len() != n {
                v.clear();
                v.try_reserve_exact(n)
                    .map_err(|_| n.saturating_mul(std::mem::size_of::<T>()))?;
                v.resize(n, T::default());
            }
            Ok(())
        }
        let (kb, bs) = (p.k_blocks(), p.block_size);
        let kp = kb * bs;
        (self.kp, self.kb) = (kp, kb);
        debug_assert!(rows >= m);
        let (int8, f32_rows) = if p.int8_compute() { (rows, 0) } else { (0, m) };
        // m * kp <= m * (k + block_size): bounded by A, which exists; `rows` adds fewer than
        // `AMX_ROWS` rows to that.
        reset(&mut self.q, int8 * kp)?;
        reset(&mut self.qscale, int8 * kb)?;
        reset(&mut self.qsum, int8 * kb)?;
        reset(&mut self.f, f32_rows * kp)?;
        reset(&mut self.fsum, f32_rows * kb)?;
        if p.int8_compute() {
            for r in 0..m {
                // The quantiser writes the row's K codes and all `kb` scales and sums.
                quant(
                    &a[r * p.k..(r + 1) * p.k],
                    bs,
                    &mut self.q[r * kp..(r + 1) * kp],
                    &mut self.qscale[r * kb..(r + 1) * kb],
                    &mut self.qsum[r * kb..(r + 1) * kb],
                );
                self.q[r * kp + p.k..(r + 1) * kp].fill(0);
            }
            self.q[m * kp..].fill(0);
            self.qscale[m * kb..].fill(0.0);
            self.qsum[m * kb..].fill(0);
        } else {
            for r in 0..m {
                let row = &a[r * p.k..(r + 1) * p.k];
                self.f[r * kp..r * kp + p.k].copy_from_slice(row);
                self.f[r * kp + p.k..(r + 1) * kp].fill(0.0);
                for b in 0..kb {
                    let blk = &self.f[r * kp + b * bs..r * kp + (b + 1) * bs];
                    self.fsum[r * kb + b] = blk.iter().sum();
                }
            }
        }
        Ok(())
    }

    /// Heap bytes the buffers hold (capacity, not length).
    fn held_bytes(&self) -> u64 {
        let f32s = self.f.capacity() + self.fsum.capacity() + self.qscale.capacity();
        (f32s * 4 + self.qsum.capacity() * 4 + self.q.capacity()) as u64
    }
}

static GROWTHS: AtomicU64 = AtomicU64::new(0);

/// Calls whose prepared-A buffers had to grow (allocate). Stays flat in a warm decode loop;
/// reported in the stats JSON.
pub fn prepared_a_growths() -> u64 {
    GROWTHS.load(Ordering::Relaxed)
}

/// A prepared A parked between calls, with the scratch-budget grant that pays for it.
struct Parked {
    prep: PreparedA,
    grant: Grant,
}

thread_local! {
    /// This thread's parked buffers (taken out while in use, so nested calls stay correct).
    static PARKED: RefCell<Option<Parked>> = const { RefCell::new(None) };
}

/// Runs `f` with `a` prepared for `kernels`, reusing this thread's parked buffers: a decode
/// step allocates nothing here once warm. After `f`, the buffers stay parked only while the
/// process-wide scratch budget grants their bytes; otherwise they are freed.
pub fn with_prepared<R>(
    kernels: &Kernels,
    a: &[f32],
    m: usize,
    p: &NBitsParams,
    f: impl FnOnce(&PreparedA) -> R,
) -> Result<R, String> {
    let lv = Level::require(kernels.isa)?;
    let quant = |row: &[f32], bs: usize, q: &mut [i8], qs: &mut [f32], qsum: &mut [i32]| {
        (kernels.quant_row)(lv, row, bs, q, qs, qsum)
    };
    let parked = PARKED.try_with(|c| c.borrow_mut().take()).ok().flatten();
    let (mut prep, grant) = match parked {
        Some(Parked { prep, grant }) => (prep, Some(grant)),
        None => (PreparedA::default(), None),
    };
    let before = prep.held_bytes();
    // The AMX GEMM reads whole row tiles: zero rows up to the next multiple of `AMX_ROWS`.
    let rows = if kernels.gemm(p.accuracy_level, m).is_some() {
        m.checked_next_multiple_of(AMX_ROWS)
            .ok_or_else(|| format!("MatMulNBits: M={m} rows cannot be padded to {AMX_ROWS}"))?
    } else {
        m
    };
    if let Err(bytes) = prep.refill(&quant, a, m, rows, p) {
        // The grant (if any) and the partly grown buffers are released here.
        return Err(crate::memory::scratch_error(bytes));
    }
    let bytes = prep.held_bytes();
    if bytes > before {
        // Relaxed: a statistic; nothing is published through it.
        GROWTHS.fetch_add(1, Ordering::Relaxed);
    }
    let r = f(&prep);
    let grant = match grant {
        Some(mut g) => g.settle(bytes).is_ok().then_some(g),
        None => crate::memory::scratch_governor().reserve(bytes).grant(),
    };
    if let Some(grant) = grant {
        // During thread teardown the slot is gone and the buffers are simply freed.
        let _ = PARKED.try_with(|c| *c.borrow_mut() = Some(Parked { prep, grant }));
    }
    Ok(r)
}

/// Quantises one row (`row.len()` = K) in blocks of `bs` into `q` (`>= k_blocks * bs`; bytes
/// past K untouched), `qscale` and `qsum` (`k_blocks` each).
/// A SIMD entry runs its quantiser only under its level's token (`kernels/simd.rs`).
/// (The leading [`Level`] is the one minted for the call, `kernels/simd.rs`.)
pub(crate) type QuantRowFn =
    fn(Level, row: &[f32], bs: usize, q: &mut [i8], qscale: &mut [f32], qsum: &mut [i32]);

/// A safe row quantiser with [`QuantRowFn`]'s arguments.
type QuantRow<'q> = dyn Fn(&[f32], usize, &mut [i8], &mut [f32], &mut [i32]) + 'q;

/// The scalar [`QuantRowFn`] (the reference every SIMD quantiser must match bit for bit).
pub(crate) fn quantize_row_scalar(
    row: &[f32],
    bs: usize,
    q: &mut [i8],
    qscale: &mut [f32],
    qsum: &mut [i32],
) {
    let k = row.len();
    for b in 0..k.div_ceil(bs) {
        let src = &row[b * bs..((b + 1) * bs).min(k)];
        (qscale[b], qsum[b]) = quantize_block(src, &mut q[b * bs..b * bs + src.len()]);
    }
}

/// Quantises one block symmetrically to int8; returns (scale, sum of the codes).
pub(crate) fn quantize_block(src: &[f32], dst: &mut [i8]) -> (f32, i32) {
    let amax = src.iter().fold(0f32, |acc, x| acc.max(x.abs()));
    let scale = amax / 127.0;
    let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0i32;
    for (d, &x) in dst.iter_mut().zip(src) {
        let q = round_ties_even_small(x * inv).clamp(-127.0, 127.0) as i8;
        *d = q;
        sum += q as i32;
    }
    (scale, sum)
}

/// Round to nearest, ties to even, for |y| < 2^22 (here |y| <= 127 plus rounding slack): adding
/// and subtracting 1.5 * 2^23 leaves the rounded value under the default rounding mode. Same
/// result as `f32::round_ties_even`, which without SSE4.1 in the baseline target is a libm call
/// per element.
#[inline]
fn round_ties_even_small(y: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (y + MAGIC) - MAGIC
}
