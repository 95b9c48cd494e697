//! Splitting a QGemm call over `Par`, row sums, requantized writes.
//!
//! A call is a list of products (N-D batches; a 2-D B folds A's batch dims into M, one product).
//! Work units are (product, block of rows, panel of 64 columns). One row and one product (M = 1
//! decode) spreads the panels with `Par::chunks` (`Dispatch::Decode`); otherwise `Par::chunks` (`Dispatch::Task`) over row blocks x
//! panels, row blocks shrunk until every lane has a few units. Each unit runs the tile kernel
//! `MR` rows at a time, keeps the int32 dot products in a stack tile (no heap accumulator),
//! requantizes them and writes its disjoint part of the output.

use super::pack::PackedView;
use super::requant::{Cols, Requant};
use super::{Kernels, QGemmRoute, MR, PANEL};
use crate::kernels::disjoint::DisjointOut;
use crate::kernels::simd::Level;
use crate::runtime::par::{Dispatch, Par};

/// Rows per unit at most (an A block of this many rows stays in L2 while panels stream).
const ROW_BLOCK: usize = 192;
/// Below this many multiply-adds the whole call runs on the calling thread.
const PAR_MIN_WORK: usize = 1 << 18;

/// The products of one call.
#[derive(Debug, Clone, Copy)]
pub struct Products<'a> {
    /// Rows of each product's A (and output).
    pub m: usize,
    /// Byte offset of each product's `[m, k]` A.
    pub a_offsets: &'a [usize],
    /// The packed B batch each product uses (same length as `a_offsets`).
    pub b_index: &'a [usize],
}

/// `out[i] = requant(A_i B_{b_index[i]})` for every product i, with the process's kernels. `out`
/// holds the products' `[m, n]` outputs one after the other; `rowsums` is scratch for
/// `products * m` int32. Returns the ledger variant (`Err` only when the CPU lacks the kernels'
/// level, which a set from [`Kernels::for_isa`] never does). Panics on inconsistent sizes
/// (callers validate shapes first).
pub fn qgemm(
    a: &[u8],
    prods: &Products<'_>,
    b: &PackedView<'_>,
    q: &Requant<'_>,
    rowsums: &mut [i32],
    out: &mut [u8],
    par: &dyn Par,
) -> Result<QGemmRoute, String> {
    qgemm_with(Kernels::active(), a, prods, b, q, rowsums, out, par)
}

/// [`qgemm`] with an explicit kernel set (tests, diagnostics).
#[allow(clippy::too_many_arguments)]
pub fn qgemm_with(
    kern: &Kernels,
    a: &[u8],
    prods: &Products<'_>,
    b: &PackedView<'_>,
    q: &Requant<'_>,
    rowsums: &mut [i32],
    out: &mut [u8],
    par: &dyn Par,
) -> Result<QGemmRoute, String> {
    let (m, k, n) = (prods.m, b.k, b.n);
    let np = prods.a_offsets.len();
    let rows_total = np * m;
    let name = kern.route(rows_total);
    check(a, prods, b, q, rowsums, out);
    if rows_total == 0 || n == 0 {
        return Ok(name);
    }
    // The kernels' level, minted once for the call and handed to every kernel call.
    let lv = Level::require(kern.isa)?;
    let a_signed = b.signs.a_signed();
    for (i, &off) in prods.a_offsets.iter().enumerate() {
        for r in 0..m {
            let row = &a[off + r * k..off + (r + 1) * k];
            rowsums[i * m + r] = (kern.row_sum)(lv, row, a_signed);
        }
    }
    let rowsums = &*rowsums;
    let pn = b.panels();
    let rb = row_block(m, np * pn, par.lanes());
    let rbn = m.div_ceil(rb);
    let dst = DisjointOut::new(out);
    let body = |t: usize| {
        let (pi, rest) = (t / (rbn * pn), t % (rbn * pn));
        let (rbi, p) = (rest / pn, rest % pn);
        let (bi, a_off) = (prods.b_index[pi], prods.a_offsets[pi]);
        let (panel, width, cols) = b.panel(bi, p);
        // Column parameters and sums are indexed by batch * n + column.
        let cg = bi * n + p * PANEL;
        let colsum = &b.colsum[cg..cg + cols];
        let mut acc = [[0i32; PANEL]; MR];
        let mut bytes = [0u8; PANEL];
        let end = ((rbi + 1) * rb).min(m);
        let mut r0 = rbi * rb;
        while r0 < end {
            let nr = MR.min(end - r0);
            let arows = &a[a_off + r0 * k..a_off + (r0 + nr) * k];
            (kern.tile)(lv, arows, k, nr, k, panel, width, a_signed, &mut acc);
            for (ri, acc_r) in acc.iter().enumerate().take(nr) {
                let orow = pi * m + r0 + ri;
                let o = &mut bytes[..cols];
                (kern.requant)(lv, &acc_r[..cols], colsum, rowsums[orow], q, cg, o);
                // SAFETY: (row orow, columns of panel p) belongs to exactly this unit: units
                // partition products x row blocks x panels.
                unsafe { dst.write(orow * n + p * PANEL, o) };
            }
            r0 += nr;
        }
    };
    let units = np * rbn * pn;
    if rows_total * n * k.max(1) < PAR_MIN_WORK || par.lanes() <= 1 {
        (0..units).for_each(body);
    } else if rows_total == 1 {
        par.chunks(Dispatch::Decode, units, &body);
    } else {
        par.chunks(Dispatch::Task, units, &body);
    }
    Ok(name)
}

/// Rows per unit: all of `m` (rounded to `MR`, at most `ROW_BLOCK`), halved until there are
/// about four units per lane.
fn row_block(m: usize, panels: usize, lanes: usize) -> usize {
    let round = |x: usize| x.div_ceil(MR).max(1) * MR;
    let mut rb = round(m.min(ROW_BLOCK));
    while m.div_ceil(rb) * panels < 4 * lanes && rb > MR {
        rb = round(rb / 2);
    }
    rb
}

fn check(
    a: &[u8],
    prods: &Products<'_>,
    b: &PackedView<'_>,
    q: &Requant<'_>,
    rowsums: &[i32],
    out: &[u8],
) {
    let (m, k, n) = (prods.m, b.k, b.n);
    let np = prods.a_offsets.len();
    b.check().unwrap_or_else(|e| panic!("qgemm: {e}"));
    assert_eq!(
        np,
        prods.b_index.len(),
        "qgemm: a_offsets and b_index differ"
    );
    for (&off, &bi) in prods.a_offsets.iter().zip(prods.b_index) {
        assert!(
            off + m * k <= a.len(),
            "qgemm: A has {} bytes, a product needs {}",
            a.len(),
            off + m * k
        );
        assert!(bi < b.batches, "qgemm: B batch {bi} of {}", b.batches);
    }
    assert!(out.len() >= np * m * n, "qgemm: output too small");
    assert!(rowsums.len() >= np * m, "qgemm: row-sum scratch too small");
    assert_eq!(q.k, k, "qgemm: requant K differs from B's");
    let cols = b.batches * n;
    if let Cols::Column(s) = q.scale {
        assert!(
            s.len() >= cols,
            "qgemm: {} column scales, need {cols}",
            s.len()
        );
    }
    if let Cols::Column(z) = q.zw {
        assert!(
            z.len() >= cols,
            "qgemm: {} column zero points, need {cols}",
            z.len()
        );
    }
}
