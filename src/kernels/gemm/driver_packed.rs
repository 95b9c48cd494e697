//! The blocked GEMM over a prepacked B ([`PackedB`]): no B packing at all, and A packed once
//! per call (not once per C tile task, as `driver::gemm_strided` must since each task packs the
//! B columns it needs anyway).
//!
//! Rows are taken in blocks of [`ROW_BLOCK`]. For each block, A is packed into `MR`-tall
//! panels per `KC` slice in the caller's parked scratch (one task per slice), then the C tile
//! tasks of the block run the micro-kernel on those shared A panels and the packed B panels.
//! Every output element sees the same values, the same `KC` slicing, the same micro-kernel and
//! the same order of additions into C as on the strided path, so results are bit-identical.

use super::driver::{add_tile, pack_a, scale_c, tile_sizes, Geometry, KC, MC, NC};
use super::packed::PackedB;
use super::tiles::TileGrid;
use super::{GemmKernels, Sgemm};
use crate::kernels::simd::Level;
use crate::memory::scratch::{scratch_error, try_with_scratch_f32};
use crate::runtime::par::Dispatch;

/// Rows whose packed A is held at once (a multiple of every `MR`, 8 and 6): bounds the A
/// buffer at `ROW_BLOCK x K` floats.
const ROW_BLOCK: usize = 2 * MC;
/// Largest `MR x NR` register tile of any table (AVX-512: 8 x 32).
const MAX_TILE: usize = 256;

/// `C = alpha * op(A) B + beta * C` for a `B` packed with this table's `NR`; `m, n > 0`.
pub(super) fn gemm(
    kern: &GemmKernels,
    lv: Level,
    call: &Sgemm<'_>,
    b: &PackedB,
    c: &mut [f32],
) -> Result<(), String> {
    let Geometry { m, n, k } = Geometry::of(call);
    let (a, alpha, beta, ldc, par) = (call.a, call.alpha, call.beta, call.ldc, call.par);
    let (mr, nr) = (kern.mr, kern.nr);
    assert!(mr * nr <= MAX_TILE && ROW_BLOCK.is_multiple_of(mr));
    for rb0 in (0..m).step_by(ROW_BLOCK) {
        let rows = ROW_BLOCK.min(m - rb0);
        let block = Geometry { m: rows, n, k };
        let (rb, cb) = tile_sizes(block, mr, nr, par.lanes());
        let grid = TileGrid::new(&mut c[rb0 * ldc..], rows, n, ldc, rb, cb);
        let (m_pad, slices) = (rows.next_multiple_of(mr), k.div_ceil(KC));
        // Slice s (rows pc = s*KC ..) holds the block's panels back to back from s * KC * m_pad;
        // pack_a writes every value of every panel (padding rows too), so stale scratch is fine.
        let len = slices * KC * m_pad;
        let done = try_with_scratch_f32(len, |abuf| {
            {
                let slots = TileGrid::new(abuf, slices, KC * m_pad, KC * m_pad, 1, KC * m_pad);
                let pack = |s: usize| {
                    let (pc, mut slot) = (s * KC, slots.claim(s));
                    pack_a(a, rb0, rows, pc, KC.min(k - pc), mr, slot.row(0));
                };
                if grid.count() == 1 || slices == 1 {
                    (0..slices).for_each(pack);
                } else {
                    par.chunks(Dispatch::Task, slices, &pack);
                }
            }
            let abuf = &*abuf;
            let run = |t: usize| {
                let mut tile = grid.claim(t);
                scale_c(&mut tile, beta);
                let (r0, c0, trows, cols) = (tile.row0, tile.col0, tile.rows, tile.cols);
                // Column blocks are multiples of NR (or the whole width): panel (c0 + jc) / nr.
                debug_assert!(c0.is_multiple_of(nr) && r0.is_multiple_of(mr));
                let mut acc = [0f32; MAX_TILE];
                for jc in (0..cols).step_by(NC) {
                    let nc = NC.min(cols - jc);
                    for pc in (0..k).step_by(KC) {
                        let kc = KC.min(k - pc);
                        let aslice = &abuf[pc * m_pad..];
                        for ic in (0..trows).step_by(MC) {
                            let mc = MC.min(trows - ic);
                            for jp in 0..nc.div_ceil(nr) {
                                let bpanel = b.panel((c0 + jc) / nr + jp, pc, kc);
                                let ncols = nr.min(nc - jp * nr);
                                for ip in 0..mc.div_ceil(mr) {
                                    let panel = (r0 + ic) / mr + ip;
                                    let apanel = &aslice[panel * kc * mr..][..kc * mr];
                                    (kern.ukernel)(lv, kc, apanel, bpanel, &mut acc);
                                    let (nrows, at) =
                                        (mr.min(mc - ip * mr), (ic + ip * mr, jc + jp * nr));
                                    add_tile(&mut tile, at, nrows, ncols, &acc, nr, alpha);
                                }
                            }
                        }
                    }
                }
            };
            if grid.count() == 1 {
                run(0);
            } else {
                par.chunks(Dispatch::Task, grid.count(), &run);
            }
        });
        done.ok_or_else(|| scratch_error(len * 4))?;
    }
    Ok(())
}
