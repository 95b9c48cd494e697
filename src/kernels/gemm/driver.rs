//! Blocked GEMM driver (Goto/BLIS loop order), shared by every ISA variant.
//!
//! C is cut into a grid of tasks (row block x column block); each task scales its C region by
//! beta, then for every `NC` column block and `KC` slice of K packs B into `NR`-wide panels
//! (`kc x NR`, zero padded), packs `MC` rows of A into `MR`-tall panels (`kc x MR`), and runs the
//! register-tiled micro-kernel over every (MR, NR) pair, adding `alpha * tile` into C.
//!
//! A prepacked B ([`BSrc::Packed`]) already holds those panels in the same layout: that case
//! runs in `driver_packed.rs`, which skips B packing and packs A once per call instead of once
//! per task, with the same per-element operations (bit-identical results).
//! A B kept in another form ([`BSrc::Panels`]: MatMulNBits' quantized weights) writes its panels
//! itself where the strided path would pack them, so each task turns its `KC x NC` slice of the
//! weight into f32 panels once and reuses them across all its rows.

use crate::memory::scratch::{try_with_scratch_f32, Shortfall};

use super::packed::PackedB;
use super::tiles::{Tile, TileGrid};
use super::{GemmKernels, Op, Sgemm};
use crate::kernels::simd::Level;
use crate::runtime::par::Dispatch;

/// K slice per packed panel.
pub(super) const KC: usize = 256;
/// Rows of A packed at once (a multiple of every MR: 8 and 6).
pub(super) const MC: usize = 144;
/// Columns of B packed at once.
pub(super) const NC: usize = 1024;
/// Below this many multiply-adds the product runs as one serial task.
pub(super) const PAR_MIN_WORK: usize = 1 << 20;

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// A B whose `KC x NR` panels its owner writes (a weight held in a form of its own, such as
/// MatMulNBits' quantized groups, dequantized slice by slice as the driver reaches them).
pub trait PanelSource: Sync {
    /// Writes op(B)[pc..pc + kc, j0..j0 + nc] into `nr`-wide panels laid out as the strided path
    /// packs them: panel q, at `out[q * kc * nr..]`, holds for each kk the `nr` values of
    /// columns `j0 + q * nr ..`, zero padded past `nc`. `j0` is a multiple of `nr` (8, 16 or 32).
    fn fill(&self, pc: usize, kc: usize, j0: usize, nc: usize, nr: usize, out: &mut [f32]);
}

/// Where the driver takes B's `KC x NR` panels from.
#[derive(Clone, Copy)]
pub(super) enum BSrc<'a> {
    /// Packed per task from a strided (possibly transposed) B.
    Strided(Op<'a>),
    /// Read from a prepacked weight (packed with this kernel table's `NR`).
    Packed(&'a PackedB),
    /// Written per task by their source.
    Panels(&'a dyn PanelSource),
}

/// Full blocked `C = alpha * op(A) op(B) + beta * C` for m, n > 0 (k may be 0). `Err` when a
/// packing scratch buffer cannot be allocated (C is then partly written).
/// `lv` is the table's level, minted once for the call and handed to every micro-kernel call.
pub(super) fn gemm(
    kern: &GemmKernels,
    lv: Level,
    call: &Sgemm<'_>,
    b: BSrc<'_>,
    c: &mut [f32],
) -> Result<(), String> {
    match b {
        BSrc::Strided(b) => gemm_strided(kern, lv, call, &b, c),
        BSrc::Panels(b) => gemm_strided(kern, lv, call, b, c),
        BSrc::Packed(b) => super::driver_packed::gemm(kern, lv, call, b, c),
    }
}

/// Row and column block of a C tile task: the whole product when small, otherwise blocks of
/// at most `MC x NC`, halved (columns first, never below a few register tiles) until every
/// lane gets a few tasks. Row blocks are multiples of `mr`, column blocks of `nr`.
pub(super) fn tile_sizes(g: Geometry, mr: usize, nr: usize, lanes: usize) -> (usize, usize) {
    let Geometry { m, n, k } = g;
    if m * n * k.max(1) < PAR_MIN_WORK {
        return (m, n);
    }
    let (mut rb, mut cb) = (round_up(MC.min(m), mr), round_up(NC.min(n), nr));
    // Enough tasks for every lane to get a few, without going below one register tile.
    let target = 3 * lanes.max(1);
    let tasks = |rb: usize, cb: usize| m.div_ceil(rb) * n.div_ceil(cb);
    while tasks(rb, cb) < target && cb > 4 * nr {
        cb = round_up(cb / 2, nr);
    }
    while tasks(rb, cb) < target && rb > mr {
        rb = round_up(rb / 2, mr);
    }
    (rb, cb)
}

/// A strided B packs its own panels.
impl PanelSource for Op<'_> {
    fn fill(&self, pc: usize, kc: usize, j0: usize, nc: usize, nr: usize, out: &mut [f32]) {
        pack_b(*self, pc, kc, j0, nc, nr, out)
    }
}

/// [`gemm`] with B's panels written per task (packed from a strided B, or by their source).
fn gemm_strided(
    kern: &GemmKernels,
    lv: Level,
    call: &Sgemm<'_>,
    b: &dyn PanelSource,
    c: &mut [f32],
) -> Result<(), String> {
    let g = Geometry::of(call);
    let Geometry { m, n, k } = g;
    let (a, alpha, beta, ldc, par) = (call.a, call.alpha, call.beta, call.ldc, call.par);
    let (mr, nr) = (kern.mr, kern.nr);
    let (rb, cb) = tile_sizes(g, mr, nr, par.lanes());
    let short = Shortfall::default();
    let grid = TileGrid::new(c, m, n, ldc, rb, cb);
    let run = |t: usize| {
        let mut tile = grid.claim(t);
        scale_c(&mut tile, beta);
        if k == 0 {
            return;
        }
        let (r0, c0, rows, cols) = (tile.row0, tile.col0, tile.rows, tile.cols);
        // Packing buffers come from this lane's parked scratch (scratch budget): no
        // allocation per task once warm. Contents on entry do not matter: pack_a/pack_b write
        // every element they use (padding included) and the micro-kernel overwrites `acc`.
        let (bl, al) = (
            KC * round_up(NC.min(cols), nr),
            KC * round_up(MC.min(rows), mr),
        );
        let len = bl + al + mr * nr;
        let done = try_with_scratch_f32(len, |buf| {
            let (bpack, rest) = buf.split_at_mut(bl);
            let (apack, acc) = rest.split_at_mut(al);
            for jc in (0..cols).step_by(NC) {
                let nc = NC.min(cols - jc);
                for pc in (0..k).step_by(KC) {
                    let kc = KC.min(k - pc);
                    b.fill(pc, kc, c0 + jc, nc, nr, bpack);
                    for ic in (0..rows).step_by(MC) {
                        let mc = MC.min(rows - ic);
                        pack_a(a, r0 + ic, mc, pc, kc, mr, apack);
                        for (jp, bpanel) in bpack.chunks(kc * nr).take(nc.div_ceil(nr)).enumerate()
                        {
                            let ncols = nr.min(nc - jp * nr);
                            for (ip, apanel) in
                                apack.chunks(kc * mr).take(mc.div_ceil(mr)).enumerate()
                            {
                                let nrows = mr.min(mc - ip * mr);
                                (kern.ukernel)(lv, kc, apanel, bpanel, acc);
                                let at = (ic + ip * mr, jc + jp * nr);
                                add_tile(&mut tile, at, nrows, ncols, acc, nr, alpha);
                            }
                        }
                    }
                }
            }
        });
        short.note(done, len * 4);
    };
    if grid.count() == 1 {
        run(0);
    } else {
        par.chunks(Dispatch::Task, grid.count(), &run);
    }
    short.check()
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Geometry {
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

impl Geometry {
    pub(super) fn of(call: &Sgemm<'_>) -> Geometry {
        Geometry {
            m: call.m,
            n: call.n,
            k: call.k,
        }
    }
}

/// `C[at + (r, c)] += alpha * acc[r * nr + c]` for `r < nrows`, `c < ncols` (tile coordinates).
pub(super) fn add_tile(
    tile: &mut Tile<'_>,
    at: (usize, usize),
    nrows: usize,
    ncols: usize,
    acc: &[f32],
    nr: usize,
    alpha: f32,
) {
    for r in 0..nrows {
        let crow = &mut tile.row(at.0 + r)[at.1..][..ncols];
        let arow = &acc[r * nr..r * nr + ncols];
        if alpha == 1.0 {
            crow.iter_mut().zip(arow).for_each(|(c, &v)| *c += v);
        } else {
            crow.iter_mut()
                .zip(arow)
                .for_each(|(c, &v)| *c += alpha * v);
        }
    }
}

/// `C = beta * C` over the tile; beta == 0 writes zeros (old contents, NaN included, ignored).
pub(super) fn scale_c(tile: &mut Tile<'_>, beta: f32) {
    if beta == 1.0 {
        return;
    }
    for r in 0..tile.rows {
        let row = tile.row(r);
        if beta == 0.0 {
            row.fill(0.0);
        } else {
            row.iter_mut().for_each(|c| *c *= beta);
        }
    }
}

/// Packs op(B)[pc..pc+kc, j0..j0+nc] into `nr`-wide panels: panel q holds, for each kk, the
/// `nr` values of columns `j0 + q*nr ..`, zero padded past `nc`.
fn pack_b(b: Op<'_>, pc: usize, kc: usize, j0: usize, nc: usize, nr: usize, out: &mut [f32]) {
    for (q, panel) in out.chunks_mut(kc * nr).take(nc.div_ceil(nr)).enumerate() {
        let jq = j0 + q * nr;
        let w = nr.min(nc - q * nr);
        for kk in 0..kc {
            let dst = &mut panel[kk * nr..(kk + 1) * nr];
            if b.trans {
                // op(B)(p, j) = b[j * ld + p]
                for (c, d) in dst[..w].iter_mut().enumerate() {
                    *d = b.data[(jq + c) * b.ld + pc + kk];
                }
            } else {
                let at = (pc + kk) * b.ld + jq;
                dst[..w].copy_from_slice(&b.data[at..at + w]);
            }
            dst[w..].fill(0.0);
        }
    }
}

/// Packs op(A)[i0..i0+mc, pc..pc+kc] into `mr`-tall panels: panel p holds, for each kk, the
/// `mr` values of rows `i0 + p*mr ..`, zero padded past `mc`.
pub(super) fn pack_a(
    a: Op<'_>,
    i0: usize,
    mc: usize,
    pc: usize,
    kc: usize,
    mr: usize,
    out: &mut [f32],
) {
    for (p, panel) in out.chunks_mut(kc * mr).take(mc.div_ceil(mr)).enumerate() {
        let ip = i0 + p * mr;
        let h = mr.min(mc - p * mr);
        if a.trans {
            // op(A)(i, p) = a[p * ld + i]: each kk is a contiguous run of rows.
            for kk in 0..kc {
                let dst = &mut panel[kk * mr..(kk + 1) * mr];
                let at = (pc + kk) * a.ld + ip;
                dst[..h].copy_from_slice(&a.data[at..at + h]);
                dst[h..].fill(0.0);
            }
        } else {
            if h < mr {
                panel[..kc * mr].fill(0.0);
            }
            for r in 0..h {
                let src = &a.data[(ip + r) * a.ld + pc..][..kc];
                for (kk, &v) in src.iter().enumerate() {
                    panel[kk * mr + r] = v;
                }
            }
        }
    }
}
