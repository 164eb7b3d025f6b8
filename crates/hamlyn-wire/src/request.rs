//! Terminus work-queue entries: what a client asks its engine to send, and the error
//! completions the engine hands back (seed 000 §2.3).
//!
//! A client writes a 256-byte [`SendRequest`] into its terminus ring. Short messages are
//! "direct I/O": up to [`MAX_INLINE`] bytes travel inside the entry. Longer ones name up to
//! [`MAX_GATHER`] ranges of the client's registered send areas, which the engine copies
//! (intra-node) or writes to the fabric straight from the area. The engine advances the
//! terminus's completion sequence word as it takes entries; refusals come back as 16-byte
//! [`Completion`]s naming the request's sequence number and the reason.
//!
//! The engine decodes every entry with [`SendRequest::decode`], which checks every field:
//! a client that scribbles over its own ring gets errors, never a confused engine.

use crate::error::WireError;
use crate::header::{FAST_META_INDEX, MAX_META_LEN};

/// Bytes in a terminus work-queue entry.
pub const REQUEST_LEN: usize = 256;
/// Bytes of message data an entry can carry inline.
pub const MAX_INLINE: usize = 128;
/// Gather ranges an entry can name.
pub const MAX_GATHER: usize = 5;
/// Bytes in a completion entry.
pub const COMPLETION_LEN: usize = 16;

/// Send flags in a request.
pub mod send_flags {
    /// Post a notification at the receiver when the message completes.
    pub const NOTIFY: u16 = 1;
    /// Wake the receiver if it sleeps.
    pub const WAKE: u16 = 2;
    /// Every defined bit.
    pub const ALL: u16 = 3;
}

/// One range of a registered send area.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Gather {
    /// The send area's id (as the engine numbered it).
    pub area: u32,
    /// Offset in the area.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

/// Where a request's data comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload {
    /// Bytes inside the entry (direct I/O).
    Inline {
        /// The bytes; the first `len` are valid.
        data: [u8; MAX_INLINE],
        /// Valid bytes.
        len: u8,
    },
    /// Ranges of send areas, in message order.
    Gather {
        /// The ranges; the first `count` are valid.
        list: [Gather; MAX_GATHER],
        /// Valid ranges.
        count: u8,
    },
}

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RequestOp {
    /// Write the payload into the destination slot.
    Write,
    /// Read `word` bytes at `offset` of the destination slot; the inline payload is a
    /// [`crate::rma::ReadBody`] naming where they go.
    Read,
    /// An atomic on the 8-byte word at `offset`; the inline payload is a
    /// [`crate::rma::AtomicBody`].
    Atomic,
}

/// A decoded work-queue entry: one message to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendRequest {
    /// What the request asks for.
    pub op: RequestOp,
    /// The client's sequence number for this request (its handle).
    pub seq: u32,
    /// Destination node.
    pub dst_node: u32,
    /// Destination slot.
    pub slot: u32,
    /// Metadata entry, or all ones for fast mode.
    pub meta_index: u32,
    /// Key presented.
    pub key: u64,
    /// Destination offset from the slot's base.
    pub offset: u64,
    /// Start value Y.
    pub y: u32,
    /// The destination's incarnation the ticket was made for (0: do not check). The
    /// engine refuses a request for an older incarnation with `StaleIncarnation`.
    pub incarnation: u32,
    /// Tag or fast-mode metadata.
    pub word: u64,
    /// [`send_flags`] bits.
    pub flags: u16,
    /// User metadata; the first `meta_len` bytes are valid.
    pub meta: [u8; MAX_META_LEN],
    /// Valid metadata bytes.
    pub meta_len: u8,
    /// The data.
    pub payload: Payload,
}

fn invalid(field: &'static str, why: &'static str) -> WireError {
    WireError::InvalidField { field, why }
}

fn get<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

impl SendRequest {
    /// Total message bytes.
    pub fn len(&self) -> u64 {
        match &self.payload {
            Payload::Inline { len, .. } => u64::from(*len),
            Payload::Gather { list, count } => {
                list[..usize::from(*count)].iter().map(|g| g.len).sum()
            }
        }
    }

    /// Whether the message has no data bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether this is a fast-mode send.
    pub fn is_fast(&self) -> bool {
        self.meta_index == FAST_META_INDEX
    }

    /// The valid metadata bytes.
    pub fn metadata(&self) -> &[u8] {
        &self.meta[..usize::from(self.meta_len).min(MAX_META_LEN)]
    }

    /// Writes the entry's 256 bytes.
    pub fn encode(&self, out: &mut [u8; REQUEST_LEN]) {
        out.fill(0);
        let (kind, n_gather, inline_len) = match (&self.payload, self.op) {
            (Payload::Inline { len, .. }, RequestOp::Write) => (1u8, 0u8, u16::from(*len)),
            (Payload::Inline { len, .. }, RequestOp::Read) => (3u8, 0u8, u16::from(*len)),
            (Payload::Inline { len, .. }, RequestOp::Atomic) => (4u8, 0u8, u16::from(*len)),
            (Payload::Gather { count, .. }, _) => (2u8, *count, 0u16),
        };
        out[0] = kind;
        out[1] = n_gather;
        out[2..4].copy_from_slice(&self.flags.to_le_bytes());
        out[4..6].copy_from_slice(&u16::from(self.meta_len).to_le_bytes());
        out[6..8].copy_from_slice(&inline_len.to_le_bytes());
        out[8..12].copy_from_slice(&self.seq.to_le_bytes());
        out[12..16].copy_from_slice(&self.dst_node.to_le_bytes());
        out[16..20].copy_from_slice(&self.slot.to_le_bytes());
        out[20..24].copy_from_slice(&self.meta_index.to_le_bytes());
        out[24..32].copy_from_slice(&self.key.to_le_bytes());
        out[32..40].copy_from_slice(&self.offset.to_le_bytes());
        out[40..48].copy_from_slice(&self.len().to_le_bytes());
        out[48..52].copy_from_slice(&self.y.to_le_bytes());
        out[52..56].copy_from_slice(&self.incarnation.to_le_bytes());
        out[56..64].copy_from_slice(&self.word.to_le_bytes());
        out[64..64 + MAX_META_LEN].copy_from_slice(&self.meta);
        match &self.payload {
            Payload::Inline { data, .. } => out[128..256].copy_from_slice(data),
            Payload::Gather { list, count } => {
                for (i, g) in list[..usize::from(*count).min(MAX_GATHER)]
                    .iter()
                    .enumerate()
                {
                    let at = 128 + i * 24;
                    out[at..at + 4].copy_from_slice(&g.area.to_le_bytes());
                    out[at + 8..at + 16].copy_from_slice(&g.offset.to_le_bytes());
                    out[at + 16..at + 24].copy_from_slice(&g.len.to_le_bytes());
                }
            }
        }
    }

    /// Decodes and validates an entry (at least [`REQUEST_LEN`] bytes).
    pub fn decode(b: &[u8]) -> Result<SendRequest, WireError> {
        if b.len() < REQUEST_LEN {
            return Err(WireError::Truncated {
                need: REQUEST_LEN,
                have: b.len(),
            });
        }
        let flags = u16::from_le_bytes(get(b, 2));
        if flags & !send_flags::ALL != 0 {
            return Err(WireError::UnknownFlags(flags & !send_flags::ALL));
        }
        let meta_len = u16::from_le_bytes(get(b, 4));
        if usize::from(meta_len) > MAX_META_LEN {
            return Err(WireError::MetaTooLong(meta_len));
        }
        let inline_len = u16::from_le_bytes(get(b, 6));
        let total = u64::from_le_bytes(get(b, 40));
        let op = match b[0] {
            3 => RequestOp::Read,
            4 => RequestOp::Atomic,
            _ => RequestOp::Write,
        };
        let payload = match (b[0], b[1]) {
            (1, 0) | (3, 0) | (4, 0) => {
                if usize::from(inline_len) > MAX_INLINE || u64::from(inline_len) != total {
                    return Err(invalid("inline_len", "must match len and be at most 128"));
                }
                let body_len = match op {
                    RequestOp::Read => crate::rma::READ_BODY_LEN,
                    RequestOp::Atomic => crate::rma::ATOMIC_BODY_LEN,
                    RequestOp::Write => usize::from(inline_len),
                };
                if usize::from(inline_len) != body_len {
                    return Err(invalid(
                        "inline_len",
                        "a read or atomic body has a fixed length",
                    ));
                }
                Payload::Inline {
                    data: get(b, 128),
                    len: inline_len as u8,
                }
            }
            (2, n) if usize::from(n) <= MAX_GATHER && inline_len == 0 => {
                let mut list = [Gather::default(); MAX_GATHER];
                let mut sum: u64 = 0;
                for (i, g) in list.iter_mut().take(usize::from(n)).enumerate() {
                    let at = 128 + i * 24;
                    *g = Gather {
                        area: u32::from_le_bytes(get(b, at)),
                        offset: u64::from_le_bytes(get(b, at + 8)),
                        len: u64::from_le_bytes(get(b, at + 16)),
                    };
                    if g.offset.checked_add(g.len).is_none() {
                        return Err(invalid("gather", "offset + len overflows"));
                    }
                    sum = sum
                        .checked_add(g.len)
                        .ok_or(invalid("gather", "total overflows"))?;
                }
                if sum != total {
                    return Err(invalid("len", "must equal the sum of the gather lengths"));
                }
                Payload::Gather { list, count: n }
            }
            (1..=4, _) => return Err(invalid("n_gather", "out of range for the kind")),
            (k, _) => {
                return Err(invalid(
                    "kind",
                    if k == 0 {
                        "empty entry"
                    } else {
                        "unknown kind"
                    },
                ))
            }
        };
        let req = SendRequest {
            op,
            seq: u32::from_le_bytes(get(b, 8)),
            dst_node: u32::from_le_bytes(get(b, 12)),
            slot: u32::from_le_bytes(get(b, 16)),
            meta_index: u32::from_le_bytes(get(b, 20)),
            key: u64::from_le_bytes(get(b, 24)),
            offset: u64::from_le_bytes(get(b, 32)),
            y: u32::from_le_bytes(get(b, 48)),
            incarnation: u32::from_le_bytes(get(b, 52)),
            word: u64::from_le_bytes(get(b, 56)),
            flags,
            meta: get(b, 64),
            meta_len: meta_len as u8,
            payload,
        };
        if req.offset.checked_add(total).is_none() {
            return Err(invalid("offset", "offset + len overflows"));
        }
        Ok(req)
    }
}

/// An engine-to-client completion: request `seq` of a terminus finished with `status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Completion {
    /// The request's sequence number.
    pub seq: u32,
    /// 0 = success, otherwise a reject reason code (`hamlyn_core::RejectReason`).
    pub status: u16,
    /// Which terminus (index in the port).
    pub terminus: u16,
    /// A value the operation returns (reserved for reads and atomics).
    pub value: u64,
}

impl Completion {
    /// The entry's 16 bytes.
    pub fn encode(&self) -> [u8; COMPLETION_LEN] {
        let mut out = [0u8; COMPLETION_LEN];
        out[0..4].copy_from_slice(&self.seq.to_le_bytes());
        out[4..6].copy_from_slice(&self.status.to_le_bytes());
        out[6..8].copy_from_slice(&self.terminus.to_le_bytes());
        out[8..16].copy_from_slice(&self.value.to_le_bytes());
        out
    }

    /// Decodes an entry (at least 16 bytes).
    pub fn decode(b: &[u8]) -> Result<Completion, WireError> {
        if b.len() < COMPLETION_LEN {
            return Err(WireError::Truncated {
                need: COMPLETION_LEN,
                have: b.len(),
            });
        }
        Ok(Completion {
            seq: u32::from_le_bytes(get(b, 0)),
            status: u16::from_le_bytes(get(b, 4)),
            terminus: u16::from_le_bytes(get(b, 6)),
            value: u64::from_le_bytes(get(b, 8)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn base(payload: Payload) -> SendRequest {
        let mut meta = [0u8; MAX_META_LEN];
        meta[..3].copy_from_slice(b"abc");
        SendRequest {
            op: RequestOp::Write,
            seq: 7,
            dst_node: 1,
            slot: 2,
            meta_index: 3,
            key: 0xAAAA_BBBB_CCCC_DDDD,
            offset: 512,
            y: 0,
            incarnation: 3,
            word: 99,
            flags: send_flags::NOTIFY,
            meta,
            meta_len: 3,
            payload,
        }
    }

    #[test]
    fn inline_and_gather_round_trip() {
        let mut data = [0u8; MAX_INLINE];
        data[..5].copy_from_slice(b"hello");
        let r = base(Payload::Inline { data, len: 5 });
        let mut buf = [0u8; REQUEST_LEN];
        r.encode(&mut buf);
        assert_eq!(SendRequest::decode(&buf).unwrap(), r);
        let mut list = [Gather::default(); MAX_GATHER];
        list[0] = Gather {
            area: 4,
            offset: 0,
            len: 100,
        };
        list[1] = Gather {
            area: 5,
            offset: 8,
            len: 28,
        };
        let g = base(Payload::Gather { list, count: 2 });
        g.encode(&mut buf);
        assert_eq!(SendRequest::decode(&buf).unwrap(), g);
        assert_eq!(g.len(), 128);
    }

    #[test]
    fn inconsistent_entries_are_refused() {
        let mut buf = [0u8; REQUEST_LEN];
        assert!(SendRequest::decode(&buf).is_err(), "zeroed entry");
        let r = base(Payload::Inline {
            data: [0; MAX_INLINE],
            len: 4,
        });
        r.encode(&mut buf);
        buf[40] = 5; // len disagrees with inline_len
        assert!(SendRequest::decode(&buf).is_err());
        r.encode(&mut buf);
        buf[4] = 61; // meta too long
        assert!(SendRequest::decode(&buf).is_err());
        assert!(SendRequest::decode(&buf[..100]).is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = SendRequest::decode(&bytes);
            let _ = Completion::decode(&bytes);
        }
    }
}
