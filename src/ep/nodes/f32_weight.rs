//! The constant B of an f32 MatMul/Gemm node: offered by ORT in `PrePackWeight`, packed once
//! through the governed weight cache into the GEMM panel layout (shared by every node and
//! session with the same weight). When the cache declines, the node keeps computing from ORT's
//! original tensor through the same route (`Weight::Unpacked`), with bit-identical results.
//!
//! A packed weight also goes to and comes from a context file (`ConstB::export_packed`,
//! `ConstB::import_packed`, behind MatMul's and Gemm's `OpKernel` methods): imported, its panels
//! are read in place from the mapped file and nothing is packed.

use std::sync::Arc;

use crate::abi::kernel_context::KernelContext;
use crate::abi::status::{Error, Result};
use crate::abi::tensor::Tensor;
use crate::ep::op::{PackedExport, PackedImport};
use crate::kernels::gemm::{try_pack_weight, weight_panel_width, PackedB, Weight};
use crate::memory::{params_hash, weight_cache, CachedWeight, WeightKey};

use super::adopt;

/// The input index of B in MatMul and Gemm (what an export covers).
const IN_B: usize = 1;

/// Weight-cache key namespace of packed f32 GEMM weights.
const PACK_OP: &str = "f32-gemm-b";

/// A constant 2-D B: its shape and, when the cache granted it, the packed copy.
pub(super) struct ConstB {
    /// `op(B)` is `k x n`; B is stored `n x k` when `trans`.
    pub k: usize,
    pub n: usize,
    pub trans: bool,
    /// The stored shape of B (for error messages).
    pub shape: [usize; 2],
    packed: Option<Arc<CachedWeight<PackedB>>>,
}

impl ConstB {
    /// Offers constant B for packing. `None` when it is not a 2-D f32 weight worth packing
    /// (N = 1 products keep `sgemm`'s own vector path). Otherwise the shape is kept and the
    /// cache is asked for a packed copy; [`ConstB::is_packed`] says whether it granted one.
    pub(crate) fn prepack(tensor: &Tensor<'_>, trans: bool) -> Result<Option<ConstB>> {
        let &[r, c] = tensor.shape() else {
            return Ok(None);
        };
        let n = if trans { r } else { c };
        if n < 2 {
            return Ok(None);
        }
        Ok(Some(Self::pack(
            tensor.data::<f32>()?,
            tensor.raw_bytes()?,
            [r, c],
            trans,
        )))
    }

    /// A 2-D B of stored shape `[r, c]` (values `b`, their bytes `raw`: the key's source)
    /// offered to the weight cache, as [`ConstB::prepack`] offers it.
    fn pack(b: &[f32], raw: &[u8], [r, c]: [usize; 2], trans: bool) -> ConstB {
        let (k, n) = if trans { (c, r) } else { (r, c) };
        let nr = weight_panel_width();
        let key = WeightKey::new(
            PACK_OP,
            params_hash(&[k as u64, n as u64, trans as u64, nr as u64]),
            raw,
        );
        let packed = weight_cache().try_get_or_pack(
            &key,
            PackedB::predicted_bytes(k, n, nr),
            || try_pack_weight(trans, k, n, b, c),
            PackedB::bytes,
        );
        ConstB {
            k,
            n,
            trans,
            shape: [r, c],
            packed,
        }
    }

    /// The packed weight for a context file (`None` when the cache declined: the file then
    /// keeps the raw tensor). `covers`: B only. The description is the packed weight's, plus
    /// `trans` (the node's transB, which the import compares with its own).
    pub(crate) fn export_packed(&self) -> Option<PackedExport<'_>> {
        let w = self.packed.as_ref()?;
        let (mut meta, sections) = w.export_parts();
        meta.as_object_mut()?
            .insert("trans".into(), serde_json::Value::Bool(self.trans));
        Some(PackedExport {
            covers: vec![IN_B],
            key: w.key().to_json(),
            meta,
            sections,
        })
    }

    /// Restores what [`ConstB::export_packed`] gave, for a node whose transB is `trans`: the
    /// packed panels are read in place from the mapped file, shared through the weight cache
    /// under a key derived from the stored one and where the sections lie (`adopted_key`).
    /// `Ok(None)` when the cache gave nothing; `Err` naming the field the description gets
    /// wrong.
    pub(crate) fn import_packed(imp: PackedImport, trans: bool) -> Result<Option<ConstB>> {
        let stored = adopt::stored_key(&imp.key, PACK_OP, "be imported into an f32 MatMul/Gemm")
            .map_err(Error::invalid_argument)?;
        let (k, n) = PackedB::described_shape(&imp.meta).map_err(Error::invalid_argument)?;
        let got_trans = imp.meta.get("trans").and_then(serde_json::Value::as_bool);
        match got_trans {
            None => {
                return Err(Error::invalid_argument(
                    "packed f32 GEMM weight: trans: missing or not a boolean",
                ))
            }
            Some(t) if t != trans => {
                return Err(Error::invalid_argument(format!(
                    "packed f32 GEMM weight: trans: the weight was packed for transB={}, the \
                     node has transB={}",
                    t as u8, trans as u8
                )))
            }
            Some(_) => {}
        }
        if n < 2 {
            return Err(Error::invalid_argument(format!(
                "packed f32 GEMM weight: n: {n}, a packed weight has at least 2 columns"
            )));
        }
        let meta = &imp.meta;
        let imported = adopt::adopt(
            &stored,
            imp.sections,
            |s| PackedB::import_parts(meta, s),
            PackedB::panel_bytes,
        );
        let Some(w) = imported.map_err(Error::invalid_argument)? else {
            return Ok(None);
        };
        // A live entry with the key may hold another description's weight: its own shape
        // decides.
        if (w.k(), w.n()) != (k, n) {
            return Err(Error::invalid_argument(format!(
                "packed f32 GEMM weight: k, n: the shared weight is {} x {}, the description {k} x {n}",
                w.k(),
                w.n()
            )));
        }
        Ok(Some(ConstB {
            k,
            n,
            trans,
            shape: if trans { [n, k] } else { [k, n] },
            packed: Some(w),
        }))
    }

    /// Whether the cache granted a packed copy (ORT may then free its own tensor).
    pub(crate) fn is_packed(&self) -> bool {
        self.packed.is_some()
    }

    /// Runs `f` with the weight operand: the packed copy, or ORT's tensor read from input
    /// `index` of this call (checked against the prepacked shape).
    pub(crate) fn with<R>(
        &self,
        ctx: &KernelContext<'_>,
        index: usize,
        f: impl FnOnce(Weight<'_>) -> Result<R>,
    ) -> Result<R> {
        if let Some(p) = &self.packed {
            return f(Weight::Packed(p));
        }
        let t = ctx.required_input(index)?;
        if t.shape() != self.shape {
            return Err(Error::invalid_argument(format!(
                "constant B has shape {:?} at run time, {:?} at prepack",
                t.shape(),
                self.shape
            )));
        }
        f(Weight::Unpacked {
            b: t.data::<f32>()?,
            ldb: self.shape[1],
            trans: self.trans,
        })
    }
}

#[cfg(test)]
mod tests {
    //! A weight packed, exported, written to a file as a context file lays it out, mapped, and
    //! imported into a fresh node's state: the products are the call `compute` makes
    //! (`Sgemm::run_weight`), bit for bit; a description that contradicts the layout or the node
    //! is an error naming the field.

    use super::*;
    use crate::ep::nodes::test_files::{import_of, write_sections, Lcg, TempFile};
    use crate::kernels::gemm::Sgemm;
    use crate::os::mapped::{FileMap, FileSlice};
    use crate::runtime::par::Serial;

    fn weight(r: usize, c: usize, trans: bool, seed: u64) -> ConstB {
        let mut g = Lcg(seed);
        let b: Vec<f32> = (0..r * c).map(|_| g.f32(-1.0, 1.0)).collect();
        let raw: Vec<u8> = b.iter().flat_map(|v| v.to_le_bytes()).collect();
        let w = ConstB::pack(&b, &raw, [r, c], trans);
        assert!(w.is_packed());
        w
    }

    fn export_to_file(w: &ConstB) -> (TempFile, PackedExport<'_>, Vec<(usize, usize)>) {
        let e = w.export_packed().expect("a packed weight exports");
        let (file, at) = write_sections("f32-gemm", &e.sections);
        (file, e, at)
    }

    fn product(w: &ConstB, a: &[f32], m: usize) -> Vec<f32> {
        let mut out = vec![f32::NAN; m * w.n];
        let call = Sgemm::new(m, w.n, w.k, a).par(&Serial);
        let p = w.packed.as_ref().unwrap();
        call.run_weight(Weight::Packed(p), &mut out).unwrap();
        out
    }

    #[test]
    fn an_imported_weight_computes_what_the_packed_one_does() {
        for (i, &(r, c, trans)) in [
            (70, 33, false),
            (64, 130, true),
            (5, 2, false),
            (300, 17, true),
        ]
        .iter()
        .enumerate()
        {
            let w = weight(r, c, trans, 3 + i as u64);
            let (file, e, at) = export_to_file(&w);
            assert_eq!(e.covers, vec![IN_B]);
            let map = Arc::new(FileMap::open(&file.0).unwrap());
            let got = ConstB::import_packed(import_of(&e, &map, &at), trans)
                .unwrap()
                .expect("imported");
            assert_eq!(
                (got.k, got.n, got.trans, got.shape),
                (w.k, w.n, w.trans, w.shape)
            );
            let p = got.packed.as_ref().unwrap();
            assert!(p.adopted() && p.is_file() && p.bytes() == 0);
            let mut g = Lcg(99);
            for m in [1, 2, 7, 40] {
                let a: Vec<f32> = (0..m * w.k).map(|_| g.f32(-2.0, 2.0)).collect();
                let (x, y) = (product(&w, &a, m), product(&got, &a, m));
                assert!(
                    x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits()),
                    "{r}x{c} trans={trans} m={m}"
                );
            }
            // A second import of the same file shares the adopted entry.
            let again = ConstB::import_packed(import_of(&e, &map, &at), trans)
                .unwrap()
                .unwrap();
            assert!(Arc::ptr_eq(again.packed.as_ref().unwrap(), p));
            // Exported again: the same description and bytes.
            let e2 = got.export_packed().unwrap();
            assert_eq!(e2.meta, e.meta);
            assert_eq!(e2.sections, e.sections);
        }
    }

    #[test]
    fn a_bad_description_is_an_error_naming_the_field() {
        let w = weight(40, 24, false, 11);
        let (file, e, at) = export_to_file(&w);
        let map = Arc::new(FileMap::open(&file.0).unwrap());
        let nr = weight_panel_width() as u64;
        type Edit = Box<dyn Fn(&mut PackedImport)>;
        let edits: Vec<(&str, Edit)> = vec![
            ("layout", Box::new(|i| i.meta["layout"] = 2.into())),
            ("k", Box::new(|i| i.meta["k"] = "x".into())),
            (
                "k",
                Box::new(|i| {
                    i.meta
                        .as_object_mut()
                        .unwrap()
                        .remove("k")
                        .map(drop)
                        .unwrap()
                }),
            ),
            ("panels", Box::new(|i| i.meta["k"] = 41.into())),
            ("panels", Box::new(|i| i.meta["n"] = 200.into())),
            ("n", Box::new(|i| i.meta["n"] = 1.into())),
            ("nr", Box::new(move |i| i.meta["nr"] = (nr * 2).into())),
            ("trans", Box::new(|i| i.meta["trans"] = true.into())),
            ("trans", Box::new(|i| i.meta["trans"] = 3.into())),
            ("sections", Box::new(|i| i.sections.clear())),
            (
                "sections",
                Box::new(|i| {
                    let s = i.sections[0].clone();
                    i.sections.push(s);
                }),
            ),
            (
                "MatMulNBits",
                Box::new(|i| i.key["op"] = "MatMulNBits".into()),
            ),
            ("description", Box::new(|i| i.meta = serde_json::json!([1]))),
        ];
        for (field, edit) in &edits {
            let mut imp = import_of(&e, &map, &at);
            edit(&mut imp);
            let err = match ConstB::import_packed(imp, false) {
                Ok(_) => panic!("an import with a bad {field} was taken"),
                Err(e) => e.to_string(),
            };
            assert!(err.contains(field), "{field}: {err}");
        }
        // A section of the wrong length (the file's next bytes).
        let mut imp = import_of(&e, &map, &at);
        let s = &imp.sections[0];
        imp.sections[0] = FileSlice::new(s.map(), s.offset(), s.len() - 4).unwrap();
        let err = ConstB::import_packed(imp, false).err().unwrap().to_string();
        assert!(err.contains("panels"), "{err}");
    }
}
