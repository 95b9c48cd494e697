//! The property of the `fuzz/` target `nbits_params`, run on stable as a bounded, deterministic
//! test: a few thousand pseudo-random (fixed-seed xorshift) attribute sets and weight buffers
//! go through `NBitsParams::{new, validate, check_sizes}`; whenever they are accepted and small,
//! through `pack` + `matmul_packed` and `matmul_unpacked` on `Serial`. Nothing may panic and the
//! packed and unpacked results must be identical bit for bit.

use std::panic::{catch_unwind, AssertUnwindSafe};

use rcpu::kernels::matmul_nbits::{matmul_packed, matmul_unpacked, pack, NBitsParams, NBitsWeight};
use rcpu::runtime::par::Serial;

use crate::rng;
use rng::Rng;

/// One fuzz input, decoded: attributes, buffer lengths, and the bytes to fill them with.
struct Input {
    k: usize,
    n: usize,
    block: usize,
    acc: usize,
    has_zp: bool,
    /// Whether B/scales/zero points get the lengths the attributes imply (else random ones).
    consistent: bool,
    m: usize,
    seed: u64,
    lens: [usize; 3],
}

fn gen(r: &mut Rng, max_dim: u64) -> Input {
    let dim = |r: &mut Rng| match r.below(10) {
        0 => 0,
        1..=6 => 1 + r.below(100) as usize,
        7 => 1 + r.below(4096) as usize,
        8 => r.below(max_dim) as usize,
        // Powers of two, where wrapped products collapse to zero.
        _ => (1u64 << r.below(64)).min(max_dim) as usize,
    };
    Input {
        k: dim(r),
        n: dim(r),
        block: r.pick(&[
            16,
            32,
            64,
            128,
            256,
            16,
            32,
            64,
            0,
            1,
            8,
            15,
            24,
            512,
            1 << 20,
        ]),
        acc: r.pick(&[0, 1, 2, 3, 4, 4, 5, 7]),
        has_zp: r.below(2) == 0,
        consistent: r.below(4) != 0,
        m: r.pick(&[0, 1, 1, 2, 3, 4, 5, 9]),
        seed: r.next_u64(),
        lens: if r.below(4) == 0 {
            [0, 0, 0]
        } else {
            [
                r.below(5000) as usize,
                r.below(600) as usize,
                r.below(300) as usize,
            ]
        },
    }
}

/// The property. Returns whether the compute path ran.
fn property(inp: &Input) -> bool {
    let p = NBitsParams::new(inp.k, inp.n, inp.block, inp.acc, inp.has_zp);
    let valid = p.validate().is_ok();
    // Lengths: what the attributes imply when that is small, else the random ones.
    let implied = || -> Option<[usize; 3]> {
        if !valid {
            return None;
        }
        let kb = p.k.div_ceil(p.block_size);
        let b = p.n.checked_mul(kb)?.checked_mul(p.blob_bytes())?;
        let s = p.n.checked_mul(kb)?;
        let z = p.n.checked_mul(kb.div_ceil(2))?;
        assert_eq!(p.implied_lens(), Some([b, s, z]), "implied_lens for {p:?}");
        Some([b, s, z])
    };
    let lens = match implied() {
        Some(l) if inp.consistent && l[0] <= 1 << 16 => l,
        _ => inp.lens,
    };
    let zp_len = inp.has_zp.then_some(lens[2]);
    let sizes_ok = p.check_sizes(lens[0], lens[1], zp_len, None).is_ok();
    if sizes_ok {
        assert!(valid, "check_sizes accepted invalid attributes {p:?}");
        // Accepted lengths are exactly the (non-overflowing) implied ones.
        let want = implied();
        let got_zp = inp.has_zp.then_some(lens[2]);
        let ok = want.is_some_and(|w| {
            w[0] == lens[0] && w[1] == lens[1] && (!inp.has_zp || Some(w[2]) == got_zp)
        });
        assert!(
            ok,
            "check_sizes accepted lengths {lens:?} for {p:?}; implied {want:?}"
        );
    }
    let small = p.k <= 1024 && p.n <= 96;
    if !(sizes_ok && small) {
        return false;
    }
    let mut r = Rng(inp.seed | 1);
    let b: Vec<u8> = (0..lens[0]).map(|_| r.next_u64() as u8).collect();
    let scales: Vec<f32> = (0..lens[1])
        .map(|_| (r.below(2000) as f32 - 1000.0) / 8000.0)
        .collect();
    let zp: Option<Vec<u8>> = zp_len.map(|l| (0..l).map(|_| r.next_u64() as u8).collect());
    let a: Vec<f32> = (0..inp.m * p.k)
        .map(|_| (r.below(2001) as f32 - 1000.0) / 500.0)
        .collect();
    let bias: Option<Vec<f32>> =
        (r.below(2) == 0).then(|| (0..p.n).map(|i| i as f32 * 0.25).collect());
    let packed = pack(&b, &scales, zp.as_deref(), &p);
    let mut y1 = vec![f32::NAN; inp.m * p.n];
    let mut y2 = vec![f32::NAN; inp.m * p.n];
    matmul_packed(&a, inp.m, &packed, bias.as_deref(), &mut y1, &Serial).unwrap();
    matmul_unpacked(
        &a,
        inp.m,
        &NBitsWeight {
            b: &b,
            scales: &scales,
            zero_points: zp.as_deref(),
            p: &p,
        },
        bias.as_deref(),
        &mut y2,
        &Serial,
    )
    .unwrap();
    let same = y1.iter().zip(&y2).all(|(x, y)| x.to_bits() == y.to_bits());
    assert!(same, "packed and unpacked differ for {p:?}, m={}", inp.m);
    assert!(
        y1.iter().all(|v| v.is_finite()),
        "non-finite output for {p:?}"
    );
    true
}

fn run(seed: u64, cases: usize, max_dim: u64) -> (usize, usize) {
    let mut r = Rng(seed);
    let mut computed = 0;
    for i in 0..cases {
        let inp = gen(&mut r, max_dim);
        let ok = catch_unwind(AssertUnwindSafe(|| property(&inp)));
        match ok {
            Ok(true) => computed += 1,
            Ok(false) => {}
            Err(_) => panic!(
                "case {i} (seed {seed:#x}) panicked: K={} N={} block={} acc={} zp={} consistent={} m={} lens={:?}",
                inp.k, inp.n, inp.block, inp.acc, inp.has_zp, inp.consistent, inp.m, inp.lens
            ),
        }
    }
    (cases, computed)
}

#[test]
fn nbits_params_pack_and_matmul_never_panic() {
    // Dimensions up to 2^32: every product the size checks form fits in 64 bits.
    let (n, computed) = run(0x5eed_1234_abcd_0001, 3000, 1 << 32);
    println!("{n} inputs, {computed} ran pack + matmul");
    // The generator really reaches the compute path (not only rejections).
    assert!(
        computed > n / 10,
        "only {computed} of {n} inputs reached the kernels"
    );
}

/// Dimensions up to 2^63: `NBitsParams::validate` must refuse sizes beyond the address space
/// before anything multiplies (it once wrapped K = N = 2^40 to an expected size of 0), and
/// `check_sizes` computes its expected lengths checked (`implied_lens`) on its own.
#[test]
fn huge_dims_do_not_panic() {
    run(0x5eed_1234_abcd_0002, 3000, u64::MAX >> 1);
}
