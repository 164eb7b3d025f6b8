//! Counters of the TCP fabric: traffic per peer and per rail, sessions, and every closed
//! connection by reason.

use std::fmt;

use hamlyn_wire::stats::{Counts, LinkCounters, LinkState, LinkStats, TcpCounters};

/// Why a connection was closed. Each close is counted ([`CloseCounts`]); the ones that
/// mean a peer (or something pretending to be one) broke the protocol are logged with
/// `tracing::warn!` ([`CloseReason::is_violation`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum CloseReason {
    /// A header's magic number is wrong (not a Hamlyn stream, or lost framing).
    BadMagic,
    /// A header names a wire version this build does not speak.
    BadVersion,
    /// A header does not parse for another reason (op, flags, metadata length, fast mode).
    BadHeader,
    /// A header states a payload longer than the configured maximum.
    PayloadTooLong,
    /// The stream ended (or broke) inside a frame.
    Truncated,
    /// The first frame on a connection was not a HELLO.
    NoHello,
    /// A HELLO is malformed (rails out of range, body, self-connection, rail count or
    /// session that does not match the rest of its session).
    BadHello,
    /// A membership query (a HELLO with 0 rails, see [`crate::tcp::frame::JoinQuery`]) is
    /// malformed: a body, a port beyond 16 bits, our own node id.
    BadJoin,
    /// A HELLO names a node the fabric does not know, and learning peers is off.
    UnknownNode,
    /// A HELLO comes from, or is meant for, a node other than the one expected.
    WrongNode,
    /// A node with a higher id dialed us (the lower id always dials).
    UnexpectedDialer,
    /// A HELLO carries an incarnation older than one already seen from that node.
    StaleIncarnation,
    /// A HELLO names a session older than (or as old as) the latest one of that node.
    StaleSession,
    /// A HELLO names a rail of the current session that is already connected.
    DuplicateRail,
    /// A packet's source is not the connection's peer, or its destination is not us.
    Misaddressed,
    /// A HELLO arrived after the handshake.
    UnexpectedHello,
    /// A control packet (HELLO, heartbeat) carries metadata or payload.
    ControlBody,
    /// The handshake did not complete within the peer timeout.
    HandshakeTimeout,
    /// Nothing arrived on an established rail for the peer timeout.
    HeartbeatTimeout,
    /// Too many connections were waiting for their HELLO.
    TooManyHandshakes,
    /// An outgoing connection could not be established.
    ConnectFailed,
    /// A read or write failed (reset, broken pipe).
    Io,
    /// The peer closed the connection between frames.
    PeerClosed,
    /// Another rail of the same session closed, so the whole session was closed.
    SessionEnded,
    /// A newer session (or incarnation) of the same peer replaced this one.
    Superseded,
    /// A membership query was answered (the connection closes once the reply is sent).
    JoinAnswered,
    /// This fabric was shut down.
    Shutdown,
    /// The other end did not prove it holds the cluster secret: its handshake message
    /// was malformed or did not authenticate (a wrong secret, a `danger_insecure` node,
    /// garbage), or its first record did not open (a replayed handshake).
    AuthFailed,
    /// A record of an authenticated connection did not open: a frame altered,
    /// injected, replayed or reordered on the way.
    BadRecord,
    /// A HELLO from a node the fabric does not know would take the peer table past
    /// [`crate::tcp::TcpConfig::max_peers`].
    TooManyPeers,
    /// A heartbeat acknowledged more packets than were sent on the rail.
    BadAck,
    /// The other end holds the cluster secret, but the static key it proved is not the
    /// one of the node id it declared: another key than the roster's or than the one
    /// pinned on first contact, or a node the roster does not list.
    IdentityMismatch,
}

impl CloseReason {
    /// Every reason, in declaration order.
    pub const ALL: [CloseReason; 32] = [
        CloseReason::BadMagic,
        CloseReason::BadVersion,
        CloseReason::BadHeader,
        CloseReason::PayloadTooLong,
        CloseReason::Truncated,
        CloseReason::NoHello,
        CloseReason::BadHello,
        CloseReason::BadJoin,
        CloseReason::UnknownNode,
        CloseReason::WrongNode,
        CloseReason::UnexpectedDialer,
        CloseReason::StaleIncarnation,
        CloseReason::StaleSession,
        CloseReason::DuplicateRail,
        CloseReason::Misaddressed,
        CloseReason::UnexpectedHello,
        CloseReason::ControlBody,
        CloseReason::HandshakeTimeout,
        CloseReason::HeartbeatTimeout,
        CloseReason::TooManyHandshakes,
        CloseReason::ConnectFailed,
        CloseReason::Io,
        CloseReason::PeerClosed,
        CloseReason::SessionEnded,
        CloseReason::Superseded,
        CloseReason::JoinAnswered,
        CloseReason::Shutdown,
        CloseReason::AuthFailed,
        CloseReason::BadRecord,
        CloseReason::TooManyPeers,
        CloseReason::BadAck,
        CloseReason::IdentityMismatch,
    ];

    fn index(self) -> usize {
        self as usize
    }

    /// Whether the close means bytes on the wire broke the framing (a rejected frame).
    pub fn is_frame_error(self) -> bool {
        matches!(
            self,
            CloseReason::BadMagic
                | CloseReason::BadVersion
                | CloseReason::BadHeader
                | CloseReason::PayloadTooLong
                | CloseReason::Truncated
                | CloseReason::Misaddressed
                | CloseReason::UnexpectedHello
                | CloseReason::ControlBody
                | CloseReason::BadRecord
                | CloseReason::BadAck
        )
    }

    /// Whether the close means the other end broke the protocol (framing or handshake),
    /// as opposed to ordinary life: closes, timeouts, failed connects, restarts.
    pub fn is_violation(self) -> bool {
        self.is_frame_error()
            || matches!(
                self,
                CloseReason::NoHello
                    | CloseReason::BadHello
                    | CloseReason::BadJoin
                    | CloseReason::UnknownNode
                    | CloseReason::WrongNode
                    | CloseReason::UnexpectedDialer
                    | CloseReason::StaleIncarnation
                    | CloseReason::StaleSession
                    | CloseReason::DuplicateRail
                    | CloseReason::AuthFailed
                    | CloseReason::TooManyPeers
                    | CloseReason::IdentityMismatch
            )
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Closed connections, counted by [`CloseReason`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CloseCounts {
    counts: [u64; CloseReason::ALL.len()],
}

impl CloseCounts {
    /// Connections closed for `reason`.
    pub fn get(&self, reason: CloseReason) -> u64 {
        self.counts[reason.index()]
    }

    pub(crate) fn add(&mut self, reason: CloseReason) {
        self.counts[reason.index()] += 1;
    }

    /// Connections closed because their bytes broke the framing (see
    /// [`CloseReason::is_frame_error`]).
    pub fn frame_errors(&self) -> u64 {
        CloseReason::ALL
            .iter()
            .filter(|r| r.is_frame_error())
            .map(|&r| self.get(r))
            .sum()
    }

    /// Connections closed because the other end broke the protocol.
    pub fn violations(&self) -> u64 {
        CloseReason::ALL
            .iter()
            .filter(|r| r.is_violation())
            .map(|&r| self.get(r))
            .sum()
    }

    /// The non-zero counts.
    pub fn iter(&self) -> impl Iterator<Item = (CloseReason, u64)> + '_ {
        CloseReason::ALL
            .iter()
            .map(|&r| (r, self.get(r)))
            .filter(|&(_, n)| n > 0)
    }
}

/// Traffic on one rail (one TCP connection slot) of a peer, over all its sessions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RailStats {
    /// Packets handed to this rail (including heartbeats).
    pub packets_sent: u64,
    /// Bytes handed to this rail (headers included).
    pub bytes_sent: u64,
    /// Packets that arrived on this rail (including heartbeats).
    pub packets_received: u64,
    /// Bytes that arrived on this rail in packets (headers included).
    pub bytes_received: u64,
    /// Reads of this rail's socket that found nothing: what looking for input costs (a
    /// system call each), on every poll with [`super::TcpConfig::busy_poll`] unless the
    /// caller streams.
    pub empty_reads: u64,
}

/// Counters of one peer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerStats {
    /// Packets accepted by [`crate::Fabric::send`] for this peer.
    pub packets_sent: u64,
    /// Their bytes (header, metadata and payload).
    pub bytes_sent: u64,
    /// Packets from this peer delivered to a sink (accepted or discarded).
    pub packets_received: u64,
    /// Their bytes (header, metadata and payload).
    pub bytes_received: u64,
    /// Heartbeats sent.
    pub heartbeats_sent: u64,
    /// Heartbeats received (consumed by the fabric).
    pub heartbeats_received: u64,
    /// Sends refused with [`crate::FabricError::Full`].
    pub refused_full: u64,
    /// Sends refused with [`crate::FabricError::PeerDown`].
    pub refused_down: u64,
    /// Bytes that had to be copied into a rail's queue because the kernel did not take
    /// them at once (the rest went straight from the caller's slices).
    pub bytes_queued: u64,
    /// Small packets held to share one write with the packets after them (sent while
    /// the caller streamed; see [`crate::tcp::TcpConfig::hold`]).
    pub packets_held: u64,
    /// Times the peer came up (announced with `PeerEvent::Up`).
    pub ups: u64,
    /// Times it went down (announced with `PeerEvent::Down`).
    pub downs: u64,
    /// Sessions this node started dialing (first connection and every reconnection).
    pub dials: u64,
    /// Dialed sessions that failed before coming up.
    pub dial_failures: u64,
    /// Packets sent to this peer that a lost session left unacknowledged, reported to
    /// the sink as possibly lost (`PacketSink::on_unconfirmed`).
    pub packets_unconfirmed: u64,
    /// Acknowledgements sent to it outside a heartbeat (after many packets).
    pub acks_sent: u64,
    /// Per rail index.
    pub rails: Vec<RailStats>,
}

impl PeerStats {
    /// Reconnections: sessions dialed after the first.
    pub fn reconnects(&self) -> u64 {
        self.dials.saturating_sub(1)
    }

    /// The statistics' view of the connection: its `state`, `rails_up` of `rails` rails
    /// open, and these counters.
    pub fn link(&self, state: LinkState, rails_up: usize, rails: usize) -> LinkStats {
        LinkStats {
            state,
            rails_up: u32::try_from(rails_up).unwrap_or(u32::MAX),
            rails: u32::try_from(rails).unwrap_or(u32::MAX),
            counters: LinkCounters {
                packets_sent: self.packets_sent,
                bytes_sent: self.bytes_sent,
                packets_received: self.packets_received,
                bytes_received: self.bytes_received,
                heartbeats_sent: self.heartbeats_sent,
                heartbeats_received: self.heartbeats_received,
                refused_full: self.refused_full,
                refused_down: self.refused_down,
                ups: self.ups,
                downs: self.downs,
                dials: self.dials,
                dial_failures: self.dial_failures,
                empty_reads: self.rails.iter().map(|r| r.empty_reads).sum(),
            },
        }
    }

    pub(crate) fn rail(&mut self, rail: usize) -> &mut RailStats {
        if self.rails.len() <= rail {
            self.rails.resize(rail + 1, RailStats::default());
        }
        &mut self.rails[rail]
    }
}

/// Counters of the whole fabric (per-peer counters are in [`PeerStats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Connections accepted by the listener.
    pub accepted: u64,
    /// Connections dialed.
    pub dialed: u64,
    /// Closed connections by reason.
    pub closes: CloseCounts,
    /// Learned peers (no address, they dialed us) removed from the peer table after a
    /// peer timeout down.
    pub peers_forgotten: u64,
}

impl TcpStats {
    /// The statistics' view of these counters, for a fabric of `rails` rails per session
    /// whose links are `authenticated` or not.
    pub fn counters(&self, rails: usize, authenticated: bool) -> TcpCounters {
        TcpCounters {
            authenticated,
            rails: u32::try_from(rails).unwrap_or(u32::MAX),
            accepted: self.accepted,
            dialed: self.dialed,
            frame_errors: self.closes.frame_errors(),
            violations: self.closes.violations(),
            auth_failures: self.closes.get(CloseReason::AuthFailed),
            frames_refused: self.closes.get(CloseReason::BadRecord),
            peers_forgotten: self.peers_forgotten,
            closes: self
                .closes
                .iter()
                .map(|(reason, n)| (reason.to_string(), n))
                .collect::<Counts>(),
        }
    }
}
