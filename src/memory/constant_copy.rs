//! `ConstantCopy`: rcpu's own copy of a constant initializer that a fused partition still reads
//! (`abi::fused` asks ORT to drop the initializers it fuses, so the copy replaces ORT's, it does
//! not double it). Not governed: a fused node's constants are part of the model, needed for every
//! run, and a decline would have nowhere to go once the node is compiled. Counted, so the stats
//! show what the partitions hold besides the weight cache (`memory.fused_constants`).

use super::{AlignedBuf, AllocError};
use crate::os::mapped::FileSlice;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

// Relaxed: statistics only.
static LIVE_BYTES: AtomicU64 = AtomicU64::new(0);
static PEAK_BYTES: AtomicU64 = AtomicU64::new(0);
static COPIES: AtomicU64 = AtomicU64::new(0);

/// A 64-byte aligned copy of a constant's bytes, counted while it lives.
#[derive(Debug)]
pub struct ConstantCopy(AlignedBuf<u8>);

impl ConstantCopy {
    /// Copies `bytes` (fallibly).
    pub fn try_copy(bytes: &[u8]) -> Result<ConstantCopy, AllocError> {
        let buf = AlignedBuf::try_from_slice(bytes)?;
        super::gauge_add(&LIVE_BYTES, &PEAK_BYTES, buf.held_bytes() as u64);
        COPIES.fetch_add(1, Relaxed);
        Ok(ConstantCopy(buf))
    }

    pub fn as_slice(&self) -> &[u8] {
        self.0.as_slice()
    }
}

impl Drop for ConstantCopy {
    fn drop(&mut self) {
        LIVE_BYTES.fetch_sub(self.0.held_bytes() as u64, Relaxed);
    }
}

/// The bytes of a constant a fused partition reads: rcpu's copy, or (a partition read from a
/// context file, `ep::context`) a view of the mapped file, which copies nothing: its pages are
/// the page cache's, shared by every process that maps the file.
#[derive(Debug)]
pub enum ConstantBytes {
    Copy(ConstantCopy),
    Mapped(FileSlice<u8>),
}

impl ConstantBytes {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            ConstantBytes::Copy(c) => c.as_slice(),
            ConstantBytes::Mapped(m) => m,
        }
    }

    pub fn is_mapped(&self) -> bool {
        matches!(self, ConstantBytes::Mapped(_))
    }
}

/// Constant-copy figures (process-wide).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ConstantCopyStats {
    /// Bytes the live copies hold.
    pub live_bytes: u64,
    /// Highest `live_bytes` seen.
    pub peak_bytes: u64,
    /// Copies made.
    pub copies: u64,
}

pub fn constant_copy_stats() -> ConstantCopyStats {
    ConstantCopyStats {
        live_bytes: LIVE_BYTES.load(Relaxed),
        peak_bytes: PEAK_BYTES.load(Relaxed),
        copies: COPIES.load(Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_holds_the_bytes_and_is_counted_while_it_lives() {
        let src: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let c = ConstantCopy::try_copy(&src).unwrap();
        assert_eq!(c.as_slice(), &src[..]);
        assert_eq!(c.as_slice().as_ptr() as usize % 64, 0);
        // Other tests may copy concurrently: the gauge holds at least this copy.
        assert!(constant_copy_stats().live_bytes >= 1000);
        assert!(constant_copy_stats().copies >= 1);
    }
}
