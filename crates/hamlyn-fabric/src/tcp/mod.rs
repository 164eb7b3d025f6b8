//! The TCP fabric: engines on different machines exchange packets over several TCP
//! connections per peer ("rails"), striped packet by packet (DESIGN §2 "Fabrics").
//!
//! # Authenticated links
//!
//! Unless [`TcpConfig::danger_insecure`] is set, every connection first runs a Noise
//! handshake ([`secure`]: `Noise_XXpsk0_25519_AESGCM_BLAKE2s`, or `..._ChaChaPoly_...`
//! if the dialer's [`TcpConfig::cipher`] says so, the cluster secret
//! [`TcpConfig::secret`] as the pre-shared key, each node's static key
//! [`TcpConfig::key`], fresh ephemeral keys on both sides), and then carries the whole
//! frame stream below — HELLOs, membership queries and replies, packets, heartbeats —
//! in AES-256-GCM (or ChaCha20-Poly1305) records with a counter nonce per direction. So
//! nothing is read from a connection before its other end proved it holds the secret
//! and its static key's private half; the node id, incarnation and session a dialer
//! declares arrive in its first record, bound to that handshake; and a frame altered,
//! injected, replayed or reordered on the way does not open. A connection that fails
//! its handshake is closed as [`CloseReason::AuthFailed`] (a replayed handshake fails
//! there too: the listener remembers the last 4,096 ephemeral keys it accepted and
//! refuses a first message that repeats one before computing anything for it; an older
//! replay cannot produce the third message), a record that fails after it as
//! [`CloseReason::BadRecord`]; both are counted (`auth_failures`, `frames_refused` in
//! the statistics). Links are always encrypted (Noise's transport is an AEAD; integrity
//! alone would need a second construction outside Noise, save only the keystream, and
//! leave slot keys in clear), so "integrity only" is this same setting.
//! An insecure fabric and a secure one refuse each other. A fabric with neither a secret
//! nor `danger_insecure` does not start.
//!
//! **Identities.** A node id is bound to the static key that proved it
//! ([`TcpConfig::roster`]): with a roster, strictly to the roster's key; without one,
//! to the key of the first authenticated HELLO, HELLO reply, membership query that adds
//! its node, or membership reply naming it, for the life of the fabric (across that
//! peer's sessions and restarts, and after it is forgotten from the peer table). A
//! dialer checks the acceptor's key against the node it dialed before it sends its
//! HELLO; an acceptor checks the dialer's against the node its HELLO or query names
//! before anything else. A connection whose key does not match is closed as
//! [`CloseReason::IdentityMismatch`]: so a member holding the secret cannot speak for
//! another node, declare it stale, replace its session or move its address.
//!
//! What a peer can make the fabric keep is bounded: at most
//! [`TcpConfig::max_handshakes`] connections in their handshake (each holding one
//! handshake message until it completes, closed after the peer timeout), at most
//! [`TcpConfig::max_peers`] peers (a new node past it is refused as
//! [`CloseReason::TooManyPeers`]), and a peer learned only because it dialed in is
//! forgotten a peer timeout after it went down. Violations are logged at the 1st, 2nd,
//! 4th, ... close of each reason, and every one is counted.
//!
//! # Connections and the handshake
//!
//! - **Who dials.** Of two nodes, the one with the lower id dials the higher one, each
//!   rail separately; the higher one only accepts. There is never a duplicate connection
//!   to resolve. A peer is configured statically ([`TcpConfig::peers`],
//!   [`TcpFabric::add_peer`]), learned from a membership query ("Joining" below), or,
//!   with [`TcpConfig::learn_peers`], learned when it dials us.
//! - **Sessions.** The dialer opens a *session*: `rails` connections at once
//!   (non-blocking connects, `TCP_NODELAY` on every one). On each it sends a HELLO
//!   ([`frame::Hello`]: an `Op::Hello` header with `src`/`dst`, `word` = incarnation,
//!   `key` = session number, `slot` = rail index, `offset` = rail count). The acceptor
//!   checks it and answers on the same connection with its own HELLO echoing session and
//!   rail (on a secure fabric both HELLOs travel in records, after the Noise
//!   handshake). The rail count is the dialer's. A side announces [`PeerEvent::Up`]
//!   (with the peer's incarnation) once *all* rails of the session completed their
//!   handshake; until then nothing but HELLOs is read from them.
//! - **Rejections.** A connection whose static key is not the one of the node its HELLO
//!   names ([`CloseReason::IdentityMismatch`], "Identities" above), whose HELLO names an
//!   unknown node (when not learning),
//!   a node that should not dial us, another destination, an older incarnation or an
//!   older session, a taken rail or a malformed rail count is closed with a
//!   `tracing::warn!` naming the reason, and counted ([`CloseReason`]).
//! - **Failure is per session.** If any rail of an up session fails (end of stream, reset,
//!   a frame error, heartbeat timeout), every rail of that session is closed and
//!   [`PeerEvent::Down`] is announced: packets striped over the lost rail may be lost, and
//!   the Down is how the loss is announced; each packet sent that the peer had not
//!   acknowledged is named to the sink ([`PacketSink::on_unconfirmed`], "Delivery"
//!   below). The other end sees its rails close and announces Down too. The dialer then starts a new session every
//!   [`TcpConfig::reconnect_interval`] until one comes up.
//! - **Restarts.** A HELLO with a newer incarnation (or a newer session of the same
//!   incarnation) replaces the current session: Down, then Up with the new incarnation.
//! - **Joining.** A node that knows only one member's address learns the rest with
//!   [`TcpFabric::join`] (`hamlyn node --join ADDR`). On a fresh connection to a member's
//!   listener it sends a *membership query* instead of a rail HELLO
//!   ([`frame::JoinQuery`]: an `Op::Hello` with a rail count of 0, which rail HELLOs
//!   never have, carrying its node id and the port it listens on). The member answers
//!   with one frame listing itself first and every peer whose address it knows
//!   ([`frame::join_reply`]; for itself, when listening on a wildcard address, the
//!   address the joiner dialed), closes the connection, and adds the joiner as a peer at
//!   the connection's source address with the announced port (if it learns peers or
//!   already knows the joiner, unless that peer is up at another address: a query never
//!   moves a live peer, and is closed as [`CloseReason::BadJoin`]; port 0 asks without
//!   being added). The joiner asks every
//!   listed member in turn, so each one learns it, adds them all as peers, and sessions
//!   come up by the rule above: whichever of two has the lower id dials. Queries touch
//!   no session. A malformed query is closed as [`CloseReason::BadJoin`]; an answered one
//!   is counted as [`CloseReason::JoinAnswered`]; the joiner's side ([`join`]) is
//!   blocking with a timeout per step and refuses replies over
//!   [`frame::MAX_JOIN_MEMBERS`] members. Peers learned only because they dialed us have
//!   no known address and are not listed.
//! - **Heartbeats.** On an up session, a rail that sent nothing for
//!   [`TcpConfig::heartbeat_interval`] sends an `Op::Heartbeat` header; heartbeats are
//!   consumed by the fabric, never shown to the sink, and carry the rail's
//!   acknowledgement (below). A rail that received nothing for
//!   [`TcpConfig::peer_timeout`] takes its session down. A peer that never came up within
//!   the peer timeout of the fabric's first poll is announced Down.
//!
//! # Sending and receiving
//!
//! [`Fabric::send`] picks the next rail round robin (preferring rails with nothing
//! queued) and writes header, metadata and payload slices with one vectored write
//! straight from the caller's memory. Only what the kernel does not take is copied, into
//! that rail's queue; when a peer's queues hold [`TcpConfig::max_queued_bytes`], sends
//! to it fail with [`FabricError::Full`] (one packet is always accepted when nothing is
//! queued, so packets larger than the bound can be sent). `send` never blocks and never
//! drops. A send to a peer that has not come up yet is `Full` (try later); to a peer
//! announced Down, `PeerDown`.
//!
//! **Small packets in a stream are held.** An engine sends one packet per terminus per
//! turn and polls between turns; a `writev` per 8-byte message would cost a system call
//! on this side and a wake-up and a read on the other, each several times what the
//! message itself costs. So while the caller streams (it sent packets between its last
//! two polls, or already since the last one), a packet of at most 8 KiB is copied into
//! the queue of the rail already holding some (small packets do not alternate rails)
//! and *held*; the held bytes go out in one write when the stream pauses (a poll with
//! no send since the one before), when they reach 64 KiB, when the first of them has
//! waited [`TcpConfig::hold`], with the next packet written at once (a large one, in the
//! same gather write), or before [`TcpFabric::wait`] sleeps. A lone packet (a
//! ping-pong, a request) is never held. While streaming, the poller is asked at most
//! once per quarter of the hold time rather than on every poll (and at least every
//! [`HANDSHAKE_LOOK`] while a connection is in its handshake).
//!
//! [`Fabric::poll`] reads each ready rail into a 64 KiB staging buffer: a frame's header
//! and metadata are validated ([`frame::FrameDecoder`]: `Header::parse`, payload at most
//! [`TcpConfig::max_payload`]) and shown to the sink; payload bytes that came in the same
//! read are copied to [`PacketSink::payload_buf`], and the rest of a large payload is
//! read straight into it (across several polls if needed); a discarded one is read into
//! a scratch buffer and dropped. A read shorter than asked means the socket is drained:
//! the rail waits for the poller's next event instead of reading again to hear
//! `WouldBlock`. Any frame error closes that connection (and its session) with a logged
//! reason; other connections are untouched.
//!
//! # Delivery: what the peer acknowledged
//!
//! A packet `send` accepted is on its way, not yet arrived, and a lost session can lose
//! it (bytes in the kernel's buffers, or on a cut cable). So that no loss goes unnamed,
//! each rail's receiver counts the packets it delivered whole to its sink (payload placed
//! or skipped) and sends the count back on the same connection in a heartbeat's `offset`
//! — at every timer tick when something new arrived, and after every 512 packets; the
//! sender keeps each accepted packet's header until a count covers it (a TCP connection
//! is ordered, so the count is all it takes). When a rail closes, for any reason, the
//! headers it still keeps are handed to the sink one by one
//! ([`PacketSink::on_unconfirmed`]), after the Down: the engine fails their requests
//! with `PeerDown`. So a packet either arrived, or its sender is told it may not have
//! (it may have: the acknowledgement itself can be what was lost). Nothing is resent:
//! a new session starts empty. A rail keeps at most 4,096 unacknowledged headers; past
//! that `send` is `Full` until acknowledgements come. An acknowledgement of more than
//! was sent closes the connection ([`CloseReason::BadAck`]). The sans-IO state machine
//! is `ack.rs`.
//!
//! # Driving it from an engine
//!
//! `now` must come from a monotonic clock ([`Clock`] gives one): heartbeats, timeouts
//! and reconnects advance only with it, which also lets tests jump time.
//!
//! Call [`Fabric::poll`] from the engine loop with the current time; it never blocks
//! (the internal `mio::Poll` is asked with a zero timeout). To sleep when idle, either
//! call [`TcpFabric::wait`] (blocks until a socket is ready, the next timer is due or
//! the timeout passes) or
//! add the fabric's file descriptor ([`AsFd`]/[`AsRawFd`], the poller's epoll fd, which
//! becomes readable when any socket of the fabric has news) to the engine's own epoll
//! set. Never sleep past [`TcpFabric::next_timer`], when heartbeats, timeouts and
//! reconnects are due. With [`TcpConfig::busy_poll`], `poll` reads every up rail
//! directly instead of asking the poller first (lower latency under constant traffic,
//! one syscall per rail when idle), and consults the poller only every
//! [`BUSY_POLL_EVENTS_EVERY`] polls for new connections (and on every poll while a
//! handshake is in progress, unless the caller streams). While the caller streams, it
//! reads them at most once per quarter of the hold time, as the poller is asked without
//! busy polling ([`RailStats::empty_reads`] counts the reads that found nothing).

mod ack;
mod conn;
pub mod frame;
pub mod node_key;
mod pins;
mod record;
pub mod roster;
pub mod secret;
pub mod secure;
pub mod stats;
mod tx;

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use hamlyn_core::time::duration_nanos as nanos;
use hamlyn_core::Instant;
use hamlyn_wire::stats::{FabricStats, LinkState, LinkStats};
use hamlyn_wire::{Header, NodeId, HEADER_LEN};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};

use crate::fabric::{check_send, Fabric, FabricError, PacketSink, PeerEvent, SharedBytes};
use ack::{Received, Unacked};
use conn::{Conn, Phase, Role, Rx, RxCounts, RxCtx, RxStop};
use frame::{heartbeat, join_reply, Hello, JoinQuery, MAX_JOIN_MEMBERS, MAX_RAILS};
use pins::Identities;
use secure::{Link, ReplayGuard};
use tx::{Pieces, Sent, TxQueue, HOLD_BYTES, HOLD_PACKET};

pub use node_key::{NodeKey, PublicKey};
pub use roster::{Roster, RosterError};
pub use secret::{ClusterSecret, SecretError};
pub use stats::{CloseCounts, CloseReason, PeerStats, RailStats, TcpStats};

/// In busy-poll mode, the poller is consulted once every this many polls.
pub const BUSY_POLL_EVENTS_EVERY: u64 = 16;

/// While the caller streams and a connection is in its handshake, the longest time
/// between two looks for input (the hold's quarter when that is shorter).
pub const HANDSHAKE_LOOK: Duration = Duration::from_micros(50);

const LISTENER: Token = Token(0);

/// First handshake messages whose ephemeral keys a listener remembers, to refuse their
/// replays before any Diffie-Hellman (32 bytes each, twice).
const REPLAY_MEMORY: usize = 4096;

/// Configuration of one node's TCP fabric.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// This node.
    pub node: NodeId,
    /// This node's incarnation: must grow every time the node restarts (peers refuse
    /// HELLOs with an older incarnation than they have seen).
    pub incarnation: u32,
    /// Address to listen on (port 0 picks a free port: see [`TcpFabric::local_addr`]).
    pub listen: SocketAddr,
    /// The peers known from the start, with their listening addresses.
    pub peers: Vec<(NodeId, SocketAddr)>,
    /// Connections per peer session when this node dials (1..=16).
    pub rails: usize,
    /// Read up rails directly on every poll instead of asking the poller first (while
    /// the caller streams, once per quarter of [`TcpConfig::hold`]).
    pub busy_poll: bool,
    /// Idle time after which a rail sends a heartbeat.
    pub heartbeat_interval: Duration,
    /// Silence after which a rail's session is taken down; also the handshake deadline.
    pub peer_timeout: Duration,
    /// Delay between a failed or lost session and the next dial.
    pub reconnect_interval: Duration,
    /// Bytes a peer's rail queues may hold before sends fail with
    /// [`FabricError::Full`].
    pub max_queued_bytes: usize,
    /// Largest payload accepted from the wire; a longer one closes the connection.
    pub max_payload: u32,
    /// Longest time a small packet is held back to share one write with the packets
    /// that follow it while the caller keeps sending ([`Duration::ZERO`]: every packet
    /// is written when it is sent, and the poller is asked on every poll).
    pub hold: Duration,
    /// Accept HELLOs from nodes not in `peers` (lower ids only) and learn them.
    pub learn_peers: bool,
    /// Most accepted connections waiting for their HELLO at once; more are closed.
    pub max_handshakes: usize,
    /// The cluster secret: every link proves both ends hold it and is integrity-protected
    /// and encrypted under keys derived from it ([`secure`]). A fabric with neither a
    /// secret nor [`TcpConfig::danger_insecure`] refuses to start.
    pub secret: Option<ClusterSecret>,
    /// Links in clear and unauthenticated: anyone who reaches the listener can claim to
    /// be any node, read and forge its traffic. For a physically secure network only;
    /// such a node and a secure one refuse each other.
    pub danger_insecure: bool,
    /// The cipher of the links this node dials ([`secure::Cipher`]; an accepted link
    /// is in its dialer's, either one): AES-256-GCM by default, ChaCha20-Poly1305 for
    /// CPUs without AES instructions.
    pub cipher: secure::Cipher,
    /// Most peers the table holds; a HELLO or membership query from an unknown node
    /// past it is refused ([`CloseReason::TooManyPeers`]). Also the most node keys
    /// pinned without a roster.
    pub max_peers: usize,
    /// An express lane (with 2 rails or more): rail 0 of every session carries only
    /// express packets ([`Fabric::send_express`]: single-packet messages of termini
    /// above the sending node's lowest priority in use), every other packet the other
    /// rails, and each poll reads rail 0 of every peer first. A high-priority message
    /// then never queues behind a low-priority flood, in this node's queues, in the
    /// sockets or in the receiver's reads. Costs one rail of bandwidth for bulk traffic.
    pub express_lane: bool,
    /// This node's static key, which every link proves ([`secure`]) and peers bind to
    /// its node id. `None`: a fresh key made by [`TcpFabric::new`] for this fabric's
    /// life (peers that pinned a node's key refuse it under another one, so a node that
    /// restarts should keep its key: `hamlyn node` keeps it in a file).
    pub key: Option<NodeKey>,
    /// Which key each node id must prove. `Some`: strictly these (an unlisted node, or
    /// another key, is refused as [`CloseReason::IdentityMismatch`]), and this node's
    /// own id must be listed with its key. `None`: each node's key is pinned on the
    /// first authenticated HELLO or membership query naming it, for the life of the
    /// fabric (at most [`TcpConfig::max_peers`] pins).
    pub roster: Option<Roster>,
}

impl TcpConfig {
    /// A configuration with defaults: incarnation 1, no peers, 2 rails, no busy poll,
    /// heartbeat every 500 ms, peer timeout 3 s, reconnect every 250 ms, 4 MiB queued
    /// per peer, 16 MiB payloads, small packets held up to 20 µs, learning peers, 64
    /// pending handshakes, links dialed in AES-256-GCM, at most 4,096 peers, no roster
    /// (keys pinned on first contact), a fresh node key, and no secret yet: set
    /// [`TcpConfig::secret`] (or, knowingly, [`TcpConfig::danger_insecure`]).
    pub fn new(node: NodeId, listen: SocketAddr) -> TcpConfig {
        TcpConfig {
            node,
            incarnation: 1,
            listen,
            peers: Vec::new(),
            rails: 2,
            busy_poll: false,
            heartbeat_interval: Duration::from_millis(500),
            peer_timeout: Duration::from_secs(3),
            reconnect_interval: Duration::from_millis(250),
            max_queued_bytes: 4 << 20,
            max_payload: 16 << 20,
            hold: Duration::from_micros(20),
            learn_peers: true,
            max_handshakes: 64,
            secret: None,
            danger_insecure: false,
            cipher: secure::Cipher::Aes256Gcm,
            max_peers: 4096,
            express_lane: false,
            key: None,
            roster: None,
        }
    }
}

/// Why a TCP fabric could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TcpError {
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The system's reason.
        source: io::Error,
    },
    /// The poller could not be created or a socket not registered with it.
    #[error("poller: {0}")]
    Poll(#[source] io::Error),
    /// The configuration is not usable.
    #[error("bad configuration: {0}")]
    Config(&'static str),
    /// A membership query ([`join`]) failed: no connection, a timeout, a bad reply.
    #[error("join via {addr}: {reason}")]
    Join {
        /// The member queried.
        addr: SocketAddr,
        /// What went wrong.
        reason: String,
    },
}

/// Whether a peer can be reached, as the fabric last announced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PeerState {
    /// Not up yet and not announced down (the first session is being set up).
    Connecting,
    /// Announced up with this incarnation.
    Up {
        /// The peer's incarnation.
        incarnation: u32,
    },
    /// Announced down.
    Down,
}

/// One peer session: the rails of one handshake.
#[derive(Debug)]
struct Session {
    /// The dialer's session number.
    id: u64,
    /// The peer's incarnation (an acceptor knows it from the first HELLO, a dialer from
    /// the first reply).
    incarnation: Option<u32>,
    /// Connection index per rail.
    rails: Vec<Option<usize>>,
    /// Rails whose handshake is complete.
    open: Vec<bool>,
    started: Instant,
    up: bool,
}

impl Session {
    fn conns(&self) -> impl Iterator<Item = usize> + '_ {
        self.rails.iter().flatten().copied()
    }
}

/// The lists a timer tick fills (peers, a session's rails, the rails due a heartbeat,
/// the acknowledgements due), kept between ticks ([`TcpFabric::timers`]).
#[derive(Debug, Default)]
struct TickScratch {
    nodes: Vec<NodeId>,
    rails: Vec<usize>,
    beats: Vec<usize>,
    acks: Vec<(usize, u64)>,
}

#[derive(Debug)]
struct Peer {
    addr: Option<SocketAddr>,
    /// We dial it (our id is lower).
    dial: bool,
    state: PeerState,
    known_incarnation: Option<u32>,
    /// Highest (incarnation, session) accepted from it (acceptor side).
    last_session: Option<(u32, u64)>,
    session: Option<Session>,
    next_dial: Instant,
    /// When the fabric started waiting for it (first timer run, or when it was learned).
    since: Option<Instant>,
    next_session: u64,
    /// Next rail for round robin.
    rr: usize,
    /// When it was last announced Down (a learned peer is forgotten a peer timeout
    /// later).
    down_since: Option<Instant>,
    stats: PeerStats,
}

impl Peer {
    fn new(addr: Option<SocketAddr>, dial: bool) -> Peer {
        Peer {
            addr,
            dial,
            state: PeerState::Connecting,
            known_incarnation: None,
            last_session: None,
            session: None,
            next_dial: Instant(0),
            since: None,
            next_session: 0,
            rr: 0,
            down_since: None,
            stats: PeerStats::default(),
        }
    }
}

/// Internal durations in nanoseconds.
#[derive(Clone, Copy, Debug)]
struct Timing {
    heartbeat: u64,
    timeout: u64,
    reconnect: u64,
    tick: u64,
    /// Longest hold of a small packet (0: never held).
    hold: u64,
}

/// One node's TCP fabric; see the module documentation.
pub struct TcpFabric {
    config: TcpConfig,
    timing: Timing,
    poll: Poll,
    events: Events,
    listener: TcpListener,
    local_addr: SocketAddr,
    listener_ready: bool,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    peers: BTreeMap<NodeId, Peer>,
    out: VecDeque<PeerEvent>,
    /// Packets a lost session left unacknowledged, to report to the sink
    /// ([`PacketSink::on_unconfirmed`]) at the end of the poll.
    unconfirmed: VecDeque<(NodeId, Header)>,
    next_tick: Instant,
    /// The timer tick's lists, kept between ticks so that a tick allocates nothing.
    tick_scratch: TickScratch,
    polls: u64,
    rx_cursor: usize,
    /// Packets sent since the last poll.
    sends_since_poll: u64,
    /// The caller sent packets between its last two polls: it is streaming, so small
    /// packets are held to share writes.
    streaming: bool,
    /// While streaming, the poller is not asked again before this time.
    next_ask: Instant,
    /// While streaming with a handshake in progress, the poller is asked again at this
    /// time at the latest ([`HANDSHAKE_LOOK`]), however long the hold.
    next_handshake_look: Instant,
    shut: bool,
    stats: TcpStats,
    /// Ephemeral keys of the last first handshake messages the listener accepted.
    replay: ReplayGuard,
    /// Which static key each node id must prove: the roster, or the pins.
    identities: Identities,
}

impl std::fmt::Debug for TcpFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpFabric")
            .field("node", &self.config.node)
            .field("local_addr", &self.local_addr)
            .field("peers", &self.peers.len())
            .field("conns", &self.conns.iter().flatten().count())
            .finish_non_exhaustive()
    }
}

impl TcpFabric {
    /// Binds the listener and sets up the poller. No connection is made until the first
    /// [`Fabric::poll`].
    pub fn new(config: TcpConfig) -> Result<TcpFabric, TcpError> {
        if config.rails == 0 || config.rails > MAX_RAILS {
            return Err(TcpError::Config("rails must be between 1 and 16"));
        }
        if config.heartbeat_interval.is_zero()
            || config.peer_timeout.is_zero()
            || config.reconnect_interval.is_zero()
        {
            return Err(TcpError::Config("intervals and timeouts must be positive"));
        }
        match (&config.secret, config.danger_insecure) {
            (None, false) => return Err(TcpError::Config(
                "no cluster secret: links must be authenticated (or, knowingly, danger_insecure)",
            )),
            (Some(_), true) => {
                return Err(TcpError::Config(
                    "a cluster secret and danger_insecure: choose one",
                ))
            }
            _ => {}
        }
        if config.max_peers == 0 {
            return Err(TcpError::Config("max_peers must be positive"));
        }
        let mut config = config;
        if config.danger_insecure && config.roster.is_some() {
            return Err(TcpError::Config(
                "a roster needs authenticated links, not danger_insecure",
            ));
        }
        if config.key.is_none() && !config.danger_insecure {
            config.key = Some(
                NodeKey::generate()
                    .map_err(|_| TcpError::Config("no random bytes for a node key"))?,
            );
        }
        if let (Some(roster), Some(key)) = (&config.roster, &config.key) {
            if roster.get(config.node) != Some(key.public()) {
                return Err(TcpError::Config(
                    "the roster does not list this node with this node's key",
                ));
            }
        }
        let poll = Poll::new().map_err(TcpError::Poll)?;
        let mut listener = TcpListener::bind(config.listen).map_err(|source| TcpError::Bind {
            addr: config.listen,
            source,
        })?;
        let local_addr = listener.local_addr().map_err(|source| TcpError::Bind {
            addr: config.listen,
            source,
        })?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(TcpError::Poll)?;
        let heartbeat = nanos(config.heartbeat_interval);
        let reconnect = nanos(config.reconnect_interval);
        let timing = Timing {
            heartbeat,
            timeout: nanos(config.peer_timeout),
            reconnect,
            tick: (heartbeat.min(reconnect) / 4).max(1_000_000),
            hold: nanos(config.hold),
        };
        let mut fabric = TcpFabric {
            timing,
            poll,
            events: Events::with_capacity(256),
            listener,
            local_addr,
            listener_ready: true,
            conns: Vec::new(),
            free: Vec::new(),
            peers: BTreeMap::new(),
            out: VecDeque::new(),
            unconfirmed: VecDeque::new(),
            next_tick: Instant(0),
            tick_scratch: TickScratch::default(),
            polls: 0,
            rx_cursor: 0,
            sends_since_poll: 0,
            streaming: false,
            next_ask: Instant(0),
            next_handshake_look: Instant(0),
            shut: false,
            stats: TcpStats::default(),
            replay: ReplayGuard::new(REPLAY_MEMORY),
            identities: Identities::new(config.roster.clone(), config.max_peers),
            config: config.clone(),
        };
        for (node, addr) in config.peers {
            fabric.add_peer(node, addr)?;
        }
        Ok(fabric)
    }

    /// Adds a peer (or changes a known peer's address, used from its next dial). Only
    /// peers with a higher id than this node are dialed; lower ones dial us.
    pub fn add_peer(&mut self, node: NodeId, addr: SocketAddr) -> Result<(), TcpError> {
        if node == self.config.node {
            return Err(TcpError::Config("a node cannot be its own peer"));
        }
        let dial = self.config.node < node;
        self.peers
            .entry(node)
            .or_insert_with(|| Peer::new(None, dial))
            .addr = Some(addr);
        Ok(())
    }

    /// Learns the cluster from its members: sends a membership query ([`join`]) to each
    /// of `seeds`, then to every member the replies list that was not asked yet (so every
    /// member learns this node), and adds every member as a peer. Sessions then come up
    /// by the usual rule (the lower id dials). Blocks, up to `timeout` per member asked
    /// (at most [`frame::MAX_JOIN_MEMBERS`] are asked); call it before the first
    /// [`Fabric::poll`], while members that dial back wait in the listen backlog.
    ///
    /// Fails only if no seed answered; a listed member that does not answer is still
    /// added (logged). Returns the members added.
    pub fn join(
        &mut self,
        seeds: &[SocketAddr],
        timeout: Duration,
    ) -> Result<Vec<(NodeId, SocketAddr)>, TcpError> {
        let me = self.config.node;
        let port = self.local_addr.port();
        let mut asked = std::collections::BTreeSet::new();
        let mut found: BTreeMap<NodeId, SocketAddr> = BTreeMap::new();
        let mut todo: VecDeque<(Option<NodeId>, SocketAddr)> =
            seeds.iter().map(|&a| (None, a)).collect();
        let mut seed_error = None;
        let mut seed_answered = false;
        while let Some((node, addr)) = todo.pop_front() {
            if node.is_some_and(|n| asked.contains(&n)) {
                continue;
            }
            if asked.len() >= MAX_JOIN_MEMBERS {
                tracing::warn!(node = %me, "join: too many members, not asking the rest");
                break;
            }
            let answer = join_member(addr, me, port, timeout, self.auth()).and_then(|(m, key)| {
                // The member that answered is a first contact: its key is pinned (or
                // checked against the roster) under the id it gave itself.
                match (key, m.first()) {
                    (Some(key), Some(&(n, _))) => match self.identities.pin(n, key) {
                        Ok(()) => Ok(m),
                        Err(r) => {
                            self.stats.closes.add(CloseReason::IdentityMismatch);
                            Err(TcpError::Join {
                                addr,
                                reason: r.describe(n, key),
                            })
                        }
                    },
                    _ => Ok(m),
                }
            });
            match answer {
                Ok(members) => {
                    seed_answered |= node.is_none();
                    if let Some(&(n, _)) = members.first() {
                        asked.insert(n);
                    }
                    for (n, a) in members {
                        if n != me && found.len() < MAX_JOIN_MEMBERS && !found.contains_key(&n) {
                            found.insert(n, a);
                            todo.push_back((Some(n), a));
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(node = %me, %addr, error = %e, "join: member did not answer");
                    if let Some(n) = node {
                        asked.insert(n);
                    } else {
                        seed_error = Some(e);
                    }
                }
            }
        }
        if !seed_answered {
            return Err(seed_error.unwrap_or(TcpError::Config("--join needs an address")));
        }
        for (&n, &a) in &found {
            self.add_peer(n, a)?;
        }
        tracing::info!(node = %me, members = found.len(), "join: learned the cluster");
        Ok(found.into_iter().collect())
    }

    /// The address the listener is bound to (with the real port if port 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The configuration.
    pub fn config(&self) -> &TcpConfig {
        &self.config
    }

    /// Fabric-wide counters.
    pub fn stats(&self) -> &TcpStats {
        &self.stats
    }

    /// Node keys pinned on first contact (0 with a roster; see [`TcpConfig::roster`]).
    pub fn pinned_keys(&self) -> usize {
        self.identities.pinned()
    }

    /// A peer's counters.
    pub fn peer_stats(&self, node: NodeId) -> Option<&PeerStats> {
        self.peers.get(&node).map(|p| &p.stats)
    }

    /// A peer's state as last announced (`None` for a node the fabric does not know).
    pub fn peer_state(&self, node: NodeId) -> Option<PeerState> {
        self.peers.get(&node).map(|p| p.state)
    }

    /// Every known peer and its state.
    pub fn peers(&self) -> impl Iterator<Item = (NodeId, PeerState)> + '_ {
        self.peers.iter().map(|(&n, p)| (n, p.state))
    }

    /// When the fabric next needs a poll for its timers (heartbeats, timeouts,
    /// reconnects, the end of a hold), whatever the sockets do. An engine that sleeps
    /// must wake by then.
    pub fn next_timer(&self) -> Instant {
        // Packets held to share a write must not wait past their hold time either.
        let held = self.conns.iter().flatten().filter_map(Conn::held_since);
        held.map(|t| t.plus_nanos(self.timing.hold))
            .fold(self.next_tick, std::cmp::min)
    }

    /// Writes held packets, then blocks until a socket of the fabric is ready, `max`
    /// passes or the fabric's next timer is due ([`TcpFabric::next_timer`], measured
    /// from `now`), without delivering anything (the next [`Fabric::poll`] does).
    /// Returns at once if the last poll left work behind (its budget ran out) or peer
    /// events wait. Interrupted waits return early; other poller errors are returned.
    pub fn wait(&mut self, now: Instant, max: Duration) -> io::Result<()> {
        // Going to sleep ends a stream: nothing stays held.
        self.flush_all(now, false);
        let until_timer = Duration::from_nanos(self.next_tick.nanos_since(now));
        let timeout = if self.has_pending_work() {
            Duration::ZERO
        } else {
            max.min(until_timer)
        };
        match self.poll.poll(&mut self.events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(e),
        }
        self.note_events();
        Ok(())
    }

    /// Whether a poll would find something without new readiness: undelivered events,
    /// a listener or connection with unread bytes in an up session or a handshake.
    fn has_pending_work(&self) -> bool {
        !self.out.is_empty()
            || self.listener_ready
            || self.conns.iter().flatten().any(|c| {
                c.rx_work()
                    && match c.phase {
                        Phase::Connecting | Phase::Answered => false,
                        Phase::AwaitHello | Phase::AwaitReply => true,
                        Phase::Open => c.peer.is_some_and(|p| {
                            self.peers
                                .get(&p)
                                .and_then(|p| p.session.as_ref())
                                .is_some_and(|s| s.up)
                        }),
                    }
            })
    }

    /// Closes every connection; later sends and polls fail with
    /// [`FabricError::LocalDown`]. Peers see the connections close. The listener stays
    /// bound (but unserved) until the fabric is dropped; dropping the fabric closes
    /// everything at once.
    pub fn shutdown(&mut self) {
        for i in 0..self.conns.len() {
            self.close_conn(i, CloseReason::Shutdown);
        }
        for p in self.peers.values_mut() {
            p.session = None;
        }
        self.shut = true;
    }

    /// The secret and the key links use (`None`: `danger_insecure`).
    fn auth(&self) -> Option<(&ClusterSecret, &NodeKey)> {
        match (&self.config.secret, &self.config.key) {
            (Some(s), Some(k)) if !self.config.danger_insecure => Some((s, k)),
            _ => None,
        }
    }

    fn conn(&self, i: usize) -> Option<&Conn> {
        self.conns.get(i).and_then(Option::as_ref)
    }

    fn conn_mut(&mut self, i: usize) -> Option<&mut Conn> {
        self.conns.get_mut(i).and_then(Option::as_mut)
    }

    fn insert_conn(&mut self, mut conn: Conn) -> Result<usize, io::Error> {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        if let Err(e) = self.poll.registry().register(
            &mut conn.stream,
            Token(i + 1),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            self.free.push(i);
            return Err(e);
        }
        self.conns[i] = Some(conn);
        Ok(i)
    }

    /// Closes one connection (not its session), counting the reason.
    fn close_conn(&mut self, i: usize, reason: CloseReason) {
        let Some(slot) = self.conns.get_mut(i) else {
            return;
        };
        let Some(mut conn) = slot.take() else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        conn.tx.clear();
        // What the rail carried that the peer did not acknowledge may be lost: each such
        // packet is reported, so its request fails rather than stay "sent".
        if let Some(node) = conn.peer {
            let mut n = 0;
            for h in conn.unacked.drain() {
                self.unconfirmed.push_back((node, h));
                n += 1;
            }
            if let Some(p) = self.peers.get_mut(&node) {
                p.stats.packets_unconfirmed += n;
            }
        }
        self.free.push(i);
        self.stats.closes.add(reason);
    }

    /// Closes a connection after `reason`, logging it; if it belongs to a session, the
    /// whole session goes.
    fn fail_conn(&mut self, i: usize, reason: CloseReason, detail: &str, now: Instant) {
        let Some(conn) = self.conn(i) else {
            return;
        };
        let (peer, addr, rail) = (conn.peer, conn.addr, conn.rail);
        // Violations are logged at the 1st, 2nd, 4th, 8th ... of each reason, so a flood
        // of bad connections costs a log line per doubling (every one is counted).
        let nth = self.stats.closes.get(reason) + 1;
        if reason.is_violation() && nth.is_power_of_two() {
            tracing::warn!(
                node = %self.config.node, peer = ?peer, %addr, rail, %reason, detail, nth,
                "tcp fabric: closing connection (logged at powers of two of each reason)"
            );
        } else {
            tracing::debug!(
                node = %self.config.node, peer = ?peer, %addr, rail, %reason, detail,
                "tcp fabric: closing connection"
            );
        }
        let in_session = peer.is_some_and(|p| {
            self.peers
                .get(&p)
                .and_then(|p| p.session.as_ref())
                .is_some_and(|s| s.rails.contains(&Some(i)))
        });
        match peer {
            Some(p) if in_session => {
                self.close_conn(i, reason);
                self.teardown(p, CloseReason::SessionEnded, now);
            }
            _ => self.close_conn(i, reason),
        }
    }

    /// Ends a peer's session: closes its rails (counted as `reason`), announces Down if
    /// it was up, and schedules the next dial.
    fn teardown(&mut self, node: NodeId, reason: CloseReason, now: Instant) {
        let Some(peer) = self.peers.get_mut(&node) else {
            return;
        };
        let Some(session) = peer.session.take() else {
            return;
        };
        if session.up {
            peer.state = PeerState::Down;
            peer.down_since = Some(now);
            peer.stats.downs += 1;
            self.out.push_back(PeerEvent::Down { node });
            tracing::info!(node = %self.config.node, peer = %node, %reason, "tcp fabric: peer down");
        } else if peer.dial {
            peer.stats.dial_failures += 1;
        }
        if peer.dial {
            peer.next_dial = now.plus_nanos(self.timing.reconnect);
        }
        for i in session.conns() {
            self.close_conn(i, reason);
        }
    }

    // ---- events ------------------------------------------------------------------

    /// Turns the poller's events into readiness flags.
    fn note_events(&mut self) {
        for ev in self.events.iter() {
            if ev.token() == LISTENER {
                self.listener_ready = true;
                continue;
            }
            let i = ev.token().0 - 1;
            if let Some(Some(conn)) = self.conns.get_mut(i) {
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    conn.rx.ready = true;
                }
                if ev.is_read_closed() || ev.is_error() {
                    conn.rx.closing = true;
                }
                if ev.is_writable() || ev.is_write_closed() || ev.is_error() {
                    conn.writable = true;
                }
            }
        }
    }

    fn accept_all(&mut self, now: Instant) {
        while self.listener_ready {
            match self.listener.accept() {
                Ok((stream, addr)) => {
                    self.stats.accepted += 1;
                    let waiting = self
                        .conns
                        .iter()
                        .flatten()
                        .filter(|c| matches!(c.phase, Phase::AwaitHello | Phase::Answered))
                        .count();
                    if waiting >= self.config.max_handshakes {
                        let nth = self.stats.closes.get(CloseReason::TooManyHandshakes) + 1;
                        if nth.is_power_of_two() {
                            tracing::warn!(node = %self.config.node, %addr, nth, "tcp fabric: too many handshakes, refusing connection (logged at powers of two)");
                        }
                        self.stats.closes.add(CloseReason::TooManyHandshakes);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let mut conn = self.new_conn(stream, addr, Role::Acceptor, None, 0, now);
                    if let Some((secret, key)) = self.auth() {
                        match Link::acceptor(secret, key) {
                            Ok(link) => conn.link = Some(link),
                            Err(e) => {
                                tracing::warn!(node = %self.config.node, %addr, error = %e, "tcp fabric: cannot set up a secure link");
                                self.stats.closes.add(CloseReason::Io);
                                continue;
                            }
                        }
                    }
                    if let Err(e) = self.insert_conn(conn) {
                        tracing::warn!(node = %self.config.node, %addr, error = %e, "tcp fabric: cannot register connection");
                        self.stats.closes.add(CloseReason::Io);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.listener_ready = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors and the like: try again on the next poll.
                    tracing::warn!(node = %self.config.node, error = %e, "tcp fabric: accept failed");
                    break;
                }
            }
        }
    }

    fn new_conn(
        &self,
        stream: TcpStream,
        addr: SocketAddr,
        role: Role,
        peer: Option<NodeId>,
        rail: usize,
        now: Instant,
    ) -> Conn {
        Conn {
            stream,
            role,
            phase: match role {
                Role::Dialer => Phase::Connecting,
                Role::Acceptor => Phase::AwaitHello,
            },
            peer,
            rail,
            addr,
            rx: Rx::new(self.config.max_payload),
            tx: TxQueue::default(),
            link: None,
            writable: false,
            opened: now,
            last_rx: now,
            last_tx: now,
            unacked: Unacked::default(),
            received: Received::default(),
        }
    }

    // ---- dialing and handshakes ------------------------------------------------------

    fn start_session(&mut self, node: NodeId, now: Instant) {
        let rails = self.config.rails;
        let Some(peer) = self.peers.get_mut(&node) else {
            return;
        };
        let Some(addr) = peer.addr else {
            return;
        };
        peer.next_session += 1;
        peer.stats.dials += 1;
        peer.session = Some(Session {
            id: peer.next_session,
            incarnation: None,
            rails: vec![None; rails],
            open: vec![false; rails],
            started: now,
            up: false,
        });
        for rail in 0..rails {
            self.stats.dialed += 1;
            let conn = match TcpStream::connect(addr) {
                Ok(s) => self.new_conn(s, addr, Role::Dialer, Some(node), rail, now),
                Err(e) => {
                    tracing::debug!(node = %self.config.node, peer = %node, %addr, error = %e, "tcp fabric: connect failed");
                    self.stats.closes.add(CloseReason::ConnectFailed);
                    self.teardown(node, CloseReason::SessionEnded, now);
                    return;
                }
            };
            match self.insert_conn(conn) {
                Ok(i) => {
                    if let Some(s) = self.peers.get_mut(&node).and_then(|p| p.session.as_mut()) {
                        s.rails[rail] = Some(i);
                    }
                }
                Err(e) => {
                    tracing::warn!(node = %self.config.node, error = %e, "tcp fabric: cannot register connection");
                    self.stats.closes.add(CloseReason::Io);
                    self.teardown(node, CloseReason::SessionEnded, now);
                    return;
                }
            }
        }
    }

    /// Completes non-blocking connects that became writable and sends their HELLOs.
    fn finish_connects(&mut self, now: Instant) {
        for i in 0..self.conns.len() {
            let Some(conn) = self.conn_mut(i) else {
                continue;
            };
            if conn.phase != Phase::Connecting || !(conn.writable || conn.rx.ready) {
                continue;
            }
            let outcome = match conn.stream.take_error() {
                Ok(Some(e)) | Err(e) => Err(e),
                Ok(None) => match conn.stream.peer_addr() {
                    Ok(_) => Ok(true),
                    Err(e)
                        if e.kind() == io::ErrorKind::NotConnected
                            || e.raw_os_error() == Some(115) =>
                    {
                        Ok(false)
                    }
                    Err(e) => Err(e),
                },
            };
            match outcome {
                Ok(false) => {
                    conn.writable = false;
                    conn.rx.ready = false;
                }
                Ok(true) => {
                    let _ = conn.stream.set_nodelay(true);
                    conn.phase = Phase::AwaitReply;
                    let Some((secret, key)) = self.auth() else {
                        self.send_hello(i, now);
                        continue;
                    };
                    // The Noise handshake first; the HELLO goes in the first record.
                    match Link::dialer_with(secret, key, self.config.cipher) {
                        Ok((link, first)) => {
                            if let Some(conn) = self.conn_mut(i) {
                                conn.link = Some(link);
                            }
                            self.send_bytes(i, &first, false, now);
                        }
                        Err(e) => {
                            let detail = e.to_string();
                            self.fail_conn(i, CloseReason::Io, &detail, now);
                        }
                    }
                }
                Err(e) => {
                    let detail = e.to_string();
                    self.fail_conn(i, CloseReason::ConnectFailed, &detail, now);
                }
            }
        }
    }

    /// Sends the dialer's HELLO on connection `i` (its connect, and on a secure fabric
    /// its Noise handshake, completed).
    fn send_hello(&mut self, i: usize, now: Instant) {
        let Some(conn) = self.conn(i) else {
            return;
        };
        let (Some(peer), rail) = (conn.peer, conn.rail) else {
            return;
        };
        let Some(session) = self.peers.get(&peer).and_then(|p| p.session.as_ref()) else {
            return;
        };
        let hello = Hello {
            from: self.config.node,
            to: peer,
            incarnation: self.config.incarnation,
            session: session.id,
            rail: rail as u32,
            rails: session.rails.len() as u32,
        };
        self.send_control(i, &hello.to_header(), now);
    }

    /// Sends the handshake message connection `i`'s link made (an acceptor's second).
    fn send_handshake_out(&mut self, i: usize, now: Instant) -> bool {
        let out = self
            .conn_mut(i)
            .and_then(|c| c.link.as_mut())
            .map(Link::take_handshake_out)
            .unwrap_or_default();
        out.is_empty() || self.send_bytes(i, &out, false, now)
    }

    /// The Noise handshake of connection `i` completed. A dialer checks the static key
    /// the acceptor proved against the node it dialed (the roster's or the pinned key;
    /// a node not pinned yet is pinned only once its HELLO reply names it), then sends
    /// the third handshake message and its HELLO; an acceptor waits for the HELLO.
    fn on_secured(&mut self, i: usize, now: Instant) {
        let Some(conn) = self.conn(i) else {
            return;
        };
        if conn.role == Role::Acceptor {
            return;
        }
        let (peer, remote) = (conn.peer, conn.link.as_ref().and_then(Link::remote_key));
        if let (Some(node), Some(key)) = (peer, remote) {
            if let Err(r) = self.identities.check(node, key) {
                let detail = r.describe(node, key);
                return self.fail_conn(i, CloseReason::IdentityMismatch, &detail, now);
            }
        }
        if self.send_handshake_out(i, now) {
            self.send_hello(i, now);
        }
    }

    /// Binds `node` to the static key connection `i` proved (pinning it on first
    /// contact); on a refusal closes the connection and returns false. Insecure
    /// links have no key and are not checked.
    fn bind_identity(&mut self, i: usize, node: NodeId, now: Instant) -> bool {
        let Some(key) = self
            .conn(i)
            .and_then(|c| c.link.as_ref())
            .and_then(Link::remote_key)
        else {
            return true;
        };
        match self.identities.pin(node, key) {
            Ok(()) => true,
            Err(r) => {
                let reason = match r {
                    pins::Refusal::Full => CloseReason::TooManyPeers,
                    _ => CloseReason::IdentityMismatch,
                };
                self.fail_conn(i, reason, &r.describe(node, key), now);
                false
            }
        }
    }

    /// Whether `node` may be the one behind connection `i`'s static key, without
    /// pinning it; on a refusal closes the connection and returns false.
    fn check_identity(&mut self, i: usize, node: NodeId, now: Instant) -> bool {
        let Some(key) = self
            .conn(i)
            .and_then(|c| c.link.as_ref())
            .and_then(Link::remote_key)
        else {
            return true;
        };
        match self.identities.check(node, key) {
            Ok(()) => true,
            Err(r) => {
                self.fail_conn(
                    i,
                    CloseReason::IdentityMismatch,
                    &r.describe(node, key),
                    now,
                );
                false
            }
        }
    }

    /// Queues and flushes `bytes` on connection `i`, sealed in a record if `seal` and
    /// the connection has a link (handshake messages go unsealed). Returns false if
    /// the connection failed (and was closed).
    fn send_bytes(&mut self, i: usize, bytes: &[u8], seal: bool, now: Instant) -> bool {
        self.send_pieces(i, &Pieces::new([bytes, &[], &[]], &[]), seal, now)
    }

    fn send_pieces(&mut self, i: usize, pieces: &Pieces<'_>, seal: bool, now: Instant) -> bool {
        let Some(conn) = self.conn_mut(i) else {
            return false;
        };
        match conn.link.as_mut().filter(|_| seal) {
            Some(link) => {
                if let Err(e) = conn.tx.append(|buf| link.seal_onto(pieces, buf)) {
                    let detail = e.to_string();
                    self.fail_conn(i, CloseReason::Io, &detail, now);
                    return false;
                }
            }
            None => conn.tx.push(pieces, 0),
        }
        conn.last_tx = now;
        match conn.tx.flush(&mut conn.stream) {
            Ok(_) => {
                if !conn.tx.is_empty() {
                    conn.writable = false;
                }
                true
            }
            Err(e) => {
                let detail = e.to_string();
                self.fail_conn(i, CloseReason::Io, &detail, now);
                false
            }
        }
    }

    /// Queues and flushes a control header (HELLO, heartbeat) on connection `i`.
    fn send_control(&mut self, i: usize, h: &Header, now: Instant) {
        let bytes = h.to_bytes();
        if !self.send_bytes(i, &bytes, true, now) {
            return;
        }
        let Some(conn) = self.conn(i) else {
            return;
        };
        let (peer, rail) = (conn.peer, conn.rail);
        if let Some(p) = peer.and_then(|p| self.peers.get_mut(&p)) {
            let r = p.stats.rail(rail);
            r.packets_sent += 1;
            r.bytes_sent += HEADER_LEN as u64;
        }
    }

    /// Acknowledges on rail `i` the first `count` packets it brought from `node` (a
    /// heartbeat carrying the count, `ack.rs`).
    fn send_ack(&mut self, i: usize, node: NodeId, count: u64, now: Instant) {
        let hb = heartbeat(self.config.node, node, self.config.incarnation, count);
        self.send_control(i, &hb, now);
        if let Some(c) = self.conn_mut(i) {
            c.received.told(count);
        }
        if let Some(p) = self.peers.get_mut(&node) {
            p.stats.acks_sent += 1;
        }
    }

    /// Handles a HELLO that arrived on connection `i` during its handshake.
    fn on_hello(&mut self, i: usize, h: &Header, now: Instant) {
        let Some(conn) = self.conn(i) else {
            return;
        };
        let role = conn.role;
        if role == Role::Acceptor && JoinQuery::is_join(h) {
            return self.on_join_query(i, h, now);
        }
        let hello = match Hello::from_header(h) {
            Ok(x) => x,
            Err(e) => {
                let detail = e.to_string();
                return self.fail_conn(i, CloseReason::BadHello, &detail, now);
            }
        };
        match role {
            Role::Acceptor => self.on_dialer_hello(i, hello, now),
            Role::Dialer => self.on_reply_hello(i, hello, now),
        }
    }

    /// Answers a membership query on accepted connection `i`: lists this node and every
    /// peer with a known address, adds the joiner as a peer (its address is the
    /// connection's source address with the announced port), and closes the connection
    /// once the reply is flushed. Sessions are not touched.
    fn on_join_query(&mut self, i: usize, h: &Header, now: Instant) {
        let me = self.config.node;
        let q = match JoinQuery::from_header(h) {
            Ok(q) if q.from == me => {
                return self.fail_conn(i, CloseReason::BadJoin, "join query from our own id", now)
            }
            Ok(q) => q,
            Err(e) => {
                let detail = e.to_string();
                return self.fail_conn(i, CloseReason::BadJoin, &detail, now);
            }
        };
        // The node a query names must be the one behind the link's static key.
        if !self.check_identity(i, q.from, now) {
            return;
        }
        let Some(conn) = self.conn(i) else {
            return;
        };
        let remote = conn.addr;
        // Listening on a wildcard address: name ourselves by the address dialed.
        let own = if self.local_addr.ip().is_unspecified() {
            conn.stream.local_addr().map_or(self.local_addr, |a| {
                SocketAddr::new(a.ip(), self.local_addr.port())
            })
        } else {
            self.local_addr
        };
        let mut members = vec![(me, own)];
        members.extend(
            self.peers
                .iter()
                .filter(|&(&n, _)| n != q.from)
                .filter_map(|(&n, p)| p.addr.map(|a| (n, a)))
                .take(MAX_JOIN_MEMBERS - 1),
        );
        let known = self.peers.contains_key(&q.from);
        // A query never moves a peer that is up: its session proves where it is, and a
        // member claiming its id from elsewhere would have our next redial go there.
        let moves_live_peer = self.peers.get(&q.from).is_some_and(|p| {
            p.session.is_some()
                && q.listen_port != 0
                && p.addr != Some(SocketAddr::new(remote.ip(), q.listen_port))
        });
        if moves_live_peer {
            return self.fail_conn(
                i,
                CloseReason::BadJoin,
                "join query would move a peer that is up",
                now,
            );
        }
        if !known && q.listen_port != 0 && self.peers.len() >= self.config.max_peers {
            return self.fail_conn(i, CloseReason::TooManyPeers, "peer table full", now);
        }
        if q.listen_port != 0 && (known || self.config.learn_peers) {
            // A query that adds its node is a first contact: its key is pinned.
            if !self.bind_identity(i, q.from, now) {
                return;
            }
            let addr = SocketAddr::new(remote.ip(), q.listen_port);
            if self.add_peer(q.from, addr).is_ok() && !known {
                if let Some(p) = self.peers.get_mut(&q.from) {
                    p.since = Some(now);
                }
                tracing::info!(node = %me, peer = %q.from, %addr, "tcp fabric: learned peer from a join query");
            }
        }
        tracing::debug!(node = %me, joiner = %q.from, %remote, members = members.len(), "tcp fabric: answering join query");
        let (reply, payload) = join_reply(me, q.from, self.config.incarnation, &members);
        let Some(conn) = self.conn_mut(i) else {
            return;
        };
        conn.phase = Phase::Answered;
        let hdr = reply.to_bytes();
        let body = [SharedBytes::from(&payload[..])];
        let pieces = Pieces::new([&hdr, &[], &[]], &body);
        if self.send_pieces(i, &pieces, true, now) && self.conn(i).is_some_and(|c| c.tx.is_empty())
        {
            self.close_conn(i, CloseReason::JoinAnswered);
        }
    }

    fn on_dialer_hello(&mut self, i: usize, hello: Hello, now: Instant) {
        let me = self.config.node;
        let from = hello.from;
        // Who is speaking comes first: the node named must be the one behind the
        // static key the link proved (the roster's, or the one pinned).
        if hello.to == me && !self.check_identity(i, from, now) {
            return;
        }
        let refuse = |reason, detail: String| Some((reason, detail));
        let verdict = if hello.to != me {
            refuse(
                CloseReason::WrongNode,
                format!("HELLO from {from} is meant for {}", hello.to),
            )
        } else if from == me {
            refuse(CloseReason::BadHello, "HELLO from ourselves".into())
        } else if from > me {
            refuse(
                CloseReason::UnexpectedDialer,
                format!("{from} dialed us, but the lower id dials"),
            )
        } else if !self.peers.contains_key(&from) && !self.config.learn_peers {
            refuse(CloseReason::UnknownNode, format!("{from} is not a peer"))
        } else if !self.peers.contains_key(&from) && self.peers.len() >= self.config.max_peers {
            refuse(
                CloseReason::TooManyPeers,
                format!(
                    "{from} would make more than {} peers",
                    self.config.max_peers
                ),
            )
        } else {
            None
        };
        if let Some((reason, detail)) = verdict {
            return self.fail_conn(i, reason, &detail, now);
        }
        if !self.bind_identity(i, from, now) {
            return;
        }
        let peer = self.peers.entry(from).or_insert_with(|| {
            tracing::info!(node = %me, peer = %from, "tcp fabric: learned peer");
            let mut p = Peer::new(None, false);
            p.since = Some(now);
            p
        });
        if peer
            .known_incarnation
            .is_some_and(|k| hello.incarnation < k)
        {
            let detail = format!(
                "incarnation {} is older than {:?}",
                hello.incarnation, peer.known_incarnation
            );
            return self.fail_conn(i, CloseReason::StaleIncarnation, &detail, now);
        }
        let key = (hello.incarnation, hello.session);
        let current = peer
            .session
            .as_ref()
            .map(|s| (s.incarnation.unwrap_or(0), s.id));
        let join = match current {
            Some(c) if c == key => true,
            Some(c) if key > c => {
                self.teardown(from, CloseReason::Superseded, now);
                false
            }
            Some(_) => {
                let detail = format!("session {key:?} is older than the current {current:?}");
                return self.fail_conn(i, CloseReason::StaleSession, &detail, now);
            }
            None => {
                if peer.last_session.is_some_and(|last| key <= last) {
                    let detail = format!("session {key:?} was already seen");
                    return self.fail_conn(i, CloseReason::StaleSession, &detail, now);
                }
                false
            }
        };
        let rail = hello.rail as usize;
        let Some(peer) = self.peers.get_mut(&from) else {
            return;
        };
        if join {
            let Some(s) = peer.session.as_ref() else {
                return;
            };
            if s.rails.len() != hello.rails as usize {
                let detail = format!("{} rails, the session has {}", hello.rails, s.rails.len());
                return self.fail_conn(i, CloseReason::BadHello, &detail, now);
            }
            if s.rails[rail].is_some() {
                let detail = format!("rail {rail} is already connected");
                return self.fail_conn(i, CloseReason::DuplicateRail, &detail, now);
            }
        } else {
            peer.session = Some(Session {
                id: hello.session,
                incarnation: Some(hello.incarnation),
                rails: vec![None; hello.rails as usize],
                open: vec![false; hello.rails as usize],
                started: now,
                up: false,
            });
            peer.last_session = Some(key);
            peer.known_incarnation = Some(hello.incarnation);
        }
        let Some(s) = peer.session.as_mut() else {
            return;
        };
        s.rails[rail] = Some(i);
        s.open[rail] = true;
        if let Some(conn) = self.conn_mut(i) {
            conn.peer = Some(from);
            conn.rail = rail;
            conn.phase = Phase::Open;
        }
        let reply = Hello {
            from: me,
            to: from,
            incarnation: self.config.incarnation,
            session: hello.session,
            rail: hello.rail,
            rails: hello.rails,
        };
        self.send_control(i, &reply.to_header(), now);
        self.maybe_up(from);
    }

    fn on_reply_hello(&mut self, i: usize, hello: Hello, now: Instant) {
        let me = self.config.node;
        let Some(conn) = self.conn(i) else {
            return;
        };
        let (Some(node), rail) = (conn.peer, conn.rail) else {
            return;
        };
        let Some(peer) = self.peers.get(&node) else {
            return;
        };
        let Some(session) = peer.session.as_ref() else {
            return;
        };
        let verdict = if hello.from != node || hello.to != me {
            Some((
                CloseReason::WrongNode,
                format!("dialed {node}, {} answered for {}", hello.from, hello.to),
            ))
        } else if hello.session != session.id
            || hello.rail as usize != rail
            || hello.rails as usize != session.rails.len()
        {
            Some((
                CloseReason::BadHello,
                "reply does not echo session and rail".to_string(),
            ))
        } else if peer
            .known_incarnation
            .is_some_and(|k| hello.incarnation < k)
        {
            Some((
                CloseReason::StaleIncarnation,
                format!(
                    "incarnation {} is older than {:?}",
                    hello.incarnation, peer.known_incarnation
                ),
            ))
        } else if session
            .incarnation
            .is_some_and(|inc| inc != hello.incarnation)
        {
            Some((
                CloseReason::BadHello,
                "rails of one session answered with different incarnations".to_string(),
            ))
        } else {
            None
        };
        if let Some((reason, detail)) = verdict {
            return self.fail_conn(i, reason, &detail, now);
        }
        if !self.bind_identity(i, node, now) {
            return;
        }
        let Some(peer) = self.peers.get_mut(&node) else {
            return;
        };
        if let Some(s) = peer.session.as_mut() {
            s.incarnation = Some(hello.incarnation);
            s.open[rail] = true;
        }
        if let Some(conn) = self.conn_mut(i) {
            conn.phase = Phase::Open;
        }
        self.maybe_up(node);
    }

    /// Announces a peer up once every rail of its session completed the handshake.
    fn maybe_up(&mut self, node: NodeId) {
        let Some(peer) = self.peers.get_mut(&node) else {
            return;
        };
        let Some(s) = peer.session.as_mut() else {
            return;
        };
        if s.up || !s.open.iter().all(|&o| o) {
            return;
        }
        let Some(incarnation) = s.incarnation else {
            return;
        };
        s.up = true;
        peer.known_incarnation = Some(incarnation);
        peer.state = PeerState::Up { incarnation };
        peer.down_since = None;
        peer.stats.ups += 1;
        peer.rr = 0;
        self.out.push_back(PeerEvent::Up { node, incarnation });
        tracing::info!(node = %self.config.node, peer = %node, incarnation, rails = s.rails.len(), "tcp fabric: peer up");
    }

    // ---- the poll pieces ---------------------------------------------------------------

    /// Writes what every writable rail queued. Held packets stay held while
    /// `keep_holding` (the caller is streaming) unless they have waited for the hold
    /// time.
    fn flush_all(&mut self, now: Instant, keep_holding: bool) {
        let hold = self.timing.hold;
        for i in 0..self.conns.len() {
            let Some(conn) = self.conn_mut(i) else {
                continue;
            };
            if conn.phase == Phase::Connecting || !conn.writable {
                continue;
            }
            if keep_holding && conn.held_since().is_some_and(|t| now.nanos_since(t) < hold) {
                continue;
            }
            // Frames a link holds as plaintext are sealed into the queue, in one record.
            if let Some(link) = conn.link.as_mut().filter(|l| l.held() > 0) {
                let nothing = Pieces::new([&[], &[], &[]], &[]);
                if let Err(e) = conn.tx.append(|buf| link.seal_onto(&nothing, buf)) {
                    let detail = e.to_string();
                    self.fail_conn(i, CloseReason::Io, &detail, now);
                    continue;
                }
            }
            if conn.tx.is_empty() {
                continue;
            }
            match conn.tx.flush(&mut conn.stream) {
                Ok(_) => {
                    if !conn.tx.is_empty() {
                        conn.writable = false;
                    } else if conn.phase == Phase::Answered {
                        self.close_conn(i, CloseReason::JoinAnswered);
                    }
                }
                Err(e) => {
                    let detail = e.to_string();
                    self.fail_conn(i, CloseReason::Io, &detail, now);
                }
            }
        }
    }

    /// Reads every connection with work, round robin, within `budget` packets.
    fn receive(
        &mut self,
        now: Instant,
        sink: &mut dyn PacketSink,
        budget: &mut usize,
    ) -> Result<(), FabricError> {
        let n = self.conns.len();
        if n == 0 {
            return Ok(());
        }
        let first = self.rx_cursor % n;
        // With an express lane, a first pass reads every peer's rail 0 (express packets
        // only), then the usual round robin reads everything.
        let express_pass = usize::from(self.config.express_lane);
        for k in 0..n * (1 + express_pass) {
            let express = k < n * express_pass;
            let i = if express { k } else { (first + k) % n };
            if express
                && !self.conns[i]
                    .as_ref()
                    .is_some_and(|c| c.rail == 0 && c.phase == Phase::Open)
            {
                continue;
            }
            // Read in place: moving a connection out and back cost three copies of its 800
            // bytes per read (a third of a small packet's receive, in callgrind).
            while let Some((peer, phase)) = self
                .conns
                .get(i)
                .and_then(Option::as_ref)
                .filter(|c| !matches!(c.phase, Phase::Connecting | Phase::Answered))
                .filter(|c| c.rx_work())
                .map(|c| (c.peer, c.phase))
            {
                let Some(stop) = self.read_conn(i, peer, phase, now, sink, budget) else {
                    break;
                };
                match stop {
                    RxStop::Hello(h) => {
                        self.on_hello(i, &h, now);
                        continue;
                    }
                    RxStop::Reply => {
                        self.send_handshake_out(i, now);
                        continue;
                    }
                    RxStop::Secured => {
                        self.on_secured(i, now);
                        continue;
                    }
                    RxStop::Close(reason, detail) => self.fail_conn(i, reason, &detail, now),
                    RxStop::SinkBuffer { expected, got } => {
                        self.rx_cursor = i;
                        return Err(FabricError::SinkBuffer { expected, got });
                    }
                    RxStop::Budget => {
                        // The next poll starts with the next connection. Resuming with
                        // this one let a rail that always filled the budget starve the
                        // others: the sender then favoured the drained rail (its queue
                        // empty), a message's packets on the starved rail fell 64 and
                        // more messages behind, and a metadata entry reused meanwhile
                        // counted two messages as one (a notification lost, seen in a
                        // stream of 1 MiB messages over two rails). The budget stops at
                        // a packet boundary only, so nothing is left half read here.
                        self.rx_cursor = i + 1;
                        return Ok(());
                    }
                    RxStop::Idle | RxStop::Stalled => {}
                }
                break;
            }
        }
        self.rx_cursor = first + 1;
        Ok(())
    }

    /// Reads connection `i` (of `peer`, in `phase`) once through [`Rx::pump`], in place,
    /// and counts what came: why the read stopped, or `None` if the connection is gone or
    /// failed. Out of line so that callgrind counts a read whole (`bench/instructions.sh`).
    #[inline(never)]
    fn read_conn(
        &mut self,
        i: usize,
        peer: Option<NodeId>,
        phase: Phase,
        now: Instant,
        sink: &mut dyn PacketSink,
        budget: &mut usize,
    ) -> Option<RxStop> {
        let session_up = peer.is_some_and(|p| {
            self.peers
                .get(&p)
                .and_then(|p| p.session.as_ref())
                .is_some_and(|s| s.up && s.rails.contains(&Some(i)))
        });
        let conn = self.conns.get_mut(i).and_then(Option::as_mut)?;
        let mut counts = RxCounts::default();
        let mut ctx = RxCtx {
            me: self.config.node,
            peer,
            handshake: phase != Phase::Open,
            deliver: phase == Phase::Open && session_up,
            events: &mut self.out,
            budget: &mut *budget,
            counts: &mut counts,
            replay: Some(&mut self.replay),
        };
        let stop = conn
            .rx
            .pump(&mut conn.stream, conn.link.as_mut(), sink, &mut ctx);
        if std::mem::take(&mut conn.rx.got_bytes) {
            conn.last_rx = now;
        }
        conn.received.packets(counts.whole);
        let ack = conn.received.ack_due(false);
        let bad_ack = counts.acked.and_then(|n| conn.unacked.ack(n).err());
        let rail = conn.rail;
        if let Some(e) = bad_ack {
            self.fail_conn(i, CloseReason::BadAck, &e.to_string(), now);
            return None;
        }
        if let (Some(n), Some(p)) = (ack, peer) {
            self.send_ack(i, p, n, now);
        }
        if let Some(p) = peer.and_then(|p| self.peers.get_mut(&p)) {
            p.stats.packets_received += counts.packets;
            p.stats.bytes_received += counts.bytes;
            p.stats.heartbeats_received += counts.heartbeats;
            let r = p.stats.rail(rail);
            r.packets_received += counts.packets + counts.heartbeats;
            r.bytes_received += counts.bytes + counts.heartbeats * HEADER_LEN as u64;
            r.empty_reads += counts.empty_reads;
        }
        Some(stop)
    }

    /// Whether this poll looks for input (asks the poller; busy polling, reads every
    /// rail). While the caller streams (`sent` since its last poll), its polls come once
    /// per packet, and a system call (or one per rail) each time would cost as much as the
    /// packets' writes: it looks at most once per quarter of the hold time then (bytes
    /// already staged are read regardless), and a connection in its handshake every
    /// [`HANDSHAKE_LOOK`] at least, however long the hold, but not on every packet (a dial
    /// that hangs, or a client that never says HELLO until the handshake deadline, would
    /// cost the stream a system call per packet).
    fn look_for_input(&mut self, now: Instant, sent: bool) -> bool {
        if !sent || self.timing.hold == 0 {
            return true;
        }
        if now >= self.next_ask {
            self.next_ask = now.plus_nanos(self.timing.hold / 4);
            return true;
        }
        if now >= self.next_handshake_look && self.in_handshake() {
            self.next_handshake_look = now.plus(HANDSHAKE_LOOK);
            return true;
        }
        false
    }

    /// Whether a connection is in its handshake (not yet a rail, or not one any more).
    fn in_handshake(&self) -> bool {
        self.conns.iter().flatten().any(|c| c.phase != Phase::Open)
    }

    /// Heartbeats, timeouts, reconnects.
    fn timers(&mut self, now: Instant) {
        if now < self.next_tick {
            return;
        }
        self.next_tick = now.plus_nanos(self.timing.tick);
        let t = self.timing;
        // Taken for the tick and put back after it: the lists keep their room.
        let mut sc = std::mem::take(&mut self.tick_scratch);
        sc.nodes.clear();
        sc.nodes.extend(self.peers.keys().copied());
        for k in 0..sc.nodes.len() {
            let node = sc.nodes[k];
            let Some(peer) = self.peers.get_mut(&node) else {
                continue;
            };
            let since = *peer.since.get_or_insert(now);
            if peer.state == PeerState::Connecting && now.nanos_since(since) >= t.timeout {
                peer.state = PeerState::Down;
                peer.down_since = Some(now);
                peer.stats.downs += 1;
                self.out.push_back(PeerEvent::Down { node });
                tracing::info!(node = %self.config.node, peer = %node, "tcp fabric: peer never came up");
            }
            // A peer learned only because it dialed us (no address of ours to dial it
            // back), down for a peer timeout, is forgotten: a node id that stops dialing
            // costs nothing after that. It is learned again if it dials again.
            let forget = peer.addr.is_none()
                && !peer.dial
                && peer.session.is_none()
                && peer.state == PeerState::Down
                && peer
                    .down_since
                    .is_some_and(|d| now.nanos_since(d) >= t.timeout);
            if forget {
                self.peers.remove(&node);
                self.stats.peers_forgotten += 1;
                tracing::debug!(node = %self.config.node, peer = %node, "tcp fabric: forgot a learned peer that stayed down");
                continue;
            }
            let Some(session) = peer.session.as_ref() else {
                if peer.dial && peer.addr.is_some() && now >= peer.next_dial {
                    self.start_session(node, now);
                }
                continue;
            };
            if !session.up {
                if now.nanos_since(session.started) >= t.timeout {
                    tracing::debug!(node = %self.config.node, peer = %node, "tcp fabric: handshake timed out");
                    self.teardown(node, CloseReason::HandshakeTimeout, now);
                }
                continue;
            }
            sc.rails.clear();
            sc.rails.extend(session.conns());
            let mut dead = None;
            sc.beats.clear();
            for &i in &sc.rails {
                let Some(conn) = self.conn(i) else {
                    continue;
                };
                // Unread bytes (a poll whose budget ran out) count as life.
                if now.nanos_since(conn.last_rx) >= t.timeout && !conn.rx_work() {
                    dead = Some(i);
                    break;
                }
                if conn.tx.is_empty() && now.nanos_since(conn.last_tx) >= t.heartbeat {
                    sc.beats.push(i);
                }
            }
            if let Some(i) = dead {
                self.fail_conn(
                    i,
                    CloseReason::HeartbeatTimeout,
                    "no bytes for the peer timeout",
                    now,
                );
                continue;
            }
            for &i in &sc.beats {
                // Idle: a rail gives back what a very large frame made its queue hold.
                if let Some(conn) = self.conn_mut(i) {
                    conn.tx.trim();
                }
            }
            // Every tick acknowledges what arrived since the last acknowledgement, so a
            // sender learns within a tick which packets the peer has.
            sc.acks.clear();
            for &i in &sc.rails {
                if sc.beats.contains(&i) {
                    continue;
                }
                if let Some(n) = self.conn(i).and_then(|c| c.received.ack_due(true)) {
                    sc.acks.push((i, n));
                }
            }
            for &(i, n) in &sc.acks {
                self.send_ack(i, node, n, now);
            }
            for &i in &sc.beats {
                let acked = self.conn(i).map_or(0, |c| c.received.delivered());
                let hb = heartbeat(self.config.node, node, self.config.incarnation, acked);
                self.send_control(i, &hb, now);
                if let Some(c) = self.conn_mut(i) {
                    c.received.told(acked);
                }
                if let Some(p) = self.peers.get_mut(&node) {
                    p.stats.heartbeats_sent += 1;
                }
            }
        }
        self.tick_scratch = sc;
        // Accepted connections that never said HELLO (or never took a join reply).
        for i in 0..self.conns.len() {
            let expired = self.conn(i).is_some_and(|c| {
                matches!(c.phase, Phase::AwaitHello | Phase::Answered)
                    && now.nanos_since(c.opened) >= t.timeout
            });
            if expired {
                self.fail_conn(i, CloseReason::HandshakeTimeout, "no HELLO in time", now);
            }
        }
    }

    fn flush_events(&mut self, sink: &mut dyn PacketSink) {
        while let Some(ev) = self.out.pop_front() {
            sink.on_peer(ev);
        }
        while let Some((node, h)) = self.unconfirmed.pop_front() {
            sink.on_unconfirmed(node, &h);
        }
    }

    /// [`Fabric::send`], or [`Fabric::send_express`] when `express`.
    fn send_packet(
        &mut self,
        now: Instant,
        header: &Header,
        meta: &[u8],
        payload: &[SharedBytes<'_>],
        express: bool,
    ) -> Result<(), FabricError> {
        if self.shut {
            return Err(FabricError::LocalDown);
        }
        let total = check_send(self.config.node, header, meta, payload)?;
        let node = header.dst;
        let Some(peer) = self.peers.get_mut(&node) else {
            return Err(FabricError::NoRoute(node));
        };
        match peer.state {
            PeerState::Up { .. } => {}
            PeerState::Connecting => {
                peer.stats.refused_full += 1;
                return Err(FabricError::Full);
            }
            PeerState::Down => {
                peer.stats.refused_down += 1;
                return Err(FabricError::PeerDown(node));
            }
        }
        let pkt_len = HEADER_LEN + meta.len() + total;
        self.send_on_rail(now, header, meta, payload, pkt_len, express)
    }

    /// Sends one packet on a rail of an up peer.
    ///
    /// A small packet sent while the caller streams (it sent since its last poll, or
    /// between its last two polls) is held in the rail's queue to share a write with the
    /// next ones, on the rail already holding some, so that small packets do not
    /// alternate rails; [`TcpFabric::flush_all`] writes it when the stream pauses, or
    /// after [`TcpConfig::hold`]. Any other packet is written at once, behind what the
    /// rail holds, in one gather write.
    fn send_on_rail(
        &mut self,
        now: Instant,
        header: &Header,
        meta: &[u8],
        payload: &[SharedBytes<'_>],
        pkt_len: usize,
        express: bool,
    ) -> Result<(), FabricError> {
        let node = header.dst;
        let max_queued = self.config.max_queued_bytes;
        let hold = (self.timing.hold > 0
            && !express
            && pkt_len <= HOLD_PACKET
            && (self.streaming || self.sends_since_poll > 0))
            .then_some(now);
        let lanes = self.config.express_lane;
        let Some(peer) = self.peers.get_mut(&node) else {
            return Err(FabricError::NoRoute(node));
        };
        let Some(session) = peer.session.as_ref().filter(|s| s.up) else {
            peer.stats.refused_down += 1;
            return Err(FabricError::PeerDown(node));
        };
        // Pick a rail: for a packet to hold, the rail holding packets already; else round
        // robin among rails with nothing queued, else the least queued.
        let n = session.rails.len();
        // With an express lane, rail 0 is express packets' and only theirs, and each
        // lane's queues are bounded on their own (a flood never makes an express packet
        // wait for room).
        let lanes = lanes && n >= 2;
        let express = express && lanes;
        let mut queued = 0;
        let mut best: Option<(usize, usize)> = None; // (queued, rail)
        let mut empty = None;
        let mut holding = None;
        for k in 0..n {
            let rail = (peer.rr + k) % n;
            if lanes && (rail == 0) != express {
                continue;
            }
            let Some(c) = session.rails[rail]
                .and_then(|i| self.conns.get(i))
                .and_then(Option::as_ref)
            else {
                continue;
            };
            let q = c.tx.len() + c.link.as_ref().map_or(0, Link::held);
            queued += q;
            if q == 0 && empty.is_none() {
                empty = Some(rail);
            }
            if holding.is_none() && c.writable && c.held_since().is_some() {
                holding = Some(rail);
            }
            if best.is_none_or(|(bq, _)| q < bq) {
                best = Some((q, rail));
            }
        }
        if queued > 0 && queued + pkt_len > max_queued {
            peer.stats.refused_full += 1;
            return Err(FabricError::Full);
        }
        let pick = if express {
            Some(0)
        } else if let Some(rail) = pinned_rail(header, n - usize::from(lanes)) {
            // A single-packet message keeps to its pair's rail, so the messages of one
            // sending terminus to one slot (an endpoint pair) arrive in the order sent.
            // (A pair's messages are all express or all not while the node's priorities
            // in use stay the same.)
            Some(rail + usize::from(lanes))
        } else if hold.is_some() {
            holding.or(empty)
        } else {
            empty
        };
        let Some(rail) = pick.or(best.map(|(_, r)| r)) else {
            return Err(FabricError::PeerDown(node));
        };
        let Some(i) = session.rails[rail] else {
            return Err(FabricError::PeerDown(node));
        };
        if holding != Some(rail) {
            peer.rr = rail + 1;
        }
        let Some(conn) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return Err(FabricError::PeerDown(node));
        };
        // A rail keeps every packet until the peer acknowledges it (`ack.rs`); with as
        // many as it may keep, the peer must catch up first.
        if !conn.unacked.has_room() {
            peer.stats.refused_full += 1;
            return Err(FabricError::Full);
        }
        let hdr = header.to_bytes();
        let sent = match conn.link.as_mut() {
            None => conn
                .tx
                .send(&mut conn.stream, [&hdr, meta], payload, conn.writable, hold),
            // A small frame of a stream is held as plaintext, to be sealed with the
            // ones after it in one record; any other is sealed now, behind what is held.
            Some(link) => {
                let packet = Pieces::new([&hdr, meta, &[]], payload);
                match hold {
                    Some(now) if conn.writable && link.held() + pkt_len < HOLD_BYTES => {
                        link.hold(&packet, now);
                        Ok(Sent {
                            writable: true,
                            queued: 0,
                            held: true,
                        })
                    }
                    // Sealed into the send queue (no copy of its own), written from
                    // there behind what waits; what the socket does not take stays.
                    _ => match conn.tx.append(|buf| link.seal_onto(&packet, buf)) {
                        Ok(sealed) => conn.tx.send_queued(&mut conn.stream, sealed, conn.writable),
                        Err(e) => Err(io::Error::other(e)),
                    },
                }
            }
        };
        match sent {
            Ok(sent) => {
                conn.writable = sent.writable;
                peer.stats.bytes_queued += sent.queued as u64;
                peer.stats.packets_held += u64::from(sent.held);
            }
            Err(e) => {
                let detail = e.to_string();
                self.fail_conn(i, CloseReason::Io, &detail, now);
                if let Some(p) = self.peers.get_mut(&node) {
                    p.stats.refused_down += 1;
                }
                return Err(FabricError::PeerDown(node));
            }
        }
        conn.last_tx = now;
        conn.unacked.sent(header);
        self.sends_since_poll += 1;
        peer.stats.packets_sent += 1;
        peer.stats.bytes_sent += pkt_len as u64;
        let r = peer.stats.rail(rail);
        r.packets_sent += 1;
        r.bytes_sent += pkt_len as u64;
        Ok(())
    }
}

impl Fabric for TcpFabric {
    fn local(&self) -> NodeId {
        self.config.node
    }

    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.as_fd())
    }

    fn next_timer(&self) -> Option<Instant> {
        Some(TcpFabric::next_timer(self))
    }

    fn flush_held(&mut self, now: Instant) {
        self.flush_all(now, false);
    }

    fn prepare_sleep(&mut self, now: Instant) -> bool {
        // Going to sleep ends a stream: nothing stays held (as in `TcpFabric::wait`).
        self.flush_all(now, false);
        // A poll while the caller streamed may have skipped the poller (`next_ask`):
        // readiness left unread in it would keep our descriptor from waking the caller.
        match self.poll.poll(&mut self.events, Some(Duration::ZERO)) {
            Ok(()) => self.note_events(),
            // Interrupted, or failing: say there is work, so the caller polls (and
            // `poll` reports a failing poller) instead of sleeping on it.
            Err(_) => return true,
        }
        self.has_pending_work()
    }

    fn fabric_stats(&self) -> Option<FabricStats> {
        Some(FabricStats::Tcp(
            self.stats
                .counters(self.config.rails, self.auth().is_some()),
        ))
    }

    fn link_stats(&self) -> Vec<(NodeId, LinkStats)> {
        self.peers
            .iter()
            .map(|(&node, p)| {
                let state = match p.state {
                    PeerState::Connecting => LinkState::Connecting,
                    PeerState::Up { .. } => LinkState::Up,
                    PeerState::Down => LinkState::Down,
                };
                let rails_up = p
                    .session
                    .as_ref()
                    .map_or(0, |s| s.open.iter().filter(|&&o| o).count());
                (node, p.stats.link(state, rails_up, self.config.rails))
            })
            .collect()
    }

    fn send(
        &mut self,
        now: Instant,
        header: &Header,
        meta: &[u8],
        payload: &[SharedBytes<'_>],
    ) -> Result<(), FabricError> {
        self.send_packet(now, header, meta, payload, false)
    }

    fn send_express(
        &mut self,
        now: Instant,
        header: &Header,
        meta: &[u8],
        payload: &[SharedBytes<'_>],
    ) -> Result<(), FabricError> {
        self.send_packet(now, header, meta, payload, true)
    }

    fn poll(
        &mut self,
        now: Instant,
        sink: &mut dyn PacketSink,
        budget: usize,
    ) -> Result<usize, FabricError> {
        self.poll_reading(now, sink, budget, self.config.busy_poll)
    }

    /// Reads every up rail directly, as [`TcpConfig::busy_poll`] does on every poll.
    fn poll_spinning(
        &mut self,
        now: Instant,
        sink: &mut dyn PacketSink,
        budget: usize,
    ) -> Result<usize, FabricError> {
        self.poll_reading(now, sink, budget, true)
    }
}

impl TcpFabric {
    /// [`Fabric::poll`]; `direct`: look for input by reading every up rail, asking the
    /// poller only every [`BUSY_POLL_EVENTS_EVERY`] polls (new connections, handshakes),
    /// rather than asking the poller which rails to read.
    fn poll_reading(
        &mut self,
        now: Instant,
        sink: &mut dyn PacketSink,
        budget: usize,
        direct: bool,
    ) -> Result<usize, FabricError> {
        if self.shut {
            return Err(FabricError::LocalDown);
        }
        self.polls += 1;
        // The caller sent since its last poll: if it did between the two before as well,
        // it streams, and small packets stay held (see `flush_all`).
        let sent = self.sends_since_poll > 0;
        let keep_holding = sent && self.streaming;
        self.streaming = sent;
        self.sends_since_poll = 0;
        let look = self.look_for_input(now, sent);
        let ask_poller = if direct {
            self.polls % BUSY_POLL_EVENTS_EVERY == 1 || (look && self.in_handshake())
        } else {
            look
        };
        if ask_poller {
            match self.poll.poll(&mut self.events, Some(Duration::ZERO)) {
                Ok(()) => self.note_events(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::error!(node = %self.config.node, error = %e, "tcp fabric: poller failed");
                    return Err(FabricError::LocalDown);
                }
            }
        }
        if direct && look {
            for conn in self.conns.iter_mut().flatten() {
                if conn.phase == Phase::Open {
                    conn.rx.ready = true;
                    conn.writable |= !conn.tx.is_empty();
                }
            }
        }
        self.accept_all(now);
        self.finish_connects(now);
        self.flush_all(now, keep_holding);
        let mut left = budget;
        let received = self.receive(now, sink, &mut left);
        self.timers(now);
        self.flush_events(sink);
        received?;
        Ok(budget - left)
    }
}

impl AsRawFd for TcpFabric {
    /// The poller's epoll descriptor: readable whenever a socket of the fabric is ready.
    fn as_raw_fd(&self) -> RawFd {
        self.poll.as_raw_fd()
    }
}

impl AsFd for TcpFabric {
    /// The poller's epoll descriptor: readable whenever a socket of the fabric is ready.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.poll.registry().as_fd()
    }
}

// The engine may move a fabric into its own thread.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<TcpFabric>();
};

/// Sends one membership query ([`frame::JoinQuery`]) to the member listening on `addr`
/// and returns the members it lists, itself first: `me` is the asking node, `listen_port`
/// the port it listens on (the member adds it as a peer at the connection's source
/// address with that port; 0 asks without being added). Blocking, with `timeout` for the
/// connect and for each read and write; the reply is at most
/// [`frame::MAX_JOIN_MEMBERS`] entries. With `auth` (the cluster secret and this node's
/// key) the query and the reply travel over an authenticated link ([`secure`]), as
/// every member's listener requires unless it runs `danger_insecure` (then pass
/// `None`); the member binds `me` to the key (see [`TcpConfig::roster`]).
pub fn join(
    addr: SocketAddr,
    me: NodeId,
    listen_port: u16,
    timeout: Duration,
    auth: Option<(&ClusterSecret, &NodeKey)>,
) -> Result<Vec<(NodeId, SocketAddr)>, TcpError> {
    join_member(addr, me, listen_port, timeout, auth).map(|(members, _)| members)
}

/// Members a membership reply lists (the answering member first), and the static key
/// the member proved (`None` without `auth`).
type JoinAnswer = (Vec<(NodeId, SocketAddr)>, Option<PublicKey>);

/// [`join`], and the static key the member proved.
fn join_member(
    addr: SocketAddr,
    me: NodeId,
    listen_port: u16,
    timeout: Duration,
    auth: Option<(&ClusterSecret, &NodeKey)>,
) -> Result<JoinAnswer, TcpError> {
    use std::io::{Read, Write};
    let fail = |reason: String| TcpError::Join { addr, reason };
    let io = |what: &str, e: io::Error| fail(format!("{what}: {e}"));
    let timeout = timeout.max(Duration::from_millis(1));
    let mut s =
        std::net::TcpStream::connect_timeout(&addr, timeout).map_err(|e| io("connect", e))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| io("socket", e))?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| io("socket", e))?;
    let _ = s.set_nodelay(true);
    let query = frame::JoinQuery {
        from: me,
        listen_port,
    };
    let query = query.to_header().to_bytes();
    let (h, payload, key) = match auth {
        None => {
            s.write_all(&query).map_err(|e| io("send", e))?;
            let mut hdr = [0u8; HEADER_LEN];
            s.read_exact(&mut hdr).map_err(|e| io("reply", e))?;
            let h = Header::parse(&hdr).map_err(|e| fail(format!("reply header: {e}")))?;
            frame::check_join_reply(&h, me).map_err(|e| fail(e.to_string()))?;
            let mut payload = vec![0u8; h.payload_len as usize];
            s.read_exact(&mut payload).map_err(|e| io("reply", e))?;
            (h, payload, None)
        }
        Some((secret, key)) => {
            let (h, payload, remote) =
                join_secure(&mut s, secret, key, &query, me).map_err(fail)?;
            (h, payload, Some(remote))
        }
    };
    let members = frame::decode_members(&payload).map_err(|e| fail(e.to_string()))?;
    if members.first().map(|m| m.0) != Some(h.src) {
        return Err(fail(format!("{} does not list itself first", h.src)));
    }
    Ok((members, key))
}

/// The secure half of [`join`]: the Noise handshake, the query in a record right
/// behind its third message, and the reply read from records until its header and
/// payload are whole. Returns them and the member's static key.
fn join_secure(
    s: &mut std::net::TcpStream,
    secret: &ClusterSecret,
    key: &NodeKey,
    query: &[u8],
    me: NodeId,
) -> Result<(Header, Vec<u8>, PublicKey), String> {
    use secure::Opened;
    use std::io::{Read, Write};
    let (mut link, first) = Link::dialer(secret, key).map_err(|e| e.to_string())?;
    s.write_all(&first).map_err(|e| format!("send: {e}"))?;
    let mut plain = vec![0u8; secure::MAX_PLAIN];
    let mut got = Vec::new();
    let mut header: Option<Header> = None;
    let mut secured = false;
    loop {
        match link.open(&mut plain).map_err(|e| format!("reply: {e}"))? {
            Opened::Secured if !secured => {
                secured = true;
                let mut out = link.take_handshake_out();
                out.extend_from_slice(link.seal_bytes(query).map_err(|e| e.to_string())?);
                s.write_all(&out).map_err(|e| format!("send: {e}"))?;
                continue;
            }
            Opened::Plain(n) if secured => got.extend_from_slice(&plain[..n]),
            Opened::NeedMore => {
                let n = s.read(link.read_buf()).map_err(|e| format!("reply: {e}"))?;
                if n == 0 {
                    return Err("reply: end of stream".into());
                }
                link.filled(n);
            }
            other => return Err(format!("reply: unexpected {other:?}")),
        }
        if header.is_none() && got.len() >= HEADER_LEN {
            let h = Header::parse(&got[..HEADER_LEN]).map_err(|e| format!("reply header: {e}"))?;
            frame::check_join_reply(&h, me).map_err(|e| e.to_string())?;
            header = Some(h);
        }
        if let Some(h) = header {
            let total = HEADER_LEN + h.payload_len as usize;
            if got.len() >= total {
                got.truncate(total);
                let remote = link.remote_key().ok_or("no static key")?;
                return Ok((h, got.split_off(HEADER_LEN), remote));
            }
        }
    }
}

/// A monotonic clock that gives the `now` the fabric wants: nanoseconds since it was
/// made.
#[derive(Clone, Copy, Debug)]
pub struct Clock(std::time::Instant);

impl Clock {
    /// A clock starting now.
    pub fn new() -> Clock {
        Clock(std::time::Instant::now())
    }

    /// Nanoseconds since the clock was made.
    pub fn now(&self) -> Instant {
        Instant(nanos(self.0.elapsed()))
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::new()
    }
}

/// `nodes` fabrics in one process, with ids `0..nodes`, on 127.0.0.1 and ephemeral ports,
/// each knowing every other's address; `config` gives every other setting (its `node`,
/// `listen` and `peers` are replaced). A `config` with neither a secret nor
/// `danger_insecure` gets a fresh random secret the fabrics share (they are one cluster,
/// made in one place; nothing is read from or written to a secret file). Each node gets
/// a fresh static key ([`TcpConfig::key`]; its fabric's [`TcpFabric::config`] shows it,
/// to restart the node with it); a `config` with a roster (any, even empty) gets
/// instead the roster of exactly these nodes and keys, so every node refuses any other.
/// Nothing connects until the fabrics are polled.
///
/// Public API, not only a test helper: `hamlyn bench` runs its in-process TCP engines
/// over it, and tests of the fabric and the engine use it.
pub fn tcp_cluster(nodes: usize, config: &TcpConfig) -> Result<Vec<TcpFabric>, TcpError> {
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut config = config.clone();
    if config.secret.is_none() && !config.danger_insecure {
        config.secret = Some(
            ClusterSecret::generate()
                .map_err(|_| TcpError::Config("no random bytes for the cluster's secret"))?,
        );
    }
    let mut keys = Vec::with_capacity(nodes);
    if !config.danger_insecure {
        for i in 0..nodes {
            let key = NodeKey::generate()
                .map_err(|_| TcpError::Config("no random bytes for a node key"))?;
            keys.push((NodeId(i as u32), key));
        }
    }
    let roster = config
        .roster
        .as_ref()
        .map(|_| Roster::from_keys(keys.iter().map(|(n, k)| (*n, k.public()))));
    let mut fabrics = Vec::with_capacity(nodes);
    for i in 0..nodes {
        let mut c = config.clone();
        c.node = NodeId(i as u32);
        c.listen = loopback;
        c.peers = Vec::new();
        c.key = keys.get(i).map(|(_, k)| k.clone());
        c.roster.clone_from(&roster);
        fabrics.push(TcpFabric::new(c)?);
    }
    let addrs: Vec<SocketAddr> = fabrics.iter().map(TcpFabric::local_addr).collect();
    for (i, f) in fabrics.iter_mut().enumerate() {
        for (j, &addr) in addrs.iter().enumerate() {
            if i != j {
                f.add_peer(NodeId(j as u32), addr)?;
            }
        }
    }
    Ok(fabrics)
}

/// The rail a packet must take, if it is pinned: a single-packet write goes on the rail
/// its (sending terminus, destination slot) pair hashes to, so one pair's messages never
/// overtake each other on different rails (docs/ARCHITECTURE.md, "Ordered delivery per
/// endpoint pair"). Multi-packet messages are striped over every rail as before; packet
/// counting does not care about their order.
fn pinned_rail(header: &Header, rails: usize) -> Option<usize> {
    let single = header
        .flags
        .contains(hamlyn_wire::Flags::FIRST | hamlyn_wire::Flags::LAST);
    if rails < 2 || header.op != hamlyn_wire::Op::Write || !single {
        return None;
    }
    let pair = (u64::from(header.request.terminus) << 32) | u64::from(header.slot.0);
    // A multiplicative hash (Fibonacci): pairs that differ in any bit spread over rails.
    let h = pair.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
    Some((h % rails as u64) as usize)
}
