//! Attributes of one `com.microsoft.MatMulNBits` node and the input sizes they imply.

/// Shape-defining attributes of a MatMulNBits node (bits = 4 or 8; an 8-bit weight packs into
/// groups of 16 columns of whole code bytes, `bits8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NBitsParams {
    /// Reduction length (columns of A, rows of the logical weight).
    pub k: usize,
    /// Output columns.
    pub n: usize,
    /// Quantisation bits per weight: 4 or 8 ([`NBitsParams::with_bits`]).
    pub bits: usize,
    /// Weights per quantisation block along K (power of two, 16..=256).
    pub block_size: usize,
    /// 0..=3: fp32 compute; 4: A quantised to int8 per block, integer dot products.
    pub accuracy_level: usize,
    /// Whether the node has a `zero_points` input (otherwise every zero point is 8).
    pub has_zero_points: bool,
    /// At accuracy level 4, whether the packed layout may hold the scales as f16 (see `pack.rs`;
    /// default true). The session's provider option `acc4_scales=f32` sets it to false: every
    /// group then keeps the model's f32 scales. Levels 0..3 keep f32 whatever it says.
    pub acc4_f16_scales: bool,
    /// Whether the model stores the scales as f16 (QMoE's float16 scales, widened to f32 for the
    /// kernels): a group whose every scale f16 holds exactly then packs f16 scales at any
    /// accuracy level, the same values in fewer bytes, so the results do not change (default
    /// false: f32 models keep f32 scales below level 4).
    pub f16_source_scales: bool,
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
            acc4_f16_scales: true,
            f16_source_scales: false,
        }
    }

    /// These params with [`NBitsParams::bits`] set to `bits` (4 or 8, see [`Self::validate`]).
    pub fn with_bits(self, bits: usize) -> Self {
        NBitsParams { bits, ..self }
    }

    /// The zero point a node without a `zero_points` input implies: `2^(bits - 1)` (8 for
    /// 4-bit codes, 128 for 8-bit ones).
    pub fn default_zero_point(&self) -> u8 {
        if self.bits == 8 {
            128
        } else {
            8
        }
    }

    /// The largest `|q - zp|` a code and a zero point can make: `2^bits - 1`.
    pub fn code_span(&self) -> u32 {
        if self.bits == 8 {
            255
        } else {
            15
        }
    }

    /// These params with [`NBitsParams::f16_source_scales`] set to `f16`.
    pub fn with_f16_source_scales(self, f16: bool) -> Self {
        NBitsParams {
            f16_source_scales: f16,
            ..self
        }
    }

    /// These params with [`NBitsParams::acc4_f16_scales`] set to `f16`.
    pub fn with_acc4_f16_scales(self, f16: bool) -> Self {
        NBitsParams {
            acc4_f16_scales: f16,
            ..self
        }
    }

    /// True when the packed layout stores f16 scales for the groups f16 holds exactly enough:
    /// accuracy level 4 and [`NBitsParams::acc4_f16_scales`].
    pub fn f16_scales(&self) -> bool {
        self.int8_compute() && self.acc4_f16_scales
    }

    /// Blocks along K: `ceil(K / block_size)`.
    pub fn k_blocks(&self) -> usize {
        self.k.div_ceil(self.block_size)
    }

    /// Bytes of one (column, block) blob in B: `block_size * bits / 8`.
    pub fn blob_bytes(&self) -> usize {
        self.block_size * self.bits / 8
    }

    /// Bytes of one column's row of packed zero points: `ceil(k_blocks * bits / 8)` (two per
    /// byte at 4 bits, one at 8).
    pub fn zp_row_bytes(&self) -> usize {
        if self.bits == 8 {
            self.k_blocks()
        } else {
            self.k_blocks().div_ceil(2)
        }
    }

    /// True when the int8 (accuracy level 4) path runs.
    pub fn int8_compute(&self) -> bool {
        self.accuracy_level == 4
    }

    /// Checks the attributes themselves.
    pub fn validate(&self) -> Result<(), String> {
        if self.bits != 4 && self.bits != 8 {
            return Err(format!(
                "MatMulNBits: bits must be 4 or 8, got {}",
                self.bits
            ));
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

    /// The element counts of B, scales and zero points the attributes imply, with checked
    /// arithmetic (`None` when one overflows).
    pub fn implied_lens(&self) -> Option<[usize; 3]> {
        let kb = self.k.checked_add(self.block_size.checked_sub(1)?)? / self.block_size;
        let b = self.n.checked_mul(kb)?.checked_mul(self.blob_bytes())?;
        let s = self.n.checked_mul(kb)?;
        let z = self.n.checked_mul(self.zp_row_bytes())?;
        Some([b, s, z])
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
        // `validate` bounds these products, but every size is computed checked regardless.
        let [want_b, want_s, want_z] = self.implied_lens().ok_or_else(|| {
            format!(
                "MatMulNBits: K={} and N={} give weight sizes beyond the address space",
                self.k, self.n
            )
        })?;
        if b_len != want_b {
            return Err(format!(
                "MatMulNBits: input B has {b_len} bytes, expected {want_b} (N={} x k_blocks={kb} x {} bytes)",
                self.n,
                self.blob_bytes()
            ));
        }
        if scales_len != want_s {
            return Err(format!(
                "MatMulNBits: input scales has {scales_len} elements, expected {want_s} (N={} x k_blocks={kb})",
                self.n
            ));
        }
        match (self.has_zero_points, zp_len) {
            (true, Some(len)) => {
                if len != want_z {
                    return Err(format!(
                        "MatMulNBits: input zero_points has {len} bytes, expected {want_z} (N={} x ceil(k_blocks*bits/8)={})",
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

    /// Checks the shapes (not only the element counts) of the inputs, as ORT's CPU EP does: B
    /// `[N, k_blocks, blob_bytes]`; scales `[N * k_blocks]` or `[N, k_blocks]`; uint8 zero
    /// points `[N * zb]` or `[N, zb]` with `zb = ceil(k_blocks * bits / 8)`; bias `[N]`. A B with the
    /// right byte count but N and k_blocks swapped is refused here (its bytes would be read
    /// in the wrong order).
    pub fn check_shapes(
        &self,
        b: &[usize],
        scales: &[usize],
        zero_points: Option<&[usize]>,
        bias: Option<&[usize]>,
    ) -> Result<(), String> {
        self.check_input_shape(NBitsInput::B, b)?;
        self.check_input_shape(NBitsInput::Scales, scales)?;
        if let Some(z) = zero_points {
            self.check_input_shape(NBitsInput::ZeroPoints, z)?;
        }
        if let Some(bias) = bias {
            self.check_input_shape(NBitsInput::Bias, bias)?;
        }
        Ok(())
    }

    /// [`Self::check_shapes`] for one input (where only some shapes are known).
    pub fn check_input_shape(&self, input: NBitsInput, shape: &[usize]) -> Result<(), String> {
        self.validate()?;
        let (n, kb, zb) = (self.n, self.k_blocks(), self.zp_row_bytes());
        let flat_or_2d = |cols: usize| {
            n.checked_mul(cols).is_some_and(|len| shape == [len]) || shape == [n, cols]
        };
        let (name, ok, want) = match input {
            NBitsInput::B => (
                "B",
                shape == [n, kb, self.blob_bytes()],
                format!("[{n}, {kb}, {}]", self.blob_bytes()),
            ),
            NBitsInput::Scales => (
                "scales",
                flat_or_2d(kb),
                format!("[{}] or [{n}, {kb}]", n * kb),
            ),
            NBitsInput::ZeroPoints => (
                "zero_points",
                flat_or_2d(zb),
                format!("[{}] or [{n}, {zb}]", n * zb),
            ),
            NBitsInput::Bias => ("bias", shape == [n], format!("[{n}]")),
        };
        if ok {
            return Ok(());
        }
        Err(format!(
            "MatMulNBits: input {name} has shape {shape:?}, expected {want} (N={n}, K={}, bits={}, \
             block_size={})",
            self.k, self.bits, self.block_size
        ))
    }
}

/// A MatMulNBits weight as the node's inputs hold it (ORT's layout): B's codes
/// `[N, k_blocks, blob_bytes]`, the per-block scales `[N * k_blocks]` and the optional packed
/// zero points `[N * zp_row_bytes]`, all shaped by `p` (4 or 8 bits). What the references, the literal
/// definition and the unpacked path take in place of those four arguments.
#[derive(Debug, Clone, Copy)]
pub struct NBitsWeight<'a> {
    pub b: &'a [u8],
    pub scales: &'a [f32],
    pub zero_points: Option<&'a [u8]>,
    pub p: &'a NBitsParams,
}

impl NBitsWeight<'_> {
    /// [`NBitsParams::check_sizes`] of these inputs (and a bias of `bias_len` values).
    pub fn check_sizes(&self, bias_len: Option<usize>) -> Result<(), String> {
        let zp_len = self.zero_points.map(|z| z.len());
        self.p
            .check_sizes(self.b.len(), self.scales.len(), zp_len, bias_len)
    }
}

/// The shaped inputs of MatMulNBits (see [`NBitsParams::check_input_shape`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NBitsInput {
    B,
    Scales,
    ZeroPoints,
    Bias,
}
