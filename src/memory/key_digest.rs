//! The keyed digest that identifies a cached weight's source bytes.
//!
//! The weight cache is process-wide: sessions of different tenants share it, so its key must not
//! be forgeable. A fast unkeyed 64-bit hash ([`super::content_hash`]) is easy to collide on
//! purpose (its mixing steps are invertible), and a crafted model could then be served another
//! tenant's packed weights. The key therefore holds a 256-bit BLAKE3 keyed hash, the key drawn
//! at random once per process and never exposed: finding two inputs with one digest needs the
//! key, or about 2^128 work.

use std::hash::{BuildHasher, Hasher};
use std::sync::LazyLock;

/// The per-process secret key.
static KEY: LazyLock<[u8; 32]> = LazyLock::new(random_key);

fn random_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    let from_os = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut key));
    // Mixed in either way (and the only source where /dev/urandom is unreadable): std's
    // `RandomState`, seeded from the OS's randomness.
    for (i, chunk) in key.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(i);
        h.write_u32(std::process::id());
        let w = h.finish().to_le_bytes();
        for (k, x) in chunk.iter_mut().zip(w) {
            *k = if from_os.is_ok() { *k ^ x } else { x };
        }
    }
    key
}

/// Incremental keyed digest over parameter words and byte parts (each part length-prefixed,
/// so part boundaries are part of what is digested).
pub struct KeyDigest(blake3::Hasher);

impl KeyDigest {
    pub fn new() -> Self {
        KeyDigest(blake3::Hasher::new_keyed(&KEY))
    }

    /// Adds parameter words (their count first).
    pub fn words(&mut self, w: &[u64]) -> &mut Self {
        self.0.update(&(w.len() as u64).to_le_bytes());
        for x in w {
            self.0.update(&x.to_le_bytes());
        }
        self
    }

    /// Adds one byte part (its length first).
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.update(&(b.len() as u64).to_le_bytes());
        self.0.update(b);
        self
    }

    /// Adds one f32 part as its little-endian bytes (its length in bytes first), without
    /// allocating a byte copy: 16 KiB at a time, so BLAKE3 hashes whole 1 KiB chunks side by
    /// side (its SIMD path; a 1 KiB update, never aligned to its chunks after the length
    /// prefix, went one 64-byte block at a time: 5.6% of a Llama-3.2-1B session creation's
    /// samples against 4.7% for B's bytes, eight times as many).
    pub fn f32s(&mut self, v: &[f32]) -> &mut Self {
        self.0.update(&((v.len() as u64) * 4).to_le_bytes());
        let mut buf = [0u8; 16384];
        for c in v.chunks(4096) {
            for (o, x) in buf.chunks_exact_mut(4).zip(c) {
                o.copy_from_slice(&x.to_le_bytes());
            }
            self.0.update(&buf[..c.len() * 4]);
        }
        self
    }

    pub fn finish(&self) -> [u8; 32] {
        *self.0.finalize().as_bytes()
    }
}

impl Default for KeyDigest {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An f32 part digests as its little-endian bytes would, whatever its length against the
    /// 16 KiB staging buffer. Seen failing with the last partial piece dropped and with each
    /// piece staged from the first 4096 values.
    #[test]
    fn f32s_digest_as_their_bytes() {
        for len in [0usize, 1, 255, 256, 4095, 4096, 4097, 10000] {
            let v: Vec<f32> = (0..len).map(|i| i as f32 * 0.37 - 11.0).collect();
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            let mut a = KeyDigest::new();
            let mut b = KeyDigest::new();
            a.words(&[7]).f32s(&v);
            b.words(&[7]).bytes(&bytes);
            assert_eq!(a.finish(), b.finish(), "len {len}");
        }
    }
}
