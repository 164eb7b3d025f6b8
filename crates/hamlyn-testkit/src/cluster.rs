//! A deterministic simulated cluster: one `hamlyn_core::Interface` per node, run over a
//! [`SimNet`] (DESIGN §2: "tested over a simulated network of many nodes with seeded
//! reordering, delay and node crashes").
//!
//! [`SimCluster`] plays every node's engine in one thread. Each node has its interface
//! (slot table and checks), its areas ([`VecAreas`]), bounded notification queues, a send
//! queue per destination, and records of what it learned: NACKs received and peer
//! events. Sending segments a message with [`SendSpec::segment`] and hands packets to
//! [`Fabric::send`] straight from the source area; a packet the fabric refuses with
//! [`FabricError::Full`] stays queued and is retried on the next step (never dropped).
//! Receiving is the two-phase path a zero-copy fabric uses: [`Interface::admit`] decides
//! from the header, the payload lands in the area slice it names, [`Interface::commit`]
//! counts it and may produce a notification. A refused packet is answered with the
//! [`hamlyn_core::Reject::nack`] header, and the sender records why.
//!
//! Peer loss follows DESIGN §2 ("a dead peer turns every outstanding operation that
//! depends on it into an error completion"): when a node learns a peer is down, its
//! messages to that peer still queued fail with [`SendFailure::PeerDown`], and every
//! message it had partly received with a packet from that peer gets a
//! [`NotifKind::PeerDown`] notification. A message whose packets were all handed to the
//! fabric stays [`SendStatus::Sent`]: as with a real network, the sender cannot know
//! whether its last packets arrived before the peer died, only that the peer is down
//! ([`SimCluster::peer_events`]).
//!
//! Every loop is bounded: [`SimCluster::run_until_idle`] stops at a simulated-time limit
//! and after [`ClusterConfig::max_steps`] steps, and reports whether it ended idle.

use std::collections::{BTreeMap, VecDeque};

use hamlyn_core::nack::nack_reason;
use hamlyn_core::{
    peer_down_notification, AreaId, Committed, Instant, Interface, MetaRange, Notification,
    OwnerId, PeerTable, Placement, QueueId, Reject, RejectReason, SegmentError, SendSpec,
    SlotConfig, SlotError, SlotMode, SlotPerms, VecAreas,
};
use hamlyn_wire::{
    Flags, Header, NodeId, NotifEntry, Op, RequestId, SlotId, Ticket, TicketFlags, FULL_SHARE,
    META_ENTRY_LEN,
};

use hamlyn_fabric::{
    Fabric, FabricError, Landing, PacketSink, PeerEvent, SharedBytesMut, SimConfig, SimError,
    SimNet, SimRng,
};

/// Parameters of a simulated cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The network.
    pub sim: SimConfig,
    /// Packets each node may receive per step (at least 1).
    pub poll_budget: usize,
    /// Most steps one run call takes before it gives up.
    pub max_steps: u64,
}

impl Default for ClusterConfig {
    fn default() -> ClusterConfig {
        ClusterConfig {
            sim: SimConfig::default(),
            poll_budget: 64,
            max_steps: 10_000_000,
        }
    }
}

/// Why a cluster operation could not be carried out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// No node with this id is in the cluster.
    #[error("no node {0} in the cluster")]
    NoSuchNode(NodeId),
    /// The node is crashed.
    #[error("node {0} is down")]
    NodeDown(NodeId),
    /// The node has no such area.
    #[error("node {node} has no area {area:?}")]
    NoSuchArea {
        /// The node.
        node: NodeId,
        /// The area asked for.
        area: AreaId,
    },
    /// The node has no such notification queue.
    #[error("node {node} has no notification queue {queue:?}")]
    NoSuchQueue {
        /// The node.
        node: NodeId,
        /// The queue asked for.
        queue: QueueId,
    },
    /// The node has no such slot.
    #[error("node {node} has no slot {slot}")]
    NoSuchSlot {
        /// The node.
        node: NodeId,
        /// The slot asked for.
        slot: SlotId,
    },
    /// The bytes to send are not all inside the source area.
    #[error("{len} bytes at {offset} are outside source area {area:?}")]
    SourceOutOfRange {
        /// The source area.
        area: AreaId,
        /// Start of the bytes.
        offset: u64,
        /// Their length.
        len: u64,
    },
    /// The ticket names an incarnation of its node that is not the current one.
    #[error("ticket for {node} incarnation {ticket}, which is now at {current}")]
    StaleTicket {
        /// The ticket's node.
        node: NodeId,
        /// The incarnation in the ticket.
        ticket: u32,
        /// The node's current incarnation.
        current: u32,
    },
    /// A slot-table operation failed.
    #[error(transparent)]
    Slot(#[from] SlotError),
    /// The message cannot be segmented as asked.
    #[error(transparent)]
    Segment(#[from] SegmentError),
    /// A fault-injection call failed.
    #[error(transparent)]
    Sim(#[from] SimError),
}

/// One message to send through a ticket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendRequest<'a> {
    /// The ticket (names the destination node, slot, key, ranges and Y).
    pub ticket: Ticket,
    /// Where the message goes, relative to the start of the ticket's byte range.
    pub offset: u64,
    /// Message length in bytes.
    pub len: u64,
    /// The sender's area holding the bytes.
    pub source: AreaId,
    /// Offset of the first byte in the source area.
    pub source_offset: u64,
    /// Metadata entry relative to the ticket's first, or `None` for a fast-mode message.
    pub meta_index: Option<u32>,
    /// User metadata (at most 60 bytes), carried by the first packet.
    pub meta: &'a [u8],
    /// Tag or fast-mode metadata word.
    pub word: u64,
    /// Payload bytes per packet.
    pub mtu: u64,
}

impl SendRequest<'_> {
    /// Sends `len` bytes from `source_offset` of `source` to the start of the ticket's
    /// range, with its first metadata entry, no metadata, and a 4 KiB mtu.
    pub fn new(
        ticket: Ticket,
        source: AreaId,
        source_offset: u64,
        len: u64,
    ) -> SendRequest<'static> {
        SendRequest {
            ticket,
            offset: 0,
            len,
            source,
            source_offset,
            meta_index: Some(0),
            meta: &[],
            word: 0,
            mtu: 4096,
        }
    }
}

/// Why a message failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendFailure {
    /// The destination went down before every packet was handed to the fabric.
    PeerDown(NodeId),
    /// The destination refused a packet; the reason if its code is known.
    Nack(Option<RejectReason>),
    /// The source area vanished before every packet was sent.
    SourceGone,
    /// The sending node crashed with packets still queued.
    LocalCrash,
    /// The fabric refused a packet for another reason.
    Fabric(FabricError),
}

/// Where a message stands, as its sender sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendStatus {
    /// Some packets are still queued at the sender.
    Queued,
    /// Every packet was handed to the fabric.
    Sent,
    /// The message failed (the first failure is kept).
    Failed(SendFailure),
}

/// A NACK a node received: which of its requests was refused, by whom, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NackRecord {
    /// Simulated time of arrival.
    pub at: Instant,
    /// The node that refused the packet.
    pub from: NodeId,
    /// The refused packet's request id.
    pub request: RequestId,
    /// The reason, if its code is defined.
    pub reason: Option<RejectReason>,
    /// The reason code as carried on the wire.
    pub code: u64,
    /// The slot the refused packet named.
    pub slot: SlotId,
    /// The refused packet's offset.
    pub offset: u64,
}

/// A peer event a node received, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerRecord {
    /// Simulated time it was polled.
    pub at: Instant,
    /// The event.
    pub event: PeerEvent,
}

/// Counters of one simulated node (beyond its interface's own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCounters {
    /// Packets whose header contradicted the fabric (source or metadata length).
    pub malformed: u64,
    /// NACKs queued to send.
    pub nacks_queued: u64,
    /// NACKs that could not be sent (their destination was down).
    pub nacks_lost: u64,
    /// Notifications posted.
    pub notifications: u64,
    /// Notifications for a queue that does not exist.
    pub lost_notifications: u64,
    /// Peer-down notifications posted for partly received messages.
    pub peer_down_notifications: u64,
    /// Fabric errors on poll or on sends other than back-pressure and peer-down.
    pub fabric_errors: u64,
}

/// What a run call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunOutcome {
    /// Whether the cluster ended idle (nothing queued, in flight or unpolled).
    pub idle: bool,
    /// Steps taken.
    pub steps: u64,
    /// Simulated time at the end.
    pub now: Instant,
}

/// The areas and slot made by [`SimCluster::create_receive_slot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveSlot {
    /// The slot.
    pub slot: SlotId,
    /// Its message area (the slot covers all of it).
    pub area: AreaId,
    /// Its metadata area.
    pub meta_area: AreaId,
}

/// A bounded notification queue: a full queue counts what it could not take and never
/// overwrites.
#[derive(Clone, Debug, Default)]
struct NotifQueue {
    capacity: usize,
    entries: VecDeque<NotifEntry>,
    overflow: u64,
    next_seq: u32,
}

impl NotifQueue {
    fn push(&mut self, mut entry: NotifEntry) -> bool {
        if self.entries.len() >= self.capacity {
            self.overflow += 1;
            return false;
        }
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        entry.seq.set(self.next_seq);
        self.entries.push_back(entry);
        true
    }
}

/// Where a queued packet's payload comes from.
#[derive(Clone, Debug)]
enum Payload {
    /// Bytes of the sender's area (sent without a copy).
    Area { area: AreaId, offset: u64 },
    /// Bytes held by the packet (injected packets).
    Inline(Vec<u8>),
}

/// A packet waiting to be handed to the fabric.
#[derive(Clone, Debug)]
struct Outgoing {
    header: Header,
    meta: Vec<u8>,
    payload: Payload,
    /// The message it belongs to (`None` for NACKs and injected packets).
    message: Option<u64>,
}

/// A message's sender-side state.
#[derive(Clone, Debug)]
struct MessageRecord {
    dst: NodeId,
    packets: u64,
    handed: u64,
    status: SendStatus,
}

impl MessageRecord {
    fn fail(&mut self, why: SendFailure) {
        if !matches!(self.status, SendStatus::Failed(_)) {
            self.status = SendStatus::Failed(why);
        }
    }
}

fn fail_message(messages: &mut BTreeMap<u64, MessageRecord>, id: Option<u64>, why: SendFailure) {
    if let Some(m) = id.and_then(|id| messages.get_mut(&id)) {
        m.fail(why);
    }
}

/// One simulated node's engine state.
#[derive(Debug)]
struct NodeState {
    crashed: bool,
    iface: Interface,
    areas: VecAreas,
    queues: BTreeMap<QueueId, NotifQueue>,
    outq: BTreeMap<NodeId, VecDeque<Outgoing>>,
    messages: BTreeMap<u64, MessageRecord>,
    next_seq: u32,
    nacks: Vec<NackRecord>,
    peer_events: Vec<PeerRecord>,
    /// Peers, their incarnations, and who contributed to partly received messages: the
    /// engine's own sans-IO table, so the cluster decides peer loss as the engine does.
    peers: PeerTable,
    /// Landing buffer for a payload whose placement vanished between admit and deposit.
    scratch: Vec<u8>,
    counters: NodeCounters,
}

impl NodeState {
    fn new(node: NodeId) -> NodeState {
        NodeState {
            crashed: false,
            iface: Interface::new(node),
            areas: VecAreas::new(),
            queues: BTreeMap::new(),
            outq: BTreeMap::new(),
            messages: BTreeMap::new(),
            next_seq: 0,
            nacks: Vec::new(),
            peer_events: Vec::new(),
            peers: PeerTable::new(),
            scratch: Vec::new(),
            counters: NodeCounters::default(),
        }
    }

    fn post(&mut self, n: Notification) {
        match self.queues.get_mut(&n.queue) {
            Some(q) => {
                if q.push(n.entry) {
                    self.counters.notifications += 1;
                }
            }
            None => self.counters.lost_notifications += 1,
        }
    }

    #[cold]
    fn queue_nack(&mut self, rej: &Reject) {
        if let Some(h) = rej.nack {
            self.counters.nacks_queued += 1;
            self.outq.entry(h.dst).or_default().push_back(Outgoing {
                header: h,
                meta: Vec::new(),
                payload: Payload::Inline(Vec::new()),
                message: None,
            });
        }
    }

    #[cold]
    fn peer_down(&mut self, peer: NodeId) {
        if let Some(q) = self.outq.remove(&peer) {
            for p in q {
                if p.message.is_none() {
                    self.counters.nacks_lost += 1;
                }
                fail_message(&mut self.messages, p.message, SendFailure::PeerDown(peer));
            }
        }
        for partial in self.peers.peer_down(peer) {
            let queue = self
                .iface
                .slots()
                .get(partial.0)
                .and_then(|s| s.config.queue);
            if let Some(queue) = queue {
                self.counters.peer_down_notifications += 1;
                self.post(peer_down_notification(queue, partial, peer));
            }
        }
    }
}

/// The receive side of one node for one poll: the core's admit, deposit, commit.
///
/// It keeps one packet's placement at a time, which fits fabrics that deliver whole
/// packets within a poll, as [`SimNet`] does.
struct NodeSink<'a> {
    node: &'a mut NodeState,
    now: Instant,
    placement: Option<Placement>,
    events: usize,
}

impl NodeSink<'_> {
    /// After a commit (or a copying receive): track partial messages, post the
    /// notification, or NACK the refusal.
    fn finish(&mut self, from: NodeId, h: &Header, r: Result<Committed, Reject>) {
        let node = &mut *self.node;
        match r {
            Ok(done) => {
                node.peers.committed(from, h, done.message_done);
                if let Some(n) = done.notification {
                    node.post(n);
                }
            }
            Err(rej) => node.queue_nack(&rej),
        }
    }

    #[cold]
    fn record_nack(&mut self, from: NodeId, h: &Header) {
        let node = &mut *self.node;
        let reason = nack_reason(h);
        node.nacks.push(NackRecord {
            at: self.now,
            from,
            request: h.request,
            reason,
            code: h.word,
            slot: h.slot,
            offset: h.offset,
        });
        if let Some(m) = node.messages.get_mut(&h.request.to_u64()) {
            if m.dst == from {
                m.fail(SendFailure::Nack(reason));
            }
        }
    }
}

impl PacketSink for NodeSink<'_> {
    fn on_header(&mut self, from: NodeId, header: &Header, meta: &[u8]) -> Landing {
        self.placement = None;
        if header.src != from || meta.len() != usize::from(header.meta_len) {
            self.node.counters.malformed += 1;
            self.node.iface.reject_malformed();
            return Landing::Discard;
        }
        match header.op {
            Op::Nack => {
                self.record_nack(from, header);
                Landing::Discard
            }
            Op::Hello | Op::Heartbeat => Landing::Discard,
            _ => {
                let node = &mut *self.node;
                match node.iface.admit(header, &mut node.areas) {
                    Ok(p) => {
                        self.placement = Some(p);
                        Landing::Accept
                    }
                    Err(rej) => {
                        node.queue_nack(&rej);
                        Landing::Discard
                    }
                }
            }
        }
    }

    fn payload_buf(&mut self, header: &Header) -> SharedBytesMut<'_> {
        let len = header.payload_len as usize;
        let node = &mut *self.node;
        if let Some(p) = self.placement.filter(|p| p.len == header.payload_len) {
            // Plain heap areas (`VecAreas`): a slice of the area's own buffer.
            let place = usize::try_from(p.offset)
                .ok()
                .and_then(|at| Some(at..at.checked_add(len)?));
            if let Some(buf) = node
                .areas
                .bytes_mut(p.area)
                .zip(place)
                .and_then(|(area, r)| area.get_mut(r))
            {
                return SharedBytesMut::from(buf);
            }
        }
        // The placement vanished (cannot happen in one thread, but never trust it):
        // land in scratch, and let on_payload re-check and refuse with the real reason.
        self.placement = None;
        node.scratch.clear();
        node.scratch.resize(len, 0);
        SharedBytesMut::from(&mut node.scratch[..])
    }

    fn on_payload(&mut self, from: NodeId, header: &Header, meta: &[u8]) {
        let node = &mut *self.node;
        let r = if self.placement.take().is_some() {
            node.iface.commit(header, meta, &mut node.areas)
        } else {
            // Re-admit by copy: either it lands after all, or the core refuses and
            // counts it with the true reason (and builds the NACK).
            let payload = std::mem::take(&mut node.scratch);
            let r = node
                .iface
                .receive_committed(header, meta, &payload, &mut node.areas);
            node.scratch = payload;
            r
        };
        self.finish(from, header, r);
    }

    fn on_peer(&mut self, event: PeerEvent) {
        self.events += 1;
        self.node.peer_events.push(PeerRecord {
            at: self.now,
            event,
        });
        match event {
            PeerEvent::Up { node, incarnation } => {
                self.node.peers.peer_up(node, incarnation);
            }
            PeerEvent::Down { node } => self.node.peer_down(node),
            // `PeerEvent` is non-exhaustive; an event this driver does not know is only
            // recorded (above).
            _ => {}
        }
    }
    fn on_unconfirmed(&mut self, _: NodeId, _: &Header) {
        // The simulated network never reports any: its losses are announced
        // by `Down` alone, and `PeerTable` decides what they break.
    }
}

/// Many nodes' interfaces over one simulated network, driven step by step.
#[derive(Debug)]
pub struct SimCluster {
    net: SimNet,
    now: Instant,
    rng: SimRng,
    config: ClusterConfig,
    nodes: Vec<NodeState>,
}

impl SimCluster {
    /// A cluster of `nodes` nodes (ids `0..nodes`) with no areas or slots, whose network
    /// and keys are seeded with `seed`.
    pub fn new(nodes: usize, seed: u64, config: ClusterConfig) -> SimCluster {
        let config = ClusterConfig {
            poll_budget: config.poll_budget.max(1),
            ..config
        };
        SimCluster {
            net: SimNet::new(nodes, seed, config.sim),
            now: Instant(0),
            rng: SimRng::new(seed ^ 0x4841_4D4C_594E_4B45),
            config,
            nodes: (0..nodes)
                .map(|i| NodeState::new(NodeId(i as u32)))
                .collect(),
        }
    }

    /// The simulated time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The network (counters, link state).
    pub fn net(&self) -> &SimNet {
        &self.net
    }

    fn index(&self, node: NodeId) -> Result<usize, ClusterError> {
        let i = node.0 as usize;
        if i < self.nodes.len() {
            Ok(i)
        } else {
            Err(ClusterError::NoSuchNode(node))
        }
    }

    fn live(&self, node: NodeId) -> Result<usize, ClusterError> {
        let i = self.index(node)?;
        if self.nodes[i].crashed {
            return Err(ClusterError::NodeDown(node));
        }
        Ok(i)
    }

    fn state(&self, node: NodeId) -> Option<&NodeState> {
        self.nodes.get(node.0 as usize)
    }

    /// The node's interface (slot table and counters).
    pub fn interface(&self, node: NodeId) -> Option<&Interface> {
        self.state(node).map(|s| &s.iface)
    }

    /// The node's counters.
    pub fn counters(&self, node: NodeId) -> Option<NodeCounters> {
        self.state(node).map(|s| s.counters)
    }

    /// Registers a zeroed area of `len` bytes on `node`.
    pub fn create_area(&mut self, node: NodeId, len: usize) -> Result<AreaId, ClusterError> {
        let i = self.live(node)?;
        Ok(self.nodes[i].areas.add(len))
    }

    /// An area's bytes.
    pub fn area(&self, node: NodeId, area: AreaId) -> Option<&[u8]> {
        self.state(node).and_then(|s| s.areas.bytes(area))
    }

    /// An area's bytes, to fill before sending.
    pub fn area_mut(&mut self, node: NodeId, area: AreaId) -> Option<&mut [u8]> {
        self.nodes
            .get_mut(node.0 as usize)
            .and_then(|s| s.areas.bytes_mut(area))
            .map(|v| v.as_mut_slice())
    }

    /// Creates a notification queue of `capacity` entries on `node`.
    pub fn create_queue(&mut self, node: NodeId, capacity: usize) -> Result<QueueId, ClusterError> {
        let i = self.live(node)?;
        let queues = &mut self.nodes[i].queues;
        let id = QueueId(queues.len() as u32);
        queues.insert(
            id,
            NotifQueue {
                capacity,
                ..NotifQueue::default()
            },
        );
        Ok(id)
    }

    /// Creates a slot on `node` with a fresh random key.
    pub fn create_slot(
        &mut self,
        node: NodeId,
        config: SlotConfig,
    ) -> Result<SlotId, ClusterError> {
        let i = self.live(node)?;
        if let Some(queue) = config.queue {
            if !self.nodes[i].queues.contains_key(&queue) {
                return Err(ClusterError::NoSuchQueue { node, queue });
            }
        }
        let key = self.rng.next_u64();
        Ok(self.nodes[i].iface.slots_mut().create(config, key)?)
    }

    /// Creates a message area of `len` bytes, a metadata area of `entries` entries, and a
    /// normal-mode slot over all of it posting to `queue`.
    pub fn create_receive_slot(
        &mut self,
        node: NodeId,
        len: usize,
        entries: u32,
        queue: Option<QueueId>,
    ) -> Result<ReceiveSlot, ClusterError> {
        let area = self.create_area(node, len)?;
        let meta_area = self.create_area(node, entries as usize * META_ENTRY_LEN)?;
        let slot = self.create_slot(
            node,
            SlotConfig {
                owner: OwnerId(0),
                area,
                base: 0,
                len: len as u64,
                mode: SlotMode::Normal,
                meta: Some(MetaRange {
                    area: meta_area,
                    base: 0,
                    count: entries,
                }),
                queue,
                perms: SlotPerms::default(),
            },
        )?;
        Ok(ReceiveSlot {
            slot,
            area,
            meta_area,
        })
    }

    /// A ticket for all of a slot: its whole byte range and metadata entries, the full
    /// counting share (Y = 0), the node's current incarnation.
    pub fn ticket(&self, node: NodeId, slot: SlotId) -> Result<Ticket, ClusterError> {
        let i = self.index(node)?;
        let s = self.nodes[i]
            .iface
            .slots()
            .get(slot)
            .ok_or(ClusterError::NoSuchSlot { node, slot })?;
        let mut flags = TicketFlags::WRITE;
        if s.config.mode == SlotMode::Fast {
            flags = flags | TicketFlags::FAST;
        }
        Ok(Ticket {
            node,
            incarnation: self.net.incarnation(node).unwrap_or(0),
            slot,
            key: s.key,
            meta_first: 0,
            meta_count: s.config.meta.map_or(0, |m| m.count),
            offset: 0,
            len: s.config.len,
            share: FULL_SHARE,
            flags,
        })
    }

    /// Segments a message from `node` and queues its packets; sends what the fabric takes
    /// now, the rest on later steps. The returned request id names the message in
    /// [`SimCluster::status`] and in NACKs.
    pub fn send(&mut self, node: NodeId, req: &SendRequest<'_>) -> Result<RequestId, ClusterError> {
        let i = self.live(node)?;
        let dst = req.ticket.node;
        let current = if dst == node {
            self.net.incarnation(node)
        } else {
            self.nodes[i].peers.live_incarnation(dst)
        };
        if let Some(current) = current {
            if current != req.ticket.incarnation {
                return Err(ClusterError::StaleTicket {
                    node: dst,
                    ticket: req.ticket.incarnation,
                    current,
                });
            }
        }
        let st = &mut self.nodes[i];
        let Some(src) = st.areas.bytes(req.source) else {
            return Err(ClusterError::NoSuchArea {
                node,
                area: req.source,
            });
        };
        let end = req.source_offset.checked_add(req.len);
        if end.is_none_or(|e| e > src.len() as u64) {
            return Err(ClusterError::SourceOutOfRange {
                area: req.source,
                offset: req.source_offset,
                len: req.len,
            });
        }
        let request = RequestId {
            terminus: 0,
            seq: st.next_seq,
        };
        let spec = SendSpec::from_ticket(
            node,
            &req.ticket,
            req.offset,
            req.len,
            req.meta_index,
            req.meta,
            req.word,
            request,
        )?;
        let segments = spec.segment(req.mtu)?;
        st.next_seq = st.next_seq.wrapping_add(1);
        let id = request.to_u64();
        st.messages.insert(
            id,
            MessageRecord {
                dst,
                packets: segments.packets(),
                handed: 0,
                status: SendStatus::Queued,
            },
        );
        let q = st.outq.entry(dst).or_default();
        for s in segments {
            let meta = if s.header.flags.contains(Flags::FIRST) {
                req.meta.to_vec()
            } else {
                Vec::new()
            };
            q.push_back(Outgoing {
                header: s.header,
                meta,
                payload: Payload::Area {
                    area: req.source,
                    offset: req.source_offset + s.start,
                },
                message: Some(id),
            });
        }
        self.flush(i);
        Ok(request)
    }

    /// Queues an arbitrary packet from `node` (for tests of forged or malformed traffic).
    /// The fabric still checks it; a refusal is counted in
    /// [`NodeCounters::fabric_errors`].
    pub fn inject(
        &mut self,
        node: NodeId,
        header: Header,
        meta: &[u8],
        payload: &[u8],
    ) -> Result<(), ClusterError> {
        let i = self.live(node)?;
        self.nodes[i]
            .outq
            .entry(header.dst)
            .or_default()
            .push_back(Outgoing {
                header,
                meta: meta.to_vec(),
                payload: Payload::Inline(payload.to_vec()),
                message: None,
            });
        self.flush(i);
        Ok(())
    }

    /// A message's status as its sender sees it.
    pub fn status(&self, node: NodeId, request: RequestId) -> Option<SendStatus> {
        self.state(node)?
            .messages
            .get(&request.to_u64())
            .map(|m| m.status.clone())
    }

    /// The notifications waiting in a queue, oldest first.
    pub fn notifications(&self, node: NodeId, queue: QueueId) -> Option<&VecDeque<NotifEntry>> {
        self.state(node)?.queues.get(&queue).map(|q| &q.entries)
    }

    /// Removes and returns the notifications waiting in a queue.
    pub fn take_notifications(&mut self, node: NodeId, queue: QueueId) -> Vec<NotifEntry> {
        self.nodes
            .get_mut(node.0 as usize)
            .and_then(|s| s.queues.get_mut(&queue))
            .map(|q| q.entries.drain(..).collect())
            .unwrap_or_default()
    }

    /// Notifications a full queue could not take.
    pub fn queue_overflow(&self, node: NodeId, queue: QueueId) -> Option<u64> {
        self.state(node)?.queues.get(&queue).map(|q| q.overflow)
    }

    /// The NACKs `node` received, in arrival order.
    pub fn nacks(&self, node: NodeId) -> &[NackRecord] {
        self.state(node).map_or(&[], |s| &s.nacks)
    }

    /// The peer events `node` received, in order.
    pub fn peer_events(&self, node: NodeId) -> &[PeerRecord] {
        self.state(node).map_or(&[], |s| &s.peer_events)
    }

    /// Whether `node` was told `peer` went down.
    pub fn saw_peer_down(&self, node: NodeId, peer: NodeId) -> bool {
        self.peer_events(node)
            .iter()
            .any(|r| r.event == PeerEvent::Down { node: peer })
    }

    /// Crashes `node`: its queued packets are lost (their messages fail with
    /// [`SendFailure::LocalCrash`]), the network drops its traffic and tells its peers.
    /// Its areas and interface stay readable for inspection until a restart.
    pub fn crash(&mut self, node: NodeId) -> Result<(), ClusterError> {
        let i = self.index(node)?;
        self.net.crash(node)?;
        let st = &mut self.nodes[i];
        st.crashed = true;
        for (_, q) in std::mem::take(&mut st.outq) {
            for p in q {
                fail_message(&mut st.messages, p.message, SendFailure::LocalCrash);
            }
        }
        Ok(())
    }

    /// Restarts `node` with a new incarnation and empty state (no areas, slots or
    /// queues), as a rebooted engine.
    pub fn restart(&mut self, node: NodeId) -> Result<(), ClusterError> {
        let i = self.index(node)?;
        self.crash(node)?;
        self.net.restart(node)?;
        self.nodes[i] = NodeState::new(node);
        Ok(())
    }

    /// Cuts the link between two nodes (see [`SimNet::cut_link`]).
    pub fn cut_link(&mut self, a: NodeId, b: NodeId) -> Result<(), ClusterError> {
        Ok(self.net.cut_link(a, b)?)
    }

    /// Heals the link between two nodes (see [`SimNet::heal_link`]).
    pub fn heal_link(&mut self, a: NodeId, b: NodeId) -> Result<(), ClusterError> {
        Ok(self.net.heal_link(a, b)?)
    }

    /// Nothing queued at a live node, in flight, or waiting to be polled.
    pub fn is_idle(&self) -> bool {
        self.net.in_flight() == 0
            && self.net.pending_events() == 0
            && self
                .nodes
                .iter()
                .all(|n| n.crashed || n.outq.values().all(VecDeque::is_empty))
    }

    /// Hands node `i`'s queued packets to the fabric until each destination pushes back.
    fn flush(&mut self, i: usize) -> usize {
        let SimCluster {
            net, nodes, now, ..
        } = self;
        let now = *now;
        let NodeState {
            outq,
            areas,
            messages,
            counters,
            crashed,
            ..
        } = &mut nodes[i];
        if *crashed {
            return 0;
        }
        let mut fabric = net.fabric(NodeId(i as u32));
        let mut sent = 0;
        for (&dst, q) in outq.iter_mut() {
            while let Some(p) = q.front() {
                let message = p.message;
                let bytes: Option<&[u8]> = match &p.payload {
                    Payload::Inline(v) => Some(v),
                    Payload::Area { area, offset } => {
                        let start = usize::try_from(*offset).ok();
                        let len = p.header.payload_len as usize;
                        areas
                            .bytes(*area)
                            .and_then(|b| start.and_then(|s| b.get(s..s.checked_add(len)?)))
                    }
                };
                let Some(bytes) = bytes else {
                    fail_message(messages, message, SendFailure::SourceGone);
                    q.pop_front();
                    continue;
                };
                match fabric.send(now, &p.header, &p.meta, &[bytes.into()]) {
                    Ok(()) => {
                        sent += 1;
                        if let Some(m) = message.and_then(|id| messages.get_mut(&id)) {
                            m.handed += 1;
                            if m.handed == m.packets && m.status == SendStatus::Queued {
                                m.status = SendStatus::Sent;
                            }
                        }
                        q.pop_front();
                    }
                    Err(FabricError::Full) => break,
                    Err(FabricError::PeerDown(_) | FabricError::NoRoute(_)) => {
                        for p in q.drain(..) {
                            if p.message.is_none() {
                                counters.nacks_lost += 1;
                            }
                            fail_message(messages, p.message, SendFailure::PeerDown(dst));
                        }
                    }
                    Err(e) => {
                        counters.fabric_errors += 1;
                        fail_message(messages, message, SendFailure::Fabric(e));
                        q.pop_front();
                    }
                }
            }
        }
        outq.retain(|_, q| !q.is_empty());
        sent
    }

    /// Polls node `i`; returns whether anything (a packet or an event) arrived.
    fn poll_node(&mut self, i: usize) -> bool {
        let SimCluster {
            net,
            nodes,
            now,
            config,
            ..
        } = self;
        let node = &mut nodes[i];
        if node.crashed {
            return false;
        }
        let mut sink = NodeSink {
            node,
            now: *now,
            placement: None,
            events: 0,
        };
        let r = net
            .fabric(NodeId(i as u32))
            .poll(*now, &mut sink, config.poll_budget);
        let events = sink.events;
        match r {
            Ok(n) => n > 0 || events > 0,
            Err(_) => {
                node.counters.fabric_errors += 1;
                events > 0
            }
        }
    }

    /// One step: every live node receives (up to its poll budget) and sends what it can;
    /// if nothing happened, the clock jumps to the next delivery, unless that is past
    /// `limit`. Returns false when nothing happened and nothing can happen before
    /// `limit`.
    fn step_within(&mut self, limit: Instant) -> bool {
        let mut did = false;
        for i in 0..self.nodes.len() {
            did |= self.poll_node(i);
        }
        for i in 0..self.nodes.len() {
            did |= self.flush(i) > 0;
        }
        if did {
            return true;
        }
        match self.net.next_event_time() {
            Some(t) if t > self.now && t <= limit => {
                self.now = t;
                true
            }
            _ => false,
        }
    }

    /// One step with no time limit; false when nothing happened and nothing is pending.
    pub fn step(&mut self) -> bool {
        self.step_within(Instant(u64::MAX))
    }

    /// Steps until the cluster is idle, simulated time would pass `max_time`, or
    /// [`ClusterConfig::max_steps`] steps were taken; never loops forever.
    pub fn run_until_idle(&mut self, max_time: Instant) -> RunOutcome {
        let mut steps = 0;
        while !self.is_idle() && steps < self.config.max_steps && self.step_within(max_time) {
            steps += 1;
        }
        RunOutcome {
            idle: self.is_idle(),
            steps,
            now: self.now,
        }
    }
}
