//! A packed MatMulNBits weight written out and read back ([`PackedNBits::export_parts`],
//! [`PackedNBits::import_parts`]): what a context file (`ep::context`) stores so that a later
//! session maps the packed bytes read-only and uses them in place instead of packing again.
//!
//! The weight splits into a JSON description (every node parameter that shapes the layout or the
//! kernels, each group's offset and scale format, the largest scale, whether zero points exist)
//! and its byte sections: the records, then the zero points if any. Importing rebuilds the weight
//! over the sections as given, without copying them, after checking every fact of the
//! description a kernel relies on to stay inside the bytes: a description from a file is input,
//! and a corrupted or hostile one must be an error, never an out-of-bounds read. What cannot be
//! checked without reading every byte (that the codes and scales are the pack of the node's
//! weights) is the context file's to vouch for, as the model vouches for its weights.

use super::pack::{group_zp_bytes, groups, record_bytes, PackedNBits};
use super::params::NBitsParams;
use crate::kernels::described;
use crate::memory::WeightBytes;
use serde_json::{json, Map, Value};

/// Version of the packed layout (`pack.rs`: records, their scales, the zero-point bytes) that
/// [`PackedNBits::export_parts`] writes; an import of any other version is refused, so a file
/// written before a layout change is packed afresh, never misread.
pub const LAYOUT_VERSION: u64 = 1;

/// Alignment of every section's start that [`PackedNBits::import_parts`] requires (the weight
/// arena's, so the kernels see the same alignment whichever holds the bytes).
pub const SECTION_ALIGN: usize = crate::memory::ARENA_ALIGN;

impl PackedNBits {
    /// The weight as a description and its byte sections (records, then the zero points when
    /// the weight has them), for a context file; [`PackedNBits::import_parts`] reverses it.
    pub fn export_parts(&self) -> (Value, Vec<&[u8]>) {
        let p = &self.params;
        let meta = json!({
            "layout": LAYOUT_VERSION,
            "k": p.k,
            "n": p.n,
            "bits": p.bits,
            "block_size": p.block_size,
            "accuracy_level": p.accuracy_level,
            "has_zero_points": p.has_zero_points,
            "acc4_f16_scales": p.acc4_f16_scales,
            "f16_source_scales": p.f16_source_scales,
            "group_at": self.group_at,
            "f16_groups": self.f16_groups,
            // As its bits: exactly the value the overflow checks compare against.
            "scale_max_bits": self.scale_max.to_bits(),
            "zero_points": self.zero_points.is_some(),
        });
        let mut sections = vec![self.records.as_slice()];
        sections.extend(self.zero_points.as_ref().map(|z| z.as_slice()));
        (meta, sections)
    }

    /// The node parameters [`PackedNBits::export_parts`]'s description `meta` holds, validated
    /// (and its layout version checked), without the sections: what a node compares with its
    /// own before it imports.
    pub fn described_params(meta: &Value) -> Result<NBitsParams, String> {
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
        let size = |name: &str| {
            usize::try_from(uint(obj, name)?)
                .map_err(|_| bad(name, "does not fit the address space".into()))
        };
        let p = NBitsParams {
            k: size("k")?,
            n: size("n")?,
            bits: size("bits")?,
            block_size: size("block_size")?,
            accuracy_level: size("accuracy_level")?,
            has_zero_points: flag(obj, "has_zero_points")?,
            acc4_f16_scales: flag(obj, "acc4_f16_scales")?,
            f16_source_scales: flag(obj, "f16_source_scales")?,
        };
        p.validate().map_err(|e| bad("params", e))?;
        p.implied_lens()
            .ok_or_else(|| bad("params", "sizes overflow".into()))?;
        Ok(p)
    }

    /// Rebuilds a weight from [`PackedNBits::export_parts`]'s description and its sections (the
    /// records, then the zero points if the description says there are any), holding the
    /// sections as they are (a mapped file's slices stay in the file: nothing is copied).
    ///
    /// Refuses, with an error naming the field, any description the layout contradicts: params
    /// that do not validate, a layout version other than [`LAYOUT_VERSION`], a group count or a
    /// group offset other than the params and the scale formats give (each group exactly
    /// `k_blocks` records of its format, the last offset the records' length), f16 scales where
    /// the params never pack them, zero points present or absent against the params, a
    /// zero-point section of the wrong length, a section not aligned to [`SECTION_ALIGN`], a
    /// section too many or missing, a largest scale that is not a finite non-negative number.
    pub fn import_parts(meta: &Value, sections: Vec<WeightBytes>) -> Result<PackedNBits, String> {
        let p = Self::described_params(meta)?;
        let obj = meta
            .as_object()
            .ok_or_else(|| bad("description", "not a JSON object".into()))?;
        let g_count = groups(&p);

        let flags = array(obj, "f16_groups")?;
        if flags.len() != g_count {
            return Err(bad(
                "f16_groups",
                format!("{} entries, the params give {g_count} groups", flags.len()),
            ));
        }
        let f16_groups: Vec<bool> = flags
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_bool()
                    .ok_or_else(|| bad("f16_groups", format!("entry {i} is not a boolean")))
            })
            .collect::<Result<_, _>>()?;
        if !(p.f16_scales() || p.f16_source_scales) {
            if let Some(g) = f16_groups.iter().position(|&h| h) {
                return Err(bad(
                    "f16_groups",
                    format!("group {g} holds f16 scales, which these params never pack"),
                ));
            }
        }

        let at = array(obj, "group_at")?;
        if at.len() != g_count + 1 {
            return Err(bad(
                "group_at",
                format!(
                    "{} entries, expected {} (groups + 1)",
                    at.len(),
                    g_count + 1
                ),
            ));
        }
        let mut group_at: Vec<usize> = Vec::new();
        group_at
            .try_reserve_exact(g_count + 1)
            .map_err(|e| bad("group_at", e.to_string()))?;
        let mut want = 0usize;
        for (i, v) in at.iter().enumerate() {
            let got = v.as_u64().and_then(|x| usize::try_from(x).ok());
            if got != Some(want) {
                return Err(bad(
                    "group_at",
                    format!("entry {i} is {v}, the layout gives {want}"),
                ));
            }
            group_at.push(want);
            if let Some(&half) = f16_groups.get(i) {
                want = p
                    .k_blocks()
                    .checked_mul(record_bytes(p.block_size, half))
                    .and_then(|g| want.checked_add(g))
                    .ok_or_else(|| bad("group_at", format!("group {i} ends past usize")))?;
            }
        }

        let has_zps = flag(obj, "zero_points")?;
        if has_zps != p.has_zero_points {
            return Err(bad(
                "zero_points",
                format!("{has_zps} but has_zero_points is {}", p.has_zero_points),
            ));
        }
        let want_sections = 1 + usize::from(has_zps);
        if sections.len() != want_sections {
            return Err(bad(
                "sections",
                format!(
                    "{} given, expected {want_sections} (records{})",
                    sections.len(),
                    if has_zps { ", zero points" } else { "" }
                ),
            ));
        }
        let mut sections = sections.into_iter();
        let records = sections
            .next()
            .ok_or_else(|| bad("sections", "no records".into()))?;
        let records_len = group_at[g_count];
        if records.len() != records_len {
            return Err(bad(
                "records",
                format!("{} bytes, the groups take {records_len}", records.len()),
            ));
        }
        aligned("records", &records)?;
        let zero_points = match sections.next() {
            Some(z) => {
                let want = g_count
                    .checked_mul(group_zp_bytes(&p))
                    .ok_or_else(|| bad("zero points", "size overflows".into()))?;
                if z.len() != want {
                    return Err(bad(
                        "zero points",
                        format!("{} bytes, the groups take {want}", z.len()),
                    ));
                }
                aligned("zero points", &z)?;
                Some(z)
            }
            None => None,
        };

        let bits = uint(obj, "scale_max_bits")?;
        let scale_max = u32::try_from(bits)
            .map(f32::from_bits)
            .map_err(|_| bad("scale_max_bits", format!("{bits} is not a 32-bit pattern")))?;
        // Every output's magnitude is bounded through it (`nonfinite::cannot_overflow`); a packed
        // weight never has non-finite scales (hostile scales are not packed).
        if !(scale_max.is_finite() && scale_max >= 0.0) {
            return Err(bad(
                "scale_max_bits",
                format!("{scale_max} is not a finite non-negative scale"),
            ));
        }
        Ok(PackedNBits {
            params: p,
            records,
            group_at,
            f16_groups,
            zero_points,
            scale_max,
        })
    }
}

/// The kind of weight errors name (`kernels::described`).
const KIND: &str = "MatMulNBits";

fn bad(field: &str, what: String) -> String {
    described::bad(KIND, field, &what)
}

fn uint(obj: &Map<String, Value>, name: &str) -> Result<u64, String> {
    described::uint(KIND, obj, name)
}

fn flag(obj: &Map<String, Value>, name: &str) -> Result<bool, String> {
    described::flag(KIND, obj, name)
}

fn array<'a>(obj: &'a Map<String, Value>, name: &str) -> Result<&'a Vec<Value>, String> {
    described::array(KIND, obj, name)
}

/// Whether a section starts on a [`SECTION_ALIGN`] boundary (the kernels' 64-byte loads).
fn aligned(name: &str, b: &WeightBytes) -> Result<(), String> {
    if !(b.as_ptr() as usize).is_multiple_of(SECTION_ALIGN) {
        return Err(bad(
            name,
            format!("section not {SECTION_ALIGN}-byte aligned"),
        ));
    }
    Ok(())
}
