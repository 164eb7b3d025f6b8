//! `hamlyn stat` on a real two-node cluster: two `hamlyn node` daemons joined over TCP on
//! loopback, 65,536 slots on one of them. The statistics cross the control socket in
//! pages, so all of them arrive: the table and the JSON list every slot, the peer (up,
//! its incarnation, its rails) and the TCP counters. The daemons find their cluster
//! secret as a user's first two nodes do: neither is told one, so the first creates this
//! user's secret file (`XDG_CONFIG_HOME` points into the test's directory, never the
//! developer's home) and both authenticate with it.
//!
//! Every wait is bounded; the only processes killed are the daemons this test started,
//! by their pid.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{run, text, TempDir, BIN};
use hamlyn::{Node, NodeOptions};
use hamlyn_wire::stats::{FabricStats, LinkState, Stats};

const SLOTS: usize = 65_536;
/// The incarnation node 1 runs with (what node 0 must report for it).
const PEER_INCARNATION: u32 = 4242;

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

/// A loopback port nothing listens on right now.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    l.local_addr().expect("local address").port()
}

fn daemon(
    config_home: &Path,
    socket: &Path,
    id: u32,
    listen: u16,
    peer: (u32, u16),
    incarnation: u32,
) -> Daemon {
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
                "--incarnation",
                &incarnation.to_string(),
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

fn wait_for_path(p: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !p.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `hamlyn stat --json` on `socket`, parsed.
fn stat_json(socket: &Path) -> Stats {
    let out = run(
        &[
            "stat",
            "--socket",
            socket.to_str().expect("utf-8 path"),
            "--json",
        ],
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "stat --json: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stat --json prints the JSON of a Stats")
}

#[test]
fn stat_shows_the_peer_the_tcp_fabric_and_all_65536_slots() {
    let dir = TempDir::new("stat-cluster");
    let sockets: [PathBuf; 2] = [dir.path("n0.sock"), dir.path("n1.sock")];
    let ports = [free_port(), free_port()];
    let config_home = dir.path("config");
    let _n0 = daemon(&config_home, &sockets[0], 0, ports[0], (1, ports[1]), 17);
    let secret_file = config_home.join("hamlyn").join("cluster-secret");
    // The second daemon starts once the first made the secret (either would make it,
    // and the loser of a race reads the winner's; this keeps the test's story simple).
    wait_for_path(&sockets[0], Duration::from_secs(20));
    let _n1 = daemon(
        &config_home,
        &sockets[1],
        1,
        ports[1],
        (0, ports[0]),
        PEER_INCARNATION,
    );
    for s in &sockets {
        wait_for_path(s, Duration::from_secs(20));
    }
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&secret_file)
            .expect("the per-user secret file was created")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "readable by its owner only");
    }

    // Node 0 sees node 1 up, with both rails.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = stat_json(&sockets[0]);
        let up = stats.peer(1).is_some_and(|p| {
            p.up && p
                .link
                .as_ref()
                .is_some_and(|l| l.state == LinkState::Up && l.rails_up == 2)
        });
        if up {
            break;
        }
        assert!(Instant::now() < deadline, "node 1 never came up: {stats:?}");
        std::thread::sleep(Duration::from_millis(50));
    }

    // A client of node 0 creates 65,536 slots (and keeps them while stat runs).
    let node = Node::connect_with(
        &sockets[0],
        NodeOptions {
            termini: 1,
            queues: 1,
            queue_cap: 64,
            ..NodeOptions::default()
        },
    )
    .expect("attach to node 0");
    let area = node.area(64 * 1024).expect("area");
    let slots: Vec<_> = (0..SLOTS as u64)
        .map(|i| {
            let at = (i % 1024) * 64;
            node.slot(&area)
                .fast()
                .range(at..at + 64)
                .create()
                .unwrap_or_else(|e| panic!("slot {i}: {e}"))
        })
        .collect();

    let stats = stat_json(&sockets[0]);
    assert_eq!(stats.node, 0);
    assert_eq!(stats.incarnation, 17);
    assert_eq!(stats.slots.len(), SLOTS, "every slot is listed");
    for s in &slots {
        let listed = stats.slot(s.id().0).expect("each slot by its number");
        assert_eq!(listed.owner, node.client_id());
        assert_eq!(listed.len, 64);
    }
    let peer = stats.peer(1).expect("node 1 is listed");
    assert!(peer.up);
    assert_eq!(peer.incarnation, PEER_INCARNATION);
    let link = peer
        .link
        .as_ref()
        .expect("the TCP fabric describes the link");
    assert_eq!(
        (link.state, link.rails_up, link.rails),
        (LinkState::Up, 2, 2)
    );
    let Some(FabricStats::Tcp(tcp)) = &stats.fabric else {
        panic!("a TCP fabric: {:?}", stats.fabric)
    };
    assert_eq!(tcp.rails, 2);
    assert!(
        tcp.dialed >= 2,
        "node 0 (the lower id) dials both rails: {tcp:?}"
    );
    assert_eq!(tcp.violations, 0);
    assert!(tcp.authenticated, "links are authenticated: {tcp:?}");
    assert_eq!((tcp.auth_failures, tcp.frames_refused), (0, 0));

    // The tables say the same.
    let out = run(
        &["stat", "--socket", sockets[0].to_str().expect("utf-8 path")],
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "stat: {}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.starts_with(&format!(
            "node 0, incarnation 17: 1 port(s), 1 area(s), {SLOTS} slot(s), 1 peer(s)"
        )),
        "{}",
        &table[..table.len().min(2000)]
    );
    assert!(table.contains("Fabric: TCP"));
    let peers = section(&table, "Peers");
    let row = peers
        .iter()
        .find(|l| l.starts_with("| 1 "))
        .expect("a row for node 1");
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(cells[2], "up", "{row}");
    assert_eq!(cells[3], PEER_INCARNATION.to_string(), "{row}");
    assert_eq!(cells[4], "up", "{row}");
    assert_eq!(cells[5], "2/2", "{row}");
    let slot_rows = section(&table, "Slots");
    assert_eq!(slot_rows.len(), SLOTS, "one table row per slot");

    // Neither daemon was told where the registry is: both chose the lowest id, node 0.
    for s in &sockets {
        assert_eq!(stat_json(s).registry.home, 0, "{}", s.display());
    }
    // `hamlyn seed publish` on node 1 holds the name while it runs; node 0 finds it, and
    // once the publisher is interrupted the name is gone.
    let seed = hamlyn_wire::Seed::single(slots[0].ticket_all().expect("ticket"))
        .to_text()
        .expect("seed text");
    let socket1 = sockets[1].to_str().expect("utf-8 path");
    let socket0 = sockets[0].to_str().expect("utf-8 path");
    let mut publisher = Daemon(
        Command::new(BIN)
            .args(["seed", "publish", "--socket", socket1, "inbox", &seed])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start hamlyn seed publish"),
    );
    let lookup = || {
        run(
            &["seed", "lookup", "--socket", socket0, "inbox"],
            Duration::from_secs(60),
        )
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = lookup();
        if out.status.success() {
            assert_eq!(text(&out.stdout).trim(), seed);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never published: {}",
            text(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = rustix::process::Pid::from_raw(publisher.0.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("interrupt");
    assert!(publisher.0.wait().expect("publisher exits").success());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = lookup();
        if !out.status.success() {
            assert!(
                text(&out.stderr).contains("no seed published"),
                "{}",
                text(&out.stderr)
            );
            break;
        }
        assert!(Instant::now() < deadline, "the name outlived its publisher");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A node nobody knows is unreachable, and the error says which.
    let out = run(
        &["ping", "--socket", socket0, "-c", "1", "9"],
        Duration::from_secs(60),
    );
    assert!(!out.status.success());
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(said.contains("node 9 unreachable"), "{said}");
    drop(slots);
}

/// The data rows of the table titled `title` in `hamlyn stat`'s output.
fn section<'a>(out: &'a str, title: &str) -> Vec<&'a str> {
    out.lines()
        .skip_while(|l| *l != title)
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .skip(2) // the header and the line under it
        .collect()
}
