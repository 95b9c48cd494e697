//! Portable tile kernels: the same per-block math as the SIMD variants, one lane at a time.
//!
//! fp32: per block `dot = sum_k a_k * q_k` (codes as f32), then
//! `total += (dot - zp * sum(a over block)) * scale`.
//! int8: per block `dot = sum_k q_k * a8_k` (exact i32), `corr = dot - zp * sum(a8)`, then
//! `total += corr * (scale * scale_a)`.

use super::pack::{GroupView, NR};
use super::prepare_a::PreparedA;
use super::MR;

/// fp32 tile: rows `r0..r0 + nr` of A against one column group.
///
/// # Safety
/// None beyond the signature shared with the SIMD variants (this function is safe to call).
pub(crate) unsafe fn tile_f32(
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
            for c in 0..bs / 8 {
                let k0 = kb * bs + c * 8;
                let chunk = &g.w[k0 * NR / 2..k0 * NR / 2 + 4 * NR];
                for (col, d) in dot.iter_mut().enumerate() {
                    let v = u32::from_le_bytes(chunk[4 * col..4 * col + 4].try_into().unwrap());
                    for j in 0..8 {
                        let shift = 8 * (j % 4) + 4 * (j / 4);
                        *d += row[k0 + j] * ((v >> shift) & 0x0F) as f32;
                    }
                }
            }
            let asum = a.fsum[r * a.kb + kb];
            for col in 0..NR {
                let zp = g.zps.map_or(8.0, |z| z[kb * NR + col] as f32);
                total[col] += (dot[col] - zp * asum) * g.scales[kb * NR + col];
            }
        }
        *out = total;
    }
}

/// int8 tile: rows `r0..r0 + nr` of quantised A against one column group.
///
/// # Safety
/// None beyond the signature shared with the SIMD variants (this function is safe to call).
pub(crate) unsafe fn tile_i8(
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
            for c in 0..bs / 8 {
                let k0 = kb * bs + c * 8;
                let chunk = &g.w[k0 * NR / 2..k0 * NR / 2 + 4 * NR];
                for (col, d) in dot.iter_mut().enumerate() {
                    for j in 0..4 {
                        let byte = chunk[4 * col + j];
                        *d += (byte & 0x0F) as i32 * row[k0 + j] as i32;
                        *d += (byte >> 4) as i32 * row[k0 + 4 + j] as i32;
                    }
                }
            }
            let (sa, qsum) = (a.qscale[r * a.kb + kb], a.qsum[r * a.kb + kb]);
            for col in 0..NR {
                let zp = g.zps.map_or(8, |z| z[kb * NR + col] as i32);
                let corr = dot[col] - zp * qsum;
                total[col] += corr as f32 * (g.scales[kb * NR + col] * sa);
            }
        }
        *out = total;
    }
}
