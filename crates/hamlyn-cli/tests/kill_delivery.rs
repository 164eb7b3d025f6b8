//! Issue 16 part 4 with real processes: two `hamlyn node` daemons joined over TCP on
//! loopback, a client of each streaming writes to the other, and node 1 SIGKILLed in the
//! middle of the streams. Every write of node 0's client ends either delivered — node 1's
//! slot (an area this test process still maps after the daemon died) holds its bytes,
//! checked byte by byte — or `Failed(PeerDown)`: none reported sent and missing.
//!
//! Every wait is bounded; the only processes killed are the daemons this test started,
//! by their pid.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{TempDir, BIN};
use hamlyn::{
    Area, Data, Node, NodeOptions, RejectReason, SendError, SendHandle, SendOptions, Status,
    Terminus, Ticket,
};

/// Room per message (each one packet).
const ROOM: u64 = 16 << 10;
const N: u64 = 800;

/// A daemon, killed (by its pid) if the test ends before it stops.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    l.local_addr().expect("local address").port()
}

fn daemon(config_home: &Path, socket: &Path, id: u32, listen: u16, peer: (u32, u16)) -> Daemon {
    Daemon(
        Command::new(BIN)
            .args([
                "node",
                "--socket",
                socket.to_str().expect("utf-8 path"),
                "--node-id",
                &id.to_string(),
                "--listen",
                &format!("127.0.0.1:{listen}"),
                "--peer",
                &format!("{}@127.0.0.1:{}", peer.0, peer.1),
                "--rails",
                "2",
            ])
            .env_remove("HAMLYN_SOCKET")
            .env_remove("HAMLYN_SECRET")
            .env("XDG_CONFIG_HOME", config_home)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start hamlyn node"),
    )
}

fn wait_for_path(p: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !p.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn len(i: u64) -> u64 {
    1 + (i * 7919) % ROOM
}

fn byte(dir: u8, i: u64, j: u64) -> u8 {
    (((i * 131 + j * 7) as u32).wrapping_mul(2_654_435_761) >> 24) as u8 ^ dir | 1
}

/// One client: its node, an inbox slot's ticket for the other side, and a send area
/// holding every message it will send.
struct Side {
    node: Node,
    inbox: Area,
    ticket: Ticket,
    src: Area,
}

fn side(socket: &Path, dir: u8) -> Side {
    let node = Node::connect_with(
        socket,
        NodeOptions {
            termini: 1,
            queues: 1,
            queue_cap: 64,
            ..NodeOptions::default()
        },
    )
    .expect("attach");
    let inbox = node.area(N * ROOM).expect("inbox");
    let meta = node.meta_area(4).expect("meta area");
    let slot = node
        .slot(&inbox)
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot");
    let ticket = slot.ticket(0..N * ROOM, 0..1).expect("ticket");
    std::mem::forget(slot); // kept for the test's life (the daemon may die first)
    let src = node.area(N * ROOM).expect("send area");
    for i in 0..N {
        let bytes: Vec<u8> = (0..len(i)).map(|j| byte(dir, i, j)).collect();
        src.write(i * ROOM, &bytes).expect("fill");
    }
    Side {
        node,
        inbox,
        ticket,
        src,
    }
}

/// Sends message `i` (bounded retries while the terminus is full); `None` once the
/// engine is gone.
fn send(t: &mut Terminus, from: &Area, to: &Ticket, i: u64) -> Option<SendHandle> {
    let opts = SendOptions::new()
        .offset(i * ROOM)
        .tag(i)
        .notify(false)
        .wake(false);
    for _ in 0..100_000 {
        match t.send(to, &opts, Data::Gather(&[from.span(i * ROOM, len(i))])) {
            Ok(h) => return Some(h),
            // Back-pressure: the ring, or every metadata entry busy with a long message.
            Err(SendError::Full | SendError::EntriesBusy) => {
                std::thread::sleep(Duration::from_micros(100))
            }
            Err(SendError::EngineGone) => return None,
            Err(e) => panic!("send {i}: {e}"),
        }
    }
    panic!("terminus full for 10 s");
}

#[test]
fn node_sigkilled_mid_stream_leaves_nothing_sent_and_missing() {
    let dir = TempDir::new("kill-delivery");
    let sockets: [PathBuf; 2] = [dir.path("n0.sock"), dir.path("n1.sock")];
    let ports = [free_port(), free_port()];
    let config_home = dir.path("config");
    let _n0 = daemon(&config_home, &sockets[0], 0, ports[0], (1, ports[1]));
    wait_for_path(&sockets[0]);
    let mut n1 = daemon(&config_home, &sockets[1], 1, ports[1], (0, ports[0]));
    wait_for_path(&sockets[1]);

    let a = side(&sockets[0], 0xA0);
    let b = side(&sockets[1], 0xB0);
    let mut ta = a.node.terminus(0).expect("terminus");
    let mut tb = b.node.terminus(0).expect("terminus");
    // Until the nodes see each other, sends fail PeerDown; wait for one that goes.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let h = send(&mut ta, &a.src, &b.ticket, 0).expect("node 0 is alive");
        if h.wait(Some(Duration::from_secs(10))) == Status::Sent {
            break;
        }
        assert!(Instant::now() < deadline, "node 1 never reachable");
        std::thread::sleep(Duration::from_millis(50));
    }

    let mut handles: Vec<(u64, SendHandle)> = Vec::new();
    for i in 0..N {
        if i == N / 2 {
            n1.0.kill().expect("SIGKILL node 1");
            let _ = n1.0.wait();
        }
        let h = send(&mut ta, &a.src, &b.ticket, i).expect("node 0 is alive");
        handles.push((i, h));
        if i < N / 2 {
            let _ = send(&mut tb, &b.src, &a.ticket, i);
        }
        if i % 8 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    // Each of node 0's writes ends delivered (its bytes in node 1's slot) or PeerDown.
    let arrived = |i: u64| {
        let mut got = vec![0u8; len(i) as usize];
        b.inbox.read(i * ROOM, &mut got).expect("read inbox");
        got.iter()
            .enumerate()
            .all(|(j, &x)| x == byte(0xA0, i, j as u64))
    };
    let (mut delivered, mut failed) = (0, 0);
    let mut missing = Vec::new();
    for (i, h) in &handles {
        let status = h.wait(Some(Duration::from_secs(30)));
        assert!(status.is_done(), "message {i} never finished");
        let mut end = None;
        for _ in 0..1000 {
            match h.status() {
                Status::Failed(RejectReason::PeerDown) => end = Some(false),
                Status::Sent if arrived(*i) => end = Some(true),
                Status::Sent => {}
                other => panic!("message {i}: {other:?}"),
            }
            if end.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        match end {
            Some(true) => delivered += 1,
            Some(false) => failed += 1,
            None => missing.push(*i),
        }
    }
    eprintln!("node 0 -> node 1: {delivered} delivered, {failed} failed, missing {missing:?}");
    assert!(missing.is_empty(), "reported sent and missing: {missing:?}");
    assert_eq!(delivered + failed, handles.len());
    assert!(failed > 0, "sends after the kill fail");
}
