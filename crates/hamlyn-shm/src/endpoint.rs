//! The receiver's side of a receive endpoint (seed 002, FLIPC; layout in
//! `hamlyn_wire::endpoint`): posting buffers, taking the messages that filled them, and
//! reading and resetting the discard counter.
//!
//! The depositor's side (choosing the next posted buffer, discarding, completing) is
//! `hamlyn_core::endpoint`, run by the engine and by direct senders. Both sides only
//! load, store and read-modify-write words in the endpoint's memory; neither waits for
//! the other. The receiver keeps its own copies of the indices it writes (`posted`) and
//! of how far it took (`acquired`), so nothing a depositor writes can make it post past
//! its ring or take a position twice.

use hamlyn_wire::endpoint::{entry_flags, ring_off, EndpointLayout, DISCARDS, POSTED, TAKEN};

use crate::memory::RingMemory;
use crate::sync::Ordering;

/// Why a receiver's endpoint operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// The endpoint does not fit its memory, or its base is not 64-byte aligned.
    #[error("endpoint outside its memory")]
    Layout,
    /// Every ring position holds a posted buffer or an arrival not yet taken.
    #[error("posted-buffer ring full")]
    Full,
    /// No such buffer.
    #[error("no buffer {0}")]
    NoSuchBuffer(u32),
}

/// A message taken from the endpoint: its buffer is the receiver's until posted again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Taken {
    /// The buffer holding it.
    pub buf: u32,
    /// Payload bytes (0 for an aborted claim).
    pub len: u32,
    /// The sending node.
    pub src_node: u32,
    /// The message's word (tag).
    pub word: u64,
    /// The claim was given up (its sender's node went down mid-packet): no message, the
    /// buffer is the receiver's again.
    pub aborted: bool,
}

/// The receiver's handle on one endpoint in memory `M` at byte `base`.
#[derive(Debug)]
pub struct Receiver<M: RingMemory> {
    mem: M,
    base: usize,
    layout: EndpointLayout,
    /// Buffers posted (the receiver's own copy of the word it alone writes).
    posted: u64,
    /// Ring positions taken back.
    acquired: u64,
}

impl<M: RingMemory> Receiver<M> {
    /// The receiver of a fresh (all-zero) endpoint at `base` of `mem`.
    pub fn attach(
        mem: M,
        base: usize,
        layout: EndpointLayout,
    ) -> Result<Receiver<M>, EndpointError> {
        let len = usize::try_from(layout.len()).map_err(|_| EndpointError::Layout)?;
        if base % 64 != 0 || base.checked_add(len).is_none_or(|end| end > mem.len()) {
            return Err(EndpointError::Layout);
        }
        Ok(Receiver {
            mem,
            base,
            layout,
            posted: 0,
            acquired: 0,
        })
    }

    /// The layout.
    pub fn layout(&self) -> &EndpointLayout {
        &self.layout
    }

    /// The memory.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    fn word(&self, off: u64) -> Option<&crate::sync::AtomicU64> {
        self.mem.atomic_u64(self.base + off as usize)
    }

    /// Whether one more buffer can be posted (the ring has a position that is neither
    /// posted nor holding an arrival not yet taken).
    pub fn has_room(&self) -> bool {
        self.posted.wrapping_sub(self.acquired) < self.layout.ring_cap()
    }

    /// Posts buffer `buf` for the next message. The buffer must be the receiver's (never
    /// posted, or taken back): posting a buffer twice lets two messages land in it.
    pub fn post(&mut self, buf: u32) -> Result<(), EndpointError> {
        if buf >= self.layout.buffers() {
            return Err(EndpointError::NoSuchBuffer(buf));
        }
        if !self.has_room() {
            return Err(EndpointError::Full);
        }
        let e = self.base + (self.layout.entry_offset(self.posted) + ring_off::BUF) as usize;
        let word = self.mem.atomic_u64(e).ok_or(EndpointError::Layout)?;
        // Relaxed: published by the Release store of `posted` below.
        word.store(u64::from(buf), Ordering::Relaxed);
        let next = self.posted.wrapping_add(1);
        let posted = self.word(POSTED).ok_or(EndpointError::Layout)?;
        // Release: pairs with the depositor's Acquire load of `posted`
        // (hamlyn_core::endpoint::claim), which then reads the buffer number above.
        posted.store(next, Ordering::Release);
        self.posted = next;
        Ok(())
    }

    /// Buffers posted and not yet filled, as far as the receiver can tell (depositors'
    /// claims in progress count as filled).
    pub fn waiting(&self) -> u64 {
        let taken = self
            .word(TAKEN)
            .map_or(self.posted, |w| w.load(Ordering::Relaxed));
        self.posted.wrapping_sub(taken).min(self.layout.ring_cap())
    }

    /// Whether [`Receiver::take`] has something to return (a finished message, or an
    /// aborted claim to pass over). Wait-free: one Acquire load.
    pub fn ready(&self) -> bool {
        if self.acquired == self.posted {
            return false;
        }
        let e = self.base + (self.layout.entry_offset(self.acquired) + ring_off::DONE) as usize;
        // Acquire: pairs with the depositor's Release store of `done`, as in `take`.
        self.mem
            .atomic_u64(e)
            .is_some_and(|d| d.load(Ordering::Acquire) == self.acquired.wrapping_add(1))
    }

    /// The next message, in ring order, if its depositor finished it.
    pub fn take(&mut self) -> Option<Taken> {
        if self.acquired == self.posted {
            return None;
        }
        let e = self.base + self.layout.entry_offset(self.acquired) as usize;
        let done = self.mem.atomic_u64(e + ring_off::DONE as usize)?;
        // Acquire: pairs with the depositor's Release store of `done`
        // (hamlyn_core::endpoint::complete), after it wrote the entry and the buffer.
        if done.load(Ordering::Acquire) != self.acquired.wrapping_add(1) {
            return None;
        }
        let buf = self
            .mem
            .atomic_u64(e + ring_off::BUF as usize)?
            .load(Ordering::Relaxed);
        let mut f = [0u8; 16];
        if !self.mem.load_bytes(e + ring_off::LEN as usize, &mut f) {
            return None;
        }
        let len = u32::from_le_bytes([f[0], f[1], f[2], f[3]]);
        let mut w = [0u8; 8];
        w.copy_from_slice(&f[8..16]);
        let t = Taken {
            buf: u32::try_from(buf).ok()?,
            len: len & entry_flags::LEN_MASK,
            src_node: u32::from_le_bytes([f[4], f[5], f[6], f[7]]),
            word: u64::from_le_bytes(w),
            aborted: len & entry_flags::ABORTED != 0,
        };
        if t.buf >= self.layout.buffers() {
            // Only the receiver writes the buffer number: a scribble of its own.
            return None;
        }
        self.acquired = self.acquired.wrapping_add(1);
        Some(t)
    }

    /// Byte offset of buffer `buf` in the memory.
    pub fn buffer_offset(&self, buf: u32) -> Option<usize> {
        self.layout
            .buffer_offset(buf)
            .map(|off| self.base + off as usize)
    }

    /// Messages discarded for want of a buffer since the last call, and the counter reset
    /// to 0 in the same step: wait-free, and no discard counted by a depositor between the
    /// read and the reset is lost (FLIPC's read-and-reset, done with one atomic swap
    /// where FLIPC had only loads and stores).
    pub fn take_discards(&self) -> u64 {
        // AcqRel: pairs with the depositors' AcqRel `fetch_add` (count_discard); the swap
        // is one read-modify-write, so an add is either in the value returned or left in
        // the word for the next call.
        self.word(DISCARDS)
            .map_or(0, |w| w.swap(0, Ordering::AcqRel))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::region::ShmRegion;
    use hamlyn_core::endpoint::{claim, complete, count_discard, Arrival};
    use hamlyn_core::Memory;
    use std::sync::Arc;

    #[test]
    fn post_claim_complete_take_round_trip_over_shared_memory() {
        let layout = EndpointLayout::new(64, 2).expect("layout");
        let region = Arc::new(ShmRegion::create("ep", 4096).expect("memfd"));
        let mut rx = Receiver::attach(region.clone(), 64, layout).expect("attach");
        let mut dep = crate::area_mem::AreaMem(region);
        rx.post(1).expect("room");
        rx.post(0).expect("room");
        assert_eq!(rx.post(0), Err(EndpointError::Full), "ring of 2");
        assert_eq!(rx.post(2), Err(EndpointError::NoSuchBuffer(2)));
        assert_eq!(rx.waiting(), 2);
        let c = claim(&mut dep, 64, &layout).expect("posted");
        assert_eq!(c.buf, 1);
        dep.write(c.offset, b"hello").expect("in range");
        let a = Arrival {
            len: 5,
            src_node: 3,
            word: 77,
            aborted: false,
        };
        complete(&mut dep, 64, &layout, &c, &a).expect("complete");
        let t = rx.take().expect("arrived");
        assert_eq!((t.buf, t.len, t.src_node, t.word), (1, 5, 3, 77));
        assert_eq!(rx.take(), None);
        count_discard(&mut dep, 64).expect("count");
        count_discard(&mut dep, 64).expect("count");
        assert_eq!(rx.take_discards(), 2);
        assert_eq!(rx.take_discards(), 0);
        rx.post(1).expect("taken back, room again");
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use std::sync::Arc;

    use super::*;
    use crate::memory::LoomMemory;
    use hamlyn_core::endpoint::{claim, complete, count_discard, Arrival, ClaimError};
    use hamlyn_core::{Memory, OutOfRange};

    /// The core's `Memory` over loom memory, so the models run the depositor's real code
    /// (`hamlyn_core::endpoint`) with the orderings `AreaMem` uses.
    struct Dep(Arc<LoomMemory>);

    fn oor(offset: u64, len: usize) -> OutOfRange {
        OutOfRange {
            offset,
            len: len as u64,
        }
    }

    // The orderings are those of the engine's area memory (`crate::area_mem`), which the
    // model stands in for: each AcqRel/Acquire/Release here pairs with the same operation
    // of the other depositor or of the receiver's side (`Receiver`) on the same word.
    impl Memory for Dep {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
        fn read(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfRange> {
            if self.0.load_bytes(offset as usize, dst) {
                Ok(())
            } else {
                Err(oor(offset, dst.len()))
            }
        }
        fn write(&mut self, offset: u64, src: &[u8]) -> Result<(), OutOfRange> {
            if self.0.store_bytes(offset as usize, src) {
                Ok(())
            } else {
                Err(oor(offset, src.len()))
            }
        }
        fn fetch_add_u32(&mut self, offset: u64, v: u32) -> Result<u32, OutOfRange> {
            let w = self.0.atomic_u32(offset as usize).ok_or(oor(offset, 4))?;
            Ok(w.fetch_add(v, Ordering::AcqRel).wrapping_add(v))
        }
        fn load_u32(&self, offset: u64) -> Result<u32, OutOfRange> {
            let w = self.0.atomic_u32(offset as usize).ok_or(oor(offset, 4))?;
            Ok(w.load(Ordering::Acquire))
        }
        fn compare_swap_u64(&mut self, offset: u64, cur: u64, new: u64) -> Result<u64, OutOfRange> {
            let w = self.0.atomic_u64(offset as usize).ok_or(oor(offset, 8))?;
            Ok(
                match w.compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(v) | Err(v) => v,
                },
            )
        }
        fn fetch_add_u64(&mut self, offset: u64, v: u64) -> Result<u64, OutOfRange> {
            let w = self.0.atomic_u64(offset as usize).ok_or(oor(offset, 8))?;
            Ok(w.fetch_add(v, Ordering::AcqRel))
        }
        fn load_u64(&self, offset: u64) -> Result<u64, OutOfRange> {
            let w = self.0.atomic_u64(offset as usize).ok_or(oor(offset, 8))?;
            Ok(w.load(Ordering::Acquire))
        }
        fn store_u64(&mut self, offset: u64, v: u64) -> Result<(), OutOfRange> {
            let w = self.0.atomic_u64(offset as usize).ok_or(oor(offset, 8))?;
            w.store(v, Ordering::Release);
            Ok(())
        }
    }

    /// Two depositors discard while the receiver reads and resets the counter: every
    /// discard is returned by exactly one read-and-reset, none lost, none counted twice.
    /// (Replacing the swap with a load and a store of 0 fails this model.)
    #[test]
    fn loom_discard_counter_read_and_reset_loses_nothing() {
        crate::loom_model(|| {
            let layout = EndpointLayout::new(64, 1).expect("layout");
            let mem = Arc::new(LoomMemory::new(layout.len() as usize));
            let rx = Receiver::attach(mem.clone(), 0, layout).expect("attach");
            let depositors: Vec<_> = (0..2)
                .map(|_| {
                    let mut d = Dep(mem.clone());
                    loom::thread::spawn(move || {
                        count_discard(&mut d, 0).expect("in range");
                    })
                })
                .collect();
            let mut seen = rx.take_discards();
            loom::thread::yield_now();
            seen += rx.take_discards();
            for d in depositors {
                d.join().expect("depositor");
            }
            seen += rx.take_discards();
            assert_eq!(seen, 2, "every discard read exactly once");
        });
    }

    /// Two depositors (the engine and a direct sender, or two direct senders) race for
    /// the two buffers the receiver posts while it posts them; the receiver takes what
    /// arrives. Every message lands whole in a distinct posted buffer (a shared buffer
    /// would be a race on its loom cells), or is discarded and counted: taken +
    /// discarded = sent.
    #[test]
    fn loom_depositors_claim_distinct_buffers_and_count_the_rest() {
        crate::loom_model(|| {
            let layout = EndpointLayout::new(64, 2).expect("layout");
            let mem = Arc::new(LoomMemory::new(layout.len() as usize));
            let mut rx = Receiver::attach(mem.clone(), 0, layout).expect("attach");
            rx.post(0).expect("room");
            let depositors: Vec<_> = (0..2u64)
                .map(|i| {
                    let mut d = Dep(mem.clone());
                    loom::thread::spawn(move || match claim(&mut d, 0, &layout) {
                        Ok(c) => {
                            d.write(c.offset, &i.to_le_bytes()).expect("in buffer");
                            let a = Arrival {
                                len: 8,
                                src_node: i as u32,
                                word: i,
                                aborted: false,
                            };
                            complete(&mut d, 0, &layout, &c, &a).expect("complete");
                        }
                        Err(ClaimError::NoBuffer) => {
                            count_discard(&mut d, 0).expect("count");
                        }
                        Err(e) => panic!("{e}"),
                    })
                })
                .collect();
            // Lets loom run the depositors before the receiver's first step: without
            // it, it found a weakened `done` load only at iteration 898.
            loom::thread::yield_now();
            rx.post(1).expect("room");
            let mut got = Vec::new();
            let check = |rx: &mut Receiver<Arc<LoomMemory>>, got: &mut Vec<u64>| {
                while let Some(t) = rx.take() {
                    let off = rx.buffer_offset(t.buf).expect("buffer");
                    let mut b = [0u8; 8];
                    assert!(rx.memory().load_bytes(off, &mut b));
                    assert_eq!(
                        u64::from_le_bytes(b),
                        t.word,
                        "the buffer holds its message"
                    );
                    got.push(t.word);
                }
            };
            check(&mut rx, &mut got);
            loom::thread::yield_now();
            for d in depositors {
                d.join().expect("depositor");
            }
            check(&mut rx, &mut got);
            let discarded = rx.take_discards();
            assert_eq!(got.len() as u64 + discarded, 2, "taken + discarded = sent");
            got.sort_unstable();
            got.dedup();
            assert_eq!(got.len() as u64 + discarded, 2, "no message taken twice");
        });
    }
}
