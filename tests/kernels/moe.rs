//! QMoE (`kernels::moe`): the routing against a brute-force sort, the whole op against the
//! plain f64 reference (`moe::reference`) on odd sizes (K a multiple of the block but not of the
//! 32-column group, N not a multiple of the SIMD width, M = 0, 1, a few, many), 4- and 8-bit
//! experts with and without zero points and biases, every activation, and the paths against each
//! other bit for bit: packed experts, unpacked experts (packed group by group inside the call)
//! and the batched one-token experts of a decode step (`matmul_rows_packed`), serial and on
//! several lanes.

use crate::rng::Rng;

use rcpu::kernels::matmul_nbits::{pack, NBitsParams, NBitsWeight, PackedNBits};
use rcpu::kernels::moe::reference::{qmoe_reference, RefProjection};
use rcpu::kernels::moe::{route_tokens, run, Expert, ExpertMatrix, MoeActivation, MoeShape};
use rcpu::runtime::par::{Par, ScopedThreads, Serial};

fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum();
    let den: f64 = b.iter().map(|&y| (y as f64).powi(2)).sum();
    (num / den.max(1e-30)).sqrt()
}

/// The routing a plain full sort gives: (expert, weight) per rank, f64 softmax.
fn sorted_routes(row: &[f32], k: usize) -> Vec<(u32, f64)> {
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(b.cmp(&a)));
    let max = row[order[0]] as f64;
    let ex: Vec<f64> = order[..k]
        .iter()
        .map(|&e| (row[e] as f64 - max).exp())
        .collect();
    let sum: f64 = ex.iter().sum();
    order[..k]
        .iter()
        .zip(ex)
        .map(|(&e, x)| (e as u32, x / sum))
        .collect()
}

#[test]
fn routing_picks_the_top_k_with_ties_to_the_higher_index() {
    let mut rng = Rng::seeded(7);
    for &(experts, tokens) in &[(1, 3), (4, 9), (7, 5), (32, 17), (64, 2)] {
        for k in [1, 2, experts.min(4), experts]
            .into_iter()
            .filter(|&k| k <= experts)
        {
            // Logits from a few values, so ties are common.
            let logits: Vec<f32> = (0..tokens * experts)
                .map(|_| rng.below(5) as f32 * 0.5 - 1.0)
                .collect();
            let r = route_tokens(&logits, None, tokens, experts, k, false).unwrap();
            for t in 0..tokens {
                let want = sorted_routes(&logits[t * experts..(t + 1) * experts], k);
                for (j, &(e, w)) in want.iter().enumerate() {
                    assert_eq!(
                        r.expert[t * k + j],
                        e,
                        "E={experts} k={k} token {t} rank {j}"
                    );
                    let got = r.weight[t * k + j] as f64;
                    assert!((got - w).abs() <= 1e-6 * w.max(1e-3), "weight {got} vs {w}");
                }
            }
        }
    }
}

#[test]
fn routing_with_router_weights_and_normalisation() {
    let logits = [0.5f32, 2.0, -1.0, 2.0];
    let rw = [0.1f32, 0.2, 0.3, 0.6];
    // Top 2: expert 3 then 1 (a tie, the higher index first).
    let raw = route_tokens(&logits, Some(&rw), 1, 4, 2, false).unwrap();
    assert_eq!(raw.expert, vec![3, 1]);
    assert_eq!(raw.weight, vec![0.6, 0.2]);
    let norm = route_tokens(&logits, Some(&rw), 1, 4, 2, true).unwrap();
    assert!((norm.weight[0] - 0.75).abs() < 1e-6 && (norm.weight[1] - 0.25).abs() < 1e-6);
    // Without router weights the flag changes nothing: the softmax over the k already sums to 1.
    let a = route_tokens(&logits, None, 1, 4, 2, false).unwrap();
    let b = route_tokens(&logits, None, 1, 4, 2, true).unwrap();
    assert_eq!(a, b);
    // A zero (or negative) gathered weight drops its route.
    let rw0 = [0.0f32, 0.0, 0.5, -0.5];
    let z = route_tokens(&logits, Some(&rw0), 1, 4, 2, false).unwrap();
    assert!(!z.live(0) && !z.live(1));
}

#[test]
fn routing_non_finite_logits() {
    // +inf makes every selected weight NaN (inf - inf), so the token's routes all drop, as in
    // ORT; -inf logits weigh 0 when a finite one leads.
    let r = route_tokens(&[f32::INFINITY, 1.0, 0.0], None, 1, 3, 2, false).unwrap();
    assert!(!r.live(0) && !r.live(1));
    let r = route_tokens(
        &[f32::NEG_INFINITY, 1.0, f32::NEG_INFINITY],
        None,
        1,
        3,
        2,
        false,
    )
    .unwrap();
    assert_eq!(r.expert, vec![1, 2]);
    assert!(r.live(0) && !r.live(1));
    assert_eq!(r.weight[0], 1.0);
    // A NaN: the experts libstdc++'s partial sort leaves first (ORT's answer). Behind the
    // first element it never wins; in the first place nothing displaces it, and its NaN
    // weight drops the route.
    let r = route_tokens(&[0.0, f32::NAN, 1.0], None, 1, 3, 1, false).unwrap();
    assert_eq!(r.expert, vec![2]);
    assert!(r.live(0));
    let r = route_tokens(&[f32::NAN, 0.0, 1.0], None, 1, 3, 1, false).unwrap();
    assert_eq!(r.expert, vec![0]);
    assert!(!r.live(0));
}

/// All experts of one projection in ORT's layout, with its packed and unpacked forms.
struct Proj {
    p: NBitsParams,
    codes: Vec<u8>,
    scales: Vec<f32>,
    zp: Option<Vec<u8>>,
    bias: Option<Vec<f32>>,
    packed: Vec<PackedNBits>,
}

impl Proj {
    #[allow(clippy::too_many_arguments)]
    fn new(
        rng: &mut Rng,
        e: usize,
        k: usize,
        n: usize,
        bits: usize,
        block: usize,
        acc: usize,
        zp: bool,
        bias: bool,
    ) -> Proj {
        let p = NBitsParams::new(k, n, block, acc, zp).with_bits(bits);
        let [cb, sc, zb] = p.implied_lens().unwrap();
        let codes = rng.bytes(cb * e);
        // Scales sized so each product's outputs stay near 1.
        let s = 1.0 / ((k as f32).sqrt() * if bits == 8 { 64.0 } else { 4.0 });
        let scales = rng.vec_f32(sc * e, 0.5 * s, 1.5 * s);
        let zp = zp.then(|| rng.bytes(zb * e));
        let bias = bias.then(|| rng.vec_f32(n * e, -0.5, 0.5));
        let packed = (0..e)
            .map(|x| {
                pack(
                    &codes[x * cb..(x + 1) * cb],
                    &scales[x * sc..(x + 1) * sc],
                    zp.as_ref().map(|z| &z[x * zb..(x + 1) * zb]),
                    &p,
                )
            })
            .collect();
        Proj {
            p,
            codes,
            scales,
            zp,
            bias,
            packed,
        }
    }

    fn weight(&self, e: usize) -> NBitsWeight<'_> {
        let [cb, sc, zb] = self.p.implied_lens().unwrap();
        NBitsWeight {
            b: &self.codes[e * cb..(e + 1) * cb],
            scales: &self.scales[e * sc..(e + 1) * sc],
            zero_points: self.zp.as_ref().map(|z| &z[e * zb..(e + 1) * zb]),
            p: &self.p,
        }
    }

    fn matrix(&self, e: usize, packed: bool) -> ExpertMatrix<'_> {
        if packed {
            ExpertMatrix::Packed(&self.packed[e])
        } else {
            ExpertMatrix::Unpacked(self.weight(e))
        }
    }

    fn bias(&self, e: usize) -> Option<&[f32]> {
        self.bias
            .as_ref()
            .map(|b| &b[e * self.p.n..(e + 1) * self.p.n])
    }

    fn reference(&self) -> RefProjection<'_> {
        RefProjection {
            codes: &self.codes,
            scales: &self.scales,
            zero_points: self.zp.as_deref(),
            bias: self.bias.as_deref(),
            p: self.p,
        }
    }
}

struct Case {
    shape: MoeShape,
    act: MoeActivation,
    fc1: Proj,
    fc2: Proj,
}

impl Case {
    #[allow(clippy::too_many_arguments)]
    fn new(
        seed: u64,
        e: usize,
        h: usize,
        i: usize,
        k: usize,
        bits: usize,
        block: usize,
        acc: usize,
        zp: bool,
        bias: bool,
        act: MoeActivation,
    ) -> Case {
        let mut rng = Rng::seeded(seed);
        let shape = MoeShape {
            experts: e,
            hidden: h,
            inter: i,
            top_k: k,
        };
        let f1 = act.fc1_cols(i).unwrap();
        let fc1 = Proj::new(&mut rng, e, h, f1, bits, block, acc, zp, bias);
        let fc2 = Proj::new(&mut rng, e, i, h, bits, block, acc, zp, bias);
        Case {
            shape,
            act,
            fc1,
            fc2,
        }
    }

    fn run(
        &self,
        x: &[f32],
        logits: &[f32],
        tokens: usize,
        packed: bool,
        par: &dyn Par,
    ) -> Vec<f32> {
        let s = &self.shape;
        let routes = route_tokens(logits, None, tokens, s.experts, s.top_k, false).unwrap();
        let expert = |e: usize| Expert {
            fc1: self.fc1.matrix(e, packed),
            fc1_bias: self.fc1.bias(e),
            fc2: self.fc2.matrix(e, packed),
            fc2_bias: self.fc2.bias(e),
        };
        let mut out = vec![f32::NAN; tokens * s.hidden];
        run(x, tokens, s, &self.act, &routes, &expert, &mut out, par).unwrap();
        out
    }

    fn reference(&self, x: &[f32], logits: &[f32], tokens: usize) -> Vec<f32> {
        qmoe_reference(
            x,
            tokens,
            logits,
            None,
            false,
            &self.shape,
            &self.act,
            &self.fc1.reference(),
            &self.fc2.reference(),
        )
    }
}

/// (E, H, I, k, bits, block, acc, zero points, biases, token counts)
type MoeCase = (
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    bool,
    bool,
    &'static [usize],
);

const GPT_OSS: MoeActivation = MoeActivation::SwiGlu {
    alpha: 1.702,
    beta: 1.0,
    limit: 7.0,
};

#[test]
fn qmoe_matches_the_reference_and_its_paths_agree_bit_for_bit() {
    let two = ScopedThreads(2);
    let three = ScopedThreads(3);
    let pars: [(&str, &dyn Par); 3] = [("serial", &Serial), ("2 lanes", &two), ("3 lanes", &three)];
    let acts = [
        GPT_OSS,
        MoeActivation::SwiGlu {
            alpha: 1.0,
            beta: 0.0,
            limit: f32::INFINITY,
        },
        MoeActivation::Silu,
        MoeActivation::Gelu,
        MoeActivation::Relu,
        MoeActivation::Identity,
    ];
    // (E, H, I, k, bits, block, acc, zp, bias, tokens)
    let cases: &[MoeCase] = &[
        (4, 64, 32, 2, 4, 32, 0, false, true, &[0, 1, 3, 17]),
        (7, 48, 80, 3, 4, 16, 0, true, false, &[1, 5, 40]),
        (5, 96, 48, 5, 8, 16, 0, true, true, &[1, 4]),
        (1, 32, 16, 1, 4, 16, 1, false, false, &[1, 2]),
        (16, 128, 64, 4, 4, 64, 0, false, true, &[1, 2, 33]),
        (8, 64, 48, 2, 4, 16, 4, true, true, &[1, 3, 20]),
        (6, 64, 32, 3, 8, 32, 4, false, true, &[1, 9]),
    ];
    for (ci, &(e, h, i, k, bits, block, acc, zp, bias, tokens)) in cases.iter().enumerate() {
        let act = acts[ci % acts.len()];
        let c = Case::new(40 + ci as u64, e, h, i, k, bits, block, acc, zp, bias, act);
        let mut rng = Rng::seeded(900 + ci as u64);
        for &t in tokens {
            let x = rng.vec_f32(t * h, -1.0, 1.0);
            let logits = rng.vec_f32(t * e, -2.0, 2.0);
            let want = c.reference(&x, &logits, t);
            let base = c.run(&x, &logits, t, true, &Serial);
            let err = rel_l2(&base, &want);
            // fp32 products differ from the f64 reference by rounding only; int8 activations
            // (level 4) by their quantisation.
            let bound = if acc == 4 { 2e-2 } else { 1e-5 };
            assert!(
                err <= bound,
                "case {ci} tokens {t}: rel L2 {err:.3e} > {bound:.0e}"
            );
            for (name, par) in pars {
                for packed in [true, false] {
                    let got = c.run(&x, &logits, t, packed, par);
                    assert!(
                        got.iter()
                            .zip(&base)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "case {ci} tokens {t} {name} packed={packed}: not bit-identical"
                    );
                }
            }
        }
    }
}

#[test]
fn an_expert_no_token_picks_is_never_read_and_m0_writes_nothing() {
    let c = Case::new(3, 4, 32, 16, 1, 4, 16, 0, false, true, MoeActivation::Relu);
    // Every token routes to expert 2.
    let logits: Vec<f32> = (0..5).flat_map(|_| [0.0f32, 0.0, 9.0, 0.0]).collect();
    let x = Rng::seeded(5).vec_f32(5 * 32, -1.0, 1.0);
    let s = &c.shape;
    let routes = route_tokens(&logits, None, 5, 4, 1, false).unwrap();
    let expert = |e: usize| {
        assert_eq!(e, 2, "expert {e} was asked for");
        Expert {
            fc1: c.fc1.matrix(e, true),
            fc1_bias: c.fc1.bias(e),
            fc2: c.fc2.matrix(e, true),
            fc2_bias: c.fc2.bias(e),
        }
    };
    let mut out = vec![0f32; 5 * 32];
    let r = run(&x, 5, s, &c.act, &routes, &expert, &mut out, &Serial).unwrap();
    assert_eq!((r.experts_run, r.max_rows), (1, 5));
    let want = c.reference(&x, &logits, 5);
    assert!(rel_l2(&out, &want) <= 1e-5);
    let none = route_tokens(&[], None, 0, 4, 1, false).unwrap();
    let r = run(&[], 0, s, &c.act, &none, &expert, &mut [], &Serial).unwrap();
    assert_eq!(r.experts_run, 0);
}

/// The call's route names what its bulk ran: the products of the expert with the most tokens,
/// not those of whichever expert came last. 17 tokens to expert 0 (the many-row route at level
/// 0) and one each to experts 1..3 (one-row products, after it): the dequantizing GEMM's name.
/// Seen failing with the last expert's route kept (`experts-f32-gemv-packed`).
#[test]
fn the_route_is_the_busiest_experts() {
    let c = Case::new(77, 4, 64, 32, 1, 4, 32, 0, false, false, GPT_OSS);
    let tokens = 20;
    let mut logits = vec![0f32; tokens * 4];
    for t in 0..tokens {
        logits[t * 4 + t.saturating_sub(16).min(3)] = 5.0;
    }
    let mut rng = Rng::seeded(78);
    let x = rng.vec_f32(tokens * 64, -1.0, 1.0);
    let routes = route_tokens(&logits, None, tokens, 4, 1, false).unwrap();
    let expert = |e: usize| Expert {
        fc1: c.fc1.matrix(e, true),
        fc1_bias: None,
        fc2: c.fc2.matrix(e, true),
        fc2_bias: None,
    };
    let mut out = vec![f32::NAN; tokens * 64];
    let r = run(
        &x, tokens, &c.shape, &c.act, &routes, &expert, &mut out, &Serial,
    )
    .unwrap();
    assert_eq!((r.experts_run, r.max_rows), (4, 17), "{r:?}");
    assert_eq!(r.text(), "experts-f32-gemm-dequant-packed", "{r:?}");
    let want = c.reference(&x, &logits, tokens);
    let e = rel_l2(&out, &want);
    assert!(e <= 1e-5, "rel L2 {e:e}");
}
