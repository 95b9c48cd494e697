//! The only place with ORT FFI.
pub mod os;
