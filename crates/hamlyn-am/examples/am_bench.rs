//! Active-message performance, one run (DESIGN §8: ratios in one run, absolute times on
//! shared VMs are noise): a short-message round trip through an echo handler and the
//! short-message rate, bulk bandwidth from 4 KiB to 64 KiB, and seed 003 Figure 6 — the
//! round trip as the sender's logical channels grow (1 … 63, a port's termini) — both
//! within one node (two processes' worth of connections to one engine) and across two
//! engines joined by the TCP fabric (two rails, loopback). Seed 003's own figures are
//! 13 µs and 106 MB/s on 1999 hardware.
//!
//! `cargo run --release -p hamlyn-am --example am_bench [ROUNDS]`
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hamlyn::{Node, NodeOptions};
use hamlyn_am::{fingerprint, Addr, AmEndpoint, AmError, AmOptions, HandlerId, Want};
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_fabric::tcp::{tcp_cluster, ClusterSecret, TcpConfig};
use hamlyn_wire::NodeId;

const WAIT: Duration = Duration::from_secs(30);

/// An endpoint serving "echo" (replies its arguments) and "sink" (nothing) until told.
fn server(path: PathBuf) -> (Addr, mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel();
    let (stop, stopped) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let mut ep = AmEndpoint::new(Node::connect(&path).unwrap(), AmOptions::default()).unwrap();
        let fp = fingerprint("u64 x4");
        ep.register("bench.echo", fp, |c| {
            c.reply(c.args()).map_err(|e| e.to_string())
        })
        .unwrap();
        ep.register("bench.sink", fp, |_| Ok(())).unwrap();
        ep.synch().unwrap();
        tx.send(ep.addr()).unwrap();
        while stopped.try_recv().is_err() {
            ep.poll(Some(Duration::from_millis(20))).unwrap();
        }
    });
    (rx.recv_timeout(WAIT).unwrap(), stop, t)
}

fn client(path: &Path) -> AmEndpoint {
    let options = NodeOptions {
        termini: 64,
        ..NodeOptions::default()
    };
    let node = Node::connect_with(path, options).unwrap();
    let mut ep = AmEndpoint::new(node, AmOptions::default()).unwrap();
    ep.refresh().unwrap();
    ep
}

fn percentile(v: &mut [Duration], p: f64) -> f64 {
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1e6
}

/// Round trips of `rounds` calls spread over `channels`: (p50, p99) in µs.
fn round_trip(
    ep: &mut AmEndpoint,
    to: Addr,
    h: HandlerId,
    channels: &[u16],
    rounds: usize,
) -> (f64, f64) {
    let mut times = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let ch = channels[i % channels.len()];
        let t = Instant::now();
        let r = ep.call(to, h, ch, [i as u64, 0, 0, 0], WAIT).unwrap();
        times.push(t.elapsed());
        assert_eq!(r[0], i as u64);
    }
    (percentile(&mut times, 0.5), percentile(&mut times, 0.99))
}

/// Sends `count` messages (short, or bulk of `len` bytes) as fast as credit allows, then
/// one call that comes back after them all; messages per second.
fn stream(
    ep: &mut AmEndpoint,
    to: Addr,
    sink: HandlerId,
    echo: HandlerId,
    len: usize,
    count: usize,
) -> f64 {
    let payload = vec![7u8; len];
    let t = Instant::now();
    for i in 0..count {
        loop {
            let r = if len == 0 {
                ep.send_short(to, sink, 0, [i as u64, 0, 0, 0], Want::Nothing)
            } else {
                ep.send_bulk(to, sink, 0, [0; 4], &payload, Want::Nothing)
            };
            match r {
                Ok(_) => break,
                Err(AmError::Full) => {
                    // Sleeps until something (a credit) arrives: no core burnt.
                    ep.poll(Some(Duration::from_millis(1))).unwrap();
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    // Credit comes back only after the receiver handled a message, so once every
    // message's credit is back they were all handled.
    let _ = ep.call(to, echo, 0, [0; 4], WAIT).unwrap();
    count as f64 / t.elapsed().as_secs_f64()
}

fn run(label: &str, server_path: &Path, client_path: &Path, rounds: usize) {
    let (to, stop, t) = server(server_path.to_path_buf());
    let mut ep = client(client_path);
    let echo = ep.handler_by_name("bench.echo").unwrap();
    let sink = ep.handler_by_name("bench.sink").unwrap();
    ep.connect(to, WAIT).unwrap();
    let _ = round_trip(&mut ep, to, echo, &[0], rounds);
    let (p50, p99) = round_trip(&mut ep, to, echo, &[0], rounds);
    println!("{label}: short round trip p50 {p50:.1} µs, p99 {p99:.1} µs (seed 003: 13 µs)");
    let rate = stream(&mut ep, to, sink, echo, 0, rounds * 10);
    println!("{label}: short message rate {:.3} M msg/s", rate / 1e6);
    for kib in [4usize, 16, 64] {
        let rate = stream(&mut ep, to, sink, echo, kib * 1024, (rounds / 4).max(64));
        println!(
            "{label}: bulk {kib} KiB {:.1} MB/s (seed 003: 106 MB/s)",
            rate * (kib * 1024) as f64 / 1e6
        );
    }
    let mut channels = vec![0u16];
    for want in [1usize, 2, 4, 8, 16, 32, 63] {
        while channels.len() < want {
            channels.push(ep.open_channel((channels.len() % 4) as u8).unwrap());
        }
        let (p50, p99) = round_trip(&mut ep, to, echo, &channels, rounds);
        println!(
            "{label}: {want:>2} logical channel(s): round trip p50 {p50:.1} µs, p99 {p99:.1} µs"
        );
    }
    stop.send(()).unwrap();
    t.join().unwrap();
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let one = EngineHandle::start(EngineConfig::embedded()).unwrap();
    run("intra-node", one.socket_path(), one.socket_path(), rounds);
    one.stop().unwrap();

    let mut cfg = TcpConfig::new(NodeId(0), "127.0.0.1:0".parse().unwrap());
    cfg.secret = Some(ClusterSecret::from_bytes([0x5a; 32]));
    cfg.rails = 2;
    cfg.incarnation = 7;
    let engines: Vec<EngineHandle> = tcp_cluster(2, &cfg)
        .unwrap()
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            let mut c = EngineConfig::embedded();
            c.node = i as u32;
            c.registry = Some(0);
            c.incarnation = 7;
            EngineHandle::start_with_fabric(c, Some(Box::new(f))).unwrap()
        })
        .collect();
    run(
        "tcp",
        engines[1].socket_path(),
        engines[0].socket_path(),
        rounds,
    );
    for e in engines {
        e.stop().unwrap();
    }
}
