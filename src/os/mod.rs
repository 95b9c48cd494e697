//! The operating-system calls rcpu makes, behind safe wrappers: the only place besides `abi`
//! (ORT's FFI), `runtime::lend` (the closure lending) and the SIMD kernels where `unsafe` code
//! lives, each block with a `// SAFETY:` comment.
//!
//! - [`affinity`]: the calling thread's affinity mask, pinning, the CPU it runs on;
//! - [`cache`]: cache hints (`prefetcht1`) over an address range, never a dereference; the
//!   128-byte padding of values written by one thread;
//! - [`thread`]: thread id, the calling thread's CPU time, the clock-tick rate of /proc times;
//! - [`huge_pages`]: memory advice (`madvise(MADV_HUGEPAGE)`) on memory rcpu owns, and
//!   `MADV_PAGEOUT` on the initializers rcpu has packed;
//! - [`mapped`]: 2 MiB-aligned anonymous mappings and the disjoint pieces the weight arena
//!   carves from them; read-only mappings of whole files and typed slices of them;
//! - [`library`]: keeping rcpu's own shared object loaded;
//! - [`xstate`]: permission for extended CPU state (AMX tile data).
//!
//! Nothing here knows ORT, the runtime or the kernels; every other module may use it.

pub mod affinity;
pub mod cache;
pub mod huge_pages;
pub mod library;
pub mod mapped;
pub mod thread;
pub mod xstate;

pub use affinity::{allowed_cpus, current_cpu, pin_current_thread, SavedAffinity, SET_BITS};
pub use huge_pages::{advise_huge_pages, advise_page_out};
pub use library::pin_own_library;
pub use thread::{clock_ticks_per_second, current_thread_cpu_time, gettid};
