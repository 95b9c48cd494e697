//! The context file: its layout, the writer and the checked, mapped reader.
//!
//! ```text
//! [0, 64)        preamble: magic "RCPUCTX\0", format (u32 LE), 0 (u32), directory offset (u64),
//!                directory length (u64), directory CRC-32 (u32), zeros
//! [4096, ...)    sections, each starting on a 4096-byte boundary (a page: mapped in place, a
//!                packed weight keeps the 64-byte alignment its kernels load at)
//! directory      JSON after the last section: rcpu's version, the instruction-set level and
//!                packing options the file was made for, each section's (offset, length,
//!                CRC-32), and per partition its nodes (`ep::spec`) and its kernels' exports
//! ```
//!
//! The reader checks everything before any kernel reads a byte: the preamble, that the directory
//! and every section lie inside the file (checked arithmetic), the directory's and every
//! section's CRC-32, and the identity (version, level, options) against the session's.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use serde_json::{json, Value};

use crate::abi::status::{Error, Result};
use crate::abi::tensor::Tensor;
use crate::ep::op::{PackedExport, PackedImport};
use crate::ep::spec::PartitionSpec;
use crate::os::mapped::{Advice, FileMap, FileSlice};

const MAGIC: &[u8; 8] = b"RCPUCTX\0";
/// The layout version; any change to this file's layout or to a packed layout a kernel exports
/// raises it (older files are then refused, never misread).
pub const FORMAT: u32 = 1;
const PREAMBLE: usize = 64;
/// Sections start on page boundaries.
pub const ALIGN: u64 = 4096;

/// What a context file was made for; a file is used only by a session that matches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub rcpu_version: String,
    /// The kernels' instruction-set level (`kernels::isa::Isa::name`).
    pub isa: String,
    /// Provider option `acc4_scales` (it shapes the packed level-4 weights).
    pub acc4_scales: String,
}

impl Identity {
    /// This build on this machine, with a session's `acc4_scales`.
    pub fn current(acc4_f16_scales: bool) -> Identity {
        Identity {
            rcpu_version: crate::ep::VERSION.to_string(),
            isa: crate::kernels::isa::Isa::get().name().to_string(),
            acc4_scales: if acc4_f16_scales { "f16" } else { "f32" }.to_string(),
        }
    }
}

/// One partition to write: its name (the fused node's), its nodes and its kernels' exports
/// (node index in `spec`, export).
pub struct PartitionOut<'p> {
    pub name: String,
    pub spec: &'p PartitionSpec<'p>,
    pub exports: Vec<(usize, PackedExport<'p>)>,
    /// (gather node, MatMulNBits node) pairs whose table is the weight's codes: the gather's
    /// data (input 0) is covered by the weight's export.
    pub tied: Vec<(usize, usize)>,
}

fn io_err(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::fail(format!("rcpu context file {}: {what}: {e}", path.display()))
}

/// Writes the context file for `parts` at `path` (under a temporary name, then renamed).
/// Returns the file's size.
pub fn write(path: &Path, id: &Identity, parts: &[PartitionOut<'_>]) -> Result<u64> {
    let tmp = path.with_extension(format!("rcpu.tmp{}", std::process::id()));
    let r = write_to(&tmp, id, parts).and_then(|n| {
        std::fs::rename(&tmp, path).map_err(|e| io_err(path, "cannot rename into place", e))?;
        Ok(n)
    });
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

struct SectionWriter<W: Write + Seek> {
    out: W,
    at: u64,
    table: Vec<Value>,
}

impl<W: Write + Seek> SectionWriter<W> {
    fn pad_to(&mut self, to: u64) -> std::io::Result<()> {
        const ZEROS: [u8; 4096] = [0; 4096];
        while self.at < to {
            let n = usize::try_from((to - self.at).min(ZEROS.len() as u64)).unwrap_or(0);
            self.out.write_all(&ZEROS[..n])?;
            self.at += n as u64;
        }
        Ok(())
    }

    /// Appends one section (page-aligned); returns its index.
    fn section(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let start = self.at.div_ceil(ALIGN) * ALIGN;
        self.pad_to(start)?;
        self.out.write_all(bytes)?;
        self.at += bytes.len() as u64;
        self.table
            .push(json!([start, bytes.len(), crc32fast::hash(bytes)]));
        Ok(self.table.len() - 1)
    }
}

fn write_to(path: &Path, id: &Identity, parts: &[PartitionOut<'_>]) -> Result<u64> {
    let file = File::create(path).map_err(|e| io_err(path, "cannot create", e))?;
    let mut w = SectionWriter {
        out: BufWriter::with_capacity(8 << 20, file),
        at: 0,
        table: Vec::new(),
    };
    let e = |e| io_err(path, "cannot write", e);
    w.pad_to(ALIGN).map_err(e)?;
    // Constants by name: one section however many partitions read them.
    let mut const_section: HashMap<String, usize> = HashMap::new();
    let mut partitions = serde_json::Map::new();
    for p in parts {
        // A constant is written unless every node input that reads it is covered by its
        // kernel's export.
        let exported = |node: usize| p.exports.iter().any(|(n, _)| *n == node);
        let covered = |node: usize, input: usize| {
            p.exports
                .iter()
                .any(|(n, x)| *n == node && x.covers.contains(&input))
                || (input == 0 && p.tied.iter().any(|&(g, m)| g == node && exported(m)))
        };
        let mut needed: Vec<&str> = Vec::new();
        for (ni, n) in p.spec.nodes.iter().enumerate() {
            for (i, v) in n.inputs.iter().enumerate() {
                if let Some(v) = v {
                    if v.is_constant() && !covered(ni, i) && !needed.contains(&v.name.as_str()) {
                        needed.push(&v.name);
                    }
                }
            }
        }
        for name in needed {
            if const_section.contains_key(name) {
                continue;
            }
            let t = p
                .spec
                .nodes
                .iter()
                .flat_map(|n| n.inputs.iter().flatten())
                .find(|v| v.name == name)
                .and_then(|v| v.constant_value())
                .ok_or_else(|| Error::fail(format!("constant '{name}' has no value to write")))?;
            let s = w.section(t.all_bytes()?).map_err(e)?;
            const_section.insert(name.to_string(), s);
        }
        let mut exports = Vec::with_capacity(p.exports.len());
        for (node, x) in &p.exports {
            let mut secs = Vec::with_capacity(x.sections.len());
            for b in &x.sections {
                secs.push(w.section(b).map_err(e)?);
            }
            exports.push(json!({
                "node": node,
                "covers": x.covers,
                "key": x.key,
                "meta": x.meta,
                "sections": secs,
            }));
        }
        let spec = p.spec.to_json(&|name| const_section.get(name).copied());
        let tied: Vec<_> = p.tied.iter().filter(|(_, m)| exported(*m)).collect();
        partitions.insert(
            p.name.clone(),
            json!({"spec": spec, "exports": exports, "tied": tied}),
        );
    }
    let dir = json!({
        "rcpu_version": id.rcpu_version,
        "isa": id.isa,
        "acc4_scales": id.acc4_scales,
        "sections": w.table,
        "partitions": partitions,
    });
    let dir = serde_json::to_vec(&dir).map_err(|x| Error::fail(format!("directory: {x}")))?;
    let dir_at = w.at;
    w.out.write_all(&dir).map_err(e)?;
    let end = dir_at + dir.len() as u64;
    let mut pre = [0u8; PREAMBLE];
    pre[..8].copy_from_slice(MAGIC);
    pre[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    pre[16..24].copy_from_slice(&dir_at.to_le_bytes());
    pre[24..32].copy_from_slice(&(dir.len() as u64).to_le_bytes());
    pre[32..36].copy_from_slice(&crc32fast::hash(&dir).to_le_bytes());
    w.out.seek(SeekFrom::Start(0)).map_err(e)?;
    w.out.write_all(&pre).map_err(e)?;
    let file = w
        .out
        .into_inner()
        .map_err(|x| io_err(path, "cannot write", x.into_error()))?;
    file.sync_all()
        .map_err(|x| io_err(path, "cannot sync", x))?;
    Ok(end)
}

/// A mapped, checked context file.
pub struct ContextFile {
    path: PathBuf,
    map: Arc<FileMap>,
    /// What the file says it was made for.
    identity: Identity,
    /// (offset, length) of each section, all inside the file.
    sections: Vec<(usize, usize)>,
    partitions: serde_json::Map<String, Value>,
}

/// A partition read from a context file: its nodes (constants are views of the mapping) and
/// its kernels' imports by node index (the inputs each covers, the import).
pub struct LoadedPartition<'f> {
    pub spec: PartitionSpec<'f>,
    pub imports: HashMap<usize, (Vec<usize>, PackedImport)>,
    /// (gather node, MatMulNBits node) pairs whose table is the weight's codes.
    pub tied: Vec<(usize, usize)>,
}

/// Files open in this process, by path and identity (device, inode, size, mtime): sessions and
/// partitions on one file share its mapping and its checks.
type OpenKey = (PathBuf, u64, u64, u64, i64, i64);
static OPEN: Mutex<Vec<(OpenKey, Weak<ContextFile>)>> = Mutex::new(Vec::new());

fn open_key(path: &Path) -> Result<OpenKey> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).map_err(|e| io_err(path, "cannot open", e))?;
    Ok((
        path.to_path_buf(),
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
    ))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

impl ContextFile {
    /// Maps and checks the file at `path` for a session of identity `want` (shared with every
    /// other user of the same file in this process).
    pub fn open(path: &Path, want: &Identity) -> Result<Arc<ContextFile>> {
        let key = open_key(path)?;
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|(_, w)| w.strong_count() > 0);
        let hit = open
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, w)| w.upgrade());
        let f = match hit {
            Some(f) => f,
            None => {
                let f = Arc::new(Self::map_and_check(path)?);
                open.push((key, Arc::downgrade(&f)));
                f
            }
        };
        drop(open);
        f.check_identity(want)?;
        Ok(f)
    }

    fn bad(path: &Path, what: impl std::fmt::Display) -> Error {
        Error::invalid_argument(format!(
            "rcpu context file {}: {what}; recreate the context model from the original model",
            path.display()
        ))
    }

    fn map_and_check(path: &Path) -> Result<ContextFile> {
        let map = Arc::new(FileMap::open(path).map_err(|e| io_err(path, "cannot map", e))?);
        // Decode streams every packed weight each token: huge pages where the kernel maps file
        // pages that way (fewer TLB misses), and the whole file read ahead now, since the
        // checks below read all of it anyway. Both are advice: refused, nothing changes.
        map.advise(0, map.len(), Advice::HugePage);
        map.advise(0, map.len(), Advice::WillNeed);
        let b = map.bytes();
        let bad = |what: String| Self::bad(path, what);
        if b.len() < PREAMBLE || &b[..8] != MAGIC {
            return Err(bad("not an rcpu context file (no RCPUCTX header)".into()));
        }
        let format = u32_at(b, 8);
        if format != FORMAT {
            return Err(bad(format!(
                "format {format}, this rcpu reads format {FORMAT}"
            )));
        }
        let (dir_at, dir_len) = (u64_at(b, 16), u64_at(b, 24));
        let dir_range = usize::try_from(dir_at)
            .ok()
            .zip(usize::try_from(dir_len).ok())
            .and_then(|(a, l)| Some(a..a.checked_add(l)?))
            .filter(|r| r.end <= b.len() && r.start >= PREAMBLE);
        let Some(dir_range) = dir_range else {
            return Err(bad(format!(
                "directory at {dir_at} (+{dir_len}) lies outside the file's {} bytes \
                 (truncated?)",
                b.len()
            )));
        };
        let dir = &b[dir_range.clone()];
        if crc32fast::hash(dir) != u32_at(b, 32) {
            return Err(bad(
                "the directory's checksum does not match (corrupted)".into()
            ));
        }
        let dir: Value = serde_json::from_slice(dir).map_err(|e| bad(format!("directory: {e}")))?;
        let mut sections = Vec::new();
        let table = dir
            .get("sections")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("directory has no section table".into()))?;
        for (i, s) in table.iter().enumerate() {
            let field = |k: usize| s.get(k).and_then(Value::as_u64);
            let (Some(off), Some(len), Some(crc)) = (field(0), field(1), field(2)) else {
                return Err(bad(format!("section {i}: bad entry {s}")));
            };
            let range = usize::try_from(off)
                .ok()
                .zip(usize::try_from(len).ok())
                .and_then(|(o, l)| Some(o..o.checked_add(l)?))
                .filter(|r| r.start >= PREAMBLE && r.end <= dir_range.start);
            let Some(range) = range.filter(|_| off % ALIGN == 0) else {
                return Err(bad(format!(
                    "section {i} at {off} (+{len}) is misaligned or lies outside the file's \
                     sections (truncated?)"
                )));
            };
            if u64::from(crc32fast::hash(&b[range.clone()])) != crc {
                return Err(bad(format!(
                    "section {i}'s checksum does not match (corrupted)"
                )));
            }
            sections.push((range.start, range.len()));
        }
        let partitions = dir
            .get("partitions")
            .and_then(Value::as_object)
            .cloned()
            .ok_or_else(|| bad("directory has no partitions".into()))?;
        let field = |k: &str| dir[k].as_str().unwrap_or("(none)").to_string();
        Ok(ContextFile {
            path: path.to_path_buf(),
            map,
            identity: Identity {
                rcpu_version: field("rcpu_version"),
                isa: field("isa"),
                acc4_scales: field("acc4_scales"),
            },
            sections,
            partitions,
        })
    }

    fn check_identity(&self, want: &Identity) -> Result<()> {
        let id = &self.identity;
        let fields = [
            ("rcpu version", &want.rcpu_version, &id.rcpu_version),
            ("instruction-set level", &want.isa, &id.isa),
            ("acc4_scales", &want.acc4_scales, &id.acc4_scales),
        ];
        for (what, want, got) in fields {
            if got != want {
                return Err(Self::bad(
                    &self.path,
                    format!("made for {what} {got}, this session has {want}"),
                ));
            }
        }
        Ok(())
    }

    /// The mapping (constants of a partition are views of it).
    pub fn map(&self) -> &Arc<FileMap> {
        &self.map
    }

    /// The path the file was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the file (mapped).
    pub fn len(&self) -> usize {
        self.map.bytes().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn section(&self, i: usize) -> Result<(usize, usize)> {
        self.sections
            .get(i)
            .copied()
            .ok_or_else(|| Self::bad(&self.path, format!("no section {i}")))
    }

    /// Partition `name`: its nodes over views of the mapping and its kernels' imports.
    pub fn partition(&self, name: &str) -> Result<LoadedPartition<'_>> {
        let p = self
            .partitions
            .get(name)
            .ok_or_else(|| Self::bad(&self.path, format!("no partition '{name}'")))?;
        let bytes = self.map.bytes();
        let spec = PartitionSpec::from_json(&p["spec"], &|i, elem, shape| {
            let (off, len) = self.section(i)?;
            Tensor::from_mapped(&bytes[off..off + len], elem, shape.to_vec())
        })
        .map_err(|e| e.context(format!("rcpu context file {}", self.path.display())))?;
        let mut imports = HashMap::new();
        for x in p["exports"].as_array().into_iter().flatten() {
            let bad = |what: &str| Self::bad(&self.path, format!("partition '{name}': {what}"));
            let node = x["node"]
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n < spec.nodes.len())
                .ok_or_else(|| bad("an export names no node"))?;
            let covers = x["covers"]
                .as_array()
                .ok_or_else(|| bad("an export has no input list"))?
                .iter()
                .map(|c| c.as_u64().and_then(|c| usize::try_from(c).ok()))
                .collect::<Option<Vec<usize>>>()
                .ok_or_else(|| bad("an export's inputs are not indices"))?;
            let mut sections = Vec::new();
            for s in x["sections"].as_array().into_iter().flatten() {
                let i = s
                    .as_u64()
                    .and_then(|s| usize::try_from(s).ok())
                    .ok_or_else(|| bad("an export's section is not an index"))?;
                let (off, len) = self.section(i)?;
                sections.push(
                    FileSlice::new(&self.map, off, len)
                        .ok_or_else(|| bad("an export's section is misaligned"))?,
                );
            }
            let imp = PackedImport {
                key: x["key"].clone(),
                meta: x["meta"].clone(),
                sections,
            };
            if imports.insert(node, (covers, imp)).is_some() {
                return Err(bad("two exports for one node"));
            }
        }
        let mut tied = Vec::new();
        for t in p["tied"].as_array().into_iter().flatten() {
            let idx = |v: &Value| {
                v.as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|&n| n < spec.nodes.len())
            };
            match (idx(&t[0]), idx(&t[1])) {
                (Some(g), Some(m)) if imports.contains_key(&m) => tied.push((g, m)),
                _ => {
                    return Err(Self::bad(
                        &self.path,
                        format!("partition '{name}': a bad tied table {t}"),
                    ))
                }
            }
        }
        Ok(LoadedPartition {
            spec,
            imports,
            tied,
        })
    }
}
