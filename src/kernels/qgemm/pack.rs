//! The packed B layout.
//!
//! Per batch, B `[K, N]` (row-major, ONNX's layout) becomes `ceil(N / 64)` panels of 64 columns
//! (the last one `round_up(N mod 64, 16)` wide). Within a panel of width `w`, k-group `g`
//! (k = 4g .. 4g + 3) takes `4 w` bytes: column c's four k values at `g * 4w + 4c`. K is padded
//! to a multiple of 4 and columns to a multiple of 16 with zero bytes (zero in either sign).
//! Panel p of a batch starts at `p * Kp * 64`. Bytes are stored flipped (`^ 0x80`) when
//! [`Signs::flips_b`]; `colsum` holds each column's sum of the stored values, read in the
//! sign the kernels read them (int8 when A is uint8, uint8 when A is int8).

use super::{Signs, NR, PANEL};
use crate::kernels::described;
use crate::memory::{weight_arena, WeightBytes};
use crate::os::mapped::FileSlice;
use serde_json::{json, Map, Value};

/// Version of the packed layout (this module's doc) that [`PackedB::export_parts`] writes; an
/// import of any other version is refused, so a file written before a layout change is packed
/// afresh, never misread.
const LAYOUT_VERSION: u64 = 1;

/// K rounded up to a multiple of 4.
pub fn k_padded(k: usize) -> usize {
    k.div_ceil(4) * 4
}

/// N rounded up to a multiple of `NR`.
pub fn n_padded(n: usize) -> usize {
    n.div_ceil(NR) * NR
}

/// (packed bytes, column sums) for `batches` matrices of `[k, n]`.
pub fn packed_sizes(k: usize, n: usize, batches: usize) -> (usize, usize) {
    (k_padded(k) * n_padded(n) * batches, n * batches)
}

/// [`packed_sizes`] with checked arithmetic: `None` when a size overflows or passes
/// `isize::MAX` bytes (validate a model's B shape with this before anything is sized by it).
pub fn checked_packed_sizes(k: usize, n: usize, batches: usize) -> Option<(usize, usize)> {
    if batches == 0 {
        return Some((0, 0)); // an empty B packs to nothing, however large K and N
    }
    let kp = k.checked_next_multiple_of(4)?;
    let np = n.checked_next_multiple_of(NR)?;
    let bytes = kp.checked_mul(np)?.checked_mul(batches)?;
    let sums = n.checked_mul(batches)?;
    (bytes <= isize::MAX as usize && sums <= isize::MAX as usize / 4).then_some((bytes, sums))
}

/// An owned packed B (what the weight cache holds for a constant B). The bytes are 64-byte
/// aligned, so every 64-byte load of the tile kernels reads exactly one cache line (a plain
/// `Vec` of this size starts 16 bytes into its mapping: every load split two lines), and they
/// live on huge pages, in the weight arena ([`crate::memory::weight_arena`]).
pub struct PackedB {
    pub k: usize,
    pub n: usize,
    pub batches: usize,
    pub signs: Signs,
    data: WeightBytes,
    colsum: ColSums,
}

/// The column sums of a packed B: computed here, or read in place from a context file.
enum ColSums {
    Owned(Vec<i32>),
    File(FileSlice<i32>),
}

impl std::ops::Deref for ColSums {
    type Target = [i32];
    fn deref(&self) -> &[i32] {
        match self {
            ColSums::Owned(v) => v,
            ColSums::File(f) => f.as_slice(),
        }
    }
}

impl PackedB {
    pub fn view(&self) -> PackedView<'_> {
        PackedView {
            k: self.k,
            n: self.n,
            batches: self.batches,
            signs: self.signs,
            data: &self.data,
            colsum: &self.colsum,
        }
    }

    /// Bytes held: the arena piece (alignment padding included) and the column sums.
    pub fn bytes(&self) -> usize {
        self.data.arena_bytes()
            + match &self.colsum {
                ColSums::Owned(v) => v.capacity() * 4,
                ColSums::File(_) => 0,
            }
    }

    /// Bytes of the packed B and its column sums (what a context file stores; what an imported
    /// weight maps).
    pub fn stored_bytes(&self) -> usize {
        self.data.len() + std::mem::size_of_val::<[i32]>(&self.colsum)
    }

    /// Whether the packed bytes lie in a mapped file.
    pub fn is_file(&self) -> bool {
        self.data.is_file()
    }

    /// The weight as a description and its byte sections (the packed bytes, then the column
    /// sums), for a context file; [`PackedB::import_parts`] reverses it.
    pub fn export_parts(&self) -> (Value, Vec<&[u8]>) {
        let meta = json!({
            "layout": LAYOUT_VERSION,
            "k": self.k,
            "n": self.n,
            "batches": self.batches,
            "signs": signs_name(self.signs),
        });
        let sums: &[i32] = &self.colsum;
        let sums = crate::os::mapped::plain_bytes(sums);
        (meta, vec![self.data.as_slice(), sums])
    }

    /// `(k, n, batches, signs)` from [`PackedB::export_parts`]'s description, validated (layout
    /// version, sizes that do not overflow), without the sections.
    pub fn described(meta: &Value) -> Result<(usize, usize, usize, Signs), String> {
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
        let (k, n, batches) = (size(obj, "k")?, size(obj, "n")?, size(obj, "batches")?);
        let name = obj
            .get("signs")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("signs", "missing or not a string".into()))?;
        let signs = [Signs::U8U8, Signs::U8S8, Signs::S8S8]
            .into_iter()
            .find(|&s| signs_name(s) == name)
            .ok_or_else(|| bad("signs", format!("'{name}' is none of u8u8, u8s8, s8s8")))?;
        checked_packed_sizes(k, n, batches)
            .ok_or_else(|| bad("k", format!("[{k}, {n}] x {batches} is too large")))?;
        Ok((k, n, batches, signs))
    }

    /// Rebuilds a weight from [`PackedB::export_parts`]'s description and its sections (the
    /// packed bytes, then the column sums: slices of a mapped file, read in place, nothing
    /// copied). Refuses, with an error naming the field, a description
    /// [`PackedB::described`] refuses, a section count other than two, a section whose length
    /// is not the one the shape gives ([`packed_sizes`]) or that is not 64-byte aligned.
    pub fn import_parts(meta: &Value, sections: Vec<FileSlice<u8>>) -> Result<PackedB, String> {
        let (k, n, batches, signs) = Self::described(meta)?;
        let (dl, cl) = checked_packed_sizes(k, n, batches)
            .ok_or_else(|| bad("k", format!("[{k}, {n}] x {batches} is too large")))?;
        let [data, sums]: [FileSlice<u8>; 2] = sections.try_into().map_err(|v: Vec<_>| {
            bad(
                "sections",
                format!("{} given, expected 2 (packed bytes, column sums)", v.len()),
            )
        })?;
        let align = crate::memory::ARENA_ALIGN;
        for (name, s, want) in [("data", &data, dl), ("colsum", &sums, cl * 4)] {
            if s.len() != want {
                return Err(bad(
                    name,
                    format!("{} bytes, [{k}, {n}] x {batches} takes {want}", s.len()),
                ));
            }
            if !s.offset().is_multiple_of(align) {
                return Err(bad(name, format!("section not {align}-byte aligned")));
            }
        }
        let colsum = FileSlice::<i32>::new(sums.map(), sums.offset(), cl).ok_or_else(|| {
            bad(
                "colsum",
                "section not an aligned i32 range of the file".into(),
            )
        })?;
        Ok(PackedB {
            k,
            n,
            batches,
            signs,
            data: WeightBytes::File(data),
            colsum: ColSums::File(colsum),
        })
    }
}

/// How a description names `signs`.
fn signs_name(s: Signs) -> &'static str {
    match s {
        Signs::U8U8 => "u8u8",
        Signs::U8S8 => "u8s8",
        Signs::S8S8 => "s8s8",
    }
}

/// The kind of weight errors name (`kernels::described`).
const KIND: &str = "QLinearMatMul";

fn bad(field: &str, what: String) -> String {
    described::bad(KIND, field, &what)
}

fn uint(obj: &Map<String, Value>, name: &str) -> Result<u64, String> {
    described::uint(KIND, obj, name)
}

fn size(obj: &Map<String, Value>, name: &str) -> Result<usize, String> {
    described::size(KIND, obj, name)
}

/// A packed B, owned elsewhere (the weight cache or per-call scratch).
#[derive(Clone, Copy)]
pub struct PackedView<'a> {
    pub k: usize,
    pub n: usize,
    pub batches: usize,
    pub signs: Signs,
    pub data: &'a [u8],
    pub colsum: &'a [i32],
}

impl<'a> PackedView<'a> {
    /// Number of panels per batch.
    pub fn panels(&self) -> usize {
        self.n.div_ceil(PANEL)
    }

    /// Panel `p` of batch `bi`: its bytes, width (multiple of 16) and real column count.
    pub fn panel(&self, bi: usize, p: usize) -> (&'a [u8], usize, usize) {
        let kp = k_padded(self.k);
        let c0 = p * PANEL;
        let cols = PANEL.min(self.n - c0);
        let width = n_padded(cols);
        let start = bi * kp * n_padded(self.n) + c0 * kp;
        (&self.data[start..start + kp * width], width, cols)
    }

    /// Checks that the buffers have the sizes the shape asks for.
    pub fn check(&self) -> Result<(), String> {
        let (d, c) = packed_sizes(self.k, self.n, self.batches);
        if self.data.len() < d || self.colsum.len() < c {
            return Err(format!(
                "packed B holds {} bytes and {} column sums, [{}, {}] x {} needs {d} and {c}",
                self.data.len(),
                self.colsum.len(),
                self.k,
                self.n,
                self.batches
            ));
        }
        Ok(())
    }
}

/// Packs `batches` row-major `[k, n]` matrices `b` into `data` and `colsum` (sizes from
/// [`packed_sizes`]; every byte and sum is written, so stale contents are fine).
pub fn pack_into(
    b: &[u8],
    k: usize,
    n: usize,
    batches: usize,
    signs: Signs,
    data: &mut [u8],
    colsum: &mut [i32],
) {
    let (dl, cl) = packed_sizes(k, n, batches);
    assert!(
        b.len() >= k * n * batches && data.len() >= dl && colsum.len() >= cl,
        "pack_into: buffers too small for [{k}, {n}] x {batches}"
    );
    let flip = if signs.flips_b() { 0x80u8 } else { 0 };
    let read = |v: u8| -> i32 {
        if signs.a_signed() {
            v as i32
        } else {
            v as i8 as i32
        }
    };
    let (kp, np) = (k_padded(k), n_padded(n));
    for bi in 0..batches {
        let src = &b[bi * k * n..(bi + 1) * k * n];
        let dst = &mut data[bi * kp * np..(bi + 1) * kp * np];
        let sums = &mut colsum[bi * n..(bi + 1) * n];
        sums.fill(0);
        for p in 0..n.div_ceil(PANEL) {
            let c0 = p * PANEL;
            let width = n_padded(PANEL.min(n - c0));
            let panel = &mut dst[c0 * kp..c0 * kp + kp * width];
            for g in 0..kp / 4 {
                let group = &mut panel[g * 4 * width..(g + 1) * 4 * width];
                for j in 0..4 {
                    let kk = 4 * g + j;
                    if kk >= k {
                        for c in 0..width {
                            group[4 * c + j] = 0;
                        }
                        continue;
                    }
                    let row = &src[kk * n..(kk + 1) * n];
                    for c in 0..width {
                        let col = c0 + c;
                        let v = if col < n { row[col] ^ flip } else { 0 };
                        group[4 * c + j] = v;
                        if col < n {
                            sums[col] = sums[col].wrapping_add(read(v));
                        }
                    }
                }
            }
        }
    }
}

/// Packs into a fresh [`PackedB`].
pub fn pack(b: &[u8], k: usize, n: usize, batches: usize, signs: Signs) -> PackedB {
    try_pack(b, k, n, batches, signs).expect("QLinearMatMul pack: out of memory")
}

/// [`pack`], or `None` when the packed buffers cannot be allocated (or their size overflows).
pub fn try_pack(b: &[u8], k: usize, n: usize, batches: usize, signs: Signs) -> Option<PackedB> {
    let (dl, cl) = checked_packed_sizes(k, n, batches)?;
    let mut data = weight_arena().try_alloc::<u8>(dl).ok()?;
    let mut colsum = crate::memory::try_vec(cl, 0i32).ok()?;
    pack_into(b, k, n, batches, signs, &mut data, &mut colsum);
    Some(PackedB {
        k,
        n,
        batches,
        signs,
        data: WeightBytes::Arena(data),
        colsum: ColSums::Owned(colsum),
    })
}
