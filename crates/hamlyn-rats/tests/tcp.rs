//! The protocols between two nodes: two engines joined by the TCP fabric with 2 rails
//! (packets of one message really arrive out of order), a manager on each, seeds as
//! text. Byte-exact from 0 B to 4 MiB.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

mod common;

use hamlyn::Seed;
use hamlyn_rats::datagram::{DatagramReceiver, DatagramSender};
use hamlyn_rats::remote_write::{RemoteWriteClient, RemoteWriteServer};
use hamlyn_rats::simple_datagram::{SimpleClient, SimpleDatagram};
use hamlyn_rats::stream::{StreamReceiver, StreamSender};
use hamlyn_rats::tagged::{TaggedClient, TaggedServer};
use hamlyn_rats::{Manager, RatsError};

const WAIT: Option<Duration> = Some(Duration::from_secs(20));
const SIZES: [usize; 8] = [0, 1, 128, 129, 4096, 65537, 1 << 20, 4 << 20];

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

fn via_text(seed: &Seed) -> Seed {
    hamlyn::seed::from_text(&hamlyn::seed::to_text(seed).unwrap()).unwrap()
}

#[test]
fn every_protocol_between_two_nodes_over_two_tcp_rails() {
    let (_ea, _eb, a, b) = common::two_nodes();
    let ma = Manager::new(&a).unwrap();
    let mb = Manager::new(&b).unwrap();

    // Tagged write, single packets.
    let ts = TaggedServer::new(&ma, 1 << 20).unwrap();
    let tc = TaggedClient::from_seed(&mb, &via_text(&ts.make_seed().unwrap())).unwrap();
    for (i, n) in [0usize, 1, 100, 4096].into_iter().enumerate() {
        tc.write(i as u64 * 8192, &pattern(i as u32, n), i as u32)
            .unwrap();
    }
    for i in (0..4u32).rev() {
        let t = ts.get_specific_tag(i, WAIT).unwrap().unwrap();
        assert_eq!(ts.read_arrival(&t).unwrap(), pattern(i, t.len as usize));
    }

    // Remote write of every size, then read back.
    let rs = RemoteWriteServer::new(&ma, 5 << 20).unwrap();
    let rc = RemoteWriteClient::from_seed(&mb, &via_text(&rs.make_seed().unwrap())).unwrap();
    for (i, &n) in SIZES.iter().enumerate() {
        let data = pattern(10 + i as u32, n);
        let h = rc.write(3, &data).unwrap();
        assert!(!h.wait(WAIT).is_failed());
        // Sent means it left node b; a tagged write behind it on the same terminus and
        // rails is no fence, so poll the bytes (bounded).
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut got = vec![0u8; n];
        loop {
            rs.read(3, &mut got).unwrap();
            if got == data {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "remote write of {n} never landed"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    // Simple datagram ping-pong of every size with reply seeds.
    let mut sa = SimpleDatagram::new(&ma, 4 << 20).unwrap();
    let mut sb = SimpleDatagram::new(&mb, 4 << 20).unwrap();
    let to_a = SimpleClient::from_seed(&mb, &via_text(&sa.make_seed().unwrap())).unwrap();
    to_a.send(&[], Some(&sb.metadata_for_self().unwrap()), b"go")
        .unwrap();
    for (i, &n) in SIZES.iter().enumerate() {
        let m = sa.recv(WAIT).unwrap().unwrap();
        let want = if i == 0 {
            Vec::new()
        } else {
            pattern(20 + i as u32 - 1, SIZES[i - 1])
        };
        assert_eq!(sa.to_vec(&m).unwrap(), want);
        sa.reply_seed()
            .unwrap()
            .send(
                &ma,
                &pattern(20 + i as u32, n),
                Some(&sa.metadata_for_self().unwrap()),
                b"",
            )
            .unwrap();
        let m = sb.recv(WAIT).unwrap().unwrap();
        assert_eq!(m.len as usize, n);
        assert!(sb.to_vec(&m).unwrap() == pattern(20 + i as u32, n));
        sb.reply_seed()
            .unwrap()
            .send(
                &mb,
                &pattern(20 + i as u32, n),
                Some(&sb.metadata_for_self().unwrap()),
                b"",
            )
            .unwrap();
    }
    let _ = sa.recv(WAIT).unwrap().unwrap();

    // Datagrams of every size, many in flight, credits back over the network.
    let mut rx = DatagramReceiver::new(&ma, 4, 4 << 20).unwrap();
    let mut tx = DatagramSender::from_seed(&mb, &via_text(&rx.make_seed(4).unwrap())).unwrap();
    let mut next = 0;
    let mut got = 0;
    for _ in 0..10_000 {
        if got == 3 * SIZES.len() {
            break;
        }
        while next < 3 * SIZES.len() {
            let n = SIZES[next % SIZES.len()];
            match tx.send(&pattern(40 + next as u32, n), &(next as u32).to_le_bytes()) {
                Ok(_) => next += 1,
                Err(hamlyn_rats::RatsError::Full) => break,
                Err(e) => panic!("{e}"),
            }
        }
        if let Some(d) = rx.recv(Some(Duration::from_millis(5))).unwrap() {
            let k = u32::from_le_bytes(d.oob().try_into().unwrap()) as usize;
            assert!(rx.to_vec(&d).unwrap() == pattern(40 + k as u32, SIZES[k % SIZES.len()]));
            rx.release(d).unwrap();
            got += 1;
        }
    }
    assert_eq!(got, 3 * SIZES.len());
    assert_eq!((ma.stats().forged, mb.stats().forged), (0, 0));

    // Remote read of every size.
    let server = hamlyn_rats::remote_read::RemoteReadServer::new(&ma, 5 << 20).unwrap();
    let data = pattern(60, 5 << 20);
    server.write(0, &data).unwrap();
    let mut rc = hamlyn_rats::remote_read::RemoteReadClient::from_seed(
        &mb,
        &via_text(&server.make_seed().unwrap()),
        4 << 20,
    )
    .unwrap();
    for &n in &SIZES {
        let got = rc.remote_read(5, n as u64, WAIT).unwrap();
        assert!(got == data[5..5 + n], "remote read of {n}");
    }
}

#[test]
fn request_response_across_nodes_through_the_registry() {
    use hamlyn_rats::request_response::{RequestClient, RequestServer};
    let (_ea, _eb, a, b) = common::two_nodes();
    // The server on node 0 (the registry's node), the client on node 1: its lookup is
    // forwarded to node 0.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let m = Manager::new(&a).unwrap();
        let mut s = RequestServer::new(&m, 4 << 20).unwrap();
        s.publish("rats-tcp").unwrap();
        ready_tx.send(()).unwrap();
        for _ in 0..SIZES.len() {
            let r = s.recv(WAIT).unwrap().unwrap();
            let body = s.to_vec(&r).unwrap();
            let h = s.send_reply(&r, &body).unwrap();
            s.release().unwrap();
            assert!(!h.wait(WAIT).is_failed());
        }
        s.duplicates()
    });
    ready_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    let m = Manager::new(&b).unwrap();
    let mut c = RequestClient::lookup(&m, "rats-tcp", 4 << 20).unwrap();
    for (i, &n) in SIZES.iter().enumerate() {
        let body = pattern(70 + i as u32, n);
        let r = c.call(&body, Duration::from_secs(20)).unwrap();
        assert!(c.reply_bytes(&r).unwrap() == body, "echo of {n}");
        c.release();
    }
    server.join().unwrap();
}

/// Over the network, a stream whose sending node goes away mid-stream ends at the
/// receiver with `PeerGone` once the engine declares the peer down (here the node stops
/// while its sender is still open): an error, never a hang.
#[test]
fn a_stream_whose_sending_node_goes_away_ends_with_an_error() {
    let (ea, eb, a, b) = common::two_nodes();
    let m = Manager::new(&a).unwrap();
    let mut rx = StreamReceiver::new(&m, 1 << 20, 16).unwrap();
    let seed = rx.make_seed().unwrap();
    let mb = Manager::new(&b).unwrap();
    let mut tx = StreamSender::from_seed(&mb, &seed).unwrap();
    for i in 0..20u8 {
        tx.write_record(&[i; 300]).unwrap();
    }
    tx.flush().unwrap();
    for i in 0..20u8 {
        let v = rx.read_record(WAIT).unwrap().expect("a record");
        assert_eq!(rx.copy(&v).unwrap(), [i; 300]);
        rx.release(&v).unwrap();
    }
    // Node 1 goes away with the stream open: no close, no end-of-stream.
    std::mem::forget(tx);
    drop((mb, b));
    eb.stop().unwrap();
    assert!(
        matches!(rx.read_record(WAIT), Err(RatsError::PeerGone)),
        "the receiver learns the sender's node is gone"
    );
    drop((rx, m, a));
    ea.stop().unwrap();
}
