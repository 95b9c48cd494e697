//! The AVX-512 table's weighted sums for a group of coefficient rows (`Kernels::rows_group`):
//! the decode step's probabilities times V (a GQA group's query heads over the unit's value
//! rows) and the grouped prefill's scores along transposed keys and probabilities times V.
//!
//! A block of up to [`WIDE_ROWS`] coefficient rows takes the columns four vectors at a time:
//! `rows x 4` accumulators and one matrix vector fill the 32 zmm registers, so each matrix row
//! is read once, whole (a value row of head size 64 is one step), where the generic block
//! (`x86::rows_block`, two vectors a step) went over the matrix twice, a half row a pass. Each
//! coefficient is broadcast by the FMA itself (`x86_asm::fma_bcast`): hoisted into registers,
//! the group's broadcasts would not fit beside the accumulators. The columns left over (fewer
//! than four vectors) take the generic block. Every output element keeps its FMA chain (from
//! zero, along the matrix rows in order, then times the scale), so the results are the bits of
//! the generic kernel and of one `rows` call per coefficient row.
//!
//! Inside a Qwen2-0.5B-shaped decode call after 300 MB of other reads (a temporary variant of
//! `examples/gqa_timing` that alternated the two kernels round by round in one process, shared
//! present, two lanes): the value pass of a unit at past 2048 took 30.5 us against 40.2 with
//! the two-pass block (docs/journal/measurements-2026-12.md, the attention's own instructions
//! at a long past).

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::{_mm512_loadu_ps, _mm512_mul_ps, _mm512_set1_ps, _mm512_setzero_ps};

use super::x86::rows_block_of;
use crate::kernels::simd::{Avx512, Simd};
use crate::kernels::x86_asm::fma_bcast;

/// Most coefficient rows of one wide block: 7 x 4 accumulators and one matrix vector.
const WIDE_ROWS: usize = 7;
/// Columns per step of a wide block (four vectors).
const WIDE_COLS: usize = 64;

/// `out[i][c] = scale * sum_r coef[i][r] * m[r * ld + c]` for `g` coefficient rows (`coef`
/// `[g, r]`, `out` `[g, n]`); see the module documentation. Panics (as the generic kernel does)
/// when `m` is shorter than the rows and columns read.
pub(super) fn rows_group_avx512(
    g: usize,
    coef: &[f32],
    m: &[f32],
    ld: usize,
    scale: f32,
    out: &mut [f32],
) {
    #[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
    fn inner(s: Avx512, g: usize, coef: &[f32], m: &[f32], ld: usize, scale: f32, out: &mut [f32]) {
        if g == 0 {
            return;
        }
        let (r, n) = (coef.len() / g, out.len() / g);
        let wide = n - n % WIDE_COLS;
        // What the wide blocks read of `m`: rows `0..r`, `ld` apart, columns `0..wide`.
        let reach = match r.checked_sub(1) {
            Some(last) if wide > 0 => last.checked_mul(ld).and_then(|x| x.checked_add(wide)),
            _ => Some(0),
        };
        assert!(
            reach.is_some_and(|e| e <= m.len()),
            "rows_group: {r} rows of {wide} columns, {ld} apart, exceed a matrix of {}",
            m.len()
        );
        // Blocks as even as possible (a group of 8: two blocks of 4).
        let per = g.div_ceil(g.div_ceil(WIDE_ROWS));
        let mut i = 0;
        while i < g {
            let gb = per.min(g - i);
            let cf = &coef[i * r..(i + gb) * r];
            let o = &mut out[i * n..(i + gb) * n];
            match gb {
                1 => wide_block::<1>(s, cf, m, ld, scale, o, wide),
                2 => wide_block::<2>(s, cf, m, ld, scale, o, wide),
                3 => wide_block::<3>(s, cf, m, ld, scale, o, wide),
                4 => wide_block::<4>(s, cf, m, ld, scale, o, wide),
                5 => wide_block::<5>(s, cf, m, ld, scale, o, wide),
                6 => wide_block::<6>(s, cf, m, ld, scale, o, wide),
                _ => wide_block::<7>(s, cf, m, ld, scale, o, wide),
            }
            rows_block_of(s, gb, cf, m, ld, scale, o, wide);
            i += gb;
        }
    }
    let s = Avx512::get().expect("ISA kernel called on a CPU without the ISA");
    // SAFETY: `s` exists, so the CPU has AVX-512F and every feature `inner` is compiled for.
    unsafe { inner(s, g, coef, m, ld, scale, out) }
}

/// Columns `0..wide` (a multiple of [`WIDE_COLS`]) of `G` coefficient rows. The caller has
/// checked that rows `0..r` of `m`, `ld` apart, hold `wide` columns each.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,avx2,fma")]
fn wide_block<const G: usize>(
    s: Avx512,
    coef: &[f32],
    m: &[f32],
    ld: usize,
    scale: f32,
    out: &mut [f32],
    wide: usize,
) {
    let (r, n) = (coef.len() / G, out.len() / G);
    let sc = _mm512_set1_ps(scale);
    for c in (0..wide).step_by(WIDE_COLS) {
        let mut acc = [[_mm512_setzero_ps(); 4]; G];
        for j in 0..r {
            let at = j * ld + c;
            for t in 0..4 {
                // SAFETY: `at + 16 t + 16 <= (r - 1) ld + wide <= m.len()` (the caller's check).
                let mv = unsafe { _mm512_loadu_ps(m.as_ptr().add(at + 16 * t)) };
                for (i, a) in acc.iter_mut().enumerate() {
                    // SAFETY: `i * r + j < G * r <= coef.len()`; AVX-512F is enabled here.
                    a[t] = unsafe { fma_bcast(a[t], mv, coef.as_ptr().add(i * r + j)) };
                }
            }
        }
        for (i, a) in acc.iter().enumerate() {
            for (t, v) in a.iter().enumerate() {
                s.store(out, i * n + c + 16 * t, _mm512_mul_ps(*v, sc));
            }
        }
    }
}
