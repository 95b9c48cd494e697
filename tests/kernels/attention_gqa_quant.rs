//! GroupQueryAttention over a quantized KV cache (`kernels::attention::gqa_quant`) against a plain
//! f64 reference of ORT 1.31's CPU semantics (`e2e/python/gqa_quant_models.py` lists them): 8-bit
//! and 4-bit codes, per-tensor and per-channel scales, decode with past 0 / 1 / past a block of
//! 64 rows, prefill (right-padded batch rows), a later prompt after a past, batch 2 with
//! different `seqlens_k`, a present shared with the past, window / softcap / sinks, head sizes
//! that are not a multiple of the vector widths (17 at 8 bits, 18 at 4), group 1 and 7, every
//! ISA this CPU has, serial and 3 lanes (bit-identical to serial). Present codes must equal the
//! reference's exactly (padding bytes included), outputs within rtol 1e-5 / atol 1e-6 of f64.

use crate::glue_common;
use glue_common::*;

use rcpu::kernels::attention::gqa::{GqaInputs, GqaShape};
use rcpu::kernels::attention::gqa_quant::{gqa_quant, KvQuant, QuantOutputs};
use rcpu::runtime::par::{Par, Serial};

#[derive(Clone, Copy, Debug)]
struct Case {
    batch: usize,
    seq: usize,
    heads: usize,
    kv: usize,
    head: usize,
    past_len: usize,
    present_len: usize,
    first_prompt: bool,
    shared: bool,
    bits: u32,
    per_channel: bool,
    window: usize,
    softcap: f32,
    sink: bool,
}

impl Case {
    fn row_bytes(&self) -> usize {
        if self.bits == 4 {
            self.head / 2
        } else {
            self.head
        }
    }
    fn lo_hi(&self) -> (i32, i32) {
        if self.bits == 4 {
            (-8, 7)
        } else {
            (-128, 127)
        }
    }
}

struct Data {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// Stored past codes (`[B, Nkv, past rows, row_bytes]`; the present length when shared).
    past_k: Vec<u8>,
    past_v: Vec<u8>,
    ks: Vec<f32>,
    vs: Vec<f32>,
    seqlens: Vec<i32>,
    sinks: Vec<f32>,
}

fn data(c: &Case, seqlens: &[i32], rng: &mut Rng) -> Data {
    let t = c.batch * c.seq;
    let past = if c.shared { c.present_len } else { c.past_len };
    let n_scales = if c.per_channel { c.kv * c.head } else { 1 };
    // Scales that spread the new rows over the whole code range (some clamp).
    let (slo, shi) = if c.bits == 4 {
        (0.15, 0.5)
    } else {
        (0.008, 0.03)
    };
    let mut past_bytes = |_| rng.bytes(c.batch * c.kv * past * c.row_bytes());
    let (past_k, past_v) = (past_bytes(0), past_bytes(1));
    Data {
        q: rng.vec_f32(t * c.heads * c.head, -1.5, 1.5),
        k: rng.vec_f32(t * c.kv * c.head, -3.0, 3.0),
        v: rng.vec_f32(t * c.kv * c.head, -3.0, 3.0),
        past_k,
        past_v,
        ks: rng.vec_f32(n_scales, slo, shi),
        vs: rng.vec_f32(n_scales, slo, shi),
        seqlens: seqlens.to_vec(),
        sinks: (0..c.heads).map(|h| h as f32 * 0.7 - 1.5).collect(),
    }
}

/// The code of `x` with scale `s`, as ORT makes it: the f32 product with the f32 inverse (1 for
/// a zero scale), rounded half to even, clamped, NaN to the top of the range.
fn code(c: &Case, x: f32, s: f32) -> i32 {
    let inv = if s == 0.0 { 1.0f32 } else { 1.0f32 / s };
    let y = (x * inv).round_ties_even();
    let (lo, hi) = c.lo_hi();
    if y.is_nan() {
        hi
    } else {
        (y as i32).clamp(lo, hi)
    }
}

/// Stored byte `i` of a row of codes -> the codes it holds.
fn codes_of(c: &Case, row: &[u8]) -> Vec<i32> {
    if c.bits == 8 {
        row.iter().map(|&b| b as i8 as i32).collect()
    } else {
        row.iter()
            .flat_map(|&b| [(b & 15) as i32 - 8, (b >> 4) as i32 - 8])
            .collect()
    }
}

fn store(c: &Case, codes: &[i32]) -> Vec<u8> {
    if c.bits == 8 {
        codes.iter().map(|&x| x as i8 as u8).collect()
    } else {
        codes
            .chunks(2)
            .map(|p| ((p[0] + 8) | ((p[1] + 8) << 4)) as u8)
            .collect()
    }
}

/// f64 reference: (output [B, S, N*H], present_k, present_v stored codes).
fn reference(c: &Case, d: &Data) -> (Vec<f64>, Vec<u8>, Vec<u8>) {
    let (h, rb) = (c.head, c.row_bytes());
    let scale_of = |s: &[f32], n: usize, i: usize| if c.per_channel { s[n * h + i] } else { s[0] };
    let past_rows = if c.shared { c.present_len } else { c.past_len };
    let mut pk = if c.shared {
        d.past_k.clone()
    } else {
        vec![0u8; c.batch * c.kv * c.present_len * rb]
    };
    let mut pv = if c.shared {
        d.past_v.clone()
    } else {
        vec![0u8; pk.len()]
    };
    let group = c.heads / c.kv;
    let mut out = vec![0f64; c.batch * c.seq * c.heads * h];
    for b in 0..c.batch {
        let t = d.seqlens[b] as usize + 1;
        let p = if c.first_prompt { 0 } else { t - c.seq };
        for n in 0..c.kv {
            let unit = (b * c.kv + n) * c.present_len * rb;
            for (dst, src, new, sc) in [
                (&mut pk, &d.past_k, &d.k, &d.ks),
                (&mut pv, &d.past_v, &d.v, &d.vs),
            ] {
                if !c.shared {
                    let at = (b * c.kv + n) * past_rows * rb;
                    dst[unit..unit + p * rb].copy_from_slice(&src[at..at + p * rb]);
                }
                for s in 0..c.seq {
                    let x = &new[((b * c.seq + s) * c.kv + n) * h..][..h];
                    let codes: Vec<i32> =
                        (0..h).map(|i| code(c, x[i], scale_of(sc, n, i))).collect();
                    dst[unit + (p + s) * rb..unit + (p + s + 1) * rb]
                        .copy_from_slice(&store(c, &codes));
                }
            }
            let deq = |buf: &[u8], sc: &[f32], row: usize| -> Vec<f64> {
                let codes = codes_of(c, &buf[unit + row * rb..unit + (row + 1) * rb]);
                (0..h)
                    .map(|i| codes[i] as f64 * scale_of(sc, n, i) as f64)
                    .collect()
            };
            for s in 0..c.seq {
                let causal = p + s + 1;
                let end = causal.min(t);
                let from = if c.softcap > 0.0 || c.sink {
                    end
                } else {
                    causal
                };
                let start = if c.window > 0 && from > c.window {
                    (from - c.window).min(end)
                } else {
                    0
                };
                for g in 0..group {
                    let hh = n * group + g;
                    let q = &d.q[((b * c.seq + s) * c.heads + hh) * h..][..h];
                    let mut sc: Vec<f64> = (start..end)
                        .map(|j| {
                            let k = deq(&pk, &d.ks, j);
                            let dot: f64 = q.iter().zip(&k).map(|(&a, &b)| a as f64 * b).sum();
                            dot / (h as f64).sqrt()
                        })
                        .collect();
                    if c.softcap > 0.0 {
                        let cap = c.softcap as f64;
                        sc.iter_mut().for_each(|x| *x = cap * (*x / cap).tanh());
                    }
                    let sink = c.sink.then(|| d.sinks[hh] as f64);
                    let m = sc.iter().copied().chain(sink).fold(f64::MIN, f64::max);
                    let e: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
                    let z = e.iter().sum::<f64>() + sink.map_or(0.0, |s| (s - m).exp());
                    let o = &mut out[((b * c.seq + s) * c.heads + hh) * h..][..h];
                    for (j, w) in (start..end).zip(&e) {
                        let v = deq(&pv, &d.vs, j);
                        o.iter_mut().zip(&v).for_each(|(o, x)| *o += w / z * x);
                    }
                }
            }
        }
    }
    (out, pk, pv)
}

fn shape(c: &Case) -> GqaShape {
    GqaShape {
        batch: c.batch,
        seq: c.seq,
        heads: c.heads,
        kv_heads: c.kv,
        head: c.head,
        past_len: if c.shared { c.present_len } else { c.past_len },
        present_len: c.present_len,
        first_prompt: c.first_prompt,
        scale: 1.0 / (c.head as f32).sqrt(),
        window: c.window,
        softcap: c.softcap,
        smooth: c.sink,
    }
}

type Triple = (Vec<f32>, Vec<u8>, Vec<u8>);

fn call(
    c: &Case,
    d: &Data,
    isa: Option<rcpu::kernels::isa::Isa>,
    par: &dyn Par,
) -> Result<Triple, String> {
    let mut out = vec![f32::NAN; c.batch * c.seq * c.heads * c.head];
    let n = c.batch * c.kv * c.present_len * c.row_bytes();
    let (mut pk, mut pv) = if c.shared {
        (d.past_k.clone(), d.past_v.clone())
    } else {
        (vec![0xa5; n], vec![0x5a; n])
    };
    let inputs = GqaInputs {
        q: &d.q,
        kv: Some((&d.k[..], &d.v[..])),
        past: None,
        seqlens_k: &d.seqlens,
        rotary: None,
        rope_at: None,
        sinks: c.sink.then_some(&d.sinks[..]),
    };
    let q = KvQuant {
        bits: c.bits,
        per_channel: c.per_channel,
        k_scale: &d.ks,
        v_scale: &d.vs,
    };
    let past = (!c.shared).then_some((&d.past_k[..], &d.past_v[..]));
    let outs = QuantOutputs {
        out: &mut out,
        present_k: &mut pk,
        present_v: &mut pv,
        shared: c.shared,
    };
    gqa_quant(isa, &shape(c), &q, &inputs, past, outs, par)?;
    Ok((out, pk, pv))
}

fn check(c: Case, seqlens: &[i32], seed: u64) {
    let mut rng = Rng(seed);
    let d = data(&c, seqlens, &mut rng);
    let (wo, wk, wv) = reference(&c, &d);
    for isa in ISAS {
        let mut serial = None;
        for (pname, par) in [("serial", &Serial as &dyn Par), ("3-lane", &THREE)] {
            let (o, k, v) = match call(&c, &d, Some(isa), par) {
                Ok(r) => r,
                Err(e) if e.contains("not supported") => continue,
                Err(e) => panic!("{c:?} {seqlens:?}: {e}"),
            };
            let what = format!("{c:?} seqlens {seqlens:?} {isa:?} {pname}");
            assert_close(&format!("{what} out"), &o, &wo, 1e-5, 1e-6);
            assert!(k == wk, "{what}: present_k codes differ");
            assert!(v == wv, "{what}: present_v codes differ");
            match &serial {
                None => serial = Some(o),
                Some(s) => assert_same(&format!("{what} vs serial"), &o, s),
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn case(
    batch: usize,
    seq: usize,
    heads: usize,
    kv: usize,
    head: usize,
    past: usize,
    present: usize,
    bits: u32,
    per_channel: bool,
) -> Case {
    Case {
        batch,
        seq,
        heads,
        kv,
        head,
        past_len: past,
        present_len: present,
        first_prompt: false,
        shared: false,
        bits,
        per_channel,
        window: 0,
        softcap: 0.0,
        sink: false,
    }
}

/// Every (bits, per-channel) form with a head size that is not a multiple of the vector widths.
const FORMS: [(u32, bool, usize); 4] =
    [(8, false, 17), (8, true, 17), (4, false, 18), (4, true, 18)];

#[test]
fn decode_prompt_and_later_prompt() {
    let mut seed = 500;
    for (bits, pc, odd) in FORMS {
        for (heads, kv, head) in [(4, 2, 64), (7, 1, odd), (2, 2, 32)] {
            for past in [0usize, 1, 70, 130] {
                seed += 1;
                check(
                    case(1, 1, heads, kv, head, past, past + 1, bits, pc),
                    &[past as i32],
                    seed,
                );
            }
            // batch 2 with different lengths in a past buffer of 40 rows
            check(
                case(2, 1, heads, kv, head, 40, 41, bits, pc),
                &[12, 40],
                seed + 1,
            );
            // first prompt (right padding for batch 1) into a longer present buffer
            let mut c = case(2, 5, heads, kv, head, 0, 9, bits, pc);
            c.first_prompt = true;
            check(c, &[4, 2], seed + 2);
            // a later prompt of 3 tokens after 10 past rows
            check(
                case(1, 3, heads, kv, head, 10, 13, bits, pc),
                &[12],
                seed + 3,
            );
        }
    }
}

#[test]
fn shared_present_buffer_writes_only_new_rows() {
    for (i, (bits, pc, odd)) in FORMS.into_iter().enumerate() {
        for (seq, seqlens, first) in [(1usize, 20i32, false), (6, 5, true), (3, 30, false)] {
            let mut c = case(1, seq, 8, 2, odd, 0, 48, bits, pc);
            c.shared = true;
            c.first_prompt = first;
            check(c, &[seqlens], 900 + i as u64);
        }
    }
}

#[test]
fn window_softcap_and_sinks() {
    for (i, (bits, pc, _)) in FORMS.into_iter().enumerate() {
        for (window, softcap, sink) in [
            (3, 0.0, false),
            (0, 2.0, false),
            (0, 0.0, true),
            (5, 3.0, true),
        ] {
            let base = 1000 + 10 * i as u64;
            let mut c = case(2, 1, 8, 2, 32, 20, 21, bits, pc);
            (c.window, c.softcap, c.sink) = (window, softcap, sink);
            check(c, &[7, 20], base);
            let mut c = case(2, 6, 8, 2, 32, 0, 6, bits, pc);
            (c.first_prompt, c.window, c.softcap, c.sink) = (true, window, softcap, sink);
            check(c, &[5, 2], base + 1);
        }
    }
}

/// Scales of zero (quantized with 1, read as 0), negative and subnormal ones: ORT's codes.
#[test]
fn zero_negative_and_subnormal_scales() {
    for (bits, pc, odd) in FORMS {
        for s in [0.0f32, -0.0, -0.02, 1e-40] {
            let c = case(1, 2, 4, 2, odd, 3, 5, bits, pc);
            let mut rng = Rng(77);
            let mut d = data(&c, &[4], &mut rng);
            d.ks.iter_mut().step_by(2).for_each(|x| *x = s);
            d.vs[0] = s;
            d.k[..3].copy_from_slice(&[0.0, f32::NAN, f32::INFINITY]);
            let (_, wk, wv) = reference(&c, &d);
            for isa in ISAS {
                let Ok((o, k, v)) = call(&c, &d, Some(isa), &Serial) else {
                    continue;
                };
                assert!(k == wk && v == wv, "{bits} {pc} scale {s} {isa:?}: codes");
                assert!(
                    o.iter().all(|x| x.is_finite()),
                    "{bits} {pc} scale {s}: output"
                );
            }
        }
    }
}

/// Exact halves (`(m + 0.5) * s` with `s` a power of two, so `x * (1 / s)` is the half itself):
/// rounded to even, as ORT rounds them, in keys and values, per tensor and per channel.
#[test]
fn halves_round_to_even() {
    for (bits, pc, odd) in FORMS {
        let c = case(1, 3, 4, 2, odd, 2, 5, bits, pc);
        let mut d = data(&c, &[4], &mut Rng(31));
        d.ks.iter_mut().for_each(|x| *x = 0.25);
        d.vs.iter_mut().for_each(|x| *x = 0.5);
        let (_, hi) = c.lo_hi();
        let half = |i: usize| (i as i32 % (2 * hi)) - hi + 1;
        d.k.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = (half(i) as f32 + 0.5) * 0.25);
        d.v.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = (half(i + 3) as f32 - 0.5) * 0.5);
        let (_, wk, wv) = reference(&c, &d);
        for isa in ISAS {
            let Ok((_, k, v)) = call(&c, &d, Some(isa), &Serial) else {
                continue;
            };
            assert!(k == wk && v == wv, "{bits} {pc} {isa:?}: codes of halves");
        }
    }
}

#[test]
fn bad_inputs_are_errors() {
    let c = case(1, 1, 4, 2, 16, 3, 4, 8, true);
    let mut rng = Rng(5);
    let d = data(&c, &[3], &mut rng);
    let run = |c: &Case, d: &Data| call(c, d, None, &Serial).map(|_| ()).unwrap_err();
    for bits in [0u32, 2, 3, 16] {
        let mut c2 = c;
        c2.bits = bits;
        assert!(run(&c2, &d).contains("not 4 or 8"), "bits {bits}");
    }
    let mut d2 = data(&c, &[3], &mut Rng(5));
    d2.ks.pop();
    assert!(run(&c, &d2).contains("k_scale has 31 elements, expected 32"));
    let mut d3 = data(&c, &[3], &mut Rng(5));
    d3.vs[5] = f32::NAN;
    assert!(run(&c, &d3).contains("v_scale[5] = NaN"));
    let mut d4 = data(&c, &[3], &mut Rng(5));
    d4.ks[0] = f32::INFINITY;
    assert!(run(&c, &d4).contains("must be finite"));
    let mut c5 = c;
    c5.per_channel = false;
    assert!(run(&c5, &d).contains("expected 1 (PER_TENSOR)"));
    let mut d6 = data(&c, &[3], &mut Rng(5));
    d6.seqlens[0] = 9;
    assert!(!run(&c, &d6).is_empty());
}
