//! AVX2 and AVX-512 loops for the binary ops, written once over [`Simd`] and instantiated per
//! level with [`isa_entry!`] (each entry runs only under its level's token). Only IEEE-exact
//! single instructions are used (`add/sub/mul/div_ps`, no FMA, no `rcp`), so every lane equals
//! the scalar `a op b`; the tail (fewer than one vector) goes through a partial load / store.

use super::BinaryOp;
use crate::kernels::simd::{isa_entry, Avx2, Avx512, Simd};

const ADD: u8 = 0;
const SUB: u8 = 1;
const MUL: u8 = 2;
const DIV: u8 = 3;

/// Instantiates `$f::<S, OP>` for the runtime op, so the loops carry no per-vector branch.
macro_rules! dispatch_op {
    ($op:expr, $f:ident, $s:expr, $($arg:expr),*) => {
        match $op {
            BinaryOp::Add => $f::<S, ADD>($s, $($arg),*),
            BinaryOp::Sub => $f::<S, SUB>($s, $($arg),*),
            BinaryOp::Mul => $f::<S, MUL>($s, $($arg),*),
            BinaryOp::Div => $f::<S, DIV>($s, $($arg),*),
        }
    };
}

#[inline(always)]
fn op<S: Simd, const OP: u8>(s: S, x: S::V, y: S::V) -> S::V {
    match OP {
        ADD => s.add(x, y),
        SUB => s.sub(x, y),
        MUL => s.mul(x, y),
        _ => s.div(x, y),
    }
}

/// `out[i] = f(i)` over whole vectors (two per step, then one), then the partial tail.
#[inline(always)]
fn each<S: Simd>(s: S, out: &mut [f32], f: impl Fn(usize, usize) -> S::V) {
    let (n, w) = (out.len(), S::W);
    let mut i = 0;
    while i + 2 * w <= n {
        let (r0, r1) = (f(i, w), f(i + w, w));
        s.store(out, i, r0);
        s.store(out, i + w, r1);
        i += 2 * w;
    }
    while i + w <= n {
        s.store(out, i, f(i, w));
        i += w;
    }
    if i < n {
        s.store_part(out, i, n - i, f(i, n - i));
    }
}

/// Lanes `[i, i + len)` of `x` (`len <= W`; a partial vector is filled with 1.0).
#[inline(always)]
fn get<S: Simd>(s: S, x: &[f32], i: usize, len: usize) -> S::V {
    if len == S::W {
        s.load(x, i)
    } else {
        s.load_part(x, i, len, 1.0)
    }
}

#[inline(always)]
fn vv<S: Simd, const OP: u8>(s: S, a: &[f32], b: &[f32], out: &mut [f32]) {
    let n = out.len();
    let (a, b) = (&a[..n], &b[..n]);
    each(s, out, |i, len| {
        op::<S, OP>(s, get(s, a, i, len), get(s, b, i, len))
    });
}

#[inline(always)]
fn sv<S: Simd, const OP: u8>(s: S, x: f32, b: &[f32], out: &mut [f32]) {
    let b = &b[..out.len()];
    let xv = s.splat(x);
    each(s, out, |i, len| op::<S, OP>(s, xv, get(s, b, i, len)));
}

#[inline(always)]
fn vs<S: Simd, const OP: u8>(s: S, a: &[f32], x: f32, out: &mut [f32]) {
    let a = &a[..out.len()];
    let xv = s.splat(x);
    each(s, out, |i, len| op::<S, OP>(s, get(s, a, i, len), xv));
}

#[inline(always)]
fn vv_any<S: Simd>(s: S, o: BinaryOp, a: &[f32], b: &[f32], out: &mut [f32]) {
    dispatch_op!(o, vv, s, a, b, out)
}
#[inline(always)]
fn sv_any<S: Simd>(s: S, o: BinaryOp, x: f32, b: &[f32], out: &mut [f32]) {
    dispatch_op!(o, sv, s, x, b, out)
}
#[inline(always)]
fn vs_any<S: Simd>(s: S, o: BinaryOp, a: &[f32], x: f32, out: &mut [f32]) {
    dispatch_op!(o, vs, s, a, x, out)
}

isa_entry!(vv_avx2, Avx2, "avx2,fma", vv_any,
    (o: BinaryOp, a: &[f32], b: &[f32], out: &mut [f32]));
isa_entry!(sv_avx2, Avx2, "avx2,fma", sv_any,
    (o: BinaryOp, x: f32, b: &[f32], out: &mut [f32]));
isa_entry!(vs_avx2, Avx2, "avx2,fma", vs_any,
    (o: BinaryOp, a: &[f32], x: f32, out: &mut [f32]));
isa_entry!(vv_avx512, Avx512, "avx512f,avx512dq,avx2,fma", vv_any,
    (o: BinaryOp, a: &[f32], b: &[f32], out: &mut [f32]));
isa_entry!(sv_avx512, Avx512, "avx512f,avx512dq,avx2,fma", sv_any,
    (o: BinaryOp, x: f32, b: &[f32], out: &mut [f32]));
isa_entry!(vs_avx512, Avx512, "avx512f,avx512dq,avx2,fma", vs_any,
    (o: BinaryOp, a: &[f32], x: f32, out: &mut [f32]));
