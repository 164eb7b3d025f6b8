//! The benchmark behind `hamlyn bench`: latency, bandwidth and message rate between two
//! processes, on every path (direct, mediated, TCP), next to the floor measured in the same
//! run (DESIGN §8), with UCX and sockperf beside it on request; printed as tables, written
//! as JSON ([`BenchArgs::json`]) and drawn as SVG plots ([`BenchArgs::plot`]).
//!
//! Two processes: this one (the driver) and a second copy of this executable
//! (`hamlyn bench-peer`, [`peer`]), driven by one-line commands over its standard input
//! and output, through which the tickets travel as seed text. So the program that calls
//! [`run`] must call [`peer::run`] when it is started with the [`PEER_COMMAND`]
//! subcommand (the `hamlyn` binary does).
//!
//! In order: the floor (a shared-memory cache-line ping-pong between the two processes,
//! before any engine runs, directly and through a relay thread that stands in for the
//! engine; memcpy; with the TCP mode, raw TCP between the two processes), then the modes:
//!
//! - `direct` and `mediated` on one engine (embedded in this process, or the daemon of
//!   `--socket`): latency of tagged writes, polled writes and datagrams (`latency.rs`),
//!   directly deposited or through the engine, remote reads and fetch-adds (mediated
//!   only: the engine executes them), a process sending to itself, bandwidth and message
//!   rate (`bandwidth.rs`); then fairness (`fairness.rs`) and scaling (`scaling.rs`) on the
//!   same engine;
//! - `tcp`: two engines in this process, node 0 and node 1, joined by the TCP fabric over
//!   loopback (`tcp.rs`); the driver attaches to node 0 and the peer to node 1, so every
//!   message crosses both engines and TCP; the same operations as mediated;
//!
//! then the layers above the interface that `--layers` names (`layers.rs`: active
//! messages in `am.rs`, FLIPC endpoints in `flipc.rs`, the Rats protocols in `rats.rs`;
//! each on engines of its own, both ends on threads of this process with connections of
//! their own); then, with `--peers`, UCX and sockperf on the same machine (`peers.rs`;
//! UCX's active-message tests at the layers' sizes too), and the ping-pong floor once
//! more. `--json` writes every figure (`json.rs`), `--plot` draws them
//! (`plot.rs`). What the benchmark reads of an engine's statistics (is a peer node up, how
//! many ports) is read in one place, `engine_stats.rs`.

#![forbid(unsafe_code)]

mod am;
mod bandwidth;
mod charts;
mod child;
mod endpoint;
mod engine_stats;
mod error;
mod fairness;
mod flipc;
mod floor;
mod json;
mod latency;
mod layers;
mod listeners;
pub mod peer;
mod peers;
mod pin;
mod plan;
mod plot;
mod progress;
// Public (hidden) for `examples/rats_stream_counts`, which counts what the goal's two
// bandwidths cost per message with the bench's own functions.
#[doc(hidden)]
pub mod rats;
mod report;
mod rpc;
mod scaling;
mod tcp;

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use hamlyn::NodeOptions;
use hamlyn_engine::{EngineConfig, EngineHandle};

use bandwidth::{receive_stream, Stream};
use child::PeerProcess;
use endpoint::{Endpoint, Remote, Tickets, Via};
pub use error::BenchError;
use floor::{memcpy_gbps, FloorShm};
use latency::{Exchange, PingPong};
use plan::{median, Plan, BANDWIDTH_SIZES, LATENCY_SIZES, LOOPBACK_SIZES, RATE_SIZE};
use progress::Progress;
use report::{
    placement_moved, size_name, Floor, Mode, Op, Report, Row, TcpFloor, PLACEMENT_PAUSE,
    PLACEMENT_WAITS,
};
use tcp::{RawTcp, SplitTcpEngines, TcpEngines, TcpSetup, Wait};

/// Competing termini of the fairness measurement.
const FAIRNESS_TERMINI: usize = 4;
/// Message sizes of the fairness measurement: one the engine moves faster than four
/// sender threads on two cores can refill their rings, and one it does not.
const FAIRNESS_SIZES: [usize; 2] = [64 * 1024, 1 << 20];

/// Longest wait for one answer of the peer process.
const ANSWER_WAIT: Duration = Duration::from_secs(60);

/// The subcommand that starts the peer process: the driver runs its own executable with
/// it, and that program must then call [`peer::run`].
pub const PEER_COMMAND: &str = "bench-peer";

/// A mode on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModeChoice {
    /// The sender deposits into the receiver's slot by itself (`danger_direct`).
    Direct,
    /// Through one engine.
    Mediated,
    /// Through two engines joined by the TCP fabric over loopback (links authenticated
    /// and encrypted, as every node's).
    Tcp,
    /// The same with links in clear (`danger_insecure`): beside `tcp`, what securing
    /// the links costs, in one run.
    TcpPlain,
}

impl From<ModeChoice> for Mode {
    fn from(m: ModeChoice) -> Mode {
        match m {
            ModeChoice::Direct => Mode::Direct,
            ModeChoice::Mediated => Mode::Mediated,
            ModeChoice::Tcp => Mode::Tcp,
            ModeChoice::TcpPlain => Mode::TcpPlain,
        }
    }
}

/// What `--layers` measures: the interface (the rows above) and the layers built on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LayerChoice {
    /// The interface itself: every operation of every mode, fairness, scaling.
    Interface,
    /// Active messages (issue 12): round trip and rate of short messages, bulk
    /// bandwidth, latency as logical channels grow; in the mediated and tcp modes.
    Am,
    /// FLIPC endpoints (issue 11): medium messages one-way and message rate, direct and
    /// mediated; the priority figure and the token bucket, mediated.
    Endpoints,
    /// The Rats protocols (issue 10): tagged write, simple datagram with reply seed,
    /// request/response, stream bandwidth; mediated.
    Rats,
    /// RPC over remote memory (issue 13): seed 004 Table 4's round trips, a local null
    /// call beside them, calls per second with 1 … 32 outstanding; mediated (one node)
    /// and tcp (client and server on two engines).
    Rpc,
}

impl LayerChoice {
    /// The name on the command line.
    fn name(self) -> &'static str {
        match self {
            LayerChoice::Interface => "interface",
            LayerChoice::Am => "am",
            LayerChoice::Endpoints => "endpoints",
            LayerChoice::Rats => "rats",
            LayerChoice::Rpc => "rpc",
        }
    }
}

/// `hamlyn bench` arguments.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Connect both processes to the daemon at this control socket instead of starting an
    /// engine in this process, for the direct and mediated modes (the engine options
    /// below then do not apply to them).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// A short run (seconds): about 2,000 round trips per size instead of 20,000.
    #[arg(long)]
    pub quick: bool,
    /// The paths measured, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "direct,mediated,tcp"
    )]
    pub modes: Vec<ModeChoice>,
    /// What is measured, comma-separated: the interface and/or the layers above it (each
    /// in the modes of `--modes` it has).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "interface")]
    pub layers: Vec<LayerChoice>,
    /// Also run UCX (`ucx_perftest`, shm and tcp) and sockperf on this machine, and show
    /// Hamlyn ÷ peer ratios (`bench/peers.sh` installs them).
    #[arg(long)]
    pub peers: bool,
    /// Skip the fairness and scaling measurements.
    #[arg(long)]
    pub no_extras: bool,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write SVG plots of latency and bandwidth against message size into DIR.
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Pin threads to the first two allowed CPUs, A and B. The floor, the direct mode and
    /// every peer's pair of processes (UCX's server and client, sockperf's) run with one
    /// process on A (this one, a server) and the other on B; so does the mediated mode,
    /// the engine's thread with this process on A (a daemon is not pinned). Over TCP,
    /// each node gets a CPU: engine 0 and this process on A, engine 1 and the peer on B.
    #[arg(long)]
    pub pin: bool,
    /// Polls a waiting receiver spins through before it sleeps (default: the library's).
    #[arg(long, value_name = "POLLS")]
    pub spin: Option<u32>,
    /// TCP mode: connections per engine pair (default: the fabric's).
    #[arg(long, value_name = "K")]
    pub rails: Option<usize>,
    /// TCP mode: payload bytes per packet between the engines (default: the engine's).
    #[arg(long, value_name = "BYTES")]
    pub remote_mtu: Option<u64>,
    /// Tiny iteration counts, for the test suite (figures are rough).
    #[arg(long, hide = true)]
    pub smoke: bool,
}

impl BenchArgs {
    fn has(&self, mode: Mode) -> bool {
        self.modes.iter().any(|&m| Mode::from(m) == mode)
    }

    /// Whether a mode over the TCP fabric is asked for.
    fn has_tcp(&self) -> bool {
        self.modes.iter().any(|&m| Mode::from(m).is_tcp())
    }

    /// Whether `layer` is asked for.
    fn has_layer(&self, layer: LayerChoice) -> bool {
        self.layers.contains(&layer)
    }

    /// Whether the interface's rows are asked for.
    fn interface(&self) -> bool {
        self.has_layer(LayerChoice::Interface)
    }
}

/// Runs the benchmark and prints (and perhaps writes) the report.
///
/// `engine` is the setup of every engine the benchmark starts in this process (each gets
/// its own control socket; the TCP mode sets node ids and incarnations, and makes the
/// fabrics busy-poll with `engine.busy_poll`). A daemon given by `--socket` keeps its own.
pub fn run(args: BenchArgs, engine: &EngineConfig) -> Result<(), BenchError> {
    let plan = match (args.smoke, args.quick) {
        (true, _) => Plan::smoke(),
        (false, true) => Plan::quick(),
        (false, false) => Plan::full(),
    };
    let report = measure(&args, engine, &plan)?;
    print!("{}", report.render());
    if let Some(path) = &args.json {
        json::to_json(&report)
            .map_err(std::io::Error::from)
            .and_then(|text| std::fs::write(path, text))
            .map_err(|source| BenchError::Write {
                path: path.clone(),
                source,
            })?;
    }
    if let Some(dir) = &args.plot {
        for file in charts::write(dir, &report)? {
            println!("plot: {}", file.display());
        }
    }
    Ok(())
}

fn setup_text(
    args: &BenchArgs,
    engine: &EngineConfig,
    plan: &Plan,
    threads: usize,
    cpus: Option<(usize, usize)>,
) -> String {
    let busy = if engine.busy_poll { "on" } else { "off" };
    let modes: Vec<&str> = args.modes.iter().map(|&m| Mode::from(m).name()).collect();
    let mut engines = Vec::new();
    if args.has(Mode::Direct) || args.has(Mode::Mediated) {
        engines.push(match &args.socket {
            Some(p) => format!("direct/mediated through the daemon at {}", p.display()),
            None => format!("direct/mediated on an embedded engine, busy-poll {busy}"),
        });
    }
    if args.has_tcp() {
        let setup = tcp_setup(args, engine, false);
        let mtu = args
            .remote_mtu
            .map_or(String::new(), |m| format!(", remote MTU {m} B"));
        engines.push(format!(
            "tcp: two engines over TCP loopback, node 0 embedded in this process and node 1 \
             in the peer's, {} rail{}{mtu}, \
             busy-poll {busy}, links authenticated and encrypted (tcp-plain: in clear)",
            setup.rails,
            if setup.rails == 1 { "" } else { "s" }
        ));
    }
    let pin = match cpus {
        Some((a, b)) => {
            let mediated = if args.socket.is_some() {
                format!("mediated, this process on {a} and the peer on {b} (the daemon unpinned)")
            } else {
                format!("mediated, this process and its engine's thread on {a} and the peer on {b}")
            };
            let busy = if engine.busy_poll && args.socket.is_none() {
                format!(
                    " (busy-poll: the engine's thread spins on {b} beside the direct mode's peer)"
                )
            } else {
                String::new()
            };
            format!(
                ", pinned: direct, the floor and UCX's and sockperf's processes with one process \
                 on CPU {a} and the other on {b}{busy}; {mediated}; over TCP, node 0 (engine \
                 and this process) on {a}, node 1 on {b}; the layers and UCX's active messages \
                 on {a}"
            )
        }
        None => String::new(),
    };
    let spin = args
        .spin
        .map_or(String::new(), |s| format!(", receivers spin {s} polls"));
    let layers = if layer_runs(args).is_empty() {
        String::new()
    } else {
        let names: Vec<String> = layer_runs(args)
            .iter()
            .map(|(l, m)| format!("{} {}", l.name(), m.name()))
            .collect();
        format!(
            "; layers ({}) on engines of their own{}",
            names.join(", "),
            match cpus {
                Some((a, _)) => format!(", on CPU {a} (inherited)"),
                None => ", not pinned".into(),
            }
        )
    };
    format!(
        "{} run, modes {}; {}; {} round trips per size up to 64 KiB, {threads} CPUs{pin}{spin}{layers}",
        plan.name,
        modes.join(", "),
        engines.join("; "),
        plan.latency_iters
    )
}

/// The TCP mode's engine setup from the arguments.
fn tcp_setup(args: &BenchArgs, engine: &EngineConfig, danger_insecure: bool) -> TcpSetup {
    let defaults = hamlyn_fabric::tcp::TcpConfig::new(
        hamlyn_wire::NodeId(0),
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
    );
    TcpSetup {
        rails: args.rails.unwrap_or(defaults.rails),
        busy_poll: engine.busy_poll,
        remote_mtu: args.remote_mtu,
        danger_insecure,
    }
}

/// An engine set up as `engine`, on a control socket of its own.
fn fresh_engine(engine: &EngineConfig) -> EngineConfig {
    EngineConfig {
        socket: EngineConfig::embedded().socket,
        ..engine.clone()
    }
}

/// Refuses options that do not go together.
fn check_args(args: &BenchArgs) -> Result<(), BenchError> {
    if args.modes.is_empty() {
        return Err(BenchError::Usage("--modes names no mode"));
    }
    if args.layers.is_empty() {
        return Err(BenchError::Usage("--layers names nothing to measure"));
    }
    if !args.has_tcp() && (args.rails.is_some() || args.remote_mtu.is_some()) {
        return Err(BenchError::Usage(
            "--rails and --remote-mtu apply to the tcp modes only",
        ));
    }
    Ok(())
}

/// Steps the progress bar counts.
fn steps(args: &BenchArgs, plan: &Plan) -> u64 {
    let mut n = 3 + BANDWIDTH_SIZES.len();
    if args.interface() {
        let streams = (BANDWIDTH_SIZES.len() + 1) * plan.reps;
        let rma = LATENCY_SIZES.len() + 1;
        if args.has_tcp() {
            // The raw TCP floor, and its 8-byte ping-pong again after the TCP modes.
            n += LATENCY_SIZES.len() + BANDWIDTH_SIZES.len() + 1 + 1;
        }
        for mode in [Mode::Tcp, Mode::TcpPlain] {
            if args.has(mode) {
                n += 3 * LATENCY_SIZES.len() + rma + streams;
            }
        }
        if args.has(Mode::Direct) {
            n += 3 * LATENCY_SIZES.len() + streams;
        }
        if args.has(Mode::Mediated) {
            n += 3 * LATENCY_SIZES.len() + rma + LOOPBACK_SIZES.len() + streams;
            if !args.no_extras {
                n += FAIRNESS_SIZES.len() + scaling::PORT_POINTS.len() + scaling::SLOT_POINTS.len();
            }
        }
    }
    for (layer, mode) in layer_runs(args) {
        n += match layer {
            LayerChoice::Am => am::steps(),
            LayerChoice::Endpoints => flipc::steps(mode),
            LayerChoice::Rats => rats::steps(),
            LayerChoice::Rpc => rpc::steps(mode),
            LayerChoice::Interface => 0,
        };
    }
    if args.peers {
        // The interface's peers come with a floor run of their own before them.
        n += 2 * usize::from(args.interface()) + usize::from(!layer_runs(args).is_empty());
    }
    n as u64
}

/// The layers measured and the mode of each run, in order: active messages mediated
/// and over TCP, endpoints direct and mediated, Rats mediated, RPC mediated and over TCP
/// (as far as `--modes` has them).
fn layer_runs(args: &BenchArgs) -> Vec<(LayerChoice, Mode)> {
    let all = [
        (LayerChoice::Am, Mode::Mediated),
        (LayerChoice::Am, Mode::Tcp),
        (LayerChoice::Endpoints, Mode::Direct),
        (LayerChoice::Endpoints, Mode::Mediated),
        (LayerChoice::Rats, Mode::Mediated),
        (LayerChoice::Rpc, Mode::Mediated),
        (LayerChoice::Rpc, Mode::Tcp),
    ];
    all.into_iter()
        .filter(|&(l, m)| args.has_layer(l) && args.has(m))
        .collect()
}

/// Measures the layers `--layers` names, each run on engines of its own: one engine
/// (embedded, or the daemon of `--socket`), or two joined over TCP.
fn measure_layers(
    args: &BenchArgs,
    engine: &EngineConfig,
    plan: &Plan,
    progress: &Progress,
) -> Result<Vec<layers::LayerRow>, BenchError> {
    let mut rows = Vec::new();
    for (layer, mode) in layer_runs(args) {
        if mode.is_tcp() {
            let setup = tcp_setup(args, engine, false);
            let t = TcpEngines::start(engine, &setup)?;
            let (client, server) = (t.driver_side.socket_path(), t.peer_side.socket_path());
            let r = match layer {
                LayerChoice::Rpc => rpc::measure(mode, client, server, plan, progress),
                _ => am::measure(mode, client, server, plan, progress),
            };
            let stopped = t.stop();
            rows.extend(r?);
            stopped?;
            continue;
        }
        let local = match &args.socket {
            Some(_) => None,
            None => Some(EngineHandle::start(fresh_engine(engine))?),
        };
        let socket = match (&local, &args.socket) {
            (Some(e), _) => e.socket_path().to_path_buf(),
            (None, Some(s)) => s.clone(),
            (None, None) => return Err(BenchError::Usage("no engine to measure the layers on")),
        };
        let r = match layer {
            LayerChoice::Am => am::measure(mode, &socket, &socket, plan, progress),
            LayerChoice::Endpoints => flipc::measure(mode, &socket, plan, progress),
            LayerChoice::Rats => rats::measure(&socket, plan, progress),
            LayerChoice::Rpc => rpc::measure(mode, &socket, &socket, plan, progress),
            LayerChoice::Interface => Ok(Vec::new()),
        };
        let stopped = local.map_or(Ok(()), EngineHandle::stop);
        rows.extend(r?);
        stopped?;
    }
    Ok(rows)
}

fn measure(args: &BenchArgs, engine: &EngineConfig, plan: &Plan) -> Result<Report, BenchError> {
    check_args(args)?;
    let defaults = EngineConfig {
        socket: engine.socket.clone(),
        ..EngineConfig::embedded()
    };
    if args.socket.is_some() && *engine != defaults && !args.has_tcp() {
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
    let progress = Progress::new(steps(args, plan));
    let mut peer = PeerProcess::spawn(&peer_args)?;
    tracing::debug!(pid = peer.id(), "bench peer started");

    // The floor first, while no engine runs.
    progress.start("floor: shared-memory ping-pong");
    let mut floor_runs = vec![floor_pingpong(&mut peer, plan)?];
    progress.done();
    progress.start("floor: shared-memory ping-pong through a relay thread");
    let relayed = floor_pingpong_relayed(&mut peer, plan, args, engine)?;
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
    let mut measured = Measured::default();
    if args.interface() && (args.has(Mode::Direct) || args.has(Mode::Mediated)) {
        one_engine(
            args,
            engine,
            plan,
            cpus,
            &mut peer,
            &progress,
            &mut measured,
        )?;
    }
    // Raw TCP just before the TCP engines start, not before the one engine: a blocking
    // ping-pong leaves the two processes on one CPU (the kernel wakes a task where its
    // waker runs), and the next measurement would pay for that placement.
    let mut tcp_floor = None;
    if args.interface() && args.has_tcp() {
        // Pinned, one process per CPU, as the shared-memory floor and the TCP engines
        // run (on one CPU a spinning ping-pong waits a time slice per message).
        if let Some((_, b)) = cpus {
            pin_peer(&mut peer, b)?;
        }
        tcp_floor = Some(raw_tcp_floor(&mut peer, plan, &progress)?);
    }
    for mode in [Mode::Tcp, Mode::TcpPlain]
        .into_iter()
        .filter(|&m| args.interface() && args.has(m))
    {
        two_engines(
            mode,
            args,
            engine,
            plan,
            cpus,
            &mut peer,
            &progress,
            &mut measured,
        )?;
    }
    // Raw TCP's 8-byte ping-pong once more, right after the TCP modes: on a virtual
    // machine its figure moves between states for seconds at a time, and the report
    // says when the floor before the engines is not the one their figures met.
    if let Some(floor) = tcp_floor.as_mut() {
        if let Some((_, b)) = cpus {
            pin_peer(&mut peer, b)?;
        }
        floor.spinning_8b_after_us = Some(raw_tcp_8b_again(&mut peer, plan, &progress)?);
    }
    let layers = measure_layers(args, engine, plan, &progress)?;
    let quick_peers = !matches!(plan.name, "full");
    let layer_peers = (args.peers && !layers.is_empty()).then(|| {
        progress.start("peers: UCX active messages at the layers' sizes");
        // The figures the issues name first (AM's short message, FLIPC's sizes, AM's
        // bulk sizes), Rats's 16 B last: a busy machine that runs out of time leaves
        // out the last.
        let mut lat = vec![am::SHORT_SIZE];
        lat.extend(flipc::SIZES);
        lat.push(rats::SMALL);
        let mut bw = am::BULK_SIZES.to_vec();
        bw.extend(&lat);
        let p = peers::measure_am(&lat, &bw, quick_peers, &progress);
        progress.done();
        p
    });
    // The peer's measuring thread back on its CPU for the floor runs below.
    if let Some((_, b)) = cpus {
        pin_peer(&mut peer, b)?;
    }
    let mut waits_before_peers = 0;
    let peers = if args.peers && args.interface() {
        // The floor right before the peers too: the vCPUs can move during a run, and a
        // peer measured in another placement than Hamlyn's figures is not comparable
        // with them (the report warns when the floor runs differ).
        // If the placement changed since the start, the peers wait for it to come back
        // (a pause and a look, a bounded number of times), so that they are measured
        // where Hamlyn's figures were.
        progress.start("floor: shared-memory ping-pong before the peers");
        let mut at_peers = floor_pingpong(&mut peer, plan)?;
        while placement_moved(floor_runs[0], at_peers) && waits_before_peers < PLACEMENT_WAITS {
            std::thread::sleep(PLACEMENT_PAUSE);
            waits_before_peers += 1;
            at_peers = floor_pingpong(&mut peer, plan)?;
        }
        progress.done();
        floor_runs.push(at_peers);
        progress.start("peers: UCX and sockperf");
        let p = peers::measure(
            &LATENCY_SIZES,
            &BANDWIDTH_SIZES,
            RATE_SIZE,
            !matches!(plan.name, "full"),
            cpus,
            &progress,
        );
        progress.done();
        Some(p)
    } else {
        None
    };

    // The floor again, the engines stopped: the vCPUs may have moved meanwhile.
    progress.start("floor: shared-memory ping-pong again");
    floor_runs.push(floor_pingpong(&mut peer, plan)?);
    progress.done();
    peer.finish()?;
    progress.finish();
    Ok(Report {
        setup: setup_text(args, engine, plan, threads, cpus),
        floor: Floor {
            shm_oneway_us: floor_runs.iter().copied().fold(f64::INFINITY, f64::min),
            shm_runs_us: floor_runs,
            waits_before_peers,
            shm_relay_oneway_us: relayed,
            memcpy_gbps: memcpy,
            tcp: tcp_floor,
        },
        rows: measured.rows,
        loopback: measured.loopback,
        fairness: measured.fairness,
        scaling: measured.scaling,
        peers,
        layers,
        layer_peers,
        placement: measured.placement,
    })
}

/// Pins the peer's measuring thread to `cpu` (`--pin`).
fn pin_peer(peer: &mut PeerProcess, cpu: usize) -> Result<(), BenchError> {
    peer.send(&format!("pin {cpu}"))?;
    peer.expect("ok", ANSWER_WAIT).map(drop)
}

/// Where this thread and the peer's may run as `mode` is measured.
fn placement(mode: Mode, peer: &mut PeerProcess) -> Result<report::Placement, BenchError> {
    peer.send("cpus")?;
    let answer = peer.expect("cpus", ANSWER_WAIT)?;
    let peer_cpus = answer
        .split(',')
        .map(|c| c.trim().parse())
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| BenchError::Peer(format!("answered cpus {answer:?}")))?;
    Ok(report::Placement {
        phase: mode.name(),
        this_process: pin::allowed_cpus()?,
        peer: peer_cpus,
    })
}

/// What the engine phases measured.
#[derive(Debug, Default)]
struct Measured {
    placement: Vec<report::Placement>,
    rows: Vec<Row>,
    loopback: Vec<Row>,
    fairness: Vec<fairness::Fairness>,
    scaling: Option<scaling::Scaling>,
}

/// The raw TCP connection between the two processes for a floor measurement (the peer
/// connects to this process).
fn raw_tcp_connect(peer: &mut PeerProcess) -> Result<RawTcp, BenchError> {
    let (listener, addr) = RawTcp::listen()?;
    peer.send(&format!("tcp-connect {addr}"))?;
    let tcp = RawTcp::accept(&listener)?;
    peer.expect("ok", ANSWER_WAIT)?;
    Ok(tcp)
}

/// A raw TCP ping-pong of `size` bytes, the peer waiting as `wait` says: its one-way
/// latency.
fn raw_tcp_ping(
    peer: &mut PeerProcess,
    tcp: &mut RawTcp,
    plan: &Plan,
    size: usize,
    wait: Wait,
) -> Result<latency::Latency, BenchError> {
    let (warmup, iters) = plan.latency_counts(size);
    peer.send(&format!(
        "tcp-pong {size} {} {}",
        warmup + iters,
        wait.word()
    ))?;
    let lat = tcp.ping(size, warmup, iters, wait)?;
    peer.expect("ok", ANSWER_WAIT)?;
    Ok(lat)
}

/// The raw TCP floor's 8-byte spinning ping-pong again (after the TCP modes): its p50
/// one-way µs.
fn raw_tcp_8b_again(
    peer: &mut PeerProcess,
    plan: &Plan,
    progress: &Progress,
) -> Result<f64, BenchError> {
    progress.start("floor: raw TCP ping-pong 8 B again".to_string());
    let mut tcp = raw_tcp_connect(peer)?;
    let lat = raw_tcp_ping(peer, &mut tcp, plan, 8, Wait::Spin)?;
    peer.send("tcp-close")?;
    peer.expect("ok", ANSWER_WAIT)?;
    progress.done();
    Ok(lat.p50_us)
}

/// Raw TCP over loopback between the two processes, no engine running: ping-pong at the
/// latency sizes, a single stream at the bandwidth sizes and of 8-byte messages, with the
/// counts of the Hamlyn figures they are held against.
fn raw_tcp_floor(
    peer: &mut PeerProcess,
    plan: &Plan,
    progress: &Progress,
) -> Result<TcpFloor, BenchError> {
    let mut tcp = raw_tcp_connect(peer)?;
    let mut floor = TcpFloor::default();
    for size in LATENCY_SIZES {
        progress.start(format!("floor: raw TCP ping-pong {}", size_name(size)));
        let mut best: Option<(usize, f64, f64)> = None;
        for wait in Wait::ALL {
            let lat = raw_tcp_ping(peer, &mut tcp, plan, size, wait)?;
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
    engine: &EngineConfig,
) -> Result<f64, BenchError> {
    let spin = args.spin.unwrap_or(NodeOptions::default().spin);
    let cfg = match &args.socket {
        Some(s) => EngineConfig::daemon(s),
        None => engine.clone(),
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
    /// Two engines joined over TCP: node 0 in this process (the driver's), node 1 in the
    /// peer process.
    Tcp(SplitTcpEngines),
}

impl Engines {
    /// Where the driver and the peer attach.
    fn sockets(&self) -> (PathBuf, PathBuf) {
        match self {
            Engines::Daemon(p) => (p.clone(), p.clone()),
            Engines::Local(e) => (e.socket_path().into(), e.socket_path().into()),
            Engines::Tcp(t) => (t.driver_side.socket_path().into(), t.peer_socket.clone()),
        }
    }

    /// Stops the engines this run started (the peer's too: it hosts node 1 over TCP).
    fn stop(self, peer: &mut PeerProcess) -> Result<(), BenchError> {
        match self {
            Engines::Daemon(_) => Ok(()),
            Engines::Local(e) => Ok(e.stop()?),
            Engines::Tcp(t) => t.stop(peer),
        }
    }
}

/// Both processes attached to `engines` (the driver at the first socket, the peer at
/// the second), each knowing the other's tickets.
struct Attached {
    engines: Engines,
    ep: Endpoint,
    to_peer: Remote,
}

impl Attached {
    fn new(
        engines: Engines,
        args: &BenchArgs,
        peer: &mut PeerProcess,
    ) -> Result<Attached, BenchError> {
        let (socket, peer_socket) = engines.sockets();
        let ep = Endpoint::connect(&socket, args.spin)?;
        peer.send(&format!("connect {}", peer_socket.display()))?;
        let answer = peer.expect("tickets", ANSWER_WAIT)?;
        let to_peer = Remote::new(Tickets::from_words(answer.split_whitespace())?);
        peer.send(&format!("peer {}", ep.tickets()?.to_text()?))?;
        peer.expect("ok", ANSWER_WAIT)?;
        Ok(Attached {
            engines,
            ep,
            to_peer,
        })
    }

    /// Logs what the engines saw (for `--log debug`: where the messages stopped).
    fn log_stats(&self) {
        let (socket, peer_socket) = self.engines.sockets();
        tracing::debug!(stats = ?engine_stats::text(&socket), "the driver's engine");
        if peer_socket != socket {
            tracing::debug!(stats = ?engine_stats::text(&peer_socket), "the peer's engine");
        }
    }

    /// Detaches both processes and stops the engines.
    fn finish(self, peer: &mut PeerProcess) -> Result<(), BenchError> {
        peer.send("disconnect")?;
        peer.expect("ok", ANSWER_WAIT)?;
        drop(self.ep);
        drop(self.to_peer);
        self.engines.stop(peer)
    }
}

/// The direct and mediated modes on one engine (embedded, or the daemon of `--socket`),
/// then fairness and scaling on it.
fn one_engine(
    args: &BenchArgs,
    engine: &EngineConfig,
    plan: &Plan,
    cpus: Option<(usize, usize)>,
    peer: &mut PeerProcess,
    progress: &Progress,
    out: &mut Measured,
) -> Result<(), BenchError> {
    let engines = match &args.socket {
        Some(s) => Engines::Daemon(s.clone()),
        // Started from this thread, on A when pinned: the engine's thread inherits its
        // affinity and so stays with the process that hosts it, as it would in a
        // process bound to a core (an MPI rank).
        None => Engines::Local(EngineHandle::start(fresh_engine(engine))?),
    };
    let mut at = Attached::new(engines, args, peer)?;
    let result = (|| -> Result<(), BenchError> {
        if args.has(Mode::Direct) {
            at.ep.open_direct(&mut at.to_peer)?;
            peer.send("open-direct")?;
            peer.expect("ok", ANSWER_WAIT)?;
            // Pinned, the direct mode's two processes sit as the floor's and every
            // peer's do, one on each CPU: nothing of the engine's thread is on their
            // path (on one CPU each message would wait for a context switch). With
            // --busy-poll that thread spins on B beside the peer (the setup line says
            // so).
            if let Some((_, b)) = cpus {
                pin_peer(peer, b)?;
            }
            out.placement.push(placement(Mode::Direct, peer)?);
            measure_mode(Mode::Direct, plan, peer, &mut at, progress, out)?;
        }
        if args.has(Mode::Mediated) {
            // As in the direct mode: this process on A (with its engine's thread), the
            // peer on B. Until 2026-12-07 both processes shared A and the engine's thread
            // had B to itself; with the engine driven by the waiting thread that core
            // idled while the two processes took turns on A (6 µs one-way, 0.4 M/s).
            if let Some((_, b)) = cpus {
                pin_peer(peer, b)?;
            }
            out.placement.push(placement(Mode::Mediated, peer)?);
            measure_mode(Mode::Mediated, plan, peer, &mut at, progress, out)?;
            for &size in &LOOPBACK_SIZES {
                let step = format!("mediated: latency {} to itself", size_name(size));
                progress.start(step.clone());
                let (warmup, iters) = plan.latency_counts(size);
                let lat = latency::loopback(&mut at.ep, size, warmup, iters)
                    .map_err(|e| BenchError::during(step, e))?;
                out.loopback
                    .push(Row::latency(Mode::Mediated, Op::TaggedWrite, size, &lat));
                progress.done();
            }
            if !args.no_extras {
                let (socket, _) = at.engines.sockets();
                extras(&socket, plan, args, &mut at, progress, out)?;
            }
        }
        Ok(())
    })();
    if result.is_err() {
        at.log_stats();
    }
    result?;
    at.finish(peer)
}

/// Fairness and scaling on the engine at `socket`.
fn extras(
    socket: &Path,
    plan: &Plan,
    args: &BenchArgs,
    at: &mut Attached,
    progress: &Progress,
    out: &mut Measured,
) -> Result<(), BenchError> {
    let window = match plan.name {
        "full" => Duration::from_secs(2),
        "quick" => Duration::from_millis(500),
        _ => Duration::from_millis(100),
    };
    for size in FAIRNESS_SIZES {
        let step = format!("fairness: {FAIRNESS_TERMINI} termini, {}", size_name(size));
        progress.start(step.clone());
        out.fairness.push(
            fairness::measure(socket, FAIRNESS_TERMINI, size, window, args.spin)
                .map_err(|e| BenchError::during(step, e))?,
        );
        progress.done();
    }
    let (warmup, iters) = plan.latency_counts(8);
    out.scaling = Some(
        scaling::measure(socket, &mut at.ep, warmup, iters.min(5_000), progress)
            .map_err(|e| BenchError::during("scaling: ports and slots".into(), e))?,
    );
    Ok(())
}

/// A TCP mode (`tcp` or `tcp-plain`): two engines joined over loopback.
#[allow(clippy::too_many_arguments)]
fn two_engines(
    mode: Mode,
    args: &BenchArgs,
    engine: &EngineConfig,
    plan: &Plan,
    cpus: Option<(usize, usize)>,
    peer: &mut PeerProcess,
    progress: &Progress,
    out: &mut Measured,
) -> Result<(), BenchError> {
    if let Some((_, b)) = cpus {
        pin_peer(peer, b)?;
    }
    let setup = tcp_setup(args, engine, mode == Mode::TcpPlain);
    let engines = Engines::Tcp(SplitTcpEngines::start(engine, &setup, cpus, peer)?);
    let mut at = Attached::new(engines, args, peer)?;
    let result = measure_mode(mode, plan, peer, &mut at, progress, out);
    if result.is_err() {
        at.log_stats();
    }
    result?;
    at.finish(peer)
}

/// Every operation of `mode` between the attached driver and peer: ping-pongs at every
/// latency size, reads and fetch-adds (not direct: the engine executes them), bandwidth
/// and message rate. An error names the step it happened in.
fn measure_mode(
    mode: Mode,
    plan: &Plan,
    peer: &mut PeerProcess,
    at: &mut Attached,
    progress: &Progress,
    out: &mut Measured,
) -> Result<(), BenchError> {
    let via = match mode {
        Mode::Direct => Via::Direct,
        Mode::Mediated | Mode::Tcp | Mode::TcpPlain => Via::Mediated,
    };
    let (ep, to) = (&mut at.ep, &at.to_peer);
    let mut series: u32 = 0;
    for exchange in Exchange::ALL {
        let op = match exchange {
            Exchange::Tagged => Op::TaggedWrite,
            Exchange::Polled => Op::PolledWrite,
            Exchange::Datagram => Op::Datagram,
        };
        for size in LATENCY_SIZES {
            let step = format!("{}: {} {}", mode.name(), op.label(), size_name(size));
            progress.start(step.clone());
            series += 1;
            let how = PingPong {
                via,
                exchange,
                size,
                series,
            };
            let (warmup, iters) = plan.latency_counts(size);
            let lat = (|| {
                peer.send(&format!(
                    "pong {} {} {size} {} {series}",
                    via.word(),
                    exchange.word(),
                    warmup + iters
                ))?;
                let lat = latency::ping(ep, to, how, warmup, iters)?;
                peer.expect("ok", ANSWER_WAIT)?;
                Ok(lat)
            })()
            .map_err(|e| BenchError::during(step, e))?;
            out.rows.push(Row::latency(mode, op, size, &lat));
            progress.done();
        }
    }
    if mode != Mode::Direct {
        for size in LATENCY_SIZES {
            let step = format!("{}: read {}", mode.name(), size_name(size));
            progress.start(step.clone());
            let (warmup, iters) = plan.latency_counts(size);
            let lat = latency::read(ep, to, size, warmup, iters)
                .map_err(|e| BenchError::during(step, e))?;
            out.rows.push(Row::latency(mode, Op::Read, size, &lat));
            progress.done();
        }
        let step = format!("{}: fetch-add", mode.name());
        progress.start(step.clone());
        let lat = latency::fetch_add(ep, to, plan.warmup, plan.latency_iters)
            .map_err(|e| BenchError::during(step, e))?;
        out.rows.push(Row::latency(mode, Op::FetchAdd, 8, &lat));
        progress.done();
    }

    let mut streams = Streams {
        peer,
        ep,
        via,
        reps: plan.reps,
        progress,
    };
    for size in BANDWIDTH_SIZES {
        let step = format!("{}: bandwidth {}", mode.name(), size_name(size));
        let (warm, count) = (plan.bw_warm_count(size), plan.bw_count(size));
        let gbps = streams.median(step, size, warm, count, |s| s.gbps(size))?;
        out.rows.push(Row::bandwidth(mode, size, gbps));
    }
    let step = format!("{}: message rate {}", mode.name(), size_name(RATE_SIZE));
    let warm = (plan.rate_msgs / 10).max(2);
    let rate = streams.median(step, RATE_SIZE, warm, plan.rate_msgs, Stream::msgs_per_s)?;
    out.rows.push(Row::rate(mode, RATE_SIZE, rate));
    Ok(())
}

/// Streams from the peer to the driver, repeated for a median.
struct Streams<'a> {
    peer: &'a mut PeerProcess,
    ep: &'a mut Endpoint,
    via: Via,
    reps: usize,
    progress: &'a Progress,
}

impl Streams<'_> {
    /// One untimed stream of `warm` messages of `size` bytes, then `reps` of `count`:
    /// the median of `figure` over them (a progress step each). An error names `step`.
    fn median(
        &mut self,
        step: String,
        size: usize,
        warm: u64,
        count: u64,
        figure: impl Fn(&Stream) -> f64,
    ) -> Result<f64, BenchError> {
        self.progress.start(step.clone());
        let figures = (|| {
            stream(self.peer, self.ep, self.via, size, warm)?;
            let mut figures = Vec::with_capacity(self.reps);
            for _ in 0..self.reps {
                figures.push(figure(&stream(self.peer, self.ep, self.via, size, count)?));
                self.progress.done();
            }
            Ok(figures)
        })()
        .map_err(|e| BenchError::during(step, e))?;
        Ok(median(&figures).unwrap_or(0.0))
    }
}

/// Has the peer stream `count` messages of `size` bytes and times their arrival.
fn stream(
    peer: &mut PeerProcess,
    ep: &mut Endpoint,
    via: Via,
    size: usize,
    count: u64,
) -> Result<Stream, BenchError> {
    let lost_before = ep.queue.overflows();
    peer.send(&format!("stream {} {size} {count}", via.word()))?;
    let s = receive_stream(ep, count, lost_before)?;
    peer.expect("ok", ANSWER_WAIT)?;
    Ok(s)
}
