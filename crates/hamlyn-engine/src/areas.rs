//! The engine's table of registered areas.

use std::sync::Arc;

use hamlyn_core::{AreaId, Areas};
use hamlyn_shm::area_mem::AreaMem;
use hamlyn_shm::entry_mem::EntryMem;
use hamlyn_shm::region::ShmRegion;

/// An area's memory as the core sees it: the shared-memory adapter every user of areas
/// shares (`hamlyn_shm::area_mem`).
pub(crate) type ShmMem = AreaMem<Arc<ShmRegion>>;

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
            mem: AreaMem(Arc::new(region)),
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
    type Entry<'a> = EntryMem<'a>;
    fn area(&mut self, id: AreaId) -> Option<&mut ShmMem> {
        self.areas
            .get_mut(id.0 as usize)
            .and_then(Option::as_mut)
            .map(|e| &mut e.mem)
    }
    fn entry(&mut self, id: AreaId, off: u64) -> Option<EntryMem<'_>> {
        EntryMem::new(&self.get(id)?.mem.0, off).ok()
    }
}
