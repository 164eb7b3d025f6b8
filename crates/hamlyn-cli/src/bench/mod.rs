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

mod bandwidth;
mod child;
mod endpoint;
mod error;
mod floor;
mod json;
mod latency;
pub mod peer;
mod pin;
mod plan;
mod progress;
mod report;

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use hamlyn::NodeOptions;
use hamlyn_engine::{EngineConfig, EngineHandle};

use crate::cmd::node::EngineArgs;
use bandwidth::{receive_stream, Stream};
use child::PeerProcess;
use endpoint::Endpoint;
pub use error::BenchError;
use floor::{memcpy_gbps, FloorShm};
use plan::{median, Plan, BANDWIDTH_SIZES, LATENCY_SIZES, LOOPBACK_SIZES, RATE_SIZE};
use progress::Progress;
use report::{size_name, Floor, Report, Row};

/// Longest wait for one answer of the peer process.
const ANSWER_WAIT: Duration = Duration::from_secs(60);

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
    /// both processes share A (with a daemon, the peer stays on B).
    #[arg(long)]
    pub pin: bool,
    /// Polls a waiting receiver spins through before it sleeps (default: the library's).
    #[arg(long, value_name = "POLLS")]
    pub spin: Option<u32>,
    /// The embedded engine's settings.
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
    let engine = match &args.socket {
        Some(p) => format!("daemon at {}", p.display()),
        None => format!(
            "embedded engine, busy-poll {}",
            if args.engine.busy_poll { "on" } else { "off" }
        ),
    };
    let pin = match (cpus, &args.socket) {
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

fn measure(args: &BenchArgs, plan: &Plan) -> Result<Report, BenchError> {
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
    let progress = Progress::new(plan.steps());
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
        floor: Floor {
            shm_oneway_us: before.min(after),
            shm_runs_us: vec![before, after],
            shm_relay_oneway_us: relayed,
            memcpy_gbps: memcpy,
        },
        rows,
        loopback,
    })
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

/// Starts the engine (unless `--socket`), attaches both processes and measures latency,
/// bandwidth and message rate through it; detaches and stops it. Returns the result rows
/// and the loopback rows.
fn through_engine(
    args: &BenchArgs,
    plan: &Plan,
    cpus: Option<(usize, usize)>,
    peer: &mut PeerProcess,
    progress: &Progress,
) -> Result<(Vec<Row>, Vec<Row>), BenchError> {
    let engine = match &args.socket {
        Some(_) => None,
        None => {
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
            Some(e)
        }
    };
    let socket = match (&args.socket, &engine) {
        (Some(s), _) => s.clone(),
        (None, Some(e)) => e.socket_path().to_path_buf(),
        (None, None) => return Err(BenchError::Usage("no engine to connect to")),
    };
    let mut ep = Endpoint::connect(&socket, args.spin)?;
    peer.send(&format!("connect {}", socket.display()))?;
    let to_peer = hamlyn::seed::ticket_from_text(&peer.expect("ticket", ANSWER_WAIT)?)?;
    peer.send(&format!("peer {}", ep.ticket_text()?))?;
    peer.expect("ok", ANSWER_WAIT)?;

    let mut rows = Vec::new();
    for size in LATENCY_SIZES {
        progress.start(format!("latency {}", size_name(size)));
        peer.send(&format!("pong {size} {}", plan.warmup + plan.latency_iters))?;
        let lat = latency::ping(&mut ep, &to_peer, size, plan.warmup, plan.latency_iters)?;
        peer.expect("ok", ANSWER_WAIT)?;
        rows.push(Row::latency(size, lat.p50_us, lat.p99_us));
        progress.done();
    }
    let mut loopback = Vec::new();
    for size in LOOPBACK_SIZES {
        progress.start(format!("latency {} to itself", size_name(size)));
        let lat = latency::loopback(&mut ep, size, plan.warmup, plan.latency_iters)?;
        loopback.push(Row::latency(size, lat.p50_us, lat.p99_us));
        progress.done();
    }

    for size in BANDWIDTH_SIZES {
        progress.start(format!("bandwidth {}", size_name(size)));
        stream(peer, &mut ep, size, plan.bw_warm_count(size))?;
        let mut gbps = Vec::with_capacity(plan.reps);
        for _ in 0..plan.reps {
            let s = stream(peer, &mut ep, size, plan.bw_count(size))?;
            gbps.push(s.gbps(size));
            progress.done();
        }
        rows.push(Row::bandwidth(size, median(&gbps).unwrap_or(0.0)));
    }

    progress.start(format!("message rate {}", size_name(RATE_SIZE)));
    stream(peer, &mut ep, RATE_SIZE, (plan.rate_msgs / 10).max(2))?;
    let mut rates = Vec::with_capacity(plan.reps);
    for _ in 0..plan.reps {
        let s = stream(peer, &mut ep, RATE_SIZE, plan.rate_msgs)?;
        rates.push(s.msgs_per_s());
        progress.done();
    }
    rows.push(Row::rate(RATE_SIZE, median(&rates).unwrap_or(0.0)));

    peer.send("disconnect")?;
    peer.expect("ok", ANSWER_WAIT)?;
    drop(ep);
    if let Some(e) = engine {
        e.stop()?;
    }
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
