//! Bodies of one-sided requests (seed 004 §2: remote read, compare-and-swap; DESIGN §5):
//! the payload of a READ_REQ or ATOMIC_REQ packet names where the answer goes.
//!
//! A READ_REQ's header names the source (slot, key, `offset`) and carries the length in
//! `word`; its payload is a [`ReadBody`]. An ATOMIC_REQ's header names the 8-byte-aligned
//! target word; its payload is an [`AtomicBody`]. The target engine checks the key and the
//! slot's permission exactly as for writes, executes, and writes the answer into the reply
//! ticket's slot with READ_RESP / ATOMIC_RESP packets, which the reader's engine admits
//! like writes and reports with a ReadDone / AtomicDone notification.

use crate::error::WireError;
use crate::ticket::{Ticket, TICKET_LEN};

/// Bytes of a [`ReadBody`].
pub const READ_BODY_LEN: usize = TICKET_LEN + 8;
/// Bytes of an [`AtomicBody`].
pub const ATOMIC_BODY_LEN: usize = TICKET_LEN + 32;

/// Where a remote read's bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadBody {
    /// A ticket to the reader's reply slot.
    pub reply: Ticket,
    /// Offset within the reply ticket's range.
    pub reply_offset: u64,
}

/// Which atomic operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u64)]
pub enum AtomicOp {
    /// If the word equals `compare`, store `operand`; the answer is the old value.
    CompareSwap = 1,
    /// Add `operand` (wrapping); the answer is the old value.
    FetchAdd = 2,
}

/// An atomic operation and where its answer (the old value) goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicBody {
    /// A ticket to the requester's reply slot (8 bytes are written).
    pub reply: Ticket,
    /// Offset within the reply ticket's range.
    pub reply_offset: u64,
    /// The operation.
    pub op: AtomicOp,
    /// Compare value (compare-and-swap).
    pub compare: u64,
    /// New value (compare-and-swap) or addend (fetch-add).
    pub operand: u64,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl ReadBody {
    /// The body's bytes.
    pub fn encode(&self) -> [u8; READ_BODY_LEN] {
        let mut out = [0u8; READ_BODY_LEN];
        out[..TICKET_LEN].copy_from_slice(&self.reply.to_bytes());
        out[TICKET_LEN..].copy_from_slice(&self.reply_offset.to_le_bytes());
        out
    }

    /// Decodes a body (exactly [`READ_BODY_LEN`] bytes).
    pub fn decode(b: &[u8]) -> Result<ReadBody, WireError> {
        if b.len() != READ_BODY_LEN {
            return Err(WireError::LengthMismatch {
                stated: READ_BODY_LEN as u64,
                actual: b.len(),
            });
        }
        Ok(ReadBody {
            reply: Ticket::from_bytes(&b[..TICKET_LEN])?,
            reply_offset: u64_at(b, TICKET_LEN),
        })
    }
}

impl AtomicBody {
    /// The body's bytes.
    pub fn encode(&self) -> [u8; ATOMIC_BODY_LEN] {
        let mut out = [0u8; ATOMIC_BODY_LEN];
        out[..TICKET_LEN].copy_from_slice(&self.reply.to_bytes());
        out[TICKET_LEN..TICKET_LEN + 8].copy_from_slice(&self.reply_offset.to_le_bytes());
        out[TICKET_LEN + 8..TICKET_LEN + 16].copy_from_slice(&(self.op as u64).to_le_bytes());
        out[TICKET_LEN + 16..TICKET_LEN + 24].copy_from_slice(&self.compare.to_le_bytes());
        out[TICKET_LEN + 24..].copy_from_slice(&self.operand.to_le_bytes());
        out
    }

    /// Decodes a body (exactly [`ATOMIC_BODY_LEN`] bytes).
    pub fn decode(b: &[u8]) -> Result<AtomicBody, WireError> {
        if b.len() != ATOMIC_BODY_LEN {
            return Err(WireError::LengthMismatch {
                stated: ATOMIC_BODY_LEN as u64,
                actual: b.len(),
            });
        }
        let op = match u64_at(b, TICKET_LEN + 8) {
            1 => AtomicOp::CompareSwap,
            2 => AtomicOp::FetchAdd,
            _ => {
                return Err(WireError::InvalidField {
                    field: "atomic op",
                    why: "unknown operation",
                })
            }
        };
        Ok(AtomicBody {
            reply: Ticket::from_bytes(&b[..TICKET_LEN])?,
            reply_offset: u64_at(b, TICKET_LEN),
            op,
            compare: u64_at(b, TICKET_LEN + 16),
            operand: u64_at(b, TICKET_LEN + 24),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{NodeId, SlotId};
    use crate::ticket::{TicketFlags, FULL_SHARE};

    fn reply() -> Ticket {
        Ticket {
            node: NodeId(4),
            incarnation: 2,
            slot: SlotId(9),
            key: 77,
            meta_first: 1,
            meta_count: 1,
            offset: 0,
            len: 64,
            share: FULL_SHARE,
            flags: TicketFlags::WRITE,
        }
    }

    #[test]
    fn bodies_round_trip_and_reject_bad_input() {
        let r = ReadBody {
            reply: reply(),
            reply_offset: 8,
        };
        assert_eq!(ReadBody::decode(&r.encode()), Ok(r));
        assert!(ReadBody::decode(&r.encode()[..READ_BODY_LEN - 1]).is_err());
        let a = AtomicBody {
            reply: reply(),
            reply_offset: 16,
            op: AtomicOp::CompareSwap,
            compare: 1,
            operand: 2,
        };
        let mut b = a.encode();
        assert_eq!(AtomicBody::decode(&b), Ok(a));
        b[TICKET_LEN + 8] = 9;
        assert!(AtomicBody::decode(&b).is_err(), "unknown op");
        assert!(
            AtomicBody::decode(&[0u8; ATOMIC_BODY_LEN]).is_err(),
            "zero ticket is invalid"
        );
    }
}
