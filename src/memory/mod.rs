//! The process-wide memory governor and the caches it governs.
