//! ONNX QLinearMatMul (opsets 10 and 21) as an ORT kernel: claim rules, a constant B prepacked
//! once through the governed weight cache (declined -> packed per call in scratch, identical
//! results), shapes and quantization parameters checked per call, compute on the EP's lanes.
//!
//! Claimed exactly where ORT's CPU EP has a kernel: uint8 x uint8 -> uint8, uint8 x int8 ->
//! uint8, int8 x int8 -> int8, float scales. A, y: per-tensor scale and zero point; B:
//! per tensor, per column (`[N]` for a 2-D B) or per column of each batch (`[..., 1, N]`, B's
//! rank), scale and zero point independently (as ORT accepts them).
//!
//! Scales and zero points that are constant initializers (the usual case) are copied when the
//! kernel is created, so a call fetches only A (and a B that is not prepacked): each fetched
//! input costs four ORT API calls and two small allocations.

use std::sync::Arc;

use crate::abi::graph::Node;
use crate::abi::kernel_context::KernelContext;
use crate::abi::kernel_info::KernelInfo;
use crate::abi::status::{Error, Result};
use crate::abi::tensor::{elem_name, ElemType, Tensor, TensorType};
use crate::ep::op::{types, Decline, KernelEnv, OpDef, OpKernel, PackedExport, PackedImport};
use crate::kernels::qgemm::{
    self, checked_packed_sizes, BSource, Call, PackedB, Products, Quant, Signs,
};
use crate::kernels::shape::{checked_numel, matmul_shapes};
use crate::memory::{params_hash, weight_cache, CachedWeight, WeightKey};
use crate::runtime::par::take_lanes_used;
use crate::telemetry::ledger;

use super::adopt;
use super::claim::{input_type, known_dims, only_attrs, require_elem, require_output_elem, F32};

const OP: &str = "QLinearMatMul";
const IN_A: usize = 0;
const IN_A_SCALE: usize = 1;
const IN_A_ZP: usize = 2;
const IN_B: usize = 3;
const IN_B_SCALE: usize = 4;
const IN_B_ZP: usize = 5;
const IN_Y_SCALE: usize = 6;
const IN_Y_ZP: usize = 7;

/// The scale and zero-point inputs.
const QUANT_INPUTS: [usize; 6] = [
    IN_A_SCALE, IN_A_ZP, IN_B_SCALE, IN_B_ZP, IN_Y_SCALE, IN_Y_ZP,
];

const U8: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
const I8: ElemType = ElemType::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8;

fn signs_of(a: ElemType, b: ElemType) -> std::result::Result<Signs, String> {
    let signed = |e: ElemType, what: &str| match e {
        U8 => Ok(false),
        I8 => Ok(true),
        _ => Err(format!(
            "{what} is {}, rcpu implements uint8 and int8",
            elem_name(e)
        )),
    };
    Signs::from_types(signed(a, "input a")?, signed(b, "input b")?)
        .ok_or_else(|| "int8 a with uint8 b is not implemented (nor in ORT's CPU EP)".to_string())
}

/// ORT's rule for the B scale / zero point shape: scalar or one element; `[N]` for a 2-D B;
/// or B's rank with the second-to-last dim 1 and the others equal to B's.
fn b_param_ok(p: &[usize], b: &[usize]) -> bool {
    if p.is_empty() || (p.len() == 1 && p[0] == 1) {
        return true;
    }
    if p.len() == 1 && b.len() == 2 && p[0] == b[1] {
        return true;
    }
    p.len() == b.len()
        && p.len() >= 2
        && p[p.len() - 2] == 1
        && (0..p.len()).all(|i| i == p.len() - 2 || p[i] == b[i])
}

/// A per-tensor parameter: a scalar or a 1-D tensor of one element (ORT's rule).
fn per_tensor_ok(p: &[usize]) -> bool {
    p.is_empty() || (p.len() == 1 && p[0] == 1)
}

fn claim(node: &Node<'_>) -> std::result::Result<(), Decline> {
    only_attrs(node, &[])?;
    let ty = |i: usize| -> std::result::Result<TensorType, Decline> {
        input_type(node, i)?.ok_or_else(|| format!("input {i} is missing"))
    };
    let (a, b, yzp) = (ty(IN_A)?, ty(IN_B)?, ty(IN_Y_ZP)?);
    signs_of(a.elem, b.elem)?;
    if yzp.elem != a.elem {
        return Err(format!(
            "output type {} differs from a's {} (ORT's CPU EP has no such kernel)",
            elem_name(yzp.elem),
            elem_name(a.elem)
        ));
    }
    require_output_elem(node, a.elem)?;
    require_elem(node, IN_A_ZP, a.elem)?;
    require_elem(node, IN_B_ZP, b.elem)?;
    for i in [IN_A_SCALE, IN_B_SCALE, IN_Y_SCALE] {
        require_elem(node, i, F32)?;
    }
    // Shapes, where the graph knows them (ORT reports an unknown rank and a scalar alike as no
    // dims; both are claimed and checked per call).
    for i in [IN_A_SCALE, IN_A_ZP, IN_Y_SCALE, IN_Y_ZP] {
        if let Some(d) = known_dims(&ty(i)?) {
            if !per_tensor_ok(&d) {
                return Err(format!("input {i} has shape {d:?}: per-tensor only"));
            }
        }
    }
    if let (Some(ad), Some(bd)) = (known_dims(&a), known_dims(&b)) {
        matmul_shapes(&ad, &bd)?;
        for i in [IN_B_SCALE, IN_B_ZP] {
            if let Some(d) = known_dims(&ty(i)?) {
                if !b_param_ok(&d, &bd) {
                    return Err(format!(
                        "input {i} has shape {d:?}, not a form rcpu implements for b {bd:?}"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The constant B, packed (shape kept: ORT may free the original).
struct Packed {
    w: Arc<CachedWeight<PackedB>>,
    shape: Vec<usize>,
}

/// A constant scale or zero-point input, copied at creation: shape, and the values as f32
/// (scales) or raw bytes (zero points).
struct ConstIn {
    shape: Vec<usize>,
    f32s: Vec<f32>,
    bytes: Vec<u8>,
}

impl ConstIn {
    /// Copies input `i` when it is a constant initializer. `None` also when it cannot be read
    /// as its kind: the call then fetches it and reports the problem as before.
    fn copy(info: &KernelInfo<'_>, i: usize) -> Option<ConstIn> {
        let t = info.constant_input(i).ok()??;
        let scale = matches!(i, IN_A_SCALE | IN_B_SCALE | IN_Y_SCALE);
        Some(ConstIn {
            shape: t.shape().to_vec(),
            f32s: if scale {
                t.data::<f32>().ok()?.to_vec()
            } else {
                Vec::new()
            },
            bytes: if scale {
                Vec::new()
            } else {
                t.bytes().ok()?.to_vec()
            },
        })
    }
}

/// A scale or zero-point input of one call: the copy made at creation, or the call's tensor.
enum QIn<'a> {
    Const(&'a ConstIn),
    Live(Tensor<'a>),
}

impl<'a> QIn<'a> {
    fn shape(&self) -> &[usize] {
        match self {
            QIn::Const(c) => &c.shape,
            QIn::Live(t) => t.shape(),
        }
    }

    fn scales(&self) -> Result<&[f32]> {
        match self {
            QIn::Const(c) => Ok(&c.f32s),
            QIn::Live(t) => t.data::<f32>(),
        }
    }

    fn zeros(&self) -> Result<&[u8]> {
        match self {
            QIn::Const(c) => Ok(&c.bytes),
            QIn::Live(t) => t.bytes(),
        }
    }
}

struct QLinearMatMul {
    signs: Signs,
    packed: Option<Packed>,
    /// Constant scale / zero-point inputs by input index (`None`: fetched per call).
    consts: [Option<ConstIn>; 8],
    env: Arc<KernelEnv>,
}

impl QLinearMatMul {
    /// Scale or zero-point input `i` for this call.
    fn quant_input<'s>(&'s self, ctx: &KernelContext<'s>, i: usize) -> Result<QIn<'s>> {
        match &self.consts[i] {
            Some(c) => Ok(QIn::Const(c)),
            None => ctx.required_input(i).map(QIn::Live),
        }
    }
}

fn create(info: &KernelInfo<'_>, env: &Arc<KernelEnv>) -> Result<Box<dyn OpKernel>> {
    let elem = |i: usize| -> Result<ElemType> {
        Ok(info
            .input_type(i)?
            .ok_or_else(|| Error::invalid_argument(format!("input {i} is not a tensor")))?
            .elem)
    };
    let signs = signs_of(elem(IN_A)?, elem(IN_B)?).map_err(Error::invalid_argument)?;
    let mut consts: [Option<ConstIn>; 8] = Default::default();
    for i in QUANT_INPUTS {
        consts[i] = ConstIn::copy(info, i);
    }
    Ok(Box::new(QLinearMatMul {
        signs,
        packed: None,
        consts,
        env: env.clone(),
    }))
}

/// (k, n, batches) of a B of `shape` (1-D B is `[K]`, one column).
fn b_dims(shape: &[usize]) -> std::result::Result<(usize, usize, usize), String> {
    match shape {
        [] => Err("input b is a scalar; QLinearMatMul needs rank >= 1".into()),
        [k] => Ok((*k, 1, 1)),
        [lead @ .., k, n] => {
            let batches = checked_numel("input b", lead)?;
            checked_packed_sizes(*k, *n, batches)
                .ok_or_else(|| format!("input b of shape {shape:?} is too large"))?;
            Ok((*k, *n, batches))
        }
    }
}

/// A per-tensor f32 input's value.
fn scalar_f32(t: &QIn<'_>, name: &str) -> Result<f32> {
    if !per_tensor_ok(t.shape()) {
        return Err(Error::invalid_argument(format!(
            "{name} has shape {:?}; rcpu (like ORT) takes a scalar or one element",
            t.shape()
        )));
    }
    Ok(t.scales()?[0])
}

/// A per-tensor zero point's value, read in `signed`.
fn scalar_zp(t: &QIn<'_>, name: &str, signed: bool) -> Result<i32> {
    if !per_tensor_ok(t.shape()) {
        return Err(Error::invalid_argument(format!(
            "{name} has shape {:?}; rcpu (like ORT) takes a scalar or one element",
            t.shape()
        )));
    }
    let v = t.zeros()?[0];
    Ok(if signed { v as i8 as i32 } else { v as i32 })
}

impl OpKernel for QLinearMatMul {
    fn prepack(&mut self, input_index: usize, tensor: &Tensor<'_>) -> Result<bool> {
        if input_index != IN_B {
            return Ok(false);
        }
        self.pack_b(tensor.bytes()?, tensor.shape())
    }

    fn export_packed(&self) -> Option<PackedExport<'_>> {
        self.export_b()
    }

    fn import_packed(&mut self, imp: PackedImport) -> Result<bool> {
        self.import_b(imp)
    }

    fn compute(&self, ctx: &KernelContext<'_>) -> Result<()> {
        self.run(ctx)
    }
}

impl QLinearMatMul {
    /// Packs constant B (`b`, of `shape`) through the weight cache (what `prepack` runs).
    fn pack_b(&mut self, b: &[u8], shape: &[usize]) -> Result<bool> {
        let (k, n, batches) = b_dims(shape).map_err(Error::invalid_argument)?;
        let signs = self.signs;
        let key = WeightKey::new(
            OP,
            params_hash(&[signs as u64, k as u64, n as u64, batches as u64]),
            b,
        );
        let Some((bytes, sums)) = checked_packed_sizes(k, n, batches) else {
            return Err(Error::invalid_argument(format!(
                "input b of shape {shape:?} is too large to pack"
            )));
        };
        let w = weight_cache().try_get_or_pack(
            &key,
            bytes.saturating_add(sums.saturating_mul(4)),
            || qgemm::try_pack(b, k, n, batches, signs),
            |w: &PackedB| w.bytes(),
        );
        let got = w.is_some();
        self.packed = w.map(|w| Packed {
            w,
            shape: shape.to_vec(),
        });
        Ok(got)
    }

    /// The packed B for a context file (`None` when not packed: the file keeps the raw B).
    /// `covers`: B only (the pack folds in nothing else: the signs come from the input types;
    /// the scales and zero points are copied at creation and stay raw). The description is the
    /// packed weight's plus B's shape (`compute` plans with it).
    fn export_b(&self) -> Option<PackedExport<'_>> {
        let p = self.packed.as_ref()?;
        let (mut meta, sections) = p.w.export_parts();
        meta.as_object_mut()?
            .insert("shape".into(), serde_json::json!(p.shape));
        Some(PackedExport {
            covers: vec![IN_B],
            key: p.w.key().to_json(),
            meta,
            sections,
        })
    }

    /// Restores what `export_packed` gave: checks the description against the node (signs,
    /// B's shape against the packed dims), then adopts the packed bytes in place from the
    /// mapped file through the weight cache (`adopted_key`). On any error the kernel is left
    /// as it was.
    fn import_b(&mut self, imp: PackedImport) -> Result<bool> {
        let bad = |e: String| Error::invalid_argument(e);
        let stored =
            adopt::stored_key(&imp.key, OP, "be imported into QLinearMatMul").map_err(bad)?;
        let (k, n, batches, signs) = PackedB::described(&imp.meta).map_err(bad)?;
        if signs != self.signs {
            return Err(bad(format!(
                "packed QLinearMatMul weight: signs: the weight was packed for {signs:?}, the \
                 node has {:?}",
                self.signs
            )));
        }
        let shape: Vec<usize> = imp
            .meta
            .get("shape")
            .and_then(serde_json::Value::as_array)
            .and_then(|a| {
                a.iter()
                    .map(|v| v.as_u64().and_then(|x| usize::try_from(x).ok()))
                    .collect::<Option<Vec<usize>>>()
            })
            .ok_or_else(|| {
                bad("packed QLinearMatMul weight: shape: missing or not an array of sizes".into())
            })?;
        let dims =
            b_dims(&shape).map_err(|e| bad(format!("packed QLinearMatMul weight: shape: {e}")))?;
        if dims != (k, n, batches) {
            return Err(bad(format!(
                "packed QLinearMatMul weight: shape: {shape:?} gives [{}, {}] x {}, the \
                 description [{k}, {n}] x {batches}",
                dims.0, dims.1, dims.2
            )));
        }
        let meta = &imp.meta;
        let imported = adopt::adopt(
            &stored,
            imp.sections,
            |s| PackedB::import_parts(meta, s),
            PackedB::stored_bytes,
        );
        let Some(w) = imported.map_err(bad)? else {
            return Ok(false);
        };
        // A live entry with the key may hold another description's weight: its own dims decide.
        if (w.k, w.n, w.batches, w.signs) != (k, n, batches, signs) {
            return Err(bad(format!(
                "packed QLinearMatMul weight: k, n, batches: the shared weight is [{}, {}] x {}, \
                 the description [{k}, {n}] x {batches}",
                w.k, w.n, w.batches
            )));
        }
        self.packed = Some(Packed { w, shape });
        Ok(true)
    }

    fn run(&self, ctx: &KernelContext<'_>) -> Result<()> {
        let signs = self.signs;
        let a_t = ctx.required_input(IN_A)?;
        let b_t = match &self.packed {
            Some(_) => None,
            None => Some(ctx.required_input(IN_B)?),
        };
        let b_shape = match (&self.packed, &b_t) {
            (Some(p), _) => p.shape.as_slice(),
            (None, Some(t)) => t.shape(),
            (None, None) => unreachable!("B is read when not packed"),
        };
        let a_shape = a_t.shape();
        let (k, n, batches) = b_dims(b_shape).map_err(Error::invalid_argument)?;
        let bad = |e: String| Error::invalid_argument(e);
        // A 1-D or 2-D B folds A's batch dims into M (one product); a batched B goes through
        // numpy.matmul planning (one product per output batch, offsets listed only once the
        // output is known to be non-empty: the batch count is then bounded by its size).
        let (m, plan, out_shape) = if b_shape.len() <= 2 {
            let Some((&ka, lead)) = a_shape.split_last() else {
                return Err(bad(
                    "input a is a scalar; QLinearMatMul needs rank >= 1".into()
                ));
            };
            if ka != k {
                return Err(bad(format!(
                    "inner dimensions differ: a {a_shape:?}, b {b_shape:?}"
                )));
            }
            let mut out = lead.to_vec();
            if b_shape.len() == 2 {
                out.push(n);
            }
            checked_numel("output", &out).map_err(bad)?;
            let m = checked_numel("input a", lead).map_err(bad)?;
            (m, None, out)
        } else {
            let plan = matmul_shapes(a_shape, b_shape).map_err(bad)?;
            let out = plan.out_shape.clone();
            (plan.m, Some(plan), out)
        };
        let a_scale_t = self.quant_input(ctx, IN_A_SCALE)?;
        let a_zp_t = self.quant_input(ctx, IN_A_ZP)?;
        let b_scale_t = self.quant_input(ctx, IN_B_SCALE)?;
        let b_zp_t = self.quant_input(ctx, IN_B_ZP)?;
        let y_scale_t = self.quant_input(ctx, IN_Y_SCALE)?;
        let y_zp_t = self.quant_input(ctx, IN_Y_ZP)?;
        for (t, name) in [(&b_scale_t, "b_scale"), (&b_zp_t, "b_zero_point")] {
            if !b_param_ok(t.shape(), b_shape) {
                return Err(bad(format!(
                    "{name} has shape {:?}: expected a scalar, one element, [N] for a 2-D b, or \
                     b's shape with the second-to-last dim 1 (b is {b_shape:?})",
                    t.shape()
                )));
            }
        }
        let quant = Quant {
            a_scale: scalar_f32(&a_scale_t, "a_scale")?,
            a_zero: scalar_zp(&a_zp_t, "a_zero_point", signs.a_signed())?,
            b_scale: b_scale_t.scales()?,
            b_zero: b_zp_t.zeros()?,
            y_scale: scalar_f32(&y_scale_t, "y_scale")?,
            y_zero: scalar_zp(&y_zp_t, "y_zero_point", signs.a_signed())?,
        };
        let b = match (&self.packed, &b_t) {
            (Some(p), _) => BSource::Packed(p.w.view()),
            (None, Some(t)) => BSource::Raw(t.bytes()?),
            (None, None) => unreachable!("B is read when not packed"),
        };
        let out = ctx.output(0, &out_shape)?.into_bytes()?;
        if out.is_empty() {
            return Ok(());
        }
        let (a_offsets, b_index) = match &plan {
            None => (vec![0], vec![0]),
            Some(plan) => {
                let (a_off, b_off) = plan.offset_lists().map_err(bad)?;
                let per = k * n;
                let b_index = b_off
                    .iter()
                    .map(|&o| o.checked_div(per).unwrap_or(0))
                    .collect();
                (a_off, b_index)
            }
        };
        let call = Call {
            a: a_t.bytes()?,
            prods: Products {
                m,
                a_offsets: &a_offsets,
                b_index: &b_index,
            },
            k,
            n,
            batches,
            signs,
            b,
            quant,
        };
        let par = &*self.env.par;
        let variant = qgemm::run(&call, out, par).map_err(bad)?;
        ledger::record(OP, variant, take_lanes_used());
        Ok(())
    }
}

pub const QLINEAR_MATMUL_10: OpDef = OpDef {
    op: OP,
    domain: "",
    since: 10,
    until: 20,
    types: &[
        ("T1", types::U8_I8),
        ("T2", types::U8_I8),
        ("T3", types::U8_I8),
    ],
    claim,
    create,
};

pub const QLINEAR_MATMUL_21: OpDef = OpDef {
    op: OP,
    domain: "",
    since: 21,
    until: 21,
    types: &[
        ("TS", types::F32),
        ("T1", types::U8_I8),
        ("T2", types::U8_I8),
        ("T3", types::U8_I8),
    ],
    claim,
    create,
};

#[cfg(test)]
mod tests {
    //! A kernel that packed B, exported, and a fresh kernel of the same node that imported the
    //! export from a mapped file: the products of the call `compute` makes on a packed B
    //! (`qgemm::run`) agree bit for bit; a description that contradicts the layout or the node
    //! is an error naming the field. The kernels are built field by field (`create` needs
    //! ORT's kernel info) and packed through `pack_b`, what `prepack` runs on input B.

    use super::*;
    use crate::ep::nodes::test_files::{import_of, write_sections, Lcg, TempFile};
    use crate::os::mapped::FileMap;
    use crate::runtime::par::Serial;

    fn kernel(signs: Signs) -> QLinearMatMul {
        QLinearMatMul {
            signs,
            packed: None,
            consts: Default::default(),
            env: Arc::new(KernelEnv::new(Arc::new(Serial))),
        }
    }

    fn export_to_file(k: &QLinearMatMul) -> (TempFile, PackedExport<'_>, Vec<(usize, usize)>) {
        let e = k.export_packed().expect("a packed kernel exports");
        let (file, at) = write_sections("qlinear", &e.sections);
        (file, e, at)
    }

    /// `m` rows of A against every batch of the packed B, per-column B quantization.
    fn product(q: &QLinearMatMul, a: &[u8], m: usize) -> Vec<u8> {
        let p = q.packed.as_ref().unwrap();
        let (k, n, batches) = b_dims(&p.shape).unwrap();
        let b_scale: Vec<f32> = (0..batches * n).map(|i| 0.01 + i as f32 * 1e-3).collect();
        let b_zero: Vec<u8> = (0..batches * n).map(|i| (i * 7) as u8).collect();
        let a_offsets: Vec<usize> = (0..batches).map(|b| b * m * k).collect();
        let b_index: Vec<usize> = (0..batches).collect();
        let call = Call {
            a,
            prods: Products {
                m,
                a_offsets: &a_offsets,
                b_index: &b_index,
            },
            k,
            n,
            batches,
            signs: q.signs,
            b: BSource::Packed(p.w.view()),
            quant: Quant {
                a_scale: 0.02,
                a_zero: 3,
                b_scale: &b_scale,
                b_zero: &b_zero,
                y_scale: 0.5,
                y_zero: 5,
            },
        };
        let mut out = vec![0u8; batches * m * n];
        qgemm::run(&call, &mut out, &Serial).unwrap();
        out
    }

    #[test]
    fn an_imported_kernel_computes_what_the_packing_kernel_does() {
        let cases: [(Signs, &[usize]); 4] = [
            (Signs::U8U8, &[70, 33]),
            (Signs::U8S8, &[2, 40, 130]),
            (Signs::S8S8, &[17, 5]),
            (Signs::U8S8, &[9]),
        ];
        for (i, (signs, shape)) in cases.into_iter().enumerate() {
            let mut g = Lcg(5 + i as u64);
            let b = g.bytes(shape.iter().product());
            let mut packer = kernel(signs);
            assert!(
                kernel(signs).export_packed().is_none(),
                "nothing packed yet"
            );
            assert!(packer.pack_b(&b, shape).unwrap());
            let (file, e, at) = export_to_file(&packer);
            assert_eq!(e.covers, vec![IN_B]);
            let map = Arc::new(FileMap::open(&file.0).unwrap());
            let mut fresh = kernel(signs);
            assert!(fresh.import_packed(import_of(&e, &map, &at)).unwrap());
            let got = fresh.packed.as_ref().unwrap();
            assert!(got.w.adopted() && got.w.is_file() && got.w.bytes() == 0);
            assert_eq!(got.shape, shape);
            let (k, _, batches) = b_dims(shape).unwrap();
            for m in [1, 3, 8] {
                let a = g.bytes(batches * m * k);
                assert_eq!(
                    product(&packer, &a, m),
                    product(&fresh, &a, m),
                    "{signs:?} {shape:?} m={m}"
                );
            }
            let e2 = fresh.export_packed().unwrap();
            assert_eq!((&e2.meta, &e2.sections), (&e.meta, &e.sections));
        }
    }

    #[test]
    fn a_bad_description_is_an_error_naming_the_field() {
        let mut g = Lcg(21);
        let mut packer = kernel(Signs::U8S8);
        assert!(packer.pack_b(&g.bytes(40 * 24), &[40, 24]).unwrap());
        let (file, e, at) = export_to_file(&packer);
        let map = Arc::new(FileMap::open(&file.0).unwrap());
        type Edit = Box<dyn Fn(&mut PackedImport)>;
        let edits: Vec<(&str, Edit)> = vec![
            ("layout", Box::new(|i| i.meta["layout"] = 9.into())),
            ("batches", Box::new(|i| i.meta["batches"] = "1".into())),
            ("signs", Box::new(|i| i.meta["signs"] = "u8u8".into())),
            ("signs", Box::new(|i| i.meta["signs"] = "f32".into())),
            (
                "shape",
                Box::new(|i| i.meta["shape"] = serde_json::json!([40, 25])),
            ),
            (
                "shape",
                Box::new(|i| i.meta["shape"] = serde_json::json!("x")),
            ),
            (
                "data",
                Box::new(|i| {
                    i.meta["n"] = 48.into();
                    i.meta["shape"] = serde_json::json!([40, 48]);
                }),
            ),
            (
                "colsum",
                Box::new(|i| {
                    i.meta["n"] = 20.into();
                    i.meta["shape"] = serde_json::json!([40, 20]);
                }),
            ),
            (
                "sections",
                Box::new(|i| {
                    i.sections.pop();
                }),
            ),
            (
                "f32-gemm-b",
                Box::new(|i| i.key["op"] = "f32-gemm-b".into()),
            ),
            ("k", Box::new(|i| i.meta["k"] = u64::MAX.into())),
        ];
        for (field, edit) in &edits {
            let mut imp = import_of(&e, &map, &at);
            edit(&mut imp);
            let mut fresh = kernel(Signs::U8S8);
            let err = match fresh.import_packed(imp) {
                Ok(t) => panic!("an import with a bad {field} was taken ({t})"),
                Err(e) => e.to_string(),
            };
            assert!(err.contains(field), "{field}: {err}");
            assert!(
                fresh.packed.is_none(),
                "{field}: the kernel is left as it was"
            );
        }
    }
}
