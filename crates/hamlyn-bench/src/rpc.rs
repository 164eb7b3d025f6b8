//! The RPC rows (issue 13): seed 004 Table 4's columns as round trips, the paper's ratio
//! and eRPC's metrics. A server thread with a connection of its own serves `null` and
//! `sum` (adds its argument words, answers one); the client is the calling thread with
//! another connection: on the same engine (mediated: the paper's "tuned local RPC") or
//! on the other engine of a TCP pair (tcp: the cross-machine RPC).
//!
//! - Table 4: Null (no arguments), Simple (four integers in, one out), MW-32, MW-64 and
//!   MW-128 (that many 8-byte words of arguments), every call timed; the row's size is
//!   the argument bytes;
//! - the floor: a null call of a local function through a pointer (mediated rows only);
//! - eRPC's metrics: null calls per second on one server thread with 1 … 32 calls
//!   outstanding (8 per client connection, so 16 and 32 use 2 and 4 clients).

use hamlyn_shm::sync::{AtomicBool, Ordering};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use hamlyn::Node;
use hamlyn_rpc::{frame, Ctx, Procedure, RpcClient, RpcServer};

use super::error::BenchError;
use super::latency::timed_rounds;
use super::layers::{Layer, LayerOp, LayerRow};
use super::plan::{median, Plan};
use super::progress::Progress;
use super::report::Mode;

/// Table 4's columns: (name, procedure, argument words of 8 bytes).
pub const COLUMNS: [(&str, &str, usize); 5] = [
    ("Null", "null", 0),
    ("Simple", "sum", 4),
    ("MW-32", "sum", 32),
    ("MW-64", "sum", 64),
    ("MW-128", "sum", 128),
];
/// Calls outstanding in the rate rows.
pub const OUTSTANDING: [usize; 6] = [1, 2, 4, 8, 16, 32];

/// The service the rows call.
const SERVICE: &str = "hamlyn-bench.rpc";
/// Longest wait for the server or one call.
const WAIT: Duration = Duration::from_secs(30);

/// The server thread, stopped and joined by [`Server::stop`].
struct Server {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<(), BenchError>>,
}

impl Server {
    /// Publishes the service on the engine at `socket` and serves it until stopped.
    fn start(socket: PathBuf) -> Result<Server, BenchError> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || -> Result<(), BenchError> {
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
                            .map(|w| {
                                let mut word = [0u8; 8];
                                word[..w.len()].copy_from_slice(w);
                                u64::from_le_bytes(word)
                            })
                            .fold(0u64, u64::wrapping_add);
                        Ok(s.to_le_bytes().to_vec())
                    }),
                ),
            ];
            let mut server = RpcServer::publish(Node::connect(&socket)?, SERVICE, procs)?;
            // The receiver may be gone if the driver failed meanwhile: then stop.
            if tx.send(()).is_err() {
                return Ok(());
            }
            // Acquire: pairs with the Release store in `Server::stop`.
            server.serve_until(|| stopped.load(Ordering::Acquire))?;
            Ok(())
        });
        let server = Server { stop, thread };
        match rx.recv_timeout(WAIT) {
            Ok(()) => Ok(server),
            Err(_) => {
                server.stop()?;
                Err(BenchError::Timeout(WAIT, "the RPC server"))
            }
        }
    }

    fn stop(self) -> Result<(), BenchError> {
        // Release: pairs with the server loop's Acquire load.
        self.stop.store(true, Ordering::Release);
        self.thread
            .join()
            .map_err(|_| BenchError::Panicked("the RPC server"))?
    }
}

/// Measures the rows of `mode`: the client on the engine at `client_socket`, the server
/// on the one at `server_socket` (the same one on one node).
pub fn measure(
    mode: Mode,
    client_socket: &Path,
    server_socket: &Path,
    plan: &Plan,
    progress: &Progress,
) -> Result<Vec<LayerRow>, BenchError> {
    let server = Server::start(server_socket.to_path_buf())?;
    let result = measure_with(mode, client_socket, plan, progress);
    let stopped = server.stop();
    let rows = result?;
    stopped?;
    Ok(rows)
}

fn measure_with(
    mode: Mode,
    client_socket: &Path,
    plan: &Plan,
    progress: &Progress,
) -> Result<Vec<LayerRow>, BenchError> {
    let name = mode.name();
    let row = |op, size| LayerRow::new(Layer::Rpc, mode, op, size);
    let step = |what: &str, e: BenchError| BenchError::during(format!("{name}: RPC, {what}"), e);
    let mut rows = Vec::new();
    let mut client = RpcClient::connect(Node::connect(client_socket)?, SERVICE, WAIT)?;
    for (column, procedure, words) in COLUMNS {
        progress.start(format!("{name}: RPC {column}"));
        let args: Vec<u8> = (0..words as u64).flat_map(u64::to_le_bytes).collect();
        let lat = timed_rounds(plan.warmup, plan.latency_iters, 1, |_| {
            client.call(procedure, &args)?;
            Ok(())
        })
        .map_err(|e| step(column, e))?;
        rows.push(row(LayerOp::RpcRoundTrip, args.len()).latency(lat.p50_us, lat.p99_us));
        progress.done();
    }
    if !mode.is_tcp() {
        progress.start(format!("{name}: a local null function call"));
        let f: fn(u64) -> u64 = null_procedure;
        let calls = 10_000_000u64;
        let t = Instant::now();
        let mut x = 0u64;
        for i in 0..calls {
            x = x.wrapping_add(std::hint::black_box(f)(i));
        }
        std::hint::black_box(x);
        let us = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
        rows.push(row(LayerOp::RpcLocalCall, 0).latency(us, us));
        progress.done();
    }
    let mut clients = vec![client];
    let iters = (plan.rate_msgs / 100).max(200) as usize;
    for outstanding in OUTSTANDING {
        progress.start(format!("{name}: RPC rate, {outstanding} outstanding"));
        while clients.len() < outstanding.div_ceil(frame::FRAMES) {
            clients.push(RpcClient::connect(
                Node::connect(client_socket)?,
                SERVICE,
                WAIT,
            )?);
        }
        let r = (|| {
            rate(&mut clients, outstanding, iters / 4)?;
            let mut rates = Vec::with_capacity(plan.reps);
            for _ in 0..plan.reps {
                rates.push(rate(&mut clients, outstanding, iters)?);
            }
            Ok(row(LayerOp::RpcRate, 0)
                .rate(median(&rates).unwrap_or(0.0))
                .count(outstanding as u64))
        })();
        let mut r = r.map_err(|e| step(&format!("{outstanding} outstanding"), e))?;
        // Null calls: no bandwidth figure.
        r.gbps = None;
        rows.push(r);
        progress.done();
    }
    Ok(rows)
}

/// Null calls per second with `outstanding` kept in flight over the first clients (8
/// each at most).
fn rate(clients: &mut [RpcClient], outstanding: usize, iters: usize) -> Result<f64, BenchError> {
    let used = outstanding
        .div_ceil(frame::FRAMES)
        .min(clients.len())
        .max(1);
    let per = outstanding.div_ceil(used).min(frame::FRAMES);
    let clients = &mut clients[..used];
    let t = Instant::now();
    let mut calls = Vec::with_capacity(used);
    for c in clients.iter_mut() {
        let mut inflight = std::collections::VecDeque::with_capacity(per);
        for _ in 0..per {
            inflight.push_back(c.start("null", &[])?);
        }
        calls.push(inflight);
    }
    let mut done = 0usize;
    while done < iters {
        for (c, inflight) in clients.iter_mut().zip(calls.iter_mut()) {
            if let Some(call) = inflight.pop_front() {
                c.finish(call)?;
                done += 1;
            }
            inflight.push_back(c.start("null", &[])?);
        }
    }
    for (c, inflight) in clients.iter_mut().zip(calls) {
        for call in inflight {
            c.finish(call)?;
        }
    }
    Ok(done as f64 / t.elapsed().as_secs_f64())
}

#[inline(never)]
fn null_procedure(x: u64) -> u64 {
    x
}

/// Progress steps of one mode.
pub fn steps(mode: Mode) -> usize {
    COLUMNS.len() + usize::from(!mode.is_tcp()) + OUTSTANDING.len()
}
