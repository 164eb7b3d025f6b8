//! An engine's statistics: a typed snapshot ([`Stats`]) and its binary encoding, sent
//! page by page over the control protocol.
//!
//! A client asks `Request::Stats { section, start }` ([`crate::control::Request::Stats`])
//! and the engine answers `Reply::StatsPage { page, next }`: the [`StatsSection::Summary`]
//! (the engine's, the interface's and the fabric's counters, the registry) in one page,
//! and the ports, peers and slots as lists cut into pages that fit
//! [`crate::control::MAX_CONTROL_MSG`]. Each list is ordered by a key (client id, node id,
//! slot number); `start` is the first key wanted and `next` the key to ask for next
//! (`None`: the list is complete). [`fetch`] does the whole walk. Pages are taken one at a
//! time, so a snapshot of a busy engine mixes moments (a slot created between two pages
//! may be missing); each page is consistent in itself.
//!
//! Encoding: little-endian ([`crate::codec`]); counters are `u64`, ids `u32`, booleans one
//! byte (0 or 1), options a presence byte (0 or 1) then the value, lists a `u32` count then
//! the items, named counts ([`Counts`]) a `u32` count then (`u32` length, UTF-8 name,
//! `u64` count) pairs. Decoding checks every length and value and never panics.
//!
//! With the `serde` feature every type here derives `Serialize` and `Deserialize`
//! (`hamlyn stat --json` is the JSON of a [`Stats`]).

use std::collections::BTreeMap;

use crate::codec::{Reader, Writer};
use crate::control::{mode, Reply, Request, MAX_CONTROL_MSG};
use crate::error::WireError;

/// Counts by name (reject reasons, close reasons), sorted by name; only non-zero counts
/// are listed.
pub type Counts = BTreeMap<String, u64>;

/// Longest name in [`Counts`], in bytes.
pub const MAX_COUNT_NAME: usize = 64;
/// Most entries of one [`Counts`].
pub const MAX_COUNTS: usize = 256;
/// Bytes of list items an engine puts in one page: the rest of a control message is room
/// for the reply's tag, the page header and the last item.
pub const PAGE_BUDGET: usize = MAX_CONTROL_MSG - 8 * 1024;

/// Declares a struct of `u64` counters with its encoding (every field in order).
macro_rules! counters {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* $field:ident,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        pub struct $name {
            $($(#[$fm])* pub $field: u64,)*
        }

        impl $name {
            fn put(&self, w: &mut Writer) {
                $(w.u64(self.$field);)*
            }

            fn get(r: &mut Reader<'_>) -> Result<$name, WireError> {
                Ok($name { $($field: r.u64()?,)* })
            }
        }
    };
}

/// A snapshot of an engine's statistics (what `hamlyn stat` shows).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Stats {
    /// The engine's node id.
    pub node: u32,
    /// The engine's incarnation (a restarted engine is a new one).
    pub incarnation: u32,
    /// The engine's own counters.
    pub engine: EngineCounters,
    /// The delivery interface's counters (every packet the engine checked).
    pub interface: InterfaceCounters,
    /// One entry per attached client's port, by client id.
    pub ports: Vec<PortStats>,
    /// Other nodes the engine or its fabric knows, by node id (none without a fabric).
    pub peers: Vec<PeerStats>,
    /// The fabric's own counters, if the engine has a fabric that keeps any.
    pub fabric: Option<FabricStats>,
    /// Areas registered.
    pub areas: u64,
    /// The cluster's name registry as this engine sees it.
    pub registry: RegistryStats,
    /// Every slot, by slot number.
    pub slots: Vec<SlotStats>,
}

impl Stats {
    /// The peer `node`, if listed.
    pub fn peer(&self, node: u32) -> Option<&PeerStats> {
        self.peers.iter().find(|p| p.node == node)
    }

    /// The slot `slot`, if listed.
    pub fn slot(&self, slot: u32) -> Option<&SlotStats> {
        self.slots.iter().find(|s| s.slot == slot)
    }

    /// The port of client `client`, if listed.
    pub fn port(&self, client: u32) -> Option<&PortStats> {
        self.ports.iter().find(|p| p.client == client)
    }
}

counters! {
    /// Counters the engine keeps beyond the interface's: what each of its parts did.
    pub struct EngineCounters {
        /// Clients that attached.
        attaches,
        /// Clients that said goodbye (`Detach`) before closing their socket.
        clients_detached,
        /// Clients whose socket closed without a goodbye (a crash, a kill, or a client
        /// that never detached).
        clients_lost,
        /// Requests taken from termini.
        requests,
        /// Requests that did not decode or segment.
        bad_requests,
        /// Requests finished (successfully or not).
        completed,
        /// Error completions handed to clients.
        error_completions,
        /// Packets delivered here or sent to other nodes.
        packets,
        /// Payload bytes delivered here or sent to other nodes.
        bytes,
        /// Notifications posted.
        notifications,
        /// Notifications refused by a full queue (counted in the queue too).
        queue_overflows,
        /// Notifications for a queue whose client is gone.
        orphan_notifications,
        /// Terminus rings found corrupt (and no longer served).
        corrupt_rings,
        /// Control messages that did not decode.
        bad_control,
        /// Times the engine went to sleep.
        sleeps,
        /// Packets received from other nodes and committed.
        remote_packets,
        /// Payload bytes received from other nodes.
        remote_bytes,
        /// NACKs received from other nodes.
        nacks_received,
        /// NACKs sent to other nodes.
        nacks_sent,
        /// NACKs whose destination could not be reached.
        nacks_undeliverable,
        /// Packets whose header named another source than the connection they came on.
        spoofed_packets,
        /// Peers lost.
        peers_lost,
        /// Remote atomics executed.
        atomics,
        /// Registry answers that could not be sent back.
        registry_undeliverable,
        /// Packets from the fabric addressed to another node.
        misaddressed_packets,
        /// Direct slots mapped for a ticket holder (`OpenDirect` granted).
        direct_opens,
        /// `OpenDirect` requests refused.
        direct_refusals,
        /// Polls of the fabric put off because NACKs to send or answers to reads and
        /// atomics were backed up (back-pressure on the peers; nothing is dropped).
        fabric_polls_held,
        /// Turns a client's termini were not served because error completions for it were
        /// backed up (its error ring full): back-pressure on that client only.
        termini_held,
        /// Error completions for NACKs beyond any a client's own sends can explain (more
        /// than the hard cap backed up while its termini were held): forged NACKs,
        /// counted and not kept.
        errors_dropped,
        /// Control requests refused because a client's quota (or the engine's mapping
        /// budget) would be exceeded.
        quota_refusals,
        /// Connections closed because they did not attach in time.
        idle_closed,
        /// Connections refused at once: the engine's `max_clients`, or the connecting
        /// user's share of it, was reached.
        connections_refused,
        /// Wake-ups that found no work (a timer, or a doorbell rung for nothing): the
        /// engine went straight back to sleep, without its spin.
        idle_wakes,
        /// Sends already finished that failed later with `PeerDown`: the session that
        /// carried them was lost before the receiving node acknowledged their packets.
        sends_unconfirmed,
        /// NACKs refused: they named no request sent to the peer that sent them (forged,
        /// or a request older than the window kept per peer).
        unmatched_nacks,
        /// Answer packets (`READ_RESP`, `ATOMIC_RESP`) refused: no read or atomic of that
        /// id was sent to their sender, or they fell outside the range it named.
        unexpected_answers,
        /// Reads and atomics failed after they were sent: their peer went down before
        /// answering, or their answer was refused by the reply slot here.
        answers_lost,
        /// Goodbyes (`Detach`) after which requests the client had queued were still
        /// unsent when the engine stopped sending them (it spends a bounded number of
        /// turns on them; the rest goes with the client).
        drains_cut,
        /// Requests the engine found by its sweep of the termini rather than by the
        /// client's ready hint (`hamlyn_shm::ready`): a client that sets no hints, or a
        /// push that came between a turn's look at the hints and its sweep.
        found_by_sweep,
        /// Times a port idle for a while went cold (`hamlyn_shm::ready::COLD`): its
        /// ready words read now and then only, its doorbell left armed, so its next
        /// push rings (or its own turn reads every port).
        ports_gone_cold,
        /// Packets a terminus's visit delivered here after its first (its quantum: the
        /// next small single-packet writes of a stream to this node, `EngineState::visit`):
        /// turns this saved.
        quantum_packets,
        /// Packets sent to other nodes (counted in `packets` too).
        remote_sent,
        /// Rings of the engine's doorbell it took in: pushes of clients that found it
        /// asleep and could not run its turn themselves (clients of other processes,
        /// cold ports), each a system call of the client and a wake-up of the engine.
        doorbell_rings,
    }
}

/// The delivery interface's counters: every packet checked against the slot table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct InterfaceCounters {
    /// Packets accepted.
    pub packets: u64,
    /// Payload bytes accepted.
    pub bytes: u64,
    /// Messages completed.
    pub messages: u64,
    /// Notifications generated.
    pub notifications: u64,
    /// Packets refused, by reject reason (`bad_key`, `out_of_bounds`, ...).
    pub rejects: Counts,
}

/// One attached client's port.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PortStats {
    /// The client's id on this engine.
    pub client: u32,
    /// The client's process id.
    pub pid: u32,
    /// Termini in the port.
    pub termini: u32,
    /// Termini the client opened (served by the engine).
    pub termini_open: u32,
    /// Termini found corrupt and no longer served.
    pub termini_broken: u32,
    /// Notification queues in the port.
    pub queues: u32,
    /// Notifications refused by the port's full queues.
    pub queue_overflows: u64,
    /// The rate limits of its rate-limited termini.
    #[cfg_attr(feature = "serde", serde(default))]
    pub rates: Vec<TerminusRate>,
}

/// A rate-limited terminus: its token buckets' rates and what they did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TerminusRate {
    /// The terminus's index in its port.
    pub terminus: u16,
    /// Payload bytes per second allowed (0: unlimited).
    pub bytes_per_sec: u64,
    /// Messages per second allowed (0: unlimited).
    pub msgs_per_sec: u64,
    /// Messages let through.
    pub passed: u64,
    /// Payload bytes let through.
    pub passed_bytes: u64,
    /// Turns a message waited for tokens.
    pub held: u64,
}

/// Most rate entries a port's statistics may carry (a port has at most 64 termini).
const MAX_RATES: u16 = 1024;

/// Another node, as the engine and its fabric see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PeerStats {
    /// Its node id.
    pub node: u32,
    /// Whether the engine holds it up (announced up by the fabric and not down since).
    pub up: bool,
    /// Its incarnation as last announced (0: never up).
    pub incarnation: u32,
    /// The fabric's view of the connection to it, if the fabric keeps one.
    pub link: Option<LinkStats>,
}

/// The state of a fabric's connection to a peer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum LinkState {
    /// Not up yet and not announced down (the first session is being set up).
    #[default]
    Connecting,
    /// Up.
    Up,
    /// Announced down.
    Down,
}

counters! {
    /// Traffic of a fabric's connection to one peer, over all its sessions.
    pub struct LinkCounters {
        /// Packets accepted for this peer.
        packets_sent,
        /// Their bytes (header, metadata and payload).
        bytes_sent,
        /// Packets from this peer delivered to the engine (accepted or discarded).
        packets_received,
        /// Their bytes (header, metadata and payload).
        bytes_received,
        /// Heartbeats sent.
        heartbeats_sent,
        /// Heartbeats received.
        heartbeats_received,
        /// Sends refused because the connection was full.
        refused_full,
        /// Sends refused because the peer was down.
        refused_down,
        /// Times the peer came up.
        ups,
        /// Times it went down.
        downs,
        /// Sessions this node started dialing (first connection and every reconnection).
        dials,
        /// Dialed sessions that failed before coming up.
        dial_failures,
        /// Reads of its rails' sockets that found nothing, over all its sessions: what
        /// looking for input costs (a system call each; with a busy-polling fabric, one
        /// per rail on every poll while the caller does not stream).
        empty_reads,
    }
}

/// A fabric's connection to one peer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LinkStats {
    /// The connection's state.
    pub state: LinkState,
    /// Rails (connections) of the current session whose handshake is complete.
    pub rails_up: u32,
    /// Rails a session has.
    pub rails: u32,
    /// Its traffic.
    pub counters: LinkCounters,
}

/// The fabric's own counters, by kind of fabric.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "kind", rename_all = "snake_case"))]
#[non_exhaustive]
pub enum FabricStats {
    /// The TCP fabric.
    Tcp(TcpCounters),
    /// The simulated network (counters of the whole net).
    Sim(SimCounters),
    /// An in-process channel between two engines (tests).
    Channel(ChannelCounters),
}

/// The TCP fabric's counters (per-peer ones are in [`LinkStats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TcpCounters {
    /// Rails (TCP connections) per peer session.
    pub rails: u32,
    /// Connections accepted by the listener.
    pub accepted: u64,
    /// Connections dialed.
    pub dialed: u64,
    /// Connections closed because their bytes broke the framing.
    pub frame_errors: u64,
    /// Connections closed because the other end broke the protocol.
    pub violations: u64,
    /// Links are authenticated with the cluster secret (false: `--danger-insecure`).
    pub authenticated: bool,
    /// Connections whose other end did not prove it holds the cluster secret (a wrong
    /// secret, an insecure node, a replayed handshake, garbage).
    pub auth_failures: u64,
    /// Connections closed because a frame did not authenticate (altered, injected or
    /// replayed on the way).
    pub frames_refused: u64,
    /// Peers that dialed in, stayed down a peer timeout and were dropped from the peer
    /// table (state a node id that went away no longer holds).
    pub peers_forgotten: u64,
    /// Closed connections by reason (`PeerClosed`, `HeartbeatTimeout`, ...).
    pub closes: Counts,
}

counters! {
    /// The simulated network's counters.
    pub struct SimCounters {
        /// Packets accepted by a send.
        sent,
        /// Packets whose payload was accepted by a sink.
        delivered,
        /// Packets a sink discarded after seeing the header.
        discarded,
        /// Packets lost to a cut link or a crash.
        dropped_by_fault,
        /// Sends refused because a link was full.
        refused_full,
        /// Sends refused because the peer was down.
        refused_down,
        /// Packets lost because a sink gave a payload buffer of the wrong length.
        sink_errors,
    }
}

counters! {
    /// An in-process channel fabric's counters.
    pub struct ChannelCounters {
        /// Packets sent.
        packets_sent,
        /// Packets received.
        packets_received,
    }
}

/// The cluster's name registry as one engine sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RegistryStats {
    /// The node holding the registry.
    pub home: u32,
    /// Names this engine holds (0 unless it is the registry's home).
    pub names: u64,
}

/// A slot's mode, as statistics name it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum SlotMode {
    /// Normal.
    #[default]
    Normal,
    /// Paranoid.
    Paranoid,
    /// Paranoid one-shot.
    ParanoidOneShot,
    /// Fast.
    Fast,
    /// A receive endpoint.
    Endpoint,
    /// A mode this build has no name for.
    Other,
}

/// Wire code of [`SlotMode::Other`].
const MODE_OTHER: u8 = 255;

impl SlotMode {
    fn code(self) -> u8 {
        match self {
            SlotMode::Normal => mode::NORMAL,
            SlotMode::Paranoid => mode::PARANOID,
            SlotMode::ParanoidOneShot => mode::PARANOID_ONE_SHOT,
            SlotMode::Fast => mode::FAST,
            SlotMode::Endpoint => mode::ENDPOINT,
            SlotMode::Other => MODE_OTHER,
        }
    }

    fn from_code(v: u8) -> Result<SlotMode, WireError> {
        Ok(match v {
            mode::NORMAL => SlotMode::Normal,
            mode::PARANOID => SlotMode::Paranoid,
            mode::PARANOID_ONE_SHOT => SlotMode::ParanoidOneShot,
            mode::FAST => SlotMode::Fast,
            mode::ENDPOINT => SlotMode::Endpoint,
            MODE_OTHER => SlotMode::Other,
            _ => return Err(invalid("slot mode", "unknown code")),
        })
    }

    /// The mode's lower-case name (`normal`, `paranoid_one_shot`, ...).
    pub fn name(self) -> &'static str {
        match self {
            SlotMode::Normal => "normal",
            SlotMode::Paranoid => "paranoid",
            SlotMode::ParanoidOneShot => "paranoid_one_shot",
            SlotMode::Fast => "fast",
            SlotMode::Endpoint => "endpoint",
            SlotMode::Other => "other",
        }
    }
}

/// One slot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SlotStats {
    /// Its number.
    pub slot: u32,
    /// The client that owns it.
    pub owner: u32,
    /// Its mode.
    pub mode: SlotMode,
    /// Bytes it covers.
    pub len: u64,
    /// Revoked (every ticket refused until it is rekeyed).
    pub revoked: bool,
    /// Write-inhibited.
    pub inhibited: bool,
    /// Created with direct access allowed.
    pub direct: bool,
    /// Packets accepted into it.
    pub packets: u64,
    /// Payload bytes accepted into it.
    pub bytes: u64,
    /// Messages completed in it.
    pub messages: u64,
    /// Packets refused for it, by reject reason.
    pub rejects: Counts,
    /// What a receive endpoint holds and did (endpoint slots only).
    #[cfg_attr(feature = "serde", serde(default))]
    pub endpoint: Option<EndpointStats>,
}

/// A receive endpoint's resources and counters (seed 002's resource control, visible).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct EndpointStats {
    /// Bytes per buffer.
    pub buf_size: u32,
    /// Buffers it owns.
    pub buffers: u32,
    /// Discards are reported to senders, not only counted.
    pub report_discards: bool,
    /// Buffers posted and not yet filled, when the statistics were taken (read from the
    /// receiver's ring, so only as true as the receiver keeps it).
    pub posted: u64,
    /// Messages deposited into posted buffers.
    pub delivered: u64,
    /// Messages discarded for want of a posted buffer.
    pub discarded: u64,
    /// Packets refused because the ring held impossible indices.
    pub corrupt: u64,
}

/// A part of the statistics, asked for in one `Request::Stats`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum StatsSection {
    /// Everything but the lists ([`StatsSummary`]), in one page.
    Summary = 0,
    /// The ports, by client id.
    Ports = 1,
    /// The peers, by node id.
    Peers = 2,
    /// The slots, by slot number.
    Slots = 3,
}

impl StatsSection {
    /// The section for a wire value.
    pub fn from_u8(v: u8) -> Option<StatsSection> {
        [
            StatsSection::Summary,
            StatsSection::Ports,
            StatsSection::Peers,
            StatsSection::Slots,
        ]
        .into_iter()
        .find(|s| *s as u8 == v)
    }
}

/// Everything in [`Stats`] but the lists of ports, peers and slots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct StatsSummary {
    /// See [`Stats::node`].
    pub node: u32,
    /// See [`Stats::incarnation`].
    pub incarnation: u32,
    /// See [`Stats::engine`].
    pub engine: EngineCounters,
    /// See [`Stats::interface`].
    pub interface: InterfaceCounters,
    /// See [`Stats::fabric`].
    pub fabric: Option<FabricStats>,
    /// See [`Stats::areas`].
    pub areas: u64,
    /// See [`Stats::registry`].
    pub registry: RegistryStats,
}

/// One page of statistics: the answer to a `Request::Stats`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatsPage {
    /// The summary (boxed: it is much larger than a list's handle).
    Summary(Box<StatsSummary>),
    /// Ports from the requested client id on.
    Ports(Vec<PortStats>),
    /// Peers from the requested node id on.
    Peers(Vec<PeerStats>),
    /// Slots from the requested slot number on.
    Slots(Vec<SlotStats>),
}

impl StatsPage {
    /// The section the page belongs to.
    pub fn section(&self) -> StatsSection {
        match self {
            StatsPage::Summary(_) => StatsSection::Summary,
            StatsPage::Ports(_) => StatsSection::Ports,
            StatsPage::Peers(_) => StatsSection::Peers,
            StatsPage::Slots(_) => StatsSection::Slots,
        }
    }

    /// Appends the page's bytes (after the reply tag).
    pub(crate) fn put(&self, w: &mut Writer) {
        w.u8(self.section() as u8);
        match self {
            StatsPage::Summary(s) => s.put(w),
            StatsPage::Ports(v) => list(w, v),
            StatsPage::Peers(v) => list(w, v),
            StatsPage::Slots(v) => list(w, v),
        }
    }

    /// Reads a page written by [`StatsPage::put`].
    pub(crate) fn get(r: &mut Reader<'_>) -> Result<StatsPage, WireError> {
        let section =
            StatsSection::from_u8(r.u8()?).ok_or(invalid("stats section", "unknown section"))?;
        Ok(match section {
            StatsSection::Summary => StatsPage::Summary(Box::new(StatsSummary::get(r)?)),
            StatsSection::Ports => StatsPage::Ports(get_list(r)?),
            StatsSection::Peers => StatsPage::Peers(get_list(r)?),
            StatsSection::Slots => StatsPage::Slots(get_list(r)?),
        })
    }
}

/// An item of a paged list: its key and its encoding.
pub trait PageItem: Sized {
    /// The key the list is ordered by (client id, node id, slot number).
    fn key(&self) -> u32;
    /// Appends the item's bytes.
    fn put(&self, w: &mut Writer);
    /// Reads an item.
    fn get(r: &mut Reader<'_>) -> Result<Self, WireError>;
}

/// Takes items (in increasing key order) while they fit [`PAGE_BUDGET`]; returns them and
/// the key of the first item left out (`None`: none was). A page always holds at least
/// one item, so a walk always progresses.
pub fn fill_page<T: PageItem>(items: impl IntoIterator<Item = T>) -> (Vec<T>, Option<u32>) {
    let mut out = Vec::new();
    let mut w = Writer::new();
    for item in items {
        item.put(&mut w);
        if w.0.len() > PAGE_BUDGET && !out.is_empty() {
            return (out, Some(item.key()));
        }
        out.push(item);
    }
    (out, None)
}

/// Why [`fetch`] could not assemble the statistics.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError<E> {
    /// A round trip to the engine failed.
    #[error("asking the engine for its statistics failed: {0}")]
    Ask(E),
    /// The engine refused.
    #[error("the engine refused its statistics (code {code}): {message}")]
    Refused {
        /// A [`crate::control::ControlErrorCode`] value.
        code: u16,
        /// The engine's explanation.
        message: String,
    },
    /// The engine answered something else than the page asked for.
    #[error("the engine answered a statistics request with something else")]
    Unexpected,
    /// The engine named a next page that does not come after the one asked for.
    #[error("the engine's statistics pages do not progress")]
    NoProgress,
}

/// Assembles a whole [`Stats`] from pages, asking with `ask` (one control round trip per
/// call): the summary, then every page of ports, peers and slots.
pub fn fetch<E>(mut ask: impl FnMut(&Request) -> Result<Reply, E>) -> Result<Stats, FetchError<E>> {
    let mut page = |section: StatsSection, start: u32| -> Result<_, FetchError<E>> {
        match ask(&Request::Stats { section, start }).map_err(FetchError::Ask)? {
            Reply::StatsPage { page, next } if page.section() == section => {
                if next.is_some_and(|n| n <= start) {
                    return Err(FetchError::NoProgress);
                }
                Ok((page, next))
            }
            Reply::Error { code, message } => Err(FetchError::Refused { code, message }),
            _ => Err(FetchError::Unexpected),
        }
    };
    let StatsPage::Summary(s) = page(StatsSection::Summary, 0)?.0 else {
        return Err(FetchError::Unexpected);
    };
    let s = *s;
    let mut stats = Stats {
        node: s.node,
        incarnation: s.incarnation,
        engine: s.engine,
        interface: s.interface,
        fabric: s.fabric,
        areas: s.areas,
        registry: s.registry,
        ..Stats::default()
    };
    for section in [
        StatsSection::Ports,
        StatsSection::Peers,
        StatsSection::Slots,
    ] {
        let mut start = 0;
        loop {
            let (p, next) = page(section, start)?;
            match p {
                StatsPage::Ports(v) => stats.ports.extend(v),
                StatsPage::Peers(v) => stats.peers.extend(v),
                StatsPage::Slots(v) => stats.slots.extend(v),
                StatsPage::Summary(_) => return Err(FetchError::Unexpected),
            }
            match next {
                Some(n) => start = n,
                None => break,
            }
        }
    }
    Ok(stats)
}

fn invalid(field: &'static str, why: &'static str) -> WireError {
    WireError::InvalidField { field, why }
}

fn put_bool(w: &mut Writer, v: bool) {
    w.u8(u8::from(v));
}

fn get_bool(r: &mut Reader<'_>, field: &'static str) -> Result<bool, WireError> {
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(invalid(field, "must be 0 or 1")),
    }
}

fn u32_len(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn put_counts(w: &mut Writer, c: &Counts) {
    let n = c.len().min(MAX_COUNTS);
    w.u32(u32_len(n));
    for (name, v) in c.iter().take(n) {
        let mut end = name.len().min(MAX_COUNT_NAME);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        w.bytes(&name.as_bytes()[..end]).u64(*v);
    }
}

fn get_counts(r: &mut Reader<'_>) -> Result<Counts, WireError> {
    let n = r.u32()? as usize;
    if n > MAX_COUNTS {
        return Err(invalid("counts", "too many entries"));
    }
    let mut c = Counts::new();
    for _ in 0..n {
        let b = r.bytes(MAX_COUNT_NAME)?;
        let name = std::str::from_utf8(b).map_err(|_| invalid("count name", "not UTF-8"))?;
        let v = r.u64()?;
        if c.insert(name.to_owned(), v).is_some() {
            return Err(invalid("counts", "a name appears twice"));
        }
    }
    Ok(c)
}

fn list<T: PageItem>(w: &mut Writer, v: &[T]) {
    w.u32(u32_len(v.len()));
    for item in v {
        item.put(w);
    }
}

fn get_list<T: PageItem>(r: &mut Reader<'_>) -> Result<Vec<T>, WireError> {
    let n = r.u32()?;
    // No allocation from the count: items are pushed as they decode, and a count larger
    // than the bytes left fails at the first missing item.
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(T::get(r)?);
    }
    Ok(v)
}

impl InterfaceCounters {
    fn put(&self, w: &mut Writer) {
        w.u64(self.packets)
            .u64(self.bytes)
            .u64(self.messages)
            .u64(self.notifications);
        put_counts(w, &self.rejects);
    }

    fn get(r: &mut Reader<'_>) -> Result<InterfaceCounters, WireError> {
        Ok(InterfaceCounters {
            packets: r.u64()?,
            bytes: r.u64()?,
            messages: r.u64()?,
            notifications: r.u64()?,
            rejects: get_counts(r)?,
        })
    }
}

impl FabricStats {
    fn put(&self, w: &mut Writer) {
        match self {
            FabricStats::Tcp(t) => {
                w.u8(1)
                    .u32(t.rails)
                    .u64(t.accepted)
                    .u64(t.dialed)
                    .u64(t.frame_errors)
                    .u64(t.violations);
                put_bool(w, t.authenticated);
                w.u64(t.auth_failures)
                    .u64(t.frames_refused)
                    .u64(t.peers_forgotten);
                put_counts(w, &t.closes);
            }
            FabricStats::Sim(s) => {
                w.u8(2);
                s.put(w);
            }
            FabricStats::Channel(c) => {
                w.u8(3);
                c.put(w);
            }
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<FabricStats, WireError> {
        Ok(match r.u8()? {
            1 => FabricStats::Tcp(TcpCounters {
                rails: r.u32()?,
                accepted: r.u64()?,
                dialed: r.u64()?,
                frame_errors: r.u64()?,
                violations: r.u64()?,
                authenticated: get_bool(r, "authenticated")?,
                auth_failures: r.u64()?,
                frames_refused: r.u64()?,
                peers_forgotten: r.u64()?,
                closes: get_counts(r)?,
            }),
            2 => FabricStats::Sim(SimCounters::get(r)?),
            3 => FabricStats::Channel(ChannelCounters::get(r)?),
            _ => return Err(invalid("fabric kind", "unknown kind")),
        })
    }
}

impl StatsSummary {
    fn put(&self, w: &mut Writer) {
        w.u32(self.node).u32(self.incarnation);
        self.engine.put(w);
        self.interface.put(w);
        match &self.fabric {
            None => {
                w.u8(0);
            }
            Some(f) => {
                w.u8(1);
                f.put(w);
            }
        }
        w.u64(self.areas)
            .u32(self.registry.home)
            .u64(self.registry.names);
    }

    fn get(r: &mut Reader<'_>) -> Result<StatsSummary, WireError> {
        Ok(StatsSummary {
            node: r.u32()?,
            incarnation: r.u32()?,
            engine: EngineCounters::get(r)?,
            interface: InterfaceCounters::get(r)?,
            fabric: if get_bool(r, "fabric present")? {
                Some(FabricStats::get(r)?)
            } else {
                None
            },
            areas: r.u64()?,
            registry: RegistryStats {
                home: r.u32()?,
                names: r.u64()?,
            },
        })
    }
}

impl PageItem for PortStats {
    fn key(&self) -> u32 {
        self.client
    }

    fn put(&self, w: &mut Writer) {
        w.u32(self.client)
            .u32(self.pid)
            .u32(self.termini)
            .u32(self.termini_open)
            .u32(self.termini_broken)
            .u32(self.queues)
            .u64(self.queue_overflows);
        let n = self.rates.len().min(usize::from(MAX_RATES));
        w.u16(n as u16);
        for r in &self.rates[..n] {
            w.u16(r.terminus)
                .u64(r.bytes_per_sec)
                .u64(r.msgs_per_sec)
                .u64(r.passed)
                .u64(r.passed_bytes)
                .u64(r.held);
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<PortStats, WireError> {
        Ok(PortStats {
            client: r.u32()?,
            pid: r.u32()?,
            termini: r.u32()?,
            termini_open: r.u32()?,
            termini_broken: r.u32()?,
            queues: r.u32()?,
            queue_overflows: r.u64()?,
            rates: {
                let n = r.u16()?;
                if n > MAX_RATES {
                    return Err(invalid("rates", "too many"));
                }
                let mut v = Vec::with_capacity(usize::from(n));
                for _ in 0..n {
                    v.push(TerminusRate {
                        terminus: r.u16()?,
                        bytes_per_sec: r.u64()?,
                        msgs_per_sec: r.u64()?,
                        passed: r.u64()?,
                        passed_bytes: r.u64()?,
                        held: r.u64()?,
                    });
                }
                v
            },
        })
    }
}

impl LinkState {
    fn code(self) -> u8 {
        match self {
            LinkState::Connecting => 0,
            LinkState::Up => 1,
            LinkState::Down => 2,
        }
    }

    fn from_code(v: u8) -> Result<LinkState, WireError> {
        Ok(match v {
            0 => LinkState::Connecting,
            1 => LinkState::Up,
            2 => LinkState::Down,
            _ => return Err(invalid("link state", "unknown state")),
        })
    }

    /// The state's lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            LinkState::Connecting => "connecting",
            LinkState::Up => "up",
            LinkState::Down => "down",
        }
    }
}

impl PageItem for PeerStats {
    fn key(&self) -> u32 {
        self.node
    }

    fn put(&self, w: &mut Writer) {
        w.u32(self.node);
        put_bool(w, self.up);
        w.u32(self.incarnation);
        match &self.link {
            None => {
                w.u8(0);
            }
            Some(l) => {
                w.u8(1).u8(l.state.code()).u32(l.rails_up).u32(l.rails);
                l.counters.put(w);
            }
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<PeerStats, WireError> {
        Ok(PeerStats {
            node: r.u32()?,
            up: get_bool(r, "up")?,
            incarnation: r.u32()?,
            link: if get_bool(r, "link present")? {
                Some(LinkStats {
                    state: LinkState::from_code(r.u8()?)?,
                    rails_up: r.u32()?,
                    rails: r.u32()?,
                    counters: LinkCounters::get(r)?,
                })
            } else {
                None
            },
        })
    }
}

impl PageItem for SlotStats {
    fn key(&self) -> u32 {
        self.slot
    }

    fn put(&self, w: &mut Writer) {
        w.u32(self.slot)
            .u32(self.owner)
            .u8(self.mode.code())
            .u64(self.len);
        put_bool(w, self.revoked);
        put_bool(w, self.inhibited);
        put_bool(w, self.direct);
        w.u64(self.packets).u64(self.bytes).u64(self.messages);
        put_counts(w, &self.rejects);
        match &self.endpoint {
            None => {
                w.u8(0);
            }
            Some(e) => {
                w.u8(1).u32(e.buf_size).u32(e.buffers);
                put_bool(w, e.report_discards);
                w.u64(e.posted)
                    .u64(e.delivered)
                    .u64(e.discarded)
                    .u64(e.corrupt);
            }
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<SlotStats, WireError> {
        Ok(SlotStats {
            slot: r.u32()?,
            owner: r.u32()?,
            mode: SlotMode::from_code(r.u8()?)?,
            len: r.u64()?,
            revoked: get_bool(r, "revoked")?,
            inhibited: get_bool(r, "inhibited")?,
            direct: get_bool(r, "direct")?,
            packets: r.u64()?,
            bytes: r.u64()?,
            messages: r.u64()?,
            rejects: get_counts(r)?,
            endpoint: match r.u8()? {
                0 => None,
                1 => Some(EndpointStats {
                    buf_size: r.u32()?,
                    buffers: r.u32()?,
                    report_discards: get_bool(r, "report_discards")?,
                    posted: r.u64()?,
                    delivered: r.u64()?,
                    discarded: r.u64()?,
                    corrupt: r.u64()?,
                }),
                _ => return Err(invalid("endpoint", "presence must be 0 or 1")),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;

    fn counts(pairs: &[(&str, u64)]) -> Counts {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    fn slot(n: u32) -> SlotStats {
        SlotStats {
            slot: n,
            owner: 1,
            mode: SlotMode::ParanoidOneShot,
            len: 4096,
            revoked: n % 2 == 0,
            inhibited: true,
            direct: false,
            packets: 9,
            bytes: 4096,
            messages: 3,
            rejects: counts(&[("bad_key", 1), ("out_of_bounds", 2)]),
            endpoint: (n % 3 == 0).then_some(EndpointStats {
                buf_size: 256,
                buffers: 8,
                report_discards: true,
                posted: 3,
                delivered: 10,
                discarded: 2,
                corrupt: 1,
            }),
        }
    }

    fn pages() -> Vec<StatsPage> {
        vec![
            StatsPage::Summary(Box::new(StatsSummary {
                node: 3,
                incarnation: 77,
                engine: EngineCounters {
                    attaches: 2,
                    clients_lost: 1,
                    direct_refusals: 5,
                    ..EngineCounters::default()
                },
                interface: InterfaceCounters {
                    packets: 9,
                    bytes: 4096,
                    messages: 9,
                    notifications: 9,
                    rejects: counts(&[("bad_key", 1)]),
                },
                fabric: Some(FabricStats::Tcp(TcpCounters {
                    rails: 3,
                    accepted: 1,
                    dialed: 2,
                    frame_errors: 0,
                    violations: 2,
                    authenticated: true,
                    auth_failures: 1,
                    frames_refused: 1,
                    peers_forgotten: 3,
                    closes: counts(&[("PeerClosed", 4)]),
                })),
                areas: 3,
                registry: RegistryStats { home: 1, names: 2 },
            })),
            StatsPage::Summary(Box::new(StatsSummary {
                fabric: Some(FabricStats::Sim(SimCounters {
                    sent: 1,
                    sink_errors: 7,
                    ..SimCounters::default()
                })),
                ..StatsSummary::default()
            })),
            StatsPage::Summary(Box::new(StatsSummary {
                fabric: Some(FabricStats::Channel(ChannelCounters {
                    packets_sent: 1,
                    packets_received: 2,
                })),
                ..StatsSummary::default()
            })),
            StatsPage::Summary(Box::default()),
            StatsPage::Ports(vec![PortStats {
                client: 1,
                pid: 4242,
                termini: 4,
                termini_open: 1,
                termini_broken: 0,
                queues: 4,
                queue_overflows: 6,
                rates: vec![TerminusRate {
                    terminus: 2,
                    bytes_per_sec: 1 << 20,
                    msgs_per_sec: 0,
                    passed: 10,
                    passed_bytes: 640,
                    held: 3,
                }],
            }]),
            StatsPage::Peers(vec![
                PeerStats {
                    node: 2,
                    up: true,
                    incarnation: 7,
                    link: Some(LinkStats {
                        state: LinkState::Up,
                        rails_up: 3,
                        rails: 3,
                        counters: LinkCounters {
                            heartbeats_sent: 5,
                            heartbeats_received: 4,
                            empty_reads: 9,
                            ..LinkCounters::default()
                        },
                    }),
                },
                PeerStats {
                    node: 4,
                    up: false,
                    incarnation: 0,
                    link: None,
                },
            ]),
            StatsPage::Slots(vec![slot(1), slot(2)]),
            StatsPage::Slots(Vec::new()),
        ]
    }

    #[test]
    fn pages_round_trip_and_reject_truncation_and_trailing_bytes() {
        for page in pages() {
            for next in [None, Some(7)] {
                let rep = Reply::StatsPage {
                    page: page.clone(),
                    next,
                };
                let b = rep.encode();
                assert_eq!(Reply::decode(&b).unwrap(), rep);
                for n in 0..b.len() {
                    assert!(Reply::decode(&b[..n]).is_err(), "{rep:?} cut at {n}");
                }
                let mut longer = b.clone();
                longer.push(0);
                assert!(Reply::decode(&longer).is_err());
            }
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "65,536 slots: minutes under miri; the native run covers it"
    )]
    fn a_page_fits_a_control_message_and_progresses() {
        let all: Vec<SlotStats> = (0..65_536).map(slot).collect();
        let mut start = 0;
        let mut seen = 0;
        let mut pages = 0;
        loop {
            let (items, next) = fill_page(all.iter().filter(|s| s.slot >= start).cloned());
            assert!(!items.is_empty());
            let rep = Reply::StatsPage {
                page: StatsPage::Slots(items.clone()),
                next,
            };
            assert!(rep.encode().len() <= MAX_CONTROL_MSG);
            assert_eq!(items[0].slot, start);
            seen += items.len();
            pages += 1;
            match next {
                Some(n) => {
                    assert_eq!(n, items[items.len() - 1].slot + 1);
                    start = n;
                }
                None => break,
            }
        }
        assert_eq!(seen, 65_536);
        assert!(pages > 1);
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "5,000 slots: minutes under miri; the native run covers it"
    )]
    fn fetch_walks_every_page() {
        let all: Vec<SlotStats> = (0..5000).map(slot).collect();
        let mut asked = 0;
        let stats = fetch(|req| {
            asked += 1;
            let Request::Stats { section, start } = *req else {
                panic!("{req:?}")
            };
            let (page, next) = match section {
                StatsSection::Summary => (
                    StatsPage::Summary(Box::new(StatsSummary {
                        node: 5,
                        ..StatsSummary::default()
                    })),
                    None,
                ),
                StatsSection::Slots => {
                    let (v, next) = fill_page(all.iter().filter(|s| s.slot >= start).cloned());
                    (StatsPage::Slots(v), next)
                }
                StatsSection::Ports => (StatsPage::Ports(Vec::new()), None),
                _ => (StatsPage::Peers(Vec::new()), None),
            };
            // The bytes go through the codec as they would over the socket.
            Ok::<_, ()>(Reply::decode(&Reply::StatsPage { page, next }.encode()).unwrap())
        })
        .unwrap();
        assert_eq!(stats.node, 5);
        assert_eq!(stats.slots, all);
        assert!(asked > 4);

        let stuck = fetch(|req| {
            Ok::<_, ()>(match *req {
                Request::Stats {
                    section: StatsSection::Summary,
                    ..
                } => Reply::StatsPage {
                    page: StatsPage::Summary(Box::default()),
                    next: None,
                },
                _ => Reply::StatsPage {
                    page: StatsPage::Ports(Vec::new()),
                    next: Some(0),
                },
            })
        });
        assert!(matches!(stuck, Err(FetchError::NoProgress)));
        let wrong = fetch(|_| Ok::<_, ()>(Reply::Ok));
        assert!(matches!(wrong, Err(FetchError::Unexpected)));
    }

    proptest! {
        // Miri interprets every case: CI's miri step gets a handful.
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 16 } else { 4096 }))]

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = Reply::decode(&bytes);
            let _ = Request::decode(&bytes);
            // Behind a stats reply's tag, so the page decoder sees every input.
            let mut page = vec![9u8];
            page.extend_from_slice(&bytes);
            if let Ok(rep) = Reply::decode(&page) {
                prop_assert_eq!(Reply::decode(&rep.encode()), Ok(rep));
            }
        }

        #[test]
        fn mutated_pages_never_panic(at in 0usize..4096, byte in any::<u8>(), which in 0usize..8) {
            let all = pages();
            let rep = Reply::StatsPage { page: all[which % all.len()].clone(), next: Some(3) };
            let mut b = rep.encode();
            let i = at % b.len();
            b[i] = byte;
            let _ = Reply::decode(&b);
        }
    }
}
