//! The fabric conformance suite, written once over the [`Fabric`] trait.
//!
//! Every fabric (sim now, tcp later) runs the same checks: a test implements
//! [`FabricFactory`] (how to build a fresh set of connected fabrics, let time pass and
//! crash a node) and calls [`run_all`], or one check at a time. Each check returns a
//! [`Failure`] naming itself and what went wrong; all loops are bounded by [`Limits`], so
//! a fabric that loses or withholds packets fails instead of hanging.
//!
//! What the suite holds a fabric to:
//! - peers are announced with [`PeerEvent::Up`] ([`peers_are_announced`]);
//! - every packet sent to a live peer arrives exactly once, header, metadata and payload
//!   byte-exact, whatever the gather list ([`exactly_once_byte_exact`]);
//! - multi-megabyte payloads arrive intact ([`large_payloads_intact`]);
//! - a peer that does not drain causes [`FabricError::Full`], and sending resumes once it
//!   drains ([`full_then_resume`]);
//! - a discarded packet's payload is skipped and the following packets are intact
//!   ([`discard_skips_payload`]);
//! - malformed sends are refused and nothing of them arrives ([`bad_sends_refused`]);
//! - a send to a crashed peer fails with [`FabricError::PeerDown`] and the survivors get
//!   [`PeerEvent::Down`] ([`down_peer_is_reported`]);
//! - one node's crash does not disturb traffic between the others
//!   ([`crash_spares_other_traffic`]);
//! - all of this whichever way a node is polled: each node's polls alternate between
//!   [`Fabric::poll`] and [`Fabric::poll_spinning`] (a waiting thread's, which a fabric
//!   may answer by reading its connections directly), and traffic polled only with
//!   [`Fabric::poll_spinning`] arrives exactly once too ([`spinning_polls_deliver`]).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use hamlyn_core::Instant;
use hamlyn_wire::{Flags, Header, NodeId, Op, RequestId, SlotId, MAX_META_LEN};

use hamlyn_fabric::{
    Fabric, FabricError, Landing, PacketSink, PeerEvent, SharedBytes, SharedBytesMut, SimRng,
};

/// A set of connected fabrics, one per node, as a check sees them.
pub trait FabricSet {
    /// One node's fabric, borrowed from the set.
    type Node<'a>: Fabric
    where
        Self: 'a;

    /// Number of nodes; node `i` has id `NodeId(i)`.
    fn nodes(&self) -> usize;
    /// Node `i`'s fabric.
    fn node(&mut self, i: usize) -> Self::Node<'_>;
    /// The time to pass to sends and polls now.
    fn now(&mut self) -> Instant;
    /// Lets time pass so packets in flight make progress (the simulator jumps to its next
    /// delivery; a real fabric may wait briefly).
    fn advance(&mut self);
    /// Crashes node `i`: it stops sending and receiving, and its peers are told.
    fn crash(&mut self, i: usize);
}

/// Bounds on the suite's loops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most rounds (send, poll every node, advance) a check waits for an outcome.
    pub max_rounds: usize,
    /// Extra rounds after the expected packets arrived, to catch duplicates.
    pub quiet_rounds: usize,
    /// Most packets sent to a non-draining peer before [`FabricError::Full`] must appear.
    pub fill_limit: usize,
    /// Packets a poll may deliver at once.
    pub poll_budget: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_rounds: 100_000,
            quiet_rounds: 20,
            fill_limit: 1 << 16,
            poll_budget: 64,
        }
    }
}

/// Builds fresh sets of connected fabrics for the suite.
pub trait FabricFactory {
    /// The set it builds.
    type Set: FabricSet;
    /// Why a set could not be built.
    type Error: fmt::Display;
    /// A fresh set of `nodes` connected fabrics with ids `0..nodes`.
    fn build(&mut self, nodes: usize) -> Result<Self::Set, Self::Error>;
    /// Bounds for this fabric's checks.
    fn limits(&self) -> Limits {
        Limits::default()
    }
}

/// A check that did not pass.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("fabric conformance check `{check}` failed: {detail}")]
pub struct Failure {
    /// The check's name (its function's name).
    pub check: &'static str,
    /// What went wrong.
    pub detail: String,
}

type Outcome = Result<(), Failure>;

fn fail<T>(check: &'static str, detail: impl Into<String>) -> Result<T, Failure> {
    Err(Failure {
        check,
        detail: detail.into(),
    })
}

/// Runs every check, each on a fresh set; stops at the first failure.
pub fn run_all<F: FabricFactory>(f: &mut F) -> Outcome {
    peers_are_announced(f)?;
    exactly_once_byte_exact(f)?;
    spinning_polls_deliver(f)?;
    large_payloads_intact(f)?;
    full_then_resume(f)?;
    discard_skips_payload(f)?;
    bad_sends_refused(f)?;
    down_peer_is_reported(f)?;
    crash_spares_other_traffic(f)?;
    Ok(())
}

/// One packet a check sends.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pkt {
    header: Header,
    meta: Vec<u8>,
    payload: Vec<u8>,
    /// Gather pieces to send the payload in.
    pieces: usize,
}

/// A packet built from `seq`: every header field varies, payload and metadata bytes are
/// seeded from the packet's identity.
fn make_pkt(src: usize, dst: usize, seq: u32, payload_len: usize, meta_len: usize) -> Pkt {
    let mut rng = SimRng::new((src as u64) << 48 ^ (dst as u64) << 32 ^ u64::from(seq));
    let meta_len = meta_len.min(MAX_META_LEN);
    let mut h = Header::new(Op::Write);
    h.flags = Flags::FIRST | Flags::LAST | Flags::NOTIFY;
    if seq % 2 == 0 {
        h.flags = h.flags | Flags::WAKE;
    }
    h.meta_len = meta_len as u16;
    h.src = NodeId(src as u32);
    h.dst = NodeId(dst as u32);
    h.slot = SlotId(seq.wrapping_mul(7) ^ 0x55);
    h.meta_index = seq % 1000;
    h.key = rng.next_u64();
    h.offset = rng.next_u64() >> 20;
    h.payload_len = payload_len as u32;
    h.delta = rng.next_u64() as u32;
    h.word = rng.next_u64();
    h.request = RequestId {
        terminus: src as u32,
        seq,
    };
    let mut meta = vec![0; meta_len];
    rng.fill(&mut meta);
    let mut payload = vec![0; payload_len];
    rng.fill(&mut payload);
    Pkt {
        header: h,
        meta,
        payload,
        pieces: 1 + (seq as usize % 4),
    }
}

/// The pieces as a fabric takes them.
fn parts<'a>(slices: &[&'a [u8]]) -> Vec<SharedBytes<'a>> {
    slices.iter().map(|&s| SharedBytes::from(s)).collect()
}

/// Cuts `p` into `pieces` gather slices (some possibly empty).
fn gather(p: &[u8], pieces: usize) -> Vec<&[u8]> {
    let pieces = pieces.max(1);
    let step = p.len() / pieces;
    let mut out = Vec::with_capacity(pieces);
    let mut at = 0;
    for i in 0..pieces {
        let end = if i + 1 == pieces {
            p.len()
        } else {
            (at + step + i).min(p.len())
        };
        out.push(&p[at..end]);
        at = end;
    }
    out
}

/// What a node received.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Arrival {
    from: NodeId,
    header: Header,
    meta: Vec<u8>,
    /// `None` if the sink discarded the packet.
    payload: Option<Vec<u8>>,
}

/// A sink that records everything and checks the fabric keeps the two-phase protocol.
///
/// Accepted packets wait in `landing` until their payload is complete, keyed by (source,
/// sequence), so a stream fabric may read payloads in pieces across polls and interleave
/// packets of several peers or rails.
struct Recorder {
    arrivals: Vec<Arrival>,
    events: Vec<PeerEvent>,
    discard: fn(&Header) -> bool,
    landing: BTreeMap<(u32, u32), (Header, Vec<u8>)>,
    stray: Vec<u8>,
    protocol_errors: Vec<String>,
}

/// Byte the recorder pre-fills payload buffers with, to catch bytes a fabric skips.
const POISON: u8 = 0xA5;

fn landing_key(h: &Header) -> (u32, u32) {
    (h.src.0, h.request.seq)
}

impl Recorder {
    fn new(discard: fn(&Header) -> bool) -> Recorder {
        Recorder {
            arrivals: Vec::new(),
            events: Vec::new(),
            discard,
            landing: BTreeMap::new(),
            stray: Vec::new(),
            protocol_errors: Vec::new(),
        }
    }

    fn saw_down(&self, node: NodeId) -> bool {
        self.events.contains(&PeerEvent::Down { node })
    }
}

impl PacketSink for Recorder {
    fn on_header(&mut self, from: NodeId, header: &Header, meta: &[u8]) -> Landing {
        if (self.discard)(header) {
            self.arrivals.push(Arrival {
                from,
                header: *header,
                meta: meta.to_vec(),
                payload: None,
            });
            return Landing::Discard;
        }
        let buf = vec![POISON; header.payload_len as usize];
        if self
            .landing
            .insert(landing_key(header), (*header, buf))
            .is_some()
        {
            self.protocol_errors.push(format!(
                "header {header:?} delivered again before its payload"
            ));
        }
        Landing::Accept
    }

    fn payload_buf(&mut self, header: &Header) -> SharedBytesMut<'_> {
        match self.landing.get_mut(&landing_key(header)) {
            Some((h, buf)) if h == header => SharedBytesMut::from(&mut buf[..]),
            _ => {
                self.protocol_errors.push(format!(
                    "payload_buf for {header:?}, which was not accepted"
                ));
                self.stray = vec![POISON; header.payload_len as usize];
                SharedBytesMut::from(&mut self.stray[..])
            }
        }
    }

    fn on_payload(&mut self, from: NodeId, header: &Header, meta: &[u8]) {
        let payload = match self.landing.remove(&landing_key(header)) {
            Some((h, buf)) if h == *header => buf,
            _ => {
                self.protocol_errors
                    .push(format!("on_payload for {header:?}, which was not accepted"));
                std::mem::take(&mut self.stray)
            }
        };
        self.arrivals.push(Arrival {
            from,
            header: *header,
            meta: meta.to_vec(),
            payload: Some(payload),
        });
    }

    fn on_peer(&mut self, event: PeerEvent) {
        self.events.push(event);
    }
    fn on_unconfirmed(&mut self, _: NodeId, _: &Header) {
        // The promises checked here hold on a live link; what a lost session
        // leaves unconfirmed is the engine's to fail (tested over TCP engines).
    }
}

/// A check's running state: the set, one recorder and one outbox per node.
struct Run<S: FabricSet> {
    check: &'static str,
    set: S,
    limits: Limits,
    recs: Vec<Recorder>,
    outbox: Vec<VecDeque<Pkt>>,
    crashed: Vec<bool>,
    /// Every packet a send accepted.
    sent: Vec<Pkt>,
    /// Poll rounds so far (`poll_round`: spinning polls on every other one).
    rounds: usize,
    /// Every poll is a spinning one ([`spinning_polls_deliver`]).
    only_spinning: bool,
}

impl<S: FabricSet> Run<S> {
    fn new<F: FabricFactory<Set = S>>(
        f: &mut F,
        check: &'static str,
        nodes: usize,
        discard: fn(&Header) -> bool,
    ) -> Result<Run<S>, Failure> {
        let limits = f.limits();
        let set = match f.build(nodes) {
            Ok(s) => s,
            Err(e) => return fail(check, format!("could not build {nodes} fabrics: {e}")),
        };
        if set.nodes() != nodes {
            return fail(
                check,
                format!("asked for {nodes} nodes, got {}", set.nodes()),
            );
        }
        Ok(Run {
            check,
            set,
            limits,
            recs: (0..nodes).map(|_| Recorder::new(discard)).collect(),
            outbox: (0..nodes).map(|_| VecDeque::new()).collect(),
            crashed: vec![false; nodes],
            sent: Vec::new(),
            rounds: 0,
            only_spinning: false,
        })
    }

    fn fail<T>(&self, detail: impl Into<String>) -> Result<T, Failure> {
        fail(self.check, detail)
    }

    /// Sends from every live node's outbox until it is empty or the fabric pushes back.
    /// Packets to a peer reported down are dropped from the outbox if `may_lose` says
    /// they may be lost; any other error fails the check.
    fn send_round(&mut self, may_lose: &dyn Fn(&Pkt) -> bool) -> Outcome {
        for i in 0..self.outbox.len() {
            if self.crashed[i] {
                continue;
            }
            let now = self.set.now();
            while let Some(p) = self.outbox[i].front() {
                let slices = parts(&gather(&p.payload, p.pieces));
                let r = self.set.node(i).send(now, &p.header, &p.meta, &slices);
                match r {
                    Ok(()) => {
                        if let Some(p) = self.outbox[i].pop_front() {
                            self.sent.push(p);
                        }
                    }
                    Err(FabricError::Full) => break,
                    Err(FabricError::PeerDown(n)) if may_lose(p) => {
                        let _ = n;
                        self.outbox[i].pop_front();
                    }
                    Err(e) => {
                        return self.fail(format!(
                            "node {i} could not send {:?}: {e}",
                            p.header.request
                        ))
                    }
                }
            }
        }
        Ok(())
    }

    /// Polls every live node once: half of them (alternating by round) with
    /// [`Fabric::poll_spinning`], the others with [`Fabric::poll`].
    fn poll_round(&mut self) -> Outcome {
        let now = self.set.now();
        self.rounds += 1;
        for i in 0..self.recs.len() {
            if self.crashed[i] {
                continue;
            }
            let budget = self.limits.poll_budget;
            let spinning = self.only_spinning || (self.rounds + i) % 2 == 1;
            let r = {
                let (mut node, rec) = (self.set.node(i), &mut self.recs[i]);
                if spinning {
                    node.poll_spinning(now, rec, budget)
                } else {
                    node.poll(now, rec, budget)
                }
            };
            if let Err(e) = r {
                return self.fail(format!("node {i} poll failed: {e}"));
            }
            if let Some(e) = self.recs[i].protocol_errors.first() {
                return self.fail(format!("node {i}: {e}"));
            }
        }
        Ok(())
    }

    fn arrived(&self) -> usize {
        self.recs.iter().map(|r| r.arrivals.len()).sum()
    }

    /// Rounds of send, poll, advance until every outbox is empty and `done` holds, then
    /// `quiet_rounds` more to catch late duplicates.
    fn pump(&mut self, may_lose: &dyn Fn(&Pkt) -> bool, done: &dyn Fn(&Self) -> bool) -> Outcome {
        let mut finished = false;
        for _ in 0..self.limits.max_rounds {
            self.send_round(may_lose)?;
            self.poll_round()?;
            if self.outbox.iter().all(VecDeque::is_empty) && done(self) {
                finished = true;
                break;
            }
            self.set.advance();
        }
        if !finished {
            let left: usize = self.outbox.iter().map(VecDeque::len).sum();
            return self.fail(format!(
                "not done after {} rounds: {left} packets unsent, {} of {} sent arrived",
                self.limits.max_rounds,
                self.arrived(),
                self.sent.len()
            ));
        }
        for _ in 0..self.limits.quiet_rounds {
            self.set.advance();
            self.poll_round()?;
        }
        Ok(())
    }

    /// Every arrival matches a sent packet exactly and arrived once, at its destination;
    /// every sent packet arrived unless `may_miss` allows it. Discarded arrivals must have
    /// been discarded by the sink's rule and carry no payload.
    fn verify(&self, may_miss: &dyn Fn(&Pkt) -> bool) -> Outcome {
        let mut sent: BTreeMap<(u32, u32), (&Pkt, usize)> = BTreeMap::new();
        for p in &self.sent {
            let key = (p.header.src.0, p.header.request.seq);
            if sent.insert(key, (p, 0)).is_some() {
                return self.fail(format!("check bug: packet {key:?} sent twice"));
            }
        }
        for (i, rec) in self.recs.iter().enumerate() {
            for a in &rec.arrivals {
                let key = (a.header.src.0, a.header.request.seq);
                let Some((p, seen)) = sent.get_mut(&key) else {
                    return self.fail(format!("node {i} got a packet nobody sent: {:?}", a.header));
                };
                *seen += 1;
                if *seen > 1 {
                    return self.fail(format!("packet {key:?} arrived {seen} times"));
                }
                if a.header != p.header {
                    return self.fail(format!(
                        "header changed in flight: sent {:?}, got {:?}",
                        p.header, a.header
                    ));
                }
                if a.header.dst.0 as usize != i || a.from != p.header.src {
                    return self.fail(format!(
                        "packet {key:?} for {} arrived at node {i} from {}",
                        p.header.dst, a.from
                    ));
                }
                if a.meta != p.meta {
                    return self.fail(format!("metadata of packet {key:?} changed"));
                }
                match &a.payload {
                    None if (rec.discard)(&a.header) => {}
                    None => return self.fail(format!("packet {key:?} lost its payload")),
                    Some(got) if got == &p.payload => {}
                    Some(got) => {
                        let at = got
                            .iter()
                            .zip(&p.payload)
                            .position(|(x, y)| x != y)
                            .unwrap_or(got.len().min(p.payload.len()));
                        return self.fail(format!(
                            "payload of packet {key:?} ({} bytes) differs at byte {at}",
                            p.payload.len()
                        ));
                    }
                }
            }
        }
        for (i, rec) in self.recs.iter().enumerate() {
            for (key, (h, _)) in &rec.landing {
                let lost_ok = sent.get(key).is_some_and(|(p, _)| may_miss(p));
                if !lost_ok {
                    return self.fail(format!(
                        "node {i} accepted {:?} but its payload never completed",
                        h.request
                    ));
                }
            }
        }
        for (key, (p, seen)) in &sent {
            if *seen == 0 && !may_miss(p) {
                return self.fail(format!(
                    "packet {key:?} to {} was sent to a live peer but never arrived",
                    p.header.dst
                ));
            }
        }
        Ok(())
    }

    /// Pumps (without traffic of its own) until every node has been told every other
    /// node is up. A fabric whose links need a handshake (TCP) takes a few rounds; the
    /// simulator announces everyone at once.
    fn wait_all_up(&mut self) -> Outcome {
        let n = self.recs.len();
        self.pump(&never, &|r| {
            r.recs.iter().enumerate().all(|(i, rec)| {
                (0..n).filter(|&j| j != i).all(|j| {
                    rec.events
                        .iter()
                        .any(|e| matches!(e, PeerEvent::Up { node, .. } if node.0 as usize == j))
                })
            })
        })
    }

    fn crash(&mut self, i: usize) {
        self.set.crash(i);
        self.crashed[i] = true;
        self.outbox[i].clear();
    }
}

const fn never(_: &Pkt) -> bool {
    false
}

/// Every node is told, with [`PeerEvent::Up`], about every other node, and about none
/// going down.
pub fn peers_are_announced<F: FabricFactory>(f: &mut F) -> Outcome {
    let mut run = Run::new(f, "peers_are_announced", 3, |_| false)?;
    let all_up = |run: &Run<F::Set>| {
        run.recs.iter().enumerate().all(|(i, r)| {
            (0..3).filter(|&j| j != i).all(|j| {
                r.events
                    .iter()
                    .any(|e| matches!(e, PeerEvent::Up { node, .. } if node.0 as usize == j))
            })
        })
    };
    run.pump(&never, &all_up)?;
    for (i, r) in run.recs.iter().enumerate() {
        if let Some(e) = r.events.iter().find(|e| !matches!(e, PeerEvent::Up { .. })) {
            return run.fail(format!("node {i} got {e:?} with every peer alive"));
        }
        if r.events.iter().any(|e| e.node().0 as usize == i) {
            return run.fail(format!("node {i} was told about itself"));
        }
    }
    Ok(())
}

/// Payload sizes the traffic checks cycle through (around common MTUs and page sizes).
const SIZES: [usize; 12] = [0, 1, 7, 63, 64, 65, 1000, 1500, 4096, 4097, 9000, 65536];

/// Every packet sent to a live peer arrives exactly once, byte-exact (header, metadata,
/// payload), whatever the sizes and gather lists, among three nodes sending to each other.
pub fn exactly_once_byte_exact<F: FabricFactory>(f: &mut F) -> Outcome {
    exactly_once(f, "exactly_once_byte_exact", false)
}

/// As [`exactly_once_byte_exact`], every node polled only with [`Fabric::poll_spinning`]:
/// a fabric that answers it its own way (reading its connections directly) must still
/// deliver everything, exactly once.
pub fn spinning_polls_deliver<F: FabricFactory>(f: &mut F) -> Outcome {
    exactly_once(f, "spinning_polls_deliver", true)
}

/// Three nodes sending to each other, packets of every size in [`SIZES`], all arriving
/// exactly once and byte-exact; `only_spinning`: polled with [`Fabric::poll_spinning`]
/// only.
fn exactly_once<F: FabricFactory>(f: &mut F, check: &'static str, only_spinning: bool) -> Outcome {
    let mut run = Run::new(f, check, 3, |_| false)?;
    run.only_spinning = only_spinning;
    let mut seq = 0u32;
    for k in 0..40 {
        for src in 0..3 {
            for dst in (0..3).filter(|&d| d != src) {
                let len = SIZES[(k + src + dst) % SIZES.len()];
                let meta = (k * 7 + src) % (MAX_META_LEN + 1);
                run.outbox[src].push_back(make_pkt(src, dst, seq, len, meta));
                seq += 1;
            }
        }
    }
    let total = seq as usize;
    run.pump(&never, &|r| r.arrived() >= total)?;
    run.verify(&never)
}

/// Payloads of several megabytes, in many gather pieces, arrive intact both ways.
pub fn large_payloads_intact<F: FabricFactory>(f: &mut F) -> Outcome {
    let mut run = Run::new(f, "large_payloads_intact", 2, |_| false)?;
    let sizes = [1 << 20, (4 << 20) + 3, (256 << 10) - 1];
    let mut seq = 0;
    for (k, &len) in sizes.iter().enumerate() {
        for src in 0..2 {
            let mut p = make_pkt(src, 1 - src, seq, len, MAX_META_LEN);
            p.pieces = 16 + k;
            run.outbox[src].push_back(p);
            seq += 1;
        }
    }
    let total = seq as usize;
    run.pump(&never, &|r| r.arrived() >= total)?;
    run.verify(&never)
}

/// A peer that does not poll makes sends fail with [`FabricError::Full`] (never a silent
/// drop), and sending resumes once it drains; everything sent arrives exactly once.
///
/// The fill starts once both nodes have announced each other up: a fabric whose links
/// need a handshake (TCP) cannot bring a peer up while that peer does not poll.
pub fn full_then_resume<F: FabricFactory>(f: &mut F) -> Outcome {
    let mut run = Run::new(f, "full_then_resume", 2, |_| false)?;
    run.wait_all_up()?;
    let mut seq = 0u32;
    let mut full_at = None;
    // Fill: only the sender polls (it may need to, to push bytes out).
    for _ in 0..run.limits.fill_limit {
        let p = make_pkt(0, 1, seq, 1024, 8);
        let now = run.set.now();
        let r = run.set.node(0).send(
            now,
            &p.header,
            &p.meta,
            &parts(&gather(&p.payload, p.pieces)),
        );
        match r {
            Ok(()) => {
                run.sent.push(p);
                seq += 1;
            }
            Err(FabricError::Full) => {
                full_at = Some(p);
                break;
            }
            Err(e) => return run.fail(format!("send {seq} failed: {e}")),
        }
        let budget = run.limits.poll_budget;
        let polled = run.set.node(0).poll(now, &mut run.recs[0], budget);
        if let Err(e) = polled {
            return run.fail(format!("sender poll failed: {e}"));
        }
        if !run.recs[0].arrivals.is_empty() {
            return run.fail("the sender received a packet nobody sent to it");
        }
    }
    let Some(blocked) = full_at else {
        return run.fail(format!(
            "{} packets sent to a peer that never polled, and no Full",
            run.limits.fill_limit
        ));
    };
    if run.sent.is_empty() {
        return run.fail("Full before a single packet was sent");
    }
    // Drain: the receiver polls; the refused packet must go through within bounds.
    let mut resumed = false;
    for _ in 0..run.limits.max_rounds {
        run.poll_round()?;
        let now = run.set.now();
        let slices = parts(&gather(&blocked.payload, blocked.pieces));
        let r = run
            .set
            .node(0)
            .send(now, &blocked.header, &blocked.meta, &slices);
        match r {
            Ok(()) => {
                resumed = true;
                break;
            }
            Err(FabricError::Full) => run.set.advance(),
            Err(e) => return run.fail(format!("send after draining failed: {e}")),
        }
    }
    if !resumed {
        return run.fail("sending never resumed after the receiver drained");
    }
    run.sent.push(blocked);
    seq += 1;
    for k in 0..20 {
        run.outbox[0].push_back(make_pkt(0, 1, seq + k, 100, 0));
    }
    let total = run.sent.len() + 20;
    run.pump(&never, &|r| r.arrived() >= total)?;
    run.verify(&never)
}

/// A sink that discards a packet skips its payload, and the packets after it arrive
/// intact (odd sequence numbers are discarded, even ones kept).
pub fn discard_skips_payload<F: FabricFactory>(f: &mut F) -> Outcome {
    fn odd(h: &Header) -> bool {
        h.request.seq % 2 == 1
    }
    let mut run = Run::new(f, "discard_skips_payload", 2, odd)?;
    for seq in 0..40u32 {
        let len = SIZES[seq as usize % SIZES.len()] + 1;
        run.outbox[0].push_back(make_pkt(0, 1, seq, len, seq as usize % 9));
    }
    run.pump(&never, &|r| r.arrived() >= 40)?;
    run.verify(&never)?;
    let discarded = run.recs[1]
        .arrivals
        .iter()
        .filter(|a| a.payload.is_none())
        .count();
    if discarded != 20 {
        return run.fail(format!("{discarded} packets discarded, expected 20"));
    }
    Ok(())
}

/// Sends a fabric must refuse: another node's header, lengths that do not match the
/// bytes, a header that would not parse, an unknown destination. None of them arrives.
pub fn bad_sends_refused<F: FabricFactory>(f: &mut F) -> Outcome {
    let mut run = Run::new(f, "bad_sends_refused", 2, |_| false)?;
    let good = make_pkt(0, 1, 1, 10, 4);
    let now = run.set.now();
    let mut cases: Vec<(&str, Header, Vec<u8>, Vec<u8>)> = Vec::new();
    let mut h = good.header;
    h.src = NodeId(1);
    cases.push((
        "another node's source",
        h,
        good.meta.clone(),
        good.payload.clone(),
    ));
    cases.push((
        "short metadata",
        good.header,
        good.meta[..3].to_vec(),
        good.payload.clone(),
    ));
    cases.push((
        "long payload",
        good.header,
        good.meta.clone(),
        [&good.payload[..], b"x"].concat(),
    ));
    let mut h = good.header;
    h.flags = Flags::LAST;
    cases.push((
        "metadata on a non-FIRST packet",
        h,
        good.meta.clone(),
        good.payload.clone(),
    ));
    let mut h = good.header;
    h.dst = NodeId(u32::MAX - 1);
    cases.push((
        "unknown destination",
        h,
        good.meta.clone(),
        good.payload.clone(),
    ));
    for (what, h, meta, payload) in &cases {
        let r = run.set.node(0).send(now, h, meta, &[payload.into()]);
        match r {
            Err(FabricError::Full) | Ok(()) => {
                return run.fail(format!("a send with {what} was not refused"))
            }
            Err(_) => {}
        }
    }
    run.outbox[0].push_back(good);
    run.pump(&never, &|r| r.arrived() >= 1)?;
    run.verify(&never)
}

/// After a node crashes, a send to it fails with [`FabricError::PeerDown`] (within
/// bounds: a real fabric may need time to notice) and every survivor gets
/// [`PeerEvent::Down`] for it.
pub fn down_peer_is_reported<F: FabricFactory>(f: &mut F) -> Outcome {
    let mut run = Run::new(f, "down_peer_is_reported", 3, |_| false)?;
    let dead = NodeId(2);
    run.pump(&never, &|r| {
        r.recs.iter().take(2).all(|rec| {
            rec.events
                .iter()
                .any(|e| matches!(e, PeerEvent::Up { node, .. } if *node == dead))
        })
    })?;
    run.crash(2);
    let mut refused = false;
    for round in 0..run.limits.max_rounds {
        let p = make_pkt(0, 2, round as u32, 32, 0);
        let now = run.set.now();
        let r = run
            .set
            .node(0)
            .send(now, &p.header, &p.meta, &[(&p.payload).into()]);
        match r {
            Err(FabricError::PeerDown(n)) if n == dead => {
                refused = true;
            }
            Err(FabricError::PeerDown(n)) => {
                return run.fail(format!("send to {dead} reported {n} down"));
            }
            Ok(()) | Err(FabricError::Full) => {}
            Err(e) => return run.fail(format!("send to the dead node failed with {e}")),
        }
        run.poll_round()?;
        if refused && run.recs[0].saw_down(dead) && run.recs[1].saw_down(dead) {
            return Ok(());
        }
        run.set.advance();
    }
    run.fail(format!(
        "after the crash: PeerDown on send {refused}, Down at node 0 {}, at node 1 {}",
        run.recs[0].saw_down(dead),
        run.recs[1].saw_down(dead)
    ))
}

/// Node 2 crashes while packets flow among all three nodes: every packet between nodes 0
/// and 1 still arrives exactly once and byte-exact; packets from node 2 arrive at most
/// once and intact; both survivors are told node 2 is down.
///
/// Traffic starts once all three nodes are up, so that node 2 is a peer that was up when
/// it crashed (a fabric with handshakes may otherwise see it die before it ever came up,
/// and only a timeout can tell about a peer that never came up).
pub fn crash_spares_other_traffic<F: FabricFactory>(f: &mut F) -> Outcome {
    let mut run = Run::new(f, "crash_spares_other_traffic", 3, |_| false)?;
    run.wait_all_up()?;
    let mut seq = 0u32;
    let mut plan = |run: &mut Run<F::Set>, k: usize| {
        for src in 0..3 {
            for dst in (0..3).filter(|&d| d != src) {
                let len = SIZES[(k + 3 * src + dst) % SIZES.len()];
                run.outbox[src].push_back(make_pkt(src, dst, seq, len, k % 5));
                seq += 1;
            }
        }
    };
    for k in 0..30 {
        plan(&mut run, k);
    }
    let involves_2 = |p: &Pkt| p.header.src.0 == 2 || p.header.dst.0 == 2;
    // Get traffic going, some of it in flight, then crash node 2.
    for _ in 0..3 {
        run.send_round(&never)?;
        run.poll_round()?;
        run.set.advance();
    }
    run.crash(2);
    for k in 30..60 {
        plan(&mut run, k);
    }
    run.outbox[2].clear();
    let between_01 = move |p: &Pkt| !involves_2(p);
    let wanted = |r: &Run<F::Set>| {
        let got = r.recs[..2]
            .iter()
            .flat_map(|rec| &rec.arrivals)
            .filter(|a| a.header.src.0 != 2)
            .count();
        let expect = r.sent.iter().filter(|p| between_01(p)).count();
        got >= expect && r.recs[0].saw_down(NodeId(2)) && r.recs[1].saw_down(NodeId(2))
    };
    run.pump(&involves_2, &wanted)?;
    run.verify(&involves_2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_covers_the_payload_in_order() {
        let p: Vec<u8> = (0..100).collect();
        for pieces in 1..20 {
            let g = gather(&p, pieces);
            assert_eq!(g.len(), pieces);
            assert_eq!(g.concat(), p);
        }
        assert_eq!(gather(&[], 3).concat(), Vec::<u8>::new());
    }

    #[test]
    fn packets_are_valid_and_distinct() {
        let a = make_pkt(0, 1, 5, 10, 70);
        assert_eq!(a.meta.len(), MAX_META_LEN);
        assert_eq!(Header::parse(&a.header.to_bytes()), Ok(a.header));
        assert_ne!(make_pkt(0, 1, 6, 10, 3).payload, a.payload);
    }
}
