//! The remote path (DESIGN §2 "Fabrics", "Never lose, never overrun"): the fabric to other
//! engines, the peers it reports (a sans-IO `hamlyn_core::PeerTable`), the NACKs waiting
//! to go out, and the receiving state of `fabric_rx`. Packets to other nodes go out here
//! straight from the sender's area; what a lost peer breaks is decided by the peer table
//! and carried out by the engine (`EngineState::peer_event`).

use std::collections::VecDeque;
use std::time::Duration;

use hamlyn_core::{Expected, Instant, PartialMessage, PeerTable, RejectReason};
use hamlyn_fabric::{Fabric, FabricError, PeerEvent, SharedBytes};
use hamlyn_wire::request::MAX_GATHER;
use hamlyn_wire::{Header, NodeId};

use crate::areas::AreaTable;
use crate::clients::Clients;
use crate::counters::EngineCounters;
use crate::deliver::Delivery;
use crate::fabric_rx::{Inbound, Receive};
use crate::source::Piece;

/// Packets taken from the fabric per poll.
const POLL_BUDGET: usize = 64;
/// NACKs waiting to be sent beyond which the fabric is not polled (so no more refusals
/// are made) until they drain: the bound on the NACK queue, give or take one poll's worth.
const MAX_NACKS: usize = 4096;

/// The fabric and the state that goes with it.
pub(crate) struct Remote {
    fabric: Box<dyn Fabric + Send>,
    /// Peers, their incarnations, and who contributed to partly received messages.
    pub(crate) peers: PeerTable,
    /// What was sent to each peer that a NACK or an answer may name.
    pub(crate) expected: Expected,
    /// NACKs to send (kept while the fabric is full: a NACK is never dropped).
    nacks: VecDeque<Header>,
    /// The receiving state.
    inbound: Inbound,
    /// Packets the fabric delivered, over all polls (whoever polled): whether the engine
    /// thread served peers' traffic itself since it last went idle
    /// (`Engine::spin_wanted`).
    pub(crate) packets_in: u64,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("peers", &self.peers)
            .field("nacks", &self.nacks.len())
            .finish()
    }
}

/// What one poll of the fabric left for the engine to do.
#[derive(Debug, Default)]
pub(crate) struct Polled {
    /// Something arrived or left.
    pub(crate) busy: bool,
    /// Reads, atomics and registry packets, whole.
    pub(crate) deferred: Vec<(Header, Vec<u8>)>,
    /// Peers that came or went.
    pub(crate) events: Vec<PeerEvent>,
    /// Writes of ours that a lost session left unacknowledged (maybe not delivered).
    pub(crate) unconfirmed: Vec<Header>,
}

impl Remote {
    /// Wraps a fabric.
    pub(crate) fn new(fabric: Box<dyn Fabric + Send>) -> Remote {
        Remote {
            fabric,
            peers: PeerTable::new(),
            expected: Expected::new(),
            nacks: VecDeque::new(),
            inbound: Inbound::default(),
            packets_in: 0,
        }
    }

    /// The fabric itself (its descriptor, its statistics).
    pub(crate) fn fabric(&self) -> &(dyn Fabric + Send) {
        &*self.fabric
    }

    /// Queues a NACK to send at the next poll.
    pub(crate) fn queue_nack(&mut self, n: Header) {
        self.nacks.push_back(n);
    }

    /// Hands one packet to the fabric, its payload straight from the pieces (inline bytes
    /// or registered areas), on its express lane if `express`. `Ok(false)`: the fabric is
    /// full, try again later. (The caller counts what was sent.)
    pub(crate) fn send(
        &mut self,
        now: Instant,
        h: &Header,
        meta: &[u8],
        pieces: &[Piece<'_>],
        areas: &AreaTable,
        express: bool,
    ) -> Result<bool, RejectReason> {
        if self.peers.is_down(h.dst) {
            return Err(RejectReason::PeerDown);
        }
        // Area bytes go to the fabric by raw parts (`SharedBytes`): it copies them out or
        // lends them to `writev` before this call returns, and never holds a reference to
        // them. A sender changing its own buffer meanwhile can only change what it sends
        // (seed 000 §6.2: buffers are not reused until the send completes); a slot owner
        // changing a region being read remotely can only change what the reader gets.
        let mut parts = [SharedBytes::empty(); MAX_GATHER];
        for (slot, piece) in parts.iter_mut().zip(pieces) {
            *slot = match *piece {
                Piece::Bytes(b) => SharedBytes::from(b),
                Piece::Area { area, offset, len } => areas
                    .get(area)
                    .ok_or(RejectReason::AreaGone)?
                    .mem
                    .bytes(offset, len)
                    .map_err(|_| RejectReason::OutOfBounds)?,
            };
        }
        let parts = &parts[..pieces.len()];
        let sent = if express {
            self.fabric.send_express(now, h, meta, parts)
        } else {
            self.fabric.send(now, h, meta, parts)
        };
        match sent {
            Ok(()) => Ok(true),
            Err(FabricError::Full) => Ok(false),
            Err(FabricError::PeerDown(_))
            | Err(FabricError::NoRoute(_))
            | Err(FabricError::LocalDown) => Err(RejectReason::PeerDown),
            Err(_) => Err(RejectReason::Malformed),
        }
    }

    /// Hands a packet whose payload is one buffer to the fabric (registry traffic).
    pub(crate) fn send_bytes(
        &mut self,
        now: Instant,
        h: &Header,
        body: &[u8],
    ) -> Result<(), FabricError> {
        self.fabric.send(now, h, &[], &[SharedBytes::from(body)])
    }

    /// Polls the fabric: commits what arrived (through `fabric_rx`) and sends queued
    /// NACKs. Returns what the engine must still handle. `hold`: take nothing new this
    /// time (the engine's answers are backed up); NACKs still go out. Nothing new is taken
    /// either while NACKs are backed up: the peers wait (their sends see `Full`).
    /// `spinning`: the caller polls in a loop until something arrives
    /// ([`Fabric::poll_spinning`]).
    pub(crate) fn poll(
        &mut self,
        now: Instant,
        hold: bool,
        spinning: bool,
        delivery: &mut Delivery,
        clients: &mut Clients,
        counters: &mut EngineCounters,
    ) -> Polled {
        let mut busy = self.send_nacks(now, counters);
        if hold || self.nacks.len() >= MAX_NACKS {
            counters.fabric_polls_held += 1;
            return Polled {
                busy,
                ..Polled::default()
            };
        }
        let mut rx = Receive {
            inbound: &mut self.inbound,
            nacks: &mut self.nacks,
            peers: &mut self.peers,
            expected: &mut self.expected,
            delivery,
            clients,
            counters,
        };
        let polled = if spinning {
            self.fabric.poll_spinning(now, &mut rx, POLL_BUDGET)
        } else {
            self.fabric.poll(now, &mut rx, POLL_BUDGET)
        };
        let got = match polled {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "fabric poll failed");
                0
            }
        };
        busy |= got > 0;
        self.packets_in += got as u64;
        busy |= self.send_nacks(now, counters);
        let deferred = std::mem::take(&mut self.inbound.deferred);
        let events = std::mem::take(&mut self.inbound.events);
        let unconfirmed = std::mem::take(&mut self.inbound.unconfirmed);
        busy |= !deferred.is_empty() || !events.is_empty() || !unconfirmed.is_empty();
        Polled {
            busy,
            deferred,
            events,
            unconfirmed,
        }
    }

    /// Sends queued NACKs until the fabric is full; whether any went.
    fn send_nacks(&mut self, now: Instant, counters: &mut EngineCounters) -> bool {
        let mut sent = false;
        while let Some(h) = self.nacks.front() {
            match self.fabric.send(now, h, &[], &[]) {
                Err(FabricError::Full) => break,
                Ok(()) => counters.nacks_sent += 1,
                Err(_) => counters.nacks_undeliverable += 1,
            }
            self.nacks.pop_front();
            sent = true;
        }
        sent
    }

    /// `node` is down: what it was sending is forgotten, and the partly received messages
    /// it contributed to are returned (each gets a peer-down notification).
    pub(crate) fn peer_down(
        &mut self,
        node: NodeId,
        delivery: &mut Delivery,
    ) -> Vec<PartialMessage> {
        self.inbound.forget(node, delivery);
        self.peers.peer_down(node)
    }

    /// How long the engine may sleep before the fabric needs a poll: until its next
    /// timer, or 1 ms for a fabric that cannot wake a sleeper.
    /// The engine is about to sleep: the fabric writes what it holds back (a held small
    /// packet would otherwise wait for the sleep's timer, a whole millisecond of epoll
    /// granularity) and drains its poller (`Fabric::prepare_sleep`). `true` if the
    /// fabric has work now: do not sleep.
    pub(crate) fn prepare_sleep(&mut self, now: Instant) -> bool {
        self.fabric.prepare_sleep(now)
    }

    pub(crate) fn flush_held(&mut self, now: Instant) {
        self.fabric.flush_held(now);
    }

    pub(crate) fn sleep_bound(&self, now: Instant) -> Duration {
        if self.fabric.wait_fd().is_none() {
            return Duration::from_millis(1);
        }
        match self.fabric.next_timer() {
            Some(t) => Duration::from_nanos(t.nanos_since(now)),
            None => Duration::MAX,
        }
    }
}
