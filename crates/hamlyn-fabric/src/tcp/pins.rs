//! Which static key a node id must present: the roster's, if the fabric has one (strict:
//! an unlisted node or another key is refused), else the key first seen from that id on
//! an authenticated link, pinned for the life of this fabric (trust on first use, as
//! SSH's known hosts). A pin outlives the peer's sessions, its restarts (new
//! incarnations) and its entry in the peer table; the pins are bounded like the peer
//! table, and a node id past the bound is refused rather than pinned.

use std::collections::BTreeMap;

use hamlyn_wire::NodeId;

use super::node_key::PublicKey;
use super::roster::Roster;

/// Why a node id's key was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The roster does not list the node.
    Unlisted,
    /// The roster, or the pin, names another key.
    Mismatch,
    /// No pin yet and no room for one.
    Full,
}

impl Refusal {
    /// The close's detail.
    pub(crate) fn describe(self, node: NodeId, key: PublicKey) -> String {
        match self {
            Refusal::Unlisted => format!("{node} (key {key}) is not in the roster"),
            Refusal::Mismatch => format!("{node} presented key {key}, not its own"),
            Refusal::Full => format!("{node}: no room for another node's key"),
        }
    }
}

/// The roster or the pins of one fabric.
#[derive(Debug)]
pub(crate) struct Identities {
    roster: Option<Roster>,
    pins: BTreeMap<NodeId, PublicKey>,
    max_pins: usize,
}

impl Identities {
    /// Strict to `roster` if given, else pinning at most `max_pins` nodes.
    pub(crate) fn new(roster: Option<Roster>, max_pins: usize) -> Identities {
        Identities {
            roster,
            pins: BTreeMap::new(),
            max_pins,
        }
    }

    /// Whether `node` may present `key`, without pinning anything (an unknown node may).
    pub(crate) fn check(&self, node: NodeId, key: PublicKey) -> Result<(), Refusal> {
        let expected = match &self.roster {
            Some(r) => Some(r.get(node).ok_or(Refusal::Unlisted)?),
            None => self.pins.get(&node).copied(),
        };
        match expected {
            Some(k) if k != key => Err(Refusal::Mismatch),
            _ => Ok(()),
        }
    }

    /// [`Identities::check`], then pins `key` to `node` if it had no pin (without a
    /// roster).
    pub(crate) fn pin(&mut self, node: NodeId, key: PublicKey) -> Result<(), Refusal> {
        self.check(node, key)?;
        if self.roster.is_some() || self.pins.contains_key(&node) {
            return Ok(());
        }
        if self.pins.len() >= self.max_pins {
            return Err(Refusal::Full);
        }
        self.pins.insert(node, key);
        Ok(())
    }

    /// Nodes pinned (0 with a roster).
    pub(crate) fn pinned(&self) -> usize {
        self.pins.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> PublicKey {
        PublicKey::from_bytes([b; 32])
    }

    #[test]
    fn first_contact_pins_for_good_and_the_table_is_bounded() {
        let mut ids = Identities::new(None, 2);
        assert_eq!(ids.check(NodeId(1), key(1)), Ok(()), "unknown: allowed");
        assert_eq!(ids.check(NodeId(1), key(9)), Ok(()), "a check pins nothing");
        assert_eq!(ids.pin(NodeId(1), key(1)), Ok(()));
        assert_eq!(ids.pin(NodeId(1), key(1)), Ok(()), "again: the same key");
        assert_eq!(ids.check(NodeId(1), key(9)), Err(Refusal::Mismatch));
        assert_eq!(ids.pin(NodeId(1), key(9)), Err(Refusal::Mismatch));
        assert_eq!(ids.pin(NodeId(2), key(2)), Ok(()));
        assert_eq!(ids.pin(NodeId(3), key(3)), Err(Refusal::Full));
        assert_eq!(ids.pinned(), 2);
        // One key under two ids is allowed (a pin binds an id, not a key).
        assert_eq!(ids.pin(NodeId(2), key(2)), Ok(()));
    }

    #[test]
    fn a_roster_is_strict_and_pins_nothing() {
        let roster = Roster::from_keys([(NodeId(1), key(1)), (NodeId(2), key(2))]);
        let mut ids = Identities::new(Some(roster), 0);
        assert_eq!(ids.pin(NodeId(1), key(1)), Ok(()));
        assert_eq!(ids.check(NodeId(2), key(1)), Err(Refusal::Mismatch));
        assert_eq!(ids.check(NodeId(3), key(3)), Err(Refusal::Unlisted));
        assert_eq!(ids.pin(NodeId(3), key(3)), Err(Refusal::Unlisted));
        assert_eq!(ids.pinned(), 0);
        assert!(Refusal::Unlisted
            .describe(NodeId(3), key(3))
            .contains("not in the roster"));
    }
}
