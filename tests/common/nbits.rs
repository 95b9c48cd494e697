// Shared helpers for the matmul_nbits tests (included with `#[path] mod`; needs `rng` at the
// crate root).
#![allow(dead_code)]

use rcpu::kernels::matmul_nbits::reference::matmul_reference_int8;
use rcpu::kernels::matmul_nbits::{
    matmul_packed_with, matmul_unpacked_with, Kernels, NBitsParams, NBitsRoute, NBitsWeight,
    PackedNBits,
};
use rcpu::runtime::par::{Par, ScopedThreads};

/// The one seeded PRNG (`tests/common/rng.rs`, which the including crate declares as `rng` at its
/// root, once).
pub(crate) use crate::rng::Rng;

/// One MatMulNBits problem in ORT's layout.
pub(crate) struct Problem {
    pub p: NBitsParams,
    pub m: usize,
    pub a: Vec<f32>,
    pub b: Vec<u8>,
    pub scales: Vec<f32>,
    pub zp: Option<Vec<u8>>,
    pub bias: Option<Vec<f32>>,
}

impl Problem {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        k: usize,
        n: usize,
        m: usize,
        bs: usize,
        acc: usize,
        zp: bool,
        bias: bool,
        seed: u64,
    ) -> Problem {
        Problem::with_params(NBitsParams::new(k, n, bs, acc, zp), m, bias, seed)
    }

    /// [`Problem::new`] with 8-bit codes (one byte a code and a zero point).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new8(
        k: usize,
        n: usize,
        m: usize,
        bs: usize,
        acc: usize,
        zp: bool,
        bias: bool,
        seed: u64,
    ) -> Problem {
        let p = NBitsParams::new(k, n, bs, acc, zp).with_bits(8);
        Problem::with_params(p, m, bias, seed)
    }

    fn with_params(p: NBitsParams, m: usize, bias: bool, seed: u64) -> Problem {
        let (k, n, zp) = (p.k, p.n, p.has_zero_points);
        let mut r = Rng::seeded(seed);
        let a = (0..m * k).map(|_| r.f32(-1.0, 1.0)).collect();
        let b = r.bytes(n * p.k_blocks() * p.blob_bytes());
        // Magnitudes 1e-3..0.1 (as real int4 scales), random sign: all f16 normals, so level 4
        // packs f16 scales (groups that keep f32 are tested in matmul_nbits_f16_scales.rs).
        let scales = (0..n * p.k_blocks())
            .map(|_| {
                let s = r.f32(1e-3, 0.1);
                if r.next_u64() & 1 == 0 {
                    s
                } else {
                    -s
                }
            })
            .collect();
        let zp = zp.then(|| r.bytes(n * p.zp_row_bytes()));
        let bias = bias.then(|| (0..n).map(|_| r.f32(-1.0, 1.0)).collect());
        Problem {
            p,
            m,
            a,
            b,
            scales,
            zp,
            bias,
        }
    }

    /// The weight in ORT's layout with `scales` (the problem's own, or the ones a level computes
    /// with).
    pub(crate) fn weight_with<'a>(&'a self, scales: &'a [f32]) -> NBitsWeight<'a> {
        NBitsWeight {
            b: &self.b,
            scales,
            zero_points: self.zp.as_deref(),
            p: &self.p,
        }
    }

    /// The weight in ORT's layout with the problem's own scales.
    pub(crate) fn weight(&self) -> NBitsWeight<'_> {
        self.weight_with(&self.scales)
    }

    /// The problem through `kern` from the unpacked weight on `par`: the route and the output.
    pub(crate) fn unpacked(&self, kern: &Kernels, par: &dyn Par) -> (NBitsRoute, Vec<f32>) {
        let mut out = vec![f32::NAN; self.m * self.p.n];
        let route = matmul_unpacked_with(
            kern,
            &self.a,
            self.m,
            &self.weight(),
            self.bias.as_deref(),
            &mut out,
            par,
        )
        .unwrap();
        (route, out)
    }

    /// The int8 reference (bias included) with the scales accuracy level 4 computes with
    /// ([`acc4_scales`]).
    pub(crate) fn int8_reference(&self) -> Vec<f32> {
        let s8 = acc4_scales(&self.scales, &self.p);
        let mut want = vec![0f32; self.m * self.p.n];
        matmul_reference_int8(
            &self.a,
            self.m,
            &self.weight_with(&s8),
            self.bias.as_deref(),
            &mut want,
        );
        want
    }
}

/// Relative L2 error of `got` against `want` (absolute when `want` is all zero).
pub(crate) fn rel_l2(got: &[f32], want: &[f32]) -> f64 {
    let num: f64 = got
        .iter()
        .zip(want)
        .map(|(&g, &w)| (g as f64 - w as f64).powi(2))
        .sum();
    let den: f64 = want.iter().map(|&w| (w as f64).powi(2)).sum();
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

/// Three scoped threads: real concurrency for the chunked paths.
pub(crate) const THREE: ScopedThreads = ScopedThreads(3);

/// The scales accuracy level 4 computes with (rcpu's packed layout, see `pack.rs`): per group of
/// 32 columns, when every scale of the group is 0 or of magnitude in [2^-14, 65504], each is
/// rounded to f16 (nearest, ties to even); otherwise the group keeps f32. Levels 0..3, and level
/// 4 with f32 scales asked for (`acc4_f16_scales` false, option `acc4_scales=f32`): unchanged.
/// Written independently of the library's conversion (f64 arithmetic on the exponent).
pub(crate) fn acc4_scales(scales: &[f32], p: &NBitsParams) -> Vec<f32> {
    if !p.int8_compute() || !p.acc4_f16_scales {
        return scales.to_vec();
    }
    let kbs = p.k_blocks();
    let ok = |s: f32| s == 0.0 || (s.abs() >= 2f32.powi(-14) && s.abs() <= 65504.0);
    let mut out = scales.to_vec();
    for g in (0..p.n).step_by(32) {
        let range = g * kbs..(g + 32).min(p.n) * kbs;
        if scales[range.clone()].iter().all(|&s| ok(s)) {
            for s in &mut out[range] {
                *s = round_to_f16(*s);
            }
        }
    }
    out
}

/// `s` (0 or an f16 normal in magnitude) rounded to 11 significant bits, ties to even.
pub(crate) fn round_to_f16(s: f32) -> f32 {
    if s == 0.0 {
        return s;
    }
    let exp = ((s.to_bits() >> 23) & 0xFF) as i32 - 127;
    let ulp = 2f64.powi(exp - 10);
    ((s as f64 / ulp).round_ties_even() * ulp) as f32
}

/// A bound, from the data, on the relative L2 distance between accuracy level 4's output `got`
/// and the fp32 reference `want` (exact f64 sums of `a * w`, `matmul_reference`), given that
/// `got` is within `rel8` (relative L2) of the level-4 reference `want8`
/// (`matmul_reference_int8` with the scales of [`acc4_scales`]).
///
/// Level 4 computes with A quantised per block to int8 (step `s = max|a| / 127` of the block,
/// so `|a - a4| <= s / 2` per element; `2^-20 |a|` more covers the f32 arithmetic of the step)
/// and with the weights `w4 = (q - zp) * s4` of the level-4 scales `s4`. Per output:
/// `|y4 - y| <= B = sum_k e_k |w4_kn| + |a_k| |w4_kn - w_kn|`, so `||y4 - y|| <= ||B||`, and
/// `rel_l2(got, want) <= (||B|| + rel8 ||want8|| + 2^-23 (||want|| + ||want8||)) / ||want||`
/// (the last term: both references are rounded to f32). Bias cancels. The bound holds for any
/// data; it is loose by about the square root of K because the per-element errors cancel.
pub(crate) fn acc4_vs_fp32_bound(pr: &Problem, want: &[f32], want8: &[f32], rel8: f64) -> f64 {
    use rcpu::kernels::matmul_nbits::reference::{weight_code, zero_point};
    let (p, m) = (&pr.p, pr.m);
    let (k_len, kbs, bs) = (p.k, p.k_blocks(), p.block_size);
    let s4 = acc4_scales(&pr.scales, p);
    // Per element of A: the quantisation error bound e_k.
    let e: Vec<f64> =
        pr.a.chunks(k_len)
            .flat_map(|row| {
                (0..k_len).map(move |k| {
                    let blk = (k / bs) * bs..((k / bs + 1) * bs).min(k_len);
                    let amax = row[blk].iter().fold(0f64, |acc, x| acc.max(x.abs() as f64));
                    amax / 127.0 / 2.0 + row[k].abs() as f64 * 2f64.powi(-20)
                })
            })
            .collect();
    let mut b2 = 0f64;
    for n in 0..p.n {
        let (w, w4): (Vec<f64>, Vec<f64>) = (0..k_len)
            .map(|k| {
                let kb = k / bs;
                let q = weight_code(&pr.b, p, k, n) as f64
                    - zero_point(pr.zp.as_deref(), p, n, kb) as f64;
                (
                    q * pr.scales[n * kbs + kb] as f64,
                    q * s4[n * kbs + kb] as f64,
                )
            })
            .unzip();
        for r in 0..m {
            let (row, er) = (&pr.a[r * k_len..][..k_len], &e[r * k_len..][..k_len]);
            let b: f64 = (0..k_len)
                .map(|k| er[k] * w4[k].abs() + row[k].abs() as f64 * (w4[k] - w[k]).abs())
                .sum();
            b2 += b * b;
        }
    }
    let norm = |v: &[f32]| v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    let (nw, n8) = (norm(want), norm(want8));
    let num = b2.sqrt() + rel8 * n8 + 2f64.powi(-23) * (nw + n8);
    if nw == 0.0 {
        num
    } else {
        num / nw
    }
}

/// The problem `pr` (4- or 8-bit) over rows `a` (`m` of them, bias included) through `kern` on
/// `par`: from `packed` ([`pack`] of it), or from ORT's layout when `None`.
pub(crate) fn run_nbits(
    kern: &Kernels,
    pr: &Problem,
    a: &[f32],
    m: usize,
    packed: Option<&PackedNBits>,
    par: &dyn Par,
) -> (NBitsRoute, Vec<f32>) {
    let mut out = vec![f32::NAN; m * pr.p.n];
    let bias = pr.bias.as_deref();
    let route = match packed {
        Some(w) => matmul_packed_with(kern, a, m, w, bias, &mut out, par).unwrap(),
        None => matmul_unpacked_with(kern, a, m, &pr.weight(), bias, &mut out, par).unwrap(),
    };
    (route, out)
}
