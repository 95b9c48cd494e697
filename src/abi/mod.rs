//! The only place with ORT FFI.
