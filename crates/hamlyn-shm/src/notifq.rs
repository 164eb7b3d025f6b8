//! The notification queue (seed 000 §2.6; FLIPC endpoint groups; a CQ/EQ today): 32-byte
//! [`NotifEntry`]s posted by many producers (engine shards, direct senders) and polled by
//! one consumer, the application.
//!
//! Layout at [`NotifLayout::offset`] (64-byte aligned), see [`header`]:
//!
//! | offset | bytes | field | written by |
//! |---|---|---|---|
//! | 0 | 8 | `tail`: positions ever reserved (u64) | producers (CAS) |
//! | 64 | 8 | `head`: entries ever consumed (u64) | consumer only |
//! | 128 | 8 | `overflow`: posts refused because the queue was full (u64) | producers (fetch_add) |
//! | 192 | 4 | wake word ([`crate::wake`]: `SLEEPING`, `EVENTFD_ARMED`) | consumer sets, producers clear |
//! | 200 | 8 | `skipped`: positions the consumer gave up on (u64) | consumer only |
//! | 256 | `capacity * 32` | entries; position `p` lives at `256 + (p % capacity) * 32` | producers |
//!
//! Each header field has its own cache line. The entry's `seq` word (offset 0 of the
//! entry) is the paper's wrap flag made lap-aware: the producer of position `p` writes the
//! rest of the entry first and `seq = seq_for(p)` last, with Release. The consumer polls
//! the `seq` of the entry at `head` and takes it when it equals `seq_for(head)`; an entry
//! left from an earlier lap holds `seq_for(head - capacity)`, which differs (see
//! [`seq_for`]), and fresh zeroed memory holds 0, which `seq_for` never returns. So no
//! one ever clears an entry, and the consumer never reads `tail`.
//!
//! Posting never overwrites: a producer reserves a position with a CAS on `tail` only
//! while `tail - head < capacity`, otherwise it counts an overflow and returns
//! [`Full`]. A slot is reused only after the consumer has copied it out and advanced
//! `head` past it.
//!
//! A producer that dies between reserving a position and writing its `seq` would stall
//! the consumer at that position for ever, later entries queued behind it. So the
//! consumer gives up on a position that has stayed reserved but unwritten for a bound
//! ([`DEFAULT_STALL_BOUND`], [`Consumer::skip_stalled`]): it swaps the entry's `seq` for
//! the position's tombstone ([`tombstone_for`]) with a CAS, counts the position in
//! `skipped` and moves on. A producer publishes with a CAS from the slot's previous
//! value, so of a late producer and a consumer that gave up exactly one wins: the entry
//! is either taken or refused to its producer as [`Full`] (and counted as an overflow),
//! never both and never neither. What no queue of this shape can prevent: a producer
//! stopped (not dead) past the bound between its reservation and its body's stores, that
//! resumes after the skip and after a whole lap more has been posted, writes its body
//! over the next lap's entry in the same slot (its publication is refused); the
//! producers of a port's queues are the engine and direct senders the receiver already
//! trusts with its memory. (Until 2026-11-25 a producer loaded `seq` before its stores
//! and gave up on its tombstone there, which narrowed that window by a few instructions
//! at the cost of fetching the slot's line twice per post.)

use std::time::{Duration, Instant};

use hamlyn_wire::{NotifEntry, NOTIF_ENTRY_LEN};

use crate::memory::{check_fits, check_offset_and_capacity, LayoutError, RingMemory, CACHE_LINE};
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::wake::{self, EventFd, WaitOutcome, WakeError};

/// Byte offsets inside the queue, from [`NotifLayout::offset`].
pub mod header {
    use crate::memory::CACHE_LINE;

    /// Reservation counter (u64), CAS-advanced by producers.
    pub const TAIL: usize = 0;
    /// Consumption counter (u64), written by the consumer only.
    pub const HEAD: usize = CACHE_LINE;
    /// Refused posts (u64).
    pub const OVERFLOW: usize = 2 * CACHE_LINE;
    /// The wake word (u32), see [`crate::wake`].
    pub const WAKE: usize = 3 * CACHE_LINE;
    /// Positions the consumer skipped because their producer never wrote them (u64),
    /// written by the consumer only; it shares the wake word's line, which the consumer
    /// writes anyway, and is written only on the cold path.
    pub const SKIPPED: usize = 3 * CACHE_LINE + 8;
    /// First entry.
    pub const ENTRIES: usize = 4 * CACHE_LINE;
}

/// CAS attempts before a post gives up. Honest producers lose a CAS only to another
/// producer's success, so this many losses in a row means a peer is scribbling on `tail`;
/// the post then fails as [`Full`] (and is counted) rather than spinning forever.
const MAX_RESERVE_ATTEMPTS: u32 = 1024;

/// How long the consumer lets the position at its head stay reserved but unwritten
/// before it gives up on the producer (see the module doc). Writing one entry takes
/// nanoseconds; a producer this late has died or been stopped.
pub const DEFAULT_STALL_BOUND: Duration = Duration::from_secs(1);

/// The `seq` value the consumer leaves in the entry of position `pos` when it skipped it:
/// the bitwise complement of [`seq_for`]`(pos)`.
///
/// It differs from every value the slot's readers compare it with, for a power-of-two
/// capacity `c` with `4 <= c <= 2^31`: from `seq_for(pos)` (a complement has no fixed
/// point); from `seq_for(pos + c)`, which the consumer waits for on the next lap (without
/// the 0→1 remap of [`seq_for`] the two would sum to `2^32 - 1`, odd, while
/// `(pos + 1) + (pos + c + 1)` is even; with it, equality needs `c - 1 == 1`); and from
/// `tombstone_for(pos + c)`, since the `seq_for` values differ. (The loom models' 2-entry
/// queues never come near position `2^32`, where `c = 2` could collide.)
#[inline]
pub fn tombstone_for(pos: u64) -> u32 {
    !seq_for(pos)
}

/// The `seq` value marking the entry at position `pos` as written: `pos + 1` truncated to
/// 32 bits, with 0 (reserved for "never written") replaced by 1.
///
/// For a power-of-two capacity `c` with `2 <= c <= 2^31`, `seq_for(p) != seq_for(p - c)`
/// for every `p >= c`: the raw values differ by `c mod 2^32 != 0`, and the 0→1 remap could
/// only collide if they differed by 1 (positions `2^32·k - 1` and `2^32·k`), which `c >= 2`
/// excludes.
#[inline]
pub fn seq_for(pos: u64) -> u32 {
    let s = (pos as u32).wrapping_add(1);
    if s == 0 {
        1
    } else {
        s
    }
}

/// Where a queue lives and its capacity. Producers and the consumer must agree on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotifLayout {
    offset: usize,
    capacity: u32,
}

impl NotifLayout {
    /// A queue at `offset` (a multiple of 64) of `capacity` entries (a power of two in
    /// [`MIN_CAPACITY`](crate::memory::MIN_CAPACITY)..=[`MAX_CAPACITY`](crate::memory::MAX_CAPACITY)).
    pub fn new(offset: usize, capacity: u32) -> Result<NotifLayout, LayoutError> {
        check_offset_and_capacity(offset, capacity)?;
        offset
            .checked_add(header::ENTRIES + capacity as usize * NOTIF_ENTRY_LEN)
            .ok_or(LayoutError::DoesNotFit {
                need: usize::MAX,
                have: 0,
            })?;
        Ok(NotifLayout { offset, capacity })
    }

    /// Bytes the queue occupies, header included.
    pub fn bytes(&self) -> usize {
        header::ENTRIES + self.capacity as usize * NOTIF_ENTRY_LEN
    }

    /// First byte after the queue, rounded up to a cache line.
    pub fn next_offset(&self) -> usize {
        (self.offset + self.bytes()).next_multiple_of(CACHE_LINE)
    }

    /// Offset of the queue in its memory.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Entries the queue holds.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    fn check(&self, mem: &impl RingMemory) -> Result<(), LayoutError> {
        check_fits(mem, self.offset + self.bytes())?;
        let base = self.offset;
        if mem.atomic_u64(base + header::TAIL).is_none()
            || mem.atomic_u64(base + header::HEAD).is_none()
            || mem.atomic_u64(base + header::OVERFLOW).is_none()
            || mem.atomic_u32(base + header::WAKE).is_none()
            || mem.atomic_u64(base + header::SKIPPED).is_none()
        {
            return Err(LayoutError::Misaligned { offset: base });
        }
        Ok(())
    }
}

/// The queue was full: the entry was not posted (and was counted as an overflow). Nothing
/// already queued was touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("notification queue full")]
pub struct Full;

/// Offsets shared by both sides.
#[derive(Debug, Clone, Copy)]
struct Offs {
    tail: usize,
    head: usize,
    overflow: usize,
    wake: usize,
    skipped: usize,
    entries: usize,
    cap: u64,
    mask: u64,
}

impl Offs {
    fn new(l: NotifLayout) -> Offs {
        Offs {
            tail: l.offset + header::TAIL,
            head: l.offset + header::HEAD,
            overflow: l.offset + header::OVERFLOW,
            wake: l.offset + header::WAKE,
            skipped: l.offset + header::SKIPPED,
            entries: l.offset + header::ENTRIES,
            cap: u64::from(l.capacity),
            mask: u64::from(l.capacity) - 1,
        }
    }

    #[inline]
    fn slot(&self, pos: u64) -> usize {
        self.entries + (pos & self.mask) as usize * NOTIF_ENTRY_LEN
    }
}

fn overflows(mem: &impl RingMemory, o: &Offs) -> u64 {
    // Relaxed: a statistic; it orders nothing.
    mem.atomic_u64(o.overflow)
        .map_or(0, |a| a.load(Ordering::Relaxed))
}

/// A producer handle. Any number may exist, in any number of processes; `post` takes
/// `&self`, so one handle may also be shared between threads.
#[derive(Debug)]
pub struct Producer<M: RingMemory> {
    mem: M,
    o: Offs,
    eventfd: Option<EventFd>,
    /// The last `head` this handle read from the queue, in this process's own memory: a
    /// lower bound of the real one (which only grows), so a post that finds room below
    /// it needs not read the consumer's line, and that line stops moving between the
    /// two caches on every message. Read again only when it shows the queue full.
    head_seen: AtomicU64,
}

impl<M: RingMemory> Producer<M> {
    /// Attaches a producer to the queue `layout` describes in `mem`.
    pub fn attach(mem: M, layout: NotifLayout) -> Result<Producer<M>, LayoutError> {
        layout.check(&mem)?;
        Ok(Producer {
            mem,
            o: Offs::new(layout),
            eventfd: None,
            head_seen: AtomicU64::new(0),
        })
    }

    /// Also pokes `eventfd` after a post when the consumer waits in an event loop
    /// ([`Consumer::arm_eventfd`]).
    pub fn with_eventfd(mut self, eventfd: EventFd) -> Producer<M> {
        self.eventfd = Some(eventfd);
        self
    }

    /// Posts `entry` (its `seq` field is ignored and set by the queue) and wakes the
    /// consumer if it sleeps. A full queue is `Err(Full)` and increments the overflow
    /// counter; nothing is overwritten. No allocation or lock; a system call only when the
    /// consumer is asleep or waits on the eventfd.
    #[inline]
    pub fn post(&self, entry: &NotifEntry) -> Result<(), Full> {
        self.post_with(entry, true)
    }

    /// As [`Producer::post`], but the consumer is woken (and the eventfd poked) only if
    /// `wake`: the sender's WAKE flag (seed 000 §2.6). An unwoken sleeper finds the entry
    /// when something else wakes it or its wait times out.
    #[inline]
    pub fn post_with(&self, entry: &NotifEntry, wake: bool) -> Result<(), Full> {
        self.post_from(entry, wake, None)
    }

    /// [`Producer::post_with`] whose first guess of `tail` is `guess` (a test's stale
    /// read: a thread that paused after reading `tail` while others posted and the
    /// consumer took their entries) instead of a load of it.
    #[cfg(all(test, not(loom)))]
    fn post_with_tail_guess(&self, entry: &NotifEntry, wake: bool, guess: u64) -> Result<(), Full> {
        self.post_from(entry, wake, Some(guess))
    }

    /// [`Producer::post_with`], starting from `guess` for `tail` if given (tests), else
    /// from a load of it.
    #[inline(always)]
    fn post_from(&self, entry: &NotifEntry, wake: bool, guess: Option<u64>) -> Result<(), Full> {
        let o = &self.o;
        let Some(tail) = self.mem.atomic_u64(o.tail) else {
            return Err(self.refuse());
        };
        // Relaxed: only a starting guess for the CAS, which re-validates it.
        let mut pos = guess.unwrap_or_else(|| tail.load(Ordering::Relaxed));
        // Acquire: pairs with the Release store of `head_seen` below, by whichever thread
        // of this process read `head` last, so that what its Acquire load of `head`
        // ordered (the consumer's copy out of the slots below it) is ordered before us.
        let mut h = self.head_seen.load(Ordering::Acquire);
        let mut attempts = 0;
        loop {
            // Wrapping: a `head` ahead of `tail` (scribbled) reads as a huge distance,
            // i.e. full.
            if pos.wrapping_sub(h) >= o.cap {
                // Looked up (a bounds and alignment check) only here, where it is read:
                // a post that finds room below the head it saw never reads it.
                let Some(head) = self.mem.atomic_u64(o.head) else {
                    return Err(self.refuse());
                };
                // Acquire: pairs with the Release store of `head` in `Consumer::poll`:
                // the consumer finished copying position `pos - capacity` out of the
                // slot we are about to reuse.
                h = head.load(Ordering::Acquire);
                if pos.wrapping_sub(h) >= o.cap {
                    // `head` ahead of our `pos`: our read of `tail` is older than what
                    // the consumer took since (this thread paused after it while others
                    // posted), not a full queue; read `tail` again. A scribbled `head`
                    // stays ahead and runs out of attempts.
                    // (A full queue has `pos` a capacity ahead of `head`: then
                    // `head - pos` wraps past 2^63.)
                    if h.wrapping_sub(pos) < 1 << 63 {
                        attempts += 1;
                        if attempts >= MAX_RESERVE_ATTEMPTS {
                            return Err(self.refuse());
                        }
                        pos = tail.load(Ordering::Relaxed);
                        continue;
                    }
                    return Err(self.refuse());
                }
                // Release: pairs with the Acquire load above, in this handle's next
                // posts (on any thread). An older value stored over a newer one by
                // another thread only makes a later post read `head` once more.
                self.head_seen.store(h, Ordering::Release);
            }
            // Relaxed: the CAS only hands out distinct positions; slot contents are
            // ordered by `head` (above) and `seq` (below), not by `tail`.
            match tail.compare_exchange_weak(
                pos,
                pos.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => {
                    pos = now;
                    attempts += 1;
                    if attempts >= MAX_RESERVE_ATTEMPTS {
                        return Err(self.refuse());
                    }
                }
            }
        }
        let slot = o.slot(pos);
        let Some(seq) = self.mem.atomic_u32(slot) else {
            // Unreachable after `attach` validated the layout.
            return Err(self.refuse());
        };
        // Everything but `seq` first (the slot is ours: the Acquire on `head` above
        // ordered the consumer's copy of the previous lap before these stores)...
        self.mem
            .store_bytes(slot + 4, &entry.as_bytes()[4..NOTIF_ENTRY_LEN]);
        // ...then `seq`, with a CAS from what an honest queue holds there now: the
        // previous lap's `seq`, or 0 in fresh memory. No load first: a load would fetch
        // the line shared (the consumer polls it) and the CAS fetch it again to write; a
        // stream of posts paid both (about a tenth of its rate, 2026-11-25). The one
        // other value that lets us publish is the previous lap's tombstone (its position
        // was skipped): one more CAS from it. Anything else refuses the post: our own
        // tombstone (`Consumer::skip_stalled` gave up on us meanwhile), a later lap's
        // `seq` (we were stopped past the bound while a whole lap was posted: publishing
        // over it would hide that entry), or a scribbler's value. Release: pairs with the
        // Acquire load of `seq` in `Consumer::poll` (and `Consumer::ready`): the entry's
        // other 28 bytes are visible before it.
        let expected = if pos < o.cap { 0 } else { seq_for(pos - o.cap) };
        if let Err(now) =
            seq.compare_exchange(expected, seq_for(pos), Ordering::Release, Ordering::Relaxed)
        {
            let skipped_before = pos >= o.cap && now == tombstone_for(pos - o.cap);
            if !skipped_before
                || seq
                    .compare_exchange(now, seq_for(pos), Ordering::Release, Ordering::Relaxed)
                    .is_err()
            {
                return Err(self.refuse());
            }
        }
        if wake {
            wake::publish_fence();
            self.wake_after_fence();
        }
        Ok(())
    }

    /// Wakes the consumer if it sleeps (or pokes its eventfd if it waits in an event
    /// loop), for a producer that posted with `wake` false and has since issued the
    /// fence F2 itself ([`wake::publish_fence`]): a producer that posts several entries
    /// (to this queue or others, or publishes other words) pays one fence for all of
    /// them, not one per post. Whether it woke it.
    #[inline]
    pub fn wake_after_fence(&self) -> bool {
        match self.mem.atomic_u32(self.o.wake) {
            Some(word) => wake::wake_after_fence(word, self.eventfd.as_ref()),
            None => false,
        }
    }

    #[cold]
    fn refuse(&self) -> Full {
        if let Some(c) = self.mem.atomic_u64(self.o.overflow) {
            // Relaxed: a statistic.
            c.fetch_add(1, Ordering::Relaxed);
        }
        Full
    }

    /// Posts refused so far because the queue was full (by all producers).
    pub fn overflows(&self) -> u64 {
        overflows(&self.mem, &self.o)
    }

    /// Whether a post made now would find room (other producers may take it first):
    /// lets a producer retry a report without counting a refusal each time it looks.
    pub fn has_room(&self) -> bool {
        match (
            self.mem.atomic_u64(self.o.tail),
            self.mem.atomic_u64(self.o.head),
        ) {
            // Acquire on `head`: as in `post_with`. Relaxed on `tail`: a guess.
            (Some(t), Some(h)) => {
                t.load(Ordering::Relaxed)
                    .wrapping_sub(h.load(Ordering::Acquire))
                    < self.o.cap
            }
            _ => false,
        }
    }

    /// The memory the queue lives in.
    pub fn memory(&self) -> &M {
        &self.mem
    }
}

/// The consumer of a queue. Exactly one may exist per queue at a time.
#[derive(Debug)]
pub struct Consumer<M: RingMemory> {
    mem: M,
    o: Offs,
    /// Our position; the shared `head` is only ever written from this.
    head: u64,
    /// How long a reserved, unwritten head position is waited for.
    stall_bound: Duration,
    /// The head position seen reserved but unwritten, and since when.
    stall: Option<(u64, Instant)>,
}

impl<M: RingMemory> Consumer<M> {
    /// Attaches the consumer to the queue `layout` describes in `mem`, resuming at the
    /// `head` found there (0 in fresh memory).
    pub fn attach(mem: M, layout: NotifLayout) -> Result<Consumer<M>, LayoutError> {
        layout.check(&mem)?;
        let o = Offs::new(layout);
        // Relaxed: our own index, written by a previous incarnation of this consumer.
        let head = mem
            .atomic_u64(o.head)
            .map_or(0, |a| a.load(Ordering::Relaxed));
        Ok(Consumer {
            mem,
            o,
            head,
            stall_bound: DEFAULT_STALL_BOUND,
            stall: None,
        })
    }

    /// Sets how long [`Consumer::skip_stalled`] waits for the producer of a reserved
    /// head position before skipping it ([`DEFAULT_STALL_BOUND`] unless set).
    pub fn with_stall_bound(mut self, bound: Duration) -> Consumer<M> {
        self.stall_bound = bound;
        self
    }

    /// Whether the position at our head has been reserved by a producer (written or
    /// not): one load of `tail`. For callers that call [`Consumer::skip_stalled`] only
    /// when it can matter.
    #[inline]
    pub fn head_reserved(&self) -> bool {
        // Relaxed: a hint; `skip_stalled` decides with a CAS on the entry itself.
        self.mem
            .atomic_u64(self.o.tail)
            .is_some_and(|t| t.load(Ordering::Relaxed) != self.head)
    }

    /// Gives up on the producer of the head position if it reserved the position at
    /// least the stall bound ago (as first seen by an earlier call, at its `now`) and has
    /// not written it since: the entry becomes a tombstone its producer can no longer
    /// publish over, the position is counted in [`Consumer::skipped`], and the entries
    /// queued behind it can be polled. Returns whether a position was skipped. Cold: call
    /// it when [`Consumer::poll`] finds nothing, not on every poll.
    pub fn skip_stalled(&mut self, now: Instant) -> bool {
        let o = &self.o;
        let slot = o.slot(self.head);
        let (Some(tail), Some(head), Some(seq)) = (
            self.mem.atomic_u64(o.tail),
            self.mem.atomic_u64(o.head),
            self.mem.atomic_u32(slot),
        ) else {
            return false;
        };
        // Relaxed: a hint, as in `head_reserved`.
        let reserved = tail.load(Ordering::Relaxed).wrapping_sub(self.head);
        // Acquire: pairs with the Release CAS in `Producer::post`, as in `poll`.
        let found = seq.load(Ordering::Acquire);
        if reserved == 0 || reserved > o.cap || found == seq_for(self.head) {
            // Nothing reserved (or `tail` scribbled: producers refuse everything
            // anyway), or the entry is there for `poll`.
            self.stall = None;
            return false;
        }
        let since = match self.stall {
            Some((pos, since)) if pos == self.head => since,
            _ => {
                self.stall = Some((self.head, now));
                now
            }
        };
        if now.saturating_duration_since(since) < self.stall_bound {
            return false;
        }
        // Relaxed: the CAS only has to be ordered against the producer's CAS on the same
        // word (one modification order decides who wins); no data is handed over.
        if seq
            .compare_exchange(
                found,
                tombstone_for(self.head),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_err()
        {
            // The producer published meanwhile: `poll` takes the entry.
            return false;
        }
        self.stall = None;
        self.head = self.head.wrapping_add(1);
        // Release: pairs with the Acquire load of `head` in `Producer::post`, as in `poll`
        // (the tombstone is in place before the slot can be reserved for the next lap).
        head.store(self.head, Ordering::Release);
        if let Some(c) = self.mem.atomic_u64(o.skipped) {
            // Relaxed: a statistic. We are its only writer: load and store, no RMW.
            c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        }
        true
    }

    /// Positions skipped so far because their producer never wrote them
    /// ([`Consumer::skip_stalled`]), by this consumer and earlier ones of the queue.
    pub fn skipped(&self) -> u64 {
        // Relaxed: a statistic.
        self.mem
            .atomic_u64(self.o.skipped)
            .map_or(0, |a| a.load(Ordering::Relaxed))
    }

    /// The next entry, if one has been posted; never blocks, allocates or makes a system
    /// call.
    #[inline]
    pub fn poll(&mut self) -> Option<NotifEntry> {
        let o = &self.o;
        let slot = o.slot(self.head);
        let want = seq_for(self.head);
        // Acquire: pairs with the Release store of `seq` in `Producer::post`.
        let seq = self.mem.atomic_u32(slot)?.load(Ordering::Acquire);
        if seq != want {
            return None;
        }
        let head = self.mem.atomic_u64(o.head)?;
        let mut bytes = [0u8; NOTIF_ENTRY_LEN];
        bytes[..4].copy_from_slice(&seq.to_le_bytes());
        if !self.mem.load_bytes(slot + 4, &mut bytes[4..]) {
            return None;
        }
        self.head = self.head.wrapping_add(1);
        // Release: pairs with the Acquire load of `head` in `Producer::post`: our copy of
        // the slot is complete before any producer may reuse it.
        head.store(self.head, Ordering::Release);
        NotifEntry::read(&bytes).ok()
    }

    /// Whether `poll` would return an entry now.
    #[inline]
    pub fn ready(&self) -> bool {
        let slot = self.o.slot(self.head);
        // Acquire: pairs with the Release store of `seq` in `Producer::post`.
        self.mem
            .atomic_u32(slot)
            .is_some_and(|s| s.load(Ordering::Acquire) == seq_for(self.head))
    }

    /// Waits until an entry is ready or `timeout` passes: spins `spin` times, then sleeps
    /// on the queue's futex word until a producer wakes it (see [`crate::wake`]).
    pub fn wait_ready(
        &self,
        spin: u32,
        timeout: Option<Duration>,
    ) -> Result<WaitOutcome, WakeError> {
        match self.wake_word() {
            Some(word) => wake::wait_until(word, spin, timeout, || self.ready()),
            // Unreachable after `attach` validated the layout.
            None => Ok(WaitOutcome::TimedOut),
        }
    }

    /// [`Consumer::wait_ready`] with a spin budget that adapts to how soon entries come
    /// ([`wake::AdaptiveSpin`]).
    pub fn wait_ready_adaptive(
        &self,
        spin: &mut wake::AdaptiveSpin,
        timeout: Option<Duration>,
    ) -> Result<WaitOutcome, WakeError> {
        match self.wake_word() {
            Some(word) => wake::wait_until_adaptive(word, spin, timeout, || self.ready()),
            // Unreachable after `attach` validated the layout.
            None => Ok(WaitOutcome::TimedOut),
        }
    }

    /// [`Consumer::poll`], waiting as in [`Consumer::wait_ready`] if nothing is there yet.
    pub fn wait(
        &mut self,
        spin: u32,
        timeout: Option<Duration>,
    ) -> Result<Option<NotifEntry>, WakeError> {
        if let Some(e) = self.poll() {
            return Ok(Some(e));
        }
        self.wait_ready(spin, timeout)?;
        Ok(self.poll())
    }

    /// Event-loop mode: asks producers (those holding the port's eventfd) to poke it on
    /// their next post. Returns `true` if an entry is already waiting: poll it before
    /// going back to the event loop.
    pub fn arm_eventfd(&self) -> bool {
        match self.wake_word() {
            Some(word) => wake::arm_eventfd(word, || self.ready()),
            None => true,
        }
    }

    fn wake_word(&self) -> Option<&AtomicU32> {
        self.mem.atomic_u32(self.o.wake)
    }

    /// Posts refused so far because the queue was full (by all producers).
    pub fn overflows(&self) -> u64 {
        overflows(&self.mem, &self.o)
    }

    /// The memory the queue lives in.
    pub fn memory(&self) -> &M {
        &self.mem
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::collections::VecDeque;

    use hamlyn_wire::NotifKind;
    use proptest::prelude::*;

    use super::*;
    use crate::region::ShmRegion;

    fn notif(word: u64) -> NotifEntry {
        let mut e = NotifEntry::zeroed();
        e.kind.set(NotifKind::Fast as u16);
        e.word.set(word);
        e.slot.set(word as u32 ^ 0x5A5A);
        e.len.set(!(word as u32));
        e
    }

    fn queue(cap: u32) -> (ShmRegion, NotifLayout) {
        let l = NotifLayout::new(0, cap).expect("layout");
        (
            ShmRegion::create("hamlyn-test-notifq", l.bytes()).expect("memfd"),
            l,
        )
    }

    #[test]
    fn seq_for_is_lap_aware_and_never_zero() {
        assert_eq!(seq_for(0), 1);
        assert_eq!(seq_for(u64::from(u32::MAX)), 1);
        for cap in [2u64, 64, 1 << 24, 1 << 31] {
            for p in [
                cap,
                cap + 1,
                (1 << 32) - 1,
                1 << 32,
                (1 << 32) + 1,
                u64::MAX,
            ] {
                assert_ne!(seq_for(p), seq_for(p - cap), "cap {cap} pos {p}");
                assert_ne!(seq_for(p), 0);
            }
        }
    }

    #[test]
    fn full_is_counted_never_overwritten() {
        let (mem, l) = queue(64);
        let p = Producer::attach(&mem, l).expect("attach");
        let mut c = Consumer::attach(&mem, l).expect("attach");
        for i in 0..64 {
            p.post(&notif(i)).expect("room");
        }
        assert_eq!(p.post(&notif(99)), Err(Full));
        assert_eq!(p.post(&notif(100)), Err(Full));
        assert_eq!((p.overflows(), c.overflows()), (2, 2));
        for i in 0..64 {
            let e = c.poll().expect("posted");
            assert_eq!(e.word.get(), i);
            assert_eq!(e.seq.get(), seq_for(i));
            assert_eq!(e.kind(), Some(NotifKind::Fast));
        }
        assert_eq!(c.poll(), None);
    }

    /// A post whose read of `tail` went stale (its thread paused while others posted and
    /// the consumer took their entries, so `head` is past it) reads `tail` again and
    /// posts at the real end: it is neither refused as full nor written over a slot the
    /// consumer already passed.
    #[test]
    fn a_post_with_a_stale_tail_reads_it_again() {
        const CAP: u64 = 64;
        let (mem, l) = queue(CAP as u32);
        let p = Producer::attach(&mem, l).expect("attach");
        let mut c = Consumer::attach(&mem, l).expect("attach");
        // A lap posted and taken one by one (its posts never read `head`), then one more,
        // which does (a lap past the handle's `head_seen` of 0: it becomes CAP), taken
        // too: `head` and `tail` are CAP + 1.
        for i in 0..=CAP {
            p.post(&notif(i)).expect("room");
            assert_eq!(c.poll().expect("posted").word.get(), i);
        }
        // A post that read `tail` as 0 long ago: `head` is ahead of its guess.
        let next = CAP + 1;
        p.post_with_tail_guess(&notif(next), false, 0)
            .expect("a stale guess is not a full queue");
        let e = c.poll().expect("posted at the real end");
        assert_eq!((e.word.get(), e.seq.get()), (next, seq_for(next)));
        assert_eq!(c.poll(), None);
        assert_eq!(p.overflows(), 0);
        // The queue goes on from there: a full lap fits, one more does not.
        for i in 0..CAP {
            p.post(&notif(next + 1 + i)).expect("room");
        }
        assert_eq!(p.post(&notif(0)), Err(Full));
        for i in 0..CAP {
            assert_eq!(c.poll().expect("posted").word.get(), next + 1 + i);
        }
    }

    /// A producer that reserved a position and died (its `tail` bump is all it left):
    /// the consumer waits out the bound, skips the position, counts it, and takes the
    /// entries queued behind it; nothing is skipped before the bound or when the head
    /// entry is there.
    #[test]
    fn a_position_its_producer_never_wrote_is_skipped_after_the_bound() {
        let (mem, l) = queue(64);
        let p = Producer::attach(&mem, l).expect("attach");
        let bound = Duration::from_millis(500);
        let mut c = Consumer::attach(&mem, l)
            .expect("attach")
            .with_stall_bound(bound);
        let t0 = Instant::now();
        assert!(!c.head_reserved());
        assert!(!c.skip_stalled(t0), "nothing reserved");
        p.post(&notif(1)).expect("room");
        assert!(
            !c.skip_stalled(t0 + bound * 4),
            "a written head is never skipped"
        );
        assert_eq!(c.poll().map(|e| e.word.get()), Some(1));
        // The dying producer: reserves position 1, never writes it.
        let tail = mem.atomic_u64(header::TAIL).expect("tail");
        tail.fetch_add(1, Ordering::Relaxed);
        p.post(&notif(2)).expect("room");
        p.post(&notif(3)).expect("room");
        assert!(c.head_reserved());
        assert_eq!(
            c.poll(),
            None,
            "stalled behind the dead producer's position"
        );
        assert!(!c.skip_stalled(t0), "first sight starts the clock");
        assert!(!c.skip_stalled(t0 + bound / 2), "not before the bound");
        assert_eq!(c.skipped(), 0);
        assert!(c.skip_stalled(t0 + bound));
        assert_eq!(c.skipped(), 1);
        assert_eq!(c.poll().map(|e| e.word.get()), Some(2));
        assert_eq!(c.poll().map(|e| e.word.get()), Some(3));
        assert_eq!(c.poll(), None);
        assert!(!c.skip_stalled(t0 + bound * 2));
        // Laps later the skipped slot is reused normally.
        for i in 0..200u64 {
            p.post(&notif(100 + i)).expect("room");
            assert_eq!(c.poll().map(|e| e.word.get()), Some(100 + i));
        }
        assert_eq!((c.skipped(), c.overflows()), (1, 0));
    }

    /// A producer that reserved, was given up on, and then tries to publish: its post is
    /// refused (and counted), and the next lap's entry in that slot is not disturbed.
    #[test]
    fn a_late_producer_cannot_publish_over_a_skip() {
        let (mem, l) = queue(64);
        let p = Producer::attach(&mem, l).expect("attach");
        let mut c = Consumer::attach(&mem, l)
            .expect("attach")
            .with_stall_bound(Duration::ZERO);
        // Reserve position 0 by hand, as the late producer did before it stopped.
        let tail = mem.atomic_u64(header::TAIL).expect("tail");
        tail.fetch_add(1, Ordering::Relaxed);
        assert!(c.skip_stalled(Instant::now()));
        let seq0 = mem.atomic_u32(header::ENTRIES).expect("entry 0");
        assert_eq!(seq0.load(Ordering::Relaxed), tombstone_for(0));
        // The late producer now runs `post` for position 0: replay its reservation by
        // winding `tail` and the shared `head` back to where they were when it reserved.
        let head = mem.atomic_u64(header::HEAD).expect("head");
        tail.store(0, Ordering::Relaxed);
        head.store(0, Ordering::Relaxed);
        assert_eq!(
            p.post(&notif(99)),
            Err(Full),
            "refused, not published unseen"
        );
        assert_eq!(
            seq0.load(Ordering::Relaxed),
            tombstone_for(0),
            "tombstone kept"
        );
        assert_eq!(p.overflows(), 1, "the refusal is counted");
        head.store(1, Ordering::Relaxed);
        // Fill one lap so position 64 reuses slot 0, then check it is taken intact.
        for i in 1..=64u64 {
            p.post(&notif(i)).expect("room");
            assert_eq!(c.poll().map(|e| e.word.get()), Some(i));
        }
        assert_eq!(c.skipped(), 1);
    }

    /// A memory that runs `hook` once, inside the first `store_bytes`: in a post, between
    /// the reservation and the publishing CAS, where a producer that is stopped stays.
    struct StopsMidPost<'a> {
        mem: &'a ShmRegion,
        hook: std::cell::RefCell<Option<Box<dyn FnOnce() + 'a>>>,
    }

    impl RingMemory for StopsMidPost<'_> {
        fn len(&self) -> usize {
            RingMemory::len(self.mem)
        }
        fn atomic_u32(&self, off: usize) -> Option<&crate::sync::AtomicU32> {
            RingMemory::atomic_u32(self.mem, off)
        }
        fn atomic_u64(&self, off: usize) -> Option<&crate::sync::AtomicU64> {
            RingMemory::atomic_u64(self.mem, off)
        }
        fn load_bytes(&self, off: usize, dst: &mut [u8]) -> bool {
            RingMemory::load_bytes(self.mem, off, dst)
        }
        fn store_bytes(&self, off: usize, src: &[u8]) -> bool {
            let ok = RingMemory::store_bytes(self.mem, off, src);
            if let Some(h) = self.hook.borrow_mut().take() {
                h();
            }
            ok
        }
    }

    /// A producer stopped mid-post past the stall bound, while the consumer skips its
    /// position and a whole lap more is posted (the lap's last entry in its slot): when
    /// it resumes, its post is refused and counted, and the next lap's entry is
    /// received. Publishing from whatever the slot held (as a build of 2026-11-25 did)
    /// returned Ok for the late post and lost the next lap's entry (review, found by
    /// this test).
    #[test]
    fn a_producer_stopped_for_a_lap_cannot_publish_over_the_next_laps_entry() {
        const CAP: u64 = 64;
        let (mem, l) = queue(CAP as u32);
        let consumer = std::cell::RefCell::new(
            Consumer::attach(&mem, l)
                .expect("attach")
                .with_stall_bound(Duration::ZERO),
        );
        let polled = std::cell::RefCell::new(Vec::new());
        let other = Producer::attach(&mem, l).expect("attach");
        let stops = StopsMidPost {
            mem: &mem,
            hook: std::cell::RefCell::new(None),
        };
        *stops.hook.borrow_mut() = Some(Box::new(|| {
            let mut c = consumer.borrow_mut();
            assert!(c.skip_stalled(Instant::now()), "position 0 given up");
            // A whole lap: the last of it lands in slot 0, which the stopped post holds.
            for w in 1..=CAP {
                other.post(&notif(w)).expect("room");
                if w < CAP {
                    polled
                        .borrow_mut()
                        .push(c.poll().expect("posted").word.get());
                }
            }
        }));
        let late = Producer::attach(&stops, l).expect("attach");
        assert_eq!(late.post(&notif(0)), Err(Full), "the late post is refused");
        drop(late);
        drop(stops);
        let mut c = consumer.into_inner();
        let mut polled = polled.into_inner();
        while let Some(e) = c.poll() {
            polled.push(e.word.get());
        }
        assert_eq!(
            polled,
            (1..=CAP).collect::<Vec<_>>(),
            "the next lap's entry"
        );
        assert_eq!((c.skipped(), c.overflows()), (1, 1));
    }

    #[test]
    fn tombstones_never_read_as_written() {
        for cap in [4u64, 64, 1 << 24, 1 << 31] {
            for p in [
                0,
                1,
                cap - 1,
                (1 << 32) - cap - 1,
                (1 << 32) - 2,
                (1 << 32) - 1,
                1 << 32,
                u64::MAX - cap,
            ] {
                let t = tombstone_for(p);
                assert_ne!(t, seq_for(p), "cap {cap} pos {p}");
                assert_ne!(t, seq_for(p + cap), "cap {cap} pos {p}");
                assert_ne!(t, tombstone_for(p + cap), "cap {cap} pos {p}");
            }
        }
    }

    #[test]
    fn threads_many_producers_each_entry_once() {
        let (mem, l) = queue(64);
        const PER: u64 = 20_000;
        let mut c = Consumer::attach(&mem, l).expect("attach");
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let p = Producer::attach(&mem, l).expect("attach");
                s.spawn(move || {
                    let mut i = 0;
                    while i < PER {
                        match p.post(&notif(t << 32 | i)) {
                            Ok(()) => i += 1,
                            Err(Full) => std::thread::yield_now(),
                        }
                    }
                });
            }
            let mut next = [0u64; 2];
            while next.iter().sum::<u64>() < 2 * PER {
                match c.wait(64, Some(Duration::from_secs(10))) {
                    Ok(Some(e)) => {
                        let w = e.word.get();
                        let (t, i) = ((w >> 32) as usize, w & 0xFFFF_FFFF);
                        assert_eq!(i, next[t], "per-producer FIFO, each entry once");
                        assert_eq!(e.slot.get(), w as u32 ^ 0x5A5A, "untorn");
                        next[t] += 1;
                    }
                    Ok(None) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        });
        assert_eq!(c.poll(), None);
    }

    #[test]
    fn eventfd_mode() {
        let (mem, l) = queue(64);
        let (efd2, efd) = EventFd::pair().expect("wake-up channel");
        let p = Producer::attach(&mem, l)
            .expect("attach")
            .with_eventfd(efd2);
        let mut c = Consumer::attach(&mem, l).expect("attach");
        assert!(!c.arm_eventfd());
        p.post(&notif(1)).expect("room");
        p.post(&notif(2)).expect("room");
        assert_eq!(efd.drain(), Ok(1), "one poke for two posts");
        assert_eq!(c.poll().map(|e| e.word.get()), Some(1));
        assert!(c.arm_eventfd(), "entry 2 is already waiting");
        assert_eq!(c.poll().map(|e| e.word.get()), Some(2));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Post { producer: usize, word: u64 },
        Poll,
    }

    proptest! {
        /// The queue behaves like a bounded VecDeque with an overflow counter, whichever
        /// producer handle posts, across many laps, and after the consumer re-attaches.
        #[test]
        fn matches_model(
            ops in proptest::collection::vec(
                prop_oneof![
                    (0usize..3, any::<u64>())
                        .prop_map(|(producer, word)| Op::Post { producer, word }),
                    Just(Op::Poll),
                ],
                1..800,
            ),
            reattach_at in 0usize..800,
        ) {
            let (mem, l) = queue(64);
            let ps: Vec<_> = (0..3).map(|_| Producer::attach(&mem, l).expect("attach")).collect();
            let mut c = Consumer::attach(&mem, l).expect("attach");
            let mut model = VecDeque::new();
            let mut overflow = 0u64;
            let mut consumed = 0u64;
            for (i, op) in ops.into_iter().enumerate() {
                if i == reattach_at {
                    c = Consumer::attach(&mem, l).expect("attach");
                }
                match op {
                    Op::Post { producer, word } => {
                        let got = ps[producer].post(&notif(word));
                        if model.len() == 64 {
                            prop_assert_eq!(got, Err(Full));
                            overflow += 1;
                        } else {
                            prop_assert_eq!(got, Ok(()));
                            model.push_back(word);
                        }
                    }
                    Op::Poll => {
                        prop_assert_eq!(c.ready(), !model.is_empty());
                        let got = c.poll();
                        match model.pop_front() {
                            None => prop_assert_eq!(got, None),
                            Some(w) => {
                                let mut want = notif(w);
                                want.seq.set(seq_for(consumed));
                                consumed += 1;
                                prop_assert_eq!(got, Some(want));
                            }
                        }
                    }
                }
                prop_assert_eq!(c.overflows(), overflow);
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use std::sync::Arc;

    use super::*;
    use crate::memory::LoomMemory;

    fn notif(word: u64) -> NotifEntry {
        let mut e = NotifEntry::zeroed();
        e.word.set(word);
        e.src_node.set(word as u32);
        e.len.set(!(word as u32));
        e
    }

    /// Two producers post two entries each into a 2-entry queue while the consumer polls:
    /// every post either returned Full (and was counted) or is received exactly once,
    /// whole, in its producer's order; nothing is overwritten. Were `seq` written before the
    /// rest of the entry, the consumer's copy would race the producer's write of a loom
    /// cell and fail the model.
    #[test]
    fn loom_notifq_two_producers_exactly_once() {
        crate::loom_model(|| {
            let l = NotifLayout::new(0, 2).expect("layout");
            let mem = Arc::new(LoomMemory::new(l.bytes()));
            let c = Consumer::attach(mem.clone(), l).expect("attach");
            let check = |e: &NotifEntry| {
                let w = e.word.get();
                assert_eq!(
                    (e.src_node.get(), e.len.get()),
                    (w as u32, !(w as u32)),
                    "untorn"
                );
                w
            };
            let ts: Vec<_> = (0..2u64)
                .map(|t| {
                    let p = Producer::attach(mem.clone(), l).expect("attach");
                    loom::thread::spawn(move || {
                        let mut ok = Vec::new();
                        for i in 0..2u64 {
                            let w = t * 10 + i;
                            if p.post(&notif(w)).is_ok() {
                                ok.push(w);
                            }
                        }
                        ok
                    })
                })
                .collect();
            // The consumer's polls during the posts run in a thread of their own: on the
            // main thread, loom 0.7 never ran them after a producer's first step (its
            // first look, a load, was hidden behind the producers' own loads), so every
            // entry was received after the joins, and a consumer that stored `head`
            // before copying the slot passed (audit, 2026-11-25).
            let consumer = loom::thread::spawn(move || {
                let mut c = c;
                let mut got = Vec::new();
                for _ in 0..2 {
                    if let Some(e) = c.poll() {
                        got.push(check(&e));
                    }
                }
                (c, got)
            });
            let (mut c, mut got) = consumer.join().expect("consumer");
            let mut posted = Vec::new();
            for t in ts {
                posted.extend(t.join().expect("producer"));
            }
            while let Some(e) = c.poll() {
                got.push(check(&e));
            }
            let refused = 4 - posted.len() as u64;
            assert_eq!(c.overflows(), refused);
            let mut sorted = got.clone();
            sorted.sort_unstable();
            posted.sort_unstable();
            assert_eq!(sorted, posted, "each successful post received exactly once");
            for t in 0..2u64 {
                let mine: Vec<_> = got.iter().filter(|w| **w / 10 == t).collect();
                assert!(mine.windows(2).all(|w| w[0] < w[1]), "per-producer order");
            }
        });
    }

    /// One producer handle shared by two threads (as the engine's and a direct sender's
    /// are): the head one thread read and cached in the handle lets the other reuse a
    /// slot only after the consumer's copy out of it. Each thread posts twice into a
    /// 2-entry queue while the consumer polls twice; every successful post is received
    /// once and whole. Were the cached head stored and loaded Relaxed, the second
    /// thread's write of a reused slot would race the consumer's copy of it (a loom
    /// cell), which the model finds.
    #[test]
    fn loom_notifq_one_handle_two_threads_reuse_after_the_copy() {
        crate::loom_model(|| {
            let l = NotifLayout::new(0, 2).expect("layout");
            let mem = Arc::new(LoomMemory::new(l.bytes()));
            let c = Consumer::attach(mem.clone(), l).expect("attach");
            let p = Arc::new(Producer::attach(mem.clone(), l).expect("attach"));
            let consumer = loom::thread::spawn(move || {
                let mut c = c;
                let mut got = Vec::new();
                for _ in 0..2 {
                    if let Some(e) = c.poll() {
                        got.push(e.word.get());
                    }
                }
                (c, got)
            });
            let ts: Vec<_> = (0..2u64)
                .map(|t| {
                    let p = p.clone();
                    loom::thread::spawn(move || {
                        (0..2u64)
                            .map(|i| t * 10 + i)
                            .filter(|w| p.post(&notif(*w)).is_ok())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let (mut c, mut got) = consumer.join().expect("consumer");
            let mut posted = Vec::new();
            for t in ts {
                posted.extend(t.join().expect("producer"));
            }
            while let Some(e) = c.poll() {
                let w = e.word.get();
                assert_eq!((e.src_node.get(), e.len.get()), (w as u32, !(w as u32)));
                got.push(w);
            }
            assert_eq!(c.overflows(), 4 - posted.len() as u64);
            got.sort_unstable();
            posted.sort_unstable();
            assert_eq!(got, posted, "each successful post received exactly once");
        });
    }

    /// A producer that is slow between reserving and publishing, and a consumer that
    /// gives up on it the moment it sees the reservation (stall bound zero): exactly one
    /// side wins. Either the post succeeded and the consumer takes the entry whole, or
    /// the post was refused (and counted) and the position was skipped (and counted);
    /// never both, never neither; a second entry behind it is received either way. With
    /// a plain `seq` store instead of the producer's CAS, a late publish lands over the
    /// tombstone: the post reports success and the entry is never received, which the
    /// model finds.
    #[test]
    fn loom_notifq_skip_races_a_late_producer() {
        crate::loom_model(|| {
            let l = NotifLayout::new(0, 2).expect("layout");
            let mem = Arc::new(LoomMemory::new(l.bytes()));
            let mut c = Consumer::attach(mem.clone(), l)
                .expect("attach")
                .with_stall_bound(Duration::ZERO);
            let p = Producer::attach(mem.clone(), l).expect("attach");
            let t = loom::thread::spawn(move || p.post(&notif(1)).is_ok());
            let mut got = Vec::new();
            let mut skips = 0;
            loop {
                if let Some(e) = c.poll() {
                    got.push(e.word.get());
                    break;
                }
                if c.head_reserved() && c.skip_stalled(std::time::Instant::now()) {
                    skips += 1;
                    break;
                }
                loom::thread::yield_now();
            }
            let posted = t.join().expect("producer");
            let p = Producer::attach(mem.clone(), l).expect("attach");
            p.post(&notif(2)).expect("room behind");
            while let Some(e) = c.poll() {
                got.push(e.word.get());
            }
            assert_eq!(got.contains(&1), posted, "a successful post is received");
            assert_eq!(got.last(), Some(&2), "the entry behind is received");
            assert_eq!((c.skipped(), c.overflows()), (skips, u64::from(!posted)));
            assert_eq!(
                skips,
                u64::from(!posted),
                "a refused post is a skipped position"
            );
        });
    }

    /// Direct slots' group receive (DESIGN §2, §3): two depositors, say the engine and a
    /// direct sender in another process, each write their part of a message, then add
    /// their share to the entry's 32-bit accumulator, and the one whose add returns it to
    /// 0 posts the notification. The consumer, woken by the post, must then see both
    /// parts, including the one written by the depositor that did not post.
    ///
    /// This models `hamlyn_core::count_packet` as the engine (`ShmMem::fetch_add_u32`)
    /// and the library's direct sender (`direct::Entries::add_u32_at`) run it: payload
    /// first, then an AcqRel add, then `Producer::post`. With a Release-only or Relaxed
    /// add, the non-posting depositor's payload would not happen-before the consumer's
    /// read, and loom reports the race on its cell.
    #[test]
    fn loom_group_deposits_counted_then_notified() {
        crate::loom_model(|| {
            let l = NotifLayout::new(0, 2).expect("layout");
            let acc_off = l.bytes();
            let part = move |i: usize| acc_off + 8 + 8 * i;
            let mem = Arc::new(LoomMemory::new(acc_off + 8 + 16));
            let mut c = Consumer::attach(mem.clone(), l).expect("attach");
            let shares = [1u32 << 31, 1u32 << 31];
            let ts: Vec<_> = (0..2usize)
                .map(|i| {
                    let p = Producer::attach(mem.clone(), l).expect("attach");
                    let mem = mem.clone();
                    loom::thread::spawn(move || {
                        assert!(mem.store_bytes(part(i), &[i as u8 + 1; 8]));
                        let acc = mem.atomic_u32(acc_off).expect("accumulator");
                        // AcqRel: as in the real depositors (see the test's doc).
                        let old = acc.fetch_add(shares[i], Ordering::AcqRel);
                        if old.wrapping_add(shares[i]) == 0 {
                            p.post(&notif(7)).expect("room");
                        }
                    })
                })
                .collect();
            // Lets loom run the depositors before the consumer's first look (a load):
            // without it, it found a weakened accumulator only at iteration 425.
            loom::thread::yield_now();
            let mut got = None;
            while got.is_none() {
                got = c.wait(0, None).expect("futex model");
            }
            assert_eq!(got.map(|e| e.word.get()), Some(7));
            for i in 0..2 {
                let mut b = [0u8; 8];
                assert!(mem.load_bytes(part(i), &mut b));
                assert_eq!(b, [i as u8 + 1; 8], "every part is in place");
            }
            for t in ts {
                t.join().expect("depositor");
            }
            assert!(c.poll().is_none(), "one notification for the group");
        });
    }

    /// The queue's own sleep/wake: a consumer that waits (no spinning, no timeout) while a
    /// producer posts is always woken or finds the entry; a lost wakeup would deadlock the
    /// futex model.
    #[test]
    fn loom_notifq_wait_is_woken() {
        crate::loom_model(|| {
            let l = NotifLayout::new(0, 2).expect("layout");
            let mem = Arc::new(LoomMemory::new(l.bytes()));
            let mut c = Consumer::attach(mem.clone(), l).expect("attach");
            let p = Producer::attach(mem, l).expect("attach");
            let t = loom::thread::spawn(move || p.post(&notif(7)).is_ok());
            let mut got = None;
            while got.is_none() {
                got = c.wait(0, None).expect("futex model");
            }
            assert_eq!(got.map(|e| e.word.get()), Some(7));
            assert!(t.join().expect("producer"));
        });
    }
}
