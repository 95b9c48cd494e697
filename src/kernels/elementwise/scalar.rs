//! Portable reference loops for the binary ops: plain `a op b` per element, which is exactly
//! what every SIMD variant must reproduce bit for bit.

use super::BinaryOp;

#[inline(always)]
fn apply(op: BinaryOp, x: f32, y: f32) -> f32 {
    match op {
        BinaryOp::Add => x + y,
        BinaryOp::Sub => x - y,
        BinaryOp::Mul => x * y,
        BinaryOp::Div => x / y,
    }
}

/// `out[i] = a[i] op b[i]`.
pub(super) fn vv(op: BinaryOp, a: &[f32], b: &[f32], out: &mut [f32]) {
    let (a, b) = (&a[..out.len()], &b[..out.len()]);
    macro_rules! go {
        ($e:expr) => {
            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                *o = $e(x, y);
            }
        };
    }
    match op {
        BinaryOp::Add => go!(|x: f32, y: f32| x + y),
        BinaryOp::Sub => go!(|x: f32, y: f32| x - y),
        BinaryOp::Mul => go!(|x: f32, y: f32| x * y),
        BinaryOp::Div => go!(|x: f32, y: f32| x / y),
    }
}

/// `out[i] = s op b[i]`.
pub(super) fn sv(op: BinaryOp, s: f32, b: &[f32], out: &mut [f32]) {
    let b = &b[..out.len()];
    for (o, &y) in out.iter_mut().zip(b) {
        *o = apply(op, s, y);
    }
}

/// `out[i] = a[i] op s`.
pub(super) fn vs(op: BinaryOp, a: &[f32], s: f32, out: &mut [f32]) {
    let a = &a[..out.len()];
    for (o, &x) in out.iter_mut().zip(a) {
        *o = apply(op, x, s);
    }
}
