//! A single-producer, single-consumer ring of fixed-size entries in shared memory: the
//! shape of a terminus (client → engine) and of the engine's replies.
//!
//! Layout at [`SpscLayout::offset`] (64-byte aligned), see [`header`]:
//!
//! | offset | bytes | field | written by |
//! |---|---|---|---|
//! | 0 | 8 | `prod`: entries ever pushed (wrapping u64) | producer only |
//! | 8 | 56 | padding (rest of the producer's cache line) | — |
//! | 64 | 8 | `cons`: entries ever popped (wrapping u64) | consumer only |
//! | 72 | 56 | padding (rest of the consumer's cache line) | — |
//! | 128 | `capacity * entry_size` | entries; entry `i` lives at `128 + (i % capacity) * entry_size` | producer |
//!
//! Each index lives on its own cache line and has exactly one writer (FLIPC's rule), and
//! each side keeps its own index privately and a cached copy of the other's, so the fast
//! path touches the other side's line only when the cache says full (producer) or empty
//! (consumer). Geometry (`entry_size`, `capacity`) is not stored in the shared memory: both
//! sides get it out of band from a [`SpscLayout`] they trust.
//!
//! The consumer is robust against a hostile producer (the engine consumes client rings):
//! it never trusts `prod` further than `cons + capacity` (beyond that the ring is reported
//! [`PopError::Corrupt`]), copies every entry out before using it, and never loops. A
//! hostile consumer likewise can only make the producer see `Full` or `Corrupt`.

use crate::memory::{check_fits, check_offset_and_capacity, LayoutError, RingMemory, CACHE_LINE};
use crate::sync::{AtomicU64, Ordering};

/// Largest entry, in bytes.
pub const MAX_ENTRY_SIZE: usize = 4096;

/// Byte offsets inside the ring, from [`SpscLayout::offset`].
pub mod header {
    use crate::memory::CACHE_LINE;

    /// Producer index (u64), alone on the first cache line.
    pub const PROD: usize = 0;
    /// Consumer index (u64), alone on the second cache line.
    pub const CONS: usize = CACHE_LINE;
    /// First entry.
    pub const ENTRIES: usize = 2 * CACHE_LINE;
}

/// Where a ring lives and its geometry. Both sides must agree on it; it is validated
/// against the memory when a side attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpscLayout {
    offset: usize,
    entry_size: usize,
    capacity: u32,
}

impl SpscLayout {
    /// A ring at `offset` (a multiple of 64) of `capacity` entries (a power of two in
    /// [`MIN_CAPACITY`](crate::memory::MIN_CAPACITY)..=[`MAX_CAPACITY`](crate::memory::MAX_CAPACITY))
    /// of `entry_size` bytes (a non-zero multiple of 8, at most [`MAX_ENTRY_SIZE`]).
    pub fn new(offset: usize, entry_size: usize, capacity: u32) -> Result<SpscLayout, LayoutError> {
        check_offset_and_capacity(offset, capacity)?;
        if entry_size == 0 || entry_size % 8 != 0 || entry_size > MAX_ENTRY_SIZE {
            return Err(LayoutError::EntrySize { entry_size });
        }
        let l = SpscLayout {
            offset,
            entry_size,
            capacity,
        };
        l.end().ok_or(LayoutError::DoesNotFit {
            need: usize::MAX,
            have: 0,
        })?;
        Ok(l)
    }

    /// Bytes the ring occupies, header included.
    pub fn bytes(&self) -> usize {
        // Cannot overflow: `new` checked `end`.
        header::ENTRIES + self.capacity as usize * self.entry_size
    }

    /// First byte after the ring, or `None` on overflow.
    fn end(&self) -> Option<usize> {
        (self.capacity as usize)
            .checked_mul(self.entry_size)?
            .checked_add(header::ENTRIES)?
            .checked_add(self.offset)
    }

    /// First byte after the ring, rounded up to a cache line: where the next structure
    /// may start.
    pub fn next_offset(&self) -> usize {
        (self.offset + self.bytes()).next_multiple_of(CACHE_LINE)
    }

    /// Offset of the ring in its memory.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Bytes per entry.
    pub fn entry_size(&self) -> usize {
        self.entry_size
    }

    /// Entries the ring holds.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    fn check(&self, mem: &impl RingMemory) -> Result<(), LayoutError> {
        check_fits(mem, self.offset + self.bytes())?;
        if mem.atomic_u64(self.offset + header::PROD).is_none()
            || mem.atomic_u64(self.offset + header::CONS).is_none()
        {
            return Err(LayoutError::Misaligned {
                offset: self.offset,
            });
        }
        Ok(())
    }
}

/// Why an entry was not pushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PushError {
    /// The ring is full: back-pressure, retry once the consumer has caught up. Nothing was
    /// written and nothing was dropped.
    #[error("ring full")]
    Full,
    /// The entry is longer than the ring's entry size.
    #[error("entry of {len} bytes exceeds the ring's {entry_size}-byte entries")]
    TooLong {
        /// The entry's length.
        len: usize,
        /// The ring's entry size.
        entry_size: usize,
    },
    /// The consumer index is impossible (more than `capacity` behind `prod`, or ahead of
    /// it): the consumer scribbled on the ring.
    #[error("ring corrupt: prod {prod}, cons {cons}")]
    Corrupt {
        /// The producer's own index.
        prod: u64,
        /// The consumer index found in shared memory.
        cons: u64,
    },
}

/// Why an entry was not popped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PopError {
    /// The buffer passed to `pop` is shorter than an entry.
    #[error("buffer of {have} bytes is shorter than the {need}-byte entries")]
    BufferTooSmall {
        /// The ring's entry size.
        need: usize,
        /// The buffer's length.
        have: usize,
    },
    /// The producer index is impossible (more than `capacity` ahead of `cons`, or behind
    /// it): the producer scribbled on the ring. Nothing was read.
    #[error("ring corrupt: prod {prod}, cons {cons}")]
    Corrupt {
        /// The producer index found in shared memory.
        prod: u64,
        /// The consumer's own index.
        cons: u64,
    },
}

/// Zeroes used to pad short entries.
const ZEROS: [u8; 64] = [0; 64];

/// The producer side of a ring. Exactly one may exist per ring at a time.
#[derive(Debug)]
pub struct Producer<M: RingMemory> {
    mem: M,
    prod_off: usize,
    cons_off: usize,
    entries_off: usize,
    entry_size: usize,
    cap: u64,
    mask: u64,
    /// Our index; the shared copy is only ever written from this.
    prod: u64,
    /// The last consumer index we read.
    cons_cache: u64,
}

impl<M: RingMemory> Producer<M> {
    /// Attaches the producer side to the ring `layout` describes in `mem`, resuming at the
    /// producer index found there (0 in fresh memory).
    pub fn attach(mem: M, layout: SpscLayout) -> Result<Producer<M>, LayoutError> {
        layout.check(&mem)?;
        let prod_off = layout.offset + header::PROD;
        let cons_off = layout.offset + header::CONS;
        // Relaxed: our own index, written by a previous incarnation of this producer.
        let prod = mem
            .atomic_u64(prod_off)
            .map_or(0, |a| a.load(Ordering::Relaxed));
        // Acquire: pairs with the Release store of `cons` in `Consumer::pop`, as in
        // `refresh_cons`: `try_push` reuses slots below this value without re-reading it.
        let cons_cache = mem
            .atomic_u64(cons_off)
            .map_or(0, |a| a.load(Ordering::Acquire));
        Ok(Producer {
            prod_off,
            cons_off,
            entries_off: layout.offset + header::ENTRIES,
            entry_size: layout.entry_size,
            cap: u64::from(layout.capacity),
            mask: u64::from(layout.capacity) - 1,
            prod,
            cons_cache,
            mem,
        })
    }

    /// Copies `entry` into the next slot and publishes it. An entry shorter than the ring's
    /// entry size is zero-padded. A full ring is `Err(PushError::Full)`: never a drop,
    /// never an overwrite. No allocation, lock or system call.
    ///
    /// Always inlined: a send's push is its caller, and once the compiler stopped
    /// inlining it there (no change here) the mediated send side grew by 27 instructions
    /// (callgrind, `bench/instructions.sh`).
    #[inline(always)]
    pub fn try_push(&mut self, entry: &[u8]) -> Result<(), PushError> {
        if entry.len() > self.entry_size {
            return Err(self.too_long(entry.len()));
        }
        if self.prod.wrapping_sub(self.cons_cache) >= self.cap {
            self.refresh_cons()?;
        }
        let prod_idx = self.index(self.prod_off)?;
        let slot = self.entries_off + (self.prod & self.mask) as usize * self.entry_size;
        let mut ok = self.mem.store_bytes(slot, entry);
        let mut at = entry.len();
        while ok && at < self.entry_size {
            let n = (self.entry_size - at).min(ZEROS.len());
            ok = self.mem.store_bytes(slot + at, &ZEROS[..n]);
            at += n;
        }
        if !ok {
            return Err(self.corrupt(self.cons_cache));
        }
        let next = self.prod.wrapping_add(1);
        // Release: pairs with the Acquire load of `prod` in `Consumer::pop` (and
        // `Consumer::len`): the entry bytes stored above are visible before the index that
        // covers them.
        prod_idx.store(next, Ordering::Release);
        self.prod = next;
        Ok(())
    }

    /// Entries a [`Producer::try_push`] could add now without a pop (the consumer index
    /// is read again). An impossible consumer index is `Corrupt`.
    pub fn room(&mut self) -> Result<u64, PushError> {
        match self.refresh_cons() {
            Ok(()) | Err(PushError::Full) => {}
            Err(e) => return Err(e),
        }
        Ok(self.cap - self.prod.wrapping_sub(self.cons_cache))
    }

    /// Re-reads the consumer index when the cached one says the ring is full.
    #[cold]
    fn refresh_cons(&mut self) -> Result<(), PushError> {
        // Acquire: pairs with the Release store of `cons` in `Consumer::pop`: the consumer
        // finished copying a slot out before it released it, so we may overwrite it.
        let cons = self.index(self.cons_off)?.load(Ordering::Acquire);
        let used = self.prod.wrapping_sub(cons);
        if used > self.cap {
            return Err(self.corrupt(cons));
        }
        self.cons_cache = cons;
        if used == self.cap {
            return Err(PushError::Full);
        }
        Ok(())
    }

    fn index(&self, off: usize) -> Result<&AtomicU64, PushError> {
        match self.mem.atomic_u64(off) {
            Some(a) => Ok(a),
            None => Err(self.corrupt(self.cons_cache)),
        }
    }

    #[cold]
    fn corrupt(&self, cons: u64) -> PushError {
        PushError::Corrupt {
            prod: self.prod,
            cons,
        }
    }

    #[cold]
    fn too_long(&self, len: usize) -> PushError {
        PushError::TooLong {
            len,
            entry_size: self.entry_size,
        }
    }

    /// Entries the ring holds.
    pub fn capacity(&self) -> u64 {
        self.cap
    }

    /// The memory the ring lives in.
    pub fn memory(&self) -> &M {
        &self.mem
    }
}

/// The consumer side of a ring. Exactly one may exist per ring at a time.
#[derive(Debug)]
pub struct Consumer<M: RingMemory> {
    mem: M,
    prod_off: usize,
    cons_off: usize,
    entries_off: usize,
    entry_size: usize,
    cap: u64,
    mask: u64,
    /// Our index; the shared copy is only ever written from this.
    cons: u64,
    /// The last producer index we read and validated (`cons <= prod_cache <= cons + cap`).
    prod_cache: u64,
}

impl<M: RingMemory> Consumer<M> {
    /// Attaches the consumer side to the ring `layout` describes in `mem`, resuming at the
    /// consumer index found there (0 in fresh memory).
    pub fn attach(mem: M, layout: SpscLayout) -> Result<Consumer<M>, LayoutError> {
        layout.check(&mem)?;
        let cons_off = layout.offset + header::CONS;
        // Relaxed: our own index, written by a previous incarnation of this consumer.
        let cons = mem
            .atomic_u64(cons_off)
            .map_or(0, |a| a.load(Ordering::Relaxed));
        Ok(Consumer {
            prod_off: layout.offset + header::PROD,
            cons_off,
            entries_off: layout.offset + header::ENTRIES,
            entry_size: layout.entry_size,
            cap: u64::from(layout.capacity),
            mask: u64::from(layout.capacity) - 1,
            cons,
            // Nothing is known to be published yet; the first pop reads `prod`.
            prod_cache: cons,
            mem,
        })
    }

    /// Copies the oldest entry into the first `entry_size` bytes of `dst` and releases its
    /// slot. `Ok(false)` when the ring is empty. Never blocks, loops, allocates or makes a
    /// system call, whatever the producer wrote.
    #[inline]
    pub fn pop(&mut self, dst: &mut [u8]) -> Result<bool, PopError> {
        let have = dst.len();
        let Some(dst) = dst.get_mut(..self.entry_size) else {
            return Err(self.too_small(have));
        };
        if self.cons == self.prod_cache {
            // Acquire: pairs with the Release store of `prod` in `Producer::try_push`: the
            // bytes of every entry below `prod` are visible to the copy below.
            let prod = self.index(self.prod_off)?.load(Ordering::Acquire);
            let avail = prod.wrapping_sub(self.cons);
            if avail > self.cap {
                return Err(self.corrupt(prod));
            }
            self.prod_cache = prod;
            if avail == 0 {
                return Ok(false);
            }
        }
        let cons_idx = self.index(self.cons_off)?;
        let slot = self.entries_off + (self.cons & self.mask) as usize * self.entry_size;
        // Copied out, never referenced in place: a hostile producer may be rewriting the
        // slot right now, which can only garble the bytes we hand back.
        if !self.mem.load_bytes(slot, dst) {
            return Err(self.corrupt(self.prod_cache));
        }
        let next = self.cons.wrapping_add(1);
        // Release: pairs with the Acquire load of `cons` in `Producer::refresh_cons`: our
        // copy of the slot is complete before the producer may reuse it.
        cons_idx.store(next, Ordering::Release);
        self.cons = next;
        Ok(true)
    }

    /// Entries waiting, read fresh from the producer index.
    pub fn len(&mut self) -> Result<u64, PopError> {
        // Acquire: pairs with the Release store of `prod` in `Producer::try_push`.
        let prod = self.index(self.prod_off)?.load(Ordering::Acquire);
        let avail = prod.wrapping_sub(self.cons);
        if avail > self.cap {
            return Err(self.corrupt(prod));
        }
        self.prod_cache = prod;
        Ok(avail)
    }

    /// Whether no entry is waiting.
    pub fn is_empty(&mut self) -> Result<bool, PopError> {
        Ok(self.len()? == 0)
    }

    /// Whether [`Consumer::pop`] would return an entry now: the cached producer index
    /// when it already says so, else a fresh read (as [`Consumer::len`], whose Acquire
    /// load the next `pop` then relies on). Lets a poller of an empty ring skip
    /// preparing a buffer for `pop`.
    #[inline]
    pub fn has_next(&mut self) -> Result<bool, PopError> {
        if self.cons != self.prod_cache {
            return Ok(true);
        }
        Ok(self.len()? != 0)
    }

    fn index(&self, off: usize) -> Result<&AtomicU64, PopError> {
        match self.mem.atomic_u64(off) {
            Some(a) => Ok(a),
            None => Err(self.corrupt(self.prod_cache)),
        }
    }

    #[cold]
    fn corrupt(&self, prod: u64) -> PopError {
        PopError::Corrupt {
            prod,
            cons: self.cons,
        }
    }

    #[cold]
    fn too_small(&self, have: usize) -> PopError {
        PopError::BufferTooSmall {
            need: self.entry_size,
            have,
        }
    }

    /// Bytes per entry.
    pub fn entry_size(&self) -> usize {
        self.entry_size
    }

    /// Entries the ring holds.
    pub fn capacity(&self) -> u64 {
        self.cap
    }

    /// The memory the ring lives in.
    pub fn memory(&self) -> &M {
        &self.mem
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::*;
    use crate::region::ShmRegion;

    fn ring(cap: u32, entry: usize) -> (ShmRegion, SpscLayout) {
        let layout = SpscLayout::new(0, entry, cap).expect("valid test layout");
        let region = ShmRegion::create("hamlyn-test-spsc", layout.bytes()).expect("memfd");
        (region, layout)
    }

    #[test]
    fn layout_rules() {
        assert!(SpscLayout::new(0, 64, 64).is_ok());
        assert_eq!(
            SpscLayout::new(8, 64, 64),
            Err(LayoutError::Misaligned { offset: 8 })
        );
        assert_eq!(
            SpscLayout::new(0, 64, 96),
            Err(LayoutError::Capacity { capacity: 96 })
        );
        assert_eq!(
            SpscLayout::new(0, 64, 32),
            Err(LayoutError::Capacity { capacity: 32 })
        );
        assert_eq!(
            SpscLayout::new(0, 12, 64),
            Err(LayoutError::EntrySize { entry_size: 12 })
        );
        let l = SpscLayout::new(128, 16, 64).expect("valid");
        assert_eq!((l.bytes(), l.next_offset()), (128 + 1024, 128 + 128 + 1024));
        let small = ShmRegion::create("hamlyn-test-small-ring", 1024).expect("memfd");
        assert!(matches!(
            Producer::attach(&small, l),
            Err(LayoutError::DoesNotFit { .. })
        ));
    }

    #[test]
    fn full_is_an_error_not_an_overwrite() {
        let (mem, layout) = ring(64, 8);
        let mut p = Producer::attach(&mem, layout).expect("attach");
        let mut c = Consumer::attach(&mem, layout).expect("attach");
        for i in 0u64..64 {
            p.try_push(&i.to_le_bytes()).expect("room");
        }
        assert_eq!(p.try_push(&[9; 8]), Err(PushError::Full));
        assert_eq!(p.room(), Ok(0), "full, and room says so");
        assert_eq!(
            p.try_push(&[0; 9]),
            Err(PushError::TooLong {
                len: 9,
                entry_size: 8
            })
        );
        let mut buf = [0u8; 8];
        assert_eq!(
            c.pop(&mut buf[..4]),
            Err(PopError::BufferTooSmall { need: 8, have: 4 })
        );
        for i in 0u64..64 {
            assert_eq!(c.pop(&mut buf), Ok(true));
            assert_eq!(u64::from_le_bytes(buf), i);
        }
        assert_eq!(c.pop(&mut buf), Ok(false));
        assert_eq!(p.room(), Ok(64), "the pops are seen");
        p.try_push(&[1, 2, 3]).expect("room again");
        assert_eq!(c.pop(&mut buf), Ok(true));
        assert_eq!(
            buf,
            [1, 2, 3, 0, 0, 0, 0, 0],
            "short entries are zero-padded"
        );
    }

    #[test]
    fn threads_stream_in_order() {
        let (mem, layout) = ring(64, 16);
        const N: u64 = 200_000;
        let mut p = Producer::attach(&mem, layout).expect("attach");
        let mut c = Consumer::attach(&mem, layout).expect("attach");
        std::thread::scope(|s| {
            s.spawn(move || {
                let mut i = 0u64;
                while i < N {
                    let mut e = [0u8; 16];
                    e[..8].copy_from_slice(&i.to_le_bytes());
                    e[8..].copy_from_slice(&(!i).to_le_bytes());
                    match p.try_push(&e) {
                        Ok(()) => i += 1,
                        Err(PushError::Full) => std::thread::yield_now(),
                        Err(e) => panic!("{e}"),
                    }
                }
            });
            let mut next = 0u64;
            let mut buf = [0u8; 16];
            while next < N {
                if c.pop(&mut buf).expect("honest producer") {
                    let a = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
                    let b = u64::from_le_bytes(buf[8..].try_into().expect("8 bytes"));
                    assert_eq!((a, b), (next, !next), "FIFO, untorn");
                    next += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        });
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(Vec<u8>),
        Pop,
        Len,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => proptest::collection::vec(any::<u8>(), 0..=24).prop_map(Op::Push),
            3 => Just(Op::Pop),
            1 => Just(Op::Len),
        ]
    }

    proptest! {
        /// The ring behaves like a bounded VecDeque of zero-padded entries, across many
        /// wrap-arounds, including after the sides detach and re-attach.
        #[test]
        fn matches_vecdeque_model(
            ops in proptest::collection::vec(op(), 1..600),
            reattach_at in 0usize..600,
        ) {
            let (mem, layout) = ring(64, 16);
            let mut p = Producer::attach(&mem, layout).expect("attach");
            let mut c = Consumer::attach(&mem, layout).expect("attach");
            let mut model: VecDeque<Vec<u8>> = VecDeque::new();
            for (i, op) in ops.into_iter().enumerate() {
                if i == reattach_at {
                    p = Producer::attach(&mem, layout).expect("attach");
                    c = Consumer::attach(&mem, layout).expect("attach");
                }
                match op {
                    Op::Push(bytes) => {
                        let got = p.try_push(&bytes);
                        if bytes.len() > 16 {
                            let want = PushError::TooLong { len: bytes.len(), entry_size: 16 };
                            prop_assert_eq!(got, Err(want));
                        } else if model.len() == 64 {
                            prop_assert_eq!(got, Err(PushError::Full));
                        } else {
                            prop_assert_eq!(got, Ok(()));
                            let mut padded = bytes.clone();
                            padded.resize(16, 0);
                            model.push_back(padded);
                        }
                    }
                    Op::Pop => {
                        let mut buf = [0xAAu8; 20];
                        let got = c.pop(&mut buf);
                        match model.pop_front() {
                            None => prop_assert_eq!(got, Ok(false)),
                            Some(want) => {
                                prop_assert_eq!(got, Ok(true));
                                prop_assert_eq!(&buf[..16], &want[..]);
                                // Only entry_size bytes are written.
                                prop_assert_eq!(&buf[16..], &[0xAA; 4]);
                            }
                        }
                    }
                    Op::Len => prop_assert_eq!(c.len(), Ok(model.len() as u64)),
                }
            }
        }

        /// A hostile producer overwrites the whole ring (indices and entries) with random
        /// bytes between pops: the consumer returns entries (garbage bytes), `Ok(false)`
        /// or `Corrupt`, and never panics, hangs or hands out more than `capacity` entries
        /// per scribble.
        #[test]
        fn hostile_producer_cannot_hurt_consumer(
            scribbles in proptest::collection::vec(
                proptest::collection::vec(any::<u8>(), 128 + 64 * 16),
                1..8,
            ),
            prod_words in proptest::collection::vec(any::<u64>(), 1..8),
        ) {
            let (mem, layout) = ring(64, 16);
            let mut c = Consumer::attach(&mem, layout).expect("attach");
            let mut buf = [0u8; 16];
            for (junk, prod) in scribbles.iter().zip(prod_words.iter().cycle()) {
                mem.write(0, junk).expect("in bounds");
                // Half the time, make `prod` plausible so entries are actually consumed.
                if prod % 2 == 0 {
                    // Relaxed: single-threaded test; the scribble is the point.
                    mem.atomic_u64(header::PROD)
                        .expect("aligned")
                        .store(c.cons.wrapping_add(prod % 65), Ordering::Relaxed);
                }
                let mut popped = 0;
                loop {
                    match c.pop(&mut buf) {
                        Ok(true) => popped += 1,
                        Ok(false) => break,
                        Err(PopError::Corrupt { .. }) => break,
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                    prop_assert!(popped <= 64, "consumer read more than a ring's worth");
                }
            }
        }
    }

    /// A producer thread scribbles random bytes over the whole ring as fast as it can while
    /// the consumer pops: every pop returns promptly with Ok or Corrupt.
    #[test]
    fn concurrent_scribbler_cannot_hang_consumer() {
        let (mem, layout) = ring(64, 16);
        let mut c = Consumer::attach(&mem, layout).expect("attach");
        let stop = crate::sync::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
                let mut junk = vec![0u8; layout.bytes()];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for b in junk.iter_mut() {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        *b = x as u8;
                    }
                    // Sometimes a plausible index, so that entries get read mid-scribble.
                    if x % 3 == 0 {
                        junk[..8].copy_from_slice(&(x % 200).to_le_bytes());
                    }
                    mem.write(0, &junk).expect("in bounds");
                }
            });
            let mut buf = [0u8; 16];
            let (mut ok, mut corrupt) = (0u64, 0u64);
            let t0 = std::time::Instant::now();
            while t0.elapsed() < std::time::Duration::from_millis(300) {
                match c.pop(&mut buf) {
                    Ok(_) => ok += 1,
                    Err(PopError::Corrupt { .. }) => corrupt += 1,
                    Err(e) => panic!("unexpected {e}"),
                }
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            assert!(ok + corrupt > 0);
        });
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use std::sync::Arc;

    use super::*;
    use crate::memory::LoomMemory;

    const ENTRY: usize = 16;

    fn entry(i: u64) -> [u8; ENTRY] {
        let mut e = [0u8; ENTRY];
        e[..8].copy_from_slice(&i.to_le_bytes());
        e[8..].copy_from_slice(&(!i).to_le_bytes());
        e
    }

    fn decode(e: &[u8; ENTRY]) -> (u64, u64) {
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        a.copy_from_slice(&e[..8]);
        b.copy_from_slice(&e[8..]);
        (u64::from_le_bytes(a), !u64::from_le_bytes(b))
    }

    /// Producer pushes 3 entries through a 2-entry ring while the consumer pops them:
    /// FIFO, every entry whole (both halves agree with its index; a torn copy would also be
    /// a race on a loom cell), and a full ring is refused rather than overwritten.
    #[test]
    fn loom_spsc_fifo_untorn_no_overwrite() {
        crate::loom_model(|| {
            let layout = SpscLayout::new(0, ENTRY, 2).expect("layout");
            let mem = Arc::new(LoomMemory::new(layout.bytes()));
            let mut p = Producer::attach(mem.clone(), layout).expect("attach");
            let mut c = Consumer::attach(mem, layout).expect("attach");
            const N: u64 = 3;
            let t = loom::thread::spawn(move || {
                let mut fulls = 0;
                let mut i = 0;
                while i < N {
                    match p.try_push(&entry(i)) {
                        Ok(()) => i += 1,
                        Err(PushError::Full) => {
                            fulls += 1;
                            loom::thread::yield_now();
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                fulls
            });
            let mut next = 0;
            let mut buf = [0u8; ENTRY];
            while next < N {
                if c.pop(&mut buf).expect("honest producer") {
                    assert_eq!(decode(&buf), (next, next), "FIFO and untorn");
                    next += 1;
                } else {
                    loom::thread::yield_now();
                }
            }
            let _ = t.join().expect("producer");
            assert_eq!(c.pop(&mut buf), Ok(false));
        });
    }

    /// With no consumer running, the third push into a 2-entry ring is `Full`, and the
    /// first two entries are still intact when the consumer drains concurrently with more
    /// pushes.
    #[test]
    fn loom_spsc_full_never_overwrites() {
        crate::loom_model(|| {
            let layout = SpscLayout::new(0, ENTRY, 2).expect("layout");
            let mem = Arc::new(LoomMemory::new(layout.bytes()));
            let mut p = Producer::attach(mem.clone(), layout).expect("attach");
            let mut c = Consumer::attach(mem, layout).expect("attach");
            p.try_push(&entry(0)).expect("room");
            p.try_push(&entry(1)).expect("room");
            assert_eq!(p.try_push(&entry(2)), Err(PushError::Full));
            let t = loom::thread::spawn(move || {
                // Races with the pops below: either room was made, or Full.
                p.try_push(&entry(2)).is_ok()
            });
            let mut buf = [0u8; ENTRY];
            assert_eq!(c.pop(&mut buf), Ok(true));
            assert_eq!(decode(&buf), (0, 0));
            assert_eq!(c.pop(&mut buf), Ok(true));
            assert_eq!(decode(&buf), (1, 1));
            let pushed = t.join().expect("producer");
            let got = c.pop(&mut buf).expect("honest");
            assert_eq!(got, pushed);
            if got {
                assert_eq!(decode(&buf), (2, 2));
            }
        });
    }
}
