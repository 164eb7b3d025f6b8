//! The v1 packet header: one 64-byte cache line, little-endian (DESIGN §4).
//!
//! A packet on any fabric is `header ‖ metadata (meta_len bytes) ‖ payload (payload_len
//! bytes)`. [`Header::parse`] checks the fixed part once; after it every field of the
//! returned [`Header`] is a plain, valid value. [`Header::emit`] writes the same bytes back.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::WireError;
use crate::ids::{NodeId, SlotId};

/// Bytes in a v1 header.
pub const HEADER_LEN: usize = 64;
/// The magic number, "HM" read as a little-endian u16.
pub const MAGIC: u16 = 0x4D48;
/// The wire version this build speaks.
pub const VERSION: u8 = 1;
/// Most user metadata bytes one message can carry (in its first packet).
pub const MAX_META_LEN: usize = 60;
/// `meta_index` value that marks a fast-mode packet: `word` is its only metadata.
pub const FAST_META_INDEX: u32 = u32::MAX;

/// The header exactly as it lies on the wire.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
struct RawHeader {
    magic: U16,
    version: u8,
    op: u8,
    flags: U16,
    meta_len: U16,
    src_node: U32,
    dst_node: U32,
    slot: U32,
    meta_index: U32,
    key: U64,
    offset: U64,
    payload_len: U32,
    delta: U32,
    word: U64,
    request: U64,
}

const _: () = assert!(core::mem::size_of::<RawHeader>() == HEADER_LEN);

/// What a packet asks the receiving engine to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum Op {
    /// Deposit the payload into a slot and count it.
    Write = 1,
    /// Ask the target to read from a slot and send the bytes back (remote read).
    ReadReq = 2,
    /// Bytes answering a [`Op::ReadReq`], written into the reader's reply slot.
    ReadResp = 3,
    /// Ask the target to execute an atomic on an 8-byte word of a slot.
    AtomicReq = 4,
    /// The old value answering an [`Op::AtomicReq`].
    AtomicResp = 5,
    /// A rejection of an earlier packet; `word` holds the reason code.
    Nack = 6,
    /// Connection set-up between engines (node id and incarnation).
    Hello = 7,
    /// Liveness beacon between engines.
    Heartbeat = 8,
    /// Engine-to-engine registry traffic (name → seed): the payload is an encoded
    /// control `Request` (`word` = 0) or `Reply` (`word` = 1), correlated by `request`.
    Registry = 9,
}

impl Op {
    /// The op for a wire byte, if it is defined.
    pub fn from_u8(v: u8) -> Option<Op> {
        Some(match v {
            1 => Op::Write,
            2 => Op::ReadReq,
            3 => Op::ReadResp,
            4 => Op::AtomicReq,
            5 => Op::AtomicResp,
            6 => Op::Nack,
            7 => Op::Hello,
            8 => Op::Heartbeat,
            9 => Op::Registry,
            _ => return None,
        })
    }
}

/// Header flag bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u16);

impl Flags {
    /// First packet of a message (carries the metadata, if any).
    pub const FIRST: Flags = Flags(1 << 0);
    /// Last packet of a message (its delta closes the sender's count).
    pub const LAST: Flags = Flags(1 << 1);
    /// Single-packet message: notify on arrival without touching the accumulator.
    pub const NOTIFY_NOW: Flags = Flags(1 << 2);
    /// Fast-mode packet: `meta_index` is all ones and `word` is the metadata.
    pub const FAST: Flags = Flags(1 << 3);
    /// Wake the receiver if it sleeps when the message completes.
    pub const WAKE: Flags = Flags(1 << 4);
    /// Post a notification when the message completes.
    pub const NOTIFY: Flags = Flags(1 << 5);
    /// Every flag bit v1 defines.
    pub const ALL: Flags = Flags(0x3F);

    /// No flags.
    pub const fn empty() -> Flags {
        Flags(0)
    }
    /// Whether every bit of `other` is set here.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
    /// Both sets of bits.
    pub const fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
    /// These bits without those of `other`.
    pub const fn without(self, other: Flags) -> Flags {
        Flags(self.0 & !other.0)
    }
}

impl core::ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        self.union(rhs)
    }
}

/// Correlates a request with its NACK or reply: the sender's terminus and sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RequestId {
    /// The sending terminus (or other request source) on the sending node.
    pub terminus: u32,
    /// The request's sequence number within that terminus.
    pub seq: u32,
}

impl RequestId {
    /// The 64-bit wire form: terminus in the high half, sequence in the low half.
    pub const fn to_u64(self) -> u64 {
        ((self.terminus as u64) << 32) | self.seq as u64
    }
    /// The request id a wire word names.
    pub const fn from_u64(v: u64) -> RequestId {
        RequestId {
            terminus: (v >> 32) as u32,
            seq: v as u32,
        }
    }
}

/// A parsed, valid v1 header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// What the packet asks for.
    pub op: Op,
    /// Flag bits (all defined in v1).
    pub flags: Flags,
    /// User metadata bytes following the header (first packet only, at most 60).
    pub meta_len: u16,
    /// The sending node.
    pub src: NodeId,
    /// The destination node.
    pub dst: NodeId,
    /// The destination slot.
    pub slot: SlotId,
    /// The metadata entry of the message, or [`FAST_META_INDEX`] in fast mode.
    pub meta_index: u32,
    /// The protection key presented for the slot (or the paranoid entry).
    pub key: u64,
    /// Offset of this packet's payload from the slot's base.
    pub offset: u64,
    /// Payload bytes following the metadata.
    pub payload_len: u32,
    /// Packet-counting delta added to the entry's accumulator.
    pub delta: u32,
    /// Tag, fast-mode metadata, immediate value or atomic operand, depending on `op`.
    pub word: u64,
    /// Correlates NACKs and replies with the request.
    pub request: RequestId,
}

impl Header {
    /// A header with the given op and every other field zero.
    pub fn new(op: Op) -> Header {
        Header {
            op,
            flags: Flags::empty(),
            meta_len: 0,
            src: NodeId(0),
            dst: NodeId(0),
            slot: SlotId(0),
            meta_index: 0,
            key: 0,
            offset: 0,
            payload_len: 0,
            delta: 0,
            word: 0,
            request: RequestId::default(),
        }
    }

    /// Parses and validates the first [`HEADER_LEN`] bytes of `bytes`.
    ///
    /// Checks the magic, version, op, flag bits, the metadata length (at most 60, only on
    /// a FIRST packet) and fast-mode consistency (FAST flag if and only if the metadata
    /// index is all ones). Bytes after the header are not looked at.
    pub fn parse(bytes: &[u8]) -> Result<Header, WireError> {
        let (raw, _) = RawHeader::read_from_prefix(bytes).map_err(|_| WireError::Truncated {
            need: HEADER_LEN,
            have: bytes.len(),
        })?;
        if raw.magic.get() != MAGIC {
            return Err(WireError::BadMagic(raw.magic.get()));
        }
        if raw.version != VERSION {
            return Err(WireError::UnsupportedVersion(raw.version));
        }
        let op = Op::from_u8(raw.op).ok_or(WireError::UnknownOp(raw.op))?;
        let flags = Flags(raw.flags.get());
        if flags.0 & !Flags::ALL.0 != 0 {
            return Err(WireError::UnknownFlags(flags.0 & !Flags::ALL.0));
        }
        let meta_len = raw.meta_len.get();
        if usize::from(meta_len) > MAX_META_LEN {
            return Err(WireError::MetaTooLong(meta_len));
        }
        if meta_len > 0 && !flags.contains(Flags::FIRST) {
            return Err(WireError::MetaNotFirst);
        }
        let fast_index = raw.meta_index.get() == FAST_META_INDEX;
        if fast_index != flags.contains(Flags::FAST) {
            return Err(WireError::InvalidField {
                field: "meta_index",
                why: "FAST flag and an all-ones metadata index must go together",
            });
        }
        Ok(Header {
            op,
            flags,
            meta_len,
            src: NodeId(raw.src_node.get()),
            dst: NodeId(raw.dst_node.get()),
            slot: SlotId(raw.slot.get()),
            meta_index: raw.meta_index.get(),
            key: raw.key.get(),
            offset: raw.offset.get(),
            payload_len: raw.payload_len.get(),
            delta: raw.delta.get(),
            word: raw.word.get(),
            request: RequestId::from_u64(raw.request.get()),
        })
    }

    /// Parses a whole packet and splits it into header, metadata and payload.
    ///
    /// The packet must be exactly `64 + meta_len + payload_len` bytes long.
    pub fn parse_packet(bytes: &[u8]) -> Result<(Header, &[u8], &[u8]), WireError> {
        let h = Header::parse(bytes)?;
        let stated = h.packet_len();
        if stated != bytes.len() as u64 {
            return Err(WireError::LengthMismatch {
                stated,
                actual: bytes.len(),
            });
        }
        let meta_end = HEADER_LEN + usize::from(h.meta_len);
        Ok((h, &bytes[HEADER_LEN..meta_end], &bytes[meta_end..]))
    }

    /// Total bytes of the packet this header describes (header, metadata, payload).
    pub fn packet_len(&self) -> u64 {
        HEADER_LEN as u64 + u64::from(self.meta_len) + u64::from(self.payload_len)
    }

    /// Whether this is a fast-mode packet.
    pub fn is_fast(&self) -> bool {
        self.meta_index == FAST_META_INDEX
    }

    /// The header's 64 wire bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        self.emit(&mut out);
        out
    }

    /// Writes the header's 64 wire bytes into `out`.
    pub fn emit(&self, out: &mut [u8; HEADER_LEN]) {
        let raw = RawHeader {
            magic: U16::new(MAGIC),
            version: VERSION,
            op: self.op as u8,
            flags: U16::new(self.flags.0),
            meta_len: U16::new(self.meta_len),
            src_node: U32::new(self.src.0),
            dst_node: U32::new(self.dst.0),
            slot: U32::new(self.slot.0),
            meta_index: U32::new(self.meta_index),
            key: U64::new(self.key),
            offset: U64::new(self.offset),
            payload_len: U32::new(self.payload_len),
            delta: U32::new(self.delta),
            word: U64::new(self.word),
            request: U64::new(self.request.to_u64()),
        };
        out.copy_from_slice(raw.as_bytes());
    }

    /// Builds a complete packet (header, metadata, payload) in a new buffer.
    ///
    /// `meta_len` and `payload_len` are taken from the slices, overriding the fields.
    pub fn to_packet(&self, meta: &[u8], payload: &[u8]) -> Result<Vec<u8>, WireError> {
        if meta.len() > MAX_META_LEN {
            return Err(WireError::MetaTooLong(
                meta.len().min(u16::MAX as usize) as u16
            ));
        }
        let payload_len = u32::try_from(payload.len()).map_err(|_| WireError::InvalidField {
            field: "payload_len",
            why: "payload longer than 4 GiB",
        })?;
        let mut h = *self;
        h.meta_len = meta.len() as u16;
        h.payload_len = payload_len;
        let mut out = Vec::with_capacity(HEADER_LEN + meta.len() + payload.len());
        out.extend_from_slice(&h.to_bytes());
        out.extend_from_slice(meta);
        out.extend_from_slice(payload);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_prefix_shorter_than_a_header_is_truncated() {
        let bytes = Header::new(Op::Write).to_bytes();
        for n in 0..HEADER_LEN {
            assert_eq!(
                Header::parse(&bytes[..n]),
                Err(WireError::Truncated {
                    need: HEADER_LEN,
                    have: n
                })
            );
        }
        assert!(Header::parse(&bytes).is_ok());
    }

    #[test]
    fn fast_flag_and_index_must_agree() {
        let mut h = Header::new(Op::Write);
        h.meta_index = FAST_META_INDEX;
        assert!(matches!(
            Header::parse(&h.to_bytes()),
            Err(WireError::InvalidField { .. })
        ));
        h.flags = Flags::FAST;
        assert!(Header::parse(&h.to_bytes()).is_ok());
        h.meta_index = 3;
        assert!(matches!(
            Header::parse(&h.to_bytes()),
            Err(WireError::InvalidField { .. })
        ));
    }

    #[test]
    fn metadata_only_on_first_packets() {
        let mut h = Header::new(Op::Write);
        h.meta_len = 4;
        assert_eq!(Header::parse(&h.to_bytes()), Err(WireError::MetaNotFirst));
        h.flags = Flags::FIRST;
        assert!(Header::parse(&h.to_bytes()).is_ok());
        h.meta_len = 61;
        assert_eq!(
            Header::parse(&h.to_bytes()),
            Err(WireError::MetaTooLong(61))
        );
    }

    #[test]
    fn packet_length_is_exact() {
        let mut h = Header::new(Op::Write);
        h.flags = Flags::FIRST | Flags::LAST;
        let pkt = h.to_packet(b"meta", b"payload").unwrap();
        let (ph, meta, payload) = Header::parse_packet(&pkt).unwrap();
        assert_eq!((ph.meta_len, ph.payload_len), (4, 7));
        assert_eq!((meta, payload), (&b"meta"[..], &b"payload"[..]));
        assert!(matches!(
            Header::parse_packet(&pkt[..pkt.len() - 1]),
            Err(WireError::LengthMismatch { .. })
        ));
        let mut longer = pkt.clone();
        longer.push(0);
        assert!(matches!(
            Header::parse_packet(&longer),
            Err(WireError::LengthMismatch { .. })
        ));
    }
}
