//! RPC round trips in the shape of seed 004 Table 4, and eRPC's metrics, in one run:
//!
//! - a null local function call (through a function pointer, the procedure not inlined),
//!   the floor;
//! - RPC on one node (client and server on one engine, in two threads: the "tuned local
//!   RPC" of the paper's ratio) and across two nodes (two engines joined by the TCP fabric
//!   on loopback, authenticated links): Null (no arguments), Simple (four integers in, one
//!   out), MW-32, MW-64 and MW-128 (that many 8-byte words of arguments, one out);
//! - the paper's ratio, cross-node null RPC ÷ local null RPC (it reported < 2);
//! - eRPC's metrics: small-RPC round trip and calls per second on one server thread with
//!   1 … 32 calls outstanding (8 per client connection, so 16 and 32 use 2 and 4 clients).
//!
//! Medians of several runs; nothing here is asserted. Run:
//!   cargo run --release -p hamlyn-rpc --example table4 [-- ITERATIONS]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use hamlyn::Node;
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_rpc::{frame, Ctx, Procedure, RpcClient, RpcServer};
use hamlyn_shm::sync::{AtomicBool, Ordering};

const WAIT: Duration = Duration::from_secs(30);
/// Runs per figure: the median is reported.
const RUNS: usize = 5;

/// A server thread on `socket` serving `sum` (adds the argument words) and `null`.
fn serve(socket: std::path::PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let procs: Vec<(String, Procedure)> = vec![
            (
                "null".into(),
                Box::new(|_: &[u8], _: &mut Ctx<'_>| Ok(Vec::new())),
            ),
            (
                "sum".into(),
                Box::new(|b: &[u8], _: &mut Ctx<'_>| {
                    let s = b
                        .chunks(8)
                        .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
                        .fold(0u64, u64::wrapping_add);
                    Ok(s.to_le_bytes().to_vec())
                }),
            ),
        ];
        let mut server = RpcServer::publish(Node::connect(&socket).unwrap(), "t4", procs).unwrap();
        ready_tx.send(()).unwrap();
        // Acquire: pairs with the Release store that stops the benchmark.
        server.serve_until(|| stop.load(Ordering::Acquire)).unwrap();
    });
    ready_rx.recv_timeout(WAIT).unwrap();
    t
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median round trip in µs of `procedure` with `words` words of arguments.
fn round_trip(c: &mut RpcClient, procedure: &str, words: usize, iters: usize) -> f64 {
    let args: Vec<u8> = (0..words as u64).flat_map(u64::to_le_bytes).collect();
    for _ in 0..iters / 10 {
        c.call(procedure, &args).unwrap();
    }
    median(
        (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..iters {
                    c.call(procedure, &args).unwrap();
                }
                t.elapsed().as_secs_f64() * 1e6 / iters as f64
            })
            .collect(),
    )
}

/// Calls per second with `outstanding` null calls kept in flight over `clients`.
fn rate(clients: &mut [RpcClient], outstanding: usize, iters: usize) -> f64 {
    let per = outstanding.div_ceil(clients.len()).min(frame::FRAMES);
    median(
        (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                let mut done = 0usize;
                let mut calls: Vec<Vec<_>> = clients
                    .iter_mut()
                    .map(|c| (0..per).map(|_| c.start("null", &[]).unwrap()).collect())
                    .collect();
                while done < iters {
                    for (c, inflight) in clients.iter_mut().zip(calls.iter_mut()) {
                        let call = inflight.remove(0);
                        c.finish(call).unwrap();
                        done += 1;
                        inflight.push(c.start("null", &[]).unwrap());
                    }
                }
                for (c, inflight) in clients.iter_mut().zip(calls) {
                    for call in inflight {
                        c.finish(call).unwrap();
                    }
                }
                done as f64 / t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

/// Round trips of every Table 4 column through the engine(s) whose sockets are
/// `client_socket` (client) and `server_socket` (server).
fn columns(
    client_socket: &std::path::Path,
    server_socket: &std::path::Path,
    iters: usize,
) -> Vec<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let server = serve(server_socket.to_path_buf(), stop.clone());
    let mut c = RpcClient::connect(Node::connect(client_socket).unwrap(), "t4", WAIT).unwrap();
    let figures = vec![
        round_trip(&mut c, "null", 0, iters),
        round_trip(&mut c, "sum", 4, iters),
        round_trip(&mut c, "sum", 32, iters),
        round_trip(&mut c, "sum", 64, iters),
        round_trip(&mut c, "sum", 128, iters),
    ];
    drop(c);
    // Release: pairs with the server loop's Acquire load.
    stop.store(true, Ordering::Release);
    server.join().unwrap();
    figures
}

#[inline(never)]
fn null_procedure(x: u64) -> u64 {
    x
}

fn main() {
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let f: fn(u64) -> u64 = std::hint::black_box(null_procedure);
    let n = 10_000_000u64;
    let t = Instant::now();
    let mut acc = 0u64;
    for i in 0..n {
        acc = acc.wrapping_add(f(std::hint::black_box(i)));
    }
    std::hint::black_box(acc);
    let local_call_ns = t.elapsed().as_secs_f64() * 1e9 / n as f64;

    // One node.
    let one = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let local = columns(one.socket_path(), one.socket_path(), iters);

    // eRPC's metrics on one node: calls per second, 1 … 32 outstanding.
    let stop = Arc::new(AtomicBool::new(false));
    let server = serve(one.socket_path().to_path_buf(), stop.clone());
    let mut clients: Vec<RpcClient> = (0..4)
        .map(|_| RpcClient::connect(Node::connect(one.socket_path()).unwrap(), "t4", WAIT).unwrap())
        .collect();
    let rates: Vec<(usize, f64)> = [1usize, 2, 4, 8, 16, 32]
        .iter()
        .map(|&k| {
            let used = k.div_ceil(frame::FRAMES).max(1);
            (k, rate(&mut clients[..used], k, iters * 4))
        })
        .collect();
    drop(clients);
    // Release: pairs with the server loop's Acquire load.
    stop.store(true, Ordering::Release);
    server.join().unwrap();
    one.stop().unwrap();

    // Two nodes over TCP on loopback.
    let mut engines = hamlyn_engine::cluster::tcp_engines(2, 2).unwrap();
    let b = engines.pop().unwrap();
    let a = engines.pop().unwrap();
    let remote = columns(a.socket_path(), b.socket_path(), iters / 4);
    a.stop().unwrap();
    b.stop().unwrap();

    println!(
        "RPC round trips (µs, median of {RUNS} runs of {iters} calls; {} cores)\n",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    println!("| | Null | Simple (4 in, 1 out) | MW-32 | MW-64 | MW-128 |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| local function call | {:.4} | | | | |",
        local_call_ns / 1e3
    );
    let row = |name: &str, v: &[f64]| {
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            v[0], v[1], v[2], v[3], v[4]
        )
    };
    row("RPC, one node (local RPC)", &local);
    row("RPC, two nodes over TCP (loopback)", &remote);
    println!(
        "\ncross-node null RPC ÷ local null RPC: {:.2} (seed 004: < 2)\n",
        remote[0] / local[0]
    );
    println!("| calls outstanding | 1 | 2 | 4 | 8 | 16 | 32 |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| null RPCs per second, one server thread, one node | {} |",
        rates
            .iter()
            .map(|(_, r)| format!("{:.0}", r))
            .collect::<Vec<_>>()
            .join(" | ")
    );
}
