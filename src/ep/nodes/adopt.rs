//! What every kernel that imports a packed weight from a context file does the same way
//! (`OpKernel::import_packed`; MatMulNBits, QMoE's experts, f32 MatMul / Gemm, QLinearMatMul):
//! read the stored cache key and check its op, derive the key the weight is shared under in this
//! process, and adopt the weight through the weight cache, a refusal of its description kept as
//! the error.

use std::sync::Arc;

use crate::memory::{weight_cache, CachedWeight, KeyDigest, WeightKey};
use crate::os::mapped::FileSlice;

/// The stored cache key of an export, which must be one of `op`'s: else an error saying the
/// weight cannot `into` (e.g. "be imported into MatMulNBits").
pub(crate) fn stored_key(
    key: &serde_json::Value,
    op: &str,
    into: &str,
) -> Result<WeightKey, String> {
    let stored = WeightKey::from_json(key)?;
    if stored.op != op {
        return Err(format!("a packed weight of {} cannot {into}", stored.op));
    }
    Ok(stored)
}

/// The cache key of a weight imported from `sections` whose stored key is `stored`: the stored
/// key and where each section lies (the file's device and inode, offset, length), digested with
/// this process's secret. A stored digest was keyed by the secret of the process that wrote it,
/// so it never matches a pack made here and anyone writing a file can copy it; keyed to the file
/// it came from, an import is shared only with imports of that very file (the sessions loading
/// one context file share its weights), never served to a session that loaded another file.
pub(crate) fn adopted_key(stored: &WeightKey, sections: &[FileSlice<u8>]) -> WeightKey {
    let mut d = KeyDigest::new();
    d.words(&[stored.params_hash, stored.len as u64, sections.len() as u64])
        .bytes(&stored.digest);
    for s in sections {
        let (dev, ino) = s.map().file_id();
        d.words(&[dev, ino, s.offset() as u64, s.len() as u64]);
    }
    WeightKey::from_digest(stored.op, stored.params_hash, &d, stored.len)
}

/// The weight `import` rebuilds over `sections`, shared through the weight cache under
/// [`adopted_key`] (a live entry is returned without `import` running); `file_bytes` is what the
/// weight maps of the file (the cache's stats). `Ok(None)` when the cache gave nothing; `Err`:
/// `import`'s refusal of the description.
pub(crate) fn adopt<T: Send + Sync + 'static>(
    stored: &WeightKey,
    sections: Vec<FileSlice<u8>>,
    import: impl FnOnce(Vec<FileSlice<u8>>) -> Result<T, String>,
    file_bytes: impl Fn(&T) -> usize,
) -> Result<Option<Arc<CachedWeight<T>>>, String> {
    let key = adopted_key(stored, &sections);
    let mut refused = None;
    let w = weight_cache().get_or_adopt(
        &key,
        || import(sections).map_err(|e| refused = Some(e)).ok(),
        file_bytes,
    );
    match (w, refused) {
        (Some(w), _) => Ok(Some(w)),
        (None, Some(e)) => Err(e),
        (None, None) => Ok(None),
    }
}
