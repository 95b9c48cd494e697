//! `GovernedWeightCache`: prepacked weights shared across sessions, bounded by a governor.
//!
//! `get_or_pack` reserves the predicted bytes before packing; a decline returns `None` and the caller uses
//! the unpacked path (identical results, slower). After packing, the grant is settled to the bytes the
//! packed object really holds (`live_bytes` is measured, not predicted). The map keeps only a `Weak`, so the
//! packed copy lives exactly as long as some session holds its `Arc`; when the last `Arc` drops the entry
//! is removed and its grant released (after the packed data is freed). Concurrent requesters of one key pack
//! once: the first marks the key as packing, the others wait on a condvar and get its result.

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

impl WeightKey {
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
    // Relaxed throughout: plain statistics; the map is under the mutex.
}

/// A packed weight held by the cache's governor. Derefs to `T`.
///
/// Aligned to a cache line so that, inside an `Arc`, the reference counts sit on a line of
/// their own: an idle lane upgrading its weak reference to read a weight ahead
/// (`runtime::warm`) must not take the line holding the fields every call of that weight reads.
#[repr(align(64))]
pub struct CachedWeight<T: Send + Sync + 'static> {
    // Field order matters: `value` drops before `grant`, so live bytes never undercount what is held.
    value: T,
    grant: super::Grant,
    key: MapKey,
    cache: Weak<Inner>,
}

impl<T: Send + Sync + 'static> CachedWeight<T> {
    /// Bytes this entry holds against the budget (settled size).
    pub fn held_bytes(&self) -> u64 {
        self.grant.held_bytes()
    }
    pub fn key(&self) -> &WeightKey {
        &self.key.0
    }
}

impl<T: Send + Sync + std::fmt::Debug + 'static> std::fmt::Debug for CachedWeight<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedWeight")
            .field("key", &self.key.0)
            .field("held_bytes", &self.grant.held_bytes())
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
        let mut map = inner.map.lock();
        loop {
            match map.get(&mkey) {
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
                        return Some(hit);
                    }
                    // Dead entry (its last Arc is dropping): pack afresh below.
                }
                None => {}
            }
            break;
        }
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
        let mut guard = PackingGuard {
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
        let entry = Arc::new(CachedWeight {
            value,
            grant,
            key: mkey.clone(),
            cache: Arc::downgrade(&self.inner),
        });
        let mut map = inner.map.lock();
        map.insert(mkey, Slot::Ready(Box::new(Arc::downgrade(&entry))));
        guard.key = None;
        drop(map);
        inner.ready.notify_all();
        Some(entry)
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
        })
    }
}
