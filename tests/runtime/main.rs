//! The tests of the worker lanes (`rcpu::runtime`): one binary, one module per former
//! `tests/<name>.rs` (`cargo test --release --test runtime runtime_parking::` runs one of them).
//! They run in parallel with each other. The registry shares one pool per configuration across
//! the process, so every test asks for a configuration (threads, affinity, `blocktime_us`) that
//! no other test here uses; the test that counts every worker thread of the process
//! (`runtime_shutdown`) is in `tests/serial/`.

#[path = "../common/lanes.rs"]
mod lanes_common;
#[path = "../common/proc.rs"]
mod proc;

mod runtime_caller_placement;
mod runtime_dispatch;
mod runtime_idle_read;
mod runtime_parking;
mod runtime_spin;
mod runtime_stream_split;
