//! A plain scalar reference of QMoE over ORT's layout (test ground truth): a full sort of each
//! token's logits for its top k, the softmax in f64, every selected expert dequantised and
//! multiplied in f64 (`matmul_nbits::reference::matmul_reference`), the activation and the
//! weighted sum. Deliberately naive and independent of the routing and driver code.

use super::activation::MoeActivation;
use super::MoeShape;
use crate::kernels::matmul_nbits::reference::matmul_reference;
use crate::kernels::matmul_nbits::{NBitsParams, NBitsWeight};

/// All experts of one projection in ORT's QMoE layout: codes `[E, N, K * bits / 8]`, scales
/// `[E, N, K / block]`, zero points `[E, N, zp_row_bytes]`, biases `[E, N]`.
pub struct RefProjection<'a> {
    pub codes: &'a [u8],
    pub scales: &'a [f32],
    pub zero_points: Option<&'a [u8]>,
    pub bias: Option<&'a [f32]>,
    /// One expert's params (K, N, bits, block size, zero points).
    pub p: NBitsParams,
}

impl RefProjection<'_> {
    fn expert(&self, e: usize) -> (NBitsWeight<'_>, Option<&[f32]>) {
        let p = &self.p;
        let cb = p.n * p.k_blocks() * p.blob_bytes();
        let sc = p.n * p.k_blocks();
        let zb = p.n * p.zp_row_bytes();
        (
            NBitsWeight {
                b: &self.codes[e * cb..(e + 1) * cb],
                scales: &self.scales[e * sc..(e + 1) * sc],
                zero_points: self.zero_points.map(|z| &z[e * zb..(e + 1) * zb]),
                p,
            },
            self.bias.map(|b| &b[e * p.n..(e + 1) * p.n]),
        )
    }
}

/// The reference output for `tokens` rows of `input`.
#[allow(clippy::too_many_arguments)]
pub fn qmoe_reference(
    input: &[f32],
    tokens: usize,
    logits: &[f32],
    router_weights: Option<&[f32]>,
    normalize: bool,
    shape: &MoeShape,
    act: &MoeActivation,
    fc1: &RefProjection<'_>,
    fc2: &RefProjection<'_>,
) -> Vec<f32> {
    let (h, e_n, k, inter) = (shape.hidden, shape.experts, shape.top_k, shape.inter);
    let f1 = act.fc1_cols(inter).unwrap();
    let mut out = vec![0f32; tokens * h];
    for t in 0..tokens {
        let row = &logits[t * e_n..(t + 1) * e_n];
        let mut order: Vec<usize> = (0..e_n).collect();
        // Descending logit; a tie goes to the larger index.
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(b.cmp(&a)));
        let top = &order[..k];
        let weights: Vec<f64> = match router_weights {
            None => {
                let max = row[top[0]] as f64;
                let ex: Vec<f64> = top.iter().map(|&e| (row[e] as f64 - max).exp()).collect();
                let sum: f64 = ex.iter().sum();
                ex.iter().map(|x| x / sum).collect()
            }
            Some(rw) => {
                let w: Vec<f64> = top.iter().map(|&e| rw[t * e_n + e] as f64).collect();
                let sum: f64 = w.iter().sum();
                if normalize {
                    w.iter().map(|x| x / sum).collect()
                } else {
                    w
                }
            }
        };
        let x = &input[t * h..(t + 1) * h];
        let mut acc = vec![0f64; h];
        for (&e, &w) in top.iter().zip(&weights) {
            if w.is_nan() || w <= 1e-8 {
                continue;
            }
            let (w1, b1) = fc1.expert(e);
            let mut c1 = vec![0f32; f1];
            matmul_reference(x, 1, &w1, b1, &mut c1);
            let mut a2 = vec![0f32; inter];
            act.apply(&c1, &mut a2);
            let (w2, b2) = fc2.expert(e);
            let mut c2 = vec![0f32; h];
            matmul_reference(&a2, 1, &w2, b2, &mut c2);
            for (a, &v) in acc.iter_mut().zip(&c2) {
                *a += w * v as f64;
            }
        }
        for (o, a) in out[t * h..(t + 1) * h].iter_mut().zip(&acc) {
            *o = *a as f32;
        }
    }
    out
}
