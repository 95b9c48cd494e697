//! Topology, affinity and the pinned worker lanes (one chunked dispatch, `Par::chunks`).
//!
//! - [`topology`]: physical cores and SMT siblings (from /sys) within the affinity mask;
//! - [`affinity`]: the `affinity` setting and the per-lane CPU plan;
//! - [`lanes`]: the pool (caller + pinned workers) implementing [`Par`];
//! - [`lend`]: lending each dispatch's borrowed closure to the workers (the one `unsafe` file);
//! - [`park`]: how idle workers spin, yield and park (the wake-up protocol);
//! - [`segments`]: the segmented M=1 split's claims (each lane streams its own segment);
//! - [`warm`]: what an idle worker reads ahead of the next job (hints, owners, the reads);
//! - [`counters`]: per-pool counters; [`registry`]: process-wide sharing of pools;
//! - [`hooks`]: test-only stall points (compiled in only with the `test-hooks` feature).
//!
//! No `unsafe` here outside [`lend`] (which argues its soundness): OS calls live in `crate::os`.
#![deny(unsafe_code)]
pub mod affinity;
pub mod counters;
pub mod hooks;
pub mod lanes;
pub mod lend;
pub mod par;
pub mod park;
pub mod registry;
pub mod segments;
pub mod topology;
pub mod warm;

pub use affinity::{Affinity, AffinityParseError, PinError};
pub use counters::PoolCounters;
pub use lanes::{default_threads, Lanes, PoolConfig, DEFAULT_BLOCKTIME_US};
pub use par::{Dispatch, Par, ScopedThreads, Serial};
pub use registry::{pool_for, pool_stats, reset_counters};
pub use topology::Topology;
pub use warm::{IdleHint, WarmBytes};
