//! Operating-system FFI used by the worker lanes, behind safe wrappers.
//!
//! Everything here that needs `unsafe` is small and carries a `// SAFETY:` comment; the
//! runtime (`crate::runtime`) contains no `unsafe` at all. Besides the Linux calls
//! (`sched_getaffinity`, `sched_setaffinity`, `sched_getcpu`, `gettid`, per-thread CPU time,
//! the one parser of /proc stat lines)
//! this file holds [`FnLender`], the one non-FFI unsafe primitive the lanes need: lending a
//! *borrowed* (non-`'static`) closure to long-lived worker threads for the duration of a call.

use std::io;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::time::Duration;

/// Number of CPUs a `cpu_set_t` can describe (glibc's fixed-size set).
/// CPUs an affinity set (`cpu_set_t`) can name: ids from this on can never be pinned to.
pub const SET_BITS: usize = 8 * std::mem::size_of::<libc::cpu_set_t>();

fn empty_set() -> libc::cpu_set_t {
    // SAFETY: `cpu_set_t` is a plain bit array; all-zero bytes is the valid empty set.
    unsafe { std::mem::zeroed() }
}

/// CPUs in the calling thread's affinity mask (`sched_getaffinity(0)`), ascending.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    let mask = SavedAffinity::save()?;
    Ok((0..SET_BITS).filter(|&c| mask.contains(c)).collect())
}

/// Pins the calling thread to exactly one CPU (`sched_setaffinity(0)`).
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= SET_BITS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("cpu {cpu} is beyond the {SET_BITS}-cpu affinity set"),
        ));
    }
    let mut set = empty_set();
    // SAFETY: `cpu < SET_BITS`, so `CPU_SET` writes inside the bit array.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid `cpu_set_t` of the size passed; pid 0 means the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Keeps the shared object that holds this code mapped for the rest of the process, even if its
/// loader later `dlclose`s it: `dlopen(self, RTLD_NOLOAD | RTLD_NODELETE)` promotes the existing
/// mapping to "never unload". Used when ORT releases the factory while EPs made by it still live
/// (an unregister before the last session is released): their kernels and the factory's
/// `ReleaseEp` must stay callable. A leak of the mapping is the price of that misuse.
pub fn pin_own_library() -> io::Result<()> {
    // SAFETY: `dladdr` only reads the address (this function's own code) and fills `info`,
    // a plain C struct for which all-zero bytes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: see above; the address is a valid code address inside this object.
    let found = unsafe { libc::dladdr(pin_own_library as *const libc::c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return Err(io::Error::other("dladdr found no object for rcpu's code"));
    }
    // SAFETY: `dli_fname` is a NUL-terminated path owned by the loader; RTLD_NOLOAD never maps
    // anything new, it only looks up (and with RTLD_NODELETE marks) the object already loaded.
    let h = unsafe {
        libc::dlopen(
            info.dli_fname,
            libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
        )
    };
    if h.is_null() {
        return Err(io::Error::other(
            "dlopen(RTLD_NOLOAD | RTLD_NODELETE) failed",
        ));
    }
    // The flag stays with the object; drop the extra reference this lookup took.
    // SAFETY: `h` is the handle dlopen just returned.
    unsafe { libc::dlclose(h) };
    Ok(())
}

/// The calling thread's affinity mask, saved so it can be put back after a temporary move.
pub struct SavedAffinity(libc::cpu_set_t);

impl SavedAffinity {
    /// Saves the calling thread's mask (`sched_getaffinity(0)`).
    pub fn save() -> io::Result<SavedAffinity> {
        let mut set = empty_set();
        // SAFETY: `set` is a valid, writable `cpu_set_t` and we pass its exact size; pid 0 means
        // the calling thread.
        let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(SavedAffinity(set))
    }

    /// Whether `cpu` is in the saved mask.
    pub fn contains(&self, cpu: usize) -> bool {
        // SAFETY: `CPU_ISSET` only reads the bit array; the index is checked against its size.
        cpu < SET_BITS && unsafe { libc::CPU_ISSET(cpu, &self.0) }
    }

    /// Puts the saved mask back on the calling thread (`sched_setaffinity(0)`).
    pub fn restore(&self) -> io::Result<()> {
        // SAFETY: `self.0` is a valid `cpu_set_t` of the size passed; pid 0 means the calling
        // thread.
        let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&self.0), &self.0) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Asks the kernel to back `buf` with transparent huge pages (`madvise(MADV_HUGEPAGE)` on the
/// whole 4 KiB pages inside it). Advisory: the contents are unchanged; memory first touched after
/// the call is faulted in 2 MiB pages where a 2 MiB-aligned range lies inside the mapping and
/// THP is `madvise` or `always`. Fails harmlessly (the error is returned) where THP is off.
pub fn advise_huge_pages<T>(buf: &[T]) -> io::Result<()> {
    const PAGE: usize = 4096;
    let start = (buf.as_ptr() as usize).next_multiple_of(PAGE);
    let end = (buf.as_ptr() as usize + std::mem::size_of_val(buf)) / PAGE * PAGE;
    if end <= start {
        return Ok(());
    }
    // SAFETY: [start, end) is page aligned and lies inside `buf`, memory this process owns;
    // MADV_HUGEPAGE only changes how future faults are served, never the contents or the
    // validity of the range.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks Linux for permission to use AMX tile data in this process
/// (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`): without it the first tile
/// instruction raises SIGILL. The permission is process-wide and cannot be revoked; asking
/// again is harmless. `Err` where the kernel or the CPU refuses (no AMX, kernel before 5.16).
#[cfg(target_arch = "x86_64")]
pub fn request_amx_permission() -> io::Result<()> {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: `arch_prctl` with this request only reads its two integer arguments and changes
    // the process's permitted xsave features; no memory is passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The CPU the calling thread is running on right now (`sched_getcpu`), if the OS says.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: `sched_getcpu` takes no arguments and only returns a value.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

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

/// Clock ticks per second of the times in /proc stat files (`_SC_CLK_TCK`; 100 if unknown).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: `sysconf` only returns a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100)
}

/// (tid, name) of every thread of this process that has not exited. A joined thread can linger
/// in /proc/self/task for a moment while the kernel reaps it (state Z or X after `pthread_join`
/// returned): those are skipped, so a count taken right after a join is exact.
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

/// The closure type the lanes run: called with the lane index.
pub type LaneFn<'a> = dyn Fn(usize) + Sync + 'a;

/// Lends a borrowed closure to other threads for exactly the duration of [`FnLender::lend`].
///
/// Protocol (two atomics, both sides `SeqCst`, a Dekker-style handshake):
/// - the lender stores a pointer to its closure reference in `ptr`, runs its body, then stores
///   null in `ptr` ("revoke") and waits until `users` is 0 before returning;
/// - a borrower first increments `users`, then loads `ptr`; if non-null it calls the closure
///   and finally decrements `users` (also on unwind, through a guard).
///
/// Why no borrower can touch the closure after `lend` returns: all four operations are
/// `SeqCst`, so they sit in one total order S. A borrower that loaded the non-null pointer did
/// so before the revoking store in S (any later load sees null or another lender's pointer,
/// and `lend` refuses to overwrite a live pointer); its increment precedes its load, hence
/// precedes the revoke, hence precedes the lender's wait loads of `users`, which therefore
/// count it until its decrement (`SeqCst`, so also a release that publishes everything the
/// closure wrote to the lender's acquiring load).
pub struct FnLender {
    ptr: AtomicPtr<()>,
    users: AtomicUsize,
}

impl Default for FnLender {
    fn default() -> Self {
        Self::new()
    }
}

impl FnLender {
    pub const fn new() -> Self {
        Self {
            ptr: AtomicPtr::new(ptr::null_mut()),
            users: AtomicUsize::new(0),
        }
    }

    /// Publishes `f` to borrowers, runs `body`, revokes `f` and waits (calling `idle(i)` for
    /// wait iteration `i`) until no borrower is still inside `f`; then returns `body`'s value
    /// or re-raises its panic. Panics (before publishing anything) if `f` is already lent.
    /// A panic inside `idle` aborts the process (unwinding out of the wait would be unsound).
    pub fn lend<R>(
        &self,
        f: &LaneFn<'_>,
        body: impl FnOnce() -> R,
        idle: &mut dyn FnMut(u64),
    ) -> R {
        let slot: &LaneFn<'_> = f;
        let p = &slot as *const &LaneFn<'_> as *mut ();
        // SeqCst: part of the handshake described on the type.
        if self
            .ptr
            .compare_exchange(ptr::null_mut(), p, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            panic!("FnLender::lend: a closure is already lent (nested or concurrent lend)");
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
        // SeqCst: the revoke; see the type's documentation.
        self.ptr.store(ptr::null_mut(), Ordering::SeqCst);
        let mut i = 0u64;
        // SeqCst load: synchronises with every borrower's decrement (a release).
        while self.users.load(Ordering::SeqCst) != 0 {
            let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| idle(i)));
            if step.is_err() {
                std::process::abort();
            }
            i += 1;
        }
        match r {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        }
    }

    /// If a closure is lent right now, calls `g` with it and returns `Some`; else `None`.
    pub fn borrow<R>(&self, g: impl FnOnce(&LaneFn<'_>) -> R) -> Option<R> {
        struct Release<'a>(&'a AtomicUsize);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                // SeqCst (a release): publishes the closure's effects to the lender's wait.
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        // SeqCst: increment before the load below; see the type's documentation.
        self.users.fetch_add(1, Ordering::SeqCst);
        let _release = Release(&self.users);
        let p = self.ptr.load(Ordering::SeqCst) as *const &LaneFn<'_>;
        if p.is_null() {
            return None;
        }
        // SAFETY: a non-null `ptr` points at the `&LaneFn` local of a `lend` call that is still
        // running: `lend` does not return (so neither that local nor the closure it refers to
        // can be dropped) until `users` is 0, and our increment is counted until `_release`
        // drops at the end of this function, after `g` is done with the reference.
        let f: &LaneFn<'_> = unsafe { *p };
        Some(g(f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affinity_roundtrip() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        assert!(gettid() > 0);
        assert!(thread_cpu_time(gettid()).is_ok());
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

    #[test]
    fn lender_lends_only_during_lend() {
        let l = FnLender::new();
        assert!(l.borrow(|f| f(0)).is_none());
        let hits = AtomicUsize::new(0);
        let f = |i: usize| {
            hits.fetch_add(i, Ordering::Relaxed);
        };
        l.lend(&f, || l.borrow(|g| g(5)), &mut |_| {});
        assert_eq!(hits.load(Ordering::Relaxed), 5);
        assert!(l.borrow(|f| f(0)).is_none());
    }
}
