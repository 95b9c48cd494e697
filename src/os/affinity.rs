//! The calling thread's CPU affinity: the CPUs it may run on, pinning it to one, saving and
//! restoring its mask, and the CPU it runs on now (`sched_getaffinity`, `sched_setaffinity`,
//! `sched_getcpu`). Safe wrappers; each `unsafe` block carries a `// SAFETY:` comment.

use std::io;

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

/// The CPU the calling thread is running on right now (`sched_getcpu`), if the OS says.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: `sched_getcpu` takes no arguments and only returns a value.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affinity_roundtrip() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        let saved = SavedAffinity::save().unwrap();
        assert!(cpus.iter().all(|&c| saved.contains(c)));
        saved.restore().unwrap();
    }
}
