//! `hamlyn`: the command-line face of Hamlyn.
//!
//! - `hamlyn node`: run the per-node engine daemon that processes attach to;
//! - `hamlyn stat`: show a running engine's statistics (counters, rejects, peers, the TCP
//!   fabric, the registry, ports, slots; `--json`: all of it as JSON);
//! - `hamlyn bench`: measure latency, bandwidth and message rate through the engine,
//!   next to the shared-memory floor measured in the same run (DESIGN §8); the
//!   `hamlyn-bench` crate, linked with the `bench` feature (on by default: without it, the
//!   binary has no plotting and `hamlyn bench` says it was left out).
//!
//! Every subcommand that talks to a daemon takes `--socket PATH`; its default is
//! `$HAMLYN_SOCKET`, else [`socket::DEFAULT_SOCKET`]. Logs go to standard error, filtered
//! by `--log LEVEL` if given, else by `RUST_LOG` (e.g. `RUST_LOG=hamlyn_engine=debug`).

#![forbid(unsafe_code)]

mod cmd;
mod control;
mod socket;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};

/// Protected, zero-copy, sender-managed messaging between processes.
#[derive(Debug, Parser)]
#[command(name = "hamlyn", version, propagate_version = true)]
struct Cli {
    /// Most verbose log level on standard error: error, warn, info, debug or trace. Wins
    /// over `RUST_LOG`, which applies otherwise (default: info for `node`, warn otherwise).
    #[arg(long, global = true, value_name = "LEVEL")]
    log: Option<tracing::Level>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the node daemon: an engine that local processes attach to through its control
    /// socket. Stops cleanly on SIGINT or SIGTERM.
    Node(Box<cmd::node::NodeArgs>),
    /// Show a running engine's counters: ports, slots, peers, totals and rejects by reason.
    Stat(cmd::stat::StatArgs),
    /// Round trips through this node's engine and another node's engine.
    Ping(cmd::ping::PingArgs),
    /// Seeds as text: show one, publish one by name in the cluster registry, look one up.
    Seed(cmd::seed::SeedArgs),
    /// Start a parallel job of P processes on this node, each told its rank and the
    /// job's size (as mpirun does); see the `hamlyn-job` crate.
    Run(cmd::run::RunArgs),
    /// The two ends of a long checksummed stream, for soak tests (`bench/soak.sh`):
    /// every message ends delivered (verified by the receiver) or failed, never lost.
    Soak(cmd::soak::SoakArgs),
    /// The cluster secret that authenticates links between nodes: make one, or show
    /// where this user's lives.
    Secret(cmd::secret::SecretArgs),
    /// This node's static key, which its links prove and peers bind to its node id: make
    /// one, show its public half (a roster line), or where this user's lives.
    Key(cmd::key::KeyArgs),
    /// Measure one-way latency, bandwidth and message rate through the engine between two
    /// processes, next to the shared-memory floor measured in the same run.
    #[cfg(feature = "bench")]
    Bench(cmd::bench::BenchCmd),
    /// Not in this build: it was made without the `bench` feature.
    #[cfg(not(feature = "bench"))]
    Bench(cmd::bench::BenchCmd),
    /// The second process of `hamlyn bench` (driven over its standard input and output).
    #[cfg(feature = "bench")]
    #[command(name = hamlyn_bench::PEER_COMMAND, hide = true)]
    BenchPeer(hamlyn_bench::peer::PeerArgs),
}

/// The log filter: `--log`'s level if given, else the directives of `RUST_LOG` (`rust_log`;
/// invalid ones are named on standard error and ignored), else `default`.
fn log_filter(
    flag: Option<tracing::Level>,
    rust_log: Option<&str>,
    default: tracing::Level,
) -> EnvFilter {
    let builder = EnvFilter::builder()
        .with_default_directive(LevelFilter::from_level(flag.unwrap_or(default)).into());
    match (flag, rust_log) {
        (None, Some(directives)) => builder.parse_lossy(directives),
        _ => builder.parse_lossy(""),
    }
}

fn init_logging(filter: EnvFilter) {
    // A second initialisation (never happens here) would only be refused.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.command {
        Command::Node(_) => tracing::Level::INFO,
        _ => tracing::Level::WARN,
    };
    let rust_log = std::env::var(EnvFilter::DEFAULT_ENV).ok();
    init_logging(log_filter(cli.log, rust_log.as_deref(), default_level));
    let result: Result<(), Box<dyn std::error::Error>> = match cli.command {
        Command::Node(args) => cmd::node::run(*args),
        Command::Stat(args) => cmd::stat::run(args).map_err(Into::into),
        Command::Ping(args) => cmd::ping::run(args).map_err(Into::into),
        Command::Seed(args) => cmd::seed::run(args).map_err(Into::into),
        Command::Secret(args) => cmd::secret::run(args).map_err(Into::into),
        Command::Key(args) => cmd::key::run(args).map_err(Into::into),
        Command::Soak(args) => cmd::soak::run(args).map_err(Into::into),
        Command::Run(args) => cmd::run::run(args).map_err(Into::into),
        Command::Bench(args) => cmd::bench::run(args).map_err(Into::into),
        #[cfg(feature = "bench")]
        Command::BenchPeer(args) => hamlyn_bench::peer::run(args).map_err(Into::into),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Every error's message already names its cause.
            eprintln!("hamlyn: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn log_flag_wins_then_rust_log_then_the_default() {
        let f = |flag, rust_log, default| log_filter(flag, rust_log, default).to_string();
        assert_eq!(f(Some(Level::DEBUG), Some("trace"), Level::INFO), "debug");
        assert_eq!(
            f(None, Some("hamlyn_engine=trace"), Level::INFO),
            "hamlyn_engine=trace"
        );
        assert_eq!(f(None, Some("error"), Level::INFO), "error");
        assert_eq!(f(None, Some(""), Level::INFO), "info");
        assert_eq!(f(None, None, Level::WARN), "warn");
    }

    #[cfg(feature = "bench")]
    #[test]
    fn the_peer_subcommand_is_the_one_the_bench_starts() {
        let cli = Cli::try_parse_from(["hamlyn", hamlyn_bench::PEER_COMMAND]);
        assert!(matches!(cli.map(|c| c.command), Ok(Command::BenchPeer(_))));
    }
}
