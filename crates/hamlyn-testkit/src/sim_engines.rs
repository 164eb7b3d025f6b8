//! The simulated network under real engines: one seeded [`SimNet`] shared by several
//! engines running in one test process, each given a [`NetFabric`] as its fabric (what
//! `EngineHandle::start_with_fabric` takes). The engines are the code that ships — event
//! loop, ports, delivery, remote path, peer table — and the network reorders (seeded
//! delays), bounds links (`Full` back-pressure), cuts links and crashes nodes.
//!
//! Time is the network's: every fabric reads one shared clock (nanoseconds since the net
//! was made), whatever `now` its engine passes, so delays mean the same to every node.
//! Engines run on their own threads, so runs are not replayed exactly; the deterministic
//! single-threaded driver is [`crate::cluster::SimCluster`].

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hamlyn_core::Instant;
use hamlyn_fabric::{
    Fabric, FabricError, PacketSink, SharedBytes, SimConfig, SimError, SimNet, SimStats,
};
use hamlyn_wire::{Header, NodeId};

/// A simulated network shared by engines in one process.
#[derive(Clone, Debug)]
pub struct SharedNet {
    net: Arc<Mutex<SimNet>>,
    origin: std::time::Instant,
}

impl SharedNet {
    /// A net of `nodes` live nodes (ids `0..nodes`, incarnation 1) with delays seeded by
    /// `seed`.
    pub fn new(nodes: usize, seed: u64, config: SimConfig) -> SharedNet {
        SharedNet {
            net: Arc::new(Mutex::new(SimNet::new(nodes, seed, config))),
            origin: std::time::Instant::now(),
        }
    }

    /// The fabric node `node`'s engine sends and receives through.
    pub fn fabric(&self, node: NodeId) -> NetFabric {
        NetFabric {
            shared: self.clone(),
            node,
        }
    }

    /// The network's clock.
    pub fn now(&self) -> Instant {
        Instant(self.origin.elapsed().as_nanos() as u64)
    }

    /// The net, locked (a panic on another thread does not make it unreadable).
    fn lock(&self) -> MutexGuard<'_, SimNet> {
        self.net.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Crashes `node`: its traffic is dropped and every other node sees it go down.
    pub fn crash(&self, node: NodeId) -> Result<(), SimError> {
        self.lock().crash(node)
    }

    /// Cuts the link between `a` and `b` (each sees the other go down).
    pub fn cut_link(&self, a: NodeId, b: NodeId) -> Result<(), SimError> {
        self.lock().cut_link(a, b)
    }

    /// The network's counters.
    pub fn stats(&self) -> SimStats {
        self.lock().stats()
    }

    /// Packets in flight on every link.
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight()
    }

    /// `node`'s current incarnation (`None` while it is crashed or unknown).
    pub fn incarnation(&self, node: NodeId) -> Option<u32> {
        self.lock().incarnation(node)
    }
}

/// One node's end of a [`SharedNet`].
#[derive(Debug)]
pub struct NetFabric {
    shared: SharedNet,
    node: NodeId,
}

impl Fabric for NetFabric {
    fn local(&self) -> NodeId {
        self.node
    }

    fn send(
        &mut self,
        _now: Instant,
        h: &Header,
        meta: &[u8],
        payload: &[SharedBytes<'_>],
    ) -> Result<(), FabricError> {
        let now = self.shared.now();
        self.shared
            .lock()
            .fabric(self.node)
            .send(now, h, meta, payload)
    }

    fn poll(
        &mut self,
        _now: Instant,
        sink: &mut dyn PacketSink,
        budget: usize,
    ) -> Result<usize, FabricError> {
        let now = self.shared.now();
        self.shared.lock().fabric(self.node).poll(now, sink, budget)
    }
}
