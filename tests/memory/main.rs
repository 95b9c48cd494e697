//! The memory tests that own their governors, caches and buffers: one binary, one module per
//! former `tests/<name>.rs` (`cargo test --release --test memory memory_governor::` runs one of
//! them). The tests of the process-wide budgets, scratch counters and weight arena are in
//! `tests/serial/` and `tests/memory_globals.rs`.

#[path = "../common/smaps.rs"]
mod smaps;

mod memory_governor;
mod memory_huge_pages;
mod memory_weight_cache;
