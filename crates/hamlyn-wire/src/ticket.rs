//! Tickets: the capability to write (or read, or update) part of a slot.
//!
//! A ticket names a node and its incarnation, a slot and its 64-bit key, a range of
//! metadata entries, a byte range of the slot, and a packet-counting *share* (DESIGN §3).
//! The share is the arc of the 2^32 counting circle the holder owns: its start value is
//! `Y = share mod 2^32`, so a fresh single-message ticket (share 2^32) has Y = 0.
//! [`Ticket::split`] divides the byte range and the share among delegates without telling
//! the receiver (dynamic group receive, seed 000 §2.5).
//!
//! # Why split refuses small shares
//! A group's accumulator returns to 0 early only if some proper subset of its packets sums
//! to 0 mod 2^32. With leaves of the split tree owning shares `w_i` (summing to 2^32), any
//! proper subset of members whose last packets arrived sums to between `w_min` and
//! `2^32 − w_min`, and the other packets shift that by less than the group's total packet
//! count `N`. So no premature zero is possible while `N < w_min`. Split keeps every share
//! at least [`MIN_SPLIT_SHARE`] (2^25) and a ticket may send at most `share >> 8` packets
//! ([`Ticket::packet_budget`]), so `N ≤ 2^24 < w_min` always holds.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::WireError;
use crate::ids::{NodeId, SlotId};

/// Bytes in a ticket's binary form.
pub const TICKET_LEN: usize = 64;
/// Binary ticket layout version.
pub const TICKET_VERSION: u8 = 1;
/// The whole counting circle: the share of a ticket that was never split.
pub const FULL_SHARE: u64 = 1 << 32;
/// The smallest share [`Ticket::split`] will make.
pub const MIN_SPLIT_SHARE: u64 = 1 << 25;
/// A ticket may send at most `share >> PACKET_BUDGET_SHIFT` packets per message.
pub const PACKET_BUDGET_SHIFT: u32 = 8;

/// What a ticket's holder is meant to do with it (the key is the real capability; the
/// engine checks slot permissions, these tell the holder's library which calls fit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct TicketFlags(pub u16);

impl TicketFlags {
    /// Remote writes into the byte range.
    pub const WRITE: TicketFlags = TicketFlags(1 << 0);
    /// Remote reads of the byte range.
    pub const READ: TicketFlags = TicketFlags(1 << 1);
    /// Remote atomics on 8-byte words of the byte range.
    pub const ATOMIC: TicketFlags = TicketFlags(1 << 2);
    /// Fast-mode sends: one word of metadata carried in the notification.
    pub const FAST: TicketFlags = TicketFlags(1 << 3);
    /// Every bit defined in layout version 1.
    pub const ALL: TicketFlags = TicketFlags(0x0F);

    /// Whether every bit of `other` is set here.
    pub const fn contains(self, other: TicketFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for TicketFlags {
    type Output = TicketFlags;
    fn bitor(self, rhs: TicketFlags) -> TicketFlags {
        TicketFlags(self.0 | rhs.0)
    }
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct RawTicket {
    version: u8,
    reserved0: u8,
    flags: U16,
    node: U32,
    incarnation: U32,
    slot: U32,
    key: U64,
    meta_first: U32,
    meta_count: U32,
    offset: U64,
    len: U64,
    share: U64,
    reserved1: U64,
}

const _: () = assert!(core::mem::size_of::<RawTicket>() == TICKET_LEN);

/// A capability to send to part of a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ticket {
    /// The node that owns the slot.
    pub node: NodeId,
    /// That node's incarnation when the ticket was made (a restarted node rejects it).
    pub incarnation: u32,
    /// The slot.
    pub slot: SlotId,
    /// The slot's (or the paranoid entry's) protection key.
    pub key: u64,
    /// First metadata entry the holder may use (ignored in fast mode).
    pub meta_first: u32,
    /// Number of metadata entries, starting at `meta_first`, the holder may use.
    pub meta_count: u32,
    /// Start of the granted byte range, relative to the slot's base.
    pub offset: u64,
    /// Length of the granted byte range.
    pub len: u64,
    /// Packet-counting share, 1..=2^32; the start value is `Y = share mod 2^32`.
    pub share: u64,
    /// What the holder may do.
    pub flags: TicketFlags,
}

/// Why a ticket could not be split.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SplitError {
    /// Zero delegates were asked for.
    #[error("cannot split into zero parts")]
    NoParts,
    /// A part's share would fall below the minimum that rules out a premature zero.
    #[error("share {share} split {parts} ways falls below the minimum {min}")]
    ShareTooSmall {
        /// The ticket's share.
        share: u64,
        /// Parts asked for.
        parts: usize,
        /// The smallest share a part may have.
        min: u64,
    },
    /// The ticket's byte range overflows (`offset + len` > 2^64): no part could hold it.
    #[error("the ticket's byte range overflows")]
    RangeOverflow,
    /// The byte sizes given do not add up to the ticket's byte range.
    #[error("part sizes add up to {sum} bytes, the ticket grants {len}")]
    SizesMismatch {
        /// Sum of the sizes given.
        sum: u128,
        /// The ticket's byte range length.
        len: u64,
    },
}

impl Ticket {
    /// The start value Y the holder puts in its message (share mod 2^32).
    pub fn y(&self) -> u32 {
        self.share as u32
    }

    /// Most packets one message sent with this ticket may have (see the module docs).
    pub fn packet_budget(&self) -> u64 {
        self.share >> PACKET_BUDGET_SHIFT
    }

    /// Splits the ticket among `parts` delegates: the byte range in even contiguous parts
    /// (the remainder goes to the last) and the share likewise. The shares sum to this
    /// ticket's share; all parts keep the same slot, key and metadata range.
    pub fn split(&self, parts: usize) -> Result<Vec<Ticket>, SplitError> {
        if parts == 0 {
            return Err(SplitError::NoParts);
        }
        // Refuse before allocating: at most share / MIN_SPLIT_SHARE (≤ 128) parts can exist.
        if parts as u64 > self.share / MIN_SPLIT_SHARE {
            return Err(SplitError::ShareTooSmall {
                share: self.share,
                parts,
                min: MIN_SPLIT_SHARE,
            });
        }
        let n = parts as u64;
        let base = self.len / n;
        let mut sizes = vec![base; parts];
        if let Some(last) = sizes.last_mut() {
            *last += self.len - base * n;
        }
        self.split_sizes(&sizes)
    }

    /// Splits the ticket among delegates with the given byte sizes (which must add up to
    /// the byte range); the share is divided evenly as in [`Ticket::split`].
    pub fn split_sizes(&self, sizes: &[u64]) -> Result<Vec<Ticket>, SplitError> {
        let parts = sizes.len();
        if parts == 0 {
            return Err(SplitError::NoParts);
        }
        let sum: u128 = sizes.iter().map(|&s| u128::from(s)).sum();
        if sum != u128::from(self.len) {
            return Err(SplitError::SizesMismatch { sum, len: self.len });
        }
        if self.offset.checked_add(self.len).is_none() {
            return Err(SplitError::RangeOverflow);
        }
        let n = parts as u64;
        let share_each = self.share / n;
        if share_each < MIN_SPLIT_SHARE {
            return Err(SplitError::ShareTooSmall {
                share: self.share,
                parts,
                min: MIN_SPLIT_SHARE,
            });
        }
        let mut out = Vec::with_capacity(parts);
        let mut offset = self.offset;
        for (i, &size) in sizes.iter().enumerate() {
            let share = if i + 1 == parts {
                self.share - share_each * (n - 1)
            } else {
                share_each
            };
            out.push(Ticket {
                offset,
                len: size,
                share,
                ..*self
            });
            offset += size;
        }
        Ok(out)
    }

    /// The ticket's 64-byte binary form.
    pub fn to_bytes(&self) -> [u8; TICKET_LEN] {
        let raw = RawTicket {
            version: TICKET_VERSION,
            reserved0: 0,
            flags: U16::new(self.flags.0),
            node: U32::new(self.node.0),
            incarnation: U32::new(self.incarnation),
            slot: U32::new(self.slot.0),
            key: U64::new(self.key),
            meta_first: U32::new(self.meta_first),
            meta_count: U32::new(self.meta_count),
            offset: U64::new(self.offset),
            len: U64::new(self.len),
            share: U64::new(self.share),
            reserved1: U64::new(0),
        };
        let mut out = [0u8; TICKET_LEN];
        out.copy_from_slice(raw.as_bytes());
        out
    }

    /// Parses and validates a ticket's binary form (exactly [`TICKET_LEN`] bytes at the
    /// start of `bytes`; the rest is ignored).
    pub fn from_bytes(bytes: &[u8]) -> Result<Ticket, WireError> {
        let (raw, _) = RawTicket::read_from_prefix(bytes).map_err(|_| WireError::Truncated {
            need: TICKET_LEN,
            have: bytes.len(),
        })?;
        if raw.version != TICKET_VERSION {
            return Err(WireError::UnsupportedVersion(raw.version));
        }
        let invalid = |field, why| Err(WireError::InvalidField { field, why });
        if raw.reserved0 != 0 || raw.reserved1.get() != 0 {
            return invalid("reserved", "reserved bytes must be zero");
        }
        if raw.flags.get() & !TicketFlags::ALL.0 != 0 {
            return invalid("flags", "undefined ticket flag bits");
        }
        let share = raw.share.get();
        if share == 0 || share > FULL_SHARE {
            return invalid("share", "share must be in 1..=2^32");
        }
        if raw.offset.get().checked_add(raw.len.get()).is_none() {
            return invalid("len", "offset + len overflows");
        }
        if raw
            .meta_first
            .get()
            .checked_add(raw.meta_count.get())
            .is_none()
        {
            return invalid("meta_count", "meta_first + meta_count overflows");
        }
        Ok(Ticket {
            node: NodeId(raw.node.get()),
            incarnation: raw.incarnation.get(),
            slot: SlotId(raw.slot.get()),
            key: raw.key.get(),
            meta_first: raw.meta_first.get(),
            meta_count: raw.meta_count.get(),
            offset: raw.offset.get(),
            len: raw.len.get(),
            share,
            flags: TicketFlags(raw.flags.get()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ticket(share: u64, len: u64) -> Ticket {
        Ticket {
            node: NodeId(3),
            incarnation: 9,
            slot: SlotId(7),
            key: 0xDEAD_BEEF_F00D_CAFE,
            meta_first: 2,
            meta_count: 1,
            offset: 100,
            len,
            share,
            flags: TicketFlags::WRITE,
        }
    }

    #[test]
    fn fresh_ticket_has_y_zero() {
        assert_eq!(ticket(FULL_SHARE, 10).y(), 0);
    }

    #[test]
    fn split_refuses_zero_parts_and_tiny_shares() {
        let t = ticket(FULL_SHARE, 1000);
        assert_eq!(t.split(0), Err(SplitError::NoParts));
        assert!(t.split(128).is_ok());
        assert!(matches!(
            t.split(129),
            Err(SplitError::ShareTooSmall { .. })
        ));
        assert!(matches!(
            t.split_sizes(&[1, 2]),
            Err(SplitError::SizesMismatch { .. })
        ));
    }

    proptest! {
        #[test]
        fn split_conserves_share_and_range(len in 0u64..1 << 40, parts in 1usize..=128) {
            let t = ticket(FULL_SHARE, len);
            let kids = t.split(parts).unwrap();
            prop_assert_eq!(kids.len(), parts);
            prop_assert_eq!(kids.iter().map(|k| k.share).sum::<u64>(), FULL_SHARE);
            prop_assert_eq!(kids.iter().map(|k| k.y()).fold(0u32, u32::wrapping_add), 0);
            let mut at = t.offset;
            for k in &kids {
                prop_assert_eq!(k.offset, at);
                prop_assert!(k.share >= MIN_SPLIT_SHARE);
                at += k.len;
            }
            prop_assert_eq!(at, t.offset + t.len);
        }

        #[test]
        fn binary_round_trip(key: u64, off in 0u64..1 << 62, len in 0u64..1 << 62,
                             share in 1u64..=FULL_SHARE, node: u32, slot: u32) {
            let t = Ticket { key, offset: off, len, share, node: NodeId(node),
                             slot: SlotId(slot), ..ticket(1, 0) };
            prop_assert_eq!(Ticket::from_bytes(&t.to_bytes()).unwrap(), t);
        }
    }
}
