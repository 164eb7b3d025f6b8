//! How an engine is set up.

use std::path::PathBuf;
use std::time::Duration;

use hamlyn_shm::sync::{AtomicU32, Ordering};

/// An engine's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Where the control socket is bound.
    pub socket: PathBuf,
    /// This engine's node id.
    pub node: u32,
    /// This engine's incarnation (0: pick one from the clock at start).
    pub incarnation: u32,
    /// Spin forever instead of sleeping when idle (burns a core, lowest latency).
    pub busy_poll: bool,
    /// Most idle turns spent spinning before the engine sleeps.
    pub spin_turns: u32,
    /// Longest time spent spinning idle before the engine sleeps (whichever of this and
    /// `spin_turns` comes first), so a slow turn (a debug build, a busy fabric) cannot
    /// stretch the spin.
    pub spin: Duration,
    /// Longest sleep before the engine looks at its stop flag again.
    pub max_sleep: Duration,
    /// Payload bytes per packet for intra-node delivery (one copy per packet).
    pub intra_mtu: u64,
    /// Payload bytes per packet to other nodes. A message larger than this stripes across
    /// the rails; each packet costs the engine a turn, the fabric a frame and the kernel
    /// a `writev` (whose work per call is most of what a stream pays beyond the copy: raw
    /// TCP, too, moves fewer bytes a second in smaller calls), which is why it is not
    /// smaller: a 1 MiB stream over loopback with links in clear reached
    /// about half of one raw TCP stream at 64 KiB, 0.84x at 256 KiB and 1.05x at 512 KiB
    /// (medians of eight alternated quick runs, 2026-12-08; 1 MiB packets 0.97x). Larger
    /// packets hold a rail longer: a small packet queued behind one on the same rail
    /// waits up to its length at the link's speed (some 80 µs at 6 GB/s).
    pub remote_mtu: u64,
    /// Most clients attached at once.
    pub max_clients: u32,
    /// Most connections of one user (uid) at once, so one user cannot lock others out.
    pub max_clients_per_user: u32,
    /// The node holding the cluster's name registry (`None`: this node).
    pub registry: Option<u32>,
    /// What one client may hold at once.
    pub quotas: Quotas,
    /// Bytes of client areas the engine maps in all (its address space is shared by every
    /// client: one must not be able to use it up).
    pub max_mapped: u64,
    /// A connection that has not attached this long after it was accepted is closed (so
    /// idle connections cannot fill `max_clients`).
    pub attach_timeout: Duration,
    /// An engine started in an application ([`crate::EngineHandle::start`]) is run by
    /// the application's waiting threads while they wait, its own thread sleeping
    /// meanwhile ([`crate::Driver`]). On by default: on a machine with few cores this
    /// removes the engine as a third busy thread (docs/PERFORMANCE.md); off when the
    /// environment says `HAMLYN_DRIVE=0` ([`crate::DRIVE_ENV`]). A daemon
    /// ([`crate::run_daemon`]) is never driven by anyone but its own thread.
    pub driven: bool,
}

/// What one client may hold at once; a request past it is refused with
/// `ControlErrorCode::Quota` and counted, and the client's other work goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quotas {
    /// Areas registered.
    pub areas: u32,
    /// Bytes of areas registered (each is mapped by the engine).
    pub area_bytes: u64,
    /// Slots (each costs the engine a slot-table entry, about 200 bytes).
    pub slots: u32,
    /// Termini per port.
    pub termini: u16,
    /// Notification queues per port.
    pub queues: u16,
}

impl Default for Quotas {
    /// 4,096 areas of 64 GiB in all (a whole machine's memory, many times, but a small
    /// share of the engine's 128 TiB of address space), 262,144 slots (about 50 MB of
    /// slot table), and the port layout's own limits for termini and queues.
    fn default() -> Quotas {
        Quotas {
            areas: 4096,
            area_bytes: 64 << 30,
            slots: 1 << 18,
            termini: hamlyn_shm::port::MAX_TERMINI,
            queues: hamlyn_shm::port::MAX_QUEUES,
        }
    }
}

static EMBEDDED_COUNT: AtomicU32 = AtomicU32::new(0);

impl EngineConfig {
    /// A daemon on `socket` with default settings.
    pub fn daemon(socket: impl Into<PathBuf>) -> EngineConfig {
        EngineConfig {
            socket: socket.into(),
            node: 0,
            incarnation: 0,
            busy_poll: false,
            spin_turns: 20_000,
            spin: Duration::from_millis(1),
            max_sleep: Duration::from_millis(100),
            intra_mtu: 256 * 1024,
            remote_mtu: 512 * 1024,
            max_clients: 1024,
            // Three quarters: one user can never take every place.
            max_clients_per_user: 768,
            registry: None,
            quotas: Quotas::default(),
            // A quarter of x86-64's 128 TiB of user address space.
            max_mapped: 32 << 40,
            attach_timeout: Duration::from_secs(2),
            driven: crate::hosted::driven_by_default(),
        }
    }

    /// An engine for one application: its socket in the temporary directory, named after
    /// the process and a counter so several embedded engines never collide, and a random
    /// incarnation, so that two embedded engines (both node 0) are told apart: a ticket
    /// of one used at the other is refused as naming another incarnation of the node
    /// (`StaleIncarnation`), not as a bad key. (A daemon's incarnation comes from the clock,
    /// so that it grows across restarts, which its peers rely on.)
    pub fn embedded() -> EngineConfig {
        // Relaxed: only uniqueness matters.
        let n = EMBEDDED_COUNT.fetch_add(1, Ordering::Relaxed);
        let name = format!("hamlyn-{}-{n}.sock", std::process::id());
        let mut cfg = EngineConfig::daemon(std::env::temp_dir().join(name));
        // 0 (no randomness) falls back to the clock, as for a daemon.
        cfg.incarnation = hamlyn_shm::keys::random_key().map_or(0, |k| (k as u32) | 1);
        cfg
    }
}
