// Shared helpers for the matmul_nbits tests (included with `#[path] mod`).
#![allow(dead_code)]

use rcpu::kernels::matmul_nbits::NBitsParams;
use rcpu::runtime::par::ScopedThreads;

/// xorshift64*: deterministic test data.
pub(crate) struct Rng(pub u64);
impl Rng {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }
    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

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
        let p = NBitsParams::new(k, n, bs, acc, zp);
        let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
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
/// rounded to f16 (nearest, ties to even); otherwise the group keeps f32. Levels 0..3: unchanged.
/// Written independently of the library's conversion (f64 arithmetic on the exponent).
pub(crate) fn acc4_scales(scales: &[f32], p: &NBitsParams) -> Vec<f32> {
    if !p.int8_compute() {
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
