//! What became of a send: the terminus's completion word says whether the engine finished
//! it, the port's error ring says whether it failed (seed 000 §2.3).
//!
//! The engine finishes a terminus's requests in order and advances the terminus's
//! completion word (Release) to "requests finished"; request `pos` is done once the word
//! exceeds `pos`. A refusal is pushed to the error ring *before* the word moves past the
//! request, so once a request is done, draining the ring tells whether it failed. A NACK
//! from a remote engine may arrive later still: a request's status can go from
//! [`Status::Sent`] to [`Status::Failed`], never back.
//!
//! What `Sent` promises for a write to another node (docs/ARCHITECTURE.md, "Delivery
//! over TCP"): the engine handed every packet to the fabric, and the request ends either
//! delivered (the receiving engine placed the bytes) or `Failed` — a refusal
//! (`BadKey`, ...), or `PeerDown` when the session that carried a packet was lost before
//! the receiving node acknowledged it. It is never silently lost. `PeerDown` after `Sent`
//! means "not known to have arrived": the bytes may be there (the acknowledgement may be
//! what was lost), and a sender that must know resends or asks the receiver.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use hamlyn_core::RejectReason;
use hamlyn_shm::drain_watch::DrainWatch;
use hamlyn_shm::port::PortLayout;
use hamlyn_shm::region::ShmRegion;
use hamlyn_shm::spsc;
use hamlyn_shm::sync::{AtomicU64, Ordering};
use hamlyn_wire::request::{Completion, COMPLETION_LEN};

/// Failures remembered per terminus; beyond this the oldest are forgotten (their
/// handles then read [`Status::Sent`]).
pub(crate) const MAX_FAILURES: usize = 1 << 16;

/// The state of one send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// The engine has not finished it: its buffers may still be read.
    Pending,
    /// The engine finished it without error: its buffers are free. For a remote
    /// destination it is on its way: a remote refusal, or the loss of the session that
    /// carried it before the receiver acknowledged it (`PeerDown`), may still turn it into
    /// [`Status::Failed`]; otherwise it arrives.
    Sent,
    /// The engine or the receiving engine refused it, for this reason.
    Failed(RejectReason),
    /// It failed with a status code this library does not know.
    FailedCode(u16),
}

impl Status {
    /// Whether the engine is done with the send (sent or failed).
    pub fn is_done(self) -> bool {
        self != Status::Pending
    }

    /// Whether the send failed.
    pub fn is_failed(self) -> bool {
        matches!(self, Status::Failed(_) | Status::FailedCode(_))
    }

    pub(crate) fn from_code(code: u16) -> Status {
        match RejectReason::from_code(u64::from(code)) {
            Some(r) => Status::Failed(r),
            None => Status::FailedCode(code),
        }
    }
}

/// Terminus `t`'s completion word: requests finished.
pub(crate) fn finished(port: &ShmRegion, layout: &PortLayout, t: u16) -> u64 {
    layout
        .completion_word(t)
        .and_then(|off| port.atomic_u64(off).ok())
        // Acquire: pairs with the engine's Release store of the completion word (engine
        // `Port::finish`): the error pushed for a refused request, and the end of the
        // engine's reads of the send's buffers, happen before we see "done".
        .map_or(0, |w| w.load(Ordering::Acquire))
}

/// The port's error ring and the failures read from it, by terminus and ring position.
pub(crate) struct ErrorTable {
    ring: spsc::Consumer<Arc<ShmRegion>>,
    failures: Vec<BTreeMap<u64, u16>>,
    /// The ring was found corrupt; it is no longer read.
    corrupt: bool,
    /// Entries that named no terminus of the port, or a position not yet reached.
    pub(crate) strays: u64,
}

impl std::fmt::Debug for ErrorTable {
    /// Counts, not the (up to 65,536 per terminus) failures themselves.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ErrorTable")
            .field(
                "failures",
                &self.failures.iter().map(BTreeMap::len).sum::<usize>(),
            )
            .field("corrupt", &self.corrupt)
            .field("strays", &self.strays)
            .finish_non_exhaustive()
    }
}

impl ErrorTable {
    pub(crate) fn new(ring: spsc::Consumer<Arc<ShmRegion>>, termini: u16) -> ErrorTable {
        ErrorTable {
            ring,
            failures: vec![BTreeMap::new(); usize::from(termini)],
            corrupt: false,
            strays: 0,
        }
    }

    /// Reads every waiting error entry. `finished(t)` is terminus `t`'s completion word,
    /// read after the entry (so it is at least the failed request's position): it turns
    /// the entry's 32-bit sequence number back into a full position. `failed(t, pos)` is
    /// told of every failure recorded.
    pub(crate) fn drain(
        &mut self,
        mut finished: impl FnMut(u16) -> u64,
        mut failed: impl FnMut(u16, u64),
    ) {
        let mut buf = [0u8; COMPLETION_LEN];
        while !self.corrupt {
            match self.ring.pop(&mut buf) {
                Ok(true) => {}
                Ok(false) => return,
                Err(_) => {
                    self.corrupt = true;
                    return;
                }
            }
            let Ok(c) = Completion::decode(&buf) else {
                continue;
            };
            if c.status == 0 {
                // A success carrying a value (reads, atomics): nothing failed.
                continue;
            }
            let Some(table) = self.failures.get_mut(usize::from(c.terminus)) else {
                self.strays += 1;
                continue;
            };
            let word = finished(c.terminus);
            // The largest position <= word whose low 32 bits are `seq`.
            let back = u64::from((word as u32).wrapping_sub(c.seq));
            let Some(pos) = word.checked_sub(back) else {
                self.strays += 1;
                continue;
            };
            // The first reason reported for a request is the one that stopped it.
            table.entry(pos).or_insert(c.status);
            failed(c.terminus, pos);
            if table.len() > MAX_FAILURES {
                table.pop_first();
            }
        }
    }

    /// The failure code recorded for terminus `t`'s request at `pos`.
    pub(crate) fn failure(&self, t: u16, pos: u64) -> Option<u16> {
        self.failures.get(usize::from(t))?.get(&pos).copied()
    }
}

/// The port's error ring and the failures read from it (the table, under its lock),
/// and what lets the handle of a request that did not fail read [`Status::Sent`]
/// without that lock (`hamlyn_shm::drain_watch`): a send handle's status is on a small
/// message's path, which takes no lock.
pub(crate) struct Errors {
    table: Mutex<ErrorTable>,
    /// Whether everything the engine pushed was drained and recorded.
    watch: DrainWatch<Arc<ShmRegion>>,
    /// Per terminus: one past the latest ring position recorded as failed (0: none).
    /// Raised under the table's lock, between the watch's `enter` and `leave`.
    failed_below: Box<[AtomicU64]>,
    #[cfg(test)]
    times_locked: AtomicU64,
}

impl std::fmt::Debug for Errors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Errors")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl Errors {
    /// The error ring `layout` describes in the port, for `termini` termini.
    pub(crate) fn attach(
        port: Arc<ShmRegion>,
        layout: spsc::SpscLayout,
        termini: u16,
    ) -> Result<Errors, hamlyn_shm::memory::LayoutError> {
        let ring = spsc::Consumer::attach(port.clone(), layout)?;
        Ok(Errors {
            table: Mutex::new(ErrorTable::new(ring, termini)),
            watch: DrainWatch::new(port, layout),
            failed_below: (0..termini).map(|_| AtomicU64::new(0)).collect(),
            #[cfg(test)]
            times_locked: AtomicU64::new(0),
        })
    }

    /// Reads every waiting error entry into the table. The engine keeps a refused
    /// request in flight while the error ring is full, so every waiting loop calls this:
    /// a client that never asks for a status must still not stall its termini. An empty
    /// ring costs two loads, no lock.
    pub(crate) fn drain(&self, port: &ShmRegion, layout: &PortLayout) {
        if self.watch.is_empty() {
            return;
        }
        let mut table = self.lock();
        self.drain_locked(&mut table, port, layout);
    }

    /// The status of terminus `t`'s request at ring position `pos`.
    pub(crate) fn status(&self, port: &ShmRegion, layout: &PortLayout, t: u16, pos: u64) -> Status {
        if finished(port, layout, t) <= pos {
            return Status::Pending;
        }
        // Finished (the Acquire load above saw the word move, so its error, if any, was
        // pushed before): every entry drained and recorded, and no failure recorded at
        // `pos` or after, is `Sent` without the lock (`hamlyn_shm::drain_watch`).
        if self.watch.settled()
            && self
                .failed_below
                .get(usize::from(t))
                // Relaxed: ordered by the watch (its `leave` released this record, and
                // `settled` acquired it).
                .is_some_and(|w| w.load(Ordering::Relaxed) <= pos)
        {
            return Status::Sent;
        }
        let mut table = self.lock();
        self.drain_locked(&mut table, port, layout);
        match table.failure(t, pos) {
            Some(code) => Status::from_code(code),
            None => Status::Sent,
        }
    }

    /// How many times the table's lock was taken (tests: who does without it).
    #[cfg(test)]
    pub(crate) fn times_locked(&self) -> u64 {
        self.times_locked.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ErrorTable> {
        #[cfg(test)]
        self.times_locked.fetch_add(1, Ordering::Relaxed);
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drains into `table` (its lock held), inside the watch's `enter` and `leave`.
    fn drain_locked(&self, table: &mut ErrorTable, port: &ShmRegion, layout: &PortLayout) {
        self.watch.enter();
        table.drain(
            |t| finished(port, layout, t),
            |t, pos| {
                if let Some(w) = self.failed_below.get(usize::from(t)) {
                    // Relaxed: published by the watch's `leave` (Release) below.
                    w.fetch_max(pos.saturating_add(1), Ordering::Relaxed);
                }
            },
        );
        self.watch.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> (Arc<ShmRegion>, spsc::Producer<Arc<ShmRegion>>, ErrorTable) {
        let layout = spsc::SpscLayout::new(0, COMPLETION_LEN, 64).unwrap();
        let mem = Arc::new(ShmRegion::create("errors", layout.bytes()).unwrap());
        let p = spsc::Producer::attach(mem.clone(), layout).unwrap();
        let c = spsc::Consumer::attach(mem.clone(), layout).unwrap();
        (mem, p, ErrorTable::new(c, 2))
    }

    fn push(p: &mut spsc::Producer<Arc<ShmRegion>>, terminus: u16, seq: u32, status: u16) {
        let c = Completion {
            seq,
            status,
            terminus,
            value: 0,
        };
        p.try_push(&c.encode()).unwrap();
    }

    #[test]
    fn sequence_numbers_are_placed_past_the_32_bit_wrap() {
        let (_mem, mut p, mut t) = table();
        let base = 5u64 << 32;
        // Request base + 3 failed just now (the word has not moved past it yet), and a
        // NACK came back for base - 2, before the wrap of the low 32 bits.
        push(&mut p, 0, 3, RejectReason::BadKey.code().into());
        push(
            &mut p,
            0,
            (base - 2) as u32,
            RejectReason::PeerDown.code().into(),
        );
        push(&mut p, 1, 7, RejectReason::Revoked.code().into());
        push(&mut p, 9, 1, 4); // no such terminus
        push(&mut p, 1, 0, 0); // a success: nothing failed
        t.drain(|tt| if tt == 0 { base + 3 } else { 10 }, |_, _| {});
        assert_eq!(
            t.failure(0, base + 3),
            Some(RejectReason::BadKey.code().into())
        );
        assert_eq!(t.failure(0, 3), None);
        assert_eq!(
            t.failure(0, base - 2),
            Some(RejectReason::PeerDown.code().into())
        );
        assert_eq!(t.failure(1, 7), Some(RejectReason::Revoked.code().into()));
        assert_eq!(t.failure(1, 0), None);
        assert_eq!(t.strays, 1);
        // An entry for a position beyond anything finished this early cannot be placed.
        push(&mut p, 1, 20, 4);
        t.drain(|_| 10, |_, _| {});
        assert_eq!(t.strays, 2);
        // The first reason for a request is kept.
        push(&mut p, 1, 7, RejectReason::BadKey.code().into());
        t.drain(|_| 10, |_, _| {});
        assert_eq!(t.failure(1, 7), Some(RejectReason::Revoked.code().into()));
    }

    proptest::proptest! {
        /// Any position within 2^31 below the completion word read after it is placed
        /// back exactly from its 32-bit sequence number.
        #[test]
        fn positions_are_recovered_from_32_bit_sequences(
            word in 0u64..u64::MAX / 2,
            back in 0u64..1 << 31,
            terminus in 0u16..2,
        ) {
            proptest::prop_assume!(back <= word);
            let pos = word - back;
            let (_mem, mut p, mut t) = table();
            push(&mut p, terminus, pos as u32, 6);
            t.drain(|_| word, |_, _| {});
            proptest::prop_assert_eq!(t.failure(terminus, pos), Some(6));
            proptest::prop_assert_eq!(t.strays, 0);
        }
    }

    #[test]
    fn status_codes_decode() {
        assert_eq!(Status::from_code(4), Status::Failed(RejectReason::BadKey));
        assert_eq!(Status::from_code(500), Status::FailedCode(500));
        assert!(!Status::Pending.is_done() && Status::Sent.is_done());
        assert!(!Status::Sent.is_failed());
    }
}
