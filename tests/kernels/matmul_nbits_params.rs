//! MatMulNBits parameter validation: every bad attribute or input size is an Err naming it.

use rcpu::kernels::matmul_nbits::NBitsParams;

fn sizes(p: &NBitsParams) -> (usize, usize, usize) {
    (
        p.n * p.k_blocks() * p.blob_bytes(),
        p.n * p.k_blocks(),
        p.n * p.zp_row_bytes(),
    )
}

#[test]
fn derived_sizes() {
    let p = NBitsParams::new(100, 7, 32, 0, true);
    assert_eq!(p.k_blocks(), 4);
    assert_eq!(p.blob_bytes(), 16);
    assert_eq!(p.zp_row_bytes(), 2);
    let (b, s, z) = sizes(&p);
    assert!(p.check_sizes(b, s, Some(z), Some(7)).is_ok());
}

#[test]
fn derived_sizes_8bit() {
    // One byte a code and a zero point; the implied zero point 128; a 4-bit shape refused.
    let p = NBitsParams::new(100, 7, 32, 0, true).with_bits(8);
    assert_eq!(
        (p.blob_bytes(), p.zp_row_bytes(), p.default_zero_point()),
        (32, 4, 128)
    );
    let (b, s, z) = sizes(&p);
    assert_eq!((b, s, z), (7 * 4 * 32, 28, 28));
    assert!(p.check_sizes(b, s, Some(z), Some(7)).is_ok());
    assert!(p.check_sizes(b / 2, s, Some(z), None).is_err());
    assert!(p.check_sizes(b, s, Some(z / 2), None).is_err());
    use rcpu::kernels::matmul_nbits::NBitsInput;
    assert!(p.check_input_shape(NBitsInput::B, &[7, 4, 32]).is_ok());
    let e = p.check_input_shape(NBitsInput::B, &[7, 4, 16]).unwrap_err();
    assert!(e.contains("bits=8") && e.contains("[7, 4, 32]"), "{e}");
    assert!(p.check_input_shape(NBitsInput::ZeroPoints, &[7, 4]).is_ok());
    assert!(p
        .check_input_shape(NBitsInput::ZeroPoints, &[7, 2])
        .is_err());
    assert_eq!(
        NBitsParams::new(100, 7, 32, 0, false).default_zero_point(),
        8
    );
}

#[test]
fn bad_block_sizes() {
    for bs in [8, 512, 48, 0, 100] {
        let e = NBitsParams::new(64, 4, bs, 0, false)
            .validate()
            .unwrap_err();
        assert!(
            e.contains("block_size") && e.contains(&bs.to_string()),
            "{e}"
        );
    }
    for bs in [16, 32, 64, 128, 256] {
        NBitsParams::new(64, 4, bs, 0, false).validate().unwrap();
    }
}

#[test]
fn bad_bits_and_accuracy() {
    for bits in [0, 2, 3, 16] {
        let p = NBitsParams::new(64, 4, 32, 0, false).with_bits(bits);
        assert!(p.validate().unwrap_err().contains("bits"), "bits={bits}");
    }
    NBitsParams::new(64, 4, 32, 0, false)
        .with_bits(8)
        .validate()
        .unwrap();
    let p = NBitsParams::new(64, 4, 32, 5, false);
    assert!(p.validate().unwrap_err().contains("accuracy_level"));
}

#[test]
fn wrong_input_lengths_name_the_input() {
    let p = NBitsParams::new(100, 7, 32, 0, true);
    let (b, s, z) = sizes(&p);
    let e = p.check_sizes(b - 1, s, Some(z), None).unwrap_err();
    assert!(
        e.contains("input B") && e.contains(&b.to_string()) && e.contains(&(b - 1).to_string()),
        "{e}"
    );
    let e = p.check_sizes(b, s + 1, Some(z), None).unwrap_err();
    assert!(e.contains("scales") && e.contains(&s.to_string()), "{e}");
    let e = p.check_sizes(b, s, Some(z + 3), None).unwrap_err();
    assert!(
        e.contains("zero_points") && e.contains(&z.to_string()),
        "{e}"
    );
    let e = p.check_sizes(b, s, None, None).unwrap_err();
    assert!(e.contains("zero_points"), "{e}");
    let e = p.check_sizes(b, s, Some(z), Some(6)).unwrap_err();
    assert!(e.contains("bias"), "{e}");
    let q = NBitsParams::new(100, 7, 32, 0, false);
    assert!(q
        .check_sizes(b, s, Some(z), None)
        .unwrap_err()
        .contains("zero_points"));
    let e = NBitsParams::new(100, 7, 24, 0, false)
        .check_sizes(b, s, None, None)
        .unwrap_err();
    assert!(e.contains("block_size"), "{e}");
}

/// Shapes, not only byte counts, as ORT's CPU EP checks them: B with N and k_blocks swapped has
/// the right size but must be refused.
#[test]
fn input_shapes_are_checked_exactly() {
    let p = NBitsParams::new(64, 8, 32, 0, true); // k_blocks 2, blob 16, zp row 1
    assert!(p
        .check_shapes(&[8, 2, 16], &[16], Some(&[8]), Some(&[8]))
        .is_ok());
    assert!(p
        .check_shapes(&[8, 2, 16], &[8, 2], Some(&[8, 1]), None)
        .is_ok());
    let e = p.check_shapes(&[2, 8, 16], &[16], None, None).unwrap_err();
    assert!(
        e.contains("input B") && e.contains("[2, 8, 16]") && e.contains("[8, 2, 16]"),
        "{e}"
    );
    assert!(p.check_shapes(&[256], &[16], None, None).is_err());
    assert!(p.check_shapes(&[8, 2, 16], &[2, 8], None, None).is_err());
    assert!(p
        .check_shapes(&[8, 2, 16], &[16], Some(&[1, 8]), None)
        .is_err());
    assert!(p
        .check_shapes(&[8, 2, 16], &[16], None, Some(&[1, 8]))
        .is_err());
}
