//! A small lane abstraction over AVX2 (`__m256`, 8 lanes) and AVX-512 (`__m512`, 16 lanes) so the
//! glue kernels (activations, softmax, normalisations) are written once, generic over [`Simd`],
//! and instantiated per ISA inside `#[target_feature]` functions (see [`isa_entry!`]).
//!
//! A token ([`Avx2`], [`Avx512`]) can only be obtained from `get()`, which checks the CPU, so
//! holding one proves the intrinsics it wraps may run. Every method is `#[inline(always)]`: once
//! inlined into a `#[target_feature]` caller the intrinsics compile to single instructions.
//!
//! The vector math here (exp on x <= 0, erf / erfc) uses polynomial fits made for rcpu (least
//! squares on Chebyshev nodes, refined toward minimax): exp max relative error ~2 ulp, erf max
//! absolute error ~1.5e-7, erfc (for |x| >= 1) relative error ~3e-6.

#![cfg(target_arch = "x86_64")]
#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;

use super::consts::*;

/// Runs an intrinsic call. SAFETY (for every use): the call sits in a method of a token type
/// whose only constructor (`get`) returns a value only after the CPU reported the features the
/// intrinsic needs.
macro_rules! tf {
    ($e:expr) => {
        // SAFETY: see the macro doc: a token exists only on CPUs with the required features.
        unsafe { $e }
    };
}

/// Lane operations the glue kernels need. `V` is one vector register of `W` f32 lanes.
pub(crate) trait Simd: Copy {
    type V: Copy;
    const W: usize;
    fn splat(self, x: f32) -> Self::V;
    /// Lanes `[i, i + W)` of `s` (panics when out of bounds).
    fn load(self, s: &[f32], i: usize) -> Self::V;
    fn store(self, s: &mut [f32], i: usize, v: Self::V);
    fn add(self, a: Self::V, b: Self::V) -> Self::V;
    fn sub(self, a: Self::V, b: Self::V) -> Self::V;
    fn mul(self, a: Self::V, b: Self::V) -> Self::V;
    fn div(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a * b + c`, fused.
    fn fma(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `c - a * b`, fused.
    fn fnma(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// IEEE `maxps` semantics: when either operand is NaN the second is returned.
    fn max(self, a: Self::V, b: Self::V) -> Self::V;
    /// IEEE `minps` semantics: when either operand is NaN the second is returned.
    fn min(self, a: Self::V, b: Self::V) -> Self::V;
    fn abs(self, a: Self::V) -> Self::V;
    /// Round to nearest, ties to even.
    fn round(self, a: Self::V) -> Self::V;
    /// `2^n` for lanes holding integral `n` in `[-126, 127]`.
    fn pow2i(self, n: Self::V) -> Self::V;
    /// Per lane: `a < b ? x : y` (false for NaN).
    fn select_lt(self, a: Self::V, b: Self::V, x: Self::V, y: Self::V) -> Self::V;
    /// Per lane: `v` where `v` is NaN, else `x`.
    fn keep_nan(self, v: Self::V, x: Self::V) -> Self::V;
    fn reduce_add(self, v: Self::V) -> f32;
    fn reduce_max(self, v: Self::V) -> f32;

    /// `1 / a` (within an ulp; exact division unless a variant has a cheaper refined estimate).
    #[inline(always)]
    fn recip(self, a: Self::V) -> Self::V {
        self.div(self.splat(1.0), a)
    }

    /// Lanes `[i, i + n)` of `s` for `n <= W`, the rest filled with `fill`.
    #[inline(always)]
    fn load_part(self, s: &[f32], i: usize, n: usize, fill: f32) -> Self::V {
        let mut buf = [fill; 16];
        buf[..n].copy_from_slice(&s[i..i + n]);
        self.load(&buf, 0)
    }
    /// Writes the first `n <= W` lanes of `v` to `s[i..i + n]`.
    #[inline(always)]
    fn store_part(self, s: &mut [f32], i: usize, n: usize, v: Self::V) {
        let mut buf = [0.0f32; 16];
        self.store(&mut buf, 0, v);
        s[i..i + n].copy_from_slice(&buf[..n]);
    }
    #[inline(always)]
    fn horner(self, x: Self::V, c: &[f32]) -> Self::V {
        let mut r = self.splat(c[c.len() - 1]);
        for &ci in c[..c.len() - 1].iter().rev() {
            r = self.fma(r, x, self.splat(ci));
        }
        r
    }
    /// `exp(x)` for `x <= 0` (NaN propagates; below the normal range the result is 0 here, a
    /// correctly scaled subnormal in the AVX-512 override).
    #[inline(always)]
    fn exp_neg(self, x: Self::V) -> Self::V {
        let lo = self.splat(EXP_MIN_ARG);
        let xc = self.max(x, lo);
        let n = self.round(self.mul(xc, self.splat(std::f32::consts::LOG2_E)));
        let r = self.fma(n, self.splat(-LN2_HI), xc);
        let r = self.fma(n, self.splat(-LN2_LO), r);
        let y = self.mul(self.horner(r, &EXP_POLY), self.pow2i(n));
        let y = self.select_lt(x, lo, self.splat(0.0), y);
        self.keep_nan(x, y)
    }
    /// `exp(x)` for `x` in `[-30, 0]` (NaN propagates): no clamp, no underflow select, and a
    /// one-constant `ln 2` reduction (|n| <= 44 there, so it adds < 1e-7 relative error).
    /// Serves erfc, whose exponent stays within [-23, -1].
    #[inline(always)]
    fn exp_mid(self, x: Self::V) -> Self::V {
        let n = self.round(self.mul(x, self.splat(std::f32::consts::LOG2_E)));
        let r = self.fnma(n, self.splat(std::f32::consts::LN_2), x);
        self.mul(self.horner(r, &EXP_POLY), self.pow2i(n))
    }
    /// `1 / (1 + exp(-x))`, computed from `exp(-|x|)` so nothing overflows.
    #[inline(always)]
    fn sigmoid(self, x: Self::V) -> Self::V {
        let e = self.exp_neg(self.sub(self.splat(0.0), self.abs(x)));
        let r = self.recip(self.add(self.splat(1.0), e));
        self.select_lt(x, self.splat(0.0), self.mul(e, r), r)
    }
    /// `1 + erf(z)`, accurate in relative terms also where it is small (z << 0). NaN propagates
    /// through the `|z| >= 1` branch (every select there keeps it), so no final NaN fix-up.
    #[inline(always)]
    fn one_plus_erf(self, z: Self::V) -> Self::V {
        let (zero, one, max_arg) = (self.splat(0.0), self.splat(1.0), self.splat(ERFC_MAX_ARG));
        let a = self.abs(z);
        // |z| < 1: erf(z) = z * P(z^2).
        let small = self.fma(z, self.horner(self.mul(z, z), &ERF_SMALL), one);
        // |z| >= 1: erfc(|z|) = exp(-z^2 + Q(|z|)); 0 beyond ERFC_MAX_ARG (f32 1 + erf is exact there).
        let ac = self.min(max_arg, a);
        let q = self.horner(ac, &ERFC_LARGE);
        let ec = self.exp_mid(self.fnma(ac, ac, q));
        let ec = self.select_lt(max_arg, a, zero, ec);
        let large = self.select_lt(z, zero, ec, self.sub(self.splat(2.0), ec));
        self.select_lt(a, one, small, large)
    }
}

/// AVX2 + FMA token (8 lanes).
#[derive(Clone, Copy)]
pub(crate) struct Avx2(());

impl Avx2 {
    pub(crate) fn get() -> Option<Self> {
        (is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")).then_some(Avx2(()))
    }
}

/// AVX-512 F/DQ token (16 lanes).
#[derive(Clone, Copy)]
pub(crate) struct Avx512(());

impl Avx512 {
    pub(crate) fn get() -> Option<Self> {
        (is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma"))
        .then_some(Avx512(()))
    }
}

impl Simd for Avx2 {
    type V = __m256;
    const W: usize = 8;
    #[inline(always)]
    fn splat(self, x: f32) -> __m256 {
        tf!(_mm256_set1_ps(x))
    }
    #[inline(always)]
    fn load(self, s: &[f32], i: usize) -> __m256 {
        let p = s[i..i + 8].as_ptr();
        tf!(_mm256_loadu_ps(p))
    }
    #[inline(always)]
    fn store(self, s: &mut [f32], i: usize, v: __m256) {
        let p = s[i..i + 8].as_mut_ptr();
        tf!(_mm256_storeu_ps(p, v))
    }
    #[inline(always)]
    fn add(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_add_ps(a, b))
    }
    #[inline(always)]
    fn sub(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_sub_ps(a, b))
    }
    #[inline(always)]
    fn mul(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_mul_ps(a, b))
    }
    #[inline(always)]
    fn div(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_div_ps(a, b))
    }
    #[inline(always)]
    fn fma(self, a: __m256, b: __m256, c: __m256) -> __m256 {
        tf!(_mm256_fmadd_ps(a, b, c))
    }
    #[inline(always)]
    fn fnma(self, a: __m256, b: __m256, c: __m256) -> __m256 {
        tf!(_mm256_fnmadd_ps(a, b, c))
    }
    #[inline(always)]
    fn max(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_max_ps(a, b))
    }
    #[inline(always)]
    fn min(self, a: __m256, b: __m256) -> __m256 {
        tf!(_mm256_min_ps(a, b))
    }
    #[inline(always)]
    fn abs(self, a: __m256) -> __m256 {
        tf!(_mm256_andnot_ps(_mm256_set1_ps(-0.0), a))
    }
    #[inline(always)]
    fn round(self, a: __m256) -> __m256 {
        tf!(_mm256_round_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(a))
    }
    #[inline(always)]
    fn pow2i(self, n: __m256) -> __m256 {
        tf!(_mm256_castsi256_ps(_mm256_slli_epi32::<23>(
            _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127))
        )))
    }
    #[inline(always)]
    fn select_lt(self, a: __m256, b: __m256, x: __m256, y: __m256) -> __m256 {
        tf!(_mm256_blendv_ps(y, x, _mm256_cmp_ps::<_CMP_LT_OQ>(a, b)))
    }
    #[inline(always)]
    fn keep_nan(self, v: __m256, x: __m256) -> __m256 {
        tf!(_mm256_blendv_ps(x, v, _mm256_cmp_ps::<_CMP_UNORD_Q>(v, v)))
    }
    #[inline(always)]
    fn reduce_add(self, v: __m256) -> f32 {
        tf!({
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps::<1>(s, s)))
        })
    }
    #[inline(always)]
    fn reduce_max(self, v: __m256) -> f32 {
        tf!({
            let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_max_ss(s, _mm_shuffle_ps::<1>(s, s)))
        })
    }
}

impl Simd for Avx512 {
    type V = __m512;
    const W: usize = 16;
    #[inline(always)]
    fn splat(self, x: f32) -> __m512 {
        tf!(_mm512_set1_ps(x))
    }
    #[inline(always)]
    fn load(self, s: &[f32], i: usize) -> __m512 {
        let p = s[i..i + 16].as_ptr();
        tf!(_mm512_loadu_ps(p))
    }
    #[inline(always)]
    fn store(self, s: &mut [f32], i: usize, v: __m512) {
        let p = s[i..i + 16].as_mut_ptr();
        tf!(_mm512_storeu_ps(p, v))
    }
    #[inline(always)]
    fn load_part(self, s: &[f32], i: usize, n: usize, fill: f32) -> __m512 {
        let s = &s[i..i + n];
        let m: __mmask16 = ((1u32 << n) - 1) as u16;
        tf!(_mm512_mask_loadu_ps(_mm512_set1_ps(fill), m, s.as_ptr()))
    }
    #[inline(always)]
    fn store_part(self, s: &mut [f32], i: usize, n: usize, v: __m512) {
        let s = &mut s[i..i + n];
        let m: __mmask16 = ((1u32 << n) - 1) as u16;
        tf!(_mm512_mask_storeu_ps(s.as_mut_ptr(), m, v))
    }
    #[inline(always)]
    fn add(self, a: __m512, b: __m512) -> __m512 {
        tf!(_mm512_add_ps(a, b))
    }
    #[inline(always)]
    fn sub(self, a: __m512, b: __m512) -> __m512 {
        tf!(_mm512_sub_ps(a, b))
    }
    #[inline(always)]
    fn mul(self, a: __m512, b: __m512) -> __m512 {
        tf!(_mm512_mul_ps(a, b))
    }
    #[inline(always)]
    fn div(self, a: __m512, b: __m512) -> __m512 {
        tf!(_mm512_div_ps(a, b))
    }
    #[inline(always)]
    fn fma(self, a: __m512, b: __m512, c: __m512) -> __m512 {
        tf!(_mm512_fmadd_ps(a, b, c))
    }
    #[inline(always)]
    fn fnma(self, a: __m512, b: __m512, c: __m512) -> __m512 {
        tf!(_mm512_fnmadd_ps(a, b, c))
    }
    #[inline(always)]
    fn max(self, a: __m512, b: __m512) -> __m512 {
        tf!(_mm512_max_ps(a, b))
    }
    #[inline(always)]
    fn min(self, a: __m512, b: __m512) -> __m512 {
        tf!(_mm512_min_ps(a, b))
    }
    #[inline(always)]
    fn abs(self, a: __m512) -> __m512 {
        tf!(_mm512_abs_ps(a))
    }
    #[inline(always)]
    fn round(self, a: __m512) -> __m512 {
        tf!(_mm512_roundscale_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(a))
    }
    #[inline(always)]
    fn pow2i(self, n: __m512) -> __m512 {
        tf!(_mm512_castsi512_ps(_mm512_slli_epi32::<23>(
            _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127))
        )))
    }
    #[inline(always)]
    fn select_lt(self, a: __m512, b: __m512, x: __m512, y: __m512) -> __m512 {
        tf!(_mm512_mask_blend_ps(
            _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b),
            y,
            x
        ))
    }
    #[inline(always)]
    fn keep_nan(self, v: __m512, x: __m512) -> __m512 {
        tf!(_mm512_mask_blend_ps(
            _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v),
            x,
            v
        ))
    }
    /// `vscalefps` scales by `2^n` for any `n` (gradual underflow included), so the clamp only
    /// has to keep the reduction finite and the underflow/NaN selects of the default go away
    /// (`max(lo, x)` returns `x` when it is NaN, and NaN flows through the arithmetic).
    #[inline(always)]
    fn exp_neg(self, x: __m512) -> __m512 {
        let xc = self.max(self.splat(EXP_SCALEF_MIN_ARG), x);
        let n = self.round(self.mul(xc, self.splat(std::f32::consts::LOG2_E)));
        let r = self.fma(n, self.splat(-LN2_HI), xc);
        let r = self.fma(n, self.splat(-LN2_LO), r);
        tf!(_mm512_scalef_ps(self.horner(r, &EXP_POLY), n))
    }
    #[inline(always)]
    fn exp_mid(self, x: __m512) -> __m512 {
        let n = self.round(self.mul(x, self.splat(std::f32::consts::LOG2_E)));
        let r = self.fnma(n, self.splat(std::f32::consts::LN_2), x);
        tf!(_mm512_scalef_ps(self.horner(r, &EXP_POLY), n))
    }
    /// `1 / (1 + exp(-x))` directly: `exp(-x)` over the clamped range `[-104, 88]` stays finite
    /// (`vscalefps`), so no sign split is needed; below -88 (where the true value is under
    /// 6e-39) the result is 0, as from the exp_neg form, so `x * sigmoid(x) = -inf * 0` stays
    /// NaN at -inf (tanh-GELU). NaN flows through (`max`/`min` return their second operand, `x`).
    #[inline(always)]
    fn sigmoid(self, x: __m512) -> __m512 {
        let t = tf!(_mm512_xor_ps(x, _mm512_set1_ps(-0.0)));
        let t = self.max(self.splat(EXP_SCALEF_MIN_ARG), t);
        let t = self.min(self.splat(EXP_MAX_ARG), t);
        let n = self.round(self.mul(t, self.splat(std::f32::consts::LOG2_E)));
        let r = self.fma(n, self.splat(-LN2_HI), t);
        let r = self.fma(n, self.splat(-LN2_LO), r);
        let e = tf!(_mm512_scalef_ps(self.horner(r, &EXP_POLY), n));
        let y = self.recip(self.add(self.splat(1.0), e));
        self.select_lt(x, self.splat(-EXP_MAX_ARG), self.splat(0.0), y)
    }
    /// `vrcp14ps` (relative error < 2^-14) and one Newton step: error ~2^-28 before rounding,
    /// far cheaper than `vdivps zmm`.
    #[inline(always)]
    fn recip(self, a: __m512) -> __m512 {
        let r = tf!(_mm512_rcp14_ps(a));
        let e = tf!(_mm512_fnmadd_ps(a, r, _mm512_set1_ps(1.0)));
        self.fma(r, e, r)
    }
    #[inline(always)]
    fn reduce_add(self, v: __m512) -> f32 {
        tf!(_mm512_reduce_add_ps(v))
    }
    #[inline(always)]
    fn reduce_max(self, v: __m512) -> f32 {
        tf!(_mm512_reduce_max_ps(v))
    }
}

/// Defines `pub(crate) fn $name(args) -> ret` that runs `$generic(token, args)` compiled for
/// `$feat`. Callers (the per-family `IsaTables`) only hand it out when the CPU has the level;
/// it checks `$tok::get()` again (a cached atomic load) and panics rather than run without it.
macro_rules! isa_entry {
    ($name:ident, $tok:ty, $feat:literal, $generic:path, ($($arg:ident : $ty:ty),*) $(-> $ret:ty)?) => {
        pub(crate) fn $name($($arg: $ty),*) $(-> $ret)? {
            #[target_feature(enable = $feat)]
            fn inner(s: $tok, $($arg: $ty),*) $(-> $ret)? {
                $generic(s, $($arg),*)
            }
            let s = <$tok>::get().expect("ISA kernel called on a CPU without the ISA");
            // SAFETY: `s` exists, so the CPU has every feature `inner` is compiled for.
            unsafe { inner(s, $($arg),*) }
        }
    };
}
pub(crate) use isa_entry;
