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

/// Bytes of one piece of a long part (see [`KeyDigest::bytes`]).
const PIECE_BYTES: usize = 16 << 20;

/// Threads that digest a long part's pieces: the CPUs the process may use, at most this many.
const PIECE_THREADS_MAX: usize = 8;

/// Incremental keyed digest over parameter words and byte parts (each part length-prefixed,
/// so part boundaries are part of what is digested).
///
/// A part of at least two pieces ([`PIECE_BYTES`], 16 MiB) is digested as its pieces: each
/// piece's own keyed digest (its index first), on several threads at once, then those digests
/// in order into the part's place. The length prefix says which form a part took, and the
/// pieces' digests are as hard to collide as the whole's (a keyed hash of keyed hashes), so the
/// key stays unforgeable. What it buys is load time: BLAKE3 on one core digests ~4.5 GB/s here,
/// so a model's weights (620 MB of codes and 150 MB of scales at Llama-3.2-1B shapes; ~5 GB at
/// 8B) cost their session creation ~0.2 s (~1.5 s) on one thread; Llama-3.2-1B's took 212 ms
/// on one and 114 ms on two (the development VM, the digest alone). The result does not
/// depend on how many threads ran ([`KeyDigest::bytes_on`]).
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
        self.bytes_part(b, None)
    }

    /// [`KeyDigest::bytes`] with a long part's pieces on at most `threads` threads (the same
    /// digest whatever the count).
    pub fn bytes_on(&mut self, b: &[u8], threads: usize) -> &mut Self {
        self.bytes_part(b, Some(threads))
    }

    fn bytes_part(&mut self, b: &[u8], threads: Option<usize>) -> &mut Self {
        self.0.update(&(b.len() as u64).to_le_bytes());
        self.part(b.len(), threads, |h, r| {
            h.update(&b[r]);
        })
    }

    /// Adds one f32 part as its little-endian bytes (its length in bytes first), without
    /// allocating a byte copy: the same digest as [`KeyDigest::bytes`] of those bytes.
    pub fn f32s(&mut self, v: &[f32]) -> &mut Self {
        self.f32s_part(v, None)
    }

    /// [`KeyDigest::f32s`] on at most `threads` threads.
    pub fn f32s_on(&mut self, v: &[f32], threads: usize) -> &mut Self {
        self.f32s_part(v, Some(threads))
    }

    fn f32s_part(&mut self, v: &[f32], threads: Option<usize>) -> &mut Self {
        let len = v.len().saturating_mul(4);
        self.0.update(&(len as u64).to_le_bytes());
        // Piece boundaries are multiples of 4 bytes (PIECE_BYTES is), so each range is whole
        // floats.
        self.part(len, threads, |h, r| le_bytes(h, &v[r.start / 4..r.end / 4]))
    }

    /// Digests a part of `len` bytes whose byte range `r` `feed` adds to a hasher: whole when
    /// short, else as its pieces (see the type's documentation) on `threads` threads at most
    /// (`None`: [`piece_threads`], asked only for a long part: it reads the process's CPU
    /// limits, and a session's many short parts need no threads).
    fn part(
        &mut self,
        len: usize,
        threads: Option<usize>,
        feed: impl Fn(&mut blake3::Hasher, std::ops::Range<usize>) + Sync,
    ) -> &mut Self {
        if len < 2 * PIECE_BYTES {
            feed(&mut self.0, 0..len);
            return self;
        }
        let threads = threads.unwrap_or_else(piece_threads);
        let pieces = len.div_ceil(PIECE_BYTES);
        let piece = |i: usize| {
            let mut h = blake3::Hasher::new_keyed(&KEY);
            h.update(&(i as u64).to_le_bytes());
            feed(&mut h, i * PIECE_BYTES..((i + 1) * PIECE_BYTES).min(len));
            *h.finalize().as_bytes()
        };
        // One digest a piece (32 bytes per 16 MiB), each written by the thread that made it.
        let mut digests = vec![[0u8; 32]; pieces];
        let per = pieces.div_ceil(threads.clamp(1, pieces));
        // Shares whose thread could not be made: digested here after the others.
        let mut orphans = Vec::new();
        std::thread::scope(|scope| {
            let mut shares = digests.chunks_mut(per).enumerate().peekable();
            while let Some((k, share)) = shares.next() {
                let mut run = move || {
                    for (j, d) in share.iter_mut().enumerate() {
                        *d = piece(k * per + j);
                    }
                };
                if shares.peek().is_none() {
                    // The last share runs on the calling thread.
                    run();
                } else if let Err(e) = std::thread::Builder::new().spawn_scoped(scope, run) {
                    log::debug!("weight digest: no helper thread ({e}); digesting on the caller");
                    orphans.push(k);
                }
            }
        });
        for k in orphans {
            for (j, d) in digests
                .chunks_mut(per)
                .nth(k)
                .into_iter()
                .flatten()
                .enumerate()
            {
                *d = piece(k * per + j);
            }
        }
        self.0.update(b"pieces");
        for d in &digests {
            self.0.update(d);
        }
        self
    }

    pub fn finish(&self) -> [u8; 32] {
        *self.0.finalize().as_bytes()
    }
}

/// Feeds `v`'s little-endian bytes to `h` 16 KiB at a time, so BLAKE3 hashes whole 1 KiB chunks
/// side by side (its SIMD path; 1 KiB updates, never aligned to its chunks after the length
/// prefix, went one 64-byte block at a time: 5.6% of a Llama-3.2-1B session creation's samples
/// against 4.7% for its codes, eight times as many bytes).
fn le_bytes(h: &mut blake3::Hasher, v: &[f32]) {
    let mut buf = [0u8; 16384];
    for c in v.chunks(4096) {
        for (o, x) in buf.chunks_exact_mut(4).zip(c) {
            o.copy_from_slice(&x.to_le_bytes());
        }
        h.update(&buf[..c.len() * 4]);
    }
}

/// Threads for a long part's pieces.
fn piece_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(PIECE_THREADS_MAX)
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

    /// A long part (two pieces and more) digests alike on any number of threads, and its
    /// digest moves with any byte of any piece; as f32s it is the digest of its bytes. Seen
    /// failing with each share's pieces numbered from 0 (two threads and more) and with the
    /// calling thread's share left undone.
    #[test]
    fn long_parts_digest_alike_on_any_thread_count() {
        let len = 3 * PIECE_BYTES + 12;
        let mut b: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let digest = |b: &[u8], threads: usize| {
            let mut d = KeyDigest::new();
            d.words(&[1, 2]).bytes_on(b, threads).words(&[3]);
            d.finish()
        };
        let want = digest(&b, 1);
        for t in [2, 3, 4, 8] {
            assert_eq!(digest(&b, t), want, "{t} threads");
        }
        for at in [0, PIECE_BYTES - 1, 2 * PIECE_BYTES + 7, len - 1] {
            b[at] ^= 1;
            assert_ne!(digest(&b, 3), want, "byte {at} changed");
            b[at] ^= 1;
        }
        // Two equal pieces swapped with a third: the pieces' order counts.
        let mut c = vec![0u8; len];
        c[..PIECE_BYTES].fill(1);
        let d0 = digest(&c, 2);
        c[..PIECE_BYTES].fill(0);
        c[PIECE_BYTES..2 * PIECE_BYTES].fill(1);
        assert_ne!(digest(&c, 2), d0, "pieces swapped");
        // As f32s: the digest of their little-endian bytes, whatever the threads.
        let v: Vec<f32> = (0..len / 4).map(|i| i as f32 * 0.25).collect();
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut a = KeyDigest::new();
        a.f32s_on(&v, 3);
        let mut e = KeyDigest::new();
        e.bytes_on(&bytes, 1);
        assert_eq!(a.finish(), e.finish());
    }
}
