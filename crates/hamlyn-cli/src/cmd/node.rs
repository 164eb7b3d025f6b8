//! `hamlyn node`: the per-node engine daemon.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::Args;
use hamlyn_engine::EngineConfig;

use crate::socket::{DEFAULT_SOCKET, SOCKET_ENV};

/// Engine settings shared by `hamlyn node` and the embedded engine of `hamlyn bench`.
#[derive(Clone, Debug, Default, Args)]
pub struct EngineArgs {
    /// Spin forever instead of sleeping when idle: lowest latency, burns a core.
    #[arg(long)]
    pub busy_poll: bool,
    /// Idle turns the engine spins through before it sleeps (default: the engine's).
    #[arg(long, value_name = "TURNS")]
    pub spin_turns: Option<u32>,
    /// Payload bytes per packet for intra-node delivery (default: the engine's).
    #[arg(long, value_name = "BYTES")]
    pub intra_mtu: Option<u64>,
}

impl EngineArgs {
    /// `base` with these settings applied.
    pub fn apply(&self, mut base: EngineConfig) -> EngineConfig {
        base.busy_poll = self.busy_poll;
        if let Some(t) = self.spin_turns {
            base.spin_turns = t;
        }
        if let Some(m) = self.intra_mtu {
            base.intra_mtu = m;
        }
        base
    }
}

/// `hamlyn node` arguments. Fabric options (TCP listen address, peers, rails) will sit
/// beside these as their own flattened group.
#[derive(Debug, Args)]
pub struct NodeArgs {
    /// The control socket to bind (a stale one left by a dead daemon is replaced).
    #[arg(long, value_name = "PATH", env = SOCKET_ENV, default_value = DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// This node's id in the cluster (tickets name it).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub node_id: u32,
    /// Engine settings.
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl NodeArgs {
    /// The engine configuration these arguments ask for.
    pub fn config(&self) -> EngineConfig {
        let mut cfg = self.engine.apply(EngineConfig::daemon(&self.socket));
        cfg.node = self.node_id;
        cfg
    }
}

/// Runs the daemon until SIGINT or SIGTERM; the engine removes its socket on the way out.
pub fn run(args: NodeArgs) -> Result<(), Box<dyn std::error::Error>> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || {
        // Release: pairs with the engine's Acquire load of its stop flag; it notices
        // within its longest sleep (100 ms by default).
        flag.store(true, Ordering::Release);
    })
    .map_err(|e| format!("cannot install the SIGINT/SIGTERM handler: {e}"))?;
    let cfg = args.config();
    tracing::info!(
        socket = %cfg.socket.display(),
        node = cfg.node,
        busy_poll = cfg.busy_poll,
        "hamlyn node starting"
    );
    hamlyn_engine::run_daemon(cfg, stop)
        .map_err(|e| format!("engine on {}: {e}", args.socket.display()))?;
    tracing::info!("hamlyn node stopped");
    Ok(())
}
