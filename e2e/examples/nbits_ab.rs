//! Interleaved A/B timing of one `com.microsoft.MatMulNBits` node: ORT's CPU EP vs rcpu, or
//! rcpu builds against each other. Every arm runs in its own child process (so ORT's spinning
//! threads never share a process with rcpu's lanes); the parent alternates the arm order every
//! round and reports the median over rounds of each arm's per-round p50 / p90.
//!
//! ```text
//! cargo run --release -p rcpu-e2e --example nbits_ab -- \
//!     --k 4096 --n 4096 --m 1 --acc 4 --threads 2 --rounds 15 --iters 200 \
//!     --arms ort,rcpu,rcpu
//! ```
//! An arm is `ort`, `rcpu` (target/release/librcpu_ep.so or `RCPU_PLUGIN`) or `rcpu@/path.so`
//! (another build). Ratios are `first arm / arm` (above 1: the arm is faster than the first).
//! Name one arm twice for the A/A null band. `--opts k=v,...` adds rcpu provider options (e.g.
//! `weight_cache_mb=0` to time the unpacked path). Before timing, each rcpu arm's output is compared
//! with the first ORT arm's (rel L2 <= 1e-4 for acc 0/1, 2e-2 for acc 4); a mismatch aborts.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rcpu_e2e::bench::conditions::loadavg;
use rcpu_e2e::onnx::{dtype::FLOAT, Attr, Dim, GraphBuilder};
use rcpu_e2e::stats::PluginStats;
use rcpu_e2e::{ort_with_rcpu, rand_f32, Ort, SessionSpec, Tensor};

#[derive(Clone, Debug)]
struct Shape {
    k: usize,
    n: usize,
    m: usize,
    acc: i64,
    block: usize,
    zp: bool,
    threads: usize,
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("bad value for {name}: {v}"))
        })
        .unwrap_or(default)
}

fn rand_u8(n: usize, seed: u64) -> Vec<u8> {
    rcpu_e2e::rng::Rng::seeded(seed).bytes(n)
}

fn model(s: &Shape) -> Vec<u8> {
    let kb = s.k.div_ceil(s.block);
    let b = rand_u8(s.n * kb * s.block / 2, 11);
    let scales: Vec<f32> = rand_f32(s.n * kb, 12)
        .iter()
        .map(|x| 0.01 + 0.02 * x.abs())
        .collect();
    let mut g = GraphBuilder::new("nbits", 17);
    g.input("A", FLOAT, &[Dim::Sym("M"), Dim::Fixed(s.k as i64)])
        .initializer_u8("B", &[s.n as i64, kb as i64, (s.block / 2) as i64], &b)
        .initializer_f32("scales", &[(s.n * kb) as i64], &scales);
    let mut inputs = vec!["A", "B", "scales"];
    if s.zp {
        let zp = rand_u8(s.n * kb.div_ceil(2), 13);
        g.initializer_u8("zp", &[(s.n * kb.div_ceil(2)) as i64], &zp);
        inputs.push("zp");
    }
    g.node(
        "MatMulNBits",
        "com.microsoft",
        "mmnb0",
        &inputs,
        &["Y"],
        &[
            ("K", Attr::Int(s.k as i64)),
            ("N", Attr::Int(s.n as i64)),
            ("bits", Attr::Int(4)),
            ("block_size", Attr::Int(s.block as i64)),
            ("accuracy_level", Attr::Int(s.acc)),
        ],
    )
    .output("Y", FLOAT);
    g.build()
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Child: build one session, write its output for the parity input to `out`, then serve
/// `run <iters>` requests with `p50 p90` (microseconds) lines.
fn child(arm: &str, s: &Shape, out: &str) {
    let bytes = model(s);
    let (ort, spec) = if arm == "ort" {
        let mut spec = SessionSpec::ort(Some(s.threads));
        spec.config
            .push(("session.intra_op.allow_spinning".into(), "1".into()));
        (Ort::get(), spec)
    } else {
        let t = s.threads.to_string();
        let mut opts = vec![("threads".to_string(), t)];
        // Extra provider options, e.g. `--opts weight_cache_mb=0` (forces the unpacked path).
        let extra: String = arg(
            &std::env::args().collect::<Vec<_>>(),
            "--opts",
            String::new(),
        );
        for kv in extra.split(',').filter(|x| !x.is_empty()) {
            let (k, v) = kv.split_once('=').expect("--opts k=v,...");
            opts.push((k.to_string(), v.to_string()));
        }
        let opts: Vec<(&str, &str)> = opts.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        (ort_with_rcpu(), SessionSpec::rcpu(&opts))
    };
    let sess = ort.session(&bytes, &spec).expect("session");
    let a = Tensor::f32(
        &[s.m as i64, s.k as i64],
        rand_f32(s.m * s.k, 5 + s.m as u64),
    );
    let y = sess.run(std::slice::from_ref(&a)).expect("run");
    let raw: Vec<u8> = y[0].as_f32().iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(out, raw).expect("write output");
    if arm != "ort" {
        let st = PluginStats::open().unwrap();
        st.reset().unwrap();
        sess.run(std::slice::from_ref(&a)).unwrap();
        let j = st.json().unwrap();
        eprintln!("[{arm}] ledger {}", j["ledger"]);
    }
    let stdin = std::io::stdin();
    let mut so = std::io::stdout();
    for line in stdin.lock().lines() {
        let line = line.unwrap();
        let Some(n) = line.strip_prefix("run ") else {
            break;
        };
        let iters: usize = n.trim().parse().unwrap();
        // A few warm-up calls after the idle gap, untimed.
        for _ in 0..3 {
            sess.run(std::slice::from_ref(&a)).unwrap();
        }
        let mut t = Vec::with_capacity(iters);
        let c0 = cpu_time();
        for _ in 0..iters {
            let t0 = Instant::now();
            sess.run(std::slice::from_ref(&a)).unwrap();
            t.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        let cpu = (cpu_time() - c0) / iters as f64;
        let p50 = pct(&mut t, 0.5);
        let p90 = pct(&mut t, 0.9);
        let p05 = pct(&mut t, 0.05);
        writeln!(so, "{p50} {p90} {p05} {cpu}").unwrap();
        so.flush().unwrap();
    }
}

/// CPU time this process's live threads have run (`rcpu_e2e::proc`'s per-thread reader:
/// schedstat, ns resolution), in microseconds. Immune to time lost to preemption, unlike wall time.
fn cpu_time() -> f64 {
    use rcpu_e2e::proc;
    proc::live_threads()
        .into_iter()
        .filter_map(|(tid, _)| proc::thread_cpu_time(tid).ok())
        .map(|d| d.as_secs_f64() * 1e6)
        .sum()
}

fn read_f32(path: &str) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let s = Shape {
        k: arg(&args, "--k", 4096),
        n: arg(&args, "--n", 4096),
        m: arg(&args, "--m", 1),
        acc: arg(&args, "--acc", 4),
        block: arg(&args, "--block", 32),
        zp: arg::<u8>(&args, "--zp", 1) != 0,
        threads: arg(&args, "--threads", 2),
    };
    if let Some(arm) = args
        .iter()
        .position(|a| a == "--child")
        .map(|i| args[i + 1].clone())
    {
        let out: String = arg(&args, "--out", String::new());
        child(&arm, &s, &out);
        return;
    }
    let rounds: usize = arg(&args, "--rounds", 15);
    let iters: usize = arg(&args, "--iters", 200);
    let arms: Vec<String> = arg(&args, "--arms", "ort,rcpu,rcpu".to_string())
        .split(',')
        .map(String::from)
        .collect();
    let exe = std::env::current_exe().unwrap();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .unwrap_or("")
        .to_string();
    let load0 = loadavg();
    let mut kids = Vec::new();
    let mut outs = Vec::new();
    for (i, arm) in arms.iter().enumerate() {
        let out = format!(
            "/tmp/nbits_ab_{}_{}_{i}.bin",
            std::process::id(),
            arm.replace('/', "_")
        );
        let mut cmd = Command::new(&exe);
        cmd.args(&args[1..])
            .args(["--child", arm.split('@').next().unwrap(), "--out", &out])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some(p) = arm.split_once('@').map(|x| x.1) {
            cmd.env("RCPU_PLUGIN", p);
        }
        let mut c = cmd.spawn().expect("spawn child");
        let so = BufReader::new(c.stdout.take().unwrap());
        let si = c.stdin.take().unwrap();
        kids.push((c, si, so));
        outs.push(out);
    }
    // Parity: first arm's output is the reference (wait for each child's first run).
    std::thread::sleep(Duration::from_millis(100));
    for o in &outs {
        while std::fs::metadata(o).map(|m| m.len()).unwrap_or(0) < (s.m * s.n * 4) as u64 {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let refy = read_f32(&outs[0]);
    let tol = if s.acc == 4 { 2e-2 } else { 1e-4 };
    for (arm, o) in arms.iter().zip(&outs).skip(1) {
        let y = read_f32(o);
        let (mut num, mut den) = (0f64, 0f64);
        for (a, b) in y.iter().zip(&refy) {
            num += ((a - b) as f64).powi(2);
            den += (*b as f64).powi(2);
        }
        let rel = (num / den.max(1e-30)).sqrt();
        println!("parity {arm} vs {}: rel_l2 {rel:.2e}", arms[0]);
        assert!(rel <= tol, "parity failure: {arm} rel_l2 {rel}");
    }
    let mut p50s = vec![Vec::new(); arms.len()];
    let mut p90s = vec![Vec::new(); arms.len()];
    let mut p05s = vec![Vec::new(); arms.len()];
    let mut cpus = vec![Vec::new(); arms.len()];
    for r in 0..rounds {
        let order: Vec<usize> = if r % 2 == 0 {
            (0..arms.len()).collect()
        } else {
            (0..arms.len()).rev().collect()
        };
        for i in order {
            let (_, si, so) = &mut kids[i];
            writeln!(si, "run {iters}").unwrap();
            si.flush().unwrap();
            let mut line = String::new();
            so.read_line(&mut line).unwrap();
            let v: Vec<f64> = line
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            p50s[i].push(v[0]);
            p90s[i].push(v[1]);
            p05s[i].push(v[2]);
            cpus[i].push(v[3]);
            // Let spinning threads of the arm just timed settle before the next arm.
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    for (_, si, _) in kids.iter_mut() {
        let _ = writeln!(si, "quit");
    }
    for (c, _, _) in kids.iter_mut() {
        let _ = c.wait();
    }
    for o in &outs {
        let _ = std::fs::remove_file(o);
    }
    let wbytes = (s.n * s.k / 2 + s.n * s.k.div_ceil(s.block) * 4) as f64;
    println!(
        "{cpu}\nshape M={} K={} N={} block={} zp={} acc={} threads={} rounds={rounds} iters={iters}; load {load0} -> {}",
        s.m, s.k, s.n, s.block, s.zp, s.acc, s.threads, loadavg()
    );
    let med: Vec<f64> = p50s.iter_mut().map(|v| pct(v, 0.5)).collect();
    for (i, arm) in arms.iter().enumerate() {
        let p90 = pct(&mut p90s[i], 0.5);
        let p05 = pct(&mut p05s[i], 0.5);
        let cpu = pct(&mut cpus[i], 0.5);
        let spread = (pct(&mut p50s[i], 0.25), pct(&mut p50s[i], 0.75));
        println!(
            "{:>3} {arm:<28} p50 {:7.1} us  p90 {:7.1}  p05 {:7.1}  cpu/iter {:7.1} us  (p50 IQR {:.1}-{:.1})  {:.1} GB/s  ratio {}/this {:.3}",
            i,
            med[i],
            p90,
            p05,
            cpu,
            spread.0,
            spread.1,
            wbytes / med[i] / 1e3,
            arms[0],
            med[0] / med[i]
        );
    }
    // A/A null: every arm named more than once, later occurrence over the first.
    for (i, a) in arms.iter().enumerate() {
        if let Some(j) = arms.iter().skip(i + 1).position(|b| b == a) {
            let j = i + 1 + j;
            println!("null_b_over_a {a}: {:.3}", med[j] / med[i]);
        }
    }
}
