//! A client that says goodbye right after queuing sends it did not wait for: the engine
//! sends them before it answers the goodbye, as a socket's close delivers what was
//! written. The sender here queues without ringing the doorbell, writes its goodbye and
//! closes its socket at once, so the engine reads the goodbye and the close in one go:
//! without the drain, the queued requests would go with the client.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::fd::AsFd;

use common::{inline, receiver_slot, RawClient};
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_shm::fdpass::send_with_fds;
use hamlyn_wire::control::Request;

#[test]
fn what_a_client_queued_before_its_goodbye_is_delivered() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let mut rx = RawClient::attach(engine.socket_path(), 1, 1, 1024);
    let (slot, key, region) = receiver_slot(&rx, 1 << 16, 1);
    const N: u64 = 40;
    for round in 0..3u64 {
        let mut tx = RawClient::attach(engine.socket_path(), 2, 1, 64);
        tx.open(0, 0);
        tx.open(1, 3);
        for i in 0..N {
            let word = round * 1000 + i;
            let bytes = word.to_le_bytes();
            tx.push_quiet(
                (i % 2) as usize,
                inline(rx.node, slot, key, 0, 8 * (word % 8192), &bytes, word),
            )
            .unwrap();
        }
        send_with_fds(tx.sock.as_fd(), &Request::Detach.encode(), &[]).unwrap();
        drop(tx);
        let mut got: Vec<u64> = (0..N)
            .map(|_| rx.wait_notif(0).expect("a queued send").word.get())
            .collect();
        got.sort_unstable();
        assert_eq!(got, (0..N).map(|i| round * 1000 + i).collect::<Vec<_>>());
        for w in got {
            let mut b = [0u8; 8];
            region.read(8 * (w % 8192) as usize, &mut b).unwrap();
            assert_eq!(u64::from_le_bytes(b), w);
        }
    }
    let stats = rx.stats();
    assert_eq!(stats.engine.drains_cut, 0);
    assert_eq!(stats.engine.clients_detached, 3);
}
