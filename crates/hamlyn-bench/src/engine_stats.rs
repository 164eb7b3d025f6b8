//! What the benchmark reads from an engine's statistics: whether a peer node is up (the
//! TCP mode waits for it before measuring) and how many ports the engine lists (the
//! scaling series checks them against the idle ports it holds).
//!
//! The engine sends typed statistics (`Node::stats`, a [`hamlyn::Stats`]);
//! [`EngineStats`] is the one place the benchmark reads them.

use std::path::Path;

use hamlyn::{Node, NodeOptions, Stats};

use super::error::BenchError;

/// An engine's statistics, as the benchmark reads them.
#[derive(Debug, Default)]
pub struct EngineStats(Stats);

impl EngineStats {
    /// Asks the engine `node` is attached to for its statistics.
    pub fn of(node: &Node) -> Result<EngineStats, BenchError> {
        Ok(EngineStats(node.stats()?))
    }

    /// Whether node `peer` is listed as up.
    pub fn peer_up(&self, peer: u32) -> bool {
        self.0.peer(peer).is_some_and(|p| p.up)
    }

    /// The ports listed.
    pub fn ports(&self) -> usize {
        self.0.ports.len()
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

/// The statistics of the engine at `socket`, as text (for diagnosing a stuck run in the
/// log).
pub fn text(socket: &Path) -> Result<String, BenchError> {
    Ok(format!("{:?}", observer(socket)?.stats()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn::stats::{PeerStats, PortStats};

    #[test]
    fn stats_say_whether_a_peer_is_up() {
        let peer = |node, up| PeerStats {
            node,
            up,
            incarnation: 1,
            link: None,
        };
        let up = EngineStats(Stats {
            peers: vec![peer(1, true)],
            ..Stats::default()
        });
        let down = EngineStats(Stats {
            peers: vec![peer(1, false)],
            ..Stats::default()
        });
        assert!(up.peer_up(1));
        assert!(!up.peer_up(2));
        assert!(!down.peer_up(1));
        assert!(!EngineStats::default().peer_up(1));
    }

    #[test]
    fn stats_list_the_ports() {
        let port = |client| PortStats {
            client,
            ..PortStats::default()
        };
        let two = EngineStats(Stats {
            ports: vec![port(1), port(2)],
            ..Stats::default()
        });
        assert_eq!(two.ports(), 2);
        assert_eq!(EngineStats::default().ports(), 0);
    }
}
