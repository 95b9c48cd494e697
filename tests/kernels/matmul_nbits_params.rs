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
    let mut p = NBitsParams::new(64, 4, 32, 0, false);
    p.bits = 8;
    assert!(p.validate().unwrap_err().contains("bits"));
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
