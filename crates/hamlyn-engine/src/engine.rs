//! The engine's state and its data path: serve termini round robin, one packet per
//! terminus per turn, through the core's checks, with one copy from the sender's send
//! area (or the inline bytes) into the receiver's area.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use hamlyn_core::{
    AreaId, Areas, Instant, Interface, Memory, Notification, Placement, QueueId, RejectReason,
    Segment, Segmenter, SendSpec,
};
use hamlyn_shm::sync::AtomicBool;
use hamlyn_shm::wake::EventFd;
use hamlyn_wire::request::{
    send_flags, Completion, Payload, RequestOp, SendRequest, MAX_GATHER, REQUEST_LEN,
};
use hamlyn_wire::{Flags, NodeId, Op, RequestId, SlotId};

use crate::areas::AreaTable;
use crate::config::EngineConfig;
use crate::port::{InFlight, Port, TerminusState};
use crate::sched::{Scheduler, TerminusKey, PRIORITY_LEVELS};
use crate::source::{Piece, Source};
use crate::stats::EngineCounters;

/// One attached (or attaching) client.
#[derive(Debug)]
pub struct Client {
    /// Its id, also the owner id of its slots and areas.
    pub id: u32,
    /// Its process id, as it said.
    pub pid: u32,
    /// The control socket.
    pub sock: OwnedFd,
    /// Its port, once attached.
    pub port: Option<Port>,
}

/// The port of client `cid`, borrowing only the client table.
pub fn port_mut(clients: &mut [Option<Client>], cid: u32) -> Option<&mut Port> {
    clients.get_mut(cid as usize)?.as_mut()?.port.as_mut()
}

/// Queue ids pack the client id and the queue's index in its port.
pub fn queue_id(client: u32, index: u16) -> QueueId {
    QueueId((client << 8) | u32::from(index))
}

/// The client and queue index a queue id packs.
pub fn queue_parts(q: QueueId) -> (u32, usize) {
    (q.0 >> 8, (q.0 & 0xFF) as usize)
}

/// Everything the engine knows.
#[derive(Debug)]
pub struct EngineState {
    /// Settings.
    pub cfg: EngineConfig,
    /// This engine's incarnation (a restarted engine is a new one).
    pub incarnation: u32,
    /// The interface logic: slots, checks, counting.
    pub iface: Interface,
    /// Registered areas.
    pub areas: AreaTable,
    /// Clients by id (None: free id).
    pub clients: Vec<Option<Client>>,
    /// Terminus scheduling.
    pub sched: Scheduler,
    /// Turns taken (the scheduler staggers cold termini by it).
    pub turns: u64,
    /// The next turn looks at every terminus, cold ones too (set after a sleep).
    pub look_at_all: bool,
    /// Slots destroyed because their owner died: packets to them fail with PeerDown.
    pub tombstones: HashSet<u32>,
    /// The doorbell clients poke when the engine sleeps.
    pub doorbell: EventFd,
    /// Set to stop the engine.
    pub stop: Arc<AtomicBool>,
    /// Counters.
    pub counters: EngineCounters,
    /// The fabric to other nodes, if any.
    pub remote: Option<crate::remote::Remote>,
    /// Answers to remote reads and atomics being sent.
    pub replies: std::collections::VecDeque<crate::rma::ReplyJob>,
    /// The name registry (entries on the registry node, forwarded requests everywhere).
    pub registry: crate::registry::Registry,
    /// Error completions waiting for room in a client's error ring.
    pub late_errors: std::collections::VecDeque<(u32, Completion)>,
    /// Monotonic origin for `Instant`.
    pub origin: std::time::Instant,
}

impl EngineState {
    /// Now, for the core.
    pub fn now(&self) -> Instant {
        Instant(self.origin.elapsed().as_nanos() as u64)
    }

    /// The client, if attached.
    pub fn client_mut(&mut self, id: u32) -> Option<&mut Client> {
        self.clients.get_mut(id as usize).and_then(Option::as_mut)
    }

    /// One scheduling turn over every open terminus; whether any had work.
    pub fn turn(&mut self) -> bool {
        // The scheduler's order (`Scheduler::turn`), walked by index so that `serve` can
        // borrow the whole state: no copy of the scheduler per turn.
        // Cold termini are looked at on their share of the turns only (`sched`), every
        // one on the first turn after a sleep.
        let all = std::mem::take(&mut self.look_at_all);
        self.turns = self.turns.wrapping_add(1);
        let turn = self.turns;
        let mut busy = false;
        for level in 0..PRIORITY_LEVELS {
            let n = self.sched.level_len(level);
            if n == 0 {
                continue;
            }
            for i in 0..n {
                let Some(place) = self.sched.place(level, i) else {
                    continue;
                };
                if !self.sched.due(level, place, turn, all) {
                    continue;
                }
                if let Some(key) = self.sched.at(level, place) {
                    let had_work = self.serve(key);
                    self.sched.record(level, place, had_work);
                    busy |= had_work;
                }
            }
            self.sched.rotate(level);
            if busy {
                break;
            }
        }
        if !self.replies.is_empty() {
            busy |= self.serve_replies();
        }
        if !self.late_errors.is_empty() {
            self.flush_late_errors();
        }
        busy
    }

    /// Sends at most one packet of terminus `key`; whether it had work. A request ends
    /// on the turn of its last packet (or of its refusal): a single-packet message is
    /// taken, delivered and completed in one turn, without ever being stored as an
    /// [`InFlight`] (which only multi-packet requests, and the rare request that must
    /// wait for room for its error completion, become).
    fn serve(&mut self, (cid, t): TerminusKey) -> bool {
        let t = usize::from(t);
        let Some(term) = port_mut(&mut self.clients, cid).and_then(|p| p.termini.get_mut(t)) else {
            return false;
        };
        // Tested first: `take` on an empty `Option<InFlight>` would still copy all of it.
        if term.current.is_some() {
            if let Some(cur) = term.current.take() {
                self.continue_request(cid, t, cur);
            }
            return true;
        }
        if term.broken {
            return false;
        }
        let Some(ring) = term.ring.as_mut() else {
            return false;
        };
        // An empty ring is the common case of an idle turn: no buffer to prepare then.
        match ring.has_next() {
            Ok(true) => {}
            Ok(false) => return false,
            Err(_) => {
                ring_corrupt(&mut self.counters, term, cid, t);
                return false;
            }
        }
        let mut buf = [0u8; REQUEST_LEN];
        match ring.pop(&mut buf) {
            Ok(true) => {}
            Ok(false) => return false,
            Err(_) => {
                ring_corrupt(&mut self.counters, term, cid, t);
                return false;
            }
        }
        // A request we cannot read still finishes, with an error naming its slot of the
        // ring (the client's own count of pushes).
        let ring_seq = term.finished as u32;
        self.counters.requests += 1;
        match self.open_request(cid, t, &buf, ring_seq) {
            Ok((req, seg)) => self.first_packet(cid, t, &req, seg),
            Err((seq, reason)) => {
                if !self.end_request(cid, t, seq, Some(reason)) {
                    self.put_current(cid, t, failed_request(seq, reason));
                }
            }
        }
        true
    }

    /// Decodes and checks a request copied out of terminus `t`'s ring and segments it;
    /// on refusal, the sequence number to report and why.
    fn open_request(
        &mut self,
        cid: u32,
        t: usize,
        buf: &[u8; REQUEST_LEN],
        ring_seq: u32,
    ) -> Result<(SendRequest, Segmenter), (u32, RejectReason)> {
        let Ok(req) = SendRequest::decode(buf) else {
            self.counters.bad_requests += 1;
            return Err((ring_seq, RejectReason::Malformed));
        };
        let node = self.iface.node();
        if req.incarnation != 0
            && self
                .incarnation_of(req.dst_node)
                .is_some_and(|i| i != req.incarnation)
        {
            self.counters.bad_requests += 1;
            return Err((req.seq, RejectReason::StaleIncarnation));
        }
        let fast = req.is_fast();
        let len = req.len();
        let spec = SendSpec {
            src: node,
            dst: NodeId(req.dst_node),
            slot: SlotId(req.slot),
            key: req.key,
            meta_index: req.meta_index,
            offset: req.offset,
            len,
            meta: req.metadata(),
            y: req.y,
            max_packets: None,
            notify: req.flags & send_flags::NOTIFY != 0,
            wake: req.flags & send_flags::WAKE != 0,
            word: req.word,
            request: RequestId {
                terminus: (cid << 8) | t as u32,
                seq: req.seq,
            },
        };
        // Packets to other nodes are smaller, so they stripe across rails.
        let mtu = if req.dst_node == node.0 {
            self.cfg.intra_mtu
        } else {
            self.cfg.remote_mtu
        };
        // Fast messages must be one packet whatever the packet size.
        let mtu = if fast { mtu.max(len).max(1) } else { mtu };
        let op = match req.op {
            RequestOp::Write => Op::Write,
            RequestOp::Read => Op::ReadReq,
            RequestOp::Atomic => Op::AtomicReq,
        };
        match spec.segment(mtu) {
            Ok(seg) => Ok((req, seg.with_op(op))),
            Err(_) => {
                self.counters.bad_requests += 1;
                Err((req.seq, RejectReason::Malformed))
            }
        }
    }

    /// Sends the first packet of a request just taken from the ring. A request that
    /// needs nothing more ends here; one with packets left (or waiting for the fabric,
    /// or for room for its error completion) is kept in flight.
    fn first_packet(&mut self, cid: u32, t: usize, req: &SendRequest, mut seg: Segmenter) {
        let mut cur_pending = None;
        let mut failed = None;
        if let Some(first) = seg.next() {
            match self.deliver(cid, req, &first) {
                Ok(true) => {}
                // The fabric is full: this packet goes first on a later turn.
                Ok(false) => cur_pending = Some(first),
                Err(reason) => failed = Some(reason),
            }
        }
        let more = failed.is_none() && (cur_pending.is_some() || seg.len() > 0);
        if !more && self.end_request(cid, t, req.seq, failed) {
            return;
        }
        self.put_current(
            cid,
            t,
            InFlight {
                req: *req,
                seg: Some(seg),
                pending: cur_pending,
                failed,
            },
        );
    }

    /// Sends the next packet of a request in flight, or ends it.
    #[cold]
    fn continue_request(&mut self, cid: u32, t: usize, mut cur: InFlight) {
        let next = if cur.failed.is_none() {
            cur.pending
                .take()
                .or_else(|| cur.seg.as_mut().and_then(Iterator::next))
        } else {
            None
        };
        if let Some(seg) = next {
            match self.deliver(cid, &cur.req, &seg) {
                Ok(true) => {}
                // The fabric is full: this packet goes first on a later turn.
                Ok(false) => cur.pending = Some(seg),
                Err(reason) => cur.failed = Some(reason),
            }
            let more = cur.failed.is_none()
                && (cur.pending.is_some() || cur.seg.as_ref().is_some_and(|s| s.len() > 0));
            if more {
                self.put_current(cid, t, cur);
                return;
            }
        }
        if !self.end_request(cid, t, cur.req.seq, cur.failed) {
            self.put_current(cid, t, cur);
        }
    }

    fn put_current(&mut self, cid: u32, t: usize, cur: InFlight) {
        if let Some(term) = self
            .client_mut(cid)
            .and_then(|c| c.port.as_mut())
            .and_then(|p| p.termini.get_mut(t))
        {
            term.current = Some(cur);
        }
    }

    /// Ends request `seq` of terminus `t`: an error completion if it failed, then the
    /// completion word. `false` if the error ring is full: the caller keeps the request
    /// in flight and tries again on a later turn (back-pressure, nothing dropped).
    fn end_request(&mut self, cid: u32, t: usize, seq: u32, failed: Option<RejectReason>) -> bool {
        let Some(port) = port_mut(&mut self.clients, cid) else {
            return true;
        };
        if let Some(reason) = failed {
            let c = Completion {
                seq,
                status: u16::from(reason.code()),
                terminus: t as u16,
                value: 0,
            };
            if port.errors.try_push(&c.encode()).is_err() {
                return false;
            }
            self.counters.error_completions += 1;
        }
        port.finish(t);
        self.counters.completed += 1;
        true
    }

    /// Delivers one packet of a client's request: intra-node, admit, copy, commit,
    /// notify; to another node, hand it to the fabric. `Ok(false)`: the fabric is full,
    /// try again later.
    fn deliver(
        &mut self,
        cid: u32,
        req: &SendRequest,
        seg: &Segment,
    ) -> Result<bool, RejectReason> {
        let meta = if seg.header.flags.contains(Flags::FIRST) {
            req.metadata()
        } else {
            &[]
        };
        let source = Source::of_request(cid, req);
        if seg.header.dst == self.iface.node()
            && matches!(seg.header.op, Op::ReadReq | Op::AtomicReq)
        {
            let body = match source {
                Source::Bytes(b) => b,
                Source::Areas { .. } => return Err(RejectReason::Malformed),
            };
            return self.serve_rma(&seg.header, body).map(|()| true);
        }
        self.deliver_packet(seg, meta, source)
    }

    /// Delivers one packet whose payload comes from `source`: locally through the core,
    /// or to another node through the fabric (`Ok(false)`: full, try again later).
    pub(crate) fn deliver_packet(
        &mut self,
        seg: &Segment,
        meta: &[u8],
        source: Source<'_>,
    ) -> Result<bool, RejectReason> {
        let h = &seg.header;
        let mut pieces = [Piece::Bytes(&[]); MAX_GATHER];
        let n = source.pieces(&self.areas, seg.start, u64::from(seg.len), &mut pieces)?;
        if h.dst != self.iface.node() {
            return self.send_remote(h, meta, &pieces[..n]);
        }
        let placement = match self.iface.admit(h, &mut self.areas) {
            Ok(p) => p,
            Err(rej) => return Err(self.refusal(h.slot, rej.reason)),
        };
        self.copy_pieces(&pieces[..n], &placement)?;
        let before = self.iface.stats().messages;
        let notif = self
            .iface
            .commit(h, meta, &mut self.areas)
            .map_err(|rej| rej.reason)?;
        if self.iface.stats().messages > before {
            // A group can complete with a local packet: peers that contributed to it are
            // no longer holding a partial message here.
            if let Some(remote) = self.remote.as_mut() {
                remote.message_complete(h.slot.0, h.meta_index);
            }
        }
        if let Some(n) = notif {
            self.post(n);
        }
        self.counters.packets += 1;
        self.counters.bytes += u64::from(seg.len);
        Ok(true)
    }

    /// The reason reported to the sender: a slot of a dead client is "peer down".
    #[cold]
    fn refusal(&self, slot: SlotId, reason: RejectReason) -> RejectReason {
        if reason == RejectReason::UnknownSlot && self.tombstones.contains(&slot.0) {
            RejectReason::PeerDown
        } else {
            reason
        }
    }

    /// The one copy: the pieces, in order, into the admitted place.
    fn copy_pieces(&mut self, pieces: &[Piece<'_>], p: &Placement) -> Result<(), RejectReason> {
        let mut dst_at = p.offset;
        for piece in pieces {
            match *piece {
                Piece::Bytes(b) => {
                    let dst = self.areas.area(p.area).ok_or(RejectReason::AreaGone)?;
                    dst.write(dst_at, b).map_err(|_| RejectReason::AreaGone)?;
                    dst_at += b.len() as u64;
                }
                Piece::Area { area, offset, len } => {
                    self.copy_between(area, offset, p.area, dst_at, len)?;
                    dst_at += len as u64;
                }
            }
        }
        Ok(())
    }

    /// Copies `n` bytes from one area to another (ownership already checked).
    fn copy_between(
        &mut self,
        src: AreaId,
        src_off: u64,
        dst: AreaId,
        dst_off: u64,
        n: usize,
    ) -> Result<(), RejectReason> {
        let src_region = self
            .areas
            .get(src)
            .ok_or(RejectReason::AreaGone)?
            .mem
            .0
            .clone();
        let dst_mem = self.areas.area(dst).ok_or(RejectReason::AreaGone)?;
        if Arc::ptr_eq(&src_region, &dst_mem.0) {
            return copy_within_area(dst_mem, src_off, dst_off, n);
        }
        let dst_slice = dst_mem
            .slice_mut(dst_off, n)
            .map_err(|_| RejectReason::AreaGone)?;
        src_region
            .read(src_off as usize, dst_slice)
            .map_err(|_| RejectReason::OutOfBounds)
    }

    fn post(&mut self, n: Notification) {
        post(&mut self.clients, &mut self.counters, n);
    }
}

/// Posts a notification to its queue (and wakes the receiver if it sleeps). A full queue
/// is counted by the queue itself and surfaced to its owner; never overwritten.
pub fn post(clients: &mut [Option<Client>], counters: &mut EngineCounters, n: Notification) {
    let (owner, index) = queue_parts(n.queue);
    let queue = port_mut(clients, owner).and_then(|p| p.queues.get(index));
    match queue.map(|q| q.post(&n.entry)) {
        Some(Ok(())) => counters.notifications += 1,
        Some(Err(_)) => counters.queue_overflows += 1,
        None => counters.orphan_notifications += 1,
    }
}

/// A client wrote impossible indices into terminus `t`'s ring: it is no longer served.
#[cold]
fn ring_corrupt(counters: &mut EngineCounters, term: &mut TerminusState, cid: u32, t: usize) {
    term.broken = true;
    counters.corrupt_rings += 1;
    tracing::warn!(
        client = cid,
        terminus = t,
        "terminus ring corrupt; no longer served"
    );
}

/// A request that fails before its first packet: no packets, one error completion.
fn failed_request(seq: u32, reason: RejectReason) -> InFlight {
    InFlight {
        req: SendRequest {
            seq,
            ..EMPTY_REQUEST
        },
        seg: None,
        pending: None,
        failed: Some(reason),
    }
}

const EMPTY_REQUEST: SendRequest = SendRequest {
    op: hamlyn_wire::request::RequestOp::Write,
    seq: 0,
    dst_node: 0,
    slot: 0,
    meta_index: 0,
    key: 0,
    offset: 0,
    y: 0,
    incarnation: 0,
    word: 0,
    flags: 0,
    meta: [0; hamlyn_wire::MAX_META_LEN],
    meta_len: 0,
    payload: Payload::Inline {
        data: [0; hamlyn_wire::request::MAX_INLINE],
        len: 0,
    },
};

/// Copies within one area (a client sending to its own slot): memmove through a bounce
/// buffer, because the ranges may overlap. A rare path.
#[cold]
fn copy_within_area(
    mem: &mut crate::areas::ShmMem,
    src_off: u64,
    dst_off: u64,
    n: usize,
) -> Result<(), RejectReason> {
    let mut tmp = vec![0u8; n];
    mem.read(src_off, &mut tmp)
        .map_err(|_| RejectReason::OutOfBounds)?;
    mem.write(dst_off, &tmp).map_err(|_| RejectReason::AreaGone)
}
