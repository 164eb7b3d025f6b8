//! Slots: protected names for part of an area, and the tickets that grant writing them
//! (seed 000 §2.2, §2.7, §3.2).

use std::ops::Range;
use std::sync::Arc;

use hamlyn_core::{SlotMode, SlotPerms};
use hamlyn_wire::control::{mode, perm, Request, NO_QUEUE};
use hamlyn_wire::{SlotId, Ticket, TicketFlags, FULL_SHARE};

use crate::area::{Area, MetaArea};
use crate::error::Error;
use crate::keys::random_key;
use crate::node::Shared;

/// Builds a slot: [`crate::Node::slot`], then the settings, then [`SlotBuilder::create`].
#[must_use = "a slot builder does nothing until `create` is called"]
pub struct SlotBuilder<'a> {
    shared: Arc<Shared>,
    area: &'a Area,
    range: Option<Range<u64>>,
    mode: SlotMode,
    perms: SlotPerms,
    meta: Option<&'a MetaArea>,
    queue: Option<u16>,
    direct: bool,
}

impl std::fmt::Debug for SlotBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotBuilder")
            .field("area", &self.area)
            .field("range", &self.range)
            .field("mode", &self.mode)
            .field("perms", &self.perms)
            .field("meta", &self.meta)
            .field("queue", &self.queue)
            .field("direct", &self.direct)
            .finish()
    }
}

impl<'a> SlotBuilder<'a> {
    pub(crate) fn new(shared: Arc<Shared>, area: &'a Area) -> SlotBuilder<'a> {
        SlotBuilder {
            shared,
            area,
            range: None,
            mode: SlotMode::Normal,
            perms: SlotPerms::default(),
            meta: None,
            queue: None,
            direct: false,
        }
    }

    /// The bytes of the area the slot covers (default: all of it).
    pub fn range(mut self, bytes: Range<u64>) -> Self {
        self.range = Some(bytes);
        self
    }

    /// The mode (default [`SlotMode::Normal`]).
    pub fn mode(mut self, mode: SlotMode) -> Self {
        self.mode = mode;
        self
    }

    /// Paranoid mode: every metadata entry has its own key and byte range, set when a
    /// ticket for it is made (per-sender protection).
    pub fn paranoid(self) -> Self {
        self.mode(SlotMode::Paranoid)
    }

    /// Paranoid one-shot mode: as paranoid, and an entry takes one message, then refuses
    /// more until re-armed ([`MetaArea::arm`], or a new ticket).
    pub fn paranoid_one_shot(self) -> Self {
        self.mode(SlotMode::ParanoidOneShot)
    }

    /// Fast mode: single-packet messages without metadata bytes; a one-word tag travels
    /// in the notification. Needs no metadata area.
    pub fn fast(self) -> Self {
        self.mode(SlotMode::Fast)
    }

    /// What remote peers may do (default: write only).
    pub fn perms(mut self, perms: SlotPerms) -> Self {
        self.perms = perms;
        self
    }

    /// The metadata entries messages use (required for every mode but fast).
    pub fn meta(mut self, meta: &'a MetaArea) -> Self {
        self.meta = Some(meta);
        self
    }

    /// The notification queue (index in this node's port) arrivals are reported to.
    ///
    /// Default: none. A slot without a queue **never notifies**: messages, read answers
    /// and atomic answers into it are deposited and counted (its metadata entries'
    /// completed counts move, senders see their sends complete), but nothing is posted
    /// anywhere, whatever the sender's [`crate::SendOptions::notify`] says. That suits
    /// a slot only read or updated from afar (the target of [`crate::Terminus::read`] and
    /// the atomics) or polled through its metadata entries ([`MetaArea::entry`]); a slot
    /// whose arrivals the owner must hear of needs a queue.
    pub fn queue(mut self, index: u16) -> Self {
        self.queue = Some(index);
        self
    }

    /// **Danger:** lets any holder of a ticket to this slot on this node map the slot's
    /// memory and its notification queue and deposit, count and notify by itself, without
    /// the engine: one hop, at the speed of shared memory (docs/ARCHITECTURE.md,
    /// "Direct slots"; [`crate::Node::open_direct`]). Normal and fast modes only.
    ///
    /// The engine checks the ticket's key (and that the slot is not revoked or
    /// write-inhibited) once, when a holder asks for the mapping. After that, the holder's
    /// process has write access to shared memory of yours, and this is what you give up:
    ///
    /// - **Protection.** A direct sender is given the descriptors of the slot's message
    ///   area, of its metadata area and of this port's notification-queue file (never the
    ///   rest of the port). Its library writes only inside its ticket, but a buggy or
    ///   hostile process can write any byte of those files: other slots or data in the
    ///   same areas, any metadata entry, any of this port's queues (forged or stalled
    ///   notifications). Give a direct slot areas of its own, aligned to whole pages.
    /// - **Revocation.** [`Slot::revoke`], [`Slot::rekey`], [`Slot::inhibit`] and even
    ///   destroying the slot stop *new* mappings only; a mapping already given keeps
    ///   working until its holder drops it.
    /// - **Accounting and fault reports.** The engine does not see direct deposits: they
    ///   are not in its packet or message counters, a direct sender learns nothing if you
    ///   die, and you learn nothing (no peer-down) if it dies mid-message.
    ///
    /// Packet counting, metadata and notifications are exactly those of an ordinary slot:
    /// the same code does them.
    pub fn danger_direct(mut self) -> Self {
        self.direct = true;
        self
    }

    /// Asks the engine for the slot.
    pub fn create(self) -> Result<Slot, Error> {
        let instance = self.shared.instance;
        if !self.area.belongs_to(instance) {
            return Err(Error::ForeignObject);
        }
        let range = self.range.clone().unwrap_or(0..self.area.len());
        if range.start > range.end || range.end > self.area.len() {
            return Err(Error::OutOfRange {
                what: "area",
                start: range.start,
                end: u128::from(range.end),
                len: self.area.len(),
            });
        }
        let mode_code = mode_code(self.mode)?;
        if self.direct && self.mode.is_paranoid() {
            return Err(Error::InvalidArgument(
                "paranoid slots cannot be direct: their per-entry checks need the engine",
            ));
        }
        let fast = self.mode == SlotMode::Fast;
        let meta = match (fast, self.meta) {
            (true, _) => None,
            (false, None) => {
                return Err(Error::InvalidArgument(
                    "this slot mode needs metadata entries (SlotBuilder::meta)",
                ))
            }
            (false, Some(m)) if !m.area().belongs_to(instance) => return Err(Error::ForeignObject),
            (false, Some(m)) => Some(m.clone()),
        };
        let count = self.shared.layout.geometry.queues;
        let queue = match self.queue {
            Some(index) if index >= count => return Err(Error::NoSuchQueue { index, count }),
            Some(index) => u32::from(index),
            None => NO_QUEUE,
        };
        let (meta_area, meta_base, meta_count) = meta
            .as_ref()
            .map_or((0, 0, 0), |m| (m.area().id(), m.base(), m.count()));
        let req = Request::CreateSlot {
            area: self.area.id(),
            base: range.start,
            len: range.end - range.start,
            mode: mode_code,
            perms: perm_bits(self.perms) | if self.direct { perm::DANGER_DIRECT } else { 0 },
            meta_area,
            meta_base,
            meta_count,
            queue,
        };
        let (slot, key) = self.shared.control().call_slot(&req)?;
        Ok(Slot {
            shared: self.shared.clone(),
            id: SlotId(slot),
            key,
            area: self.area.clone(),
            base: range.start,
            len: range.end - range.start,
            mode: self.mode,
            perms: self.perms,
            meta,
            queue: self.queue,
            direct: self.direct,
            destroyed: false,
        })
    }
}

fn mode_code(m: SlotMode) -> Result<u8, Error> {
    Ok(match m {
        SlotMode::Normal => mode::NORMAL,
        SlotMode::Paranoid => mode::PARANOID,
        SlotMode::ParanoidOneShot => mode::PARANOID_ONE_SHOT,
        SlotMode::Fast => mode::FAST,
        _ => return Err(Error::InvalidArgument("slot mode unknown to this library")),
    })
}

fn perm_bits(p: SlotPerms) -> u8 {
    let mut b = 0;
    if p.write {
        b |= perm::WRITE;
    }
    if p.read {
        b |= perm::READ;
    }
    if p.atomic {
        b |= perm::ATOMIC;
    }
    b
}

/// The ticket flags that say what a slot's perms and mode let a holder do.
pub(crate) fn ticket_flags(p: SlotPerms, mode: SlotMode) -> TicketFlags {
    let mut f = TicketFlags::default();
    if p.write {
        f = f | TicketFlags::WRITE;
    }
    if p.read {
        f = f | TicketFlags::READ;
    }
    if p.atomic {
        f = f | TicketFlags::ATOMIC;
    }
    if mode == SlotMode::Fast {
        f = f | TicketFlags::FAST;
    }
    f
}

/// A slot: part of an area that holders of its tickets may write.
///
/// Dropping the handle destroys the slot (tickets to it then fail with
/// `RejectReason::UnknownSlot`); keep it as long as senders should reach it.
#[must_use = "dropping a Slot destroys the slot: every ticket to it stops working \
              (keep the handle for as long as senders should reach the slot)"]
pub struct Slot {
    shared: Arc<Shared>,
    id: SlotId,
    key: u64,
    area: Area,
    base: u64,
    len: u64,
    mode: SlotMode,
    perms: SlotPerms,
    meta: Option<MetaArea>,
    queue: Option<u16>,
    direct: bool,
    destroyed: bool,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the key: it is the capability, and debug output ends up in logs.
        f.debug_struct("Slot")
            .field("node", &self.shared.node)
            .field("id", &self.id)
            .field("mode", &self.mode)
            .field("perms", &self.perms)
            .field("area", &self.area)
            .field("base", &self.base)
            .field("len", &self.len)
            .field("meta", &self.meta)
            .field("queue", &self.queue)
            .field("direct", &self.direct)
            .finish_non_exhaustive()
    }
}

impl Slot {
    /// The slot's number on its node.
    pub fn id(&self) -> SlotId {
        self.id
    }

    /// The slot's current key (what normal and fast tickets carry).
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The slot's mode.
    pub fn mode(&self) -> SlotMode {
        self.mode
    }

    /// What remote peers may do.
    pub fn perms(&self) -> SlotPerms {
        self.perms
    }

    /// The message area.
    pub fn area(&self) -> &Area {
        &self.area
    }

    /// Offset of the slot's first byte in its area.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Bytes the slot covers.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the slot covers no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The metadata entries (none for fast slots).
    pub fn meta_area(&self) -> Option<&MetaArea> {
        self.meta.as_ref()
    }

    /// The notification queue arrivals go to; `None`: the slot never notifies
    /// ([`SlotBuilder::queue`]).
    pub fn queue(&self) -> Option<u16> {
        self.queue
    }

    /// Whether ticket holders on this node may write the slot directly
    /// ([`SlotBuilder::danger_direct`]).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// A ticket granting `bytes` (slot-relative) and metadata entries `meta` (ignored for
    /// fast slots), for one sender, unsplit (Y = 0).
    ///
    /// On a paranoid slot this gives every entry in `meta` a fresh random key and the
    /// byte range `bytes` (and arms it, in one-shot mode): the ticket carries that key,
    /// and earlier tickets for those entries stop working.
    pub fn ticket(&self, bytes: Range<u64>, meta: Range<u32>) -> Result<Ticket, Error> {
        if bytes.start > bytes.end || bytes.end > self.len {
            return Err(Error::OutOfRange {
                what: "slot",
                start: bytes.start,
                end: u128::from(bytes.end),
                len: self.len,
            });
        }
        let (meta_first, meta_count, key) = match (&self.meta, self.mode) {
            (None, SlotMode::Fast) => (0, 0, self.key),
            (None, _) => return Err(Error::WrongMode(self.mode)),
            (Some(m), mode) => {
                if meta.start > meta.end || meta.end > m.count() {
                    return Err(Error::MetaOutOfRange {
                        start: u64::from(meta.start),
                        end: u64::from(meta.end),
                        count: m.count(),
                    });
                }
                let key = if mode.is_paranoid() {
                    if meta.is_empty() {
                        return Err(Error::InvalidArgument(
                            "a paranoid ticket needs at least one metadata entry",
                        ));
                    }
                    let key = random_key()?;
                    for i in meta.clone() {
                        m.set_paranoid(i, key, bytes.clone())?;
                        if mode == SlotMode::ParanoidOneShot {
                            m.arm(i)?;
                        }
                    }
                    key
                } else {
                    self.key
                };
                (meta.start, meta.end - meta.start, key)
            }
        };
        Ok(Ticket {
            node: self.shared.node,
            incarnation: self.shared.incarnation,
            slot: self.id,
            key,
            meta_first,
            meta_count,
            offset: bytes.start,
            len: bytes.end - bytes.start,
            share: FULL_SHARE,
            flags: ticket_flags(self.perms, self.mode),
        })
    }

    /// A ticket for the whole slot and all its metadata entries.
    pub fn ticket_all(&self) -> Result<Ticket, Error> {
        let entries = self.meta.as_ref().map_or(0, MetaArea::count);
        self.ticket(0..self.len, 0..entries)
    }

    /// Gives the slot a new key (and lifts a revocation): every ticket made before stops
    /// working (`RejectReason::BadKey`). Returns the new key.
    pub fn rekey(&mut self) -> Result<u64, Error> {
        let mut control = self.shared.control();
        let (slot, key) = control.call_slot(&Request::Rekey { slot: self.id.0 })?;
        if slot != self.id.0 {
            return Err(control.violation("Rekey answered for another slot"));
        }
        self.key = key;
        Ok(key)
    }

    /// Revokes every ticket to the slot until it is rekeyed (`RejectReason::Revoked`).
    pub fn revoke(&self) -> Result<(), Error> {
        self.shared
            .control()
            .call_ok(&Request::Revoke { slot: self.id.0 })
    }

    /// Write-inhibits the slot (`on`) or lifts the inhibition: while on, writes are
    /// refused (`RejectReason::Inhibited`) and the memory can be read in peace.
    pub fn inhibit(&self, on: bool) -> Result<(), Error> {
        self.shared.control().call_ok(&Request::Inhibit {
            slot: self.id.0,
            on,
        })
    }

    /// Destroys the slot now, reporting failure (dropping it does the same, silently).
    pub fn destroy(mut self) -> Result<(), Error> {
        self.destroyed = true;
        // Bound to a local so the control lock is released before `self` (and perhaps the
        // last handle of its area, whose drop takes the lock) goes.
        let result = self
            .shared
            .control()
            .call_ok(&Request::DestroySlot { slot: self.id.0 });
        result
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.destroyed {
            // Best effort: a broken connection took the slot with it.
            let _ = self
                .shared
                .control()
                .call_ok(&Request::DestroySlot { slot: self.id.0 });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fake_node;
    use crate::NodeOptions;
    use hamlyn_wire::MetaEntry;

    #[test]
    fn create_sends_the_slot_geometry_and_tickets_carry_it() {
        let (node, fake) = fake_node(NodeOptions::default());
        let area = node.area(8192).unwrap();
        let meta = node.meta_area(8).unwrap();
        let slot = node
            .slot(&area)
            .range(4096..8192)
            .meta(&meta)
            .queue(2)
            .perms(SlotPerms {
                write: true,
                read: true,
                atomic: false,
            })
            .create()
            .unwrap();
        let create = fake
            .requests()
            .into_iter()
            .find(|r| matches!(r, Request::CreateSlot { .. }))
            .unwrap();
        assert_eq!(
            create,
            Request::CreateSlot {
                area: area.id(),
                base: 4096,
                len: 4096,
                mode: mode::NORMAL,
                perms: perm::WRITE | perm::READ,
                meta_area: meta.area().id(),
                meta_base: 0,
                meta_count: 8,
                queue: 2,
            }
        );
        let t = slot.ticket(100..200, 2..5).unwrap();
        assert_eq!((t.node, t.incarnation), (node.id(), node.incarnation()));
        assert_eq!((t.slot, t.key), (slot.id(), slot.key()));
        assert_eq!(
            (t.offset, t.len, t.meta_first, t.meta_count),
            (100, 100, 2, 3)
        );
        assert_eq!((t.share, t.y()), (FULL_SHARE, 0));
        assert_eq!(t.flags, TicketFlags::WRITE | TicketFlags::READ);
        assert!(matches!(
            slot.ticket(0..4097, 0..1),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            slot.ticket(0..1, 7..9),
            Err(Error::MetaOutOfRange { .. })
        ));
        let all = slot.ticket_all().unwrap();
        assert_eq!((all.len, all.meta_count), (4096, 8));
    }

    #[test]
    fn builder_refuses_what_the_engine_would() {
        let (node, _fake) = fake_node(NodeOptions::default());
        let (other, _fake2) = fake_node(NodeOptions::default());
        let area = node.area(4096).unwrap();
        let foreign = other.area(4096).unwrap();
        let meta = node.meta_area(2).unwrap();
        assert!(matches!(
            node.slot(&area).create(),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            node.slot(&foreign).fast().create(),
            Err(Error::ForeignObject)
        ));
        assert!(matches!(
            node.slot(&area).range(0..4097).meta(&meta).create(),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            node.slot(&area).fast().queue(4).create(),
            Err(Error::NoSuchQueue { index: 4, count: 4 })
        ));
        let fast = node.slot(&area).fast().create().unwrap();
        let t = fast.ticket(0..64, 0..0).unwrap();
        assert_eq!(t.flags, TicketFlags::WRITE | TicketFlags::FAST);
        assert_eq!(t.meta_count, 0);
        assert!(matches!(
            node.slot(&area)
                .meta(&meta)
                .paranoid()
                .danger_direct()
                .create(),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn danger_direct_is_a_bit_of_the_create_request_and_only_on_request() {
        let (node, fake) = fake_node(NodeOptions::default());
        let area = node.area(4096).unwrap();
        let plain = node.slot(&area).fast().create().unwrap();
        let direct = node.slot(&area).fast().danger_direct().create().unwrap();
        assert!(!plain.is_direct() && direct.is_direct());
        let perms: Vec<u8> = fake
            .requests()
            .into_iter()
            .filter_map(|r| match r {
                Request::CreateSlot { perms, .. } => Some(perms),
                _ => None,
            })
            .collect();
        assert_eq!(perms, vec![perm::WRITE, perm::WRITE | perm::DANGER_DIRECT]);
    }

    #[test]
    fn paranoid_tickets_key_and_bound_their_entries() {
        let (node, fake) = fake_node(NodeOptions::default());
        let area = node.area(4096).unwrap();
        let meta = node.meta_area(4).unwrap();
        let slot = node
            .slot(&area)
            .paranoid_one_shot()
            .meta(&meta)
            .create()
            .unwrap();
        let a = slot.ticket(0..1024, 0..2).unwrap();
        let b = slot.ticket(1024..2048, 2..3).unwrap();
        assert_ne!(a.key, b.key);
        assert_ne!(a.key, slot.key(), "paranoid tickets carry the entry's key");
        for (i, t) in [(0, &a), (1, &a), (2, &b)] {
            let e = meta.entry(i).unwrap();
            assert_eq!(e.paranoid_key.get(), t.key);
            assert_eq!(
                (e.paranoid_low.get(), e.paranoid_high.get()),
                (t.offset, t.offset + t.len)
            );
            assert!(e.armed());
        }
        assert!(!meta.is_armed(3).unwrap());
        // The engine sees the same bytes (its own mapping of the metadata area).
        let areas = fake.areas.lock().unwrap();
        let engine_view = areas.get(&meta.area().id()).unwrap();
        let mut raw = [0u8; 128];
        engine_view.read(2 * 128, &mut raw).unwrap();
        assert_eq!(MetaEntry::read(&raw).unwrap().paranoid_key.get(), b.key);
        drop(areas);
        // Re-arming and disarming.
        meta.disarm(2).unwrap();
        assert!(!meta.is_armed(2).unwrap());
        meta.arm(2).unwrap();
        assert!(meta.is_armed(2).unwrap());
        assert!(matches!(
            slot.ticket(0..1, 1..1),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn rekey_revoke_inhibit_destroy_reach_the_engine() {
        let (node, fake) = fake_node(NodeOptions::default());
        let area = node.area(4096).unwrap();
        let mut slot = node.slot(&area).fast().create().unwrap();
        let id = slot.id().0;
        let k = slot.rekey().unwrap();
        assert_eq!((k, slot.key()), (0xBEEF_0000 + u64::from(id), k));
        slot.revoke().unwrap();
        slot.inhibit(true).unwrap();
        slot.destroy().unwrap();
        let tail: Vec<_> = fake.requests().into_iter().rev().take(4).collect();
        assert_eq!(
            tail,
            vec![
                Request::DestroySlot { slot: id },
                Request::Inhibit { slot: id, on: true },
                Request::Revoke { slot: id },
                Request::Rekey { slot: id },
            ]
        );
        // Dropping a slot destroys it; dropping the last area handle unregisters it.
        let s2 = node.slot(&area).fast().create().unwrap();
        let id2 = s2.id().0;
        drop(s2);
        let area_id = area.id();
        drop(area);
        let tail: Vec<_> = fake.requests().into_iter().rev().take(2).collect();
        assert_eq!(
            tail,
            vec![
                Request::UnregisterArea { area: area_id },
                Request::DestroySlot { slot: id2 },
            ]
        );
    }
}
