//! The `Fabric` trait: how an engine hands packets to the network and gets them back.
//!
//! A fabric moves packets (`header ‖ metadata ‖ payload`, DESIGN §4) between engines and
//! tells each engine when peers come and go. Every fabric (the simulated one in
//! [`crate::sim`], TCP, later libfabric) implements this one trait and passes the
//! conformance suite (`crates/hamlyn-testkit/src/conformance.rs`). The promises a fabric
//! makes to the core:
//!
//! - **No silent loss, no duplication.** A packet sent to a live peer arrives exactly
//!   once. If a link breaks or a peer dies, packets may be lost, but only together with a
//!   [`PeerEvent::Down`] at both ends: loss is always announced (the seeds assume a
//!   fabric that never drops packets on a live link). A fabric that keeps track of what
//!   the receiver acknowledged (TCP) also names each sent packet that may be lost
//!   ([`PacketSink::on_unconfirmed`]), so the request it belongs to can fail even after
//!   it was reported sent.
//! - **Any order.** Packets may arrive in any order, even on one link (TCP rails, the
//!   simulator's random delays); packet counting does not need order.
//! - **Back-pressure, not drops.** [`FabricError::Full`] means "try again later".
//!
//! The shape is made for zero copies. [`Fabric::send`] takes the payload as gather pieces,
//! so a TCP fabric can `writev` straight from registered memory. Receiving is two-phase:
//! the fabric shows the header and metadata to a [`PacketSink`], the sink (the core's
//! admission check) decides, and only an accepted packet's payload is read, straight into
//! the place the sink names; a discarded one is skipped.
//!
//! Payload memory may be a client's shared area, which its owner (another process) can
//! write at any time, so it crosses this interface as [`SharedBytes`] and
//! [`SharedBytesMut`]: views by raw parts that a fabric copies out of or into, or lends to
//! one vectored system call, and never holds as a `&[u8]`. Plain buffers convert to them
//! with `From`.
//!
//! Fabrics are sans-IO in their interface: time is passed in as `now`, and nothing blocks.

use hamlyn_core::Instant;
pub use hamlyn_shm::bytes::{SharedBytes, SharedBytesMut};
use hamlyn_wire::stats::{FabricStats, LinkStats};
use hamlyn_wire::{Header, NodeId, WireError};

/// What a sink wants done with an arriving packet's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Landing {
    /// Read the payload into the place from [`PacketSink::payload_buf`], then call
    /// [`PacketSink::on_payload`].
    Accept,
    /// Skip the payload; the packet is finished.
    Discard,
}

/// A change in whether a peer can be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PeerEvent {
    /// The peer is reachable; `incarnation` grows every time the peer restarts.
    Up {
        /// The peer.
        node: NodeId,
        /// The peer's incarnation (tickets of older incarnations are stale).
        incarnation: u32,
    },
    /// The peer is unreachable (crashed, or the link broke). Packets to or from it that
    /// were in flight may have been lost; this event is how the loss is announced.
    Down {
        /// The peer.
        node: NodeId,
    },
}

impl PeerEvent {
    /// The peer the event is about.
    pub fn node(&self) -> NodeId {
        match *self {
            PeerEvent::Up { node, .. } | PeerEvent::Down { node } => node,
        }
    }
}

/// Why a fabric could not send or poll.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FabricError {
    /// The path to the destination is full: back-pressure, nothing was queued; try again
    /// after polling (never a silent drop).
    #[error("fabric full: try again later")]
    Full,
    /// The destination is known to be down or unreachable (a [`PeerEvent::Down`] has been
    /// or will be delivered for it).
    #[error("peer {0} is down")]
    PeerDown(NodeId),
    /// No node with this id belongs to the fabric.
    #[error("no route to node {0}")]
    NoRoute(NodeId),
    /// This node is down (crashed or closed): it can neither send nor receive.
    #[error("the local node is down")]
    LocalDown,
    /// The header's source is not this node (a fabric only sends its own node's packets).
    #[error("header names source {header}, but this fabric is node {local}")]
    WrongSource {
        /// The source the header names.
        header: NodeId,
        /// This fabric's node.
        local: NodeId,
    },
    /// The metadata or payload given does not have the length the header states.
    #[error("{field}: header states {stated} bytes, {actual} were given")]
    LengthMismatch {
        /// `"meta_len"` or `"payload_len"`.
        field: &'static str,
        /// The length in the header.
        stated: u64,
        /// The length of the bytes given.
        actual: u64,
    },
    /// The header would not parse at the receiver (it is not a valid v1 header).
    #[error("header is not valid on the wire: {0}")]
    BadHeader(#[from] WireError),
    /// The sink's payload buffer does not have the packet's payload length (a bug in the
    /// sink; that packet's payload was dropped and the poll stopped).
    #[error("sink gave a {got}-byte buffer for a {expected}-byte payload")]
    SinkBuffer {
        /// The packet's payload length.
        expected: u64,
        /// The buffer's length.
        got: u64,
    },
}

/// Receives what a fabric delivers: packets in two phases, and peer events.
///
/// Per packet, a fabric calls [`PacketSink::on_header`]; if it returns
/// [`Landing::Accept`], then [`PacketSink::payload_buf`] and, once the payload is all in
/// that buffer, exactly one [`PacketSink::on_payload`]. A fabric that delivers whole
/// packets (the simulator) makes the three calls back to back. A stream fabric that reads
/// a payload in pieces may ask for `payload_buf` again in a later poll, with other
/// packets' calls in between; a sink that serves such a fabric must return the same
/// memory for the same accepted packet until its `on_payload`.
pub trait PacketSink {
    /// The header and metadata of an arriving packet from `from`: accept it (the fabric
    /// then asks for [`PacketSink::payload_buf`]) or discard it (the payload is skipped).
    fn on_header(&mut self, from: NodeId, header: &Header, meta: &[u8]) -> Landing;
    /// The place an accepted packet's payload goes to, exactly `header.payload_len`
    /// bytes long (a shared area's bytes, or a plain buffer as `SharedBytesMut::from`).
    /// Only called for a header [`PacketSink::on_header`] accepted.
    fn payload_buf(&mut self, header: &Header) -> SharedBytesMut<'_>;
    /// The accepted packet's payload is fully in place.
    fn on_payload(&mut self, from: NodeId, header: &Header, meta: &[u8]);
    /// A peer came up or went down.
    fn on_peer(&mut self, event: PeerEvent);
    /// A packet this node sent to `to`, accepted by [`Fabric::send`], may not have
    /// arrived: the session that carried it was lost before the receiver acknowledged
    /// it. It may have arrived (the acknowledgement may be what was lost), but nothing
    /// more will be known; a sink fails the request it belongs to (`PeerDown`).
    /// Called once per such packet, after or together with that peer's
    /// [`PeerEvent::Down`]. A fabric that reports no such packets (the simulator) never
    /// calls it and announces its losses only with `Down`.
    fn on_unconfirmed(&mut self, to: NodeId, header: &Header);
}

/// One node's access to a fabric.
pub trait Fabric {
    /// The node this fabric sends from.
    fn local(&self) -> NodeId;

    /// Queues one packet to `header.dst`. The payload is given as gather pieces (zero-copy
    /// for fabrics that can write straight from registered memory; plain bytes convert
    /// with `SharedBytes::from`); their total length must be `header.payload_len`, and
    /// `meta` must be `header.meta_len` bytes. The pieces are only borrowed for the call:
    /// what the fabric keeps, it copies.
    ///
    /// [`FabricError::Full`] is back-pressure (try again later), never a silent drop;
    /// [`FabricError::PeerDown`] when the destination is known dead or unreachable.
    /// Nothing is queued when an error is returned.
    fn send(
        &mut self,
        now: Instant,
        header: &Header,
        meta: &[u8],
        payload: &[SharedBytes<'_>],
    ) -> Result<(), FabricError>;

    /// [`Fabric::send`] for an *express* packet: a single-packet message the sending
    /// engine serves above its lowest priority in use. A fabric with an express lane
    /// keeps it off the connections that bulk and low-priority traffic queue on (the TCP
    /// fabric's `express_lane`); by default it is an ordinary send.
    fn send_express(
        &mut self,
        now: Instant,
        header: &Header,
        meta: &[u8],
        payload: &[SharedBytes<'_>],
    ) -> Result<(), FabricError> {
        self.send(now, header, meta, payload)
    }

    /// Delivers any peer events and up to `budget` arrived packets to `sink`; returns how
    /// many packets (accepted or discarded) were delivered.
    fn poll(
        &mut self,
        now: Instant,
        sink: &mut dyn PacketSink,
        budget: usize,
    ) -> Result<usize, FabricError>;

    /// [`Fabric::poll`] by a caller that polls in a loop until something arrives (a
    /// thread spinning before it sleeps): a fabric whose look for input is a system call
    /// of its own (the TCP fabric asks its poller, then reads) may read its connections
    /// straight away instead, so that the call that finds a packet is the read itself.
    /// An ordinary poll by default.
    fn poll_spinning(
        &mut self,
        now: Instant,
        sink: &mut dyn PacketSink,
        budget: usize,
    ) -> Result<usize, FabricError> {
        self.poll(now, sink, budget)
    }

    /// A descriptor that becomes readable when the fabric has something for
    /// [`Fabric::poll`], so an idle engine can sleep in its own epoll set; `None` if the
    /// fabric cannot wake a sleeper (it must then be polled on a short period).
    fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    /// When the fabric next needs a poll for its own timers (heartbeats, timeouts,
    /// reconnects), whatever its sockets do; `None` if it has none.
    fn next_timer(&self) -> Option<Instant> {
        None
    }

    /// The caller is about to sleep on [`Fabric::wait_fd`]: write whatever the fabric
    /// holds back to share a write with later packets (a sleeping caller sends none, so a
    /// held packet would wait for the sleep's timer), and take in the readiness its own
    /// poller has noted, so that the next arrival makes `wait_fd` readable again (an
    /// edge-triggered descriptor stays quiet while old readiness is unread). Returns
    /// `true` if a [`Fabric::poll`] would find something now: then do not sleep.
    /// Nothing to do by default.
    fn prepare_sleep(&mut self, _now: Instant) -> bool {
        false
    }

    /// A drive by a thread of the process ends while the engine's thread stays asleep
    /// for others (a lease, `hamlyn_engine::Driver::drive_waiting`): write whatever the
    /// fabric holds back, as [`Fabric::prepare_sleep`] does, without its look at the
    /// poller (the engine's thread does not sleep on [`Fabric::wait_fd`] meanwhile).
    /// Nothing to do by default.
    fn flush_held(&mut self, _now: Instant) {}

    /// The fabric's own counters (for `hamlyn stat`), if it keeps any.
    fn fabric_stats(&self) -> Option<FabricStats> {
        None
    }

    /// The fabric's view of its connection to each peer it knows, by node id (for
    /// `hamlyn stat`); empty if it keeps none.
    fn link_stats(&self) -> Vec<(NodeId, LinkStats)> {
        Vec::new()
    }
}

impl<F: Fabric + ?Sized> Fabric for &mut F {
    fn local(&self) -> NodeId {
        (**self).local()
    }
    fn send(
        &mut self,
        now: Instant,
        header: &Header,
        meta: &[u8],
        payload: &[SharedBytes<'_>],
    ) -> Result<(), FabricError> {
        (**self).send(now, header, meta, payload)
    }
    fn send_express(
        &mut self,
        now: Instant,
        header: &Header,
        meta: &[u8],
        payload: &[SharedBytes<'_>],
    ) -> Result<(), FabricError> {
        (**self).send_express(now, header, meta, payload)
    }
    fn poll(
        &mut self,
        now: Instant,
        sink: &mut dyn PacketSink,
        budget: usize,
    ) -> Result<usize, FabricError> {
        (**self).poll(now, sink, budget)
    }
    fn poll_spinning(
        &mut self,
        now: Instant,
        sink: &mut dyn PacketSink,
        budget: usize,
    ) -> Result<usize, FabricError> {
        (**self).poll_spinning(now, sink, budget)
    }
    fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        (**self).wait_fd()
    }
    fn next_timer(&self) -> Option<Instant> {
        (**self).next_timer()
    }
    fn prepare_sleep(&mut self, now: Instant) -> bool {
        (**self).prepare_sleep(now)
    }
    fn flush_held(&mut self, now: Instant) {
        (**self).flush_held(now)
    }
    fn fabric_stats(&self) -> Option<FabricStats> {
        (**self).fabric_stats()
    }
    fn link_stats(&self) -> Vec<(NodeId, LinkStats)> {
        (**self).link_stats()
    }
}

/// Checks what every fabric must check before queueing a packet: the header is this
/// node's, survives the wire unchanged, and its lengths match the bytes given.
///
/// Returns the total payload length.
pub fn check_send(
    local: NodeId,
    header: &Header,
    meta: &[u8],
    payload: &[SharedBytes<'_>],
) -> Result<usize, FabricError> {
    if header.src != local {
        return Err(FabricError::WrongSource {
            header: header.src,
            local,
        });
    }
    if meta.len() != usize::from(header.meta_len) {
        return Err(FabricError::LengthMismatch {
            field: "meta_len",
            stated: u64::from(header.meta_len),
            actual: meta.len() as u64,
        });
    }
    let total: usize = payload.iter().map(SharedBytes::len).sum();
    if total as u64 != u64::from(header.payload_len) {
        return Err(FabricError::LengthMismatch {
            field: "payload_len",
            stated: u64::from(header.payload_len),
            actual: total as u64,
        });
    }
    let parsed = Header::parse(&header.to_bytes())?;
    if parsed != *header {
        return Err(FabricError::BadHeader(WireError::InvalidField {
            field: "header",
            why: "does not survive encoding unchanged",
        }));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn_wire::{Flags, Op};

    fn parts<'a>(slices: &[&'a [u8]]) -> Vec<SharedBytes<'a>> {
        slices.iter().map(|&s| SharedBytes::from(s)).collect()
    }

    #[test]
    fn check_send_catches_each_mistake() {
        let mut h = Header::new(Op::Write);
        h.src = NodeId(1);
        h.flags = Flags::FIRST | Flags::LAST;
        h.meta_len = 2;
        h.payload_len = 5;
        let me = NodeId(1);
        assert_eq!(check_send(me, &h, b"mm", &parts(&[b"ab", b"cde"])), Ok(5));
        assert!(matches!(
            check_send(NodeId(2), &h, b"mm", &parts(&[b"abcde"])),
            Err(FabricError::WrongSource { .. })
        ));
        assert!(matches!(
            check_send(me, &h, b"m", &parts(&[b"abcde"])),
            Err(FabricError::LengthMismatch {
                field: "meta_len",
                ..
            })
        ));
        assert!(matches!(
            check_send(me, &h, b"mm", &parts(&[b"abcd"])),
            Err(FabricError::LengthMismatch {
                field: "payload_len",
                ..
            })
        ));
        h.flags = Flags::LAST; // metadata without FIRST does not parse
        assert!(matches!(
            check_send(me, &h, b"mm", &parts(&[b"abcde"])),
            Err(FabricError::BadHeader(_))
        ));
    }
}
