//! Why a packet is refused, and the counters that record it.

use hamlyn_wire::{Header, SlotId};

/// Why the receiving engine refused a packet. The discriminant is the code carried in a
/// NACK's `word` (and in error completions), stable across versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum RejectReason {
    /// The header did not parse (bad magic, version, lengths, flags).
    Malformed = 1,
    /// The packet was addressed to another node.
    WrongNode = 2,
    /// No slot with that number exists.
    UnknownSlot = 3,
    /// The key does not match the slot's key.
    BadKey = 4,
    /// The slot's keys were revoked; no ticket is valid until it is rekeyed.
    Revoked = 5,
    /// The payload falls outside the slot (or the ticket's range).
    OutOfBounds = 6,
    /// The slot is write-inhibited.
    Inhibited = 7,
    /// The metadata index is outside the slot's metadata range.
    BadMetaIndex = 8,
    /// A paranoid slot's entry key does not match the packet's key.
    ParanoidKey = 9,
    /// The payload falls outside a paranoid entry's byte range.
    ParanoidBounds = 10,
    /// A paranoid_one_shot entry already took its message and was not re-armed.
    Disarmed = 11,
    /// The packet's form does not fit the slot's mode (fast packet on a normal slot, or a
    /// multi-packet message on a fast slot).
    BadMode = 12,
    /// The slot does not permit this operation (read, atomic).
    NotPermitted = 13,
    /// The slot's area is no longer registered.
    AreaGone = 14,
    /// The peer the operation depended on is down.
    PeerDown = 15,
    /// The packet or ticket came from an older incarnation of a node.
    StaleIncarnation = 16,
    /// The operation is not supported by this engine.
    Unsupported = 17,
    /// The receive endpoint had no buffer posted: the message was discarded and counted
    /// (reported to the sender only if the endpoint asks for it).
    NoBuffer = 18,
    /// The message is larger than the receive endpoint's buffers.
    TooLarge = 19,
    /// The receive endpoint's posted-buffer ring holds impossible indices (its owner
    /// scribbled over it): nothing was deposited.
    RingCorrupt = 20,
}

impl RejectReason {
    /// Every reason, in code order.
    pub const ALL: [RejectReason; 20] = [
        RejectReason::Malformed,
        RejectReason::WrongNode,
        RejectReason::UnknownSlot,
        RejectReason::BadKey,
        RejectReason::Revoked,
        RejectReason::OutOfBounds,
        RejectReason::Inhibited,
        RejectReason::BadMetaIndex,
        RejectReason::ParanoidKey,
        RejectReason::ParanoidBounds,
        RejectReason::Disarmed,
        RejectReason::BadMode,
        RejectReason::NotPermitted,
        RejectReason::AreaGone,
        RejectReason::PeerDown,
        RejectReason::StaleIncarnation,
        RejectReason::Unsupported,
        RejectReason::NoBuffer,
        RejectReason::TooLarge,
        RejectReason::RingCorrupt,
    ];

    /// The wire code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The reason for a wire code, if it is defined.
    pub fn from_code(code: u64) -> Option<RejectReason> {
        RejectReason::ALL
            .iter()
            .copied()
            .find(|r| u64::from(r.code()) == code)
    }

    /// A short lower-case name, for stats and logs.
    pub fn name(self) -> &'static str {
        match self {
            RejectReason::Malformed => "malformed",
            RejectReason::WrongNode => "wrong_node",
            RejectReason::UnknownSlot => "unknown_slot",
            RejectReason::BadKey => "bad_key",
            RejectReason::Revoked => "revoked",
            RejectReason::OutOfBounds => "out_of_bounds",
            RejectReason::Inhibited => "inhibited",
            RejectReason::BadMetaIndex => "bad_meta_index",
            RejectReason::ParanoidKey => "paranoid_key",
            RejectReason::ParanoidBounds => "paranoid_bounds",
            RejectReason::Disarmed => "disarmed",
            RejectReason::BadMode => "bad_mode",
            RejectReason::NotPermitted => "not_permitted",
            RejectReason::AreaGone => "area_gone",
            RejectReason::PeerDown => "peer_down",
            RejectReason::StaleIncarnation => "stale_incarnation",
            RejectReason::Unsupported => "unsupported",
            RejectReason::NoBuffer => "no_buffer",
            RejectReason::TooLarge => "too_large",
            RejectReason::RingCorrupt => "ring_corrupt",
        }
    }
}

impl core::fmt::Display for RejectReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// A refused packet: why, which slot (if one was found), and the NACK to send back (none
/// for packets that must not be answered, such as NACKs themselves).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reject {
    /// Why.
    pub reason: RejectReason,
    /// The slot the packet named, if it exists.
    pub slot: Option<SlotId>,
    /// The NACK header to send to the packet's source.
    pub nack: Option<Header>,
    /// Counted only: a message a receive endpoint discarded for want of a buffer, whose
    /// endpoint does not report discards (FLIPC's optimistic style). Its sender is told
    /// nothing: no NACK, and a local send completes as sent.
    pub quiet: bool,
}

/// Reject counters, one per reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RejectCounts([u64; 24]);

impl RejectCounts {
    /// Counts one reject.
    pub fn bump(&mut self, reason: RejectReason) {
        let i = usize::from(reason.code());
        if let Some(c) = self.0.get_mut(i) {
            *c += 1;
        }
    }
    /// Rejects counted for `reason`.
    pub fn get(&self, reason: RejectReason) -> u64 {
        self.0.get(usize::from(reason.code())).copied().unwrap_or(0)
    }
    /// All rejects.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    /// (reason, count) for every non-zero count.
    pub fn nonzero(&self) -> impl Iterator<Item = (RejectReason, u64)> + '_ {
        RejectReason::ALL
            .iter()
            .map(|&r| (r, self.get(r)))
            .filter(|&(_, n)| n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_distinct() {
        for (i, r) in RejectReason::ALL.iter().enumerate() {
            assert_eq!(usize::from(r.code()), i + 1);
            assert_eq!(RejectReason::from_code(u64::from(r.code())), Some(*r));
        }
        assert_eq!(RejectReason::from_code(0), None);
        assert_eq!(RejectReason::from_code(99), None);
    }
}
