//! `hamlyn bench`: latency, bandwidth and message rate through the engine between two
//! processes, next to the floor measured in the same run (DESIGN §8).
//!
//! Two processes: this one (the driver) and a second copy of this executable
//! (`hamlyn bench-peer`, [`peer`]), driven by one-line commands over its standard input
//! and output, through which the tickets travel as seed text. Without `--socket` the
//! driver starts an engine thread in its own process and both connect to it; with
//! `--socket` both connect to that daemon.
//!
//! In order: the floor (a shared-memory cache-line ping-pong between the two processes,
//! before any engine runs, directly and through a relay thread that stands in for
//! the engine, and memcpy), then one-way latency ([`latency`]: ping-pong, and
//! a process sending to itself), bandwidth and message rate ([`bandwidth`]), and the
//! ping-pong floor once more after the engine stopped.
//!
//! With `--fabric tcp` ([`tcp`]) the driver starts two engines instead, node 0 and node 1
//! (both threads of the driver process), joined by the TCP fabric over loopback; the
//! driver attaches to node 0 and the peer to node 1, so every message crosses both
//! engines and TCP. The floor then also includes raw TCP between the same two processes
//! (ping-pong and single streams at the bandwidth sizes and of 8-byte messages, each
//! with blocking and with spinning calls, all before the engines start), and the table
//! holds every figure against the better raw TCP figure of the same size. The process sending to itself is left
//! out there: it never leaves node 0. With `--pin` each node gets a CPU of its own.

mod bandwidth;
mod child;
mod endpoint;
mod error;
mod fairness;
mod floor;
mod json;
mod latency;
pub mod peer;
mod peers;
mod pin;
mod plan;
mod plot;
mod progress;
mod report;
mod scaling;
mod tcp;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use hamlyn::{NodeOptions, Ticket};
use hamlyn_engine::{EngineConfig, EngineHandle};

use crate::cmd::node::EngineArgs;
use bandwidth::{receive_stream, Stream};
use child::PeerProcess;
use endpoint::Endpoint;
pub use error::BenchError;
use floor::{memcpy_gbps, FloorShm};
use plan::{median, Plan, BANDWIDTH_SIZES, LATENCY_SIZES, LOOPBACK_SIZES, RATE_SIZE};
use progress::Progress;
use report::{size_name, Floor, Mode, Report, Row, TcpFloor};
use tcp::{RawTcp, TcpEngines, TcpSetup, Wait};

/// Longest wait for one answer of the peer process.
const ANSWER_WAIT: Duration = Duration::from_secs(60);

/// Where the two processes' messages travel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum FabricChoice {
    /// Both processes on one engine (embedded, or the daemon of `--socket`).
    #[default]
    Local,
    /// Two engines in this process, node 0 and node 1, joined by the TCP fabric over
    /// loopback; this process on node 0, the peer process on node 1. Measured against
    /// raw TCP between the two processes.
    Tcp,
}

/// `hamlyn bench` arguments.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Connect both processes to the daemon at this control socket instead of starting an
    /// engine in this process (the engine options below then do not apply).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// A short run (a few seconds): about 2,000 round trips per size instead of 20,000.
    #[arg(long)]
    pub quick: bool,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Pin threads to the first two allowed CPUs, A and B. The floor runs between A (this
    /// process) and B (the peer). The embedded engine's thread then gets B to itself, and
    /// both processes share A (with a daemon, the peer stays on B). With `--fabric tcp`,
    /// each node gets a CPU: engine 0 and this process on A, engine 1 and the peer on B.
    #[arg(long)]
    pub pin: bool,
    /// Polls a waiting receiver spins through before it sleeps (default: the library's).
    #[arg(long, value_name = "POLLS")]
    pub spin: Option<u32>,
    /// The path measured: one engine (`local`), or two engines over TCP loopback (`tcp`).
    #[arg(long, value_enum, default_value_t = FabricChoice::Local)]
    pub fabric: FabricChoice,
    /// With `--fabric tcp`: TCP connections per engine pair (default: the fabric's).
    #[arg(long, value_name = "K")]
    pub rails: Option<usize>,
    /// With `--fabric tcp`: payload bytes per packet between the engines (default: the
    /// engine's).
    #[arg(long, value_name = "BYTES")]
    pub remote_mtu: Option<u64>,
    /// The embedded engine's settings (with `--fabric tcp`, both engines'; `--busy-poll`
    /// then makes their TCP fabrics busy-poll too).
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Tiny iteration counts, for the test suite (figures are rough).
    #[arg(long, hide = true)]
    pub smoke: bool,
}

/// Runs the benchmark and prints (and perhaps writes) the report.
pub fn run(args: BenchArgs) -> Result<(), BenchError> {
    let plan = match (args.smoke, args.quick) {
        (true, _) => Plan::smoke(),
        (false, true) => Plan::quick(),
        (false, false) => Plan::full(),
    };
    let report = measure(&args, &plan)?;
    print!("{}", report.render());
    if let Some(path) = &args.json {
        std::fs::write(path, json::to_json(&report)).map_err(|source| BenchError::Write {
            path: path.clone(),
            source,
        })?;
    }
    Ok(())
}

fn setup_text(
    args: &BenchArgs,
    plan: &Plan,
    threads: usize,
    cpus: Option<(usize, usize)>,
) -> String {
    let busy = if args.engine.busy_poll { "on" } else { "off" };
    let engine = match (&args.socket, args.fabric) {
        (Some(p), _) => format!("daemon at {}", p.display()),
        (None, FabricChoice::Local) => format!("embedded engine, busy-poll {busy}"),
        (None, FabricChoice::Tcp) => {
            let setup = tcp_setup(args);
            let mtu = args
                .remote_mtu
                .map_or(String::new(), |m| format!(", remote MTU {m} B"));
            format!(
                "two engines (threads of this process) over TCP loopback, {} rail{}{mtu}, \
                 busy-poll {busy}",
                setup.rails,
                if setup.rails == 1 { "" } else { "s" }
            )
        }
    };
    let pin = match (cpus, &args.socket) {
        (Some((a, b)), None) if args.fabric == FabricChoice::Tcp => format!(
            ", pinned: node 0 (its engine and this process) on CPU {a}, node 1 (its engine \
             and the peer) on CPU {b}"
        ),
        (Some((a, b)), None) => format!(", pinned: engine on CPU {b}, both processes on {a}"),
        (Some((a, b)), Some(_)) => format!(", pinned: driver on CPU {a}, peer on {b}"),
        (None, _) => String::new(),
    };
    let spin = args
        .spin
        .map_or(String::new(), |s| format!(", receivers spin {s} polls"));
    format!(
        "{} run, {engine}, {} round trips per size, {threads} CPUs{pin}{spin}",
        plan.name, plan.latency_iters
    )
}

/// The TCP mode's engine setup from the arguments.
fn tcp_setup(args: &BenchArgs) -> TcpSetup {
    let defaults = hamlyn_fabric::tcp::TcpConfig::new(
        hamlyn_wire::NodeId(0),
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
    );
    TcpSetup {
        rails: args.rails.unwrap_or(defaults.rails),
        busy_poll: args.engine.busy_poll,
        remote_mtu: args.remote_mtu,
    }
}

/// Refuses options that do not go together.
fn check_args(args: &BenchArgs) -> Result<(), BenchError> {
    match args.fabric {
        FabricChoice::Tcp if args.socket.is_some() => Err(BenchError::Usage(
            "--fabric tcp starts its own two engines; --socket does not apply",
        )),
        FabricChoice::Local if args.rails.is_some() || args.remote_mtu.is_some() => Err(
            BenchError::Usage("--rails and --remote-mtu apply to --fabric tcp only"),
        ),
        _ => Ok(()),
    }
}

fn measure(args: &BenchArgs, plan: &Plan) -> Result<Report, BenchError> {
    check_args(args)?;
    let mode = match args.fabric {
        FabricChoice::Local => Mode::Mediated,
        FabricChoice::Tcp => Mode::Tcp,
    };
    let engine_opts = &args.engine;
    if args.socket.is_some()
        && (engine_opts.busy_poll
            || engine_opts.spin_turns.is_some()
            || engine_opts.intra_mtu.is_some())
    {
        tracing::warn!("--socket given: the daemon's own engine settings apply, not these");
    }
    // Counted before any pinning narrows this thread's view.
    let threads = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpus = if args.pin {
        match pin::allowed_cpus()?.as_slice() {
            [a, b, ..] => Some((*a, *b)),
            _ => return Err(BenchError::Usage("--pin needs at least two CPUs")),
        }
    } else {
        None
    };
    let mut peer_args = Vec::new();
    if let Some((_, cpu)) = cpus {
        peer_args.extend(["--pin-cpu".to_string(), cpu.to_string()]);
    }
    if let Some(spin) = args.spin {
        peer_args.extend(["--spin".to_string(), spin.to_string()]);
    }
    if let Some((a, _)) = cpus {
        pin::pin_to(a)?;
    }
    let progress = Progress::new(plan.steps(mode == Mode::Tcp));
    let mut peer = PeerProcess::spawn(&peer_args)?;
    tracing::debug!(pid = peer.id(), "bench peer started");

    // The floor first, while no engine runs.
    progress.start("floor: shared-memory ping-pong");
    let before = floor_pingpong(&mut peer, plan)?;
    progress.done();
    progress.start("floor: shared-memory ping-pong through a relay thread");
    let relayed = floor_pingpong_relayed(&mut peer, plan, args)?;
    progress.done();
    let mut memcpy = Vec::new();
    for size in BANDWIDTH_SIZES {
        progress.start(format!("floor: memcpy {}", size_name(size)));
        memcpy.push((
            size,
            memcpy_gbps(size, plan.memcpy_bytes, plan.memcpy_batches),
        ));
        progress.done();
    }
    let tcp_floor = match mode {
        Mode::Tcp => Some(raw_tcp_floor(&mut peer, plan, &progress)?),
        Mode::Mediated => None,
    };

    let (rows, loopback) = through_engine(args, plan, cpus, &mut peer, &progress)?;

    // The floor again, the engine stopped: the vCPUs may have moved meanwhile.
    progress.start("floor: shared-memory ping-pong again");
    if let (Some((_, b)), None) = (cpus, &args.socket) {
        peer.send(&format!("pin {b}"))?;
        peer.expect("ok", ANSWER_WAIT)?;
    }
    let after = floor_pingpong(&mut peer, plan)?;
    progress.done();
    peer.finish()?;
    progress.finish();
    Ok(Report {
        setup: setup_text(args, plan, threads, cpus),
        mode,
        floor: Floor {
            shm_oneway_us: before.min(after),
            shm_runs_us: vec![before, after],
            shm_relay_oneway_us: relayed,
            memcpy_gbps: memcpy,
            tcp: tcp_floor,
        },
        rows,
        loopback,
    })
}

/// Raw TCP over loopback between the two processes, no engine running: ping-pong at the
/// latency sizes, a single stream at the bandwidth sizes and of 8-byte messages, with the
/// counts of the Hamlyn figures they are held against.
fn raw_tcp_floor(
    peer: &mut PeerProcess,
    plan: &Plan,
    progress: &Progress,
) -> Result<TcpFloor, BenchError> {
    let (listener, addr) = RawTcp::listen()?;
    peer.send(&format!("tcp-connect {addr}"))?;
    let mut tcp = RawTcp::accept(&listener)?;
    peer.expect("ok", ANSWER_WAIT)?;
    drop(listener);
    let mut floor = TcpFloor::default();
    for size in LATENCY_SIZES {
        progress.start(format!("floor: raw TCP ping-pong {}", size_name(size)));
        let mut best: Option<(usize, f64, f64)> = None;
        for wait in Wait::ALL {
            let rounds = plan.warmup + plan.latency_iters;
            peer.send(&format!("tcp-pong {size} {rounds} {}", wait.word()))?;
            let lat = tcp.ping(size, plan.warmup, plan.latency_iters, wait)?;
            peer.expect("ok", ANSWER_WAIT)?;
            let row = (size, lat.p50_us, lat.p99_us);
            match wait {
                Wait::Block => floor.blocking_us.push(row),
                Wait::Spin => floor.spinning_us.push(row),
            }
            if best.is_none_or(|(_, p50, _)| lat.p50_us < p50) {
                best = Some(row);
            }
        }
        floor.pingpong_us.extend(best);
        progress.done();
    }
    // The median of `plan.reps` raw streams of `count` messages of `size` bytes, after
    // one of `warm`, waiting as `wait` says: GB/s.
    let mut stream_median =
        |size: usize, warm: u64, count: u64, wait: Wait| -> Result<f64, BenchError> {
            let mut run = |count: u64| -> Result<f64, BenchError> {
                peer.send(&format!("tcp-stream {size} {count} {}", wait.word()))?;
                let g = tcp.receive_stream(size, count, wait)?;
                peer.expect("ok", ANSWER_WAIT)?;
                Ok(g)
            };
            run(warm)?;
            let mut gbps = Vec::with_capacity(plan.reps);
            for _ in 0..plan.reps {
                gbps.push(run(count)?);
            }
            Ok(median(&gbps).unwrap_or(0.0))
        };
    for size in BANDWIDTH_SIZES {
        progress.start(format!("floor: raw TCP stream {}", size_name(size)));
        let (warm, count) = (plan.bw_warm_count(size), plan.bw_count(size));
        let blocking = stream_median(size, warm, count, Wait::Block)?;
        let spinning = stream_median(size, warm, count, Wait::Spin)?;
        floor.stream_blocking_gbps.push((size, blocking));
        floor.stream_spinning_gbps.push((size, spinning));
        floor.stream_gbps.push((size, blocking.max(spinning)));
        progress.done();
    }
    {
        progress.start(format!("floor: raw TCP stream {}", size_name(RATE_SIZE)));
        let (warm, count) = ((plan.rate_msgs / 10).max(2), plan.rate_msgs);
        let blocking = stream_median(RATE_SIZE, warm, count, Wait::Block)?;
        let spinning = stream_median(RATE_SIZE, warm, count, Wait::Spin)?;
        floor.rate_msgs_per_s = Some(blocking.max(spinning) * 1e9 / RATE_SIZE as f64);
        progress.done();
    }
    peer.send("tcp-close")?;
    peer.expect("ok", ANSWER_WAIT)?;
    Ok(floor)
}

/// The shared-memory ping-pong between the two processes: one-way µs.
fn floor_pingpong(peer: &mut PeerProcess, plan: &Plan) -> Result<f64, BenchError> {
    let shm = FloorShm::create()?;
    peer.send(&format!("floor {}", shm.proc_path()))?;
    peer.expect("floor-ready", ANSWER_WAIT)?;
    let us = shm.ping(plan.floor_warmup, plan.floor_batches, plan.floor_rounds)?;
    peer.expect("ok", ANSWER_WAIT)?;
    Ok(us)
}

/// The shared-memory ping-pong through a relay thread, every party waiting as Hamlyn's
/// do: one-way µs. The relay waits as the engine is configured to (never sleeping with
/// busy-poll; with a daemon, as a default daemon does).
fn floor_pingpong_relayed(
    peer: &mut PeerProcess,
    plan: &Plan,
    args: &BenchArgs,
) -> Result<f64, BenchError> {
    let spin = args.spin.unwrap_or(NodeOptions::default().spin);
    let cfg = match &args.socket {
        Some(s) => EngineConfig::daemon(s),
        None => args.engine.apply(EngineConfig::embedded()),
    };
    let relay_spin = if cfg.busy_poll {
        u32::MAX
    } else {
        cfg.spin_turns
    };
    let shm = FloorShm::create()?;
    peer.send(&format!("floor-relay {} {spin}", shm.proc_path()))?;
    peer.expect("floor-ready", ANSWER_WAIT)?;
    let warmup = plan.floor_warmup / 10;
    let us = shm.ping_relayed(
        spin,
        relay_spin,
        warmup,
        plan.floor_batches,
        plan.sleep_floor_rounds,
    )?;
    peer.expect("ok", ANSWER_WAIT)?;
    Ok(us)
}

/// The engines a run measures through.
enum Engines {
    /// The daemon of `--socket`: nothing to stop.
    Daemon(PathBuf),
    /// One engine thread in this process.
    Local(EngineHandle),
    /// Two engine threads joined over TCP: the driver on node 0, the peer on node 1.
    Tcp(TcpEngines),
}

impl Engines {
    /// Where the driver and the peer attach.
    fn sockets(&self) -> (PathBuf, PathBuf) {
        match self {
            Engines::Daemon(p) => (p.clone(), p.clone()),
            Engines::Local(e) => (e.socket_path().into(), e.socket_path().into()),
            Engines::Tcp(t) => (
                t.driver_side.socket_path().into(),
                t.peer_side.socket_path().into(),
            ),
        }
    }

    fn stop(self) -> Result<(), BenchError> {
        match self {
            Engines::Daemon(_) => Ok(()),
            Engines::Local(e) => Ok(e.stop()?),
            Engines::Tcp(t) => t.stop(),
        }
    }
}

/// Starts the engine (unless `--socket`; two with `--fabric tcp`), attaches both
/// processes and measures latency, bandwidth and message rate through it; detaches and
/// stops it. Returns the result rows and the loopback rows.
fn through_engine(
    args: &BenchArgs,
    plan: &Plan,
    cpus: Option<(usize, usize)>,
    peer: &mut PeerProcess,
    progress: &Progress,
) -> Result<(Vec<Row>, Vec<Row>), BenchError> {
    let engines = match (&args.socket, args.fabric) {
        (Some(s), _) => Engines::Daemon(s.clone()),
        (None, FabricChoice::Tcp) => {
            Engines::Tcp(TcpEngines::start(&args.engine, &tcp_setup(args), cpus)?)
        }
        (None, FabricChoice::Local) => {
            if let Some((_, b)) = cpus {
                // The engine thread inherits the affinity of the thread that starts it.
                pin::pin_to(b)?;
            }
            let e = EngineHandle::start(args.engine.apply(EngineConfig::embedded()))?;
            if let Some((a, _)) = cpus {
                pin::pin_to(a)?;
                peer.send(&format!("pin {a}"))?;
                peer.expect("ok", ANSWER_WAIT)?;
            }
            Engines::Local(e)
        }
    };
    let (socket, peer_socket) = engines.sockets();
    let mut ep = Endpoint::connect(&socket, args.spin)?;
    peer.send(&format!("connect {}", peer_socket.display()))?;
    let to_peer = hamlyn::seed::ticket_from_text(&peer.expect("ticket", ANSWER_WAIT)?)?;
    peer.send(&format!("peer {}", ep.ticket_text()?))?;
    peer.expect("ok", ANSWER_WAIT)?;

    // Over TCP a message to itself never leaves node 0: nothing to compare.
    let loopback_sizes: &[usize] = match engines {
        Engines::Tcp(_) => &[],
        _ => &LOOPBACK_SIZES,
    };
    let measured = measure_rows(plan, peer, &mut ep, &to_peer, loopback_sizes, progress);
    if measured.is_err() {
        // What the engines saw, for `--log debug`: where the messages stopped.
        tracing::debug!(stats = ?tcp::engine_stats(&socket), "the driver's engine");
        if peer_socket != socket {
            tracing::debug!(stats = ?tcp::engine_stats(&peer_socket), "the peer's engine");
        }
    }
    let measured = measured?;
    peer.send("disconnect")?;
    peer.expect("ok", ANSWER_WAIT)?;
    drop(ep);
    engines.stop()?;
    Ok(measured)
}

/// Latency, loopback latency (at `loopback_sizes`), bandwidth and message rate between
/// the attached driver (`ep`) and peer (`to_peer`). Returns the result rows and the
/// loopback rows; an error names the step it happened in.
fn measure_rows(
    plan: &Plan,
    peer: &mut PeerProcess,
    ep: &mut Endpoint,
    to_peer: &Ticket,
    loopback_sizes: &[usize],
    progress: &Progress,
) -> Result<(Vec<Row>, Vec<Row>), BenchError> {
    let mut rows = Vec::new();
    for size in LATENCY_SIZES {
        let step = format!("latency {}", size_name(size));
        progress.start(step.clone());
        let lat = (|| {
            peer.send(&format!("pong {size} {}", plan.warmup + plan.latency_iters))?;
            let lat = latency::ping(ep, to_peer, size, plan.warmup, plan.latency_iters)?;
            peer.expect("ok", ANSWER_WAIT)?;
            Ok(lat)
        })()
        .map_err(|e| BenchError::during(step, e))?;
        rows.push(Row::latency(size, lat.p50_us, lat.p99_us));
        progress.done();
    }
    let mut loopback = Vec::new();
    for &size in loopback_sizes {
        let step = format!("latency {} to itself", size_name(size));
        progress.start(step.clone());
        let lat = latency::loopback(ep, size, plan.warmup, plan.latency_iters)
            .map_err(|e| BenchError::during(step, e))?;
        loopback.push(Row::latency(size, lat.p50_us, lat.p99_us));
        progress.done();
    }

    for size in BANDWIDTH_SIZES {
        let step = format!("bandwidth {}", size_name(size));
        progress.start(step.clone());
        let gbps = (|| {
            stream(peer, ep, size, plan.bw_warm_count(size))?;
            let mut gbps = Vec::with_capacity(plan.reps);
            for _ in 0..plan.reps {
                let s = stream(peer, ep, size, plan.bw_count(size))?;
                gbps.push(s.gbps(size));
                progress.done();
            }
            Ok(gbps)
        })()
        .map_err(|e| BenchError::during(step, e))?;
        rows.push(Row::bandwidth(size, median(&gbps).unwrap_or(0.0)));
    }

    let step = format!("message rate {}", size_name(RATE_SIZE));
    progress.start(step.clone());
    let rates = (|| {
        stream(peer, ep, RATE_SIZE, (plan.rate_msgs / 10).max(2))?;
        let mut rates = Vec::with_capacity(plan.reps);
        for _ in 0..plan.reps {
            let s = stream(peer, ep, RATE_SIZE, plan.rate_msgs)?;
            rates.push(s.msgs_per_s());
            progress.done();
        }
        Ok(rates)
    })()
    .map_err(|e| BenchError::during(step, e))?;
    rows.push(Row::rate(RATE_SIZE, median(&rates).unwrap_or(0.0)));
    Ok((rows, loopback))
}

/// Has the peer stream `count` messages of `size` bytes and times their arrival.
fn stream(
    peer: &mut PeerProcess,
    ep: &mut Endpoint,
    size: usize,
    count: u64,
) -> Result<Stream, BenchError> {
    peer.send(&format!("stream {size} {count}"))?;
    let s = receive_stream(ep, count)?;
    peer.expect("ok", ANSWER_WAIT)?;
    Ok(s)
}
