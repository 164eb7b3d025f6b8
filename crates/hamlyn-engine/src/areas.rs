//! The engine's table of registered areas, and the shared-memory [`Memory`] the core
//! reaches them through.

use std::sync::Arc;

use hamlyn_core::{AreaId, Areas, Memory, OutOfRange};
use hamlyn_shm::region::ShmRegion;
use hamlyn_shm::sync::Ordering;

/// An area's memory as the core sees it.
#[derive(Debug, Clone)]
pub(crate) struct ShmMem(pub Arc<ShmRegion>);

fn oor(offset: u64, len: usize) -> OutOfRange {
    OutOfRange {
        offset,
        len: len as u64,
    }
}

fn at(offset: u64, len: usize) -> Result<usize, OutOfRange> {
    usize::try_from(offset).map_err(|_| oor(offset, len))
}

impl Memory for ShmMem {
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
        // AcqRel: the accumulator is shared with direct senders in other processes; the
        // Release half publishes this packet's deposit to whoever sees the sum reach zero,
        // the Acquire half makes the other packets' deposits visible to us when we do.
        let old = self
            .0
            .fetch_add_u32(at(offset, 4)?, v, Ordering::AcqRel)
            .map_err(|_| oor(offset, 4))?;
        Ok(old.wrapping_add(v))
    }
    fn slice_mut(&mut self, offset: u64, len: usize) -> Result<&mut [u8], OutOfRange> {
        let off = at(offset, len)?;
        // SAFETY: the engine thread is the only code in this process that touches an area
        // it did not create, and it holds no other slice of it while this one lives (the
        // slice is filled and dropped within one packet's delivery). The range is the one
        // the core admitted for this packet. The owning client may write the same bytes
        // from its own process; that is its own message area, and what it then reads is
        // its own business: the engine never reads back through this slice.
        unsafe { self.0.slice_mut(off, len) }.map_err(|_| oor(offset, len))
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
}

/// One registered area.
#[derive(Debug)]
pub(crate) struct AreaEntry {
    /// Its memory.
    pub(crate) mem: ShmMem,
    /// The client that registered it.
    pub(crate) owner: u32,
}

/// Every registered area of this engine, by id.
#[derive(Debug, Default)]
pub(crate) struct AreaTable {
    areas: Vec<Option<AreaEntry>>,
    free: Vec<u32>,
}

impl AreaTable {
    /// Registers a region for `owner`.
    pub(crate) fn register(&mut self, owner: u32, region: ShmRegion) -> AreaId {
        let entry = AreaEntry {
            mem: ShmMem(Arc::new(region)),
            owner,
        };
        match self.free.pop() {
            Some(i) => {
                self.areas[i as usize] = Some(entry);
                AreaId(i)
            }
            None => {
                self.areas.push(Some(entry));
                AreaId((self.areas.len() - 1) as u32)
            }
        }
    }

    /// The area, if registered.
    pub(crate) fn get(&self, id: AreaId) -> Option<&AreaEntry> {
        self.areas.get(id.0 as usize).and_then(Option::as_ref)
    }

    /// The area's region if `owner` registered it.
    pub(crate) fn owned(&self, owner: u32, id: AreaId) -> Option<&Arc<ShmRegion>> {
        self.get(id).filter(|e| e.owner == owner).map(|e| &e.mem.0)
    }

    /// Unregisters one area of `owner`.
    pub(crate) fn unregister(&mut self, owner: u32, id: AreaId) -> bool {
        match self.areas.get_mut(id.0 as usize) {
            Some(slot @ Some(_)) if slot.as_ref().is_some_and(|e| e.owner == owner) => {
                *slot = None;
                self.free.push(id.0);
                true
            }
            _ => false,
        }
    }

    /// Unregisters every area of `owner` (the client is gone).
    pub(crate) fn remove_owner(&mut self, owner: u32) -> usize {
        let mut n = 0;
        for (i, slot) in self.areas.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|e| e.owner == owner) {
                *slot = None;
                self.free.push(i as u32);
                n += 1;
            }
        }
        n
    }

    /// Number of registered areas.
    pub(crate) fn len(&self) -> usize {
        self.areas.iter().filter(|a| a.is_some()).count()
    }
}

impl Areas for AreaTable {
    type Mem = ShmMem;
    fn area(&mut self, id: AreaId) -> Option<&mut ShmMem> {
        self.areas
            .get_mut(id.0 as usize)
            .and_then(Option::as_mut)
            .map(|e| &mut e.mem)
    }
}
