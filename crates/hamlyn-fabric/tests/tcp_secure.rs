//! Authenticated links (issue 16): what an attacker who reaches a listener, or sits on
//! the path, can do to two fabrics that share a cluster secret — and what insecure
//! nodes still do.
//!
//! Real sockets on loopback; a small forwarding proxy plays the man in the middle
//! (recording, or flipping one byte). Every loop is bounded by a wall-clock deadline that
//! only turns a hang into a failure; no test asserts how long anything took.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]
#![allow(
    clippy::disallowed_types,
    reason = "stop flags and a recording shared with proxy threads; hamlyn-fabric does not depend on hamlyn-shm's atomics facade"
)]

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hamlyn_core::Instant;
use hamlyn_fabric::tcp::frame::Hello;
use hamlyn_fabric::tcp::secure::{Cipher, Link, Opened, MAX_PLAIN};
use hamlyn_fabric::tcp::{
    join, tcp_cluster, CloseReason, ClusterSecret, NodeKey, PeerState, Roster, TcpConfig, TcpFabric,
};
use hamlyn_fabric::{Fabric, FabricError, Landing, PacketSink, PeerEvent, SharedBytesMut};
use hamlyn_wire::stats::FabricStats;
use hamlyn_wire::{Flags, Header, NodeId, Op, RequestId, SlotId};

const DEADLINE: Duration = Duration::from_secs(20);

#[derive(Default)]
struct Rec {
    packets: Vec<(NodeId, Header, Vec<u8>)>,
    events: Vec<PeerEvent>,
    landing: BTreeMap<u64, Vec<u8>>,
}

impl PacketSink for Rec {
    fn on_header(&mut self, _: NodeId, h: &Header, _: &[u8]) -> Landing {
        self.landing
            .insert(h.request.to_u64(), vec![0; h.payload_len as usize]);
        Landing::Accept
    }
    fn payload_buf(&mut self, h: &Header) -> SharedBytesMut<'_> {
        SharedBytesMut::from(&mut self.landing.get_mut(&h.request.to_u64()).unwrap()[..])
    }
    fn on_payload(&mut self, from: NodeId, h: &Header, _: &[u8]) {
        let p = self.landing.remove(&h.request.to_u64()).unwrap();
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

fn secret(b: u8) -> ClusterSecret {
    ClusterSecret::from_bytes([b; 32])
}

/// Node `node` on loopback with `secret` (`None`: `danger_insecure`), one rail, long
/// heartbeats (so the only records on the wire are the ones a test sends).
fn fabric(node: u32, secret: Option<ClusterSecret>) -> TcpFabric {
    TcpFabric::new(config(node, secret)).unwrap()
}

/// [`fabric`]'s configuration.
fn config(node: u32, secret: Option<ClusterSecret>) -> TcpConfig {
    let mut c = TcpConfig::new(NodeId(node), ([127, 0, 0, 1], 0).into());
    c.rails = 1;
    c.peer_timeout = Duration::from_secs(30);
    c.heartbeat_interval = Duration::from_secs(10);
    c.reconnect_interval = Duration::from_millis(10);
    c.danger_insecure = secret.is_none();
    c.secret = secret;
    c
}

fn poll(time: &Time, f: &mut [&mut TcpFabric], r: &mut [Rec]) {
    for (f, r) in f.iter_mut().zip(r.iter_mut()) {
        f.poll(time.now(), r, 64).unwrap();
    }
    std::thread::sleep(Duration::from_micros(200));
}

fn up(f: &TcpFabric, peer: u32) -> bool {
    matches!(f.peer_state(NodeId(peer)), Some(PeerState::Up { .. }))
}

fn until_up(time: &Time, a: &mut TcpFabric, b: &mut TcpFabric, r: &mut [Rec]) {
    let (na, nb) = (a.local().0, b.local().0);
    while !(up(a, nb) && up(b, na)) {
        poll(time, &mut [a, b], r);
        time.check("the session to come up");
    }
}

fn packet(src: u32, dst: u32, seq: u32) -> (Header, Vec<u8>) {
    let mut h = Header::new(Op::Write);
    h.flags = Flags::FIRST | Flags::LAST;
    h.src = NodeId(src);
    h.dst = NodeId(dst);
    h.slot = SlotId(3);
    h.key = 0x5ec2_e7ee_0000_0000 | u64::from(seq);
    h.payload_len = 100;
    h.request = RequestId { terminus: 1, seq };
    let p = (0..100u32).map(|i| (i + seq) as u8).collect();
    (h, p)
}

/// Sends packet `seq` from `a` to `b` and polls until `b` has it, byte-exact.
fn deliver(time: &Time, a: &mut TcpFabric, b: &mut TcpFabric, r: &mut [Rec], seq: u32) {
    let (h, p) = packet(a.local().0, b.local().0, seq);
    loop {
        match a.send(time.now(), &h, &[], &[p[..].into()]) {
            Ok(()) => break,
            Err(FabricError::Full) => poll(time, &mut [a, b], r),
            Err(e) => panic!("send: {e}"),
        }
        time.check("room to send");
    }
    while !r[1].packets.iter().any(|(_, g, _)| g.request.seq == seq) {
        poll(time, &mut [a, b], r);
        time.check("the packet");
    }
    let (from, got, payload) = r[1]
        .packets
        .iter()
        .find(|(_, g, _)| g.request.seq == seq)
        .unwrap();
    assert_eq!((*from, got, payload), (a.local(), &h, &p));
}

fn auth_failures(f: &TcpFabric) -> u64 {
    f.stats().closes.get(CloseReason::AuthFailed)
}

/// Polls until `s` is closed by the fabric; returns what the fabric sent on it.
fn until_closed(
    time: &Time,
    s: &mut TcpStream,
    f: &mut [&mut TcpFabric],
    r: &mut [Rec],
) -> Vec<u8> {
    s.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        poll(time, f, r);
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return got,
        }
        time.check("the fabric to close the connection");
    }
}

/// A forwarding proxy to `upstream`: records what clients send on the first connection,
/// and flips the byte at offset `flip` (once, on the first connection that gets that
/// far) of the client-to-server stream.
struct Proxy {
    addr: SocketAddr,
    recorded: Arc<Mutex<Vec<u8>>>,
    flipped: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    fn start(upstream: SocketAddr, flip: Option<usize>) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let flipped = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(AtomicUsize::new(0));
        let (rec, fl, st) = (recorded.clone(), flipped.clone(), stop.clone());
        std::thread::spawn(move || {
            // Acquire: pairs with the Release store in `Drop`.
            while !st.load(Ordering::Acquire) {
                let Ok((client, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                };
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                // AcqRel: only this thread counts connections; the ordering is moot.
                let first = conns.fetch_add(1, Ordering::AcqRel) == 0;
                client.set_nonblocking(false).unwrap();
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (rec, fl) = (rec.clone(), fl.clone());
                std::thread::spawn(move || {
                    pump(client, server, |at, bytes| {
                        if first {
                            rec.lock().unwrap().extend_from_slice(bytes);
                        }
                        if let Some(f) = flip {
                            if (at..at + bytes.len()).contains(&f)
                                // AcqRel: pairs with the test's Acquire load
                                // of `flipped` (and the other pump's swap).
                                && !fl.swap(true, Ordering::AcqRel)
                            {
                                bytes[f - at] ^= 0x01;
                            }
                        }
                    })
                });
                std::thread::spawn(move || pump(s2, c2, |_, _| {}));
            }
        });
        Proxy {
            addr,
            recorded,
            flipped,
            stop,
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Release: pairs with the accepting thread's Acquire load.
        self.stop.store(true, Ordering::Release);
    }
}

/// Copies `from` to `to` until either closes; `tap` sees (and may change) each chunk
/// with its offset in the stream.
fn pump(mut from: TcpStream, mut to: TcpStream, mut tap: impl FnMut(usize, &mut [u8])) {
    let mut buf = [0u8; 16 << 10];
    let mut at = 0;
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                tap(at, &mut buf[..n]);
                at += n;
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

/// A rogue client that copies a HELLO (claiming the real dialer's id, and the highest
/// incarnation there is) is refused before any frame is read, and counted; the real
/// session never notices.
#[test]
fn a_forged_hello_is_refused_and_the_session_goes_on() {
    let time = Time::new();
    let mut a = fabric(0, Some(secret(1)));
    let mut b = fabric(1, Some(secret(1)));
    a.add_peer(NodeId(1), b.local_addr()).unwrap();
    b.add_peer(NodeId(0), a.local_addr()).unwrap();
    let mut r = [Rec::default(), Rec::default()];
    until_up(&time, &mut a, &mut b, &mut r);
    deliver(&time, &mut a, &mut b, &mut r, 1);
    let incarnation = b.peer_state(NodeId(0));

    for (what, session) in [("a forged HELLO", 99u64), ("a copy of the real one", 1)] {
        let before = auth_failures(&b);
        let hello = Hello {
            from: NodeId(0),
            to: NodeId(1),
            incarnation: u32::MAX,
            session,
            rail: 0,
            rails: 1,
        };
        let mut s = TcpStream::connect(b.local_addr()).unwrap();
        s.write_all(&hello.to_header().to_bytes()).unwrap();
        let got = until_closed(&time, &mut s, &mut [&mut a, &mut b], &mut r);
        assert!(got.is_empty(), "{what}: nothing is answered");
        assert_eq!(auth_failures(&b), before + 1, "{what}: counted");
    }
    let Some(FabricStats::Tcp(t)) = b.fabric_stats() else {
        panic!("tcp stats")
    };
    assert!(t.authenticated);
    assert_eq!(t.auth_failures, 2);
    // Undisturbed: same incarnation, no Down, traffic both ways.
    assert_eq!(b.peer_state(NodeId(0)), incarnation);
    deliver(&time, &mut a, &mut b, &mut r, 2);
    let mut r2 = [std::mem::take(&mut r[1]), std::mem::take(&mut r[0])];
    deliver(&time, &mut b, &mut a, &mut r2, 3);
    assert_eq!(r2[0].downs() + r2[1].downs(), 0);
}

/// Everything the real dialer sent on its first connection (its handshake message and
/// its HELLO record), replayed on a new connection, is refused at its first message: the
/// listener has seen that ephemeral key, and answers nothing (without that memory, the
/// acceptor's fresh ephemeral key would make other session keys, and the copied HELLO
/// record would not open: `secure.rs`'s tests).
#[test]
fn a_replayed_handshake_is_refused() {
    let time = Time::new();
    let mut a = fabric(0, Some(secret(2)));
    let mut b = fabric(1, Some(secret(2)));
    let proxy = Proxy::start(b.local_addr(), None);
    a.add_peer(NodeId(1), proxy.addr).unwrap();
    b.add_peer(NodeId(0), a.local_addr()).unwrap();
    let mut r = [Rec::default(), Rec::default()];
    until_up(&time, &mut a, &mut b, &mut r);
    deliver(&time, &mut a, &mut b, &mut r, 1);
    let recorded = proxy.recorded.lock().unwrap().clone();
    assert!(
        recorded.len() > 66 + 82 + 82,
        "handshake and HELLO recorded"
    );

    let before = auth_failures(&b);
    let mut s = TcpStream::connect(b.local_addr()).unwrap();
    s.write_all(&recorded).unwrap();
    let got = until_closed(&time, &mut s, &mut [&mut a, &mut b], &mut r);
    assert!(got.is_empty(), "a replayed first message gets no answer");
    assert_eq!(auth_failures(&b), before + 1);
    assert!(up(&b, 0) && up(&a, 1));
    deliver(&time, &mut a, &mut b, &mut r, 2);
    assert_eq!(
        r[0].downs() + r[1].downs(),
        0,
        "the real session never noticed"
    );
}

/// A node with another secret never comes up: every attempt is refused and counted on
/// the acceptor's side (and the dialer sees its handshake fail).
#[test]
fn a_wrong_secret_is_refused() {
    let time = Time::new();
    let mut a = fabric(0, Some(secret(3)));
    let mut b = fabric(1, Some(secret(4)));
    a.add_peer(NodeId(1), b.local_addr()).unwrap();
    b.add_peer(NodeId(0), a.local_addr()).unwrap();
    let mut r = [Rec::default(), Rec::default()];
    while auth_failures(&b) < 3 {
        poll(&time, &mut [&mut a, &mut b], &mut r);
        time.check("refused handshakes");
    }
    assert!(!up(&a, 1) && !up(&b, 0));
    assert!(r[1].packets.is_empty());
    assert!(a.peer_stats(NodeId(1)).unwrap().dial_failures >= 1);
}

/// Nodes configured with different ciphers talk, both ways: each link is in its
/// dialer's cipher, and an acceptor takes either.
#[test]
fn nodes_with_different_ciphers_talk() {
    let time = Time::new();
    let mut ca = config(0, Some(secret(6)));
    ca.cipher = Cipher::ChaCha20Poly1305;
    let mut a = TcpFabric::new(ca).unwrap();
    let mut cb = config(1, Some(secret(6)));
    cb.rails = 2;
    assert_eq!(cb.cipher, Cipher::Aes256Gcm, "the default");
    let mut b = TcpFabric::new(cb).unwrap();
    a.add_peer(NodeId(1), b.local_addr()).unwrap();
    b.add_peer(NodeId(0), a.local_addr()).unwrap();
    let mut r = [Rec::default(), Rec::default()];
    until_up(&time, &mut a, &mut b, &mut r);
    deliver(&time, &mut a, &mut b, &mut r, 1);
    let mut r2 = [Rec::default(), Rec::default()];
    deliver(&time, &mut b, &mut a, &mut r2, 2);
    assert_eq!(auth_failures(&a) + auth_failures(&b), 0);
}

/// A man in the middle flips one byte of a data record: the receiver refuses the record
/// (counted as a refused frame), delivers nothing of it, and the session is torn down
/// and comes back; later packets arrive intact.
#[test]
fn a_frame_altered_in_flight_is_refused_and_counted() {
    let time = Time::new();
    let mut a = fabric(0, Some(secret(5)));
    let mut b = fabric(1, Some(secret(5)));
    // Dialer to acceptor: first handshake message (66 bytes), third (82), HELLO record
    // (82), then the first data record: its prefix at 230, its ciphertext from 232.
    let proxy = Proxy::start(b.local_addr(), Some(232 + 30));
    a.add_peer(NodeId(1), proxy.addr).unwrap();
    b.add_peer(NodeId(0), a.local_addr()).unwrap();
    let mut r = [Rec::default(), Rec::default()];
    until_up(&time, &mut a, &mut b, &mut r);
    let (h, p) = packet(0, 1, 1);
    a.send(time.now(), &h, &[], &[p[..].into()]).unwrap();
    while b.stats().closes.get(CloseReason::BadRecord) == 0 {
        poll(&time, &mut [&mut a, &mut b], &mut r);
        time.check("the altered record to be refused");
    }
    // Acquire: pairs with the pump's AcqRel swap.
    assert!(proxy.flipped.load(Ordering::Acquire));
    assert!(r[1].packets.is_empty(), "nothing of the altered frame");
    let Some(FabricStats::Tcp(t)) = b.fabric_stats() else {
        panic!("tcp stats")
    };
    assert_eq!(t.frames_refused, 1);
    // The session comes back (a new connection, not altered) and carries traffic.
    until_up(&time, &mut a, &mut b, &mut r);
    deliver(&time, &mut a, &mut b, &mut r, 2);
    assert!(r[1].packets.iter().all(|(_, g, _)| g.request.seq == 2));
}

/// Two `danger_insecure` nodes still talk.
#[test]
fn insecure_nodes_talk_to_each_other() {
    let time = Time::new();
    let mut a = fabric(0, None);
    let mut b = fabric(1, None);
    a.add_peer(NodeId(1), b.local_addr()).unwrap();
    b.add_peer(NodeId(0), a.local_addr()).unwrap();
    let mut r = [Rec::default(), Rec::default()];
    until_up(&time, &mut a, &mut b, &mut r);
    deliver(&time, &mut a, &mut b, &mut r, 1);
    let Some(FabricStats::Tcp(t)) = b.fabric_stats() else {
        panic!("tcp stats")
    };
    assert!(!t.authenticated);
}

/// A secure node refuses an insecure one, whichever dials.
#[test]
fn a_secure_node_refuses_an_insecure_one() {
    let time = Time::new();
    // The insecure node dials: its plain HELLO is no handshake message.
    let mut a = fabric(0, None);
    let mut b = fabric(1, Some(secret(6)));
    a.add_peer(NodeId(1), b.local_addr()).unwrap();
    b.add_peer(NodeId(0), a.local_addr()).unwrap();
    let mut r = [Rec::default(), Rec::default()];
    while auth_failures(&b) < 2 {
        poll(&time, &mut [&mut a, &mut b], &mut r);
        time.check("the insecure dialer to be refused");
    }
    assert!(!up(&a, 1) && !up(&b, 0));
    // The secure node dials: the insecure one sees no HELLO and closes.
    let mut a = fabric(0, Some(secret(6)));
    let mut b = fabric(1, None);
    a.add_peer(NodeId(1), b.local_addr()).unwrap();
    b.add_peer(NodeId(0), a.local_addr()).unwrap();
    let mut r = [Rec::default(), Rec::default()];
    while b.stats().closes.get(CloseReason::BadMagic) < 2 {
        poll(&time, &mut [&mut a, &mut b], &mut r);
        time.check("the secure dialer to be refused");
    }
    assert!(!up(&a, 1) && !up(&b, 0));
}

/// A fabric will not start without a secret unless told `danger_insecure`.
#[test]
fn no_secret_no_fabric() {
    let c = TcpConfig::new(NodeId(0), ([127, 0, 0, 1], 0).into());
    assert!(TcpFabric::new(c.clone()).is_err());
    let mut both = c;
    both.secret = Some(secret(7));
    both.danger_insecure = true;
    assert!(TcpFabric::new(both).is_err());
}

/// Seeds for the `link` and `roster` fuzz targets (`fuzz/fuzz_targets/`), written into
/// `$HAMLYN_FUZZ_SEEDS/link` and `.../roster` when that is set (`.ci/run` does);
/// otherwise nothing.
#[test]
fn write_fuzz_seeds() {
    let Some(dir) = std::env::var_os("HAMLYN_FUZZ_SEEDS") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir).join("link");
    std::fs::create_dir_all(&dir).unwrap();
    // The target's secret and keys.
    let s = secret(0x5e);
    let (dk, ak) = (
        NodeKey::from_private([0x11; 32]).unwrap(),
        NodeKey::from_private([0x22; 32]).unwrap(),
    );
    let (mut dialer, first) = Link::dialer(&s, &dk).unwrap();
    let mut acceptor = Link::acceptor(&s, &ak).unwrap();
    acceptor.push(&first);
    let mut out = vec![0; MAX_PLAIN];
    assert_eq!(acceptor.open(&mut out).unwrap(), Opened::Reply);
    let second = acceptor.take_handshake_out();
    dialer.push(&second);
    assert_eq!(dialer.open(&mut out).unwrap(), Opened::Secured);
    let third = dialer.take_handshake_out();
    let frame = packet(0, 1, 1).0.to_bytes();
    let files: [(&str, Vec<u8>); 5] = [
        ("stranger-first-message", [&[0, 7][..], &first].concat()),
        ("dialer-answer", [&[1, 5][..], &second].concat()),
        ("session", [&[2, 64, 0xff, 0xff][..], &frame].concat()),
        ("session-flipped", [&[2, 64, 40, 0][..], &frame].concat()),
        ("third-message", [&[3, 9][..], &third].concat()),
    ];
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    // The `roster` target's: a roster of two nodes with a comment.
    let roster = Roster::from_keys([(NodeId(1), dk.public()), (NodeId(2), ak.public())]);
    let dir = dir.with_file_name("roster");
    std::fs::create_dir_all(&dir).unwrap();
    let text = format!("# two nodes\n{}", roster.to_text());
    std::fs::write(dir.join("two-nodes"), text).unwrap();
}

/// What peers can make a node keep is bounded and freed: past `max_peers` an unknown
/// node is refused (and counted), and a peer learned because it dialed in is forgotten
/// a peer timeout after it went down.
#[test]
fn learned_peers_are_bounded_and_forgotten() {
    let time = Time::new();
    let mk = |node: u32, max_peers: usize, timeout: Duration| {
        let mut c = TcpConfig::new(NodeId(node), ([127, 0, 0, 1], 0).into());
        c.rails = 1;
        c.peer_timeout = timeout;
        c.heartbeat_interval = Duration::from_millis(100);
        c.reconnect_interval = Duration::from_millis(10);
        c.secret = Some(secret(8));
        c.max_peers = max_peers;
        TcpFabric::new(c).unwrap()
    };
    let mut b = mk(9, 1, Duration::from_secs(1));
    let mut a = mk(3, 4, Duration::from_secs(30));
    a.add_peer(NodeId(9), b.local_addr()).unwrap();
    let mut r = [Rec::default(), Rec::default()];
    // Node 3 is learned (the table had room for one).
    until_up(&time, &mut a, &mut b, &mut r);
    // Node 4 finds the table full: refused, counted, never learned.
    let mut c = mk(4, 4, Duration::from_secs(30));
    c.add_peer(NodeId(9), b.local_addr()).unwrap();
    let mut rc = [Rec::default(), Rec::default()];
    while b.stats().closes.get(CloseReason::TooManyPeers) == 0 {
        poll(&time, &mut [&mut c, &mut b], &mut rc);
        time.check("the peer past max_peers to be refused");
    }
    assert!(b.peer_state(NodeId(4)).is_none());
    drop(c);
    // Node 3 goes away: down, then forgotten.
    drop(a);
    while b.peer_state(NodeId(3)).is_some() {
        b.poll(time.now(), &mut r[1], 64).unwrap();
        std::thread::sleep(Duration::from_millis(1));
        time.check("the learned peer to be forgotten");
    }
    assert_eq!(b.stats().peers_forgotten, 1);
    assert!(r[1].downs() >= 1);
}

/// `tcp_cluster` gives a configuration without a secret a fresh one its fabrics share
/// (in-process clusters, tests and benchmarks need no secret file), and keeps a given
/// one or `danger_insecure`.
#[test]
fn an_in_process_cluster_shares_a_fresh_secret() {
    let time = Time::new();
    let mut c = TcpConfig::new(NodeId(0), ([127, 0, 0, 1], 0).into());
    c.rails = 1;
    let mut v = tcp_cluster(2, &c).unwrap();
    let (mut b, mut a) = (v.pop().unwrap(), v.pop().unwrap());
    assert!(a.config().secret.is_some());
    assert_eq!(a.config().secret, b.config().secret);
    let mut r = [Rec::default(), Rec::default()];
    until_up(&time, &mut a, &mut b, &mut r);
    deliver(&time, &mut a, &mut b, &mut r, 1);
    let again = tcp_cluster(1, &c).unwrap();
    assert_ne!(
        again[0].config().secret,
        a.config().secret,
        "fresh per cluster"
    );
    c.danger_insecure = true;
    assert!(tcp_cluster(1, &c).unwrap()[0].config().secret.is_none());
}

/// A member that holds the cluster secret but proves its own static key, claiming a
/// node whose key the listener pinned (node 0, up): its HELLO, with the highest
/// incarnation there is, is refused as an identity mismatch and counted; the real
/// session never notices. The real node, restarted with its key (a new incarnation),
/// comes back; restarted with another key, it is refused too.
#[test]
fn a_member_cannot_speak_for_another_node() {
    let time = Time::new();
    let ca = config(0, Some(secret(10)));
    let mut a = TcpFabric::new(ca.clone()).unwrap();
    let mut b = fabric(1, Some(secret(10)));
    a.add_peer(NodeId(1), b.local_addr()).unwrap();
    let mut r = [Rec::default(), Rec::default()];
    until_up(&time, &mut a, &mut b, &mut r);
    deliver(&time, &mut a, &mut b, &mut r, 1);
    assert_eq!(b.pinned_keys(), 1);
    let incarnation = b.peer_state(NodeId(0));
    let mismatches = |f: &TcpFabric| f.stats().closes.get(CloseReason::IdentityMismatch);

    // The member's HELLO as node 0, sent from a thread (the handshake blocks) while
    // the fabrics are polled here.
    let addr = b.local_addr();
    let member = std::thread::spawn(move || {
        let key = NodeKey::generate().unwrap();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        let (mut link, first) = Link::dialer(&secret(10), &key).unwrap();
        s.write_all(&first).unwrap();
        let mut out = vec![0u8; MAX_PLAIN];
        while link.open(&mut out).unwrap() != Opened::Secured {
            let k = s.read(link.read_buf()).unwrap();
            assert!(k > 0, "the node closed the handshake");
            link.filled(k);
        }
        let hello = Hello {
            from: NodeId(0),
            to: NodeId(1),
            incarnation: u32::MAX,
            session: 99,
            rail: 0,
            rails: 1,
        };
        let mut wire = link.take_handshake_out();
        wire.extend_from_slice(link.seal_bytes(&hello.to_header().to_bytes()).unwrap());
        s.write_all(&wire).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        rest
    });
    while mismatches(&b) == 0 {
        poll(&time, &mut [&mut a, &mut b], &mut r);
        time.check("the member's claim to be refused");
    }
    assert!(member.join().unwrap().is_empty(), "no HELLO reply");
    assert_eq!(b.peer_state(NodeId(0)), incarnation, "not declared stale");
    deliver(&time, &mut a, &mut b, &mut r, 2);
    let mut r2 = [std::mem::take(&mut r[1]), std::mem::take(&mut r[0])];
    deliver(&time, &mut b, &mut a, &mut r2, 3);
    assert_eq!(
        r2[0].downs() + r2[1].downs(),
        0,
        "the real session never noticed"
    );
    let mut r = [std::mem::take(&mut r2[1]), std::mem::take(&mut r2[0])];

    // Node 0 restarts with another key: refused, counted, never up.
    let key = a.config().key.clone();
    assert!(key.is_some());
    drop(a);
    let mut other = ca.clone();
    other.incarnation = 2;
    other.key = None;
    let mut a = TcpFabric::new(other).unwrap();
    a.add_peer(NodeId(1), b.local_addr()).unwrap();
    let before = mismatches(&b);
    while mismatches(&b) < before + 2 {
        poll(&time, &mut [&mut a, &mut b], &mut r);
        time.check("a restart under another key to be refused");
    }
    assert!(!up(&a, 1));
    drop(a);
    // With its own key: up with the new incarnation.
    let mut same = ca;
    same.incarnation = 3;
    same.key = key;
    let mut a = TcpFabric::new(same).unwrap();
    a.add_peer(NodeId(1), b.local_addr()).unwrap();
    while b.peer_state(NodeId(0)) != Some(PeerState::Up { incarnation: 3 }) || !up(&a, 1) {
        poll(&time, &mut [&mut a, &mut b], &mut r);
        time.check("the restarted node to come back");
    }
    deliver(&time, &mut a, &mut b, &mut r, 4);
}

/// With a roster, only the listed nodes with their keys: an impostor of a listed node
/// is refused by the node it dials, a listed node refuses to speak to an impostor it
/// dialed, and an unlisted node's membership query is refused, all counted.
#[test]
fn a_roster_admits_only_its_nodes() {
    let time = Time::new();
    let mut c = config(0, Some(secret(11)));
    c.roster = Some(Roster::default());
    let mut v = tcp_cluster(2, &c).unwrap();
    let (mut b, mut a) = (v.pop().unwrap(), v.pop().unwrap());
    let roster = a.config().roster.clone().unwrap();
    assert_eq!(roster.len(), 2);
    assert_eq!(
        roster.get(NodeId(1)),
        b.config().key.as_ref().map(NodeKey::public)
    );
    let mut r = [Rec::default(), Rec::default()];
    until_up(&time, &mut a, &mut b, &mut r);
    deliver(&time, &mut a, &mut b, &mut r, 1);
    assert_eq!(b.pinned_keys(), 0, "a roster pins nothing");
    let mismatches = |f: &TcpFabric| f.stats().closes.get(CloseReason::IdentityMismatch);

    // An impostor of node 0 (the secret, another key, the roster) cannot even start:
    // the roster does not list it with its key.
    let mut impostor = config(0, Some(secret(11)));
    impostor.roster = Some(roster.clone());
    assert!(TcpFabric::new(impostor.clone()).is_err());
    // Without a roster of its own it starts, dials node 1 and is refused.
    impostor.roster = None;
    impostor.incarnation = u32::MAX;
    let mut i0 = TcpFabric::new(impostor).unwrap();
    i0.add_peer(NodeId(1), b.local_addr()).unwrap();
    let mut ri = [Rec::default(), Rec::default()];
    while mismatches(&b) == 0 {
        poll(&time, &mut [&mut i0, &mut b], &mut ri);
        time.check("the impostor of node 0 to be refused");
    }
    drop(i0);
    // Node 0 dials an impostor of node 1: it refuses the key it is shown.
    let mut i1 = fabric(1, Some(secret(11)));
    a.add_peer(NodeId(1), i1.local_addr()).unwrap();
    b.shutdown();
    while mismatches(&a) == 0 {
        poll(&time, &mut [&mut a, &mut i1], &mut r);
        time.check("node 0 to refuse the impostor it dialed");
    }
    assert!(!up(&i1, 0), "the impostor never saw node 0 come up");
    // An unlisted node's membership query: refused, unanswered.
    let addr = a.local_addr();
    let asker = std::thread::spawn(move || {
        let key = NodeKey::generate().unwrap();
        join(addr, NodeId(7), 7000, DEADLINE, Some((&secret(11), &key)))
    });
    let before = mismatches(&a);
    while mismatches(&a) == before {
        poll(&time, &mut [&mut a, &mut i1], &mut r);
        time.check("the unlisted node's query to be refused");
    }
    assert!(asker.join().unwrap().is_err());
    assert!(a.peer_state(NodeId(7)).is_none());
}
