//! rcpu's diagnostics go through the `log` facade; this module is the `log::Log` that hands each
//! record to ONNX Runtime's logger, so a user sees rcpu's messages where ORT's own appear, filtered
//! by the severity they gave ORT, and with the location of the `log!` call that made them.
//!
//! Which ORT logger receives a record:
//! - inside an ABI call that carries a session (`CreateEp`, `GetCapability`), the session's logger
//!   ([`Logger::scope`]), so the record carries the session's log id and severity;
//! - otherwise the environment's default logger handed to `CreateEpFactories`, held from then until
//!   the matching `ReleaseEpFactory`;
//! - with neither (before the first factory or after the last is released) warnings and errors go
//!   to stderr and lower levels are dropped.
//!
//! Installation ([`install`]) happens once per process, from `CreateEpFactories`. In the plugin the
//! `log` crate is private to `librcpu_ep.so`, so nobody else can have set its logger. A Rust program
//! that links the `rcpu` library crate directly may have installed its own logger first: rcpu then
//! leaves it in place and its records go to that logger (a library never replaces its host's
//! logger). See docs/architecture.md, "Logging".

use std::cell::Cell;
use std::ffi::CString;
use std::sync::OnceLock;

use log::{Level, LevelFilter, Log, Metadata, Record};
use ort_sys::OrtLoggingLevel;
use parking_lot::RwLock;

use super::api::try_api;
use super::ep_types::OrtLogger;

/// The environment loggers of the live factories, newest last (usually one: one `OrtEnv` per
/// process). The read lock is held while a record is handed to ORT, so a factory's release
/// (write lock) cannot retire a logger in the middle of a call.
static DEFAULT_LOGGERS: RwLock<Vec<LoggerPtr>> = RwLock::new(Vec::new());

thread_local! {
    /// The session logger of the ABI call running on this thread, if any ([`Logger::scope`]).
    static SCOPED: Cell<*const OrtLogger> = const { Cell::new(std::ptr::null()) };
}

/// An ORT logger pointer kept in [`DEFAULT_LOGGERS`].
#[derive(Clone, Copy, PartialEq, Eq)]
struct LoggerPtr(*const OrtLogger);

// SAFETY: an OrtLogger is an ORT-owned object that ORT documents as usable from any thread; this
// wrapper only stores the address and passes it back to ORT's logging functions.
unsafe impl Send for LoggerPtr {}
// SAFETY: as above; nothing is ever read or written through the pointer on the Rust side.
unsafe impl Sync for LoggerPtr {}

/// The bridge; stateless, the targets live in [`DEFAULT_LOGGERS`] and [`SCOPED`].
struct OrtBridge;

static BRIDGE: OrtBridge = OrtBridge;

/// How [`install`] went; decided once per process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installed {
    /// rcpu's bridge is the process's `log` logger.
    Bridge,
    /// Another logger was already set (a Rust host linking `rcpu`); it stays.
    HostLogger,
}

/// Makes the bridge the `log` logger unless one is already set. Idempotent and thread-safe.
pub fn install() -> Installed {
    static ONCE: OnceLock<Installed> = OnceLock::new();
    *ONCE.get_or_init(|| match log::set_logger(&BRIDGE) {
        Ok(()) => {
            // Every level passes the facade; `emit` asks the ORT logger for its severity before
            // formatting a record.
            log::set_max_level(LevelFilter::Trace);
            Installed::Bridge
        }
        Err(_) => Installed::HostLogger,
    })
}

/// Registers the environment's default logger of a new factory (NULL is ignored).
///
/// # Safety
/// `l` must be NULL or stay valid until the matching [`release_default`].
pub unsafe fn attach_default(l: *const OrtLogger) {
    if !l.is_null() {
        DEFAULT_LOGGERS.write().push(LoggerPtr(l));
    }
}

/// Forgets a default logger registered by [`attach_default`] (its factory is being released).
pub fn release_default(l: *const OrtLogger) {
    let mut loggers = DEFAULT_LOGGERS.write();
    if let Some(i) = loggers.iter().rposition(|p| p.0 == l) {
        loggers.remove(i);
    }
}

/// A session's ORT logger (from `CreateEp`), valid for the EP's lifetime per ORT's contract.
#[derive(Clone, Copy)]
pub struct Logger(*const OrtLogger);

// SAFETY: as for `LoggerPtr`: the address is only handed back to ORT, whose loggers are
// thread-safe.
unsafe impl Send for Logger {}
// SAFETY: as above.
unsafe impl Sync for Logger {}

impl Logger {
    /// # Safety
    /// `l` must be NULL or a logger that outlives every [`Logger::scope`] of this handle.
    pub unsafe fn new(l: *const OrtLogger) -> Self {
        Logger(l)
    }

    /// Routes this thread's `log` records to this logger until the guard drops (a NULL logger
    /// leaves the current routing unchanged).
    pub fn scope(&self) -> ScopeGuard {
        let prev = SCOPED.with(|s| {
            let prev = s.get();
            if !self.0.is_null() {
                s.set(self.0);
            }
            prev
        });
        ScopeGuard { prev }
    }
}

/// Restores the previous routing of this thread's records on drop.
pub struct ScopeGuard {
    prev: *const OrtLogger,
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        SCOPED.with(|s| s.set(self.prev));
    }
}

/// ORT's severity for a `log` level (ORT has one level below INFO: VERBOSE).
pub fn ort_level(level: Level) -> OrtLoggingLevel {
    match level {
        Level::Error => OrtLoggingLevel::ORT_LOGGING_LEVEL_ERROR,
        Level::Warn => OrtLoggingLevel::ORT_LOGGING_LEVEL_WARNING,
        Level::Info => OrtLoggingLevel::ORT_LOGGING_LEVEL_INFO,
        Level::Debug | Level::Trace => OrtLoggingLevel::ORT_LOGGING_LEVEL_VERBOSE,
    }
}

/// Whether `logger` lets `level` through (when ORT cannot say: yes).
///
/// # Safety
/// `logger` must be a live ORT logger and the API negotiated.
unsafe fn ort_enabled(logger: *const OrtLogger, level: OrtLoggingLevel) -> bool {
    let Some(api) = try_api() else { return false };
    let mut min = OrtLoggingLevel::ORT_LOGGING_LEVEL_VERBOSE;
    // SAFETY: logger is live (caller); `min` is a valid out-pointer.
    let st = unsafe { (api.ort.Logger_GetLoggingSeverityLevel)(logger, &mut min) };
    if !st.0.is_null() {
        // SAFETY: a status ORT returned, released once here.
        unsafe { (api.ort.ReleaseStatus)(st.0) };
        return true;
    }
    level as i32 >= min as i32
}

/// Hands one record to `logger` with the record's own file, line and module.
///
/// # Safety
/// `logger` must be a live ORT logger and the API negotiated.
unsafe fn emit(logger: *const OrtLogger, record: &Record<'_>) {
    let Some(api) = try_api() else { return };
    let level = ort_level(record.level());
    // SAFETY: forwarded caller contract.
    if !unsafe { ort_enabled(logger, level) } {
        return;
    }
    let text = |s: String| CString::new(s.replace('\0', " ")).unwrap_or_default();
    let msg = text(record.args().to_string());
    let file = text(record.file().unwrap_or("<unknown>").to_string());
    let func = text(record.module_path().unwrap_or("rcpu").to_string());
    let line = record
        .line()
        .and_then(|l| i32::try_from(l).ok())
        .unwrap_or(0);
    // SAFETY: logger is live (caller); the strings are NUL-terminated and outlive the call, which
    // copies them.
    let st = unsafe {
        (api.ort.Logger_LogMessage)(
            logger,
            level,
            msg.as_ptr(),
            file.as_ptr(),
            line,
            func.as_ptr(),
        )
    };
    if !st.0.is_null() {
        // SAFETY: a status ORT returned, released once here.
        unsafe { (api.ort.ReleaseStatus)(st.0) };
    }
}

impl Log for OrtBridge {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        let scoped = SCOPED.with(Cell::get);
        if !scoped.is_null() {
            // SAFETY: a session logger set by `Logger::scope` for the ABI call running on this
            // thread; it outlives the call (ORT's contract for CreateEp's logger).
            unsafe { emit(scoped, record) };
            return;
        }
        let loggers = DEFAULT_LOGGERS.read();
        if let Some(l) = loggers.last() {
            // SAFETY: registered by `attach_default` and not yet released; the read lock keeps
            // `release_default` from retiring it during the call.
            unsafe { emit(l.0, record) };
        } else if record.level() <= Level::Warn {
            eprintln!("rcpu: {}: {}", record.level(), record.args());
        }
    }

    fn flush(&self) {}
}
