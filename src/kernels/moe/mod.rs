//! `com.microsoft.QMoE` (integer experts, 4 or 8 bits, block-wise scales): pure compute.
//!
//! * [`route`]: each token's top-k experts and their mixing weights, exactly as ORT's CPU
//!   kernel picks and weighs them.
//! * [`activation`]: the fc1 epilogue (interleaved SwiGLU with alpha / beta / limit, SiLU,
//!   GELU, ReLU, identity).
//! * [`reference`]: a plain f64 reference of the whole op over ORT's layout (test ground truth).
//! * `driver` ([`run`]): tokens grouped by expert (a counting sort of the routes), then for each
//!   expert that received tokens its fc1 product, the activation, its fc2 product and the
//!   weighted sum into the output. The products are MatMulNBits products
//!   (`kernels::matmul_nbits`): an expert's fc1 is an `[2I or I, H]` weight, its fc2 an
//!   `[H, I]` one, in the very layout MatMulNBits reads, so each expert packs into the same
//!   tiles and runs on the same M = 1 stream and M > 1 GEMM (int8 / VNNI / AMX at level 4)
//!   paths, split over the lanes. A decode token therefore reads exactly its k experts' bytes.

pub mod activation;
mod driver;
pub mod reference;
pub mod route;

pub use activation::MoeActivation;
pub use driver::{run, Expert, ExpertMatrix, MoeRoute};
pub use route::{route_tokens, Routes};

/// The sizes of one QMoE node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeShape {
    /// Experts (`E`): rows of the router's logits, leading dimension of every expert weight.
    pub experts: usize,
    /// Model width (`H`): input and output row length, fc1's K, fc2's N.
    pub hidden: usize,
    /// Expert width (`I`): fc2's K; fc1's N is `2 I` for SwiGLU, `I` otherwise.
    pub inter: usize,
    /// Experts per token (`k`), `1..=E`.
    pub top_k: usize,
}

impl MoeShape {
    /// Checks the sizes themselves: every count positive, `k <= E`.
    pub fn validate(&self) -> Result<(), String> {
        if self.experts == 0 || self.hidden == 0 || self.inter == 0 {
            return Err(format!(
                "QMoE: experts, hidden and inter sizes must be positive, got E={} H={} I={}",
                self.experts, self.hidden, self.inter
            ));
        }
        if self.top_k == 0 || self.top_k > self.experts {
            return Err(format!(
                "QMoE: k must be in 1..=num_experts ({}), got {}",
                self.experts, self.top_k
            ));
        }
        Ok(())
    }
}
