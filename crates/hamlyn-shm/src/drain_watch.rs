//! Whether everything a ring's producer pushed has been drained *and recorded*, known
//! without the lock its drainers hold: the library's send handles answer "did this
//! request fail?" with "no" from it, taking no lock on a small message's path.
//!
//! The library's error ring is drained under a lock into a table of failures; a handle
//! asks the table for its request once the engine's completion word says the request is
//! finished. The engine pushes a refused request's error *before* it moves the word
//! (both Release), so a reader that saw the word move (Acquire) also sees the push. The
//! error is then either still in the ring, or popped by a drainer: recorded in the
//! table, or on its way there. [`DrainWatch::settled`] tells the reader which, from two
//! loads of the ring's indices and one of a count of drains under way:
//!
//! - a drainer announces itself ([`DrainWatch::enter`], an AcqRel increment) before it
//!   pops, records what it popped, then leaves ([`DrainWatch::leave`], a Release
//!   decrement);
//! - the reader loads the consumer index and the producer index (Acquire). If they
//!   differ, an entry waits: not settled. If they are equal and the error was pushed,
//!   some drainer popped it, and the reader's load of the consumer index synchronized
//!   with that pop (Release), which came after the drainer's increment. So the reader's
//!   load of the count (Acquire) sees that increment or a later value: non-zero while the
//!   drainer is inside (not settled), or a decrement that released the drainer's record,
//!   which the reader's next look at the record then sees.
//!
//! What the record is (a position per terminus, in the library) is the caller's; the
//! loom model below checks the protocol with one. A drainer that finds the ring empty
//! need not announce itself ([`DrainWatch::is_empty`]).

use crate::memory::RingMemory;
use crate::spsc::{header, SpscLayout};
use crate::sync::{AtomicU64, Ordering};

/// The look at a ring's indices from outside its consumer, and the count of drains
/// under way (see the module docs).
#[derive(Debug)]
pub struct DrainWatch<M: RingMemory> {
    mem: M,
    prod_off: usize,
    cons_off: usize,
    /// Drainers between [`DrainWatch::enter`] and [`DrainWatch::leave`].
    draining: AtomicU64,
}

impl<M: RingMemory> DrainWatch<M> {
    /// A watch over the ring `layout` describes in `mem` (the consumer's own memory and
    /// layout; a layout that does not fit `mem` reads as never settled).
    pub fn new(mem: M, layout: SpscLayout) -> DrainWatch<M> {
        DrainWatch {
            mem,
            prod_off: layout.offset() + header::PROD,
            cons_off: layout.offset() + header::CONS,
            draining: AtomicU64::new(0),
        }
    }

    /// Whether the ring holds no entry now: its producer index equals its consumer
    /// index. A drainer that finds it so has nothing to pop and need not enter.
    pub fn is_empty(&self) -> bool {
        let (Some(prod), Some(cons)) = (
            self.mem.atomic_u64(self.prod_off),
            self.mem.atomic_u64(self.cons_off),
        ) else {
            return false;
        };
        // Acquire: pairs with the Release store of `cons` in `spsc::Consumer::pop` by a
        // drainer: its `enter` happened before, so `settled`'s load of the count below
        // sees it.
        let c = cons.load(Ordering::Acquire);
        // Acquire: pairs with the Release store of `prod` in `spsc::Producer::try_push`.
        c == prod.load(Ordering::Acquire)
    }

    /// A drainer is about to pop (call with the drainers' lock held, before the pops).
    pub fn enter(&self) {
        // AcqRel: the increment comes before the pops that follow; their Release stores
        // of `cons` carry it to the reader whose Acquire load of `cons` in `is_empty` sees
        // them (the partner), so that `settled`'s load of the count sees it.
        self.draining.fetch_add(1, Ordering::AcqRel);
    }

    /// The drainer recorded everything it popped.
    pub fn leave(&self) {
        // Release: pairs with the Acquire load in `settled`: the drainer's records
        // happen before a reader that reads the count back to zero.
        self.draining.fetch_sub(1, Ordering::Release);
    }

    /// Whether every entry pushed before this call's loads has been popped and
    /// recorded: the ring is empty and no drainer is between `enter` and `leave`. The
    /// caller reads the record after this returns `true` (see the module docs).
    pub fn settled(&self) -> bool {
        // Acquire: pairs with `leave`'s Release decrement (the records before it are
        // visible), and the increment is seen per the module docs.
        self.is_empty() && self.draining.load(Ordering::Acquire) == 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::region::ShmRegion;
    use crate::spsc::{Consumer, Producer};

    #[test]
    fn settled_only_when_empty_and_nobody_drains() {
        let layout = SpscLayout::new(0, 16, 64).expect("layout");
        let mem =
            Arc::new(ShmRegion::create("hamlyn-test-drain-watch", layout.bytes()).expect("memfd"));
        let mut p = Producer::attach(mem.clone(), layout).expect("attach");
        let mut c = Consumer::attach(mem.clone(), layout).expect("attach");
        let w = DrainWatch::new(mem, layout);
        assert!(w.is_empty() && w.settled());
        p.try_push(&[1; 16]).expect("room");
        assert!(!w.is_empty() && !w.settled(), "an entry waits");
        w.enter();
        let mut buf = [0u8; 16];
        assert_eq!(c.pop(&mut buf), Ok(true));
        assert!(w.is_empty());
        assert!(!w.settled(), "popped, not yet recorded");
        w.leave();
        assert!(w.settled());
    }

    #[test]
    fn a_layout_beyond_the_memory_is_never_settled() {
        let layout = SpscLayout::new(4096, 16, 64).expect("layout");
        let mem = ShmRegion::create("hamlyn-test-drain-watch", 64).expect("memfd");
        let w = DrainWatch::new(Arc::new(mem), layout);
        assert!(!w.is_empty() && !w.settled());
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use std::sync::Arc;

    use super::*;
    use crate::memory::LoomMemory;
    use crate::spsc::{Consumer, Producer};

    const ENTRY: usize = 8;

    /// The library's use of the watch: an engine pushes a failure, then moves its
    /// completion word; a drainer pops it and records it, between `enter` and `leave`; a
    /// reader that sees the word moved and finds the watch settled must find the
    /// failure recorded. Fails with `enter` and `leave` removed (the reader then sees an
    /// empty ring and no drainer while the failure is only popped), with the record
    /// written after `leave`, and with `leave`'s Release weakened to Relaxed.
    #[test]
    fn loom_a_settled_watch_never_hides_a_failure() {
        crate::loom_model(|| {
            let layout = SpscLayout::new(0, ENTRY, 2).expect("layout");
            let mem = Arc::new(LoomMemory::new(layout.bytes()));
            let mut p = Producer::attach(mem.clone(), layout).expect("attach");
            let mut c = Consumer::attach(mem.clone(), layout).expect("attach");
            let watch = Arc::new(DrainWatch::new(mem, layout));
            // The completion word and the failures recorded (the library's table).
            let done = Arc::new(AtomicU64::new(0));
            let recorded = Arc::new(AtomicU64::new(0));

            let engine = {
                let done = done.clone();
                loom::thread::spawn(move || {
                    p.try_push(&[7; ENTRY]).expect("room");
                    // Release: as the engine's `Port::finish`.
                    done.store(1, Ordering::Release);
                })
            };
            let drainer = {
                let (watch, recorded) = (watch.clone(), recorded.clone());
                loom::thread::spawn(move || {
                    if watch.is_empty() {
                        return;
                    }
                    watch.enter();
                    let mut buf = [0u8; ENTRY];
                    if c.pop(&mut buf).expect("honest") {
                        recorded.store(1, Ordering::Relaxed);
                    }
                    watch.leave();
                })
            };
            let reader = loom::thread::spawn(move || {
                // Acquire: as the library's `completion::finished`.
                if done.load(Ordering::Acquire) == 1 && watch.settled() {
                    assert_eq!(
                        recorded.load(Ordering::Relaxed),
                        1,
                        "settled, the request finished, and its failure not recorded"
                    );
                }
            });
            engine.join().expect("engine");
            drainer.join().expect("drainer");
            reader.join().expect("reader");
        });
    }
}
