//! One interleaved round of the arms (ort, rcpu, null), shared by compare, llm and demo: the
//! order alternates (even rounds ort, rcpu, null; odd rounds the reverse), each arm gets the same
//! request while the others block on their pipes, and the round records what every call cost:
//! the arm's own CPU, the idle arms' CPU, how long it kept spinning afterwards, and the /proc/stat
//! ticks of the arms' CPUs over the timed windows (for the foreign-load share).

use serde_json::Value;

use super::arm::Worker;
use super::conditions::{cpu_ticks, CpuTicks};
use super::os;

/// What one arm's call in a round gave.
pub struct ArmCall {
    /// The worker's reply.
    pub res: Value,
    /// The arm's CPU seconds (all its threads) over the call.
    pub cpu_s: f64,
    /// CPU ms the other arms burned meanwhile.
    pub idle_cpu_ms: f64,
    /// How long the arm kept using CPU after replying (spinning pool threads), ms.
    pub settle_ms: f64,
    /// The CPUs' round trip right before the call and right after it settled (ns,
    /// `lane_probe::round_trip_ns`); NaN unless the round was asked to take them.
    pub rt_ns: (f64, f64),
}

/// A round's calls, indexed by arm (not by order).
pub struct Round {
    pub order: [usize; 3],
    pub calls: Vec<ArmCall>,
    /// Ticks of the arms' CPUs over the timed windows, and our processes' CPU seconds then.
    pub ticks: CpuTicks,
    pub ours: f64,
}

/// Round `r`'s arm order.
pub fn order(r: usize) -> [usize; 3] {
    if r.is_multiple_of(2) {
        [0, 1, 2]
    } else {
        [2, 1, 0]
    }
}

/// "ort,rcpu,null" or "null,rcpu,ort".
pub fn order_name(r: usize) -> &'static str {
    if r.is_multiple_of(2) {
        "ort,rcpu,null"
    } else {
        "null,rcpu,ort"
    }
}

/// Runs round `r`: `req` to each of the three arms in turn. `settle_in_window`: the wait for the
/// arm to go quiet counts inside its timed window (compare: the spinning is part of the cost the
/// foreign share must not blame on others); otherwise it follows the window. `round_trips`: the
/// CPUs' round trip is taken before the first call and after each call settled (outside the
/// timed windows; a few milliseconds each), so that each arm's window has its own placement:
/// the one taken after an arm is also the one before the next.
pub fn run(
    arms: &mut [Worker],
    cpus: &[usize],
    r: usize,
    req: &Value,
    settle_in_window: bool,
    round_trips: bool,
) -> Result<Round, String> {
    let rt = || {
        if round_trips {
            super::lane_probe::round_trip_ns(cpus)
        } else {
            f64::NAN
        }
    };
    if arms.len() != 3 {
        return Err(format!("a round needs 3 arms, got {}", arms.len()));
    }
    let order = order(r);
    let mut calls: Vec<Option<ArmCall>> = (0..3).map(|_| None).collect();
    let (mut ticks, mut ours) = (CpuTicks::default(), 0.0);
    let mut rt_last = rt();
    for &i in &order {
        let rt0 = rt_last;
        let before: Vec<f64> = arms.iter().map(|a| a.cpu_s()).collect();
        let (t0, self0) = (cpu_ticks(cpus), os::usage().cpu_s());
        let res = arms[i].call(req.clone())?;
        let mut settle_ms = 0.0;
        if settle_in_window {
            settle_ms = arms[i].settle(500);
        }
        let (t1, self1) = (cpu_ticks(cpus), os::usage().cpu_s());
        let after: Vec<f64> = arms.iter().map(|a| a.cpu_s()).collect();
        if !settle_in_window {
            settle_ms = arms[i].settle(500);
        }
        ticks.busy += t1.busy.saturating_sub(t0.busy);
        ticks.total += t1.total.saturating_sub(t0.total);
        ticks.steal += t1.steal.saturating_sub(t0.steal);
        ours += after.iter().zip(&before).map(|(a, b)| a - b).sum::<f64>() + self1 - self0;
        let idle_cpu_ms = (0..3)
            .filter(|&j| j != i)
            .map(|j| (after[j] - before[j]) * 1e3)
            .sum::<f64>();
        calls[i] = Some(ArmCall {
            res,
            cpu_s: after[i] - before[i],
            idle_cpu_ms,
            settle_ms,
            rt_ns: (rt0, {
                rt_last = rt();
                rt_last
            }),
        });
    }
    Ok(Round {
        order,
        calls: calls.into_iter().flatten().collect(),
        ticks,
        ours,
    })
}

/// Adds a round's ticks and own CPU to running totals.
pub fn accumulate(total: &mut CpuTicks, ours: &mut f64, r: &Round) {
    total.busy += r.ticks.busy;
    total.total += r.ticks.total;
    total.steal += r.ticks.steal;
    *ours += r.ours;
}

/// The float array `key` of a reply.
pub fn floats(v: &Value, key: &str) -> Vec<f64> {
    v[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_alternate() {
        assert_eq!(
            [order(0), order(1), order(2)],
            [[0, 1, 2], [2, 1, 0], [0, 1, 2]]
        );
        assert_eq!(order_name(3), "null,rcpu,ort");
        assert_eq!(
            floats(&serde_json::json!({"ns": [1.0, 2, "x"]}), "ns"),
            [1.0, 2.0]
        );
    }
}
