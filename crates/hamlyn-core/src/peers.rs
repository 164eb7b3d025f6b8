//! What a node knows about its peers, sans-IO (DESIGN §2, "a dead peer turns every
//! outstanding operation that depends on it into an error completion, and receivers
//! waiting on it get a peer-down notification"): which peers are up and in which
//! incarnation, and which partly received messages each peer has contributed packets to.
//!
//! The engine and the simulated cluster (`hamlyn-testkit`) both keep a [`PeerTable`] and
//! feed it the same events — a peer came up, a peer went down, a packet from a peer was
//! committed, a message completed — so the decisions of the remote path are made by the
//! code that ships, in tests too.

use std::collections::{BTreeMap, HashMap};

use hamlyn_wire::entry::{NotifEntry, NotifKind};
use hamlyn_wire::{Header, NodeId, SlotId};

use crate::receive::{Notification, QueueId};

/// One peer as last seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerState {
    /// Reachable now.
    pub up: bool,
    /// Its incarnation when last seen up (a restarted node is a new incarnation).
    pub incarnation: u32,
}

/// A message partly received: the slot and metadata entry whose accumulator it counts on.
pub type PartialMessage = (SlotId, u32);

/// Who contributed packets to the messages still partly received, so that losing a
/// contributor (a peer node, or a local client) breaks exactly its messages. `K` names a
/// contributor: a `NodeId` for peers (inside [`PeerTable`]), a client id in the engine.
#[derive(Clone, Debug)]
pub struct Contributors<K> {
    partial: HashMap<PartialMessage, Vec<K>>,
}

impl<K> Default for Contributors<K> {
    fn default() -> Contributors<K> {
        Contributors {
            partial: HashMap::new(),
        }
    }
}

impl<K: Copy + PartialEq> Contributors<K> {
    /// A packet from `from` was committed: a message still incomplete now counts on
    /// `from`; a complete one (`message_done`) counts on no one any more.
    pub fn committed(&mut self, from: K, h: &Header, message_done: bool) {
        let key = (h.slot, h.meta_index);
        if message_done {
            self.message_done(key);
        } else if !h.is_fast() {
            let from_list = self.partial.entry(key).or_default();
            if !from_list.contains(&from) {
                from_list.push(from);
            }
        }
    }

    /// A message completed (perhaps by another contributor): forget its contributors.
    pub fn message_done(&mut self, key: PartialMessage) {
        if !self.partial.is_empty() {
            self.partial.remove(&key);
        }
    }

    /// `from` is lost: the partly received messages it contributed to, in a fixed order
    /// (each will never complete; its receiver must be told).
    pub fn lost(&mut self, from: K) -> Vec<PartialMessage> {
        let mut hit = Vec::new();
        self.partial.retain(|&key, list| {
            if let Some(i) = list.iter().position(|p| *p == from) {
                list.swap_remove(i);
                hit.push(key);
            }
            !list.is_empty()
        });
        hit.sort_unstable();
        hit
    }

    /// Messages partly received.
    pub fn len(&self) -> usize {
        self.partial.len()
    }

    /// Whether no message is partly received.
    pub fn is_empty(&self) -> bool {
        self.partial.is_empty()
    }
}

/// Peers down whose last incarnation is kept at most (a member cycling through node ids
/// must not grow the table without bound; peers up are bounded by the fabric).
pub const MAX_DOWN_PEERS: usize = 4096;

/// Peers by node id and the contributors of partly received messages.
#[derive(Clone, Debug, Default)]
pub struct PeerTable {
    peers: BTreeMap<NodeId, PeerState>,
    /// Partly received messages → peers whose packets were counted in them.
    partial: Contributors<NodeId>,
}

impl PeerTable {
    /// No peers, no partial messages.
    pub fn new() -> PeerTable {
        PeerTable::default()
    }

    /// `node` is up in `incarnation`.
    pub fn peer_up(&mut self, node: NodeId, incarnation: u32) {
        self.peers.insert(
            node,
            PeerState {
                up: true,
                incarnation,
            },
        );
    }

    /// `node` is down. Returns the partly received messages it had contributed to, in a
    /// fixed order: each will never complete, and its receiver must be told
    /// ([`peer_down_notification`]). The peer's last incarnation is kept — for at most
    /// [`MAX_DOWN_PEERS`] peers down at once: past that, the down peer of lowest id
    /// (another than `node`) is forgotten.
    pub fn peer_down(&mut self, node: NodeId) -> Vec<PartialMessage> {
        let incarnation = self.peers.get(&node).map_or(0, |p| p.incarnation);
        self.peers.insert(
            node,
            PeerState {
                up: false,
                incarnation,
            },
        );
        if self.peers.values().filter(|p| !p.up).count() > MAX_DOWN_PEERS {
            let oldest = self
                .peers
                .iter()
                .find(|(n, p)| !p.up && **n != node)
                .map(|(n, _)| *n);
            if let Some(n) = oldest {
                self.peers.remove(&n);
            }
        }
        self.partial.lost(node)
    }

    /// Peers known, up or down.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether no peer is known.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// The peer, if it was ever seen.
    pub fn get(&self, node: NodeId) -> Option<PeerState> {
        self.peers.get(&node).copied()
    }

    /// Whether `node` was seen and is down now (an unknown node is not known down).
    pub fn is_down(&self, node: NodeId) -> bool {
        self.peers.get(&node).is_some_and(|p| !p.up)
    }

    /// `node`'s incarnation when last seen up, even if it is down now.
    pub fn last_incarnation(&self, node: NodeId) -> Option<u32> {
        self.peers.get(&node).map(|p| p.incarnation)
    }

    /// `node`'s incarnation if it is up now.
    pub fn live_incarnation(&self, node: NodeId) -> Option<u32> {
        self.peers
            .get(&node)
            .filter(|p| p.up)
            .map(|p| p.incarnation)
    }

    /// Every peer ever seen, by node id.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, PeerState)> + '_ {
        self.peers.iter().map(|(n, p)| (*n, *p))
    }

    /// A packet from `from` was committed: a message still incomplete now counts on
    /// `from`; a complete one (`message_done`) counts on no one any more.
    pub fn committed(&mut self, from: NodeId, h: &Header, message_done: bool) {
        self.partial.committed(from, h, message_done);
    }

    /// A message completed (perhaps with a local packet): forget its contributors.
    pub fn message_done(&mut self, key: PartialMessage) {
        self.partial.message_done(key);
    }

    /// Messages partly received from some peer.
    pub fn partial_messages(&self) -> usize {
        self.partial.len()
    }
}

/// The notification that tells a receiver its partly received message on `(slot,
/// meta_index)` will never complete, because `node` went down.
pub fn peer_down_notification(
    queue: QueueId,
    (slot, meta_index): PartialMessage,
    node: NodeId,
) -> Notification {
    let mut entry = NotifEntry::zeroed();
    entry.kind.set(NotifKind::PeerDown as u16);
    entry.slot.set(slot.0);
    entry.meta_index.set(meta_index);
    entry.src_node.set(node.0);
    Notification {
        queue,
        entry,
        wake: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn_wire::Op;

    fn packet(slot: u32, meta_index: u32) -> Header {
        let mut h = Header::new(Op::Write);
        h.slot = SlotId(slot);
        h.meta_index = meta_index;
        h
    }

    #[test]
    fn a_lost_contributor_hits_exactly_its_partial_messages() {
        let mut t = PeerTable::new();
        let (a, b) = (NodeId(1), NodeId(2));
        t.peer_up(a, 7);
        t.peer_up(b, 9);
        t.committed(a, &packet(1, 0), false);
        t.committed(b, &packet(1, 0), false);
        t.committed(b, &packet(2, 3), false);
        t.committed(a, &packet(3, 0), false);
        t.committed(a, &packet(3, 0), true); // done: forgotten
        assert_eq!(t.partial_messages(), 2);
        assert_eq!(t.peer_down(b), vec![(SlotId(1), 0), (SlotId(2), 3)]);
        assert!(t.is_down(b));
        assert_eq!(t.last_incarnation(b), Some(9));
        assert_eq!(t.live_incarnation(b), None);
        assert_eq!(t.live_incarnation(a), Some(7));
        // Slot 1 still counts on `a`; slot 2 on nobody.
        assert_eq!(t.partial_messages(), 1);
        assert_eq!(t.peer_down(a), vec![(SlotId(1), 0)]);
        assert_eq!(t.partial_messages(), 0);
    }

    #[test]
    #[cfg_attr(miri, ignore = "thousands of peers: slow under miri")]
    fn peers_down_are_bounded() {
        let mut t = PeerTable::new();
        t.peer_up(NodeId(0), 1);
        for i in 1..=(MAX_DOWN_PEERS as u32 + 10) {
            t.peer_up(NodeId(i), 1);
            t.peer_down(NodeId(i));
        }
        assert_eq!(t.len(), MAX_DOWN_PEERS + 1, "the live peer and the bound");
        assert_eq!(
            t.live_incarnation(NodeId(0)),
            Some(1),
            "a live peer is kept"
        );
        assert!(
            t.is_down(NodeId(MAX_DOWN_PEERS as u32 + 10)),
            "the newest down is kept"
        );
        assert_eq!(t.get(NodeId(1)), None, "the oldest down went");
    }

    #[test]
    fn fast_packets_and_completed_messages_leave_nothing_behind() {
        let mut t = PeerTable::new();
        t.committed(NodeId(4), &packet(5, hamlyn_wire::FAST_META_INDEX), false);
        t.committed(NodeId(4), &packet(6, 1), false);
        t.message_done((SlotId(6), 1));
        assert_eq!(t.partial_messages(), 0);
        assert!(t.peer_down(NodeId(4)).is_empty());
        assert!(!t.is_down(NodeId(5)), "an unknown node is not known down");
    }
}
