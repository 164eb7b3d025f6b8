//! The byte layout of a receive endpoint (seed 002, FLIPC): a slot whose messages land in
//! buffers its receiver posted, chosen by the depositor (the engine, or a direct sender).
//!
//! An endpoint lives at its slot's base, in the receiver's area, and every byte of it can be
//! written by the receiver at any moment, so depositors read each index once, check it,
//! and never trust it (`hamlyn_core::endpoint`). Every word has one writer and its own
//! cache line, as FLIPC's communication buffer:
//!
//! | offset | size | field | written by |
//! |---|---|---|---|
//! | 0 | 8 | `posted`: buffers ever posted (the ring's producer index) | receiver |
//! | 64 | 8 | `taken`: ring positions ever claimed by depositors | depositors (CAS) |
//! | 128 | 8 | `discards`: messages discarded for want of a buffer since the last read-and-reset | depositors add, receiver swaps |
//! | 192 | 64 | reserved (zero) | — |
//! | 256 | 32 × ring | the ring of [`RingEntry`]s, one per position modulo the ring's size | both, never at once |
//! | `buffers_offset` | `buf_size` × `buffers` | the buffers, each 64-byte aligned | depositors |
//!
//! A ring entry at position `p` is written by the receiver (the buffer number, an atomic
//! word of its own) before it publishes `posted = p + 1`, then by the depositor that
//! claimed `p` (length, flags, source, word) before it publishes `done = p + 1`; the
//! receiver reads it after it saw `done`, and may reuse the position only after that.

use crate::error::WireError;

/// Offset of the `posted` word.
pub const POSTED: u64 = 0;
/// Offset of the `taken` word.
pub const TAKEN: u64 = 64;
/// Offset of the `discards` word.
pub const DISCARDS: u64 = 128;
/// Offset of the ring.
pub const RING: u64 = 256;
/// Bytes of one ring entry.
pub const RING_ENTRY_LEN: u64 = 32;
/// Smallest buffer size (one cache line).
pub const MIN_BUF_SIZE: u32 = 64;
/// Largest buffer size: an endpoint message is one packet of medium size (FLIPC's class),
/// and it must fit every fabric's packet.
pub const MAX_BUF_SIZE: u32 = 64 * 1024;
/// Most buffers per endpoint.
pub const MAX_BUFFERS: u32 = 1 << 16;

/// Offsets of the fields of a ring entry.
pub mod ring_off {
    /// u64: the buffer number the receiver posted at this position (written by the
    /// receiver only, as an atomic word, so a depositor reading a stale position never
    /// races a receiver reposting it).
    pub const BUF: u64 = 0;
    /// u32: the message's payload bytes, and [`super::entry_flags`] in the top bit.
    pub const LEN: u64 = 8;
    /// u32: the sending node.
    pub const SRC_NODE: u64 = 12;
    /// u64: the message's word (tag).
    pub const WORD: u64 = 16;
    /// u64: position + 1 once the entry is complete (written last, Release).
    pub const DONE: u64 = 24;
}

/// Flags of a completed ring entry, in the top bit of its `LEN` word.
pub mod entry_flags {
    /// The claim was abandoned (its sender's node went down mid-packet): the buffer holds
    /// nothing and is the receiver's again.
    pub const ABORTED: u32 = 1 << 31;
    /// The bits of `LEN` that are the length.
    pub const LEN_MASK: u32 = !ABORTED;
}

/// The shape of one endpoint: its buffer size and number of buffers. The ring has the
/// next power of two at or above the number of buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EndpointLayout {
    buf_size: u32,
    buffers: u32,
}

impl EndpointLayout {
    /// A layout of `buffers` buffers of `buf_size` bytes: a multiple of 64 in
    /// [`MIN_BUF_SIZE`]..=[`MAX_BUF_SIZE`], and 1..=[`MAX_BUFFERS`] buffers.
    pub fn new(buf_size: u32, buffers: u32) -> Result<EndpointLayout, WireError> {
        if !(MIN_BUF_SIZE..=MAX_BUF_SIZE).contains(&buf_size) || buf_size % 64 != 0 {
            return Err(WireError::InvalidField {
                field: "endpoint buffer size",
                why: "must be a multiple of 64 in 64..=65536",
            });
        }
        if !(1..=MAX_BUFFERS).contains(&buffers) {
            return Err(WireError::InvalidField {
                field: "endpoint buffers",
                why: "must be 1..=65536",
            });
        }
        Ok(EndpointLayout { buf_size, buffers })
    }

    /// Bytes of each buffer (the largest message).
    pub fn buf_size(&self) -> u32 {
        self.buf_size
    }

    /// Number of buffers.
    pub fn buffers(&self) -> u32 {
        self.buffers
    }

    /// Entries of the ring (a power of two, at least the number of buffers).
    pub fn ring_cap(&self) -> u64 {
        u64::from(self.buffers).next_power_of_two()
    }

    /// Offset of ring entry for position `pos`.
    pub fn entry_offset(&self, pos: u64) -> u64 {
        RING + (pos & (self.ring_cap() - 1)) * RING_ENTRY_LEN
    }

    /// Offset of buffer 0.
    pub fn buffers_offset(&self) -> u64 {
        (RING + self.ring_cap() * RING_ENTRY_LEN).next_multiple_of(64)
    }

    /// Offset of buffer `buf`, if it exists.
    pub fn buffer_offset(&self, buf: u32) -> Option<u64> {
        (buf < self.buffers)
            .then(|| self.buffers_offset() + u64::from(buf) * u64::from(self.buf_size))
    }

    /// Bytes the whole endpoint covers from its base.
    pub fn len(&self) -> u64 {
        self.buffers_offset() + u64::from(self.buffers) * u64::from(self.buf_size)
    }

    /// Never: an endpoint has at least one buffer.
    pub fn is_empty(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_keeps_words_apart_and_buffers_aligned() {
        let l = EndpointLayout::new(192, 5).expect("valid");
        assert_eq!(l.ring_cap(), 8);
        assert_eq!(l.entry_offset(9), RING + RING_ENTRY_LEN);
        assert_eq!(l.buffers_offset(), 256 + 8 * 32);
        assert_eq!(l.buffer_offset(4), Some(512 + 4 * 192));
        assert_eq!(l.buffer_offset(5), None);
        assert_eq!(l.len(), 512 + 5 * 192);
        assert!(EndpointLayout::new(100, 5).is_err(), "not a multiple of 64");
        assert!(EndpointLayout::new(0, 5).is_err());
        assert!(EndpointLayout::new(128 * 1024, 5).is_err());
        assert!(EndpointLayout::new(64, 0).is_err());
        assert!(EndpointLayout::new(64, MAX_BUFFERS + 1).is_err());
    }
}
