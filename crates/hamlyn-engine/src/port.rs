//! The engine's side of a client's port: the rings it consumes, the queues it posts to,
//! and the state of each terminus.

use std::collections::VecDeque;
use std::sync::Arc;

use hamlyn_core::{Instant, TokenBucket};

use hamlyn_core::{RejectReason, Segmenter};
use hamlyn_shm::memory::RingMemory;
use hamlyn_shm::notifq;
use hamlyn_shm::port::PortLayout;
use hamlyn_shm::region::ShmRegion;
use hamlyn_shm::spsc;
use hamlyn_shm::sync::Ordering;
use hamlyn_shm::wake::EventFd;
use hamlyn_wire::request::{Completion, RequestView, REQUEST_LEN};

/// A request being sent, one packet per turn.
#[derive(Debug)]
pub(crate) struct InFlight {
    /// The request's entry, checked when it was taken (copied out of the ring: the
    /// client cannot change it now); read through [`InFlight::req`]. A request that
    /// failed before its first packet has only its sequence number here.
    pub(crate) entry: [u8; REQUEST_LEN],
    /// Its remaining packets (none for a request that failed before its first).
    pub(crate) seg: Option<Segmenter>,
    /// A packet the fabric could not take yet (back-pressure): sent before the next.
    pub(crate) pending: Option<hamlyn_core::Segment>,
    /// Set when a packet was refused: the rest are not sent.
    pub(crate) failed: Option<RejectReason>,
}

impl InFlight {
    /// The request, read where its entry lies.
    #[inline]
    pub(crate) fn req(&self) -> RequestView<'_> {
        RequestView::unchecked(&self.entry)
    }
}

/// One terminus as the engine sees it.
#[derive(Debug)]
pub(crate) struct TerminusState {
    /// The ring, once the client opened the terminus.
    pub(crate) ring: Option<spsc::Consumer<Arc<ShmRegion>>>,
    /// The request being sent.
    pub(crate) current: Option<InFlight>,
    /// Requests finished (mirrors the completion word).
    pub(crate) finished: u64,
    /// Offset of the completion word in the port.
    pub(crate) completion_off: usize,
    /// Offset of the completion word's wake word (clients asleep on the word).
    pub(crate) wake_off: usize,
    /// The client corrupted the ring; the terminus is no longer served.
    pub(crate) broken: bool,
    /// Its token buckets, once the client set a rate (`SetRate`).
    pub(crate) rate: Option<TokenBucket>,
    /// Its next request waits for tokens until then (not work until then: the engine may
    /// sleep, at most until the earliest such instant).
    pub(crate) throttled_until: Option<Instant>,
    /// Its priority level in the scheduler (`sched::level_of`), once open.
    pub(crate) level: usize,
    /// It is in its level's ready queue (`sched`): announced by the client's hint, or
    /// it had more work after its last visit.
    pub(crate) queued: bool,
}

/// A client's port, engine side.
#[derive(Debug)]
pub(crate) struct Port {
    /// The shared memory: rings, completion words, doorbell.
    pub(crate) region: Arc<ShmRegion>,
    /// The queue file: the notification queues (its descriptor goes to direct senders).
    pub(crate) queue_region: Arc<ShmRegion>,
    /// Where everything is.
    pub(crate) layout: PortLayout,
    /// Termini by index.
    pub(crate) termini: Vec<TerminusState>,
    /// The error-completion ring (engine produces).
    pub(crate) errors: spsc::Producer<Arc<ShmRegion>>,
    /// Notification queues by index (engine produces).
    pub(crate) queues: Vec<notifq::Producer<Arc<ShmRegion>>>,
    /// The port's event descriptor, the end the engine (and direct senders) poke.
    pub(crate) eventfd: EventFd,
    /// Error completions that found the error ring full, oldest first (`clients.rs`).
    pub(crate) late: VecDeque<Completion>,
    /// Per queue: notifications lost to a full queue and not yet reported to its owner
    /// by an `Overflow` notification (`clients.rs`).
    pub(crate) lost: Vec<u64>,
}

impl TerminusState {
    /// Whether serving the terminus can make progress now: a request in flight that is
    /// not only waiting for room for its error completion, or requests in an intact
    /// ring. Used to decide whether the engine may sleep; a terminus held by a full error
    /// ring (`held`: the port's late errors are past the bound) has none, so a client
    /// that never reads its errors cannot keep the engine awake.
    pub(crate) fn has_work(&mut self, held: bool) -> bool {
        if held {
            return false;
        }
        if let Some(cur) = &self.current {
            // A failed request still here waits for error room only.
            return cur.failed.is_none();
        }
        if self.throttled_until.is_some() {
            return false;
        }
        !self.broken
            && self
                .ring
                .as_mut()
                .is_some_and(|r| !matches!(r.is_empty(), Ok(true)))
    }
}

impl TerminusState {
    /// Whether it is to stay in its ready queue after a visit: a request in flight, or
    /// more requests in its (intact) ring — the cached producer index, or one load.
    #[inline]
    pub(crate) fn has_more(&mut self) -> bool {
        if self.current.is_some() {
            return true;
        }
        !self.broken
            && self
                .ring
                .as_mut()
                .is_some_and(|r| matches!(r.has_next(), Ok(true)))
    }
}

impl Port {
    /// Marks the open termini that `bits` (ready word `word`, taken by
    /// `HintPorts::take`) names and that are not queued yet as queued, calling `ready`
    /// with each one's index and level. Bits past the port's termini are ignored (the
    /// words are the client's memory).
    pub(crate) fn mark_hinted(
        &mut self,
        word: usize,
        mut bits: u64,
        mut ready: impl FnMut(u16, usize),
    ) {
        while bits != 0 {
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let t = word * 64 + b;
            if let Some(term) = self.termini.get_mut(t) {
                if !term.queued && term.ring.is_some() {
                    term.queued = true;
                    ready(t as u16, term.level);
                }
            }
        }
    }

    /// Publishes that terminus `t` finished one more request; `wake_now`: then wakes a
    /// client asleep on the count (`SendHandle::wait`, `Terminus::wait_idle`) — unless
    /// the caller owes that wake-up to the end of its visit (`crate::wake_batch`), which
    /// calls [`Port::wake_finished_after_fence`].
    pub(crate) fn finish(&mut self, t: usize, wake_now: bool) {
        let Some(term) = self.termini.get_mut(t) else {
            return;
        };
        term.finished += 1;
        if let Some(word) = self.region.atomic_u64(term.completion_off) {
            // Release: pairs with the client's Acquire load of the completion word in
            // `SendHandle::status`; it orders the error completion pushed before it (and
            // the end of our reads of the send buffer) before the client sees "done".
            word.store(term.finished, Ordering::Release);
        }
        if wake_now {
            hamlyn_shm::wake::publish_fence();
            self.wake_finished_after_fence(t);
        }
    }

    /// Wakes a client asleep on terminus `t`'s count, for a caller that issued the
    /// fence F2 after the count's store ([`Port::finish`] without `wake_now`).
    pub(crate) fn wake_finished_after_fence(&self, t: usize) {
        if let Some(wake) = self
            .termini
            .get(t)
            .and_then(|term| self.region.atomic_u32(term.wake_off))
        {
            hamlyn_shm::wake::wake_after_fence(wake, None);
        }
    }
}
