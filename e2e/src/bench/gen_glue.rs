//! `glue:op=skipnorm|mul|sigmoid|mix,n=896,layers=64[,m=1][,seed=1]`: a chain of small glue nodes
//! and nothing else (issue 17, "the cost of a small node"). A decode token of a Qwen2-0.5B-shaped
//! model runs ~150 such nodes beside its GEMVs; timed as a chain, rcpu's and ORT's per-node
//! overhead is what separates the arms. Per layer:
//!
//! ```text
//! skipnorm: h, r -> SkipSimplifiedLayerNormalization (gamma [n]) -> h', r' (output 3, the
//!           residual, wired as in the genai layout; r_0 = x)
//! mul:      h -> Mul (w [n], near 1; same element count as h at m=1) -> h'
//! sigmoid:  h -> Sigmoid -> h'
//! mix:      the three in turn: skipnorm, then Sigmoid, then Mul by w (3 nodes a layer)
//! ```
//!
//! The input `x` is f32 [m, n] (`m` symbolic, 1 by default); values stay bounded over any number
//! of layers (the norm rescales, Sigmoid maps into (0, 1), w is within 5% of 1).

use crate::onnx::{dtype, Attr, Dim, GraphBuilder};

use super::gen::Generated;
use super::gen_decoder::{spec_int, spec_items};

/// Which glue op the chain repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GlueOp {
    SkipNorm,
    Mul,
    Sigmoid,
    Mix,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Glue {
    pub op: GlueOp,
    pub n: usize,
    pub layers: usize,
}

impl Glue {
    /// Parses the items after `glue:`; returns the chain and `m`, `seed`.
    pub fn parse(spec: &str, rest: &str) -> Result<(Glue, usize, u64), String> {
        let mut g = Glue {
            op: GlueOp::SkipNorm,
            n: 896,
            layers: 64,
        };
        let (mut m, mut seed) = (1usize, 1u64);
        for (key, val) in spec_items(spec, rest)? {
            match key {
                "op" => {
                    g.op = match val {
                        "skipnorm" => GlueOp::SkipNorm,
                        "mul" => GlueOp::Mul,
                        "sigmoid" => GlueOp::Sigmoid,
                        "mix" => GlueOp::Mix,
                        _ => {
                            return Err(format!(
                                "spec '{spec}': op='{val}' is not skipnorm, mul, sigmoid or mix"
                            ))
                        }
                    }
                }
                "n" => g.n = spec_int(spec, key, val)?,
                "layers" => g.layers = spec_int(spec, key, val)?,
                "m" => m = spec_int(spec, key, val)?,
                "seed" => seed = spec_int(spec, key, val)? as u64,
                _ => return Err(format!("spec '{spec}': unknown key '{key}' for glue")),
            }
        }
        if g.n == 0 || g.layers == 0 || m == 0 {
            return Err(format!("spec '{spec}': n, layers and m must be positive"));
        }
        Ok((g, m, seed))
    }

    pub fn label(&self, m: usize) -> String {
        let op = match self.op {
            GlueOp::SkipNorm => "skipnorm",
            GlueOp::Mul => "mul",
            GlueOp::Sigmoid => "sigmoid",
            GlueOp::Mix => "mix",
        };
        format!("glue {op} n={} L={} m={m}", self.n, self.layers)
    }

    /// Nodes per layer.
    fn per_layer(&self) -> usize {
        if self.op == GlueOp::Mix {
            3
        } else {
            1
        }
    }

    pub fn generate(&self, seed: u64) -> Generated {
        let n = self.n;
        let mut g = GraphBuilder::new("rcpu_bench_glue", 17);
        g.input("x", dtype::FLOAT, &[Dim::Sym("m"), Dim::Fixed(n as i64)]);
        let mut weight_bytes = 0u64;
        let (mut h, mut r) = ("x".to_string(), "x".to_string());
        let total = self.layers * self.per_layer();
        let mut step = 0usize;
        let mut next = |g: &mut GraphBuilder, h: &str, op: GlueOp, r: &mut String| -> String {
            let i = step;
            step += 1;
            let out = if i + 1 == total {
                "y".to_string()
            } else {
                format!("h{i}")
            };
            let s = seed.wrapping_mul(1000).wrapping_add(i as u64);
            match op {
                GlueOp::SkipNorm => {
                    let gamma: Vec<f32> = crate::rand_f32(n, s)
                        .iter()
                        .map(|v| 1.0 + 0.1 * v)
                        .collect();
                    let (gn, rn) = (format!("gamma{i}"), format!("r{i}"));
                    g.initializer_f32(&gn, &[n as i64], &gamma);
                    g.node(
                        "SkipSimplifiedLayerNormalization",
                        "com.microsoft",
                        &format!("skipnorm{i}"),
                        &[h, r.as_str(), &gn],
                        &[&out, "", "", &rn],
                        &[("epsilon", Attr::Float(1e-6))],
                    );
                    *r = rn;
                    weight_bytes += (n * 4) as u64;
                }
                GlueOp::Mul => {
                    let w: Vec<f32> = crate::rand_f32(n, s)
                        .iter()
                        .map(|v| 1.0 + 0.05 * v)
                        .collect();
                    let wn = format!("w{i}");
                    g.initializer_f32(&wn, &[n as i64], &w);
                    g.node("Mul", "", &format!("mul{i}"), &[h, &wn], &[&out], &[]);
                    weight_bytes += (n * 4) as u64;
                }
                GlueOp::Sigmoid => {
                    g.node("Sigmoid", "", &format!("sigmoid{i}"), &[h], &[&out], &[]);
                }
                GlueOp::Mix => unreachable!("mix is expanded by the caller"),
            }
            out
        };
        for _ in 0..self.layers {
            match self.op {
                GlueOp::Mix => {
                    for op in [GlueOp::SkipNorm, GlueOp::Sigmoid, GlueOp::Mul] {
                        h = next(&mut g, &h, op, &mut r);
                    }
                }
                op => h = next(&mut g, &h, op, &mut r),
            }
        }
        g.output_shaped("y", dtype::FLOAT, &[Dim::Sym("m"), Dim::Fixed(n as i64)]);
        Generated {
            bytes: g.build(),
            weight_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::model::ModelInfo;

    #[test]
    fn parses_and_generates_a_chain() {
        let (g, m, _) = Glue::parse("s", "op=mix,n=64,layers=3,m=2").unwrap();
        assert_eq!((g.op, g.n, g.layers, m), (GlueOp::Mix, 64, 3, 2));
        let info = ModelInfo::parse(&g.generate(1).bytes).unwrap();
        let names: Vec<&str> = info.inputs.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["x"]);
        for bad in ["op=relu", "n=0", "layers=0", "m=0", "foo=1", "n=x"] {
            assert!(Glue::parse("s", bad).is_err(), "{bad} must be rejected");
        }
    }
}
