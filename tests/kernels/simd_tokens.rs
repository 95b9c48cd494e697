//! The SIMD soundness convention (`kernels/simd.rs`): a level's token exists exactly when the
//! CPU has the level (never capped by `RCPU_ISA`), and every family answers a level the CPU
//! lacks with the same `Err` and runs the ones it has.

use rcpu::kernels::activation::{activation_f32_with, Activation};
use rcpu::kernels::elementwise::{binary_f32_with, BinaryOp};
use rcpu::kernels::isa::{hardware, Isa};
use rcpu::kernels::simd::{self, Amx, Avx2, Avx512, Avx512Vnni, Level};
use rcpu::kernels::{matmul_nbits, qgemm};
use rcpu::runtime::par::Serial;

const LEVELS: [Isa; 4] = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni];

#[test]
fn a_token_exists_exactly_when_the_cpu_has_its_level() {
    let hw = simd::detect();
    assert_eq!(hw, hardware());
    assert_eq!(Avx2::get().is_some(), hw >= Isa::Avx2);
    assert_eq!(Avx512::get().is_some(), hw >= Isa::Avx512);
    assert_eq!(Avx512Vnni::get().is_some(), hw >= Isa::Avx512Vnni);
    // AMX needs the VNNI level besides its own CPUID, XCR0 and OS-permission checks.
    assert!(Amx::get().is_none() || hw >= Isa::Avx512Vnni);
    for l in LEVELS {
        assert_eq!(simd::check(l).is_ok(), l <= hw, "{}", l.name());
    }
}

/// The `Level` a driver carries into its table's entries: minted only for a level the CPU has,
/// and it yields exactly the tokens at or below its own level (an entry handed a lower level
/// cannot get its token, so cannot run its SIMD body).
#[test]
fn a_level_yields_only_the_tokens_at_or_below_it() {
    let hw = hardware();
    for l in LEVELS {
        let Some(lv) = Level::get(l) else {
            assert!(l > hw, "{} is supported but got no Level", l.name());
            continue;
        };
        assert!(l <= hw && lv.isa() == l, "{}", l.name());
        assert_eq!(Avx2::of(lv).is_some(), l >= Isa::Avx2, "{}", l.name());
        assert_eq!(Avx512::of(lv).is_some(), l >= Isa::Avx512, "{}", l.name());
        assert_eq!(
            Avx512Vnni::of(lv).is_some(),
            l >= Isa::Avx512Vnni,
            "{}",
            l.name()
        );
    }
    assert_eq!(Level::require(Isa::Scalar).map(Level::isa), Ok(Isa::Scalar));
}

#[test]
fn every_family_reaches_a_table_only_for_a_level_the_cpu_has() {
    let hw = hardware();
    let x = [0.5f32, -1.0, 2.0];
    for l in LEVELS {
        let mut out = [0f32; 3];
        let results = [
            activation_f32_with(l, Activation::Sigmoid, &x, None, &mut out, &Serial).map(|_| ()),
            binary_f32_with(l, BinaryOp::Add, &x, &[3], &x, &[3], &mut out, &Serial).map(|_| ()),
            qgemm::Kernels::for_isa(l).map(|_| ()),
            matmul_nbits::Kernels::for_isa(l).map(|_| ()),
        ];
        for (family, r) in results.into_iter().enumerate() {
            if l <= hw {
                assert_eq!(r, Ok(()), "family {family} at {}", l.name());
            } else {
                assert_eq!(
                    r,
                    Err(simd::unsupported(l)),
                    "family {family} at {}",
                    l.name()
                );
            }
        }
    }
    assert_eq!(
        matmul_nbits::Kernels::supported().len(),
        LEVELS.iter().filter(|&&l| l <= hw).count() + Amx::get().is_some() as usize
    );
    // The AMX set is handed out exactly under the `Amx` token.
    assert_eq!(matmul_nbits::Kernels::amx().is_ok(), Amx::get().is_some());
}
