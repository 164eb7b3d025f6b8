//! The simulated network: N nodes in one process, seeded delays that reorder packets,
//! bounded links, and announced faults (DESIGN §2 "Fabrics").
//!
//! [`SimNet`] holds every node's inbound packets and every link's state; a node's view of
//! it is a [`SimFabric`], borrowed with [`SimNet::fabric`], which implements [`Fabric`].
//! Nothing here reads a clock or spawns a thread: `now` comes in with every call, and all
//! randomness comes from one [`SimRng`] seeded at construction, so a run replays exactly.
//!
//! The model:
//! - Each packet gets a delivery time `now + delay`, with `delay` drawn uniformly from
//!   `[min_delay, max_delay]`; a poll delivers due packets in delivery-time order, so
//!   packets on one link overtake each other.
//! - Each directed link holds at most `link_capacity` packets in flight (sent, not yet
//!   polled by the receiver); a send beyond that is refused with [`FabricError::Full`].
//! - A live link never loses or duplicates a packet. [`SimNet::cut_link`] and
//!   [`SimNet::crash`] drop the packets in flight on the affected links and announce it:
//!   both ends (every live peer, for a crash) get [`PeerEvent::Down`]. Sends to a peer
//!   that is not reachable return [`FabricError::PeerDown`].
//! - A crashed node neither sends nor receives; [`SimNet::restart`] brings it back with a
//!   new incarnation, announced with [`PeerEvent::Up`].
//!
//! Peer events are announced on every change of a pair's reachability, including the
//! start: a new net queues `Up` for every other node at every node.

use std::collections::{BTreeMap, VecDeque};

use hamlyn_core::Instant;
use hamlyn_wire::stats::{FabricStats, SimCounters};
use hamlyn_wire::{Header, NodeId};

use crate::fabric::{check_send, Fabric, FabricError, Landing, PacketSink, PeerEvent, SharedBytes};
use crate::rng::SimRng;

/// Parameters of a simulated network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Shortest delivery delay in nanoseconds.
    pub min_delay: u64,
    /// Longest delivery delay in nanoseconds (taken as `min_delay` if smaller).
    pub max_delay: u64,
    /// Packets one directed link holds in flight before sends are refused with
    /// [`FabricError::Full`] (taken as 1 if 0).
    pub link_capacity: usize,
}

impl Default for SimConfig {
    fn default() -> SimConfig {
        SimConfig {
            min_delay: 1_000,
            max_delay: 20_000,
            link_capacity: 64,
        }
    }
}

/// Counters of a simulated network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SimStats {
    /// Packets accepted by a send.
    pub sent: u64,
    /// Packets whose payload was accepted by a sink.
    pub delivered: u64,
    /// Packets a sink discarded after seeing the header.
    pub discarded: u64,
    /// Packets lost to a cut link or a crash (always announced with a `Down` event).
    pub dropped_by_fault: u64,
    /// Sends refused with [`FabricError::Full`].
    pub refused_full: u64,
    /// Sends refused with [`FabricError::PeerDown`].
    pub refused_down: u64,
    /// Packets lost because a sink gave a payload buffer of the wrong length.
    pub sink_errors: u64,
}

/// Why a fault-injection call could not be carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// No node with this id exists in the net.
    #[error("no node {0} in the simulated net")]
    NoSuchNode(NodeId),
    /// A link joins two different nodes.
    #[error("a link needs two different nodes, got {0} twice")]
    SameNode(NodeId),
}

/// A packet on its way.
#[derive(Clone, Debug)]
struct InFlight {
    from: NodeId,
    header: Header,
    meta: Vec<u8>,
    payload: Vec<u8>,
}

/// One node's state in the net.
#[derive(Clone, Debug, Default)]
struct SimNode {
    alive: bool,
    incarnation: u32,
    /// Packets to this node, by (delivery time, send sequence).
    inbound: BTreeMap<(Instant, u64), InFlight>,
    /// Peer events not yet polled.
    events: VecDeque<PeerEvent>,
}

/// A simulated network of `n` nodes with ids `0..n`.
#[derive(Clone, Debug)]
pub struct SimNet {
    config: SimConfig,
    rng: SimRng,
    nodes: Vec<SimNode>,
    /// `cut[a * n + b]` for an undirected pair (both orders kept equal).
    cut: Vec<bool>,
    /// `in_flight[a * n + b]`: packets on the directed link a → b.
    in_flight: Vec<usize>,
    total_in_flight: usize,
    seq: u64,
    stats: SimStats,
}

impl SimNet {
    /// A net of `nodes` live, fully connected nodes (incarnation 1), whose delays come
    /// from a generator seeded with `seed`. Every node has an `Up` event queued for every
    /// other node.
    pub fn new(nodes: usize, seed: u64, config: SimConfig) -> SimNet {
        let config = SimConfig {
            min_delay: config.min_delay,
            max_delay: config.max_delay.max(config.min_delay),
            link_capacity: config.link_capacity.max(1),
        };
        let mut net = SimNet {
            config,
            rng: SimRng::new(seed),
            nodes: (0..nodes)
                .map(|_| SimNode {
                    alive: true,
                    incarnation: 1,
                    ..SimNode::default()
                })
                .collect(),
            cut: vec![false; nodes * nodes],
            in_flight: vec![0; nodes * nodes],
            total_in_flight: 0,
            seq: 0,
            stats: SimStats::default(),
        };
        for a in 0..nodes {
            for b in 0..nodes {
                if a != b {
                    net.nodes[a].events.push_back(PeerEvent::Up {
                        node: node_id(b),
                        incarnation: 1,
                    });
                }
            }
        }
        net
    }

    /// The (normalized) configuration.
    pub fn config(&self) -> SimConfig {
        self.config
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The counters.
    pub fn stats(&self) -> SimStats {
        self.stats
    }

    /// A node's view of the net. Calls on a view of a node that does not exist fail with
    /// [`FabricError::NoRoute`].
    pub fn fabric(&mut self, node: NodeId) -> SimFabric<'_> {
        SimFabric { net: self, node }
    }

    fn index(&self, node: NodeId) -> Result<usize, SimError> {
        let i = node.0 as usize;
        if i < self.nodes.len() {
            Ok(i)
        } else {
            Err(SimError::NoSuchNode(node))
        }
    }

    /// Whether the node exists and is not crashed.
    pub fn is_alive(&self, node: NodeId) -> bool {
        self.index(node).is_ok_and(|i| self.nodes[i].alive)
    }

    /// The node's incarnation (1 at start, one more per restart).
    pub fn incarnation(&self, node: NodeId) -> Option<u32> {
        self.index(node).ok().map(|i| self.nodes[i].incarnation)
    }

    fn connected_ix(&self, a: usize, b: usize) -> bool {
        let n = self.nodes.len();
        self.nodes[a].alive && self.nodes[b].alive && (a == b || !self.cut[a * n + b])
    }

    /// Whether packets can flow between `a` and `b` (both alive, link not cut; a node
    /// always reaches itself while it is alive).
    pub fn is_connected(&self, a: NodeId, b: NodeId) -> bool {
        match (self.index(a), self.index(b)) {
            (Ok(a), Ok(b)) => self.connected_ix(a, b),
            _ => false,
        }
    }

    /// Packets in flight in the whole net.
    pub fn in_flight(&self) -> usize {
        self.total_in_flight
    }

    /// Packets in flight on the directed link `a` → `b`.
    pub fn in_flight_between(&self, a: NodeId, b: NodeId) -> usize {
        match (self.index(a), self.index(b)) {
            (Ok(a), Ok(b)) => self.in_flight[a * self.nodes.len() + b],
            _ => 0,
        }
    }

    /// Peer events queued at live nodes and not yet polled.
    pub fn pending_events(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.alive)
            .map(|n| n.events.len())
            .sum()
    }

    /// The earliest delivery time of any packet in flight (`None` when nothing is in
    /// flight): a driver with nothing else to do advances its clock to it.
    pub fn next_event_time(&self) -> Option<Instant> {
        self.nodes
            .iter()
            .filter_map(|n| n.inbound.keys().next().map(|&(t, _)| t))
            .min()
    }

    /// Drops the packets in flight from `from` to `to` (by index); returns how many.
    fn drop_link(&mut self, from: usize, to: usize) -> usize {
        let n = self.nodes.len();
        let src = node_id(from);
        let before = self.nodes[to].inbound.len();
        self.nodes[to].inbound.retain(|_, p| p.from != src);
        let dropped = before - self.nodes[to].inbound.len();
        self.in_flight[from * n + to] -= dropped;
        self.total_in_flight -= dropped;
        self.stats.dropped_by_fault += dropped as u64;
        dropped
    }

    fn announce_down(&mut self, at: usize, about: usize) {
        self.nodes[at].events.push_back(PeerEvent::Down {
            node: node_id(about),
        });
    }

    fn announce_up(&mut self, at: usize, about: usize) {
        let incarnation = self.nodes[about].incarnation;
        self.nodes[at].events.push_back(PeerEvent::Up {
            node: node_id(about),
            incarnation,
        });
    }

    /// Cuts the link between `a` and `b` (both directions): packets in flight on it are
    /// dropped and, if the pair was connected, both ends get [`PeerEvent::Down`].
    pub fn cut_link(&mut self, a: NodeId, b: NodeId) -> Result<(), SimError> {
        let (ia, ib) = (self.index(a)?, self.index(b)?);
        if ia == ib {
            return Err(SimError::SameNode(a));
        }
        let was = self.connected_ix(ia, ib);
        let n = self.nodes.len();
        self.cut[ia * n + ib] = true;
        self.cut[ib * n + ia] = true;
        self.drop_link(ia, ib);
        self.drop_link(ib, ia);
        if was {
            self.announce_down(ia, ib);
            self.announce_down(ib, ia);
        }
        Ok(())
    }

    /// Heals the link between `a` and `b`; if the pair becomes connected, both ends get
    /// [`PeerEvent::Up`].
    pub fn heal_link(&mut self, a: NodeId, b: NodeId) -> Result<(), SimError> {
        let (ia, ib) = (self.index(a)?, self.index(b)?);
        if ia == ib {
            return Err(SimError::SameNode(a));
        }
        let was = self.connected_ix(ia, ib);
        let n = self.nodes.len();
        self.cut[ia * n + ib] = false;
        self.cut[ib * n + ia] = false;
        if !was && self.connected_ix(ia, ib) {
            self.announce_up(ia, ib);
            self.announce_up(ib, ia);
        }
        Ok(())
    }

    /// Crashes `node`: every packet in flight to or from it is dropped, its unpolled
    /// events are forgotten, and every peer it was connected to gets [`PeerEvent::Down`].
    /// Crashing a crashed node does nothing.
    pub fn crash(&mut self, node: NodeId) -> Result<(), SimError> {
        let x = self.index(node)?;
        if !self.nodes[x].alive {
            return Ok(());
        }
        let peers: Vec<usize> = (0..self.nodes.len())
            .filter(|&y| y != x && self.connected_ix(x, y))
            .collect();
        self.nodes[x].alive = false;
        self.nodes[x].events.clear();
        for y in 0..self.nodes.len() {
            self.drop_link(x, y);
            if y != x {
                self.drop_link(y, x);
            }
        }
        for y in peers {
            self.announce_down(y, x);
        }
        Ok(())
    }

    /// Restarts `node` with a new incarnation (crashing it first if it is alive); it and
    /// every peer it can reach get [`PeerEvent::Up`] about each other.
    pub fn restart(&mut self, node: NodeId) -> Result<(), SimError> {
        let x = self.index(node)?;
        self.crash(node)?;
        let node_state = &mut self.nodes[x];
        node_state.alive = true;
        node_state.incarnation = node_state.incarnation.wrapping_add(1);
        for y in 0..self.nodes.len() {
            if y != x && self.connected_ix(x, y) {
                self.announce_up(x, y);
                self.announce_up(y, x);
            }
        }
        Ok(())
    }

    fn send_from(
        &mut self,
        local: NodeId,
        now: Instant,
        header: &Header,
        meta: &[u8],
        payload: &[SharedBytes<'_>],
    ) -> Result<(), FabricError> {
        let src = self.index(local).map_err(|_| FabricError::NoRoute(local))?;
        if !self.nodes[src].alive {
            return Err(FabricError::LocalDown);
        }
        let total = check_send(local, header, meta, payload)?;
        let dst = self
            .index(header.dst)
            .map_err(|_| FabricError::NoRoute(header.dst))?;
        if !self.connected_ix(src, dst) {
            self.stats.refused_down += 1;
            return Err(FabricError::PeerDown(header.dst));
        }
        let link = src * self.nodes.len() + dst;
        if self.in_flight[link] >= self.config.link_capacity {
            self.stats.refused_full += 1;
            return Err(FabricError::Full);
        }
        let mut bytes = Vec::with_capacity(total);
        for part in payload {
            part.append_to(&mut bytes);
        }
        let delay = self
            .rng
            .range_inclusive(self.config.min_delay, self.config.max_delay);
        self.seq += 1;
        self.nodes[dst].inbound.insert(
            (now.plus_nanos(delay), self.seq),
            InFlight {
                from: local,
                header: *header,
                meta: meta.to_vec(),
                payload: bytes,
            },
        );
        self.in_flight[link] += 1;
        self.total_in_flight += 1;
        self.stats.sent += 1;
        Ok(())
    }

    fn poll_at(
        &mut self,
        local: NodeId,
        now: Instant,
        sink: &mut dyn PacketSink,
        budget: usize,
    ) -> Result<usize, FabricError> {
        let me = self.index(local).map_err(|_| FabricError::NoRoute(local))?;
        if !self.nodes[me].alive {
            return Err(FabricError::LocalDown);
        }
        while let Some(ev) = self.nodes[me].events.pop_front() {
            sink.on_peer(ev);
        }
        let mut count = 0;
        while count < budget {
            let Some(entry) = self.nodes[me].inbound.first_entry() else {
                break;
            };
            if entry.key().0 > now {
                break;
            }
            let p = entry.remove();
            let from = p.from.0 as usize;
            self.in_flight[from * self.nodes.len() + me] -= 1;
            self.total_in_flight -= 1;
            count += 1;
            match sink.on_header(p.from, &p.header, &p.meta) {
                Landing::Accept => {
                    let mut buf = sink.payload_buf(&p.header);
                    if buf.len() != p.payload.len() {
                        self.stats.sink_errors += 1;
                        return Err(FabricError::SinkBuffer {
                            expected: p.payload.len() as u64,
                            got: buf.len() as u64,
                        });
                    }
                    buf.copy_from(0, &p.payload);
                    sink.on_payload(p.from, &p.header, &p.meta);
                    self.stats.delivered += 1;
                }
                Landing::Discard => self.stats.discarded += 1,
            }
        }
        Ok(count)
    }
}

fn node_id(i: usize) -> NodeId {
    NodeId(i as u32)
}

/// One node's view of a [`SimNet`], borrowed from it; implements [`Fabric`].
#[derive(Debug)]
pub struct SimFabric<'a> {
    net: &'a mut SimNet,
    node: NodeId,
}

impl SimFabric<'_> {
    /// The whole net (for counters and fault injection between calls).
    pub fn net(&mut self) -> &mut SimNet {
        self.net
    }
}

impl Fabric for SimFabric<'_> {
    fn local(&self) -> NodeId {
        self.node
    }

    /// The whole net's counters (every node's view shows the same).
    fn fabric_stats(&self) -> Option<FabricStats> {
        let s = self.net.stats;
        Some(FabricStats::Sim(SimCounters {
            sent: s.sent,
            delivered: s.delivered,
            discarded: s.discarded,
            dropped_by_fault: s.dropped_by_fault,
            refused_full: s.refused_full,
            refused_down: s.refused_down,
            sink_errors: s.sink_errors,
        }))
    }

    fn send(
        &mut self,
        now: Instant,
        header: &Header,
        meta: &[u8],
        payload: &[SharedBytes<'_>],
    ) -> Result<(), FabricError> {
        self.net.send_from(self.node, now, header, meta, payload)
    }

    fn poll(
        &mut self,
        now: Instant,
        sink: &mut dyn PacketSink,
        budget: usize,
    ) -> Result<usize, FabricError> {
        self.net.poll_at(self.node, now, sink, budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::SharedBytesMut;
    use hamlyn_wire::{Flags, Op, RequestId};

    #[derive(Default)]
    struct Log {
        seqs: Vec<u32>,
        events: Vec<PeerEvent>,
        buf: Vec<u8>,
    }

    impl PacketSink for Log {
        fn on_header(&mut self, _: NodeId, h: &Header, _: &[u8]) -> Landing {
            self.buf = vec![0; h.payload_len as usize];
            Landing::Accept
        }
        fn payload_buf(&mut self, _: &Header) -> SharedBytesMut<'_> {
            SharedBytesMut::from(&mut self.buf[..])
        }
        fn on_payload(&mut self, _: NodeId, h: &Header, _: &[u8]) {
            self.seqs.push(h.request.seq);
        }
        fn on_peer(&mut self, e: PeerEvent) {
            self.events.push(e);
        }
        fn on_unconfirmed(&mut self, _: NodeId, _: &Header) {}
    }

    fn header(src: u32, dst: u32, seq: u32) -> Header {
        let mut h = Header::new(Op::Write);
        h.src = NodeId(src);
        h.dst = NodeId(dst);
        h.flags = Flags::FIRST | Flags::LAST;
        h.request = RequestId { terminus: 0, seq };
        h
    }

    fn drain(net: &mut SimNet, node: u32, log: &mut Log) {
        let mut now = Instant(0);
        for _ in 0..10_000 {
            net.fabric(NodeId(node)).poll(now, log, 1000).unwrap();
            match net.next_event_time() {
                Some(t) => now = t,
                None => return,
            }
        }
        panic!("did not drain");
    }

    #[test]
    fn packets_on_one_link_reorder_but_all_arrive_once() {
        let cfg = SimConfig {
            link_capacity: 1000,
            ..SimConfig::default()
        };
        let mut net = SimNet::new(2, 1, cfg);
        for seq in 0..200 {
            net.fabric(NodeId(0))
                .send(Instant(0), &header(0, 1, seq), &[], &[])
                .unwrap();
        }
        let mut log = Log::default();
        drain(&mut net, 1, &mut log);
        let mut sorted = log.seqs.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..200).collect::<Vec<_>>(), "exactly once");
        assert_ne!(log.seqs, sorted, "random delays reorder one link");
        assert_eq!(net.stats().delivered, 200);
        assert_eq!(net.in_flight(), 0);
    }

    #[test]
    fn capacity_gives_full_and_frees_on_delivery() {
        let cfg = SimConfig {
            link_capacity: 3,
            min_delay: 0,
            max_delay: 0,
        };
        let mut net = SimNet::new(2, 2, cfg);
        let mut f = net.fabric(NodeId(0));
        for seq in 0..3 {
            f.send(Instant(0), &header(0, 1, seq), &[], &[]).unwrap();
        }
        assert_eq!(
            f.send(Instant(0), &header(0, 1, 3), &[], &[]),
            Err(FabricError::Full)
        );
        let mut log = Log::default();
        assert_eq!(
            net.fabric(NodeId(1)).poll(Instant(0), &mut log, 1).unwrap(),
            1
        );
        assert!(net
            .fabric(NodeId(0))
            .send(Instant(0), &header(0, 1, 3), &[], &[])
            .is_ok());
        assert_eq!(net.stats().refused_full, 1);
    }

    #[test]
    fn faults_drop_in_flight_packets_and_announce_both_ends() {
        let mut net = SimNet::new(3, 3, SimConfig::default());
        let mut logs: Vec<Log> = (0..3).map(|_| Log::default()).collect();
        for (i, log) in logs.iter_mut().enumerate() {
            net.fabric(NodeId(i as u32))
                .poll(Instant(0), log, 10)
                .unwrap();
            assert_eq!(log.events.len(), 2, "initial Up for every peer");
            log.events.clear();
        }
        for seq in 0..5 {
            net.fabric(NodeId(0))
                .send(Instant(0), &header(0, 1, seq), &[], &[])
                .unwrap();
            net.fabric(NodeId(1))
                .send(Instant(0), &header(1, 0, seq), &[], &[])
                .unwrap();
            net.fabric(NodeId(2))
                .send(Instant(0), &header(2, 0, seq), &[], &[])
                .unwrap();
        }
        net.cut_link(NodeId(0), NodeId(1)).unwrap();
        assert_eq!(net.stats().dropped_by_fault, 10);
        assert_eq!(
            net.fabric(NodeId(0))
                .send(Instant(1), &header(0, 1, 9), &[], &[]),
            Err(FabricError::PeerDown(NodeId(1)))
        );
        net.crash(NodeId(2)).unwrap();
        assert_eq!(net.stats().dropped_by_fault, 15);
        assert_eq!(
            net.fabric(NodeId(2))
                .send(Instant(1), &header(2, 0, 9), &[], &[]),
            Err(FabricError::LocalDown)
        );
        for (i, log) in logs.iter_mut().enumerate().take(2) {
            net.fabric(NodeId(i as u32))
                .poll(Instant(u64::MAX), log, 100)
                .unwrap();
            assert!(log.seqs.is_empty(), "every in-flight packet was dropped");
        }
        let down = |n| PeerEvent::Down { node: NodeId(n) };
        assert_eq!(logs[0].events, vec![down(1), down(2)]);
        assert_eq!(logs[1].events, vec![down(0), down(2)]);
        net.restart(NodeId(2)).unwrap();
        net.heal_link(NodeId(0), NodeId(1)).unwrap();
        assert_eq!(net.incarnation(NodeId(2)), Some(2));
        net.fabric(NodeId(0))
            .poll(Instant(0), &mut logs[0], 0)
            .unwrap();
        assert_eq!(
            logs[0].events[2..],
            [
                PeerEvent::Up {
                    node: NodeId(2),
                    incarnation: 2
                },
                PeerEvent::Up {
                    node: NodeId(1),
                    incarnation: 1
                }
            ]
        );
        assert!(net.is_connected(NodeId(0), NodeId(1)));
        assert_eq!(net.in_flight(), 0);
    }

    #[test]
    fn same_seed_same_schedule() {
        let run = |seed| {
            let mut net = SimNet::new(2, seed, SimConfig::default());
            for seq in 0..50 {
                net.fabric(NodeId(0))
                    .send(Instant(0), &header(0, 1, seq), &[], &[])
                    .unwrap();
            }
            let mut log = Log::default();
            drain(&mut net, 1, &mut log);
            log.seqs
        };
        assert_eq!(run(9), run(9));
        assert_ne!(run(9), run(10));
    }

    #[test]
    fn unknown_nodes_are_errors_not_panics() {
        let mut net = SimNet::new(2, 0, SimConfig::default());
        assert_eq!(
            net.cut_link(NodeId(0), NodeId(5)),
            Err(SimError::NoSuchNode(NodeId(5)))
        );
        assert_eq!(
            net.cut_link(NodeId(1), NodeId(1)),
            Err(SimError::SameNode(NodeId(1)))
        );
        assert_eq!(
            net.fabric(NodeId(0))
                .send(Instant(0), &header(0, 7, 0), &[], &[]),
            Err(FabricError::NoRoute(NodeId(7)))
        );
        let mut log = Log::default();
        assert_eq!(
            net.fabric(NodeId(9)).poll(Instant(0), &mut log, 1),
            Err(FabricError::NoRoute(NodeId(9)))
        );
    }
}
