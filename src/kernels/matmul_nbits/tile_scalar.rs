//! Portable tile kernels: the same per-block math as the SIMD variants, one lane at a time.
//!
//! fp32: per block `dot = sum_k a_k * q_k` (codes as f32), then
//! `total += (dot - zp * sum(a over block)) * scale`.
//! int8: per block `dot = sum_k q_k * a8_k` (exact i32), `corr = dot - zp * sum(a8)`, then
//! `total += corr * (scale * scale_a)`.

use super::pack::{GroupView, CHUNK_K, LANES, NR};
use super::prepare_a::PreparedA;
use super::MR;

/// The codes of one chunk (k0..k0 + 4) as `codes[j][col]`, straight from the packed layout
/// (see `pack`).
fn chunk_codes(g: &GroupView, k0: usize) -> [[u8; NR]; CHUNK_K] {
    let chunk = g.chunk(k0);
    let mut codes = [[0u8; NR]; CHUNK_K];
    for (j, cj) in codes.iter_mut().enumerate() {
        for lane in 0..LANES {
            let byte = chunk[4 * lane + j];
            (cj[lane], cj[LANES + lane]) = (byte & 0x0F, byte >> 4);
        }
    }
    codes
}

fn zero_point(g: &GroupView, kb: usize, col: usize) -> u8 {
    let byte = g.zps.map_or(g.absent_zp, |z| z[kb * LANES + col % LANES]);
    (byte >> (4 * (col / LANES))) & 0x0F
}

/// fp32 tile: rows `r0..r0 + nr` of A against one column group.
pub(crate) fn tile_f32(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    nr: usize,
    res: &mut [[f32; NR]; MR],
) {
    let bs = g.block_size;
    for (ri, out) in res.iter_mut().enumerate().take(nr) {
        let r = r0 + ri;
        let row = &a.f[r * a.kp..(r + 1) * a.kp];
        let mut total = [0f32; NR];
        for kb in 0..g.k_blocks {
            let mut dot = [0f32; NR];
            for c in 0..bs / CHUNK_K {
                let k0 = kb * bs + c * CHUNK_K;
                for (j, cj) in chunk_codes(g, k0).iter().enumerate() {
                    for (d, &q) in dot.iter_mut().zip(cj) {
                        *d += row[k0 + j] * q as f32;
                    }
                }
            }
            let asum = a.fsum[r * a.kb + kb];
            for col in 0..NR {
                let zp = zero_point(g, kb, col) as f32;
                total[col] += (dot[col] - zp * asum) * g.scale(kb, col);
            }
        }
        *out = total;
    }
}

/// int8 tile: rows `r0..r0 + nr` of quantised A against one column group.
pub(crate) fn tile_i8(
    g: &GroupView,
    a: &PreparedA,
    r0: usize,
    nr: usize,
    res: &mut [[f32; NR]; MR],
) {
    let bs = g.block_size;
    for (ri, out) in res.iter_mut().enumerate().take(nr) {
        let r = r0 + ri;
        let row = &a.q[r * a.kp..(r + 1) * a.kp];
        let mut total = [0f32; NR];
        for kb in 0..g.k_blocks {
            let mut dot = [0i32; NR];
            for c in 0..bs / CHUNK_K {
                let k0 = kb * bs + c * CHUNK_K;
                for (j, cj) in chunk_codes(g, k0).iter().enumerate() {
                    for (d, &q) in dot.iter_mut().zip(cj) {
                        *d += q as i32 * row[k0 + j] as i32;
                    }
                }
            }
            let (sa, qsum) = (a.qscale[r * a.kb + kb], a.qsum[r * a.kb + kb]);
            for col in 0..NR {
                let corr = dot[col] - zero_point(g, kb, col) as i32 * qsum;
                total[col] += corr as f32 * (g.scale(kb, col) * sa);
            }
        }
        *out = total;
    }
}
