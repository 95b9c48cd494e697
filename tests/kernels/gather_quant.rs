//! The 4- and 8-bit table gather (GatherBlockQuantized's compute) against a plain reference that
//! follows ORT's flat-index formulation element by element: bit-identical results, for rows
//! whose length is not a multiple of the block, odd block counts (a half-used zero-point byte
//! at 4 bits), groups of rows per entry (rank-3 data), negative and out-of-range indices.

use rcpu::kernels::gather_quant::{gather, QuantTable};

use crate::rng;
use rng::Rng;

/// Element `e` of the flattened (unpacked) data, dequantized the way ORT's CPU kernel indexes it.
#[allow(clippy::too_many_arguments)]
fn reference_elem(
    codes: &[u8],
    scales: &[f32],
    zps: Option<&[u8]>,
    k: usize,
    block: usize,
    bits: usize,
    e: usize,
) -> f32 {
    let code = if bits == 8 {
        codes[e]
    } else {
        (codes[e / 2] >> (4 * (e % 2))) & 0xF
    };
    let (x, y) = (e / k, e % k);
    let blocks = k.div_ceil(block);
    let si = x * blocks + y / block;
    let zp = match zps {
        Some(z) if bits == 8 => z[si],
        Some(z) => {
            let (row, q) = (si / blocks, si % blocks);
            (z[row * blocks.div_ceil(2) + q / 2] >> (4 * (q % 2))) & 0xF
        }
        None => 1 << (bits - 1), // ORT's default
    };
    (code as i32 - zp as i32) as f32 * scales[si]
}

#[allow(clippy::too_many_arguments)]
fn case(
    entries: usize,
    group: usize,
    row_bytes: usize,
    block: usize,
    with_zp: bool,
    bits: usize,
    seed: u64,
) {
    let mut r = Rng(seed);
    let rows = entries * group;
    let k = row_bytes * (8 / bits);
    let blocks = k.div_ceil(block);
    let codes: Vec<u8> = (0..rows * row_bytes).map(|_| r.next_u64() as u8).collect();
    let scales: Vec<f32> = (0..rows * blocks)
        .map(|_| (r.next_u64() % 2000) as f32 / 997.0 - 1.0)
        .collect();
    let zps: Vec<u8> = (0..rows * blocks.div_ceil(8 / bits))
        .map(|_| r.next_u64() as u8)
        .collect();
    let zp = with_zp.then_some(&zps[..]);
    let table = QuantTable::new(&codes, row_bytes, &scales, zp, block, bits).expect("valid table");
    let e = entries as i64;
    let indices: Vec<i64> = vec![0, e - 1, -1, -e, e, -e - 1, e / 2, 0];
    let span = group * k;
    let mut out = vec![f32::NAN; indices.len() * span];
    gather(&table, group, &indices, &mut out);
    for (n, &ix) in indices.iter().enumerate() {
        let got = &out[n * span..][..span];
        let i = if ix < 0 { ix + e } else { ix };
        for (j, &g) in got.iter().enumerate() {
            let want = if (0..e).contains(&i) {
                reference_elem(&codes, &scales, zp, k, block, bits, i as usize * span + j)
            } else {
                0.0
            };
            assert_eq!(
                g.to_bits(),
                want.to_bits(),
                "entries={entries} group={group} row_bytes={row_bytes} block={block} \
                 zp={with_zp} bits={bits}: index {ix}, element {j}: {g} vs {want}"
            );
        }
    }
    // int32 indices take the same path.
    let i32s: Vec<i32> = indices.iter().map(|&i| i as i32).collect();
    let mut out32 = vec![f32::NAN; out.len()];
    gather(&table, group, &i32s, &mut out32);
    assert_eq!(
        out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        out32.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn matches_the_reference_bit_for_bit() {
    let mut seed = 1;
    for &(entries, group) in &[(1, 1), (7, 1), (5, 3)] {
        // K = 2 * row_bytes: 32 (one block of 32), 40 (16-blocks, last partial: 3 blocks),
        // 448 with 128-blocks (4 blocks, the last partial), 2 (a single pair, one partial block).
        // At 8 bits the same byte counts are K = row_bytes (20 with 16-blocks: 2 blocks, the
        // last partial).
        for &(row_bytes, block) in &[(16, 32), (20, 16), (224, 128), (1, 16), (48, 16)] {
            for with_zp in [false, true] {
                for bits in [4, 8] {
                    case(entries, group, row_bytes, block, with_zp, bits, seed);
                    seed += 1;
                }
            }
        }
    }
}

#[test]
fn rejects_buffers_that_do_not_match() {
    let codes = [0u8; 32];
    let scales = [1.0f32; 4];
    // 2 rows of 16 bytes = 32 codes each, block 16 -> 2 blocks per row -> 4 scales.
    assert!(QuantTable::new(&codes, 16, &scales, None, 16, 4).is_ok());
    assert!(QuantTable::new(&codes, 16, &scales[..3], None, 16, 4).is_err());
    assert!(QuantTable::new(&codes, 16, &scales, Some(&[0u8; 3]), 16, 4).is_err());
    assert!(QuantTable::new(&codes, 16, &scales, Some(&[0u8; 2]), 16, 4).is_ok());
    assert!(QuantTable::new(&codes, 15, &scales, None, 16, 4).is_err());
    assert!(QuantTable::new(&codes, 16, &scales, None, 0, 4).is_err());
    assert!(QuantTable::new(&codes, 0, &scales, None, 16, 4).is_err());
    // 8 bits: 2 rows of 16 codes, block 16 -> 1 block a row -> 2 scales, 2 zero points.
    assert!(QuantTable::new(&codes, 16, &scales[..2], Some(&[0u8; 2]), 16, 8).is_ok());
    assert!(QuantTable::new(&codes, 16, &scales, None, 16, 8).is_err());
    assert!(QuantTable::new(&codes, 16, &scales[..2], Some(&[0u8; 1]), 16, 8).is_err());
    for bits in [0, 2, 16] {
        assert!(QuantTable::new(&codes, 16, &scales, None, 16, bits).is_err());
    }
}
