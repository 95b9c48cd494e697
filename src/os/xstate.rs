//! Extended processor state the process must ask Linux for before using it: AMX tile data
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`).
//!
//! The permission is process-wide and cannot be revoked. ORT itself asks for the same permission
//! when its library loads on AMX hardware (seen on this project's Xeon host: `ARCH_GET_XCOMP_PERM`
//! reports the tile bits right after `import onnxruntime`, before any session), so inside an ORT
//! process rcpu's request changes nothing the host had not already accepted. Linux grants it only
//! when every existing alternate signal stack is large enough for the tile state.

use std::io;

/// Asks Linux for permission to use AMX tile data in this process: without it the first tile
/// instruction raises SIGILL. Asking again is harmless. `Err` where the kernel or the CPU
/// refuses (no AMX, kernel before 5.16, an alternate signal stack too small).
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
