//! Local delivery, in the order it happens to every packet for this node: **check** it
//! (the core's `Interface::admit`: slot, key, bounds, mode), **deposit** its payload (the
//! one copy, from the sender's area or the request's inline bytes, into the admitted
//! place), **commit** it (`Interface::commit`: metadata, packet counting) and **notify**
//! the receiver's queue when the message is complete. Packets from other nodes take the
//! same check and commit; the fabric deposits their payload itself (`fabric_rx`).
//!
//! [`Delivery`] owns what those steps read and write: the slot table (inside the core's
//! `Interface`), the registered areas, and the slots whose owner died.

use std::collections::HashSet;

use hamlyn_core::{AreaId, Areas, Interface, Memory, Placement, RejectReason};
use hamlyn_wire::{Header, NodeId, SlotId};

use crate::areas::AreaTable;
use crate::clients::Clients;
use crate::counters::EngineCounters;
use crate::source::Piece;

/// The slot table, the areas, and the tombstones of slots whose owner died.
#[derive(Debug)]
pub(crate) struct Delivery {
    /// The interface logic: slots, checks, counting.
    pub(crate) iface: Interface,
    /// Registered areas.
    pub(crate) areas: AreaTable,
    /// Slots destroyed because their owner died: packets to them fail with PeerDown.
    tombstones: HashSet<u32>,
}

impl Delivery {
    /// Delivery for node `node`, with no slots and no areas.
    pub(crate) fn new(node: NodeId) -> Delivery {
        Delivery {
            iface: Interface::new(node),
            areas: AreaTable::default(),
            tombstones: HashSet::new(),
        }
    }

    /// This node.
    pub(crate) fn node(&self) -> NodeId {
        self.iface.node()
    }

    /// The slots of a client that is gone are destroyed; later packets to them are
    /// refused as "peer down". Returns how many there were.
    pub(crate) fn bury_owner(&mut self, owner: u32) -> usize {
        let slots = self
            .iface
            .slots_mut()
            .destroy_owner(hamlyn_core::OwnerId(owner));
        self.tombstones.extend(slots.iter().map(|s| s.0));
        slots.len()
    }

    /// A slot id is in use again: it is no longer a tombstone.
    pub(crate) fn reborn(&mut self, slot: SlotId) {
        self.tombstones.remove(&slot.0);
    }

    /// Buffers a receive endpoint's owner posted that no message filled yet, as its ring
    /// says now (0 if the ring is unreadable or impossible).
    pub(crate) fn posted_waiting(&self, slot: &hamlyn_core::Slot) -> u64 {
        let Some((spec, _)) = slot.endpoint else {
            return 0;
        };
        let Some(area) = self.areas.get(slot.config.area) else {
            return 0;
        };
        let base = slot.config.base;
        let word = |off| area.mem.load_u64(base + off).unwrap_or(0);
        let waiting =
            word(hamlyn_wire::endpoint::POSTED).wrapping_sub(word(hamlyn_wire::endpoint::TAKEN));
        if waiting > spec.layout.ring_cap() {
            0
        } else {
            waiting
        }
    }

    /// Whether `slot` belonged to a client that died.
    pub(crate) fn is_tombstone(&self, slot: u32) -> bool {
        self.tombstones.contains(&slot)
    }

    /// The reason reported to the sender: a slot of a dead client is "peer down".
    #[cold]
    fn refusal(&self, slot: SlotId, reason: RejectReason) -> RejectReason {
        if reason == RejectReason::UnknownSlot && self.tombstones.contains(&slot.0) {
            RejectReason::PeerDown
        } else {
            reason
        }
    }

    /// Deposit: the one copy, the pieces in order into the admitted place.
    pub(crate) fn deposit(
        &mut self,
        pieces: &[Piece<'_>],
        p: &Placement,
    ) -> Result<(), RejectReason> {
        let mut dst_at = p.offset;
        for piece in pieces {
            match *piece {
                Piece::Bytes(b) => {
                    let dst = self.areas.area(p.area).ok_or(RejectReason::AreaGone)?;
                    dst.write(dst_at, b).map_err(|_| RejectReason::AreaGone)?;
                    dst_at += b.len() as u64;
                }
                Piece::Area { area, offset, len } => {
                    self.copy_between(area, offset, p.area, dst_at, len)?;
                    dst_at += len as u64;
                }
            }
        }
        Ok(())
    }

    /// Copies `n` bytes from one area to another, or within one (ownership already
    /// checked), with no reference to either range.
    fn copy_between(
        &mut self,
        src: AreaId,
        src_off: u64,
        dst: AreaId,
        dst_off: u64,
        n: usize,
    ) -> Result<(), RejectReason> {
        let src = &self.areas.get(src).ok_or(RejectReason::AreaGone)?.mem;
        let dst = &self.areas.get(dst).ok_or(RejectReason::AreaGone)?.mem;
        if src_off.checked_add(n as u64).is_none_or(|e| e > src.len()) {
            return Err(RejectReason::OutOfBounds);
        }
        src.copy_to(src_off, dst, dst_off, n)
            .map_err(|_| RejectReason::AreaGone)
    }

    /// Commit and notify: counts a packet whose payload is in place and, when its message
    /// is complete, posts the notification. Whether the message (or group) is done.
    pub(crate) fn commit(
        &mut self,
        h: &Header,
        meta: &[u8],
        p: &Placement,
        clients: &mut Clients,
        counters: &mut EngineCounters,
    ) -> Result<bool, RejectReason> {
        self.iface
            .commit_placed_then(h, meta, p, &mut self.areas, |n| clients.notify(n, counters))
            .map_err(|rej| rej.reason)
    }

    /// All four steps for a packet of this node whose payload comes from `pieces`.
    /// Whether its message (or group) is done.
    pub(crate) fn deliver(
        &mut self,
        h: &Header,
        meta: &[u8],
        pieces: &[Piece<'_>],
        clients: &mut Clients,
        counters: &mut EngineCounters,
    ) -> Result<bool, RejectReason> {
        // Check. The placement is used where the core's result holds it, by reference:
        // moved out (into a `Result<Option<Placement>, _>` first, as this once did), its
        // copy's wide loads over the core's narrower stores waited for those stores to
        // reach the cache (path8: a stream's 8-byte message 146 -> 127 ns).
        let admitted = self.iface.admit(h, &mut self.areas);
        let placement = match &admitted {
            Ok(p) => p,
            Err(rej) if rej.quiet => return Ok(true),
            Err(rej) => return Err(self.refusal(h.slot, rej.reason)),
        };
        if let Err(reason) = self.deposit(pieces, placement) {
            self.iface.abort_placed(placement, &mut self.areas);
            return Err(reason);
        }
        let done = self.commit(h, meta, placement, clients, counters)?;
        counters.packets += 1;
        counters.bytes += u64::from(h.payload_len);
        Ok(done)
    }
}
