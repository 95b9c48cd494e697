//! Shape arithmetic shared by the f32 kernels: numpy multidirectional broadcasting, stride
//! computation, coalescing of contiguous dimensions, and numpy.matmul shape planning.

/// The numpy broadcast of two shapes (right-aligned; each dim pair equal or one of them 1).
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
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
        s *= d;
    }
    strides
}

/// Row-major contiguous strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut s = 1usize;
    for i in (0..shape.len()).rev() {
        strides[i] = s;
        s *= shape[i];
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
                .all(|(s, os)| *os.last().unwrap() == s[i] * d);
            if mergeable {
                let l = out_dims.len() - 1;
                out_dims[l] *= d;
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

/// How a numpy.matmul of two contiguous row-major tensors decomposes into 2-D products.
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
    /// Element offset of batch `i`'s `[m, k]` matrix in A (broadcast batches repeat offsets).
    pub a_offsets: Vec<usize>,
    /// Element offset of batch `i`'s `[k, n]` matrix in B.
    pub b_offsets: Vec<usize>,
}

/// Plans numpy.matmul of A (`a`) by B (`b`): 1-D A is promoted to `[1, K]`, 1-D B to `[K, 1]`
/// (the promoted dims are removed from the output), batch dims broadcast.
pub fn matmul_shapes(a: &[usize], b: &[usize]) -> Result<MatMulPlan, String> {
    if a.is_empty() || b.is_empty() {
        return Err(format!(
            "matmul needs operands of rank >= 1, got shapes {a:?} and {b:?}"
        ));
    }
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
    let batch: usize = batch_shape.iter().product();
    let a_st = broadcast_strides(a_batch, &batch_shape);
    let b_st = broadcast_strides(b_batch, &batch_shape);
    let (a_mat, b_mat) = (m * ka, kb * n);
    let mut a_offsets = Vec::with_capacity(batch);
    let mut b_offsets = Vec::with_capacity(batch);
    let mut idx = vec![0usize; batch_shape.len()];
    for _ in 0..batch {
        let ao: usize = idx.iter().zip(&a_st).map(|(i, s)| i * s).sum();
        let bo: usize = idx.iter().zip(&b_st).map(|(i, s)| i * s).sum();
        a_offsets.push(ao * a_mat);
        b_offsets.push(bo * b_mat);
        // Odometer increment over the batch shape.
        for d in (0..idx.len()).rev() {
            idx[d] += 1;
            if idx[d] < batch_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    let mut out_shape = batch_shape;
    if a.len() > 1 {
        out_shape.push(m);
    }
    if b.len() > 1 {
        out_shape.push(n);
    }
    Ok(MatMulPlan {
        batch,
        m,
        n,
        k: ka,
        out_shape,
        a_offsets,
        b_offsets,
    })
}
