//! GovernedWeightCache on local governors: measured live bytes, sharing, pack-once, declines; AlignedBuf;
//! content_hash.

use rcpu::memory::{
    content_hash, params_hash, AlignedBuf, GovernedWeightCache, Governor, WeightKey,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

fn key(src: &[u8]) -> WeightKey {
    WeightKey::new("TestPack", params_hash(&[32, 4]), src)
}

#[test]
fn live_bytes_equal_settled_size_and_return_to_baseline() {
    let gov = Arc::new(Governor::new(1 << 20));
    let cache = GovernedWeightCache::new(Arc::clone(&gov));
    let src = vec![7u8; 10_000];
    let w = cache
        .get_or_pack(
            &key(&src),
            20_000,
            || AlignedBuf::from_slice(&src),
            |b| b.held_bytes(),
        )
        .expect("fits the budget");
    assert_eq!(w.as_slice(), &src[..]);
    assert_eq!(w.as_ptr() as usize % 64, 0);
    let held = w.held_bytes();
    assert!((10_000..10_000 + 64).contains(&held), "held {held}");
    assert_eq!(
        gov.live_bytes(),
        held,
        "live is the measured size, not the 20000 predicted"
    );
    assert_eq!(gov.reserved_bytes(), 20_000);
    assert_eq!(cache.entries(), 1);
    let w2 = cache
        .get_or_pack(
            &key(&src),
            20_000,
            || panic!("must hit"),
            |b: &AlignedBuf| b.held_bytes(),
        )
        .unwrap();
    assert_eq!(gov.live_bytes(), held, "a hit adds nothing");
    drop(w);
    assert_eq!(gov.live_bytes(), held, "still held by the second Arc");
    drop(w2);
    assert_eq!(
        (gov.live_bytes(), gov.reserved_bytes()),
        (0, 0),
        "back to baseline"
    );
    assert_eq!(cache.entries(), 0, "entry removed with its last Arc");
    // Asking again packs afresh.
    let _w3 = cache
        .get_or_pack(
            &key(&src),
            20_000,
            || AlignedBuf::from_slice(&src),
            |b| b.held_bytes(),
        )
        .unwrap();
    assert_eq!((cache.packs(), cache.hits()), (2, 1));
}

#[test]
fn budget_zero_declines_and_never_packs() {
    let cache = GovernedWeightCache::new(Arc::new(Governor::new(0)));
    let packed = AtomicUsize::new(0);
    let r = cache.get_or_pack(
        &key(b"abc"),
        3,
        || {
            packed.fetch_add(1, Ordering::Relaxed);
            vec![1u8; 3]
        },
        |v| v.capacity(),
    );
    assert!(r.is_none(), "budget 0: caller must use the unpacked path");
    assert_eq!(packed.load(Ordering::Relaxed), 0, "declined before packing");
    assert_eq!(
        (cache.declines(), cache.entries(), cache.live_bytes()),
        (1, 0, 0)
    );
}

#[test]
fn measured_size_over_budget_declines_after_pack() {
    let gov = Arc::new(Governor::new(1000));
    let cache = GovernedWeightCache::new(Arc::clone(&gov));
    let r = cache.get_or_pack(&key(b"x"), 100, || vec![0u8; 5000], |v| v.capacity());
    assert!(
        r.is_none(),
        "under-predicted pack that does not fit is dropped"
    );
    assert_eq!(
        (gov.live_bytes(), cache.entries(), cache.declines()),
        (0, 0, 1)
    );
    // The key is not poisoned: a correct prediction that fits is packed.
    let ok = cache.get_or_pack(&key(b"x"), 500, || vec![0u8; 500], |v| v.capacity());
    assert!(ok.is_some());
}

/// Guarantee: one pack per key, whatever the interleaving. The 100 ms pack only widens the race:
/// a requester that arrives after the pack finished is a hit too (the first Arc is still held),
/// so `(packs, misses, hits) == (1, 1, 3)` holds on any schedule.
#[test]
fn racing_requests_share_one_arc_and_pack_once() {
    let gov = Arc::new(Governor::new(1 << 20));
    let cache = Arc::new(GovernedWeightCache::new(Arc::clone(&gov)));
    let packs = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(4));
    let src: Arc<Vec<u8>> = Arc::new((0..4096u32).map(|i| i as u8).collect());
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (cache, packs, barrier, src) =
                (cache.clone(), packs.clone(), barrier.clone(), src.clone());
            std::thread::spawn(move || {
                barrier.wait();
                cache
                    .get_or_pack(
                        &key(&src),
                        src.len(),
                        || {
                            packs.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(100));
                            AlignedBuf::from_slice(&src)
                        },
                        |b| b.held_bytes(),
                    )
                    .expect("fits")
            })
        })
        .collect();
    let got: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for w in &got[1..] {
        assert!(
            Arc::ptr_eq(&got[0], w),
            "all requesters share one packed copy"
        );
    }
    assert_eq!(packs.load(Ordering::SeqCst), 1, "packed once");
    assert_eq!((cache.packs(), cache.misses(), cache.hits()), (1, 1, 3));
    assert_eq!(gov.live_bytes(), got[0].held_bytes(), "one copy held");
    drop(got);
    assert_eq!((gov.live_bytes(), cache.entries()), (0, 0));
}

#[test]
fn keys_separate_op_params_and_content() {
    let gov = Arc::new(Governor::new(1 << 20));
    let cache = GovernedWeightCache::new(gov);
    let a = cache.get_or_pack(&key(b"aaaa"), 4, || 1u32, |_| 4).unwrap();
    let b = cache.get_or_pack(&key(b"aaab"), 4, || 2u32, |_| 4).unwrap();
    let mut k = key(b"aaaa");
    k.params_hash = params_hash(&[64, 4]);
    let c = cache.get_or_pack(&k, 4, || 3u32, |_| 4).unwrap();
    let d = cache.get_or_pack(&key(b"aaaa"), 4, || 9u32, |_| 4).unwrap();
    assert_eq!((**a, **b, **c, **d), (1, 2, 3, 1));
    assert!(Arc::ptr_eq(&a, &d));
    assert_eq!(cache.entries(), 3);
}

#[test]
fn content_hash_distinguishes_content_and_length() {
    let base: Vec<u8> = (0..1000u32).map(|i| (i * 31) as u8).collect();
    let h = content_hash(&base);
    assert_eq!(h, content_hash(&base.clone()), "deterministic");
    for i in [0, 7, 31, 32, 500, 999] {
        let mut m = base.clone();
        m[i] ^= 1;
        assert_ne!(h, content_hash(&m), "flip at {i}");
    }
    assert_ne!(
        content_hash(&[0u8; 8]),
        content_hash(&[0u8; 9]),
        "length counts"
    );
    assert_ne!(content_hash(&[]), content_hash(&[0u8]));
}

#[test]
fn aligned_buf_is_cache_line_aligned() {
    for len in [0usize, 1, 3, 63, 64, 1000] {
        let b = AlignedBuf::<u8>::zeroed(len);
        assert_eq!(b.as_ptr() as usize % 64, 0);
        assert_eq!(b.len(), len);
        let f = AlignedBuf::<f32>::from_slice(&vec![1.5; len]);
        assert_eq!(f.as_ptr() as usize % 64, 0);
        assert!(f.iter().all(|&x| x == 1.5));
        assert_eq!(f.clone().as_ptr() as usize % 64, 0);
    }
}

#[test]
fn churn_of_get_and_drop_leaves_no_entries_or_bytes() {
    let gov = Arc::new(Governor::new(64 * 1024));
    let cache = Arc::new(GovernedWeightCache::new(Arc::clone(&gov)));
    let handles: Vec<_> = (0..8u8)
        .map(|t| {
            let cache = cache.clone();
            std::thread::spawn(move || {
                for i in 0..2000u32 {
                    let src = [(i % 3) as u8, t % 2];
                    let got = cache.get_or_pack(
                        &key(&src),
                        4096,
                        || vec![src[0]; 4096],
                        |v| v.capacity(),
                    );
                    if let Some(w) = got {
                        assert!(w.iter().all(|&b| b == src[0]), "right content for the key");
                        if i % 5 == 0 {
                            std::thread::yield_now();
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(gov.peak_live_bytes() <= 64 * 1024);
    assert_eq!(
        (gov.live_bytes(), gov.reserved_bytes(), cache.entries()),
        (0, 0, 0)
    );
    assert_eq!(cache.hits() + cache.misses() + cache.declines(), 8 * 2000);
}

#[test]
fn a_panicking_packer_does_not_wedge_the_key() {
    let gov = Arc::new(Governor::new(1 << 20));
    let cache = Arc::new(GovernedWeightCache::new(Arc::clone(&gov)));
    let c2 = cache.clone();
    let r = std::thread::spawn(move || {
        c2.get_or_pack(
            &key(b"p"),
            8,
            || -> Vec<u8> { panic!("pack failed") },
            |v| v.capacity(),
        )
    })
    .join();
    assert!(r.is_err());
    assert_eq!(
        (gov.live_bytes(), cache.entries()),
        (0, 0),
        "grant released, marker removed"
    );
    let w = cache.get_or_pack(&key(b"p"), 8, || vec![1u8; 8], |v| v.capacity());
    assert!(w.is_some(), "a later request packs normally");
}

// ---------------------------------------------------------------------------------------------
// Forged collisions: `content_hash` (a fast unkeyed hash) is easy to collide on purpose, so it
// must not be what decides that two weights are the same.

const K0: u64 = 0x9E37_79B9_7F4A_7C15;
const K1: u64 = 0xC2B2_AE3D_27D4_EB4F;
const K2: u64 = 0x1656_67B1_9E37_79F9;
const K3: u64 = 0xD6E8_FEB8_6659_FD93;

fn mix(h: u64, w: u64, k: u64) -> u64 {
    let x = (h ^ w).wrapping_mul(k);
    x ^ (x >> 29)
}

/// The `w` with `mix(h, w, k) == y` (every step of `mix` is a bijection).
fn unmix(h: u64, y: u64, k: u64) -> u64 {
    let x = y ^ (y >> 29) ^ (y >> 58);
    let mut inv = k; // Newton's iteration for the inverse of an odd k mod 2^64
    for _ in 0..6 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(k.wrapping_mul(inv)));
    }
    x.wrapping_mul(inv) ^ h
}

/// A 32-byte source different from `words` with the same `content_hash`: content_hash folds
/// four lanes with xor, so lane 1 is solved to cancel a change in lane 0.
fn forge(words: [u64; 4]) -> (Vec<u8>, Vec<u8>) {
    let lanes = |w: [u64; 4]| {
        [
            mix(K0, w[0], K1),
            mix(K1, w[1], K2),
            mix(K2, w[2], K3),
            mix(K3, w[3], K0),
        ]
    };
    let h = lanes(words);
    let acc = h[0] ^ h[1].rotate_left(17) ^ h[2].rotate_left(31) ^ h[3].rotate_left(47);
    let mut forged = words;
    forged[0] ^= 0xdead_beef;
    let h0 = mix(K0, forged[0], K1);
    let h1 = (acc ^ h0 ^ h[2].rotate_left(31) ^ h[3].rotate_left(47)).rotate_right(17);
    forged[1] = unmix(K1, h1, K2);
    let bytes = |w: [u64; 4]| w.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    (bytes(words), bytes(forged))
}

#[test]
fn forged_content_hash_collision_is_not_served_the_other_weight() {
    let (victim, forged) = forge([1, 2, 3, 4]);
    assert_ne!(victim, forged);
    assert_eq!(
        content_hash(&victim),
        content_hash(&forged),
        "the forged source really collides under the weak hash"
    );
    let gov = Arc::new(Governor::new(1 << 20));
    let cache = GovernedWeightCache::new(gov);
    let pack = |src: &[u8]| AlignedBuf::from_slice(src);
    let a = cache
        .get_or_pack(&key(&victim), 64, || pack(&victim), |b| b.held_bytes())
        .unwrap();
    let b = cache
        .get_or_pack(&key(&forged), 64, || pack(&forged), |b| b.held_bytes())
        .unwrap();
    assert_eq!(a.as_slice(), &victim[..]);
    assert_eq!(
        b.as_slice(),
        &forged[..],
        "the forged source was served the victim's packed weight"
    );
    assert_eq!((cache.hits(), cache.packs()), (0, 2));
}

#[test]
fn failed_pack_declines_and_later_requests_pack() {
    let gov = Arc::new(Governor::new(1 << 20));
    let cache = GovernedWeightCache::new(Arc::clone(&gov));
    let k = key(b"oom");
    let none = cache.try_get_or_pack(&k, 64, || None::<AlignedBuf<u8>>, |b| b.held_bytes());
    assert!(none.is_none());
    assert_eq!(
        (cache.declines(), cache.entries(), gov.live_bytes()),
        (1, 0, 0)
    );
    let w = cache
        .try_get_or_pack(
            &k,
            64,
            || Some(AlignedBuf::from_slice(b"oom")),
            |b| b.held_bytes(),
        )
        .unwrap();
    assert_eq!(w.as_slice(), b"oom");
}

#[test]
fn aligned_buf_try_zeroed_reports_impossible_sizes() {
    assert!(AlignedBuf::<u8>::try_zeroed(usize::MAX).is_err());
    assert!(AlignedBuf::<f32>::try_zeroed(usize::MAX / 4).is_err());
    assert!(AlignedBuf::<u8>::try_zeroed(isize::MAX as usize).is_err());
    let b = AlignedBuf::<f32>::try_zeroed(1000).unwrap();
    assert!(b.iter().all(|&x| x == 0.0) && (b.as_ptr() as usize).is_multiple_of(64));
    assert!(rcpu::memory::try_vec(usize::MAX / 2, 0u32).is_err());
}

// ---------------------------------------------------------------------------------------------
// Adopted entries (`get_or_adopt`): weights whose bytes lie in a mapped file, shared like packed
// ones, charged nothing.

#[test]
fn adopted_entries_are_shared_uncharged_and_removed_with_their_last_arc() {
    // Budget 0: every charged request declines, an adoption never does.
    let gov = Arc::new(Governor::new(0));
    let cache = GovernedWeightCache::new(Arc::clone(&gov));
    let k = key(b"mapped");
    let made = AtomicUsize::new(0);
    let make = || {
        made.fetch_add(1, Ordering::Relaxed);
        Some(vec![5u8; 3000])
    };
    let a = cache
        .get_or_adopt(&k, make, |v| v.len())
        .expect("never declined");
    assert!(a.adopted());
    assert_eq!(a.held_bytes(), 0);
    assert_eq!(a.key(), &k);
    assert_eq!(
        (cache.adopts(), cache.adopted(), cache.adopted_bytes()),
        (1, 1, 3000)
    );
    assert_eq!((gov.live_bytes(), gov.grants(), gov.declines()), (0, 0, 0));
    // A second adoption of the key, and a pack request for it, are both hits on the entry.
    let b = cache
        .get_or_adopt(&k, || panic!("must hit"), |v: &Vec<u8>| v.len())
        .unwrap();
    let c = cache
        .get_or_pack(&k, 3000, || panic!("must hit"), |v: &Vec<u8>| v.len())
        .unwrap();
    assert!(Arc::ptr_eq(&a, &b) && Arc::ptr_eq(&a, &c));
    assert_eq!(made.load(Ordering::Relaxed), 1);
    assert_eq!((cache.hits(), cache.misses(), cache.packs()), (2, 0, 0));
    assert_eq!(cache.entries(), 1);
    let stats = cache.stats();
    assert_eq!(
        (&stats["adopts"], &stats["adopted"], &stats["adopted_bytes"]),
        (&1.into(), &1.into(), &3000.into())
    );
    drop((a, b));
    assert_eq!(cache.adopted(), 1, "still held by the third Arc");
    drop(c);
    assert_eq!(
        (cache.entries(), cache.adopted(), cache.adopted_bytes()),
        (0, 0, 0),
        "entry removed with its last Arc"
    );
    assert_eq!(cache.adopts(), 1, "adoptions so far are kept");
    // Asked again, it is made afresh.
    let d = cache
        .get_or_adopt(&k, || Some(vec![6u8; 10]), |v| v.len())
        .unwrap();
    assert_eq!((d[0], cache.adopts(), cache.adopted_bytes()), (6, 2, 10));
}

#[test]
fn a_packed_entry_is_served_to_an_adoption_of_its_key() {
    let gov = Arc::new(Governor::new(1 << 20));
    let cache = GovernedWeightCache::new(Arc::clone(&gov));
    let k = key(b"packed first");
    let p = cache
        .get_or_pack(&k, 64, || vec![1u8; 64], |v| v.len())
        .unwrap();
    let a = cache
        .get_or_adopt(&k, || panic!("must hit"), |v: &Vec<u8>| v.len())
        .unwrap();
    assert!(Arc::ptr_eq(&p, &a) && !a.adopted());
    assert_eq!(
        (cache.adopts(), cache.adopted(), gov.live_bytes()),
        (0, 0, 64)
    );
}

#[test]
fn a_failed_adoption_leaves_no_entry_and_later_ones_adopt() {
    let cache = GovernedWeightCache::new(Arc::new(Governor::new(1 << 20)));
    let k = key(b"bad file");
    assert!(cache
        .get_or_adopt(&k, || None::<Vec<u8>>, |v| v.len())
        .is_none());
    assert_eq!(
        (cache.entries(), cache.adopts(), cache.declines()),
        (0, 0, 0)
    );
    let w = cache
        .get_or_adopt(&k, || Some(vec![2u8; 4]), |v| v.len())
        .unwrap();
    assert_eq!((w[0], cache.adopts(), cache.entries()), (2, 1, 1));
}

#[test]
fn a_panicking_adoption_does_not_wedge_the_key() {
    let cache = Arc::new(GovernedWeightCache::new(Arc::new(Governor::new(0))));
    let c2 = cache.clone();
    let r = std::thread::spawn(move || {
        c2.get_or_adopt(
            &key(b"panics"),
            || -> Option<Vec<u8>> { panic!("import failed") },
            |v| v.len(),
        )
    })
    .join();
    assert!(r.is_err());
    assert_eq!((cache.entries(), cache.adopted()), (0, 0), "marker removed");
    let w = cache.get_or_adopt(&key(b"panics"), || Some(vec![1u8]), |v| v.len());
    assert!(w.is_some(), "a later adoption adopts");
}

/// As for packs: concurrent adoptions of one key make it once and share one Arc.
#[test]
fn racing_adoptions_make_once_and_share_one_arc() {
    let cache = Arc::new(GovernedWeightCache::new(Arc::new(Governor::new(0))));
    let made = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(4));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (cache, made, barrier) = (cache.clone(), made.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                cache
                    .get_or_adopt(
                        &key(b"shared file"),
                        || {
                            made.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(100));
                            Some(vec![9u8; 100])
                        },
                        |v| v.len(),
                    )
                    .expect("never declined")
            })
        })
        .collect();
    let got: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(got[1..].iter().all(|w| Arc::ptr_eq(&got[0], w)));
    assert_eq!(made.load(Ordering::SeqCst), 1, "made once");
    assert_eq!((cache.adopts(), cache.adopted(), cache.hits()), (1, 1, 3));
    drop(got);
    assert_eq!((cache.entries(), cache.adopted()), (0, 0));
}

#[test]
fn weight_keys_round_trip_through_json() {
    let k = WeightKey::new("MatMulNBits", u64::MAX - 7, b"some weight bytes");
    let j = k.to_json();
    assert_eq!(j["op"], "MatMulNBits");
    assert_eq!(j["params_hash"].as_str().unwrap().len(), 16);
    assert_eq!(j["digest"].as_str().unwrap().len(), 64);
    let back = WeightKey::from_json(&j).unwrap();
    assert_eq!(back, k);
    // Through text too (what a context file holds).
    let text = serde_json::to_string(&j).unwrap();
    let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(WeightKey::from_json(&parsed).unwrap(), k);
    for op in rcpu::memory::KNOWN_WEIGHT_OPS {
        let k = WeightKey::new(op, 1, b"x");
        assert_eq!(WeightKey::from_json(&k.to_json()).unwrap().op, op);
    }
}

#[test]
fn malformed_weight_keys_are_errors_naming_the_field() {
    let good = WeightKey::new("MatMulNBits", 3, b"abc").to_json();
    let with = |field: &str, v: serde_json::Value| {
        let mut j = good.clone();
        j[field] = v;
        WeightKey::from_json(&j).unwrap_err()
    };
    let e = with("op", "NotAnOp".into());
    assert!(e.contains("op 'NotAnOp'"), "{e}");
    assert!(with("op", 5.into()).contains("'op'"));
    assert!(with("digest", "abcd".into()).contains("digest"));
    let mut long_bad = "g".repeat(64);
    assert!(with("digest", long_bad.clone().into()).contains("digest"));
    long_bad = "0".repeat(62) + "é"; // 64 bytes, not 64 hex digits
    assert!(with("digest", long_bad.into()).contains("digest"));
    assert!(with("params_hash", "123".into()).contains("params_hash"));
    assert!(with("params_hash", 3.into()).contains("params_hash"));
    assert!(with("len", (-1).into()).contains("len"));
    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("digest");
    assert!(WeightKey::from_json(&missing)
        .unwrap_err()
        .contains("'digest' is missing"));
    assert!(WeightKey::from_json(&serde_json::json!([1, 2])).is_err());
}
