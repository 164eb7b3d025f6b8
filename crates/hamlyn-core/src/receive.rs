//! The receive decision for each arriving packet (seed 000 §2.2, §2.5–2.7).
//!
//! Receiving is two steps so that a fabric can read a payload straight into its final
//! place: [`Interface::admit`] checks the header against the slot table (and, in paranoid
//! modes, the message's metadata entry) and says where the payload goes; the caller
//! deposits it; [`Interface::commit`] then writes the metadata, adds the packet's delta
//! to the entry's accumulator and says whether to post a notification.
//! [`Interface::receive`] does both with a copy, for fabrics that hold whole packets.

use hamlyn_wire::entry::{meta_off, MetaEntry, NotifEntry, NotifKind};
use hamlyn_wire::{Flags, Header, NodeId, Op, SlotId};

use crate::endpoint::{self, Arrival, Claim, ClaimError};
use crate::memory::{AreaId, Areas, EntryMemory, Memory};
use crate::nack::nack_for;
use crate::reject::{Reject, RejectCounts, RejectReason};
use crate::slot::{Slot, SlotMode, SlotTable};

/// Names a notification queue on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct QueueId(pub u32);

/// Where an admitted packet's payload goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The slot it was admitted to.
    pub slot: SlotId,
    /// The area to write.
    pub area: AreaId,
    /// Byte offset in that area (the slot's base plus the packet's offset).
    pub offset: u64,
    /// Payload bytes.
    pub len: u32,
    /// The posted buffer claimed for it, when the slot is a receive endpoint (then
    /// `offset` lies in that buffer): [`Interface::commit_placed`] completes it.
    pub claim: Option<Claim>,
}

/// A notification to post: the entry (its `seq` is left 0 for the queue to fill) and the
/// queue it goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notification {
    /// The slot's notification queue.
    pub queue: QueueId,
    /// The entry, `seq` not yet set.
    pub entry: NotifEntry,
    /// The sender asked for the receiver to be woken if it sleeps.
    pub wake: bool,
}

/// What committing one packet completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a completed message may carry a notification to post"]
pub struct Committed {
    /// The packet finished its message (or its whole group): the accumulator returned to
    /// zero, or the packet was a message of its own. Whoever tracked the message's
    /// contributors can forget them now.
    pub message_done: bool,
    /// The notification to post, if the message is done, the sender asked for one and
    /// the slot has a queue.
    pub notification: Option<Notification>,
}

/// Counters of one interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InterfaceStats {
    /// Packets accepted.
    pub packets: u64,
    /// Payload bytes accepted.
    pub bytes: u64,
    /// Messages (or groups) completed.
    pub messages: u64,
    /// Notifications produced.
    pub notifications: u64,
    /// Packets refused, by reason (including those naming no slot).
    pub rejects: RejectCounts,
}

/// One node's interface logic: its identity, slot table and counters.
#[derive(Clone, Debug)]
pub struct Interface {
    node: NodeId,
    slots: SlotTable,
    stats: InterfaceStats,
}

impl Interface {
    /// An interface for `node` with no slots.
    pub fn new(node: NodeId) -> Interface {
        Interface {
            node,
            slots: SlotTable::new(),
            stats: InterfaceStats::default(),
        }
    }

    /// The node this interface is.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The slot table.
    pub fn slots(&self) -> &SlotTable {
        &self.slots
    }

    /// The slot table, for control operations.
    pub fn slots_mut(&mut self) -> &mut SlotTable {
        &mut self.slots
    }

    /// The counters.
    pub fn stats(&self) -> &InterfaceStats {
        &self.stats
    }

    /// Counts a reject and builds its NACK.
    #[cold]
    fn reject(&mut self, h: &Header, slot: Option<SlotId>, reason: RejectReason) -> Reject {
        self.stats.rejects.bump(reason);
        if let Some(s) = slot.and_then(|id| self.slots.get_mut(id)) {
            s.rejects.bump(reason);
        }
        Reject {
            reason,
            slot,
            nack: nack_for(self.node, h, reason),
            quiet: false,
        }
    }

    /// Counts a packet that did not even parse (there is no header to NACK).
    #[cold]
    pub fn reject_malformed(&mut self) -> Reject {
        self.stats.rejects.bump(RejectReason::Malformed);
        Reject {
            reason: RejectReason::Malformed,
            slot: None,
            nack: None,
            quiet: false,
        }
    }

    /// Checks a write packet's header; on success says where its payload goes.
    ///
    /// Nothing is written. Paranoid modes read the message's metadata entry.
    ///
    /// A receive endpoint's packet claims the next posted buffer here (so a fabric can
    /// read the payload straight into it); with none posted, the message is discarded:
    /// counted in the endpoint's shared discard word and its counters, and refused as
    /// [`RejectReason::NoBuffer`] — [`Reject::quiet`] unless the endpoint reports
    /// discards. An admitted endpoint packet must be committed with
    /// [`Interface::commit_placed`] or given up with [`Interface::abort_placed`].
    pub fn admit<A: Areas>(&mut self, h: &Header, areas: &mut A) -> Result<Placement, Reject> {
        match check(self.node, &self.slots, h, areas) {
            Ok(p) if p.claim.is_none() && self.is_endpoint(p.slot) => {
                self.claim_endpoint(h, p, areas)
            }
            Ok(p) => Ok(p),
            Err((slot, reason)) => Err(self.reject(h, slot, reason)),
        }
    }

    fn is_endpoint(&self, id: SlotId) -> bool {
        self.slots
            .get(id)
            .is_some_and(|s| s.config.mode == SlotMode::Endpoint)
    }

    /// Claims the endpoint buffer an admitted packet lands in (`p.offset` is the offset
    /// in the buffer).
    fn claim_endpoint<A: Areas>(
        &mut self,
        h: &Header,
        p: Placement,
        areas: &mut A,
    ) -> Result<Placement, Reject> {
        let Some((spec, base)) = self
            .slots
            .get(p.slot)
            .and_then(|s| s.endpoint.map(|(spec, _)| (spec, s.config.base)))
        else {
            return Err(self.reject(h, Some(p.slot), RejectReason::BadMode));
        };
        let Some(mem) = areas.area(p.area) else {
            return Err(self.reject(h, Some(p.slot), RejectReason::AreaGone));
        };
        let result = endpoint::claim(mem, base, &spec.layout);
        if result == Err(ClaimError::NoBuffer) {
            // The receiver reads and resets this word; the engine keeps the total.
            let _ = endpoint::count_discard(mem, base);
        }
        let counts = self
            .slots
            .get_mut(p.slot)
            .and_then(|s| s.endpoint.as_mut().map(|(_, c)| c));
        match result {
            Ok(c) => Ok(Placement {
                offset: c.offset + p.offset,
                claim: Some(c),
                ..p
            }),
            Err(e) => {
                if let Some(counts) = counts {
                    match e {
                        ClaimError::NoBuffer => counts.discarded += 1,
                        ClaimError::RingCorrupt => counts.corrupt += 1,
                        _ => {}
                    }
                }
                let mut rej = self.reject(h, Some(p.slot), e.into());
                if e == ClaimError::NoBuffer && !spec.report_discards {
                    rej.nack = None;
                    rej.quiet = true;
                }
                Err(rej)
            }
        }
    }

    /// Finishes an admitted packet whose payload is in place, as [`Interface::commit`]
    /// does, and completes a receive endpoint's claim: the ring entry is written and
    /// published, and the notification (if the sender asked for one and the endpoint has
    /// a queue) names the buffer in its `meta_index`.
    pub fn commit_placed<A: Areas>(
        &mut self,
        h: &Header,
        meta: &[u8],
        p: &Placement,
        areas: &mut A,
    ) -> Result<Committed, Reject> {
        let mut notification = None;
        let message_done =
            self.commit_then(h, meta, Some(p), areas, |n| notification = Some(*n))?;
        Ok(Committed {
            message_done,
            notification,
        })
    }

    /// [`Interface::commit_placed`], with the notification handed to `post` where it is
    /// made instead of returned: the engine posts it from there, without moving its
    /// entry through the results (which cost a small message about 60 instructions of
    /// copying). Whether the message is done.
    #[inline]
    pub fn commit_placed_then<A: Areas>(
        &mut self,
        h: &Header,
        meta: &[u8],
        p: &Placement,
        areas: &mut A,
        post: impl FnOnce(&Notification),
    ) -> Result<bool, Reject> {
        self.commit_then(h, meta, Some(p), areas, post)
    }

    /// The commit of [`Interface::commit`] (`p` is `None`) and of
    /// [`Interface::commit_placed`]: a claimed endpoint buffer is completed, any other
    /// packet counted; the notification, if any, goes to `post`.
    #[inline]
    fn commit_then<A: Areas>(
        &mut self,
        h: &Header,
        meta: &[u8],
        p: Option<&Placement>,
        areas: &mut A,
        post: impl FnOnce(&Notification),
    ) -> Result<bool, Reject> {
        let (done, slot) = match p.and_then(|p| p.claim.map(|c| (p, c))) {
            Some((p, c)) => (
                self.complete_endpoint(h, p, &c, areas).map(|n| (true, n)),
                p.slot,
            ),
            None => {
                let Some(slot) = self.slots.get_mut(h.slot) else {
                    return Err(self.reject(h, None, RejectReason::UnknownSlot));
                };
                (count(slot, h, meta, areas), h.slot)
            }
        };
        match done {
            Ok((complete, notif)) => {
                self.stats.packets += 1;
                self.stats.bytes += u64::from(h.payload_len);
                self.stats.messages += u64::from(complete);
                self.stats.notifications += u64::from(notif.is_some());
                if let Some(n) = &notif {
                    post(n);
                }
                Ok(complete)
            }
            Err(reason) => Err(self.reject(h, Some(slot), reason)),
        }
    }

    fn complete_endpoint<A: Areas>(
        &mut self,
        h: &Header,
        p: &Placement,
        c: &Claim,
        areas: &mut A,
    ) -> Result<Option<Notification>, RejectReason> {
        let slot = self
            .slots
            .get_mut(p.slot)
            .ok_or(RejectReason::UnknownSlot)?;
        let (spec, counts) = slot.endpoint.as_mut().ok_or(RejectReason::AreaGone)?;
        if slot.config.area != p.area {
            return Err(RejectReason::AreaGone);
        }
        let mem = areas.area(p.area).ok_or(RejectReason::AreaGone)?;
        let arrival = Arrival {
            len: h.payload_len,
            src_node: h.src.0,
            word: h.word,
            aborted: false,
        };
        endpoint::complete(mem, slot.config.base, &spec.layout, c, &arrival)?;
        counts.delivered += 1;
        slot.packets += 1;
        slot.bytes += u64::from(h.payload_len);
        slot.messages += 1;
        Ok(match slot.config.queue {
            Some(queue) if h.flags.contains(Flags::NOTIFY) => Some(Notification {
                queue,
                entry: endpoint::notification(h, c.buf),
                wake: h.flags.contains(Flags::WAKE),
            }),
            _ => None,
        })
    }

    /// Gives up an admitted packet that will never be committed (its sender's node went
    /// down while its payload was being read): a receive endpoint's claimed buffer is
    /// handed back to the receiver ([`endpoint::abort`]). Nothing to do for other slots.
    pub fn abort_placed<A: Areas>(&mut self, p: &Placement, areas: &mut A) {
        let Some(c) = p.claim else { return };
        let Some((spec, base)) = self
            .slots
            .get(p.slot)
            .filter(|s| s.config.area == p.area)
            .and_then(|s| s.endpoint.map(|(spec, _)| (spec, s.config.base)))
        else {
            return;
        };
        if let Some(mem) = areas.area(p.area) {
            let _ = endpoint::abort(mem, base, &spec.layout, &c);
        }
    }

    /// Finishes an admitted packet whose payload is in place: deposits the metadata,
    /// counts the packet and says what it completed: whether its message is done, and
    /// the notification to post (if the sender asked for one and the slot has a queue).
    pub fn commit<A: Areas>(
        &mut self,
        h: &Header,
        meta: &[u8],
        areas: &mut A,
    ) -> Result<Committed, Reject> {
        let mut notification = None;
        let message_done = self.commit_then(h, meta, None, areas, |n| notification = Some(*n))?;
        Ok(Committed {
            message_done,
            notification,
        })
    }

    /// Admits, deposits `payload` by copy, and commits one packet; the notification to
    /// post, if any ([`Interface::receive_committed`] also says whether the message is done).
    pub fn receive<A: Areas>(
        &mut self,
        h: &Header,
        meta: &[u8],
        payload: &[u8],
        areas: &mut A,
    ) -> Result<Option<Notification>, Reject> {
        self.receive_committed(h, meta, payload, areas)
            .map(|c| c.notification)
    }

    /// Admits, deposits `payload` by copy, and commits one packet; what it completed.
    pub fn receive_committed<A: Areas>(
        &mut self,
        h: &Header,
        meta: &[u8],
        payload: &[u8],
        areas: &mut A,
    ) -> Result<Committed, Reject> {
        if meta.len() != usize::from(h.meta_len) || payload.len() as u64 != u64::from(h.payload_len)
        {
            return Err(self.reject(h, None, RejectReason::Malformed));
        }
        let p = self.admit(h, areas)?;
        let written = areas.area(p.area).map(|m| m.write(p.offset, payload));
        if !matches!(written, Some(Ok(()))) {
            self.abort_placed(&p, areas);
            return Err(self.reject(h, Some(p.slot), RejectReason::AreaGone));
        }
        self.commit_placed(h, meta, &p, areas)
    }

    /// Parses a whole packet and receives it.
    pub fn receive_packet<A: Areas>(
        &mut self,
        bytes: &[u8],
        areas: &mut A,
    ) -> Result<Option<Notification>, Reject> {
        match Header::parse_packet(bytes) {
            Ok((h, meta, payload)) => self.receive(&h, meta, payload, areas),
            Err(_) => Err(self.reject_malformed()),
        }
    }
}

type Refusal = (Option<SlotId>, RejectReason);

/// A one-sided access a READ_REQ or ATOMIC_REQ asks of a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read `len` bytes at the header's offset.
    Read {
        /// Bytes to read.
        len: u64,
    },
    /// An atomic on the 8-byte word at the header's offset.
    Atomic,
}

impl Interface {
    /// Checks a READ_REQ or ATOMIC_REQ against the slot it names (seed 004 §2): the key
    /// (the slot's, or the paranoid entry's), the slot's read or atomic permission, the
    /// bounds (and the paranoid entry's range), 8-byte alignment for atomics, and
    /// write-inhibit for atomics (they write). Reads are served while writes are
    /// inhibited. On success, where the bytes are.
    pub fn check_access<A: Areas>(
        &mut self,
        h: &Header,
        access: Access,
        areas: &mut A,
    ) -> Result<Placement, Reject> {
        match check_access(self.node, &self.slots, h, access, areas) {
            Ok(p) => Ok(p),
            Err((slot, reason)) => Err(self.reject(h, slot, reason)),
        }
    }

    /// Checks a request to map slot `slot` for direct deposits by a holder of `key`
    /// (DESIGN §2, "Direct slots"), made by a client of this node's engine for a ticket
    /// naming node `dst`. In the order of [`Interface::admit`], so that a client without
    /// the key learns nothing about the slot: addressed to this node (`WrongNode`), slot
    /// exists (`UnknownSlot`), not revoked (`Revoked`), the slot key (`BadKey`), then the
    /// slot allows direct access (`BadMode`), permits writes (`NotPermitted`) and is not
    /// write-inhibited (`Inhibited`). On success, the slot.
    ///
    /// Nothing is counted: this is a control request, not a packet. The check holds only
    /// when it is made; a mapping given after it keeps working through later revocations
    /// and rekeys, which is what a direct slot gives up.
    pub fn check_direct(&self, dst: NodeId, slot: SlotId, key: u64) -> Result<&Slot, RejectReason> {
        if dst != self.node {
            return Err(RejectReason::WrongNode);
        }
        let s = self.slots.get(slot).ok_or(RejectReason::UnknownSlot)?;
        if s.revoked {
            return Err(RejectReason::Revoked);
        }
        if key != s.key {
            return Err(RejectReason::BadKey);
        }
        if !s.direct || s.config.mode.is_paranoid() {
            return Err(RejectReason::BadMode);
        }
        if !s.config.perms.write {
            return Err(RejectReason::NotPermitted);
        }
        if s.inhibited {
            return Err(RejectReason::Inhibited);
        }
        Ok(s)
    }
}

fn check_access<A: Areas>(
    node: NodeId,
    slots: &SlotTable,
    h: &Header,
    access: Access,
    areas: &mut A,
) -> Result<Placement, Refusal> {
    if h.dst != node {
        return Err((None, RejectReason::WrongNode));
    }
    let id = h.slot;
    let slot = slots.get(id).ok_or((None, RejectReason::UnknownSlot))?;
    let fail = |r| (Some(id), r);
    if slot.revoked {
        return Err(fail(RejectReason::Revoked));
    }
    let mut range = None;
    if slot.config.mode.is_paranoid() {
        let (_, entry) = read_entry(areas, slot, h.meta_index).map_err(fail)?;
        if h.key != entry.paranoid_key.get() {
            return Err(fail(RejectReason::ParanoidKey));
        }
        range = Some((entry.paranoid_low.get(), entry.paranoid_high.get()));
    } else if h.key != slot.key {
        return Err(fail(RejectReason::BadKey));
    }
    let len = match access {
        Access::Read { len } => {
            if !slot.config.perms.read {
                return Err(fail(RejectReason::NotPermitted));
            }
            len
        }
        Access::Atomic => {
            if !slot.config.perms.atomic {
                return Err(fail(RejectReason::NotPermitted));
            }
            if slot.inhibited {
                return Err(fail(RejectReason::Inhibited));
            }
            8
        }
    };
    let p = place(slot, id, h.offset, len, range, areas)?;
    if access == Access::Atomic && p.offset % 8 != 0 {
        return Err((Some(id), RejectReason::OutOfBounds));
    }
    Ok(p)
}

/// Where `len` bytes at `offset` of the slot land, if they lie in the slot, in the
/// paranoid entry's range (when there is one) and in the area: the bounds part of every
/// admission check.
fn place<A: Areas>(
    slot: &Slot,
    id: SlotId,
    offset: u64,
    len: u64,
    paranoid_range: Option<(u64, u64)>,
    areas: &mut A,
) -> Result<Placement, Refusal> {
    let fail = |r| (Some(id), r);
    let end = match offset.checked_add(len) {
        Some(e) if e <= slot.config.len => e,
        _ => return Err(fail(RejectReason::OutOfBounds)),
    };
    if let Some((low, high)) = paranoid_range {
        if offset < low || end > high {
            return Err(fail(RejectReason::ParanoidBounds));
        }
    }
    let at = slot.config.base + offset;
    let mem = areas
        .area(slot.config.area)
        .ok_or(fail(RejectReason::AreaGone))?;
    if at.checked_add(len).is_none_or(|e| e > mem.len()) {
        return Err(fail(RejectReason::AreaGone));
    }
    let len = u32::try_from(len).map_err(|_| fail(RejectReason::OutOfBounds))?;
    Ok(Placement {
        slot: id,
        area: slot.config.area,
        offset: at,
        len,
        claim: None,
    })
}

fn read_entry<A: Areas>(
    areas: &mut A,
    slot: &Slot,
    index: u32,
) -> Result<(u64, MetaEntry), RejectReason> {
    let meta = slot.config.meta.ok_or(RejectReason::BadMetaIndex)?;
    let off = meta.entry_offset(index).ok_or(RejectReason::BadMetaIndex)?;
    let mem = areas.area(meta.area).ok_or(RejectReason::AreaGone)?;
    let mut buf = [0u8; hamlyn_wire::META_ENTRY_LEN];
    mem.read(off, &mut buf)
        .map_err(|_| RejectReason::AreaGone)?;
    let entry = MetaEntry::read(&buf).map_err(|_| RejectReason::AreaGone)?;
    Ok((off, entry))
}

/// Where entry `index` of the slot's metadata lies, if it exists and lies inside its
/// area: the refusals of [`read_entry`] (`BadMetaIndex`, `AreaGone`) without reading it.
fn entry_in_place<A: Areas>(areas: &mut A, slot: &Slot, index: u32) -> Result<u64, RejectReason> {
    let meta = slot.config.meta.ok_or(RejectReason::BadMetaIndex)?;
    let off = meta.entry_offset(index).ok_or(RejectReason::BadMetaIndex)?;
    let mem = areas.area(meta.area).ok_or(RejectReason::AreaGone)?;
    match off.checked_add(hamlyn_wire::META_ENTRY_LEN as u64) {
        Some(end) if end <= mem.len() => Ok(off),
        _ => Err(RejectReason::AreaGone),
    }
}

/// The admission checks, in an order that reveals nothing to a sender without the key.
fn check<A: Areas>(
    node: NodeId,
    slots: &SlotTable,
    h: &Header,
    areas: &mut A,
) -> Result<Placement, Refusal> {
    // Read and atomic answers are deposits into the requester's reply slot.
    if !matches!(h.op, Op::Write | Op::ReadResp | Op::AtomicResp) {
        return Err((None, RejectReason::Unsupported));
    }
    if h.dst != node {
        return Err((None, RejectReason::WrongNode));
    }
    let id = h.slot;
    let slot = slots.get(id).ok_or((None, RejectReason::UnknownSlot))?;
    let fail = |r| (Some(id), r);
    if slot.revoked {
        return Err(fail(RejectReason::Revoked));
    }
    let single = h.flags.contains(Flags::FIRST | Flags::LAST);
    if slot.config.mode == SlotMode::Endpoint {
        return check_endpoint(slot, id, h, single);
    }
    let mut paranoid_range = None;
    if slot.config.mode == SlotMode::Fast {
        if h.key != slot.key {
            return Err(fail(RejectReason::BadKey));
        }
        if !h.is_fast() || !single || h.meta_len != 0 {
            return Err(fail(RejectReason::BadMode));
        }
    } else {
        // A slot-keyed mode checks the key before anything else about the slot, so that a
        // sender without it learns neither the slot's mode nor its number of entries.
        if !slot.config.mode.is_paranoid() && h.key != slot.key {
            return Err(fail(RejectReason::BadKey));
        }
        if h.is_fast() {
            return Err(fail(RejectReason::BadMode));
        }
        if !slot.config.mode.is_paranoid() {
            // A slot-keyed mode needs nothing from the entry now, only that it exists
            // (commit writes it): checked without reading its 128 bytes.
            entry_in_place(areas, slot, h.meta_index).map_err(fail)?;
        } else {
            let (_, entry) = read_entry(areas, slot, h.meta_index).map_err(fail)?;
            if h.key != entry.paranoid_key.get() {
                return Err(fail(RejectReason::ParanoidKey));
            }
            paranoid_range = Some((entry.paranoid_low.get(), entry.paranoid_high.get()));
            if slot.config.mode == SlotMode::ParanoidOneShot && !entry.armed() {
                return Err(fail(RejectReason::Disarmed));
            }
        }
    }
    // NOTIFY_NOW is for a lone single-packet message (delta 0); anything else would let a
    // key holder complete someone else's group early.
    let counting = slot.config.mode != SlotMode::Fast;
    if h.flags.contains(Flags::NOTIFY_NOW) && (!single || (counting && h.delta != 0)) {
        return Err(fail(RejectReason::BadMode));
    }
    if !slot.config.perms.write {
        return Err(fail(RejectReason::NotPermitted));
    }
    if slot.inhibited {
        return Err(fail(RejectReason::Inhibited));
    }
    place(
        slot,
        id,
        h.offset,
        u64::from(h.payload_len),
        paranoid_range,
        areas,
    )
}

/// The admission checks of a receive endpoint, in the order of [`check`]'s: the key, then
/// the packet's shape (a write, fast form, one packet, no metadata bytes), permission,
/// inhibition, and that it fits a buffer (`TooLarge`). The placement's offset is the
/// packet's offset in the buffer, which `Interface::admit` claims next.
fn check_endpoint(slot: &Slot, id: SlotId, h: &Header, single: bool) -> Result<Placement, Refusal> {
    let fail = |r| (Some(id), r);
    if h.key != slot.key {
        return Err(fail(RejectReason::BadKey));
    }
    if h.op != Op::Write || !h.is_fast() || !single || h.meta_len != 0 {
        return Err(fail(RejectReason::BadMode));
    }
    if !slot.config.perms.write {
        return Err(fail(RejectReason::NotPermitted));
    }
    if slot.inhibited {
        return Err(fail(RejectReason::Inhibited));
    }
    let (spec, _) = slot.endpoint.ok_or(fail(RejectReason::BadMode))?;
    let fits = h
        .offset
        .checked_add(u64::from(h.payload_len))
        .is_some_and(|end| end <= u64::from(spec.layout.buf_size()));
    if !fits {
        return Err(fail(RejectReason::TooLarge));
    }
    Ok(Placement {
        slot: id,
        area: slot.config.area,
        offset: h.offset,
        len: h.payload_len,
        claim: None,
    })
}

/// Deposits metadata and counts the packet; returns (message complete, notification).
fn count<A: Areas>(
    slot: &mut Slot,
    h: &Header,
    meta: &[u8],
    areas: &mut A,
) -> Result<(bool, Option<Notification>), RejectReason> {
    let mode = slot.config.mode;
    let kind = if mode == SlotMode::Fast {
        count_packet::<Vec<u8>>(mode, None, h, meta)?
    } else {
        let range = slot.config.meta.ok_or(RejectReason::BadMetaIndex)?;
        let off = range
            .entry_offset(h.meta_index)
            .ok_or(RejectReason::BadMetaIndex)?;
        // The entry is checked once here; the count's accesses then only against its
        // constant length (as a direct sender's, `hamlyn_shm::entry_mem`).
        let mut entry = areas.entry(range.area, off).ok_or(RejectReason::AreaGone)?;
        count_packet(mode, Some((&mut entry, 0)), h, meta)?
    };
    slot.packets += 1;
    slot.bytes += u64::from(h.payload_len);
    let Some(done) = kind else {
        return Ok((false, None));
    };
    slot.messages += 1;
    let notif = match slot.config.queue {
        Some(queue) if h.flags.contains(Flags::NOTIFY) => Some(Notification {
            queue,
            entry: notification_entry(done, h),
            wake: h.flags.contains(Flags::WAKE),
        }),
        _ => None,
    };
    Ok((true, notif))
}

/// What one admitted packet does to its message's metadata entry: the part of a commit
/// that touches shared memory, run by the engine ([`Interface::commit`]) and, for direct
/// slots, by the sender's library in the sender's process (DESIGN §2, "Direct slots"), so
/// that packet counting and metadata behave the same on both.
///
/// `entry` is the memory holding the message's entry and the entry's byte offset in it;
/// fast slots have none. On the first packet the whole 60 bytes of user metadata are
/// written (zero-padded, so a shorter metadata leaves no stale tail), with its length and
/// the source node; in a group every member's first packet writes there and the last one
/// wins. Then the packet's bytes are added to `assembling_bytes` and its delta is added to the 32-bit accumulator with
/// [`EntryMemory::add_u32_at`] (an atomic shared with every other depositor: the engine
/// and direct senders, in any process). A NOTIFY_NOW packet is not counted: it reads the
/// accumulator, and on an idle entry (0) it is the whole message, completed at once with
/// its own length and offset; mid-count it completes nothing, so that a key holder cannot
/// end someone else's group early. It never touches the accumulator or the assembling
/// words (`assembling_bytes`, `assembling_low`), which belong to the message in progress,
/// and mid-count it writes nothing at all (its metadata goes in only when it completes).
///
/// When the message is complete (the accumulator returned to 0, or NOTIFY_NOW on an idle
/// entry; a fast message at once), the message's first offset is stored, the entry's
/// completed count is bumped, a one-shot
/// entry is disarmed, and the kind of notification it earns is returned; `None` while
/// packets are still missing. Whether a notification is posted, and where, is the
/// caller's business ([`notification_entry`] builds it).
#[inline]
pub fn count_packet<M: EntryMemory + ?Sized>(
    mode: SlotMode,
    entry: Option<(&mut M, u64)>,
    h: &Header,
    meta: &[u8],
) -> Result<Option<MessageDone>, RejectReason> {
    if mode == SlotMode::Fast {
        return Ok(Some(MessageDone {
            kind: NotifKind::Fast,
            len: h.payload_len,
        }));
    }
    let gone = |_| RejectReason::AreaGone;
    let (mem, off) = entry.ok_or(RejectReason::BadMetaIndex)?;
    let first_packet = h.flags.contains(Flags::FIRST);
    let acc_off = off + meta_off::ACCUMULATOR as u64;
    if h.flags.contains(Flags::NOTIFY_NOW) {
        // A lone message (one packet, delta 0) only looks at the accumulator: on an idle
        // entry it is the whole message, its length and offset its own; mid-count it
        // completes nothing (a key holder cannot end someone else's group early) and adds
        // nothing. Either way it leaves the assembling words to the message they belong
        // to: a packet of it counted with them could complete between its adds and take
        // them with it, or leave them short. A single load is a place in the
        // accumulator's order of modification, whatever other depositors do around it.
        if mem.load_u32_at(acc_off).map_err(gone)? != 0 {
            return Ok(None);
        }
        if first_packet {
            deposit_metadata(mem, off, h, meta)?;
        }
        return complete_message(mode, mem, off, h, h.offset, h.payload_len);
    }
    if first_packet {
        deposit_metadata(mem, off, h, meta)?;
        // The message's first offset is the lowest first packet's (a group has one per
        // member). Read-modify-write: the engine is one thread; direct senders of one
        // group racing here may leave a higher member's offset (ARCHITECTURE.md).
        let low_off = off + meta_off::ASSEMBLING_LOW as u64;
        let mut b = [0u8; 8];
        mem.read_at(low_off, &mut b).map_err(gone)?;
        let inverted = !h.offset;
        if inverted > u64::from_le_bytes(b) {
            mem.write_at(low_off, &inverted.to_le_bytes())
                .map_err(gone)?;
        }
    }
    // Atomic like the accumulator: every depositor adds its bytes; the completing packet
    // takes exactly this message's total back out, so bytes of a later message already
    // counted stay.
    let bytes_off = off + meta_off::ASSEMBLING_BYTES as u64;
    let total = mem.add_u32_at(bytes_off, h.payload_len).map_err(gone)?;
    if mem.add_u32_at(acc_off, h.delta).map_err(gone)? != 0 {
        return Ok(None);
    }
    mem.add_u32_at(bytes_off, total.wrapping_neg())
        .map_err(gone)?;
    let low_off = off + meta_off::ASSEMBLING_LOW as u64;
    let mut b = [0u8; 8];
    mem.read_at(low_off, &mut b).map_err(gone)?;
    // Inverted, 0 = none yet: a message always has a first packet, so !0 never shows.
    let first = !u64::from_le_bytes(b);
    mem.write_at(low_off, &0u64.to_le_bytes()).map_err(gone)?;
    complete_message(mode, mem, off, h, first, total)
}

/// A first packet's part of [`count_packet`]: the whole 60 bytes of user metadata
/// (zero-padded), its length and the source node.
#[inline(always)]
fn deposit_metadata<M: EntryMemory + ?Sized>(
    mem: &mut M,
    off: u64,
    h: &Header,
    meta: &[u8],
) -> Result<(), RejectReason> {
    let gone = |_| RejectReason::AreaGone;
    /// What pads the metadata to its whole length.
    const ZEROS: [u8; hamlyn_wire::MAX_META_LEN] = [0; hamlyn_wire::MAX_META_LEN];
    let n = meta.len().min(hamlyn_wire::MAX_META_LEN);
    let user = off + meta_off::USER as u64;
    // Zeros, then the bytes over them, each written from where it is: no zeroed buffer
    // on the stack copied over (the copy's wide loads waited for the stores that zeroed
    // it). Most messages carry none (a tagged write's tag travels in the header): no
    // call to copy nothing.
    mem.write_at(user, &ZEROS).map_err(gone)?;
    if n > 0 {
        mem.write_at(user, &meta[..n]).map_err(gone)?;
    }
    mem.write_at(off + meta_off::META_LEN as u64, &(n as u16).to_le_bytes())
        .map_err(gone)?;
    mem.write_at(off + meta_off::SRC_NODE as u64, &h.src.0.to_le_bytes())
        .map_err(gone)
}

/// The end of [`count_packet`] for a packet that completed its message, first byte at
/// slot offset `first`, `total` payload bytes: the offset stored in the entry, its
/// completed count bumped, a one-shot entry disarmed, and what the notification reports.
#[inline]
fn complete_message<M: EntryMemory + ?Sized>(
    mode: SlotMode,
    mem: &mut M,
    off: u64,
    h: &Header,
    first: u64,
    total: u32,
) -> Result<Option<MessageDone>, RejectReason> {
    let gone = |_| RejectReason::AreaGone;
    mem.write_at(off + meta_off::MESSAGE_OFFSET as u64, &first.to_le_bytes())
        .map_err(gone)?;
    mem.add_u32_at(off + meta_off::COMPLETED as u64, 1)
        .map_err(gone)?;
    if mode == SlotMode::ParanoidOneShot {
        let mut state = [0u8; 2];
        mem.read_at(off + meta_off::STATE as u64, &mut state)
            .map_err(gone)?;
        let disarmed = u16::from_le_bytes(state) & !MetaEntry::ARMED;
        mem.write_at(off + meta_off::STATE as u64, &disarmed.to_le_bytes())
            .map_err(gone)?;
    }
    let kind = match h.op {
        Op::ReadResp => NotifKind::ReadDone,
        Op::AtomicResp => NotifKind::AtomicDone,
        _ => NotifKind::Message,
    };
    Ok(Some(MessageDone { kind, len: total }))
}

/// A message (or group) one packet completed: what its notification reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageDone {
    /// The kind of notification it earns.
    pub kind: NotifKind,
    /// The whole message's payload bytes, modulo 2^32 (a fast message: its one packet's).
    pub len: u32,
}

/// The notification entry a completed message earns (its `seq` left 0 for the queue to
/// fill): the kind [`count_packet`] returned, and the completing packet's flags, slot,
/// metadata index, word (tag or fast-mode metadata), source node and payload length.
///
/// An answer to a one-sided request (`ReadDone`, `AtomicDone`) names the request it
/// answers instead of a payload length: `len` is the request's sequence number and the
/// high byte of `flags` its terminus index (the low byte of the packet's
/// `request.terminus`; header flags use the low byte only), so the requester can match
/// an atomic's old value, which fills `word`, to its request (docs/spec/wire.md §5).
pub fn notification_entry(done: MessageDone, h: &Header) -> NotifEntry {
    let kind = done.kind;
    let mut entry = NotifEntry::zeroed();
    entry.kind.set(kind as u16);
    entry.slot.set(h.slot.0);
    entry.meta_index.set(h.meta_index);
    entry.word.set(h.word);
    entry.src_node.set(h.src.0);
    if matches!(kind, NotifKind::ReadDone | NotifKind::AtomicDone) {
        let terminus = (h.request.terminus & 0xFF) as u16;
        entry.flags.set((h.flags.0 & 0xFF) | (terminus << 8));
        entry.len.set(h.request.seq);
    } else {
        entry.flags.set(h.flags.0);
        entry.len.set(done.len);
    }
    entry
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::OutOfRange;
    use hamlyn_wire::{NodeId, RequestId, SlotId};

    fn header(op: Op) -> Header {
        let mut h = Header::new(op);
        h.flags = Flags::FIRST | Flags::LAST | Flags::NOTIFY;
        h.src = NodeId(2);
        h.slot = SlotId(9);
        h.meta_index = 4;
        h.payload_len = 8;
        h.word = 0x0123_4567_89AB_CDEF;
        h.request = RequestId {
            terminus: (7 << 8) | 3,
            seq: 0xDEAD_BEEF,
        };
        h
    }

    #[test]
    fn answers_name_their_request_and_messages_their_length() {
        for kind in [NotifKind::ReadDone, NotifKind::AtomicDone] {
            let e = notification_entry(MessageDone { kind, len: 8 }, &header(Op::AtomicResp));
            assert_eq!(e.kind(), Some(kind));
            assert_eq!(e.len.get(), 0xDEAD_BEEF, "the request's sequence");
            assert_eq!(e.flags.get() >> 8, 3, "the request's terminus index");
            assert_eq!(e.flags.get() & 0xFF, 0x23, "the packet's flags");
            assert_eq!(e.word.get(), 0x0123_4567_89AB_CDEF, "the word is untouched");
            assert_eq!(
                (e.slot.get(), e.meta_index.get(), e.src_node.get()),
                (9, 4, 2)
            );
        }
        let done = MessageDone {
            kind: NotifKind::Message,
            len: 3 << 20,
        };
        let e = notification_entry(done, &header(Op::Write));
        assert_eq!(
            (e.len.get(), e.flags.get()),
            (3 << 20, 0x23),
            "the whole message's length, not the packet's"
        );
    }

    /// Packets of a 3-packet message at offsets 100, 200, 300 (100 bytes each), counted
    /// in the order `order`; returns what completed it and the entry afterwards.
    fn count_three(order: [usize; 3], entry: &mut Vec<u8>) -> Vec<Option<MessageDone>> {
        let packets: Vec<Header> = (0..3u32)
            .map(|i| {
                let mut h = header(Op::Write);
                h.flags = Flags::NOTIFY;
                if i == 0 {
                    h.flags = h.flags | Flags::FIRST;
                }
                if i == 2 {
                    h.flags = h.flags | Flags::LAST;
                }
                h.offset = 100 + 100 * u64::from(i);
                h.payload_len = 100;
                // Y = 0: deltas 1, 1, -2.
                h.delta = if i == 2 { 2u32.wrapping_neg() } else { 1 };
                h
            })
            .collect();
        order
            .iter()
            .map(|&i| count_packet(SlotMode::Normal, Some((entry, 0)), &packets[i], b"m").unwrap())
            .collect()
    }

    #[test]
    fn a_completed_message_reports_its_whole_length_and_first_offset_in_any_order() {
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0], [2, 0, 1]] {
            let mut entry = vec![0u8; hamlyn_wire::META_ENTRY_LEN];
            let got = count_three(order, &mut entry);
            assert_eq!(got[..2], [None, None], "{order:?}");
            assert_eq!(
                got[2],
                Some(MessageDone {
                    kind: NotifKind::Message,
                    len: 300
                }),
                "{order:?}"
            );
            let e = MetaEntry::read(&entry).unwrap();
            assert_eq!(e.message_offset.get(), 100, "{order:?}");
            assert_eq!(
                (e.assembling_bytes.get(), e.assembling_low.get()),
                (0, 0),
                "assembly state is reset for the next message"
            );
            // The entry is reused: the next message reports its own numbers.
            let got = count_three([1, 0, 2], &mut entry);
            assert_eq!(got[2].map(|d| d.len), Some(300));
        }
    }

    /// A lone message (NOTIFY_NOW) on an idle entry is the whole message, with its own
    /// length and offset, even when another packet has deposited its bytes and first
    /// offset and not yet added its delta (a direct sender between its two adds): that
    /// assembly is left to the message it belongs to, not taken into the lone one's.
    #[test]
    fn a_lone_message_on_an_idle_entry_leaves_another_assembly_alone() {
        let mut entry = vec![0u8; hamlyn_wire::META_ENTRY_LEN];
        let bytes_at = meta_off::ASSEMBLING_BYTES as u64;
        let low_at = meta_off::ASSEMBLING_LOW as u64;
        // Another first packet between its adds: 100 bytes from offset 50.
        entry.write_at(bytes_at, &100u32.to_le_bytes()).unwrap();
        entry.write_at(low_at, &(!50u64).to_le_bytes()).unwrap();
        let done = count_packet(SlotMode::Normal, Some((&mut entry, 0)), &lone(), b"lone");
        assert_eq!(
            done.unwrap(),
            Some(MessageDone {
                kind: NotifKind::Message,
                len: 8
            }),
            "its own length, not the other packet's bytes with it"
        );
        let e = MetaEntry::read(&entry).unwrap();
        assert_eq!(e.message_offset.get(), 3000);
        assert_eq!(e.completed.get(), 1);
        assert_eq!(e.metadata(), b"lone");
        assert_eq!(e.accumulator.get(), 0);
        assert_eq!(
            (e.assembling_bytes.get(), e.assembling_low.get()),
            (100, !50),
            "the other assembly is left as it was"
        );
        // The message that packet belongs to (here counted with `count_three`'s, which
        // bring the accumulator back to 0) completes with its bytes and first offset.
        let got = count_three([0, 1, 2], &mut entry);
        assert_eq!(got[2].map(|d| d.len), Some(400));
        let e = MetaEntry::read(&entry).unwrap();
        assert_eq!((e.message_offset.get(), e.completed.get()), (50, 2));
        assert_eq!((e.assembling_bytes.get(), e.assembling_low.get()), (0, 0));
    }

    /// The lone 8-byte message at offset 3000 of these tests.
    fn lone() -> Header {
        let mut h = header(Op::Write);
        h.flags = Flags::FIRST | Flags::LAST | Flags::NOTIFY | Flags::NOTIFY_NOW;
        h.delta = 0;
        h.offset = 3000;
        h.payload_len = 8;
        h
    }

    /// An entry whose accumulator read runs another depositor's count first, or right
    /// after: the two orders in which a lone message and a group's last packet (another
    /// process) can meet on one entry.
    struct Meeting<'a> {
        entry: std::cell::RefCell<&'a mut Vec<u8>>,
        other: std::cell::Cell<Option<Header>>,
        other_first: bool,
        other_done: std::cell::Cell<Option<Option<MessageDone>>>,
    }

    impl Meeting<'_> {
        /// The other depositor's count, once, to its end (as another process would).
        fn run_other(&self) {
            if let Some(h) = self.other.take() {
                let mut entry = self.entry.borrow_mut();
                let done = count_packet(SlotMode::Normal, Some((&mut **entry, 0)), &h, b"");
                self.other_done.set(Some(done.unwrap()));
            }
        }
    }

    impl EntryMemory for Meeting<'_> {
        fn read_at(&self, offset: u64, dst: &mut [u8]) -> Result<(), OutOfRange> {
            self.entry.borrow().read_at(offset, dst)
        }
        fn write_at(&mut self, offset: u64, src: &[u8]) -> Result<(), OutOfRange> {
            self.entry.borrow_mut().write_at(offset, src)
        }
        fn add_u32_at(&mut self, offset: u64, v: u32) -> Result<u32, OutOfRange> {
            self.entry.borrow_mut().add_u32_at(offset, v)
        }
        fn load_u32_at(&self, offset: u64) -> Result<u32, OutOfRange> {
            if self.other_first {
                self.run_other();
            }
            let v = self.entry.borrow().load_u32_at(offset);
            if !self.other_first {
                self.run_other();
            }
            v
        }
    }

    /// A lone message and a group's last packet meeting on one entry, in either order:
    /// the group reports exactly its own bytes and first offset, the lone message either
    /// completes alone (the group was done when it looked) or completes nothing (it was
    /// not), and the assembling words end at 0 for the next message. Counting the lone
    /// packet's bytes like a group member's, as before, let the group complete between
    /// its two adds: the group reported the lone bytes, the lone message completed too
    /// with the group's, and `assembling_bytes` was left at -108 for good.
    #[test]
    fn a_lone_message_and_a_group_meeting_on_an_entry_each_keep_their_bytes() {
        for other_first in [true, false] {
            let mut entry = vec![0u8; hamlyn_wire::META_ENTRY_LEN];
            // The group's first member: 100 bytes at offset 100, delta -1.
            let mut first = header(Op::Write);
            first.flags = Flags::FIRST | Flags::LAST | Flags::NOTIFY;
            first.offset = 100;
            first.payload_len = 100;
            first.delta = 1u32.wrapping_neg();
            let got = count_packet(SlotMode::Normal, Some((&mut entry, 0)), &first, b"g");
            assert_eq!(got.unwrap(), None);
            // Its last member: 100 bytes at offset 200, delta +1.
            let mut last = first;
            last.offset = 200;
            last.delta = 1;
            let (lone_done, group_done) = {
                let mut m = Meeting {
                    entry: std::cell::RefCell::new(&mut entry),
                    other: std::cell::Cell::new(Some(last)),
                    other_first,
                    other_done: std::cell::Cell::new(None),
                };
                let done = count_packet(SlotMode::Normal, Some((&mut m, 0)), &lone(), b"lone");
                (done.unwrap(), m.other_done.get())
            };
            let group_done = group_done.expect("the group's last packet ran");
            assert_eq!(
                group_done.map(|d| d.len),
                Some(200),
                "the group's own bytes ({other_first})"
            );
            let want = other_first.then_some(MessageDone {
                kind: NotifKind::Message,
                len: 8,
            });
            assert_eq!(lone_done, want, "done alone, or nothing ({other_first})");
            let e = MetaEntry::read(&entry).unwrap();
            assert_eq!(
                (
                    e.accumulator.get(),
                    e.assembling_bytes.get(),
                    e.assembling_low.get()
                ),
                (0, 0, 0),
                "ready for the next message ({other_first})"
            );
            let completions = 1 + u32::from(other_first);
            assert_eq!(e.completed.get(), completions);
            let offset = if other_first { 3000 } else { 100 };
            assert_eq!(e.message_offset.get(), offset, "{other_first}");
        }
    }
}
