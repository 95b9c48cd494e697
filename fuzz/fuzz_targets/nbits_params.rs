//! Fuzz target: MatMulNBits attribute and weight parsing (see ../README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rcpu::kernels::matmul_nbits::{matmul_packed, matmul_unpacked, pack, NBitsParams, NBitsWeight};
use rcpu::runtime::par::Serial;

fn take_u64(d: &mut &[u8]) -> u64 {
    let mut v = [0u8; 8];
    let n = d.len().min(8);
    v[..n].copy_from_slice(&d[..n]);
    *d = &d[n..];
    u64::from_le_bytes(v)
}

fuzz_target!(|data: &[u8]| {
    let mut d = data;
    // RCPU_FUZZ_SKIP_KNOWN=1 keeps dimensions below 2^32, clear of the known size-overflow
    // bug in NBitsParams::check_sizes (see ../README.md), to fuzz everything else meanwhile.
    let skip_known = std::env::var_os("RCPU_FUZZ_SKIP_KNOWN").is_some();
    // Dimensions: the top byte chooses a range so small, realistic values are common.
    let dim = |d: &mut &[u8]| {
        let v = take_u64(d);
        match v >> 62 {
            0 | 1 => (v % 300) as usize,
            2 => (v % 5000) as usize,
            _ if skip_known => (v & 0xffff_ffff) as usize,
            _ => (v & 0x3fff_ffff_ffff_ffff) as usize,
        }
    };
    let k = dim(&mut d);
    let n = dim(&mut d);
    let flags = take_u64(&mut d);
    let block = (flags & 0xffff) as usize % 1025;
    let acc = ((flags >> 16) & 0xff) as usize;
    let has_zp = (flags >> 24) & 1 == 1;
    let consistent = (flags >> 25) & 3 != 0;
    let m = ((flags >> 27) % 9) as usize;
    let p = NBitsParams::new(k, n, block, acc, has_zp);
    let valid = p.validate().is_ok();
    let implied = || -> Option<[usize; 3]> {
        if !valid {
            return None;
        }
        let kb = p.k.div_ceil(p.block_size);
        Some([
            p.n.checked_mul(kb)?.checked_mul(p.blob_bytes())?,
            p.n.checked_mul(kb)?,
            p.n.checked_mul(kb.div_ceil(2))?,
        ])
    };
    let lens = match implied() {
        Some(l) if consistent && l[0] <= 1 << 16 => l,
        _ => [
            (take_u64(&mut d) % 5000) as usize,
            (take_u64(&mut d) % 600) as usize,
            (take_u64(&mut d) % 300) as usize,
        ],
    };
    let zp_len = has_zp.then_some(lens[2]);
    if p.check_sizes(lens[0], lens[1], zp_len, None).is_err() {
        return;
    }
    let want = implied().expect("check_sizes accepted invalid or overflowing attributes");
    assert!(want[0] == lens[0] && want[1] == lens[1] && (!has_zp || want[2] == lens[2]));
    if p.k > 1024 || p.n > 96 {
        return;
    }
    // Buffers from the remaining bytes (cycled; zeros when none are left).
    let byte = |i: usize| if d.is_empty() { 0 } else { d[i % d.len()] };
    let b: Vec<u8> = (0..lens[0]).map(byte).collect();
    let scales: Vec<f32> = (0..lens[1])
        .map(|i| (byte(i * 7 + 1) as f32 - 128.0) / 1024.0)
        .collect();
    let zp: Option<Vec<u8>> = zp_len.map(|l| (0..l).map(|i| byte(i * 3 + 2)).collect());
    let a: Vec<f32> = (0..m * p.k)
        .map(|i| (byte(i * 5 + 3) as f32 - 128.0) / 64.0)
        .collect();
    let packed = pack(&b, &scales, zp.as_deref(), &p);
    let mut y1 = vec![f32::NAN; m * p.n];
    let mut y2 = vec![f32::NAN; m * p.n];
    matmul_packed(&a, m, &packed, None, &mut y1, &Serial).unwrap();
    matmul_unpacked(
        &a,
        m,
        &NBitsWeight {
            b: &b,
            scales: &scales,
            zero_points: zp.as_deref(),
            p: &p,
        },
        None,
        &mut y2,
        &Serial,
    )
    .unwrap();
    assert!(y1.iter().zip(&y2).all(|(x, y)| x.to_bits() == y.to_bits()));
});
