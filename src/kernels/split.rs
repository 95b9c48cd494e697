//! Split of a row-major tensor along one axis into consecutive pieces: the sizes of the pieces
//! (ONNX's rules for where they come from) and the copy of one piece out of the input.
//!
//! A tensor of dims `d` split at `axis` is `outer` blocks (the product of the dims before the
//! axis) of `d[axis] * inner` elements (`inner`: the product of the dims after it); piece `j`
//! of `sizes[j]` along the axis takes the `sizes[j] * inner` elements at offset
//! `(sizes[0] + .. + sizes[j - 1]) * inner` of every block.

/// The sizes along the axis of `outputs` pieces of an axis of length `len`, by ORT's rules
/// (which the adversarial pass pins against ORT 1.31.1):
///
/// - a `split` input with sizes (one non-negative size per piece, summing to `len`); an empty
///   one counts as absent, as in ORT;
/// - else a `num_outputs` attribute (ONNX Split 18; -1, ORT's "not given", counts as absent):
///   `outputs` pieces of `ceil(len / outputs)`, the last one smaller when `len` does not
///   divide. ORT takes the count from the node's outputs, not from the attribute, and only
///   refuses an attribute larger than the axis; the pieces must leave the last one at least
///   one element (ORT refuses a last piece it cannot fill). An axis of length 0 has no such
///   split: a positive `num_outputs` is larger than it, and ORT divides by zero (SIGFPE) on
///   the others, where this refuses;
/// - else `outputs` equal pieces (`len` divisible by `outputs`).
///
/// Every error names the mismatch.
pub fn split_sizes(
    len: usize,
    outputs: usize,
    split: Option<&[i64]>,
    num_outputs: Option<i64>,
) -> Result<Vec<usize>, String> {
    if outputs == 0 {
        return Err("Split has no outputs".into());
    }
    if let Some(split) = split.filter(|s| !s.is_empty()) {
        if split.len() != outputs {
            return Err(format!(
                "split {split:?} has {} sizes for {outputs} outputs",
                split.len()
            ));
        }
        let sizes = split
            .iter()
            .map(|&s| usize::try_from(s).map_err(|_| format!("split {split:?} has the size {s}")))
            .collect::<Result<Vec<usize>, String>>()?;
        let sum = sizes
            .iter()
            .try_fold(0usize, |a, &s| a.checked_add(s))
            .ok_or_else(|| format!("split {split:?} overflows"))?;
        if sum != len {
            return Err(format!("split {split:?} sums to {sum}, the axis has {len}"));
        }
        return Ok(sizes);
    }
    if let Some(n) = num_outputs.filter(|&n| n != -1) {
        if usize::try_from(n).is_ok_and(|n| n > len) {
            return Err(format!(
                "num_outputs {n} is larger than the axis it splits ({len})"
            ));
        }
        if len == 0 {
            return Err(format!(
                "num_outputs {n} cannot split an axis of length 0 (it must be positive)"
            ));
        }
        let chunk = len.div_ceil(outputs);
        let last = chunk
            .checked_mul(outputs - 1)
            .and_then(|head| len.checked_sub(head))
            .filter(|&last| last > 0)
            .ok_or_else(|| {
                format!("an axis of {len} cannot be split into {outputs} pieces of {chunk}")
            })?;
        let mut sizes = vec![chunk; outputs - 1];
        sizes.push(last);
        return Ok(sizes);
    }
    if !len.is_multiple_of(outputs) {
        return Err(format!(
            "an axis of {len} does not split into {outputs} equal pieces"
        ));
    }
    Ok(vec![len / outputs; outputs])
}

/// Copies piece `[start, start + size)` along the axis out of `src` (`outer` blocks of `len *
/// inner` elements) into `dst` (`outer` blocks of `size * inner`). The caller derives the sizes
/// from the tensors' dims; `None` when they do not fit the slices (nothing is written then).
pub fn copy_piece(
    src: &[f32],
    dst: &mut [f32],
    outer: usize,
    len: usize,
    inner: usize,
    start: usize,
    size: usize,
) -> Option<()> {
    let block = len.checked_mul(inner)?;
    let piece = size.checked_mul(inner)?;
    let at = start.checked_mul(inner)?;
    if start.checked_add(size)? > len
        || outer.checked_mul(block)? != src.len()
        || outer.checked_mul(piece)? != dst.len()
    {
        return None;
    }
    if piece == 0 {
        return Some(());
    }
    for (o, out) in dst.chunks_exact_mut(piece).enumerate() {
        let from = o * block + at;
        out.copy_from_slice(&src[from..from + piece]);
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::{copy_piece, split_sizes};

    /// The plain reference: element by element through the index arithmetic.
    fn reference(
        src: &[f32],
        outer: usize,
        len: usize,
        inner: usize,
        start: usize,
        size: usize,
    ) -> Vec<f32> {
        let mut out = Vec::new();
        for o in 0..outer {
            for a in start..start + size {
                for i in 0..inner {
                    out.push(src[(o * len + a) * inner + i]);
                }
            }
        }
        out
    }

    #[test]
    fn pieces_equal_the_reference() {
        for (outer, len, inner) in [
            (1, 4096, 1),
            (3, 7, 5),
            (2, 5, 1),
            (1, 1, 9),
            (4, 6, 3),
            (0, 4, 2),
        ] {
            let src: Vec<f32> = (0..outer * len * inner)
                .map(|i| i as f32 * 0.5 - 3.0)
                .collect();
            for sizes in [
                vec![len],
                vec![1, len - 1],
                vec![0, len, 0],
                vec![len / 2, len - len / 2],
            ] {
                let mut start = 0;
                for &size in &sizes {
                    let mut dst = vec![f32::NAN; outer * size * inner];
                    copy_piece(&src, &mut dst, outer, len, inner, start, size).unwrap();
                    assert_eq!(
                        dst,
                        reference(&src, outer, len, inner, start, size),
                        "{outer} {len} {inner} {sizes:?}"
                    );
                    start += size;
                }
            }
        }
    }

    #[test]
    fn pieces_outside_the_slices_are_refused() {
        let src = vec![0f32; 12];
        let mut dst = vec![0f32; 4];
        assert!(copy_piece(&src, &mut dst, 2, 6, 1, 5, 2).is_none()); // past the axis
        assert!(copy_piece(&src, &mut dst, 2, 5, 1, 0, 2).is_none()); // src of another size
        assert!(copy_piece(&src, &mut dst, 2, 6, 1, 0, 3).is_none()); // dst of another size
        assert!(copy_piece(&src, &mut dst, usize::MAX, 6, 1, 0, 2).is_none());
        assert!(copy_piece(&src, &mut dst, 2, 6, 1, 1, 2).is_some());
    }

    #[test]
    fn sizes_follow_onnx() {
        assert_eq!(
            split_sizes(4096, 3, Some(&[2048, 1024, 1024]), None),
            Ok(vec![2048, 1024, 1024])
        );
        assert_eq!(split_sizes(6, 3, None, None), Ok(vec![2, 2, 2]));
        assert_eq!(split_sizes(7, 3, None, Some(3)), Ok(vec![3, 3, 1]));
        assert_eq!(split_sizes(6, 2, None, Some(2)), Ok(vec![3, 3]));
        assert_eq!(split_sizes(0, 2, None, None), Ok(vec![0, 0]));
        assert_eq!(split_sizes(3, 3, Some(&[0, 3, 0]), None), Ok(vec![0, 3, 0]));
        for (len, outputs, split, num) in [
            (6, 3, Some(&[1i64, 2][..]), None),
            (6, 2, Some(&[4, 3][..]), None),
            (6, 2, Some(&[7, -1][..]), None),
            (6, 2, Some(&[i64::MAX, i64::MAX][..]), None),
            (7, 3, None, None),
            (6, 0, None, None),
        ] {
            assert!(
                split_sizes(len, outputs, split, num).is_err(),
                "{len} {outputs} {split:?} {num:?}"
            );
        }
    }

    /// ORT 1.31.1's answers where the inputs leave ONNX's happy path (each one seen from ORT's
    /// CPU EP): an empty `split` is no `split`; `num_outputs` picks ceil-sized pieces over the
    /// node's outputs whatever its value, and -1 is no `num_outputs`.
    #[test]
    fn sizes_follow_ort_off_the_happy_path() {
        assert_eq!(split_sizes(6, 3, Some(&[]), None), Ok(vec![2, 2, 2]));
        assert_eq!(split_sizes(0, 2, Some(&[]), None), Ok(vec![0, 0]));
        assert!(split_sizes(7, 3, Some(&[]), None).is_err());
        for n in [2, 0, -3, 3, 5, 6] {
            assert_eq!(split_sizes(6, 3, None, Some(n)), Ok(vec![2, 2, 2]), "{n}");
        }
        assert_eq!(split_sizes(7, 4, None, Some(0)), Ok(vec![2, 2, 2, 1]));
        assert_eq!(split_sizes(5, 3, None, Some(5)), Ok(vec![2, 2, 1]));
        assert_eq!(split_sizes(3, 2, None, Some(-3)), Ok(vec![2, 1]));
        assert_eq!(split_sizes(6, 3, None, Some(-1)), Ok(vec![2, 2, 2]));
        assert!(
            split_sizes(7, 3, None, Some(-1)).is_err(),
            "-1 is no num_outputs"
        );
        for (len, outputs, num) in [
            (3, 4, 4),  // num_outputs past the axis
            (3, 1, 4),  // ... whatever the outputs
            (0, 2, 2),  // an empty axis: any positive num_outputs is past it
            (0, 2, 0),  // ORT divides by zero here
            (0, 1, -3), // and here
            (4, 3, 3),  // pieces of 2 leave nothing for the last one
            (6, 4, 4),
            (5, 4, 4),
            (5, 4, 2),
        ] {
            assert!(
                split_sizes(len, outputs, None, Some(num)).is_err(),
                "{len} {outputs} {num}"
            );
        }
    }
}
