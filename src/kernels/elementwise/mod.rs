//! TEMPORARY stand-in.
use crate::runtime::Par;
#[derive(Clone, Copy)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}
pub fn binary_f32(
    op: BinaryOp,
    a: &[f32],
    sa: &[usize],
    b: &[f32],
    sb: &[usize],
    out: &mut [f32],
    _p: &dyn Par,
) -> Result<&'static str, String> {
    let s = crate::kernels::shape::broadcast_shapes(sa, sb)?;
    let r = s.len();
    let idx = |sh: &[usize], mut flat: usize| {
        let mut off = 0;
        let mut stride = 1;
        let mut k = 0;
        for d in (0..r).rev() {
            let i = flat % s[d];
            flat /= s[d];
            if d + sh.len() >= r {
                let dd = d + sh.len() - r;
                let ii = if sh[dd] == 1 { 0 } else { i };
                off += ii * stride;
                stride *= sh[dd];
            }
            k += 1;
        }
        let _ = k;
        off
    };
    for (f, o) in out.iter_mut().enumerate() {
        let x = a[idx(sa, f)];
        let y = b[idx(sb, f)];
        *o = match op {
            BinaryOp::Add => x + y,
            BinaryOp::Sub => x - y,
            BinaryOp::Mul => x * y,
            BinaryOp::Div => x / y,
        };
    }
    Ok("stub")
}
