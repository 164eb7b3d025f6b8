//! The manager's allocator (seed 001 §3.2: "administers pinned memory using a
//! `malloc/free` paradigm"): blocks of a fixed range (bytes of an area, or indices of
//! metadata entries), best fit with immediate coalescing.
//!
//! Free blocks are kept twice: by offset (to coalesce with both neighbours on free) and
//! by (size, offset) (to find the smallest block that fits). Best fit with coalescing
//! keeps fragmentation bounded in practice (Johnstone & Wilson: among the lowest of
//! known policies) and every operation is O(log n) in the number of free blocks. Sizes
//! are rounded up to the granule, which is also every block's alignment. A property test
//! checks it against a model: no overlap, in bounds, aligned, every free byte usable
//! (an allocation fails only if no gap of the rounded size exists), all free coalesces
//! back to one block.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::RatsError;

/// A block handed out by [`Allocator::alloc`]: `len` units from `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Block {
    /// First unit (a multiple of the granule).
    pub offset: u64,
    /// Units (the size asked for, rounded up to the granule).
    pub len: u64,
}

/// Best-fit allocator over `0..capacity`.
#[derive(Clone, Debug)]
pub struct Allocator {
    capacity: u64,
    granule: u64,
    free_by_offset: BTreeMap<u64, u64>,
    free_by_size: BTreeSet<(u64, u64)>,
    used: BTreeMap<u64, u64>,
    free_units: u64,
}

impl Allocator {
    /// An allocator of `capacity` units (rounded down to the granule), all free;
    /// `granule` (a power of two) is the unit of size and alignment.
    pub fn new(capacity: u64, granule: u64) -> Result<Allocator, RatsError> {
        if !granule.is_power_of_two() {
            return Err(RatsError::InvalidArgument("granule must be a power of two"));
        }
        let capacity = capacity & !(granule - 1);
        let mut a = Allocator {
            capacity,
            granule,
            free_by_offset: BTreeMap::new(),
            free_by_size: BTreeSet::new(),
            used: BTreeMap::new(),
            free_units: 0,
        };
        if capacity > 0 {
            a.insert_free(0, capacity);
        }
        Ok(a)
    }

    /// Units managed.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Units not handed out.
    pub fn free_units(&self) -> u64 {
        self.free_units
    }

    /// The largest block an allocation could get now.
    pub fn largest_free(&self) -> u64 {
        self.free_by_size.last().map_or(0, |&(len, _)| len)
    }

    /// Blocks handed out and not freed.
    pub fn blocks_in_use(&self) -> usize {
        self.used.len()
    }

    /// A block of at least `len` units (at least one granule), or
    /// [`RatsError::NoSpace`] if no free block is that large.
    pub fn alloc(&mut self, len: u64) -> Result<Block, RatsError> {
        let need = len
            .max(1)
            .checked_next_multiple_of(self.granule)
            .ok_or(RatsError::NoSpace { need: len })?;
        let &(size, offset) = self
            .free_by_size
            .range((need, 0)..)
            .next()
            .ok_or(RatsError::NoSpace { need })?;
        self.remove_free(offset, size);
        if size > need {
            self.insert_free(offset + need, size - need);
        }
        self.used.insert(offset, need);
        Ok(Block { offset, len: need })
    }

    /// Gives `block` back, coalescing it with free neighbours. A block this allocator
    /// did not hand out (or already took back) is [`RatsError::NotAllocated`], and
    /// nothing changes.
    pub fn free(&mut self, block: Block) -> Result<(), RatsError> {
        match self.used.get(&block.offset) {
            Some(&len) if len == block.len => {}
            _ => return Err(RatsError::NotAllocated(block.offset)),
        }
        self.used.remove(&block.offset);
        let (mut start, mut len) = (block.offset, block.len);
        if let Some((&prev, &plen)) = self.free_by_offset.range(..start).next_back() {
            if prev + plen == start {
                self.remove_free(prev, plen);
                start = prev;
                len += plen;
            }
        }
        if let Some(&nlen) = self.free_by_offset.get(&(start + len)) {
            self.remove_free(start + len, nlen);
            len += nlen;
        }
        self.insert_free(start, len);
        Ok(())
    }

    fn insert_free(&mut self, offset: u64, len: u64) {
        self.free_by_offset.insert(offset, len);
        self.free_by_size.insert((len, offset));
        self.free_units += len;
    }

    fn remove_free(&mut self, offset: u64, len: u64) {
        self.free_by_offset.remove(&offset);
        self.free_by_size.remove(&(len, offset));
        self.free_units -= len;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Alloc(u64),
        Free(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u64..5000).prop_map(Op::Alloc),
            2 => any::<usize>().prop_map(Op::Free),
        ]
    }

    /// The largest gap between the model's blocks (sorted by offset).
    fn largest_gap(model: &[Block], capacity: u64) -> u64 {
        let mut sorted: Vec<Block> = model.to_vec();
        sorted.sort_by_key(|b| b.offset);
        let mut at = 0;
        let mut best = 0;
        for b in &sorted {
            best = best.max(b.offset - at);
            at = b.offset + b.len;
        }
        best.max(capacity - at)
    }

    proptest! {
        #[test]
        fn behaves_like_a_model_of_disjoint_blocks(
            ops in proptest::collection::vec(op(), 1..300),
            granule_log in 0u32..7,
        ) {
            let granule = 1u64 << granule_log;
            let capacity = 64 * 1024;
            let mut a = Allocator::new(capacity, granule).unwrap();
            let mut model: Vec<Block> = Vec::new();
            for op in ops {
                match op {
                    Op::Alloc(len) => {
                        let need = len.max(1).next_multiple_of(granule);
                        let gap = largest_gap(&model, capacity);
                        match a.alloc(len) {
                            Ok(b) => {
                                prop_assert_eq!(b.len, need);
                                prop_assert_eq!(b.offset % granule, 0);
                                prop_assert!(b.offset + b.len <= capacity);
                                for m in &model {
                                    prop_assert!(
                                        b.offset + b.len <= m.offset || m.offset + m.len <= b.offset,
                                        "{:?} overlaps {:?}", b, m
                                    );
                                }
                                model.push(b);
                            }
                            Err(RatsError::NoSpace { .. }) => {
                                prop_assert!(gap < need, "refused {} with a gap of {}", need, gap);
                            }
                            Err(e) => prop_assert!(false, "{e}"),
                        }
                    }
                    Op::Free(i) if !model.is_empty() => {
                        let b = model.swap_remove(i % model.len());
                        a.free(b).unwrap();
                        prop_assert!(a.free(b).is_err(), "a double free is refused");
                    }
                    Op::Free(_) => {}
                }
                let used: u64 = model.iter().map(|b| b.len).sum();
                prop_assert_eq!(a.free_units(), capacity - used);
                prop_assert_eq!(a.largest_free(), largest_gap(&model, capacity));
            }
            for b in model.drain(..) {
                a.free(b).unwrap();
            }
            prop_assert_eq!(a.largest_free(), capacity, "everything coalesced");
        }
    }

    #[test]
    fn foreign_blocks_are_refused() {
        let mut a = Allocator::new(1024, 64).unwrap();
        let b = a.alloc(100).unwrap();
        assert_eq!(
            b,
            Block {
                offset: 0,
                len: 128
            }
        );
        assert!(matches!(
            a.free(Block { offset: 0, len: 64 }),
            Err(RatsError::NotAllocated(0))
        ));
        assert!(a
            .free(Block {
                offset: 512,
                len: 64
            })
            .is_err());
        assert!(matches!(a.alloc(u64::MAX), Err(RatsError::NoSpace { .. })));
        assert!(Allocator::new(10, 3).is_err());
    }
}
