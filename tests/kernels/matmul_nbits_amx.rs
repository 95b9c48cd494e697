//! The AMX int8 GEMM of MatMulNBits (accuracy level 4, M >= `AMX_MIN_M`) against the scalar
//! int8 reference and the VNNI tile.
//!
//! * Exact integers: A of integers with a +-127 in every block (A scale exactly 1) and weight
//!   scales 1, so every output is a sum of exact per-block integer dot products, compared with
//!   the reference bit for bit.
//! * Random data: within f32 summation-order tolerance of the reference (rel L2 <= 1e-5), and
//!   bit-identical to the VNNI tile (same integers, same epilogue), packed and unpacked, serial
//!   and on three threads.
//!
//! Skipped, with a note, where this process cannot use AMX.

use crate::nbits_common::{rel_l2, Problem, THREE};

use rcpu::kernels::isa::Isa;
use rcpu::kernels::matmul_nbits::dispatch::AMX_MIN_M;
use rcpu::kernels::matmul_nbits::{matmul_packed_with, pack, Kernels, NBitsPath, NBitsRoute};
use rcpu::runtime::par::{Par, Serial};

/// The AMX set that takes AMX for every M > 1 (so the kernel itself is checked at every M) and
/// the plain VNNI set, or `None` (with a note) where AMX is not usable.
fn sets() -> Option<(&'static Kernels, &'static Kernels)> {
    match Kernels::amx_every_m() {
        Ok(amx) => Some((amx, Kernels::for_isa(Isa::Avx512Vnni).unwrap())),
        Err(e) => {
            eprintln!("NOTE: AMX tests skipped: {e}");
            None
        }
    }
}

const MS: [usize; 6] = [2, 15, 16, 17, 64, 130];

fn bits_equal(x: &[f32], y: &[f32]) -> bool {
    x.len() == y.len() && x.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits())
}

/// Runs `pr` on the AMX and VNNI sets (packed and unpacked, serial and three threads); checks
/// the route names, AMX == VNNI bit for bit, and returns the AMX output.
fn run_both(pr: &Problem, label: &str) -> Vec<f32> {
    let (amx, vnni) = sets().expect("checked by the caller");
    run_pair(amx, vnni, pr, label)
}

/// [`run_both`] with a given AMX set.
fn run_pair(amx: &Kernels, vnni: &Kernels, pr: &Problem, label: &str) -> Vec<f32> {
    let (p, m) = (&pr.p, pr.m);
    let (zp, bias) = (pr.zp.as_deref(), pr.bias.as_deref());
    let packed = pack(&pr.b, &pr.scales, zp, p);
    let want_name = amx.route(4, m);
    let mut first: Option<Vec<f32>> = None;
    let pars: [(&str, &dyn Par); 2] = [("serial", &Serial), ("3threads", &THREE)];
    for (pname, par) in pars {
        let ctx = format!("{label} par={pname}");
        let mut got = vec![f32::NAN; m * p.n];
        let name = matmul_packed_with(amx, &pr.a, m, &packed, bias, &mut got, par).unwrap();
        assert_eq!(name, want_name, "{ctx}");
        let mut base = vec![f32::NAN; m * p.n];
        let vname = matmul_packed_with(vnni, &pr.a, m, &packed, bias, &mut base, par).unwrap();
        let want_vnni = NBitsRoute {
            isa: Isa::Avx512Vnni,
            path: NBitsPath::Int8Gemm,
        };
        assert_eq!(vname, want_vnni, "{ctx}");
        assert!(bits_equal(&got, &base), "{ctx}: AMX differs from VNNI");
        let (uname, un) = pr.unpacked(amx, par);
        assert_eq!(uname, want_name, "{ctx}");
        assert!(bits_equal(&un, &got), "{ctx}: unpacked differs from packed");
        if let Some(f) = &first {
            assert!(bits_equal(f, &got), "{ctx}: differs between Par");
        }
        first = Some(got);
    }
    first.unwrap()
}

/// Random data at odd sizes: K not a multiple of 32 or 64, N not a multiple of 16, every M of
/// the brief, with and without zero points and bias, block sizes 16..=256.
#[test]
fn random_data_matches_reference_and_vnni() {
    if sets().is_none() {
        return;
    }
    let shapes = [
        (100, 17, 32),
        (200, 33, 32),
        (77, 40, 16),
        (300, 50, 64),
        (260, 9, 128),
        (513, 31, 256),
    ];
    let mut case = 0u64;
    for (k, n, bs) in shapes {
        for m in MS {
            for zp in [false, true] {
                case += 1;
                let bias = case.is_multiple_of(3);
                let pr = Problem::new(k, n, m, bs, 4, zp, bias, 4000 + case);
                let label = format!("K={k} N={n} M={m} bs={bs} zp={zp} bias={bias}");
                let got = run_both(&pr, &label);
                let e = rel_l2(&got, &pr.int8_reference());
                assert!(e <= 1e-5, "{label}: vs int8 reference rel L2 {e:e}");
            }
        }
    }
}

/// A whose per-block int8 quantisation is exact (integers, a +-127 in every block, so the A
/// scale is 1) and weight scales 1: each output is an exact integer sum of the per-block int32
/// dot products (far below 2^24), so AMX must equal the reference bit for bit.
#[test]
fn exact_integer_block_sums() {
    if sets().is_none() {
        return;
    }
    for (k, n, bs) in [(100, 17, 32), (96, 33, 32), (150, 20, 64), (70, 18, 16)] {
        for m in MS {
            for zp in [false, true] {
                let mut pr = Problem::new(k, n, m, bs, 4, zp, false, (k * m + n) as u64);
                for r in 0..m {
                    let row = &mut pr.a[r * k..(r + 1) * k];
                    for (blk, part) in row.chunks_mut(bs).enumerate() {
                        let at = (r + blk) % part.len();
                        for (i, x) in part.iter_mut().enumerate() {
                            let v = ((r * 31 + (blk * bs + i) * 17) % 255) as f32 - 127.0;
                            let peak = if (r + blk) % 2 == 0 { 127.0 } else { -127.0 };
                            *x = if i == at { peak } else { v };
                        }
                    }
                }
                pr.scales.fill(1.0);
                let label = format!("exact K={k} N={n} M={m} bs={bs} zp={zp}");
                let got = run_both(&pr, &label);
                // Scales 1 are f16-exact, so the level-4 scales are the problem's own.
                let want = pr.int8_reference();
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        g.to_bits() == w.to_bits() && g.fract() == 0.0,
                        "{label}: row {} col {}: {g} vs {w}",
                        i / n,
                        i % n
                    );
                }
            }
        }
    }
}

/// The route's set (AMX from `AMX_MIN_M` rows, a short last row tile on VNNI): bit-identical to
/// VNNI at M around and above the threshold, tails of every length.
#[test]
fn route_set_with_vnni_tails() {
    let Some((_, vnni)) = sets() else { return };
    let amx = Kernels::amx().unwrap();
    for m in [AMX_MIN_M - 1, AMX_MIN_M, 40, 47, 48, 63, 64, 65, 300] {
        let pr = Problem::new(200, 40, m, 32, 4, m % 2 == 0, true, 9000 + m as u64);
        let got = run_pair(amx, vnni, &pr, &format!("route M={m}"));
        let e = rel_l2(&got, &pr.int8_reference());
        assert!(e <= 1e-5, "route M={m}: vs int8 reference rel L2 {e:e}");
    }
}

/// The active set takes AMX from `AMX_MIN_M` rows where AMX is usable (unless `RCPU_AMX=0`),
/// and decode (M = 1) stays on the GEMV route.
#[test]
fn routes() {
    if sets().is_none() {
        return;
    }
    let amx = Kernels::amx().unwrap();
    assert!(amx.has_amx() && amx.isa == Isa::Avx512Vnni);
    let route = |path| NBitsRoute {
        isa: Isa::Avx512Vnni,
        path,
    };
    assert_eq!(amx.route(4, 1), route(NBitsPath::Int8Gemv));
    assert_eq!(amx.route(4, AMX_MIN_M - 1), route(NBitsPath::Int8Gemm));
    assert_eq!(amx.route(4, AMX_MIN_M), route(NBitsPath::AmxGemm));
    assert_eq!(amx.route(0, 64), route(NBitsPath::F32Gemm));
    let off = std::env::var("RCPU_AMX").is_ok_and(|v| v.trim() == "0");
    let capped = Isa::get() < Isa::Avx512Vnni;
    assert_eq!(Kernels::active().has_amx(), !off && !capped);
}
