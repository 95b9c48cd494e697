//! One QLinearMatMul call from the node's raw inputs: the per-column requantization terms, the
//! row sums and (for a B that is not prepacked) the packed B, all in the calling thread's parked
//! scratch (scratch budget), so a warm call allocates nothing.

use super::driver::{qgemm_with, Products};
use super::pack::{pack_into, packed_sizes, PackedView};
use super::requant::{Cols, Requant};
use super::{Kernels, QGemmRoute, Signs};
use crate::memory::scratch::{
    scratch_error, try_with_scratch_f32, try_with_scratch_i32, try_with_scratch_u8,
};
use crate::runtime::par::Par;

/// B as the call sees it.
#[derive(Clone, Copy)]
pub enum BSource<'a> {
    /// Prepacked (the weight cache's copy of a constant B).
    Packed(PackedView<'a>),
    /// `batches` row-major `[k, n]` matrices, packed per call.
    Raw(&'a [u8]),
}

/// The quantization inputs of a call, as the node holds them.
#[derive(Debug, Clone, Copy)]
pub struct Quant<'a> {
    pub a_scale: f32,
    /// A's zero point, in A's sign.
    pub a_zero: i32,
    /// One value (per tensor) or `batches * n` (per column of each B batch).
    pub b_scale: &'a [f32],
    /// Raw bytes in B's sign: one, or `batches * n`.
    pub b_zero: &'a [u8],
    pub y_scale: f32,
    pub y_zero: i32,
}

/// One call: A, its products, B and the quantization inputs.
#[derive(Clone, Copy)]
pub struct Call<'a> {
    pub a: &'a [u8],
    pub prods: Products<'a>,
    pub k: usize,
    pub n: usize,
    /// B batches (1 for a 2-D B).
    pub batches: usize,
    pub signs: Signs,
    pub b: BSource<'a>,
    pub quant: Quant<'a>,
}

impl Call<'_> {
    /// Checks the sizes of B and the per-column inputs against the shape.
    pub fn check(&self) -> Result<(), String> {
        let cols = self.batches * self.n;
        let q = &self.quant;
        for (name, len) in [
            ("b_scale", q.b_scale.len()),
            ("b_zero_point", q.b_zero.len()),
        ] {
            if len != 1 && len != cols {
                return Err(format!(
                    "{name} has {len} values: expected 1 (per tensor) or {cols} (per column)"
                ));
            }
        }
        match self.b {
            BSource::Packed(v) => {
                if (v.k, v.n, v.batches, v.signs) != (self.k, self.n, self.batches, self.signs) {
                    return Err("packed B does not match the call's shape".into());
                }
                v.check()
            }
            BSource::Raw(b) if b.len() != self.k * cols => Err(format!(
                "B has {} values, expected {}",
                b.len(),
                self.k * cols
            )),
            BSource::Raw(_) => Ok(()),
        }
    }
}

/// Runs `call` into `out` (bit patterns of the output bytes) with the process's kernels.
pub fn run(call: &Call<'_>, out: &mut [u8], par: &dyn Par) -> Result<QGemmRoute, String> {
    run_with(Kernels::active(), call, out, par)
}

/// [`run`] with an explicit kernel set.
pub fn run_with(
    kern: &Kernels,
    call: &Call<'_>,
    out: &mut [u8],
    par: &dyn Par,
) -> Result<QGemmRoute, String> {
    call.check()?;
    let q = &call.quant;
    let cols = call.batches * call.n;
    let rows = call.prods.a_offsets.len() * call.prods.m;
    let per_col_scale = q.b_scale.len() > 1;
    let per_col_zero = q.b_zero.len() > 1;
    let raw = matches!(call.b, BSource::Raw(_));
    let (packed_bytes, _) = packed_sizes(call.k, call.n, call.batches);
    // One scratch per element type (a nested request of the same type would allocate):
    // i32 = [row sums | stored-B zero points | column sums of a B packed here].
    let ilen = rows + if per_col_zero { cols } else { 0 } + if raw { cols } else { 0 };
    let flen = if per_col_scale { cols } else { 0 };
    let blen = if raw { packed_bytes } else { 0 };
    let name = try_with_scratch_i32(ilen, |ib| {
        try_with_scratch_f32(flen, |fb| {
            try_with_scratch_u8(blen, |bb| {
                let (rowsums, rest) = ib.split_at_mut(rows);
                let (zw_buf, cs_buf) = rest.split_at_mut(if per_col_zero { cols } else { 0 });
                let shift = call.signs.b_zero_shift();
                let read = |v: u8| -> i32 {
                    if call.signs.b_signed() {
                        v as i8 as i32
                    } else {
                        v as i32
                    }
                };
                let zw = if per_col_zero {
                    for (o, &z) in zw_buf.iter_mut().zip(q.b_zero) {
                        *o = read(z) + shift;
                    }
                    Cols::Column(&*zw_buf)
                } else {
                    Cols::Tensor(read(q.b_zero[0]) + shift)
                };
                // a_scale * b_scale / y_scale, in this order, in f32 (as ORT computes it).
                let scale = if per_col_scale {
                    for (o, &s) in fb.iter_mut().zip(q.b_scale) {
                        *o = q.a_scale * s / q.y_scale;
                    }
                    Cols::Column(&*fb)
                } else {
                    Cols::Tensor(q.a_scale * q.b_scale[0] / q.y_scale)
                };
                let view = match call.b {
                    BSource::Packed(v) => v,
                    BSource::Raw(b) => {
                        let (k, n, nb, s) = (call.k, call.n, call.batches, call.signs);
                        pack_into(b, k, n, nb, s, bb, cs_buf);
                        PackedView {
                            k,
                            n,
                            batches: nb,
                            signs: s,
                            data: &*bb,
                            colsum: &*cs_buf,
                        }
                    }
                };
                let rq = Requant {
                    za: q.a_zero,
                    zw,
                    scale,
                    yzp: q.y_zero,
                    out_signed: call.signs.a_signed(),
                    k: call.k,
                };
                qgemm_with(kern, call.a, &call.prods, &view, &rq, rowsums, out, par)
            })
        })
    })
    .flatten()
    .flatten();
    // ilen and flen are bounded by the output and B's scales; blen by B, which exists.
    name.unwrap_or_else(|| Err(scratch_error(ilen * 4 + flen * 4 + blen)))
}
