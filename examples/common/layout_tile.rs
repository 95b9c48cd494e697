//! A diagnostic copy of the VNNI M=1 tile (one row, f16 scales, no zero points: the shape decode
//! runs at accuracy level 4) that reads a column group from either packed layout: the codes and
//! the scales as two streams (`pack`'s layout) or as one stream of records, each block's codes
//! followed by its 32 scales. Used by `matmul_nbits_stream --sweep` (arms `two:PF` and `rec:PF`)
//! to compare the layouts with the tile's own loads, arithmetic and prefetch; not part of the
//! library.

use std::arch::x86_64::*;

/// Where one group's blocks lie: block `kb`'s 64-byte code chunks start at `w + kb * w_stride`,
/// its 32 f16 scales at `s + kb * s_stride`.
#[derive(Clone, Copy)]
pub(crate) struct GroupStreams<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) w_off: usize,
    pub(crate) w_stride: usize,
    pub(crate) s_off: usize,
    pub(crate) s_stride: usize,
    pub(crate) k_blocks: usize,
    pub(crate) block_size: usize,
}

/// Int8 A of one row: values and per-block sums.
pub(crate) struct RowA {
    pub(crate) q: Vec<i8>,
    pub(crate) qsum: Vec<i32>,
}

impl RowA {
    pub(crate) fn new(kp: usize, bs: usize, mut rnd: impl FnMut() -> u64) -> RowA {
        let q: Vec<i8> = (0..kp)
            .map(|_| ((rnd() % 255) as i32 - 127) as i8)
            .collect();
        let qsum = q
            .chunks(bs)
            .map(|b| b.iter().map(|&v| i32::from(v)).sum())
            .collect();
        RowA { q, qsum }
    }
}

/// The group's 32 outputs (scale of A taken as 1). `PF`: the L1 prefetch `pf` bytes ahead of each
/// chunk; `sa`: the scales' prefetch that many blocks ahead (0: none).
pub(crate) fn tile<const PF: bool>(g: &GroupStreams, a: &RowA, pf: usize, sa: usize) -> [f32; 32] {
    let bs = g.block_size;
    assert!(bs.is_multiple_of(16) && a.q.len() >= g.k_blocks * bs && a.qsum.len() >= g.k_blocks);
    let last = g.k_blocks.saturating_sub(1);
    assert!(g.k_blocks == 0 || g.w_off + last * g.w_stride + bs * 16 <= g.bytes.len());
    assert!(g.k_blocks == 0 || g.s_off + last * g.s_stride + 64 <= g.bytes.len());
    assert!(std::arch::is_x86_feature_detected!("avx512vnni"));
    let mut out = [0f32; 32];
    // SAFETY: AVX-512 F/BW/VNNI checked just above; the bounds of every load are asserted.
    unsafe { tile_vnni::<PF>(g, a, pf, sa, &mut out) };
    out
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma")]
fn tile_vnni<const PF: bool>(
    g: &GroupStreams,
    a: &RowA,
    pf: usize,
    sa: usize,
    out: &mut [f32; 32],
) {
    let bs = g.block_size;
    let base = g.bytes.as_ptr();
    let mask = _mm512_set1_epi8(0x0F);
    let (z, z_lo) = (_mm512_set1_epi32(0x88), _mm512_set1_epi32(0x08));
    let mut total = [_mm512_setzero_ps(); 2];
    for kb in 0..g.k_blocks {
        let s_at = base.wrapping_add(g.s_off + kb * g.s_stride);
        if sa != 0 {
            _mm_prefetch::<_MM_HINT_T0>(s_at.wrapping_add(sa * g.s_stride) as *const i8);
        }
        let nq = _mm512_set1_epi32(-a.qsum[kb]);
        let zero = _mm512_setzero_si512();
        let mut lo = [_mm512_madd_epi16(z_lo, nq), zero];
        let mut full = [_mm512_madd_epi16(z, nq), zero];
        let w = base.wrapping_add(g.w_off + kb * g.w_stride);
        for c in (0..bs / 4).step_by(4) {
            for ch in 0..4 {
                let at = w.wrapping_add((c + ch) * 64);
                if PF {
                    _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(pf) as *const i8);
                }
                // SAFETY: the chunk lies inside `g.bytes` (asserted by `tile`).
                let v = unsafe { _mm512_loadu_si512(at as *const _) };
                // SAFETY: A holds k_blocks * bs values (asserted by `tile`).
                let x = _mm512_set1_epi32(unsafe {
                    (a.q.as_ptr().add(kb * bs + (c + ch) * 4) as *const i32).read_unaligned()
                });
                lo[ch % 2] = _mm512_dpbusd_epi32(lo[ch % 2], _mm512_and_si512(v, mask), x);
                full[ch % 2] = _mm512_dpbusd_epi32(full[ch % 2], v, x);
            }
        }
        // SAFETY: the 64 scale bytes lie inside `g.bytes` (asserted by `tile`).
        let s = unsafe {
            [
                _mm512_cvtph_ps(_mm256_loadu_si256(s_at as *const __m256i)),
                _mm512_cvtph_ps(_mm256_loadu_si256(s_at.add(32) as *const __m256i)),
            ]
        };
        let lo = _mm512_add_epi32(lo[0], lo[1]);
        let full = _mm512_add_epi32(full[0], full[1]);
        let hi = _mm512_srai_epi32::<4>(_mm512_sub_epi32(full, lo));
        total[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), s[0], total[0]);
        total[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), s[1], total[1]);
    }
    let (l, h) = out.split_at_mut(16);
    // SAFETY: both halves are 16 floats.
    unsafe {
        _mm512_storeu_ps(l.as_mut_ptr(), total[0]);
        _mm512_storeu_ps(h.as_mut_ptr(), total[1]);
    }
}
