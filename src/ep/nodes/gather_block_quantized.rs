//! com.microsoft GatherBlockQuantized (opset 1) with uint8 storage of 4- or 8-bit codes, float32
//! scales and output, int32 or int64 indices: the embedding lookup of genai models whose
//! embedding is tied to an int4 lm_head (or, with `int4_algo_config=k_quant_mixed` /
//! `k_quant_last`, to an 8-bit one). Claimed for `bits` = 4 or 8, `gather_axis` = 0,
//! `quantize_axis` = the last axis (the only axes ORT accepts for uint8 data) and `block_size` a
//! power of two >= 16; zero points optional (default 8 or 128). Results are bit-identical to
//! ORT's CPU EP, including its zeros for an index out of range. f16 scales, 2-bit codes and the
//! int4 tensor types stay on ORT.
//!
//! A tied embedding: the model builder feeds the gather the lm_head's own codes (a Reshape of
//! the same initializer, which ORT folds into a second initializer with the same bytes) and the
//! same scales. In a fused partition that also holds the lm_head MatMulNBits, whose weight
//! packed, [`share_tied_codes`] lets the gather read its rows' codes from that packed weight
//! (`matmul_nbits::PackedCodes::column_codes`, lossless: the packed layout keeps each code as
//! it is) with its own scales, so the partition keeps no copy of the table's codes (68 MB
//! at Qwen2-0.5B shapes, 131 MB at Llama-3.2-1B; twice that at 8 bits).

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::abi::tensor::{ElemType, Tensor};
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel};
use crate::kernels::gather_quant::{gather_rows, QuantTable};
use crate::telemetry::ledger;

use super::claim::{input_type, only_attrs, require_elem, require_output_elem, F32, I64};
use super::glue_common::{known_rank_dims, norm_axis};
use super::matmul_nbits::PackedCodes;

const U8: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
const I32: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32;

/// One lane: a decode step gathers one row of a few KiB.
struct GatherBlockQuantized {
    block: usize,
    /// 4 or 8.
    bits: usize,
    /// Where the codes come from when they are a packed lm_head's ([`share_tied_codes`]); the
    /// data input is then never read.
    tied: Option<TiedCodes>,
}

/// The codes of a tied embedding table, in the lm_head's packed weight.
struct TiedCodes {
    weight: PackedCodes,
    /// The data input's shape, `[N, K / 2]` (4 bits) or `[N, K]` (8 bits).
    shape: [usize; 2],
}

/// Lets `gather` (a GatherBlockQuantized kernel, data input `data`, constant) read its codes
/// from `weight`, the packed codes of a MatMulNBits node whose constant B is `b`, when they are
/// the same codes: the same width, data of shape `[N, K * bits / 8]` with `weight`'s N and K and
/// the very bytes of `b` (so K is whole blocks and B has no padding). True when shared: the
/// gather then never reads its data input (the caller need not keep it).
pub(crate) fn share_tied_codes(
    gather: &mut dyn OpKernel,
    data: &Tensor<'_>,
    weight: &PackedCodes,
    b: &Tensor<'_>,
) -> Result<bool> {
    if b.elem() != U8 || !fits_tied(gather, data.elem(), data.shape(), weight) {
        return Ok(false);
    }
    if !same_bytes_paged_out(data.all_bytes()?, b.all_bytes()?) {
        return Ok(false);
    }
    Ok(share_known_tied_codes(
        gather,
        data.elem(),
        data.shape(),
        weight,
    ))
}

/// Whether `a` and `b` hold the same bytes, compared a few MiB at a time, each piece's pages
/// then let go (`os::advise_page_out`, contents unchanged): both are model initializers ORT maps
/// from the file, a vocabulary's codes each, and comparing them whole would hold both resident
/// at the peak of session creation.
fn same_bytes_paged_out(a: &[u8], b: &[u8]) -> bool {
    const PIECE: usize = 4 << 20;
    if a.len() != b.len() {
        return false;
    }
    a.chunks(PIECE).zip(b.chunks(PIECE)).all(|(x, y)| {
        let same = x == y;
        let _ = crate::os::advise_page_out(x);
        let _ = crate::os::advise_page_out(y);
        same
    })
}

/// Whether `gather` and `weight` have the shapes and width [`share_tied_codes`] requires.
fn fits_tied(
    gather: &mut dyn OpKernel,
    elem: ElemType,
    shape: &[usize],
    weight: &PackedCodes,
) -> bool {
    let Some(g) = gather
        .as_any_mut()
        .and_then(|a| a.downcast_mut::<GatherBlockQuantized>())
    else {
        return false;
    };
    let (wn, wk, bits) = weight.shape();
    let &[n, row_bytes] = shape else {
        return false;
    };
    let k = row_bytes.checked_mul(8 / bits);
    bits == g.bits && n == wn && k == Some(wk) && elem == U8
}

/// [`share_tied_codes`] for a pair already known to hold the same codes (a partition read from
/// a context file, whose writer compared the bytes): the shapes and width are checked, the
/// bytes are not (the file need not hold the data input at all).
pub(crate) fn share_known_tied_codes(
    gather: &mut dyn OpKernel,
    elem: ElemType,
    shape: &[usize],
    weight: &PackedCodes,
) -> bool {
    if !fits_tied(gather, elem, shape, weight) {
        return false;
    }
    let Some(g) = gather
        .as_any_mut()
        .and_then(|a| a.downcast_mut::<GatherBlockQuantized>())
    else {
        return false;
    };
    g.tied = Some(TiedCodes {
        weight: weight.clone(),
        shape: [shape[0], shape[1]],
    });
    true
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::invalid_argument(msg.into())
}

/// Checks scales / zero-point shapes against data of `bits`-bit codes as ORT does; returns the
/// rows per gathered entry (the product of the dims between axis 0 and the last axis).
fn check_shapes(
    data: &[usize],
    scales: &[usize],
    zp: Option<&[usize]>,
    block: usize,
    bits: usize,
) -> Result<usize> {
    let rank = data.len();
    if rank < 2 {
        return Err(invalid(format!(
            "data has rank {rank}: the gather axis (0) and the quantize axis (last) must differ"
        )));
    }
    if scales.len() != rank {
        return Err(invalid(format!(
            "data has rank {rank} but scales rank {}",
            scales.len()
        )));
    }
    let per_byte = 8 / bits;
    let elems = data[rank - 1]
        .checked_mul(per_byte)
        .ok_or_else(|| invalid("data's last dim overflows"))?;
    let blocks = elems.div_ceil(block);
    for i in 0..rank {
        let want = if i == rank - 1 { blocks } else { data[i] };
        if scales[i] != want {
            return Err(invalid(format!(
                "scales shape {scales:?} does not match data {data:?} with block_size {block} \
                 (dim {i}: want {want})"
            )));
        }
    }
    if let Some(z) = zp {
        let want_last = blocks.div_ceil(per_byte);
        let ok = z.len() == rank
            && (0..rank).all(|i| z[i] == if i == rank - 1 { want_last } else { scales[i] });
        if !ok {
            return Err(invalid(format!(
                "zero_points shape {z:?} does not match scales {scales:?} ({per_byte} \
                 {bits}-bit zero point(s) per byte along the last axis)"
            )));
        }
    }
    data[1..rank - 1]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| invalid("data's row count overflows"))
}

/// Where the gathered rows' codes come from: the data input, or a packed lm_head's weight.
enum Codes<'a> {
    Input(Tensor<'a>),
    Tied(&'a TiedCodes),
}

/// Gathers the rows the indices (int32 or int64) name, along axis 0 of a table of `entries`
/// entries of `group` rows of `row_len` values, `row(r, dst)` filling one row
/// (`gather_quant::gather_rows`: negative indices from the end, zeros out of range).
fn gather_by(
    indices: &Tensor<'_>,
    entries: usize,
    group: usize,
    row_len: usize,
    out: &mut [f32],
    row: impl FnMut(usize, &mut [f32]),
) -> Result<()> {
    match indices.elem() {
        I32 => gather_rows(entries, group, row_len, indices.data::<i32>()?, out, row),
        I64 => gather_rows(entries, group, row_len, indices.data::<i64>()?, out, row),
        _ => return Err(invalid("indices must be int32 or int64")),
    }
    Ok(())
}

impl OpKernel for GatherBlockQuantized {
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let codes = match &self.tied {
            Some(t) => Codes::Tied(t),
            None => Codes::Input(ctx.required_input(0)?),
        };
        let data_shape = match &codes {
            Codes::Input(d) => d.shape(),
            Codes::Tied(t) => &t.shape[..],
        };
        let indices = ctx.required_input(1)?;
        let scales = ctx.required_input(2)?;
        let zp = ctx.input(3)?;
        let group = check_shapes(
            data_shape,
            scales.shape(),
            zp.as_ref().map(|z| z.shape()),
            self.block,
            self.bits,
        )?;
        // Output: indices' shape in place of axis 0, the last axis unpacked (two codes a byte
        // at 4 bits).
        let mut shape = indices.shape().to_vec();
        shape.extend_from_slice(&data_shape[1..]);
        if let Some(last) = shape.last_mut() {
            *last = last
                .checked_mul(8 / self.bits)
                .ok_or_else(|| invalid("output's last dim overflows"))?;
        }
        shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .and_then(|n| n.checked_mul(4))
            .ok_or_else(|| invalid(format!("output shape {shape:?} overflows")))?;
        let row_bytes = data_shape[data_shape.len() - 1];
        let out = ctx.output(0, &shape)?.into_data::<f32>()?;
        if out.is_empty() {
            ledger::record("GatherBlockQuantized", "scalar", 1);
            return Ok(());
        }
        let zp = zp.as_ref().map(|z| z.data::<u8>()).transpose()?;
        let scales = scales.data::<f32>()?;
        let variant = match &codes {
            // A tied table is rank 2, so `group` is 1.
            Codes::Tied(t) => gather_tied(t, scales, zp, self.block, &indices, out)?,
            Codes::Input(data) => {
                let codes = data.data::<u8>()?;
                let table = QuantTable::new(codes, row_bytes, scales, zp, self.block, self.bits)
                    .map_err(invalid)?;
                let entries = table.rows() / group.max(1);
                gather_by(&indices, entries, group, table.row_len(), out, |r, dst| {
                    table.dequant_row(r, dst)
                })?;
                "scalar"
            }
        };
        ledger::record("GatherBlockQuantized", variant, 1);
        Ok(())
    }
}

/// The gather of a tied table: per index, the row's codes from the packed weight into a row
/// buffer, dequantized with the node's own scales and zero points (the same arithmetic as the
/// untied path, so the same bits).
fn gather_tied(
    t: &TiedCodes,
    scales: &[f32],
    zp: Option<&[u8]>,
    block: usize,
    indices: &Tensor<'_>,
    out: &mut [f32],
) -> Result<&'static str> {
    let [n, row_bytes] = t.shape;
    let bits = t.weight.shape().2;
    let per_byte = 8 / bits;
    let row_len = row_bytes * per_byte;
    let blocks = row_len.div_ceil(block);
    let zp_row = blocks.div_ceil(per_byte);
    // `check_shapes` matched the scales' and zero points' shapes to the table's; their lengths
    // must then cover its `n` rows, which the row slices below rely on.
    let covers = |len: usize, per_row: usize| n.checked_mul(per_row) == Some(len);
    if !covers(scales.len(), blocks) || zp.is_some_and(|z| !covers(z.len(), zp_row)) {
        return Err(invalid("scales or zero points do not cover the table"));
    }
    let len = t.weight.column_bytes();
    let mut codes = crate::memory::try_vec(len, 0u8)
        .map_err(|e| Error::fail(format!("cannot allocate a row of {len} bytes: {e}")))?;
    let mut failed = None;
    let mut row = |r: usize, dst: &mut [f32]| {
        if failed.is_some() {
            return;
        }
        let one = if t.weight.column_codes(r, &mut codes) {
            QuantTable::new(
                &codes[..row_bytes],
                row_bytes,
                &scales[r * blocks..(r + 1) * blocks],
                zp.map(|z| &z[r * zp_row..(r + 1) * zp_row]),
                block,
                bits,
            )
        } else {
            Err(format!("row {r} is not in the packed table"))
        };
        match one {
            Ok(table) => table.dequant_row(0, dst),
            Err(e) => failed = Some(e),
        }
    };
    gather_by(indices, n, 1, row_len, out, &mut row)?;
    match failed {
        Some(e) => Err(Error::fail(e)),
        None => Ok("scalar-tied"),
    }
}

fn claim(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(
        node,
        &["bits", "block_size", "gather_axis", "quantize_axis"],
    )?;
    require_elem(node, 0, U8)?;
    require_elem(node, 2, F32)?;
    require_output_elem(node, F32)?;
    match input_type(node, 1)?.map(|t| t.elem) {
        Some(e) if e == I32 || e == I64 => {}
        _ => return Err("indices must be int32 or int64".into()),
    }
    if input_type(node, 3)?.is_some() {
        require_elem(node, 3, U8)?;
    }
    let bits = node.attr_i64("bits").unwrap_or(4);
    if bits != 4 && bits != 8 {
        return Err(format!("bits={bits}: rcpu implements 4- and 8-bit codes"));
    }
    let block = node.attr_i64("block_size").unwrap_or(128);
    if block < 16 || block.count_ones() != 1 {
        return Err(format!(
            "block_size={block}: must be a power of two >= 16 (ORT rejects the node)"
        ));
    }
    let rank = known_rank_dims(node, 0)?
        .ok_or("data's rank is unknown at load time")?
        .len();
    let gather_axis = norm_axis(node.attr_i64("gather_axis").unwrap_or(0), rank)?;
    let quantize_axis = norm_axis(node.attr_i64("quantize_axis").unwrap_or(1), rank)?;
    if gather_axis != 0 || quantize_axis + 1 != rank {
        return Err(format!(
            "gather_axis {gather_axis}, quantize_axis {quantize_axis} at rank {rank}: uint8 data \
             needs gather axis 0 and the last axis quantized"
        ));
    }
    Ok(())
}

fn create(info: &KernelInfo<'_>, _env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    let block = info.attr_i64("block_size").unwrap_or(128);
    let block = usize::try_from(block)
        .ok()
        .filter(|b| *b >= 16 && b.is_power_of_two())
        .ok_or_else(|| invalid(format!("block_size={block} is not a power of two >= 16")))?;
    let bits = match info.attr_i64("bits").unwrap_or(4) {
        8 => 8,
        4 => 4,
        b => return Err(invalid(format!("bits={b}: 4 or 8 are implemented"))),
    };
    Ok(Box::new(GatherBlockQuantized {
        block,
        bits,
        tied: None,
    }))
}

pub const GATHER_BLOCK_QUANTIZED: OpDef = OpDef {
    op: "GatherBlockQuantized",
    domain: "com.microsoft",
    since: 1,
    until: 1,
    types: &[("T1", types::U8), ("T2", types::F32), ("Tind", &[I32, I64])],
    claim,
    create,
};
