//! MatMulNBits rows of A with NaN / infinities, 4- and 8-bit weights, every kernel set, packed
//! and unpacked, M = 1 and M > 1, against the f64 scalar reference (fp32 levels: the same NaN / +-inf positions, as ORT's
//! dequantise-and-sum) and ORT's int8-path rule (level 4: an infinite or all-NaN block makes the
//! row NaN; an isolated NaN is coded 0 and the row stays finite).

use crate::nbits_common as matmul_nbits_common;
use matmul_nbits_common::{Problem, THREE};

use rcpu::kernels::matmul_nbits::reference::matmul_reference;
use rcpu::kernels::matmul_nbits::{matmul_packed_with, matmul_unpacked_with, pack, Kernels};
use rcpu::runtime::par::{Par, Serial};

/// Row `i` of the bad rows (K = 4 blocks of 32): which values go where.
fn poison(row: &mut [f32], i: usize) {
    let (inf, nan) = (f32::INFINITY, f32::NAN);
    match i {
        0 => row.fill(nan),
        1 => row[3] = nan,
        2 => row[3] = inf,
        3 => row[40] = -inf,
        4 => (row[3], row[5]) = (inf, -inf),
        5 => (row[3], row[100]) = (inf, inf),
        6 => {
            row.fill(0.0);
            row[7] = -inf;
        }
        7 => row[32..64].fill(nan),
        8 => {
            // Many infinities: more than one batch of one-hot rows.
            for x in row.iter_mut().step_by(3) {
                *x = inf;
            }
        }
        _ => {}
    }
}

const ROWS: usize = 10; // 9 bad rows and a finite one

fn kind(x: f32) -> char {
    if x.is_nan() {
        'N'
    } else if x == f32::INFINITY {
        '+'
    } else if x == f32::NEG_INFINITY {
        '-'
    } else {
        '.'
    }
}

fn pattern(v: &[f32]) -> String {
    v.iter().map(|&x| kind(x)).collect()
}

#[test]
fn nonfinite_rows_as_ort() {
    let (k, n, bs) = (128usize, 40usize, 32usize);
    for bits in [4usize, 8] {
        for acc in [0usize, 1, 4] {
            for zp in [false, true] {
                nonfinite_case(k, n, bs, bits, acc, zp);
            }
        }
    }
}

/// One weight format's rows of A with NaN / infinities, every kernel set, packed (M > 1 and
/// row by row) and unpacked; an 8-bit weight runs as its two halves (`bits8`).
fn nonfinite_case(k: usize, n: usize, bs: usize, bits: usize, acc: usize, zp: bool) {
    let seed = 77 + acc as u64;
    let mut pr = if bits == 8 {
        Problem::new8(k, n, ROWS, bs, acc, zp, true, seed)
    } else {
        Problem::new(k, n, ROWS, bs, acc, zp, true, seed)
    };
    // Some zero weights: code == zero point (the implied one without zero points).
    let zero = if bits == 8 { 0x80 } else { 0x88 };
    for byte in pr.b.iter_mut().step_by(5) {
        *byte = zero;
    }
    for i in 0..ROWS {
        poison(&mut pr.a[i * k..(i + 1) * k], i);
    }
    let p = &pr.p;
    let (zpv, bias) = (pr.zp.as_deref(), pr.bias.as_deref());
    let mut want = vec![0f32; ROWS * n];
    matmul_reference(&pr.a, ROWS, &pr.weight(), bias, &mut want);
    // 4- and 8-bit weights pack alike (`bits8`).
    let packed_w = pack(&pr.b, &pr.scales, zpv, p);
    for kern in Kernels::supported() {
        for (pname, par) in [("serial", &Serial as &dyn Par), ("3threads", &THREE)] {
            // `rows` of A through the packed weight, or the unpacked one.
            let run = |a: &[f32], m: usize, packed: bool| -> Vec<f32> {
                let mut y = vec![0f32; m * n];
                if packed {
                    matmul_packed_with(kern, a, m, &packed_w, bias, &mut y, par).unwrap();
                } else {
                    matmul_unpacked_with(kern, a, m, &pr.weight(), bias, &mut y, par).unwrap();
                }
                y
            };
            let all = run(&pr.a, ROWS, true);
            let un = run(&pr.a, ROWS, false);
            for r in 0..ROWS {
                let row = &pr.a[r * k..(r + 1) * k];
                let one = run(row, 1, true);
                let ctx = format!(
                    "bits={bits} acc={acc} zp={zp} {} {pname} row {r}",
                    kern.isa.name()
                );
                let got_m = &all[r * n..(r + 1) * n];
                let got_u = &un[r * n..(r + 1) * n];
                let expect = if acc != 4 {
                    pattern(&want[r * n..(r + 1) * n])
                } else if row
                    .chunks(bs)
                    .any(|b| b.iter().any(|x| x.is_infinite()) || b.iter().all(|x| x.is_nan()))
                {
                    "N".repeat(n)
                } else {
                    ".".repeat(n)
                };
                for (what, got) in [("M>1", got_m), ("M=1", &one[..]), ("unpacked", got_u)] {
                    assert_eq!(pattern(got), expect, "{ctx} {what}");
                }
            }
        }
    }
}
