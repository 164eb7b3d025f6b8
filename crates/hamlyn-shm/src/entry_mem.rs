//! One metadata entry of a mapped region, bounds- and alignment-checked once, as the
//! core's packet counting sees it ([`hamlyn_core::EntryMemory`]).
//!
//! [`crate::area_mem::AreaMem`] checks every access against the whole region: the
//! offset's conversion, the end against the region's length, an atomic's alignment. The
//! count of one packet makes a dozen accesses to one 128-byte entry
//! ([`hamlyn_core::count_packet`]), each at a constant offset into it. Here the entry is
//! checked once, when the view is made; each access is then checked against the entry's
//! constant length, which the compiler folds away once the offsets are known. A direct
//! sender counts through one of these (`hamlyn::DirectTarget`).
//!
//! Like every view of shared memory in this crate, it never forms a Rust reference to
//! the bytes (another process may write them at any moment): copies go through raw
//! pointers, and the accumulator words are atomics.

use std::marker::PhantomData;
use std::ptr::NonNull;

use hamlyn_core::{EntryMemory, OutOfRange};
use hamlyn_wire::META_ENTRY_LEN;

use crate::region::{RegionError, ShmRegion};
use crate::sync::{AtomicU32, Ordering};

/// The entry at some offset of a region (see the module docs). Borrows the region, whose
/// mapping therefore outlives it. Made where a count happens and dropped after it, so
/// it is neither `Send` nor `Sync` (a raw pointer).
#[derive(Debug)]
pub struct EntryMem<'a> {
    /// The entry's first byte: inside the region's mapping with all `META_ENTRY_LEN`
    /// bytes after it, 8-aligned (checked in [`EntryMem::new`]).
    base: NonNull<u8>,
    _region: PhantomData<&'a ShmRegion>,
}

impl<'a> EntryMem<'a> {
    /// The entry at byte `off` of `region`: `META_ENTRY_LEN` bytes that must lie in the
    /// region and start 8-aligned (every entry of a metadata area does).
    pub fn new(region: &'a ShmRegion, off: u64) -> Result<EntryMem<'a>, RegionError> {
        let out = || RegionError::OutOfBounds {
            off: usize::try_from(off).unwrap_or(usize::MAX),
            len: META_ENTRY_LEN,
            region_len: region.len(),
        };
        let at = usize::try_from(off).map_err(|_| out())?;
        if at
            .checked_add(META_ENTRY_LEN)
            .is_none_or(|end| end > region.len())
        {
            return Err(out());
        }
        // The address's alignment, not the offset's: a region may start anywhere in a
        // page (`ShmRegion::from_fd_range`).
        if (region.as_ptr() as usize).wrapping_add(at) % 8 != 0 {
            return Err(RegionError::Misaligned { off: at, align: 8 });
        }
        // SAFETY: `at + META_ENTRY_LEN <= region.len()` (checked above), so the pointer
        // stays inside the mapping.
        let p = unsafe { region.as_ptr().add(at) };
        Ok(EntryMem {
            base: NonNull::new(p).ok_or_else(out)?,
            _region: PhantomData,
        })
    }

    /// `offset..offset + n` inside the entry, as a byte index.
    #[inline(always)]
    fn within(offset: u64, n: usize) -> Result<usize, OutOfRange> {
        match offset.checked_add(n as u64) {
            Some(end) if end <= META_ENTRY_LEN as u64 => Ok(offset as usize),
            _ => Err(OutOfRange {
                offset,
                len: n as u64,
            }),
        }
    }
}

impl EntryMemory for EntryMem<'_> {
    #[inline]
    fn read_at(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfRange> {
        let at = Self::within(offset, dst.len())?;
        // SAFETY: `at + dst.len()` lies within the entry, which lies within the live
        // mapping (`new`, and the region's borrow). `dst` is this process's own memory,
        // so the ranges cannot overlap. No reference to the shared bytes is formed.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.as_ptr().add(at), dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }

    #[inline]
    fn write_at(&mut self, offset: u64, src: &[u8]) -> Result<(), OutOfRange> {
        let at = Self::within(offset, src.len())?;
        // SAFETY: as in `read_at`, the other way; the mapping is writable (an entry view
        // is made of the metadata area a sender or the engine writes).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.as_ptr().add(at), src.len())
        };
        Ok(())
    }

    #[inline]
    fn add_u32_at(&mut self, offset: u64, v: u32) -> Result<u32, OutOfRange> {
        let at = Self::within(offset, 4)?;
        if at % 4 != 0 {
            return Err(OutOfRange { offset, len: 4 });
        }
        // SAFETY: 4 bytes inside the entry (checked), 4-aligned (the entry is 8-aligned
        // and `at` a multiple of 4), in a mapping that outlives `self`. Atomics in shared
        // memory are address-free on the platforms rustix supports, and every access
        // to these words is atomic, as `ShmRegion::atomic_u32` promises.
        let word = unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(at).cast::<u32>()) };
        // AcqRel, as `AreaMem::fetch_add_u32`: pairs with the AcqRel adds of every
        // other depositor into this entry (the engine's or another direct sender's).
        Ok(word.fetch_add(v, Ordering::AcqRel).wrapping_add(v))
    }

    #[inline]
    fn load_u32_at(&self, offset: u64) -> Result<u32, OutOfRange> {
        let at = Self::within(offset, 4)?;
        if at % 4 != 0 {
            return Err(OutOfRange { offset, len: 4 });
        }
        // SAFETY: as in `add_u32_at`: 4 bytes inside the entry, 4-aligned, in a live
        // mapping, a word only ever accessed atomically.
        let word = unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(at).cast::<u32>()) };
        // Acquire: pairs with the AcqRel adds of every depositor into this word
        // (`add_u32_at`, here or in the engine's `AreaMem`); conservative, as there.
        Ok(word.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::area_mem::AreaMem;

    /// What an `EntryMem` reads, writes and adds, it does to the same bytes as the
    /// region's own checked accessors, at the entry's offset; and every access that
    /// leaves the entry is refused, never done.
    #[test]
    fn an_entry_view_touches_its_entry_and_nothing_else() {
        let region = ShmRegion::create("test-entry-mem", 4 * META_ENTRY_LEN).unwrap();
        let off = 2 * META_ENTRY_LEN as u64;
        let mut e = EntryMem::new(&region, off).unwrap();
        e.write_at(0, &[1, 2, 3]).unwrap();
        e.write_at(META_ENTRY_LEN as u64 - 2, &[9, 9]).unwrap();
        assert_eq!(e.add_u32_at(8, 5).unwrap(), 5);
        assert_eq!(e.add_u32_at(8, u32::MAX).unwrap(), 4);
        assert_eq!(e.load_u32_at(8).unwrap(), 4, "the word the adds left");
        let mut got = [0u8; 3];
        e.read_at(0, &mut got).unwrap();
        assert_eq!(got, [1, 2, 3]);
        let mut all = vec![0u8; region.len()];
        region.read(0, &mut all).unwrap();
        let at = off as usize;
        assert_eq!(&all[at..at + 3], &[1, 2, 3]);
        assert_eq!(&all[at + META_ENTRY_LEN - 2..at + META_ENTRY_LEN], &[9, 9]);
        assert_eq!(
            u32::from_le_bytes(all[at + 8..at + 12].try_into().unwrap()),
            4
        );
        // Nothing outside the entry was touched.
        assert!(all[..at].iter().all(|&b| b == 0));
        assert!(all[at + META_ENTRY_LEN..].iter().all(|&b| b == 0));
        // The same word through the region's own view.
        assert_eq!(AreaMem(&region).add_u32_at(off + 8, 0).unwrap(), 4);

        // Accesses that leave the entry are refused.
        let end = META_ENTRY_LEN as u64;
        assert!(e.write_at(end - 1, &[0, 0]).is_err());
        assert!(e.write_at(u64::MAX, &[0]).is_err());
        assert!(e.read_at(end, &mut [0u8; 1]).is_err());
        assert!(e.add_u32_at(end - 2, 1).is_err());
        assert!(e.add_u32_at(2, 1).is_err(), "misaligned");
        assert!(e.load_u32_at(end - 2).is_err());
        assert!(e.load_u32_at(2).is_err(), "misaligned");
        region.read(0, &mut all).unwrap();
        assert!(all[..at].iter().all(|&b| b == 0));
        assert!(all[at + META_ENTRY_LEN..].iter().all(|&b| b == 0));

        // Entries that do not lie whole in the region, or are misaligned, are refused.
        assert!(EntryMem::new(&region, 3 * META_ENTRY_LEN as u64 + 8).is_err());
        assert!(EntryMem::new(&region, u64::MAX).is_err());
        assert!(EntryMem::new(&region, 4).is_err());
        assert!(EntryMem::new(&region, 3 * META_ENTRY_LEN as u64).is_ok());
    }
}
