//! Areas behind a small trait: the engine backs them with shared memory, tests with
//! plain buffers.
//!
//! The core only reaches an area through [`Memory`], or a metadata entry through an
//! [`EntryMemory`] view ([`Areas::entry`]), after checking every offset against the slot
//! it was granted through; both still bounds-check (an [`OutOfRange`] is a bug or a
//! vanished area, never a crash).

/// Names a registered area (message, metadata or send area) on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct AreaId(pub u32);

/// An access fell outside an area.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("access of {len} bytes at offset {offset} is outside the area")]
pub struct OutOfRange {
    /// Offset of the access.
    pub offset: u64,
    /// Length of the access.
    pub len: u64,
}

/// Byte-addressed memory of one area.
///
/// Multi-byte words are little-endian. `fetch_add_u32` must be atomic with respect to
/// other users of the same memory (shared-memory implementations use a real atomic).
pub trait Memory {
    /// Length of the area in bytes.
    fn len(&self) -> u64;
    /// Whether the area is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfRange>;
    /// Copies `src` into the area starting at `offset`.
    fn write(&mut self, offset: u64, src: &[u8]) -> Result<(), OutOfRange>;
    /// Adds `v` (wrapping) to the 4-byte-aligned u32 at `offset`; returns the new value.
    fn fetch_add_u32(&mut self, offset: u64, v: u32) -> Result<u32, OutOfRange>;
    /// Reads the 4-byte-aligned u32 at `offset` with Acquire ordering (shared-memory
    /// implementations), pairing with the AcqRel `fetch_add_u32` of whoever added to it.
    fn load_u32(&self, offset: u64) -> Result<u32, OutOfRange>;
    /// Atomically: if the 8-byte-aligned u64 at `offset` equals `current`, store `new`.
    /// Returns the value found (the old value).
    fn compare_swap_u64(&mut self, offset: u64, current: u64, new: u64) -> Result<u64, OutOfRange>;
    /// Atomically adds `v` (wrapping) to the 8-byte-aligned u64 at `offset`; returns the
    /// old value.
    fn fetch_add_u64(&mut self, offset: u64, v: u64) -> Result<u64, OutOfRange>;
    /// Reads the 8-byte-aligned u64 at `offset` with Acquire ordering (shared-memory
    /// implementations), pairing with the Release store or read-modify-write of whoever
    /// published it.
    fn load_u64(&self, offset: u64) -> Result<u64, OutOfRange>;
    /// Stores `v` into the 8-byte-aligned u64 at `offset` with Release ordering (shared-
    /// memory implementations): what was written before is visible to whoever loads it
    /// with Acquire.
    fn store_u64(&mut self, offset: u64, v: u64) -> Result<(), OutOfRange>;
}

/// What committing a packet does to its metadata entry: copy bytes in and out and add to
/// the 32-bit accumulator ([`crate::receive::count_packet`]).
///
/// Every [`Memory`] is one. A direct sender, which maps only the few pages of entries its
/// ticket names, implements this alone, so that the engine and direct senders run the
/// same commit code over their own mappings.
pub trait EntryMemory {
    /// Copies `dst.len()` bytes starting at `offset` into `dst`.
    fn read_at(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfRange>;
    /// Copies `src` into the memory starting at `offset`.
    fn write_at(&mut self, offset: u64, src: &[u8]) -> Result<(), OutOfRange>;
    /// Adds `v` (wrapping) to the 4-byte-aligned u32 at `offset`, atomically with respect
    /// to every other user of the memory (other processes included); returns the new
    /// value.
    fn add_u32_at(&mut self, offset: u64, v: u32) -> Result<u32, OutOfRange>;
    /// Reads the 4-byte-aligned u32 at `offset` atomically (Acquire), as
    /// [`EntryMemory::add_u32_at`]'s words are read: pairs with the adds of every other
    /// user of the memory.
    fn load_u32_at(&self, offset: u64) -> Result<u32, OutOfRange>;
}

impl<M: Memory + ?Sized> EntryMemory for M {
    fn read_at(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfRange> {
        self.read(offset, dst)
    }
    fn write_at(&mut self, offset: u64, src: &[u8]) -> Result<(), OutOfRange> {
        self.write(offset, src)
    }
    fn add_u32_at(&mut self, offset: u64, v: u32) -> Result<u32, OutOfRange> {
        self.fetch_add_u32(offset, v)
    }
    fn load_u32_at(&self, offset: u64) -> Result<u32, OutOfRange> {
        self.load_u32(offset)
    }
}

/// Finds an area's memory by id.
pub trait Areas {
    /// The memory type of this node's areas.
    type Mem: Memory;
    /// One metadata entry of an area, as packet counting writes it
    /// ([`crate::receive::count_packet`]): checked once when made, each access then
    /// against the entry's constant length (a view of the memory itself, as the
    /// engine's shared-memory one, needs no other check; [`EntryIn`] also goes through
    /// the memory's own).
    type Entry<'a>: EntryMemory
    where
        Self: 'a;
    /// The area's memory, if it is registered.
    fn area(&mut self, id: AreaId) -> Option<&mut Self::Mem>;
    /// The [`META_ENTRY_LEN`](hamlyn_wire::META_ENTRY_LEN)-byte entry at byte `off` of
    /// area `id`; `None` if the area is not registered or the entry does not lie in it
    /// (or, for memory whose view needs it, is not 8-aligned).
    fn entry(&mut self, id: AreaId, off: u64) -> Option<Self::Entry<'_>>;
}

/// An entry of any [`Memory`] (an [`Areas::Entry`] for areas that have no view of their
/// own): each access is checked against the entry's length, then made through the whole
/// memory at the entry's offset.
#[derive(Debug)]
pub struct EntryIn<'a, M: Memory + ?Sized> {
    mem: &'a mut M,
    base: u64,
}

impl<'a, M: Memory + ?Sized> EntryIn<'a, M> {
    /// The entry at byte `off` of `mem`, if all of it lies there (each atomic access is
    /// still checked for alignment by `mem`).
    pub fn new(mem: &'a mut M, off: u64) -> Option<EntryIn<'a, M>> {
        let end = off.checked_add(hamlyn_wire::META_ENTRY_LEN as u64)?;
        (end <= mem.len()).then_some(EntryIn { mem, base: off })
    }

    /// `offset` in the whole memory, for an access of `n` bytes inside the entry.
    fn at(&self, offset: u64, n: usize) -> Result<u64, OutOfRange> {
        match offset.checked_add(n as u64) {
            Some(end) if end <= hamlyn_wire::META_ENTRY_LEN as u64 => Ok(self.base + offset),
            _ => Err(OutOfRange {
                offset,
                len: n as u64,
            }),
        }
    }
}

impl<M: Memory + ?Sized> EntryMemory for EntryIn<'_, M> {
    fn read_at(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfRange> {
        self.mem.read(self.at(offset, dst.len())?, dst)
    }
    fn write_at(&mut self, offset: u64, src: &[u8]) -> Result<(), OutOfRange> {
        let at = self.at(offset, src.len())?;
        self.mem.write(at, src)
    }
    fn add_u32_at(&mut self, offset: u64, v: u32) -> Result<u32, OutOfRange> {
        let at = self.at(offset, 4)?;
        self.mem.fetch_add_u32(at, v)
    }
    fn load_u32_at(&self, offset: u64) -> Result<u32, OutOfRange> {
        self.mem.load_u32(self.at(offset, 4)?)
    }
}

fn check(len: u64, offset: u64, n: usize) -> Result<core::ops::Range<usize>, OutOfRange> {
    let err = OutOfRange {
        offset,
        len: n as u64,
    };
    let end = offset.checked_add(n as u64).ok_or(err)?;
    if end > len {
        return Err(err);
    }
    let start = usize::try_from(offset).map_err(|_| err)?;
    let end = usize::try_from(end).map_err(|_| err)?;
    Ok(start..end)
}

impl Memory for Vec<u8> {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
    fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfRange> {
        let r = check(Memory::len(self), offset, dst.len())?;
        dst.copy_from_slice(&self[r]);
        Ok(())
    }
    fn write(&mut self, offset: u64, src: &[u8]) -> Result<(), OutOfRange> {
        let r = check(Memory::len(self), offset, src.len())?;
        self[r].copy_from_slice(src);
        Ok(())
    }
    fn fetch_add_u32(&mut self, offset: u64, v: u32) -> Result<u32, OutOfRange> {
        if offset % 4 != 0 {
            return Err(OutOfRange { offset, len: 4 });
        }
        let r = check(Memory::len(self), offset, 4)?;
        let mut word = [0u8; 4];
        word.copy_from_slice(&self[r.clone()]);
        let new = u32::from_le_bytes(word).wrapping_add(v);
        self[r].copy_from_slice(&new.to_le_bytes());
        Ok(new)
    }
    fn load_u32(&self, offset: u64) -> Result<u32, OutOfRange> {
        if offset % 4 != 0 {
            return Err(OutOfRange { offset, len: 4 });
        }
        let r = check(Memory::len(self), offset, 4)?;
        let mut word = [0u8; 4];
        word.copy_from_slice(&self[r]);
        Ok(u32::from_le_bytes(word))
    }
    fn compare_swap_u64(&mut self, offset: u64, current: u64, new: u64) -> Result<u64, OutOfRange> {
        let old = word64(self, offset)?;
        if old == current {
            self.write(offset, &new.to_le_bytes())?;
        }
        Ok(old)
    }
    fn fetch_add_u64(&mut self, offset: u64, v: u64) -> Result<u64, OutOfRange> {
        let old = word64(self, offset)?;
        self.write(offset, &old.wrapping_add(v).to_le_bytes())?;
        Ok(old)
    }
    fn load_u64(&self, offset: u64) -> Result<u64, OutOfRange> {
        word64(self, offset)
    }
    fn store_u64(&mut self, offset: u64, v: u64) -> Result<(), OutOfRange> {
        word64(self, offset)?;
        self.write(offset, &v.to_le_bytes())
    }
}

fn word64(m: &[u8], offset: u64) -> Result<u64, OutOfRange> {
    if offset % 8 != 0 {
        return Err(OutOfRange { offset, len: 8 });
    }
    let r = check(m.len() as u64, offset, 8)?;
    let mut w = [0u8; 8];
    w.copy_from_slice(&m[r]);
    Ok(u64::from_le_bytes(w))
}

/// Areas as plain heap buffers, for tests and the simulated cluster.
#[derive(Clone, Debug, Default)]
pub struct VecAreas {
    areas: Vec<Option<Vec<u8>>>,
}

impl VecAreas {
    /// No areas.
    pub fn new() -> VecAreas {
        VecAreas::default()
    }
    /// Registers a zeroed area of `len` bytes.
    pub fn add(&mut self, len: usize) -> AreaId {
        self.areas.push(Some(vec![0; len]));
        AreaId((self.areas.len() - 1) as u32)
    }
    /// Removes an area; later lookups miss.
    pub fn remove(&mut self, id: AreaId) -> Option<Vec<u8>> {
        self.areas.get_mut(id.0 as usize).and_then(Option::take)
    }
    /// The area's bytes.
    pub fn bytes(&self, id: AreaId) -> Option<&[u8]> {
        self.areas.get(id.0 as usize).and_then(|a| a.as_deref())
    }
    /// The area's bytes, mutably.
    pub fn bytes_mut(&mut self, id: AreaId) -> Option<&mut Vec<u8>> {
        self.areas.get_mut(id.0 as usize).and_then(|a| a.as_mut())
    }
}

impl Areas for VecAreas {
    type Mem = Vec<u8>;
    type Entry<'a> = EntryIn<'a, Vec<u8>>;
    fn area(&mut self, id: AreaId) -> Option<&mut Vec<u8>> {
        self.bytes_mut(id)
    }
    fn entry(&mut self, id: AreaId, off: u64) -> Option<EntryIn<'_, Vec<u8>>> {
        EntryIn::new(self.bytes_mut(id)?, off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry view exists only for an entry that lies whole in its memory, and each of
    /// its accesses stays inside the entry (offsets are the entry's, not the memory's).
    #[test]
    fn an_entry_view_lies_in_its_memory_and_keeps_to_its_entry() {
        let len = hamlyn_wire::META_ENTRY_LEN;
        let mut m = vec![0u8; 3 * len];
        assert!(
            EntryIn::new(&mut m, 2 * len as u64 + 1).is_none(),
            "past the end"
        );
        assert!(EntryIn::new(&mut m, u64::MAX - 4).is_none(), "overflow");
        let mut e = EntryIn::new(&mut m, len as u64 + 4).expect("inside");
        assert_eq!(e.add_u32_at(8, 5).unwrap(), 5);
        assert_eq!(e.load_u32_at(8).unwrap(), 5);
        e.write_at(len as u64 - 2, &[7, 9])
            .expect("the entry's last bytes");
        assert!(
            e.write_at(len as u64 - 1, &[1, 2]).is_err(),
            "one byte past the entry"
        );
        assert!(e.add_u32_at(len as u64, 1).is_err(), "past the entry");
        assert!(e.read_at(u64::MAX, &mut [0u8; 1]).is_err(), "overflow");
        assert_eq!(
            m[len + 12..len + 16],
            5u32.to_le_bytes(),
            "at the entry's offset 8"
        );
        assert_eq!(m[2 * len + 2..2 * len + 4], [7, 9]);
        assert!(m[..len + 12].iter().all(|&b| b == 0), "nothing before");
    }

    #[test]
    fn vec_memory_checks_every_range() {
        let mut m = vec![0u8; 16];
        assert!(m.write(12, &[1, 2, 3, 4]).is_ok());
        assert!(m.write(13, &[1, 2, 3, 4]).is_err());
        assert!(m.write(u64::MAX, &[1]).is_err());
        assert!(m.write(16, &[]).is_ok());
        assert!(m.write(16, &[1]).is_err());
        assert_eq!(m.fetch_add_u32(12, 1).unwrap(), 0x0403_0202);
        assert!(m.fetch_add_u32(13, 1).is_err(), "unaligned");
        assert_eq!(m.fetch_add_u32(0, u32::MAX).unwrap(), u32::MAX);
        assert_eq!(m.fetch_add_u32(0, 1).unwrap(), 0, "wraps");
    }
}
