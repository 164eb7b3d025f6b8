//! The applications across two machines made of network namespaces (issue 13): a veth
//! pair between two namespaces, an engine in each (its threads and its TCP sockets live in
//! that namespace: the thread that starts it moves there first), the TCP fabric between
//! them with authenticated links on two rails, the registry on node 0. The ranks are
//! started as a launcher would start them — rank and size in Slurm's, PMI's or Open MPI's
//! variables, set by the test — two on each machine, each attached to its machine's
//! engine. Ising and the adder must equal their sequential runs.
//!
//! Needs root and `ip` (iproute2), as CI has; skipped with a message otherwise.
//! Everything it creates is named after the test's process id and removed by a guard.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::process::Command;
use std::time::Duration;

use common::{run_ranks_as, Launcher};
use hamlyn_apps::circuit::{sequential as add_all, test_vectors, Circuit};
use hamlyn_apps::ising::{rows_of, sequential, Params};
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_fabric::tcp::{ClusterSecret, TcpConfig, TcpFabric};
use hamlyn_wire::NodeId;

const PORT: u16 = 7500;

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn cannot_run() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("needs root for network namespaces".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("needs iproute2 (`ip`): apt-get install iproute2".into()),
    }
}

/// Two namespaces joined by a veth pair; removed on drop.
struct Machines {
    tag: String,
    base: String,
}

impl Machines {
    fn new() -> Machines {
        let pid = std::process::id();
        let m = Machines {
            tag: format!("ha{}", pid % 100_000),
            base: format!("10.{}.{}", 150 + pid % 50, (pid / 50) % 250),
        };
        for i in 0..2 {
            ip(&["netns", "add", &m.ns(i)]);
            ip(&["-n", &m.ns(i), "link", "set", "lo", "up"]);
        }
        let (a, b) = (format!("{}a", m.tag), format!("{}b", m.tag));
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
        for (i, v) in [(0, &a), (1, &b)] {
            ip(&["link", "set", v, "netns", &m.ns(i)]);
            let addr = format!("{}/24", m.ip(i));
            ip(&["-n", &m.ns(i), "addr", "add", &addr, "dev", v]);
            ip(&["-n", &m.ns(i), "link", "set", v, "up"]);
        }
        m
    }

    fn ns(&self, i: usize) -> String {
        format!("{}n{i}", self.tag)
    }

    fn ip(&self, i: usize) -> String {
        format!("{}.{}", self.base, i + 1)
    }

    fn addr(&self, i: usize) -> SocketAddr {
        format!("{}:{PORT}", self.ip(i)).parse().unwrap()
    }

    /// Starts node `i`'s engine inside namespace `i`: a thread moves there, makes the
    /// fabric (its listener and, later, its connections are that namespace's) and starts
    /// the engine, whose threads it creates there too.
    fn engine(&self, i: usize) -> EngineHandle {
        let ns = format!("/var/run/netns/{}", self.ns(i));
        let (me, peer) = (self.addr(i), self.addr(1 - i));
        std::thread::spawn(move || {
            let f = std::fs::File::open(&ns).unwrap();
            rustix::thread::move_into_link_name_space(
                f.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .unwrap();
            let mut cfg = TcpConfig::new(NodeId(i as u32), me);
            cfg.secret = Some(ClusterSecret::from_bytes([0x5A; 32]));
            cfg.rails = 2;
            cfg.incarnation = 4;
            cfg.peers = vec![(NodeId(1 - i as u32), peer)];
            let fabric = TcpFabric::new(cfg).unwrap();
            let mut c = EngineConfig::embedded();
            c.node = i as u32;
            c.incarnation = 4;
            c.registry = Some(0);
            EngineHandle::start_with_fabric(c, Some(Box::new(fabric))).unwrap()
        })
        .join()
        .unwrap()
    }
}

impl Drop for Machines {
    fn drop(&mut self) {
        for i in 0..2 {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(i)])
                .status();
        }
    }
}

/// Waits until each engine sees the other up (the ranks' first registry calls would
/// otherwise race the sessions).
fn until_up(a: &EngineHandle, b: &EngineHandle) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for (e, peer) in [(a, 1u32), (b, 0u32)] {
        loop {
            let node = hamlyn::Node::connect(e.socket_path()).unwrap();
            let up = node
                .stats()
                .unwrap()
                .peers
                .iter()
                .any(|p| p.node == peer && p.up);
            if up {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "peers never came up");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn ising_and_the_adder_across_two_namespace_machines_under_launcher_variables() {
    if let Some(why) = cannot_run() {
        eprintln!("skipped: ising_and_the_adder_across_two_namespace_machines: {why}");
        return;
    }
    let m = Machines::new();
    let (a, b) = (m.engine(0), m.engine(1));
    until_up(&a, &b);
    let out = std::env::temp_dir().join(format!("hamlyn-apps-netns-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let four = [
        a.socket_path(),
        a.socket_path(),
        b.socket_path(),
        b.socket_path(),
    ];

    // Ising, four ranks as Slurm's srun would start them.
    let p = Params {
        n: 32,
        sweeps: 5,
        beta: 0.44,
        seed: 11,
    };
    let args: Vec<String> = vec![
        p.n.to_string(),
        p.sweeps.to_string(),
        p.beta.to_string(),
        p.seed.to_string(),
        out.display().to_string(),
    ];
    run_ranks_as(
        Launcher::Slurm,
        env!("CARGO_BIN_EXE_hamlyn-ising"),
        &args,
        &four,
        "ising-slurm",
    );
    let mut grid = Vec::new();
    for r in 0..4 {
        let bytes = std::fs::read(out.join(format!("rows-{r}"))).unwrap();
        assert_eq!(bytes.len(), rows_of(r, 4, p.n).len() * p.n);
        grid.extend(bytes.iter().map(|b| *b as i8));
    }
    assert!(grid == sequential(&p), "the spins differ across machines");

    // The adder, four ranks as Open MPI's mpirun would start them, gates at random.
    let args: Vec<String> = vec!["12".into(), "random:3".into(), out.display().to_string()];
    run_ranks_as(
        Launcher::OpenMpi,
        env!("CARGO_BIN_EXE_hamlyn-circuit"),
        &args,
        &four,
        "adder-ompi",
    );
    let want = add_all(&Circuit::adder32(), &test_vectors(12, 42));
    let got: Vec<u64> = std::fs::read_to_string(out.join("results"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(got, want);

    // Two ranks, one per machine, as a PMI launcher would start them, gates in blocks.
    std::fs::remove_file(out.join("results")).unwrap();
    let args: Vec<String> = vec!["12".into(), "linear".into(), out.display().to_string()];
    run_ranks_as(
        Launcher::Pmi,
        env!("CARGO_BIN_EXE_hamlyn-circuit"),
        &args,
        &[a.socket_path(), b.socket_path()],
        "adder-pmi",
    );
    let got: Vec<u64> = std::fs::read_to_string(out.join("results"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(got, want);

    let _ = std::fs::remove_dir_all(&out);
    a.stop().unwrap();
    b.stop().unwrap();
    drop(m);
}
