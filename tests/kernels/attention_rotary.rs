//! RotaryEmbedding kernel against a plain f64 reference: both layouts, rotate-half and
//! interleaved, full and partial rotary, offset and per-token positions, every ISA this CPU has,
//! serial and 3 lanes (bit-identical to the default serial run), and out-of-cache positions.
//! Tolerance: rtol 1e-5, atol 1e-6.

use crate::glue_common;
use glue_common::*;

use rcpu::kernels::attention::rotary::{
    rotary_f32, rotary_f32_with, Positions, RotaryInputs, RotaryShape,
};
use rcpu::runtime::par::{Par, Serial};

/// Rotates every head row of `x` with the cache row of its token.
pub(crate) fn reference(
    sh: &RotaryShape,
    pos: &[usize],
    cos: &[f32],
    sin: &[f32],
    x: &[f32],
) -> Vec<f64> {
    let (half, h) = (sh.rot / 2, sh.head);
    let mut y: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for b in 0..sh.batch {
        for s in 0..sh.seq {
            for n in 0..sh.heads {
                let at = if sh.head_major {
                    ((b * sh.heads + n) * sh.seq + s) * h
                } else {
                    ((b * sh.seq + s) * sh.heads + n) * h
                };
                let p = pos[b * sh.seq + s];
                for i in 0..half {
                    let (i1, i2) = if sh.interleaved {
                        (2 * i, 2 * i + 1)
                    } else {
                        (i, i + half)
                    };
                    let (c, sn) = (cos[p * half + i] as f64, sin[p * half + i] as f64);
                    let (x1, x2) = (x[at + i1] as f64, x[at + i2] as f64);
                    y[at + i1] = x1 * c - x2 * sn;
                    y[at + i2] = x2 * c + x1 * sn;
                }
            }
        }
    }
    y
}

fn caches(rng: &mut Rng, max_pos: usize, half: usize) -> (Vec<f32>, Vec<f32>) {
    let ang = rng.vec_f32(max_pos * half, -3.2, 3.2);
    (
        ang.iter().map(|a| a.cos()).collect(),
        ang.iter().map(|a| a.sin()).collect(),
    )
}

fn check(sh: RotaryShape, offset: Option<i64>, seed: u64) {
    let mut rng = Rng(seed);
    let max_pos = 70;
    let (cos, sin) = caches(&mut rng, max_pos, sh.rot / 2);
    let n = sh.batch * sh.seq * sh.heads * sh.head;
    let x = rng.vec_f32(n, -2.0, 2.0);
    let ids: Vec<i64> = (0..sh.batch * sh.seq)
        .map(|_| (rng.next_u64() % max_pos as u64) as i64)
        .collect();
    let (pos, posv): (Positions, Vec<usize>) = match offset {
        Some(o) => (
            Positions::Offset(o),
            (0..sh.batch * sh.seq)
                .map(|i| o as usize + i % sh.seq)
                .collect(),
        ),
        None => (
            Positions::PerToken(&ids),
            ids.iter().map(|&p| p as usize).collect(),
        ),
    };
    let want = reference(&sh, &posv, &cos, &sin, &x);
    let mut serial = vec![0.0f32; n];
    let inp = RotaryInputs {
        pos,
        cos: &cos,
        sin: &sin,
        x: &x,
    };
    rotary_f32(&sh, &inp, &mut serial, &Serial).unwrap();
    for isa in ISAS {
        for (pname, par) in [("serial", &Serial as &dyn Par), ("3-lane", &THREE)] {
            let mut y = vec![f32::NAN; n];
            match rotary_f32_with(isa, &sh, &inp, &mut y, par) {
                Ok(_) => {}
                Err(e) if e.contains("not supported") => continue,
                Err(e) => panic!("{e}"),
            }
            let what = format!("{sh:?} offset {offset:?} {isa:?} {pname}");
            assert_close(&what, &y, &want, 1e-5, 1e-6);
            if isa == rcpu::kernels::isa::Isa::get() {
                assert_same(&format!("{what} vs default serial"), &y, &serial);
            }
        }
    }
}

fn shape(
    batch: usize,
    seq: usize,
    heads: usize,
    head: usize,
    rot: usize,
    head_major: bool,
    interleaved: bool,
) -> RotaryShape {
    RotaryShape {
        batch,
        seq,
        heads,
        head,
        rot,
        head_major,
        interleaved,
    }
}

#[test]
fn layouts_pairings_and_positions() {
    let mut seed = 1;
    for head_major in [false, true] {
        for interleaved in [false, true] {
            for (b, s, n, h, rot) in [
                (1, 1, 1, 2, 2),
                (2, 3, 3, 64, 64),
                (1, 5, 2, 64, 32),
                (2, 7, 1, 34, 34),
                (1, 2, 2, 128, 96),
            ] {
                for offset in [None, Some(0), Some(11)] {
                    seed += 1;
                    check(
                        shape(b, s, n, h, rot, head_major, interleaved),
                        offset,
                        seed,
                    );
                }
            }
        }
    }
}

#[test]
fn large_enough_to_split_over_lanes() {
    // 2 * 64 * 4 * 64 = 32768 elements: above PAR_MIN_ELEMS.
    check(shape(2, 64, 4, 64, 64, false, false), None, 99);
    check(shape(2, 4, 64, 64, 64, true, true), Some(3), 98);
}

#[test]
fn empty_input() {
    check(shape(0, 3, 2, 64, 64, false, false), None, 5);
    check(shape(2, 0, 2, 64, 64, true, false), Some(0), 6);
}

#[test]
fn positions_outside_the_cache_are_errors() {
    let sh = shape(1, 2, 1, 8, 8, false, false);
    let (cos, sin) = (vec![1.0f32; 4 * 4], vec![0.0f32; 4 * 4]);
    let x = vec![1.0f32; 16];
    let mut y = vec![0.0f32; 16];
    for pos in [
        Positions::Offset(3),
        Positions::Offset(-1),
        Positions::PerToken(&[0, 4]),
        Positions::PerToken(&[0]),
    ] {
        let inp = RotaryInputs {
            pos,
            cos: &cos,
            sin: &sin,
            x: &x,
        };
        let e = rotary_f32(&sh, &inp, &mut y, &Serial).unwrap_err();
        assert!(e.contains("position"), "{pos:?}: {e}");
    }
    let inp = RotaryInputs {
        pos: Positions::Offset(0),
        cos: &cos,
        sin: &sin,
        x: &x,
    };
    let e = rotary_f32(&shape(1, 2, 1, 8, 6, false, false), &inp, &mut y, &Serial);
    assert!(e.is_err(), "cache width must be rot / 2");
}
