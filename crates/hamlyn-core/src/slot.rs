//! The slot table: the protected names of message areas (seed 000 §2.2, §2.7).
//!
//! A slot names part of an area (base and length), holds the 64-bit key a sender must
//! present, a mode, the metadata entries messages to it use, the notification queue it
//! posts to, and what it permits. Lookup is O(1): a slot number is an index into a vector;
//! freed numbers are reused, and a reused number gets a new key from the caller, so an
//! old ticket fails the key check.

use hamlyn_wire::entry::META_ENTRY_LEN;
use hamlyn_wire::SlotId;

use crate::endpoint::{EndpointCounts, EndpointSpec};
use crate::memory::AreaId;
use crate::receive::QueueId;
use crate::reject::RejectCounts;

/// Who owns a slot (a client of the engine); only the owner may change it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct OwnerId(pub u32);

/// How a slot checks and reports arriving messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SlotMode {
    /// The slot key protects the whole slot.
    Normal,
    /// Each metadata entry carries its own key and byte range, checked instead of the
    /// slot key (per-sender protection, seed 000 §2.7).
    Paranoid,
    /// Paranoid, and an entry takes one message, then refuses more until its owner
    /// re-arms it (bounds notification-queue use).
    ParanoidOneShot,
    /// Single-packet messages whose one word of metadata travels in the notification;
    /// no metadata area.
    Fast,
    /// A receive endpoint (seed 002): single-packet messages without metadata bytes, each
    /// deposited in the next buffer the receiver posted ([`crate::endpoint`]); no
    /// metadata area. Made by [`SlotTable::create_endpoint`].
    Endpoint,
}

impl SlotMode {
    /// Whether entries carry their own key and range.
    pub fn is_paranoid(self) -> bool {
        matches!(self, SlotMode::Paranoid | SlotMode::ParanoidOneShot)
    }
}

/// Which operations a slot accepts besides plain writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlotPerms {
    /// Remote writes.
    pub write: bool,
    /// Remote reads.
    pub read: bool,
    /// Remote atomics on 8-byte aligned words.
    pub atomic: bool,
}

impl Default for SlotPerms {
    fn default() -> SlotPerms {
        SlotPerms {
            write: true,
            read: false,
            atomic: false,
        }
    }
}

/// The metadata entries of a slot: `count` 128-byte entries starting at byte `base` of
/// area `area`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MetaRange {
    /// The metadata area.
    pub area: AreaId,
    /// Byte offset of entry 0 in that area.
    pub base: u64,
    /// Number of entries.
    pub count: u32,
}

impl MetaRange {
    /// Byte offset of entry `index` in the metadata area, if it exists.
    pub fn entry_offset(&self, index: u32) -> Option<u64> {
        (index < self.count).then(|| self.base + u64::from(index) * META_ENTRY_LEN as u64)
    }
}

/// What a slot is made of; everything but the key, which the table keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlotConfig {
    /// The owning client.
    pub owner: OwnerId,
    /// The message area.
    pub area: AreaId,
    /// Offset of the slot's base in the area.
    pub base: u64,
    /// Bytes the slot covers from its base.
    pub len: u64,
    /// The mode.
    pub mode: SlotMode,
    /// Metadata entries (required for every mode but [`SlotMode::Fast`]).
    pub meta: Option<MetaRange>,
    /// The notification queue completions are posted to, if any.
    pub queue: Option<QueueId>,
    /// Accepted operations.
    pub perms: SlotPerms,
}

/// A live slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Its configuration.
    pub config: SlotConfig,
    /// The key senders must present (normal and fast modes).
    pub key: u64,
    /// Revoked: every packet is refused until the slot is rekeyed.
    pub revoked: bool,
    /// Write-inhibited: writes are refused, reads still served (Thekkath).
    pub inhibited: bool,
    /// Packets refused, by reason.
    pub rejects: RejectCounts,
    /// Packets accepted.
    pub packets: u64,
    /// Payload bytes accepted.
    pub bytes: u64,
    /// Messages completed.
    pub messages: u64,
    /// Danger: holders of the key on this node may map the slot and deposit, count and
    /// notify without the engine ([`SlotTable::create_direct`]). Their deposits bypass
    /// every check and counter here.
    pub direct: bool,
    /// A receive endpoint's shape and counters ([`SlotMode::Endpoint`] slots only).
    pub endpoint: Option<(EndpointSpec, EndpointCounts)>,
}

/// Why a slot-table operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SlotError {
    /// No slot with that number exists.
    #[error("no such slot")]
    NoSuchSlot,
    /// The caller does not own the slot.
    #[error("slot owned by another client")]
    NotOwner,
    /// A non-fast slot was created without metadata entries.
    #[error("this mode needs metadata entries")]
    NeedsMetadata,
    /// The slot's byte range overflows.
    #[error("slot range overflows")]
    RangeOverflow,
    /// The table is full (2^32 − 1 slots).
    #[error("slot table full")]
    TableFull,
    /// Paranoid slots cannot be direct: their protection is a key and range per entry,
    /// checked on every packet, and a direct sender's deposits are never checked.
    #[error("paranoid slots cannot allow direct access")]
    DirectParanoid,
    /// An endpoint slot must be made by [`SlotTable::create_endpoint`], with the mode
    /// [`SlotMode::Endpoint`] and exactly its layout's length, 64-byte aligned.
    #[error("an endpoint needs the endpoint mode and exactly its layout's bytes")]
    EndpointShape,
}

/// All slots of one node.
#[derive(Clone, Debug, Default)]
pub struct SlotTable {
    slots: Vec<Option<Slot>>,
    /// Numbers of free entries; may also hold numbers past the end or of entries reused
    /// since (after a trim), which `create` skips.
    free: Vec<u32>,
    live: usize,
    /// The table's length when the free list was last rebuilt (see `trim`).
    rebuilt_at: usize,
}

impl SlotTable {
    /// An empty table.
    pub fn new() -> SlotTable {
        SlotTable::default()
    }

    /// Creates a slot with `key`; returns its number.
    pub fn create(&mut self, config: SlotConfig, key: u64) -> Result<SlotId, SlotError> {
        if config.mode == SlotMode::Endpoint {
            return Err(SlotError::EndpointShape);
        }
        self.insert(config, key)
    }

    fn insert(&mut self, config: SlotConfig, key: u64) -> Result<SlotId, SlotError> {
        if !matches!(config.mode, SlotMode::Fast | SlotMode::Endpoint) && config.meta.is_none() {
            return Err(SlotError::NeedsMetadata);
        }
        if config.base.checked_add(config.len).is_none() {
            return Err(SlotError::RangeOverflow);
        }
        let slot = Slot {
            config,
            key,
            revoked: false,
            inhibited: false,
            rejects: RejectCounts::default(),
            packets: 0,
            bytes: 0,
            messages: 0,
            direct: false,
            endpoint: None,
        };
        let reusable = loop {
            match self.free.pop() {
                Some(i) if self.slots.get(i as usize).is_some_and(Option::is_none) => {
                    break Some(i)
                }
                // Past the end, or reused since: a number left by a trim.
                Some(_) => continue,
                None => break None,
            }
        };
        let index = match reusable {
            Some(i) => {
                self.slots[i as usize] = Some(slot);
                i
            }
            None => {
                let i = u32::try_from(self.slots.len()).map_err(|_| SlotError::TableFull)?;
                if i == u32::MAX {
                    return Err(SlotError::TableFull);
                }
                self.slots.push(Some(slot));
                i
            }
        };
        self.live += 1;
        Ok(SlotId(index))
    }

    /// Creates a *direct* slot with `key`: a holder of the key on this node may be given
    /// mappings of the slot's memory and notification queue and deposit, count and notify
    /// by itself (DESIGN §2, "Direct slots"; [`crate::Interface::check_direct`] is the
    /// check made before). Normal and fast modes only ([`SlotError::DirectParanoid`]).
    pub fn create_direct(&mut self, config: SlotConfig, key: u64) -> Result<SlotId, SlotError> {
        if config.mode.is_paranoid() {
            return Err(SlotError::DirectParanoid);
        }
        let id = self.create(config, key)?;
        if let Some(s) = self.get_mut(id) {
            s.direct = true;
        }
        Ok(id)
    }

    /// Creates a receive endpoint with `key` ([`SlotMode::Endpoint`], `config.len` equal
    /// to the layout's length, base 64-byte aligned), direct if `direct`.
    pub fn create_endpoint(
        &mut self,
        config: SlotConfig,
        spec: EndpointSpec,
        key: u64,
        direct: bool,
    ) -> Result<SlotId, SlotError> {
        if config.mode != SlotMode::Endpoint
            || config.len != spec.layout.len()
            || config.base % 64 != 0
        {
            return Err(SlotError::EndpointShape);
        }
        let id = self.insert(config, key)?;
        if let Some(s) = self.get_mut(id) {
            s.direct = direct;
            s.endpoint = Some((spec, EndpointCounts::default()));
        }
        Ok(id)
    }

    /// The slot, if it exists. O(1).
    pub fn get(&self, id: SlotId) -> Option<&Slot> {
        self.slots.get(id.0 as usize).and_then(Option::as_ref)
    }

    /// The slot, mutably, if it exists. O(1).
    pub fn get_mut(&mut self, id: SlotId) -> Option<&mut Slot> {
        self.slots.get_mut(id.0 as usize).and_then(Option::as_mut)
    }

    fn owned(&mut self, owner: OwnerId, id: SlotId) -> Result<&mut Slot, SlotError> {
        let slot = self.get_mut(id).ok_or(SlotError::NoSuchSlot)?;
        if slot.config.owner != owner {
            return Err(SlotError::NotOwner);
        }
        Ok(slot)
    }

    /// Gives the slot a new key (old tickets stop working) and lifts a revocation.
    pub fn rekey(&mut self, owner: OwnerId, id: SlotId, key: u64) -> Result<(), SlotError> {
        let slot = self.owned(owner, id)?;
        slot.key = key;
        slot.revoked = false;
        Ok(())
    }

    /// Revokes every ticket for the slot: all packets are refused until a rekey.
    pub fn revoke(&mut self, owner: OwnerId, id: SlotId) -> Result<(), SlotError> {
        self.owned(owner, id)?.revoked = true;
        Ok(())
    }

    /// Sets or clears write-inhibit.
    pub fn inhibit(&mut self, owner: OwnerId, id: SlotId, on: bool) -> Result<(), SlotError> {
        self.owned(owner, id)?.inhibited = on;
        Ok(())
    }

    /// Destroys the slot; its number may be reused.
    pub fn destroy(&mut self, owner: OwnerId, id: SlotId) -> Result<Slot, SlotError> {
        self.owned(owner, id)?;
        let slot = self.slots[id.0 as usize]
            .take()
            .ok_or(SlotError::NoSuchSlot)?;
        self.free.push(id.0);
        self.live -= 1;
        self.trim();
        Ok(slot)
    }

    /// Gives memory back once the table is mostly empty: drops the free entries at its
    /// end, rebuilds the free list once the table has halved since the last rebuild, and
    /// shrinks both vectors when they hold under a quarter of their capacity. A client
    /// that made a million slots and left must not leave the engine holding their memory.
    /// Amortized O(1) per destroy.
    fn trim(&mut self) {
        while self.slots.last().is_some_and(Option::is_none) {
            self.slots.pop();
        }
        let len = self.slots.len();
        if len <= self.rebuilt_at / 2 {
            self.free.clear();
            self.free.extend(
                self.slots
                    .iter()
                    .enumerate()
                    .rev()
                    .filter(|(_, s)| s.is_none())
                    .map(|(i, _)| i as u32),
            );
            self.rebuilt_at = len;
        }
        self.rebuilt_at = self.rebuilt_at.max(len);
        if len < self.slots.capacity() / 4 {
            self.slots.shrink_to(len * 2);
        }
        if self.free.len() < self.free.capacity() / 4 {
            self.free.shrink_to(self.free.len() * 2);
        }
    }

    /// Destroys every slot of `owner` (the client died); returns their numbers.
    pub fn destroy_owner(&mut self, owner: OwnerId) -> Vec<SlotId> {
        let ids: Vec<SlotId> = self
            .iter()
            .filter(|(_, s)| s.config.owner == owner)
            .map(|(id, _)| id)
            .collect();
        for &id in &ids {
            let _ = self.destroy(owner, id);
        }
        ids
    }

    /// Number of live slots.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether no slot is live.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Live slots in number order.
    pub fn iter(&self) -> impl Iterator<Item = (SlotId, &Slot)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (SlotId(i as u32), s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fast(owner: u32) -> SlotConfig {
        SlotConfig {
            owner: OwnerId(owner),
            area: AreaId(0),
            base: 0,
            len: 64,
            mode: SlotMode::Fast,
            meta: None,
            queue: None,
            perms: SlotPerms {
                write: true,
                read: false,
                atomic: false,
            },
        }
    }

    /// A client that made a hundred thousand slots and left gives their memory back, the
    /// survivor's slot keeps its number, and numbers are handed out compactly afterwards.
    #[test]
    fn an_emptied_table_gives_its_memory_back() {
        // Miri interprets every step: a smaller table shows the same.
        let n = if cfg!(miri) { 500 } else { 100_000 };
        let mut t = SlotTable::new();
        let survivor = t.create(fast(1), 7).expect("slot");
        for _ in 0..n {
            t.create(fast(2), 9).expect("slot");
        }
        let big = t.slots.capacity();
        assert!(big > n);
        assert_eq!(t.destroy_owner(OwnerId(2)).len(), n);
        assert_eq!(t.len(), 1);
        assert!(
            t.slots.capacity() < 16,
            "{} of {big} kept",
            t.slots.capacity()
        );
        assert!(t.free.capacity() < 16, "{} kept", t.free.capacity());
        assert_eq!(t.get(survivor).map(|s| s.key), Some(7));
        // Fresh numbers continue right after the survivor.
        assert_eq!(t.create(fast(3), 1).expect("slot"), SlotId(1));
        // Holes in the middle are reused before the table grows.
        let ids: Vec<_> = (0..10)
            .map(|_| t.create(fast(3), 1).expect("slot"))
            .collect();
        for id in &ids[2..5] {
            t.destroy(OwnerId(3), *id).expect("destroy");
        }
        let again: Vec<_> = (0..3)
            .map(|_| t.create(fast(3), 1).expect("slot").0)
            .collect();
        let mut want: Vec<_> = ids[2..5].iter().map(|i| i.0).collect();
        let mut got = again.clone();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
        assert_eq!(t.len(), 12);
    }
}
