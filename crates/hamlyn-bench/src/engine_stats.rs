//! What the benchmark reads from an engine's statistics: whether a peer node is up (the
//! TCP mode waits for it before measuring) and how many ports the engine lists (the
//! scaling series checks them against the idle ports it holds).
//!
//! The engine sends its statistics as JSON text (`Node::stats`). [`EngineStats::parse`]
//! is the one place the benchmark reads that text: into a view of the two members it
//! uses, everything else ignored.

use std::path::Path;

use hamlyn::{Node, NodeOptions};
use serde::de::IgnoredAny;
use serde::Deserialize;

use super::error::BenchError;

/// The members of an engine's statistics the benchmark uses.
#[derive(Debug, Default, Deserialize)]
pub struct EngineStats {
    /// One entry per attached client's port (what is in them is not read).
    #[serde(default)]
    ports: Vec<IgnoredAny>,
    /// Other nodes the engine knows (none without a fabric).
    #[serde(default)]
    peers: Vec<PeerState>,
}

/// Another node as an engine's statistics describe it.
#[derive(Debug, Deserialize)]
struct PeerState {
    /// Its node id.
    node: u32,
    /// Whether the engine holds it up.
    up: bool,
}

impl EngineStats {
    /// Reads the statistics JSON `text` an engine sent.
    pub fn parse(text: &str) -> Result<EngineStats, BenchError> {
        serde_json::from_str(text).map_err(BenchError::Stats)
    }

    /// Asks the engine `node` is attached to for its statistics.
    pub fn of(node: &Node) -> Result<EngineStats, BenchError> {
        EngineStats::parse(&node.stats()?)
    }

    /// Whether node `peer` is listed as up.
    pub fn peer_up(&self, peer: u32) -> bool {
        self.peers.iter().any(|p| p.node == peer && p.up)
    }

    /// The ports listed.
    pub fn ports(&self) -> usize {
        self.ports.len()
    }
}

/// A small connection to the engine at `socket`, for its statistics.
pub fn observer(socket: &Path) -> Result<Node, BenchError> {
    Ok(Node::connect_with(
        socket,
        NodeOptions {
            termini: 1,
            queues: 1,
            queue_cap: 64,
            ..NodeOptions::default()
        },
    )?)
}

/// The statistics of the engine at `socket` as the engine sent them (for diagnosing a
/// stuck run in the log).
pub fn text(socket: &Path) -> Result<String, BenchError> {
    Ok(observer(socket)?.stats()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_json_says_whether_a_peer_is_up() {
        let peer_is_up =
            |stats: &str, peer| EngineStats::parse(stats).is_ok_and(|s| s.peer_up(peer));
        let up = r#"{"node":0,"peers":[{"node":1,"up":true,"incarnation":1}]}"#;
        let down = r#"{"node":0,"peers":[{"node":1,"up":false,"incarnation":1}]}"#;
        assert!(peer_is_up(up, 1));
        assert!(!peer_is_up(up, 2));
        assert!(!peer_is_up(down, 1));
        assert!(!peer_is_up("not json", 1));
    }

    #[test]
    fn stats_json_lists_the_ports() {
        let two = r#"{"node":0,"ports":[{"client":1,"termini_open":1},{"client":2,"termini_open":0}],"slots":[]}"#;
        assert_eq!(EngineStats::parse(two).map(|s| s.ports()).ok(), Some(2));
        assert_eq!(
            EngineStats::parse(r#"{"node":0}"#).map(|s| s.ports()).ok(),
            Some(0)
        );
        assert!(EngineStats::parse(r#"{"ports":[{"client":1}"#).is_err());
    }
}
