//! The memory a ring lives in, and the layout checks every ring makes against it.
//!
//! Rings ([`crate::spsc`], [`crate::notifq`]) are written over the small [`RingMemory`]
//! trait rather than over raw pointers, so the same code runs over a shared-memory
//! [`ShmRegion`](crate::region::ShmRegion) in production and over `LoomMemory` (loom
//! atomics and loom-tracked cells on the heap, present under `cfg(loom)` only), where the
//! model checker sees every access.
//!
//! A ring validates its layout against the memory once, when it attaches; afterwards every
//! offset it computes is in bounds by construction. The accessors still check (a few
//! compares), and a failed check is reported as corruption, never as a panic.

use std::sync::Arc;

use crate::sync::{AtomicU32, AtomicU64};

/// Bytes in a cache line. Fields written by different sides never share one (FLIPC §4:
/// false sharing between the engine and the library cost more than the messages).
pub const CACHE_LINE: usize = 64;

/// Memory that rings and queues can be laid out in.
///
/// Offsets are in bytes from the start of the memory. The same offset is always used the
/// same way (as a 32-bit atomic, a 64-bit atomic, or plain bytes) by the layouts in this
/// crate; implementations may rely on that (loom's does).
pub trait RingMemory {
    /// Bytes addressable.
    fn len(&self) -> usize;

    /// Whether the memory has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The 32-bit atomic at `off`, or `None` if it is out of bounds or not 4-aligned.
    fn atomic_u32(&self, off: usize) -> Option<&AtomicU32>;

    /// The 64-bit atomic at `off`, or `None` if it is out of bounds or not 8-aligned.
    fn atomic_u64(&self, off: usize) -> Option<&AtomicU64>;

    /// Copies `dst.len()` bytes starting at `off` into `dst`. Returns `false` and copies
    /// nothing if the range is out of bounds.
    ///
    /// The bytes may be changing under a concurrent writer in another process; the copy
    /// may then be torn, and callers treat what they copied as untrusted bytes.
    fn load_bytes(&self, off: usize, dst: &mut [u8]) -> bool;

    /// Copies `src` to the bytes starting at `off`. Returns `false` and writes nothing if
    /// the range is out of bounds.
    fn store_bytes(&self, off: usize, src: &[u8]) -> bool;
}

impl<M: RingMemory + ?Sized> RingMemory for &M {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
        (**self).atomic_u32(off)
    }
    fn atomic_u64(&self, off: usize) -> Option<&AtomicU64> {
        (**self).atomic_u64(off)
    }
    fn load_bytes(&self, off: usize, dst: &mut [u8]) -> bool {
        (**self).load_bytes(off, dst)
    }
    fn store_bytes(&self, off: usize, src: &[u8]) -> bool {
        (**self).store_bytes(off, src)
    }
}

impl<M: RingMemory + ?Sized> RingMemory for Arc<M> {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
        (**self).atomic_u32(off)
    }
    fn atomic_u64(&self, off: usize) -> Option<&AtomicU64> {
        (**self).atomic_u64(off)
    }
    fn load_bytes(&self, off: usize, dst: &mut [u8]) -> bool {
        (**self).load_bytes(off, dst)
    }
    fn store_bytes(&self, off: usize, src: &[u8]) -> bool {
        (**self).store_bytes(off, src)
    }
}

/// Smallest ring or queue capacity, in entries. Loom builds allow tiny rings so the model
/// checker can explore wrap-around and full rings in a few steps.
pub const MIN_CAPACITY: u32 = if cfg!(loom) { 2 } else { 64 };

/// Largest ring or queue capacity, in entries (far below 2^31, which the notification
/// queue's lap-aware sequence numbers need).
pub const MAX_CAPACITY: u32 = 1 << 24;

/// Why a ring or queue layout was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// The layout's offset is not a multiple of [`CACHE_LINE`].
    #[error("offset {offset} is not cache-line aligned")]
    Misaligned {
        /// The offending offset.
        offset: usize,
    },
    /// The capacity is not a power of two in [`MIN_CAPACITY`]..=[`MAX_CAPACITY`].
    #[error("capacity {capacity} is not a power of two in {MIN_CAPACITY}..={MAX_CAPACITY}")]
    Capacity {
        /// The offending capacity.
        capacity: u32,
    },
    /// The entry size is not a non-zero multiple of 8 of at most
    /// [`MAX_ENTRY_SIZE`](crate::spsc::MAX_ENTRY_SIZE) bytes.
    #[error("entry size {entry_size} is not a non-zero multiple of 8 up to the maximum")]
    EntrySize {
        /// The offending entry size.
        entry_size: usize,
    },
    /// The layout ends past the end of the memory (or past `usize::MAX`).
    #[error("layout needs {need} bytes of memory, which has {have}")]
    DoesNotFit {
        /// Bytes the layout needs from the start of the memory.
        need: usize,
        /// Bytes the memory has.
        have: usize,
    },
}

/// Checks the parts of a layout common to every ring: offset alignment and capacity.
pub(crate) fn check_offset_and_capacity(offset: usize, capacity: u32) -> Result<(), LayoutError> {
    if offset % CACHE_LINE != 0 {
        return Err(LayoutError::Misaligned { offset });
    }
    if !capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
        return Err(LayoutError::Capacity { capacity });
    }
    Ok(())
}

/// Checks that `need` bytes from the start fit in `mem`.
pub(crate) fn check_fits(mem: &impl RingMemory, need: usize) -> Result<(), LayoutError> {
    let have = mem.len();
    if need > have {
        return Err(LayoutError::DoesNotFit { need, have });
    }
    Ok(())
}

#[cfg(loom)]
pub use loom_memory::LoomMemory;

#[cfg(loom)]
mod loom_memory {
    use super::RingMemory;
    use crate::sync::{AtomicU32, AtomicU64};

    /// Heap memory for loom models: every 8-byte word exists as a loom `AtomicU64`, two
    /// loom `AtomicU32`s and a loom-tracked `UnsafeCell<[u8; 8]>`, so loom checks both the
    /// atomics and, through the cells, that plain byte copies never race (a torn entry
    /// would be a race on some cell).
    ///
    /// The three views of a word are independent objects, which is sound for the layouts
    /// in this crate because each of them uses a given offset in only one way.
    pub struct LoomMemory {
        len: usize,
        u64s: Vec<AtomicU64>,
        u32s: Vec<AtomicU32>,
        cells: Vec<loom::cell::UnsafeCell<[u8; 8]>>,
    }

    // SAFETY: `LoomMemory` stands for memory shared between threads and processes. Every
    // access goes through loom atomics or loom-tracked cells, so a conflicting concurrent
    // access is reported by the model checker as a failure, never left as undefined
    // behaviour.
    unsafe impl Sync for LoomMemory {}

    impl LoomMemory {
        /// Zeroed memory of `len` bytes (rounded up to a multiple of 8).
        pub fn new(len: usize) -> LoomMemory {
            let words = len.div_ceil(8);
            LoomMemory {
                len: words * 8,
                u64s: (0..words).map(|_| AtomicU64::new(0)).collect(),
                u32s: (0..words * 2).map(|_| AtomicU32::new(0)).collect(),
                cells: (0..words)
                    .map(|_| loom::cell::UnsafeCell::new([0; 8]))
                    .collect(),
            }
        }

        fn in_bounds(&self, off: usize, len: usize) -> bool {
            off.checked_add(len).is_some_and(|end| end <= self.len)
        }
    }

    impl RingMemory for LoomMemory {
        fn len(&self) -> usize {
            self.len
        }

        fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
            if off % 4 != 0 {
                return None;
            }
            self.u32s.get(off / 4)
        }

        fn atomic_u64(&self, off: usize) -> Option<&AtomicU64> {
            if off % 8 != 0 {
                return None;
            }
            self.u64s.get(off / 8)
        }

        fn load_bytes(&self, off: usize, dst: &mut [u8]) -> bool {
            if !self.in_bounds(off, dst.len()) {
                return false;
            }
            for (i, b) in dst.iter_mut().enumerate() {
                let at = off + i;
                let Some(cell) = self.cells.get(at / 8) else {
                    return false;
                };
                // SAFETY: loom's `with` hands out a pointer to the live `[u8; 8]` and
                // records the read; a concurrent write would fail the model, not be UB.
                *b = cell.with(|p| unsafe { (*p)[at % 8] });
            }
            true
        }

        fn store_bytes(&self, off: usize, src: &[u8]) -> bool {
            if !self.in_bounds(off, src.len()) {
                return false;
            }
            for (i, b) in src.iter().enumerate() {
                let at = off + i;
                let Some(cell) = self.cells.get(at / 8) else {
                    return false;
                };
                // SAFETY: loom's `with_mut` hands out a pointer to the live `[u8; 8]` and
                // records the write; any concurrent access would fail the model.
                cell.with_mut(|p| unsafe { (*p)[at % 8] = *b });
            }
            true
        }
    }
}
