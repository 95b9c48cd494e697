//! `rcpu-bench probe`: the host's state, for a harness outside this bench (rule 8). A timing
//! loop that is not `rcpu-bench` itself (`e2e/python/og_bench.py`, onnxruntime-genai's own
//! generation loop) still needs what `rcpu-bench llm` reads beside every round: the read
//! bandwidth of a buffer the size of the weights a token reads, the compute probe, and how far
//! apart the CPUs sit. This serves them: it maps the two same-size buffers once (`membw`), prints
//! one JSON line with the run's best pass of each, then answers every line read from stdin with
//! one JSON line for the moment it was asked (`read_gbs`, the median of
//! [`ROUND_READ_PASSES`] passes of each buffer, the higher; `probe_ms`; `lane_rt_ns`, null with
//! fewer than two CPUs; `far`, the round trip over [`lane_probe::FAR_NS`]), until stdin ends or
//! a line says `quit`; a line saying `rt` gets the round trip alone (`lane_rt_ns`, `far`: a few
//! milliseconds), which a caller takes right before and right after a timed window, since the
//! placement can change within seconds. A full answer takes a few hundred milliseconds of every
//! listed CPU, so the caller asks between its timed windows, never during one.

use std::io::{BufRead, Write};

use super::llm_report::ROUND_READ_PASSES;
use super::{cpu_probe, lane_probe, membw, os};

/// What `probe` reads and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeArgs {
    /// Bytes of each read buffer.
    pub bytes: usize,
    /// Threads that read them (and run the compute probe).
    pub threads: usize,
    /// CPUs to run on (the first two are the round trip's); empty: the affinity mask.
    pub cpus: Vec<usize>,
}

/// Serves probes until stdin ends; 0 when it ended cleanly.
pub fn run(p: &ProbeArgs) -> Result<i32, String> {
    let cpus = if p.cpus.is_empty() {
        os::affinity()?
    } else {
        p.cpus.clone()
    };
    // The readers are spawned by this thread: they inherit its mask.
    os::pin(&cpus)?;
    let reader = membw::Buffers::new(p.bytes, p.threads);
    let best = reader.reference(ROUND_READ_PASSES);
    let mut out = std::io::stdout().lock();
    let say = |out: &mut std::io::StdoutLock<'_>, v: serde_json::Value| {
        writeln!(out, "{v}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("probe: stdout: {e}"))
    };
    say(
        &mut out,
        serde_json::json!({
            "bytes": p.bytes,
            "threads": p.threads,
            "cpus": cpus,
            "small_pages_gbs": best.small_pages,
            "huge_pages_gbs": best.huge_pages,
        }),
    )?;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| format!("probe: stdin: {e}"))?;
        let line = line.trim();
        if line == "quit" {
            break;
        }
        // A full answer reads and computes first, then times the round trip (as `llm` does
        // after a round); `rt` only times the round trip.
        let host = (line != "rt").then(|| {
            (
                reader.round(ROUND_READ_PASSES),
                cpu_probe::probe_ms(p.threads),
            )
        });
        let rt = lane_probe::round_trip_ns(&cpus);
        let mut v = serde_json::json!({
            "lane_rt_ns": rt.is_finite().then_some(rt),
            "far": rt > lane_probe::FAR_NS,
        });
        if let Some((read_gbs, probe_ms)) = host {
            v["read_gbs"] = read_gbs.into();
            v["probe_ms"] = probe_ms.into();
        }
        say(&mut out, v)?;
    }
    Ok(0)
}
