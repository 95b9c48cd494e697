//! Running a QMoE node's experts over its tokens.
//!
//! The live routes are sorted by expert (a counting sort: one pass to count, one to place, so
//! an expert's tokens keep their order). Each expert that received tokens then runs once for
//! all of them: its tokens' rows gathered into one `M_e x H` block (a single token's row is
//! read in place), fc1 as one MatMulNBits product of `M_e` rows, the activation row by row,
//! fc2 as one product, and each result row added, times its route's weight, into its token's
//! output row. Experts run in index order, and an expert no token picked costs nothing: a
//! decode step runs its k experts and reads no other expert's bytes. The products split over
//! the lanes themselves (a stream of column groups for one row, row tiles x column ranges for
//! more), so an expert that got one token of a prompt costs one streamed pass of its weights,
//! the same as in decode.

use super::activation::MoeActivation;
use super::route::Routes;
use super::MoeShape;
use crate::kernels::matmul_nbits::reference::matmul_dequant_f32;
use crate::kernels::matmul_nbits::{
    matmul_packed, matmul_rows_packed, matmul_unpacked, NBitsPath, NBitsRoute, NBitsWeight,
    PackedNBits,
};
use crate::memory::try_vec;
use crate::runtime::par::Par;

/// One expert projection (fc1 or fc2) as the node holds it.
#[derive(Clone, Copy)]
pub enum ExpertMatrix<'a> {
    /// Packed once (`kernels::matmul_nbits::pack`), the fast path.
    Packed(&'a PackedNBits),
    /// ORT's layout, packed group by group inside each call (the weight cache declined it):
    /// bit-identical to the packed path.
    Unpacked(NBitsWeight<'a>),
    /// Scales no model has (NaN, infinite or overflowing): the op's definition taken literally.
    Literal(NBitsWeight<'a>),
}

impl ExpertMatrix<'_> {
    fn matmul(
        &self,
        a: &[f32],
        m: usize,
        bias: Option<&[f32]>,
        out: &mut [f32],
        par: &dyn Par,
    ) -> Result<Option<NBitsRoute>, String> {
        match self {
            ExpertMatrix::Packed(w) => matmul_packed(a, m, w, bias, out, par).map(Some),
            ExpertMatrix::Unpacked(w) => matmul_unpacked(a, m, w, bias, out, par).map(Some),
            ExpertMatrix::Literal(w) => matmul_dequant_f32(a, m, w, bias, out).map(|()| None),
        }
    }

    fn packed(&self) -> bool {
        matches!(self, ExpertMatrix::Packed(_))
    }

    fn as_packed(&self) -> Option<&PackedNBits> {
        match self {
            ExpertMatrix::Packed(w) => Some(w),
            _ => None,
        }
    }
}

/// The most tokens a call may have for its one-token experts to run batched
/// ([`run_singles`]): the batch prepares every token's row, which pays only for a few.
const SINGLES_MAX_TOKENS: usize = 16;

/// One expert's two projections and their optional biases (`2I` or `I` values for fc1, `H`
/// for fc2).
#[derive(Clone, Copy)]
pub struct Expert<'a> {
    pub fc1: ExpertMatrix<'a>,
    pub fc1_bias: Option<&'a [f32]>,
    pub fc2: ExpertMatrix<'a>,
    pub fc2_bias: Option<&'a [f32]>,
}

/// What one call ran, for the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeRoute {
    /// Experts that ran (received at least one live route).
    pub experts_run: usize,
    /// The most tokens one expert received.
    pub max_rows: usize,
    /// Whether every expert that ran read packed weights.
    pub all_packed: bool,
    /// The route the products of the expert with the most tokens took (the first such expert;
    /// a call's bulk: a prompt's many-row GEMM rather than a one-token expert's GEMV), `None`
    /// when only the literal definition ran, or nothing did.
    pub product: Option<NBitsRoute>,
}

impl MoeRoute {
    /// The ledger text of this call: the products' path and whether the weights were packed.
    pub fn text(&self) -> &'static str {
        let path = self.product.map(|r| r.path);
        match (path, self.all_packed) {
            (None, _) => "experts-literal",
            (Some(NBitsPath::F32Gemv), true) => "experts-f32-gemv-packed",
            (Some(NBitsPath::Int8Gemv), true) => "experts-acc4-gemv-packed",
            (Some(NBitsPath::AmxGemm), true) => "experts-amx-acc4-gemm-packed",
            (Some(NBitsPath::F32Gemm), true) => "experts-f32-gemm-packed",
            (Some(NBitsPath::F32Dequant), true) => "experts-f32-gemm-dequant-packed",
            (Some(_), true) => "experts-acc4-gemm-packed",
            (Some(_), false) => "experts-unpacked",
        }
    }
}

/// The node's output for `tokens` rows of `input` (`tokens x H`) routed by `routes`:
/// `out[t] = sum over t's live routes of weight * fc2(act(fc1(input[t])))`. `expert(e)` hands
/// out expert `e`'s projections. `Err` when a buffer cannot be allocated or a product fails.
/// Panics unless `input` and `out` hold `tokens x H` values and `routes` covers `tokens`.
#[allow(clippy::too_many_arguments)]
pub fn run<'w>(
    input: &[f32],
    tokens: usize,
    shape: &MoeShape,
    act: &MoeActivation,
    routes: &Routes,
    expert: &dyn Fn(usize) -> Expert<'w>,
    out: &mut [f32],
    par: &dyn Par,
) -> Result<MoeRoute, String> {
    let (h, inter, experts, k) = (shape.hidden, shape.inter, shape.experts, shape.top_k);
    assert_eq!(input.len(), tokens * h);
    assert_eq!(out.len(), tokens * h);
    assert_eq!(routes.expert.len(), tokens * k);
    let f1 = act.fc1_cols(inter).ok_or("QMoE: fc1's width overflows")?;
    out.fill(0.0);
    let alloc = |what: &str, n: usize| format!("QMoE: cannot allocate {what} ({n} values)");

    // Counting sort of the live routes by expert.
    let mut start = try_vec(experts + 1, 0usize).map_err(|_| alloc("expert counts", experts))?;
    let mut live = 0usize;
    for r in 0..tokens * k {
        if routes.live(r) {
            let e = routes.expert[r] as usize;
            assert!(e < experts, "route to expert {e} of {experts}");
            start[e + 1] += 1;
            live += 1;
        }
    }
    let max_rows = start.iter().copied().max().unwrap_or(0);
    for e in 0..experts {
        start[e + 1] += start[e];
    }
    let mut order = try_vec(live, 0usize).map_err(|_| alloc("routes by expert", live))?;
    let mut fill = try_vec(experts, 0usize).map_err(|_| alloc("expert cursors", experts))?;
    fill.copy_from_slice(&start[..experts]);
    for r in 0..tokens * k {
        if routes.live(r) {
            let e = routes.expert[r] as usize;
            order[fill[e]] = r;
            fill[e] += 1;
        }
    }

    let mut route = MoeRoute {
        experts_run: 0,
        max_rows,
        all_packed: true,
        product: None,
    };
    if live == 0 {
        return Ok(route);
    }
    // Scratch for the largest expert's rows; sizes checked (rows x widths from the model).
    let size = |cols: usize, what: &str| {
        max_rows
            .checked_mul(cols)
            .ok_or_else(|| format!("QMoE: {max_rows} rows x {cols} {what} overflow"))
    };
    // A gathered block is needed only when some expert's rows are not one row of the input in
    // place (more than one token for an expert).
    let gathered = if max_rows > 1 { size(h, "inputs")? } else { 0 };
    let mut a1 = try_vec(gathered, 0f32).map_err(|_| alloc("gathered rows", gathered))?;
    let mut c1 = try_vec(size(f1, "fc1 outputs")?, 0f32).map_err(|_| alloc("fc1 outputs", f1))?;
    let mut a2 =
        try_vec(size(inter, "activations")?, 0f32).map_err(|_| alloc("activations", inter))?;
    let mut c2 = try_vec(size(h, "fc2 outputs")?, 0f32).map_err(|_| alloc("fc2 outputs", h))?;

    // Experts with one token each (all k of a decode step) run batched: every fc1 in one
    // dispatch, every fc2 in another. Their fc2 rows wait in `single_rows` (row j of expert
    // `singles[j]`) and join the sums in expert order below, as the other experts' rows do, so
    // the output does not depend on which path an expert took.
    let mut single_of = try_vec(experts, usize::MAX).map_err(|_| alloc("expert flags", experts))?;
    // Rows of the expert whose products' route `route.product` holds.
    let mut product_rows = 0;
    let mut single_rows = Vec::new();
    if tokens <= SINGLES_MAX_TOKENS {
        let singles: Vec<(usize, usize, Expert<'w>)> = (0..experts)
            .filter(|&e| start[e + 1] - start[e] == 1)
            .map(|e| (e, order[start[e]], expert(e)))
            .filter(|(_, _, x)| x.fc1.packed() && x.fc2.packed())
            .collect();
        if singles.len() >= 2 {
            if let Some((r, rows)) = run_singles(input, tokens, shape, act, &singles, par)? {
                for (j, &(e, _, _)) in singles.iter().enumerate() {
                    single_of[e] = j;
                }
                single_rows = rows;
                (route.product, product_rows) = (Some(r), 1);
            }
        }
    }
    for e in 0..experts {
        let rows = &order[start[e]..start[e + 1]];
        let m = rows.len();
        if m == 0 {
            continue;
        }
        route.experts_run += 1;
        if single_of[e] != usize::MAX {
            let j = single_of[e];
            accumulate(out, h, k, routes, rows, &single_rows[j * h..(j + 1) * h]);
            continue;
        }
        let ex = expert(e);
        let a: &[f32] = if m == 1 {
            let t = rows[0] / k;
            &input[t * h..(t + 1) * h]
        } else {
            for (i, &r) in rows.iter().enumerate() {
                let t = r / k;
                a1[i * h..(i + 1) * h].copy_from_slice(&input[t * h..(t + 1) * h]);
            }
            &a1[..m * h]
        };
        let c1 = &mut c1[..m * f1];
        let r1 = ex.fc1.matmul(a, m, ex.fc1_bias, c1, par)?;
        let a2 = &mut a2[..m * inter];
        for (x, y) in c1.chunks_exact(f1).zip(a2.chunks_exact_mut(inter)) {
            act.apply(x, y);
        }
        let c2 = &mut c2[..m * h];
        let r2 = ex.fc2.matmul(a2, m, ex.fc2_bias, c2, par)?;
        accumulate(out, h, k, routes, rows, c2);
        route.all_packed &= ex.fc1.packed() && ex.fc2.packed();
        if m > product_rows || route.product.is_none() {
            if let Some(r) = r2.or(r1) {
                (route.product, product_rows) = (Some(r), m);
            }
        }
    }
    Ok(route)
}

/// The experts in `singles` (expert, its one route, its projections; all packed, one token
/// each) as two dispatches: every fc1 over its token's row, the activations, every fc2 over its
/// activation row. Returns fc2's rows (biased), row j for `singles[j]`, bit-identical to what
/// the per-expert path computes. `Ok(None)` when a row must take the per-expert path
/// (non-finite or huge values).
fn run_singles(
    input: &[f32],
    tokens: usize,
    shape: &MoeShape,
    act: &MoeActivation,
    singles: &[(usize, usize, Expert<'_>)],
    par: &dyn Par,
) -> Result<Option<(NBitsRoute, Vec<f32>)>, String> {
    let (h, inter, k) = (shape.hidden, shape.inter, shape.top_k);
    let f1 = act.fc1_cols(inter).ok_or("QMoE: fc1's width overflows")?;
    let n = singles.len();
    let alloc = |what: &str| format!("QMoE: cannot allocate {n} experts' {what}");
    let mut c1 = try_vec(n * f1, 0f32).map_err(|_| alloc("fc1 outputs"))?;
    let jobs1: Vec<(usize, &PackedNBits)> = singles
        .iter()
        .filter_map(|(_, r, x)| Some((r / k, x.fc1.as_packed()?)))
        .collect();
    if matmul_rows_packed(input, tokens, &jobs1, &mut c1, par)?.is_none() {
        return Ok(None);
    }
    let mut a2 = try_vec(n * inter, 0f32).map_err(|_| alloc("activations"))?;
    for ((x, y), (_, _, ex)) in c1
        .chunks_exact_mut(f1)
        .zip(a2.chunks_exact_mut(inter))
        .zip(singles)
    {
        add_bias(x, ex.fc1_bias);
        act.apply(x, y);
    }
    let mut c2 = try_vec(n * h, 0f32).map_err(|_| alloc("fc2 outputs"))?;
    let jobs2: Vec<(usize, &PackedNBits)> = singles
        .iter()
        .enumerate()
        .filter_map(|(j, (_, _, x))| Some((j, x.fc2.as_packed()?)))
        .collect();
    let Some(r2) = matmul_rows_packed(&a2, n, &jobs2, &mut c2, par)? else {
        return Ok(None);
    };
    for (y, (_, _, ex)) in c2.chunks_exact_mut(h).zip(singles) {
        add_bias(y, ex.fc2_bias);
    }
    Ok(Some((r2, c2)))
}

/// `out[token of r] += weight of r * y_i` for the i-th route `r` of `rows` (one expert's
/// routes) and its fc2 row `y_i` (`ys`: those rows back to back).
fn accumulate(out: &mut [f32], h: usize, k: usize, routes: &Routes, rows: &[usize], ys: &[f32]) {
    for (&r, y) in rows.iter().zip(ys.chunks_exact(h)) {
        let (t, w) = (r / k, routes.weight[r]);
        for (o, &v) in out[t * h..(t + 1) * h].iter_mut().zip(y) {
            *o += w * v;
        }
    }
}

/// `y += bias` (the one addition a product's bias is, as the MatMulNBits epilogue adds it).
fn add_bias(y: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias {
        for (v, &b) in y.iter_mut().zip(b) {
            *v += b;
        }
    }
}
