//! The per-case report of `rcpu-bench llm`: per arm p50/p90 per token, CPU per token, weight
//! bytes, GB/s and its fraction of the same-run read bandwidth; the headline ORT/rcpu with its null
//! band and verdict, the steady-state verdict beside it; rcpu's ledger and pool counters per token.

use serde_json::{json, Value};

use super::args::Opts;
use super::counters;
use super::cpu_probe::unhindered;
use super::lane_probe::{Placement, FAR_NS};
use super::membw::Buffers;
use super::quant::{max, median, min};
use super::steady::{steady_start, SteadyCfg};
use super::target::Target;
use super::verdict::{verdict, NullBand};

/// What the timed rounds of one case gave, per arm (ort, rcpu, null).
pub struct Timed {
    /// Per round: p50 and p90 of ms per token.
    pub p50s: Vec<Vec<f64>>,
    pub p90s: Vec<Vec<f64>>,
    /// CPU seconds over the timed calls.
    pub cpu: [f64; 3],
    /// Timed samples (runs or generation steps).
    pub samples: [usize; 3],
    /// Foreign busy share of the arms' CPUs while they were timed.
    pub foreign: Option<f64>,
    /// Per round: the read bandwidth of a same-size buffer right after the round's arms (GB/s,
    /// `membw::Buffers::round`).
    pub read_gbps: Vec<f64>,
    /// Per round: the compute probe right after that read (ms, `cpu_probe::probe_ms`).
    pub probe_ms: Vec<f64>,
    /// Per round: the round trip of a cache line between the arms' first two CPUs right after
    /// the probe (ns, `lane_probe::round_trip_ns`; NaN on one CPU).
    pub lane_rt_ns: Vec<f64>,
    /// Per arm and round: where the CPUs sat over that arm's window (the round trips right before
    /// and after it and the one above all agree, or mixed).
    pub placement: [Vec<Placement>; 3],
}

/// The headline of per-round figures (per arm: ort, rcpu, null; lower is better): ORT/rcpu per
/// round, its median; the null band from the A/A ratio (null over its twin) and the verdict; the
/// steady-state verdict, which goes beside the ratio, never instead of it.
pub struct Headline {
    pub ratio: f64,
    pub band: Option<NullBand>,
    /// "[lo, hi]" of the symmetric band, or "unavailable".
    pub band_txt: String,
    /// "real", "noise" or "no verdict".
    pub word: &'static str,
    pub steady_word: String,
}

impl Headline {
    pub fn of(o: &Opts, per_round: &[Vec<f64>]) -> Headline {
        let n = per_round.iter().map(Vec::len).min().unwrap_or(0);
        let ratios: Vec<f64> = (0..n).map(|r| per_round[0][r] / per_round[1][r]).collect();
        let twin = if o.null_arm == "ort" { 0 } else { 1 };
        let nulls: Vec<f64> = (0..n)
            .map(|r| per_round[2][r] / per_round[twin][r])
            .collect();
        let ratio = median(&ratios);
        let band = NullBand::from_ratios(&nulls);
        let steady_word = steady_word(o, per_round, n);
        let (band_txt, word) = match &band {
            Some(b) => {
                let (lo, hi) = b.symmetric();
                (format!("[{lo:.3}, {hi:.3}]"), verdict(ratio, b).word())
            }
            None => ("unavailable".into(), "no verdict"),
        };
        Headline {
            ratio,
            band,
            band_txt,
            word,
            steady_word,
        }
    }
}

/// The steady-state verdict over `n` rounds per arm. Fewer rounds than the method's minimum
/// window (`SteadyCfg::default().min_len`) cannot show a steady suffix, so the verdict says the
/// run was too short instead of judging a window of two or three rounds steady.
fn steady_word(o: &Opts, per_round: &[Vec<f64>], n: usize) -> String {
    let min_len = SteadyCfg::default().min_len;
    if n < min_len {
        return format!("steady state not judged ({n} rounds < {min_len}; ratio over all rounds)");
    }
    let sc = SteadyCfg {
        k: o.steady_k,
        tol: o.steady_tol,
        min_len,
    };
    let steady: Vec<Option<usize>> = per_round.iter().map(|s| steady_start(s, &sc)).collect();
    match steady.iter().try_fold(0usize, |m, s| s.map(|s| m.max(s))) {
        Some(s) => format!("steady state reached from round {}", s + 1),
        None => "steady state NOT REACHED (ratio over all rounds)".into(),
    }
}

/// What the bandwidth figures divide: the weight bytes a token reads on each arm
/// (`[ort, rcpu, null]`, `llm.rs` `read_bytes`), the run's read bandwidth (GB/s, best pass before
/// the cases) and the same-size buffers read again after every round.
pub struct ReadFloor {
    pub bytes: [u64; 3],
    pub gbps: f64,
    pub reader: Buffers,
}

/// Passes of each buffer per round (their median is the round's read figure).
pub const ROUND_READ_PASSES: usize = 5;

/// A round's CPUs count as unhindered when its compute probe is within this factor of the run's
/// fastest (`cpu_probe::unhindered`); the probe's own spread on a quiet host is a few percent.
pub const PROBE_SLACK: f64 = 1.25;

/// Per round, the fraction of that round's read bandwidth an arm reached: `bytes` per token over
/// its p50 ms per token (`per_token` tokens per timed run), over the round's `read_gbps`.
pub fn round_fractions(bytes: u64, p50s: &[f64], per_token: f64, read_gbps: &[f64]) -> Vec<f64> {
    p50s.iter()
        .zip(read_gbps)
        .map(|(&ms, &bw)| bytes as f64 / (ms * per_token * 1e-3) / 1e9 / bw)
        .collect()
}

/// The medians of `per_round` over the rounds `marks` marks false and over those it marks true
/// (NaN for a side without rounds, as `median` gives for an empty slice).
pub fn split_by(per_round: &[f64], marks: &[bool]) -> (f64, f64) {
    let side = |want: bool| -> Vec<f64> {
        per_round
            .iter()
            .zip(marks)
            .filter(|(_, &m)| m == want)
            .map(|(&v, _)| v)
            .collect()
    };
    (median(&side(false)), median(&side(true)))
}

/// The median of the rounds whose placement is `want` (NaN when there are none).
pub fn median_where(per_round: &[f64], placement: &[Placement], want: Placement) -> f64 {
    let picked: Vec<f64> = per_round
        .iter()
        .zip(placement)
        .filter(|(_, &p)| p == want)
        .map(|(&v, _)| v)
        .collect();
    median(&picked)
}

/// A fraction as "87.3%", or "-" for NaN (no rounds on that side).
fn pct_or_dash(v: f64) -> String {
    if v.is_finite() {
        format!("{:.1}%", v * 100.0)
    } else {
        "-".to_string()
    }
}

/// Prints the case's summary; returns its JSON (without the profile).
pub fn summarize(
    o: &Opts,
    case: &str,
    per_token: f64,
    t: &Target,
    floor: &ReadFloor,
    timed: &Timed,
    stats: &Value,
) -> Value {
    let Timed {
        p50s,
        p90s,
        cpu,
        samples,
        foreign,
        read_gbps,
        probe_ms,
        lane_rt_ns,
        placement,
    } = timed;
    let steady_cpu = unhindered(probe_ms, PROBE_SLACK);
    let count = |p: Placement| placement[1].iter().filter(|&&x| x == p).count();
    let generate = case.starts_with("generate");
    let names = ["ort", "rcpu", "null"];
    println!(
        "read bandwidth after each round (median of {ROUND_READ_PASSES} passes): min {:.1}, median \
         {:.1}, max {:.1} GB/s; \"of round read\": median over rounds of the arm's GB/s in the round \
         over the round's read",
        min(read_gbps),
        median(read_gbps),
        max(read_gbps)
    );
    println!(
        "compute probe after each round (cpu_probe): min {:.2}, median {:.2}, max {:.2} ms; {} of {} \
         rounds within {PROBE_SLACK}x of the fastest (\"CPUs unhindered\": \"of round read\" over \
         those rounds only; in the others the CPUs computed slower than usual)",
        min(probe_ms),
        median(probe_ms),
        max(probe_ms),
        steady_cpu.iter().filter(|&&u| u).count(),
        steady_cpu.len()
    );
    println!(
        "lane round trip after each round (lane_probe, a cache line between the arms' first two \
         CPUs): min {:.0}, median {:.0}, max {:.0} ns; also right before and after each arm's \
         window: the rcpu arm ran {} of {} rounds \"far\" (every one of the three over {FAR_NS} ns: \
         the CPUs then sit apart, two threads read more and every hand-over between lanes costs \
         more), {} \"near\", {} mixed (the CPUs moved in between; in neither column); \"near\" / \
         \"far\" below: \"of round read\" over each arm's own such rounds",
        min(lane_rt_ns),
        median(lane_rt_ns),
        max(lane_rt_ns),
        count(Placement::Far),
        placement[1].len(),
        count(Placement::Near),
        count(Placement::Mixed)
    );
    println!(
        "{:<6} {:>10} {:>10} {:>12} {:>11} {:>8} {:>12} {:>14} {:>16} {:>8} {:>8}",
        "arm",
        "p50 ms",
        "p90 ms",
        "cpu ms/tok",
        "weight MB",
        "GB/s",
        "of read bw",
        "of round read",
        "CPUs unhindered",
        "near",
        "far"
    );
    let mut arm_json = vec![];
    for i in 0..3 {
        let (p50, p90) = (median(&p50s[i]), median(&p90s[i]));
        let toks = samples[i] as f64 * per_token;
        let cpu_ms = cpu[i] * 1e3 / toks.max(1.0);
        // Prefill reads the weights once for all its tokens: GB/s per run, not per token.
        let (bytes, bw) = (&floor.bytes, floor.gbps);
        let gbps = bytes[i] as f64 / (p50 * per_token * 1e-3) / 1e9;
        let per_round = round_fractions(bytes[i], &p50s[i], per_token, read_gbps);
        let of_round = median(&per_round);
        let (_, of_unhindered) = split_by(&per_round, &steady_cpu);
        let (near_f, far_f) = (
            median_where(&per_round, &placement[i], Placement::Near),
            median_where(&per_round, &placement[i], Placement::Far),
        );
        println!(
            "{:<6} {p50:>10.3} {p90:>10.3} {cpu_ms:>12.3} {:>11.1} {gbps:>8.2} {:>11.1}% {:>13.1}% {:>15.1}% {:>8} {:>8}",
            names[i],
            bytes[i] as f64 / 1e6,
            gbps / bw * 100.0,
            of_round * 100.0,
            of_unhindered * 100.0,
            pct_or_dash(near_f),
            pct_or_dash(far_f)
        );
        arm_json.push(json!({"arm": names[i], "p50_ms_per_token": p50, "p90_ms_per_token": p90, "cpu_ms_per_token": cpu_ms, "read_bytes_per_token": bytes[i], "gbps": gbps, "fraction_of_read_bw": gbps / bw, "fraction_of_round_read_bw": of_round, "fraction_of_round_read_bw_cpus_unhindered": of_unhindered, "fraction_of_round_read_bw_near": near_f, "fraction_of_round_read_bw_far": far_f, "rounds_fraction_of_read_bw": per_round}));
    }
    let h = Headline::of(o, p50s);
    println!(
        "HEADLINE {}: ORT/rcpu = {:.3} per token (median over {} rounds; rcpu {:.3} ms vs ORT {:.3} ms), \
         null band {} -> {}; {}",
        case,
        h.ratio,
        o.rounds,
        median(&p50s[1]),
        median(&p50s[0]),
        h.band_txt,
        h.word,
        h.steady_word
    );
    let tokens_timed = (samples[1] as f64 * per_token) as u64;
    let (lines, route_json) = counters::route_report(&t.info.ops, stats, tokens_timed);
    println!(
        "rcpu per token (ledger calls and pool counters over {tokens_timed} timed tokens{}):",
        if generate {
            "; generate: each round's prompt prefill counts too"
        } else {
            ""
        }
    );
    for l in lines {
        println!("  {l}");
    }
    json!({"case": case, "parity_ok": true, "arms": arm_json, "ort_over_rcpu": h.ratio,
        "null_band": h.band, "verdict": h.word, "foreign_share": foreign, "steady": h.steady_word,
        "rounds_p50_ms": p50s, "rounds_read_gbps": read_gbps, "rounds_probe_ms": probe_ms,
        "rounds_lane_rt_ns": lane_rt_ns,
        "rounds_placement": placement.iter().map(|a| a.iter().map(|p| p.name()).collect::<Vec<_>>()).collect::<Vec<_>>(),
        "rcpu_counters": route_json})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 300 MB a token at 10 ms is 30 GB/s: 0.75 of a 40 GB/s round, 1.0 of a 30 GB/s one; a
    /// prefill run of 64 tokens at 2 ms a token reads 256 MB once in 128 ms: 2 GB/s.
    #[test]
    fn round_fractions_divide_each_rounds_rate_by_that_rounds_read() {
        let f = round_fractions(300_000_000, &[10.0, 10.0, 20.0], 1.0, &[40.0, 30.0, 15.0]);
        let want = [0.75, 1.0, 1.0];
        assert_eq!(f.len(), 3);
        for (a, b) in f.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{f:?}");
        }
        let p = round_fractions(256_000_000, &[2.0], 64.0, &[2.0]);
        assert!((p[0] - 1.0).abs() < 1e-12, "{p:?}");
    }

    /// Near rounds 0.9 and 0.8 (median 0.85), far rounds 0.6 and 0.7 (0.65); one side empty is NaN.
    #[test]
    fn split_by_takes_each_sides_own_median() {
        let (near, far) = split_by(&[0.9, 0.6, 0.8, 0.7], &[false, true, false, true]);
        assert!(
            (near - 0.85).abs() < 1e-12 && (far - 0.65).abs() < 1e-12,
            "{near} {far}"
        );
        let (near, far) = split_by(&[0.9, 0.8], &[false, false]);
        assert!((near - 0.85).abs() < 1e-12 && far.is_nan(), "{near} {far}");
    }

    #[test]
    fn near_and_far_take_their_own_rounds_and_leave_mixed_ones_out() {
        use Placement::*;
        let per_round = [0.9, 0.6, 0.8, 0.7, 0.1];
        let place = [Near, Far, Near, Far, Mixed];
        assert!((median_where(&per_round, &place, Near) - 0.85).abs() < 1e-12);
        assert!((median_where(&per_round, &place, Far) - 0.65).abs() < 1e-12);
        assert!(median_where(&per_round, &place[..4], Mixed).is_nan());
    }

    #[test]
    fn too_few_rounds_are_not_judged_steady() {
        let o = Opts::default();
        let flat = vec![vec![10.0; 3], vec![8.0; 3], vec![8.0; 3]];
        let w = Headline::of(&o, &flat).steady_word;
        assert!(w.contains("not judged"), "{w}");
        let flat = vec![vec![10.0; 6], vec![8.0; 6], vec![8.0; 6]];
        let w = Headline::of(&o, &flat).steady_word;
        assert!(w.contains("reached from round 1"), "{w}");
    }
}
