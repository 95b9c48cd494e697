//! The C boundary and the plugin's surface: struct layouts, the C header, API negotiation, panic
//! guards, the option parser and the route ledger. One binary, one module per former
//! `tests/<name>.rs` (`cargo test --release --test abi negotiation::` runs one of them).

mod abi_layout;
mod config;
mod context;
mod gemv_chain;
mod header;
mod module_seams;
mod negotiation;
mod panic_guard;
mod partition;
mod telemetry_ledger;
