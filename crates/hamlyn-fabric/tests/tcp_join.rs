//! Joining a TCP cluster from one member's address: the membership query, the fan-out to
//! every listed member, sessions coming up by the usual dial rule, and hostile queries
//! and replies.
//!
//! Every loop is bounded by a wall-clock deadline that only turns a hang into a failure;
//! no test asserts how long anything took.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]
#![allow(
    clippy::disallowed_types,
    reason = "a stop flag between test threads; hamlyn-fabric does not depend on hamlyn-shm's atomics facade"
)]

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hamlyn_core::Instant;
use hamlyn_fabric::tcp::frame::{check_join_reply, decode_members, JoinQuery};
use hamlyn_fabric::tcp::{
    join, CloseReason, ClusterSecret, PeerState, TcpConfig, TcpError, TcpFabric,
};
use hamlyn_fabric::{Fabric, Landing, PacketSink, PeerEvent, SharedBytesMut};
use hamlyn_wire::{Flags, Header, NodeId, Op, RequestId, HEADER_LEN};

/// Wall-clock bound of every wait in these tests.
const DEADLINE: Duration = Duration::from_secs(20);

/// A sink that records packets (with their payloads) and peer events.
#[derive(Default)]
struct Rec {
    packets: Vec<(NodeId, Header, Vec<u8>)>,
    events: Vec<PeerEvent>,
    landing: BTreeMap<(u32, u64), Vec<u8>>,
}

fn key(h: &Header) -> (u32, u64) {
    (h.src.0, h.request.to_u64())
}

impl PacketSink for Rec {
    fn on_header(&mut self, _: NodeId, h: &Header, _: &[u8]) -> Landing {
        self.landing.insert(key(h), vec![0; h.payload_len as usize]);
        Landing::Accept
    }
    fn payload_buf(&mut self, h: &Header) -> SharedBytesMut<'_> {
        SharedBytesMut::from(&mut self.landing.get_mut(&key(h)).unwrap()[..])
    }
    fn on_payload(&mut self, from: NodeId, h: &Header, _: &[u8]) {
        let p = self.landing.remove(&key(h)).unwrap();
        self.packets.push((from, *h, p));
    }
    fn on_peer(&mut self, e: PeerEvent) {
        self.events.push(e);
    }
    fn on_unconfirmed(&mut self, _: NodeId, _: &Header) {}
}

impl Rec {
    fn downs(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e, PeerEvent::Down { .. }))
            .count()
    }
}

struct Time(std::time::Instant);

impl Time {
    fn new() -> Time {
        Time(std::time::Instant::now())
    }
    fn now(&self) -> Instant {
        Instant(self.0.elapsed().as_nanos() as u64)
    }
    fn check(&self, what: &str) {
        assert!(self.0.elapsed() < DEADLINE, "timed out waiting for {what}");
    }
}

/// The secret of these tests' clusters.
fn secret() -> ClusterSecret {
    ClusterSecret::from_bytes([0x11; 32])
}

fn config(node: u32) -> TcpConfig {
    let mut c = TcpConfig::new(NodeId(node), ([127, 0, 0, 1], 0).into());
    c.peer_timeout = Duration::from_secs(30);
    c.reconnect_interval = Duration::from_millis(10);
    c.secret = Some(secret());
    c
}

fn fabric(node: u32) -> TcpFabric {
    TcpFabric::new(config(node)).unwrap()
}

/// A fabric whose links are in clear, for raw clients that speak the plain protocol.
fn plain_fabric(node: u32) -> TcpFabric {
    let mut c = config(node);
    c.secret = None;
    c.danger_insecure = true;
    TcpFabric::new(c).unwrap()
}

fn poll_all(time: &Time, fabrics: &mut [TcpFabric], recs: &mut [Rec]) {
    for (f, r) in fabrics.iter_mut().zip(recs.iter_mut()) {
        f.poll(time.now(), r, 64).unwrap();
    }
}

fn all_up(fabrics: &[TcpFabric]) -> bool {
    fabrics.iter().all(|f| {
        fabrics.iter().all(|g| {
            f.local() == g.local() || matches!(f.peer_state(g.local()), Some(PeerState::Up { .. }))
        })
    })
}

/// Sends one packet from `fabrics[a]` to `fabrics[b]` and waits until it arrives intact.
fn deliver(time: &Time, fabrics: &mut [TcpFabric], recs: &mut [Rec], a: usize, b: usize) {
    let (src, dst) = (fabrics[a].local(), fabrics[b].local());
    let mut h = Header::new(Op::Write);
    h.flags = Flags::FIRST | Flags::LAST;
    h.src = src;
    h.dst = dst;
    h.request = RequestId {
        terminus: 1,
        seq: src.0 * 100 + dst.0,
    };
    let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7 + src.0) as u8).collect();
    h.payload_len = payload.len() as u32;
    fabrics[a]
        .send(time.now(), &h, &[], &[(&payload).into()])
        .unwrap();
    loop {
        poll_all(time, fabrics, recs);
        if let Some((from, got, p)) = recs[b]
            .packets
            .iter()
            .find(|(_, g, _)| g.request == h.request)
        {
            assert_eq!((*from, got, p), (src, &h, &payload));
            return;
        }
        time.check("a packet");
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Nodes 1 and 2 know each other statically; `joiner` knows only node 2's address and
/// joins through it. Everyone ends up connected with everyone, and packets flow between
/// the joiner and node 1, which it never was told about.
fn join_through_one_member(joiner: u32) {
    let time = Time::new();
    let mut f1 = fabric(1);
    let mut f2 = fabric(2);
    let (a1, a2) = (f1.local_addr(), f2.local_addr());
    f1.add_peer(NodeId(2), a2).unwrap();
    f2.add_peer(NodeId(1), a1).unwrap();
    let mut fj = fabric(joiner);

    // The members serve (and connect to each other) while the joiner asks, blocking.
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let members = std::thread::spawn(move || {
        let time = Time::new();
        let mut fabrics = vec![f1, f2];
        let mut recs = vec![Rec::default(), Rec::default()];
        // Acquire: pairs with the Release store that stops the members below.
        while !flag.load(Ordering::Acquire) {
            poll_all(&time, &mut fabrics, &mut recs);
            time.check("the joiner");
            std::thread::sleep(Duration::from_micros(100));
        }
        (fabrics, recs)
    });
    let learned = fj.join(&[a2], Duration::from_secs(5)).unwrap();
    // Release: pairs with the members thread's Acquire load.
    stop.store(true, Ordering::Release);
    let (mut fabrics, mut recs) = members.join().unwrap();
    assert_eq!(learned, vec![(NodeId(1), a1), (NodeId(2), a2)]);
    // Both members were asked, so both know the joiner (at its listening address).
    for f in &fabrics {
        assert_eq!(f.stats().closes.get(CloseReason::JoinAnswered), 1);
        assert!(
            f.peer_state(NodeId(joiner)).is_some(),
            "{f:?} knows the joiner"
        );
    }

    fabrics.push(fj);
    recs.push(Rec::default());
    loop {
        poll_all(&time, &mut fabrics, &mut recs);
        if all_up(&fabrics) {
            break;
        }
        time.check("every pair up");
        std::thread::sleep(Duration::from_micros(100));
    }
    deliver(&time, &mut fabrics, &mut recs, 2, 0);
    deliver(&time, &mut fabrics, &mut recs, 0, 2);
    deliver(&time, &mut fabrics, &mut recs, 2, 1);
    deliver(&time, &mut fabrics, &mut recs, 1, 2);
    assert!(recs.iter().all(|r| r.downs() == 0));
}

#[test]
fn a_higher_joiner_is_dialed_by_every_member() {
    join_through_one_member(3);
}

#[test]
fn a_lower_joiner_dials_every_member() {
    join_through_one_member(0);
}

/// Polls until the fabric closes the raw connection; returns the bytes it sent.
fn until_closed(
    time: &Time,
    s: &mut TcpStream,
    fabrics: &mut [TcpFabric],
    recs: &mut [Rec],
) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        poll_all(time, fabrics, recs);
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return got,
        }
        time.check("the fabric to close the connection");
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Malformed queries are refused and counted; a well-formed one is answered; the
/// members' session never notices.
#[test]
fn bad_queries_are_refused_and_sessions_stay_up() {
    let time = Time::new();
    let mut fabrics = vec![plain_fabric(1), plain_fabric(2)];
    let (a1, a2) = (fabrics[0].local_addr(), fabrics[1].local_addr());
    fabrics[0].add_peer(NodeId(2), a2).unwrap();
    fabrics[1].add_peer(NodeId(1), a1).unwrap();
    let mut recs = vec![Rec::default(), Rec::default()];
    while !all_up(&fabrics) {
        poll_all(&time, &mut fabrics, &mut recs);
        time.check("up");
        std::thread::sleep(Duration::from_micros(100));
    }
    let query = |from: u32, port: u16| {
        JoinQuery {
            from: NodeId(from),
            listen_port: port,
        }
        .to_header()
    };
    let with_body = {
        let mut h = query(9, 7000);
        h.payload_len = 8;
        [&h.to_bytes()[..], &[0u8; 8][..]].concat()
    };
    let wide_port = {
        let mut h = query(9, 7000);
        h.slot.0 = 70_000;
        h.to_bytes().to_vec()
    };
    let cases: Vec<(&str, Vec<u8>, CloseReason)> = vec![
        ("a query with a body", with_body, CloseReason::BadJoin),
        ("a port beyond 16 bits", wide_port, CloseReason::BadJoin),
        (
            "a query from the member's own id",
            query(2, 7000).to_bytes().to_vec(),
            CloseReason::BadJoin,
        ),
        (
            "a query claiming node 1, which is up, from another address",
            query(1, a1.port() ^ 1).to_bytes().to_vec(),
            CloseReason::BadJoin,
        ),
        (
            "a truncated query",
            query(9, 7000).to_bytes()[..40].to_vec(),
            CloseReason::Truncated,
        ),
        ("garbage", vec![b'x'; 100], CloseReason::BadMagic),
    ];
    for (what, bytes, reason) in cases {
        let before = fabrics[1].stats().closes.get(reason);
        let mut s = TcpStream::connect(a2).unwrap();
        s.set_nonblocking(true).unwrap();
        s.write_all(&bytes).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let got = until_closed(&time, &mut s, &mut fabrics, &mut recs);
        assert!(got.is_empty(), "{what}: no reply");
        assert_eq!(
            fabrics[1].stats().closes.get(reason),
            before + 1,
            "{what}: counts {:?}",
            fabrics[1].stats().closes.iter().collect::<Vec<_>>()
        );
        assert!(
            fabrics[1].peer_state(NodeId(9)).is_none(),
            "{what}: not learned"
        );
    }
    // A query with port 0 is answered without adding the asker.
    let mut s = TcpStream::connect(a2).unwrap();
    s.set_nonblocking(true).unwrap();
    s.write_all(&query(9, 0).to_bytes()).unwrap();
    let got = until_closed(&time, &mut s, &mut fabrics, &mut recs);
    let h = Header::parse(&got).unwrap();
    assert_eq!(check_join_reply(&h, NodeId(9)), Ok(2));
    assert_eq!(
        decode_members(&got[HEADER_LEN..]).unwrap(),
        vec![(NodeId(2), a2), (NodeId(1), a1)]
    );
    assert!(fabrics[1].peer_state(NodeId(9)).is_none());
    assert_eq!(fabrics[1].stats().closes.get(CloseReason::JoinAnswered), 1);

    // The session never noticed.
    assert!(all_up(&fabrics));
    assert!(recs.iter().all(|r| r.downs() == 0));
    deliver(&time, &mut fabrics, &mut recs, 0, 1);
    deliver(&time, &mut fabrics, &mut recs, 1, 0);
}

/// A member that answers garbage, or nothing, fails the join with a clear error.
#[test]
fn bad_replies_fail_the_join() {
    let serve = |reply: Vec<u8>| {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut q = [0u8; HEADER_LEN];
            s.read_exact(&mut q).unwrap();
            assert!(JoinQuery::is_join(&Header::parse(&q).unwrap()));
            let _ = s.write_all(&reply);
            // Hold the connection open until the client gives up.
            let _ = s.read(&mut q);
        });
        (addr, t)
    };
    let short = Duration::from_millis(300);
    let mut lying = JoinQuery {
        from: NodeId(2),
        listen_port: 1,
    }
    .to_header();
    lying.dst = NodeId(9);
    lying.key = 5000;
    lying.payload_len = 5000 * 24;
    let cases = [
        ("garbage", vec![b'x'; 64], "reply header"),
        ("a lying member count", lying.to_bytes().to_vec(), "members"),
        ("silence", Vec::new(), "reply"),
    ];
    for (what, reply, expect) in cases {
        let (addr, t) = serve(reply);
        match join(addr, NodeId(9), 7000, short, None) {
            Err(e @ TcpError::Join { .. }) => {
                assert!(e.to_string().contains(expect), "{what}: {e}");
            }
            other => panic!("{what}: {other:?}"),
        }
        t.join().unwrap();
    }
    // Nobody listening.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    assert!(join(addr, NodeId(9), 7000, short, None).is_err());
    let key = hamlyn_fabric::tcp::NodeKey::generate().unwrap();
    assert!(join(addr, NodeId(9), 7000, short, Some((&secret(), &key))).is_err());
}
