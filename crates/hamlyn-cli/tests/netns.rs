//! Three hosts made of network namespaces joined by veth pairs on a bridge, a real
//! `hamlyn node` daemon in each, and applications reaching them through the library
//! (issue "Many machines"). The daemons talk TCP across the namespaces; the test process
//! reaches each daemon's control socket through the filesystem and the hosts' TCP ports
//! through a leg of its own on the bridge.
//!
//! Shown here: ping-pong, a group receive from all three nodes, remote read,
//! compare-and-swap used as a lock by all three nodes (exact final count), garbage and a
//! copied HELLO from a stranger without the cluster secret (refused before any frame,
//! counted as authentication failures), forged keys from a connection that holds the
//! secret (refused per packet and NACKed; its forged NACK and forged read and atomic
//! answers refused and counted; its publish over another node's name refused as NotOwner;
//! its handshake, replayed, refused; its join query moving node 2, refused; one of its
//! records altered by a byte in flight, refused), traffic
//! unaffected
//! throughout, 1 GiB in
//! messages of mixed sizes across rails (checksummed), SIGKILL of one node's engine (the
//! others see it down within the heartbeat bound and go on; it restarts as a new
//! incarnation and traffic resumes; restarted with a roster, it refuses a member the
//! roster does not list, or lists under another key), and a veth link down and up (errors, then recovery).
//!
//! Needs root and `ip` (iproute2), as CI has. Everything it creates is named after the
//! test's process id and removed by a guard, whatever happens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hamlyn::{
    Area, Data, MetaArea, Node, NotificationKind, RejectReason, SendError, SendOptions, Slot,
    SlotPerms, Status, Ticket,
};
use hamlyn_fabric::tcp::frame::{Hello, JoinQuery};
use hamlyn_fabric::tcp::secure::{Link, Opened, MAX_PLAIN};
use hamlyn_fabric::tcp::{ClusterSecret, NodeKey};
use hamlyn_shm::sync::{AtomicU64, Ordering};
use hamlyn_wire::stats::{FabricStats, Stats, TcpCounters};
use hamlyn_wire::{Flags, Header, NodeId, Op, RequestId, Seed};

const HAMLYN: &str = env!("CARGO_BIN_EXE_hamlyn");
const WAIT: Option<Duration> = Some(Duration::from_secs(30));
const PORT: u16 = 7400;
/// The heartbeat bound: a silent peer is declared down after this. Generous, because the
/// daemons are debug builds sharing two cores with the test's own 1 GiB of checksumming:
/// a starved engine must not be mistaken for a dead one.
const PEER_TIMEOUT_MS: u64 = 2500;
/// The cluster's secret (`HAMLYN_SECRET` of every daemon), as between machines.
const SECRET: &str = "5ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7e75ec7";

fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("run a command");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Three hosts on one bridge, and a leg for the test process.
struct Net {
    tag: String,
    base: String,
    daemons: Vec<Option<Child>>,
    dir: PathBuf,
}

impl Net {
    fn ns(&self, i: usize) -> String {
        format!("{}n{i}", self.tag)
    }
    fn sw(&self) -> String {
        format!("{}sw", self.tag)
    }
    fn ip(&self, i: usize) -> String {
        format!("{}.{i}", self.base)
    }
    fn addr(&self, i: usize) -> SocketAddr {
        format!("{}:{PORT}", self.ip(i)).parse().unwrap()
    }
    fn socket(&self, i: usize) -> PathBuf {
        self.dir.join(format!("n{i}.sock"))
    }
    /// Node `i`'s key file (`--node-key`): created by its first start, kept across
    /// restarts; never the developer's own.
    fn key(&self, i: usize) -> PathBuf {
        self.dir.join(format!("n{i}.key"))
    }

    fn new() -> Net {
        let pid = std::process::id();
        let tag = format!("hm{}", pid % 100_000);
        let base = format!("10.{}.{}", 200 + pid % 50, (pid / 50) % 250);
        let dir = std::env::temp_dir().join(format!("hamlyn-netns-{pid}"));
        std::fs::create_dir_all(&dir).unwrap();
        let net = Net {
            tag,
            base,
            daemons: vec![None, None, None, None],
            dir,
        };
        let sw = net.sw();
        run(&["ip", "netns", "add", &sw]);
        run(&["ip", "-n", &sw, "link", "set", "lo", "up"]);
        run(&["ip", "-n", &sw, "link", "add", "br0", "type", "bridge"]);
        run(&["ip", "-n", &sw, "link", "set", "br0", "up"]);
        for i in 1..=3 {
            let (ns, v, s) = (
                net.ns(i),
                format!("{}v{i}", net.tag),
                format!("{}s{i}", net.tag),
            );
            run(&["ip", "netns", "add", &ns]);
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
            run(&["ip", "link", "add", &v, "type", "veth", "peer", "name", &s]);
            run(&["ip", "link", "set", &v, "netns", &ns]);
            run(&["ip", "link", "set", &s, "netns", &sw]);
            run(&["ip", "-n", &sw, "link", "set", &s, "master", "br0", "up"]);
            run(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", net.ip(i)),
                "dev",
                &v,
            ]);
            run(&["ip", "-n", &ns, "link", "set", &v, "up"]);
        }
        // The test process's own leg on the bridge, to reach the hosts' TCP ports.
        let (h, sh) = (format!("{}h", net.tag), format!("{}sh", net.tag));
        run(&["ip", "link", "add", &h, "type", "veth", "peer", "name", &sh]);
        run(&["ip", "link", "set", &sh, "netns", &sw]);
        run(&["ip", "-n", &sw, "link", "set", &sh, "master", "br0", "up"]);
        run(&[
            "ip",
            "addr",
            "add",
            &format!("{}/24", net.ip(100)),
            "dev",
            &h,
        ]);
        run(&["ip", "link", "set", &h, "up"]);
        net
    }

    /// Starts (or restarts) node `i`'s daemon in its namespace.
    fn start(&mut self, i: usize) {
        self.start_with(i, &[]);
    }

    /// [`Net::start`] with more arguments for `hamlyn node`.
    fn start_with(&mut self, i: usize, extra: &[&str]) {
        let _ = std::fs::remove_file(self.socket(i));
        let log = std::fs::File::create(self.dir.join(format!("n{i}.log"))).unwrap();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns(i), HAMLYN, "node"]);
        cmd.arg("--socket").arg(self.socket(i));
        cmd.args([
            "--node-id",
            &i.to_string(),
            "--listen",
            &self.addr(i).to_string(),
        ]);
        for j in (1..=3).filter(|&j| j != i) {
            cmd.args(["--peer", &format!("{j}@{}", self.addr(j))]);
        }
        cmd.args(["--rails", "2", "--registry", "1", "--heartbeat-ms", "250"]);
        cmd.args(["--peer-timeout-ms", &PEER_TIMEOUT_MS.to_string()]);
        cmd.arg("--node-key").arg(self.key(i));
        cmd.args(extra);
        // One machine's secret for the whole cluster, as between machines; never the
        // developer's own file.
        cmd.env("HAMLYN_SECRET", SECRET);
        cmd.stdout(Stdio::null()).stderr(log);
        self.daemons[i] = Some(cmd.spawn().expect("start hamlyn node"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.socket(i).exists() {
            assert!(Instant::now() < deadline, "node {i} never bound its socket");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILLs node `i`'s daemon (`ip netns exec` execs it: the child is the daemon).
    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.daemons[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn link(&self, i: usize, up: bool) {
        run(&[
            "ip",
            "-n",
            &self.sw(),
            "link",
            "set",
            &format!("{}s{i}", self.tag),
            if up { "up" } else { "down" },
        ]);
    }

    fn connect(&self, i: usize) -> Node {
        Node::connect(self.socket(i)).unwrap_or_else(|e| panic!("attach to node {i}: {e}"))
    }

    fn log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("n{i}.log"))).unwrap_or_default()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for i in 1..=3 {
            self.kill(i);
        }
        for i in 1..=3 {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(i)])
                .status();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.sw()])
            .status();
        let _ = Command::new("ip")
            .args(["link", "del", &format!("{}h", self.tag)])
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Reads `n` bytes of plaintext from the authenticated connection `s`.
fn read_plain(s: &mut TcpStream, link: &mut Link, have: &mut Vec<u8>, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; MAX_PLAIN];
    while have.len() < n {
        match link.open(&mut out).expect("records open") {
            Opened::Plain(k) => have.extend_from_slice(&out[..k]),
            Opened::NeedMore => {
                let k = s.read(link.read_buf()).expect("read");
                assert!(k > 0, "the node closed the connection");
                link.filled(k);
            }
            Opened::Secured | Opened::Reply => {}
        }
    }
    have.drain(..n).collect()
}

/// A connection to `addr` that holds the cluster secret and proves `key`: the Noise
/// handshake done (its third message sent), no HELLO sent yet. Returns the stream, the
/// secured link and the dialer's first handshake message (what a replay would copy).
fn member_link(
    addr: SocketAddr,
    secret: &ClusterSecret,
    key: &NodeKey,
) -> (TcpStream, Link, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let (mut link, first) = Link::dialer(secret, key).unwrap();
    s.write_all(&first).unwrap();
    let mut out = vec![0u8; MAX_PLAIN];
    while link.open(&mut out).unwrap() != Opened::Secured {
        let k = s.read(link.read_buf()).unwrap();
        assert!(k > 0, "the node closed the handshake");
        link.filled(k);
    }
    s.write_all(&link.take_handshake_out()).unwrap();
    (s, link, first)
}

/// Connections a node refused because the static key did not match the node id.
fn mismatches(stats: &Stats) -> u64 {
    tcp(stats)
        .closes
        .get("IdentityMismatch")
        .copied()
        .unwrap_or(0)
}

/// Opens a member's link to `addr`, sends `hello` and waits until the node closed the
/// connection without an answer and counted one more identity mismatch on `node`.
fn refused_claim(node: &Node, addr: SocketAddr, key: &NodeKey, hello: &Hello, what: &str) {
    let before = mismatches(&node.stats().unwrap());
    let secret = ClusterSecret::parse(SECRET).unwrap();
    let (mut s, mut link, _) = member_link(addr, &secret, key);
    s.write_all(link.seal_bytes(&hello.to_header().to_bytes()).unwrap())
        .unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{what}: answered");
    let deadline = Instant::now() + Duration::from_secs(10);
    while mismatches(&node.stats().unwrap()) <= before {
        assert!(Instant::now() < deadline, "{what}: not counted");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The TCP fabric's counters in `stats` (zero without a TCP fabric).
fn tcp(stats: &Stats) -> TcpCounters {
    match &stats.fabric {
        Some(FabricStats::Tcp(t)) => t.clone(),
        _ => TcpCounters::default(),
    }
}

/// Waits until `node`'s engine sees peer `peer` up (`true`) or down (`false`); returns its
/// incarnation when up.
fn wait_peer(node: &Node, peer: u32, up: bool, within: Duration) -> u32 {
    let deadline = Instant::now() + within;
    loop {
        let stats = node.stats().unwrap();
        if let Some(p) = stats.peer(peer).filter(|p| p.up == up) {
            return p.incarnation;
        }
        assert!(
            Instant::now() < deadline,
            "peer {peer} never {}: {stats:?}",
            if up { "up" } else { "down" }
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An inbox: area, metadata entries, a slot reporting to queue 0.
fn inbox(node: &Node, len: u64, entries: u32, perms: SlotPerms) -> (Area, MetaArea, Slot) {
    let area = node.area(len).unwrap();
    let meta = node.meta_area(entries).unwrap();
    let slot = node
        .slot(&area)
        .meta(&meta)
        .perms(perms)
        .queue(0)
        .create()
        .unwrap();
    (area, meta, slot)
}

const RW: SlotPerms = SlotPerms {
    write: true,
    read: true,
    atomic: true,
};
const W: SlotPerms = SlotPerms {
    write: true,
    read: false,
    atomic: false,
};

/// 8-byte tagged ping-pong between apps on nodes `x` and `y`.
fn ping_pong(a: &Node, b: &Node, rounds: u64) {
    let (area_a, _ma, slot_a) = inbox(a, 64, 1, W);
    let (area_b, _mb, slot_b) = inbox(b, 64, 1, W);
    let (to_a, to_b) = (slot_a.ticket_all().unwrap(), slot_b.ticket_all().unwrap());
    let pong = {
        let b = b.clone();
        std::thread::spawn(move || {
            let (mut q, mut t) = (b.queue(0).unwrap(), b.terminus(0).unwrap());
            for r in 0..rounds {
                let n = q.wait(WAIT).unwrap().expect("ping");
                assert_eq!(n.word, r);
                assert_eq!(area_b.read_vec(0, 8).unwrap(), r.to_le_bytes());
                t.send(
                    &to_a,
                    &SendOptions::new().tag(r),
                    Data::Inline(&(r + 7).to_le_bytes()),
                )
                .unwrap();
            }
        })
    };
    let (mut q, mut t) = (a.queue(0).unwrap(), a.terminus(0).unwrap());
    for r in 0..rounds {
        t.send(
            &to_b,
            &SendOptions::new().tag(r),
            Data::Inline(&r.to_le_bytes()),
        )
        .unwrap();
        let n = q.wait(WAIT).unwrap().expect("pong");
        assert_eq!(
            (n.kind, n.word, n.src_node),
            (NotificationKind::Message, r, b.id())
        );
        assert_eq!(area_a.read_vec(0, 8).unwrap(), (r + 7).to_le_bytes());
    }
    pong.join().unwrap();
}

/// The byte pattern of message `i`.
fn pattern(i: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A fast 64-bit checksum (FNV-1a over 8-byte words).
fn checksum(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for c in bytes.chunks(8) {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0x100_0000_01b3);
    }
    h ^ bytes.len() as u64
}

/// Why this machine cannot run the test, if it cannot: it needs root and `ip`.
fn cannot_run() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root (network namespaces need CAP_SYS_ADMIN)".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("no `ip` command (apt-get install iproute2)".into()),
    }
}

#[test]
fn three_hosts_in_network_namespaces() {
    if let Some(why) = cannot_run() {
        eprintln!("skipped: three_hosts_in_network_namespaces: {why}");
        return;
    }
    let mut net = Net::new();
    for i in 1..=3 {
        net.start(i);
    }
    let nodes: Vec<Node> = (0..=3)
        .map(|i| {
            if i == 0 {
                net.connect(1)
            } else {
                net.connect(i)
            }
        })
        .collect();
    for (i, node) in nodes.iter().enumerate().skip(1) {
        for j in (1..=3u32).filter(|&j| j as usize != i) {
            wait_peer(node, j, true, Duration::from_secs(30));
        }
    }

    // 1. Ping-pong across hosts.
    ping_pong(&nodes[1], &nodes[2], 200);
    ping_pong(&nodes[3], &nodes[1], 50);

    // 2. A group receive from all three nodes: one ticket split three ways.
    {
        let part = 300 * 1024u64;
        let (area, _meta, slot) = inbox(&nodes[1], 3 * part, 1, W);
        let parts = slot.ticket(0..3 * part, 0..1).unwrap().split(3).unwrap();
        let mut q = nodes[1].queue(0).unwrap();
        let send = |i: usize, t: &Ticket| {
            let src = nodes[i].area(part).unwrap();
            src.write(0, &pattern(i as u64, part as usize)).unwrap();
            let mut term = nodes[i].terminus(0).unwrap();
            let h = term
                .send(
                    t,
                    &SendOptions::new().tag(99),
                    Data::Gather(&[src.span(0, part)]),
                )
                .unwrap();
            assert_eq!(h.wait(WAIT), Status::Sent, "group part from node {i}");
        };
        send(2, &parts[0]);
        send(3, &parts[1]);
        std::thread::sleep(Duration::from_millis(100));
        assert!(q.poll().is_none(), "two of three parts are not the group");
        send(1, &parts[2]);
        let n = q
            .wait(WAIT)
            .unwrap()
            .expect("one notification for the group");
        assert_eq!((n.kind, n.word), (NotificationKind::Message, 99));
        for (k, i) in [(0u64, 2u64), (1, 3), (2, 1)] {
            assert!(
                area.read_vec(k * part, part as usize).unwrap() == pattern(i, part as usize),
                "part {k}"
            );
        }
        std::thread::sleep(Duration::from_millis(50));
        assert!(q.poll().is_none(), "exactly one notification");
    }

    // 3. Remote read: node 3 reads 64 KiB that node 1 holds.
    let (shared, _smeta, shared_slot) = inbox(&nodes[1], 1 << 20, 1, RW);
    let shared_ticket = shared_slot.ticket_all().unwrap();
    {
        let data = pattern(42, 64 * 1024);
        shared.write(4096, &data).unwrap();
        let (reply_area, _rm, reply_slot) = inbox(&nodes[3], 64 * 1024, 1, W);
        let reply = reply_slot.ticket_all().unwrap();
        let mut q = nodes[3].queue(0).unwrap();
        let mut t = nodes[3].terminus(0).unwrap();
        t.read(&hamlyn::ReadArgs {
            source: &shared_ticket,
            offset: 4096,
            len: 64 * 1024,
            reply: &reply,
            reply_offset: 0,
        })
        .unwrap();
        let n = q.wait(WAIT).unwrap().expect("ReadDone");
        assert_eq!(
            (n.kind, n.src_node),
            (NotificationKind::ReadDone, NodeId(1))
        );
        assert!(
            reply_area.read_vec(0, 64 * 1024).unwrap() == data,
            "remote read byte-exact"
        );
    }

    // 4. Compare-and-swap as a lock, taken by all three nodes; the counter it protects
    // is read and written only while holding it (word 0: lock, word 8: counter).
    {
        shared.write(0, &[0u8; 16]).unwrap();
        let rounds = 15u64;
        let workers: Vec<_> = (1..=3u64)
            .map(|id| {
                let node = nodes[id as usize].clone();
                let target = shared_ticket;
                std::thread::spawn(move || {
                    let (_ra, _rm, reply_slot) = inbox(&node, 64, 1, W);
                    let reply = reply_slot.ticket_all().unwrap();
                    let mut q = node.queue(0).unwrap();
                    let mut t = node.terminus(0).unwrap();
                    let mut atomic =
                        |t: &mut hamlyn::Terminus, cas: Option<(u64, u64)>, off: u64| -> u64 {
                            match cas {
                                Some((expected, new)) => t
                                    .compare_swap(&hamlyn::CompareSwapArgs {
                                        target: &target,
                                        offset: off,
                                        expected,
                                        new,
                                        reply: &reply,
                                        reply_offset: 0,
                                    })
                                    .unwrap(),
                                None => t
                                    .fetch_add(&hamlyn::FetchAddArgs {
                                        target: &target,
                                        offset: off,
                                        addend: 0,
                                        reply: &reply,
                                        reply_offset: 0,
                                    })
                                    .unwrap(),
                            };
                            let n = q.wait(WAIT).unwrap().expect("AtomicDone");
                            assert_eq!(n.kind, NotificationKind::AtomicDone);
                            n.word
                        };
                    for _ in 0..rounds {
                        while atomic(&mut t, Some((0, id)), 0) != 0 {}
                        let v = atomic(&mut t, None, 8);
                        assert_eq!(
                            atomic(&mut t, Some((v, v + 1)), 8),
                            v,
                            "nobody else inside the lock"
                        );
                        assert_eq!(atomic(&mut t, Some((id, 0)), 0), id, "we held the lock");
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(
            shared.read_vec(8, 8).unwrap(),
            (3 * rounds).to_le_bytes(),
            "final count"
        );
        assert_eq!(
            shared.read_vec(0, 8).unwrap(),
            0u64.to_le_bytes(),
            "lock free at the end"
        );
    }

    // 5. Strangers without the secret on node 1's TCP port — garbage, a truncated
    // header, a well-formed HELLO in clear — are refused before any frame and counted;
    // a connection holding the secret that forges keys and out-of-range offsets has
    // each packet refused and NACKed; legitimate traffic is unaffected.
    {
        let (victim_area, _meta, victim) = inbox(&nodes[1], 4096, 1, W);
        let before = nodes[1].stats().unwrap();
        let mut junk = TcpStream::connect(net.addr(1)).unwrap();
        junk.write_all(&pattern(7, 4096)).unwrap();
        let mut truncated = TcpStream::connect(net.addr(1)).unwrap();
        truncated
            .write_all(&Header::new(Op::Write).to_bytes()[..40])
            .unwrap();
        drop(truncated);
        let hello = Hello {
            from: NodeId(0),
            to: NodeId(1),
            incarnation: 1,
            session: 1,
            rail: 0,
            rails: 1,
        };
        let mut stranger = TcpStream::connect(net.addr(1)).unwrap();
        stranger.write_all(&hello.to_header().to_bytes()).unwrap();
        stranger
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut answer = [0u8; 64];
        assert!(
            !matches!(stranger.read(&mut answer), Ok(n) if n > 0),
            "a HELLO in clear gets no answer"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let stats = nodes[1].stats().unwrap();
            if tcp(&stats).auth_failures >= 3 + tcp(&before).auth_failures {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "strangers not counted: {stats:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // A connection that holds the secret (the handshake, then the HELLO of a session
        // as node 0, which dials as the lower id), then forged packets.
        let secret = ClusterSecret::parse(SECRET).unwrap();
        // The member's own static key: node 1 pins it to node 0 on this first contact.
        let member = NodeKey::from_private([0x3e; 32]).unwrap();
        let (mut s, mut link, first) = member_link(net.addr(1), &secret, &member);
        let mut have = Vec::new();
        s.write_all(link.seal_bytes(&hello.to_header().to_bytes()).unwrap())
            .unwrap();
        read_plain(&mut s, &mut link, &mut have, 64);
        let forged = |key: u64, offset: u64| {
            let mut h = Header::new(Op::Write);
            h.flags = Flags::FIRST | Flags::LAST | Flags::NOTIFY_NOW | Flags::NOTIFY;
            h.src = NodeId(0);
            h.dst = NodeId(1);
            h.slot = victim.id();
            h.key = key;
            h.offset = offset;
            h.request = RequestId {
                terminus: 1,
                seq: 1,
            };
            h.to_packet(&[], &[0xEE; 16]).unwrap()
        };
        let good_key = victim.ticket_all().unwrap().key;
        for packet in [forged(good_key ^ 0xFFFF, 0), forged(good_key, 4090)] {
            s.write_all(link.seal_bytes(&packet).unwrap()).unwrap();
        }
        // The NACKs come back on the connection: header-sized frames with op Nack.
        for _ in 0..2 {
            let answer = read_plain(&mut s, &mut link, &mut have, 64);
            let h = Header::parse(&answer).unwrap();
            assert_eq!(h.op, Op::Nack);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let after = loop {
            let stats = nodes[1].stats().unwrap();
            let rejects = |r| stats.interface.rejects.get(r).copied().unwrap_or(0);
            if rejects("bad_key") >= 1 && rejects("out_of_bounds") >= 1 {
                break stats;
            }
            assert!(
                Instant::now() < deadline,
                "forgeries not counted: {stats:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let rejects = |reason| after.interface.rejects.get(reason).copied().unwrap_or(0);
        assert!(rejects("bad_key") >= 1, "{after:?}");
        assert!(rejects("out_of_bounds") >= 1, "{after:?}");
        // The member forges what only answers may carry: a NACK for a request node 1
        // never sent it, and a read's and an atomic's answer aimed at a slot whose key it
        // holds (as the target of a read learns the reply key). Refused and counted,
        // nothing written, nothing notified.
        let mut nack = Header::new(Op::Nack);
        nack.src = NodeId(0);
        nack.dst = NodeId(1);
        nack.word = 1;
        nack.request = RequestId {
            terminus: 0x100,
            seq: 1,
        };
        let answer = |op: Op| {
            let mut h = Header::new(op);
            h.flags = Flags::FIRST | Flags::LAST | Flags::NOTIFY;
            h.src = NodeId(0);
            h.dst = NodeId(1);
            h.slot = victim.id();
            h.key = good_key;
            h.delta = 1;
            h.request = nack.request;
            h.to_packet(&[], &[0xEE; 8]).unwrap()
        };
        for packet in [
            nack.to_bytes().to_vec(),
            answer(Op::ReadResp),
            answer(Op::AtomicResp),
        ] {
            s.write_all(link.seal_bytes(&packet).unwrap()).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let e = nodes[1].stats().unwrap().engine;
            if e.unmatched_nacks > after.engine.unmatched_nacks
                && e.unexpected_answers >= after.engine.unexpected_answers + 2
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "forged answers not counted: {e:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            victim_area.read_vec(0, 8).unwrap(),
            [0u8; 8],
            "a forged answer wrote into the slot"
        );
        // The member tries to take over a name a client of node 2 published: the
        // registry (node 1) answers NotOwner, and the name still resolves to the owner's.
        let owned = Seed::single(victim.ticket_all().unwrap());
        nodes[2].publish("netns-owned", &owned).unwrap();
        let mut grab = Header::new(Op::Registry);
        grab.src = NodeId(0);
        grab.dst = NodeId(1);
        grab.request = RequestId {
            terminus: 0,
            seq: 77,
        };
        let body = hamlyn_wire::control::Request::Publish {
            name: "netns-owned".into(),
            seed: Seed::single(shared_ticket).to_text().unwrap(),
        }
        .encode();
        s.write_all(
            link.seal_bytes(&grab.to_packet(&[], &body).unwrap())
                .unwrap(),
        )
        .unwrap();
        let answer = loop {
            let h = Header::parse(&read_plain(&mut s, &mut link, &mut have, 64)).unwrap();
            let rest = usize::from(h.meta_len) + h.payload_len as usize;
            let body = read_plain(&mut s, &mut link, &mut have, rest);
            if h.op == Op::Registry && h.request.seq == 77 {
                break hamlyn_wire::control::Reply::decode(&body[usize::from(h.meta_len)..])
                    .unwrap();
            }
        };
        assert!(
            matches!(
                answer,
                hamlyn_wire::control::Reply::Error { code, .. }
                    if code == hamlyn_wire::control::ControlErrorCode::NotOwner as u16
            ),
            "{answer:?}"
        );
        for n in [&nodes[1], &nodes[3]] {
            assert_eq!(n.lookup("netns-owned").unwrap(), owned, "the owner's seed");
        }
        // The member's first handshake message, replayed on a new connection, is refused
        // (its ephemeral key was seen) and counted.
        let failures = tcp(&nodes[1].stats().unwrap()).auth_failures;
        let mut replay = TcpStream::connect(net.addr(1)).unwrap();
        replay.write_all(&first).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while tcp(&nodes[1].stats().unwrap()).auth_failures <= failures {
            assert!(
                Instant::now() < deadline,
                "a replayed handshake was not refused"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // A member's join query claiming node 2 (up) from the test's own address would
        // move node 2 there for node 1's next dial: refused (the member's key is not the
        // one node 1 pinned to node 2), closed without an answer.
        let before_joins = mismatches(&nodes[1].stats().unwrap());
        let (mut j, mut jlink, _) = member_link(net.addr(1), &secret, &member);
        let query = JoinQuery {
            from: NodeId(2),
            listen_port: PORT + 1,
        };
        j.write_all(jlink.seal_bytes(&query.to_header().to_bytes()).unwrap())
            .unwrap();
        let mut rest = Vec::new();
        let _ = j.read_to_end(&mut rest);
        assert!(
            rest.is_empty(),
            "a join query moving a live peer got an answer"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while mismatches(&nodes[1].stats().unwrap()) <= before_joins {
            assert!(
                Instant::now() < deadline,
                "the moving join query was not refused"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The member claims node 1 (up; node 3 pinned its key on first contact) to node
        // 3, with the highest incarnation there is: refused before anything else,
        // counted, unanswered; node 3 still has node 1 up with the same incarnation.
        let incarnation = wait_peer(&nodes[3], 1, true, Duration::from_secs(1));
        let claim = Hello {
            from: NodeId(1),
            to: NodeId(3),
            incarnation: u32::MAX,
            session: u64::MAX,
            rail: 0,
            rails: 2,
        };
        refused_claim(&nodes[3], net.addr(3), &member, &claim, "node 1 claimed");
        assert_eq!(
            wait_peer(&nodes[3], 1, true, Duration::from_secs(1)),
            incarnation,
            "node 1 declared stale"
        );
        ping_pong(&nodes[3], &nodes[1], 20);
        // A man in the middle alters one byte of a sealed data record (what the member
        // sends, a write to the victim): refused as a frame that does not open, counted,
        // the connection closed; nothing written.
        drop(s);
        let refused_before = tcp(&nodes[1].stats().unwrap()).frames_refused;
        let (mut m, mut mlink, _) = member_link(net.addr(1), &secret, &member);
        let later = Hello {
            session: 2,
            ..hello
        };
        m.write_all(mlink.seal_bytes(&later.to_header().to_bytes()).unwrap())
            .unwrap();
        let mut tampered = mlink.seal_bytes(&forged(good_key, 64)).unwrap().to_vec();
        let mid = tampered.len() / 2;
        tampered[mid] ^= 0x01;
        m.write_all(&tampered).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while tcp(&nodes[1].stats().unwrap()).frames_refused <= refused_before {
            assert!(
                Instant::now() < deadline,
                "an altered record was not refused: {:?}",
                tcp(&nodes[1].stats().unwrap())
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            victim_area.read_vec(64, 16).unwrap(),
            [0u8; 16],
            "an altered record wrote into the slot"
        );
        drop((junk, stranger, replay, m));
        ping_pong(&nodes[2], &nodes[1], 50);
    }

    // 6. 1 GiB from node 2 to node 1 in messages of mixed sizes, striped across two
    // rails, each checked by a checksum at the receiver.
    {
        const RING: u64 = 32 << 20;
        const TOTAL: u64 = 1 << 30;
        let sizes = [4096u64, 61_440, 1 << 20, (3 << 20) + 5, 262_144, 100_003];
        // One metadata entry per message in flight (packets of different messages must not
        // share an accumulator): 64 entries, at most 64 messages outstanding.
        const ENTRIES: u32 = 64;
        let (ring, _meta, slot) = inbox(&nodes[1], RING, ENTRIES, W);
        let ticket = slot.ticket_all().unwrap();
        // The sender's schedule: (offset in the ring, length) of message i.
        let mut schedule = Vec::new();
        let (mut sent, mut at) = (0u64, 0u64);
        while sent < TOTAL {
            let len = sizes[schedule.len() % sizes.len()].min(TOTAL - sent);
            if at + len > RING {
                at = 0;
            }
            schedule.push((at, len));
            at += len;
            sent += len;
        }
        let schedule = Arc::new(schedule);
        let consumed = Arc::new(AtomicU64::new(0)); // bytes the receiver has checked
        let consumed_msgs = Arc::new(AtomicU64::new(0)); // messages, as a prefix
        let sender = {
            let (node, schedule, consumed) = (nodes[2].clone(), schedule.clone(), consumed.clone());
            let consumed_msgs = consumed_msgs.clone();
            std::thread::spawn(move || {
                let src = node.area(RING).unwrap();
                let mut t = node.terminus(0).unwrap();
                let mut produced = 0u64;
                for (i, &(off, len)) in schedule.iter().enumerate() {
                    // Never overwrite what the receiver has not checked (Acquire: pairs
                    // with its Release store after checking).
                    while produced + len > consumed.load(Ordering::Acquire) + RING / 2
                        || i as u64 >= consumed_msgs.load(Ordering::Acquire) + u64::from(ENTRIES)
                    {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    while !t.can_reuse(&src, off, len) {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                    src.write(off, &pattern(i as u64, len as usize)).unwrap();
                    let opts = SendOptions::new()
                        .offset(off)
                        .tag(i as u64)
                        .entry(i as u32 % ENTRIES);
                    loop {
                        match t.send(&ticket, &opts, Data::Gather(&[src.span(off, len)])) {
                            Ok(_) => break,
                            Err(SendError::Full) => std::thread::sleep(Duration::from_micros(50)),
                            Err(e) => panic!("send {i}: {e}"),
                        }
                    }
                    produced += len;
                }
                assert!(t.wait_idle(WAIT), "every message left");
            })
        };
        // Packets are striped over rails, so messages may complete in any order; the
        // sender's window moves over the prefix of messages checked so far.
        let mut q = nodes[1].queue(0).unwrap();
        let mut done = vec![false; schedule.len()];
        let (mut prefix, mut checked, mut out_of_order) = (0usize, 0u64, 0u64);
        for k in 0..schedule.len() {
            let n = q.wait(WAIT).unwrap().unwrap_or_else(|| {
                panic!(
                    "{k} of {} messages arrived (missing: {:?})\nnode 1: {:?}\nnode 2: {:?}\nnode 1 log: {}\nnode 2 log: {}",
                    schedule.len(),
                    done.iter()
                        .enumerate()
                        .filter(|(_, d)| !**d)
                        .map(|(i, _)| i)
                        .take(8)
                        .collect::<Vec<_>>(),
                    nodes[1].stats().ok(),
                    nodes[2].stats().ok(),
                    net.log(1),
                    net.log(2)
                )
            });
            if n.kind != NotificationKind::Message {
                panic!(
                    "{:?} from node {} during the transfer (a peer was declared down, so packets in flight were lost)\nnode 1 log: {}\nnode 2 log: {}",
                    n.kind,
                    n.src_node.0,
                    net.log(1),
                    net.log(2)
                );
            }
            let i = n.word as usize;
            assert!(
                i < schedule.len() && !done[i],
                "message {i}: unknown or notified twice"
            );
            out_of_order += u64::from(i != prefix);
            let (off, len) = schedule[i];
            let got = ring.read_vec(off, len as usize).unwrap();
            assert_eq!(
                checksum(&got),
                checksum(&pattern(i as u64, len as usize)),
                "message {i} ({len} bytes) corrupted"
            );
            done[i] = true;
            while prefix < done.len() && done[prefix] {
                checked += schedule[prefix].1;
                prefix += 1;
            }
            // Release: pairs with the sender's Acquire loads of `consumed` and
            // `consumed_msgs`.
            consumed.store(checked, Ordering::Release);
            consumed_msgs.store(prefix as u64, Ordering::Release);
        }
        eprintln!(
            "1 GiB in {} messages, {out_of_order} completed out of order",
            schedule.len()
        );
        sender.join().unwrap();
        assert_eq!(checked, TOTAL);
        let stats = nodes[1].stats().unwrap();
        assert_eq!(stats.engine.queue_overflows, 0, "{stats:?}");
    }

    // 7. SIGKILL node 3's engine in the middle of traffic: nodes 1 and 2 see it down
    // within the heartbeat bound and keep working; restarted, it is a new incarnation
    // and traffic resumes.
    {
        let old_incarnation = wait_peer(&nodes[1], 3, true, Duration::from_secs(1));
        let (_a, _m, to_three) = inbox(&nodes[3], 1 << 20, 1, W);
        let stale = to_three.ticket_all().unwrap();
        // Its own client of node 1 (nodes[0]), so the stream does not share a queue with
        // the ping-pong below.
        let (_b, _n, from_three) = inbox(&nodes[0], 1 << 20, 1, W);
        let to_one = from_three.ticket_all().unwrap();
        let streamer = {
            let node = nodes[3].clone();
            std::thread::spawn(move || {
                let mut t = node.terminus(0).unwrap();
                let payload = [3u8; 100];
                // Sends until the engine is gone: the library then reports errors.
                for i in 0..1_000_000u64 {
                    match t.send(&to_one, &SendOptions::new().tag(i), Data::Inline(&payload)) {
                        Ok(_) | Err(SendError::Full) => {
                            std::thread::sleep(Duration::from_micros(100))
                        }
                        Err(_) => return i,
                    }
                }
                u64::MAX
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        let killed = Instant::now();
        net.kill(3);
        wait_peer(
            &nodes[1],
            3,
            false,
            Duration::from_millis(PEER_TIMEOUT_MS * 5),
        );
        wait_peer(
            &nodes[2],
            3,
            false,
            Duration::from_millis(PEER_TIMEOUT_MS * 5),
        );
        eprintln!(
            "node 3 seen down {} ms after SIGKILL",
            killed.elapsed().as_millis()
        );
        ping_pong(&nodes[1], &nodes[2], 50);
        // A send to the dead node fails with PeerDown.
        let mut t = nodes[1].terminus(0).unwrap();
        let h = t
            .send(&stale, &SendOptions::new(), Data::Inline(b"anyone?"))
            .unwrap();
        assert_eq!(h.wait(WAIT), Status::Failed(RejectReason::PeerDown));
        drop(t);
        // Restart: a new incarnation, with its key (nodes 1 and 2 pinned it), rejoins;
        // now with a roster of nodes 1 to 3, their lines printed by `hamlyn key show`.
        let mut roster = String::new();
        for i in 1..=3 {
            let key = net.key(i);
            let out = Command::new(HAMLYN)
                .args(["key", "show", "--node-id", &i.to_string(), "--node-key"])
                .arg(&key)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            roster.push_str(&String::from_utf8(out.stdout).unwrap());
        }
        let roster_file = net.dir.join("roster");
        std::fs::write(&roster_file, &roster).unwrap();
        net.start_with(3, &["--roster", roster_file.to_str().unwrap()]);
        let new_incarnation = wait_peer(&nodes[1], 3, true, Duration::from_secs(30));
        wait_peer(&nodes[2], 3, true, Duration::from_secs(30));
        assert!(
            new_incarnation > old_incarnation,
            "{new_incarnation} after {old_incarnation}"
        );
        drop(streamer);
        let three = net.connect(3);
        ping_pong(&three, &nodes[1], 50);
        // A ticket from the old incarnation is refused as stale.
        let mut t = nodes[2].terminus(0).unwrap();
        let h = t
            .send(&stale, &SendOptions::new(), Data::Inline(b"old ticket"))
            .unwrap();
        assert_eq!(h.wait(WAIT), Status::Failed(RejectReason::StaleIncarnation));
        // With the roster, a member with the secret is refused as a node the roster
        // does not list (node 0), and as a listed one (node 2) under its own key.
        let member = NodeKey::from_private([0x3e; 32]).unwrap();
        let unlisted = Hello {
            from: NodeId(0),
            to: NodeId(3),
            incarnation: 1,
            session: 1,
            rail: 0,
            rails: 1,
        };
        refused_claim(&three, net.addr(3), &member, &unlisted, "unlisted node 0");
        let listed = Hello {
            from: NodeId(2),
            ..unlisted
        };
        refused_claim(&three, net.addr(3), &member, &listed, "node 2 claimed");
        ping_pong(&three, &nodes[2], 20);
    }

    // 8. A link goes down (node 2's veth on the bridge) and comes back. A name a client
    // of node 2 published is dropped by the registry (node 1) while node 2 is down, and
    // published again by node 2's engine when the registry node is back: its client is
    // still there. So is an active-message handler it registered: live again, in the
    // same epoch (messages numbered before the partition still name it).
    {
        let (_a, _m, slot) = inbox(&nodes[2], 4096, 1, W);
        let to_two = slot.ticket_all().unwrap();
        let kept = Seed::single(to_two);
        nodes[2].publish("netns-partition", &kept).unwrap();
        assert_eq!(nodes[1].lookup("netns-partition").unwrap(), kept);
        nodes[2]
            .am_register(&[("netns.partition.handler".to_string(), 0x5eed)])
            .unwrap();
        let handler = |node: &hamlyn::Node| {
            let (_, table) = node.am_table().unwrap();
            table
                .into_iter()
                .find(|e| e.name == "netns.partition.handler")
                .map(|e| (e.id, e.epoch, e.live))
        };
        let before = handler(&nodes[1]).expect("registered");
        assert!(before.2, "live before the partition");
        net.link(2, false);
        wait_peer(
            &nodes[1],
            2,
            false,
            Duration::from_millis(PEER_TIMEOUT_MS * 5),
        );
        let mut t = nodes[1].terminus(0).unwrap();
        let h = t
            .send(&to_two, &SendOptions::new(), Data::Inline(b"link down"))
            .unwrap();
        assert_eq!(h.wait(WAIT), Status::Failed(RejectReason::PeerDown));
        assert!(
            nodes[1].lookup("netns-partition").is_err(),
            "the registry drops the names of a node it lost"
        );
        assert_eq!(
            handler(&nodes[1]),
            Some((before.0, before.1, false)),
            "the registry no longer counts a handler of a node it lost as live"
        );
        net.link(2, true);
        wait_peer(&nodes[1], 2, true, Duration::from_secs(30));
        ping_pong(&nodes[1], &nodes[2], 50);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match nodes[1].lookup("netns-partition") {
                Ok(seed) => {
                    assert_eq!(seed, kept);
                    break;
                }
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "the name never came back after the partition: {e}"
                ),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        loop {
            let now = handler(&nodes[1]);
            if now == Some((before.0, before.1, true)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the handler never came back live in its epoch after the partition: {now:?} \
                 (before: {before:?})"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for i in 1..=3 {
        let log = net.log(i);
        assert!(!log.contains("panicked"), "node {i} log: {log}");
    }
}
