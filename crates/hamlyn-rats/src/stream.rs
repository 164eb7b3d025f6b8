//! Stream (seed 001 §3.2, seed 000 §3.3, §6.1): one-way, one-to-one, in order over a
//! fabric that reorders. The receiver owns a ring of message space with `E` metadata
//! entries; the sender writes messages at increasing stream positions into it, message
//! `s` on entry `s mod E`, and the receiver hands them out in sequence order
//! ([`Reorder`]), as bytes ([`StreamReceiver::read_bytes`]) or records
//! ([`StreamReceiver::read_record`]), both zero-copy views of the ring.
//! [`StreamReceiver::release`] frees a view and everything before it and returns the
//! space to the sender as a credit; the sender never has more than the ring's bytes or
//! `E` messages unreleased, so a fast sender never overruns a slow receiver.
//!
//! Small writes are coalesced into one message ([`WriteStatus::Copied`]) until
//! [`StreamSender::flush`] or a large write; large writes go as they are. A message is
//! `[data][record ends: u32 each]`; its metadata (52 bytes): version, flags (bit 0: end of
//! stream; bit 2: a probe, [`batches_credit`]; bit 3: the data's end is a record end, not
//! written in the table — so a message of one whole record is its bytes alone, as large
//! as they are and aligned as they are), sequence number (u32), stream position (u64),
//! number of record ends in the table (u16) and the sender's credit ticket (compact). A credit is a one-packet message whose word is
//! `released messages (24 bits) << 40 | released position (40 bits)`, both taken modulo
//! and rebuilt against what the sender sent.
//!
//! A side waiting on its peer looks every [`PROBE_EVERY`] whether the peer is still
//! there: the receiver sends its current credit again (a live sender ignores it), the
//! sender looks at its last message; refused because the peer's process, engine or node
//! is gone is [`RatsError::PeerGone`] (over the network, once the engine's heartbeats
//! declared the peer down). A PeerDown notification ends it at once too.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use hamlyn::{
    Data, NodeId, Notification, NotificationKind, Seed, SendHandle, SendOptions, Status, Ticket,
};

use crate::error::RatsError;
use crate::manager::{Buffer, Endpoint, EndpointSpec, InstanceId, Manager};
use crate::protocol::{
    check_seed, decode_compact, encode_compact, make_seed, MetaWriter, ProtocolId, Reader,
    COMPACT_TICKET_LEN, VERSION,
};

/// Writes shorter than this are coalesced.
pub const COALESCE_BELOW: usize = 4096;
/// Bytes a coalescing buffer holds before it is sent.
pub const COALESCE_BYTES: usize = 32 * 1024;
const EOS: u8 = 1;
/// Flag of the receiver's first message to a sender created first: where its ring is.
const HELLO: u8 = 2;
/// Flag of a sender's empty message asking for the credit the receiver holds back
/// ([`batches_credit`]): it is out of room and its last credit is behind.
const PROBE: u8 = 4;
/// Flag: the message's data ends a record (that end is not in the table).
const ENDS_RECORD: u8 = 8;
/// Parameters of a seed made by a sender created first.
const SENDER_FIRST: &[u8] = b"S";
const POS_BITS: u32 = 40;
const POS_MASK: u64 = (1 << POS_BITS) - 1;
const SEQ_MASK: u64 = (1 << 24) - 1;
/// How often a side that waits on its peer checks that the peer is still there.
pub const PROBE_EVERY: Duration = Duration::from_millis(100);

/// Whether a stream of `entries` entries returns credit in batches: the receiver sends a
/// credit once a quarter of the ring or of the entries is released uncredited (or the
/// sender asks, [`PROBE`]), and the sender keeps one entry back for asking. With fewer
/// than 8 entries every release is credited at once and no entry is kept back.
pub fn batches_credit(entries: u32) -> bool {
    entries >= 8
}

/// How many of its messages a stream's sender keeps queued at the engine before it
/// waits for the oldest ([`StreamSender::wait_for_own_sends`]): a quarter of the
/// receiver's entries, the batch its credit comes in (at least one).
pub fn own_in_flight(entries: u32) -> usize {
    (entries / 4).max(1) as usize
}

/// A message's record ends as they go: the table, and whether the data's end is a record
/// end (then a flag, [`ENDS_RECORD`], not in the table).
fn split_ends(len: usize, ends: &[u32]) -> (&[u32], bool) {
    match ends.split_last() {
        Some((&last, rest)) if last as usize == len => (rest, true),
        _ => (ends, false),
    }
}

/// A deadline `timeout` after the first time it is asked for: a write that need not
/// wait never reads the clock.
struct LazyDeadline {
    timeout: Option<Duration>,
    at: Option<Option<Instant>>,
}

impl LazyDeadline {
    fn new(timeout: Option<Duration>) -> LazyDeadline {
        LazyDeadline { timeout, at: None }
    }

    /// The deadline (`None`: none), fixed on the first call.
    fn get(&mut self) -> Option<Instant> {
        let timeout = self.timeout;
        *self
            .at
            .get_or_insert_with(|| timeout.and_then(|t| Instant::now().checked_add(t)))
    }
}

/// Whether a send's failure means the peer (its process, engine or node) is gone.
fn peer_is_gone(h: &SendHandle) -> bool {
    use hamlyn::RejectReason;
    matches!(
        h.status(),
        Status::Failed(
            RejectReason::PeerDown
                | RejectReason::UnknownSlot
                | RejectReason::Revoked
                | RejectReason::StaleIncarnation
        )
    )
}

/// What became of a write.
#[derive(Debug)]
#[non_exhaustive]
pub enum WriteStatus {
    /// Copied into the coalescing buffer; sent by a later flush or write.
    Copied,
    /// Sent as a message of its own (with the buffer coalesced before it, if any).
    Sent(SendHandle),
}

/// One message as the stream knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamMessage {
    /// Its sequence number.
    pub seq: u32,
    /// Its stream position (of its first data byte).
    pub pos: u64,
    /// Where its data starts in the ring (slot-relative).
    pub offset: u64,
    /// Data bytes (the record table excluded).
    pub data_len: u64,
    /// Record ends in it.
    pub records: u16,
    /// It ends the stream.
    pub eos: bool,
    /// The sender asks for the credit held back (an empty message).
    pub probe: bool,
    /// Its data's end is a record end (besides those in its table).
    pub ends_record: bool,
}

/// In-order delivery of messages that arrive in any order within a window of `window`
/// sequence numbers (sans-IO; property-tested against a model). The messages held lie
/// in a ring of `window` places, the next one expected at `head`: a message costs no
/// allocation and no search.
#[derive(Clone, Debug)]
pub struct Reorder<T> {
    next: u32,
    window: u32,
    /// Place of sequence number `next` in `held`.
    head: usize,
    held: Vec<Option<T>>,
}

/// The largest window a [`Reorder`] takes: its ring is allocated whole (16 bytes a place
/// for a small message type), and a stream's window is its metadata entries, far fewer.
pub const MAX_REORDER_WINDOW: u32 = 1 << 20;

impl<T> Reorder<T> {
    /// Expecting sequence number 0, accepting up to `window` ahead.
    /// [`RatsError::InvalidArgument`] for a window of 0 or above [`MAX_REORDER_WINDOW`].
    pub fn new(window: u32) -> Result<Reorder<T>, RatsError> {
        if window == 0 || window > MAX_REORDER_WINDOW {
            return Err(RatsError::InvalidArgument(
                "reorder window must be 1 to MAX_REORDER_WINDOW",
            ));
        }
        Ok(Reorder {
            next: 0,
            window,
            head: 0,
            held: std::iter::repeat_with(|| None)
                .take(window as usize)
                .collect(),
        })
    }

    /// The place of `seq`, which is within the window.
    fn place(&self, seq: u32) -> usize {
        (self.head + seq.wrapping_sub(self.next) as usize) % self.held.len()
    }

    /// Takes message `seq`: [`RatsError::Forged`] if it is outside the window
    /// (already delivered, or too far ahead) or a duplicate of one held.
    pub fn accept(&mut self, seq: u32, msg: T) -> Result<(), RatsError> {
        if seq.wrapping_sub(self.next) >= self.window {
            return Err(RatsError::Forged("sequence number outside the window"));
        }
        let at = self.place(seq);
        match self.held.get_mut(at) {
            Some(Some(_)) => Err(RatsError::Forged("duplicate sequence number")),
            Some(place) => {
                *place = Some(msg);
                Ok(())
            }
            None => Err(RatsError::Forged("sequence number outside the window")),
        }
    }

    /// The next message in order, if it arrived.
    pub fn pop(&mut self) -> Option<T> {
        let m = self.held.get_mut(self.head)?.take()?;
        self.next = self.next.wrapping_add(1);
        self.head = (self.head + 1) % self.held.len();
        Some(m)
    }

    /// Moves the window on: `released` messages were handed out and released (the
    /// window is measured from the oldest unreleased one).
    pub fn next_seq(&self) -> u32 {
        self.next
    }
}

/// A zero-copy view of stream bytes in the receiver's ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct View {
    /// Slot-relative offset in the ring.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// Stream position just after it.
    pub end_pos: u64,
    /// It ends a record (a record view, or bytes up to a record end).
    pub record_end: bool,
}

#[derive(Clone, Debug)]
struct Delivered {
    msg: StreamMessage,
    /// Data bytes read so far.
    read: u64,
    /// Record ends passed so far.
    record: u32,
    /// Ring space the message takes up to its end (data, table, and a skip before it).
    space_end: u64,
    /// The record ends of the message's table, increasing, inside its data; the data's
    /// own end is not among them when it is one (`msg.ends_record`): a message of one
    /// record, the common case, has an empty table and allocates nothing.
    table: Vec<u32>,
}

impl Delivered {
    /// Record end `i`: the table's, then the data's end if that is one.
    fn end(&self, i: u32) -> Option<u64> {
        let i = i as usize;
        match self.table.get(i) {
            Some(&e) => Some(u64::from(e)),
            None if i == self.table.len() && self.msg.ends_record => Some(self.msg.data_len),
            None => None,
        }
    }

    /// Whether the data's end is a record end.
    fn ends_with_record(&self) -> bool {
        self.msg.ends_record
            || self
                .table
                .last()
                .is_some_and(|&e| u64::from(e) == self.msg.data_len)
    }
}

/// The receiving side: created first; its seed builds the sender.
#[derive(Debug)]
pub struct StreamReceiver {
    mgr: Manager,
    id: InstanceId,
    ep: Endpoint,
    ring: u64,
    entries: u32,
    reorder: Reorder<StreamMessage>,
    delivered: VecDeque<Delivered>,
    credit: Option<Ticket>,
    sender_node: Option<NodeId>,
    expected_pos: u64,
    released_pos: u64,
    released_seq: u32,
    /// What the last credit sent said (released position and count).
    credited_pos: u64,
    credited_seq: u32,
    /// The sequence number of the last probe delivered, while it is not released: until
    /// then every release is credited at once (the sender is out of room).
    urgent: Option<u32>,
    eos: bool,
    peer_gone: bool,
    /// The last liveness probe (the current credit, sent again while idle).
    probe: Option<SendHandle>,
    forged: u64,
}

impl StreamReceiver {
    /// A receiver with a ring of `ring` bytes and `entries` metadata entries (messages
    /// in flight).
    pub fn new(mgr: &Manager, ring: u64, entries: u32) -> Result<StreamReceiver, RatsError> {
        if entries == 0 || ring < 2 * COALESCE_BYTES as u64 {
            return Err(RatsError::InvalidArgument("ring or entries too small"));
        }
        let ring = ring.next_multiple_of(crate::SPACE_GRANULE);
        let reorder = Reorder::new(entries)?;
        let id = mgr.register();
        let ep = match mgr.endpoint(id, ring, entries, EndpointSpec::default()) {
            Ok(ep) => ep,
            Err(e) => {
                mgr.unregister(id);
                return Err(e);
            }
        };
        Ok(StreamReceiver {
            mgr: mgr.clone(),
            id,
            ep,
            ring,
            entries,
            reorder,
            delivered: VecDeque::new(),
            credit: None,
            sender_node: None,
            expected_pos: 0,
            released_pos: 0,
            released_seq: 0,
            credited_pos: 0,
            credited_seq: 0,
            urgent: None,
            eos: false,
            peer_gone: false,
            probe: None,
            forged: 0,
        })
    }

    /// While idle: was the last probe refused because the sender is gone? Then sends
    /// another (the current credit again: it changes nothing at a live sender).
    fn probe_sender(&mut self) -> Result<(), RatsError> {
        if self.probe.as_ref().is_some_and(peer_is_gone) {
            self.peer_gone = true;
            return Ok(());
        }
        let Some(credit) = self.credit else {
            return Ok(());
        };
        // What is released, credited or not: a credit held back goes now too.
        self.probe = Some(self.send_credit(&credit)?);
        Ok(())
    }

    /// Sends the credit of what is released now and remembers it as sent.
    fn send_credit(&mut self, credit: &Ticket) -> Result<SendHandle, RatsError> {
        let word =
            (u64::from(self.released_seq) & SEQ_MASK) << POS_BITS | (self.released_pos & POS_MASK);
        let opts = SendOptions::new().tag(word).entry(0);
        let h = self.mgr.send(credit, &opts, Data::Inline(&[]))?;
        self.credited_pos = self.released_pos;
        self.credited_seq = self.released_seq;
        if let Some(p) = self.urgent {
            // Released (and now credited) once the count has passed it.
            if seq_after(self.released_seq, p) {
                self.urgent = None;
            }
        }
        Ok(h)
    }

    /// Sends a credit if what is released and not yet credited is worth one: a quarter
    /// of the ring or of the entries (or any of it, without batching, or while the
    /// sender asks for it).
    fn credit_if_due(&mut self) -> Result<(), RatsError> {
        let bytes = self.released_pos - self.credited_pos;
        let msgs = self.released_seq.wrapping_sub(self.credited_seq);
        if bytes == 0 && msgs == 0 {
            return Ok(());
        }
        let due = !batches_credit(self.entries)
            || self.urgent.is_some()
            || bytes >= self.ring / 4
            || msgs >= self.entries / 4;
        let Some(credit) = self.credit else {
            return Ok(());
        };
        if due {
            self.send_credit(&credit)?;
        }
        Ok(())
    }

    /// A receiver for a sender created first (`seed` from [`StreamSender::make_seed`]),
    /// with a ring of `ring` bytes and `entries` entries: tells the sender where the
    /// ring is.
    pub fn from_seed(
        mgr: &Manager,
        seed: &Seed,
        ring: u64,
        entries: u32,
    ) -> Result<StreamReceiver, RatsError> {
        let params = check_seed(seed, ProtocolId::Stream, 1)?;
        if params != SENDER_FIRST {
            return Err(RatsError::BadSeed("not a sender's seed"));
        }
        // As the sender's messages will name it (the compact form).
        let credit = decode_compact(&mut Reader::new(&encode_compact(&seed.tickets[0])?))?;
        let mut rx = StreamReceiver::new(mgr, ring, entries)?;
        let t = rx.ep.ticket(0..rx.ring, 0..rx.entries)?;
        let mut meta = MetaWriter::new();
        meta.put(&[VERSION, HELLO])?
            .put(&encode_compact(&t)?)?
            .put(&rx.ring.to_le_bytes())?
            .put(&rx.entries.to_le_bytes())?;
        let opts = SendOptions::new().meta(meta.bytes()).entry(0);
        rx.mgr.send(&credit, &opts, Data::Inline(&[]))?;
        rx.credit = Some(credit);
        rx.sender_node = Some(credit.node);
        Ok(rx)
    }

    /// The seed for the sender: the ring's ticket, its size and entries.
    pub fn make_seed(&self) -> Result<Seed, RatsError> {
        let t = self.ep.ticket(0..self.ring, 0..self.entries)?;
        let mut p = Vec::with_capacity(12);
        p.extend_from_slice(&self.ring.to_le_bytes());
        p.extend_from_slice(&self.entries.to_le_bytes());
        Ok(make_seed(ProtocolId::Stream, vec![t], &p))
    }

    /// Arrivals refused as forged.
    pub fn forged(&self) -> u64 {
        self.forged
    }

    /// Whether the sender closed the stream and everything before was read.
    pub fn at_end(&self) -> bool {
        self.eos && self.delivered.iter().all(|d| d.read == d.msg.data_len)
    }

    /// The next bytes of the current message (crossing record ends), waiting up to
    /// `timeout`; `Ok(None)` on timeout, [`RatsError::EndOfStream`] after the end.
    pub fn read_bytes(&mut self, timeout: Option<Duration>) -> Result<Option<View>, RatsError> {
        self.read(timeout, false)
    }

    /// The next record (or the rest of the current message if it holds no more record
    /// ends), waiting up to `timeout`.
    pub fn read_record(&mut self, timeout: Option<Duration>) -> Result<Option<View>, RatsError> {
        self.read(timeout, true)
    }

    /// Copies a view's bytes out.
    pub fn copy(&self, v: &View) -> Result<Vec<u8>, RatsError> {
        let mut b = vec![0u8; v.len as usize];
        self.ep.read(v.offset, &mut b)?;
        Ok(b)
    }

    /// Frees `v` and everything before it, and gives the space back to the sender.
    pub fn release(&mut self, v: &View) -> Result<(), RatsError> {
        self.release_to(v.end_pos)
    }

    fn release_to(&mut self, end_pos: u64) -> Result<(), RatsError> {
        let before = (self.released_pos, self.released_seq);
        let mut pos = self.released_pos.max(end_pos.min(self.expected_pos));
        while let Some(d) = self.delivered.front() {
            let done = d.read == d.msg.data_len && d.msg.pos + d.msg.data_len <= pos;
            if !done {
                break;
            }
            pos = pos.max(d.space_end);
            self.released_seq = self.released_seq.wrapping_add(1);
            self.delivered.pop_front();
        }
        if (pos, self.released_seq) == before {
            return Ok(());
        }
        self.released_pos = pos;
        self.credit_if_due()
    }

    fn read(&mut self, timeout: Option<Duration>, record: bool) -> Result<Option<View>, RatsError> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            // The first delivered message with bytes left.
            let ring = self.ring;
            if let Some(d) = self.delivered.iter_mut().find(|d| d.read < d.msg.data_len) {
                let (len, record_end) = if record {
                    match d.end(d.record) {
                        Some(end) => (end - d.read, true),
                        None => (d.msg.data_len - d.read, false),
                    }
                } else {
                    (d.msg.data_len - d.read, d.ends_with_record())
                };
                let view = View {
                    offset: (d.msg.offset + d.read) % ring,
                    len,
                    end_pos: d.msg.pos + d.read + len,
                    record_end,
                };
                d.read += len;
                while d.end(d.record).is_some_and(|e| e <= d.read) {
                    d.record += 1;
                }
                return Ok(Some(view));
            }
            if self.eos {
                return Err(RatsError::EndOfStream);
            }
            if self.peer_gone {
                return Err(RatsError::PeerGone);
            }
            // Wait in slices: between them, make sure the sender is still there (a dead
            // sender with no message half-sent leaves no PeerDown to be told of).
            let slice = Instant::now() + PROBE_EVERY;
            let until = deadline.map_or(slice, |d| d.min(slice));
            match self.mgr.wait(self.id, Some(until))? {
                Some(n) => self.arrived(&n)?,
                None if deadline.is_some_and(|d| Instant::now() >= d) => return Ok(None),
                None => self.probe_sender()?,
            }
        }
    }

    fn arrived(&mut self, n: &Notification) -> Result<(), RatsError> {
        if n.kind == NotificationKind::PeerDown {
            if self.sender_node.is_none_or(|s| s == n.src_node) {
                self.peer_gone = true;
            }
            return Ok(());
        }
        if n.kind != NotificationKind::Message {
            return Ok(());
        }
        match self.parse(n) {
            Ok(m) => {
                if self.reorder.accept(m.seq, m).is_err() {
                    self.count_forged();
                }
                if self.deliver_in_order() {
                    // The sender is out of room: what is released goes back now (an
                    // empty message at the front is released with it), and so does
                    // every release until the probe itself is.
                    self.release_to(self.released_pos)?;
                    self.credit_if_due()?;
                }
            }
            Err(_) => self.count_forged(),
        }
        Ok(())
    }

    fn count_forged(&mut self) {
        self.forged += 1;
        self.mgr.count_forged();
    }

    fn parse(&mut self, n: &Notification) -> Result<StreamMessage, RatsError> {
        let index = n.meta_index.ok_or(RatsError::Forged("no entry"))?;
        let entry = self
            .ep
            .meta()
            .ok_or(RatsError::Forged("entry"))?
            .entry(index)?;
        let (m, credit) = parse_meta(entry.metadata())?;
        let offset = n.offset.ok_or(RatsError::Forged("no offset"))?;
        let len = u64::from(n.len);
        let table = u64::from(m.records) * 4;
        if index != m.seq % self.entries
            || offset != m.pos % self.ring
            || len < table
            || offset + len > self.ring
        {
            return Err(RatsError::Forged("entry, offset or length lies"));
        }
        match self.credit {
            None => {
                self.credit = Some(credit);
                self.sender_node = Some(n.src_node);
            }
            Some(c) if c == credit => {}
            Some(_) => return Err(RatsError::Forged("a different credit ticket")),
        }
        Ok(StreamMessage {
            data_len: len - table,
            offset,
            ..m
        })
    }

    /// Hands out what is next in order, checking its place in the stream; whether a
    /// probe was among it.
    fn deliver_in_order(&mut self) -> bool {
        let mut probed = false;
        while let Some(m) = self.reorder.pop() {
            // Its position: where the last one ended, or the next ring start if it did
            // not fit before the end.
            let at = self.expected_pos;
            let room = self.ring - at % self.ring;
            let total = m.data_len + u64::from(m.records) * 4;
            let skipped = at + room;
            let ok_pos = m.pos == at || (m.pos == skipped && total > room);
            let table = if ok_pos { self.read_table(&m) } else { None };
            let Some(table) = table else {
                // A lie about the position or the table: counted and skipped. The stream
                // cannot go on past it in order (what follows no longer fits where it
                // says it lies): only a holder of the ring's ticket can send it, and it
                // breaks its own stream; nothing outside the ring changes.
                self.count_forged();
                continue;
            };
            self.expected_pos = m.pos + total;
            if m.eos {
                self.eos = true;
            }
            if m.probe {
                self.urgent = Some(m.seq);
                probed = true;
            }
            self.delivered.push_back(Delivered {
                msg: m,
                read: 0,
                record: 0,
                space_end: m.pos + total,
                table,
            });
        }
        probed
    }

    /// The message's record table, checked: increasing, and inside its data (before its
    /// end if that is a record end too). `None` if it lies.
    fn read_table(&self, m: &StreamMessage) -> Option<Vec<u32>> {
        if m.records == 0 {
            return Some(Vec::new());
        }
        let mut raw = vec![0u8; usize::from(m.records) * 4];
        self.ep.read(m.offset + m.data_len, &mut raw).ok()?;
        let ends: Vec<u32> = raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let increasing = ends.windows(2).all(|w| w[0] < w[1]);
        let inside = ends.last().is_none_or(|&e| {
            let e = u64::from(e);
            e < m.data_len || (e == m.data_len && !m.ends_record)
        });
        (increasing && inside).then_some(ends)
    }
}

impl Drop for StreamReceiver {
    fn drop(&mut self) {
        self.mgr.unregister(self.id);
    }
}

/// Whether sequence number `a` is past `b` (within half the number space).
fn seq_after(a: u32, b: u32) -> bool {
    let d = a.wrapping_sub(b);
    d != 0 && d < 1 << 31
}

/// Parses a stream message's metadata: the message (offset and length not yet known)
/// and the sender's credit ticket. Whatever a peer wrote, a value or
/// [`RatsError::Forged`] (fuzzed).
pub fn parse_meta(meta: &[u8]) -> Result<(StreamMessage, Ticket), RatsError> {
    let mut r = Reader::new(meta);
    if r.u8()? != VERSION {
        return Err(RatsError::Forged("version"));
    }
    let flags = r.u8()?;
    if flags & !(EOS | PROBE | ENDS_RECORD) != 0 {
        return Err(RatsError::Forged("unknown flags"));
    }
    let seq = r.u32()?;
    let pos = r.u64()?;
    let records = r.u16()?;
    let credit = decode_compact(&mut r)?;
    Ok((
        StreamMessage {
            seq,
            pos,
            offset: 0,
            data_len: 0,
            records,
            eos: flags & EOS != 0,
            probe: flags & PROBE != 0,
            ends_record: flags & ENDS_RECORD != 0,
        },
        credit,
    ))
}

/// The sending side, built from the receiver's seed.
#[derive(Debug)]
pub struct StreamSender {
    mgr: Manager,
    id: InstanceId,
    credit_ep: Endpoint,
    credit_ticket: [u8; COMPACT_TICKET_LEN],
    /// The receiver's ring (`None` until a receiver created second says where it is).
    ring_ticket: Option<Ticket>,
    ring: u64,
    entries: u32,
    pos: u64,
    seq: u32,
    released_pos: u64,
    released_seq: u32,
    /// Coalesced bytes not sent yet, and their record ends.
    pending: Option<Buffer>,
    pending_len: usize,
    pending_ends: Vec<u32>,
    /// How long a write waits for credit, and for the engine to finish this stream's
    /// earlier messages ([`own_in_flight`] of them may be unfinished).
    pub timeout: Option<Duration>,
    closed: bool,
    peer_gone: bool,
    /// The last message sent (refused if the receiver is gone).
    last: Option<SendHandle>,
    /// This stream's messages the engine may not have finished, oldest first: at most
    /// [`own_in_flight`] of them ([`StreamSender::wait_for_own_sends`]).
    unfinished: VecDeque<SendHandle>,
    /// The sequence number of the last probe ([`PROBE`]) and how many were sent.
    probe_seq: Option<u32>,
    probes: u64,
    forged: u64,
}

impl StreamSender {
    /// A sender into the receiver's ring `seed` names.
    pub fn from_seed(mgr: &Manager, seed: &Seed) -> Result<StreamSender, RatsError> {
        let params = check_seed(seed, ProtocolId::Stream, 1)?;
        let mut r = Reader::new(params);
        let (ring, entries) = match (r.u64(), r.u32()) {
            (Ok(a), Ok(b)) => (a, b),
            _ => return Err(RatsError::BadSeed("ring and entries")),
        };
        let t = seed.tickets[0];
        if entries == 0
            || t.meta_count < entries
            || t.len < ring
            || ring < 2 * COALESCE_BYTES as u64
        {
            return Err(RatsError::BadSeed("ring, entries and ticket disagree"));
        }
        let id = mgr.register();
        let credit_ep = match mgr.endpoint(id, crate::SPACE_GRANULE, 1, EndpointSpec::default()) {
            Ok(ep) => ep,
            Err(e) => {
                mgr.unregister(id);
                return Err(e);
            }
        };
        let credit_ticket = encode_compact(&credit_ep.ticket(0..0, 0..1)?)?;
        Ok(StreamSender {
            mgr: mgr.clone(),
            id,
            credit_ep,
            credit_ticket,
            ring_ticket: Some(t),
            ring,
            entries,
            pos: 0,
            seq: 0,
            released_pos: 0,
            released_seq: 0,
            pending: None,
            pending_len: 0,
            pending_ends: Vec::new(),
            timeout: Some(Duration::from_secs(30)),
            closed: false,
            peer_gone: false,
            last: None,
            unfinished: VecDeque::new(),
            probe_seq: None,
            probes: 0,
            forged: 0,
        })
    }

    /// A sender created before its receiver: give [`StreamSender::make_seed`] to the
    /// receiver ([`StreamReceiver::from_seed`]); writes wait (up to
    /// [`StreamSender::timeout`]) until it said where its ring is.
    pub fn new(mgr: &Manager) -> Result<StreamSender, RatsError> {
        let id = mgr.register();
        let credit_ep = match mgr.endpoint(id, crate::SPACE_GRANULE, 1, EndpointSpec::default()) {
            Ok(ep) => ep,
            Err(e) => {
                mgr.unregister(id);
                return Err(e);
            }
        };
        let credit_ticket = encode_compact(&credit_ep.ticket(0..0, 0..1)?)?;
        Ok(StreamSender {
            mgr: mgr.clone(),
            id,
            credit_ep,
            credit_ticket,
            ring_ticket: None,
            ring: 0,
            entries: 0,
            pos: 0,
            seq: 0,
            released_pos: 0,
            released_seq: 0,
            pending: None,
            pending_len: 0,
            pending_ends: Vec::new(),
            timeout: Some(Duration::from_secs(30)),
            closed: false,
            peer_gone: false,
            last: None,
            unfinished: VecDeque::new(),
            probe_seq: None,
            probes: 0,
            forged: 0,
        })
    }

    /// The seed that builds this sender's receiver ([`StreamReceiver::from_seed`]).
    pub fn make_seed(&self) -> Result<Seed, RatsError> {
        let t = self.credit_ep.ticket(0..0, 0..1)?;
        Ok(make_seed(ProtocolId::Stream, vec![t], SENDER_FIRST))
    }

    /// Waits until the receiver's ring is known.
    fn wait_connected(&mut self) -> Result<Ticket, RatsError> {
        if let Some(t) = self.ring_ticket {
            return Ok(t);
        }
        let deadline = self.timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            if let Some(t) = self.ring_ticket {
                return Ok(t);
            }
            match self.mgr.wait(self.id, deadline)? {
                Some(n) => self.credit_arrived(&n),
                None => return Err(RatsError::Timeout),
            }
        }
    }

    /// A receiver's hello: its ring ticket, size and entries.
    fn hello(&mut self, n: &Notification) -> Result<(), RatsError> {
        let index = n.meta_index.ok_or(RatsError::Forged("no entry"))?;
        let entry = self
            .credit_ep
            .meta()
            .ok_or(RatsError::Forged("entry"))?
            .entry(index)?;
        let mut r = Reader::new(entry.metadata());
        if r.u8()? != VERSION || r.u8()? != HELLO {
            return Err(RatsError::Forged("not a hello"));
        }
        let t = decode_compact(&mut r)?;
        let ring = r.u64()?;
        let entries = r.u32()?;
        if entries == 0 || t.len < ring || ring < 2 * COALESCE_BYTES as u64 {
            return Err(RatsError::Forged("ring, entries and ticket disagree"));
        }
        self.ring_ticket = Some(Ticket {
            meta_count: entries,
            ..t
        });
        self.ring = ring;
        self.entries = entries;
        Ok(())
    }

    /// Credits refused as forged.
    pub fn forged(&self) -> u64 {
        self.forged
    }

    /// The largest write: half the ring.
    pub fn max_write(&self) -> u64 {
        self.ring / 2
    }

    /// Writes `bytes` as part of the byte stream.
    pub fn write_bytes(&mut self, bytes: &[u8]) -> Result<WriteStatus, RatsError> {
        self.write(bytes, false)
    }

    /// Writes `bytes` as one record: at least one byte ([`RatsError::InvalidArgument`]
    /// otherwise: a record's end is a place in the stream, and an empty record's would
    /// be its predecessor's).
    pub fn write_record(&mut self, bytes: &[u8]) -> Result<WriteStatus, RatsError> {
        if bytes.is_empty() {
            return Err(RatsError::InvalidArgument("an empty record"));
        }
        self.write(bytes, true)
    }

    fn write(&mut self, bytes: &[u8], record: bool) -> Result<WriteStatus, RatsError> {
        if self.closed {
            return Err(RatsError::State("stream closed"));
        }
        self.wait_connected()?;
        if bytes.len() as u64 > self.max_write() {
            return Err(RatsError::TooLong {
                len: bytes.len() as u64,
                max: self.max_write(),
            });
        }
        if bytes.len() < COALESCE_BELOW {
            if self.pending_len + bytes.len() > COALESCE_BYTES
                || self.pending_ends.len() * 4 + 4 > COALESCE_BYTES / 4
            {
                self.flush()?;
            }
            let buf = match self.pending.take() {
                Some(b) => b,
                None => self
                    .mgr
                    .alloc((COALESCE_BYTES + COALESCE_BYTES / 4) as u64)?,
            };
            buf.write(self.pending_len as u64, bytes)?;
            self.pending = Some(buf);
            self.pending_len += bytes.len();
            if record {
                self.pending_ends.push(self.pending_len as u32);
            }
            return Ok(WriteStatus::Copied);
        }
        self.flush()?;
        // A record's end at the data's end goes as a flag ([`ENDS_RECORD`]): the
        // message is the bytes alone.
        let end = [bytes.len() as u32];
        let ends: &[u32] = if record { &end } else { &[] };
        let buf = self.mgr.alloc(bytes.len() as u64)?;
        buf.write(0, bytes)?;
        let h = self.send_message(buf, bytes.len(), ends, false)?;
        Ok(WriteStatus::Sent(h))
    }

    /// Sends the first `len` bytes of `buf` (message space of this sender's manager) as
    /// they are, without a copy, as a record if `record` (its end goes as a flag, so
    /// `buf` needs no room past `len`); what was coalesced before goes first.
    pub fn write_buffer(
        &mut self,
        buf: Buffer,
        len: u64,
        record: bool,
    ) -> Result<SendHandle, RatsError> {
        if self.closed {
            return Err(RatsError::State("stream closed"));
        }
        self.wait_connected()?;
        if len > buf.len() {
            return Err(RatsError::InvalidArgument("longer than the buffer"));
        }
        if record && len == 0 {
            return Err(RatsError::InvalidArgument("an empty record"));
        }
        if len > self.max_write() {
            return Err(RatsError::TooLong {
                len,
                max: self.max_write(),
            });
        }
        self.flush()?;
        let end = [len as u32];
        let ends: &[u32] = if record { &end } else { &[] };
        self.send_message(buf, len as usize, ends, false)
    }

    /// Sends what was coalesced (if anything); its handle.
    pub fn flush(&mut self) -> Result<Option<SendHandle>, RatsError> {
        if self.pending.is_none() {
            return Ok(None);
        }
        // Room first: bytes a write reported `Copied` stay coalesced if the wait fails
        // (a timeout, a peer gone), instead of being dropped with their buffer.
        self.wait_connected()?;
        let (table, _) = split_ends(self.pending_len, &self.pending_ends);
        let (at, total) = self.place(self.pending_len, table.len());
        self.wait_for_room(at + total)?;
        let Some(buf) = self.pending.take() else {
            return Ok(None);
        };
        let len = std::mem::take(&mut self.pending_len);
        let ends = std::mem::take(&mut self.pending_ends);
        self.send_message(buf, len, &ends, false).map(Some)
    }

    /// Flushes and ends the stream: the receiver reads what was written, then
    /// [`RatsError::EndOfStream`]. Wait on the returned handle before the node handle
    /// goes (a request still queued when its client leaves is never sent, and the
    /// receiver then sees [`RatsError::PeerGone`] instead of the end).
    pub fn close(&mut self) -> Result<SendHandle, RatsError> {
        self.flush()?;
        let buf = self.mgr.alloc(1)?;
        let h = self.send_message(buf, 0, &[], true)?;
        self.closed = true;
        Ok(h)
    }

    /// Sends `len` data bytes of `buf` with record ends `ends` appended as the table,
    /// once the receiver has room; the buffer is freed when the send is done.
    fn send_message(
        &mut self,
        buf: Buffer,
        len: usize,
        ends: &[u32],
        eos: bool,
    ) -> Result<SendHandle, RatsError> {
        let ring_ticket = self.wait_connected()?;
        let (ends, ends_record) = split_ends(len, ends);
        for (i, e) in ends.iter().enumerate() {
            buf.write((len + 4 * i) as u64, &e.to_le_bytes())?;
        }
        let (at, total) = self.place(len, ends.len());
        self.wait_for_room(at + total)?;
        let mut meta = MetaWriter::new();
        let flags = if eos { EOS } else { 0 } | if ends_record { ENDS_RECORD } else { 0 };
        meta.put(&[VERSION, flags])?
            .put(&self.seq.to_le_bytes())?
            .put(&at.to_le_bytes())?
            .put(&(ends.len() as u16).to_le_bytes())?
            .put(&self.credit_ticket)?;
        let entry = self.seq % self.entries;
        let opts = SendOptions::new()
            .offset(at % self.ring)
            .meta(meta.bytes())
            .entry(entry);
        let h = {
            let span = [buf.span(0, total)?];
            self.mgr.send(&ring_ticket, &opts, Data::Gather(&span))?
        };
        buf.free_after(&h);
        self.unfinished.push_back(h.clone());
        self.last = Some(h.clone());
        self.pos = at + total;
        self.seq = self.seq.wrapping_add(1);
        Ok(h)
    }

    /// Where a message of `len` data bytes and a table of `table` record ends
    /// ([`split_ends`]) goes in the stream, and the ring space it takes: at the current
    /// position, or at the ring's start if it does not fit before the end.
    fn place(&self, len: usize, table: usize) -> (u64, u64) {
        let total = (len + 4 * table) as u64;
        let room = self.ring - self.pos % self.ring;
        let at = if total > room {
            self.pos + room
        } else {
            self.pos
        };
        (at, total)
    }

    /// Waits until the ring has room up to stream position `end` and an entry is free,
    /// and fewer than [`own_in_flight`] of this stream's messages are unfinished.
    fn wait_for_room(&mut self, end: u64) -> Result<(), RatsError> {
        let mut deadline = LazyDeadline::new(self.timeout);
        self.wait_for_own_sends(&mut deadline)?;
        loop {
            while let Some(n) = self.mgr.take(self.id) {
                self.credit_arrived(&n);
            }
            let bytes_ok = end - self.released_pos <= self.ring;
            // With batched credit, one entry stays free for a probe (and a probe out
            // takes that one, not one of the others).
            let kept = u32::from(batches_credit(self.entries));
            let out = self.seq.wrapping_sub(self.released_seq) - u32::from(self.probe_out());
            let entries_ok = out < self.entries - kept;
            if bytes_ok && entries_ok {
                return Ok(());
            }
            if self.peer_gone || self.last.as_ref().is_some_and(peer_is_gone) {
                return Err(RatsError::PeerGone);
            }
            self.probe_if_needed()?;
            let deadline = deadline.get();
            let slice = Instant::now() + PROBE_EVERY;
            let until = deadline.map_or(slice, |d| d.min(slice));
            match self.mgr.wait(self.id, Some(until))? {
                Some(n) => self.credit_arrived(&n),
                None if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Err(RatsError::Timeout)
                }
                None => {}
            }
        }
    }

    /// Keeps fewer than [`own_in_flight`] of this stream's messages queued at the engine
    /// before another is queued: beyond that, waits for the oldest (up to `deadline`;
    /// nothing of the next write is sent if it ends with an error). In a process that
    /// hosts the engine, that wait runs the engine's turns, which copy this stream's own
    /// data, as a raw sender waiting on its oldest handle does. Without the bound a
    /// sender queued a whole window at once and then slept until credit came: each time,
    /// the engine's thread woke to copy what it had queued, and it and the sender took
    /// turns on one core while the receiver had the other (64 KiB records at 9-11 GB/s
    /// against raw sends' 21-25; 18-23 with the bound, 2026-11-25, docs/PERFORMANCE.md).
    fn wait_for_own_sends(&mut self, deadline: &mut LazyDeadline) -> Result<(), RatsError> {
        let most = own_in_flight(self.entries);
        loop {
            while self.unfinished.front().is_some_and(SendHandle::is_done) {
                if self
                    .unfinished
                    .pop_front()
                    .is_some_and(|h| peer_is_gone(&h))
                {
                    self.peer_gone = true;
                }
            }
            if self.peer_gone {
                return Err(RatsError::PeerGone);
            }
            let Some(oldest) = self.unfinished.front() else {
                return Ok(());
            };
            if self.unfinished.len() < most {
                return Ok(());
            }
            // In slices, as the wait for credit: between them, what came for this
            // sender (a PeerDown) is looked at.
            let slice = match deadline.get() {
                None => PROBE_EVERY,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(PROBE_EVERY),
                    _ => return Err(RatsError::Timeout),
                },
            };
            oldest.wait(Some(slice));
            while let Some(n) = self.mgr.take(self.id) {
                self.credit_arrived(&n);
            }
        }
    }

    /// Out of room with batched credit: asks the receiver for the credit it holds back
    /// with an empty message (the entry kept for it), unless everything sent is
    /// credited (then nothing is held back) or the last probe is not credited yet.
    fn probe_if_needed(&mut self) -> Result<(), RatsError> {
        let Some(ring_ticket) = self.ring_ticket else {
            return Ok(());
        };
        let all_credited = self.released_pos == self.pos && self.released_seq == self.seq;
        let asked = self.probe_out();
        let room = self.seq.wrapping_sub(self.released_seq) < self.entries;
        if !batches_credit(self.entries) || all_credited || asked || !room {
            return Ok(());
        }
        let mut meta = MetaWriter::new();
        meta.put(&[VERSION, PROBE])?
            .put(&self.seq.to_le_bytes())?
            .put(&self.pos.to_le_bytes())?
            .put(&0u16.to_le_bytes())?
            .put(&self.credit_ticket)?;
        let opts = SendOptions::new()
            .offset(self.pos % self.ring)
            .meta(meta.bytes())
            .entry(self.seq % self.entries);
        let h = self.mgr.send(&ring_ticket, &opts, Data::Inline(&[]))?;
        self.last = Some(h);
        self.probe_seq = Some(self.seq);
        self.seq = self.seq.wrapping_add(1);
        self.probes += 1;
        Ok(())
    }

    /// Whether the last probe is not credited back yet.
    fn probe_out(&self) -> bool {
        self.probe_seq
            .is_some_and(|p| !seq_after(self.released_seq, p))
    }

    /// Probes sent: times the sender ran out of room while the receiver held credit
    /// back ([`batches_credit`]).
    pub fn probes(&self) -> u64 {
        self.probes
    }

    fn credit_arrived(&mut self, n: &Notification) {
        if n.kind == NotificationKind::PeerDown {
            if self.ring_ticket.is_none_or(|t| t.node == n.src_node) {
                self.peer_gone = true;
            }
            return;
        }
        if self.ring_ticket.is_none() {
            if self.hello(n).is_err() {
                self.forged += 1;
                self.mgr.count_forged();
            }
            return;
        }
        let ok_slot = self.credit_ep.slot().is_some_and(|s| s.id() == n.slot);
        // Rebuild position and count from their low bits against what was sent.
        let pos_low = n.word & POS_MASK;
        let seq_low = (n.word >> POS_BITS) & SEQ_MASK;
        let pos = self.pos - ((self.pos.wrapping_sub(pos_low)) & POS_MASK);
        let back = (u64::from(self.seq).wrapping_sub(seq_low)) & SEQ_MASK;
        let seq = self.seq.wrapping_sub(back as u32);
        if !ok_slot || n.kind != NotificationKind::Message || n.len != 0 {
            // Not a credit of this stream: refused, counted.
            self.forged += 1;
            self.mgr.count_forged();
            return;
        }
        // Credits overtake each other on a fabric that reorders: one older than what is
        // known (lower position or count) is stale and changes nothing. The rebuilt
        // values never pass what was sent, so no credit releases space never given.
        if pos > self.released_pos {
            self.released_pos = pos;
        }
        if seq.wrapping_sub(self.released_seq) <= self.seq.wrapping_sub(self.released_seq) {
            self.released_seq = seq;
        }
    }
}

impl Drop for StreamSender {
    fn drop(&mut self) {
        self.mgr.unregister(self.id);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any arrival order within the window comes out in sequence order, each once;
        /// duplicates and sequence numbers outside the window are refused.
        #[test]
        fn reorder_delivers_in_sequence_for_any_arrival_order(
            n in 1usize..200,
            window in 1u32..64,
            picks in proptest::collection::vec(any::<prop::sample::Index>(), 200),
            dup in any::<prop::sample::Index>(),
        ) {
            let mut r = Reorder::new(window).expect("a window the reorder buffer takes");
            let mut out = Vec::new();
            // The sender may have `window` messages outstanding: arrivals are any order
            // of what it sent; it sends more as messages are delivered.
            let mut sent: Vec<u32> = Vec::new();
            let mut next_send = 0u32;
            let mut k = 0;
            while out.len() < n {
                while (next_send as usize) < n && next_send < out.len() as u32 + window {
                    sent.push(next_send);
                    next_send += 1;
                }
                let i = picks[k % picks.len()].index(sent.len());
                k += 1;
                let s = sent.swap_remove(i);
                r.accept(s, s).unwrap();
                if s == 0 && n > 1 {
                    prop_assert!(r.accept(0, 0).is_err(), "duplicate refused");
                }
                while let Some(m) = r.pop() {
                    out.push(m);
                }
            }
            prop_assert_eq!(out, (0..n as u32).collect::<Vec<_>>());
            prop_assert!(r.accept(dup.index(n) as u32, 0).is_err(), "already delivered");
            prop_assert!(r.accept(n as u32 + window, 0).is_err(), "beyond the window");
        }
    }

    #[test]
    fn a_reorder_window_of_zero_or_too_large_is_refused() {
        for w in [0, MAX_REORDER_WINDOW + 1, u32::MAX] {
            assert!(
                matches!(Reorder::<u32>::new(w), Err(RatsError::InvalidArgument(_))),
                "window {w}"
            );
        }
        let mut r = Reorder::new(1).expect("a window of one");
        assert!(r.accept(0, 7u32).is_ok());
    }

    #[test]
    fn metadata_parser_refuses_what_it_cannot_read() {
        assert!(parse_meta(&[]).is_err());
        assert!(parse_meta(&[VERSION, 2]).is_err());
        let mut m = vec![VERSION, EOS];
        m.extend_from_slice(&[0; 4 + 8 + 2]);
        assert!(parse_meta(&m).is_err(), "no credit ticket");
        m.extend_from_slice(&[0; COMPACT_TICKET_LEN]);
        let (s, _) = parse_meta(&m).unwrap();
        assert!(s.eos && !s.probe && !s.ends_record);
        m[1] = PROBE | ENDS_RECORD;
        let (s, _) = parse_meta(&m).unwrap();
        assert!(!s.eos && s.probe && s.ends_record);
        m[1] = 16;
        assert!(parse_meta(&m).is_err(), "an unknown flag");
    }
}
