//! TEMPORARY stand-in.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Vec<usize>, String> {
    let r = a.len().max(b.len());
    let mut o = vec![0; r];
    for i in 0..r {
        let x = if i + a.len() >= r {
            a[i + a.len() - r]
        } else {
            1
        };
        let y = if i + b.len() >= r {
            b[i + b.len() - r]
        } else {
            1
        };
        o[i] = if x == y || y == 1 {
            x
        } else if x == 1 {
            y
        } else {
            return Err(format!("cannot broadcast {a:?} with {b:?}"));
        };
    }
    Ok(o)
}
pub struct MatMulPlan {
    pub out_shape: Vec<usize>,
}
pub fn matmul_shapes(a: &[usize], b: &[usize]) -> Result<MatMulPlan, String> {
    if a.len() != 2 || b.len() != 2 || a[1] != b[0] {
        return Err(format!("stub matmul {a:?} {b:?}"));
    }
    Ok(MatMulPlan {
        out_shape: vec![a[0], b[1]],
    })
}
