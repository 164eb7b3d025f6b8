//! Every protocol between two processes on one node: the test starts an engine in its own
//! process and re-executes this test binary as a child, which reaches the engine only
//! through its control socket and port and is given its seeds in environment variables
//! (as a newcomer's two programs would be). The child's entry point is a `#[test]` that
//! returns at once unless the environment names it.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use hamlyn::Node;
use hamlyn_rats::datagram::{DatagramReceiver, DatagramSender};
use hamlyn_rats::remote_read::{RemoteReadClient, RemoteReadServer};
use hamlyn_rats::remote_write::{RemoteWriteClient, RemoteWriteServer};
use hamlyn_rats::request_response::{RequestClient, RequestServer};
use hamlyn_rats::simple_datagram::{SimpleClient, SimpleDatagram};
use hamlyn_rats::stream::{StreamReceiver, StreamSender};
use hamlyn_rats::tagged::{TaggedClient, TaggedServer};
use hamlyn_rats::{Manager, ManagerOptions, RatsError};

const WAIT: Option<Duration> = Some(Duration::from_secs(20));
const CHILD: &str = "RATS_TEST_CHILD";
const SIZES: [usize; 9] = [0, 1, 60, 128, 129, 4096, 65536, 1 << 20, 4 << 20];

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

/// A manager that sends direct to direct slots of this node, and makes its slots take
/// direct senders, if `direct` (`ManagerOptions::danger_direct`).
fn manager(node: &Node, direct: bool) -> Manager {
    Manager::with_options(
        node,
        ManagerOptions {
            danger_direct: direct,
            ..ManagerOptions::default()
        },
    )
    .unwrap()
}

fn seed_from_env(var: &str) -> hamlyn::Seed {
    hamlyn::seed::from_text(&std::env::var(var).unwrap()).unwrap()
}

/// The child: ping-pongs simple datagrams with the parent, sends datagrams, then a
/// stream of records.
#[test]
fn child_peer() {
    if std::env::var(CHILD).as_deref() != Ok("child_peer") {
        return;
    }
    let node = Node::connect_default().unwrap();
    let m = manager(&node, std::env::var("RATS_DIRECT").is_ok());
    // Tagged writes, then a remote write fenced by a tagged write behind it (one
    // terminus, one node: in order).
    let tagged = TaggedClient::from_seed(&m, &seed_from_env("RATS_TAGGED_SEED")).unwrap();
    for i in 0..5u32 {
        tagged
            .write(u64::from(i) * 4096, &pattern(50 + i, 4096), i)
            .unwrap();
    }
    let rw = RemoteWriteClient::from_seed(&m, &seed_from_env("RATS_RW_SEED")).unwrap();
    rw.write(1, &pattern(60, 1 << 20)).unwrap();
    tagged.write(5 * 4096, b"done", 99).unwrap();
    // Remote reads of the parent's memory.
    let mut rr = RemoteReadClient::from_seed(&m, &seed_from_env("RATS_RR_SEED"), 4 << 20).unwrap();
    for &n in &SIZES {
        assert!(rr.remote_read(3, n as u64, WAIT).unwrap() == pattern(70, (4 << 20) + 3)[3..3 + n]);
    }
    // A request by the seed's ASCII text.
    let mut rq =
        RequestClient::from_text(&m, &std::env::var("RATS_REQUEST_SEED").unwrap(), 1 << 20)
            .unwrap();
    let r = rq.call(b"ping", Duration::from_secs(20)).unwrap();
    assert_eq!(rq.reply_bytes(&r).unwrap(), b"gnip");
    rq.release();
    // Simple datagrams: every size, answered through reply seeds.
    let mut me = SimpleDatagram::new(&m, 4 << 20).unwrap();
    let to_parent = SimpleClient::from_seed(&m, &seed_from_env("RATS_SIMPLE_SEED")).unwrap();
    for (i, &n) in SIZES.iter().enumerate() {
        let h = to_parent
            .send(
                &pattern(i as u32, n),
                Some(&me.metadata_for_self().unwrap()),
                b"c",
            )
            .unwrap();
        assert!(!h.wait(WAIT).is_failed());
        let r = me.recv(WAIT).unwrap().unwrap();
        assert!(me.to_vec(&r).unwrap() == pattern(100 + i as u32, n));
    }
    // Datagrams, waiting for credit when out of it.
    let mut tx = DatagramSender::from_seed(&m, &seed_from_env("RATS_DATAGRAM_SEED")).unwrap();
    for i in 0..64u32 {
        let n = (i as usize * 4099) % 65537;
        tx.send_wait(&pattern(200 + i, n), &i.to_le_bytes(), WAIT)
            .unwrap();
    }
    // A stream of records.
    let mut s = StreamSender::from_seed(&m, &seed_from_env("RATS_STREAM_SEED")).unwrap();
    for i in 0..3000u32 {
        s.write_record(&pattern(300 + i, (i as usize * 37) % 70_000 % 65_536 + 1))
            .unwrap();
    }
    let h = s.close().unwrap();
    assert!(!h.wait(WAIT).is_failed());
    println!("child done: {} direct sends", m.stats().direct_sends);
}

#[test]
fn every_protocol_between_two_processes_with_seeds_in_environment_variables() {
    every_protocol_between_two_processes(false);
}

/// The same, with both processes' managers direct: the protocols whose slots take direct
/// senders (not the datagram's and request/response's paranoid one-shot slots) go
/// without the engine, and every byte is the same.
#[test]
fn every_protocol_between_two_processes_direct_where_it_applies() {
    every_protocol_between_two_processes(true);
}

fn every_protocol_between_two_processes(direct: bool) {
    let node = Node::embedded().unwrap();
    let m = manager(&node, direct);
    let mut simple = SimpleDatagram::new(&m, 4 << 20).unwrap();
    let mut rx = DatagramReceiver::new(&m, 4, 65536).unwrap();
    let mut stream = StreamReceiver::new(&m, 1 << 20, 16).unwrap();
    let tagged = TaggedServer::new(&m, 6 * 4096).unwrap();
    let rw = RemoteWriteServer::new(&m, 2 << 20).unwrap();
    let rr = RemoteReadServer::new(&m, (4 << 20) + 3).unwrap();
    rr.write(0, &pattern(70, (4 << 20) + 3)).unwrap();
    let mut rq = RequestServer::new(&m, 4096).unwrap();
    let text = |s: &hamlyn::Seed| hamlyn::seed::to_text(s).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_peer", "--nocapture", "--test-threads=1"])
        .env(CHILD, "child_peer")
        .env(
            if direct {
                "RATS_DIRECT"
            } else {
                "RATS_MEDIATED"
            },
            "1",
        )
        .env(hamlyn::SOCKET_ENV, node.socket_path())
        .env("RATS_SIMPLE_SEED", text(&simple.make_seed().unwrap()))
        .env("RATS_DATAGRAM_SEED", text(&rx.make_seed(4).unwrap()))
        .env("RATS_STREAM_SEED", text(&stream.make_seed().unwrap()))
        .env("RATS_TAGGED_SEED", text(&tagged.make_seed().unwrap()))
        .env("RATS_RW_SEED", text(&rw.make_seed().unwrap()))
        .env("RATS_RR_SEED", text(&rr.make_seed().unwrap()))
        .env("RATS_REQUEST_SEED", rq.seed_text().unwrap())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for i in (0..5u32).rev() {
            let a = tagged.get_specific_tag(i, WAIT).unwrap().expect("tag");
            assert_eq!(tagged.read_arrival(&a).unwrap(), pattern(50 + i, 4096));
        }
        tagged.get_specific_tag(99, WAIT).unwrap().expect("done");
        let mut got = vec![0u8; 1 << 20];
        rw.read(1, &mut got).unwrap();
        assert!(got == pattern(60, 1 << 20), "remote write");
        let r = rq.recv(WAIT).unwrap().expect("a request");
        let body: Vec<u8> = rq.to_vec(&r).unwrap().into_iter().rev().collect();
        rq.send_reply(&r, &body).unwrap();
        rq.release().unwrap();
        for (i, &n) in SIZES.iter().enumerate() {
            let r = simple.recv(WAIT).unwrap().expect("the child's datagram");
            assert!(
                simple.to_vec(&r).unwrap() == pattern(i as u32, n),
                "size {n}"
            );
            assert_eq!(r.oob(), b"c");
            simple
                .reply_seed()
                .unwrap()
                .send(&m, &pattern(100 + i as u32, n), None, b"")
                .unwrap();
        }
        let mut seen = [false; 64];
        for _ in 0..64 {
            let d = rx.recv(WAIT).unwrap().expect("a datagram");
            let i = u32::from_le_bytes(d.oob().try_into().unwrap());
            let n = (i as usize * 4099) % 65537;
            assert!(rx.to_vec(&d).unwrap() == pattern(200 + i, n));
            assert!(!std::mem::replace(&mut seen[i as usize], true), "twice");
            rx.release(d).unwrap();
        }
        for i in 0..3000u32 {
            let v = stream.read_record(WAIT).unwrap().expect("a record");
            let n = (i as usize * 37) % 70_000 % 65_536 + 1;
            assert!(
                stream.copy(&v).unwrap() == pattern(300 + i, n),
                "record {i}"
            );
            stream.release(&v).unwrap();
        }
        assert!(matches!(
            stream.read_record(WAIT),
            Err(RatsError::EndOfStream)
        ));
    }));
    if result.is_err() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}");
    assert!(stdout.contains("child done"), "{stdout}");
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert_eq!(m.stats().forged, 0);
    let child_direct: u64 = stdout
        .split("child done: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the child's count of direct sends");
    if direct {
        // Tagged writes, the remote write, simple datagrams and stream records went
        // direct; datagrams and the request (one-shot slots) through the engine.
        assert!(child_direct > 1000, "child: {child_direct} direct sends");
        assert!(m.stats().direct_sends > 0, "parent: no direct sends");
    } else {
        assert_eq!((child_direct, m.stats().direct_sends), (0, 0));
    }
}

/// The child for the dead-peer test: streams 100 records, then waits to be killed.
#[test]
fn child_stream_then_hang() {
    if std::env::var(CHILD).as_deref() != Ok("child_stream_then_hang") {
        return;
    }
    let node = Node::connect_default().unwrap();
    let m = Manager::new(&node).unwrap();
    let mut s = StreamSender::from_seed(&m, &seed_from_env("RATS_STREAM_SEED")).unwrap();
    for i in 0..100u32 {
        s.write_record(&pattern(i, 1000)).unwrap();
    }
    let h = s.flush().unwrap().unwrap();
    assert!(!h.wait(WAIT).is_failed());
    println!("sent");
    // Killed by the parent; bounded in case it is not.
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_sender_killed_mid_stream_ends_it_with_an_error() {
    let node = Node::embedded().unwrap();
    let m = Manager::new(&node).unwrap();
    let mut rx = StreamReceiver::new(&m, 1 << 20, 16).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_stream_then_hang",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "child_stream_then_hang")
        .env(hamlyn::SOCKET_ENV, node.socket_path())
        .env(
            "RATS_STREAM_SEED",
            hamlyn::seed::to_text(&rx.make_seed().unwrap()).unwrap(),
        )
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut read = 0;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for i in 0..100u32 {
            let v = rx.read_record(WAIT).unwrap().expect("a record");
            assert!(rx.copy(&v).unwrap() == pattern(i, 1000));
            rx.release(&v).unwrap();
            read += 1;
        }
    }));
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert_eq!(read, 100);
    // Nothing half-sent: no PeerDown to be told of; the receiver's probe finds out.
    assert!(matches!(rx.read_record(WAIT), Err(RatsError::PeerGone)));
}

/// A member of the group-receive test: sends its part through its split seed.
#[test]
fn child_group_member() {
    if std::env::var(CHILD).as_deref() != Ok("child_group_member") {
        return;
    }
    let node = Node::connect_default().unwrap();
    let m = Manager::new(&node).unwrap();
    let part: u32 = std::env::var("RATS_PART").unwrap().parse().unwrap();
    let c = SimpleClient::from_seed(&m, &seed_from_env("RATS_PART_SEED")).unwrap();
    let h = c
        .send(&pattern(900 + part, c.len() as usize), None, &[part as u8])
        .unwrap();
    assert!(!h.wait(WAIT).is_failed());
    println!("part {part} sent");
}

#[test]
fn group_receive_with_split_seeds_from_three_processes() {
    let node = Node::embedded().unwrap();
    let m = Manager::new(&node).unwrap();
    let mut rx = SimpleDatagram::new(&m, 3 * 65536).unwrap();
    let parts = hamlyn_rats::simple_datagram::split_seed(&rx.make_seed().unwrap(), 3).unwrap();
    let children: Vec<_> = parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "child_group_member",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, "child_group_member")
                .env(hamlyn::SOCKET_ENV, node.socket_path())
                .env("RATS_PART", i.to_string())
                .env("RATS_PART_SEED", hamlyn::seed::to_text(p).unwrap())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let got = rx.recv(WAIT);
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let msg = got.unwrap().expect("told once all three parts arrived");
    assert_eq!((msg.offset, msg.len), (0, 3 * 65536));
    let all = rx.to_vec(&msg).unwrap();
    for i in 0..3u32 {
        let at = i as usize * 65536;
        assert!(all[at..at + 65536] == pattern(900 + i, 65536), "part {i}");
    }
    assert!(
        rx.ready().unwrap().is_none(),
        "one notification for the group"
    );
}
