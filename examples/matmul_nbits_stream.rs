//! How close the MatMulNBits M=1 kernel comes to a plain read of its own packed weights, on the
//! same lanes, in the same minute (DRAM bandwidth on a shared VM drifts). Not a benchmark under
//! BENCHMARKING.md rules (no ORT arm): a diagnostic for the streaming efficiency of the kernel
//! and of the chunk split.
//!
//! `cargo run --release -p rcpu --example matmul_nbits_stream [K N threads passes]`
//! (default 4096 86016 2 3: 226 MB packed, well past L3). Prints per pass: the kernel (acc 4,
//! block 32, zero points) and a plain read of the packed weight bytes split as the kernel splits
//! them (`par::StreamSplit` over column groups) and in two contiguous halves; best of
//! 10 each.
//!
//! `... --example matmul_nbits_stream -- --layers [L hidden inter threads passes]` (default
//! 24 896 4864 2 5: Qwen2-0.5B's decoder, 206 MB): the five GEMVs of each of L decoder layers
//! (qkv hidden x (hidden + 256), o_proj hidden x hidden, gate and up hidden x inter, down
//! inter x hidden; acc 4, block 32, no zero points, f16 scales, as the generated models) run
//! back to back as decode runs them, against a plain read of the same bytes: one dispatch per
//! matrix (two contiguous halves each, the same dispatch count), from a buffer on 4 KiB pages
//! and from one advised for huge pages (the packed weights themselves live in the huge-page
//! weight arena, `rcpu::memory::weight_arena`, back to back in pack order). Per matrix shape:
//! p10 / p50 of per-call
//! times over layers and passes (a preempted call falls out of p10 on a loaded machine).
//!
//! `... -- --sweep [K N threads rounds copies acc M] [--pf=0,512,1024,2048]` (default 896
//! 4864 2 20 24 4 1): the kernel at each software prefetch distance
//! (`matmul_nbits::prefetch`), interleaved call by call in one process over `copies` copies of
//! the weight (so each call streams bytes the previous calls did not touch; past L3 takes
//! several hundred MB, e.g. 200 copies at K=896 N=4864); p10 / p50 per arm. An arm is
//! `L1[/L2]` (the L1 and the `prefetcht2` distance, L2 defaulting to this CPU's
//! `default_l2_prefetch_bytes()`; 0 = off), `guided:L1[/L2]` (the same on the guided split
//! instead of the segmented one), `read` (a plain two-lane read of the packed bytes in two
//! contiguous halves, the rate to compare with), `reads` (each group's packed bytes, the groups
//! in two contiguous halves: the kernel's bytes per lane, without its arithmetic; before the
//! records layout, when the scales were a second array, each group's codes and then its
//! scales), or `two:PF` / `rec:PF` (`common/layout_tile.rs`, a copy of the VNNI tile's M=1 body,
//! over copies of the same codes and f16 scales in two layouts: codes and scales as two streams, as
//! packed before, or one stream of records, each block's codes followed by its scales, as packed
//! now; PF = its L1 prefetch distance, 0 = none; the groups in two contiguous halves; both checked
//! bit for bit against a scalar result before timing).
//!
//! What `reads` showed (on the two-stream layout, K=896 N=4864, 200 copies, p10): the second
//! stream costs about its bytes (the two vCPUs apart, each with its own path to memory: 38.0 us
//! against 32.8 us for the codes alone, 12% fewer bytes), while the kernel, 46.0 us in the same
//! run, streams its bytes at 0.83 of that plain read. With one lane the same shows in any placement
//! (kernel 78.6-85.6 us against 66.9-75.7, 0.84-0.90; also at K=4864 N=896): the kernel's own
//! stream is the gap. No prefetch variant closed it (one lane, arms interleaved; the default 3072
//! bytes ahead on every line against: the scales 12-48 blocks ahead instead of 6, within 2%; a
//! second weight prefetch 6144 bytes ahead as `prefetcht0`, `prefetcht1` or `prefetchnta`, 6-9%
//! slower, 12288 ahead 25-28%; the 3072-byte prefetch on every other line only, 17-20% slower,
//! every fourth, 8-12%; none, 4-6%).
//!
//! What the layout arms showed (one lane, the vCPUs near each other, 200 copies, p10,
//! three runs, `--sweep K N 1 24 200 4 1 --pf=3072/0,two:3072,two:0,rec:0,reads`): the gap is
//! the two streams together with the software prefetch, not the arithmetic. K=896 N=4864: the
//! kernel 76.2 / 79.3 / 77.2 us, `two:3072` 74.3 / 76.4 / 73.7, `two:0` 70.0 / 73.9 / 70.4,
//! `rec:0` 67.4 / 70.2 / 67.3, the plain read of the same bytes 66.9 / 70.4 / 67.0. K=4864
//! N=896: the kernel 83.2 / 85.3 / 84.3, `two:3072` 76.6 / 78.6 / 77.8, `two:0` 81.3 / 83.1 /
//! 81.8, `rec:0` 70.5 / 73.6 / 71.9, the plain read 70.0 / 73.0 / 71.5. One stream of records
//! without a software prefetch streams at the plain read's rate (0.99-1.01 of it) where the
//! packed layout reaches 0.84-0.90; records with the 3072-byte prefetch were slower than either
//! (81.6 us at K=896 N=4864). Two lanes near each other share one path, and every arm comes within
//! a few percent of the plain read (`rec:0` 1-5% ahead of `two:3072`). A C loop of the same shape
//! (per block 512 bytes of codes, two `vpdpbusd` per 64 bytes, its 64 bytes of scales next to
//! them or in a second array) showed the same on one lane: 29.4-32.6 GB/s for one stream without
//! prefetch, 26.6-28.4 for two streams with it. So the packed layout became the records
//! (an earlier build of them measured no gain per token, but with two lanes near each other, where
//! the shared path and not a lane's stream is the limit; the far placement and hosts where a lane
//! has a path of its own are where a lane's stream counts).

#[path = "common/timing.rs"]
mod timing;

#[path = "common/layout_tile.rs"]
mod layout_tile;

use plain_read::{read, sum};
use rcpu::kernels::matmul_nbits::prefetch::{
    default_l2_prefetch_bytes, reset_prefetch, set_l2_prefetch_bytes, set_prefetch_bytes,
};
use rcpu::kernels::matmul_nbits::{matmul_packed, pack, NBitsParams, PackedNBits, NR};
use rcpu::memory::AlignedBuf;
use rcpu::runtime::lanes::{Lanes, PoolConfig};
use rcpu::runtime::par::{set_stream_schedule, Dispatch, Par, StreamSchedule, StreamSplit};
use rcpu::runtime::registry::pool_for;
use std::time::Instant;

use timing::best_secs as best;

#[path = "common/plain_read.rs"]
mod plain_read;
#[path = "../tests/common/rng.rs"]
mod rng_common;

/// The shared xorshift64 from a fixed seed.
fn rng() -> impl FnMut() -> u64 {
    let mut r = rng_common::Rng(7);
    move || r.next_u64()
}

/// A random block-32 weight at accuracy level `acc` of K x N, packed.
fn packed(
    k: usize,
    n: usize,
    acc: usize,
    zero_points: bool,
    rnd: &mut impl FnMut() -> u64,
) -> PackedNBits {
    let p = NBitsParams::new(k, n, 32, acc, zero_points);
    let b: Vec<u8> = (0..n * p.k_blocks() * p.blob_bytes())
        .map(|_| rnd() as u8)
        .collect();
    let scales: Vec<f32> = (0..n * p.k_blocks())
        .map(|_| 0.01 + (rnd() % 64) as f32 * 1e-4)
        .collect();
    let zp: Vec<u8> = (0..n * p.zp_row_bytes()).map(|_| rnd() as u8).collect();
    pack(&b, &scales, zero_points.then_some(&zp[..]), &p)
}

/// Reads each column group's records (its codes and scales, as packed), the groups in two
/// contiguous halves.
fn read_groups(lanes: &Lanes, m: &PackedNBits) {
    let g = m.params().n.div_ceil(NR);
    let half = g.div_ceil(2);
    lanes.chunks(Dispatch::Decode, 2, &|i| {
        let mut s = 0u64;
        for gi in i * half..((i + 1) * half).min(g) {
            s = s.wrapping_add(sum(m.group(gi).rec));
        }
        std::hint::black_box(s);
    });
}

fn main() {
    let layers = std::env::args().any(|a| a == "--layers");
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let arg = |i: usize, d: usize| *args.get(i).unwrap_or(&d);
    if std::env::args().any(|a| a == "--sweep") {
        let arms: Vec<Arm> = std::env::args()
            .find_map(|a| a.strip_prefix("--pf=").map(String::from))
            .unwrap_or("0,512,1024,2048".into())
            .split(',')
            .filter_map(Arm::parse)
            .collect();
        let (k, n, th) = (arg(0, 896), arg(1, 4864), arg(2, 2));
        sweep(
            k,
            n,
            arg(6, 1),
            th,
            arg(3, 20),
            arg(4, 24),
            arg(5, 4),
            &arms,
        );
        return;
    }
    if layers {
        let (l, h, inter) = (arg(0, 24), arg(1, 896), arg(2, 4864));
        decoder(l, h, inter, arg(3, 2), arg(4, 5));
    } else {
        single(arg(0, 4096), arg(1, 86016), arg(2, 2), arg(3, 3));
    }
}

fn single(k: usize, n: usize, threads: usize, passes: usize) {
    let packed = packed(k, n, 4, true, &mut rng());
    let a: Vec<f32> = (0..k).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect();
    let mut out = vec![0f32; n];
    let lanes = pool_for(&PoolConfig {
        threads,
        ..Default::default()
    });
    let (all, w) = (packed.bytes() as f64, packed.weight_bytes());
    let groups = n.div_ceil(NR);
    let parts = StreamSplit::new(groups, w.len() / groups, lanes.lanes()).chunks();
    println!(
        "K={k} N={n}: {:.0} MB packed ({:.0} MB of records), {} lanes",
        all / 1e6,
        w.len() as f64 / 1e6,
        lanes.lanes()
    );
    for pass in 0..passes {
        let t = best(10, || {
            matmul_packed(&a, 1, &packed, None, &mut out, &*lanes).unwrap();
        });
        let tc = best(10, || read(&lanes, w, parts));
        let th = best(10, || read(&lanes, w, 2));
        println!(
            "pass {pass}: kernel {:.1} GB/s | plain read: kernel's split {:.1} GB/s, \
             halves {:.1} GB/s",
            all / t / 1e9,
            w.len() as f64 / tc / 1e9,
            w.len() as f64 / th / 1e9
        );
    }
}

fn decoder(layers: usize, h: usize, inter: usize, threads: usize, passes: usize) {
    let shapes = [
        ("qkv", h, h + 256),
        ("o_proj", h, h),
        ("gate", h, inter),
        ("up", h, inter),
        ("down", inter, h),
    ];
    let mut rnd = rng();
    let mats: Vec<Vec<PackedNBits>> = (0..layers)
        .map(|_| {
            shapes
                .iter()
                .map(|&(_, k, n)| packed(k, n, 4, false, &mut rnd))
                .collect()
        })
        .collect();
    let sizes: Vec<usize> = mats[0].iter().map(|m| m.bytes()).collect();
    let total: usize = sizes.iter().sum::<usize>() * layers;
    let plain: Vec<u8> = (0..total).map(|i| i as u8).collect();
    // The same bytes in a buffer advised for transparent huge pages (4 KiB vs 2 MiB pages).
    let mut huge = AlignedBuf::<u8>::try_zeroed(total).expect("plain buffer");
    huge.as_mut_slice().copy_from_slice(&plain);
    let a: Vec<f32> = (0..inter.max(h))
        .map(|i| (i % 13) as f32 * 0.1 - 0.6)
        .collect();
    let mut out = vec![0f32; inter.max(h + 256)];
    let lanes = pool_for(&PoolConfig {
        threads,
        ..Default::default()
    });
    println!(
        "{layers} layers, hidden {h}, inter {inter}: {:.1} MB packed per pass, {} lanes, \
         per-layer MB {:?}",
        total as f64 / 1e6,
        lanes.lanes(),
        sizes.iter().map(|s| *s as f64 / 1e6).collect::<Vec<_>>()
    );
    // Every call is timed on its own; per shape the 10th and 50th percentile over all layers and
    // passes, so calls a foreign process preempted (a shared, loaded machine) fall out. Plain
    // reads per matrix from the 4 KiB-page buffer and from the huge-page one alternate order
    // every pass.
    let mut kern: Vec<Vec<f64>> = vec![vec![]; 5];
    let mut plain_t: [Vec<Vec<f64>>; 2] = [vec![vec![]; 5], vec![vec![]; 5]];
    let mut whole = [vec![], vec![], vec![]];
    for pass in 0..passes {
        let s0 = Instant::now();
        for layer in &mats {
            for (i, m) in layer.iter().enumerate() {
                let s = Instant::now();
                matmul_packed(&a[..m.params().k], 1, m, None, &mut out, &*lanes).unwrap();
                kern[i].push(s.elapsed().as_secs_f64());
            }
        }
        whole[0].push(s0.elapsed().as_secs_f64());
        for which in [pass % 2, 1 - pass % 2] {
            let buf = if which == 0 {
                &plain[..]
            } else {
                huge.as_slice()
            };
            let s0 = Instant::now();
            let mut off = 0;
            for _ in 0..layers {
                for (i, sz) in sizes.iter().enumerate() {
                    let s = Instant::now();
                    read(&lanes, &buf[off..off + sz], 2);
                    plain_t[which][i].push(s.elapsed().as_secs_f64());
                    off += sz;
                }
            }
            whole[1 + which].push(s0.elapsed().as_secs_f64());
        }
    }
    let pct = |v: &mut Vec<f64>, q: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q) as usize]
    };
    let gb = |bytes: usize, t: f64| bytes as f64 / t / 1e9;
    println!(
        "whole pass p50: kernels {:.1} GB/s, plain read per matrix {:.1} GB/s (4 KiB pages), \
         {:.1} GB/s (huge pages)",
        gb(total, pct(&mut whole[0], 0.5)),
        gb(total, pct(&mut whole[1], 0.5)),
        gb(total, pct(&mut whole[2], 0.5))
    );
    for (i, (name, _, _)) in shapes.iter().enumerate() {
        let (k10, k50) = (pct(&mut kern[i], 0.1), pct(&mut kern[i], 0.5));
        let (r10, r50) = (pct(&mut plain_t[0][i], 0.1), pct(&mut plain_t[0][i], 0.5));
        let (h10, h50) = (pct(&mut plain_t[1][i], 0.1), pct(&mut plain_t[1][i], 0.5));
        println!(
            "{name:>6}: kernel p10 {:.1} us ({:.1} GB/s) p50 {:.1} | plain read 4K pages p10 \
             {:.1} us ({:.1} GB/s) p50 {:.1} | huge pages p10 {:.1} us ({:.1} GB/s) p50 {:.1} | \
             kernel/read(4K) p10 {:.2}, kernel/read(huge) p10 {:.2}",
            k10 * 1e6,
            gb(sizes[i], k10),
            k50 * 1e6,
            r10 * 1e6,
            gb(sizes[i], r10),
            r50 * 1e6,
            h10 * 1e6,
            gb(sizes[i], h10),
            h50 * 1e6,
            r10 / k10,
            h10 / k10
        );
    }
}

/// One arm of `--sweep`.
#[derive(Clone, Copy)]
enum Arm {
    /// The kernel with the L1 and L2 prefetch distances, on the guided split when `guided`.
    Kernel { l1: usize, l2: usize, guided: bool },
    /// A plain two-lane read of the packed bytes in two contiguous halves.
    Read,
    /// A plain two-lane read of each group's packed bytes, the groups in two
    /// contiguous halves (the kernel's two streams per lane, without its arithmetic).
    ReadScales,
    /// `layout_tile` (the VNNI tile's M=1 shape) over copies of the weights in one of two
    /// layouts, the groups in two contiguous halves: `records` = one stream of records (each
    /// block's codes, then its scales), else codes and scales as two streams (the packed layout);
    /// `pf` = the L1 prefetch distance (0: none).
    Layout { records: bool, pf: usize },
}

impl Arm {
    /// `read`, or `[guided:]L1[/L2]` (L2 defaults to this CPU's `default_l2_prefetch_bytes()`).
    fn parse(s: &str) -> Option<Arm> {
        if s == "read" {
            return Some(Arm::Read);
        }
        if s == "reads" {
            return Some(Arm::ReadScales);
        }
        for (prefix, records) in [("two:", false), ("rec:", true)] {
            if let Some(pf) = s.strip_prefix(prefix) {
                let pf = pf.parse().ok()?;
                return Some(Arm::Layout { records, pf });
            }
        }
        let (guided, s) = match s.strip_prefix("guided:") {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (l1, l2) = match s.split_once('/') {
            Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
            None => (s.parse().ok()?, default_l2_prefetch_bytes()),
        };
        Some(Arm::Kernel { l1, l2, guided })
    }

    fn label(&self) -> String {
        match *self {
            Arm::Read => "plain read (packed bytes)".into(),
            Arm::ReadScales => "plain read (group by group)".into(),
            Arm::Layout { records, pf } => {
                let l = if records { "records" } else { "two streams" };
                format!("layout_tile {l:>11} pf={pf:>5}")
            }
            Arm::Kernel { l1, l2, guided } => {
                let split = if guided { "guided" } else { "segmented" };
                format!("pf={l1:>5}/{l2:<5} {split:>9}")
            }
        }
    }
}

/// The kernel at each arm's prefetch distances and split (and the plain read), interleaved
/// call by call in one process (order rotated every round) over `copies` copies of the weight.
/// GB/s count the bytes each arm streams (the read: the packed bytes, so its rate compares with
/// the kernel's over all packed bytes).
#[allow(clippy::too_many_arguments)]
fn sweep(
    k: usize,
    n: usize,
    rows: usize,
    threads: usize,
    reps: usize,
    layers: usize,
    acc: usize,
    arms: &[Arm],
) {
    let mut rnd = rng();
    // `layers` copies so that each call streams weights no other call just touched.
    let mats: Vec<PackedNBits> = (0..layers)
        .map(|_| packed(k, n, acc, false, &mut rnd))
        .collect();
    let a: Vec<f32> = (0..k * rows).map(|i| (i % 13) as f32 * 0.1 - 0.6).collect();
    let mut out = vec![0f32; n * rows];
    let lanes = pool_for(&PoolConfig {
        threads,
        ..Default::default()
    });
    let layouts = arms
        .iter()
        .any(|a| matches!(a, Arm::Layout { .. }))
        .then(|| Layouts::new(&mats));
    let row_a = layout_tile::RowA::new(k.next_multiple_of(32), 32, rng());
    let mut t: Vec<Vec<f64>> = vec![vec![]; arms.len()];
    let mut j = 0;
    for r in 0..reps {
        for i in 0..arms.len() {
            let ai = (i + r) % arms.len();
            if let Arm::Kernel { l1, l2, guided } = arms[ai] {
                set_prefetch_bytes(l1);
                set_l2_prefetch_bytes(l2);
                set_stream_schedule(if guided {
                    StreamSchedule::Guided
                } else {
                    StreamSchedule::Segmented
                });
            }
            for _ in 0..layers.min(8) {
                let m = &mats[j % layers];
                j += 1;
                let s = Instant::now();
                match arms[ai] {
                    Arm::Read => read(&lanes, m.weight_bytes(), 2),
                    Arm::ReadScales => read_groups(&lanes, m),
                    Arm::Layout { records, pf } => {
                        let l = layouts.as_ref().expect("layout copies");
                        l.run(&lanes, (j - 1) % layers, records, pf, &row_a);
                    }
                    Arm::Kernel { .. } => {
                        matmul_packed(&a, rows, m, None, &mut out, &*lanes).unwrap();
                    }
                }
                t[ai].push(s.elapsed().as_secs_f64());
            }
        }
    }
    reset_prefetch();
    set_stream_schedule(StreamSchedule::Segmented);
    for (ai, arm) in arms.iter().enumerate() {
        let bytes = match arm {
            Arm::Read => mats[0].weight_bytes().len(),
            Arm::ReadScales | Arm::Kernel { .. } | Arm::Layout { .. } => mats[0].bytes(),
        };
        let v = &mut t[ai];
        v.sort_by(f64::total_cmp);
        let q = |x: f64| v[((v.len() - 1) as f64 * x) as usize];
        println!(
            "K={k} N={n} M={rows} acc={acc} lanes={threads} {}: p10 {:.1} us ({:.1} GB/s) p50 {:.1} us ({:.1} GB/s)",
            arm.label(),
            q(0.1) * 1e6,
            bytes as f64 / q(0.1) / 1e9,
            q(0.5) * 1e6,
            bytes as f64 / q(0.5) / 1e9
        );
    }
}

/// Copies of every weight's codes and f16 scales in the two layouts `layout_tile` compares,
/// each in one buffer like the weight arena (huge pages): `two` = per copy all groups' codes,
/// then all groups' scales; `records` = per copy, per group, per block its codes then its scales.
struct Layouts {
    two: AlignedBuf<u8>,
    records: AlignedBuf<u8>,
    /// Bytes per copy (the same in both), groups, blocks per group, block size.
    per_copy: usize,
    groups: usize,
    k_blocks: usize,
    bs: usize,
}

impl Layouts {
    fn new(mats: &[PackedNBits]) -> Layouts {
        let p = mats[0].params();
        let (groups, k_blocks, bs) = (p.n.div_ceil(NR), p.k_blocks(), p.block_size);
        let (wb, sb) = (k_blocks * bs * NR / 2, k_blocks * NR * 2);
        let per_copy = groups * (wb + sb);
        let mut two = AlignedBuf::<u8>::try_zeroed(per_copy * mats.len()).expect("layout copy");
        let mut records = AlignedBuf::<u8>::try_zeroed(per_copy * mats.len()).expect("layout copy");
        for (c, m) in mats.iter().enumerate() {
            let (t, r) = (
                &mut two.as_mut_slice()[c * per_copy..(c + 1) * per_copy],
                &mut records.as_mut_slice()[c * per_copy..(c + 1) * per_copy],
            );
            for g in 0..groups {
                let v = m.group(g);
                assert!(v.f16, "layout arms need f16 scales (acc 4)");
                // The packed records as they are, and split into codes and scales.
                r[g * (wb + sb)..(g + 1) * (wb + sb)].copy_from_slice(v.rec);
                let (bw, bsb) = (bs * NR / 2, NR * 2);
                for kb in 0..k_blocks {
                    let (c, sc) = (kb * (bw + bsb), v.scales_at(kb));
                    t[g * wb + kb * bw..g * wb + (kb + 1) * bw].copy_from_slice(&v.rec[c..c + bw]);
                    let s0 = groups * wb + g * sb + kb * bsb;
                    t[s0..s0 + bsb].copy_from_slice(&v.rec[sc..sc + bsb]);
                }
            }
        }
        let l = Layouts {
            two,
            records,
            per_copy,
            groups,
            k_blocks,
            bs,
        };
        // Both layouts must give the plain scalar result, bit for bit: per block the exact integer
        // dot of (code - 8) and A, then `total = fma(dot, scale, total)` as the tile does.
        let a = layout_tile::RowA::new(k_blocks * bs, bs, rng());
        for g in 0..groups {
            let v = mats[0].group(g);
            let mut want = [0f32; NR];
            for (col, w) in want.iter_mut().enumerate() {
                for kb in 0..k_blocks {
                    let dot: i32 = (kb * bs..(kb + 1) * bs)
                        .map(|k| {
                            let byte = v.chunk(k - k % 4)[4 * (col % 16) + k % 4];
                            let code = if col < 16 { byte & 0x0F } else { byte >> 4 };
                            (i32::from(code) - 8) * i32::from(a.q[k])
                        })
                        .sum();
                    *w = (dot as f32).mul_add(v.scale(kb, col), *w);
                }
            }
            for records in [false, true] {
                let got = layout_tile::tile::<false>(&l.group(0, g, records), &a, 0, 0);
                assert!(
                    got.iter()
                        .zip(&want)
                        .all(|(p, q)| p.to_bits() == q.to_bits()),
                    "layout_tile (records: {records}) differs from the scalar result in group {g}"
                );
            }
        }
        l
    }

    fn group(&self, copy: usize, g: usize, records: bool) -> layout_tile::GroupStreams<'_> {
        let (bw, bsb) = (self.bs * NR / 2, NR * 2);
        let (wb, sb) = (self.k_blocks * bw, self.k_blocks * bsb);
        let range = copy * self.per_copy..(copy + 1) * self.per_copy;
        if records {
            let at = g * (wb + sb);
            layout_tile::GroupStreams {
                bytes: &self.records.as_slice()[range],
                w_off: at,
                w_stride: bw + bsb,
                s_off: at + bw,
                s_stride: bw + bsb,
                k_blocks: self.k_blocks,
                block_size: self.bs,
            }
        } else {
            layout_tile::GroupStreams {
                bytes: &self.two.as_slice()[range],
                w_off: g * wb,
                w_stride: bw,
                s_off: self.groups * wb + g * sb,
                s_stride: bsb,
                k_blocks: self.k_blocks,
                block_size: self.bs,
            }
        }
    }

    /// One call: the groups of copy `copy` in two contiguous halves over the lanes. The two
    /// streams' layout prefetches the scales as the VNNI tile does (6 blocks ahead with the L1
    /// prefetch on); the records' scales come with the codes' prefetch.
    fn run(&self, lanes: &Lanes, copy: usize, records: bool, pf: usize, a: &layout_tile::RowA) {
        let half = self.groups.div_ceil(2);
        let sa = if records || pf == 0 {
            0
        } else {
            pf.div_ceil(self.bs * NR / 2)
        };
        lanes.chunks(Dispatch::Decode, 2, &|i| {
            for g in i * half..((i + 1) * half).min(self.groups) {
                let v = self.group(copy, g, records);
                let r = if pf == 0 {
                    layout_tile::tile::<false>(&v, a, 0, 0)
                } else {
                    layout_tile::tile::<true>(&v, a, pf, sa)
                };
                std::hint::black_box(r);
            }
        });
    }
}
