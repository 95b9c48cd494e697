//! rcpu's one soundness convention for SIMD: capability tokens that only the CPU detection here
//! can mint, and the lane abstraction the glue kernels are written over.
//!
//! # Tokens
//!
//! [`Avx2`], [`Avx512`] and [`Avx512Vnni`] are zero-sized types, one per [`Isa`] level above
//! scalar, each requiring exactly the CPU features of its level (see [`detect`]). Their field is
//! private and their only constructor is `get()`, which returns `Some` only when the CPU (as
//! detected once per process, never capped by `RCPU_ISA`) has the level, so holding a token
//! proves the instructions of its level may run. A higher token converts to a lower one
//! (`Avx512Vnni::avx512`, `Avx512::avx2`). [`Amx`] (AMX int8 tiles) is a token but not a level:
//! it also needs the OS's tile state and permission (see its doc). Nothing outside this file can
//! build one:
//!
//! ```compile_fail
//! // A token's field is private: outside `kernels/simd.rs` the only way to one is `get()`.
//! let forged = rcpu::kernels::simd::Avx512(());
//! ```
//!
//! ```
//! // `get()` is the detection; `None` on a CPU without the level.
//! let _maybe: Option<rcpu::kernels::simd::Avx2> = rcpu::kernels::simd::Avx2::get();
//! ```
//!
//! # Kernels
//!
//! Every family's SIMD code is a `#[target_feature]` function (the intrinsics need the feature)
//! that is called only by an entry generated with [`isa_entry!`] or [`simd_entry!`]: a safe
//! function with the family's uniform table signature that obtains its level's token and calls
//! the `#[target_feature]` function under it, the `// SAFETY:` comment citing the token. The
//! entries are what the family's `isa_tables!` table holds, and
//! [`IsaTables::for_isa`](crate::kernels::isa::IsaTables::for_isa) hands out a level's table
//! only after minting that level's token: a token is the only way to reach a table, and an entry
//! cannot run its SIMD body on a CPU without the level whoever calls it.
//!
//! An [`isa_entry!`] (the glue kernels: one entry call per operator call) mints its token itself
//! (a cached load per call). A [`simd_entry!`] (the GEMM, MatMulNBits, QLinearMatMul and Cast
//! kernels, called per tile or panel) takes a [`Level`] as its first argument instead, which the
//! family's driver mints once per operator call ([`Level::get`]) and hands to every entry call:
//! the entry turns it into its token with a compare on that value (`Avx2::of`), so the hot path
//! reads nothing process-wide, and a `Level` too low for the entry still cannot run its body.
//!
//! # Lanes
//!
//! [`Simd`] is a small lane abstraction over AVX2 (`__m256`, 8 lanes) and AVX-512 (`__m512`, 16
//! lanes) implemented by the tokens, so the glue kernels (activations, softmax, normalisations,
//! attention, binary ops) are written once, generic over [`Simd`], and instantiated per level
//! inside `#[target_feature]` functions ([`isa_entry!`]). Every method is `#[inline(always)]`:
//! once inlined into a `#[target_feature]` caller the intrinsics compile to single instructions.
//!
//! The vector math here (exp on x <= 0, erf / erfc) uses polynomial fits made for rcpu (least
//! squares on Chebyshev nodes, refined toward minimax): exp max relative error ~2 ulp, erf max
//! absolute error ~1.5e-7, erfc (for |x| >= 1) relative error ~3e-6.

#![allow(clippy::incompatible_msrv)]

use std::sync::LazyLock;

use crate::kernels::isa::Isa;

/// The CPU's level (features checked with `is_x86_feature_detected!`), without any cap: the
/// only place rcpu decides which SIMD instructions exist.
pub fn detect() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let avx2 = has!("avx2") && has!("fma") && has!("f16c");
        let avx512 =
            avx2 && has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl");
        if avx512 && has!("avx512vnni") {
            return Isa::Avx512Vnni;
        }
        if avx512 {
            return Isa::Avx512;
        }
        if avx2 {
            return Isa::Avx2;
        }
    }
    Isa::Scalar
}

/// [`detect`], once per process.
pub fn hardware() -> Isa {
    static HW: LazyLock<Isa> = LazyLock::new(detect);
    *HW
}

/// Whether the CPU reports itself as Intel's (CPUID leaf 0), once per process. For the few tuning
/// constants measured on one vendor only (`matmul_nbits::prefetch`).
pub fn is_intel() -> bool {
    static INTEL: LazyLock<bool> = LazyLock::new(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let l0 = std::arch::x86_64::__cpuid(0);
            // "GenuineIntel" in EBX, EDX, ECX order.
            (l0.ebx, l0.edx, l0.ecx) == (0x756e_6547, 0x4965_6e69, 0x6c65_746e)
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    });
    *INTEL
}

/// AVX2 + FMA + F16C ([`Isa::Avx2`]); 8 f32 lanes.
#[derive(Debug, Clone, Copy)]
pub struct Avx2(());

/// AVX-512 F/BW/DQ/VL with everything of [`Avx2`] ([`Isa::Avx512`]); 16 f32 lanes.
#[derive(Debug, Clone, Copy)]
pub struct Avx512(());

/// [`Avx512`] plus VNNI (`vpdpbusd`) ([`Isa::Avx512Vnni`]).
#[derive(Debug, Clone, Copy)]
pub struct Avx512Vnni(());

/// A level this CPU has, carried by a family's driver into its [`simd_entry!`] entries (see the
/// module doc). Its field is private and its only constructor is [`Level::get`], which checks
/// the detection, so holding one proves the CPU has its level and every level below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level(Isa);

impl Level {
    /// `isa` when this CPU has it (checked against [`hardware`], once per process).
    #[inline]
    pub fn get(isa: Isa) -> Option<Level> {
        (hardware() >= isa).then_some(Level(isa))
    }

    /// [`Level::get`], or the one "not supported" error ([`unsupported`]).
    #[inline]
    pub fn require(isa: Isa) -> Result<Level, String> {
        Level::get(isa).ok_or_else(|| unsupported(isa))
    }

    /// The level it proves.
    pub fn isa(self) -> Isa {
        self.0
    }
}

impl Avx2 {
    /// The token when this CPU has [`Isa::Avx2`] (checked once per process).
    #[inline]
    pub fn get() -> Option<Self> {
        (hardware() >= Isa::Avx2).then_some(Avx2(()))
    }
    /// The token when `level` proves [`Isa::Avx2`]: a compare on the value, no detection read.
    #[inline(always)]
    pub fn of(level: Level) -> Option<Self> {
        (level.0 >= Isa::Avx2).then_some(Avx2(()))
    }
}

impl Avx512 {
    /// The token when this CPU has [`Isa::Avx512`] (checked once per process).
    #[inline]
    pub fn get() -> Option<Self> {
        (hardware() >= Isa::Avx512).then_some(Avx512(()))
    }
    /// The token when `level` proves [`Isa::Avx512`] (see [`Avx2::of`]).
    #[inline(always)]
    pub fn of(level: Level) -> Option<Self> {
        (level.0 >= Isa::Avx512).then_some(Avx512(()))
    }
    /// AVX-512 implies AVX2.
    #[inline]
    pub fn avx2(self) -> Avx2 {
        Avx2(())
    }
}

impl Avx512Vnni {
    /// The token when this CPU has [`Isa::Avx512Vnni`] (checked once per process).
    #[inline]
    pub fn get() -> Option<Self> {
        (hardware() >= Isa::Avx512Vnni).then_some(Avx512Vnni(()))
    }
    /// The token when `level` proves [`Isa::Avx512Vnni`] (see [`Avx2::of`]).
    #[inline(always)]
    pub fn of(level: Level) -> Option<Self> {
        (level.0 >= Isa::Avx512Vnni).then_some(Avx512Vnni(()))
    }
    /// VNNI implies the AVX-512 level.
    #[inline]
    pub fn avx512(self) -> Avx512 {
        Avx512(())
    }
}

/// AMX int8 tiles (`ldtilecfg`, `tileloadd`, `tdpbssd`, `tilestored`, `tilerelease`) on top of
/// everything of [`Avx512Vnni`] (the AMX kernels' epilogues are AVX-512). Not an [`Isa`] level:
/// usable only when, besides the CPUID bits (AMX-TILE and AMX-INT8), the OS enables the tile
/// state in XCR0 (bits 17 and 18) and grants this process tile data (Linux asks for it with
/// `arch_prctl`, [`crate::os::xstate::request_amx_permission`]; without it the first tile
/// instruction is SIGILL). Detected (and the permission asked) once per process.
#[derive(Debug, Clone, Copy)]
pub struct Amx(());

impl Amx {
    /// The token when this CPU has AMX int8 with the AVX-512 VNNI level and this process may
    /// use the tile state (checked once per process).
    #[inline]
    pub fn get() -> Option<Self> {
        static AMX: LazyLock<bool> = LazyLock::new(detect_amx);
        (*AMX).then_some(Amx(()))
    }
    /// AMX here implies the VNNI level (checked by [`Amx::get`]).
    #[inline]
    pub fn vnni(self) -> Avx512Vnni {
        Avx512Vnni(())
    }
}

/// CPUID, XCR0 and the OS permission for AMX int8 (see [`Amx`]); asks for the permission.
fn detect_amx() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid_count;
        if hardware() < Isa::Avx512Vnni || !std::arch::is_x86_feature_detected!("xsave") {
            return false;
        }
        let leaf7 = __cpuid_count(7, 0);
        let (tile, int8) = (leaf7.edx & (1 << 24) != 0, leaf7.edx & (1 << 25) != 0);
        #[target_feature(enable = "xsave")]
        fn xcr0() -> u64 {
            // SAFETY: `xgetbv` of XCR0 needs only XSAVE with OSXSAVE, which
            // `is_x86_feature_detected!("xsave")` checked (it requires both).
            unsafe { std::arch::x86_64::_xgetbv(0) }
        }
        // SAFETY: the caller checked XSAVE (the only feature `xcr0` enables).
        let xcr0 = unsafe { xcr0() };
        let tile_state = xcr0 & (0b11 << 17) == 0b11 << 17;
        tile && int8 && tile_state && crate::os::xstate::request_amx_permission().is_ok()
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether `isa` may run here: minted from the level's token, so a table handed out on `Ok`
/// is one the CPU can run. `Err` (the one "no table for this ISA" answer of every family) names
/// the level.
pub fn check(isa: Isa) -> Result<(), String> {
    let ok = match isa {
        Isa::Scalar => true,
        Isa::Avx2 => Avx2::get().is_some(),
        Isa::Avx512 => Avx512::get().is_some(),
        Isa::Avx512Vnni => Avx512Vnni::get().is_some(),
    };
    if ok {
        Ok(())
    } else {
        Err(unsupported(isa))
    }
}

/// The message of every "no table for this ISA" error.
pub fn unsupported(isa: Isa) -> String {
    format!("ISA {} not supported by this CPU", isa.name())
}

#[cfg(target_arch = "x86_64")]
pub(crate) use lanes::*;

#[cfg(target_arch = "x86_64")]
mod lanes {
    use std::arch::x86_64::*;

    use super::{Avx2, Avx512};
    use crate::kernels::activation::consts::*;

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
        /// `W` horizontal sums at once: lane `i` of the result is the sum of the lanes of `v[i]`
        /// (`v.len() == W`; panics otherwise). A transpose-and-add tree: about two shuffles and
        /// one add per vector, where `W` separate [`Simd::reduce_add`]s take a dependent chain of
        /// shuffles and adds each. The order of the additions differs from `reduce_add`'s.
        fn sums(self, v: &[Self::V]) -> Self::V;

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
        #[inline(always)]
        fn sums(self, v: &[__m256]) -> __m256 {
            let v: &[__m256; 8] = v.try_into().expect("sums: W vectors");
            tf!({
                // hadd(a, b) = (a0+a1, a2+a3, b0+b1, b2+b3 | the same of the high halves): two
                // rounds leave, per 128-bit half, the four rows' partial sums of that half.
                let h0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
                let h1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
                // Low halves of both plus high halves of both: rows 0..3, then 4..7.
                _mm256_add_ps(
                    _mm256_permute2f128_ps::<0x20>(h0, h1),
                    _mm256_permute2f128_ps::<0x31>(h0, h1),
                )
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
        #[inline(always)]
        fn sums(self, v: &[__m512]) -> __m512 {
            let v: &[__m512; 16] = v.try_into().expect("sums: W vectors");
            tf!({
                // 1. Rows (2i, 2i + 1): per 128-bit lane (a0..a3, b0..b3), unpacklo + unpackhi =
                //    (a0+a2, b0+b2, a1+a3, b1+b3).
                //    (Loops, not `array::from_fn`: once a kernel grew, its closures were no longer
                //    inlined and ran out of line, without the kernel's target features.)
                let mut s1 = [_mm512_setzero_ps(); 8];
                for (i, o) in s1.iter_mut().enumerate() {
                    let (a, b) = (v[2 * i], v[2 * i + 1]);
                    *o = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
                }
                // 2. Rows 4j..4j + 4: the 64-bit halves of two such vectors, interleaved and
                //    added, leave per 128-bit lane the four rows' sums over that lane.
                let mut s2 = [_mm512_setzero_ps(); 4];
                for (j, o) in s2.iter_mut().enumerate() {
                    let (x, y) = (_mm512_castps_pd(s1[2 * j]), _mm512_castps_pd(s1[2 * j + 1]));
                    *o = _mm512_add_ps(
                        _mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                        _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)),
                    );
                }
                // 3. and 4. Lanes (0, 2) plus lanes (1, 3) of two vectors (`0x88` picks 128-bit
                //    lanes 0, 2 of each, `0xDD` lanes 1, 3): twice, so lane i of the result holds
                //    rows 4i..4i + 4 summed over all four lanes.
                let fold = |x: __m512, y: __m512| {
                    _mm512_add_ps(
                        _mm512_shuffle_f32x4::<0x88>(x, y),
                        _mm512_shuffle_f32x4::<0xDD>(x, y),
                    )
                };
                fold(fold(s2[0], s2[1]), fold(s2[2], s2[3]))
            })
        }
    }
}

/// `isa_entry!(name, Token, "features", generic, (args) -> ret)` defines the table entry
/// `pub(crate) fn name(args) -> ret`: it mints `Token` (a cached load), then runs
/// `generic(token, args)` compiled for `"features"`, which must be features of the token's level.
/// The token cannot be missing where the entry is reached through its family's table (which
/// minted it first); called directly on a CPU without the level it panics instead of running.
macro_rules! isa_entry {
    ($name:ident, $tok:ty, $feat:literal, $generic:path, ($($arg:ident : $ty:ty),*) $(-> $ret:ty)?) => {
        pub(crate) fn $name($($arg: $ty),*) $(-> $ret)? {
            #[target_feature(enable = $feat)]
            fn inner(s: $tok, $($arg: $ty),*) $(-> $ret)? {
                $generic(s, $($arg),*)
            }
            let s = <$tok>::get().expect("ISA kernel called on a CPU without the ISA");
            // SAFETY: `s` exists, so the CPU has every feature of its level, which includes every
            // feature `inner` is compiled for.
            unsafe { inner(s, $($arg),*) }
        }
    };
}

/// `simd_entry!(vis fn name(args) -> ret = Token => kernel)` defines the table entry
/// `vis fn name(level: Level, args) -> ret` with the family's uniform signature: it takes
/// `Token` from the caller's [`Level`] (`Token::of`, a compare on the value) and calls the
/// `#[target_feature]` function `kernel(args)` under it; `= Token => token kernel` passes the
/// token as `kernel`'s first argument (kernels generic over [`Simd`]). `kernel` must enable only
/// features of the token's level (each use states them beside it). Panics, rather than run, when
/// handed a level below `Token`'s; a family's driver hands its table's own level, so through the
/// table that cannot happen.
macro_rules! simd_entry {
    ($vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? = $tok:ty => $kernel:path) => {
        $crate::kernels::simd::simd_entry!(@emit $vis $name ($($arg: $ty),*) ($($ret)?) $tok, _token => $kernel($($arg),*));
    };
    ($vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? = $tok:ty => token $kernel:path) => {
        $crate::kernels::simd::simd_entry!(@emit $vis $name ($($arg: $ty),*) ($($ret)?) $tok, token => $kernel(token, $($arg),*));
    };
    (@emit $vis:vis $name:ident ($($arg:ident : $ty:ty),*) ($($ret:ty)?) $tok:ty, $t:ident => $call:expr) => {
        // The signature is the family's table type, however many arguments it has.
        #[allow(clippy::too_many_arguments)]
        $vis fn $name(level: $crate::kernels::simd::Level, $($arg: $ty),*) $(-> $ret)? {
            let $t: $tok = <$tok>::of(level).expect("ISA kernel handed a level below its own");
            // SAFETY: the token exists, so the CPU has every feature of its level, which includes
            // every feature the kernel is compiled for.
            unsafe { $call }
        }
    };
}

/// `plain_entry!(vis fn name(args) -> ret => kernel)`: the scalar table's entry of the same
/// uniform signature as a [`simd_entry!`] (it ignores the [`Level`] and calls `kernel(args)`).
macro_rules! plain_entry {
    ($vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? => $kernel:path) => {
        #[allow(clippy::too_many_arguments)]
        $vis fn $name(_level: $crate::kernels::simd::Level, $($arg: $ty),*) $(-> $ret)? {
            $kernel($($arg),*)
        }
    };
}

pub(crate) use isa_entry;
pub(crate) use plain_entry;
pub(crate) use simd_entry;
