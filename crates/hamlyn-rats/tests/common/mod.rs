//! Test support shared by the integration tests.
#![allow(clippy::unwrap_used, dead_code)]

use std::time::{Duration, Instant};

use hamlyn::{Node, NodeId};
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_fabric::tcp::{tcp_cluster, TcpConfig};

/// Two engines over TCP (2 rails) and a node handle on each, once both see the peer up.
pub fn two_nodes() -> (EngineHandle, EngineHandle, Node, Node) {
    let mut cfg = TcpConfig::new(NodeId(0), "127.0.0.1:0".parse().unwrap());
    cfg.rails = 2;
    cfg.incarnation = 5;
    let mut fabrics = tcp_cluster(2, &cfg).unwrap();
    let fb = fabrics.pop().unwrap();
    let fa = fabrics.pop().unwrap();
    let start = |node: u32, f| {
        let mut c = EngineConfig::embedded();
        c.node = node;
        c.incarnation = 5;
        // One registry for the pair: node 0's.
        c.registry = Some(0);
        EngineHandle::start_with_fabric(c, Some(Box::new(f))).unwrap()
    };
    let (ea, eb) = (start(0, fa), start(1, fb));
    let a = Node::connect(ea.socket_path()).unwrap();
    let b = Node::connect(eb.socket_path()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    for (n, peer) in [(&a, 1), (&b, 0)] {
        while !n.stats().unwrap().peer(peer).is_some_and(|p| p.up) {
            assert!(Instant::now() < deadline, "peer {peer} never came up");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    (ea, eb, a, b)
}
