//! The one adapter between shared-memory areas and the core's [`Memory`] trait: the
//! engine reaches registered areas through it, and a direct sender reaches the receiver's
//! slot through it, so both deposit with the same code. Both count a packet through one
//! metadata entry checked once ([`crate::entry_mem::EntryMem`]).
//!
//! Memory another process can write is never held as a Rust reference here: every access
//! copies in or out through `ShmRegion`'s raw, bounds-checked accessors, or is an atomic
//! on the shared word. A fabric sends from and receives into an area through
//! [`AreaMem::bytes`] and [`AreaMem::bytes_mut`], views by raw parts ([`crate::bytes`]).

use std::ops::Deref;

use hamlyn_core::{Memory, OutOfRange};

use crate::bytes::{SharedBytes, SharedBytesMut};
use crate::region::ShmRegion;
use crate::sync::Ordering;

/// A region as the core sees it. `R` is how it is held: `Arc<ShmRegion>` in the engine's
/// area table, `&ShmRegion` for a direct sender's mapping.
#[derive(Debug, Clone)]
pub struct AreaMem<R>(pub R);

fn oor(offset: u64, len: usize) -> OutOfRange {
    OutOfRange {
        offset,
        len: len as u64,
    }
}

fn at(offset: u64, len: usize) -> Result<usize, OutOfRange> {
    usize::try_from(offset).map_err(|_| oor(offset, len))
}

impl<R: Deref<Target = ShmRegion>> AreaMem<R> {
    /// Copies `n` bytes at `src_off` of this area to `dst_off` of `dst` (the same area
    /// too: the ranges may overlap), with no reference to either range.
    pub fn copy_to<D: Deref<Target = ShmRegion>>(
        &self,
        src_off: u64,
        dst: &AreaMem<D>,
        dst_off: u64,
        n: usize,
    ) -> Result<(), OutOfRange> {
        let s = at(src_off, n)?;
        let d = at(dst_off, n)?;
        self.0.copy_to(s, &dst.0, d, n).map_err(|_| oor(dst_off, n))
    }

    /// The bytes `offset..offset + len`, for a fabric to send from (a view by raw
    /// parts: copied out or lent to `writev`, never referenced).
    pub fn bytes(&self, offset: u64, len: usize) -> Result<SharedBytes<'_>, OutOfRange> {
        self.0
            .bytes(at(offset, len)?, len)
            .map_err(|_| oor(offset, len))
    }

    /// The bytes `offset..offset + len`, for a fabric to read an arriving payload into (a
    /// view by raw parts: copied into or lent to `readv`, never referenced).
    pub fn bytes_mut(&mut self, offset: u64, len: usize) -> Result<SharedBytesMut<'_>, OutOfRange> {
        self.0
            .bytes_mut(at(offset, len)?, len)
            .map_err(|_| oor(offset, len))
    }
}

impl<R: Deref<Target = ShmRegion>> Memory for AreaMem<R> {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfRange> {
        let n = dst.len();
        self.0.read(at(offset, n)?, dst).map_err(|_| oor(offset, n))
    }

    fn write(&mut self, offset: u64, src: &[u8]) -> Result<(), OutOfRange> {
        self.0
            .write(at(offset, src.len())?, src)
            .map_err(|_| oor(offset, src.len()))
    }

    fn fetch_add_u32(&mut self, offset: u64, v: u32) -> Result<u32, OutOfRange> {
        // AcqRel: pairs with the AcqRel add of every other depositor into this
        // accumulator (the engine, direct senders, in any process). The Release half
        // publishes this packet's payload and metadata to whoever brings the sum to 0; the
        // Acquire half, when we do, makes every other packet's deposit visible before the
        // notification is posted, whose `seq` Release store the receiver acquires before
        // it reads the message.
        let old = self
            .0
            .fetch_add_u32(at(offset, 4)?, v, Ordering::AcqRel)
            .map_err(|_| oor(offset, 4))?;
        Ok(old.wrapping_add(v))
    }

    fn load_u32(&self, offset: u64) -> Result<u32, OutOfRange> {
        let word = self
            .0
            .atomic_u32(at(offset, 4)?)
            .map_err(|_| oor(offset, 4))?;
        // Acquire: pairs with the AcqRel `fetch_add_u32` above of every depositor into
        // this word. Conservative: a lone message's count (`hamlyn_core::count_packet`)
        // reads nothing after it that another depositor published.
        Ok(word.load(Ordering::Acquire))
    }

    fn compare_swap_u64(&mut self, offset: u64, current: u64, new: u64) -> Result<u64, OutOfRange> {
        // AcqRel/Acquire: a remote atomic is a synchronisation point with local atomics on
        // the same word in the owner's process (Thekkath's locks): it must see what they
        // published and publish what it stored.
        let r = self.0.compare_exchange_u64(
            at(offset, 8)?,
            current,
            new,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        match r {
            Ok(Ok(old)) | Ok(Err(old)) => Ok(old),
            Err(_) => Err(oor(offset, 8)),
        }
    }

    fn fetch_add_u64(&mut self, offset: u64, v: u64) -> Result<u64, OutOfRange> {
        let word = self
            .0
            .atomic_u64(at(offset, 8)?)
            .map_err(|_| oor(offset, 8))?;
        // AcqRel: as for compare-and-swap above.
        Ok(word.fetch_add(v, Ordering::AcqRel))
    }

    fn load_u64(&self, offset: u64) -> Result<u64, OutOfRange> {
        let word = self
            .0
            .atomic_u64(at(offset, 8)?)
            .map_err(|_| oor(offset, 8))?;
        // Acquire: pairs with the Release `store_u64` (or AcqRel read-modify-write) of
        // whoever published the word: an endpoint's receiver publishing `posted`, a
        // depositor publishing a ring entry's `done` (hamlyn_core::endpoint).
        Ok(word.load(Ordering::Acquire))
    }

    fn store_u64(&mut self, offset: u64, v: u64) -> Result<(), OutOfRange> {
        let word = self
            .0
            .atomic_u64(at(offset, 8)?)
            .map_err(|_| oor(offset, 8))?;
        // Release: pairs with the Acquire `load_u64` of the word's reader, which then
        // sees every byte written before (an endpoint buffer and its ring entry).
        word.store(v, Ordering::Release);
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn copies_between_and_within_areas_without_references() {
        let a = AreaMem(Arc::new(ShmRegion::create("t-a", 4096).expect("memfd")));
        let mut b = AreaMem(Arc::new(ShmRegion::create("t-b", 4096).expect("memfd")));
        let mut a2 = a.clone();
        a2.write(10, b"hello world").expect("in range");
        a.copy_to(10, &b, 100, 11).expect("in range");
        let mut got = [0u8; 11];
        b.read(100, &mut got).expect("in range");
        assert_eq!(&got, b"hello world");
        // Overlapping, within one area: a memmove.
        a.copy_to(10, &a, 12, 11).expect("in range");
        let mut got = [0u8; 13];
        a.read(10, &mut got).expect("in range");
        assert_eq!(&got, b"hehello world");
        assert!(a.copy_to(4090, &b, 0, 11).is_err(), "source out of range");
        assert!(
            a.copy_to(0, &b, 4090, 11).is_err(),
            "destination out of range"
        );
        assert_eq!(b.fetch_add_u32(8, 5).expect("aligned"), 5);
        assert_eq!(b.fetch_add_u32(8, u32::MAX).expect("aligned"), 4);
    }
}
