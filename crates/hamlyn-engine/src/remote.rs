//! The engine's side of the fabric (DESIGN §2 "Fabrics", "Never lose, never overrun"):
//! packets to other nodes go out straight from the sender's send area; packets from
//! them are admitted by the core, read straight into their final place and committed;
//! NACKs become error completions on the terminus that sent the refused packet; and a
//! lost peer fails what depends on it without disturbing anything else.

use std::collections::{HashMap, VecDeque};

use hamlyn_core::{Areas, Interface, Memory, Notification, Placement, QueueId, RejectReason};
use hamlyn_fabric::{Fabric, FabricError, Landing, PacketSink, PeerEvent};
use hamlyn_wire::entry::{NotifEntry, NotifKind};
use hamlyn_wire::request::{Completion, MAX_GATHER};
use hamlyn_wire::{Header, NodeId, Op};

use crate::areas::AreaTable;
use crate::engine::{port_mut, post, Client, EngineState};
use crate::source::Piece;
use crate::stats::EngineCounters;

/// Room for a registry packet's name (and framing) beside its seed text.
const MAX_NAME_BYTES: usize = 512;

/// Packets taken from the fabric per poll.
const POLL_BUDGET: usize = 64;

/// What the engine knows about one peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    /// Reachable now.
    pub up: bool,
    /// Its incarnation when last seen up.
    pub incarnation: u32,
}

/// The fabric and the state that goes with it.
pub struct Remote {
    /// The fabric.
    pub fabric: Box<dyn Fabric + Send>,
    /// NACKs to send (kept while the fabric is full: a NACK is never dropped).
    nacks: VecDeque<Header>,
    /// READ_REQ / ATOMIC_REQ / Registry packets that arrived, to handle after the poll.
    deferred: Vec<(Header, Vec<u8>)>,
    /// Messages partly received: (slot, metadata index) → peers whose packets counted.
    partial: HashMap<(u32, u32), Vec<NodeId>>,
    /// Packets accepted whose payload is still being read. A stream fabric may read a
    /// payload over several polls, interleaved with other rails' packets, so this state
    /// outlives one poll and is found again by the packet's identity.
    landing: HashMap<PacketKey, Land>,
    /// Where an unplaceable payload goes.
    scratch: Vec<u8>,
    /// Peer events seen during the last poll.
    events: Vec<PeerEvent>,
    /// Peers by node id.
    pub peers: HashMap<u32, Peer>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("peers", &self.peers)
            .field("partial", &self.partial.len())
            .finish()
    }
}

impl Remote {
    /// A message (or group) on `(slot, meta_index)` completed: forget its contributors.
    pub(crate) fn message_complete(&mut self, slot: u32, meta_index: u32) {
        if !self.partial.is_empty() {
            self.partial.remove(&(slot, meta_index));
        }
    }

    /// Queues a NACK to send at the next poll.
    pub(crate) fn queue_nack(&mut self, n: Header) {
        self.nacks.push_back(n);
    }

    /// Wraps a fabric.
    pub fn new(fabric: Box<dyn Fabric + Send>) -> Remote {
        Remote {
            fabric,
            nacks: VecDeque::new(),
            deferred: Vec::new(),
            partial: HashMap::new(),
            landing: HashMap::new(),
            scratch: Vec::new(),
            events: Vec::new(),
            peers: HashMap::new(),
        }
    }
}

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

/// The receiving half, borrowing the engine's parts for one poll.
struct Sink<'a> {
    iface: &'a mut Interface,
    areas: &'a mut AreaTable,
    clients: &'a mut [Option<Client>],
    counters: &'a mut EngineCounters,
    nacks: &'a mut VecDeque<Header>,
    late_errors: &'a mut VecDeque<(u32, Completion)>,
    deferred: &'a mut Vec<(Header, Vec<u8>)>,
    partial: &'a mut HashMap<(u32, u32), Vec<NodeId>>,
    landing: &'a mut HashMap<PacketKey, Land>,
    scratch: &'a mut Vec<u8>,
    events: &'a mut Vec<PeerEvent>,
}

impl Sink<'_> {
    /// A placed payload is complete: count it, notify if its message is done, and
    /// remember which peers contributed to messages still incomplete.
    fn commit(&mut self, from: NodeId, h: &Header, meta: &[u8]) {
        let before = self.iface.stats().messages;
        match self.iface.commit(h, meta, self.areas) {
            Ok(notif) => {
                self.counters.remote_packets += 1;
                self.counters.remote_bytes += u64::from(h.payload_len);
                let key = (h.slot.0, h.meta_index);
                let complete = self.iface.stats().messages > before;
                if complete {
                    self.partial.remove(&key);
                } else if !h.is_fast() {
                    let peers = self.partial.entry(key).or_default();
                    if !peers.contains(&from) {
                        peers.push(from);
                    }
                }
                if let Some(n) = notif {
                    post(self.clients, self.counters, n);
                }
            }
            Err(rej) => {
                let _ = self.refuse(rej.nack);
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

    /// A peer refused one of our packets: the terminus that sent it learns why.
    #[cold]
    fn nack_received(&mut self, h: &Header) {
        self.counters.nacks_received += 1;
        let reason = hamlyn_core::nack::nack_reason(h).unwrap_or(RejectReason::Unsupported);
        let cid = h.request.terminus >> 8;
        let terminus = (h.request.terminus & 0xFF) as u16;
        let c = Completion {
            seq: h.request.seq,
            status: u16::from(reason.code()),
            terminus,
            value: 0,
        };
        let pushed =
            port_mut(self.clients, cid).map(|port| port.errors.try_push(&c.encode()).is_ok());
        match pushed {
            Some(true) => self.counters.error_completions += 1,
            Some(false) => self.late_errors.push_back((cid, c)),
            None => {}
        }
    }
}

impl PacketSink for Sink<'_> {
    fn on_header(&mut self, from: NodeId, h: &Header, _meta: &[u8]) -> Landing {
        if h.src != from {
            self.counters.spoofed_packets += 1;
            return Landing::Discard;
        }
        if h.dst != self.iface.node() {
            // Writes get a WrongNode NACK from admit; anything else addressed elsewhere
            // is dropped here and counted.
            if !matches!(h.op, Op::Write | Op::ReadResp | Op::AtomicResp) {
                self.counters.misaddressed_packets += 1;
                return Landing::Discard;
            }
        }
        match h.op {
            Op::ReadReq | Op::AtomicReq
                if (h.payload_len as usize) <= hamlyn_wire::request::MAX_INLINE =>
            {
                self.landing
                    .insert(packet_key(h), Land::Defer(vec![0; h.payload_len as usize]));
                Landing::Accept
            }
            Op::Registry
                if (h.payload_len as usize)
                    <= hamlyn_wire::control::MAX_SEED_TEXT + MAX_NAME_BYTES =>
            {
                self.landing
                    .insert(packet_key(h), Land::Defer(vec![0; h.payload_len as usize]));
                Landing::Accept
            }
            Op::Write | Op::ReadResp | Op::AtomicResp => match self.iface.admit(h, self.areas) {
                Ok(p) => {
                    self.landing.insert(packet_key(h), Land::Place(p));
                    Landing::Accept
                }
                Err(rej) => self.refuse(rej.nack),
            },
            Op::Nack => {
                self.nack_received(h);
                Landing::Discard
            }
            _ => {
                let rej = self.iface.admit(h, self.areas).err();
                self.refuse(rej.and_then(|r| r.nack))
            }
        }
    }

    fn payload_buf(&mut self, h: &Header) -> &mut [u8] {
        let len = h.payload_len as usize;
        let placement = match self.landing.get(&packet_key(h)) {
            Some(Land::Place(p)) => Some(*p),
            _ => None,
        };
        if let Some(p) = placement {
            let fits = self
                .areas
                .area(p.area)
                .is_some_and(|m| m.slice_mut(p.offset, len).is_ok());
            if fits {
                if let Some(Ok(s)) = self.areas.area(p.area).map(|m| m.slice_mut(p.offset, len)) {
                    return s;
                }
            }
        } else if let Some(Land::Defer(buf)) = self.landing.get_mut(&packet_key(h)) {
            buf.resize(len, 0);
            return &mut buf[..];
        }
        scratch(self.scratch, len)
    }

    fn on_payload(&mut self, from: NodeId, h: &Header, meta: &[u8]) {
        match self.landing.remove(&packet_key(h)) {
            Some(Land::Defer(body)) => self.deferred.push((*h, body)),
            Some(Land::Place(_)) => self.commit(from, h, meta),
            None => {}
        }
    }

    fn on_peer(&mut self, event: PeerEvent) {
        self.events.push(event);
    }
}

fn scratch(buf: &mut Vec<u8>, len: usize) -> &mut [u8] {
    if buf.len() < len {
        buf.resize(len, 0);
    }
    &mut buf[..len]
}

impl EngineState {
    /// Hands one packet to the fabric, its payload straight from the pieces (inline bytes
    /// or registered areas). `Ok(false)`: the fabric is full, try again later.
    pub(crate) fn send_remote(
        &mut self,
        h: &Header,
        meta: &[u8],
        pieces: &[Piece<'_>],
    ) -> Result<bool, RejectReason> {
        let now = self.now();
        let Some(remote) = self.remote.as_mut() else {
            return Err(RejectReason::PeerDown);
        };
        if remote.peers.get(&h.dst.0).is_some_and(|p| !p.up) {
            return Err(RejectReason::PeerDown);
        }
        let mut parts: [&[u8]; MAX_GATHER] = [&[]; MAX_GATHER];
        let mut len = 0u64;
        for (slot, piece) in parts.iter_mut().zip(pieces) {
            *slot = match *piece {
                Piece::Bytes(b) => b,
                Piece::Area { area, offset, len } => {
                    let region = &self.areas.get(area).ok_or(RejectReason::AreaGone)?.mem.0;
                    let off = usize::try_from(offset).map_err(|_| RejectReason::OutOfBounds)?;
                    // SAFETY: nothing in the engine writes these bytes while the slice lives:
                    // it is only copied by the fabric (writev, or into its pending buffer)
                    // before this call returns. A sender changing its own buffer meanwhile
                    // can only change what it sends (seed 000 §6.2: buffers are not reused
                    // until the send completes); a slot owner changing a region being read
                    // remotely can only change what the reader gets.
                    unsafe { region.slice(off, len) }.map_err(|_| RejectReason::OutOfBounds)?
                }
            };
            len += slot.len() as u64;
        }
        match remote.fabric.send(now, h, meta, &parts[..pieces.len()]) {
            Ok(()) => {
                self.counters.packets += 1;
                self.counters.bytes += len;
                Ok(true)
            }
            Err(FabricError::Full) => Ok(false),
            Err(FabricError::PeerDown(_))
            | Err(FabricError::NoRoute(_))
            | Err(FabricError::LocalDown) => Err(RejectReason::PeerDown),
            Err(_) => Err(RejectReason::Malformed),
        }
    }

    /// Polls the fabric: delivers what arrived, sends queued NACKs, and handles peers
    /// coming and going. Whether anything happened.
    pub fn poll_fabric(&mut self) -> bool {
        let now = self.now();
        let Some(remote) = self.remote.as_mut() else {
            return false;
        };
        let Remote {
            fabric,
            nacks,
            deferred,
            partial,
            landing,
            scratch,
            events,
            ..
        } = remote;
        let mut sink = Sink {
            iface: &mut self.iface,
            areas: &mut self.areas,
            clients: &mut self.clients,
            counters: &mut self.counters,
            nacks,
            late_errors: &mut self.late_errors,
            deferred,
            partial,
            landing,
            scratch,
            events,
        };
        let got = match fabric.poll(now, &mut sink, POLL_BUDGET) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "fabric poll failed");
                0
            }
        };
        let mut busy = got > 0;
        while let Some(h) = remote.nacks.front() {
            match remote.fabric.send(now, h, &[], &[]) {
                Err(FabricError::Full) => break,
                Ok(()) => self.counters.nacks_sent += 1,
                Err(_) => self.counters.nacks_undeliverable += 1,
            }
            remote.nacks.pop_front();
            busy = true;
        }
        let rma: Vec<(Header, Vec<u8>)> = remote.deferred.drain(..).collect();
        let events: Vec<PeerEvent> = remote.events.drain(..).collect();
        for (h, body) in rma {
            busy = true;
            if h.op == Op::Registry {
                self.registry_packet(&h, &body);
            } else if let Err(reason) = self.serve_rma(&h, &body) {
                self.fail_request(h.src, h.request, reason, &h);
            }
        }
        for ev in events {
            busy = true;
            self.peer_event(ev);
        }
        busy
    }

    /// A peer came or went. Down: every request still sending to it fails with
    /// PeerDown, and every receiver with a partial message from it is told.
    fn peer_event(&mut self, ev: PeerEvent) {
        let Some(remote) = self.remote.as_mut() else {
            return;
        };
        match ev {
            PeerEvent::Up { node, incarnation } => {
                tracing::info!(peer = node.0, incarnation, "peer up");
                remote.peers.insert(
                    node.0,
                    Peer {
                        up: true,
                        incarnation,
                    },
                );
            }
            PeerEvent::Down { node } => {
                tracing::warn!(peer = node.0, "peer down");
                self.registry_peer_down(node);
                let Some(remote) = self.remote.as_mut() else {
                    return;
                };
                self.counters.peers_lost += 1;
                let incarnation = remote.peers.get(&node.0).map_or(0, |p| p.incarnation);
                remote.peers.insert(
                    node.0,
                    Peer {
                        up: false,
                        incarnation,
                    },
                );
                // Packets from it that were half read will never finish.
                remote.landing.retain(|k, _| k.0 != node.0);
                let mut hit = Vec::new();
                remote.partial.retain(|&key, peers| {
                    if let Some(i) = peers.iter().position(|p| *p == node) {
                        peers.swap_remove(i);
                        hit.push(key);
                    }
                    !peers.is_empty()
                });
                for (slot, meta_index) in hit {
                    let Some(queue) = self
                        .iface
                        .slots()
                        .get(hamlyn_wire::SlotId(slot))
                        .and_then(|s| s.config.queue)
                    else {
                        continue;
                    };
                    post(
                        &mut self.clients,
                        &mut self.counters,
                        peer_down(queue, slot, meta_index, node),
                    );
                }
                for port in self
                    .clients
                    .iter_mut()
                    .flatten()
                    .filter_map(|c| c.port.as_mut())
                {
                    for term in &mut port.termini {
                        if let Some(cur) = term.current.as_mut() {
                            if cur.req.dst_node == node.0 && cur.failed.is_none() {
                                cur.failed = Some(RejectReason::PeerDown);
                                cur.pending = None;
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// How long the engine may sleep before the fabric needs a poll: until its next
    /// timer, or 1 ms for a fabric that cannot wake a sleeper.
    pub fn fabric_sleep_bound(&self) -> std::time::Duration {
        let Some(remote) = &self.remote else {
            return std::time::Duration::MAX;
        };
        if remote.fabric.wait_fd().is_none() {
            return std::time::Duration::from_millis(1);
        }
        match remote.fabric.next_timer() {
            Some(t) => std::time::Duration::from_nanos(t.nanos_since(self.now())),
            None => std::time::Duration::MAX,
        }
    }

    /// The incarnation a ticket for `node` must carry, if the node is known.
    pub fn incarnation_of(&self, node: u32) -> Option<u32> {
        if node == self.iface.node().0 {
            return Some(self.incarnation);
        }
        self.remote
            .as_ref()?
            .peers
            .get(&node)
            .map(|p| p.incarnation)
    }
}

fn peer_down(queue: QueueId, slot: u32, meta_index: u32, node: NodeId) -> Notification {
    let mut entry = NotifEntry::zeroed();
    entry.kind.set(NotifKind::PeerDown as u16);
    entry.slot.set(slot);
    entry.meta_index.set(meta_index);
    entry.src_node.set(node.0);
    Notification {
        queue,
        entry,
        wake: true,
    }
}
