//! Which packets the engine sends express (`Fabric::send_express`): single-packet
//! messages of termini above the lowest priority level in use on the node, and no others.
//! Checked through a real engine and a fabric that records how each packet was handed to
//! it; the TCP fabric's lane itself is tested in `hamlyn-fabric/tests/tcp.rs`.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as StdInstant};

use common::{inline, RawClient};
use hamlyn_core::Instant;
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_fabric::{Fabric, FabricError, PacketSink, PeerEvent, SharedBytes};
use hamlyn_wire::{Header, NodeId};

/// Tag of each packet handed over, and whether it was sent express.
type Sent = Arc<Mutex<Vec<(u64, bool)>>>;

/// A fabric with one peer (node 2), up from the first poll, that takes every packet and
/// records it.
struct Recording {
    sent: Sent,
    announced: bool,
}

impl Recording {
    fn take(&mut self, h: &Header, express: bool) -> Result<(), FabricError> {
        self.sent.lock().unwrap().push((h.word, express));
        Ok(())
    }
}

impl Fabric for Recording {
    fn local(&self) -> NodeId {
        NodeId(1)
    }
    fn send(
        &mut self,
        _now: Instant,
        h: &Header,
        _meta: &[u8],
        _payload: &[SharedBytes<'_>],
    ) -> Result<(), FabricError> {
        self.take(h, false)
    }
    fn send_express(
        &mut self,
        _now: Instant,
        h: &Header,
        _meta: &[u8],
        _payload: &[SharedBytes<'_>],
    ) -> Result<(), FabricError> {
        self.take(h, true)
    }
    fn poll(
        &mut self,
        _now: Instant,
        sink: &mut dyn PacketSink,
        _budget: usize,
    ) -> Result<usize, FabricError> {
        if !std::mem::replace(&mut self.announced, true) {
            sink.on_peer(PeerEvent::Up {
                node: NodeId(2),
                incarnation: 1,
            });
        }
        Ok(0)
    }
}

/// Sends `per` messages from each terminus, opened at `priorities`, to node 2 and
/// returns, per terminus, how many went express.
fn express_counts(priorities: &[u8], per: u64) -> Vec<u64> {
    let sent = Sent::default();
    let mut cfg = EngineConfig::embedded();
    cfg.node = 1;
    let fabric = Recording {
        sent: sent.clone(),
        announced: false,
    };
    let engine = EngineHandle::start_with_fabric(cfg, Some(Box::new(fabric))).unwrap();
    let mut c = RawClient::attach(engine.socket_path(), priorities.len() as u16, 1, 64);
    for (t, &p) in priorities.iter().enumerate() {
        c.open(t as u16, p);
    }
    let total = per * priorities.len() as u64;
    let deadline = StdInstant::now() + Duration::from_secs(30);
    for i in 0..per {
        for t in 0..priorities.len() {
            let tag = (t as u64) << 32 | i;
            // (Until the peer is up, a send to it fails; the test only counts packets.)
            c.push(t, inline(2, 9, 0x5107, 0, 0, b"hello", tag))
                .unwrap();
        }
    }
    for t in 0..priorities.len() {
        c.wait_finished(t as u16, per);
    }
    loop {
        let n = sent.lock().unwrap().len() as u64;
        if n >= total {
            break;
        }
        assert!(StdInstant::now() < deadline, "{n} of {total} packets sent");
        std::thread::sleep(Duration::from_millis(1));
    }
    let sent = sent.lock().unwrap();
    (0..priorities.len() as u64)
        .map(|t| {
            sent.iter()
                .filter(|(tag, express)| tag >> 32 == t && *express)
                .count() as u64
        })
        .collect()
}

#[test]
fn single_packets_of_termini_above_the_lowest_level_in_use_go_express() {
    // Terminus 0 at the highest priority, terminus 1 at the lowest, 2 in between.
    assert_eq!(express_counts(&[0, 3, 1], 20), [20, 0, 20]);
}

#[test]
fn nothing_is_express_when_every_terminus_shares_one_priority() {
    assert_eq!(express_counts(&[0, 0], 20), [0, 0]);
    assert_eq!(express_counts(&[2, 2, 2], 10), [0, 0, 0]);
}
