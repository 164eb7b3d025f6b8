//! The engine's own priority walk, through a real engine with four priority levels: work
//! queued on termini of every level while the engine is held (inside a fabric poll, by a
//! test fabric with a gate) is delivered level by level, highest first, checked by the
//! order of the receiver's notifications — never by time.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant as StdInstant};

use common::{inline, receiver_slot, RawClient};
use hamlyn_core::Instant;
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_fabric::{Fabric, FabricError, PacketSink, SharedBytes};
use hamlyn_wire::{Header, NodeId};

/// Whether polls block, and whether one is blocked now.
#[derive(Default)]
struct GateState {
    closed: bool,
    inside: bool,
}

#[derive(Default, Clone)]
struct Gate(Arc<(Mutex<GateState>, Condvar)>);

impl Gate {
    fn close(&self) {
        self.0 .0.lock().unwrap().closed = true;
    }
    fn open(&self) {
        self.0 .0.lock().unwrap().closed = false;
        self.0 .1.notify_all();
    }
    /// Waits (bounded) until the engine is held inside a poll.
    fn wait_held(&self) {
        let deadline = StdInstant::now() + Duration::from_secs(30);
        let mut st = self.0 .0.lock().unwrap();
        while !st.inside {
            assert!(StdInstant::now() < deadline, "the engine never polled");
            st = self
                .0
                 .1
                .wait_timeout(st, Duration::from_millis(10))
                .unwrap()
                .0;
        }
    }
}

/// A fabric with no peers whose `poll` blocks while the gate is closed: it holds the
/// engine's thread between two turns.
struct GateFabric(Gate);

impl Fabric for GateFabric {
    fn local(&self) -> NodeId {
        NodeId(1)
    }
    fn send(
        &mut self,
        _now: Instant,
        _header: &Header,
        _meta: &[u8],
        _payload: &[SharedBytes<'_>],
    ) -> Result<(), FabricError> {
        Err(FabricError::PeerDown(NodeId(0)))
    }
    fn poll(
        &mut self,
        _now: Instant,
        _sink: &mut dyn PacketSink,
        _budget: usize,
    ) -> Result<usize, FabricError> {
        let (m, cv) = &*self.0 .0;
        let mut st = m.lock().unwrap();
        while st.closed {
            st.inside = true;
            cv.notify_all();
            st = cv.wait(st).unwrap();
        }
        st.inside = false;
        Ok(0)
    }
}

#[test]
fn queued_work_is_delivered_level_by_level_highest_first() {
    let gate = Gate::default();
    let mut cfg = EngineConfig::embedded();
    cfg.node = 1;
    let engine =
        EngineHandle::start_with_fabric(cfg, Some(Box::new(GateFabric(gate.clone())))).unwrap();
    let mut c = RawClient::attach(engine.socket_path(), 5, 1, 1024);
    let (slot, key, _region) = receiver_slot(&c, 1 << 16, 4);
    // Terminus t at priority 3 - t, so index order is not priority order; two termini
    // share the lowest level.
    let prios = [3u8, 2, 1, 0, 3];
    for (t, &p) in prios.iter().enumerate() {
        c.open(t as u16, p);
    }
    const PER: u64 = 8;
    gate.close();
    gate.wait_held();
    for round in 0..PER {
        // Lowest priority pushed first in each round.
        for (t, &p) in prios.iter().enumerate() {
            let word = u64::from(p) * 1000 + round;
            c.push(t, inline(1, slot, key, 0, 64 * word % 4096, b"x", word))
                .unwrap();
        }
    }
    gate.open();
    let got: Vec<u64> = (0..PER * 5)
        .map(|_| c.wait_notif(0).expect("notified").word.get())
        .collect();
    let levels: Vec<u64> = got.iter().map(|w| w / 1000).collect();
    let mut want = Vec::new();
    for level in 0..4 {
        let n = if level == 3 { 2 * PER } else { PER };
        want.extend(std::iter::repeat_n(level, n as usize));
    }
    assert_eq!(levels, want, "every level before the next: {got:?}");
    for level in 0..3u64 {
        let rounds: Vec<u64> = got
            .iter()
            .filter(|w| *w / 1000 == level)
            .map(|w| w % 1000)
            .collect();
        assert_eq!(
            rounds,
            (0..PER).collect::<Vec<_>>(),
            "level {level} in order"
        );
    }
    // Every request was pushed with its ready hint while the engine was held: the
    // engine took them all from the hints, none from its sweep of the termini.
    assert_eq!(c.stats().engine.found_by_sweep, 0);
}

/// A client that sets no ready hints and rings no doorbell (`push_quiet`) is still
/// served, by the sweep, on every terminus of a port of 256 at four levels; the engine
/// counts each request it found that way.
#[test]
fn requests_without_hints_are_found_by_the_sweep() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let mut c = RawClient::attach(engine.socket_path(), 256, 1, 1024);
    let (slot, key, _region) = receiver_slot(&c, 1 << 16, 4);
    for t in 0..256u16 {
        c.open(t, (t % 4) as u8);
    }
    let before = c.stats().engine.found_by_sweep;
    let picked = [0usize, 63, 64, 200, 255];
    for &t in &picked {
        let node = c.node;
        c.push_quiet(t, inline(node, slot, key, 0, 64 * t as u64, b"x", t as u64))
            .unwrap();
    }
    let mut got: Vec<u64> = (0..picked.len())
        .map(|_| c.wait_notif(0).expect("found by the sweep").word.get())
        .collect();
    got.sort();
    assert_eq!(got, picked.iter().map(|&t| t as u64).collect::<Vec<_>>());
    let found = c.stats().engine.found_by_sweep - before;
    assert_eq!(found, picked.len() as u64, "each counted once");
}
