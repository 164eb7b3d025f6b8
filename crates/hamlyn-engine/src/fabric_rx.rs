//! Packets arriving from other nodes. The fabric has parsed and framed each packet; here
//! it is **checked** by the core (the same `Delivery::check` a local packet takes), its
//! payload is read by the fabric straight into the admitted place (the **deposit**), and
//! it is **committed** and **notified** through `Delivery::commit`. A refusal becomes a
//! NACK to the sender; a NACK from a peer becomes an error completion on the terminus that
//! sent the refused packet. Reads, atomics and registry packets are kept whole and handed
//! back to the engine after the poll.

use std::collections::VecDeque;

use hamlyn_core::{Areas, Expected, Nacked, PeerTable, Placement, RejectReason};
use hamlyn_fabric::{Landing, PacketSink, PeerEvent, SharedBytesMut};
use hamlyn_wire::{Header, NodeId, Op};

use crate::clients::Clients;
use crate::counters::EngineCounters;
use crate::deliver::Delivery;
use crate::landings::Landings;

/// Room for a registry packet's name (and framing) beside its seed text.
const MAX_NAME_BYTES: usize = 512;

/// What identifies a packet in flight: no two packets of one sender share it (a request's
/// packets differ in offset; requests differ in request id).
type PacketKey = (u32, u32, u64, u64, u32, u8);

fn packet_key(h: &Header) -> PacketKey {
    (
        h.src.0,
        h.slot.0,
        h.offset,
        h.request.to_u64(),
        h.meta_index,
        h.op as u8,
    )
}

/// Where an accepted packet's payload goes.
#[derive(Debug)]
enum Land {
    /// Into an area, at the admitted place; committed when complete.
    Place(Placement),
    /// Into a buffer, handled after the poll (reads, atomics, registry).
    Defer(Vec<u8>),
}

/// The receiving state that outlives one poll.
#[derive(Debug, Default)]
pub(crate) struct Inbound {
    /// Packets accepted whose payload is still being read. A stream fabric may read a
    /// payload over several polls, interleaved with other rails' packets, so this state
    /// is found again by the packet's identity (most are read whole at once: `Landings`
    /// finds those without a hash).
    landing: Landings<PacketKey, Land>,
    /// READ_REQ / ATOMIC_REQ / Registry packets that arrived, to handle after the poll.
    pub(crate) deferred: Vec<(Header, Vec<u8>)>,
    /// Peer events seen during the last poll.
    pub(crate) events: Vec<PeerEvent>,
    /// Packets of ours a lost session left unacknowledged during the last poll (the
    /// requests they belong to fail with `PeerDown`, after the poll's events).
    pub(crate) unconfirmed: Vec<Header>,
    /// Where an unplaceable payload goes.
    scratch: Vec<u8>,
}

impl Inbound {
    /// `node` is gone: packets from it that were half read will never finish (a receive
    /// endpoint's buffer claimed for one is handed back to its receiver).
    pub(crate) fn forget(&mut self, node: NodeId, delivery: &mut Delivery) {
        self.landing.retain(|k, land| {
            if k.0 != node.0 {
                return true;
            }
            if let Land::Place(p) = land {
                delivery.iface.abort_placed(p, &mut delivery.areas);
            }
            false
        });
    }
}

/// The receiving half for one poll, borrowing what it checks, writes and tells.
pub(crate) struct Receive<'a> {
    pub(crate) inbound: &'a mut Inbound,
    pub(crate) nacks: &'a mut VecDeque<Header>,
    pub(crate) peers: &'a mut PeerTable,
    pub(crate) expected: &'a mut Expected,
    pub(crate) delivery: &'a mut Delivery,
    pub(crate) clients: &'a mut Clients,
    pub(crate) counters: &'a mut EngineCounters,
}

impl Receive<'_> {
    /// A placed payload is complete: commit and notify, and remember which peers
    /// contributed to messages still incomplete.
    fn commit(&mut self, from: NodeId, h: &Header, meta: &[u8], p: &Placement) {
        match self
            .delivery
            .commit(h, meta, p, self.clients, self.counters)
        {
            Ok(done) => {
                self.counters.remote_packets += 1;
                self.counters.remote_bytes += u64::from(h.payload_len);
                self.peers.committed(from, h, done);
                if is_answer(h) {
                    self.expected.answered(from, h);
                }
            }
            Err(reason) if is_answer(h) => {
                self.answer_refused(from, h, reason);
            }
            Err(reason) => {
                let node = self.delivery.node();
                let _ = self.refuse(hamlyn_core::nack::nack_for(node, h, reason));
            }
        }
    }

    #[cold]
    fn refuse(&mut self, nack: Option<Header>) -> Landing {
        if let Some(n) = nack {
            self.nacks.push_back(n);
        }
        Landing::Discard
    }

    #[cold]
    fn admit_refused(&mut self, h: &Header) -> Landing {
        let rej = self.delivery.iface.admit(h, &mut self.delivery.areas).err();
        self.refuse(rej.and_then(|r| r.nack))
    }

    /// The answer to one of this node's reads or atomics cannot be taken (its reply slot
    /// refused it): nobody on the answering node can do anything about it, so no NACK
    /// goes there; the request fails here, and its answer is no longer awaited.
    #[cold]
    fn answer_refused(&mut self, from: NodeId, h: &Header, reason: RejectReason) -> Landing {
        self.expected.cancel(from, h.request);
        self.counters.answers_lost += 1;
        crate::engine::fail_local(self.clients, h.request, reason, self.counters);
        Landing::Discard
    }

    /// A peer refused one of our packets: the terminus that sent it learns why — if the
    /// NACK names a request that really went to that peer (`hamlyn_core::expected`);
    /// otherwise it is counted and ignored.
    #[cold]
    fn nack_received(&mut self, from: NodeId, h: &Header) {
        if self.expected.nack(from, h.request) == Nacked::Unknown {
            self.counters.unmatched_nacks += 1;
            return;
        }
        self.counters.nacks_received += 1;
        let reason = hamlyn_core::nack::nack_reason(h).unwrap_or(RejectReason::Unsupported);
        crate::engine::fail_local(self.clients, h.request, reason, self.counters);
    }
}

impl PacketSink for Receive<'_> {
    fn on_header(&mut self, from: NodeId, h: &Header, _meta: &[u8]) -> Landing {
        if h.src != from {
            self.counters.spoofed_packets += 1;
            return Landing::Discard;
        }
        if h.dst != self.delivery.node() {
            // Writes get a WrongNode NACK from admit; anything else addressed elsewhere
            // is dropped here and counted.
            if !matches!(h.op, Op::Write | Op::ReadResp | Op::AtomicResp) {
                self.counters.misaddressed_packets += 1;
                return Landing::Discard;
            }
        }
        if is_answer(h) {
            if let Err(why) = self.expected.check_answer(from, h) {
                self.counters.unexpected_answers += 1;
                tracing::debug!(peer = from.0, %why, "answer refused");
                return Landing::Discard;
            }
        }
        match h.op {
            Op::ReadReq | Op::AtomicReq
                if (h.payload_len as usize) <= hamlyn_wire::request::MAX_INLINE =>
            {
                self.inbound
                    .landing
                    .insert(packet_key(h), Land::Defer(vec![0; h.payload_len as usize]));
                Landing::Accept
            }
            Op::Registry
                if (h.payload_len as usize)
                    <= hamlyn_wire::control::MAX_SEED_TEXT + MAX_NAME_BYTES =>
            {
                self.inbound
                    .landing
                    .insert(packet_key(h), Land::Defer(vec![0; h.payload_len as usize]));
                Landing::Accept
            }
            Op::Write | Op::ReadResp | Op::AtomicResp => {
                match self.delivery.iface.admit(h, &mut self.delivery.areas) {
                    Ok(p) => {
                        self.inbound.landing.insert(packet_key(h), Land::Place(p));
                        Landing::Accept
                    }
                    Err(rej) if is_answer(h) => self.answer_refused(from, h, rej.reason),
                    Err(rej) => self.refuse(rej.nack),
                }
            }
            Op::Nack => {
                self.nack_received(from, h);
                Landing::Discard
            }
            _ => self.admit_refused(h),
        }
    }

    fn payload_buf(&mut self, h: &Header) -> SharedBytesMut<'_> {
        let len = h.payload_len as usize;
        let placement = match self.inbound.landing.get(&packet_key(h)) {
            Some(Land::Place(p)) => Some(*p),
            _ => None,
        };
        let areas = &mut self.delivery.areas;
        if let Some(p) = placement {
            // The admitted place in a client's area, by raw parts: the fabric copies into
            // it or lends it to `readv`, never holding a reference to it.
            let fits = areas
                .area(p.area)
                .is_some_and(|m| m.bytes_mut(p.offset, len).is_ok());
            if fits {
                if let Some(Ok(s)) = areas.area(p.area).map(|m| m.bytes_mut(p.offset, len)) {
                    return s;
                }
            }
        } else if let Some(Land::Defer(buf)) = self.inbound.landing.get_mut(&packet_key(h)) {
            buf.resize(len, 0);
            return SharedBytesMut::from(&mut buf[..]);
        }
        SharedBytesMut::from(scratch(&mut self.inbound.scratch, len))
    }

    fn on_payload(&mut self, from: NodeId, h: &Header, meta: &[u8]) {
        match self.inbound.landing.remove(&packet_key(h)) {
            Some(Land::Defer(body)) => self.inbound.deferred.push((*h, body)),
            Some(Land::Place(p)) => self.commit(from, h, meta, &p),
            None => {}
        }
    }

    fn on_peer(&mut self, event: PeerEvent) {
        self.inbound.events.push(event);
    }

    fn on_unconfirmed(&mut self, _to: NodeId, h: &Header) {
        // Only a client's writes are reported sent before they are known delivered;
        // reads, atomics and registry requests wait for their reply, which a Down fails.
        if h.op == Op::Write && h.src == self.delivery.node() {
            self.inbound.unconfirmed.push(*h);
        }
    }
}

/// Whether `h` answers a read or atomic of this node.
fn is_answer(h: &Header) -> bool {
    matches!(h.op, Op::ReadResp | Op::AtomicResp)
}

fn scratch(buf: &mut Vec<u8>, len: usize) -> &mut [u8] {
    if buf.len() < len {
        buf.resize(len, 0);
    }
    &mut buf[..len]
}
