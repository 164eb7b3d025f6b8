//! Two engines joined by the real TCP fabric (loopback, 3 rails): writes striped across
//! rails, remote read and atomics, NACKs back to the sending terminus, an engine that
//! goes away, and strangers without the cluster secret refused while traffic flows.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{atomic_req, inline, read_req, reply_ticket, slot_with_perms, RawClient};
use hamlyn_core::RejectReason;
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_fabric::tcp::{tcp_cluster, ClusterSecret, TcpConfig};
use hamlyn_wire::control::perm;
use hamlyn_wire::request::{Gather, Payload};
use hamlyn_wire::rma::AtomicOp;
use hamlyn_wire::stats::FabricStats;
use hamlyn_wire::{NodeId, NotifKind};

fn engines(rails: usize) -> (EngineHandle, EngineHandle) {
    let (a, b, _) = engines_at(rails);
    (a, b)
}

/// Two engines over TCP, and the address engine 1's fabric listens on.
fn engines_at(rails: usize) -> (EngineHandle, EngineHandle, std::net::SocketAddr) {
    let mut cfg = TcpConfig::new(NodeId(0), "127.0.0.1:0".parse().unwrap());
    cfg.secret = Some(ClusterSecret::from_bytes([0x42; 32]));
    cfg.rails = rails;
    cfg.incarnation = 5;
    let mut fabrics = tcp_cluster(2, &cfg).unwrap();
    let fb = fabrics.pop().unwrap();
    let fa = fabrics.pop().unwrap();
    let b_addr = fb.local_addr();
    let start = |node: u32, f| {
        let mut c = EngineConfig::embedded();
        c.node = node;
        c.incarnation = 5;
        EngineHandle::start_with_fabric(c, Some(Box::new(f))).unwrap()
    };
    (start(0, fa), start(1, fb), b_addr)
}

/// Sends until the peer is up (sends before the TCP handshake completes come back
/// PeerDown or wait as Full inside the engine).
fn wait_peer_up(c: &RawClient, peer: u32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = c.stats();
        if stats.peer(peer).is_some_and(|p| p.up) {
            return;
        }
        assert!(Instant::now() < deadline, "peer never came up: {stats:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn tcp_between_engines_carries_writes_reads_atomics_and_refusals() {
    let (ea, eb) = engines(3);
    let mut a = RawClient::attach(ea.socket_path(), 1, 1, 1024);
    let mut b = RawClient::attach(eb.socket_path(), 1, 1, 1024);
    wait_peer_up(&a, 1);
    wait_peer_up(&b, 0);
    let (bslot, bkey, bregion) =
        slot_with_perms(&b, 4 << 20, 4, perm::WRITE | perm::READ | perm::ATOMIC);
    let (aslot, akey, aregion) = slot_with_perms(&a, 1 << 20, 4, perm::WRITE);
    a.open(0, 0);

    // 4 MiB from a send area: 64 packets of 64 KiB striped over 3 rails, one notification.
    let (src_area, src) = a.area(4 << 20);
    let pattern: Vec<u8> = (0..(4u32 << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    src.write(0, &pattern).unwrap();
    let mut req = inline(1, bslot, bkey, 1, 0, b"", 7);
    let mut list = [Gather::default(); 5];
    list[0] = Gather {
        area: src_area,
        offset: 0,
        len: pattern.len() as u64,
    };
    req.payload = Payload::Gather { list, count: 1 };
    let p = a.push(0, req).unwrap();
    let n = b.wait_notif(0).unwrap();
    assert_eq!(
        (n.kind(), n.word.get(), n.src_node.get()),
        (Some(NotifKind::Message), 7, 0)
    );
    let mut got = vec![0u8; pattern.len()];
    bregion.read(0, &mut got).unwrap();
    assert!(got == pattern, "4 MiB byte-exact over TCP");
    a.wait_finished(0, p + 1);
    assert!(a.errors().is_empty());

    // Remote read back of 1 MiB - 16 from node 1 into node 0.
    let rt = reply_ticket(&a, aslot, akey, 1 << 20);
    a.push(0, read_req(1, bslot, bkey, 16, (1 << 20) - 16, rt, 0))
        .unwrap();
    assert_eq!(a.wait_notif(0).unwrap().kind(), Some(NotifKind::ReadDone));
    let mut back = vec![0u8; (1 << 20) - 16];
    aregion.read(0, &mut back).unwrap();
    assert!(
        back[..] == pattern[16..1 << 20],
        "remote read byte-exact over TCP"
    );

    // Compare-and-swap over TCP.
    bregion.write(8, &41u64.to_le_bytes()).unwrap();
    a.push(
        0,
        atomic_req(1, bslot, bkey, 8, AtomicOp::CompareSwap, 41, 42, rt, 0),
    )
    .unwrap();
    let n = a.wait_notif(0).unwrap();
    assert_eq!((n.kind(), n.word.get()), (Some(NotifKind::AtomicDone), 41));
    let mut w = [0u8; 8];
    bregion.read(8, &mut w).unwrap();
    assert_eq!(u64::from_le_bytes(w), 42);

    // A forged key: the remote NACK fails the request on its terminus.
    let p = a
        .push(0, inline(1, bslot, bkey ^ 3, 0, 0, b"forged", 9))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let reason = loop {
        if let Some(e) = a.errors().into_iter().find(|e| u64::from(e.seq) == p) {
            break RejectReason::from_code(u64::from(e.status));
        }
        assert!(Instant::now() < deadline, "no NACK came back");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(reason, Some(RejectReason::BadKey));

    // The fabric's own counters are in the engine's stats.
    let stats = a.stats();
    assert!(
        matches!(&stats.fabric, Some(FabricStats::Tcp(t)) if t.rails == 3),
        "{stats:?}"
    );

    // Engine 1 goes away: node 0 sees the peer down and sends to it fail.
    drop(b);
    eb.stop().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = a.stats();
        if stats.peer(1).is_some_and(|p| !p.up) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "peer loss never noticed: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let p = a
        .push(0, inline(1, bslot, bkey, 0, 0, b"gone", 10))
        .unwrap();
    a.wait_finished(0, p + 1);
    let errs = a.errors();
    assert_eq!(
        errs.iter()
            .find(|e| u64::from(e.seq) == p)
            .and_then(|e| RejectReason::from_code(u64::from(e.status))),
        Some(RejectReason::PeerDown)
    );
}

/// Issue 16: a stranger on node 1's port with a HELLO copied in clear (claiming node 0,
/// the highest incarnation there is, a new session) or a membership query is refused
/// before any frame and counted; node 0's session with node 1 is undisturbed and messages
/// keep flowing.
#[test]
fn strangers_without_the_secret_cannot_take_a_node_over() {
    use hamlyn_fabric::tcp::frame::{Hello, JoinQuery};
    use hamlyn_wire::NodeId;
    use std::io::{Read, Write};

    let (ea, eb, b_addr) = engines_at(2);
    let mut a = RawClient::attach(ea.socket_path(), 1, 1, 1024);
    let mut b = RawClient::attach(eb.socket_path(), 1, 1, 1024);
    wait_peer_up(&a, 1);
    wait_peer_up(&b, 0);
    let (bslot, bkey, _bregion) = slot_with_perms(&b, 4096, 4, perm::WRITE);
    a.open(0, 0);
    let hello = Hello {
        from: NodeId(0),
        to: NodeId(1),
        incarnation: u32::MAX,
        session: 1 << 40,
        rail: 0,
        rails: 2,
    };
    let query = JoinQuery {
        from: NodeId(0),
        listen_port: 9,
    };
    for bytes in [hello.to_header().to_bytes(), query.to_header().to_bytes()] {
        let mut s = std::net::TcpStream::connect(b_addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&bytes).unwrap();
        let mut answer = [0u8; 64];
        assert!(
            !matches!(s.read(&mut answer), Ok(n) if n > 0),
            "a stranger gets no answer"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = b.stats();
        let refused = match &stats.fabric {
            Some(FabricStats::Tcp(t)) => t.auth_failures,
            _ => 0,
        };
        if refused >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "strangers not counted: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Node 0 is still up at its own incarnation on node 1, and messages flow.
    let stats = b.stats();
    let peer = stats.peer(0).unwrap();
    assert!(peer.up);
    assert_eq!(peer.incarnation, 5);
    for tag in 0..32u64 {
        a.push(0, inline(1, bslot, bkey, 1, 0, b"still here", tag))
            .unwrap();
        let n = b.wait_notif(0).unwrap();
        assert_eq!((n.kind(), n.word.get()), (Some(NotifKind::Message), tag));
    }
    assert!(a.errors().is_empty());
}
