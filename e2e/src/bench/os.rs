//! The OS calls of the bench. Those the library has (the affinity mask, the current CPU, the
//! clock-tick rate) come from `rcpu::os`; the ones only the bench needs and that need
//! `unsafe` (pinning to a set of CPUs, getrusage) are here. Everything else about the machine is
//! read from /proc and /sys (`conditions`).

/// CPUs in this process's affinity mask (the library's reader).
pub fn affinity() -> Result<Vec<usize>, String> {
    rcpu::os::allowed_cpus().map_err(|e| format!("sched_getaffinity: {e}"))
}

/// Pins the calling thread (and the threads it creates later) to `cpus`.
pub fn pin(cpus: &[usize]) -> Result<(), String> {
    // SAFETY: as in `affinity`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c >= libc::CPU_SETSIZE as usize {
            return Err(format!("cpu {c} out of range"));
        }
        // SAFETY: c is below CPU_SETSIZE; set is a live local.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: pid 0 = calling thread; the set is initialised above.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(format!(
            "sched_setaffinity({cpus:?}): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

pub use rcpu::os::current_cpu;

/// Resource usage of this process (all threads).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub user_s: f64,
    pub sys_s: f64,
    pub voluntary_cs: i64,
    pub involuntary_cs: i64,
    pub max_rss_kb: i64,
}

impl Usage {
    pub fn cpu_s(&self) -> f64 {
        self.user_s + self.sys_s
    }
    /// `self - earlier` (max_rss stays the later value: it is a peak, not a counter).
    pub fn since(&self, earlier: &Usage) -> Usage {
        Usage {
            user_s: self.user_s - earlier.user_s,
            sys_s: self.sys_s - earlier.sys_s,
            voluntary_cs: self.voluntary_cs - earlier.voluntary_cs,
            involuntary_cs: self.involuntary_cs - earlier.involuntary_cs,
            max_rss_kb: self.max_rss_kb,
        }
    }
}

/// getrusage(RUSAGE_SELF).
pub fn usage() -> Usage {
    // SAFETY: rusage is plain data; zeroed is valid and getrusage fills it.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a live out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Usage {
        user_s: tv(r.ru_utime),
        sys_s: tv(r.ru_stime),
        voluntary_cs: r.ru_nvcsw,
        involuntary_cs: r.ru_nivcsw,
        max_rss_kb: r.ru_maxrss,
    }
}

/// Clock ticks per second for /proc times (the library's `sysconf` reader).
pub fn clk_tck() -> f64 {
    rcpu::os::clock_ticks_per_second() as f64
}
