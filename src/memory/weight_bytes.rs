//! `WeightBytes`: the read-only bytes of a packed weight, wherever they live: a piece of the
//! huge-page weight arena (a weight packed in this process, [`super::weight_arena`]) or a slice of
//! a mapped file (a weight packed earlier and stored in a context file, mapped read-only and used
//! in place, [`crate::os::mapped::FileSlice`]). Kernels read both the same way, through `Deref`;
//! only the accounting differs: arena bytes are memory the weights governor charges, file pages
//! are page cache the kernel can drop and read again ([`WeightBytes::arena_bytes`] is 0 for them).

use super::weight_arena::ArenaBuf;
use crate::os::mapped::FileSlice;

/// The bytes of a packed weight: in the weight arena or in a mapped file. Read-only: a packer
/// writes through the [`ArenaBuf`] before it wraps it.
#[derive(Debug)]
pub enum WeightBytes {
    /// A piece of the process-wide weight arena.
    Arena(ArenaBuf<u8>),
    /// A slice of a read-only file mapping.
    File(FileSlice<u8>),
}

impl WeightBytes {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            WeightBytes::Arena(b) => b.as_slice(),
            WeightBytes::File(f) => f.as_slice(),
        }
    }

    /// Bytes taken from the weight arena (alignment padding included); 0 for a mapped file,
    /// whose pages the governor does not charge.
    pub fn arena_bytes(&self) -> usize {
        match self {
            WeightBytes::Arena(b) => b.taken_bytes(),
            WeightBytes::File(_) => 0,
        }
    }

    /// Start address of the arena region or the file mapping the bytes lie in (diagnostics).
    pub fn region_addr(&self) -> usize {
        match self {
            WeightBytes::Arena(b) => b.mapping().addr(),
            WeightBytes::File(f) => f.map().addr(),
        }
    }

    /// Whether the bytes lie in a mapped file.
    pub fn is_file(&self) -> bool {
        matches!(self, WeightBytes::File(_))
    }
}

impl std::ops::Deref for WeightBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl From<ArenaBuf<u8>> for WeightBytes {
    fn from(b: ArenaBuf<u8>) -> Self {
        WeightBytes::Arena(b)
    }
}

impl From<FileSlice<u8>> for WeightBytes {
    fn from(f: FileSlice<u8>) -> Self {
        WeightBytes::File(f)
    }
}
