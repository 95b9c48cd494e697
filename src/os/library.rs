//! Keeping rcpu's own shared object loaded (`dladdr` + `dlopen(RTLD_NOLOAD | RTLD_NODELETE)`).

use std::io;

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
