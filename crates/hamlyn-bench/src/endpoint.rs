//! One process's side of the benchmark: a node, the slots others write to and read from,
//! an outbox area to send from, a notification queue and a terminus; and what it knows
//! of the other side ([`Remote`]).
//!
//! The slots, each over an area of its own ([`AREA_LEN`] bytes):
//!
//! - **inbox**: a normal slot with [`META_ENTRIES`] metadata entries, notifications to
//!   queue 0. Tagged writes and datagrams land here (entry 0), streams use the entries in
//!   turn, and the answers of this side's remote reads and fetch-adds land here too.
//! - **polled**: a normal slot with one entry and no queue: writes without notification,
//!   which the receiver notices by polling the last 8 bytes of the message.
//! - **rma**: a slot that allows remote reads and atomics (and nothing else): what the
//!   other side reads and fetch-adds.
//!
//! Inbox and polled are `danger_direct`: with the direct path the other side maps them
//! and deposits by itself ([`hamlyn::DirectTarget`]); with the mediated path it sends the
//! same messages through its terminus and the engine.

use std::path::Path;
use std::time::{Duration, Instant};

use hamlyn::{
    Area, Data, DirectTarget, MetaArea, Node, NodeOptions, Notification, NotificationKind,
    NotifyQueue, SendError, SendHandle, SendOptions, Slot, SlotPerms, Terminus, Ticket, MAX_INLINE,
};

use super::error::BenchError;

/// Bytes of each slot's area and of the outbox: the largest message measured.
pub const AREA_LEN: u64 = 4 << 20;
/// Metadata entries of the inbox slot (streamed messages use them in turn).
pub const META_ENTRIES: u32 = 64;
/// Longest wait for one notification before the run is declared stuck.
pub const WAIT: Duration = Duration::from_secs(10);
/// Polls of a polled write's flag before a poller waiting on the engine starts yielding
/// its core between polls.
const POLL_SPINS: u32 = 200;
/// Bytes of user metadata a datagram carries.
pub const DATAGRAM_META: usize = 16;

/// How a message travels to the other process on this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// Through this side's terminus and the engine (or, over TCP, both engines).
    Mediated,
    /// Deposited by this process into the other's mapped slot: one hop, no engine.
    Direct,
}

impl Via {
    /// The word used in the peer protocol.
    pub fn word(self) -> &'static str {
        match self {
            Via::Mediated => "mediated",
            Via::Direct => "direct",
        }
    }

    /// The path named by `word`.
    pub fn from_word(word: &str) -> Option<Via> {
        match word {
            "mediated" => Some(Via::Mediated),
            "direct" => Some(Via::Direct),
            _ => None,
        }
    }
}

/// The tickets one side gives the other.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tickets {
    /// The whole inbox.
    pub inbox: Ticket,
    /// The whole polled slot.
    pub polled: Ticket,
    /// The whole rma slot (read and atomic).
    pub rma: Ticket,
}

impl Tickets {
    /// The three tickets as seed text, separated by spaces.
    pub fn to_text(self) -> Result<String, BenchError> {
        let t = |t: &Ticket| hamlyn::seed::ticket_to_text(t);
        Ok(format!(
            "{} {} {}",
            t(&self.inbox)?,
            t(&self.polled)?,
            t(&self.rma)?
        ))
    }

    /// Parses what [`Tickets::to_text`] wrote (the words after the command).
    pub fn from_words<'a>(mut words: impl Iterator<Item = &'a str>) -> Result<Tickets, BenchError> {
        let mut next = || -> Result<Ticket, BenchError> {
            let w = words
                .next()
                .ok_or_else(|| BenchError::Peer("three tickets expected".into()))?;
            Ok(hamlyn::seed::ticket_from_text(w)?)
        };
        Ok(Tickets {
            inbox: next()?,
            polled: next()?,
            rma: next()?,
        })
    }
}

/// What one side knows of the other: its tickets and, once opened, direct mappings of
/// its inbox and polled slots.
#[derive(Debug)]
pub struct Remote {
    /// The other side's tickets.
    pub tickets: Tickets,
    /// Its inbox and polled slot, mapped here ([`Endpoint::open_direct`]).
    direct: Option<(DirectTarget, DirectTarget)>,
}

impl Remote {
    /// The other side, known by its tickets only.
    pub fn new(tickets: Tickets) -> Remote {
        Remote {
            tickets,
            direct: None,
        }
    }

    fn direct(&self) -> Result<&(DirectTarget, DirectTarget), BenchError> {
        self.direct.as_ref().ok_or(BenchError::Usage(
            "the direct path needs `open_direct` first",
        ))
    }
}

/// One process's side of the benchmark.
#[derive(Debug)]
pub struct Endpoint {
    /// Where this side's messages arrive.
    pub queue: NotifyQueue,
    /// This side's send queue.
    terminus: Terminus,
    /// The slots (kept alive for as long as the endpoint).
    inbox: Slot,
    polled: Slot,
    rma: Slot,
    /// Their metadata entries.
    inbox_meta: MetaArea,
    _polled_meta: MetaArea,
    _rma_meta: MetaArea,
    /// Their memory.
    _inbox_area: Area,
    polled_area: Area,
    _rma_area: Area,
    /// Where gather sends read from.
    outbox: Area,
    /// The connection (kept last: everything above holds it too).
    node: Node,
}

impl Endpoint {
    /// Connects to the engine at `socket` and sets everything up. `spin` overrides how
    /// many polls a waiting receiver spins through before it sleeps.
    pub fn connect(socket: &Path, spin: Option<u32>) -> Result<Endpoint, BenchError> {
        let defaults = NodeOptions::default();
        let options = NodeOptions {
            termini: 1,
            queues: 1,
            // Large enough that a receiver descheduled for a while (two cores, three busy
            // threads) does not overflow it during a message-rate stream.
            queue_cap: 65536,
            spin: spin.unwrap_or(defaults.spin),
            ..defaults
        };
        let node = Node::connect_with(socket, options)?;
        let inbox_area = node.area(AREA_LEN)?;
        let inbox_meta = node.meta_area(META_ENTRIES)?;
        let inbox = node
            .slot(&inbox_area)
            .meta(&inbox_meta)
            .queue(0)
            .danger_direct()
            .create()?;
        let polled_area = node.area(AREA_LEN)?;
        let polled_meta = node.meta_area(1)?;
        let polled = node
            .slot(&polled_area)
            .meta(&polled_meta)
            .danger_direct()
            .create()?;
        let rma_area = node.area(AREA_LEN)?;
        let rma_meta = node.meta_area(1)?;
        let rma = node
            .slot(&rma_area)
            .meta(&rma_meta)
            .perms(SlotPerms {
                write: false,
                read: true,
                atomic: true,
            })
            .create()?;
        let outbox = node.area(AREA_LEN)?;
        // Touch every page of every area so that no message pays for a page fault.
        let pattern: Vec<u8> = (0..AREA_LEN).map(|i| (i % 251) as u8).collect();
        for a in [&outbox, &inbox_area, &polled_area, &rma_area] {
            a.write(0, &pattern)?;
        }
        let queue = node.queue(0)?;
        let terminus = node.terminus(0)?;
        Ok(Endpoint {
            queue,
            terminus,
            inbox,
            polled,
            rma,
            inbox_meta,
            _polled_meta: polled_meta,
            _rma_meta: rma_meta,
            _inbox_area: inbox_area,
            polled_area,
            _rma_area: rma_area,
            outbox,
            node,
        })
    }

    /// The tickets the other side needs.
    pub fn tickets(&self) -> Result<Tickets, BenchError> {
        Ok(Tickets {
            inbox: self.inbox.ticket_all()?,
            polled: self.polled.ticket_all()?,
            rma: self.rma.ticket_all()?,
        })
    }

    /// Maps the other side's inbox and polled slot for the direct path.
    pub fn open_direct(&self, remote: &mut Remote) -> Result<(), BenchError> {
        let inbox = self.node.open_direct(&remote.tickets.inbox)?;
        let polled = self.node.open_direct(&remote.tickets.polled)?;
        remote.direct = Some((inbox, polled));
        Ok(())
    }

    /// Sends a `size`-byte message with notification to offset 0 of the other side's
    /// inbox: tagged `tag` in metadata entry `entry`, with [`DATAGRAM_META`] bytes of
    /// user metadata if `datagram`. Mediated: inline up to [`MAX_INLINE`] bytes, else
    /// gathered from the outbox; a full terminus is retried ([`send_when_full`]).
    pub fn send(
        &mut self,
        to: &Remote,
        via: Via,
        size: usize,
        tag: u64,
        entry: u32,
        datagram: bool,
    ) -> Result<Option<SendHandle>, BenchError> {
        let mut meta = [0u8; DATAGRAM_META];
        meta[..8].copy_from_slice(&tag.to_le_bytes());
        let mut opts = SendOptions::new().tag(tag).entry(entry);
        if datagram {
            opts = opts.meta(&meta);
        }
        let inline = [0x5Au8; MAX_INLINE];
        let spans = [self.outbox.span(0, size as u64)];
        let data = message(&inline, &spans, size);
        match via {
            Via::Mediated => {
                let t = &to.tickets.inbox;
                Ok(Some(match self.terminus.send(t, &opts, data) {
                    Err(SendError::Full) => send_when_full(&mut self.terminus, t, &opts, data)?,
                    r => r?,
                }))
            }
            Via::Direct => {
                to.direct()?.0.send(&opts, data)?;
                Ok(None)
            }
        }
    }

    /// Writes `size` bytes without notification to offset 0 of the other side's polled
    /// slot, the last 8 bytes being [`flag`]`(series, round)` (a message shorter than 8
    /// bytes carries the low bytes of it).
    pub fn send_polled(
        &mut self,
        to: &Remote,
        via: Via,
        size: usize,
        series: u32,
        round: u64,
    ) -> Result<Option<SendHandle>, BenchError> {
        let flag = flag(series, round).to_le_bytes();
        let tail = size.saturating_sub(8);
        let flag = &flag[..size.min(8)];
        let opts = SendOptions::new().entry(0).notify(false);
        let mut inline = [0x5Au8; MAX_INLINE];
        if size <= MAX_INLINE {
            inline[tail..size].copy_from_slice(flag);
        } else {
            // The outbox's tail is free again: the previous round's answer arrived only
            // after the previous send was read (the other side had to see it).
            self.outbox.write(tail as u64, flag)?;
        }
        let spans = [self.outbox.span(0, size as u64)];
        let data = message(&inline, &spans, size);
        match via {
            Via::Mediated => {
                let t = &to.tickets.polled;
                Ok(Some(match self.terminus.send(t, &opts, data) {
                    Err(SendError::Full) => send_when_full(&mut self.terminus, t, &opts, data)?,
                    r => r?,
                }))
            }
            Via::Direct => {
                to.direct()?.1.send(&opts, data)?;
                Ok(None)
            }
        }
    }

    /// Spins until the last bytes of a `size`-byte polled write of round `round` of
    /// `series` are in this side's polled slot. Through the engine (`via` mediated), the
    /// poller yields its core between polls after a while: the engine must run to carry
    /// the message, and two pollers and an engine do not fit on two cores. A direct
    /// deposit needs no third party: the poller only spins.
    pub fn wait_polled(
        &self,
        via: Via,
        size: usize,
        series: u32,
        round: u64,
    ) -> Result<(), BenchError> {
        let want = flag(series, round).to_le_bytes();
        let n = size.min(8);
        let at = size.saturating_sub(8) as u64;
        let deadline = Instant::now() + WAIT;
        let mut got = [0u8; 8];
        let mut spins: u32 = 0;
        loop {
            // A whole flag (every size from 8 bytes) is read and compared as one word:
            // a read and a comparison of `n` bytes called `memcpy` and `memcmp` on every
            // poll, which put that much more time between the flag's arrival and its
            // sight.
            let seen = if n == 8 {
                self.polled_area.read(at, &mut got)?;
                got == want
            } else {
                self.polled_area.read(at, &mut got[..n])?;
                got[..n] == want[..n]
            };
            // No Release partner, by design: a polled write's flag is plain data (as in
            // UCX put_lat), and only its own bytes are waited for. The fence keeps the
            // compiler from hoisting the read out of the loop and orders what this side
            // does next after seeing the flag.
            hamlyn_shm::sync::fence(hamlyn_shm::sync::Ordering::Acquire);
            if seen {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins % 4096 == 0 && Instant::now() > deadline {
                return Err(BenchError::Timeout(WAIT, "a polled write"));
            }
            // Through an engine this process hosts: the polling loop runs its turns
            // (`Node::progress`, as a UCX loop calls `ucp_worker_progress`), so the
            // engine's thread need not take a core for the message this loop waits for.
            // Elsewhere, or when the turn found nothing for a while: two processes
            // polling and an engine on two cores; without giving the core up, the
            // engine (which must carry the message) waits for a time slice,
            // milliseconds.
            let progressed = via == Via::Mediated && self.node.progress();
            if via == Via::Mediated && !progressed && spins > POLL_SPINS {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Reads `size` bytes of the other side's rma slot into this side's inbox (answer
    /// ticket `reply`, [`Tickets::inbox`] of this side) and waits for the `ReadDone`
    /// notification. The handle is for [`check_sent`] after the timed rounds.
    pub fn read(
        &mut self,
        to: &Remote,
        reply: &Ticket,
        size: usize,
    ) -> Result<SendHandle, BenchError> {
        let h = self.terminus.read(&hamlyn::ReadArgs {
            source: &to.tickets.rma,
            offset: 0,
            len: size as u64,
            reply,
            reply_offset: 0,
        })?;
        self.expect(NotificationKind::ReadDone)?;
        Ok(h)
    }

    /// Fetch-and-adds 1 to the first word of the other side's rma slot (answer to
    /// `reply`) and waits for the old value (`AtomicDone`); returns the handle and the
    /// old value.
    pub fn fetch_add(
        &mut self,
        to: &Remote,
        reply: &Ticket,
    ) -> Result<(SendHandle, u64), BenchError> {
        let h = self.terminus.fetch_add(&hamlyn::FetchAddArgs {
            target: &to.tickets.rma,
            offset: 0,
            addend: 1,
            reply,
            reply_offset: 0,
        })?;
        let n = self.expect(NotificationKind::AtomicDone)?;
        Ok((h, n.word))
    }

    /// The user metadata of inbox entry `entry` (a datagram's header).
    pub fn datagram_meta(&self, entry: u32) -> Result<[u8; DATAGRAM_META], BenchError> {
        let m = self.inbox_meta.metadata(entry)?;
        m.get(..DATAGRAM_META)
            .and_then(|m| m.try_into().ok())
            .ok_or_else(|| BenchError::Unexpected(format!("{} bytes of metadata", m.len())))
    }

    /// The next notification, waiting at most [`WAIT`].
    pub fn next(&mut self) -> Result<Notification, BenchError> {
        // Already there: no clock read (a stream's receiver takes most of its
        // notifications here).
        if let Some(n) = self.queue.poll() {
            return Ok(n);
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if let Some(n) = self.queue.wait(Some(left))? {
                return Ok(n);
            }
            if left.is_zero() {
                return Err(BenchError::Timeout(WAIT, "a notification"));
            }
        }
    }

    /// The next notification of kind `kind`; anything else is unexpected, but for the
    /// engine's reports of notifications a full queue could not post (`Overflow`: a
    /// stream outran its receiver; the messages themselves arrived), which are passed
    /// over in whichever phase they come. A stream counts its losses by the queue's
    /// overflow counter (`bandwidth::receive_stream`), and the report, posted once the
    /// queue has room again, may come after the stream ended.
    pub fn expect(&mut self, kind: NotificationKind) -> Result<Notification, BenchError> {
        loop {
            let n = self.next()?;
            if n.kind == kind {
                return Ok(n);
            }
            if n.kind != NotificationKind::Overflow {
                return Err(BenchError::Unexpected(format!("{n:?}")));
            }
        }
    }

    /// The next notification that reports a complete message (see [`Endpoint::expect`]).
    pub fn next_message(&mut self) -> Result<Notification, BenchError> {
        self.expect(NotificationKind::Message)
    }
}

/// Retries a send refused for a full terminus, waiting for room in between
/// ([`Terminus::wait_room`]), for at most [`WAIT`].
#[cold]
fn send_when_full(
    terminus: &mut Terminus,
    to: &Ticket,
    opts: &SendOptions<'_>,
    data: Data<'_>,
) -> Result<SendHandle, BenchError> {
    let deadline = Instant::now() + WAIT;
    loop {
        match terminus.send(to, opts, data) {
            Err(SendError::Full) => {}
            r => return Ok(r?),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || !terminus.wait_room(Some(left)) {
            return Err(BenchError::Timeout(WAIT, "room in the terminus"));
        }
    }
}

/// The flag word that ends round `round` of polled-write series `series`: the series
/// (numbered by the driver, never 0) in the high half, so that a flag left by an earlier
/// series is never taken for this one's, and the round in the low half.
pub fn flag(series: u32, round: u64) -> u64 {
    (u64::from(series) << 32) | (round & 0xffff_ffff)
}

/// A `size`-byte message: `inline`'s first bytes up to [`MAX_INLINE`], else `spans`
/// (the outbox's first `size` bytes).
fn message<'a>(
    inline: &'a [u8; MAX_INLINE],
    spans: &'a [hamlyn::Span<'a>],
    size: usize,
) -> Data<'a> {
    if size <= MAX_INLINE {
        Data::Inline(&inline[..size])
    } else {
        Data::Gather(spans)
    }
}

/// Waits for `handle`'s request to be finished and checks that it was sent.
pub fn check_sent(handle: &SendHandle) -> Result<(), BenchError> {
    match handle.wait(Some(WAIT)) {
        hamlyn::Status::Sent => Ok(()),
        other => Err(BenchError::SendFailed(other)),
    }
}
