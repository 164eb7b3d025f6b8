//! The fabric conformance suite run against the TCP fabric over 127.0.0.1, with one rail,
//! with three striped rails per peer, and with two busy-polled rails.
//!
//! Each check gets fresh fabrics on ephemeral ports (bind port 0, read the real port,
//! then tell every fabric its peers' addresses). `advance` sleeps briefly (real packets
//! need real time); `crash` drops the node's fabric, which closes its sockets.

use std::time::Duration;

use hamlyn_core::Instant;
use hamlyn_fabric::tcp::{tcp_cluster, Clock, TcpConfig, TcpError, TcpFabric};
use hamlyn_fabric::{Fabric, FabricError, PacketSink, SharedBytes};
use hamlyn_testkit::conformance::{self, FabricFactory, FabricSet, Limits};
use hamlyn_wire::{Header, NodeId};

/// One node of the set: its fabric, or nothing once crashed.
struct Node<'a>(Option<&'a mut TcpFabric>, NodeId);

impl Node<'_> {
    /// The node's fabric, unless it crashed.
    fn live(&mut self) -> Result<&mut TcpFabric, FabricError> {
        self.0.as_deref_mut().ok_or(FabricError::LocalDown)
    }
}

impl Fabric for Node<'_> {
    fn local(&self) -> NodeId {
        self.1
    }
    fn send(
        &mut self,
        now: Instant,
        header: &Header,
        meta: &[u8],
        payload: &[SharedBytes<'_>],
    ) -> Result<(), FabricError> {
        self.live()?.send(now, header, meta, payload)
    }
    fn poll(
        &mut self,
        now: Instant,
        sink: &mut dyn PacketSink,
        budget: usize,
    ) -> Result<usize, FabricError> {
        self.live()?.poll(now, sink, budget)
    }
    fn poll_spinning(
        &mut self,
        now: Instant,
        sink: &mut dyn PacketSink,
        budget: usize,
    ) -> Result<usize, FabricError> {
        self.live()?.poll_spinning(now, sink, budget)
    }
}

struct TcpSet {
    fabrics: Vec<Option<TcpFabric>>,
    clock: Clock,
}

impl FabricSet for TcpSet {
    type Node<'a> = Node<'a>;

    fn nodes(&self) -> usize {
        self.fabrics.len()
    }
    fn node(&mut self, i: usize) -> Node<'_> {
        Node(self.fabrics[i].as_mut(), NodeId(i as u32))
    }
    fn now(&mut self) -> Instant {
        self.clock.now()
    }
    fn advance(&mut self) {
        std::thread::sleep(Duration::from_micros(50));
    }
    fn crash(&mut self, i: usize) {
        self.fabrics[i] = None;
    }
}

struct TcpFactory {
    rails: usize,
    busy_poll: bool,
}

impl FabricFactory for TcpFactory {
    type Set = TcpSet;
    type Error = TcpError;

    fn build(&mut self, nodes: usize) -> Result<TcpSet, TcpError> {
        let mut c = TcpConfig::new(NodeId(0), ([127, 0, 0, 1], 0).into());
        c.secret = Some(hamlyn_fabric::tcp::ClusterSecret::from_bytes([0x77; 32]));
        c.rails = self.rails;
        c.busy_poll = self.busy_poll;
        // Crashes are seen as closed sockets at once; the timeouts only guard against
        // hung peers, so make them long enough that a slow machine never trips them.
        c.peer_timeout = Duration::from_secs(20);
        c.reconnect_interval = Duration::from_millis(20);
        c.max_queued_bytes = 1 << 20;
        Ok(TcpSet {
            fabrics: tcp_cluster(nodes, &c)?.into_iter().map(Some).collect(),
            clock: Clock::new(),
        })
    }

    fn limits(&self) -> Limits {
        Limits {
            // Kernel socket buffers on loopback hold many megabytes before a sender sees
            // back-pressure.
            fill_limit: 1 << 20,
            ..Limits::default()
        }
    }
}

fn run(rails: usize, busy_poll: bool) {
    if let Err(e) = conformance::run_all(&mut TcpFactory { rails, busy_poll }) {
        panic!("{rails} rails, busy_poll {busy_poll}: {e}");
    }
}

#[test]
fn tcp_passes_with_one_rail() {
    run(1, false);
}

#[test]
fn tcp_passes_with_three_rails() {
    run(3, false);
}

#[test]
fn tcp_passes_with_two_busy_polled_rails() {
    run(2, true);
}
