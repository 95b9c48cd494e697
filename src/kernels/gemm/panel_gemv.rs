//! The M = 1 product with a constant B (decode): `c = alpha * x op(B) + beta * c`, streaming B
//! once, panel by panel.
//!
//! Work is split over the output in chunks of whole `NR`-wide panels
//! (`par::stream_units_per_chunk`: long runs, a few chunks per lane), handed out dynamically by
//! the decode dispatch so a slow lane cannot hold the barrier. Every panel runs the table's
//! panel kernel on the same values in the same order whatever the source: a prepacked panel (rows `NR` apart), the
//! columns of an untransposed B in place (rows `ldb` apart, the last panel narrower), or a
//! transposed B gathered per panel into the lane's parked scratch. So a prepacked and an
//! unpacked B give bit-identical results.

use super::gemv::PAR_MIN_WORK;
use super::packed::{pack_panel, PackedB};
use super::tiles::TileGrid;
use super::{write_vec, GemmKernels, Op, Sgemm};
use crate::kernels::simd::Level;
use crate::memory::scratch::{try_with_scratch_f32, Shortfall};
use crate::runtime::par::{stream_units_per_chunk, Dispatch};

/// Widest panel of any table (AVX-512: 32).
const MAX_NR: usize = 32;

/// Where the panels come from.
#[derive(Clone, Copy)]
pub(super) enum PanelSrc<'a> {
    Packed(&'a PackedB),
    Strided(Op<'a>),
}

/// `c[j] = alpha * sum_p x[p * incx] op(B)(p, j) + beta * c[j]` for `j < n`, `p < k`
/// (`beta == 0` ignores c's old contents), where x is op(A)'s only row (`call.m == 1`): A
/// itself, or one column of a transposed A (`incx = lda`). `c` is that one row of C.
pub(super) fn gemv(
    kern: &GemmKernels,
    lv: Level,
    call: &Sgemm<'_>,
    src: PanelSrc<'_>,
    c: &mut [f32],
) -> Result<(), String> {
    let (k, n, alpha, beta, par) = (call.k, call.n, call.alpha, call.beta, call.par);
    let x = call.a.data;
    let incx = if call.a.trans { call.a.ld } else { 1 };
    let nr = kern.nr;
    debug_assert!(nr <= MAX_NR);
    let panels = n.div_ceil(nr);
    let per_chunk = stream_units_per_chunk(panels, k * nr * 4, par.lanes());
    let width = per_chunk * nr;
    let grid = TileGrid::new(c, 1, n, n, 1, width);
    let short = Shortfall::default();
    let run = |ci: usize| {
        let mut tile = grid.claim(ci);
        let out = tile.row(0);
        let mut y = [0f32; MAX_NR];
        for (q, o) in (ci * per_chunk..).zip(out.chunks_mut(nr)) {
            let (j0, w) = (q * nr, o.len());
            let y = &mut y[..w];
            match src {
                PanelSrc::Packed(p) => {
                    (kern.panel_gemv)(lv, k, x, incx, p.panel(q, 0, k), nr, w, y)
                }
                PanelSrc::Strided(b) if !b.trans => {
                    (kern.panel_gemv)(lv, k, x, incx, &b.data[j0..], b.ld, w, y)
                }
                // Columns of op(B) are rows of B: gather the panel first (contents on entry do
                // not matter, pack_panel writes all k * nr values).
                PanelSrc::Strided(b) => {
                    let done = try_with_scratch_f32(k * nr, |buf| {
                        pack_panel(b, k, j0, w, nr, buf);
                        (kern.panel_gemv)(lv, k, x, incx, buf, nr, w, y)
                    });
                    if short.note(done, k * nr * 4).is_none() {
                        return;
                    }
                }
            }
            write_vec(y, o, 1, alpha, beta);
        }
    };
    if k * n < PAR_MIN_WORK || par.lanes() <= 1 || grid.count() == 1 {
        (0..grid.count()).for_each(run);
    } else {
        par.chunks(Dispatch::Decode, grid.count(), &run);
    }
    short.check()
}
