//! The active-message rows (issue 12): a server endpoint serving `bench.echo` (replies
//! its arguments) and `bench.sink` (does nothing) on a thread of its own with its own
//! connection, and a client endpoint on the calling thread with another:
//!
//! - the short round trip: `call` to echo (one short message each way), every round
//!   timed;
//! - the short message rate: short messages to sink as fast as credit allows, then one
//!   call, which comes back after all of them (credit returns only once the receiver
//!   handled a message);
//! - bulk bandwidth at 4 … 64 KiB, the same way;
//! - seed 003 Figure 6: the round trip with the calls spread over 1, 2, 4 … logical
//!   channels in turn (each channel a terminus of the client's port, so at most the
//!   port's termini: 256).

use hamlyn_shm::sync::{AtomicBool, Ordering};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use hamlyn::{Node, NodeOptions};
use hamlyn_am::{fingerprint, Addr, AmEndpoint, AmError, AmOptions, HandlerId, Want};

use super::error::BenchError;
use super::latency::timed_rounds;
use super::layers::{Layer, LayerOp, LayerRow};
use super::plan::{median, Plan};
use super::progress::Progress;
use super::report::{size_name, Mode};

/// Bytes of a short message's arguments (four u64), the size its rows are shown at.
pub const SHORT_SIZE: usize = 32;
/// Bulk payload sizes.
pub const BULK_SIZES: [usize; 3] = [4 * 1024, 16 * 1024, 64 * 1024];
/// Logical channel counts of Figure 6, its whole range (channel 0 and up to 255 more:
/// a port's 256 termini).
pub const CHANNELS: [u64; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// Longest wait for one call.
const WAIT: Duration = Duration::from_secs(30);

/// The server endpoint's thread, stopped and joined by [`Server::stop`].
struct Server {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<(), BenchError>>,
}

impl Server {
    /// Starts the server on the engine at `socket`, registers its handlers with the
    /// cluster, and returns with its address.
    fn start(socket: PathBuf) -> Result<(Server, Addr), BenchError> {
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || -> Result<(), BenchError> {
            let mut ep = AmEndpoint::new(Node::connect(&socket)?, AmOptions::default())?;
            let fp = fingerprint("u64 x4");
            ep.register("bench.echo", fp, |c| {
                c.reply(c.args()).map_err(|e| e.to_string())
            })?;
            ep.register("bench.sink", fp, |_| Ok(()))?;
            ep.synch()?;
            // The receiver may be gone if the driver failed meanwhile: then stop.
            if tx.send(ep.addr()).is_err() {
                return Ok(());
            }
            // Relaxed: a flag alone, publishing nothing else (its store in `stop`).
            while !stopped.load(Ordering::Relaxed) {
                ep.poll(Some(Duration::from_millis(20)))?;
            }
            Ok(())
        });
        match rx.recv_timeout(WAIT) {
            Ok(addr) => Ok((Server { stop, thread }, addr)),
            Err(_) => {
                let server = Server { stop, thread };
                server.stop()?;
                Err(BenchError::Timeout(WAIT, "the AM server's address"))
            }
        }
    }

    fn stop(self) -> Result<(), BenchError> {
        // Relaxed: the flag publishes nothing (its load in the server loop).
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| BenchError::Panicked("the AM server"))?
    }
}

/// Round trips through echo, spread over `channels` in turn: p50 and p99, µs.
fn round_trips(
    ep: &mut AmEndpoint,
    to: Addr,
    echo: HandlerId,
    channels: &[u16],
    warmup: u64,
    iters: u64,
) -> Result<(f64, f64), BenchError> {
    let lat = timed_rounds(warmup, iters, 1, |i| {
        let ch = channels[(i as usize) % channels.len()];
        let r = ep.call(to, echo, ch, [i, 0, 0, 0], WAIT)?;
        if r[0] != i {
            return Err(BenchError::Unexpected(format!(
                "echo of call {i} answered {}",
                r[0]
            )));
        }
        Ok(())
    })?;
    Ok((lat.p50_us, lat.p99_us))
}

/// `count` messages to sink (short, or bulk of `len` bytes) as fast as credit allows,
/// then one call that comes back after them all: messages per second.
fn stream(
    ep: &mut AmEndpoint,
    to: Addr,
    (sink, echo): (HandlerId, HandlerId),
    len: usize,
    count: u64,
) -> Result<f64, BenchError> {
    let payload = vec![7u8; len];
    let t = Instant::now();
    for i in 0..count {
        let deadline = Instant::now() + WAIT;
        loop {
            let r = if len == 0 {
                ep.send_short(to, sink, 0, [i, 0, 0, 0], Want::Nothing)
            } else {
                ep.send_bulk(to, sink, 0, [0; 4], &payload, Want::Nothing)
            };
            match r {
                Ok(_) => break,
                Err(AmError::Full) if Instant::now() < deadline => {
                    // Sleeps until something (a credit) arrives.
                    ep.poll(Some(Duration::from_millis(1)))?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    ep.call(to, echo, 0, [0; 4], WAIT)?;
    Ok(count as f64 / t.elapsed().as_secs_f64().max(1e-9))
}

/// Every active-message row of `mode`: the client attaches at `client_socket`, the
/// server at `server_socket` (the same engine, or the other end of TCP).
pub fn measure(
    mode: Mode,
    client_socket: &Path,
    server_socket: &Path,
    plan: &Plan,
    progress: &Progress,
) -> Result<Vec<LayerRow>, BenchError> {
    let (server, to) = Server::start(server_socket.to_path_buf())?;
    let result = (|| {
        let options = NodeOptions {
            termini: hamlyn_shm::port::MAX_TERMINI,
            ..NodeOptions::default()
        };
        let node = Node::connect_with(client_socket, options)?;
        let mut ep = AmEndpoint::new(node, AmOptions::default())?;
        ep.refresh()?;
        let echo = ep.handler_by_name("bench.echo")?;
        let sink = ep.handler_by_name("bench.sink")?;
        ep.connect(to, WAIT)?;
        measure_with(mode, &mut ep, to, (sink, echo), plan, progress)
    })();
    let stopped = server.stop();
    let rows = result?;
    stopped?;
    Ok(rows)
}

fn measure_with(
    mode: Mode,
    ep: &mut AmEndpoint,
    to: Addr,
    (sink, echo): (HandlerId, HandlerId),
    plan: &Plan,
    progress: &Progress,
) -> Result<Vec<LayerRow>, BenchError> {
    let mut rows = Vec::new();
    let row = |op, size| LayerRow::new(Layer::Am, mode, op, size);
    let name = mode.name();
    let step = |what: String, r: Result<LayerRow, BenchError>| {
        r.map_err(|e| BenchError::during(format!("{name}: active messages, {what}"), e))
    };

    progress.start(format!("{name}: AM short round trip"));
    let r = round_trips(ep, to, echo, &[0], plan.warmup, plan.latency_iters)
        .map(|(p50, p99)| row(LayerOp::AmShortRtt, SHORT_SIZE).latency(p50, p99));
    rows.push(step("short round trip".into(), r)?);
    progress.done();

    progress.start(format!("{name}: AM short message rate"));
    let count = (plan.rate_msgs / 10).max(100);
    let r = (|| {
        stream(ep, to, (sink, echo), 0, count / 10)?;
        let mut rates = Vec::with_capacity(plan.reps);
        for _ in 0..plan.reps {
            rates.push(stream(ep, to, (sink, echo), 0, count)?);
        }
        Ok(row(LayerOp::AmShortRate, SHORT_SIZE).rate(median(&rates).unwrap_or(0.0)))
    })();
    let mut rate_row = step("short message rate".into(), r)?;
    // The payload of a short message is its arguments: no bandwidth figure.
    rate_row.gbps = None;
    rows.push(rate_row);
    progress.done();

    for size in BULK_SIZES {
        progress.start(format!("{name}: AM bulk {}", size_name(size)));
        let count = plan.bw_count(size).min(plan.bw_msgs.1 / 4).max(16);
        let r = (|| {
            stream(ep, to, (sink, echo), size, count / 4 + 1)?;
            let mut rates = Vec::with_capacity(plan.reps);
            for _ in 0..plan.reps {
                rates.push(stream(ep, to, (sink, echo), size, count)?);
            }
            Ok(row(LayerOp::AmBulkBandwidth, size).rate(median(&rates).unwrap_or(0.0)))
        })();
        rows.push(step(format!("bulk {}", size_name(size)), r)?);
        progress.done();
    }

    let mut channels = vec![0u16];
    let iters = (plan.latency_iters / 4).max(100);
    for want in CHANNELS {
        progress.start(format!("{name}: AM round trip over {want} channel(s)"));
        let r = (|| {
            while (channels.len() as u64) < want {
                channels.push(ep.open_channel((channels.len() % 4) as u8)?);
            }
            let (p50, p99) = round_trips(ep, to, echo, &channels, iters / 10, iters)?;
            Ok(row(LayerOp::AmChannelsRtt, SHORT_SIZE)
                .latency(p50, p99)
                .count(want))
        })();
        match step(format!("{want} logical channels"), r) {
            Ok(r) => rows.push(r),
            // A port with fewer termini than asked for: the figure ends where it can.
            Err(BenchError::During(_, e))
                if matches!(*e, BenchError::Am(AmError::Rats(_)) | BenchError::Hamlyn(_))
                    && want > 1 =>
            {
                tracing::warn!("AM channels stop before {want}: {e}");
                progress.done();
                break;
            }
            Err(e) => return Err(e),
        }
        progress.done();
    }
    Ok(rows)
}

/// Progress steps of one mode.
pub fn steps() -> usize {
    2 + BULK_SIZES.len() + CHANNELS.len()
}
