//! Test support shared by the node kernels' unit tests of context files (`export_packed` /
//! `import_packed` of the kernels that pack weights): sections written to a temporary file as
//! a context file lays them out, and deterministic pseudo-random data.

/// A file under the temp dir, removed on drop.
pub(crate) struct TempFile(pub(crate) std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `sections` written to a fresh file named after `name` at 4096-aligned offsets (after a
/// 4096-byte header), with each section's (offset, length).
pub(crate) fn write_sections(name: &str, sections: &[&[u8]]) -> (TempFile, Vec<(usize, usize)>) {
    static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("rcpu-node-{name}-{}-{seq}", std::process::id()));
    let mut bytes = vec![0u8; 4096];
    let mut at = Vec::new();
    for s in sections {
        bytes.resize(bytes.len().next_multiple_of(4096), 0);
        at.push((bytes.len(), s.len()));
        bytes.extend_from_slice(s);
    }
    std::fs::write(&path, &bytes).unwrap();
    (TempFile(path), at)
}

/// The import of `e`, its sections (at `at`, from [`write_sections`]) mapped from `map`.
pub(crate) fn import_of(
    e: &crate::ep::op::PackedExport<'_>,
    map: &std::sync::Arc<crate::os::mapped::FileMap>,
    at: &[(usize, usize)],
) -> crate::ep::op::PackedImport {
    crate::ep::op::PackedImport {
        key: e.key.clone(),
        meta: e.meta.clone(),
        sections: at
            .iter()
            .map(|&(o, l)| crate::os::mapped::FileSlice::new(map, o, l).unwrap())
            .collect(),
    }
}

/// Deterministic pseudo-random values (a 64-bit LCG's high bits).
pub(crate) struct Lcg(pub(crate) u64);

impl Lcg {
    pub(crate) fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }

    pub(crate) fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * (self.next() as f32 / (1u64 << 31) as f32)
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}
