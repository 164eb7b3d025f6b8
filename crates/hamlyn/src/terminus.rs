//! Termini: private send work queues (seed 000 §2.3), and the handles of what was sent.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hamlyn_shm::port::header;
use hamlyn_shm::region::ShmRegion;
use hamlyn_shm::spsc::{self, PushError};
use hamlyn_shm::sync::Ordering;
use hamlyn_shm::wake::{self, AdaptiveSpin};
use hamlyn_wire::request::REQUEST_LEN;
use hamlyn_wire::{Ticket, TicketFlags};

use crate::area::{Area, AreaInner};
use crate::completion::{self, Status};
use crate::error::{Error, SendError};
use crate::node::Shared;
use crate::request::{build_into, build_rma, Data, MetaIndex, Rma, SendOptions};

/// A gather span a pending send is reading; the area stays registered until it is done.
struct PendingSpan {
    pos: u64,
    area: Arc<AreaInner>,
    offset: u64,
    len: u64,
}

/// An unfinished message of this terminus that may be multi-packet, and the metadata
/// entry it counts in: [`crate::MetaIndex::Auto`] gives that entry to no other message
/// until it is finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct EntryInUse {
    pos: u64,
    node: u32,
    slot: u32,
    /// The absolute entry index (the ticket's first entry plus the relative one).
    entry: u32,
}

/// Entries of a ticket [`crate::MetaIndex::Auto`] looks at, at most.
const AUTO_ENTRIES: u32 = 64;

/// A remote read for [`Terminus::read`]: every offset and length is named, so none can
/// be swapped unnoticed.
///
/// ```no_run
/// # fn f(t: &mut hamlyn::Terminus, target: &hamlyn::Ticket, inbox: &hamlyn::Ticket)
/// # -> Result<(), hamlyn::Error> {
/// let handle = t.read(&hamlyn::ReadArgs {
///     source: target,
///     offset: 4096,
///     len: 1024,
///     reply: inbox,
///     reply_offset: 0,
/// })?;
/// # let _ = handle; Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadArgs<'a> {
    /// The ticket read through: it must grant reads.
    pub source: &'a Ticket,
    /// Where the bytes start, from the start of `source`'s range.
    pub offset: u64,
    /// Bytes to read.
    pub len: u64,
    /// Where the bytes land: a ticket to a slot of the reader's node, granting writes.
    pub reply: &'a Ticket,
    /// Where in `reply`'s range the bytes land.
    pub reply_offset: u64,
}

/// A compare-and-swap for [`Terminus::compare_swap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompareSwapArgs<'a> {
    /// The ticket to the word's slot: it must grant atomics.
    pub target: &'a Ticket,
    /// The 8-byte word's offset from the start of `target`'s range.
    pub offset: u64,
    /// The value the word must hold for the swap to happen.
    pub expected: u64,
    /// The value stored if it does.
    pub new: u64,
    /// Where the old value lands (8 bytes): a ticket to a slot of the caller's node,
    /// granting writes.
    pub reply: &'a Ticket,
    /// Where in `reply`'s range the old value lands.
    pub reply_offset: u64,
}

/// A fetch-and-add for [`Terminus::fetch_add`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchAddArgs<'a> {
    /// The ticket to the word's slot: it must grant atomics.
    pub target: &'a Ticket,
    /// The 8-byte word's offset from the start of `target`'s range.
    pub offset: u64,
    /// What is added (wrapping).
    pub addend: u64,
    /// Where the old value lands (8 bytes): a ticket to a slot of the caller's node,
    /// granting writes.
    pub reply: &'a Ticket,
    /// Where in `reply`'s range the old value lands.
    pub reply_offset: u64,
}

/// Names one request of this client: the terminus it was queued on and its sequence
/// number there. [`SendHandle::request`] gives a request's; a
/// [`Notification::request`](crate::Notification::request) names the read or atomic
/// it answers, so answers that arrive in any order can be matched to their requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestRef {
    /// The terminus's index ([`Terminus::index`]).
    pub terminus: u16,
    /// The request's position in the terminus ([`SendHandle::position`]), modulo 2^32.
    pub seq: u32,
}

/// A private send work queue: the sending half of a port.
///
/// Requests are taken in order; each [`Terminus::send`] returns a [`SendHandle`]. The
/// engine interleaves the packets of all termini with work (round robin within a
/// priority). A single-owner handle: one thread sends on it at a time (`&mut self`); use
/// one terminus per sending thread.
#[must_use = "dropping a Terminus gives its index back to the node (after waiting, bounded, \
              for its gather sends)"]
pub struct Terminus {
    shared: Arc<Shared>,
    index: u16,
    ring: spsc::Producer<Arc<ShmRegion>>,
    /// Ring position of the next request.
    next: u64,
    /// Gather spans of unfinished sends, in position order.
    pending: VecDeque<PendingSpan>,
    /// Entries given by [`crate::MetaIndex::Auto`] to unfinished messages that may be
    /// multi-packet, in position order.
    entries_in_use: VecDeque<EntryInUse>,
    /// Where [`crate::MetaIndex::Auto`]'s next multi-packet message starts looking.
    auto_next: u32,
    /// The offset of the port's ready word with this terminus's bit, and the bit
    /// ([`hamlyn_shm::ready`]).
    ready: (usize, u64),
    /// Refusals for a full ring in a row (at ring position `full_at`, no push in
    /// between), for [`FULL_GONE_EVERY`].
    full_tries: u32,
    /// The ring position the refusals of `full_tries` were at.
    full_at: u64,
    /// How long [`Terminus::wait_room`] spins before it sleeps, when it cannot drive the
    /// engine: adapted to how soon room comes (as a notification queue's wait is).
    room_spin: AdaptiveSpin,
}

/// A send refused for a full ring asks whether the engine is gone (a system call) on
/// every this-many-th refusal in a row at one ring position, not on each: a caller that
/// retries in a loop would otherwise pay a `poll` per try (three per message in an
/// 8-byte stream over TCP, 2026-11-25).
const FULL_GONE_EVERY: u32 = 64;

impl std::fmt::Debug for Terminus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminus")
            .field("node", &self.shared.node)
            .field("index", &self.index)
            .field("next", &self.next)
            .field("pending_spans", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl Terminus {
    pub(crate) fn new(shared: Arc<Shared>, index: u16) -> Result<Terminus, Error> {
        let layout = *shared
            .layout
            .termini
            .get(usize::from(index))
            .ok_or(Error::NoTerminus(shared.layout.geometry.termini))?;
        let ring = spsc::Producer::attach(shared.port.clone(), layout)?;
        let ready = shared
            .layout
            .ready_word(index)
            .ok_or(Error::NoTerminus(shared.layout.geometry.termini))?;
        // Relaxed: our own producer index, left by an earlier handle of this terminus.
        let next = shared
            .port
            .atomic_u64(layout.offset() + spsc::header::PROD)?
            .load(Ordering::Relaxed);
        let room_spin = crate::queue::spin_policy(shared.options.spin);
        Ok(Terminus {
            shared,
            index,
            ring,
            next,
            pending: VecDeque::new(),
            entries_in_use: VecDeque::new(),
            auto_next: 0,
            ready,
            full_tries: 0,
            full_at: next,
            room_spin,
        })
    }

    /// The terminus's index in the port.
    pub fn index(&self) -> u16 {
        self.index
    }

    /// Queues one message to the slot `ticket` names and wakes the engine if it sleeps.
    ///
    /// Every check the engine would make from the ticket alone is made first (range,
    /// metadata entry, packet budget, fast-mode shape), and a refusal is a typed
    /// [`SendError`] with nothing queued. A full work queue is [`SendError::Full`]:
    /// back-pressure, never a drop, never a block. No allocation, lock or system call
    /// unless the engine sleeps (one `write` to its doorbell).
    pub fn send(
        &mut self,
        ticket: &Ticket,
        opts: &SendOptions<'_>,
        data: Data<'_>,
    ) -> Result<SendHandle, SendError> {
        let (opts, in_use) = self.choose_entry(ticket, opts, &data)?;
        let mut entry = [0u8; REQUEST_LEN];
        let seq = self.next as u32;
        build_into(self.shared.instance, ticket, &opts, &data, seq, &mut entry)?;
        let spans = match data {
            Data::Gather(spans) => spans,
            Data::Inline(_) => &[],
        };
        let handle = self.push(&entry, spans)?;
        if let Some(mut e) = in_use {
            e.pos = handle.pos;
            self.entries_in_use.push_back(e);
        }
        Ok(handle)
    }

    /// Resolves [`crate::MetaIndex::Auto`] on a counting (not fast) ticket: never an
    /// entry an unfinished message of this terminus that may be multi-packet (longer
    /// than [`crate::BUDGET_PACKET_BYTES`]) counts in, since the packets of two messages
    /// on one entry could complete each other early. A single-packet message takes the
    /// first free entry; a longer one takes the next free one round robin, so messages
    /// that follow each other use different entries as long as the ticket has them.
    /// The entry a long message took is returned, to remember until it finishes.
    fn choose_entry<'a>(
        &mut self,
        ticket: &Ticket,
        opts: &SendOptions<'a>,
        data: &Data<'_>,
    ) -> Result<(SendOptions<'a>, Option<EntryInUse>), SendError> {
        if opts.meta_index != MetaIndex::Auto
            || ticket.flags.contains(TicketFlags::FAST)
            || ticket.meta_count == 0
        {
            return Ok((*opts, None));
        }
        let len = match *data {
            Data::Inline(b) => b.len() as u64,
            Data::Gather(spans) => spans.iter().fold(0u64, |a, s| a.saturating_add(s.len)),
        };
        let long = len > crate::BUDGET_PACKET_BYTES;
        if !long && self.entries_in_use.is_empty() {
            // The fast path: nothing in flight that could share entry 0.
            return Ok((opts.entry(0), None));
        }
        let done = self.finished();
        while self.entries_in_use.front().is_some_and(|e| e.pos < done) {
            self.entries_in_use.pop_front();
        }
        let count = ticket.meta_count.min(AUTO_ENTRIES);
        let start = if long { self.auto_next % count } else { 0 };
        let busy = |rel: u32| {
            let abs = ticket.meta_first.wrapping_add(rel);
            self.entries_in_use
                .iter()
                .any(|e| e.node == ticket.node.0 && e.slot == ticket.slot.0 && e.entry == abs)
        };
        let rel = (0..count)
            .map(|i| (start + i) % count)
            .find(|&rel| !busy(rel))
            .ok_or(SendError::EntriesBusy)?;
        if !long {
            return Ok((opts.entry(rel), None));
        }
        self.auto_next = rel.wrapping_add(1);
        let in_use = EntryInUse {
            pos: 0,
            node: ticket.node.0,
            slot: ticket.slot.0,
            entry: ticket.meta_first.wrapping_add(rel),
        };
        Ok((opts.entry(rel), Some(in_use)))
    }

    /// A remote read (docs/ARCHITECTURE.md, "One-sided operations"):
    /// `args.len` bytes at `args.offset` of `args.source`'s range on its node land in
    /// `args.reply`'s slot at `args.reply_offset`. The target engine checks the key and
    /// the slot's read permission; the bytes land with a
    /// [`NotificationKind::ReadDone`](crate::NotificationKind::ReadDone) on the reply
    /// slot's queue, whose [`Notification::request`](crate::Notification::request) is
    /// the returned handle's [`SendHandle::request`]. The handle ends `Sent` when the
    /// request left, or `Failed` with the reason.
    pub fn read(&mut self, args: &ReadArgs<'_>) -> Result<SendHandle, SendError> {
        let req = build_rma(
            args.source,
            args.offset,
            Rma::Read { len: args.len },
            args.reply,
            args.reply_offset,
            self.next as u32,
        )?;
        self.push_request(&req)
    }

    /// Compare-and-swap on the 8-byte word at `args.offset` of `args.target`'s range:
    /// if it equals `args.expected`, it becomes `args.new`. Executed by the target
    /// engine atomically with respect to every other atomic on that word (local ones
    /// included). The old value arrives as the word of an
    /// [`NotificationKind::AtomicDone`](crate::NotificationKind::AtomicDone) naming this
    /// request ([`Notification::request`](crate::Notification::request)), and as 8 bytes
    /// at `args.reply_offset` of the reply slot.
    pub fn compare_swap(&mut self, args: &CompareSwapArgs<'_>) -> Result<SendHandle, SendError> {
        let op = Rma::Atomic {
            op: hamlyn_wire::rma::AtomicOp::CompareSwap,
            compare: args.expected,
            operand: args.new,
        };
        let req = build_rma(
            args.target,
            args.offset,
            op,
            args.reply,
            args.reply_offset,
            self.next as u32,
        )?;
        self.push_request(&req)
    }

    /// Fetch-and-add (wrapping) of `args.addend` on the 8-byte word at `args.offset` of
    /// `args.target`'s range; the old value arrives as for [`Terminus::compare_swap`].
    pub fn fetch_add(&mut self, args: &FetchAddArgs<'_>) -> Result<SendHandle, SendError> {
        let op = Rma::Atomic {
            op: hamlyn_wire::rma::AtomicOp::FetchAdd,
            compare: 0,
            operand: args.addend,
        };
        let req = build_rma(
            args.target,
            args.offset,
            op,
            args.reply,
            args.reply_offset,
            self.next as u32,
        )?;
        self.push_request(&req)
    }

    /// Queues a built request (the RMA operations'): encoded, then [`Terminus::push`].
    fn push_request(
        &mut self,
        req: &hamlyn_wire::request::SendRequest,
    ) -> Result<SendHandle, SendError> {
        let mut entry = [0u8; REQUEST_LEN];
        req.encode(&mut entry);
        self.push(&entry, &[])
    }

    /// Queues an encoded entry; `spans` are its gather spans (kept until it completes).
    fn push(
        &mut self,
        entry: &[u8; REQUEST_LEN],
        spans: &[crate::Span<'_>],
    ) -> Result<SendHandle, SendError> {
        if self.shared.known_gone() {
            return Err(SendError::EngineGone);
        }
        match self.ring.try_push(entry) {
            Ok(()) => {}
            Err(PushError::Full) => self.push_when_full(entry)?,
            Err(_) => return Err(SendError::Corrupt),
        }
        if let Ok(word) = self.shared.port.atomic_u32(header::DOORBELL) {
            let ready = self.shared.port.atomic_u64(self.ready.0).ok();
            self.shared
                .after_push(word, ready.map(|w| (w, self.ready.1)));
        }
        let pos = self.next;
        self.next += 1;
        if !spans.is_empty() {
            self.retire();
            for s in spans.iter().filter(|s| s.len > 0) {
                self.pending.push_back(PendingSpan {
                    pos,
                    area: s.area.inner.clone(),
                    offset: s.offset,
                    len: s.len,
                });
            }
        }
        Ok(SendHandle {
            shared: Some(self.shared.clone()),
            terminus: self.index,
            pos,
        })
    }

    /// The ring was full: perhaps only because the engine holds a refused request until
    /// the error ring has room. Drain it and try once more.
    #[cold]
    fn push_when_full(&mut self, entry: &[u8; REQUEST_LEN]) -> Result<(), SendError> {
        self.drain_errors();
        match self.ring.try_push(entry) {
            Ok(()) => Ok(()),
            Err(PushError::Full) => {
                // Full for good if nobody is there to take from it: asked on the
                // FULL_GONE_EVERY-th refusal in a row at this position (a push that
                // gets in starts a new count), so a dead engine is reported to a
                // caller that retries, without a system call per retry.
                if self.full_at != self.next {
                    self.full_at = self.next;
                    self.full_tries = 0;
                }
                self.full_tries = self.full_tries.wrapping_add(1);
                if self.full_tries % FULL_GONE_EVERY == 0 && self.shared.engine_gone() {
                    return Err(SendError::EngineGone);
                }
                Err(SendError::Full)
            }
            Err(_) => Err(SendError::Corrupt),
        }
    }

    /// Waits until the work queue has room for one more request (a [`Terminus::send`]
    /// would not be [`SendError::Full`]) or `timeout` passes; returns whether it has.
    /// What a sender that got `Full` calls before it tries again, instead of a loop of
    /// retries: it keeps the queue as full as the engine takes it (unlike
    /// [`Terminus::wait_idle`], which lets it run dry).
    ///
    /// If this process hosts the engine, the waiting thread runs the engine's turns
    /// (progress by the waiting thread) until half the queue is free, so that a
    /// streaming sender hands the engine over once per half a queue of requests, not
    /// per request. Otherwise it polls the ring, spinning first, then sleeps on the
    /// completion word's futex until the engine finishes a request. The spin adapts as
    /// a notification queue's wait does ([`crate::NodeOptions::spin`] polls, growing up
    /// to [`crate::SPIN_REACH`] while room comes that soon after the waits start;
    /// [`crate::ADAPTIVE_SPIN_ENV`] `=0` keeps it fixed): a sender that streams to an
    /// engine busy on another core spins through the engine's pauses instead of paying
    /// a wake-up for each (the mediated 8 B message rate between two processes, 8.4 -> 9.0
    /// M/s in ten alternated runs, docs/PERFORMANCE.md).
    ///
    /// `false` also when the engine is gone ([`crate::Node::engine_gone`]).
    pub fn wait_room(&mut self, timeout: Option<Duration>) -> bool {
        let shared = &self.shared;
        let half = (self.ring.capacity() / 2).max(1);
        let ring = &mut self.ring;
        let room_spin = &mut self.room_spin;
        let t = self.index;
        let mut room = || {
            shared.errors.drain(&shared.port, &shared.layout);
            // A corrupt ring counts as room: the next push reports it.
            ring.room().unwrap_or(u64::MAX)
        };
        if room() > 0 {
            return true;
        }
        let spin = match shared.drive_until(shared.options.spin, timeout, false, || {
            (room() >= half).then_some(())
        }) {
            Ok(()) => return true,
            Err(spin) => spin,
        };
        // The first slice spins with the terminus's adaptive budget (unless a drive
        // used the spin up), later ones only sleep.
        let got = shared.wait_sliced(spin, timeout, |spin, slice| {
            let spin = match spin {
                0 => Spin::Polls(0),
                _ => Spin::Adaptive(&mut *room_spin),
            };
            Ok(wait_for_completion(shared, t, spin, slice, || room() > 0)?.then_some(()))
        });
        matches!(got, Ok(Some(())))
    }

    fn drain_errors(&self) {
        self.shared
            .errors
            .drain(&self.shared.port, &self.shared.layout);
    }

    /// Requests of this terminus the engine has finished (its completion word).
    pub fn finished(&self) -> u64 {
        completion::finished(&self.shared.port, &self.shared.layout, self.index)
    }

    /// Whether the engine is gone ([`crate::Node::engine_gone`]): what a `false` from
    /// [`Terminus::wait_room`] or [`Terminus::wait_idle`] may mean.
    pub fn engine_gone(&self) -> bool {
        self.shared.engine_gone()
    }

    /// Requests queued but not finished yet.
    pub fn in_flight(&self) -> u64 {
        self.next.saturating_sub(self.finished())
    }

    /// Forgets the spans of finished sends.
    fn retire(&mut self) {
        let done = self.finished();
        while self.pending.front().is_some_and(|p| p.pos < done) {
            self.pending.pop_front();
        }
    }

    /// Whether bytes `offset..offset + len` of `area` may be rewritten: no unfinished
    /// gather send of this terminus reads them.
    pub fn can_reuse(&mut self, area: &Area, offset: u64, len: u64) -> bool {
        self.retire();
        if len == 0 {
            return true;
        }
        let end = offset.saturating_add(len);
        !self.pending.iter().any(|p| {
            Arc::ptr_eq(&p.area, &area.inner) && p.offset < end && offset < p.offset + p.len
        })
    }

    /// Waits until every queued request is finished or `timeout` passes; returns whether
    /// the terminus is idle. Polls the completion word, spinning first, then sleeps on
    /// the word's futex until the engine moves it (no core burnt, no nap to oversleep).
    ///
    /// `false` also when the engine is gone ([`crate::Node::engine_gone`]).
    pub fn wait_idle(&mut self, timeout: Option<Duration>) -> bool {
        let last = self.next;
        let shared = &self.shared;
        let t = self.index;
        // This process hosts the engine: run its turns instead of spinning idle.
        let spin = shared.options.spin;
        let driven = shared.drive_until(spin, timeout, false, || {
            self.drain_errors();
            (self.finished() >= last).then_some(())
        });
        let spin = match driven {
            Ok(()) => {
                self.retire();
                return true;
            }
            Err(spin) => spin,
        };
        let idle = shared.wait_sliced(spin, timeout, |spin, slice| {
            let done = wait_for_completion(shared, t, Spin::Polls(spin), slice, || {
                self.drain_errors();
                self.finished() >= last
            })?;
            Ok(done.then_some(()))
        });
        self.retire();
        matches!(idle, Ok(Some(())))
    }
}

impl Drop for Terminus {
    fn drop(&mut self) {
        // The engine may still be reading gather spans: give it a bounded time to finish
        // before our hold on their areas (and so perhaps their registration) ends.
        self.retire();
        if !self.pending.is_empty() {
            let limit = self.shared.options.control_timeout;
            self.wait_idle(Some(limit));
        }
        self.shared.release_terminus(self.index);
    }
}

/// How long [`wait_for_completion`] spins before it sleeps.
enum Spin<'a> {
    /// This many polls.
    Polls(u32),
    /// An adaptive budget's polls; a wait that slept updates it.
    Adaptive(&'a mut AdaptiveSpin),
}

/// Waits until `done` (which must read terminus `t`'s completion word with Acquire, as
/// [`completion::finished`] does) holds or `slice` passes: `spin`'s polls, then asleep
/// on the completion line's wake word, which the engine wakes after each move of the
/// word (`hamlyn_shm::wake`). Returns whether `done` held.
fn wait_for_completion(
    shared: &Shared,
    t: u16,
    spin: Spin<'_>,
    slice: Duration,
    done: impl FnMut() -> bool,
) -> Result<bool, Error> {
    let word = shared
        .layout
        .completion_wake_word(t)
        .and_then(|off| shared.port.atomic_u32(off).ok());
    let outcome = match (word, spin) {
        (Some(word), Spin::Adaptive(budget)) => {
            wake::wait_until_adaptive(word, budget, Some(slice), done)?
        }
        (Some(word), Spin::Polls(n)) => wake::wait_until(word, n, Some(slice), done)?,
        // Unreachable for a terminus of the port: naps instead.
        (None, Spin::Polls(n)) => return Ok(poll_until(n, Some(slice), done)),
        (None, Spin::Adaptive(budget)) => return Ok(poll_until(budget.polls(), Some(slice), done)),
    };
    Ok(matches!(outcome, wake::WaitOutcome::Ready { .. }))
}

/// Polls `done` until it holds or `timeout` passes: `spin` tight polls, then naps from
/// 20 µs doubling to 1 ms. Returns whether `done` held.
fn poll_until(spin: u32, timeout: Option<Duration>, mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..spin {
        if done() {
            return true;
        }
        std::hint::spin_loop();
    }
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    let mut nap = Duration::from_micros(20);
    loop {
        if done() {
            return true;
        }
        let now = Instant::now();
        let nap_now = match deadline {
            Some(d) if now >= d => return false,
            Some(d) => nap.min(d - now),
            None => nap,
        };
        std::thread::sleep(nap_now);
        nap = (nap * 2).min(Duration::from_millis(1));
    }
}

/// What [`Terminus::send`] returns: the request's place in its terminus, to ask whether
/// it is done and whether it failed. Cheap to clone; it does not keep the terminus busy.
///
/// [`crate::DirectTarget::send_for_handle`] returns one too, for a message already
/// delivered in the sending process: done and [`Status::Sent`] from the start, on no
/// terminus ([`SendHandle::DIRECT`]).
#[derive(Clone)]
pub struct SendHandle {
    /// The node whose terminus queued the request; `None` for a direct send.
    shared: Option<Arc<Shared>>,
    terminus: u16,
    pos: u64,
}

impl std::fmt::Debug for SendHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendHandle")
            .field("node", &self.shared.as_ref().map(|s| s.node))
            .field("terminus", &self.terminus)
            .field("position", &self.pos)
            .finish_non_exhaustive()
    }
}

impl SendHandle {
    /// The terminus number of a handle for a direct send (no terminus).
    pub const DIRECT: u16 = u16::MAX;

    /// A handle for a message delivered in this process (a direct send).
    pub(crate) fn delivered() -> SendHandle {
        SendHandle {
            shared: None,
            terminus: Self::DIRECT,
            pos: 0,
        }
    }

    /// The terminus the request was queued on ([`SendHandle::DIRECT`] for a direct send).
    pub fn terminus(&self) -> u16 {
        self.terminus
    }

    /// The request's position in its terminus (its sequence number; 0 for a direct
    /// send).
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The request's name, as the notification answering a read or atomic gives it
    /// ([`Notification::request`](crate::Notification::request)).
    pub fn request(&self) -> RequestRef {
        RequestRef {
            terminus: self.terminus,
            seq: self.pos as u32,
        }
    }

    /// Whether the engine has finished the request (one shared-memory load).
    pub fn is_done(&self) -> bool {
        match &self.shared {
            Some(s) => completion::finished(&s.port, &s.layout, self.terminus) > self.pos,
            None => true,
        }
    }

    /// The request's status: pending until the engine finishes it, then sent or failed.
    /// A remote refusal, or the loss of the session that carried it before the receiving
    /// node acknowledged it (`Failed(PeerDown)`), may turn sent into failed later; a sent
    /// request is never lost silently ([`Status::Sent`]).
    ///
    /// A request still pending when the engine is found gone is
    /// `Failed(RejectReason::PeerDown)`: the engine it depended on is down, and it never
    /// will finish.
    pub fn status(&self) -> Status {
        let Some(shared) = &self.shared else {
            return Status::Sent;
        };
        let s = shared
            .errors
            .status(&shared.port, &shared.layout, self.terminus, self.pos);
        if s == Status::Pending && shared.known_gone() {
            return Status::Failed(crate::RejectReason::PeerDown);
        }
        s
    }

    /// Waits until the request is finished or `timeout` passes and returns its status
    /// ([`Status::Pending`] on timeout). Spins, then sleeps until the engine finishes a
    /// request of the terminus (see [`Terminus::wait_idle`]).
    ///
    /// If the engine dies meanwhile, the wait ends (within a tenth of a second) with
    /// `Failed(RejectReason::PeerDown)` for a request it had not finished.
    pub fn wait(&self, timeout: Option<Duration>) -> Status {
        let Some(s) = &self.shared else {
            return Status::Sent;
        };
        if self.is_done() {
            return self.status();
        }
        // This process hosts the engine: run its turns instead of spinning idle.
        let driven = s.drive_until(s.options.spin, timeout, false, || {
            if self.is_done() {
                return Some(());
            }
            s.errors.drain(&s.port, &s.layout);
            None
        });
        let spin = match driven {
            Ok(()) => return self.status(),
            Err(spin) => spin,
        };
        let _ = s.wait_sliced(spin, timeout, |spin, slice| {
            let done = wait_for_completion(s, self.terminus, Spin::Polls(spin), slice, || {
                if self.is_done() {
                    return true;
                }
                s.errors.drain(&s.port, &s.layout);
                false
            })?;
            Ok(done.then_some(()))
        });
        self.status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{fake_node, FakeEngine, FAKE_RING_CAP};
    use crate::{Node, NodeOptions, RejectReason};
    use hamlyn_shm::wake::SLEEPING;
    use hamlyn_wire::request::Payload;
    use hamlyn_wire::{TicketFlags, FULL_SHARE};

    fn ticket_for(node: &Node) -> Ticket {
        Ticket {
            node: node.id(),
            incarnation: node.incarnation(),
            slot: hamlyn_wire::SlotId(4),
            key: 0x1234,
            meta_first: 0,
            meta_count: 1,
            offset: 0,
            len: 1 << 20,
            share: FULL_SHARE,
            flags: TicketFlags::WRITE,
        }
    }

    #[test]
    fn requests_reach_the_ring_in_order_with_their_positions() {
        let (node, mut fake) = fake_node(NodeOptions::default());
        let mut t = node.terminus(0).unwrap();
        let ticket = ticket_for(&node);
        for i in 0..3u8 {
            let h = t
                .send(
                    &ticket,
                    &SendOptions::new().tag(u64::from(i)),
                    Data::Inline(&[i; 8]),
                )
                .unwrap();
            assert_eq!((h.terminus(), h.position()), (t.index(), u64::from(i)));
        }
        for i in 0..3u8 {
            let r = fake.take(t.index()).expect("queued");
            assert_eq!((r.seq, r.word), (u32::from(i), u64::from(i)));
            assert!(matches!(r.payload, Payload::Inline { data, len: 8 } if data[..8] == [i; 8]));
        }
        assert!(fake.take(t.index()).is_none());
    }

    #[test]
    fn auto_never_gives_one_entry_to_two_long_messages_in_flight() {
        let (node, mut fake) = fake_node(NodeOptions::default());
        let mut t = node.terminus(0).unwrap();
        let ti = t.index();
        let area = node.area(1 << 16).unwrap();
        let long = [area.span(0, 1 << 16)];
        let ticket = Ticket {
            meta_first: 10,
            meta_count: 2,
            ..ticket_for(&node)
        };
        let o = SendOptions::new();
        let send = |t: &mut Terminus, data| t.send(&ticket, &o, data);
        // Two long messages in flight take the ticket's two entries, in turn.
        send(&mut t, Data::Gather(&long)).unwrap();
        send(&mut t, Data::Gather(&long)).unwrap();
        let entries: Vec<u32> = (0..2).map(|_| fake.take(ti).unwrap().meta_index).collect();
        assert_eq!(entries, [10, 11]);
        // A third, and a short one, find both busy: refused, nothing queued.
        assert_eq!(
            send(&mut t, Data::Gather(&long)).err(),
            Some(SendError::EntriesBusy)
        );
        assert_eq!(
            send(&mut t, Data::Inline(b"x")).err(),
            Some(SendError::EntriesBusy)
        );
        assert!(fake.take(ti).is_none());
        // The first finished: its entry is free again, for either kind.
        fake.finish(ti, 1);
        send(&mut t, Data::Inline(b"x")).unwrap();
        assert_eq!(fake.take(ti).unwrap().meta_index, 10);
        fake.finish(ti, 3);
        send(&mut t, Data::Gather(&long)).unwrap();
        send(&mut t, Data::Gather(&long)).unwrap();
        let entries: Vec<u32> = (0..2).map(|_| fake.take(ti).unwrap().meta_index).collect();
        assert_eq!(entries, [10, 11], "round robin from where it was");
        // Named entries are the caller's business.
        send(&mut t, Data::Inline(b"x")).unwrap_err();
        t.send(&ticket, &o.entry(1), Data::Gather(&long)).unwrap();
        assert_eq!(fake.take(ti).unwrap().meta_index, 11);
    }

    /// A sender that cannot drive its engine (the fake's node is not hosted) waits for
    /// room on the completion word; a wait that slept and got its room within the
    /// budget's reach doubles the spin of the next (the adaptive budget a notification
    /// queue's wait has), so a sender streaming to a busy engine stops paying a wake-up
    /// per pause. With a fixed spin the budget would stay at one poll.
    #[test]
    fn a_wait_for_room_that_slept_spins_longer_the_next_time() {
        let (node, mut fake) = fake_node(NodeOptions {
            spin: 1,
            ..NodeOptions::default()
        });
        let mut t = node.terminus(0).unwrap();
        let ti = t.index();
        assert_eq!(
            t.room_spin.polls(),
            1,
            "the budget starts at NodeOptions::spin"
        );
        // A reach of seconds: a slow machine's wake-up still counts as soon.
        t.room_spin = AdaptiveSpin::new(1, Duration::from_secs(30));
        let ticket = ticket_for(&node);
        let mut queued = 0;
        while t
            .send(&ticket, &SendOptions::new(), Data::Inline(b"x"))
            .is_ok()
        {
            queued += 1;
        }
        assert_eq!(queued, FAKE_RING_CAP);
        let off = fake.layout.completion_wake_word(ti).unwrap();
        let port = fake.port.clone();
        let word = port.atomic_u32(off).unwrap();
        std::thread::scope(|s| {
            let fake = &mut fake;
            s.spawn(move || {
                // Once the sender sleeps, the engine takes a request and finishes it.
                let deadline = Instant::now() + Duration::from_secs(30);
                // Relaxed: a look at a flag; the wake-up itself is the futex's.
                while word.load(Ordering::Relaxed) & SLEEPING == 0 {
                    assert!(Instant::now() < deadline, "the sender never slept");
                    std::thread::yield_now();
                }
                fake.take(ti).expect("a request to take");
                fake.finish(ti, 1);
            });
            assert!(t.wait_room(Some(Duration::from_secs(30))), "room comes");
        });
        assert_eq!(t.room_spin.polls(), 2, "the budget doubled after the sleep");
    }

    /// A fake engine's node, its terminus 0, and three sends of one byte on it
    /// (positions 0, 1 and 2); `send` sends one more.
    fn three_sends() -> (Node, FakeEngine, Terminus, [SendHandle; 3]) {
        let (node, fake) = fake_node(NodeOptions::default());
        let mut t = node.terminus(0).unwrap();
        let handles = [
            send(&node, &mut t),
            send(&node, &mut t),
            send(&node, &mut t),
        ];
        (node, fake, t, handles)
    }

    fn send(node: &Node, t: &mut Terminus) -> SendHandle {
        t.send(&ticket_for(node), &SendOptions::new(), Data::Inline(b"x"))
            .unwrap()
    }

    #[test]
    fn status_follows_the_completion_word_and_error_ring() {
        let (node, mut fake, mut t, [h0, h1, h2]) = three_sends();
        let ti = t.index();
        assert_eq!(h0.status(), Status::Pending);
        assert_eq!(t.in_flight(), 3);
        // The engine finishes 0, refuses 1 (error first, then the word), finishes 2.
        fake.finish(ti, 1);
        assert_eq!((h0.status(), h1.status()), (Status::Sent, Status::Pending));
        fake.fail(ti, 1, RejectReason::BadKey.code().into());
        fake.finish(ti, 3);
        assert_eq!(h1.status(), Status::Failed(RejectReason::BadKey));
        assert_eq!(h2.status(), Status::Sent);
        assert_eq!(t.in_flight(), 0);
        // A remote NACK for a request already reported sent.
        fake.fail(ti, 2, RejectReason::OutOfBounds.code().into());
        assert_eq!(h2.status(), Status::Failed(RejectReason::OutOfBounds));
        assert!(h2.status().is_failed() && h2.status().is_done());
        // Unknown codes are reported as such, and errors for other termini stay theirs.
        let h3 = send(&node, &mut t);
        fake.fail(ti, 3, 999);
        fake.fail(ti + 1, 3, RejectReason::Revoked.code().into());
        fake.finish(ti, 4);
        assert_eq!(h3.status(), Status::FailedCode(999));
        assert_eq!(h3.wait(Some(Duration::ZERO)), Status::FailedCode(999));
        assert_eq!(h0.status(), Status::Sent);
    }

    /// A finished request that did not fail reads `Sent` without the error table's
    /// lock, also after earlier failures (`hamlyn_shm::drain_watch`); while an error
    /// waits in the ring, or one is recorded at its position or later, it takes the lock.
    #[test]
    fn a_request_that_did_not_fail_reads_sent_without_the_lock() {
        let (node, mut fake, mut t, [h0, h1, h2]) = three_sends();
        let ti = t.index();
        fake.fail(ti, 0, RejectReason::BadKey.code().into());
        fake.finish(ti, 2);
        // The status, and whether it took the table's lock.
        let status = |h: &SendHandle| {
            let before = node.shared.errors.times_locked();
            let s = h.status();
            (s, node.shared.errors.times_locked() != before)
        };
        assert_eq!(
            status(&h1),
            (Status::Sent, true),
            "an error waits in the ring"
        );
        assert_eq!(status(&h0), (Status::Failed(RejectReason::BadKey), true));
        assert_eq!(status(&h1), (Status::Sent, false));
        assert!(status(&h0).1, "a recorded failure is looked up");
        assert_eq!(status(&h2), (Status::Pending, false));
        fake.finish(ti, 3);
        assert_eq!(status(&h2), (Status::Sent, false));
        // A NACK for a request already read as sent: looked up, and failed.
        fake.fail(ti, 2, RejectReason::OutOfBounds.code().into());
        assert_eq!(
            status(&h2),
            (Status::Failed(RejectReason::OutOfBounds), true)
        );
        assert_eq!(
            status(&h1),
            (Status::Sent, true),
            "a failure at 2 is not 1's"
        );
        // Waiting loops drain an empty ring without the lock.
        let before = node.shared.errors.times_locked();
        assert!(t.wait_idle(Some(Duration::ZERO)));
        assert_eq!(node.shared.errors.times_locked(), before);
    }

    #[test]
    fn waiting_drains_the_error_ring_so_the_engine_never_stalls_on_it() {
        let (node, mut fake) = fake_node(NodeOptions::default());
        let mut t = node.terminus(0).unwrap();
        let ti = t.index();
        let ticket = ticket_for(&node);
        let inhibited = RejectReason::Inhibited.code().into();
        let mut handles = Vec::new();
        // The engine refuses 64 requests in turn (error first, then the word); nobody
        // asks for their status, so its 64-entry error ring fills up.
        for p in 0..u64::from(FAKE_RING_CAP) {
            handles.push(
                t.send(&ticket, &SendOptions::new(), Data::Inline(b"x"))
                    .unwrap(),
            );
            assert!(fake.take(ti).is_some());
            fake.fail(ti, p as u32, inhibited);
            fake.finish(ti, p + 1);
        }
        handles.push(
            t.send(&ticket, &SendOptions::new(), Data::Inline(b"x"))
                .unwrap(),
        );
        assert!(fake.take(ti).is_some());
        let p = u64::from(FAKE_RING_CAP);
        assert!(
            !fake.try_fail(ti, p as u32, inhibited),
            "the engine must hold the request"
        );
        // Waiting for the terminus drains the ring, so the engine can go on.
        assert!(!t.wait_idle(Some(Duration::from_millis(1))));
        assert!(fake.try_fail(ti, p as u32, inhibited));
        fake.finish(ti, p + 1);
        assert!(t.wait_idle(Some(Duration::ZERO)));
        for h in &handles {
            assert_eq!(h.status(), Status::Failed(RejectReason::Inhibited));
        }
    }

    #[test]
    fn wait_times_out_on_pending_and_returns_when_done() {
        let (node, fake) = fake_node(NodeOptions::default());
        let mut t = node.terminus(0).unwrap();
        let h = t
            .send(&ticket_for(&node), &SendOptions::new(), Data::Inline(b""))
            .unwrap();
        let t0 = Instant::now();
        assert_eq!(h.wait(Some(Duration::from_millis(20))), Status::Pending);
        assert!(t0.elapsed() >= Duration::from_millis(20));
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(10));
                fake.finish(t.index(), 1);
            });
            assert_eq!(h.wait(Some(Duration::from_secs(5))), Status::Sent);
        });
        assert!(t.wait_idle(Some(Duration::ZERO)));
    }

    /// A waiter past its spin sleeps on the completion line's wake word (the flag is
    /// there for the engine to see), and the engine's move of the word wakes it.
    #[test]
    fn a_waiter_sleeps_on_the_completion_word_until_the_engine_moves_it() {
        let (node, fake) = fake_node(NodeOptions {
            spin: 0,
            ..NodeOptions::default()
        });
        let mut t = node.terminus(0).unwrap();
        let h = t
            .send(&ticket_for(&node), &SendOptions::new(), Data::Inline(b""))
            .unwrap();
        let wake = fake
            .port
            .atomic_u32(fake.layout.completion_wake_word(t.index()).unwrap())
            .unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| h.wait(None));
            let deadline = Instant::now() + Duration::from_secs(30);
            while wake.load(Ordering::Relaxed) & SLEEPING == 0 {
                assert!(Instant::now() < deadline, "the waiter never went to sleep");
                std::thread::sleep(Duration::from_millis(1));
            }
            fake.finish(t.index(), 1);
            assert_eq!(waiter.join().unwrap(), Status::Sent);
        });
        assert_eq!(
            wake.load(Ordering::Relaxed) & SLEEPING,
            0,
            "the wake cleared it"
        );
        assert!(t.wait_idle(None));
    }

    #[test]
    fn a_full_terminus_is_back_pressure_not_a_drop() {
        let (node, mut fake) = fake_node(NodeOptions::default());
        let mut t = node.terminus(0).unwrap();
        let ticket = ticket_for(&node);
        for i in 0..FAKE_RING_CAP {
            let word = u64::from(i);
            t.send(&ticket, &SendOptions::new().tag(word), Data::Inline(b"x"))
                .unwrap();
        }
        let opts = SendOptions::new().tag(1000);
        assert_eq!(
            t.send(&ticket, &opts, Data::Inline(b"x")).err(),
            Some(SendError::Full)
        );
        assert_eq!(fake.take(t.index()).map(|r| r.word), Some(0));
        let h = t.send(&ticket, &opts, Data::Inline(b"x")).unwrap();
        assert_eq!(
            h.position(),
            u64::from(FAKE_RING_CAP),
            "the refused send took no position"
        );
        for i in 1..FAKE_RING_CAP {
            assert_eq!(fake.take(t.index()).map(|r| r.word), Some(u64::from(i)));
        }
        assert_eq!(
            fake.take(t.index()).map(|r| (r.word, r.seq)),
            Some((1000, FAKE_RING_CAP))
        );
    }

    #[test]
    fn gather_buffers_are_reusable_only_once_their_send_is_done() {
        let (node, fake) = fake_node(NodeOptions::default());
        let mut t = node.terminus(0).unwrap();
        let a = node.area(8192).unwrap();
        let b = node.area(8192).unwrap();
        let ticket = ticket_for(&node);
        t.send(
            &ticket,
            &SendOptions::new(),
            Data::Gather(&[a.span(1000, 1000)]),
        )
        .unwrap();
        t.send(
            &ticket,
            &SendOptions::new(),
            Data::Inline(b"inline needs no buffer"),
        )
        .unwrap();
        t.send(
            &ticket,
            &SendOptions::new(),
            Data::Gather(&[a.span(4000, 10), b.span(0, 1)]),
        )
        .unwrap();
        assert!(
            !t.can_reuse(&a, 0, 1001),
            "overlaps the first send's first byte"
        );
        assert!(!t.can_reuse(&a, 1999, 1));
        assert!(t.can_reuse(&a, 0, 1000) && t.can_reuse(&a, 2000, 2000));
        assert!(!t.can_reuse(&a, 4005, 100));
        assert!(!t.can_reuse(&b, 0, 8192));
        assert!(t.can_reuse(&b, 1, 8191));
        assert!(t.can_reuse(&a, 1500, 0), "an empty range overlaps nothing");
        fake.finish(t.index(), 1);
        assert!(t.can_reuse(&a, 0, 4000));
        assert!(!t.can_reuse(&a, 4000, 1));
        fake.finish(t.index(), 3);
        assert!(t.can_reuse(&a, 0, 8192) && t.can_reuse(&b, 0, 8192));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Send { area: usize, offset: u64, len: u64 },
        Finish(u64),
        Check { area: usize, offset: u64, len: u64 },
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (0..2usize, 0..4096u64, 0..1024u64).prop_map(|(area, offset, len)| Op::Send {
                area,
                offset,
                len
            }),
            (0..4u64).prop_map(Op::Finish),
            (0..2usize, 0..5000u64, 0..2048u64).prop_map(|(area, offset, len)| Op::Check {
                area,
                offset,
                len
            }),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]
        /// `can_reuse` agrees with a model: a list of every gather span sent, and the
        /// number of sends the engine finished.
        #[test]
        fn can_reuse_matches_a_model(ops in proptest::collection::vec(op(), 1..60)) {
            let (node, mut fake) = fake_node(NodeOptions::default());
            let mut t = node.terminus(0).unwrap();
            let areas = [node.area(4096).unwrap(), node.area(4096).unwrap()];
            let ticket = ticket_for(&node);
            let mut model: Vec<(u64, usize, u64, u64)> = Vec::new();
            let (mut sent, mut finished) = (0u64, 0u64);
            for op in ops {
                match op {
                    Op::Send { area, offset, len } => {
                        let len = len.min(4096 - offset);
                        let spans = [areas[area].span(offset, len)];
                        t.send(&ticket, &SendOptions::new(), Data::Gather(&spans)).unwrap();
                        assert!(fake.take(t.index()).is_some());
                        model.push((sent, area, offset, len));
                        sent += 1;
                    }
                    Op::Finish(k) => {
                        finished = (finished + k).min(sent);
                        fake.finish(t.index(), finished);
                    }
                    Op::Check { area, offset, len } => {
                        let busy = model.iter().any(|&(pos, a, o, l)| {
                            pos >= finished && a == area && len > 0 && l > 0
                                && o < offset + len && offset < o + l
                        });
                        proptest::prop_assert_eq!(t.can_reuse(&areas[area], offset, len), !busy);
                    }
                }
            }
            fake.finish(t.index(), sent);
        }
    }

    #[test]
    fn a_sleeping_engine_is_rung_an_awake_one_is_not() {
        let (node, fake) = fake_node(NodeOptions::default());
        let mut t = node.terminus(0).unwrap();
        let ticket = ticket_for(&node);
        let bell = fake.port.atomic_u32(header::DOORBELL).unwrap();
        t.send(&ticket, &SendOptions::new(), Data::Inline(b"x"))
            .unwrap();
        assert_eq!(fake.doorbell.drain().unwrap(), 0, "awake: no system call");
        // The engine announces it sleeps with the eventfd (see hamlyn_shm::wake).
        bell.fetch_or(
            hamlyn_shm::wake::EVENTFD_ARMED | SLEEPING,
            Ordering::Relaxed,
        );
        t.send(&ticket, &SendOptions::new(), Data::Inline(b"x"))
            .unwrap();
        assert_eq!(fake.doorbell.drain().unwrap(), 1);
        assert_eq!(bell.load(Ordering::Relaxed), 0, "the flags were taken");
    }

    #[test]
    fn termini_are_handed_out_once_and_reused_at_their_priority() {
        let (node, fake) = fake_node(NodeOptions {
            termini: 2,
            ..NodeOptions::default()
        });
        let t0 = node.terminus(1).unwrap();
        let t1 = node.terminus(0).unwrap();
        assert!(matches!(node.terminus(0), Err(Error::NoTerminus(2))));
        let i0 = t0.index();
        drop(t0);
        assert!(
            matches!(node.terminus(0), Err(Error::NoTerminus(2))),
            "index kept priority 1"
        );
        let again = node.terminus(1).unwrap();
        assert_eq!(again.index(), i0);
        let opens = fake
            .requests()
            .iter()
            .filter(|r| matches!(r, hamlyn_wire::control::Request::OpenTerminus { .. }))
            .count();
        assert_eq!(opens, 2, "a reused terminus is not opened again");
        drop((t1, again));
    }
}
