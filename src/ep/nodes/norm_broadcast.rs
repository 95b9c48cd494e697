//! Scale / bias of LayerNormalization and SimplifiedLayerNormalization in any shape that is
//! NumPy-broadcastable to X (ORT 1.31 accepts e.g. scale `[1]`, `[3, 8]` or `[2, 1, 8]` for X
//! `[2, 3, 8]`): rows of X that see the same parameter values form one group, whose parameters
//! are gathered once into `n`-element vectors.

/// Element strides of a parameter aligned to X's dims (0 where it is broadcast); `None` when
/// `p` does not broadcast to `x`.
pub fn strides(x: &[usize], p: &[usize]) -> Option<Vec<usize>> {
    let lead = x.len().checked_sub(p.len())?;
    let mut st = vec![0usize; x.len()];
    let mut step = 1usize;
    for (i, &pd) in p.iter().enumerate().rev() {
        let xd = x[lead + i];
        if pd == xd && pd != 1 {
            st[lead + i] = step;
        } else if pd != 1 {
            return None;
        }
        step = step.checked_mul(pd)?;
    }
    Some(st)
}

/// Offset into a parameter of element `idx` of the row-major space `dims`, under `st`.
fn offset(mut idx: usize, dims: &[usize], st: &[usize]) -> usize {
    let mut off = 0;
    for (&d, &s) in dims.iter().zip(st).rev() {
        if d > 0 {
            off += (idx % d) * s;
            idx /= d;
        }
    }
    off
}

/// Runs of consecutive rows (`[start, start + count)`) sharing their parameter values, with
/// the offset of the run's parameters in each parameter tensor.
pub struct Run {
    pub start: usize,
    pub count: usize,
    pub offs: Vec<usize>,
}

/// Groups the `rows` rows of X (`x`, normalised from `axis`) by the offsets of each parameter
/// (`params`: strides from [`strides`]).
pub fn runs(x: &[usize], axis: usize, params: &[&[usize]]) -> Result<Vec<Run>, String> {
    let outer = &x[..axis];
    let rows: usize = outer.iter().product();
    let mut out: Vec<Run> = Vec::new();
    for r in 0..rows {
        let offs: Vec<usize> = params
            .iter()
            .map(|st| offset(r, outer, &st[..axis]))
            .collect();
        match out.last_mut() {
            Some(last) if last.offs == offs => last.count += 1,
            _ => {
                out.try_reserve(1)
                    .map_err(|_| "cannot allocate the row groups".to_string())?;
                out.push(Run {
                    start: r,
                    count: 1,
                    offs,
                });
            }
        }
    }
    Ok(out)
}

/// The `n` values of a parameter for one run: element `j` of a row reads `p[base + inner(j)]`.
pub fn gather(
    p: &[f32],
    base: usize,
    x: &[usize],
    axis: usize,
    st: &[usize],
    dst: &mut Vec<f32>,
) -> Result<(), String> {
    let inner = &x[axis..];
    let n: usize = inner.iter().product();
    dst.clear();
    dst.try_reserve_exact(n)
        .map_err(|_| format!("cannot allocate {n} parameter values"))?;
    for j in 0..n {
        let at = base + offset(j, inner, &st[axis..]);
        dst.push(*p.get(at).ok_or("parameter offset out of range")?);
    }
    Ok(())
}
