//! Shape arithmetic shared by the f32 kernels: numpy multidirectional broadcasting, stride
//! computation, coalescing of contiguous dimensions, and numpy.matmul shape planning.

use super::dims::Dims;

/// The numpy broadcast of two shapes (right-aligned; each dim pair equal or one of them 1).
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    broadcast_dims(a, b).map(|d| d.to_vec())
}

/// [`broadcast_shapes`] into an inline [`Dims`] (no allocation on a kernel's per-call path).
pub fn broadcast_dims(a: &[usize], b: &[usize]) -> Result<Dims, String> {
    let rank = a.len().max(b.len());
    let mut out = Dims::zeros(rank);
    for (i, o) in out.iter_mut().enumerate() {
        // Dimension counted from the right; missing leading dims act as 1.
        let da = dim_from_right(a, rank - 1 - i);
        let db = dim_from_right(b, rank - 1 - i);
        *o = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(format!(
                "shapes {a:?} and {b:?} cannot be broadcast: dim {i} of the result would need {da} == {db}"
            ));
        };
    }
    Ok(out)
}

fn dim_from_right(s: &[usize], r: usize) -> usize {
    if r < s.len() {
        s[s.len() - 1 - r]
    } else {
        1
    }
}

/// Element strides of a contiguous row-major tensor of `shape`, aligned to the rank of `out`
/// (which must be a broadcast of `shape`): 0 on missing leading dims and on broadcast dims.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    assert!(
        shape.len() <= out.len(),
        "shape {shape:?} has higher rank than {out:?}"
    );
    let lead = out.len() - shape.len();
    let mut strides = vec![0; out.len()];
    let mut s = 1usize;
    for i in (0..shape.len()).rev() {
        let d = shape[i];
        // A size-1 dim never advances (broadcast or not), so it gets stride 0.
        strides[lead + i] = if d == 1 { 0 } else { s };
        // Saturating: past a zero dim nothing is addressed, and without one the product is
        // at most the element count of a tensor that exists.
        s = s.saturating_mul(d);
    }
    strides
}

/// Row-major contiguous strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut s = 1usize;
    for i in (0..shape.len()).rev() {
        strides[i] = s;
        s = s.saturating_mul(shape[i]); // see `broadcast_strides`
    }
    strides
}

/// Coalesces an iteration space of `dims` with one stride vector per operand: drops size-1
/// dims and merges adjacent dims `i, i+1` whenever every operand has
/// `stride[i] == stride[i+1] * dims[i+1]` (so the pair walks memory like one dim). The result
/// always has at least one dim (a rank-0 space becomes `[1]`).
pub fn coalesce(dims: &[usize], strides: &[Vec<usize>]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut out_dims: Vec<usize> = Vec::with_capacity(dims.len());
    let mut out_strides: Vec<Vec<usize>> = vec![Vec::with_capacity(dims.len()); strides.len()];
    for (i, &d) in dims.iter().enumerate() {
        if d == 1 {
            continue;
        }
        if !out_dims.is_empty() {
            let mergeable = strides
                .iter()
                .zip(out_strides.iter())
                .all(|(s, os)| Some(*os.last().unwrap()) == s[i].checked_mul(d));
            if mergeable {
                let l = out_dims.len() - 1;
                out_dims[l] = out_dims[l].saturating_mul(d);
                for (s, os) in strides.iter().zip(out_strides.iter_mut()) {
                    os[l] = s[i];
                }
                continue;
            }
        }
        out_dims.push(d);
        for (s, os) in strides.iter().zip(out_strides.iter_mut()) {
            os.push(s[i]);
        }
    }
    if out_dims.is_empty() {
        out_dims.push(1);
        for os in out_strides.iter_mut() {
            os.push(0);
        }
    }
    (out_dims, out_strides)
}

/// Elements of a tensor of `shape`: 0 when any dim is 0 (however large the others), otherwise
/// the product, `None` when it overflows `usize`.
pub fn numel(shape: &[usize]) -> Option<usize> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Most elements a tensor rcpu computes with may have: its bytes (at most 8 per element) must
/// stay addressable (`isize::MAX`).
pub const MAX_ELEMS: usize = isize::MAX as usize / 8;

/// [`numel`] bounded by [`MAX_ELEMS`], with an error naming `what` and its shape.
pub fn checked_numel(what: &str, shape: &[usize]) -> Result<usize, String> {
    numel(shape)
        .filter(|&n| n <= MAX_ELEMS)
        .ok_or_else(|| format!("{what} of shape {shape:?} has more elements than memory can hold"))
}

/// How a numpy.matmul of two contiguous row-major tensors decomposes into 2-D products.
///
/// Nothing here is proportional to the batch count: the offsets of product `i` are computed on
/// demand ([`MatMulPlan::offsets`]), so planning a model with huge static batch dims allocates
/// nothing. Every size is checked: planning fails when an operand or the output would hold more
/// than [`MAX_ELEMS`] elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatMulPlan {
    /// Number of 2-D products (product of the broadcast batch dims; 1 without batch dims).
    pub batch: usize,
    /// Rows of each product (1 when A is 1-D).
    pub m: usize,
    /// Columns of each product (1 when B is 1-D).
    pub n: usize,
    /// Reduction length.
    pub k: usize,
    /// numpy.matmul output shape (promoted 1-D dims removed).
    pub out_shape: Vec<usize>,
    /// Elements of A, B and the output.
    pub a_len: usize,
    pub b_len: usize,
    pub out_len: usize,
    /// The broadcast batch shape and, per batch dim, the element step of A's and B's matrix
    /// (0 where the operand is broadcast along that dim).
    batch_shape: Vec<usize>,
    a_steps: Vec<usize>,
    b_steps: Vec<usize>,
}

impl MatMulPlan {
    /// Element offsets of product `i`'s `[m, k]` matrix in A and `[k, n]` matrix in B
    /// (`i < batch`; broadcast batches repeat offsets).
    pub fn offsets(&self, i: usize) -> (usize, usize) {
        debug_assert!(i < self.batch);
        let (mut rest, mut ao, mut bo) = (i, 0, 0);
        for d in (0..self.batch_shape.len()).rev() {
            let s = self.batch_shape[d];
            let idx = rest % s;
            rest /= s;
            ao += idx * self.a_steps[d];
            bo += idx * self.b_steps[d];
        }
        (ao, bo)
    }

    /// Whether every product reads the same B matrix.
    pub fn b_shared(&self) -> bool {
        self.b_steps
            .iter()
            .zip(&self.batch_shape)
            .all(|(&s, &d)| s == 0 || d == 1)
    }

    /// Whether product `i` reads A's `i`-th matrix (A's matrices back to back, none repeated).
    pub fn a_dense(&self) -> bool {
        let a_mat = self.m * self.k;
        let mut step = a_mat;
        for d in (0..self.batch_shape.len()).rev() {
            let s = self.batch_shape[d];
            if s != 1 && self.a_steps[d] != step {
                return false;
            }
            step = step.saturating_mul(s);
        }
        true
    }

    /// The offsets of every product, materialized (fallible: the batch count can be as large as
    /// the output). For kernels that take offset lists.
    pub fn offset_lists(&self) -> Result<(Vec<usize>, Vec<usize>), String> {
        let mut a = Vec::new();
        let mut b = Vec::new();
        a.try_reserve_exact(self.batch)
            .and_then(|_| b.try_reserve_exact(self.batch))
            .map_err(|_| {
                format!(
                    "matmul: no memory for the offsets of {} products",
                    self.batch
                )
            })?;
        for i in 0..self.batch {
            let (ao, bo) = self.offsets(i);
            a.push(ao);
            b.push(bo);
        }
        Ok((a, b))
    }
}

/// Plans numpy.matmul of A (`a`) by B (`b`): 1-D A is promoted to `[1, K]`, 1-D B to `[K, 1]`
/// (the promoted dims are removed from the output), batch dims broadcast. Allocates only
/// O(rank); fails on mismatched dims and on sizes beyond [`MAX_ELEMS`].
pub fn matmul_shapes(a: &[usize], b: &[usize]) -> Result<MatMulPlan, String> {
    if a.is_empty() || b.is_empty() {
        return Err(format!(
            "matmul needs operands of rank >= 1, got shapes {a:?} and {b:?}"
        ));
    }
    let a_len = checked_numel("matmul input A", a)?;
    let b_len = checked_numel("matmul input B", b)?;
    let a2: Vec<usize> = if a.len() == 1 {
        vec![1, a[0]]
    } else {
        a.to_vec()
    };
    let b2: Vec<usize> = if b.len() == 1 {
        vec![b[0], 1]
    } else {
        b.to_vec()
    };
    let (m, ka) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (kb, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if ka != kb {
        return Err(format!(
            "matmul of shapes {a:?} and {b:?}: inner dimensions differ ({ka} vs {kb})"
        ));
    }
    let a_batch = &a2[..a2.len() - 2];
    let b_batch = &b2[..b2.len() - 2];
    let batch_shape = broadcast_shapes(a_batch, b_batch)
        .map_err(|e| format!("matmul of shapes {a:?} and {b:?}: batch dims: {e}"))?;
    let mut out_shape = batch_shape.clone();
    if a.len() > 1 {
        out_shape.push(m);
    }
    if b.len() > 1 {
        out_shape.push(n);
    }
    let out_len = checked_numel(
        &format!("matmul of {a:?} and {b:?}: the output"),
        &out_shape,
    )?;
    let too_big = || format!("matmul of shapes {a:?} and {b:?}: the batch count overflows");
    let batch = numel(&batch_shape).ok_or_else(too_big)?;
    // Steps only matter when some product is computed (a non-empty output): then every batch
    // dim is non-zero and each step is at most the operand's element count. With an empty
    // output they are never read, so they saturate instead of failing.
    let steps = |op: &[usize], mat: usize| -> Vec<usize> {
        let lead = batch_shape.len() - op.len();
        let mut st = vec![0; batch_shape.len()];
        let mut s = mat;
        for i in (0..op.len()).rev() {
            st[lead + i] = if op[i] == 1 { 0 } else { s };
            s = s.saturating_mul(op[i]);
        }
        st
    };
    let a_steps = steps(a_batch, m.saturating_mul(ka));
    let b_steps = steps(b_batch, kb.saturating_mul(n));
    Ok(MatMulPlan {
        batch,
        m,
        n,
        k: ka,
        out_shape,
        a_len,
        b_len,
        out_len,
        batch_shape,
        a_steps,
        b_steps,
    })
}
