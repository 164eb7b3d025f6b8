//! Notification queues: where the engine reports arrivals (seed 000 §2.6, §3.2 `h_recv`,
//! `h_recv_block`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hamlyn_shm::notifq;
use hamlyn_shm::region::ShmRegion;
use hamlyn_shm::wake::AdaptiveSpin;
use hamlyn_wire::{NodeId, NotifEntry, NotifKind, SlotId, FAST_META_INDEX};

use crate::area::MetaArea;
use crate::error::Error;
use crate::node::Shared;
use crate::slot::Slot;
use crate::terminus::RequestRef;

/// What a notification reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotificationKind {
    /// Every packet of a message arrived; its metadata entry is complete.
    Message,
    /// A fast-mode message arrived; [`Notification::word`] is its metadata.
    Fast,
    /// A peer with partial messages to this queue is gone.
    PeerDown,
    /// A remote read's reply landed; [`Notification::request`] names the read
    /// ([`crate::Terminus::read`]), the word is its wire request id.
    ReadDone,
    /// A remote atomic's old value landed; the word is that value and
    /// [`Notification::request`] names the atomic ([`crate::Terminus::compare_swap`],
    /// [`crate::Terminus::fetch_add`]).
    AtomicDone,
    /// Notifications were lost to a full queue; the word says how many.
    Overflow,
    /// A kind this library does not know (the raw code).
    Unknown(u16),
}

/// One arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Notification {
    /// What happened.
    pub kind: NotificationKind,
    /// The slot the message arrived in.
    pub slot: SlotId,
    /// The message's metadata entry (slot-relative index), `None` in fast mode.
    pub meta_index: Option<u32>,
    /// The tag, the fast-mode metadata, or a count, depending on the kind.
    pub word: u64,
    /// The sending node.
    pub src_node: NodeId,
    /// [`NotificationKind::Message`]: the whole message's (or group's) payload bytes,
    /// modulo 2^32; [`NotificationKind::Fast`]: its one packet's; for
    /// [`NotificationKind::ReadDone`] and [`NotificationKind::AtomicDone`], the sequence
    /// number of the request answered (see [`Notification::request`]).
    pub len: u32,
    /// Header flags of that packet.
    pub flags: u16,
    /// The request this notification answers: `Some` for
    /// [`NotificationKind::ReadDone`] and [`NotificationKind::AtomicDone`], equal to the
    /// [`crate::SendHandle::request`] of the read or atomic; `None` for the other kinds.
    pub request: Option<RequestRef>,
    /// [`NotificationKind::Message`] (and the answers to reads and atomics) in a slot the
    /// queue reads entries of ([`NotifyQueue::read_entries_of`]): the owner's cookie of the message's metadata
    /// entry ([`crate::MetaArea::set_cookie`], the paper's receive-class pointer);
    /// otherwise `None`.
    pub cookie: Option<u64>,
    /// As `cookie`: the message's first byte, slot-relative (the lowest first offset of a
    /// group's members).
    pub offset: Option<u64>,
}

impl Notification {
    /// Decodes a queue entry (every bit pattern decodes).
    pub fn from_entry(e: &NotifEntry) -> Notification {
        let raw = e.kind.get();
        let kind = match NotifKind::from_u16(raw) {
            Some(NotifKind::Message) => NotificationKind::Message,
            Some(NotifKind::Fast) => NotificationKind::Fast,
            Some(NotifKind::PeerDown) => NotificationKind::PeerDown,
            Some(NotifKind::ReadDone) => NotificationKind::ReadDone,
            Some(NotifKind::AtomicDone) => NotificationKind::AtomicDone,
            Some(NotifKind::Overflow) => NotificationKind::Overflow,
            _ => NotificationKind::Unknown(raw),
        };
        let mi = e.meta_index.get();
        let raw_flags = e.flags.get();
        // An answer names its request: sequence in `len`, terminus index in the high byte
        // of `flags` (header flags use the low byte only).
        let request = matches!(
            kind,
            NotificationKind::ReadDone | NotificationKind::AtomicDone
        )
        .then(|| RequestRef {
            terminus: raw_flags >> 8,
            seq: e.len.get(),
        });
        Notification {
            kind,
            slot: SlotId(e.slot.get()),
            meta_index: (mi != FAST_META_INDEX).then_some(mi),
            word: e.word.get(),
            src_node: NodeId(e.src_node.get()),
            len: e.len.get(),
            flags: raw_flags & 0xFF,
            request,
            cookie: None,
            offset: None,
        }
    }
}

/// The consumer of one notification queue of the port. A single-owner handle (one per
/// queue, `&mut self`); it can move to another thread.
#[must_use = "dropping a NotifyQueue gives the queue back: arrivals wait there unread"]
pub struct NotifyQueue {
    shared: Arc<Shared>,
    index: u16,
    consumer: notifq::Consumer<Arc<ShmRegion>>,
    /// Slots whose messages' entries this queue reads (cookie, first offset), by id.
    entries: HashMap<u32, MetaArea, BuildSlotHasher>,
    /// Bit `id % 64` of every slot in `entries`: a clear bit says a notification's slot
    /// is not there without a lookup (a poll of a slot whose entries are not read pays
    /// two instructions for the others').
    entry_bits: u64,
    /// Polls that found nothing, to look for a dead producer only every so often.
    misses: u32,
    /// How long a wait spins before it sleeps: from [`crate::NodeOptions::spin`] polls
    /// up to [`SPIN_REACH`] of spinning, adapted to how soon notifications come.
    spin: AdaptiveSpin,
}

/// Hashes the slot ids of [`NotifyQueue`]'s entry map on the receive fast path: one
/// multiply (Fibonacci hashing) where the default SipHash costs about a hundred
/// instructions a poll. The keys are this process's own slots (it chooses which
/// queues read entries); a notification's slot id only looks one up.
#[derive(Clone, Copy, Debug, Default)]
struct SlotHasher(u64);

impl std::hash::Hasher for SlotHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type BuildSlotHasher = std::hash::BuildHasherDefault<SlotHasher>;

/// A slot's bit in [`NotifyQueue`]'s filter of the slots whose entries it reads.
#[inline]
fn slot_bit(slot: u32) -> u64 {
    1 << (slot % 64)
}

/// How long after a wait's start a notification may come for a queue's spin budget to
/// grow ([`AdaptiveSpin`]): a waiter spins at most this long before it sleeps, and only
/// while notifications come this soon. KVM's halt polling uses 200 µs; an idle vCPU
/// here takes ~28 µs to wake, so a ping-pong's two wake-ups fit.
pub const SPIN_REACH: Duration = Duration::from_micros(100);

/// The environment variable that turns off the adaptive spin budget of every queue (and
/// of every terminus's [`crate::Terminus::wait_room`]): `0` leaves the budget fixed at
/// [`crate::NodeOptions::spin`] polls. Unset, or
/// anything else, the budget adapts (the default since 2026-11-25; docs/PERFORMANCE.md,
/// "Tails", has the measurements for and against).
pub const ADAPTIVE_SPIN_ENV: &str = "HAMLYN_ADAPTIVE_SPIN";

/// A queue's (or a terminus's wait for room's) spin budget: adaptive unless
/// [`ADAPTIVE_SPIN_ENV`] is `0`.
pub(crate) fn spin_policy(spin: u32) -> AdaptiveSpin {
    let adaptive = std::env::var_os(ADAPTIVE_SPIN_ENV).is_none_or(|v| v != "0");
    let reach = if adaptive { SPIN_REACH } else { Duration::ZERO };
    AdaptiveSpin::new(spin, reach)
}

/// [`NotifyQueue::poll`] looks for a producer that died mid-post once per this many
/// empty polls (a load of a line producers write, kept off the spinning path).
const DEAD_PRODUCER_CHECK: u32 = 64;

impl std::fmt::Debug for NotifyQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyQueue")
            .field("node", &self.shared.node)
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl NotifyQueue {
    pub(crate) fn new(shared: Arc<Shared>, index: u16) -> Result<NotifyQueue, Error> {
        let count = shared.layout.geometry.queues;
        let layout = *shared
            .layout
            .queues
            .get(usize::from(index))
            .ok_or(Error::NoSuchQueue { index, count })?;
        let consumer = notifq::Consumer::attach(shared.queue_file.clone(), layout)?;
        let spin = spin_policy(shared.options.spin);
        Ok(NotifyQueue {
            shared,
            index,
            consumer,
            entries: HashMap::default(),
            entry_bits: 0,
            misses: 0,
            spin,
        })
    }

    /// From now on, [`NotificationKind::Message`] notifications of `slot` (and answers to
    /// reads and atomics landing in it) carry their
    /// metadata entry's cookie and the message's first offset
    /// ([`Notification::cookie`], [`Notification::offset`]), read from the slot's
    /// metadata area (this process's own memory: no system call) when the notification
    /// is taken. The entry must not be reused by another message before then: a
    /// protocol that recycles entries on release (as `hamlyn-rats` does) ensures it.
    /// A slot without a metadata area is [`Error::InvalidArgument`].
    pub fn read_entries_of(&mut self, slot: &Slot) -> Result<(), Error> {
        let meta = slot.meta_area().ok_or(Error::InvalidArgument(
            "the slot has no metadata area to read entries of",
        ))?;
        self.entries.insert(slot.id().0, meta.clone());
        self.entry_bits |= slot_bit(slot.id().0);
        Ok(())
    }

    /// Stops reading the entries of the slot `slot` names (e.g. before it is destroyed).
    pub fn forget_entries_of(&mut self, slot: SlotId) {
        if self.entries.remove(&slot.0).is_some() {
            self.entry_bits = self.entries.keys().fold(0, |bits, &k| bits | slot_bit(k));
        }
    }

    /// Fills the cookie and first offset of a message notification of a slot whose
    /// entries this queue reads.
    #[inline]
    fn resolve(&self, mut n: Notification) -> Notification {
        let has_entry = matches!(
            n.kind,
            NotificationKind::Message | NotificationKind::ReadDone | NotificationKind::AtomicDone
        );
        if !has_entry || self.entry_bits & slot_bit(n.slot.0) == 0 {
            return n;
        }
        if let (Some(meta), Some(index)) = (self.entries.get(&n.slot.0), n.meta_index) {
            n.cookie = meta.cookie(index).ok();
            n.offset = meta.message_offset(index).ok();
        }
        n
    }

    /// The queue's index in the port (what [`crate::SlotBuilder::queue`] takes).
    pub fn index(&self) -> u16 {
        self.index
    }

    /// The next notification, if there is one: never blocks, allocates or makes a system
    /// call.
    ///
    /// A producer (a direct sender, say) that died between reserving an entry and writing
    /// it would hold back every notification behind that entry; once the entry has stayed
    /// unwritten for [`hamlyn_shm::notifq::DEFAULT_STALL_BOUND`], polls and waits skip it
    /// and count it in [`NotifyQueue::skipped`].
    #[inline]
    pub fn poll(&mut self) -> Option<Notification> {
        match self.consumer.poll() {
            Some(e) => Some(self.resolve(Notification::from_entry(&e))),
            None => self.poll_past_a_dead_producer(),
        }
    }

    /// The empty-poll path: every [`DEAD_PRODUCER_CHECK`] misses, skips an entry whose
    /// producer reserved it and never wrote it, and polls again.
    #[cold]
    fn poll_past_a_dead_producer(&mut self) -> Option<Notification> {
        self.misses = self.misses.wrapping_add(1);
        if self.misses % DEAD_PRODUCER_CHECK != 0 {
            return None;
        }
        self.skip_dead_producer()
    }

    /// Skips the head entry if its producer has left it reserved and unwritten for the
    /// stall bound, and polls again.
    fn skip_dead_producer(&mut self) -> Option<Notification> {
        if !self.consumer.head_reserved() || !self.consumer.skip_stalled(std::time::Instant::now())
        {
            return None;
        }
        let n = self.consumer.poll().map(|e| Notification::from_entry(&e))?;
        Some(self.resolve(n))
    }

    /// Entries skipped because their producer reserved them and never wrote them (it
    /// died mid-post): each such post was refused to its producer, never half-delivered.
    pub fn skipped(&self) -> u64 {
        self.consumer.skipped()
    }

    /// The next notification, waiting up to `timeout` (`None`: forever) for one: spins
    /// briefly, then sleeps on the queue's futex until the engine posts (no core burnt).
    /// `Ok(None)` on timeout. The spin lasts [`crate::NodeOptions::spin`] polls, and
    /// (unless [`ADAPTIVE_SPIN_ENV`] is `0`) up to [`SPIN_REACH`] of spinning while notifications
    /// come soon after waits start (so that a steady exchange is not slowed by a wake-up
    /// on every gap); a wait that sleeps long brings it back down.
    ///
    /// If the engine dies meanwhile, the wait ends with [`Error::EngineGone`] (within a
    /// tenth of a second while asleep), after the notifications already posted.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<Option<Notification>, Error> {
        // Already there: no clock read, no reference count touched.
        if let Some(n) = self.poll() {
            return Ok(Some(n));
        }
        let (shared, consumer, adaptive) = (&self.shared, &mut self.consumer, &mut self.spin);
        // This process hosts the engine: run its turns instead of spinning idle.
        let spin = shared.options.spin;
        let spin = match shared.drive_until(spin, timeout, true, || consumer.poll()) {
            Ok(e) => return Ok(Some(self.resolve(Notification::from_entry(&e)))),
            Err(spin) => spin,
        };
        let got = shared.wait_sliced(spin, timeout, |spin, slice| {
            // The first slice spins (unless a drive used the budget up turning), with the
            // adaptive budget; later slices only sleep.
            let e = if spin > 0 {
                consumer.wait_ready_adaptive(adaptive, Some(slice))?;
                consumer.poll()
            } else {
                consumer.wait(0, Some(slice))?
            };
            if let Some(e) = e {
                return Ok(Some(e));
            }
            // A slice passed with nothing to take: perhaps a producer died mid-post.
            let skipped =
                consumer.head_reserved() && consumer.skip_stalled(std::time::Instant::now());
            Ok(if skipped { consumer.poll() } else { None })
        });
        match got {
            Ok(e) => Ok(e.map(|e| self.resolve(Notification::from_entry(&e)))),
            Err(Error::EngineGone) => match self.poll() {
                Some(n) => Ok(Some(n)),
                None => Err(Error::EngineGone),
            },
            Err(e) => Err(e),
        }
    }

    /// Event-loop mode: asks the engine (and direct senders) to make
    /// [`crate::Node::event_fd`] readable on its next post to this queue. Returns `true` if a notification is already waiting: poll
    /// it before going back to the event loop.
    pub fn arm(&self) -> bool {
        self.consumer.arm_eventfd()
    }

    /// Notifications the engine (or a direct sender, [`crate::DirectTarget`]) could not
    /// post because the queue was full (never overwritten; a slot's senders see their
    /// messages complete regardless).
    pub fn overflows(&self) -> u64 {
        self.consumer.overflows()
    }
}

impl Drop for NotifyQueue {
    fn drop(&mut self) {
        self.shared.release_queue(self.index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fake_node;
    use crate::NodeOptions;
    use std::time::Instant;

    fn producer(fake: &crate::testing::FakeEngine, i: u16) -> notifq::Producer<Arc<ShmRegion>> {
        notifq::Producer::attach(fake.queue_file.clone(), fake.layout.queues[usize::from(i)])
            .unwrap()
    }

    fn entry(kind: u16, word: u64) -> NotifEntry {
        let mut e = NotifEntry::zeroed();
        e.kind.set(kind);
        e.slot.set(5);
        e.meta_index.set(3);
        e.word.set(word);
        e.src_node.set(7);
        e.len.set(8);
        e
    }

    #[test]
    fn entries_decode_into_notifications() {
        let n = Notification::from_entry(&entry(NotifKind::Message as u16, 42));
        assert_eq!(
            n,
            Notification {
                kind: NotificationKind::Message,
                slot: SlotId(5),
                meta_index: Some(3),
                word: 42,
                src_node: NodeId(7),
                len: 8,
                flags: 0,
                request: None,
                cookie: None,
                offset: None,
            }
        );
        let mut f = entry(NotifKind::Fast as u16, 1);
        f.meta_index.set(FAST_META_INDEX);
        let n = Notification::from_entry(&f);
        assert_eq!((n.kind, n.meta_index), (NotificationKind::Fast, None));
        let n = Notification::from_entry(&entry(77, 0));
        assert_eq!(n.kind, NotificationKind::Unknown(77));
    }

    #[test]
    fn answers_name_the_request_they_answer() {
        for (kind, want) in [
            (NotifKind::ReadDone, NotificationKind::ReadDone),
            (NotifKind::AtomicDone, NotificationKind::AtomicDone),
        ] {
            let mut e = entry(kind as u16, 41);
            e.flags.set((5 << 8) | 0x23);
            e.len.set(0x1_0002);
            let n = Notification::from_entry(&e);
            assert_eq!(n.kind, want);
            assert_eq!(
                n.request,
                Some(RequestRef {
                    terminus: 5,
                    seq: 0x1_0002
                })
            );
            assert_eq!(
                (n.word, n.flags),
                (41, 0x23),
                "the old value, the packet's flags"
            );
        }
        let n = Notification::from_entry(&entry(NotifKind::Message as u16, 1));
        assert_eq!(n.request, None, "only answers name a request");
    }

    #[test]
    fn poll_wait_and_overflow() {
        let (node, fake) = fake_node(NodeOptions {
            queue_cap: 64,
            ..NodeOptions::default()
        });
        let mut q = node.queue(1).unwrap();
        let p = producer(&fake, 1);
        assert_eq!(q.poll(), None);
        let t0 = Instant::now();
        assert_eq!(q.wait(Some(Duration::from_millis(20))).unwrap(), None);
        assert!(t0.elapsed() >= Duration::from_millis(20));
        p.post(&entry(NotifKind::Message as u16, 9)).unwrap();
        assert_eq!(q.poll().map(|n| n.word), Some(9));
        // A sleeping waiter is woken by the post.
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                p.post(&entry(NotifKind::Message as u16, 10)).unwrap();
            });
            let n = q.wait(Some(Duration::from_secs(10))).unwrap();
            assert_eq!(n.map(|n| n.word), Some(10));
        });
        for i in 0..64 {
            p.post(&entry(NotifKind::Message as u16, i)).unwrap();
        }
        assert!(p.post(&entry(NotifKind::Message as u16, 64)).is_err());
        assert_eq!(q.overflows(), 1);
        for i in 0..64 {
            assert_eq!(q.poll().map(|n| n.word), Some(i), "never overwritten");
        }
    }

    /// A producer that reserved an entry and died before writing it (all it left is its
    /// bump of `tail`): a waiter with no deadline and a poller both get past it after the
    /// stall bound, take what was posted behind it, and count it.
    #[test]
    fn a_producer_dead_mid_post_holds_the_queue_only_for_the_bound() {
        use hamlyn_shm::memory::RingMemory;
        use hamlyn_shm::notifq::header;
        use hamlyn_shm::sync::Ordering;
        let (node, fake) = fake_node(NodeOptions::default());
        let mut q = node.queue(0).unwrap();
        let p = producer(&fake, 0);
        let tail = fake
            .queue_file
            .atomic_u64(fake.layout.queues[0].offset() + header::TAIL)
            .unwrap();
        // The wait: no deadline, so only the skip can end it.
        tail.fetch_add(1, Ordering::Relaxed);
        p.post(&entry(NotifKind::Message as u16, 1)).unwrap();
        let n = q.wait(None).unwrap();
        assert_eq!(n.map(|n| n.word), Some(1));
        assert_eq!(q.skipped(), 1);
        // The poll loop.
        tail.fetch_add(1, Ordering::Relaxed);
        p.post(&entry(NotifKind::Message as u16, 2)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let got = loop {
            if let Some(n) = q.poll() {
                break n.word;
            }
            assert!(Instant::now() < deadline, "the poller never got past");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!((got, q.skipped(), q.overflows()), (2, 2, 0));
    }

    #[test]
    fn armed_queue_makes_the_port_eventfd_readable() {
        let (node, fake) = fake_node(NodeOptions::default());
        let q = node.queue(0).unwrap();
        let efd = hamlyn_shm::wake::EventFd::from_fd(
            rustix::io::fcntl_dupfd_cloexec(&fake.event, 0).unwrap(),
        );
        let p = producer(&fake, 0).with_eventfd(efd);
        assert!(!q.arm(), "nothing waiting yet");
        p.post(&entry(NotifKind::Fast as u16, 1)).unwrap();
        let fd = node.event_fd();
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        assert_eq!(rustix::event::poll(&mut fds, None).unwrap(), 1);
        assert_eq!(node.drain_event_fd().unwrap(), 1);
        assert!(q.arm(), "the entry is still there to poll");
    }

    #[test]
    fn each_queue_has_one_consumer() {
        let (node, _fake) = fake_node(NodeOptions::default());
        let q2 = node.queue(2).unwrap();
        assert!(matches!(node.queue(2), Err(Error::QueueTaken(2))));
        assert!(matches!(
            node.queue(4),
            Err(Error::NoSuchQueue { index: 4, count: 4 })
        ));
        let rest = node.queues().unwrap();
        assert_eq!(
            rest.iter().map(NotifyQueue::index).collect::<Vec<_>>(),
            vec![0, 1, 3]
        );
        drop(q2);
        assert_eq!(node.queue(2).unwrap().index(), 2);
    }
}
