//! Issue 16 part 4, "nothing reported sent is lost silently": two engines over real TCP
//! on loopback stream writes to each other in both directions while the link between
//! them is cut for 5 s (a proxy that swallows every byte, as a pulled cable would), or
//! while one engine is stopped. Every request must end either delivered (`Sent`, and the
//! receiver's slot holds its bytes, checked byte by byte) or `Failed(PeerDown)`; a
//! request reported sent and missing at the receiver fails the test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::RawClient;
use hamlyn_core::RejectReason;
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_fabric::tcp::{ClusterSecret, TcpConfig, TcpFabric};
use hamlyn_shm::region::ShmRegion;
use hamlyn_wire::control::{mode, perm, Reply, Request};
use hamlyn_wire::request::{Gather, Payload, RequestOp, SendRequest};
use hamlyn_wire::NodeId;

/// Room per message in the slots and send areas (every message is one packet).
const ROOM: usize = 16 << 10;

/// A TCP forwarder to one address that can *cut* the link: while cut, it reads and
/// discards every byte both ways and closes new connections at once, so each end sees
/// silence (no reset), as with a pulled cable, until the peer timeout takes the session
/// down.
struct Proxy {
    addr: SocketAddr,
    cut: Arc<Mutex<bool>>,
    stop: Arc<Mutex<bool>>,
}

impl Proxy {
    fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(Mutex::new(false));
        let stop = Arc::new(Mutex::new(false));
        let (c, s) = (cut.clone(), stop.clone());
        std::thread::spawn(move || {
            while !*s.lock().unwrap() {
                match listener.accept() {
                    Ok((inbound, _)) => {
                        if *c.lock().unwrap() {
                            drop(inbound);
                            continue;
                        }
                        inbound.set_nonblocking(false).unwrap();
                        let Ok(outbound) = TcpStream::connect(target) else {
                            continue;
                        };
                        for (from, to) in [
                            (inbound.try_clone().unwrap(), outbound.try_clone().unwrap()),
                            (outbound, inbound),
                        ] {
                            let c = c.clone();
                            std::thread::spawn(move || pump(from, to, &c));
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(_) => return,
                }
            }
        });
        Proxy { addr, cut, stop }
    }

    fn set_cut(&self, cut: bool) {
        *self.cut.lock().unwrap() = cut;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        *self.stop.lock().unwrap() = true;
    }
}

/// Copies `from` to `to` (discarding while the link is cut) until either end closes.
fn pump(mut from: TcpStream, mut to: TcpStream, cut: &Mutex<bool>) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if *cut.lock().unwrap() {
                    continue;
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

fn tcp_config(node: u32, peer: (u32, SocketAddr)) -> TcpConfig {
    let mut cfg = TcpConfig::new(NodeId(node), "127.0.0.1:0".parse().unwrap());
    cfg.secret = Some(ClusterSecret::from_bytes([0x16; 32]));
    cfg.rails = 2;
    cfg.incarnation = 5;
    cfg.peers = vec![(NodeId(peer.0), peer.1)];
    cfg
}

fn engine(node: u32, fabric: TcpFabric) -> EngineHandle {
    let mut c = EngineConfig::embedded();
    c.node = node;
    c.incarnation = 5;
    EngineHandle::start_with_fabric(c, Some(Box::new(fabric))).unwrap()
}

/// Engines 0 and 1; node 0 dials node 1 through a proxy when `proxied`.
fn engines(proxied: bool) -> (EngineHandle, EngineHandle, Option<Proxy>) {
    let unused: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let fb = TcpFabric::new(tcp_config(1, (0, unused))).unwrap();
    let proxy = proxied.then(|| Proxy::start(fb.local_addr()));
    let to_b = proxy.as_ref().map_or(fb.local_addr(), |p| p.addr);
    let fa = TcpFabric::new(tcp_config(0, (1, to_b))).unwrap();
    (engine(0, fa), engine(1, fb), proxy)
}

fn wait_peer(c: &RawClient, peer: u32, up: bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = c.stats();
        if stats.peer(peer).is_some_and(|p| p.up == up) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "peer {peer} never up={up}: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One side of a stream: a client, the slot it receives into, the send area its
/// messages come from.
struct Side {
    c: RawClient,
    slot: u32,
    key: u64,
    inbox: Arc<ShmRegion>,
    src_area: u32,
    /// Per pushed request: its offset and length.
    sent: Vec<(u64, usize)>,
}

fn message_len(i: usize) -> usize {
    1 + (i * 7919) % ROOM
}

fn byte(dir: u8, i: usize, j: usize) -> u8 {
    (((i * 131 + j * 7) as u32).wrapping_mul(2_654_435_761) >> 24) as u8 ^ dir | 1
}

fn side(path: &std::path::Path, dir: u8, n: usize) -> Side {
    let c = RawClient::attach(path, 1, 1, 1024);
    let (area, inbox) = c.area(n * ROOM);
    let (meta_area, _) = c.area(128 * 4);
    let reply = c.call(Request::CreateSlot {
        area,
        base: 0,
        len: (n * ROOM) as u64,
        mode: mode::NORMAL,
        perms: perm::WRITE,
        meta_area,
        meta_base: 0,
        meta_count: 4,
        queue: 0,
    });
    let Reply::Slot { slot, key } = reply else {
        panic!("{reply:?}")
    };
    let (src_area, src) = c.area(n * ROOM);
    for i in 0..n {
        let bytes: Vec<u8> = (0..message_len(i)).map(|j| byte(dir, i, j)).collect();
        src.write(i * ROOM, &bytes).unwrap();
    }
    c.open(0, 0);
    Side {
        c,
        slot,
        key,
        inbox,
        src_area,
        sent: Vec::new(),
    }
}

/// Pushes message `i` from `s` to node `dst`'s slot (`slot`, `key`); false if the
/// terminus ring is full.
fn push(s: &mut Side, dst: u32, slot: u32, key: u64, i: usize) -> bool {
    let len = message_len(i);
    let mut list = [Gather::default(); 5];
    list[0] = Gather {
        area: s.src_area,
        offset: (i * ROOM) as u64,
        len: len as u64,
    };
    let req = SendRequest {
        op: RequestOp::Write,
        seq: 0,
        dst_node: dst,
        slot,
        meta_index: 1,
        key,
        offset: (i * ROOM) as u64,
        y: 0,
        incarnation: 0,
        word: i as u64,
        flags: 0,
        meta: [0; 60],
        meta_len: 0,
        payload: Payload::Gather { list, count: 1 },
    };
    match s.c.push(0, req) {
        Ok(pos) => {
            assert_eq!(pos as usize, s.sent.len());
            s.sent.push(((i * ROOM) as u64, len));
            true
        }
        Err(_) => false,
    }
}

/// What became of a side's requests.
#[derive(Debug, Default)]
struct Outcome {
    delivered: usize,
    failed: usize,
    failed_but_delivered: usize,
    sent_and_missing: Vec<usize>,
}

/// Waits until every request `s` pushed finished, and then until each one is either
/// failed or has arrived at the receiver (`Sent` says the fabric took it: its bytes may
/// still be on the way); what is neither after a bound is reported sent and missing.
fn outcome(s: &mut Side, pushed: u64, receiver: &ShmRegion, dir: u8) -> Outcome {
    // Errors are drained while waiting: a full error ring holds the terminus.
    let mut failed: BTreeMap<u64, u16> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let done = s.c.finished(0) >= pushed;
        for e in s.c.errors() {
            failed.insert(u64::from(e.seq), e.status);
        }
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {pushed} finished",
            s.c.finished(0)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let arrived = |offset: u64, len: usize| {
        let i = offset as usize / ROOM;
        let mut got = vec![0u8; len];
        receiver.read(offset as usize, &mut got).unwrap();
        got.iter().enumerate().all(|(j, &b)| b == byte(dir, i, j))
    };
    // Each request ends delivered or failed; a bounded wait for those still neither.
    let mut open: Vec<usize> = (0..s.sent.len()).collect();
    for _ in 0..2000 {
        for e in s.c.errors() {
            failed.insert(u64::from(e.seq), e.status);
        }
        open.retain(|&pos| {
            let (offset, len) = s.sent[pos];
            !failed.contains_key(&(pos as u64)) && !arrived(offset, len)
        });
        if open.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut o = Outcome::default();
    for (pos, &(offset, len)) in s.sent.iter().enumerate() {
        let got = arrived(offset, len);
        match failed.get(&(pos as u64)) {
            Some(&status) => {
                assert_eq!(
                    RejectReason::from_code(u64::from(status)),
                    Some(RejectReason::PeerDown),
                    "request {pos} failed for another reason"
                );
                o.failed += 1;
                o.failed_but_delivered += usize::from(got);
            }
            None if got => o.delivered += 1,
            None => o.sent_and_missing.push(pos),
        }
    }
    o
}

/// Pushes message `i` both ways, waiting (bounded) for ring room.
fn push_both(a: &mut Side, b: &mut Side, i: usize) {
    let (bs, bk, as_, ak) = (b.slot, b.key, a.slot, a.key);
    for _ in 0..100_000 {
        if push(a, 1, bs, bk, i) {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    for _ in 0..100_000 {
        if push(b, 0, as_, ak, i) {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// A 5 s cut in the middle of two streams (longer than the 3 s peer timeout: both
/// sessions go down and come back). Every request ends delivered or `PeerDown`, and at
/// least some fail (the sends the fabric took while the link swallowed them, which before
/// the acknowledgements read `Sent` and never arrived).
#[test]
fn link_cut_mid_stream_loses_nothing_reported_sent() {
    const N: usize = 1200;
    let (ea, eb, proxy) = engines(true);
    let proxy = proxy.unwrap();
    let mut a = side(ea.socket_path(), 0xA0, N);
    let mut b = side(eb.socket_path(), 0xB0, N);
    wait_peer(&a.c, 1, true);
    wait_peer(&b.c, 0, true);
    let mut cut_at = None;
    let mut cut_over = false;
    for i in 0..N - 10 {
        push_both(&mut a, &mut b, i);
        std::thread::sleep(Duration::from_millis(4));
        if i == N / 5 {
            proxy.set_cut(true);
            cut_at = Some(Instant::now());
        }
        if !cut_over && cut_at.is_some_and(|t| t.elapsed() >= Duration::from_secs(5)) {
            proxy.set_cut(false);
            cut_over = true;
        }
    }
    if let Some(t) = cut_at.filter(|_| !cut_over) {
        std::thread::sleep(Duration::from_secs(5).saturating_sub(t.elapsed()));
        proxy.set_cut(false);
    }
    // The link is back: the last messages go through a new session, and act as the
    // fence behind which every failure has been reported.
    wait_peer(&a.c, 1, true);
    wait_peer(&b.c, 0, true);
    for i in N - 10..N {
        push_both(&mut a, &mut b, i);
    }
    let (pa, pb) = (a.sent.len() as u64, b.sent.len() as u64);
    let ab = outcome(&mut a, pa, &b.inbox, 0xA0);
    let ba = outcome(&mut b, pb, &a.inbox, 0xB0);
    eprintln!("0 -> 1: {ab:?}\n1 -> 0: {ba:?}");
    for o in [&ab, &ba] {
        assert!(
            o.sent_and_missing.is_empty(),
            "reported sent, missing: {o:?}"
        );
        assert!(o.failed > 0, "the cut lost nothing in flight: {o:?}");
        assert_eq!(o.delivered + o.failed, N);
    }
    // The fence itself went through.
    for (s, r, dir) in [(&a, &b.inbox, 0xA0), (&b, &a.inbox, 0xB0)] {
        for &(offset, len) in &s.sent[N - 10..] {
            let mut got = vec![0u8; len];
            r.read(offset as usize, &mut got).unwrap();
            let i = offset as usize / ROOM;
            assert!(got.iter().enumerate().all(|(j, &x)| x == byte(dir, i, j)));
        }
    }
    let (sa, sb) = (a.c.stats(), b.c.stats());
    assert!(sa.engine.sends_unconfirmed > 0 && sb.engine.sends_unconfirmed > 0);
}

/// An engine stopped in the middle of two streams: every request of the surviving side
/// ends delivered (the stopped engine's slot, still mapped here, holds its bytes) or
/// `PeerDown`.
#[test]
fn engine_stopped_mid_stream_leaves_nothing_sent_and_missing() {
    const N: usize = 600;
    let (ea, eb, _) = engines(false);
    let mut a = side(ea.socket_path(), 0xA0, N);
    let mut b = side(eb.socket_path(), 0xB0, N);
    wait_peer(&a.c, 1, true);
    wait_peer(&b.c, 0, true);
    let mut eb = Some(eb);
    for i in 0..N {
        if i == N / 2 {
            // Node 1 goes away mid-stream (its client stays, holding its slot mapped).
            eb.take().unwrap().stop().unwrap();
        }
        if eb.is_some() {
            push_both(&mut a, &mut b, i);
        } else {
            for _ in 0..100_000 {
                if push(&mut a, 1, b.slot, b.key, i) {
                    break;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        if i % 8 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    wait_peer(&a.c, 1, false);
    // A fence: a last request to the dead node finishes (failed) after every failure
    // reported before it.
    let (bs, bk) = (b.slot, b.key);
    for _ in 0..100_000 {
        if push(&mut a, 1, bs, bk, 0) {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let pa = a.sent.len() as u64;
    let ab = outcome(&mut a, pa, &b.inbox, 0xA0);
    eprintln!("0 -> 1 (1 stopped): {ab:?}");
    assert!(
        ab.sent_and_missing.is_empty(),
        "reported sent, missing: {ab:?}"
    );
    assert_eq!(ab.delivered + ab.failed, a.sent.len());
    assert!(ab.failed > 0);
}
