//! The TCP fabric beyond the conformance suite: hostile bytes on its listener, striping
//! over rails, peer restarts and heartbeats.
//!
//! Every loop is bounded by a wall-clock deadline that only turns a hang into a failure;
//! no test asserts how long anything took.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use hamlyn_core::Instant;
use hamlyn_fabric::tcp::frame::Hello;
use hamlyn_fabric::tcp::{
    tcp_cluster, CloseReason, ClusterSecret, PeerState, TcpConfig, TcpError, TcpFabric,
};
use hamlyn_fabric::{Fabric, FabricError, Landing, PacketSink, PeerEvent, SharedBytesMut, SimRng};
use hamlyn_wire::{Flags, Header, NodeId, Op, RequestId, SlotId};

/// Wall-clock bound of every wait in these tests.
const DEADLINE: Duration = Duration::from_secs(20);

/// A sink that records packets and events; accepted payloads land in per-packet buffers.
#[derive(Default)]
struct Rec {
    packets: Vec<(NodeId, Header, Vec<u8>, Vec<u8>)>,
    events: Vec<PeerEvent>,
    unconfirmed: Vec<(NodeId, Header)>,
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
    fn on_payload(&mut self, from: NodeId, h: &Header, meta: &[u8]) {
        let p = self.landing.remove(&key(h)).unwrap();
        self.packets.push((from, *h, meta.to_vec(), p));
    }
    fn on_peer(&mut self, e: PeerEvent) {
        self.events.push(e);
    }
    fn on_unconfirmed(&mut self, to: NodeId, h: &Header) {
        self.unconfirmed.push((to, *h));
    }
}

impl Rec {
    fn up(&self, node: u32) -> Option<u32> {
        self.events.iter().rev().find_map(|e| match *e {
            PeerEvent::Up {
                node: n,
                incarnation,
            } if n.0 == node => Some(incarnation),
            _ => None,
        })
    }
    fn downs(&self, node: u32) -> usize {
        self.events
            .iter()
            .filter(|e| **e == PeerEvent::Down { node: NodeId(node) })
            .count()
    }
}

/// Test time: real time, so timers behave as configured.
struct Time(std::time::Instant);

impl Time {
    fn new() -> Time {
        Time(std::time::Instant::now())
    }
    fn now(&self) -> Instant {
        Instant(self.0.elapsed().as_nanos() as u64)
    }
    fn expired(&self) -> bool {
        self.0.elapsed() > DEADLINE
    }
}

/// Polls every fabric until `done` holds (panics at the deadline).
fn drive(
    time: &Time,
    fabrics: &mut [&mut TcpFabric],
    recs: &mut [Rec],
    what: &str,
    done: &dyn Fn(&[Rec]) -> bool,
) {
    loop {
        for (f, r) in fabrics.iter_mut().zip(recs.iter_mut()) {
            f.poll(time.now(), r, 64).unwrap();
        }
        if done(recs) {
            return;
        }
        assert!(!time.expired(), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn config(rails: usize) -> TcpConfig {
    let mut c = TcpConfig::new(NodeId(0), ([127, 0, 0, 1], 0).into());
    c.secret = Some(ClusterSecret::from_bytes([0x5e; 32]));
    c.rails = rails;
    c.peer_timeout = Duration::from_secs(30);
    c.reconnect_interval = Duration::from_millis(10);
    c
}

/// Two connected fabrics (nodes 0 and 1) on loopback with `rails` rails and otherwise
/// default settings; see [`tcp_cluster`].
fn tcp_pair(rails: usize) -> Result<(TcpFabric, TcpFabric), TcpError> {
    let mut c = TcpConfig::new(NodeId(0), SocketAddr::from(([127, 0, 0, 1], 0)));
    c.secret = Some(ClusterSecret::from_bytes([0x5e; 32]));
    c.rails = rails;
    let mut v = tcp_cluster(2, &c)?;
    let b = v.pop().ok_or(TcpError::Config("cluster too small"))?;
    let a = v.pop().ok_or(TcpError::Config("cluster too small"))?;
    Ok((a, b))
}

fn packet(src: u32, dst: u32, seq: u32, len: usize) -> (Header, Vec<u8>, Vec<u8>) {
    let mut rng = SimRng::new(u64::from(src) << 40 ^ u64::from(dst) << 32 ^ u64::from(seq));
    let mut h = Header::new(Op::Write);
    h.flags = Flags::FIRST | Flags::LAST;
    h.src = NodeId(src);
    h.dst = NodeId(dst);
    h.slot = SlotId(seq);
    h.key = rng.next_u64();
    h.meta_len = (seq % 61) as u16;
    h.payload_len = len as u32;
    h.request = RequestId { terminus: 7, seq };
    let mut meta = vec![0; usize::from(h.meta_len)];
    rng.fill(&mut meta);
    let mut payload = vec![0; len];
    rng.fill(&mut payload);
    (h, meta, payload)
}

/// Sends `count` packets from `a` to `b` (retrying on `Full`) and checks they all arrive
/// exactly once, byte-exact.
fn exchange(
    time: &Time,
    a: &mut TcpFabric,
    b: &mut TcpFabric,
    ra: &mut Rec,
    rb: &mut Rec,
    first_seq: u32,
    count: u32,
) {
    let (src, dst) = (a.local().0, b.local().0);
    let sent: Vec<_> = (first_seq..first_seq + count)
        .map(|s| packet(src, dst, s, (s as usize * 977) % 20_000))
        .collect();
    let before = rb.packets.len();
    for (h, m, p) in &sent {
        loop {
            match a.send(
                time.now(),
                h,
                m,
                &[p[..p.len() / 3].into(), p[p.len() / 3..].into()],
            ) {
                Ok(()) => break,
                Err(FabricError::Full) => {
                    a.poll(time.now(), ra, 64).unwrap();
                    b.poll(time.now(), rb, 64).unwrap();
                    assert!(!time.expired(), "stuck on Full");
                }
                Err(e) => panic!("send {src}->{dst} failed: {e}"),
            }
        }
    }
    let want = before + sent.len();
    let mut pair = [a, b];
    let mut recs = [std::mem::take(ra), std::mem::take(rb)];
    drive(time, &mut pair, &mut recs, "the exchange", &|r| {
        r[1].packets.len() >= want
    });
    [*ra, *rb] = recs;
    // Rails reorder packets: compare by sequence number.
    let mut got: Vec<_> = rb.packets[before..].to_vec();
    got.sort_by_key(|(_, h, _, _)| h.request.seq);
    assert_eq!(got.len(), sent.len(), "exactly once");
    for ((from, h, m, p), (sh, sm, sp)) in got.iter().zip(&sent) {
        let exact = from.0 == src && h == sh && m == sm && p == sp;
        assert!(
            exact,
            "packet {:?} from {from} is not byte-exact",
            h.request
        );
    }
}

fn two(fabrics: &mut [TcpFabric]) -> (&mut TcpFabric, &mut TcpFabric) {
    let (x, y) = fabrics.split_at_mut(1);
    (&mut x[0], &mut y[0])
}

/// A raw connection to `addr` playing a hostile or broken peer.
fn raw(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_nonblocking(true).unwrap();
    s
}

fn hello(from: u32, to: u32, incarnation: u32, session: u64) -> [u8; 64] {
    Hello {
        from: NodeId(from),
        to: NodeId(to),
        incarnation,
        session,
        rail: 0,
        rails: 1,
    }
    .to_header()
    .to_bytes()
}

/// Polls the fabrics until the fabric closes the raw connection (end of stream or
/// reset); returns the bytes the fabric sent on it.
fn until_closed(
    time: &Time,
    s: &mut TcpStream,
    fabrics: &mut [&mut TcpFabric],
    recs: &mut [Rec],
) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        for (f, r) in fabrics.iter_mut().zip(recs.iter_mut()) {
            f.poll(time.now(), r, 64).unwrap();
        }
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return got, // reset: closed with our bytes unread
        }
        assert!(!time.expired(), "the fabric never closed the connection");
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Hostile bytes on the listener close only their own connection, each counted by
/// reason, while the legitimate peer's traffic before and after is exact.
#[test]
fn garbage_closes_only_its_connection() {
    let time = Time::new();
    // Node 1 (legitimate, dials) and node 5 (the target). Node 3 is a configured peer
    // that only the raw client plays; node 4 is unknown (learning is off).
    let mut c = config(2);
    c.learn_peers = false;
    // The plain protocol under the links: a raw client speaks it in clear
    // (tcp_secure.rs plays the same attacks against authenticated links).
    c.secret = None;
    c.danger_insecure = true;
    let mut fabrics = tcp_cluster(2, &c).unwrap();
    let mut cb = c.clone();
    cb.node = NodeId(5);
    cb.peers = vec![
        (NodeId(0), fabrics[0].local_addr()),
        (NodeId(3), "127.0.0.1:9".parse().unwrap()),
    ];
    let mut target = TcpFabric::new(cb).unwrap();
    let a = &mut fabrics[0];
    a.add_peer(NodeId(5), target.local_addr()).unwrap();
    let addr = target.local_addr();
    let mut recs = [Rec::default(), Rec::default()];
    drive(&time, &mut [&mut *a, &mut target], &mut recs, "up", &|r| {
        r[0].up(5).is_some() && r[1].up(0).is_some()
    });
    let [mut ra, mut rb] = recs;
    let mut seq = 0;
    exchange(&time, a, &mut target, &mut ra, &mut rb, seq, 30);
    exchange(&time, &mut target, a, &mut rb, &mut ra, seq, 30);
    seq += 30;

    let mut rng = SimRng::new(42);
    let data_header = |src: u32| packet(src, 5, 0, 10).0.to_bytes();
    let cases: Vec<(&str, Vec<u8>, CloseReason)> = vec![
        (
            "random bytes",
            {
                let mut g = vec![0u8; 300];
                rng.fill(&mut g);
                g[0] = b'x';
                g
            },
            CloseReason::BadMagic,
        ),
        (
            "a valid HELLO then a truncated header",
            [&hello(3, 5, 1, 1)[..], &data_header(3)[..30]].concat(),
            CloseReason::Truncated,
        ),
        (
            "a header with a 1 GiB payload",
            {
                let mut h = Header::parse(&data_header(3)).unwrap();
                h.payload_len = 1 << 30;
                [&hello(3, 5, 1, 2)[..], &h.to_bytes()[..]].concat()
            },
            CloseReason::PayloadTooLong,
        ),
        (
            "a bad-magic header",
            {
                let mut h = data_header(3);
                h[0] = b'Z';
                [&hello(3, 5, 1, 3)[..], &h[..]].concat()
            },
            CloseReason::BadMagic,
        ),
        (
            "a bad version",
            {
                let mut h = data_header(3);
                h[2] = 9;
                [&hello(3, 5, 1, 4)[..], &h[..]].concat()
            },
            CloseReason::BadVersion,
        ),
        (
            "data before HELLO",
            data_header(3).to_vec(),
            CloseReason::NoHello,
        ),
        (
            "a packet from another node on node 3's rail",
            [&hello(3, 5, 1, 5)[..], &data_header(0)[..]].concat(),
            CloseReason::Misaddressed,
        ),
        (
            "a HELLO from a node that should be dialed",
            hello(9, 5, 1, 1).to_vec(),
            CloseReason::UnexpectedDialer,
        ),
        (
            "a HELLO meant for another node",
            hello(3, 6, 1, 9).to_vec(),
            CloseReason::WrongNode,
        ),
        (
            "a HELLO from an unknown node",
            hello(4, 5, 1, 1).to_vec(),
            CloseReason::UnknownNode,
        ),
        (
            "a stale incarnation",
            hello(3, 5, 0, 100).to_vec(),
            CloseReason::StaleIncarnation,
        ),
        (
            "a replayed session",
            hello(3, 5, 1, 2).to_vec(),
            CloseReason::StaleSession,
        ),
    ];
    for (what, bytes, reason) in cases {
        let before = target.stats().closes.get(reason);
        let mut s = raw(addr);
        s.write_all(&bytes).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut recs = [std::mem::take(&mut ra), std::mem::take(&mut rb)];
        until_closed(&time, &mut s, &mut [&mut *a, &mut target], &mut recs);
        [ra, rb] = recs;
        assert_eq!(
            target.stats().closes.get(reason),
            before + 1,
            "{what}: closed for {reason}; counts {:?}",
            target.stats().closes.iter().collect::<Vec<_>>()
        );
        // The legitimate peer never noticed.
        exchange(&time, a, &mut target, &mut ra, &mut rb, seq, 10);
        exchange(&time, &mut target, a, &mut rb, &mut ra, seq, 10);
        seq += 10;
    }
    eprintln!(
        "closes at the target: {:?}",
        target.stats().closes.iter().collect::<Vec<_>>()
    );
    assert_eq!(ra.downs(5), 0);
    assert_eq!(rb.downs(0), 0);
    assert_eq!(target.peer_stats(NodeId(0)).unwrap().ups, 1);
    assert_eq!(
        target.peer_state(NodeId(0)),
        Some(PeerState::Up { incarnation: 1 })
    );
    // Node 3's sessions came up on their HELLO and went down with their bad bytes.
    assert!(rb.downs(3) >= 3);
    assert!(target.stats().closes.frame_errors() >= 6);
}

/// A 4 MiB message in 64 KiB packets over three rails lands byte-exact in one buffer,
/// each packet at its offset, and every rail carried some of it.
#[test]
fn striped_message_lands_whole() {
    /// Lands payloads at their offset in one message buffer, as the core does.
    struct Message {
        buf: Vec<u8>,
        order: Vec<u32>,
        done: usize,
        events: Vec<PeerEvent>,
    }
    impl PacketSink for Message {
        fn on_header(&mut self, _: NodeId, h: &Header, _: &[u8]) -> Landing {
            self.order.push(h.request.seq);
            Landing::Accept
        }
        fn payload_buf(&mut self, h: &Header) -> SharedBytesMut<'_> {
            let at = h.offset as usize;
            SharedBytesMut::from(&mut self.buf[at..at + h.payload_len as usize])
        }
        fn on_payload(&mut self, _: NodeId, _: &Header, _: &[u8]) {
            self.done += 1;
        }
        fn on_peer(&mut self, e: PeerEvent) {
            self.events.push(e);
        }
        fn on_unconfirmed(&mut self, _: NodeId, _: &Header) {}
    }

    const LEN: usize = 4 << 20;
    const MTU: usize = 64 << 10;
    let time = Time::new();
    let mut fabrics = tcp_cluster(2, &config(3)).unwrap();
    let (a, b) = two(&mut fabrics);
    let mut recs = [Rec::default(), Rec::default()];
    drive(&time, &mut [&mut *a, &mut *b], &mut recs, "up", &|r| {
        r[0].up(1).is_some() && r[1].up(0).is_some()
    });
    let mut src = vec![0u8; LEN];
    SimRng::new(7).fill(&mut src);
    let mut msg = Message {
        buf: vec![0; LEN],
        order: Vec::new(),
        done: 0,
        events: Vec::new(),
    };
    let packets = LEN / MTU;
    let mut next = 0;
    let mut ra = Rec::default();
    while msg.done < packets {
        while next < packets {
            let mut h = Header::new(Op::Write);
            h.src = NodeId(0);
            h.dst = NodeId(1);
            h.flags = if next == 0 {
                Flags::FIRST
            } else {
                Flags::empty()
            };
            if next + 1 == packets {
                h.flags = h.flags | Flags::LAST;
            }
            h.offset = (next * MTU) as u64;
            h.payload_len = MTU as u32;
            h.delta = 1;
            h.request = RequestId {
                terminus: 0,
                seq: next as u32,
            };
            let p = &src[next * MTU..(next + 1) * MTU];
            match a.send(time.now(), &h, &[], &[p.into()]) {
                Ok(()) => next += 1,
                Err(FabricError::Full) => break,
                Err(e) => panic!("send failed: {e}"),
            }
        }
        a.poll(time.now(), &mut ra, 64).unwrap();
        b.poll(time.now(), &mut msg, 64).unwrap();
        assert!(!time.expired(), "{} of {packets} packets arrived", msg.done);
    }
    assert!(msg.buf == src, "the message is byte-exact");
    let mut sorted = msg.order.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..packets as u32).collect::<Vec<_>>(),
        "exactly once"
    );
    let out_of_order = msg.order.windows(2).filter(|w| w[1] < w[0]).count();
    eprintln!("striping: {out_of_order} of {packets} packets arrived after a later one");
    let sent = &a.peer_stats(NodeId(1)).unwrap().rails;
    let got = &b.peer_stats(NodeId(0)).unwrap().rails;
    assert_eq!(sent.len(), 3);
    for r in 0..3 {
        assert!(
            sent[r].packets_sent > 1 && got[r].packets_received > 1,
            "rail {r} carried data: sent {:?}, received {:?}",
            sent[r],
            got[r]
        );
    }
    // Loopback may deliver rails in lockstep; if it did not, reassembly saw real
    // reordering. Either way every rail carried packets of the one message.
    assert!(msg.events.iter().all(|e| matches!(e, PeerEvent::Up { .. })));
}

/// A restarted peer (new incarnation, same address) is announced Down, then Up with the
/// new incarnation, and traffic resumes: once for the accepting side restarting, once
/// for the dialing side.
#[test]
fn restarted_peer_comes_back_with_its_new_incarnation() {
    let time = Time::new();
    let c = config(2);
    let fabrics = tcp_cluster(2, &c).unwrap();
    let addrs: Vec<SocketAddr> = fabrics.iter().map(TcpFabric::local_addr).collect();
    // A node restarts with its key: its peer pinned it.
    let keys: Vec<_> = fabrics.iter().map(|f| f.config().key.clone()).collect();
    let mut fabrics: Vec<Option<TcpFabric>> = fabrics.into_iter().map(Some).collect();
    let mut recs = [Rec::default(), Rec::default()];
    let restart = |node: usize, incarnation: u32| {
        let mut cfg = c.clone();
        cfg.key.clone_from(&keys[node]);
        cfg.node = NodeId(node as u32);
        cfg.incarnation = incarnation;
        cfg.listen = addrs[node];
        cfg.peers = vec![(NodeId(1 - node as u32), addrs[1 - node])];
        TcpFabric::new(cfg).unwrap()
    };
    let mut seq = 0;
    for (victim, incarnation) in [(1usize, 2u32), (0, 2)] {
        let survivor = 1 - victim;
        {
            let [Some(f0), Some(f1)] = &mut fabrics[..] else {
                unreachable!()
            };
            drive(&time, &mut [&mut *f0, &mut *f1], &mut recs, "up", &|r| {
                r[0].up(1).is_some() && r[1].up(0).is_some()
            });
            let [r0, r1] = &mut recs;
            exchange(&time, f0, f1, r0, r1, seq, 20);
            exchange(&time, f1, f0, r1, r0, seq, 20);
            seq += 20;
        }
        let downs_before = recs[survivor].downs(victim as u32);
        fabrics[victim] = None; // crash: every socket closes
        recs[victim] = Rec::default();
        {
            let s = fabrics[survivor].as_mut().unwrap();
            drive(
                &time,
                &mut [s],
                &mut recs[survivor..=survivor],
                "Down",
                &|r| r[0].downs(victim as u32) > downs_before,
            );
            let (h, m, p) = packet(survivor as u32, victim as u32, 999, 10);
            assert_eq!(
                s.send(time.now(), &h, &m, &[(&p).into()]),
                Err(FabricError::PeerDown(NodeId(victim as u32)))
            );
        }
        fabrics[victim] = Some(restart(victim, incarnation));
        let [Some(f0), Some(f1)] = &mut fabrics[..] else {
            unreachable!()
        };
        drive(
            &time,
            &mut [&mut *f0, &mut *f1],
            &mut recs,
            "Up again",
            &|r| {
                r[survivor].up(victim as u32) == Some(incarnation)
                    && r[victim].up(survivor as u32).is_some()
            },
        );
        // The survivor saw exactly Down, then Up with the new incarnation.
        let tail: Vec<_> = recs[survivor]
            .events
            .iter()
            .filter(|e| e.node().0 == victim as u32)
            .rev()
            .take(2)
            .copied()
            .collect();
        assert_eq!(
            tail,
            [
                PeerEvent::Up {
                    node: NodeId(victim as u32),
                    incarnation
                },
                PeerEvent::Down {
                    node: NodeId(victim as u32)
                }
            ]
        );
        let [r0, r1] = &mut recs;
        exchange(&time, f0, f1, r0, r1, seq, 20);
        exchange(&time, f1, f0, r1, r0, seq, 20);
        seq += 20;
    }
    let f0 = fabrics[0].as_ref().unwrap();
    assert_eq!(
        f0.peer_state(NodeId(1)),
        Some(PeerState::Up { incarnation: 2 })
    );
}

/// Idle rails exchange heartbeats, which the sink never sees; a peer that falls silent
/// is taken down after the peer timeout. Time is passed in, so the test jumps it.
#[test]
fn heartbeats_keep_idle_peers_up_and_silence_takes_them_down() {
    let real = Time::new();
    let mut c = config(2);
    c.heartbeat_interval = Duration::from_millis(100);
    c.peer_timeout = Duration::from_secs(1);
    let mut fabrics = tcp_cluster(2, &c).unwrap();
    let (a, b) = two(&mut fabrics);
    let mut t = Instant(0);
    let (mut ra, mut rb) = (Rec::default(), Rec::default());
    while ra.up(1).is_none() || rb.up(0).is_none() {
        a.poll(t, &mut ra, 64).unwrap();
        b.poll(t, &mut rb, 64).unwrap();
        t = t.plus_nanos(100_000);
        assert!(!real.expired());
        std::thread::sleep(Duration::from_micros(100));
    }
    // Five simulated seconds of idleness, in 50 ms steps: heartbeats flow both ways.
    for _ in 0..100 {
        t = t.plus_nanos(50_000_000);
        a.poll(t, &mut ra, 64).unwrap();
        b.poll(t, &mut rb, 64).unwrap();
        // Let the heartbeats cross before the clock jumps again.
        for _ in 0..100 {
            let beats = |f: &TcpFabric, n| f.peer_stats(NodeId(n)).unwrap().heartbeats_received;
            let (x, y) = (beats(a, 1), beats(b, 0));
            a.poll(t, &mut ra, 64).unwrap();
            b.poll(t, &mut rb, 64).unwrap();
            if beats(a, 1) == x && beats(b, 0) == y {
                break;
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let sa = a.peer_stats(NodeId(1)).unwrap();
    assert!(
        sa.heartbeats_sent > 0 && sa.heartbeats_received > 0,
        "{sa:?}"
    );
    assert!(
        ra.packets.is_empty() && rb.packets.is_empty(),
        "heartbeats are consumed"
    );
    assert_eq!((ra.downs(1), rb.downs(0)), (0, 0), "idle but alive");
    // Node 1 stops polling: node 0 hears nothing and takes it down after the timeout.
    let mut steps = 0;
    while ra.downs(1) == 0 {
        t = t.plus_nanos(100_000_000);
        a.poll(t, &mut ra, 64).unwrap();
        steps += 1;
        assert!(steps < 1000);
    }
    assert_eq!(a.stats().closes.get(CloseReason::HeartbeatTimeout), 1);
    assert_eq!(a.peer_state(NodeId(1)), Some(PeerState::Down));
    // Node 1 sees its rails close and takes node 0 down too.
    while rb.downs(0) == 0 {
        b.poll(t, &mut rb, 64).unwrap();
        assert!(!real.expired());
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// An engine that sleeps in `wait` between polls (instead of spinning) still gets every
/// packet: `wait` wakes on arriving bytes, and the fabric's descriptor is the poller's.
#[test]
fn sleeping_in_wait_delivers_everything() {
    use std::os::fd::AsRawFd;

    let time = Time::new();
    let (mut a, mut b) = tcp_pair(2).unwrap();
    let (a, b) = (&mut a, &mut b);
    assert!(a.as_raw_fd() >= 0 && a.as_raw_fd() != b.as_raw_fd());
    let (mut ra, mut rb) = (Rec::default(), Rec::default());
    let mut sent = 0u32;
    while rb.packets.len() < 200 {
        if ra.up(1).is_some() && sent < 200 {
            let (h, m, p) = packet(0, 1, sent, 1000);
            match a.send(time.now(), &h, &m, &[(&p).into()]) {
                Ok(()) => sent += 1,
                Err(FabricError::Full) => {}
                Err(e) => panic!("{e}"),
            }
        }
        a.poll(time.now(), &mut ra, 64).unwrap();
        b.poll(time.now(), &mut rb, 64).unwrap();
        // Sleep on whichever side has nothing to do; never past the timers.
        b.wait(time.now(), Duration::from_millis(2)).unwrap();
        if sent == 200 || ra.up(1).is_none() {
            a.wait(time.now(), Duration::from_millis(2)).unwrap();
        }
        assert!(!time.expired(), "{} of 200 arrived", rb.packets.len());
    }
    assert!(TcpFabric::next_timer(a) > Instant(0));
    assert_eq!(rb.packets.len(), 200);
}

/// Issue 16 part 4: the receiver acknowledges what it delivered (here on a timer tick),
/// the sender forgets acknowledged packets, and when the session is lost it reports
/// exactly the packets the receiver never acknowledged (`on_unconfirmed`): none of the
/// delivered ones, every one of those it never read.
#[test]
fn a_lost_session_reports_exactly_the_unacknowledged_packets() {
    let real = Time::new();
    let mut fabrics = tcp_cluster(2, &config(2)).unwrap();
    let (a, b) = two(&mut fabrics);
    let mut t = Instant(0);
    let (mut ra, mut rb) = (Rec::default(), Rec::default());
    while ra.up(1).is_none() || rb.up(0).is_none() {
        a.poll(t, &mut ra, 64).unwrap();
        b.poll(t, &mut rb, 64).unwrap();
        assert!(!real.expired());
        std::thread::sleep(Duration::from_micros(100));
    }
    let send = |a: &mut TcpFabric, ra: &mut Rec, seq: u32, t: Instant| {
        let (h, m, p) = packet(0, 1, seq, (seq as usize * 331) % 3000);
        loop {
            match a.send(t, &h, &m, &[p[..].into()]) {
                Ok(()) => return,
                Err(FabricError::Full) => a.poll(t, ra, 64).map(|_| ()).unwrap(),
                Err(e) => panic!("{e}"),
            }
            assert!(!real.expired());
        }
    };
    for seq in 0..200 {
        send(a, &mut ra, seq, t);
    }
    while rb.packets.len() < 200 {
        a.poll(t, &mut ra, 64).unwrap();
        b.poll(t, &mut rb, 64).unwrap();
        assert!(!real.expired());
    }
    // A tick later node 1 acknowledges the 200; node 0 reads the acknowledgement.
    let beats = |f: &TcpFabric| f.peer_stats(NodeId(1)).unwrap().heartbeats_received;
    let before = beats(a);
    t = t.plus_nanos(50_000_000);
    b.poll(t, &mut rb, 64).unwrap();
    assert!(b.peer_stats(NodeId(0)).unwrap().acks_sent > 0);
    while beats(a) == before {
        a.poll(t, &mut ra, 64).unwrap();
        assert!(!real.expired());
        std::thread::sleep(Duration::from_micros(100));
    }
    // 50 more that node 1 never reads: it goes away with them unread.
    for seq in 200..250 {
        send(a, &mut ra, seq, t);
    }
    a.poll(t, &mut ra, 64).unwrap();
    b.shutdown();
    while ra.downs(1) == 0 {
        a.poll(t, &mut ra, 64).unwrap();
        assert!(!real.expired(), "node 0 never saw node 1 go");
        std::thread::sleep(Duration::from_micros(100));
    }
    let mut lost: Vec<u32> = ra
        .unconfirmed
        .iter()
        .map(|(to, h)| {
            assert_eq!(*to, NodeId(1));
            h.request.seq
        })
        .collect();
    lost.sort_unstable();
    assert_eq!(lost, (200..250).collect::<Vec<u32>>());
    assert_eq!(a.peer_stats(NodeId(1)).unwrap().packets_unconfirmed, 50);
}

/// With the clock frozen (no timer tick ever acknowledges), a stream of small packets
/// far past what a rail may keep unacknowledged (4,096) still flows: the receiver
/// acknowledges every 512 packets, so the sender's `Full` is only ever passing.
#[test]
fn acknowledgements_keep_a_long_stream_flowing_without_timers() {
    const COUNT: u32 = 20_000;
    let real = Time::new();
    let mut fabrics = tcp_cluster(2, &config(2)).unwrap();
    let (a, b) = two(&mut fabrics);
    let t = Instant(0);
    let (mut ra, mut rb) = (Rec::default(), Rec::default());
    while ra.up(1).is_none() || rb.up(0).is_none() {
        a.poll(t, &mut ra, 64).unwrap();
        b.poll(t, &mut rb, 64).unwrap();
        assert!(!real.expired());
        std::thread::sleep(Duration::from_micros(100));
    }
    for seq in 0..COUNT {
        let (h, m, p) = packet(0, 1, seq, 16);
        loop {
            match a.send(t, &h, &m, &[p[..].into()]) {
                Ok(()) => break,
                Err(FabricError::Full) => {
                    a.poll(t, &mut ra, 64).unwrap();
                    b.poll(t, &mut rb, 64).unwrap();
                    assert!(!real.expired(), "stuck on Full at {seq}");
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    while rb.packets.len() < COUNT as usize {
        a.poll(t, &mut ra, 64).unwrap();
        b.poll(t, &mut rb, 64).unwrap();
        assert!(!real.expired(), "{} of {COUNT} arrived", rb.packets.len());
    }
    assert!(b.peer_stats(NodeId(0)).unwrap().acks_sent >= u64::from(COUNT) / 512 - 2);
    assert!(ra.unconfirmed.is_empty() && ra.downs(1) == 0);
}

/// Issue 14: a small packet held back to share a write with the next ones (the caller
/// streams) goes out when the caller prepares to sleep (`Fabric::prepare_sleep`), not
/// when the hold time ends, which a sleeping engine would only see on its poller's
/// millisecond-grained timeout. The hold here is an hour: only the flush can send it.
#[test]
fn preparing_to_sleep_writes_held_packets() {
    let time = Time::new();
    let mut c = TcpConfig::new(NodeId(0), SocketAddr::from(([127, 0, 0, 1], 0)));
    c.secret = Some(ClusterSecret::from_bytes([0x5e; 32]));
    c.rails = 1;
    c.hold = Duration::from_secs(3600);
    let mut v = tcp_cluster(2, &c).unwrap();
    let mut b = v.pop().unwrap();
    let mut a = v.pop().unwrap();
    let (mut ra, mut rb) = (Rec::default(), Rec::default());
    drive(
        &time,
        &mut [&mut a, &mut b],
        &mut [Rec::default(), Rec::default()],
        "nothing",
        &|_| true,
    );
    while ra.up(1).is_none() || rb.up(0).is_none() {
        a.poll(time.now(), &mut ra, 64).unwrap();
        b.poll(time.now(), &mut rb, 64).unwrap();
        assert!(!time.expired(), "the pair comes up");
        std::thread::sleep(Duration::from_micros(100));
    }
    // A stream: a send between each of the sender's polls, so the later ones are held.
    const COUNT: u32 = 4;
    for seq in 0..COUNT {
        let (h, m, p) = packet(0, 1, seq, 8);
        a.send(time.now(), &h, &m, &[(&p).into()]).unwrap();
        a.poll(time.now(), &mut ra, 64).unwrap();
    }
    // The receiver alone polls: what the sender holds stays held.
    for _ in 0..200 {
        b.poll(time.now(), &mut rb, 64).unwrap();
        std::thread::sleep(Duration::from_micros(100));
    }
    let before = rb.packets.len();
    assert!(
        before < COUNT as usize,
        "the stream's last packets are held (got {before} of {COUNT})"
    );
    // (It may say the sender has something to read, e.g. acknowledgements: the engine
    // would then poll instead of sleeping. Only the flush matters here.)
    let _ = a.prepare_sleep(time.now());
    while rb.packets.len() < COUNT as usize {
        b.poll(time.now(), &mut rb, 64).unwrap();
        assert!(!time.expired(), "{} of {COUNT} arrived", rb.packets.len());
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// With an express lane, a packet sent express behind a flood that fills every other
/// rail (the flood's queues full, its socket buffers full, the receiver not reading) is
/// the first one the receiver reads, and the flood still arrives whole afterwards.
#[test]
fn an_express_packet_overtakes_a_flood() {
    let time = Time::new();
    let mut c = config(3);
    c.express_lane = true;
    let mut fabrics = tcp_cluster(2, &c).unwrap();
    let (a, b) = two(&mut fabrics);
    let mut recs = [Rec::default(), Rec::default()];
    drive(&time, &mut [&mut *a, &mut *b], &mut recs, "up", &|r| {
        r[0].up(1).is_some() && r[1].up(0).is_some()
    });
    // The flood: single-packet writes of many (terminus, slot) pairs, so they spread
    // over every rail they may take, until the fabric says Full.
    let mut flood = 0u32;
    loop {
        let (h, meta, payload) = packet(0, 1, flood, 16 << 10);
        match a.send(time.now(), &h, &meta, &[(&payload[..]).into()]) {
            Ok(()) => flood += 1,
            Err(FabricError::Full) => break,
            Err(e) => panic!("flood send: {e}"),
        }
        assert!(flood < 1_000_000, "the fabric never said Full");
    }
    assert!(flood > 2, "a flood of {flood} packets fills nothing");
    // A plain packet now waits behind the flood; an express one does not.
    let express_seq = 0xE0_0000;
    let (h, meta, payload) = packet(0, 1, express_seq, 64);
    a.send_express(time.now(), &h, &meta, &[(&payload[..]).into()])
        .unwrap();
    // The receiver reads one packet at a time: the express one comes first.
    let mut rb = Rec::default();
    while rb.packets.is_empty() {
        b.poll(time.now(), &mut rb, 1).unwrap();
        assert!(!time.expired(), "nothing arrived");
    }
    assert_eq!(
        rb.packets[0].1.request.seq, express_seq,
        "the first packet read is the express one"
    );
    assert_eq!(rb.packets[0].3, payload);
    // And the flood arrives whole, each packet once.
    let mut ra = Rec::default();
    while rb.packets.len() < flood as usize + 1 {
        a.poll(time.now(), &mut ra, 64).unwrap();
        b.poll(time.now(), &mut rb, 64).unwrap();
        assert!(!time.expired(), "the flood did not arrive");
    }
    let mut seqs: Vec<u32> = rb.packets[1..].iter().map(|p| p.1.request.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..flood).collect::<Vec<_>>());
    for p in &rb.packets[1..] {
        let (_, _, want) = packet(0, 1, p.1.request.seq, 16 << 10);
        assert_eq!(p.3, want);
    }
}

/// A poll whose budget runs out on one rail starts the next poll with the other: a rail
/// that always has a budget's worth waiting cannot starve the rest (it did: a 1 MiB
/// stream's packets on the starved rail fell so far behind that a reused metadata entry
/// counted two messages as one). Both rails hold hundreds of packets before the
/// receiver reads; each rail delivers in order, so a second poll that went on with the
/// first poll's rail would bring only higher sequence numbers.
#[test]
fn a_rail_that_fills_the_budget_does_not_starve_the_other() {
    let time = Time::new();
    let mut fabrics = tcp_cluster(2, &config(2)).unwrap();
    let (a, b) = two(&mut fabrics);
    let mut recs = [Rec::default(), Rec::default()];
    drive(&time, &mut [&mut *a, &mut *b], &mut recs, "up", &|r| {
        r[0].up(1).is_some() && r[1].up(0).is_some()
    });
    let [mut ra, mut rb] = recs;
    // Single-packet writes take the rail their (terminus, slot) hashes to; the slots
    // (sequence numbers) spread them over both.
    const COUNT: u32 = 600;
    for seq in 0..COUNT {
        let (h, m, p) = packet(0, 1, seq, 16);
        loop {
            match a.send(time.now(), &h, &m, &[p[..].into()]) {
                Ok(()) => break,
                Err(FabricError::Full) => {
                    a.poll(time.now(), &mut ra, 64).unwrap();
                    assert!(!time.expired(), "stuck on Full");
                }
                Err(e) => panic!("send failed: {e}"),
            }
        }
    }
    // Everything written (held packets go out on a poll after their hold), and in the
    // receiver's sockets: it has not read since.
    let deadline = std::time::Instant::now() + Duration::from_millis(50);
    while std::time::Instant::now() < deadline {
        a.poll(time.now(), &mut ra, 64).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let before = rb.packets.len();
    b.poll(time.now(), &mut rb, 64).unwrap();
    let first: Vec<u32> = rb.packets[before..]
        .iter()
        .map(|p| p.1.request.seq)
        .collect();
    let mid = rb.packets.len();
    b.poll(time.now(), &mut rb, 64).unwrap();
    let second: Vec<u32> = rb.packets[mid..].iter().map(|p| p.1.request.seq).collect();
    assert_eq!(first.len(), 64, "the first poll read a whole budget");
    assert!(!second.is_empty(), "the second poll read something");
    let (Some(high), Some(low)) = (first.iter().max(), second.iter().min()) else {
        unreachable!("both non-empty");
    };
    assert!(
        low < high,
        "the second poll went on with the first poll's rail: {first:?} then {second:?}"
    );
    // And everything still arrives, exactly once.
    let mut pair = [&mut *a, &mut *b];
    let mut recs = [ra, rb];
    drive(&time, &mut pair, &mut recs, "the rest", &|r| {
        r[1].packets.len() >= COUNT as usize
    });
    let mut seqs: Vec<u32> = recs[1].packets.iter().map(|p| p.1.request.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..COUNT).collect::<Vec<_>>());
}

/// How the streaming side of the stream tests below polls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Polls {
    /// [`Fabric::poll`] of a fabric without busy polling: it asks its poller.
    Ordinary,
    /// [`Fabric::poll`] of a fabric set to busy-poll ([`TcpConfig::busy_poll`]).
    Busy,
    /// [`Fabric::poll_spinning`] of a fabric without busy polling (a waiting thread's).
    Spinning,
}

impl Polls {
    /// One poll of `f` this way.
    fn poll(self, f: &mut TcpFabric, time: &Time, r: &mut Rec) {
        if self == Polls::Spinning {
            f.poll_spinning(time.now(), r, 64).unwrap();
        } else {
            f.poll(time.now(), r, 64).unwrap();
        }
    }

    /// Whether these polls read the rails directly.
    fn direct(self) -> bool {
        self != Polls::Ordinary
    }
}

/// A busy-polling sender that streams (a send between each of its polls, as an engine
/// sends a packet per turn) looks for input on its rails at most once per quarter of the
/// hold time, as a sender without busy polling asks its poller: one read per rail per
/// poll cost it a system call per rail per packet, and over TCP loopback its 8-byte
/// message rate fell from about 0.6 to 0.3 M/s. It still takes in what comes meanwhile
/// (a packet its peer sends in the middle of the stream arrives before the stream ends),
/// and between streams (a poll with no send before it) every poll reads every rail, as
/// busy polling promises. Secured links and links in clear read differently; both. And
/// the same for a spinning poll ([`Fabric::poll_spinning`]), which reads the rails as
/// busy polling does.
#[test]
fn a_busy_polling_sender_that_streams_reads_its_rails_once_per_quarter_hold() {
    for polls in [Polls::Busy, Polls::Spinning] {
        busy_polling_stream(true, polls);
        busy_polling_stream(false, polls);
    }
}

/// An ordinary poll of a fabric without busy polling asks its poller and reads no rail
/// when nothing came; a spinning poll of the same fabric ([`Fabric::poll_spinning`], a
/// thread that waits for what the peer sends) reads every rail, and takes in a packet
/// the peer sends.
#[test]
fn a_spinning_poll_reads_the_rails_and_an_ordinary_one_asks_the_poller() {
    let time = Time::new();
    let mut c = TcpConfig::new(NodeId(0), SocketAddr::from(([127, 0, 0, 1], 0)));
    c.danger_insecure = true;
    c.rails = RAILS;
    let (mut a, mut b, mut ra, mut rb) = pair_up(&time, &c);
    // Readiness the pairing left in the poller is read once.
    for _ in 0..3 {
        a.poll(time.now(), &mut ra, 64).unwrap();
    }
    let before = empty_reads(&a);
    for _ in 0..10 {
        a.poll(time.now(), &mut ra, 64).unwrap();
    }
    assert_eq!(
        empty_reads(&a),
        before,
        "ordinary polls read a rail for nothing"
    );
    for _ in 0..10 {
        a.poll_spinning(time.now(), &mut ra, 64).unwrap();
    }
    let spun = empty_reads(&a) - before;
    assert!(
        spun >= 10 * RAILS as u64,
        "ten spinning polls of {RAILS} rails read them {spun} times with nothing there"
    );
    let (h, m, p) = packet(1, 0, 7, 8);
    b.send(time.now(), &h, &m, &[(&p).into()]).unwrap();
    b.poll(time.now(), &mut rb, 64).unwrap();
    while ra.packets.is_empty() {
        a.poll_spinning(time.now(), &mut ra, 64).unwrap();
        assert!(
            !time.expired(),
            "the peer's packet taken in by spinning polls"
        );
    }
    assert_eq!(ra.packets[0].1.request.seq, 7);
}

fn busy_polling_stream(secure: bool, polls: Polls) {
    const HOLD: Duration = Duration::from_millis(20);
    let time = Time::new();
    let mut c = TcpConfig::new(NodeId(0), SocketAddr::from(([127, 0, 0, 1], 0)));
    if secure {
        c.secret = Some(ClusterSecret::from_bytes([0x5e; 32]));
    } else {
        c.danger_insecure = true;
    }
    c.rails = RAILS;
    c.busy_poll = polls == Polls::Busy;
    c.hold = HOLD;
    let (mut a, mut b, mut ra, mut rb) = pair_up(&time, &c);
    // Idle polls (no send before them) read every rail each time.
    let before = empty_reads(&a);
    for _ in 0..10 {
        polls.poll(&mut a, &time, &mut ra);
    }
    let idle = empty_reads(&a) - before;
    assert!(
        idle >= 10 * RAILS as u64,
        "ten idle busy polls of {RAILS} rails read them {idle} times with nothing there"
    );
    // The peer's link (what `hamlyn stat` lists per peer) counts its rails' empty reads.
    let link = a
        .link_stats()
        .into_iter()
        .find(|(n, _)| *n == NodeId(1))
        .map(|(_, l)| l.counters.empty_reads);
    assert_eq!(link, Some(empty_reads(&a)));
    // A stream: each poll follows a send. Halfway, the peer sends one packet back; the
    // stream goes on until it is taken in (should loopback hand it over late).
    let Streamed {
        sent,
        empty_reads: streaming,
        took,
    } = stream(
        &time,
        [&mut a, &mut b],
        [&mut ra, &mut rb],
        (polls, STREAM),
        &mut |b| {
            let (h, m, p) = packet(1, 0, 0, 8);
            b.send(time.now(), &h, &m, &[(&p).into()]).unwrap();
        },
        &|_, ra| !ra.packets.is_empty(),
        "the peer's packet taken in",
    );
    // One look per quarter hold begun, the first poll's, and a stale readiness event per
    // rail after the input (read directly, its event is still queued in the poller).
    let looks = took.as_nanos() / (HOLD / 4).as_nanos() + 3;
    let bound = RAILS as u64 * looks as u64;
    assert!(
        streaming <= bound,
        "{sent} polls of a stream read the rails {streaming} times with nothing there; \
         at most {RAILS} per quarter hold, {bound} in {took:?}"
    );
    all_arrive(&time, [&mut a, &mut b], [&mut ra, &mut rb], sent);
}

/// A connection that never finishes its handshake (a client that never says HELLO, until
/// the handshake deadline) does not make a streaming sender look for input on every
/// packet: a look every `HANDSHAKE_LOOK` at least (or per quarter hold, if shorter) keeps
/// handshakes going, not one per poll, which cost a busy-polling sender a read per rail
/// per packet. The connection is still read meanwhile: when it sends garbage halfway
/// through the stream, the fabric closes it before the stream ends (without busy polling
/// only the handshake look asks the poller then; with it, the poller's every-16th ask
/// does too).
#[test]
fn a_handshake_that_never_finishes_does_not_cost_a_stream_a_look_per_packet() {
    for polls in [Polls::Busy, Polls::Spinning, Polls::Ordinary] {
        silent_handshake_beside_a_stream(polls);
    }
}

fn silent_handshake_beside_a_stream(polls: Polls) {
    let time = Time::new();
    let mut c = TcpConfig::new(NodeId(0), SocketAddr::from(([127, 0, 0, 1], 0)));
    c.secret = Some(ClusterSecret::from_bytes([0x5e; 32]));
    c.rails = RAILS;
    c.busy_poll = polls == Polls::Busy;
    // A long hold: only the handshake look bounds the time between looks.
    c.hold = Duration::from_secs(1);
    let (mut a, mut b, mut ra, mut rb) = pair_up(&time, &c);
    // A client that connects and says nothing.
    let accepted = a.stats().accepted;
    let mut rogue = raw(a.local_addr());
    while a.stats().accepted == accepted {
        a.poll(time.now(), &mut ra, 64).unwrap();
        assert!(!time.expired(), "the rogue connection is accepted");
    }
    let closes = |a: &TcpFabric| -> u64 { a.stats().closes.iter().map(|(_, n)| n).sum() };
    let closed_before = closes(&a);
    let Streamed {
        sent,
        empty_reads: streaming,
        took,
    } = stream(
        &time,
        [&mut a, &mut b],
        [&mut ra, &mut rb],
        (polls, STREAM),
        &mut |_| {
            let mut garbage = [0u8; 64];
            SimRng::new(7).fill(&mut garbage);
            rogue.write_all(&garbage).unwrap();
        },
        &|a, _| closes(a) > closed_before,
        "the rogue's garbage closing it",
    );
    // Without busy polling, rails are read only when the poller says so: nothing to
    // bound there.
    let looks = took.as_nanos() / hamlyn_fabric::tcp::HANDSHAKE_LOOK.as_nanos() + 3;
    let bound = RAILS as u64 * looks as u64;
    assert!(
        !polls.direct() || streaming <= bound,
        "{sent} polls of a stream beside a silent handshake read the rails {streaming} times \
         with nothing there; at most {RAILS} per handshake look, {bound} in {took:?}"
    );
    all_arrive(&time, [&mut a, &mut b], [&mut ra, &mut rb], sent);
}

/// Rails of the pairs in the stream tests below.
const RAILS: usize = 2;
/// Packets those streams send at least.
const STREAM: u32 = 2_000;

/// Fabrics of nodes 0 and 1 set up as `c` says, polled until each sees the other up.
fn pair_up(time: &Time, c: &TcpConfig) -> (TcpFabric, TcpFabric, Rec, Rec) {
    let mut v = tcp_cluster(2, c).unwrap();
    let mut b = v.pop().unwrap();
    let mut a = v.pop().unwrap();
    let (mut ra, mut rb) = (Rec::default(), Rec::default());
    while ra.up(1).is_none() || rb.up(0).is_none() {
        a.poll(time.now(), &mut ra, 64).unwrap();
        b.poll(time.now(), &mut rb, 64).unwrap();
        assert!(!time.expired(), "the pair comes up");
        std::thread::sleep(Duration::from_micros(100));
    }
    (a, b, ra, rb)
}

/// Reads of node 1's rails by `a` that found nothing.
fn empty_reads(a: &TcpFabric) -> u64 {
    a.peer_stats(NodeId(1))
        .map_or(0, |p| p.rails.iter().map(|r| r.empty_reads).sum())
}

/// What [`stream`] did.
struct Streamed {
    /// Packets sent.
    sent: usize,
    /// Reads of node 1's rails by `a` that found nothing meanwhile.
    empty_reads: u64,
    /// How long it took.
    took: Duration,
}

/// Streams 8-byte packets from `a` to `b`, a send before each of `a`'s polls (as an
/// engine sends a packet per turn; `a` polls as `polls` says): at least `count`, and on
/// until `done(a, ra)` holds
/// (bounded by the test deadline, `what` naming it); `midway(b)` runs once, halfway
/// through `count`.
fn stream(
    time: &Time,
    [a, b]: [&mut TcpFabric; 2],
    [ra, rb]: [&mut Rec; 2],
    (polls, count): (Polls, u32),
    midway: &mut dyn FnMut(&mut TcpFabric),
    done: &dyn Fn(&TcpFabric, &Rec) -> bool,
    what: &str,
) -> Streamed {
    let start = std::time::Instant::now();
    let before = empty_reads(a);
    let mut seen = false;
    let mut seq = 0;
    while seq < count || !seen {
        assert!(!time.expired(), "streaming, no sign of {what}");
        if seq == count / 2 {
            midway(b);
        }
        let (h, m, p) = packet(0, 1, seq, 8);
        loop {
            match a.send(time.now(), &h, &m, &[(&p).into()]) {
                Ok(()) => break,
                Err(FabricError::Full) => {
                    b.poll(time.now(), rb, 64).unwrap();
                    assert!(!time.expired(), "stuck on Full");
                }
                Err(e) => panic!("send failed: {e}"),
            }
        }
        polls.poll(a, time, ra);
        seen = seen || done(a, ra);
        seq += 1;
    }
    Streamed {
        sent: seq as usize,
        empty_reads: empty_reads(a) - before,
        took: start.elapsed(),
    }
}

/// Flushes what `a` holds and polls both until `b` has `sent` packets.
fn all_arrive(time: &Time, [a, b]: [&mut TcpFabric; 2], [ra, rb]: [&mut Rec; 2], sent: usize) {
    let _ = a.prepare_sleep(time.now());
    while rb.packets.len() < sent {
        a.poll(time.now(), ra, 64).unwrap();
        b.poll(time.now(), rb, 64).unwrap();
        assert!(!time.expired(), "{} of {sent} arrived", rb.packets.len());
    }
}
