//! Where a decode token's time goes around and between the int4 GEMVs (issue 17). Not a
//! benchmark under BENCHMARKING.md rules (no ORT arm, no assertions): a diagnostic.
//!
//! `cargo run --release -p rcpu --example decode_anatomy [layers hidden kv inter vocab threads
//! passes gaps_us...]` (default 24 896 256 4864 151936 2 5 0 10: Qwen2-0.5B's 121 MatMulNBits
//! calls of one decode token, acc 4, block 32, no zero points, packed as the plugin packs them
//! into the huge-page weight arena, on the plugin's lanes).
//!
//! Per pass it runs the sequence back to back (qkv, o_proj, gate, up, down per layer, then
//! lm_head) with a busy "glue" gap of `gap_us` on the caller between calls (0 = back to back),
//! and, in the same pass, a plain two-lane read of the same bytes (per matrix, two halves per
//! dispatch, from a huge-page buffer) and one dispatch reading all of them (the ceiling).
//!
//! Every chunk of every dispatch is timed through a `Par` wrapper around the lanes (which lane
//! ran it, start, end), so per dispatch it reports: the time from entering the dispatch to the
//! first chunk start of the caller and of the worker (wake-up), the end imbalance (the earlier
//! lane's wait for the later one's last chunk), the exit (last chunk end to the dispatch
//! returning), the call's own work outside the dispatch (preparing A, the after-call scans),
//! and the first-chunk ramp (a lane's first chunk time over the median chunk time of the same
//! dispatch: about 1 for the even schedule, whose chunks are within one column group of each
//! other; the guided schedule's first chunks are longer by design, so its ramp reads high; the
//! segmented one has one chunk per lane, so its ramp reads 1).
//!
//! `--q=0.1` prints the per-shape columns at that quantile (default 0.5, the median); the
//! last column is the plain read's time over the call's at that quantile.
//!
//! `--arms=even,guided,segmented+hint` (default `guided+hint-l2,segmented+hint`: the library
//! before and after issue 17's changes) interleaves arms pass by pass in the same process: the
//! decode chunk schedule of `par::StreamSplit` (`par::set_stream_schedule`, diagnostics only;
//! segmented is the library's default); with `+hint`, as each call starts the idle worker is
//! asked to read the next call's second segment once its share of this call is done
//! (`Lanes::idle_read` with `matmul_nbits::decode_second_segment`, what the MatMulNBits node does
//! once it has seen the order of its session's calls twice); with `-l2`,
//! the tiles prefetch as before issue 17 (L1 2048 bytes ahead, no L2 prefetch; `prefetch`);
//! with `+pfN`, the one-row L1 distance is N bytes (0: none) in place of the tuner's choice.
//! Every other arm prefetches as the library does: over one row, the distance its tuner chose
//! (`matmul_nbits::row1_tuner`, which counts this example's calls too; with a few passes most of
//! them come before its first trial, after 1024 calls, so at its first choice, 3072 bytes). With the
//! vCPUs apart (one read of everything ~61 GB/s), `--arms=segmented+hint+pf0,segmented+hint+pf3072`:
//! the sequence at 81.1% of the one-read ceiling without the prefetch, 72.5% with it.
//!
//! Arm `program` (and `program+ahead`) asks what the token's ~121 hand-overs cost: the whole
//! sequence runs as ONE dispatch with one chunk per lane, each lane running its contiguous
//! share of every call (the even split, A prepared on every lane) and meeting the others at a
//! spin barrier after each call, where a call of the other arms is a dispatch of its own (the
//! caller preparing A, publishing the job, the worker waking, the join). With `+ahead` a lane
//! that reaches a barrier first reads its share of the next call's weights while it waits (at
//! most `IDLE_PREFETCH_SEGMENT_MAX` bytes), as an idle worker reads its hint. Its per-shape
//! table is left out (its calls are not dispatches); the pass also times the plain reads the
//! same way (`read program`: one dispatch, a barrier after each matrix) beside the read per
//! matrix (a dispatch each) and the one read of everything.
//! The barrier needs every lane in the program at once (each lane holds one chunk until the
//! others arrive, so none can take a second): a panic on one lane would leave the others
//! waiting for ever, which is acceptable in a diagnostic and nowhere else.

#[path = "common/plain_read.rs"]
mod plain_read;
#[path = "../tests/common/rng.rs"]
mod rng_common;

use plain_read::{read, sum};
use rcpu::kernels::matmul_nbits::prefetch::{
    reset_prefetch, set_l2_prefetch_bytes, set_prefetch_bytes,
};
use rcpu::kernels::matmul_nbits::{
    decode_second_segment, matmul_packed, pack, NBitsParams, PackedNBits, IDLE_PREFETCH_SEGMENT_MAX,
};
use rcpu::memory::AlignedBuf;
use rcpu::runtime::lanes::{Lanes, PoolConfig};
use rcpu::runtime::par::{set_stream_schedule, Dispatch, Par, StreamSchedule};
use rcpu::runtime::registry::pool_for;
use rcpu::runtime::IdleHint;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

fn now_ns() -> u64 {
    static T0: OnceLock<Instant> = OnceLock::new();
    T0.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

thread_local! {
    static IS_CALLER: Cell<bool> = const { Cell::new(false) };
}

const MAX_CHUNKS: usize = 1024;

/// One dispatch as seen from the chunks.
#[derive(Clone, Copy, Default)]
struct Disp {
    t0: u64,
    t1: u64,
    chunks: usize,
    caller_first: u64,
    worker_first: Option<u64>,
    caller_end: u64,
    worker_end: Option<u64>,
    caller_chunks: usize,
    ramp: f64,
}

/// The lanes with every chunk's (lane, start, end) recorded.
struct Traced<'a> {
    inner: &'a Lanes,
    start: Vec<AtomicU64>,
    end: Vec<AtomicU64>,
    /// 1 = caller, 2 = worker.
    who: Vec<AtomicU64>,
    log: Mutex<Vec<Disp>>,
}

impl<'a> Traced<'a> {
    fn new(inner: &'a Lanes) -> Self {
        let v = || (0..MAX_CHUNKS).map(|_| AtomicU64::new(0)).collect();
        Traced {
            inner,
            start: v(),
            end: v(),
            who: v(),
            log: Mutex::new(Vec::new()),
        }
    }

    fn take(&self) -> Vec<Disp> {
        std::mem::take(&mut self.log.lock().unwrap())
    }
}

impl Par for Traced<'_> {
    fn lanes(&self) -> usize {
        self.inner.lanes()
    }

    fn chunks(&self, kind: Dispatch, n: usize, f: &(dyn Fn(usize) + Sync)) {
        assert!(n <= MAX_CHUNKS);
        let t0 = now_ns();
        self.inner.chunks(kind, n, &|i| {
            let s = now_ns();
            f(i);
            let e = now_ns();
            let who = if IS_CALLER.with(Cell::get) { 1 } else { 2 };
            self.start[i].store(s, Ordering::Relaxed);
            self.end[i].store(e, Ordering::Relaxed);
            self.who[i].store(who, Ordering::Relaxed);
        });
        let t1 = now_ns();
        let mut d = Disp {
            t0,
            t1,
            chunks: n,
            caller_first: u64::MAX,
            ..Default::default()
        };
        let mut times = Vec::with_capacity(n);
        let (mut first_c, mut first_w) = (None::<(u64, u64)>, None::<(u64, u64)>);
        for i in 0..n {
            let (s, e) = (
                self.start[i].load(Ordering::Relaxed),
                self.end[i].load(Ordering::Relaxed),
            );
            times.push((e - s) as f64);
            if self.who[i].load(Ordering::Relaxed) == 1 {
                d.caller_chunks += 1;
                d.caller_first = d.caller_first.min(s - t0);
                d.caller_end = d.caller_end.max(e);
                if first_c.is_none_or(|(fs, _)| s < fs) {
                    first_c = Some((s, e - s));
                }
            } else {
                d.worker_first = Some(d.worker_first.unwrap_or(u64::MAX).min(s - t0));
                d.worker_end = Some(d.worker_end.unwrap_or(0).max(e));
                if first_w.is_none_or(|(fs, _)| s < fs) {
                    first_w = Some((s, e - s));
                }
            }
        }
        times.sort_by(f64::total_cmp);
        let med = times[times.len() / 2].max(1.0);
        let firsts: Vec<f64> = [first_c, first_w]
            .iter()
            .flatten()
            .map(|&(_, t)| t as f64 / med)
            .collect();
        d.ramp = firsts.iter().sum::<f64>() / firsts.len().max(1) as f64;
        self.log.lock().unwrap().push(d);
    }
}

/// A spin barrier for `n` lanes, reusable (a generation count). The last lane to arrive resets
/// the count, then bumps the generation (Release) that the others wait on (Acquire), so their
/// next arrival sees the reset count and everything written before the barrier.
struct SpinBarrier {
    n: usize,
    count: Line,
    gen: Line,
}

/// An atomic on a pair of cache lines of its own (the count the lanes write apart from the
/// generation they spin on).
#[repr(align(128))]
struct Line(AtomicUsize);

impl SpinBarrier {
    fn new(n: usize) -> Self {
        SpinBarrier {
            n,
            count: Line(AtomicUsize::new(0)),
            gen: Line(AtomicUsize::new(0)),
        }
    }

    /// Waits for every lane; meanwhile reads one byte of each cache line of `ahead`, 1 KiB
    /// between two looks at the generation.
    fn wait(&self, ahead: &[u8]) {
        let g = self.gen.0.load(Ordering::Acquire);
        if self.count.0.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.count.0.store(0, Ordering::Relaxed);
            self.gen.0.store(g + 1, Ordering::Release);
            return;
        }
        let mut at = 0;
        while self.gen.0.load(Ordering::Acquire) == g {
            if at < ahead.len() {
                let end = (at + 1024).min(ahead.len());
                let mut x = 0u8;
                for i in (at..end).step_by(64) {
                    x ^= ahead[i];
                }
                std::hint::black_box(x);
                at = end;
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// One lane's view of a program (arm `program`): a call's chunks are split into one contiguous
/// share per lane, this lane runs its own share, then waits at the barrier for the others,
/// reading its share of the next call's weights meanwhile (`aheads`, one per call; empty: no
/// reading ahead).
struct LanePar<'a> {
    lane: usize,
    lanes: usize,
    bar: &'a SpinBarrier,
    calls: AtomicUsize,
    aheads: &'a [&'a [u8]],
}

impl Par for LanePar<'_> {
    fn lanes(&self) -> usize {
        self.lanes
    }

    fn chunks(&self, _kind: Dispatch, n: usize, f: &(dyn Fn(usize) + Sync)) {
        for i in self.lane * n / self.lanes..(self.lane + 1) * n / self.lanes {
            f(i);
        }
        let c = self.calls.fetch_add(1, Ordering::Relaxed);
        self.bar
            .wait(self.aheads.get(c + 1).copied().unwrap_or(&[]));
    }
}

/// Lane `lane`'s share (of `lanes`) of `bytes`, at most `max` of it, cache-line aligned.
fn share(bytes: &[u8], lane: usize, lanes: usize, max: usize) -> &[u8] {
    let s = (bytes.len() * lane / lanes) & !63;
    let e = (bytes.len() * (lane + 1) / lanes).min(s.saturating_add(max));
    &bytes[s..e]
}

#[derive(Default)]
struct Samples(Vec<f64>);

impl Samples {
    fn q(&mut self, x: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        self.0.sort_by(f64::total_cmp);
        self.0[((self.0.len() - 1) as f64 * x) as usize]
    }
}

/// Per matrix shape: what the dispatches of that shape looked like.
#[derive(Default)]
struct ShapeStats {
    call: Samples,
    outside: Samples,
    caller_start: Samples,
    worker_start: Samples,
    imbalance: Samples,
    caller_waits: usize,
    worker_waits: usize,
    exit: Samples,
    ramp: Samples,
    chunks: usize,
}

fn spin_us(us: u64) {
    if us == 0 {
        return;
    }
    let s = Instant::now();
    while s.elapsed().as_micros() < us as u128 {
        std::hint::spin_loop();
    }
}

/// Arm `program`: the sequence as one dispatch, one chunk per lane (see the module docs).
fn run_program(
    lanes: &Lanes,
    seq: &[(usize, Arc<PackedNBits>)],
    a: &[f32],
    gap: u64,
    aheads: &[Vec<&[u8]>],
    outs: &[Mutex<Vec<f32>>],
) {
    let n = lanes.lanes();
    let bar = SpinBarrier::new(n);
    lanes.chunks(Dispatch::Decode, n, &|lane| {
        let lp = LanePar {
            lane,
            lanes: n,
            bar: &bar,
            calls: AtomicUsize::new(0),
            aheads: &aheads[lane],
        };
        // Each lane writes its own columns into a buffer of its own (the columns are disjoint;
        // a shared buffer would need the output lent across lanes).
        let mut out = outs[lane].lock().unwrap();
        for (_, m) in seq {
            if lane == 0 {
                spin_us(gap);
            }
            matmul_packed(&a[..m.params().k], 1, m, None, &mut out, &lp).unwrap();
        }
    });
}

/// The plain read of every matrix as one program: one dispatch, each lane reading its half of a
/// matrix, a barrier after each.
fn read_program(lanes: &Lanes, buf: &[u8], sizes: &[usize], gap: u64) {
    let n = lanes.lanes();
    let bar = SpinBarrier::new(n);
    lanes.chunks(Dispatch::Decode, n, &|lane| {
        let mut off = 0;
        for &sz in sizes {
            if lane == 0 {
                spin_us(gap);
            }
            std::hint::black_box(sum(share(&buf[off..off + sz], lane, n, usize::MAX)));
            bar.wait(&[]);
            off += sz;
        }
    });
}

fn main() {
    IS_CALLER.with(|c| c.set(true));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nums: Vec<u64> = args.iter().filter_map(|s| s.parse().ok()).collect();
    let arg = |i: usize, d: u64| *nums.get(i).unwrap_or(&d) as usize;
    let (layers, h, kv, inter, vocab, threads, passes) = (
        arg(0, 24),
        arg(1, 896),
        arg(2, 256),
        arg(3, 4864),
        arg(4, 151936),
        arg(5, 2),
        arg(6, 5),
    );
    let gaps: Vec<u64> = if nums.len() > 7 {
        nums[7..].to_vec()
    } else {
        vec![0, 10]
    };
    // Quantile of the per-shape columns (`--q=0.1`: p10, what survives a loaded machine).
    let qq: f64 = args
        .iter()
        .find_map(|a| a.strip_prefix("--q="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.5);
    let arms: Vec<(String, StreamSchedule, bool, bool)> = args
        .iter()
        .find_map(|a| a.strip_prefix("--arms="))
        .unwrap_or("guided+hint-l2,segmented+hint")
        .split(',')
        .map(|s| {
            let sched = if s.starts_with("guided") {
                StreamSchedule::Guided
            } else if s.starts_with("segmented") {
                StreamSchedule::Segmented
            } else {
                StreamSchedule::Even
            };
            (
                s.to_string(),
                sched,
                s.contains("+hint"),
                !s.contains("-l2"),
            )
        })
        .collect();

    let names = ["qkv", "o_proj", "gate", "up", "down", "lm_head"];
    let shapes = [
        (h, h + kv),
        (h, h),
        (h, inter),
        (h, inter),
        (inter, h),
        (h, vocab),
    ];
    let mut r = rng_common::Rng(7);
    let mut mk = |k: usize, n: usize| -> PackedNBits {
        let p = NBitsParams::new(k, n, 32, 4, false);
        let b: Vec<u8> = (0..n * p.k_blocks() * p.blob_bytes())
            .map(|_| r.next_u64() as u8)
            .collect();
        let scales: Vec<f32> = (0..n * p.k_blocks())
            .map(|_| 0.01 + (r.next_u64() % 64) as f32 * 1e-4)
            .collect();
        pack(&b, &scales, None, &p)
    };
    // (shape index, packed) in decode order.
    let mut seq: Vec<(usize, Arc<PackedNBits>)> = Vec::new();
    for _ in 0..layers {
        for (i, &(k, n)) in shapes[..5].iter().enumerate() {
            seq.push((i, Arc::new(mk(k, n))));
        }
    }
    seq.push((5, Arc::new(mk(shapes[5].0, shapes[5].1))));
    let sizes: Vec<usize> = seq.iter().map(|(_, m)| m.bytes()).collect();
    let total: usize = sizes.iter().sum();
    let mut huge = AlignedBuf::<u8>::try_zeroed(total).expect("plain buffer");
    for (i, b) in huge.as_mut_slice().iter_mut().enumerate() {
        *b = i as u8;
    }
    let a: Vec<f32> = (0..inter.max(h))
        .map(|i| (i % 13) as f32 * 0.1 - 0.6)
        .collect();
    let mut out = vec![0f32; vocab.max(inter).max(h + kv)];
    let lanes = pool_for(&PoolConfig {
        threads,
        ..Default::default()
    });
    let traced = Traced::new(&lanes);
    // Per lane, its share of every call's weights (arm `program+ahead`); none for `program`.
    let l = lanes.lanes();
    let shares: Vec<Vec<&[u8]>> = (0..l)
        .map(|lane| {
            seq.iter()
                .map(|(_, m)| share(m.weight_bytes(), lane, l, IDLE_PREFETCH_SEGMENT_MAX))
                .collect()
        })
        .collect();
    let prog_aheads = [vec![Vec::new(); l], shares];
    let prog_outs: Vec<Mutex<Vec<f32>>> = (0..l).map(|_| Mutex::new(out.clone())).collect();
    println!(
        "{} GEMVs ({layers} layers + lm_head), {:.1} MB packed, {} lanes, gaps {gaps:?} us",
        seq.len(),
        total as f64 / 1e6,
        lanes.lanes()
    );
    let gb = |bytes: usize, t: f64| bytes as f64 / t / 1e9;
    for &gap in &gaps {
        let n_arms = arms.len();
        let mut st: Vec<Vec<ShapeStats>> = (0..n_arms)
            .map(|_| (0..6).map(|_| ShapeStats::default()).collect())
            .collect();
        let mut seq_t: Vec<Samples> = (0..n_arms).map(|_| Samples::default()).collect();
        let mut gemv_sum: Vec<Samples> = (0..n_arms).map(|_| Samples::default()).collect();
        let (mut read_t, mut read_prog_t, mut all_t, mut read_shape) = (
            Samples::default(),
            Samples::default(),
            Samples::default(),
            (0..6).map(|_| Samples::default()).collect::<Vec<_>>(),
        );
        for pass in 0..passes {
            // Every arm runs every pass, the order rotated pass by pass.
            for j in 0..n_arms {
                let arm = (j + pass) % n_arms;
                if arms[arm].0.starts_with("program") {
                    set_stream_schedule(StreamSchedule::Even);
                    reset_prefetch();
                    let s0 = Instant::now();
                    let ahead = usize::from(arms[arm].0.contains("+ahead"));
                    run_program(&lanes, &seq, &a, gap, &prog_aheads[ahead], &prog_outs);
                    let t = s0.elapsed().as_secs_f64();
                    seq_t[arm].0.push(t);
                    gemv_sum[arm]
                        .0
                        .push(t - gap as f64 * 1e-6 * seq.len() as f64);
                    continue;
                }
                let hint = arms[arm].2;
                set_stream_schedule(arms[arm].1);
                if arms[arm].3 {
                    reset_prefetch();
                    if let Some(d) = arms[arm].0.split("+pf").nth(1) {
                        set_prefetch_bytes(d.parse().expect("arm +pfN: N is a byte count"));
                    }
                } else {
                    // The L1 prefetch as it was before issue 17.
                    set_prefetch_bytes(2048);
                    set_l2_prefetch_bytes(0);
                }
                let s0 = Instant::now();
                let mut in_gemv = 0.0;
                for (idx, (shape, m)) in seq.iter().enumerate() {
                    spin_us(gap);
                    let s = now_ns();
                    if hint {
                        // As the MatMulNBits node: the next call's hint, posted as this one starts.
                        let next = &seq[(idx + 1) % seq.len()].1;
                        let h = IdleHint::new(next, decode_second_segment(next, lanes.lanes()));
                        lanes.idle_read(Some(h));
                    }
                    matmul_packed(&a[..m.params().k], 1, m, None, &mut out, &traced).unwrap();
                    let e = now_ns();
                    let d = traced.take()[0];
                    in_gemv += (e - s) as f64 * 1e-9;
                    let x = &mut st[arm][*shape];
                    x.call.0.push((e - s) as f64 * 1e-9);
                    x.outside.0.push(((e - s) - (d.t1 - d.t0)) as f64 * 1e-9);
                    x.caller_start.0.push(d.caller_first as f64 * 1e-9);
                    x.chunks = d.chunks;
                    x.ramp.0.push(d.ramp);
                    if let (Some(wf), Some(we)) = (d.worker_first, d.worker_end) {
                        x.worker_start.0.push(wf as f64 * 1e-9);
                        let (ce, last) = (d.caller_end, d.caller_end.max(we));
                        if ce < we {
                            x.caller_waits += 1;
                        } else {
                            x.worker_waits += 1;
                        }
                        x.imbalance.0.push(ce.abs_diff(we) as f64 * 1e-9);
                        x.exit.0.push((d.t1 - last) as f64 * 1e-9);
                    }
                }
                seq_t[arm].0.push(s0.elapsed().as_secs_f64());
                gemv_sum[arm].0.push(in_gemv);
            }
            let s0 = Instant::now();
            let mut off = 0;
            for (idx, (shape, _)) in seq.iter().enumerate() {
                spin_us(gap);
                let s = Instant::now();
                read(&lanes, &huge.as_slice()[off..off + sizes[idx]], 2);
                read_shape[*shape].0.push(s.elapsed().as_secs_f64());
                off += sizes[idx];
            }
            read_t.0.push(s0.elapsed().as_secs_f64());
            let s0 = Instant::now();
            read_program(&lanes, huge.as_slice(), &sizes, gap);
            read_prog_t.0.push(s0.elapsed().as_secs_f64());
            let s0 = Instant::now();
            read(&lanes, huge.as_slice(), 2);
            all_t.0.push(s0.elapsed().as_secs_f64());
        }
        let glue = gap as f64 * 1e-6 * seq.len() as f64;
        println!(
            "\n== gap {gap} us: plain read per matrix {:.1} GB/s (glue excluded), as one program \
             {:.1} GB/s, one read of everything {:.1} GB/s",
            gb(total, read_t.q(0.5) - glue),
            gb(total, read_prog_t.q(0.5) - glue),
            gb(total, all_t.q(0.5)),
        );
        for (arm, (name, _, _, _)) in arms.iter().enumerate() {
            let program = name.starts_with("program");
            println!(
                "-- arm {name}: whole sequence p10 {:.2} p50 {:.2} ms incl. glue {:.2} ms; \
                 inside the calls p50 {:.2} ms = {:.1} GB/s = {:.1}% of the one-read ceiling",
                seq_t[arm].q(0.1) * 1e3,
                seq_t[arm].q(0.5) * 1e3,
                glue * 1e3,
                gemv_sum[arm].q(0.5) * 1e3,
                gb(total, gemv_sum[arm].q(0.5)),
                100.0 * all_t.q(0.5) / gemv_sum[arm].q(0.5),
            );
            println!(
                "{:>7} {:>6} {:>9} {:>9} {:>7} {:>8} {:>8} {:>8} {:>9} {:>8} {:>6} {:>5} {:>9}",
                "shape",
                "chunks",
                "call us",
                "read us",
                "out us",
                "c.start",
                "w.start",
                "imbal",
                "c/w wait",
                "exit",
                "ramp",
                "GB/s",
                "read/call"
            );
            for (i, x) in st[arm].iter_mut().enumerate().filter(|_| !program) {
                let bytes = seq
                    .iter()
                    .find(|(s, _)| *s == i)
                    .map_or(0, |(_, m)| m.bytes());
                let call = x.call.q(qq);
                println!(
                    "{:>7} {:>6} {:>9.1} {:>9.1} {:>7.2} {:>8.2} {:>8.2} {:>8.2} {:>4}/{:<4} \
                     {:>8.2} {:>6.2} {:>5.1} {:>9.3}",
                    names[i],
                    x.chunks,
                    call * 1e6,
                    read_shape[i].q(qq) * 1e6,
                    x.outside.q(qq) * 1e6,
                    x.caller_start.q(qq) * 1e6,
                    x.worker_start.q(qq) * 1e6,
                    x.imbalance.q(qq) * 1e6,
                    x.caller_waits,
                    x.worker_waits,
                    x.exit.q(qq) * 1e6,
                    x.ramp.q(qq),
                    gb(bytes, call),
                    read_shape[i].q(qq) / call
                );
            }
        }
    }
    let c = lanes.counters();
    println!("\npool counters: {c:?}");
}
