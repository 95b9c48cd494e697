//! Attributes of one `com.microsoft.MatMulNBits` node and the input sizes they imply.

/// Shape-defining attributes of a MatMulNBits node (bits = 4 only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NBitsParams {
    /// Reduction length (columns of A, rows of the logical weight).
    pub k: usize,
    /// Output columns.
    pub n: usize,
    /// Quantisation bits per weight; only 4 is supported.
    pub bits: usize,
    /// Weights per quantisation block along K (power of two, 16..=256).
    pub block_size: usize,
    /// 0..=3: fp32 compute; 4: A quantised to int8 per block, integer dot products.
    pub accuracy_level: usize,
    /// Whether the node has a `zero_points` input (otherwise every zero point is 8).
    pub has_zero_points: bool,
}

impl NBitsParams {
    /// Params for a 4-bit node.
    pub fn new(
        k: usize,
        n: usize,
        block_size: usize,
        accuracy_level: usize,
        has_zero_points: bool,
    ) -> Self {
        NBitsParams {
            k,
            n,
            bits: 4,
            block_size,
            accuracy_level,
            has_zero_points,
        }
    }

    /// Blocks along K: `ceil(K / block_size)`.
    pub fn k_blocks(&self) -> usize {
        self.k.div_ceil(self.block_size)
    }

    /// Bytes of one (column, block) blob in B: `block_size * bits / 8`.
    pub fn blob_bytes(&self) -> usize {
        self.block_size * self.bits / 8
    }

    /// Bytes of one column's row of packed zero points: `ceil(k_blocks / 2)`.
    pub fn zp_row_bytes(&self) -> usize {
        self.k_blocks().div_ceil(2)
    }

    /// True when the int8 (accuracy level 4) path runs.
    pub fn int8_compute(&self) -> bool {
        self.accuracy_level == 4
    }

    /// Checks the attributes themselves.
    pub fn validate(&self) -> Result<(), String> {
        if self.bits != 4 {
            return Err(format!("MatMulNBits: bits must be 4, got {}", self.bits));
        }
        if !self.block_size.is_power_of_two() || !(16..=256).contains(&self.block_size) {
            return Err(format!(
                "MatMulNBits: block_size must be a power of two in 16..=256, got {}",
                self.block_size
            ));
        }
        if self.k == 0 || self.n == 0 {
            return Err(format!(
                "MatMulNBits: K and N must be positive, got K={} N={}",
                self.k, self.n
            ));
        }
        // Every size derived from K and N (B bytes, scales, the packed copy, the output row)
        // must be representable: huge attributes are refused here, before anything multiplies.
        let fits = self
            .n
            .checked_next_multiple_of(16)
            .and_then(|n| n.checked_mul(self.k_blocks()))
            .and_then(|nk| nk.checked_mul(self.blob_bytes() + 8))
            .is_some_and(|bytes| bytes <= isize::MAX as usize)
            && self
                .k
                .checked_next_multiple_of(self.block_size.max(1))
                .is_some();
        if !fits {
            return Err(format!(
                "MatMulNBits: K={} and N={} give weight sizes beyond the address space",
                self.k, self.n
            ));
        }
        if self.accuracy_level > 4 {
            return Err(format!(
                "MatMulNBits: accuracy_level must be in 0..=4, got {}",
                self.accuracy_level
            ));
        }
        Ok(())
    }

    /// Checks the attributes and the element counts of B, scales, zero_points and bias.
    pub fn check_sizes(
        &self,
        b_len: usize,
        scales_len: usize,
        zp_len: Option<usize>,
        bias_len: Option<usize>,
    ) -> Result<(), String> {
        self.validate()?;
        let kb = self.k_blocks();
        let want_b = self.n * kb * self.blob_bytes();
        if b_len != want_b {
            return Err(format!(
                "MatMulNBits: input B has {b_len} bytes, expected {want_b} (N={} x k_blocks={kb} x {} bytes)",
                self.n,
                self.blob_bytes()
            ));
        }
        let want_s = self.n * kb;
        if scales_len != want_s {
            return Err(format!(
                "MatMulNBits: input scales has {scales_len} elements, expected {want_s} (N={} x k_blocks={kb})",
                self.n
            ));
        }
        match (self.has_zero_points, zp_len) {
            (true, Some(len)) => {
                let want = self.n * self.zp_row_bytes();
                if len != want {
                    return Err(format!(
                        "MatMulNBits: input zero_points has {len} bytes, expected {want} (N={} x ceil(k_blocks/2)={})",
                        self.n,
                        self.zp_row_bytes()
                    ));
                }
            }
            (true, None) => return Err("MatMulNBits: input zero_points expected but absent".into()),
            (false, Some(len)) => {
                return Err(format!(
                "MatMulNBits: input zero_points given ({len} bytes) but has_zero_points is false"
            ))
            }
            (false, None) => {}
        }
        if let Some(len) = bias_len {
            if len != self.n {
                return Err(format!(
                    "MatMulNBits: input bias has {len} elements, expected N={}",
                    self.n
                ));
            }
        }
        Ok(())
    }
}
