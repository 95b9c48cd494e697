// Shared helpers for the qgemm tests (included with `#[path] mod`; needs `nbits_common` at the
// crate root for its Rng).
#![allow(dead_code)]

use crate::nbits_common::Rng;
use rcpu::kernels::qgemm::reference::{qlinear_matmul_ref, RefParams};
use rcpu::kernels::qgemm::{BSource, Call, Products, Quant, Signs};

pub(crate) const ALL_SIGNS: [Signs; 3] = [Signs::U8U8, Signs::U8S8, Signs::S8S8];

/// One QLinearMatMul problem in ONNX's layout: `a_offsets.len()` products of `[m, k]` A rows,
/// `batches` B matrices `[k, n]`.
pub(crate) struct QCase {
    pub signs: Signs,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub batches: usize,
    pub a: Vec<u8>,
    pub b: Vec<u8>,
    pub a_offsets: Vec<usize>,
    pub b_index: Vec<usize>,
    pub a_scale: f32,
    pub a_zero: u8,
    pub b_scale: Vec<f32>,
    pub b_zero: Vec<u8>,
    pub y_scale: f32,
    pub y_zero: u8,
}

fn sv(v: u8, signed: bool) -> i32 {
    if signed {
        v as i8 as i32
    } else {
        v as i32
    }
}

impl QCase {
    /// One product; per-column scale / zero point when asked.
    pub(crate) fn new(
        signs: Signs,
        m: usize,
        k: usize,
        n: usize,
        col_scale: bool,
        col_zero: bool,
        seed: u64,
    ) -> QCase {
        Self::batched(signs, m, k, n, &[0], 1, col_scale, col_zero, seed)
    }

    /// Products `i` use A block `a_blocks[i]` ... with B batch `i % batches`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn batched(
        signs: Signs,
        m: usize,
        k: usize,
        n: usize,
        a_blocks: &[usize],
        batches: usize,
        col_scale: bool,
        col_zero: bool,
        seed: u64,
    ) -> QCase {
        let mut r = Rng::seeded(seed);
        let blocks = a_blocks.iter().max().map_or(0, |x| x + 1);
        let a = r.bytes(blocks * m * k);
        let b = r.bytes(batches * k * n);
        let cols = if col_scale || col_zero {
            batches * n
        } else {
            1
        };
        let b_scale: Vec<f32> = (0..if col_scale { cols } else { 1 })
            .map(|_| r.f32(0.005, 0.03))
            .collect();
        // Zero points near the middle of each type's range (extremes: `with_extreme_zeros`).
        let mid = |r: &mut Rng, signed: bool| {
            let d = (r.next_u64() % 41) as i32 - 20;
            (if signed { d } else { 128 + d }) as u8
        };
        let b_zero: Vec<u8> = (0..if col_zero { cols } else { 1 })
            .map(|_| mid(&mut r, signs.b_signed()))
            .collect();
        let a_scale = r.f32(0.01, 0.04);
        // Aim the typical |acc * scale| near the output range so rounding, ties and clamps all occur.
        let y_scale = a_scale * 0.015 * ((k.max(1) as f32).sqrt() * 80.0 * 80.0) / 90.0;
        QCase {
            signs,
            m,
            k,
            n,
            batches,
            a,
            b,
            a_offsets: a_blocks.iter().map(|&i| i * m * k).collect(),
            b_index: (0..a_blocks.len()).map(|i| i % batches).collect(),
            a_scale,
            a_zero: mid(&mut r, signs.a_signed()),
            b_scale,
            b_zero,
            y_scale,
            y_zero: mid(&mut r, signs.a_signed()),
        }
    }

    /// Zero points at the ends of their ranges (large corrections, mostly saturated outputs).
    pub(crate) fn with_extreme_zeros(mut self) -> QCase {
        let ends = |signed: bool| if signed { [0x80u8, 0x7F] } else { [0u8, 255] };
        let (a, b) = (ends(self.signs.a_signed()), ends(self.signs.b_signed()));
        self.a_zero = a[0];
        self.y_zero = a[1];
        for (i, z) in self.b_zero.iter_mut().enumerate() {
            *z = b[(i + 1) % 2];
        }
        self
    }

    pub(crate) fn products(&self) -> Products<'_> {
        Products {
            m: self.m,
            a_offsets: &self.a_offsets,
            b_index: &self.b_index,
        }
    }

    pub(crate) fn quant(&self) -> Quant<'_> {
        Quant {
            a_scale: self.a_scale,
            a_zero: sv(self.a_zero, self.signs.a_signed()),
            b_scale: &self.b_scale,
            b_zero: &self.b_zero,
            y_scale: self.y_scale,
            y_zero: sv(self.y_zero, self.signs.a_signed()),
        }
    }

    pub(crate) fn call<'a>(&'a self, b: BSource<'a>) -> Call<'a> {
        Call {
            a: &self.a,
            prods: self.products(),
            k: self.k,
            n: self.n,
            batches: self.batches,
            signs: self.signs,
            b,
            quant: self.quant(),
        }
    }

    pub(crate) fn out_len(&self) -> usize {
        self.a_offsets.len() * self.m * self.n
    }

    /// The reference output, product after product.
    pub(crate) fn expected(&self) -> Vec<u8> {
        let (m, k, n) = (self.m, self.k, self.n);
        let mut y = vec![];
        for (&off, &bi) in self.a_offsets.iter().zip(&self.b_index) {
            let cols = |v: &[f32]| {
                if v.len() == 1 {
                    v.to_vec()
                } else {
                    v[bi * n..(bi + 1) * n].to_vec()
                }
            };
            let zb: Vec<i32> = if self.b_zero.len() == 1 {
                vec![sv(self.b_zero[0], self.signs.b_signed())]
            } else {
                self.b_zero[bi * n..(bi + 1) * n]
                    .iter()
                    .map(|&z| sv(z, self.signs.b_signed()))
                    .collect()
            };
            let p = RefParams {
                a_signed: self.signs.a_signed(),
                b_signed: self.signs.b_signed(),
                a_scale: self.a_scale,
                a_zero: sv(self.a_zero, self.signs.a_signed()),
                b_scale: cols(&self.b_scale),
                b_zero: zb,
                y_scale: self.y_scale,
                y_zero: sv(self.y_zero, self.signs.a_signed()),
            };
            let a = &self.a[off..off + m * k];
            let b = &self.b[bi * k * n..(bi + 1) * k * n];
            y.extend(qlinear_matmul_ref(a, b, m, k, n, &p));
        }
        y
    }
}
