//! The SIMD soundness convention (`kernels/simd.rs`): a level's token exists exactly when the
//! CPU has the level (never capped by `RCPU_ISA`), and every family answers a level the CPU
//! lacks with the same `Err` and runs the ones it has.

use rcpu::kernels::activation::{activation_f32_with, Activation};
use rcpu::kernels::elementwise::{binary_f32_with, BinaryOp};
use rcpu::kernels::isa::{hardware, Isa};
use rcpu::kernels::simd::{self, Avx2, Avx512, Avx512Vnni};
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
    for l in LEVELS {
        assert_eq!(simd::check(l).is_ok(), l <= hw, "{}", l.name());
    }
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
        LEVELS.iter().filter(|&&l| l <= hw).count()
    );
}
