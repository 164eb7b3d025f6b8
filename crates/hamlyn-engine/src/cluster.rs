//! In-process clusters: `n` engines joined by the TCP fabric on loopback, for tests,
//! examples and benchmarks — what [`hamlyn_fabric::tcp::tcp_cluster`] is for fabrics, one
//! level up. Node ids 0..n, one incarnation for fabric and engine (tickets carry it), the
//! registry on node 0, a fresh cluster secret the engines share (links authenticated
//! and encrypted, as between machines), a fresh static key per node, and the roster of
//! exactly those keys (each node admits only the others).

use hamlyn_fabric::tcp::{tcp_cluster, Roster, TcpConfig};
use hamlyn_wire::NodeId;

use crate::{EngineConfig, EngineError, EngineHandle};

/// The incarnation of every engine of a [`tcp_engines`] cluster.
pub const CLUSTER_INCARNATION: u32 = 3;

/// Starts `nodes` engines (node ids 0..`nodes`) joined by the TCP fabric on loopback
/// with `rails` rails per peer, the registry on node 0. Peers come up as the engines run:
/// a caller that needs them up waits for it (`Node::stats`'s peers).
pub fn tcp_engines(nodes: usize, rails: usize) -> Result<Vec<EngineHandle>, EngineError> {
    let mut cfg = TcpConfig::new(NodeId(0), std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    cfg.rails = rails;
    cfg.incarnation = CLUSTER_INCARNATION;
    // Replaced by `tcp_cluster` with the roster of the keys it makes.
    cfg.roster = Some(Roster::default());
    let fabrics = tcp_cluster(nodes, &cfg).map_err(|e| EngineError::Fabric(e.to_string()))?;
    fabrics
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            let mut c = EngineConfig::embedded();
            c.node = i as u32;
            c.incarnation = CLUSTER_INCARNATION;
            c.registry = Some(0);
            EngineHandle::start_with_fabric(c, Some(Box::new(f)))
        })
        .collect()
}
