//! The calling thread as the kernel sees it: its id (`gettid`), its CPU time so far
//! (`CLOCK_THREAD_CPUTIME_ID`), and the clock-tick rate of the per-task times in /proc
//! (`sysconf(_SC_CLK_TCK)`).

use std::time::Duration;

/// Kernel thread id of the calling thread (`gettid`).
pub fn gettid() -> i32 {
    // SAFETY: the `gettid` syscall takes no arguments, cannot fail and returns the caller's tid.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    tid as i32
}

/// CPU time consumed so far by the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
pub fn current_thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Clock ticks per second of the times in /proc stat files (`_SC_CLK_TCK`; 100 if unknown).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: `sysconf` only returns a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_figures() {
        assert!(gettid() > 0);
        assert!(clock_ticks_per_second() > 0);
        let t0 = current_thread_cpu_time();
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        assert!(current_thread_cpu_time() >= t0, "{x}");
    }
}
