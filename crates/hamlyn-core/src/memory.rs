//! Areas behind a small trait: the engine backs them with shared memory, tests with
//! plain buffers.
//!
//! The core only reaches an area through [`Memory`], after checking every offset against
//! the slot it was granted through; the trait still bounds-checks (an [`OutOfRange`] is a
//! bug or a vanished area, never a crash).

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
    /// The area's memory, if it is registered.
    fn area(&mut self, id: AreaId) -> Option<&mut Self::Mem>;
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
    fn area(&mut self, id: AreaId) -> Option<&mut Vec<u8>> {
        self.bytes_mut(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
