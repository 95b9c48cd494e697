//! The huge-page weight arena: claim order, shared advised regions, freeing with the last piece,
//! failures as declines, and MatMulNBits parity with many small packs in one region.
//! In `tests/serial/`: the last test reconfigures the process-wide arena.

use crate::nbits_common as matmul_nbits_common;
use matmul_nbits_common::{rel_l2, Problem};

use rcpu::kernels::matmul_nbits::reference::matmul_reference;
use rcpu::kernels::matmul_nbits::{matmul_packed, matmul_unpacked, try_pack, NBitsWeight};
use rcpu::memory::{stats, weight_arena, weight_cache, WeightArena, WeightKey, ARENA_ALIGN};
use rcpu::runtime::par::Serial;

use crate::smaps::{smaps_block, thp_mode};

const MIB: usize = 1 << 20;

/// Asserts the huge-page advice on the mapping holding `addr`: `hg` in VmFlags (MADV_HUGEPAGE
/// was applied) and, where THP is `madvise` or `always`, `THPeligible: 1` (the kernel may back it
/// with huge pages; whether it did, AnonHugePages, is not asserted).
fn assert_advised(addr: usize) {
    let b = smaps_block(addr);
    let flags = b
        .lines()
        .find_map(|l| l.strip_prefix("VmFlags:"))
        .unwrap_or_else(|| panic!("no VmFlags in\n{b}"));
    assert!(
        flags.split_whitespace().any(|f| f == "hg"),
        "mapping not advised MADV_HUGEPAGE:\n{b}"
    );
    if matches!(thp_mode().as_deref(), Some("madvise") | Some("always")) {
        assert!(
            b.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["THPeligible:", "1"]),
            "mapping not THP-eligible:\n{b}"
        );
    }
}

#[test]
fn claims_are_contiguous_aligned_zeroed_and_share_a_region() {
    let _serial = crate::serial();
    let arena = WeightArena::new(4 * MIB);
    let mut pieces = vec![];
    let mut last_end = 0usize;
    for i in 0..50usize {
        let mut b = arena.try_alloc::<u8>(1000 + i).expect("claim");
        let at = b.as_slice().as_ptr() as usize;
        assert_eq!(at % ARENA_ALIGN, 0, "piece {i} at {at:#x}");
        assert!(b.iter().all(|&x| x == 0), "piece {i} not zeroed");
        if i > 0 {
            // Claim order, padded only to the next 64-byte boundary.
            assert_eq!(at, last_end.next_multiple_of(ARENA_ALIGN), "piece {i}");
        }
        last_end = at + b.len();
        b.as_mut_slice().fill(i as u8 + 1);
        pieces.push(b);
    }
    for (i, b) in pieces.iter().enumerate() {
        assert!(b.iter().all(|&x| x == i as u8 + 1), "piece {i} overwritten");
        assert_eq!(b.mapping().addr(), pieces[0].mapping().addr());
    }
    assert_eq!(pieces[0].mapping().addr() % (2 * MIB), 0);
    assert_advised(pieces[0].as_slice().as_ptr() as usize);
    let s = arena.stats();
    assert_eq!((s.regions, s.mapped_bytes), (1, 4 * MIB));
    assert!(
        s.live_bytes >= 50 * 1000 && s.touched_bytes == 2 * MIB,
        "{s:?}"
    );
}

#[test]
fn a_region_is_freed_with_its_last_piece() {
    let _serial = crate::serial();
    let arena = WeightArena::new(4 * MIB);
    let a = arena.try_alloc::<f32>(1000).unwrap();
    let b = arena.try_alloc::<u16>(1000).unwrap();
    // A claim above a quarter of the region that does not fit gets a region of its own; the
    // shared one stays current, so the next small claim lands after `b`.
    let big = arena.try_alloc::<u8>(5 * MIB).unwrap();
    assert_eq!(big.mapping().len(), 6 * MIB);
    assert_ne!(big.mapping().addr(), a.mapping().addr());
    let c = arena.try_alloc::<u8>(10).unwrap();
    assert_eq!(c.mapping().addr(), a.mapping().addr());
    assert_eq!(arena.stats().regions, 2);
    drop(big);
    assert_eq!(
        arena.stats().regions,
        1,
        "own region unmapped with its piece"
    );
    let live = arena.stats().live_bytes;
    drop(a);
    let s = arena.stats();
    assert_eq!(s.regions, 1, "neighbours keep the region");
    assert!(
        s.live_bytes < live && s.touched_bytes - s.live_bytes >= 4000,
        "{s:?}"
    );
    drop((b, c));
    let s = arena.stats();
    assert_eq!(
        (s.regions, s.mapped_bytes, s.live_bytes),
        (0, 0, 0),
        "{s:?}"
    );
    // A new claim maps a fresh region.
    let _d = arena.try_alloc::<u8>(10).unwrap();
    assert_eq!((arena.stats().regions, arena.stats().regions_made), (1, 3));
}

#[test]
fn a_refused_region_is_an_error_not_an_abort() {
    let _serial = crate::serial();
    let arena = WeightArena::new(4 * MIB);
    arena.set_mapped_limit(Some(4 * MIB));
    let a = arena.try_alloc::<u8>(3 * MIB).expect("fits the limit");
    assert!(
        arena.try_alloc::<u8>(2 * MIB).is_err(),
        "a second region passes the limit"
    );
    assert!(
        arena.try_alloc::<u64>(usize::MAX / 4).is_err(),
        "size overflow"
    );
    assert_eq!(arena.stats().failures, 1);
    drop(a);
    arena
        .try_alloc::<u8>(2 * MIB)
        .expect("room again once the first region is gone");
}

/// The process-wide arena as MatMulNBits uses it (one test: it changes global state).
#[test]
fn many_small_packs_share_one_advised_region_and_decline_cleanly() {
    let _serial = crate::serial();
    // 40 small weights of mixed shapes and accuracy levels, packed one after another.
    let problems: Vec<Problem> = (0..40)
        .map(|i| {
            let (k, n) = ([64, 100, 256][i % 3], [16, 33, 64, 96][i % 4]);
            Problem::new(
                k,
                n,
                1 + i % 2,
                32,
                if i % 2 == 0 { 4 } else { 0 },
                i % 5 == 0,
                false,
                i as u64,
            )
        })
        .collect();
    let packs: Vec<_> = problems
        .iter()
        .map(|pr| try_pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p).expect("pack"))
        .collect();
    let region = packs[0].region_addr();
    for (i, w) in packs.iter().enumerate() {
        assert_eq!(w.region_addr(), region, "pack {i} in another region");
        if i > 0 {
            let (prev, at) = (packs[i - 1].weight_bytes(), w.weight_bytes());
            assert!(
                at.as_ptr() as usize >= prev.as_ptr() as usize + prev.len(),
                "pack {i} not after pack {}",
                i - 1
            );
        }
    }
    assert_advised(packs[0].weight_bytes().as_ptr() as usize);
    let s = stats();
    assert_eq!(s["weight_arena"]["regions"], 1, "{s}");
    let live = s["weight_arena"]["live_bytes"].as_u64().unwrap();
    let held: usize = packs.iter().map(|w| w.bytes()).sum();
    assert!(
        live as usize <= held && held - live as usize <= 40 * 64,
        "{live} vs {held}"
    );

    // Parity: packed == unpacked bit for bit, and near the fp32 reference at level 0.
    for (i, (pr, w)) in problems.iter().zip(&packs).enumerate() {
        let (p, m) = (&pr.p, pr.m);
        let zp = pr.zp.as_deref();
        let mut got = vec![0f32; m * p.n];
        matmul_packed(&pr.a, m, w, None, &mut got, &Serial).unwrap();
        let mut unp = vec![0f32; m * p.n];
        matmul_unpacked(
            &pr.a,
            m,
            &NBitsWeight {
                b: &pr.b,
                scales: &pr.scales,
                zero_points: zp,
                p,
            },
            None,
            &mut unp,
            &Serial,
        )
        .unwrap();
        assert_eq!(got, unp, "pack {i}: packed vs unpacked");
        if !p.int8_compute() {
            let mut want = vec![0f32; m * p.n];
            matmul_reference(
                &pr.a,
                m,
                &NBitsWeight {
                    b: &pr.b,
                    scales: &pr.scales,
                    zero_points: zp,
                    p,
                },
                None,
                &mut want,
            );
            let e = rel_l2(&got, &want);
            assert!(e <= 1e-5, "pack {i}: rel L2 {e}");
        }
    }
    drop(packs);
    assert_eq!(
        weight_arena().stats().regions,
        0,
        "region freed with its last weight"
    );

    // No region can be had: the pack declines (through the weight cache as the node does), and
    // the unpacked path gives the answer.
    weight_arena().set_mapped_limit(Some(0));
    let pr = &problems[3];
    let key = WeightKey::new("MatMulNBits", 1, &pr.b);
    let declines = weight_cache().declines();
    let got = weight_cache().try_get_or_pack(
        &key,
        pr.b.len() * 2,
        || try_pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p),
        |w| w.bytes(),
    );
    assert!(got.is_none(), "packed without a region");
    assert_eq!(weight_cache().declines(), declines + 1);
    assert!(weight_arena().stats().failures >= 1);
    let mut want = vec![0f32; pr.m * pr.p.n];
    matmul_reference(
        &pr.a,
        pr.m,
        &NBitsWeight {
            b: &pr.b,
            scales: &pr.scales,
            zero_points: pr.zp.as_deref(),
            p: &pr.p,
        },
        None,
        &mut want,
    );
    let mut unp = vec![0f32; pr.m * pr.p.n];
    matmul_unpacked(
        &pr.a,
        pr.m,
        &NBitsWeight {
            b: &pr.b,
            scales: &pr.scales,
            zero_points: pr.zp.as_deref(),
            p: &pr.p,
        },
        None,
        &mut unp,
        &Serial,
    )
    .unwrap();
    assert!(rel_l2(&unp, &want) <= 1e-5);

    weight_arena().set_mapped_limit(None);
    let w = weight_cache()
        .try_get_or_pack(
            &key,
            pr.b.len() * 2,
            || try_pack(&pr.b, &pr.scales, pr.zp.as_deref(), &pr.p),
            |w| w.bytes(),
        )
        .expect("packs again without the limit");
    assert_eq!(
        w.held_bytes() as usize,
        w.bytes(),
        "grant settled to the arena bytes"
    );
}
