//! Portable tile kernel and row sum: the variant every SIMD one is tested against.

use super::pack::k_padded;
use super::{MR, PANEL};

/// Scalar [`super::TileFn`].
#[allow(clippy::too_many_arguments)]
pub(super) fn tile(
    a: &[u8],
    lda: usize,
    rows: usize,
    k: usize,
    panel: &[u8],
    width: usize,
    a_signed: bool,
    acc: &mut [[i32; PANEL]; MR],
) {
    assert!((1..=MR).contains(&rows) && width <= PANEL && width.is_multiple_of(16));
    assert!(a.len() >= (rows - 1) * lda + k && panel.len() >= k_padded(k) * width);
    // A is read in its own sign, the stored B in the other one.
    type Read = fn(u8) -> i32;
    let (av, wv): (Read, Read) = if a_signed {
        (|v| v as i8 as i32, |v| v as i32)
    } else {
        (|v| v as i32, |v| v as i8 as i32)
    };
    for (r, acc_r) in acc.iter_mut().enumerate().take(rows) {
        let row = &a[r * lda..r * lda + k];
        for (c, out) in acc_r.iter_mut().enumerate().take(width) {
            let mut s = 0i32;
            for (kk, &x) in row.iter().enumerate() {
                let w = panel[(kk / 4) * 4 * width + 4 * c + kk % 4];
                s = s.wrapping_add(av(x) * wv(w));
            }
            *out = s;
        }
    }
}

/// The row sum from a SIMD variant's `vpsadbw` total over the first `done` bytes (read as
/// uint8, flipped with `^ 0x80` when A is int8, which adds 128 per byte) plus the scalar sum of
/// the remaining bytes `rest`.
pub(super) fn finish_row_sum(sad_total: i64, done: usize, rest: &[u8], a_signed: bool) -> i32 {
    let offset = if a_signed {
        128i32.wrapping_mul(done as i32)
    } else {
        0
    };
    (sad_total as i32)
        .wrapping_sub(offset)
        .wrapping_add(row_sum(rest, a_signed))
}

/// Scalar [`super::RowSumFn`].
pub(super) fn row_sum(a: &[u8], a_signed: bool) -> i32 {
    if a_signed {
        a.iter().fold(0i32, |s, &v| s.wrapping_add(v as i8 as i32))
    } else {
        a.iter().fold(0i32, |s, &v| s.wrapping_add(v as i32))
    }
}
