//! Decode-shaped models generated on the spot (no downloads), from a spec:
//!
//! - `nbits:k=4096,n=4096,layers=1,block=32,acc=4,m=1[,zp=0|1][,sym]`: a chain of
//!   `com.microsoft.MatMulNBits` (4-bit, block-quantized, seeded random weights). `zp=1` (default)
//!   gives each block an explicit zero point (the `zero_points` input); `sym` (= `zp=0`) drops the
//!   input, so ORT uses the implicit zero point 8.
//! - `matmul:k=2048,n=2048,m=1[,layers=1]`: a chain of f32 `MatMul` with constant weights.
//! - `qlinear:k=2048,n=2048,m=1[,a=u8|i8][,b=u8|i8][,percol][,layers=1]`: a chain of ONNX
//!   `QLinearMatMul` with a constant 8-bit B (see `gen_qlinear`); the input is 8-bit.
//! - `decoder:hidden=896,heads=14,kv=2,inter=4864,...`: one decoder layer (gen_decoder.rs).
//! - `llm:preset=qwen2-0.5b|llama-3.2-1b,...`: a whole genai-builder-shaped LLM (gen_llm.rs).
//! - `glue:op=skipnorm|mul|sigmoid|mix,n=896,layers=64`: a chain of small glue nodes only
//!   (gen_glue.rs): the per-node cost of the two arms.
//! - `mixed:k=4096,n=4096,layers=4,block=32,acc=4,m=1[,zp=0|1][,sym]`: per layer an int4
//!   MatMulNBits K->N (rcpu) and an int8 `DynamicQuantizeMatMul` N->K that stays on ORT's CPU EP
//!   (gen_mixed.rs): rcpu's lanes and ORT's intra-op pool take turns.
//!
//! Chaining: layer i maps K->N when i is even and N->K when i is odd, so any K, N chain (for K=N
//! every layer is K->K). The weights streamed per token are the sum over layers either way.
//! The input `x` is f32 [m, K] with `m` symbolic; `m=` only sets the M the bench runs with.
//! Scales are drawn so each layer keeps the activation's magnitude (no overflow in long chains).

use crate::onnx::{dtype, Attr, Dim, GraphBuilder};

use super::gen_decoder::Decoder;
use super::gen_glue::Glue;
use super::gen_llm::Llm;

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    NBits {
        block: usize,
        acc: i64,
        zero_points: bool,
        /// 4, or 8 (one byte a code, the implied zero point 128: `bits=8` with `sym`).
        bits: usize,
    },
    MatMul,
    QLinear(super::gen_qlinear::QLinear),
    Decoder(Decoder),
    Llm(Box<Llm>),
    /// A chain of small glue nodes (gen_glue.rs).
    Glue(Glue),
    /// MatMulNBits (rcpu) alternating with DynamicQuantizeMatMul (ORT) per layer.
    Mixed {
        block: usize,
        acc: i64,
        zero_points: bool,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub kind: Kind,
    pub k: usize,
    pub n: usize,
    pub layers: usize,
    pub m: usize,
    pub seed: u64,
}

/// A generated model and what the bench needs to know about it.
pub struct Generated {
    pub bytes: Vec<u8>,
    /// Bytes of constant weights read per token (all initializers of all layers).
    pub weight_bytes: u64,
}

impl Spec {
    pub fn parse(s: &str) -> Result<Spec, String> {
        let (kind, rest) = s.split_once(':').ok_or_else(|| {
            format!(
                "bad --gen spec '{s}': expected nbits:..., matmul:..., qlinear:..., mixed:..., decoder:..., glue:... or llm:..."
            )
        })?;
        if kind == "llm" {
            let l = Llm::parse(s, rest)?;
            return Ok(Spec {
                k: l.layer.hidden,
                n: l.layer.hidden,
                layers: l.layers,
                m: 1,
                seed: l.seed,
                kind: Kind::Llm(Box::new(l)),
            });
        }
        if kind == "glue" {
            let (g, m, seed) = Glue::parse(s, rest)?;
            return Ok(Spec {
                k: g.n,
                n: g.n,
                layers: g.layers,
                m,
                seed,
                kind: Kind::Glue(g),
            });
        }
        if kind == "decoder" {
            let (d, m, seed) = Decoder::parse(s, rest)?;
            return Ok(Spec {
                k: d.hidden,
                n: d.hidden,
                layers: 1,
                m,
                seed,
                kind: Kind::Decoder(d),
            });
        }
        let mut spec = Spec {
            kind: Kind::MatMul,
            k: 0,
            n: 0,
            layers: 1,
            m: 1,
            seed: 1,
        };
        let (mut block, mut acc, mut zp, mut bits) = (32usize, 4i64, true, 4usize);
        let mut ql = super::gen_qlinear::QLinear::default();
        let nbits_like = kind == "nbits" || kind == "mixed";
        for item in rest.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            if kind == "qlinear"
                && ql
                    .parse_item(item)
                    .map_err(|e| format!("spec '{s}': {e}"))?
            {
                continue;
            }
            if item == "sym" {
                zp = false;
                continue;
            }
            let (key, val) = item
                .split_once('=')
                .ok_or_else(|| format!("bad spec item '{item}' in '{s}'"))?;
            let num = || {
                val.parse::<usize>()
                    .map_err(|_| format!("spec '{s}': {key}='{val}' is not an integer"))
            };
            match key {
                "k" => spec.k = num()?,
                "n" => spec.n = num()?,
                "layers" => spec.layers = num()?,
                "m" => spec.m = num()?,
                "seed" => spec.seed = num()? as u64,
                "block" if nbits_like => block = num()?,
                "acc" if nbits_like => acc = num()? as i64,
                "zp" if nbits_like => zp = num()? != 0,
                "bits" if kind == "nbits" => bits = num()?,
                _ => return Err(format!("spec '{s}': unknown key '{key}' for {kind}")),
            }
        }
        spec.kind = match kind {
            "nbits" | "mixed" => {
                if block < 16 || !block.is_power_of_two() {
                    return Err(format!("spec '{s}': block must be a power of two >= 16"));
                }
                if ![0, 1, 2, 3, 4].contains(&acc) {
                    return Err(format!("spec '{s}': acc must be 0..4"));
                }
                let bits_ok = bits == 4 || (bits == 8 && !zp);
                if !bits_ok {
                    return Err(format!(
                        "spec '{s}': bits must be 4, or 8 with sym (the implied zero point 128)"
                    ));
                }
                if kind == "mixed" {
                    Kind::Mixed {
                        block,
                        acc,
                        zero_points: zp,
                    }
                } else {
                    Kind::NBits {
                        block,
                        acc,
                        zero_points: zp,
                        bits,
                    }
                }
            }
            "matmul" => Kind::MatMul,
            "qlinear" => {
                ql.validate().map_err(|e| format!("spec '{s}': {e}"))?;
                Kind::QLinear(ql)
            }
            _ => {
                return Err(format!(
                    "bad --gen spec '{s}': unknown kind '{kind}' (nbits|matmul|qlinear|mixed|decoder|glue|llm)"
                ))
            }
        };
        if spec.k == 0 || spec.n == 0 || spec.layers == 0 || spec.m == 0 {
            return Err(format!(
                "spec '{s}': k, n, layers and m must be set and positive"
            ));
        }
        Ok(spec)
    }

    /// Short label for tables: `nbits k=4096 n=4096 L=4 b32 acc4 zp m=1`.
    pub fn label(&self) -> String {
        match &self.kind {
            Kind::NBits {
                block,
                acc,
                zero_points,
                bits,
            } => format!(
                "nbits k={} n={} L={} b{} acc{} {}{} m={}",
                self.k,
                self.n,
                self.layers,
                block,
                acc,
                if *zero_points { "zp" } else { "sym" },
                if *bits == 8 { " bits8" } else { "" },
                self.m
            ),
            Kind::MatMul => format!(
                "f32 matmul k={} n={} L={} m={}",
                self.k, self.n, self.layers, self.m
            ),
            Kind::QLinear(q) => format!(
                "qlinearmatmul k={} n={} L={} {} m={}",
                self.k,
                self.n,
                self.layers,
                q.label(),
                self.m
            ),
            Kind::Decoder(d) => d.label(self.m),
            Kind::Glue(g) => g.label(self.m),
            Kind::Llm(l) => l.label(),
            Kind::Mixed {
                block,
                acc,
                zero_points,
            } => format!(
                "mixed nbits(rcpu)+dqmatmul(ort) k={} n={} L={} b{} acc{} {} m={}",
                self.k,
                self.n,
                self.layers,
                block,
                acc,
                if *zero_points { "zp" } else { "sym" },
                self.m
            ),
        }
    }

    /// Layer i's (in, out) features.
    fn dims(&self, i: usize) -> (usize, usize) {
        if i.is_multiple_of(2) {
            (self.k, self.n)
        } else {
            (self.n, self.k)
        }
    }

    pub fn generate(&self) -> Generated {
        match &self.kind {
            Kind::Decoder(d) => return d.generate(self.m, self.seed),
            Kind::Llm(l) => return l.generate(),
            Kind::Glue(g) => return g.generate(self.seed),
            _ => {}
        }
        let mut g = GraphBuilder::new("rcpu_bench", 17);
        let elem = match &self.kind {
            Kind::QLinear(q) => q.a_elem(),
            _ => dtype::FLOAT,
        };
        g.input("x", elem, &[Dim::Sym("m"), Dim::Fixed(self.k as i64)]);
        let mut weight_bytes = 0u64;
        let mut prev = "x".to_string();
        for i in 0..self.layers {
            let (kin, nout) = self.dims(i);
            let out = if i + 1 == self.layers {
                "y".to_string()
            } else {
                format!("h{i}")
            };
            let seed = self.seed.wrapping_mul(1000).wrapping_add(i as u64);
            match &self.kind {
                Kind::NBits {
                    block,
                    acc,
                    zero_points,
                    bits,
                } => {
                    weight_bytes += nbits_layer(
                        &mut g,
                        &format!("matmulnbits{i}"),
                        &i.to_string(),
                        &prev,
                        &out,
                        kin,
                        nout,
                        *block,
                        *acc,
                        (*bits, Codes::Uniform),
                        *zero_points,
                        None,
                        false,
                        seed,
                    );
                }
                Kind::Mixed {
                    block,
                    acc,
                    zero_points,
                } => {
                    // K -> N on rcpu, then N -> K on ORT: every layer ends at K.
                    let mid = format!("nb{i}");
                    weight_bytes += nbits_layer(
                        &mut g,
                        &format!("matmulnbits{i}"),
                        &i.to_string(),
                        &prev,
                        &mid,
                        self.k,
                        self.n,
                        *block,
                        *acc,
                        (4, Codes::Uniform),
                        *zero_points,
                        None,
                        false,
                        seed,
                    );
                    weight_bytes += super::gen_mixed::dqmm_layer(
                        &mut g,
                        &format!("dqmatmul{i}"),
                        &i.to_string(),
                        &mid,
                        &out,
                        self.n,
                        self.k,
                        seed ^ 0x9e37,
                    );
                }
                Kind::Decoder(_) | Kind::Llm(_) | Kind::Glue(_) => unreachable!("generated above"),
                Kind::MatMul => {
                    let scale = (3.0 / kin as f32).sqrt();
                    let w: Vec<f32> = crate::rand_f32(kin * nout, seed)
                        .iter()
                        .map(|v| v * scale)
                        .collect();
                    let wn = format!("w{i}");
                    g.initializer_f32(&wn, &[kin as i64, nout as i64], &w);
                    g.node(
                        "MatMul",
                        "",
                        &format!("matmul{i}"),
                        &[&prev, &wn],
                        &[&out],
                        &[],
                    );
                    weight_bytes += (kin * nout * 4) as u64;
                }
                Kind::QLinear(q) => {
                    weight_bytes += q.layer(&mut g, i, &prev, &out, kin, nout, seed);
                }
            }
            prev = out;
        }
        let out = if self.layers % 2 == 1 && !matches!(self.kind, Kind::Mixed { .. }) {
            self.n
        } else {
            self.k
        };
        g.output_shaped("y", elem, &[Dim::Sym("m"), Dim::Fixed(out as i64)]);
        Generated {
            bytes: g.build(),
            weight_bytes,
        }
    }
}

/// Deterministic bytes (the one PRNG), for the packed nibbles and 8-bit weights.
pub(super) fn rand_bytes(n: usize, seed: u64) -> Vec<u8> {
    crate::rng::Rng::mixed(seed, 0xD1B5_4A32_D192_ED03).bytes(n)
}

/// How the seeded codes of a generated weight are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codes {
    /// Uniform over the whole range (0..=15, or every byte): `q - zero point` averages -0.5, so
    /// an offset common to an input's elements comes out about `0.5 sqrt(K / 21)` times larger
    /// in every output (the dense presets' weights, kept as they were).
    Uniform,
    /// Uniform over the range but its lowest code, which is read as the zero point instead
    /// (4 bits: 1..=15 and 0 read as 8): `q - zero point` averages 0, so no offset grows from
    /// layer to layer (the mixture-of-experts presets' weights, whose routing stays spread).
    Centered,
}

/// The seeded codes and scales of a `bits`-bit (4 or 8) [N, K] weight: B is (N, k_blocks,
/// block * bits / 8), at 4 bits two values per byte, low nibble first; one f32 scale per (row,
/// block).
pub(super) fn nbits_weights(
    k: usize,
    n: usize,
    block: usize,
    bits: usize,
    codes: Codes,
    seed: u64,
) -> (Vec<u8>, Vec<f32>) {
    let kb = k.div_ceil(block);
    let mut b = rand_bytes(n * kb * block * bits / 8, seed);
    // The variance of (q - zp): ~21 for uniform 4-bit q, ~5461 for uniform bytes; 17.5 and
    // 5397.5 centered. Scales keep each output near the input's magnitude.
    let var = match (bits, codes) {
        (8, Codes::Uniform) => 5461.0,
        (8, Codes::Centered) => 5397.5,
        (_, Codes::Uniform) => 21.0,
        (_, Codes::Centered) => 17.5,
    };
    if codes == Codes::Centered {
        let nib = |n: u8| if n == 0 { 8 } else { n };
        for x in &mut b {
            *x = match bits {
                8 if *x == 0 => 128,
                8 => *x,
                _ => nib(*x & 15) | (nib(*x >> 4) << 4),
            };
        }
    }
    let base = 1.0 / (var * k as f32).sqrt();
    let scales: Vec<f32> = crate::rand_f32(n * kb, seed ^ 0x5ca1e)
        .iter()
        .map(|r| base * (1.0 + 0.5 * r))
        .collect();
    (b, scales)
}

/// One MatMulNBits node named `name` (initializers `B{tag}`, `scales{tag}`, `zp{tag}`) of
/// `bits`-bit codes (4, or 8 as the model builder writes an 8-bit lm_head or layer) drawn as
/// `codes` says, with an
/// optional bias input (an f32 initializer the caller made); returns the bytes of its
/// initializers. Scales are [N * k_blocks], or [N, k_blocks] with `scales_2d` (both accepted by
/// MatMulNBits; the 2-D form is what GatherBlockQuantized needs to share them).
#[allow(clippy::too_many_arguments)]
pub(super) fn nbits_layer(
    g: &mut GraphBuilder,
    name: &str,
    tag: &str,
    input: &str,
    out: &str,
    k: usize,
    n: usize,
    block: usize,
    acc: i64,
    (bits, codes): (usize, Codes),
    zero_points: bool,
    bias: Option<&str>,
    scales_2d: bool,
    seed: u64,
) -> u64 {
    let kb = k.div_ceil(block);
    let (b, scales) = nbits_weights(k, n, block, bits, codes, seed);
    let (bn, sn, zn) = (
        format!("B{tag}"),
        format!("scales{tag}"),
        format!("zp{tag}"),
    );
    let blob = (block * bits / 8) as i64;
    g.initializer_u8(&bn, &[n as i64, kb as i64, blob], &b);
    if scales_2d {
        g.initializer_f32(&sn, &[n as i64, kb as i64], &scales);
    } else {
        g.initializer_f32(&sn, &[(n * kb) as i64], &scales);
    }
    let mut bytes = (b.len() + scales.len() * 4) as u64;
    let mut inputs = vec![input, bn.as_str(), sn.as_str()];
    if zero_points {
        // Kept near the middle of the range: at 4 bits N * ceil(k_blocks/2) bytes, two zero
        // points per byte, low nibble first (7 or 8); at 8 bits one a byte (127 or 128).
        let zp: Vec<u8> = if bits == 8 {
            rand_bytes(n * kb, seed ^ 0x2e70)
                .iter()
                .map(|v| 0x7f + (v & 1))
                .collect()
        } else {
            rand_bytes(n * kb.div_ceil(2), seed ^ 0x2e70)
                .iter()
                .map(|v| 0x77 + (v & 0x11))
                .collect()
        };
        g.initializer_u8(&zn, &[zp.len() as i64], &zp);
        bytes += zp.len() as u64;
        inputs.push(zn.as_str());
    }
    if let Some(b) = bias {
        // Inputs 3 (zero_points) and 4 (g_idx) left empty where absent; 5 is the bias.
        inputs.resize(5, "");
        inputs.push(b);
    }
    nbits_node(g, name, &inputs, out, [k, n, bits, block], acc);
    bytes
}

/// The MatMulNBits node itself over `inputs`; `[K, N, bits, block_size]`.
fn nbits_node(
    g: &mut GraphBuilder,
    name: &str,
    inputs: &[&str],
    out: &str,
    [k, n, bits, block]: [usize; 4],
    acc: i64,
) {
    let attrs = [
        ("K", Attr::Int(k as i64)),
        ("N", Attr::Int(n as i64)),
        ("bits", Attr::Int(bits as i64)),
        ("block_size", Attr::Int(block as i64)),
        ("accuracy_level", Attr::Int(acc)),
    ];
    g.node("MatMulNBits", "com.microsoft", name, inputs, &[out], &attrs);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs_and_rejects_bad_ones() {
        let s = Spec::parse("nbits:k=4096,n=14336,layers=2,block=32,acc=4,m=1,sym").unwrap();
        assert_eq!((s.k, s.n, s.layers, s.m), (4096, 14336, 2, 1));
        assert_eq!(
            s.kind,
            Kind::NBits {
                block: 32,
                acc: 4,
                zero_points: false,
                bits: 4
            }
        );
        let s8 = Spec::parse("nbits:k=896,n=4864,bits=8,sym").unwrap();
        assert!(matches!(s8.kind, Kind::NBits { bits: 8, .. }) && s8.label().contains("bits8"));
        for bad in ["nbits:k=64,n=64,bits=8", "nbits:k=64,n=64,bits=2,sym"] {
            assert!(Spec::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Spec::parse("matmul:k=2048,n=2048,m=1").unwrap().kind,
            Kind::MatMul
        );
        let q = Spec::parse("qlinear:k=64,n=32,m=128,a=i8,b=i8,percol").unwrap();
        assert_eq!(
            q.kind,
            Kind::QLinear(super::super::gen_qlinear::QLinear {
                a_signed: true,
                b_signed: true,
                per_column: true
            })
        );
        for bad in [
            "nbits",
            "nbits:k=4096",
            "foo:k=1,n=1",
            "nbits:k=64,n=64,block=24",
            "matmul:k=8,n=8,acc=4",
            "qlinear:k=8,n=8,a=i8,b=u8",
            "qlinear:k=8,n=8,a=x8",
            "matmul:k=8,n=8,percol",
        ] {
            assert!(Spec::parse(bad).is_err(), "{bad} must be rejected");
        }
    }

    #[test]
    fn mixed_alternates_rcpu_and_ort_nodes() {
        let s = Spec::parse("mixed:k=64,n=32,layers=2,block=32,acc=4,m=1,sym").unwrap();
        assert_eq!(
            s.kind,
            Kind::Mixed {
                block: 32,
                acc: 4,
                zero_points: false
            }
        );
        let g = s.generate();
        let info = crate::bench::model::ModelInfo::parse(&g.bytes).unwrap();
        assert_eq!(info.ops, ["MatMulNBits", "DynamicQuantizeMatMul"]);
        // Per layer: nbits 64->32 (2 blocks, no zp): B 32*2*16 + scales 32*2*4;
        // DynamicQuantizeMatMul 32->64: int8 B 32*64 + scales 64*4.
        assert_eq!(g.weight_bytes, 2 * ((1024 + 256) + (2048 + 256)));
        assert_eq!(info.default_tol(), 5e-2);
        assert!(Spec::parse("mixed:k=64,n=64,block=24").is_err());
        assert!(Spec::parse("mixed:k=64,n=64,percol").is_err());
    }

    #[test]
    fn weight_bytes_count_every_initializer() {
        let s = Spec::parse("nbits:k=64,n=32,layers=2,block=32,acc=0").unwrap();
        // layer 0 (64->32, 2 blocks): B 32*2*16 + scales 32*2*4 + zp 32*1;
        // layer 1 (32->64, 1 block): B 64*1*16 + scales 64*1*4 + zp 64*1.
        assert_eq!(
            s.generate().weight_bytes,
            (1024 + 256 + 32) + (1024 + 256 + 64)
        );
        assert_eq!(
            Spec::parse("matmul:k=8,n=4,layers=3")
                .unwrap()
                .generate()
                .weight_bytes,
            3 * 8 * 4 * 4
        );
    }
}
