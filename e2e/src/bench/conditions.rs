//! The machine's conditions (rule 5), read from /proc and /sys: CPU model, per-CPU clock, load
//! average, per-CPU busy time, per-process and per-thread CPU time, peak RSS.

use std::fs;

pub fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// `scaling_cur_freq` of `cpu` in MHz, or "unavailable".
pub fn cpu_mhz(cpu: usize) -> String {
    fs::read_to_string(format!(
        "/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq"
    ))
    .ok()
    .and_then(|s| s.trim().parse::<u64>().ok())
    .map(|khz| format!("{} MHz", khz / 1000))
    .unwrap_or_else(|| "unavailable".into())
}

/// The 1-minute load average.
pub fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unavailable".into())
}

/// Busy and total jiffies of one CPU from /proc/stat.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuTicks {
    pub busy: u64,
    pub total: u64,
    /// Time the hypervisor gave to other guests (counted in `busy`: it was taken from us).
    pub steal: u64,
}

/// Summed ticks of `cpus`.
pub fn cpu_ticks(cpus: &[usize]) -> CpuTicks {
    let s = fs::read_to_string("/proc/stat").unwrap_or_default();
    let mut t = CpuTicks::default();
    for line in s.lines() {
        let mut it = line.split_whitespace();
        let Some(name) = it.next() else { continue };
        let Some(id) = name
            .strip_prefix("cpu")
            .and_then(|x| x.parse::<usize>().ok())
        else {
            continue;
        };
        if !cpus.contains(&id) {
            continue;
        }
        // user nice system idle iowait irq softirq steal ...
        let v: Vec<u64> = it.take(8).filter_map(|x| x.parse().ok()).collect();
        if v.len() < 5 {
            continue;
        }
        let total: u64 = v.iter().sum();
        t.total += total;
        t.busy += total - v[3] - v[4];
        t.steal += v.get(7).copied().unwrap_or(0);
    }
    t
}

/// utime + stime of a /proc stat file in seconds (`/proc/PID/stat` or `/proc/PID/task/TID/stat`).
pub fn stat_cpu_s(path: &str) -> Option<f64> {
    Some(stat_ticks(&fs::read_to_string(path).ok()?)? as f64 / super::os::clk_tck())
}

/// utime + stime ticks from the text of a stat file (the one parser, `crate::proc`).
pub fn stat_ticks(s: &str) -> Option<u64> {
    crate::proc::parse_task_stat(s).map(|t| t.cpu_ticks)
}

pub fn process_cpu_s(pid: u32) -> f64 {
    stat_cpu_s(&format!("/proc/{pid}/stat")).unwrap_or(0.0)
}

/// The CPU a task last ran on (field 39 of its stat).
pub fn last_cpu(pid: u32) -> Option<usize> {
    crate::proc::parse_task_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?.last_cpu
}

/// Live threads of this process: (tid, name, cpu seconds), by tid.
pub fn threads() -> Vec<(u32, String, f64)> {
    use crate::proc;
    let mut v: Vec<(u32, String, f64)> = proc::live_threads()
        .into_iter()
        .filter_map(|(tid, name)| {
            let cpu = proc::thread_cpu_time(tid).map_or(0.0, |d| d.as_secs_f64());
            Some((u32::try_from(tid).ok()?, name, cpu))
        })
        .collect();
    v.sort_by_key(|t| t.0);
    v
}

/// VmHWM (peak resident set) in KiB.
pub fn vm_hwm_kb() -> Option<u64> {
    status_kb("/proc/self/status", "VmHWM")
}

/// VmHWM of process `pid` (a worker), KiB.
pub fn vm_hwm_kb_of(pid: u32) -> Option<u64> {
    status_kb(&format!("/proc/{pid}/status"), "VmHWM")
}

/// The KiB value of line `key` (`VmHWM`, `VmRSS`, ...) of a /proc status file.
pub fn status_kb(path: &str, key: &str) -> Option<u64> {
    let s = fs::read_to_string(path).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Share of the CPUs' time that other processes were busy between two readings, given the CPU
/// seconds our own processes used meanwhile. None when the window is too short for the 10 ms
/// tick resolution of /proc/stat (fewer than 20 ticks over the CPUs).
pub fn foreign_share(t0: CpuTicks, t1: CpuTicks, ours_s: f64) -> Option<f64> {
    let ticks = t1.total.saturating_sub(t0.total);
    if ticks < 20 {
        return None;
    }
    let tck = super::os::clk_tck();
    let busy_s = t1.busy.saturating_sub(t0.busy) as f64 / tck;
    Some(((busy_s - ours_s) / (ticks as f64 / tck)).clamp(0.0, 1.0))
}

/// "42%" or "n/a".
pub fn pct(v: Option<f64>) -> String {
    v.map(|x| format!("{:.0}%", x * 100.0))
        .unwrap_or_else(|| "n/a".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_times_survive_odd_thread_names() {
        let line =
            "1234 (rcpu w) (x)) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 3 0 1 1 1";
        assert_eq!(stat_ticks(line), Some(287));
        assert_eq!(stat_ticks("garbage"), None);
        assert!(stat_cpu_s("/proc/self/stat").is_some());
        assert!(status_kb("/proc/self/status", "VmRSS").is_some_and(|kb| kb > 0));
        assert_eq!(status_kb("/proc/self/status", "VmNoSuchKey"), None);
        assert!(threads()
            .iter()
            .any(|(tid, _, _)| *tid == std::process::id()));
    }

    #[test]
    fn foreign_share_subtracts_our_time_and_refuses_short_windows() {
        let z = CpuTicks::default();
        let tck = crate::bench::os::clk_tck();
        // 200 ticks on the CPUs, 150 busy, of which our processes used 50 ticks' worth: 50% foreign.
        let t1 = CpuTicks {
            busy: 150,
            total: 200,
            steal: 0,
        };
        let f = foreign_share(z, t1, 50.0 / tck).unwrap();
        assert!((f - 0.5).abs() < 1e-9, "{f}");
        assert_eq!(
            foreign_share(
                z,
                CpuTicks {
                    busy: 5,
                    total: 10,
                    steal: 0
                },
                0.0
            ),
            None
        );
        assert_eq!(foreign_share(z, t1, 10.0), Some(0.0), "never negative");
        assert!(!cpu_model().is_empty() && !loadavg().is_empty());
    }
}
