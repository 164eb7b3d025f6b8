//! An in-process channel "fabric" between two engines in one test process: whole
//! packets through std channels, Up at the first poll, Down when the shared `cut` flag
//! is set; a per-end `valve` makes that end's sends `Full` (back-pressure) while set. A
//! test double for the engine's remote logic; the TCP fabric is the real thing.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};

use hamlyn_core::Instant;
use hamlyn_fabric::{Fabric, FabricError, Landing, PacketSink, PeerEvent, SharedBytes};
use hamlyn_wire::stats::{ChannelCounters, FabricStats};
use hamlyn_wire::{Header, NodeId};

/// A packet in flight: header, metadata and the payload gathered into one buffer.
type Packet = (Header, Vec<u8>, Vec<u8>);

/// One end of a channel link. `cut` (shared) makes both ends see the peer go down.
pub struct ChannelFabric {
    local: NodeId,
    peer: NodeId,
    tx: Sender<Packet>,
    rx: Receiver<Packet>,
    cut: Arc<Mutex<bool>>,
    /// While set, this end's sends are refused as `Full`.
    valve: Arc<Mutex<bool>>,
    announced_up: bool,
    announced_down: bool,
    counters: ChannelCounters,
}

/// A link between nodes `a` and `b`: `a`'s end, `b`'s end, and the shared `cut` flag
/// (set it to `true` to take the link down for both).
pub fn link(a: NodeId, b: NodeId) -> (ChannelFabric, ChannelFabric, Arc<Mutex<bool>>) {
    let (fa, fb, cut, _) = link_with_valve(a, b);
    (fa, fb, cut)
}

/// As [`link`], with a valve on `b`'s end: while it is `true`, `b`'s sends are refused
/// as `Full`, as a congested path would refuse them.
#[allow(clippy::type_complexity)]
pub fn link_with_valve(
    a: NodeId,
    b: NodeId,
) -> (
    ChannelFabric,
    ChannelFabric,
    Arc<Mutex<bool>>,
    Arc<Mutex<bool>>,
) {
    let (ta, rb) = channel();
    let (tb, ra) = channel();
    let cut = Arc::new(Mutex::new(false));
    let valve = Arc::new(Mutex::new(false));
    let end = |local, peer, tx, rx, valve| ChannelFabric {
        local,
        peer,
        tx,
        rx,
        cut: cut.clone(),
        valve,
        announced_up: false,
        announced_down: false,
        counters: ChannelCounters::default(),
    };
    let fa = end(a, b, ta, ra, Arc::new(Mutex::new(false)));
    let fb = end(b, a, tb, rb, valve.clone());
    (fa, fb, cut, valve)
}

impl ChannelFabric {
    /// Whether the link was cut (a poisoned flag is still read: it holds a plain `bool`).
    fn is_cut(&self) -> bool {
        *self.cut.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Fabric for ChannelFabric {
    fn local(&self) -> NodeId {
        self.local
    }
    fn send(
        &mut self,
        _now: Instant,
        h: &Header,
        meta: &[u8],
        payload: &[SharedBytes<'_>],
    ) -> Result<(), FabricError> {
        if h.dst != self.peer {
            return Err(FabricError::NoRoute(h.dst));
        }
        if self.is_cut() {
            return Err(FabricError::PeerDown(self.peer));
        }
        if *self.valve.lock().unwrap_or_else(PoisonError::into_inner) {
            return Err(FabricError::Full);
        }
        let mut bytes = Vec::with_capacity(payload.iter().map(SharedBytes::len).sum());
        for part in payload {
            part.append_to(&mut bytes);
        }
        self.tx
            .send((*h, meta.to_vec(), bytes))
            .map_err(|_| FabricError::PeerDown(self.peer))?;
        self.counters.packets_sent += 1;
        Ok(())
    }
    fn fabric_stats(&self) -> Option<FabricStats> {
        Some(FabricStats::Channel(self.counters))
    }
    fn poll(
        &mut self,
        _now: Instant,
        sink: &mut dyn PacketSink,
        budget: usize,
    ) -> Result<usize, FabricError> {
        if !self.announced_up {
            self.announced_up = true;
            sink.on_peer(PeerEvent::Up {
                node: self.peer,
                incarnation: 7,
            });
        }
        if self.is_cut() {
            if !self.announced_down {
                self.announced_down = true;
                sink.on_peer(PeerEvent::Down { node: self.peer });
            }
            return Ok(0);
        }
        let mut n = 0;
        while n < budget {
            let Ok((h, meta, payload)) = self.rx.try_recv() else {
                break;
            };
            if sink.on_header(self.peer, &h, &meta) == Landing::Accept {
                let mut buf = sink.payload_buf(&h);
                if buf.len() != payload.len() {
                    return Err(FabricError::SinkBuffer {
                        expected: payload.len() as u64,
                        got: buf.len() as u64,
                    });
                }
                buf.copy_from(0, &payload);
                sink.on_payload(self.peer, &h, &meta);
            }
            n += 1;
            self.counters.packets_received += 1;
        }
        Ok(n)
    }
}
