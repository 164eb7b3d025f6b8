//! Test support shared by the integration tests.
#![allow(clippy::unwrap_used, dead_code)]

use std::time::{Duration, Instant};

use hamlyn::Node;
use hamlyn_engine::EngineHandle;

/// Two engines over TCP (2 rails) and a node handle on each, once both see the peer up.
pub fn two_nodes() -> (EngineHandle, EngineHandle, Node, Node) {
    let mut engines = hamlyn_engine::cluster::tcp_engines(2, 2).unwrap();
    let eb = engines.pop().unwrap();
    let ea = engines.pop().unwrap();
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
