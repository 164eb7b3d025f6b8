//! `hamlyn node`: the per-node engine daemon.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use std::net::SocketAddr;
use std::time::Duration;

use hamlyn_engine::EngineConfig;
use hamlyn_fabric::tcp::secure::Cipher;
use hamlyn_fabric::tcp::{Roster, TcpConfig, TcpFabric};
use hamlyn_shm::sync::{AtomicBool, Ordering};
use hamlyn_wire::NodeId;

use crate::cmd::secret::{SecretSource, SECRET_ENV};
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
    /// Longest idle spin before the engine sleeps, in microseconds (default: the engine's).
    #[arg(long, value_name = "US")]
    pub spin_us: Option<u64>,
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
        if let Some(us) = self.spin_us {
            base.spin = Duration::from_micros(us);
        }
        if let Some(m) = self.intra_mtu {
            base.intra_mtu = m;
        }
        base
    }
}

/// Per-client quotas of `hamlyn node` (a request past one is refused with a `Quota`
/// error and counted in `hamlyn stat`; defaults: the engine's).
#[derive(Clone, Debug, Default, Args)]
pub struct QuotaArgs {
    /// Areas one client may register.
    #[arg(long, value_name = "N")]
    pub max_areas: Option<u32>,
    /// Bytes of areas one client may register.
    #[arg(long, value_name = "BYTES")]
    pub max_area_bytes: Option<u64>,
    /// Slots one client may hold.
    #[arg(long, value_name = "N")]
    pub max_slots: Option<u32>,
    /// Bytes of areas the engine maps for all clients together.
    #[arg(long, value_name = "BYTES")]
    pub max_mapped: Option<u64>,
    /// Milliseconds a connection may take to attach before it is closed.
    #[arg(long, value_name = "MS")]
    pub attach_timeout_ms: Option<u64>,
    /// Connections one user (uid) may hold at once.
    #[arg(long, value_name = "N")]
    pub max_clients_per_user: Option<u32>,
}

impl QuotaArgs {
    /// `base` with these quotas applied.
    pub fn apply(&self, mut base: EngineConfig) -> EngineConfig {
        if let Some(n) = self.max_areas {
            base.quotas.areas = n;
        }
        if let Some(n) = self.max_area_bytes {
            base.quotas.area_bytes = n;
        }
        if let Some(n) = self.max_slots {
            base.quotas.slots = n;
        }
        if let Some(n) = self.max_mapped {
            base.max_mapped = n;
        }
        if let Some(ms) = self.attach_timeout_ms {
            base.attach_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = self.max_clients_per_user {
            base.max_clients_per_user = n;
        }
        base
    }
}

/// `hamlyn node` arguments.
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
    /// What one client may hold.
    #[command(flatten)]
    pub quotas: QuotaArgs,
    /// Cluster settings: the TCP fabric to other nodes' engines.
    #[command(flatten)]
    pub fabric: FabricArgs,
}

/// Another node: its id and its engine's TCP address, written `ID@ADDR`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerSpec {
    /// The node id.
    pub node: u32,
    /// Where its engine listens.
    pub addr: SocketAddr,
}

impl std::str::FromStr for PeerSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<PeerSpec, String> {
        let (id, addr) = s
            .split_once('@')
            .or_else(|| s.split_once(char::is_whitespace))
            .ok_or_else(|| format!("{s:?}: expected ID@ADDR, e.g. 2@10.0.0.2:7000"))?;
        let node = id
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: {id:?} is not a node id"))?;
        let addr = addr
            .trim()
            .parse()
            .map_err(|e| format!("{s:?}: {addr:?} is not an address: {e}"))?;
        Ok(PeerSpec { node, addr })
    }
}

/// The TCP fabric between engines (DESIGN §2 "Fabrics").
#[derive(Clone, Debug, Default, Args)]
pub struct FabricArgs {
    /// Listen for other nodes' engines on this TCP address; enables the TCP fabric.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Another node, as ID@ADDR (repeat for each).
    #[arg(long = "peer", value_name = "ID@ADDR")]
    pub peers: Vec<PeerSpec>,
    /// A file of peers: one `ID@ADDR` or `ID ADDR` per line, `#` starts a comment.
    #[arg(long, value_name = "PATH")]
    pub peers_file: Option<PathBuf>,
    /// Learn the cluster from the member listening on ADDR (any member; repeat for
    /// fallbacks): every member it lists is asked too, so all of them learn this node.
    #[arg(long = "join", value_name = "ADDR")]
    pub join: Vec<SocketAddr>,
    /// TCP connections per peer; packets are striped across them.
    #[arg(long, value_name = "K", default_value_t = 2)]
    pub rails: usize,
    /// Keep rail 0 of every peer for express traffic (single-packet messages of termini
    /// above the node's lowest priority in use) and read it first: high-priority messages
    /// never queue behind a low-priority flood. Needs 2 rails or more (and costs bulk
    /// traffic one of them); give it to every node of the cluster.
    #[arg(long)]
    pub express_lane: bool,
    /// The node holding the cluster's name registry (default: the lowest node id among
    /// this node and the peers it knows at start — from `--peer`, `--peers-file` and
    /// `--join` — so every member of a cluster picks the same one; pass it explicitly
    /// for a cluster that grows by lower ids later).
    #[arg(long, value_name = "N")]
    pub registry: Option<u32>,
    /// Heartbeat period on idle connections, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    pub heartbeat_ms: u64,
    /// Silence after which a peer is declared down, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 3000)]
    pub peer_timeout_ms: u64,
    /// This run's incarnation (default: from the clock, so every restart is newer).
    #[arg(long, value_name = "N")]
    pub incarnation: Option<u32>,
    /// The cluster secret's file (64 hexadecimal digits, readable by its owner only;
    /// `hamlyn secret generate` makes one). Default: `$HAMLYN_SECRET`, else this user's
    /// file (`hamlyn secret path`), created on first use.
    #[arg(long, value_name = "PATH")]
    pub secret_file: Option<PathBuf>,
    /// This node's static key file (64 hexadecimal digits, readable by its owner only;
    /// created on first use). Peers bind the node id to it: keep it across restarts.
    /// Default: `node-key-ID` next to this user's secret file (`hamlyn key path`).
    #[arg(long, value_name = "PATH")]
    pub node_key: Option<PathBuf>,
    /// A roster: one `ID PUBLIC_KEY` per line (`hamlyn key show --node-id ID` prints a
    /// node's line; `#` starts a comment). With it only the listed nodes, each with its
    /// key, are admitted; without it, each node's key is pinned on first contact.
    #[arg(long, value_name = "PATH")]
    pub roster: Option<PathBuf>,
    /// DANGER: links in clear and unauthenticated — anyone who reaches the listener can
    /// claim any node id, read every key and forge packets. Only for a physically secure
    /// network; secure nodes refuse such a node.
    #[arg(long)]
    pub danger_insecure: bool,
    /// The cipher of the links this node dials: aes-256-gcm (the default; 4 times
    /// ChaCha's speed on CPUs with AES instructions) or chacha20-poly1305 (for CPUs
    /// without them). A node accepts links in either, so nodes may differ.
    #[arg(long, value_name = "CIPHER", default_value_t = Cipher::Aes256Gcm)]
    pub cipher: Cipher,
}

impl FabricArgs {
    /// Every peer, from the flags and the peers file.
    pub fn all_peers(&self) -> Result<Vec<PeerSpec>, String> {
        let mut peers = self.peers.clone();
        if let Some(path) = &self.peers_file {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            for (n, line) in text.lines().enumerate() {
                let line = line.split('#').next().unwrap_or("").trim();
                if line.is_empty() {
                    continue;
                }
                peers.push(
                    line.parse()
                        .map_err(|e| format!("{}:{}: {e}", path.display(), n + 1))?,
                );
            }
        }
        Ok(peers)
    }
}

/// An incarnation from the clock: tenths of a second since 2026-01-01, so a restart,
/// even a quick one, is a newer incarnation than the run before it.
pub fn clock_incarnation() -> u32 {
    const EPOCH_2026: u64 = 1_767_225_600;
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let tenths = t.as_secs().saturating_sub(EPOCH_2026) * 10 + u64::from(t.subsec_millis() / 100);
    (tenths as u32).max(1)
}

impl NodeArgs {
    /// The engine configuration these arguments ask for.
    pub fn config(&self) -> EngineConfig {
        let mut cfg = self
            .quotas
            .apply(self.engine.apply(EngineConfig::daemon(&self.socket)));
        cfg.node = self.node_id;
        cfg.registry = self.fabric.registry;
        cfg.incarnation = self.fabric.incarnation.unwrap_or_else(clock_incarnation);
        cfg
    }

    /// The TCP fabric these arguments ask for, if `--listen` was given.
    pub fn tcp(&self, incarnation: u32) -> Result<Option<TcpFabric>, String> {
        let Some(listen) = self.fabric.listen else {
            if !self.fabric.peers.is_empty()
                || self.fabric.peers_file.is_some()
                || !self.fabric.join.is_empty()
            {
                return Err("--peer, --peers-file and --join need --listen".into());
            }
            return Ok(None);
        };
        let mut c = TcpConfig::new(NodeId(self.node_id), listen);
        let source = SecretSource::choose(
            self.fabric.danger_insecure,
            self.fabric.secret_file.as_deref(),
            std::env::var(SECRET_ENV).ok(),
        )?;
        c.secret = source.load()?;
        c.danger_insecure = c.secret.is_none();
        if !c.danger_insecure {
            c.key = Some(crate::cmd::key::load(
                self.node_id,
                self.fabric.node_key.as_deref(),
            )?);
        }
        if let Some(path) = &self.fabric.roster {
            c.roster = Some(Roster::read_file(path).map_err(|e| format!("--roster: {e}"))?);
        }
        if c.danger_insecure {
            tracing::warn!(
                "--danger-insecure: links to other nodes are NOT authenticated or encrypted"
            );
        }
        c.incarnation = incarnation;
        c.rails = self.fabric.rails;
        c.express_lane = self.fabric.express_lane;
        c.cipher = self.fabric.cipher;
        c.busy_poll = self.engine.busy_poll;
        c.heartbeat_interval = Duration::from_millis(self.fabric.heartbeat_ms);
        c.peer_timeout = Duration::from_millis(self.fabric.peer_timeout_ms);
        for p in self.fabric.all_peers()? {
            if p.node == self.node_id {
                continue;
            }
            c.peers.push((NodeId(p.node), p.addr));
        }
        let mut fabric = TcpFabric::new(c).map_err(|e| format!("TCP fabric on {listen}: {e}"))?;
        if !self.fabric.join.is_empty() {
            // Members that dial back wait in the listen backlog until the engine polls.
            fabric
                .join(
                    &self.fabric.join,
                    Duration::from_millis(self.fabric.peer_timeout_ms),
                )
                .map_err(|e| format!("--join: {e}"))?;
        }
        Ok(Some(fabric))
    }
}

/// The registry node a cluster agrees on without being told: the lowest node id known.
fn default_registry(me: u32, peers: impl Iterator<Item = u32>) -> u32 {
    peers.fold(me, u32::min)
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
    let mut cfg = args.config();
    tracing::info!(
        socket = %cfg.socket.display(),
        node = cfg.node,
        busy_poll = cfg.busy_poll,
        "hamlyn node starting"
    );
    let fabric = args.tcp(cfg.incarnation)?;
    if let Some(f) = &fabric {
        if cfg.registry.is_none() {
            cfg.registry = Some(default_registry(cfg.node, f.peers().map(|(n, _)| n.0)));
        }
        tracing::info!(listen = %f.local_addr(), rails = args.fabric.rails, peers = f.config().peers.len(), incarnation = cfg.incarnation, registry = ?cfg.registry, "TCP fabric ready");
    }
    match fabric {
        Some(f) => hamlyn_engine::run_daemon_with_fabric(cfg, stop, Box::new(f)),
        None => hamlyn_engine::run_daemon(cfg, stop),
    }
    .map_err(|e| format!("engine on {}: {e}", args.socket.display()))?;
    tracing::info!("hamlyn node stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_registry_is_the_lowest_node_known() {
        assert_eq!(default_registry(3, [5, 1, 4].into_iter()), 1);
        assert_eq!(default_registry(0, [5].into_iter()), 0);
        assert_eq!(default_registry(7, std::iter::empty()), 7);
    }

    #[test]
    fn peer_specs_parse_and_refuse_clearly() {
        let p: PeerSpec = "2@10.0.0.2:7000".parse().unwrap();
        assert_eq!((p.node, p.addr.port()), (2, 7000));
        let p: PeerSpec = "3 127.0.0.1:9".parse().unwrap();
        assert_eq!(p.node, 3);
        assert!("x@10.0.0.2:7000"
            .parse::<PeerSpec>()
            .unwrap_err()
            .contains("not a node id"));
        assert!("2@nowhere"
            .parse::<PeerSpec>()
            .unwrap_err()
            .contains("not an address"));
        assert!("2"
            .parse::<PeerSpec>()
            .unwrap_err()
            .contains("expected ID@ADDR"));
    }

    #[test]
    fn peers_file_lines_and_comments() {
        let dir = std::env::temp_dir().join(format!("hamlyn-peers-{}", std::process::id()));
        std::fs::write(
            &dir,
            "# cluster\n1@127.0.0.1:7001\n\n2 127.0.0.1:7002  # two\n",
        )
        .unwrap();
        let args = FabricArgs {
            peers_file: Some(dir.clone()),
            ..FabricArgs::default()
        };
        let peers = args.all_peers().unwrap();
        let _ = std::fs::remove_file(&dir);
        assert_eq!(peers.iter().map(|p| p.node).collect::<Vec<_>>(), vec![1, 2]);
    }

    #[test]
    fn join_flags_parse_and_need_listen() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            node: NodeArgs,
        }
        let cli =
            Cli::try_parse_from(["hamlyn", "--join", "10.0.0.2:7000", "--join", "[::1]:7001"])
                .unwrap();
        assert_eq!(
            cli.node.fabric.join,
            vec![
                "10.0.0.2:7000".parse::<SocketAddr>().unwrap(),
                "[::1]:7001".parse().unwrap()
            ]
        );
        assert!(cli.node.tcp(1).unwrap_err().contains("need --listen"));
        assert!(Cli::try_parse_from(["hamlyn", "--join", "nowhere"]).is_err());
    }

    #[test]
    fn clock_incarnations_grow() {
        // Tenths of a second: 120 ms on, the incarnation has grown. From the wall
        // clock, which a time daemon may step back: only then is it looked at again
        // (the clock read after the incarnation, so that this 120 ms covers it).
        let (a, start) = (clock_incarnation(), std::time::SystemTime::now());
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(120));
            let b = clock_incarnation();
            let on = std::time::SystemTime::now().duration_since(start);
            if on.is_ok_and(|d| d >= Duration::from_millis(120)) {
                assert!(b > a, "120 ms on, the incarnation grew: {a} -> {b}");
                return;
            }
        }
        panic!("the wall clock never moved 120 ms on in 2.4 s");
    }
}
