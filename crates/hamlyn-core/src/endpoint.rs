//! Receive endpoints (seed 002, FLIPC): which posted buffer an arriving message lands in.
//!
//! The depositor — the engine, or a direct sender's library on a `danger_direct`
//! endpoint — runs these functions over the endpoint's memory, so both choose, discard
//! and complete the same way. The memory is the receiver's, which it may scribble at any
//! moment: every index is read once, checked against the endpoint's layout
//! ([`hamlyn_wire::endpoint`]) and never trusted further, so whatever the receiver
//! writes, a depositor writes only inside the endpoint's own buffers and ring.
//!
//! Wait-free for the receiver: it never waits for a depositor and a depositor never waits
//! for it. Depositors claim ring positions with a compare-and-swap on `taken` (several
//! direct senders and the engine may race); a claim that keeps losing is given up after
//! [`CLAIM_TRIES`] and the message is discarded and counted, so no depositor spins
//! without bound either.

use hamlyn_wire::endpoint::{entry_flags, ring_off, EndpointLayout, DISCARDS, POSTED, TAKEN};

use hamlyn_wire::entry::{NotifEntry, NotifKind};
use hamlyn_wire::Header;

use crate::memory::Memory;
use crate::receive::{notification_entry, MessageDone};
use crate::reject::RejectReason;

/// Compare-and-swap attempts on `taken` before a message is discarded as contended.
pub const CLAIM_TRIES: u32 = 64;

/// What an endpoint slot is: its layout and what a discard does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EndpointSpec {
    /// Buffer size and count.
    pub layout: EndpointLayout,
    /// A discard is also refused to the sender (an error completion, `NoBuffer`), not
    /// only counted.
    pub report_discards: bool,
}

/// An endpoint's counters, kept by the engine (the shared discard word is the receiver's
/// to reset; these are totals).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndpointCounts {
    /// Messages deposited into a posted buffer.
    pub delivered: u64,
    /// Messages discarded because no buffer was posted (or the claim kept losing).
    pub discarded: u64,
    /// Packets refused because the ring held an impossible index.
    pub corrupt: u64,
}

/// A ring position claimed for one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Claim {
    /// The ring position (`taken` before the claim).
    pub pos: u64,
    /// The buffer the receiver posted there.
    pub buf: u32,
    /// Offset of that buffer in the memory (the endpoint's base included).
    pub offset: u64,
}

/// Why no buffer was claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimError {
    /// No buffer is posted (or depositors kept racing for the last ones): the message is
    /// discarded.
    #[error("no buffer posted")]
    NoBuffer,
    /// The ring's indices are impossible (more posted than the ring holds, or a buffer
    /// number past the last): the receiver scribbled over its ring.
    #[error("posted-buffer ring corrupt")]
    RingCorrupt,
    /// The endpoint lies outside its memory.
    #[error("endpoint memory gone")]
    Gone,
}

impl From<ClaimError> for RejectReason {
    fn from(e: ClaimError) -> RejectReason {
        match e {
            ClaimError::NoBuffer => RejectReason::NoBuffer,
            ClaimError::RingCorrupt => RejectReason::RingCorrupt,
            ClaimError::Gone => RejectReason::AreaGone,
        }
    }
}

/// Claims the next posted buffer of the endpoint at `base` of `mem`.
///
/// Reads `taken` and `posted` once per attempt (Acquire: `posted` pairs with the
/// receiver's Release store after it wrote the ring entry's buffer number), checks that
/// `0 < posted − taken ≤ ring size` and that the posted buffer number exists, then moves
/// `taken` on by a compare-and-swap (AcqRel, pairing with the other depositors' claims).
pub fn claim<M: Memory + ?Sized>(
    mem: &mut M,
    base: u64,
    layout: &EndpointLayout,
) -> Result<Claim, ClaimError> {
    let gone = |_| ClaimError::Gone;
    let end = base.checked_add(layout.len()).ok_or(ClaimError::Gone)?;
    if end > mem.len() {
        return Err(ClaimError::Gone);
    }
    for _ in 0..CLAIM_TRIES {
        let taken = mem.load_u64(base + TAKEN).map_err(gone)?;
        let posted = mem.load_u64(base + POSTED).map_err(gone)?;
        let waiting = posted.wrapping_sub(taken);
        if waiting == 0 {
            return Err(ClaimError::NoBuffer);
        }
        if waiting > layout.ring_cap() {
            return Err(ClaimError::RingCorrupt);
        }
        // The receiver wrote it before it published `posted` (so the Acquire above
        // covers it); a stale position's word may be changing under a repost, and is then
        // refused by the compare-and-swap below.
        let word = mem
            .load_u64(base + layout.entry_offset(taken) + ring_off::BUF)
            .map_err(gone)?;
        let buf = u32::try_from(word).map_err(|_| ClaimError::RingCorrupt)?;
        let at = layout.buffer_offset(buf).ok_or(ClaimError::RingCorrupt)?;
        let found = mem
            .compare_swap_u64(base + TAKEN, taken, taken.wrapping_add(1))
            .map_err(gone)?;
        if found == taken {
            return Ok(Claim {
                pos: taken,
                buf,
                offset: base + at,
            });
        }
    }
    Err(ClaimError::NoBuffer)
}

/// Counts one discarded message in the endpoint's shared discard word (an AcqRel add,
/// the partner of the receiver's read-and-reset swap: no discard is lost between its
/// read and its reset).
pub fn count_discard<M: Memory + ?Sized>(mem: &mut M, base: u64) -> Result<(), ClaimError> {
    mem.fetch_add_u64(base + DISCARDS, 1)
        .map(drop)
        .map_err(|_| ClaimError::Gone)
}

/// What a completed ring entry says about its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// Payload bytes.
    pub len: u32,
    /// The sending node.
    pub src_node: u32,
    /// The message's word (tag).
    pub word: u64,
    /// The claim was given up ([`entry_flags::ABORTED`]).
    pub aborted: bool,
}

/// Completes a claim whose payload is in its buffer: writes the ring entry's length (and
/// flags), source and word, then publishes `done = pos + 1` (Release, pairing with the
/// receiver's Acquire load of `done` before it reads the entry and the buffer). The
/// entry's buffer number is the receiver's and is left alone.
pub fn complete<M: Memory + ?Sized>(
    mem: &mut M,
    base: u64,
    layout: &EndpointLayout,
    claim: &Claim,
    arrival: &Arrival,
) -> Result<(), ClaimError> {
    let gone = |_| ClaimError::Gone;
    let e = base + layout.entry_offset(claim.pos);
    let mut len = arrival.len & entry_flags::LEN_MASK;
    if arrival.aborted {
        len |= entry_flags::ABORTED;
    }
    let mut fields = [0u8; 16];
    fields[0..4].copy_from_slice(&len.to_le_bytes());
    fields[4..8].copy_from_slice(&arrival.src_node.to_le_bytes());
    fields[8..16].copy_from_slice(&arrival.word.to_le_bytes());
    mem.write(e + ring_off::LEN, &fields).map_err(gone)?;
    mem.store_u64(e + ring_off::DONE, claim.pos.wrapping_add(1))
        .map_err(gone)
}

/// The notification an endpoint message earns (its `seq` left 0 for the queue to fill):
/// a message of the packet's length, whose `meta_index` names the buffer it landed in.
pub fn notification(h: &Header, buf: u32) -> NotifEntry {
    let done = MessageDone {
        kind: NotifKind::Message,
        len: h.payload_len,
    };
    let mut entry = notification_entry(done, h);
    entry.meta_index.set(buf);
    entry
}

/// Gives a claim up (its packet will never finish: the sender's node went down mid-way):
/// the entry completes with [`entry_flags::ABORTED`] and no bytes, so the receiver moves
/// past it and has its buffer back.
pub fn abort<M: Memory + ?Sized>(
    mem: &mut M,
    base: u64,
    layout: &EndpointLayout,
    claim: &Claim,
) -> Result<(), ClaimError> {
    let arrival = Arrival {
        len: 0,
        src_node: 0,
        word: 0,
        aborted: true,
    };
    complete(mem, base, layout, claim, &arrival)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn_wire::endpoint::ring_off;

    fn post(mem: &mut Vec<u8>, layout: &EndpointLayout, pos: u64, buf: u32) {
        mem.store_u64(layout.entry_offset(pos) + ring_off::BUF, u64::from(buf))
            .unwrap();
        mem.store_u64(POSTED, pos + 1).unwrap();
    }

    #[test]
    fn claims_posted_buffers_in_order_then_discards() {
        let layout = EndpointLayout::new(64, 3).unwrap();
        let mut mem = vec![0u8; layout.len() as usize];
        assert_eq!(claim(&mut mem, 0, &layout), Err(ClaimError::NoBuffer));
        post(&mut mem, &layout, 0, 2);
        post(&mut mem, &layout, 1, 0);
        let c = claim(&mut mem, 0, &layout).unwrap();
        assert_eq!((c.pos, c.buf), (0, 2));
        assert_eq!(c.offset, layout.buffer_offset(2).unwrap());
        let arrival = Arrival {
            len: 5,
            src_node: 7,
            word: 9,
            aborted: false,
        };
        complete(&mut mem, 0, &layout, &c, &arrival).unwrap();
        assert_eq!(mem.load_u64(layout.entry_offset(0) + ring_off::DONE), Ok(1));
        let c = claim(&mut mem, 0, &layout).unwrap();
        assert_eq!((c.pos, c.buf), (1, 0));
        assert_eq!(claim(&mut mem, 0, &layout), Err(ClaimError::NoBuffer));
        count_discard(&mut mem, 0).unwrap();
        assert_eq!(mem.load_u64(DISCARDS), Ok(1));
    }

    #[test]
    fn a_scribbled_ring_is_refused_and_nothing_lands_outside_the_buffers() {
        let layout = EndpointLayout::new(64, 3).unwrap();
        let mut mem = vec![0u8; layout.len() as usize + 64];
        // More posted than the ring holds.
        mem.store_u64(POSTED, 100).unwrap();
        assert_eq!(claim(&mut mem, 0, &layout), Err(ClaimError::RingCorrupt));
        // Taken ahead of posted (a wrapped difference).
        mem.store_u64(POSTED, 0).unwrap();
        mem.store_u64(TAKEN, 5).unwrap();
        assert_eq!(claim(&mut mem, 0, &layout), Err(ClaimError::RingCorrupt));
        // A buffer number past the last.
        mem.store_u64(TAKEN, 0).unwrap();
        post(&mut mem, &layout, 0, 3);
        assert_eq!(claim(&mut mem, 0, &layout), Err(ClaimError::RingCorrupt));
        post(&mut mem, &layout, 0, u32::MAX);
        assert_eq!(claim(&mut mem, 0, &layout), Err(ClaimError::RingCorrupt));
        mem.store_u64(layout.entry_offset(0), 1 << 40).unwrap();
        assert_eq!(claim(&mut mem, 0, &layout), Err(ClaimError::RingCorrupt));
        // An endpoint past the end of its memory.
        assert_eq!(claim(&mut mem, 128, &layout), Err(ClaimError::Gone));
        assert_eq!(
            claim(&mut mem, u64::MAX - 8, &layout),
            Err(ClaimError::Gone)
        );
    }
}
