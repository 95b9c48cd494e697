//! Fast, unkeyed 64-bit hashes (four multiply-xorshift lanes, splitmix64 finaliser).
//!
//! - [`params_hash`] mixes an op's layout parameters (shapes, block size, flags) into
//!   `WeightKey::params_hash`. The cache key's source identity is NOT this hash: it is the keyed
//!   BLAKE3 digest of `key_digest.rs`, which a crafted model cannot collide with.
//! - [`content_hash`] is no longer part of any cache key. It stays as the weak hash that
//!   `tests/memory/memory_weight_cache.rs` collides on purpose (its steps are invertible) to show a forged
//!   weight is still not served another weight's packed copy. Do not use it for anything an
//!   attacker controls.

const K0: u64 = 0x9E37_79B9_7F4A_7C15;
const K1: u64 = 0xC2B2_AE3D_27D4_EB4F;
const K2: u64 = 0x1656_67B1_9E37_79F9;
const K3: u64 = 0xD6E8_FEB8_6659_FD93;

#[inline]
fn mix(h: u64, w: u64, k: u64) -> u64 {
    let x = (h ^ w).wrapping_mul(k);
    x ^ (x >> 29)
}

#[inline]
fn word(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(w)
}

/// Final avalanche (the splitmix64 finalizer).
#[inline]
fn finish(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Hash of `bytes` (content and length).
pub fn content_hash(bytes: &[u8]) -> u64 {
    let mut h = [K0, K1, K2, K3];
    let mut chunks = bytes.chunks_exact(32);
    for c in &mut chunks {
        h[0] = mix(h[0], word(&c[0..8]), K1);
        h[1] = mix(h[1], word(&c[8..16]), K2);
        h[2] = mix(h[2], word(&c[16..24]), K3);
        h[3] = mix(h[3], word(&c[24..32]), K0);
    }
    let mut acc = h[0] ^ h[1].rotate_left(17) ^ h[2].rotate_left(31) ^ h[3].rotate_left(47);
    for w in chunks.remainder().chunks(8) {
        acc = mix(acc, word(w), K1);
    }
    finish(mix(acc, bytes.len() as u64, K2))
}

/// Hash of a few parameter words (op attributes, shapes, block size, ...), for `WeightKey::params_hash`.
pub fn params_hash(params: &[u64]) -> u64 {
    let mut acc = K3;
    for &p in params {
        acc = mix(acc, p, K0);
    }
    finish(mix(acc, params.len() as u64, K1))
}
