//! A constant B (weight) prepacked once into the panel layout the micro-kernel reads, so the
//! GEMM driver skips packing B on every call and the M = 1 GEMV streams it front to back.
//!
//! Layout: `op(B)` (`k x n`) cut into `nr`-wide column panels (the kernel table's `NR`); panel
//! `q` holds, for every `p` in `0..k`, the `nr` values `op(B)(p, q*nr ..)` contiguously, zero
//! padded past `n`. Panel `q` starts at `q * k * nr`, so the `KC` slice the driver wants
//! (`pc..pc+kc`) is the contiguous run at `q * k * nr + pc * nr` of length `kc * nr`: exactly the
//! bytes `driver::pack_b` would have written for it.

use super::{GemmKernels, Op, DISPATCH};
use crate::kernels::described;
use crate::memory::{weight_arena, ArenaBuf};
use crate::os::mapped::FileSlice;
use serde_json::{json, Map, Value};

/// Version of the panel layout (this module's doc) that [`PackedB::export_parts`] writes; an
/// import of any other version is refused, so a file written before a layout change is packed
/// afresh, never misread.
pub(super) const LAYOUT_VERSION: u64 = 1;

/// The panels of a packed B: in the weight arena (packed here) or in a mapped context file
/// (packed earlier, read in place).
enum Panels {
    Arena(ArenaBuf<f32>),
    File(FileSlice<f32>),
}

impl std::ops::Deref for Panels {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        match self {
            Panels::Arena(b) => b.as_slice(),
            Panels::File(f) => f.as_slice(),
        }
    }
}

/// `op(B)` in full-K column panels for one kernel table. See the module doc.
pub struct PackedB {
    k: usize,
    n: usize,
    pub(super) kern: &'static GemmKernels,
    /// A piece of the huge-page weight arena ([`crate::memory::weight_arena`]), or a slice of
    /// a mapped context file ([`PackedB::import_parts`]).
    data: Panels,
}

impl std::fmt::Debug for PackedB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedB")
            .field("k", &self.k)
            .field("n", &self.n)
            .field("nr", &self.kern.nr)
            .finish()
    }
}

impl PackedB {
    /// Packs `op(b)` (`k x n`; stored `n x k` when `b.trans`) for the kernels of `kern`.
    /// `None` when the packed buffer cannot be allocated (or its size overflows).
    pub(super) fn new(
        kern: &'static GemmKernels,
        b: Op<'_>,
        k: usize,
        n: usize,
    ) -> Option<PackedB> {
        let nr = kern.nr;
        let panels = n.div_ceil(nr);
        let len = panels.checked_mul(k)?.checked_mul(nr)?;
        // From the huge-page weight arena, whatever the size (measured: 16 MiB streamed
        // 1.3-1.7x faster on 2 MiB pages than on 4 KiB); a refused region is a decline.
        let mut data = weight_arena().try_alloc::<f32>(len).ok()?;
        for (q, panel) in data
            .chunks_exact_mut((k * nr).max(1))
            .take(panels)
            .enumerate()
        {
            pack_panel(b, k, q * nr, nr.min(n - q * nr), nr, panel);
        }
        Some(PackedB {
            k,
            n,
            kern,
            data: Panels::Arena(data),
        })
    }

    /// The reduction length (rows of `op(B)`).
    pub fn k(&self) -> usize {
        self.k
    }

    /// The output width (columns of `op(B)`).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Bytes taken from the weight arena, alignment padding included (what the weight cache
    /// settles its grant to).
    pub fn bytes(&self) -> usize {
        match &self.data {
            Panels::Arena(b) => b.taken_bytes(),
            Panels::File(_) => 0,
        }
    }

    /// Bytes of the panels (what a context file stores; what an imported weight maps).
    pub fn panel_bytes(&self) -> usize {
        std::mem::size_of_val::<[f32]>(&self.data)
    }

    /// Whether the panels lie in a mapped file.
    pub fn is_file(&self) -> bool {
        matches!(self.data, Panels::File(_))
    }

    /// The weight as a description and its one byte section (the panels), for a context file;
    /// [`PackedB::import_parts`] reverses it.
    pub fn export_parts(&self) -> (Value, Vec<&[u8]>) {
        let meta = json!({
            "layout": LAYOUT_VERSION,
            "k": self.k,
            "n": self.n,
            "nr": self.kern.nr,
        });
        let panels: &[f32] = &self.data;
        let bytes = crate::os::mapped::plain_bytes(panels);
        (meta, vec![bytes])
    }

    /// `(k, n)` from [`PackedB::export_parts`]'s description, validated (layout version, and the
    /// panel width that of this process's kernels), without the sections.
    pub fn described_shape(meta: &Value) -> Result<(usize, usize), String> {
        let obj = meta
            .as_object()
            .ok_or_else(|| bad("description", "not a JSON object".into()))?;
        let layout = uint(obj, "layout")?;
        if layout != LAYOUT_VERSION {
            return Err(bad(
                "layout",
                format!("version {layout}, this build reads {LAYOUT_VERSION}"),
            ));
        }
        let k = size(obj, "k")?;
        let n = size(obj, "n")?;
        let nr = size(obj, "nr")?;
        if nr != DISPATCH.nr {
            return Err(bad(
                "nr",
                format!(
                    "panels {nr} wide, this process's kernels read {}",
                    DISPATCH.nr
                ),
            ));
        }
        Ok((k, n))
    }

    /// Rebuilds a weight from [`PackedB::export_parts`]'s description and its section (the
    /// panels, a slice of a mapped file, read in place: nothing is copied), for this process's
    /// kernels. Refuses, with an error naming the field, a description that is not the layout
    /// (see [`PackedB::described_shape`]), a section count other than one, a panel section
    /// whose length is not `ceil(n / nr) * k * nr` f32s or that is not 64-byte aligned.
    pub fn import_parts(meta: &Value, sections: Vec<FileSlice<u8>>) -> Result<PackedB, String> {
        let (k, n) = Self::described_shape(meta)?;
        let kern: &'static GemmKernels = *DISPATCH;
        let nr = kern.nr;
        if sections.len() != 1 {
            return Err(bad(
                "sections",
                format!("{} given, expected 1 (panels)", sections.len()),
            ));
        }
        let s = &sections[0];
        let want = n
            .div_ceil(nr)
            .checked_mul(k)
            .and_then(|v| v.checked_mul(nr))
            .and_then(|v| v.checked_mul(std::mem::size_of::<f32>()))
            .ok_or_else(|| bad("k", format!("a {k} x {n} weight's panels overflow")))?;
        if s.len() != want {
            return Err(bad(
                "panels",
                format!(
                    "{} bytes, a {k} x {n} weight in {nr}-wide panels takes {want}",
                    s.len()
                ),
            ));
        }
        if !s.offset().is_multiple_of(crate::memory::ARENA_ALIGN) {
            return Err(bad(
                "panels",
                format!("section not {}-byte aligned", crate::memory::ARENA_ALIGN),
            ));
        }
        let data = FileSlice::<f32>::new(s.map(), s.offset(), want / std::mem::size_of::<f32>())
            .ok_or_else(|| {
                bad(
                    "panels",
                    "section not an aligned f32 range of the file".into(),
                )
            })?;
        Ok(PackedB {
            k,
            n,
            kern,
            data: Panels::File(data),
        })
    }

    /// Bytes [`PackedB::new`] will hold for a `k x n` weight with panels `nr` wide (padding
    /// and alignment slack included): the weight cache's reservation.
    pub fn predicted_bytes(k: usize, n: usize, nr: usize) -> usize {
        (n.div_ceil(nr) * k * nr + 64) * std::mem::size_of::<f32>()
    }

    /// Rows `pc..pc+kc` of panel `q` (`kc * nr` values, row-major, `nr` per row).
    pub(super) fn panel(&self, q: usize, pc: usize, kc: usize) -> &[f32] {
        let nr = self.kern.nr;
        &self.data[q * self.k * nr + pc * nr..][..kc * nr]
    }
}

/// The kind of weight errors name (`kernels::described`).
const KIND: &str = "f32 GEMM";

fn bad(field: &str, what: String) -> String {
    described::bad(KIND, field, &what)
}

fn uint(obj: &Map<String, Value>, name: &str) -> Result<u64, String> {
    described::uint(KIND, obj, name)
}

fn size(obj: &Map<String, Value>, name: &str) -> Result<usize, String> {
    described::size(KIND, obj, name)
}

/// Writes `op(B)(0..k, j0..j0+w)` into `out` as `k` rows of `nr` (columns past `w` zero).
/// `out` holds at least `k * nr` values; the transposed source is gathered column by column.
pub(super) fn pack_panel(b: Op<'_>, k: usize, j0: usize, w: usize, nr: usize, out: &mut [f32]) {
    let out = &mut out[..k * nr];
    if b.trans {
        // op(B)(p, j) = b[j * ld + p]: each stored row is one panel column.
        if w < nr {
            out.fill(0.0);
        }
        for c in 0..w {
            let src = &b.data[(j0 + c) * b.ld..][..k];
            for (p, &v) in src.iter().enumerate() {
                out[p * nr + c] = v;
            }
        }
    } else {
        for (p, dst) in out.chunks_exact_mut(nr).enumerate() {
            let at = p * b.ld + j0;
            dst[..w].copy_from_slice(&b.data[at..at + w]);
            dst[w..].fill(0.0);
        }
    }
}
