//! /proc readers of the tests, the examples and rcpu-bench: the one parser of `/proc/PID/stat`
//! lines ([`parse_task_stat`]), the live threads of this process and a thread's CPU time by tid.
//! The library itself reads none of this; included with `#[path] mod` by the test binaries and
//! examples that need it and by `rcpu_e2e::proc`.
#![allow(dead_code, unreachable_pub)]

use std::io;
use std::time::Duration;

use rcpu::os::clock_ticks_per_second;

/// The fields of a `/proc/PID/stat` (or `/proc/PID/task/TID/stat`) line that rcpu and its tools
/// read. The one parser of that format in the workspace: [`parse_task_stat`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStat {
    /// The command name (field 2, without its parentheses; it may itself hold spaces and `)`).
    pub name: String,
    /// The state letter (field 3): `R`, `S`, `D`, `Z`, `X`, ...
    pub state: char,
    /// `utime + stime` (fields 14 and 15) in clock ticks ([`clock_ticks_per_second`]).
    pub cpu_ticks: u64,
    /// The CPU the task last ran on (field 39), if the line is that long.
    pub last_cpu: Option<usize>,
}

/// Parses the text of a stat file. The name may hold spaces and parentheses, so fields are
/// counted after the *last* `)`. `None` when the text is not a stat line.
pub fn parse_task_stat(text: &str) -> Option<TaskStat> {
    let (head, rest) = text.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_string();
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ")", index 0 is field 3 (state): field N is index N - 3.
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some(TaskStat {
        name,
        state: f.first()?.chars().next()?,
        cpu_ticks: num(11)?.checked_add(num(12)?)?,
        last_cpu: num(36).and_then(|c| usize::try_from(c).ok()),
    })
}

/// (tid, name) of every thread of this process that has not exited. A joined thread can linger
/// in /proc/self/task for a moment while the kernel reaps it (state Z or X after `pthread_join`
/// returned): those are skipped, so a count taken right after a join is exact. A walk while
/// other threads exit can miss a live one (the kernel lists /proc/self/task by position).
pub fn live_threads() -> Vec<(i32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let tid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = parse_task_stat(&std::fs::read_to_string(e.path().join("stat")).ok()?)?;
            (stat.state != 'Z' && stat.state != 'X').then_some((tid, stat.name))
        })
        .collect()
}

/// CPU time (user + system) consumed so far by thread `tid` of this process, from /proc.
///
/// Reads `/proc/self/task/TID/schedstat` (nanoseconds) and falls back to `utime + stime` of
/// `/proc/self/task/TID/stat` (clock ticks, converted) when schedstat is not available.
pub fn thread_cpu_time(tid: i32) -> io::Result<Duration> {
    if let Ok(s) = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")) {
        if let Some(ns) = s
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
        {
            return Ok(Duration::from_nanos(ns));
        }
    }
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))?;
    let stat = parse_task_stat(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unparsable /proc/self/task/{tid}/stat"),
        )
    })?;
    let hz = clock_ticks_per_second();
    Ok(Duration::from_secs(stat.cpu_ticks / hz)
        + Duration::from_nanos(stat.cpu_ticks % hz * 1_000_000_000 / hz))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_thread_cpu_time() {
        assert!(thread_cpu_time(rcpu::os::gettid()).is_ok());
        // A walk of /proc/self/task can skip a live thread when other threads (the other tests
        // of this binary) exit during it, so the listing is read up to 20 times; one that never
        // shows this thread fails.
        let me = rcpu::os::gettid();
        assert!((0..20).any(|_| live_threads().iter().any(|&(tid, _)| tid == me)));
    }

    #[test]
    fn task_stat_survives_odd_names() {
        // Fields 4..13 are 1, utime 250, stime 37, fields 16..38 are 0, processor (39) is 7.
        let (ones, zeros) = ("1 ".repeat(10), "0 ".repeat(23));
        let line = format!("1234 (rcpu w) (x)) S {ones}250 37 {zeros}7 0");
        let st = parse_task_stat(&line).unwrap();
        assert_eq!(
            (st.name.as_str(), st.state, st.cpu_ticks, st.last_cpu),
            ("rcpu w) (x)", 'S', 287, Some(7))
        );
        let short = parse_task_stat("5 (a) Z 1 1 1 0 -1 0 0 0 0 0 3 4").unwrap();
        assert_eq!(
            (short.state, short.cpu_ticks, short.last_cpu),
            ('Z', 7, None)
        );
        assert_eq!(parse_task_stat("garbage"), None);
        assert_eq!(
            parse_task_stat("5 (a) S 1"),
            None,
            "too short for the times"
        );
        let me = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(parse_task_stat(&me).is_some_and(|s| s.last_cpu.is_some()));
    }
}
