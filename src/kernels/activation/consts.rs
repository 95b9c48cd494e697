//! Constants of the vector math shared by the scalar and SIMD variants (rcpu's own fits).

/// Below this, `exp(x)` is under the smallest normal f32 and is returned as 0.
pub(crate) const EXP_MIN_ARG: f32 = -87.336_54;
/// Below this `exp(x)` rounds to 0 even as a subnormal (used where the scaling is `vscalefps`).
pub(crate) const EXP_SCALEF_MIN_ARG: f32 = -104.0;
/// Above this `exp(x)` overflows f32 (clamp of the AVX-512 sigmoid's `exp(-x)`: it stays finite).
pub(crate) const EXP_MAX_ARG: f32 = 88.0;
/// ln 2 split for Cody-Waite range reduction (`LN2_HI` has trailing zero bits).
pub(crate) const LN2_HI: f32 = 0.693_359_4;
pub(crate) const LN2_LO: f32 = -2.121_944_4e-4;
/// `exp(r) = P(r)` on `|r| <= ln2 / 2`, plain Horner (degree 6, relative error < 7.1e-8 with
/// f32 FMAs: the same as a degree-7 `1 + r + r^2 Q(r)` form, in 6 FMAs instead of 8 operations).
pub(crate) const EXP_POLY: [f32; 7] = [
    1.0,
    1.0,
    0.499_999_94,
    0.166_664_32,
    0.041_667_998,
    0.008_374_17,
    0.001_384_401_1,
];
/// Below this `|x|`, `tanh(x) = x * P(x^2)` with `P` the Taylor series of `tanh(x) / x` through
/// `x^18` (coefficients from the Bernoulli numbers; the first term left out is under 1e-8 of the
/// result at the bound); from it on `tanh(|x|) = (1 - e) / (1 + e)` with `e = exp(-2|x|)`, where
/// `1 - e >= 0.71` loses nothing to cancellation.
pub(crate) const TANH_SMALL_MAX: f32 = 0.625;
pub(crate) const TANH_SMALL: [f32; 10] = [
    1.0,
    -0.333_333_34,
    0.133_333_33,
    -0.053_968_254,
    0.021_869_488,
    -0.008_863_236,
    0.003_592_128,
    -0.001_455_834_4,
    0.000_590_027_4,
    -0.000_239_129_1,
];
/// `erf(z) = z * P(z^2)` on `|z| < 1`.
pub(crate) const ERF_SMALL: [f32; 7] = [
    std::f32::consts::FRAC_2_SQRT_PI,
    -0.376_126_3,
    0.112_836_115,
    -0.026_854_781,
    0.005_190_011_6,
    -0.000_802_403_26,
    7.897_26e-5,
];
/// `erfc(a) = exp(-a^2 + Q(a))` on `1 <= a <= ERFC_MAX_ARG`.
pub(crate) const ERFC_LARGE: [f32; 11] = [
    0.000_358_993_94,
    -1.130_396_1,
    0.368_452_76,
    -0.110_325_31,
    0.026_526_539,
    -0.004_763_921,
    0.000_578_517_27,
    -3.662_282e-5,
    -6.290_623e-7,
    2.777_067_6e-7,
    -1.398_843_7e-8,
];
/// Beyond this `erfc` is below half an ulp of 1 (and under the fit's range): treated as 0.
pub(crate) const ERFC_MAX_ARG: f32 = 4.5;
/// `sqrt(2 / pi)`, the tanh-GELU inner scale, and `0.044715`.
pub(crate) const GELU_TANH_ALPHA: f32 = 0.797_884_6;
pub(crate) const GELU_TANH_GAMMA: f32 = 0.044_715;
