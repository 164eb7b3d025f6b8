//! The engine's state and its turn. [`EngineState`] holds the components, each in its
//! own file with its own state — `clients` (ports, error completions, notifications),
//! `deliver` (check, deposit, commit, notify), `remote` and `fabric_rx` (other nodes),
//! `one_sided` (answers to reads and atomics), `registry`, `counters` — and one turn
//! serves termini round robin, one quantum per terminus per turn (a packet, and the next
//! small single-packet messages after it: `visit`), then the answers being
//! sent and the error completions waiting for room.
//!
//! A request taken from a terminus ring is checked where it lies (its one copy, out of
//! the ring) and segmented here (`open_request`);
//! its packets go to `Delivery::deliver` (this node) or `Remote::send` (another node).

use std::sync::Arc;

use hamlyn_core::{Instant, RejectReason, Segment, Segmenter, SendSpec};
use hamlyn_fabric::PeerEvent;
use hamlyn_shm::wake::EventFd;
use hamlyn_wire::request::{
    send_flags, Completion, Gather, Payload, RequestOp, RequestView, SendRequest, MAX_GATHER,
    REQUEST_LEN,
};
use hamlyn_wire::{Flags, Header, NodeId, Op, RequestId, SlotId};

use crate::clients::{request_id, request_origin, Clients};
use crate::config::EngineConfig;
use crate::counters::EngineCounters;
use crate::deliver::Delivery;
use crate::hint_ports::{ColdLook, HintPorts};
use crate::one_sided::Replies;
use crate::port::{InFlight, Port, TerminusState};
use crate::registry::{Place, Registry};
use crate::remote::Remote;
use crate::sched::{Scheduler, Served, TerminusKey, Visit};
use crate::source::{Piece, Source};
use crate::step_clock::StepClock;
use hamlyn_shm::sync::AtomicBool;

/// Everything the engine knows, by component.
#[derive(Debug)]
pub(crate) struct EngineState {
    /// Settings.
    pub(crate) cfg: EngineConfig,
    /// This engine's incarnation (a restarted engine is a new one).
    pub(crate) incarnation: u32,
    /// Local delivery: the slot table, the areas, the slots of dead clients.
    pub(crate) delivery: Delivery,
    /// Clients, their ports, and the error completions waiting for room.
    pub(crate) clients: Clients,
    /// Terminus scheduling (boxed: the walk moves it out of the state and back, `turn`).
    pub(crate) sched: Box<Scheduler>,
    /// An empty scheduler that stands in for `sched` during the walk.
    sched_stand_in: Option<Box<Scheduler>>,
    /// The ports whose ready words a turn reads.
    pub(crate) hint_ports: HintPorts,
    /// Turns taken (the scheduler staggers cold termini by it).
    turns: u64,
    /// The terminus being served is above the lowest priority level in use: its
    /// single-packet messages go on the fabric's express lane.
    express: bool,
    /// The next turn looks at every terminus, not only the ready ones and its sweep
    /// share (set when a terminus's rate changed, and after the engine thread's sleep).
    pub(crate) look_at_all: bool,
    /// The next turn reads every port's ready hints, cold ports' too (set when a waiting
    /// thread takes over from the sleeping engine thread: the clients' pushes meanwhile
    /// announced themselves there).
    pub(crate) read_all_hints: bool,
    /// The last turn held a failed request whose error completion found its client's
    /// error ring full: room comes when the client reads the ring, which rings nothing,
    /// so the engine's sleep is short while this is so (`Engine::idle_sleep`).
    pub(crate) held_for_room: bool,
    /// The doorbell: the end the engine waits on when it sleeps.
    pub(crate) doorbell: EventFd,
    /// The doorbell's other end, duplicated for every client (and the engine's handle).
    pub(crate) doorbell_poker: EventFd,
    /// Set to stop the engine.
    pub(crate) stop: Arc<AtomicBool>,
    /// Counters.
    pub(crate) counters: EngineCounters,
    /// The fabric to other nodes, if any.
    pub(crate) remote: Option<Remote>,
    /// Answers to remote reads and atomics being sent.
    replies: Replies,
    /// The name registry (entries on the registry node, forwarded requests everywhere).
    pub(crate) registry: Registry,
    /// The monotonic clock, read at most once per step (`step_clock`).
    pub(crate) clock: StepClock,
}

impl EngineState {
    /// A fresh engine with no clients.
    pub(crate) fn new(
        cfg: EngineConfig,
        incarnation: u32,
        (doorbell_poker, doorbell): (EventFd, EventFd),
        stop: Arc<AtomicBool>,
        remote: Option<Remote>,
    ) -> EngineState {
        EngineState {
            delivery: Delivery::new(NodeId(cfg.node)),
            hint_ports: HintPorts::new(cfg.busy_poll),
            cfg,
            incarnation,
            clients: Clients::default(),
            sched: Box::new(Scheduler::new()),
            sched_stand_in: Some(Box::new(Scheduler::new())),
            turns: 0,
            look_at_all: false,
            read_all_hints: false,
            held_for_room: false,
            express: false,
            doorbell,
            doorbell_poker,
            stop,
            counters: EngineCounters::default(),
            remote,
            replies: Replies::default(),
            registry: Registry::default(),
            clock: StepClock::new(),
        }
    }

    /// Now, for the core.
    pub(crate) fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The start of a step of the engine's clock (`step_clock`), for an engine with a
    /// fabric: a turn there reads the clock for each packet sent and for the fabric's
    /// poll. An engine of one node reads it only for rate-limited termini (once per
    /// visit of one), so it keeps fresh readings and pays nothing for steps.
    #[inline]
    pub(crate) fn begin_step(&self) -> crate::step_clock::Began {
        if self.remote.is_some() {
            self.clock.begin()
        } else {
            self.clock.no_step()
        }
    }

    /// The end of a step [`EngineState::begin_step`] began: later readings are fresh.
    #[inline]
    pub(crate) fn end_step(&self, step: crate::step_clock::Began) {
        self.clock.end(step);
    }

    /// One scheduling turn over the termini with work; whether any had work. `cold`:
    /// how many cold ports' ready words it reads (`hint_ports`).
    pub(crate) fn turn(&mut self, cold: ColdLook) -> bool {
        // The termini clients announced since the last turn join their ready queues;
        // the sweep looks at a share of all termini (`sched`), every one after a rate
        // changed (`look_at_all`). The scheduler is moved out for the walk so that `serve`
        // may borrow the whole state (a stand-in is swapped in: two pointers move, no
        // copy of its lists).
        let all = std::mem::take(&mut self.look_at_all);
        self.held_for_room = false;
        self.turns = self.turns.wrapping_add(1);
        let all_hints = std::mem::take(&mut self.read_all_hints) || all;
        self.take_ready_hints(all_hints, cold);
        let Some(stand_in) = self.sched_stand_in.take() else {
            return false;
        };
        let mut sched = std::mem::replace(&mut self.sched, stand_in);
        let mut busy = sched.turn(all, |key, express, visit| {
            self.express = express;
            self.visit(key, visit)
        });
        self.express = false;
        self.sched_stand_in = Some(std::mem::replace(&mut self.sched, sched));
        if !self.replies.is_empty() {
            busy |= self.serve_replies();
        }
        if self.clients.has_late_errors() {
            self.clients.flush_late_errors(&mut self.counters);
        }
        if self.clients.has_unreported_losses() {
            self.clients.report_losses(&mut self.counters);
        }
        if self.registry.has_resend() {
            busy |= self.send_registry_again();
        }
        busy
    }

    /// Whether a busy turn may have left work that only more turns find: a terminus in
    /// a ready queue (the rest of a message, a request waiting for tokens or for room),
    /// a read's answer being sent, a registry resend, or a fabric (whose next turn polls
    /// it). `false` after a turn that took, delivered and completed single-packet
    /// messages: nothing of theirs is left, and what clients pushed since is in their
    /// ready words, which `Engine::hand_back` reads after arming the doorbells.
    #[inline]
    pub(crate) fn may_have_more(&self) -> bool {
        self.sched.has_ready()
            || !self.replies.is_empty()
            || self.remote.is_some()
            || self.registry.has_resend()
    }

    /// Whether a turn now would find nothing for certain, by a look that takes nothing:
    /// no hot port announced a push, no terminus waits in a ready queue, no answer, no
    /// registry resend, no kept error, loss report or held request, no fabric (whose
    /// sockets only a turn polls), no wider look asked for. A cold port's push rings,
    /// which wakes the engine's thread, whose `after_sleep` asks for a wider look
    /// (`read_all_hints`). A waiting thread glances at this between turns
    /// (`Engine::turn_for_waiter`) and pays for a turn only when it says no, or every
    /// few glances regardless (the sweep, the cold ports' backstop).
    pub(crate) fn quiet(&self) -> bool {
        !self.look_at_all
            && !self.read_all_hints
            && !self.may_have_more()
            && !self.waits_for_room()
            && !self.hint_ports.hot_hinted()
    }

    /// Whether something waits for room a client makes without ringing (a consumer
    /// draining its queue or its error ring does not ring the doorbell), so the engine
    /// must look again soon: a queue owes its owner an Overflow report; an error
    /// completion waits for room in an error ring (`Clients::fail`, NACKs: a fabric's
    /// timers bound the sleep too); or a refused request's error does
    /// (`EngineState::held_for_room`).
    pub(crate) fn waits_for_room(&self) -> bool {
        self.clients.has_unreported_losses() || self.clients.has_late_errors() || self.held_for_room
    }

    /// Takes the ready hints ([`hamlyn_shm::ready`]) of the hot ports and of a share of
    /// the cold ones (every port when `all`: `hint_ports`) into the scheduler's ready
    /// queues.
    fn take_ready_hints(&mut self, all: bool, cold: ColdLook) {
        let lowest = self.sched.lowest_level();
        let (clients, sched) = (&mut self.clients, &mut self.sched);
        self.counters.ports_gone_cold +=
            self.hint_ports.take(all, cold, lowest, |cid, word, bits| {
                if let Some(port) = clients.port_mut(cid) {
                    port.mark_hinted(word, bits, |t, level| sched.mark_ready((cid, t), level));
                }
            });
    }

    /// A visit of the scheduler's walk: serves the terminus and says whether it stays in
    /// its ready queue. A terminus swept while queued is left to its queue's visit (one
    /// visit per terminus per turn).
    ///
    /// A visit sends a quantum: after its first packet, while each of the terminus's
    /// requests was a write delivered here whole in one packet, its next ones follow in
    /// the same visit, up to [`QUANTUM_PACKETS`] packets, and none once
    /// [`QUANTUM_BYTES`] were delivered. A stream of small messages then pays a turn's
    /// fixed work (the ready words, the walk, the hand-off of a waiting thread's drive)
    /// once per quantum, not once per message. Every busy terminus of a level goes by the
    /// same rule each turn, so termini of like messages get equal shares (a stream of
    /// small ones up to 16 messages a turn, of multi-packet ones a packet), and a higher
    /// level waits at most one quantum per terminus (a few microseconds of small
    /// packets). A multi-packet message, a fabric without room (a packet left pending), a
    /// throttled or held terminus, a refused request, or an empty ring ends the quantum.
    /// So does a read or atomic executed here, and any answer waiting to be copied (a
    /// read's bytes are copied on later turns: a write behind it in the same quantum
    /// would be read in its place). So does a packet sent to another node: the fabric
    /// coalesces a stream's small packets itself (the TCP fabric holds them), and sixteen
    /// of them between two polls of it cost the TCP 8 B message rate about a tenth (quick
    /// runs 2026-11-25: 0.98-1.32 M/s with, 1.13-1.44 without). The look at the ring that decides whether the terminus stays
    /// queued also decides whether the quantum goes on: a single message costs no
    /// second look (a second `serve` to find the ring empty cost 135 instructions).
    fn visit(&mut self, key: TerminusKey, visit: Visit) -> Served {
        // The visit's notifications and completions are published as they come; the
        // consumers' wake words are looked at once, after one fence, at its end.
        self.clients.open_wakes();
        let served = self.visit_terminus(key, visit);
        self.clients.flush_wakes();
        served
    }

    /// [`EngineState::visit`] within its batch of wake-ups.
    fn visit_terminus(&mut self, key: TerminusKey, visit: Visit) -> Served {
        if visit == Visit::Swept && self.terminus_mut(key).is_none_or(|t| t.queued) {
            return Served::default();
        }
        let before = (self.counters.bytes, self.counters.remote_sent);
        let mut packets_at = self.counters.packets;
        let work = self.serve(key);
        if work && visit == Visit::Swept {
            self.counters.found_by_sweep += 1;
        }
        let (mut serves, mut in_quantum) = (1, false);
        loop {
            let Some(term) = self.terminus_mut(key) else {
                return Served {
                    work,
                    requeue: false,
                };
            };
            // A swept terminus that had no work has an empty ring, unless its rate holds
            // it (then it waits in the queue for its tokens) or a refused request waits
            // for room for its error: no second look at the ring for the common case.
            let more = if work || visit == Visit::Ready || term.throttled_until.is_some() {
                term.has_more()
            } else {
                term.current.is_some()
            };
            term.queued = more;
            let next_whole = more && term.current.is_none() && term.throttled_until.is_none();
            // Whether the last serve delivered a packet here: not a read or atomic
            // executed here (its answer is copied on later turns, so a write behind it
            // must wait), not a refusal, not a packet to another node. Asked only in a
            // quantum or when a next request waits: a lone message pays for none of it.
            let delivered_here = (in_quantum || next_whole)
                && self.counters.packets != packets_at
                && self.counters.remote_sent == before.1;
            if in_quantum && delivered_here {
                self.counters.quantum_packets += 1;
            }
            // Room left in the quantum. No answer may wait to be copied: a read this
            // terminus asked for earlier reads what its later writes would overwrite.
            let goes_on = next_whole
                && delivered_here
                && serves < QUANTUM_PACKETS
                && self.counters.bytes.wrapping_sub(before.0) < QUANTUM_BYTES
                && self.replies.is_empty();
            if !goes_on {
                return Served {
                    work,
                    requeue: more,
                };
            }
            packets_at = self.counters.packets;
            in_quantum = true;
            serves += 1;
            // Whether it had work shows in the counters (`delivered_here`).
            let _ = self.serve(key);
        }
    }

    /// Terminus `t` of client `cid`, if both exist.
    #[inline]
    fn terminus_mut(&mut self, (cid, t): TerminusKey) -> Option<&mut TerminusState> {
        self.clients.port_mut(cid)?.termini.get_mut(usize::from(t))
    }

    /// Publications and registrations for the registry node that found its link full
    /// when it came back: as many more as fit now.
    #[cold]
    fn send_registry_again(&mut self) -> bool {
        let at = self.registry_place();
        match self.remote.as_mut() {
            Some(remote) => self.registry.send_again(at, remote) > 0,
            None => false,
        }
    }

    /// Client `cid` said goodbye: what it queued is sent before the goodbye is answered,
    /// as a socket's close still delivers what was written — a client may drop its
    /// connection right after a send it does not wait for. Bounded: at most
    /// [`DRAIN_TURNS`] turns over its termini (the fabric polled between them to make
    /// room); what is left then goes with the client, as before. Returns whether
    /// everything was sent.
    pub(crate) fn drain_client(&mut self, cid: u32) -> bool {
        let termini = self
            .clients
            .port_mut(cid)
            .map_or(0, |p| p.termini.len() as u16);
        for _ in 0..DRAIN_TURNS {
            let mut busy = false;
            for t in 0..termini {
                busy |= self.serve((cid, t));
            }
            if !busy {
                return true;
            }
            if self.remote.is_some() {
                self.poll_fabric(false);
            }
        }
        self.counters.drains_cut += 1;
        false
    }

    /// Sends at most one packet of terminus `key`; whether it had work. A request ends
    /// on the turn of its last packet (or of its refusal): a single-packet message is
    /// taken, delivered and completed in one turn, without ever being stored as an
    /// [`InFlight`] (which only multi-packet requests, and the rare request that must
    /// wait for room for its error completion, become).
    fn serve(&mut self, (cid, t): TerminusKey) -> bool {
        let t = usize::from(t);
        let Some(port) = self.clients.port_mut(cid) else {
            return false;
        };
        if Clients::is_held(port) {
            self.counters.termini_held += 1;
            return false;
        }
        let Some(term) = port.termini.get_mut(t) else {
            return false;
        };
        // Tested first: `take` on an empty `Option<InFlight>` would still copy all of it.
        if term.current.is_some() {
            if let Some(cur) = term.current.take() {
                return self.continue_request(cid, t, cur);
            }
            return false;
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
        let rate_limited = term.rate.is_some();
        if rate_limited
            && !Self::tokens_ready(&mut term.rate, &mut term.throttled_until, &self.clock)
        {
            return false;
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
        match self.open_request(cid, t, &buf, ring_seq, rate_limited) {
            Ok(()) => {}
            Err((seq, reason)) => {
                if !self.end_request(cid, t, seq, Some(reason)) {
                    self.put_current(cid, t, failed_request(seq, reason));
                }
            }
        }
        true
    }

    /// Whether a rate-limited terminus's next request may start now; if not, it is not
    /// work until its tokens are back (the engine's sleep is bounded by that instant).
    #[cold]
    fn tokens_ready(
        rate: &mut Option<hamlyn_core::TokenBucket>,
        throttled_until: &mut Option<Instant>,
        clock: &StepClock,
    ) -> bool {
        let now = clock.now();
        let Some(bucket) = rate.as_mut() else {
            return true;
        };
        if bucket.ready(now) {
            *throttled_until = None;
            true
        } else {
            *throttled_until = bucket.next_ready(now);
            false
        }
    }

    /// A rate-limited terminus started a request of `len` bytes: its tokens go.
    fn take_tokens(&mut self, cid: u32, t: usize, len: u64) {
        if let Some(bucket) = self
            .clients
            .port_mut(cid)
            .and_then(|p| p.termini.get_mut(t))
            .and_then(|term| term.rate.as_mut())
        {
            bucket.take(len);
        }
    }

    /// How long the engine may sleep before a rate-limited terminus has tokens again
    /// (`None`: none waits for tokens).
    /// A terminus waiting for tokens has a request in its ring, so it stays in its ready
    /// queue (`visit`): only the queued termini are looked at, not every terminus of
    /// every port (a waiting thread's hand-back asks once per message).
    fn throttle_bound(&self) -> Option<std::time::Duration> {
        let clients = &self.clients;
        let at = self
            .sched
            .ready_keys()
            .filter_map(|(cid, t)| {
                clients
                    .port(cid)?
                    .termini
                    .get(usize::from(t))?
                    .throttled_until
            })
            .min()?;
        Some(std::time::Duration::from_nanos(at.nanos_since(self.now())))
    }

    /// Checks a request copied out of terminus `t`'s ring, where it lies, segments it and
    /// sends its first packet ([`EngineState::first_packet`]); on refusal, the sequence
    /// number to report and why. A message that fits one packet (every small message)
    /// gets that packet without a segmenter, and nothing of it is returned: its header
    /// is built where it is delivered.
    fn open_request(
        &mut self,
        cid: u32,
        t: usize,
        buf: &[u8; REQUEST_LEN],
        ring_seq: u32,
        rate_limited: bool,
    ) -> Result<(), (u32, RejectReason)> {
        let Ok(req) = RequestView::check(buf) else {
            self.counters.bad_requests += 1;
            return Err((ring_seq, RejectReason::Malformed));
        };
        let node = self.delivery.node();
        let dst = req.dst_node();
        let incarnation = req.incarnation();
        if incarnation != 0 && self.incarnation_of(dst).is_some_and(|i| i != incarnation) {
            self.counters.bad_requests += 1;
            return Err((req.seq(), RejectReason::StaleIncarnation));
        }
        let fast = req.is_fast();
        let len = req.len();
        let flags = req.flags();
        let spec = SendSpec {
            src: node,
            dst: NodeId(dst),
            slot: SlotId(req.slot()),
            key: req.key(),
            meta_index: req.meta_index(),
            offset: req.offset(),
            len,
            meta: req.metadata(),
            y: req.y(),
            max_packets: None,
            notify: flags & send_flags::NOTIFY != 0,
            wake: flags & send_flags::WAKE != 0,
            word: req.word(),
            request: request_id(cid, t, req.seq()),
        };
        // Packets to other nodes are smaller, so they stripe across rails.
        let mtu = if dst == node.0 {
            self.cfg.intra_mtu
        } else {
            self.cfg.remote_mtu
        };
        // Fast messages must be one packet whatever the packet size.
        let mtu = if fast { mtu.max(len).max(1) } else { mtu };
        let op = match req.op() {
            RequestOp::Write => Op::Write,
            RequestOp::Read => Op::ReadReq,
            RequestOp::Atomic => Op::AtomicReq,
        };
        let malformed = |counters: &mut EngineCounters| {
            counters.bad_requests += 1;
            (req.seq(), RejectReason::Malformed)
        };
        let (first, rest) = match spec.only_packet(mtu) {
            // `only_packet` builds a write's header; `segment`'s packets take `op` below.
            Ok(Some(mut one)) => {
                one.header.op = op;
                (one, None)
            }
            Ok(None) => {
                let mut rest = spec
                    .segment(mtu)
                    .map_err(|_| malformed(&mut self.counters))?
                    .with_op(op);
                let Some(first) = rest.next() else {
                    return Err(malformed(&mut self.counters));
                };
                (first, Some(rest))
            }
            Err(_) => return Err(malformed(&mut self.counters)),
        };
        if rate_limited {
            self.take_tokens(cid, t, len);
        }
        self.first_packet(cid, t, req, first, rest);
        Ok(())
    }

    /// Sends the first packet of a request just taken from the ring; `rest`, the
    /// segmenter of a message of more packets. A request that needs nothing more ends
    /// here; one with packets left (or waiting for the fabric, or for room for its error
    /// completion) is kept in flight. Out of line: `path8` counts a TCP sender's work
    /// from its call.
    #[inline(never)]
    fn first_packet(
        &mut self,
        cid: u32,
        t: usize,
        req: RequestView<'_>,
        first: Segment,
        rest: Option<Segmenter>,
    ) {
        let mut cur_pending = None;
        let mut failed = None;
        match self.deliver(cid, req, &first) {
            Ok(true) => {}
            // The fabric is full: this packet goes first on a later turn.
            Ok(false) => cur_pending = Some(first),
            Err(reason) => failed = Some(reason),
        }
        let more = failed.is_none()
            && (cur_pending.is_some() || rest.as_ref().is_some_and(|s| s.len() > 0));
        if !more && self.end_request(cid, t, req.seq(), failed) {
            return;
        }
        self.put_current(
            cid,
            t,
            InFlight {
                entry: *req.bytes(),
                seg: rest,
                pending: cur_pending,
                failed,
            },
        );
    }

    /// Sends the next packet of a request in flight, or ends it.
    #[cold]
    /// Sends the next packet of a request in flight, or ends it. Whether that was
    /// progress: a request that failed and still finds its client's error ring full is
    /// held (counted), not progress, so that it never keeps the engine from sleeping.
    fn continue_request(&mut self, cid: u32, t: usize, mut cur: InFlight) -> bool {
        let next = if cur.failed.is_none() {
            cur.pending
                .take()
                .or_else(|| cur.seg.as_mut().and_then(Iterator::next))
        } else {
            None
        };
        if let Some(seg) = next {
            match self.deliver(cid, cur.req(), &seg) {
                Ok(true) => {}
                // The fabric is full: this packet goes first on a later turn.
                Ok(false) => cur.pending = Some(seg),
                Err(reason) => cur.failed = Some(reason),
            }
            let more = cur.failed.is_none()
                && (cur.pending.is_some() || cur.seg.as_ref().is_some_and(|s| s.len() > 0));
            if more {
                self.put_current(cid, t, cur);
                return true;
            }
        }
        if !self.end_request(cid, t, cur.req().seq(), cur.failed) {
            self.counters.termini_held += 1;
            self.held_for_room = true;
            self.put_current(cid, t, cur);
            return false;
        }
        true
    }

    fn put_current(&mut self, cid: u32, t: usize, cur: InFlight) {
        if let Some(term) = self
            .clients
            .port_mut(cid)
            .and_then(|p| p.termini.get_mut(t))
        {
            term.current = Some(cur);
        }
    }

    /// Ends request `seq` of terminus `t`: an error completion if it failed, then the
    /// completion word. `false` if the error ring is full: the caller keeps the request
    /// in flight and tries again on a later turn (back-pressure, nothing dropped).
    fn end_request(&mut self, cid: u32, t: usize, seq: u32, failed: Option<RejectReason>) -> bool {
        if let Some(reason) = failed {
            let c = Completion {
                seq,
                status: u16::from(reason.code()),
                terminus: t as u16,
                value: 0,
            };
            if self
                .clients
                .push_error(cid, &c, &mut self.counters)
                .is_err()
            {
                return false;
            }
        }
        self.clients.finish(cid, t);
        self.counters.completed += 1;
        true
    }

    /// Delivers one packet of a client's request: a read or atomic for this node is
    /// executed here; anything else goes to [`EngineState::deliver_packet`].
    /// `Ok(false)`: the fabric is full, try again later.
    fn deliver(
        &mut self,
        cid: u32,
        req: RequestView<'_>,
        seg: &Segment,
    ) -> Result<bool, RejectReason> {
        let meta = if seg.header.flags.contains(Flags::FIRST) {
            req.metadata()
        } else {
            &[]
        };
        let source = Source::of_request(cid, req);
        if seg.header.dst == self.delivery.node()
            && matches!(seg.header.op, Op::ReadReq | Op::AtomicReq)
        {
            let body = match source {
                Source::Bytes(b) => b,
                Source::Areas { .. } => return Err(RejectReason::Malformed),
            };
            if self.replies.is_full() {
                // Back-pressure: the request waits in its terminus for a later turn.
                return Ok(false);
            }
            return self.execute_one_sided(&seg.header, body).map(|()| true);
        }
        self.deliver_packet(seg, meta, source)
    }

    /// Delivers one packet whose payload comes from `source`: on this node through
    /// [`Delivery::deliver`], to another node through [`Remote::send`] (`Ok(false)`: the
    /// fabric is full, try again later).
    fn deliver_packet(
        &mut self,
        seg: &Segment,
        meta: &[u8],
        source: Source<'_>,
    ) -> Result<bool, RejectReason> {
        let h = &seg.header;
        let mut pieces = [Piece::Bytes(&[]); MAX_GATHER];
        let n = source.pieces(
            &self.delivery.areas,
            seg.start,
            u64::from(seg.len),
            &mut pieces,
        )?;
        if h.dst != self.delivery.node() {
            let now = self.now();
            let Some(remote) = self.remote.as_mut() else {
                return Err(RejectReason::PeerDown);
            };
            // A read or atomic's answer is awaited from that peer only, into the range it
            // names (`hamlyn_core::expected`): recorded before the request leaves.
            let awaits = matches!(h.op, Op::ReadReq | Op::AtomicReq);
            if awaits {
                let Source::Bytes(body) = source else {
                    return Err(RejectReason::Malformed);
                };
                let answer = crate::one_sided::awaited_answer(h, body)?;
                if remote
                    .expected
                    .expect_answer(h.dst, h.request, answer)
                    .is_err()
                {
                    // Back-pressure: the request waits in its terminus.
                    return Ok(false);
                }
            }
            // A single-packet message of a terminus above the lowest priority in use
            // takes the fabric's express lane, if it has one.
            let express =
                self.express && h.op == Op::Write && h.flags.contains(Flags::FIRST | Flags::LAST);
            let sent = remote.send(now, h, meta, &pieces[..n], &self.delivery.areas, express);
            if sent == Ok(true) {
                self.counters.packets += 1;
                self.counters.bytes += u64::from(seg.len);
                self.counters.remote_sent += 1;
            }
            match sent {
                Ok(true) if h.op == Op::Write && h.flags.contains(Flags::FIRST) => {
                    remote.expected.sent_write(h.dst, h.request);
                }
                Ok(true) => {}
                Ok(false) | Err(_) => {
                    if awaits {
                        remote.expected.cancel(h.dst, h.request);
                    }
                }
            }
            return sent;
        }
        let done =
            self.delivery
                .deliver(h, meta, &pieces[..n], &mut self.clients, &mut self.counters)?;
        if done {
            // A group can complete with a local packet: peers that contributed to it are
            // no longer holding a partial message here.
            if let Some(remote) = self.remote.as_mut() {
                remote.peers.message_done((h.slot, h.meta_index));
            }
        }
        Ok(true)
    }

    /// Executes a read or atomic addressed to this node; its answer is queued.
    fn execute_one_sided(&mut self, h: &Header, body: &[u8]) -> Result<(), RejectReason> {
        let (local, intra, remote) = (
            self.delivery.node(),
            self.cfg.intra_mtu,
            self.cfg.remote_mtu,
        );
        let mtu = |to: NodeId| if to == local { intra } else { remote };
        self.replies
            .execute(h, body, &mut self.delivery, mtu, &mut self.counters)
    }

    /// Sends one packet of the oldest answer being sent (then it goes to the back: jobs
    /// share the engine fairly). Whether there was progress.
    fn serve_replies(&mut self) -> bool {
        let Some(mut job) = self.replies.take() else {
            return false;
        };
        let Some(seg) = job.next_packet() else {
            return true;
        };
        let mut list = [Gather::default(); 1];
        let result = self.deliver_packet(&seg, &[], job.source(&mut list));
        match result {
            Ok(true) => {
                self.replies.requeue(job);
                true
            }
            Ok(false) => {
                job.hold(seg);
                self.replies.retry_first(job);
                false
            }
            Err(reason) => {
                self.fail_request(job.requester, job.request, reason, &seg.header);
                true
            }
        }
    }

    /// Tells a requester its request failed: an error completion on its terminus if it is
    /// local, a NACK if it is on another node.
    #[cold]
    fn fail_request(
        &mut self,
        requester: NodeId,
        request: RequestId,
        reason: RejectReason,
        about: &Header,
    ) {
        if requester == self.delivery.node() {
            fail_local(&mut self.clients, request, reason, &mut self.counters);
        } else if let Some(remote) = self.remote.as_mut() {
            let mut asked = *about;
            asked.src = requester;
            asked.request = request;
            if let Some(n) = hamlyn_core::nack::nack_for(self.delivery.node(), &asked, reason) {
                remote.queue_nack(n);
            }
        }
    }

    /// Packets other nodes' engines sent here, all polls so far (0 without a fabric).
    #[inline]
    pub(crate) fn fabric_packets_in(&self) -> u64 {
        self.remote.as_ref().map_or(0, |r| r.packets_in)
    }

    /// Polls the fabric: delivers what arrived, sends queued NACKs, answers reads,
    /// atomics and registry packets, and handles peers coming and going. Whether anything
    /// happened. `spinning`: the caller polls in a loop until something arrives (a
    /// waiting thread, the engine thread's idle spin): the fabric may read its
    /// connections directly rather than ask its poller first
    /// (`hamlyn_fabric::Fabric::poll_spinning`).
    pub(crate) fn poll_fabric(&mut self, spinning: bool) -> bool {
        let now = self.now();
        let Some(remote) = self.remote.as_mut() else {
            return false;
        };
        let hold = self.replies.is_full();
        let polled = remote.poll(
            now,
            hold,
            spinning,
            &mut self.delivery,
            &mut self.clients,
            &mut self.counters,
        );
        for (h, body) in polled.deferred {
            if h.op == Op::Registry {
                let at = self.registry_place();
                if let Some(remote) = self.remote.as_mut() {
                    self.registry.packet(
                        &h,
                        &body,
                        at,
                        remote,
                        &mut self.clients,
                        &mut self.counters,
                    );
                }
            } else if let Err(reason) = self.execute_one_sided(&h, &body) {
                self.fail_request(h.src, h.request, reason, &h);
            }
        }
        for ev in polled.events {
            self.peer_event(ev);
        }
        if !polled.unconfirmed.is_empty() {
            self.unconfirmed(&polled.unconfirmed);
        }
        polled.busy
    }

    /// Writes the fabric accepted (their requests may already read `Sent`) whose session
    /// was lost before the receiver acknowledged them: each request fails with
    /// `PeerDown`, once (a message's packets are reported one by one). A request still
    /// sending was failed by the `Down` that came first and reports itself when it ends.
    #[cold]
    fn unconfirmed(&mut self, headers: &[Header]) {
        let mut seen = std::collections::HashSet::new();
        for h in headers {
            if !seen.insert(h.request.to_u64()) {
                continue;
            }
            let (cid, t) = request_origin(h.request);
            let in_flight = self
                .clients
                .port_mut(cid)
                .and_then(|p| p.termini.get(usize::from(t)))
                .and_then(|term| term.current.as_ref())
                .is_some_and(|cur| cur.req().seq() == h.request.seq && cur.failed.is_some());
            if in_flight {
                continue;
            }
            self.counters.sends_unconfirmed += 1;
            fail_local(
                &mut self.clients,
                h.request,
                RejectReason::PeerDown,
                &mut self.counters,
            );
        }
    }

    /// A peer came or went. Down: every request still sending to it fails with
    /// PeerDown, every receiver with a partial message from it is told, and every client
    /// waiting on a registry answer from it gets an error.
    fn peer_event(&mut self, ev: PeerEvent) {
        let Some(remote) = self.remote.as_mut() else {
            return;
        };
        match ev {
            PeerEvent::Up { node, incarnation } => {
                tracing::info!(peer = node.0, incarnation, "peer up");
                let before = remote.peers.last_incarnation(node);
                remote.peers.peer_up(node, incarnation);
                if before.is_some_and(|b| b != incarnation) {
                    // A restart: the clients that published there are gone.
                    self.registry.node_gone(node);
                }
                // The registry node is back (or new): it may have dropped our clients'
                // names while it could not reach us; they are still here.
                let at = self.registry_place();
                if node == at.home {
                    if let Some(remote) = self.remote.as_mut() {
                        self.registry.republish(at, remote);
                    }
                }
            }
            PeerEvent::Down { node } => {
                tracing::warn!(peer = node.0, "peer down");
                self.counters.peers_lost += 1;
                let broken = remote.peer_down(node, &mut self.delivery);
                let unanswered = remote.expected.peer_down(node);
                self.registry.peer_down(node, &mut self.clients);
                // Reads and atomics it never answered: their requests fail.
                for request in unanswered {
                    self.counters.answers_lost += 1;
                    fail_local(
                        &mut self.clients,
                        request,
                        RejectReason::PeerDown,
                        &mut self.counters,
                    );
                }
                for partial in broken {
                    self.tell_broken(partial, node);
                }
                for port in self.clients.ports_mut() {
                    for term in &mut port.termini {
                        if let Some(cur) = term.current.as_mut() {
                            if cur.req().dst_node() == node.0 && cur.failed.is_none() {
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

    /// A client is gone with `port`: every receiver on this node of a message it left
    /// half sent (a request in flight, some packets delivered, the rest never to come) is
    /// told the message will never complete, with a `PeerDown` notification naming this
    /// node. A request it finished broke nothing, whatever else its message waits for.
    pub(crate) fn client_gone(&mut self, port: &Port) {
        let node = self.delivery.node();
        let half_sent: Vec<_> = port
            .termini
            .iter()
            .filter_map(|t| t.current.as_ref())
            .filter(|cur| {
                let req = cur.req();
                cur.failed.is_none()
                    && req.dst_node() == node.0
                    && req.op() == RequestOp::Write
                    && !req.is_fast()
            })
            .map(|cur| (SlotId(cur.req().slot()), cur.req().meta_index()))
            .collect();
        for partial in half_sent {
            self.tell_broken(partial, node);
        }
    }

    /// Tells the receiver of a partly received message that it will never complete
    /// because `lost` (a peer node, or this node for a dead local client) is gone.
    #[cold]
    fn tell_broken(&mut self, partial: hamlyn_core::PartialMessage, lost: NodeId) {
        let queue = self
            .delivery
            .iface
            .slots()
            .get(partial.0)
            .and_then(|s| s.config.queue);
        if let Some(queue) = queue {
            let n = hamlyn_core::peer_down_notification(queue, partial, lost);
            self.clients.notify(&n, &mut self.counters);
        }
    }

    /// How long the engine may sleep before the fabric needs a poll.
    /// Before a sleep: the fabric writes what it holds back and drains its poller
    /// (`Remote::prepare_sleep`); `true` if it has work now (do not sleep).
    pub(crate) fn prepare_fabric_sleep(&mut self) -> bool {
        // The clock is read only for a fabric: an engine of one node hands back without.
        let clock = &self.clock;
        self.remote
            .as_mut()
            .is_some_and(|remote| remote.prepare_sleep(clock.now()))
    }

    /// Writes what the fabric holds back (`Fabric::flush_held`).
    pub(crate) fn flush_fabric(&mut self) {
        if let Some(remote) = self.remote.as_mut() {
            remote.flush_held(self.clock.now());
        }
    }

    pub(crate) fn fabric_sleep_bound(&self) -> std::time::Duration {
        let fabric = match &self.remote {
            Some(remote) => remote.sleep_bound(self.now()),
            None => std::time::Duration::MAX,
        };
        // A terminus waiting for tokens is not work, but must be looked at when they are
        // back.
        self.throttle_bound().map_or(fabric, |t| fabric.min(t))
    }

    /// The incarnation a ticket for `node` must carry, if the node is known.
    pub(crate) fn incarnation_of(&self, node: u32) -> Option<u32> {
        if node == self.delivery.node().0 {
            return Some(self.incarnation);
        }
        self.remote.as_ref()?.peers.last_incarnation(NodeId(node))
    }

    /// The node holding the registry.
    pub(crate) fn registry_home(&self) -> NodeId {
        NodeId(self.cfg.registry.unwrap_or(self.delivery.node().0))
    }

    /// Where registry traffic of this node goes, now.
    pub(crate) fn registry_place(&self) -> Place {
        Place {
            me: self.delivery.node(),
            home: self.registry_home(),
            now: self.now(),
        }
    }
}

/// Most packets one visit of a terminus sends ([`EngineState::visit`]): its first
/// and up to this many minus one small single-packet messages after it.
pub(crate) const QUANTUM_PACKETS: usize = 16;
/// A visit sends no further packet once it sent this many payload bytes: a higher
/// priority level, or the next terminus, waits at most a few microseconds of copies.
pub(crate) const QUANTUM_BYTES: u64 = 4096;

/// Most turns a goodbye spends sending what its client queued
/// ([`EngineState::drain_client`]): a full ring of multi-packet messages, with room.
pub(crate) const DRAIN_TURNS: usize = 65_536;

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
#[cold]
fn failed_request(seq: u32, reason: RejectReason) -> InFlight {
    let mut entry = [0u8; REQUEST_LEN];
    SendRequest {
        seq,
        ..EMPTY_REQUEST
    }
    .encode(&mut entry);
    InFlight {
        entry,
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

/// An error completion for request `request` of this node's client, which has already
/// completed (its answer or its delivery failed later): kept until the client has room.
pub(crate) fn fail_local(
    clients: &mut Clients,
    request: RequestId,
    reason: RejectReason,
    counters: &mut EngineCounters,
) {
    let (cid, terminus) = request_origin(request);
    let c = Completion {
        seq: request.seq,
        status: u16::from(reason.code()),
        terminus,
        value: 0,
    };
    clients.fail(cid, c, counters);
}
