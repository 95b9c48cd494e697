//! Requantization of int32 dot products to 8 bits, as ORT's MLAS does it
//! (`MlasRequantizeOutput`): `f = float(acc) * scale` (one f32 product, `scale` precomputed as
//! `a_scale * b_scale / y_scale` in f32), clamped to `[min - zp, max - zp]` (a NaN becomes the
//! lower bound, as `maxps` does), rounded half to even, plus the output zero point. Matching
//! these steps makes rcpu's output bit-identical to ORT's.

/// A per-tensor value or one value per column (indexed by batch * N + column).
#[derive(Debug, Clone, Copy)]
pub enum Cols<'a, T: Copy> {
    Tensor(T),
    Column(&'a [T]),
}

impl<T: Copy> Cols<'_, T> {
    #[inline]
    pub fn at(&self, c: usize) -> T {
        match self {
            Cols::Tensor(v) => *v,
            Cols::Column(s) => s[c],
        }
    }

    /// Values needed: 1 per tensor, else the slice length.
    pub fn len(&self) -> usize {
        match self {
            Cols::Tensor(_) => 1,
            Cols::Column(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Everything the requantization needs besides the dot products.
#[derive(Debug, Clone, Copy)]
pub struct Requant<'a> {
    /// A's zero point (read in A's sign).
    pub za: i32,
    /// The stored B's zero point (B's zero point + [`super::Signs::b_zero_shift`]).
    pub zw: Cols<'a, i32>,
    /// `a_scale * b_scale / y_scale`, in f32.
    pub scale: Cols<'a, f32>,
    /// Output zero point.
    pub yzp: i32,
    /// Output is int8 (else uint8).
    pub out_signed: bool,
    /// Reduction length.
    pub k: usize,
}

impl Requant<'_> {
    /// The output range as (min, max).
    pub fn range(&self) -> (i32, i32) {
        if self.out_signed {
            (-128, 127)
        } else {
            (0, 255)
        }
    }

    /// The clamp bounds in f32: `(min - zp, max - zp)`.
    pub fn bounds(&self) -> (f32, f32) {
        let (lo, hi) = self.range();
        ((lo - self.yzp) as f32, (hi - self.yzp) as f32)
    }

    /// `sum (a - za)(w - zw)` from the raw dot product and the sums (wrapping, as int32 MLAS).
    #[inline]
    pub fn correct(&self, acc: i32, colsum: i32, rowsum: i32, zw: i32) -> i32 {
        let kzz = (self.k as i32).wrapping_mul(self.za).wrapping_mul(zw);
        acc.wrapping_sub(self.za.wrapping_mul(colsum))
            .wrapping_sub(zw.wrapping_mul(rowsum))
            .wrapping_add(kzz)
    }

    /// Requantizes one corrected int32 value of column `c`; returns the output byte pattern.
    #[inline]
    pub fn one(&self, v: i32, c: usize, bounds: (f32, f32)) -> u8 {
        let f = (v as f32 * self.scale.at(c)).max(bounds.0).min(bounds.1);
        (f.round_ties_even() as i32 + self.yzp) as u8
    }
}

/// Scalar [`super::RequantFn`].
pub(crate) fn requant_row_scalar(
    acc: &[i32],
    colsum: &[i32],
    rowsum: i32,
    q: &Requant<'_>,
    c0: usize,
    out: &mut [u8],
) {
    let bounds = q.bounds();
    for (j, o) in out.iter_mut().enumerate() {
        let c = c0 + j;
        let v = q.correct(acc[j], colsum[j], rowsum, q.zw.at(c));
        *o = q.one(v, c, bounds);
    }
}
