//! `GovernedWeightCache`: prepacked weights shared across sessions, bounded by a governor.
//!
//! `get_or_pack` reserves the predicted bytes before packing; a decline returns `None` and the caller uses
//! the unpacked path (identical results, slower). After packing, the grant is settled to the bytes the
//! packed object really holds (`live_bytes` is measured, not predicted). The map keeps only a `Weak`, so the
//! packed copy lives exactly as long as some session holds its `Arc`; when the last `Arc` drops the entry
//! is removed and its grant released (after the packed data is freed). Concurrent requesters of one key pack
//! once: the first marks the key as packing, the others wait on a condvar and get its result.
//!
//! `get_or_adopt` shares a weight the same way but charges nothing: its bytes lie in a read-only
//! file mapping (a packed weight restored from a context file), page cache the kernel can drop
//! and read again, not memory the budget governs; so the budget never declines it. Adopted
//! entries are counted apart (`adopted`, `adopted_bytes`).

use super::governor::{Governor, GovernorRef};
use parking_lot::{Condvar, Mutex};
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};

/// What identifies a packed weight: the op (packing format), its parameters, and the source
/// content. Equality needs equal keyed digests ([`super::KeyDigest`]): two different sources
/// cannot be made to share a key, so a hit is always the packing of the requester's own bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WeightKey {
    /// The op / packing routine, e.g. `"MatMulNBits"`.
    pub op: &'static str,
    /// Hash of the op parameters that change the packed layout (see [`super::params_hash`]).
    pub params_hash: u64,
    /// Keyed 256-bit digest of the parameters and every source part.
    pub digest: [u8; 32],
    /// Length in bytes of the (first) source.
    pub len: usize,
}

/// The ops whose packed weights the cache keys: what [`WeightKey::from_json`] maps a stored
/// op name back to (the key's op is a `&'static str`).
pub const KNOWN_WEIGHT_OPS: [&str; 3] = ["MatMulNBits", "QLinearMatMul", "f32-gemm-b"];

impl WeightKey {
    /// The key as JSON: the op, the params hash and the digest as lowercase hex (16 and 64
    /// digits: a u64 as a JSON number loses bits in readers that hold numbers as doubles) and
    /// the source length.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "op": self.op,
            "params_hash": format!("{:016x}", self.params_hash),
            "digest": hex(&self.digest),
            "len": self.len,
        })
    }

    /// The key [`WeightKey::to_json`] wrote; an error names the field that is missing or
    /// malformed, or the op when it is none of [`KNOWN_WEIGHT_OPS`]. The digest is keyed by the
    /// secret of the process that made it ([`super::KeyDigest`]), so a stored key never equals a
    /// key this process computes from source bytes: it can identify the stored weight, not vouch
    /// for it.
    pub fn from_json(v: &serde_json::Value) -> Result<WeightKey, String> {
        let field = |name: &str| {
            v.get(name)
                .ok_or_else(|| format!("weight key: '{name}' is missing"))
        };
        let text = |name: &str| {
            field(name)?
                .as_str()
                .ok_or_else(|| format!("weight key: '{name}' is not a string"))
        };
        let op_name = text("op")?;
        let op = KNOWN_WEIGHT_OPS
            .into_iter()
            .find(|&o| o == op_name)
            .ok_or_else(|| format!("weight key: op '{op_name}' is not one rcpu packs"))?;
        let ph = text("params_hash")?;
        let params_hash = (ph.len() == 16)
            .then(|| u64::from_str_radix(ph, 16).ok())
            .flatten()
            .ok_or_else(|| format!("weight key: params_hash '{ph}' is not 16 hex digits"))?;
        let dg = text("digest")?;
        let digest =
            unhex32(dg).ok_or_else(|| format!("weight key: digest '{dg}' is not 64 hex digits"))?;
        let len = field("len")?
            .as_u64()
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| "weight key: 'len' is not a length".to_string())?;
        Ok(WeightKey {
            op,
            params_hash,
            digest,
            len,
        })
    }

    /// Key for `src` packed by `op` with parameters hashing to `params_hash`.
    pub fn new(op: &'static str, params_hash: u64, src: &[u8]) -> Self {
        let mut d = super::KeyDigest::new();
        d.words(&[params_hash]).bytes(src);
        WeightKey {
            op,
            params_hash,
            digest: d.finish(),
            len: src.len(),
        }
    }

    /// Key for sources digested into `d` (parameters included by the caller), `len` the byte
    /// length of the main source.
    pub fn from_digest(
        op: &'static str,
        params_hash: u64,
        d: &super::KeyDigest,
        len: usize,
    ) -> Self {
        WeightKey {
            op,
            params_hash,
            digest: d.finish(),
            len,
        }
    }
}

/// Lowercase hex of `b`.
fn hex(b: &[u8]) -> String {
    use std::fmt::Write;
    b.iter()
        .fold(String::with_capacity(2 * b.len()), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}

/// 32 bytes from 64 hex digits (either case); `None` for anything else.
fn unhex32(s: &str) -> Option<[u8; 32]> {
    let s = s.as_bytes();
    if s.len() != 64 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(s.chunks_exact(2)) {
        *o = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

type MapKey = (WeightKey, TypeId);

enum Slot {
    /// A thread is packing this key; wait on the condvar.
    Packing,
    /// `Weak<CachedWeight<T>>` for the `T` in the key's `TypeId`.
    Ready(Box<dyn Any + Send + Sync>),
}

struct Inner {
    gov: GovernorRef,
    map: Mutex<HashMap<MapKey, Slot>>,
    ready: Condvar,
    hits: AtomicU64,
    misses: AtomicU64,
    declines: AtomicU64,
    packs: AtomicU64,
    /// Adoptions so far ([`GovernedWeightCache::get_or_adopt`] built an entry).
    adopts: AtomicU64,
    /// Adopted entries alive, and the file bytes they hold.
    adopted: AtomicU64,
    adopted_bytes: AtomicU64,
    // Relaxed throughout: plain statistics; the map is under the mutex.
}

/// What an entry holds against the budget: a grant (a packed weight), or nothing for an adopted
/// one, whose bytes (file pages) are only counted.
enum Hold {
    Grant(super::Grant),
    Adopted { bytes: u64 },
}

/// A packed weight held by the cache's governor. Derefs to `T`.
///
/// Aligned to a cache line so that, inside an `Arc`, the reference counts sit on a line of
/// their own: an idle lane upgrading its weak reference to read a weight ahead
/// (`runtime::warm`) must not take the line holding the fields every call of that weight reads.
#[repr(align(64))]
pub struct CachedWeight<T: Send + Sync + 'static> {
    // Field order matters: `value` drops before `hold`, so live bytes never undercount what is held.
    value: T,
    hold: Hold,
    key: MapKey,
    cache: Weak<Inner>,
}

impl<T: Send + Sync + 'static> CachedWeight<T> {
    /// Bytes this entry holds against the budget (settled size; 0 for an adopted entry).
    pub fn held_bytes(&self) -> u64 {
        match &self.hold {
            Hold::Grant(g) => g.held_bytes(),
            Hold::Adopted { .. } => 0,
        }
    }

    /// Whether the entry was adopted ([`GovernedWeightCache::get_or_adopt`]), not packed.
    pub fn adopted(&self) -> bool {
        matches!(self.hold, Hold::Adopted { .. })
    }
    pub fn key(&self) -> &WeightKey {
        &self.key.0
    }
}

impl<T: Send + Sync + std::fmt::Debug + 'static> std::fmt::Debug for CachedWeight<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedWeight")
            .field("key", &self.key.0)
            .field("held_bytes", &self.held_bytes())
            .field("adopted", &self.adopted())
            .field("value", &self.value)
            .finish()
    }
}

impl<T: Send + Sync + 'static> std::ops::Deref for CachedWeight<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Send + Sync + 'static> Drop for CachedWeight<T> {
    fn drop(&mut self) {
        let Some(inner) = self.cache.upgrade() else {
            return;
        };
        if let Hold::Adopted { bytes } = self.hold {
            inner.adopted.fetch_sub(1, Relaxed);
            inner.adopted_bytes.fetch_sub(bytes, Relaxed);
        }
        let mut map = inner.map.lock();
        // Remove the entry only if it still points at this object: a requester may already have replaced
        // the dead entry with a fresh pack (or be packing one).
        let mine = match map.get(&self.key) {
            Some(Slot::Ready(w)) => w
                .downcast_ref::<Weak<CachedWeight<T>>>()
                .is_some_and(|w| std::ptr::eq(w.as_ptr(), self as *const Self)),
            _ => false,
        };
        if mine {
            map.remove(&self.key);
        }
    }
}

/// Removes a `Packing` marker if the packer unwinds or gives up, and wakes the waiters.
struct PackingGuard<'a> {
    inner: &'a Inner,
    key: Option<MapKey>,
}

impl Drop for PackingGuard<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let mut map = self.inner.map.lock();
            if matches!(map.get(&key), Some(Slot::Packing)) {
                map.remove(&key);
            }
            drop(map);
            self.inner.ready.notify_all();
        }
    }
}

/// A cache of packed weights bounded by a governor. See the module doc.
pub struct GovernedWeightCache {
    inner: Arc<Inner>,
}

impl GovernedWeightCache {
    /// A cache drawing on `gov` (`&'static Governor` or `Arc<Governor>`).
    pub fn new(gov: impl Into<GovernorRef>) -> Self {
        GovernedWeightCache {
            inner: Arc::new(Inner {
                gov: gov.into(),
                map: Mutex::new(HashMap::new()),
                ready: Condvar::new(),
                hits: AtomicU64::new(0),
                misses: AtomicU64::new(0),
                declines: AtomicU64::new(0),
                packs: AtomicU64::new(0),
                adopts: AtomicU64::new(0),
                adopted: AtomicU64::new(0),
                adopted_bytes: AtomicU64::new(0),
            }),
        }
    }

    /// The shared packed copy for `key`, packing it if needed.
    ///
    /// `predicted_bytes` is reserved before `pack` runs; `held_bytes` measures the packed object and the
    /// grant is settled to it. Returns `None` when the governor declines (up front, or when the measured
    /// size outgrows the budget): the caller must then use the unpacked path. `pack` runs at most once per
    /// live key even when several threads ask at once; the others wait for its result.
    pub fn get_or_pack<T: Send + Sync + 'static>(
        &self,
        key: &WeightKey,
        predicted_bytes: usize,
        pack: impl FnOnce() -> T,
        held_bytes: impl Fn(&T) -> usize,
    ) -> Option<Arc<CachedWeight<T>>> {
        self.try_get_or_pack(key, predicted_bytes, || Some(pack()), held_bytes)
    }

    /// [`Self::get_or_pack`] with a fallible `pack`: `None` from `pack` (it could not allocate)
    /// is a decline like the governor's (counted in `declines`); waiters then pack themselves.
    pub fn try_get_or_pack<T: Send + Sync + 'static>(
        &self,
        key: &WeightKey,
        predicted_bytes: usize,
        pack: impl FnOnce() -> Option<T>,
        held_bytes: impl Fn(&T) -> usize,
    ) -> Option<Arc<CachedWeight<T>>> {
        let inner = &*self.inner;
        let mkey: MapKey = (key.clone(), TypeId::of::<T>());
        let mut map = match self.live_or_lock::<T>(&mkey) {
            Ok(hit) => return Some(hit),
            Err(map) => map,
        };
        let Some(mut grant) = inner.gov.reserve(predicted_bytes as u64).grant() else {
            inner.declines.fetch_add(1, Relaxed);
            log::info!(
                "weight cache declined packing {} ({predicted_bytes} bytes do not fit the \
                 budget); the node computes from the original tensor",
                key.op
            );
            return None;
        };
        inner.misses.fetch_add(1, Relaxed);
        map.insert(mkey.clone(), Slot::Packing);
        drop(map);
        let guard = PackingGuard {
            inner,
            key: Some(mkey.clone()),
        };

        let Some(value) = pack() else {
            inner.declines.fetch_add(1, Relaxed);
            log::info!(
                "weight cache declined packing {} (could not allocate); the node computes from \
                 the original tensor",
                key.op
            );
            return None; // the guard clears the marker and wakes waiters; the grant drops here
        };
        inner.packs.fetch_add(1, Relaxed);
        let held = held_bytes(&value);
        if grant.settle(held as u64).is_err() {
            inner.declines.fetch_add(1, Relaxed);
            log::info!(
                "weight cache declined packing {} (packed it holds {held} bytes, predicted \
                 {predicted_bytes}: over the budget); the node computes from the original tensor",
                key.op
            );
            return None; // guard clears the marker and wakes waiters; value and grant drop here
        }
        Some(self.publish(value, Hold::Grant(grant), guard))
    }

    /// The shared weight for `key`, made by `make` if no live entry has it, held at no charge:
    /// for weights whose bytes are not memory the budget governs (a read-only file mapping, whose
    /// pages the kernel can drop and read again). Shared as [`Self::try_get_or_pack`] shares:
    /// a live entry with the key (packed or adopted) is returned, and `make` runs at most once
    /// while several threads ask at once. The budget never declines; `None` only when `make`
    /// gives `None` (waiters then make their own). `file_bytes` measures what the entry maps,
    /// counted in [`Self::adopted_bytes`] while it lives.
    pub fn get_or_adopt<T: Send + Sync + 'static>(
        &self,
        key: &WeightKey,
        make: impl FnOnce() -> Option<T>,
        file_bytes: impl Fn(&T) -> usize,
    ) -> Option<Arc<CachedWeight<T>>> {
        let inner = &*self.inner;
        let mkey: MapKey = (key.clone(), TypeId::of::<T>());
        let mut map = match self.live_or_lock::<T>(&mkey) {
            Ok(hit) => return Some(hit),
            Err(map) => map,
        };
        map.insert(mkey.clone(), Slot::Packing);
        drop(map);
        let guard = PackingGuard {
            inner,
            key: Some(mkey),
        };
        let value = make()?; // the guard clears the marker and wakes waiters
        let bytes = file_bytes(&value) as u64;
        inner.adopts.fetch_add(1, Relaxed);
        inner.adopted.fetch_add(1, Relaxed);
        inner.adopted_bytes.fetch_add(bytes, Relaxed);
        Some(self.publish(value, Hold::Adopted { bytes }, guard))
    }

    /// The live entry for `mkey` (a hit, counted), waiting while another thread makes it; else
    /// the map, locked, for the caller to claim the key.
    fn live_or_lock<T: Send + Sync + 'static>(
        &self,
        mkey: &MapKey,
    ) -> Result<Arc<CachedWeight<T>>, parking_lot::MutexGuard<'_, HashMap<MapKey, Slot>>> {
        let inner = &*self.inner;
        let mut map = inner.map.lock();
        loop {
            match map.get(mkey) {
                Some(Slot::Packing) => {
                    inner.ready.wait(&mut map);
                    continue;
                }
                Some(Slot::Ready(w)) => {
                    let w = w
                        .downcast_ref::<Weak<CachedWeight<T>>>()
                        .expect("slot type matches its TypeId key");
                    if let Some(hit) = w.upgrade() {
                        inner.hits.fetch_add(1, Relaxed);
                        return Ok(hit);
                    }
                    // Dead entry (its last Arc is dropping): the caller makes it afresh.
                }
                None => {}
            }
            return Err(map);
        }
    }

    /// Makes `value` the live entry of the key `guard` marks, and wakes the waiters.
    fn publish<T: Send + Sync + 'static>(
        &self,
        value: T,
        hold: Hold,
        mut guard: PackingGuard<'_>,
    ) -> Arc<CachedWeight<T>> {
        let inner = &*self.inner;
        let mkey = guard
            .key
            .clone()
            .expect("the guard marks the key being made");
        let entry = Arc::new(CachedWeight {
            value,
            hold,
            key: mkey.clone(),
            cache: Arc::downgrade(&self.inner),
        });
        let mut map = inner.map.lock();
        map.insert(mkey, Slot::Ready(Box::new(Arc::downgrade(&entry))));
        // The marker is replaced: the guard must not remove the entry.
        guard.key = None;
        drop(map);
        inner.ready.notify_all();
        entry
    }

    /// The governor this cache draws on.
    pub fn governor(&self) -> &Governor {
        self.inner.gov.get()
    }

    /// Keys currently in the map (packed and live, or being packed).
    pub fn entries(&self) -> usize {
        self.inner.map.lock().len()
    }
    /// Requests answered with an existing packed copy.
    pub fn hits(&self) -> u64 {
        self.inner.hits.load(Relaxed)
    }
    /// Requests that had to pack (granted and packed).
    pub fn misses(&self) -> u64 {
        self.inner.misses.load(Relaxed)
    }
    /// Requests declined by the governor (up front or at settle).
    pub fn declines(&self) -> u64 {
        self.inner.declines.load(Relaxed)
    }
    /// Times `pack` ran.
    pub fn packs(&self) -> u64 {
        self.inner.packs.load(Relaxed)
    }
    /// Adoptions so far ([`Self::get_or_adopt`] made an entry).
    pub fn adopts(&self) -> u64 {
        self.inner.adopts.load(Relaxed)
    }
    /// Adopted entries alive.
    pub fn adopted(&self) -> u64 {
        self.inner.adopted.load(Relaxed)
    }
    /// File bytes the live adopted entries map (not charged to the governor).
    pub fn adopted_bytes(&self) -> u64 {
        self.inner.adopted_bytes.load(Relaxed)
    }
    /// Bytes held by this cache's governor (all its grants).
    pub fn live_bytes(&self) -> u64 {
        self.governor().live_bytes()
    }

    pub fn stats(&self) -> serde_json::Value {
        serde_json::json!({
            "entries": self.entries(),
            "hits": self.hits(),
            "misses": self.misses(),
            "declines": self.declines(),
            "packs": self.packs(),
            "live_bytes": self.live_bytes(),
            "adopts": self.adopts(),
            "adopted": self.adopted(),
            "adopted_bytes": self.adopted_bytes(),
        })
    }
}
