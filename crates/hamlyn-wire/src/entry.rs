//! Layouts shared between the engine and applications: the 128-byte metadata entry and
//! the 32-byte notification entry (seed 000 Tables 2 and 3, DESIGN §4).
//!
//! Both live in shared memory later; here they are byte layouts with typed accessors.
//! The offsets are public so that a shared-memory implementation can reach the one
//! field it updates atomically (the accumulator, the notification sequence) directly.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::WireError;

/// Bytes in a metadata entry.
pub const META_ENTRY_LEN: usize = 128;
/// Bytes in a notification entry.
pub const NOTIF_ENTRY_LEN: usize = 32;

/// Metadata entry field offsets.
pub mod meta_off {
    /// User metadata, 60 bytes.
    pub const USER: usize = 0;
    /// 32-bit packet accumulator.
    pub const ACCUMULATOR: usize = 60;
    /// Paranoid-mode key (supersedes the slot key).
    pub const PARANOID_KEY: usize = 64;
    /// Paranoid-mode low limit (slot-relative, inclusive).
    pub const PARANOID_LOW: usize = 72;
    /// Paranoid-mode high limit (slot-relative, exclusive).
    pub const PARANOID_HIGH: usize = 80;
    /// The owner's cookie (the paper's "receive class pointer"), returned in notifications.
    pub const COOKIE: usize = 88;
    /// Bytes of user metadata the last message deposited.
    pub const META_LEN: usize = 96;
    /// State bits ([`super::MetaEntry::ARMED`]).
    pub const STATE: usize = 98;
    /// Messages completed on this entry (wrapping).
    pub const COMPLETED: usize = 100;
    /// Node that sent the last first packet.
    pub const SRC_NODE: usize = 104;
    /// Payload bytes counted so far for the message being assembled (u32, wrapping;
    /// added to atomically by every packet, taken back when the message completes).
    pub const ASSEMBLING_BYTES: usize = 108;
    /// Lowest offset of the first packets counted so far for the message being
    /// assembled, stored inverted (`!offset`, so 0 means none yet; slot-relative).
    pub const ASSEMBLING_LOW: usize = 112;
    /// First offset (slot-relative) of the last message completed on this entry.
    pub const MESSAGE_OFFSET: usize = 120;
}

/// One message's metadata entry: 128 bytes in the receiver's metadata area.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct MetaEntry {
    /// User metadata bytes (the first `meta_len` are valid).
    pub user: [u8; 60],
    /// Packet accumulator: returns to 0 when every packet has arrived.
    pub accumulator: U32,
    /// Paranoid-mode key, compared with the packet's key instead of the slot's.
    pub paranoid_key: U64,
    /// Paranoid-mode low limit of the byte range (slot-relative, inclusive).
    pub paranoid_low: U64,
    /// Paranoid-mode high limit of the byte range (slot-relative, exclusive).
    pub paranoid_high: U64,
    /// The owner's cookie, echoed in notifications.
    pub cookie: U64,
    /// Bytes of user metadata the last message deposited.
    pub meta_len: U16,
    /// State bits: [`MetaEntry::ARMED`].
    pub state: U16,
    /// Messages completed on this entry (wrapping).
    pub completed: U32,
    /// Node that sent the last first packet.
    pub src_node: U32,
    /// Payload bytes counted so far for the message being assembled (wrapping).
    pub assembling_bytes: U32,
    /// Lowest first-packet offset of the message being assembled, inverted (0: none).
    pub assembling_low: U64,
    /// First offset (slot-relative) of the last message completed on this entry.
    pub message_offset: U64,
}

const _: () = assert!(core::mem::size_of::<MetaEntry>() == META_ENTRY_LEN);

impl MetaEntry {
    /// State bit: a paranoid_one_shot entry accepts one message (cleared on completion,
    /// set again by the owner to re-arm).
    pub const ARMED: u16 = 1;

    /// An all-zero entry.
    pub fn zeroed() -> MetaEntry {
        <MetaEntry as zerocopy::FromZeros>::new_zeroed()
    }

    /// Reads an entry from the start of `bytes`.
    pub fn read(bytes: &[u8]) -> Result<MetaEntry, WireError> {
        MetaEntry::read_from_prefix(bytes)
            .map(|(e, _)| e)
            .map_err(|_| WireError::Truncated {
                need: META_ENTRY_LEN,
                have: bytes.len(),
            })
    }

    /// The entry's 128 bytes.
    pub fn as_bytes(&self) -> &[u8] {
        IntoBytes::as_bytes(self)
    }

    /// Whether a paranoid_one_shot entry will accept a message.
    pub fn armed(&self) -> bool {
        self.state.get() & Self::ARMED != 0
    }

    /// The valid user metadata.
    pub fn metadata(&self) -> &[u8] {
        let n = usize::from(self.meta_len.get()).min(self.user.len());
        &self.user[..n]
    }
}

/// What a notification entry reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u16)]
pub enum NotifKind {
    /// Every packet of a message (or group) arrived; `meta_index` names its entry.
    Message = 1,
    /// A fast-mode message arrived; `word` is its metadata.
    Fast = 2,
    /// A peer this queue had partial messages from is gone; `src_node` names it.
    PeerDown = 3,
    /// A remote read's reply landed; `word` is the request id, `len` the request's
    /// sequence and the high byte of `flags` its terminus index.
    ReadDone = 4,
    /// A remote atomic's old value landed; `word` is the old value, `len` the request's
    /// sequence and the high byte of `flags` its terminus index.
    AtomicDone = 5,
    /// Notifications were lost to a full queue; `word` is how many.
    Overflow = 6,
}

impl NotifKind {
    /// The kind for a wire value, if it is defined.
    pub fn from_u16(v: u16) -> Option<NotifKind> {
        Some(match v {
            1 => NotifKind::Message,
            2 => NotifKind::Fast,
            3 => NotifKind::PeerDown,
            4 => NotifKind::ReadDone,
            5 => NotifKind::AtomicDone,
            6 => NotifKind::Overflow,
            _ => return None,
        })
    }
}

/// Notification entry field offsets.
pub mod notif_off {
    /// Sequence/wrap word, written last: `lap * capacity + index + 1` style; 0 = empty.
    pub const SEQ: usize = 0;
    /// [`super::NotifKind`].
    pub const KIND: usize = 4;
    /// Header flags of the completing packet (high byte: an answer's terminus index).
    pub const FLAGS: usize = 6;
    /// Slot.
    pub const SLOT: usize = 8;
    /// Metadata index (all ones in fast mode).
    pub const META_INDEX: usize = 12;
    /// Word: fast metadata, tag, cookie or count.
    pub const WORD: usize = 16;
    /// Sending node.
    pub const SRC_NODE: usize = 24;
    /// Length, status, or an answer's request sequence.
    pub const LEN: usize = 28;
}

/// A 32-byte notification queue entry.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct NotifEntry {
    /// Sequence/wrap word; written last by the producer, 0 means "not yet written".
    pub seq: U32,
    /// [`NotifKind`] as a number.
    pub kind: U16,
    /// Header flags of the packet that completed the message (low byte); for `ReadDone`
    /// and `AtomicDone`, the high byte is the index of the terminus that sent the request.
    pub flags: U16,
    /// The slot the message arrived in.
    pub slot: U32,
    /// The message's metadata entry, or all ones in fast mode.
    pub meta_index: U32,
    /// Fast metadata, the tag, the entry's cookie, or a count, depending on `kind`.
    pub word: U64,
    /// The sending node.
    pub src_node: U32,
    /// Bytes of the completing packet's payload, or a status code; for `ReadDone` and
    /// `AtomicDone`, the sequence number of the request answered.
    pub len: U32,
}

const _: () = assert!(core::mem::size_of::<NotifEntry>() == NOTIF_ENTRY_LEN);

impl NotifEntry {
    /// An all-zero (empty) entry.
    pub fn zeroed() -> NotifEntry {
        <NotifEntry as zerocopy::FromZeros>::new_zeroed()
    }

    /// Reads an entry from the start of `bytes`.
    pub fn read(bytes: &[u8]) -> Result<NotifEntry, WireError> {
        NotifEntry::read_from_prefix(bytes)
            .map(|(e, _)| e)
            .map_err(|_| WireError::Truncated {
                need: NOTIF_ENTRY_LEN,
                have: bytes.len(),
            })
    }

    /// The entry's 32 bytes.
    pub fn as_bytes(&self) -> &[u8] {
        IntoBytes::as_bytes(self)
    }

    /// The entry's kind, if it is a defined one.
    pub fn kind(&self) -> Option<NotifKind> {
        NotifKind::from_u16(self.kind.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_match_the_struct() {
        let mut e = MetaEntry::zeroed();
        e.accumulator.set(0x0403_0201);
        e.paranoid_key.set(0x1111_1111_1111_1111);
        e.state.set(MetaEntry::ARMED);
        e.cookie.set(0x2222_2222_2222_2222);
        let b = e.as_bytes();
        assert_eq!(
            &b[meta_off::ACCUMULATOR..meta_off::ACCUMULATOR + 4],
            &[1, 2, 3, 4]
        );
        assert_eq!(b[meta_off::PARANOID_KEY], 0x11);
        assert_eq!(b[meta_off::COOKIE], 0x22);
        assert_eq!(b[meta_off::STATE], 1);
        assert_eq!(MetaEntry::read(b).unwrap(), e);
        let mut n = NotifEntry::zeroed();
        n.seq.set(5);
        n.word.set(0xAB);
        n.len.set(0xCD);
        let nb = n.as_bytes();
        assert_eq!(
            (nb[notif_off::SEQ], nb[notif_off::WORD], nb[notif_off::LEN]),
            (5, 0xAB, 0xCD)
        );
    }
}
