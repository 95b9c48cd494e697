//! com.microsoft.MatMulNBits (bits = 4 or 8) as an ORT kernel: claim rules, constant inputs
//! copied at creation, B prepacked once through the governed weight cache (declined -> computed
//! from the original weight every call, bit-identical), compute on the EP's lanes. An 8-bit B
//! packs into 16-column groups of whole code bytes (`kernels::matmul_nbits::bits8`).
//! A packed weight also goes to and comes from a context file (`export_packed`,
//! `import_packed`): imported, it is read in place from the mapped file, and the kernel is in
//! the state a successful `prepack` leaves.

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::abi::tensor::{ElemType, Tensor};
use crate::ep::nodes::adopt;
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel, PackedExport, PackedImport};
use crate::kernels::matmul_nbits::reference::{hostile_scales, matmul_dequant_f32};
use crate::kernels::matmul_nbits::{
    decode_first_segment, decode_second_segment, matmul_packed, matmul_unpacked, try_pack,
    NBitsInput, NBitsParams, NBitsWeight, PackedNBits,
};
use crate::kernels::shape::{checked_numel, numel};
use crate::memory::{params_hash, weight_cache, CachedWeight, KeyDigest, WeightBytes, WeightKey};
use crate::os::mapped::FileSlice;
use crate::runtime::par::{take_lanes_used, Par};
use crate::runtime::{IdleHint, WarmBytes};
use crate::telemetry::ledger;

use super::claim::{input, input_type, only_attrs, require_elem, require_output_elem, F32};
use super::gemv_chain::Link;

const OP: &str = "MatMulNBits";
const IN_A: usize = 0;
const IN_B: usize = 1;
const IN_SCALES: usize = 2;
const IN_ZP: usize = 3;
const IN_G_IDX: usize = 4;
const IN_BIAS: usize = 5;
/// `weight_prepacked` is set by ORT 1.31 itself: non-zero means B already holds MLAS's packed
/// layout, which rcpu does not read, so only 0 is claimed.
const ATTRS: [&str; 6] = [
    "K",
    "N",
    "bits",
    "block_size",
    "accuracy_level",
    "weight_prepacked",
];
/// Accuracy levels rcpu implements: 0/1 compute in fp32, 4 quantises A to int8 per block.
const ACCURACY_LEVELS: [i64; 3] = [0, 1, 4];

fn params_from(
    get: impl Fn(&str) -> Option<i64>,
    has_zp: bool,
) -> std::result::Result<NBitsParams, String> {
    let req = |name: &str| get(name).ok_or_else(|| format!("attribute '{name}' is missing"));
    let (k, n) = (req("K")?, req("N")?);
    let bits = req("bits")?;
    let block = req("block_size")?;
    let acc = get("accuracy_level").unwrap_or(0);
    if bits != 4 && bits != 8 {
        return Err(format!("bits={bits} is not implemented (4 and 8)"));
    }
    if !ACCURACY_LEVELS.contains(&acc) {
        return Err(format!("accuracy_level={acc} is not implemented (0, 1, 4)"));
    }
    let to_usize = |name: &str, v: i64| {
        usize::try_from(v).map_err(|_| format!("attribute {name}={v} is negative"))
    };
    let p = NBitsParams::new(
        to_usize("K", k)?,
        to_usize("N", n)?,
        to_usize("block_size", block)?,
        acc as usize,
        has_zp,
    )
    .with_bits(bits as usize);
    p.validate()?;
    Ok(p)
}

fn claim(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &ATTRS)?;
    if let Some(v) = node.attr_i64("weight_prepacked").filter(|&v| v != 0) {
        return Err(format!(
            "weight_prepacked={v} (B in MLAS's packed layout) is not implemented"
        ));
    }
    require_elem(node, IN_A, F32)?;
    require_elem(node, IN_B, ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8)?;
    require_elem(node, IN_SCALES, F32)?;
    let has_zp = input_type(node, IN_ZP)?.is_some();
    if has_zp {
        require_elem(node, IN_ZP, ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8)
            .map_err(|e| format!("{e} (float zero points are not implemented)"))?;
    }
    if input_type(node, IN_G_IDX)?.is_some() {
        return Err("g_idx is not implemented".into());
    }
    if input_type(node, IN_BIAS)?.is_some() {
        require_elem(node, IN_BIAS, F32)?;
    }
    require_output_elem(node, F32)?;
    let p = params_from(|n| node.attr_i64(n), has_zp)?;
    // Where the constant inputs are known, their sizes must agree with K, N and block_size.
    let len = |i: usize| -> std::result::Result<Option<usize>, Decline> {
        Ok(match input_type(node, i)? {
            Some(t) => match t.static_dims() {
                Some(d) => Some(
                    numel(&d).ok_or_else(|| format!("input {i} of shape {d:?} is too large"))?,
                ),
                None => None,
            },
            None => None,
        })
    };
    if let (Some(b), Some(s)) = (len(IN_B)?, len(IN_SCALES)?) {
        let zp = if has_zp { len(IN_ZP)? } else { None };
        if !has_zp || zp.is_some() {
            p.check_sizes(b, s, zp, len(IN_BIAS)?)?;
        }
    }
    // A's last dimension, where known, must be K.
    if let Some(a) = input_type(node, IN_A)? {
        if let Some(&last) = a.dims.last() {
            if last >= 0 && last as usize != p.k {
                return Err(format!("input A has last dimension {last}, K is {}", p.k));
            }
        }
    }
    let _ = input(node, IN_A)?;
    Ok(())
}

struct MatMulNBits {
    p: NBitsParams,
    /// Constant scales / zero points / bias copied at creation (None: read per call, or the
    /// scales and zero points of a packed weight, dropped once it packed).
    scales: Option<Vec<f32>>,
    /// Whether the constant scales are hostile (see `hostile_scales`), decided once.
    const_hostile: bool,
    zero_points: Option<Vec<u8>>,
    bias: Option<Vec<f32>>,
    /// Whether the node has a bias input (constant or not; a fused plan folds no other bias in).
    /// A `bias` without one is a following Add's, folded in by a fused plan (`fold_bias`).
    has_bias_input: bool,
    packed: Option<Arc<CachedWeight<PackedNBits>>>,
    /// This node in its session's order of M=1 calls (packed weights only): see `gemv_chain`.
    link: Option<Arc<Link<CachedWeight<PackedNBits>>>>,
    env: Arc<KernelEnv>,
}

/// A constant input's values, copied fallibly (`None`: not a constant initializer).
pub(crate) fn copy_const<T: crate::abi::tensor::Element>(
    info: &KernelInfo<'_>,
    i: usize,
) -> Result<Option<Vec<T>>> {
    Ok(match info.constant_input(i)? {
        Some(t) => {
            // Sized by the model (scales are N * k_blocks floats): fallible, a clean error.
            let src = t.data::<T>()?;
            Some(crate::memory::try_copy(src).map_err(|e| {
                Error::fail(format!(
                    "cannot copy constant input {i} ({} elements): {e}",
                    src.len()
                ))
            })?)
        }
        None => None,
    })
}

fn create(info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    let n_inputs = info.input_count()?;
    // An omitted optional input has no type: ORT reports an error, which means "absent" here.
    let present = |i: usize| n_inputs > i && matches!(info.input_type(i), Ok(Some(_)));
    let has_zp = present(IN_ZP);
    let p = params_from(|n| info.attr_i64(n), has_zp)
        .map_err(Error::invalid_argument)?
        .with_acc4_f16_scales(env.acc4_f16_scales);
    // The shapes of constant inputs, exactly as ORT's CPU EP checks them (a B with the right
    // byte count but N and k_blocks swapped must not be computed).
    let shaped = [
        (IN_B, NBitsInput::B, true),
        (IN_SCALES, NBitsInput::Scales, true),
        (IN_ZP, NBitsInput::ZeroPoints, has_zp),
        (IN_BIAS, NBitsInput::Bias, present(IN_BIAS)),
    ];
    for (i, which, there) in shaped {
        if there {
            if let Some(t) = info.constant_input(i)? {
                p.check_input_shape(which, t.shape())
                    .map_err(Error::invalid_argument)?;
            }
        }
    }
    let scales = copy_const::<f32>(info, IN_SCALES)?;
    let zero_points = if has_zp {
        copy_const::<u8>(info, IN_ZP)?
    } else {
        None
    };
    let bias = if present(IN_BIAS) {
        copy_const::<f32>(info, IN_BIAS)?
    } else {
        None
    };
    if let Some(s) = &scales {
        let zp_len = zero_points.as_ref().map(|z| z.len());
        if !has_zp || zp_len.is_some() {
            let b_len = p.n * p.k_blocks() * p.blob_bytes();
            p.check_sizes(b_len, s.len(), zp_len, bias.as_ref().map(|b| b.len()))
                .map_err(Error::invalid_argument)?;
        }
    }
    Ok(Box::new(MatMulNBits {
        p,
        const_hostile: scales.as_deref().is_some_and(|s| hostile_scales(s, &p)),
        scales,
        zero_points,
        bias,
        has_bias_input: present(IN_BIAS),
        packed: None,
        link: None,
        env: env.clone(),
    }))
}

impl MatMulNBits {
    fn is_packed(&self) -> bool {
        self.packed.is_some()
    }

    /// Packs B (ORT's layout, shape checked) with the kernel's constant scales and zero points
    /// through the weight cache; `Ok(false)` when the cache declined (or there is nothing to pack
    /// with), the kernel then computes from the original weight.
    fn pack_b(&mut self, b: &[u8]) -> Result<bool> {
        let Some(scales) = self.scales.as_deref() else {
            return Ok(false);
        };
        let zp = self.zero_points.as_deref();
        self.p
            .check_sizes(b.len(), scales.len(), zp.map(|z| z.len()), None)
            .map_err(Error::invalid_argument)?;
        match pack_cached(b, scales, zp, &self.p) {
            Some(w) => {
                self.adopt(w);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Makes `w` the kernel's weight: the state after a successful pack, whether it was packed
    /// here or imported. The packed weight holds the scales and zero points in its own format;
    /// the f32 and byte copies are never read again (`compute` takes the packed path).
    fn adopt(&mut self, w: Arc<CachedWeight<PackedNBits>>) {
        self.scales = None;
        self.zero_points = None;
        self.link = Some(Link::new(w.clone()));
        self.packed = Some(w);
    }
}

/// A packed MatMulNBits weight rebuilt over `sections` of a mapped context file
/// (`PackedNBits::import_parts`, which checks `meta`).
pub(crate) fn import_nbits(
    meta: &serde_json::Value,
    sections: Vec<FileSlice<u8>>,
) -> std::result::Result<PackedNBits, String> {
    PackedNBits::import_parts(meta, sections.into_iter().map(WeightBytes::from).collect())
}

/// The bytes of the file an imported weight maps (the weight cache's stats).
pub(crate) fn nbits_file_bytes(w: &PackedNBits) -> usize {
    w.weight_bytes().len() + w.zero_point_bytes().len()
}

/// The first parameter in which a packed weight's params (`got`) differ from the node's
/// (`want`), as an error naming it; `None` when the weight is what the node would pack. The
/// scale format is compared as the pack sees it (`NBitsParams::f16_scales`: the provider option
/// matters only at level 4).
pub(crate) fn params_mismatch(want: &NBitsParams, got: &NBitsParams) -> Option<String> {
    let fields: [(&str, usize, usize); 8] = [
        ("K", want.k, got.k),
        ("N", want.n, got.n),
        ("bits", want.bits, got.bits),
        ("block_size", want.block_size, got.block_size),
        ("accuracy_level", want.accuracy_level, got.accuracy_level),
        (
            "zero points",
            want.has_zero_points as usize,
            got.has_zero_points as usize,
        ),
        (
            "f16 scales (acc4_scales)",
            want.f16_scales() as usize,
            got.f16_scales() as usize,
        ),
        (
            "f16 source scales",
            want.f16_source_scales as usize,
            got.f16_source_scales as usize,
        ),
    ];
    let (name, w, g) = fields.into_iter().find(|(_, w, g)| w != g)?;
    Some(format!(
        "the packed weight in the context file was made for {name}={g}, the node has {name}={w}"
    ))
}

/// B / scales / zero points (ORT's layout, sizes checked) packed through the process's weight
/// cache (`None`: the cache declined or the pack could not be allocated). The key holds every
/// choice that shapes the pack and every source byte, so a hit is always the packing of these
/// very bytes for these params; MatMulNBits nodes and QMoE experts over equal bytes and params
/// share one entry.
pub(crate) fn pack_cached(
    b: &[u8],
    scales: &[f32],
    zp: Option<&[u8]>,
    p: &NBitsParams,
) -> Option<Arc<CachedWeight<PackedNBits>>> {
    // The bits word only for 8-bit codes or f16 source scales, the f16-source word only when
    // set: a 4-bit f32-scale weight keeps the 6-word key it always had.
    let all = [
        p.k as u64,
        p.n as u64,
        p.block_size as u64,
        p.accuracy_level as u64,
        p.has_zero_points as u64,
        // The scale format (provider option `acc4_scales`): a session asking for f32 scales
        // must never get an f16 pack made for another session, nor the reverse. Only where
        // it changes the pack (level 4), so levels 0..3 still share across sessions.
        p.f16_scales() as u64,
        // One more word for an 8-bit B (its bits: the same bytes packed as 4-bit codes are
        // another weight).
        p.bits as u64,
        // f16 source scales pack as f16 below level 4 (`NBitsParams::f16_source_scales`).
        p.f16_source_scales as u64,
    ];
    let len = if p.f16_source_scales {
        8
    } else if p.bits == 8 {
        7
    } else {
        6
    };
    let words = &all[..len];
    let mut d = KeyDigest::new();
    d.words(words)
        .bytes(b)
        .f32s(scales)
        .bytes(zp.unwrap_or(&[]));
    let key = WeightKey::from_digest(OP, params_hash(words), &d, b.len());
    // Packed layout: the codes plus per-(column, block) scale and zero-point terms (two scales
    // a block for 8-bit codes, `bits8`), padded to whole column groups.
    let predicted = b.len() + scales.len() * 8 + 4096;
    weight_cache().try_get_or_pack(
        &key,
        predicted,
        || try_pack(b, scales, zp, p),
        |w: &PackedNBits| w.bytes(),
    )
}

/// As a pair call over `first` then `second` runs at M=1: records both in the session's order
/// of M=1 calls (as two nodes would) and hints the call after `second` (`hint_following`).
pub(crate) fn pair_ran(
    env: &KernelEnv,
    first: &PackedOperand,
    second: &PackedOperand,
    par: &dyn Par,
) -> Option<CallerHead> {
    for l in [&first.link, &second.link].into_iter().flatten() {
        env.gemv_chain.ran(l);
    }
    second.link.as_ref().and_then(|l| hint_following(l, par))
}

/// As an M=1 call whose chain link is `link` starts: posts the idle lanes' hint for the call
/// after it (the part of its weights they will stream, `decode_second_segment`), or drops the
/// old hint when the order is not known. Posted before this call's dispatch, the hint waits in
/// the pool while the lanes run this call, and each worker takes it up as soon as its own share
/// of this call is done (a worker resumes its hint after a job, `runtime::park`, "Idle reads"):
/// it reads ahead while the caller finishes its share, then on through the nodes up to the next
/// M=1 call. Posted after the join instead, the reads began only once the caller had returned
/// and the hint had crossed to the worker (0.5-0.8 us a call with the vCPUs apart); posted
/// first, Qwen2-0.5B decode measured 1.010 per round near and 1.015 apart against the build
/// that posted after (docs/journal/measurements-2026-12.md, the hint posted before the call).
///
/// Returns the calling lane's own head of that next call, to prefetch as this call ends
/// ([`CallerHead`]). The successor is looked up once, here: the lookup locks the link and
/// counts a reference on the next weight, whose count line the worker writes as it reads.
pub(crate) fn hint_following(
    link: &Link<CachedWeight<PackedNBits>>,
    par: &dyn Par,
) -> Option<CallerHead> {
    let next = link.next();
    let head = next.as_ref().and_then(|n| {
        let b = n.warm_bytes().get(decode_first_segment(n, par.lanes()))?;
        Some(CallerHead {
            addr: b.as_ptr() as usize,
            len: b.len(),
        })
    });
    par.idle_read(next.map(|n| IdleHint::new(&n, decode_second_segment(&n, par.lanes()))));
    head
}

/// The first lines of the calling lane's own segment of the next M=1 call
/// (`decode_first_segment`), prefetched into its cache as the current call ends so its stream
/// does not start cold after the nodes in between. An address range only: the prefetch never
/// dereferences it (`os::cache::prefetch_l1`), so it needs no hold on the weight.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallerHead {
    addr: usize,
    len: usize,
}

impl CallerHead {
    pub(crate) fn prefetch(self) {
        crate::os::cache::prefetch_l1(self.addr, self.len);
    }
}

/// What a combined step needs of one MatMulNBits node that runs from a packed weight with no
/// bias (`ep::nodes::swiglu`).
pub(crate) struct PackedOperand {
    pub(crate) weight: Arc<CachedWeight<PackedNBits>>,
    pub(crate) link: Option<Arc<Link<CachedWeight<PackedNBits>>>>,
}

/// `kernel`'s packed weight and chain link when it is a MatMulNBits kernel holding a packed
/// weight (constant, non-hostile scales) and no bias; `None` otherwise (it must run as itself).
pub(crate) fn packed_operand(kernel: &dyn OpKernel) -> Option<PackedOperand> {
    let k = kernel.as_any()?.downcast_ref::<MatMulNBits>()?;
    if k.bias.is_some() || k.const_hostile {
        return None;
    }
    Some(PackedOperand {
        weight: k.packed.clone()?,
        link: k.link.clone(),
    })
}

/// Makes `bias` (N floats) `kernel`'s bias when it is a MatMulNBits kernel without one: a fused
/// plan folds the model builder's `Add(MatMulNBits(..), bias)` into the node this way
/// (`abi::fused`), so the projection's output is written once, biased, instead of written and
/// read again by an Add step. `Ok(false)`, nothing changed, for any other kernel, a kernel with a
/// bias or a bias input of its own, or a bias of another length; the copy is fallible.
pub(crate) fn fold_bias(kernel: &mut dyn OpKernel, bias: &[f32]) -> Result<bool> {
    let Some(k) = kernel
        .as_any_mut()
        .and_then(|a| a.downcast_mut::<MatMulNBits>())
    else {
        return Ok(false);
    };
    if k.bias.is_some() || k.has_bias_input || bias.len() != k.p.n {
        return Ok(false);
    }
    let v = crate::memory::try_copy(bias).map_err(|e| {
        Error::fail(format!(
            "cannot copy a bias of {} elements: {e}",
            bias.len()
        ))
    })?;
    k.bias = Some(v);
    Ok(true)
}

/// The ledger variant of an Add folded into its MatMulNBits (`fold_bias`).
const FOLDED_ADD: &str = "folded-into-matmul-nbits";

/// A packed MatMulNBits weight's codes, as a tied embedding table reads them
/// (`gather_block_quantized::share_tied_codes`), 4- or 8-bit.
#[derive(Clone)]
pub(crate) struct PackedCodes(Arc<CachedWeight<PackedNBits>>);

impl PackedCodes {
    /// (N, K, bits) of the weight.
    pub(crate) fn shape(&self) -> (usize, usize, usize) {
        let p = self.0.params();
        (p.n, p.k, p.bits)
    }

    /// Bytes of one column's codes in ORT's layout: `ceil(K / 2)` at 4 bits, `K` at 8.
    pub(crate) fn column_bytes(&self) -> usize {
        self.0.column_bytes()
    }

    /// Column `n`'s codes in ORT's layout into `out` ([`Self::column_bytes`] bytes). False,
    /// with `out` unspecified, when `n >= N` or `out` is too short.
    pub(crate) fn column_codes(&self, n: usize, out: &mut [u8]) -> bool {
        self.0.column_codes(n, out)
    }
}

/// `kernel`'s packed codes when it is a MatMulNBits kernel holding a packed weight, 4- or 8-bit
/// (the tied embedding may share them whatever the bias or the scales).
pub(crate) fn packed_codes(kernel: &dyn OpKernel) -> Option<PackedCodes> {
    let k = kernel.as_any()?.downcast_ref::<MatMulNBits>()?;
    k.packed.clone().map(PackedCodes)
}

/// A cached weight's bytes to read ahead are those of the weight it holds (for a packed weight
/// its records, `kernels::matmul_nbits::pack`); here because `memory` may not name `runtime`.
impl<T: WarmBytes + 'static> WarmBytes for CachedWeight<T> {
    fn warm_bytes(&self) -> &[u8] {
        (**self).warm_bytes()
    }
}

impl OpKernel for MatMulNBits {
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    fn prepack(&mut self, input_index: usize, tensor: &Tensor<'_>) -> Result<bool> {
        // Constant scales, zero points and bias are the kernel's own copies from creation (or
        // part of the packed weight): `compute` never reads these inputs, so neither ORT nor a
        // fused plan needs to keep them (a fused plan would otherwise copy them once more).
        match input_index {
            IN_B => {}
            IN_SCALES => return Ok(self.scales.is_some() || self.is_packed()),
            IN_ZP => return Ok(self.zero_points.is_some() || self.is_packed()),
            IN_BIAS => return Ok(self.bias.is_some()),
            _ => return Ok(false),
        }
        if self.is_packed() {
            return Ok(true); // offered again: already packed
        }
        // Packing needs the constant scales (and zero points); without them, compute unpacked.
        if self.scales.is_none() {
            return Ok(false);
        }
        if self.const_hostile {
            return Ok(false); // computed by the literal definition (see `compute`)
        }
        if self.p.has_zero_points && self.zero_points.is_none() {
            return Ok(false);
        }
        self.p
            .check_input_shape(NBitsInput::B, tensor.shape())
            .map_err(Error::invalid_argument)?;
        self.pack_b(tensor.data::<u8>()?)
    }

    fn export_packed(&self) -> Option<PackedExport<'_>> {
        let w = self.packed.as_ref()?;
        let (meta, sections) = w.export_parts();
        let mut covers = vec![IN_B, IN_SCALES];
        if self.p.has_zero_points {
            covers.push(IN_ZP);
        }
        Some(PackedExport {
            covers,
            key: w.key().to_json(),
            meta,
            sections,
        })
    }

    fn import_packed(&mut self, imp: PackedImport) -> Result<bool> {
        let stored = adopt::stored_key(&imp.key, OP, "be imported into MatMulNBits")
            .map_err(Error::invalid_argument)?;
        let described =
            PackedNBits::described_params(&imp.meta).map_err(Error::invalid_argument)?;
        if let Some(e) = params_mismatch(&self.p, &described) {
            return Err(Error::invalid_argument(e));
        }
        let meta = &imp.meta;
        let Some(w) = adopt::adopt(
            &stored,
            imp.sections,
            |s| import_nbits(meta, s),
            nbits_file_bytes,
        )
        .map_err(Error::invalid_argument)?
        else {
            return Ok(false);
        };
        // A live entry with the key may hold another description's weight (only a context file
        // giving two nodes one key and the same sections could make one): the weight's own
        // params decide.
        if let Some(e) = params_mismatch(&self.p, w.params()) {
            return Err(Error::invalid_argument(e));
        }
        self.adopt(w);
        Ok(true)
    }

    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let p = &self.p;
        let a = ctx.required_input(IN_A)?;
        let shape = a.shape();
        let Some((&k, lead)) = shape.split_last() else {
            return Err(Error::invalid_argument(
                "input A is a scalar; MatMulNBits needs [..., K]",
            ));
        };
        if k != p.k {
            return Err(Error::invalid_argument(format!(
                "input A has last dimension {k}, expected K={} (A shape {shape:?})",
                p.k
            )));
        }
        let m = checked_numel("input A", lead).map_err(Error::invalid_argument)?;
        let mut out_shape = lead.to_vec();
        out_shape.push(p.n);
        let out = ctx.output(0, &out_shape)?.into_data::<f32>()?;
        let a = a.data::<f32>()?;
        let bias_in;
        let bias = match &self.bias {
            Some(b) => Some(b.as_slice()),
            None => {
                bias_in = ctx.input(IN_BIAS)?;
                match &bias_in {
                    Some(t) => {
                        p.check_input_shape(NBitsInput::Bias, t.shape())
                            .map_err(Error::invalid_argument)?;
                        let b = t.data::<f32>()?;
                        if b.len() != p.n {
                            return Err(Error::invalid_argument(format!(
                                "input bias has {} elements, expected N={}",
                                b.len(),
                                p.n
                            )));
                        }
                        Some(b)
                    }
                    None => None,
                }
            }
        };
        let par = &*self.env.par;
        let variant = match &self.packed {
            Some(w) => {
                let head = self.link.as_ref().filter(|_| m == 1).and_then(|l| {
                    self.env.gemv_chain.ran(l);
                    hint_following(l, par)
                });
                let v = matmul_packed(a, m, w, bias, out, par).map_err(Error::fail)?;
                if let Some(h) = head {
                    h.prefetch();
                }
                v
            }
            None => {
                let b_t = ctx.required_input(IN_B)?;
                // Only inputs the kernel holds no copy of are read (`prepack` told ORT and the
                // fused plan not to keep the others).
                let s_t = match &self.scales {
                    Some(_) => None,
                    None => ctx.input(IN_SCALES)?,
                };
                let z_t = match &self.zero_points {
                    Some(_) => None,
                    None => ctx.input(IN_ZP)?,
                };
                let shape_ok = |which, t: &Tensor<'_>| {
                    p.check_input_shape(which, t.shape())
                        .map_err(Error::invalid_argument)
                };
                shape_ok(NBitsInput::B, &b_t)?;
                if let (None, Some(t)) = (&self.scales, &s_t) {
                    shape_ok(NBitsInput::Scales, t)?;
                }
                if let (None, Some(t), true) = (&self.zero_points, &z_t, p.has_zero_points) {
                    shape_ok(NBitsInput::ZeroPoints, t)?;
                }
                let b = b_t.data::<u8>()?;
                let scales = match &self.scales {
                    Some(s) => s.as_slice(),
                    None => s_t
                        .as_ref()
                        .ok_or_else(|| Error::invalid_argument("input scales is missing"))?
                        .data::<f32>()?,
                };
                let zp = match (&self.zero_points, &z_t) {
                    (Some(z), _) => Some(z.as_slice()),
                    (None, Some(t)) if p.has_zero_points => Some(t.data::<u8>()?),
                    _ => None,
                };
                let w = NBitsWeight {
                    b,
                    scales,
                    zero_points: zp,
                    p,
                };
                w.check_sizes(None).map_err(Error::invalid_argument)?;
                let hostile = match &self.scales {
                    Some(_) => self.const_hostile,
                    None => hostile_scales(scales, p), // scales fed at run time: checked per call
                };
                if hostile {
                    // Infinite, NaN or overflowing scales: the op's definition taken literally
                    // (the fast paths would hide the infinities the dequantisation makes).
                    matmul_dequant_f32(a, m, &w, bias, out).map_err(Error::fail)?;
                    self.record("dequant-f32-literal");
                    return Ok(());
                } else {
                    matmul_unpacked(a, m, &w, bias, out, par).map_err(Error::fail)?
                }
            }
        };
        self.record(variant.of_bits(p.bits));
        Ok(())
    }
}

impl MatMulNBits {
    /// One call through `variant` in the ledger, and the folded Add's with it (a bias the node
    /// has no input for is one `fold_bias` gave it).
    fn record(&self, variant: impl ledger::Variant) {
        let lanes = take_lanes_used();
        ledger::record(OP, variant, lanes);
        if self.bias.is_some() && !self.has_bias_input {
            ledger::record("Add", FOLDED_ADD, lanes);
        }
    }
}

pub const MATMUL_NBITS: OpDef = OpDef {
    op: OP,
    domain: "com.microsoft",
    since: 1,
    until: 1,
    types: &[("T1", types::F32), ("T2", types::U8), ("T3", types::U8)],
    claim,
    create,
};

#[cfg(test)]
mod tests {
    //! A kernel that packed, exported, and a fresh kernel of the same node that imported the
    //! export from a mapped file: the same state `prepack` leaves, the same outputs bit for bit.
    //! The kernels are built field by field (`create` needs ORT's kernel info) and packed
    //! through `pack_b`, what `prepack` runs on input B; the products are the call `compute`
    //! makes on a packed weight (`matmul_packed`), which needs ORT's kernel context otherwise.

    use super::*;
    use crate::kernels::matmul_nbits::pack;
    use crate::os::mapped::FileMap;
    use crate::runtime::par::Serial;

    use crate::ep::nodes::test_files::{import_of, write_sections, Lcg, TempFile};

    /// One node's constant inputs in ORT's layout.
    struct Weights {
        b: Vec<u8>,
        scales: Vec<f32>,
        zp: Option<Vec<u8>>,
    }

    fn weights(p: &NBitsParams, seed: u64) -> Weights {
        let mut r = Lcg(seed);
        let [b, s, z] = p.implied_lens().unwrap();
        Weights {
            b: r.bytes(b),
            scales: (0..s).map(|_| r.f32(1e-3, 0.1)).collect(),
            zp: p.has_zero_points.then(|| r.bytes(z)),
        }
    }

    /// The kernel `create` makes for a node of `p` whose scales and zero points are the
    /// constants of `w` (or absent: a node loaded from a context model).
    fn kernel(p: NBitsParams, w: Option<&Weights>) -> MatMulNBits {
        let mut env = KernelEnv::new(Arc::new(Serial));
        env.acc4_f16_scales = p.acc4_f16_scales;
        MatMulNBits {
            p,
            const_hostile: false,
            scales: w.map(|w| w.scales.clone()),
            zero_points: w.and_then(|w| w.zp.clone()),
            bias: None,
            has_bias_input: false,
            packed: None,
            link: None,
            env: Arc::new(env),
        }
    }

    /// `k`'s export written to a file; the file and the sections' places.
    fn export_to_file(k: &MatMulNBits) -> (TempFile, PackedExport<'_>, Vec<(usize, usize)>) {
        let e = k.export_packed().expect("a packed kernel exports");
        let (file, at) = write_sections("export", &e.sections);
        (file, e, at)
    }

    fn product(k: &MatMulNBits, a: &[f32], m: usize) -> Vec<f32> {
        let mut out = vec![f32::NAN; m * k.p.n];
        matmul_packed(a, m, k.packed.as_ref().unwrap(), None, &mut out, &Serial).unwrap();
        out
    }

    fn params_4bit() -> NBitsParams {
        NBitsParams::new(200, 70, 32, 4, true)
    }

    #[test]
    fn an_imported_kernel_computes_what_the_packing_kernel_does() {
        let cases = [
            params_4bit(),
            NBitsParams::new(100, 33, 16, 0, false).with_bits(8),
            NBitsParams::new(300, 17, 128, 4, false).with_acc4_f16_scales(false),
        ];
        for (i, p) in cases.into_iter().enumerate() {
            let w = weights(&p, 7 + i as u64);
            assert!(
                kernel(p, Some(&w)).export_packed().is_none(),
                "nothing packed yet"
            );
            let mut packer = kernel(p, Some(&w));
            assert!(packer.pack_b(&w.b).unwrap(), "{p:?}");
            let (file, e, at) = export_to_file(&packer);
            let want_covers = if p.has_zero_points {
                vec![IN_B, IN_SCALES, IN_ZP]
            } else {
                vec![IN_B, IN_SCALES]
            };
            assert_eq!(e.covers, want_covers);
            let map = Arc::new(FileMap::open(&file.0).unwrap());

            let mut fresh = kernel(p, None);
            assert!(
                fresh.import_packed(import_of(&e, &map, &at)).unwrap(),
                "{p:?}"
            );
            // The state a successful prepack leaves.
            let got = fresh.packed.as_ref().unwrap();
            assert!(got.adopted() && got.in_file() && got.held_bytes() == 0);
            assert!(fresh.scales.is_none() && fresh.zero_points.is_none());
            assert!(fresh.link.is_some());
            assert!(fresh.is_packed());
            assert_eq!(got.params(), packer.packed.as_ref().unwrap().params());
            assert!(packed_operand(&fresh).is_some());
            let (a_codes, b_codes) = (
                packed_codes(&packer).unwrap(),
                packed_codes(&fresh).unwrap(),
            );
            assert_eq!(a_codes.shape(), b_codes.shape());
            let mut c0 = vec![0u8; a_codes.column_bytes()];
            let mut c1 = c0.clone();
            for n in [0, p.n - 1] {
                assert!(a_codes.column_codes(n, &mut c0) && b_codes.column_codes(n, &mut c1));
                assert_eq!(c0, c1);
            }
            let mut r = Lcg(99);
            for m in [1, 5] {
                let a: Vec<f32> = (0..m * p.k).map(|_| r.f32(-1.0, 1.0)).collect();
                let (x, y) = (product(&packer, &a, m), product(&fresh, &a, m));
                assert!(x.iter().all(|v| v.is_finite()));
                assert!(
                    x.iter().zip(&y).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{p:?} m={m}: the imported kernel differs"
                );
            }
            // Exported again, the imported kernel describes the same weight.
            assert_eq!(fresh.export_packed().unwrap().meta, e.meta);

            // Another kernel importing the same file (through another map of it) shares the
            // entry; one importing a copy of the file does not.
            let again = Arc::new(FileMap::open(&file.0).unwrap());
            let mut twin = kernel(p, None);
            assert!(twin.import_packed(import_of(&e, &again, &at)).unwrap());
            assert!(Arc::ptr_eq(
                twin.packed.as_ref().unwrap(),
                fresh.packed.as_ref().unwrap()
            ));
            let copy = TempFile(file.0.with_extension("copy"));
            std::fs::copy(&file.0, &copy.0).unwrap();
            let copy_map = Arc::new(FileMap::open(&copy.0).unwrap());
            let mut other = kernel(p, None);
            assert!(other.import_packed(import_of(&e, &copy_map, &at)).unwrap());
            assert!(!Arc::ptr_eq(
                other.packed.as_ref().unwrap(),
                fresh.packed.as_ref().unwrap()
            ));
        }
    }

    #[test]
    fn an_import_made_for_other_params_is_refused_naming_the_difference() {
        let p = params_4bit();
        let w = weights(&p, 3);
        let mut packer = kernel(p, Some(&w));
        assert!(packer.pack_b(&w.b).unwrap());
        let (file, e, at) = export_to_file(&packer);
        let map = Arc::new(FileMap::open(&file.0).unwrap());
        let refused = |node: NBitsParams| {
            let mut k = kernel(node, None);
            let e = k.import_packed(import_of(&e, &map, &at)).unwrap_err();
            assert!(k.packed.is_none() && k.link.is_none(), "nothing kept");
            e.to_string()
        };
        for (node, names) in [
            (NBitsParams { k: 208, ..p }, "K="),
            (NBitsParams { n: 64, ..p }, "N="),
            (p.with_bits(8), "bits="),
            (
                NBitsParams {
                    block_size: 64,
                    ..p
                },
                "block_size=",
            ),
            (
                NBitsParams {
                    accuracy_level: 0,
                    ..p
                },
                "accuracy_level=",
            ),
            (
                NBitsParams {
                    has_zero_points: false,
                    ..p
                },
                "zero points=",
            ),
            (p.with_acc4_f16_scales(false), "f16 scales"),
            (p.with_f16_source_scales(true), "f16 source scales"),
        ] {
            let e = refused(node);
            assert!(e.contains(names), "{names}: {e}");
        }
        // Keys and descriptions that are malformed are refused too.
        let mut k = kernel(p, None);
        let mut imp = import_of(&e, &map, &at);
        imp.key["op"] = "QLinearMatMul".into();
        let err = k.import_packed(imp).unwrap_err().to_string();
        assert!(err.contains("QLinearMatMul"), "{err}");
        let mut imp = import_of(&e, &map, &at);
        imp.key["digest"] = "xyz".into();
        assert!(k.import_packed(imp).is_err());
        let mut imp = import_of(&e, &map, &at);
        imp.meta["group_at"][1] = 64.into();
        let err = k.import_packed(imp).unwrap_err().to_string();
        assert!(err.contains("group_at"), "{err}");
        let mut imp = import_of(&e, &map, &at);
        imp.sections.pop();
        let err = k.import_packed(imp).unwrap_err().to_string();
        assert!(err.contains("sections"), "{err}");
        assert!(k.packed.is_none() && k.link.is_none());
        // At level 0 the scale option does not change the pack: an import made under the other
        // option is the node's weight.
        let p0 = NBitsParams::new(64, 40, 16, 0, false);
        let w0 = weights(&p0, 5);
        let mut packer = kernel(p0, Some(&w0));
        assert!(packer.pack_b(&w0.b).unwrap());
        let (file, e, at) = export_to_file(&packer);
        let map = Arc::new(FileMap::open(&file.0).unwrap());
        let mut k = kernel(p0.with_acc4_f16_scales(false), None);
        assert!(k.import_packed(import_of(&e, &map, &at)).unwrap());
        // The packed weight is what `pack` itself gives.
        let direct = pack(&w0.b, &w0.scales, None, &p0);
        assert_eq!(
            k.packed.as_ref().unwrap().weight_bytes(),
            direct.weight_bytes()
        );
    }
}
