//! The engine's own walk, through a real engine: work queued on termini while the engine
//! is held (inside a fabric poll, by a test fabric with a gate) is delivered level by
//! level, highest first, and within a level in quanta (a visit sends a terminus's next
//! small single-packet messages after its first, `QUANTUM_PACKETS` and `QUANTUM_BYTES`
//! at most), checked by the order of the receiver's notifications — never by time.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant as StdInstant};

use common::{inline, receiver_slot, RawClient};
use hamlyn_core::Instant;
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_fabric::{Fabric, FabricError, PacketSink, PeerEvent, SharedBytes};
use hamlyn_wire::request::{Gather, Payload, MAX_GATHER};
use hamlyn_wire::{Header, NodeId};

/// Whether polls block, and whether one is blocked now.
#[derive(Default)]
struct GateState {
    closed: bool,
    inside: bool,
}

#[derive(Default, Clone)]
struct Gate(Arc<(Mutex<GateState>, Condvar)>);

impl Gate {
    fn close(&self) {
        self.0 .0.lock().unwrap().closed = true;
    }
    fn open(&self) {
        self.0 .0.lock().unwrap().closed = false;
        self.0 .1.notify_all();
    }
    /// Waits (bounded) until the engine is held inside a poll.
    fn wait_held(&self) {
        let deadline = StdInstant::now() + Duration::from_secs(30);
        let mut st = self.0 .0.lock().unwrap();
        while !st.inside {
            assert!(StdInstant::now() < deadline, "the engine never polled");
            st = self
                .0
                 .1
                .wait_timeout(st, Duration::from_millis(10))
                .unwrap()
                .0;
        }
    }
}

/// What a logging [`GateFabric`] saw, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// A poll returned.
    Poll,
    /// A packet with this tag (its header's word) was sent.
    Sent(u64),
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// A fabric whose `poll` blocks while the gate is closed: it holds the engine's thread
/// between two turns. Without a log it has no peers; with one, node 2 is up from its
/// first poll, every packet to it is taken, and sends and polls are logged.
struct GateFabric {
    gate: Gate,
    log: Option<Log>,
    announced: bool,
}

impl GateFabric {
    fn new(gate: Gate, log: Option<Log>) -> GateFabric {
        GateFabric {
            gate,
            log,
            announced: false,
        }
    }
}

impl Fabric for GateFabric {
    fn local(&self) -> NodeId {
        NodeId(1)
    }
    fn send(
        &mut self,
        _now: Instant,
        h: &Header,
        _meta: &[u8],
        _payload: &[SharedBytes<'_>],
    ) -> Result<(), FabricError> {
        match &self.log {
            Some(log) => {
                log.lock().unwrap().push(Seen::Sent(h.word));
                Ok(())
            }
            None => Err(FabricError::PeerDown(NodeId(0))),
        }
    }
    fn poll(
        &mut self,
        _now: Instant,
        sink: &mut dyn PacketSink,
        _budget: usize,
    ) -> Result<usize, FabricError> {
        if let Some(log) = &self.log {
            if !std::mem::replace(&mut self.announced, true) {
                sink.on_peer(PeerEvent::Up {
                    node: NodeId(2),
                    incarnation: 1,
                });
            }
            log.lock().unwrap().push(Seen::Poll);
        }
        let (m, cv) = &*self.gate.0;
        let mut st = m.lock().unwrap();
        while st.closed {
            st.inside = true;
            cv.notify_all();
            st = cv.wait(st).unwrap();
        }
        st.inside = false;
        Ok(0)
    }
}

/// An engine of node 1 on a gated fabric (logging what it sees if `log`), and its gate.
fn engine_on_gate(cfg: EngineConfig, log: Option<Log>) -> (Gate, EngineHandle) {
    let gate = Gate::default();
    let fabric = GateFabric::new(gate.clone(), log);
    let engine = EngineHandle::start_with_fabric(cfg, Some(Box::new(fabric))).unwrap();
    (gate, engine)
}

fn node1() -> EngineConfig {
    let mut cfg = EngineConfig::embedded();
    cfg.node = 1;
    cfg
}

#[test]
fn queued_work_is_delivered_level_by_level_highest_first() {
    let (gate, engine) = engine_on_gate(node1(), None);
    let mut c = RawClient::attach(engine.socket_path(), 5, 1, 1024);
    let (slot, key, _region) = receiver_slot(&c, 1 << 16, 4);
    // Terminus t at priority 3 - t, so index order is not priority order; two termini
    // share the lowest level.
    let prios = [3u8, 2, 1, 0, 3];
    for (t, &p) in prios.iter().enumerate() {
        c.open(t as u16, p);
    }
    const PER: u64 = 8;
    gate.close();
    gate.wait_held();
    for round in 0..PER {
        // Lowest priority pushed first in each round.
        for (t, &p) in prios.iter().enumerate() {
            let word = u64::from(p) * 1000 + round;
            c.push(t, inline(1, slot, key, 0, 64 * word % 4096, b"x", word))
                .unwrap();
        }
    }
    gate.open();
    let got: Vec<u64> = (0..PER * 5)
        .map(|_| c.wait_notif(0).expect("notified").word.get())
        .collect();
    let levels: Vec<u64> = got.iter().map(|w| w / 1000).collect();
    let mut want = Vec::new();
    for level in 0..4 {
        let n = if level == 3 { 2 * PER } else { PER };
        want.extend(std::iter::repeat_n(level, n as usize));
    }
    assert_eq!(levels, want, "every level before the next: {got:?}");
    for level in 0..3u64 {
        let rounds: Vec<u64> = got
            .iter()
            .filter(|w| *w / 1000 == level)
            .map(|w| w % 1000)
            .collect();
        assert_eq!(
            rounds,
            (0..PER).collect::<Vec<_>>(),
            "level {level} in order"
        );
    }
    // Every request was pushed with its ready hint while the engine was held: the
    // engine took them all from the hints, none from its sweep of the termini.
    assert_eq!(c.stats().engine.found_by_sweep, 0);
}

/// A client that sets no ready hints and rings no doorbell (`push_quiet`) is still
/// served, by the sweep, on every terminus of a port of 256 at four levels; the engine
/// counts each request it found that way.
#[test]
fn requests_without_hints_are_found_by_the_sweep() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let mut c = RawClient::attach(engine.socket_path(), 256, 1, 1024);
    let (slot, key, _region) = receiver_slot(&c, 1 << 16, 4);
    for t in 0..256u16 {
        c.open(t, (t % 4) as u8);
    }
    let before = c.stats().engine.found_by_sweep;
    let picked = [0usize, 63, 64, 200, 255];
    for &t in &picked {
        let node = c.node;
        c.push_quiet(t, inline(node, slot, key, 0, 64 * t as u64, b"x", t as u64))
            .unwrap();
    }
    let mut got: Vec<u64> = (0..picked.len())
        .map(|_| c.wait_notif(0).expect("found by the sweep").word.get())
        .collect();
    got.sort();
    assert_eq!(got, picked.iter().map(|&t| t as u64).collect::<Vec<_>>());
    let found = c.stats().engine.found_by_sweep - before;
    assert_eq!(found, picked.len() as u64, "each counted once");
}

/// A visit's quantum: the engine's constants, as a test sees them (`engine.rs`).
const QUANTUM_PACKETS: u64 = 16;
const QUANTUM_BYTES: u64 = 4096;

/// Engine `cfg` with a gated fabric, a receiver slot, and a client with `termini` termini
/// at priority 0. The caller closes the gate ([`hold`]) once it has asked the engine
/// what it needs (no control request is answered while the engine is held).
fn gated_engine(
    cfg: EngineConfig,
    termini: u16,
) -> (
    Gate,
    EngineHandle,
    RawClient,
    u32,
    u64,
    std::sync::Arc<hamlyn_shm::region::ShmRegion>,
) {
    let (gate, engine) = engine_on_gate(cfg, None);
    let c = RawClient::attach(engine.socket_path(), termini, 1, 1024);
    let (slot, key, region) = receiver_slot(&c, 1 << 16, 4);
    for t in 0..termini {
        c.open(t, 0);
    }
    (gate, engine, c, slot, key, region)
}

/// Holds the engine inside its fabric's poll.
fn hold(gate: &Gate) {
    gate.close();
    gate.wait_held();
}

/// A message of `len` bytes gathered from offset 0 of `area` to metadata entry `entry`,
/// tagged `tag`.
fn gathered(
    slot: u32,
    key: u64,
    entry: u32,
    area: u32,
    len: u64,
    tag: u64,
) -> hamlyn_wire::request::SendRequest {
    let mut req = inline(1, slot, key, entry, 0, b"", tag);
    let mut list = [Gather::default(); MAX_GATHER];
    list[0] = Gather {
        area,
        offset: 0,
        len,
    };
    req.payload = Payload::Gather { list, count: 1 };
    req
}

/// The tags of the next `n` notifications of queue 0.
fn tags(c: &mut RawClient, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| c.wait_notif(0).expect("notified").word.get())
        .collect()
}

/// Two termini of one level, 40 small messages queued on each: every visit sends a
/// quantum of 16 (its first and 15 more), and the two take turns quantum by quantum, as
/// they took turns packet by packet before (round robin keeps equal shares). The engine
/// counts the packets its quanta sent after their first.
#[test]
fn a_visit_sends_a_quantum_of_small_messages_and_termini_take_turns_by_quanta() {
    let (gate, _engine, mut c, slot, key, _region) = gated_engine(node1(), 2);
    hold(&gate);
    const PER: u64 = 40;
    for i in 0..PER {
        for t in 0..2u64 {
            let tag = t * 1000 + i;
            c.push(t as usize, inline(1, slot, key, 0, 0, b"q", tag))
                .unwrap();
        }
    }
    gate.open();
    let got = tags(&mut c, 2 * PER as usize);
    let mut want = Vec::new();
    let mut next = [0u64; 2];
    while next.iter().any(|&n| n < PER) {
        for t in 0..2u64 {
            let from = next[t as usize];
            let to = (from + QUANTUM_PACKETS).min(PER);
            want.extend((from..to).map(|i| t * 1000 + i));
            next[t as usize] = to;
        }
    }
    assert_eq!(
        got, want,
        "quanta of {QUANTUM_PACKETS}, terminus by terminus"
    );
    // Three visits each (16, 16, 8): all but the first packet of each came in a quantum.
    let visits = 2 * PER.div_ceil(QUANTUM_PACKETS);
    assert_eq!(c.stats().engine.quantum_packets, 2 * PER - visits);
}

/// Bytes end a quantum too: 1 KiB messages go four to a visit (`QUANTUM_BYTES`), while
/// the other terminus's small ones go sixteen.
#[test]
fn a_quantum_ends_at_its_bytes() {
    let (gate, _engine, mut c, slot, key, _region) = gated_engine(node1(), 2);
    let (area, _src) = c.area(4096);
    hold(&gate);
    const KIB: u64 = 1024;
    let per_visit = QUANTUM_BYTES / KIB;
    for i in 0..12u64 {
        c.push(0, gathered(slot, key, 0, area, KIB, i)).unwrap();
        c.push(1, inline(1, slot, key, 0, 0, b"s", 1000 + i))
            .unwrap();
    }
    gate.open();
    let got = tags(&mut c, 24);
    let mut want: Vec<u64> = (0..per_visit).collect();
    want.extend(1000..1012);
    want.extend(per_visit..12);
    assert_eq!(
        got, want,
        "{per_visit} of 1 KiB in a visit, the small ones all in one"
    );
}

/// A message of several packets ends a quantum: it goes on one packet per visit, and the
/// small messages after it join the visit of its last packet.
#[test]
fn a_message_of_several_packets_ends_a_quantum() {
    let mut cfg = node1();
    cfg.intra_mtu = 1024;
    let (gate, _engine, mut c, slot, key, _region) = gated_engine(cfg, 2);
    let (area, _src) = c.area(4096);
    hold(&gate);
    c.push(0, inline(1, slot, key, 0, 0, b"a", 0)).unwrap();
    c.push(0, inline(1, slot, key, 0, 0, b"a", 1)).unwrap();
    // On an entry of its own: its packets are counted there while the others land.
    c.push(0, gathered(slot, key, 1, area, 3 * 1024, 2))
        .unwrap();
    c.push(0, inline(1, slot, key, 0, 0, b"a", 3)).unwrap();
    c.push(0, inline(1, slot, key, 0, 0, b"a", 4)).unwrap();
    for i in 0..5u64 {
        c.push(1, inline(1, slot, key, 0, 0, b"b", 1000 + i))
            .unwrap();
    }
    gate.open();
    // Visit 1: 0, 1 and the first packet of 2; then the other terminus whole; visit 2:
    // the second packet of 2; visit 3: its last, then 3 and 4.
    assert_eq!(
        tags(&mut c, 10),
        [0, 1, 1000, 1001, 1002, 1003, 1004, 2, 3, 4]
    );
}

/// Packets to another node go one per visit, as before quanta: the fabric coalesces a
/// stream's small packets itself, and sixteen between two of its polls cost the TCP
/// message rate. Twenty queued small messages to node 2 leave a turn's worth at a time
/// (one, or two when a spinning engine's first busy turn skips its idle-cadence poll,
/// never a quantum), and the engine counts them sent and none in a quantum.
#[test]
fn packets_to_another_node_go_one_per_visit() {
    let log = Log::default();
    let (gate, engine) = engine_on_gate(node1(), Some(log.clone()));
    let mut c = RawClient::attach(engine.socket_path(), 1, 1, 1024);
    c.open(0, 0);
    // Node 2 is up from the fabric's first poll.
    let deadline = StdInstant::now() + Duration::from_secs(30);
    while !c.stats().peer(2).is_some_and(|p| p.up) {
        assert!(StdInstant::now() < deadline, "node 2 never came up");
        std::thread::sleep(Duration::from_millis(1));
    }
    hold(&gate);
    const N: u64 = 20;
    for i in 0..N {
        c.push(0, inline(2, 9, 0x5107, 0, 0, b"r", i)).unwrap();
    }
    gate.open();
    c.wait_finished(0, N);
    let seen = log.lock().unwrap().clone();
    let sent: Vec<u64> = seen
        .iter()
        .filter_map(|s| match s {
            Seen::Sent(tag) => Some(*tag),
            Seen::Poll => None,
        })
        .collect();
    assert_eq!(sent, (0..N).collect::<Vec<_>>());
    let most_between_polls = seen
        .split(|s| *s == Seen::Poll)
        .map(<[Seen]>::len)
        .max()
        .unwrap_or(0);
    assert!(most_between_polls <= 2, "{seen:?}");
    let e = c.stats().engine;
    assert_eq!(e.remote_sent, N);
    assert_eq!(e.quantum_packets, 0);
}

/// A read of this node's memory, then a write over the bytes it reads, on one terminus:
/// the read answers with the bytes from before the write. (A read's answer is copied on
/// later turns; a quantum that went on past the read delivered the write first.)
#[test]
fn a_read_then_a_write_on_one_terminus_reads_the_bytes_before_the_write() {
    use common::{read_req, reply_ticket, slot_with_perms};
    use hamlyn_wire::control::perm;
    let (gate, _engine, mut c, _, _, _) = gated_engine(node1(), 1);
    let (s, skey, data) = slot_with_perms(&c, 4096, 1, perm::WRITE | perm::READ);
    data.write(0, &[0xAA; 8]).unwrap();
    let (rslot, rkey, reply) = slot_with_perms(&c, 4096, 1, perm::WRITE);
    let rt = reply_ticket(&c, rslot, rkey, 4096);
    hold(&gate);
    c.push(0, read_req(1, s, skey, 0, 8, rt, 0)).unwrap();
    for i in 0..3u64 {
        c.push(0, inline(1, s, skey, 0, 0, b"BBBBBBBB", 7 + i))
            .unwrap();
    }
    gate.open();
    c.wait_finished(0, 4);
    // The three writes' notifications and the read's.
    for _ in 0..4 {
        c.wait_notif(0).expect("notified");
    }
    let mut got = [0u8; 8];
    reply.read(0, &mut got).unwrap();
    assert_eq!(got, [0xAA; 8], "the read saw a later write");
    let mut now = [0u8; 8];
    data.read(0, &mut now).unwrap();
    assert_eq!(&now, b"BBBBBBBB");
}
