//! The activation between an expert's fc1 and fc2, as ORT's CPU QMoE applies it (f32).
//!
//! SwiGLU reads fc1's row as interleaved pairs (`swiglu_fusion = 1`: gate at even columns,
//! linear at odd ones) and writes `I` values:
//! `g = min(gate, limit)`, `l = clamp(linear, -limit, limit)`,
//! `out = g * sigmoid(alpha * g) * (l + beta)`. The other activations are elementwise over fc1's
//! `I` columns. GELU is the tanh approximation ORT's QMoE uses.

/// The activation of a QMoE node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MoeActivation {
    /// Interleaved SwiGLU (`activation_alpha`, `activation_beta`, `swiglu_limit`; an absent
    /// limit is infinite).
    SwiGlu {
        alpha: f32,
        beta: f32,
        limit: f32,
    },
    Silu,
    Gelu,
    Relu,
    Identity,
}

impl MoeActivation {
    /// The activation named by `activation_type` (SwiGLU's parameters given), `None` for an
    /// unknown name.
    pub fn from_name(name: &str, alpha: f32, beta: f32, limit: f32) -> Option<MoeActivation> {
        Some(match name {
            "swiglu" => MoeActivation::SwiGlu { alpha, beta, limit },
            "silu" => MoeActivation::Silu,
            "gelu" => MoeActivation::Gelu,
            "relu" => MoeActivation::Relu,
            "identity" => MoeActivation::Identity,
            _ => return None,
        })
    }

    /// fc1's output columns for an expert width of `inter`: `2 inter` for SwiGLU.
    pub fn fc1_cols(&self, inter: usize) -> Option<usize> {
        match self {
            MoeActivation::SwiGlu { .. } => inter.checked_mul(2),
            _ => Some(inter),
        }
    }

    /// One row: `fc1` holds [`Self::fc1_cols`] values, `out` the `inter` activations.
    pub fn apply(&self, fc1: &[f32], out: &mut [f32]) {
        match *self {
            MoeActivation::SwiGlu { alpha, beta, limit } => {
                debug_assert_eq!(fc1.len(), 2 * out.len());
                for (o, pair) in out.iter_mut().zip(fc1.chunks_exact(2)) {
                    // The comparisons of C++'s std::min / std::clamp, so that a NaN passes
                    // through as it does in ORT (and no limit, negative or NaN, can panic).
                    let g = if limit < pair[0] { limit } else { pair[0] };
                    let l = if pair[1] < -limit {
                        -limit
                    } else if limit < pair[1] {
                        limit
                    } else {
                        pair[1]
                    };
                    let sig = 1.0 / (1.0 + (-(alpha * g)).exp());
                    *o = g * sig * (l + beta);
                }
            }
            MoeActivation::Silu => map(fc1, out, |x| x * (1.0 / (1.0 + (-x).exp()))),
            MoeActivation::Gelu => map(fc1, out, |x| {
                0.5 * x * (1.0 + (0.797_884_6 * (x + 0.044715 * x * x * x)).tanh())
            }),
            MoeActivation::Relu => map(fc1, out, |x| if 0.0 < x { x } else { 0.0 }),
            MoeActivation::Identity => out.copy_from_slice(fc1),
        }
    }
}

fn map(fc1: &[f32], out: &mut [f32], f: impl Fn(f32) -> f32) {
    debug_assert_eq!(fc1.len(), out.len());
    for (o, &x) in out.iter_mut().zip(fc1) {
        *o = f(x);
    }
}
