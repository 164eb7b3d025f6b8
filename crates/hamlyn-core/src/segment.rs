//! Segmentation of a send into packet headers with packet-counting deltas
//! (seed 000 §2.3, §2.5; DESIGN §3).
//!
//! A message of `len` bytes with start value Y becomes `p = max(1, ⌈len / mtu⌉)` packets.
//! Every packet but the last has delta 1; the last has delta `Y − (p − 1)` (mod 2^32), so
//! the deltas sum to Y. Metadata rides in the first packet only. A single-packet message
//! with Y = 0 (an unsplit ticket) carries NOTIFY_NOW and leaves the accumulator alone.

use hamlyn_wire::{
    Flags, Header, NodeId, Op, RequestId, SlotId, Ticket, FAST_META_INDEX, MAX_META_LEN,
};

/// Everything needed to segment one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendSpec<'a> {
    /// Sending node.
    pub src: NodeId,
    /// Destination node.
    pub dst: NodeId,
    /// Destination slot.
    pub slot: SlotId,
    /// Key presented.
    pub key: u64,
    /// Metadata entry, or [`FAST_META_INDEX`] for a fast-mode message.
    pub meta_index: u32,
    /// Offset of the message's first byte from the slot's base.
    pub offset: u64,
    /// Message length in bytes.
    pub len: u64,
    /// User metadata (at most 60 bytes), in the first packet.
    pub meta: &'a [u8],
    /// Start value Y.
    pub y: u32,
    /// Most packets allowed (the ticket's packet budget), if limited.
    pub max_packets: Option<u64>,
    /// Ask for a notification when the message completes.
    pub notify: bool,
    /// Ask for the receiver to be woken if it sleeps.
    pub wake: bool,
    /// Tag or fast-mode metadata, carried in every packet.
    pub word: u64,
    /// Request id for NACK correlation.
    pub request: RequestId,
}

/// Why a send cannot be segmented.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SegmentError {
    /// More than 60 bytes of metadata.
    #[error("metadata is {0} bytes, at most 60 fit")]
    MetaTooLong(usize),
    /// Payload per packet must be at least 1 byte and at most 4 GiB − 1.
    #[error("packet payload size {0} is out of range")]
    BadMtu(u64),
    /// The message needs more packets than the ticket allows (see `Ticket::packet_budget`).
    #[error("message needs {need} packets, the ticket allows {budget}")]
    TooManyPackets {
        /// Packets needed.
        need: u64,
        /// Packets allowed.
        budget: u64,
    },
    /// A fast-mode message must fit one packet and carry no metadata bytes.
    #[error("fast-mode messages are one packet without metadata bytes")]
    FastTooBig,
    /// The message does not fit the ticket's byte range.
    #[error("bytes {offset}..{end} are outside the ticket's range")]
    OutsideTicket {
        /// Requested start (relative to the slot).
        offset: u64,
        /// Requested end.
        end: u128,
    },
    /// The metadata index is outside the ticket's range.
    #[error("metadata index {0} is outside the ticket's range")]
    MetaIndexOutsideTicket(u32),
}

impl<'a> SendSpec<'a> {
    /// A send through `ticket`: `rel_offset` bytes into the ticket's range, `len` bytes,
    /// metadata entry `meta_first + meta_rel` (or fast mode), Y and budget from the ticket.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn from_ticket(
        src: NodeId,
        ticket: &Ticket,
        rel_offset: u64,
        len: u64,
        meta_rel: Option<u32>,
        meta: &'a [u8],
        word: u64,
        request: RequestId,
    ) -> Result<SendSpec<'a>, SegmentError> {
        let end = u128::from(rel_offset) + u128::from(len);
        if end > u128::from(ticket.len) {
            return Err(SegmentError::OutsideTicket {
                offset: rel_offset,
                end,
            });
        }
        let meta_index = match meta_rel {
            None => FAST_META_INDEX,
            // Checked: a ticket is the holder's to build, and one whose entries run
            // past u32::MAX names no entry there.
            Some(i) if i < ticket.meta_count => ticket
                .meta_first
                .checked_add(i)
                .ok_or(SegmentError::MetaIndexOutsideTicket(i))?,
            Some(i) => return Err(SegmentError::MetaIndexOutsideTicket(i)),
        };
        Ok(SendSpec {
            src,
            dst: ticket.node,
            slot: ticket.slot,
            key: ticket.key,
            meta_index,
            offset: ticket.offset + rel_offset,
            len,
            meta,
            y: ticket.y(),
            max_packets: Some(ticket.packet_budget()),
            notify: true,
            wake: true,
            word,
            request,
        })
    }

    /// Number of packets this message needs with `mtu` payload bytes per packet.
    #[inline]
    pub fn packet_count(&self, mtu: u64) -> u64 {
        // A message that fits one packet (every small message) is counted without the
        // division, a 20-40 cycle instruction on its path.
        if self.len <= mtu {
            return 1;
        }
        self.len.div_ceil(mtu)
    }

    /// Segments the message into packets of at most `mtu` payload bytes.
    #[inline]
    pub fn segment(&self, mtu: u64) -> Result<Segmenter, SegmentError> {
        let packets = self.check(mtu)?;
        Ok(self.segmenter(mtu, packets))
    }

    /// The message's one packet if it fits in one of at most `mtu` payload bytes (what
    /// [`SendSpec::segment`]'s first `next` gives then, without the iterator: the small
    /// message's path), `None` if it needs more; the same checks and errors.
    #[inline]
    pub fn only_packet(&self, mtu: u64) -> Result<Option<Segment>, SegmentError> {
        let packets = self.check(mtu)?;
        if packets != 1 {
            return Ok(None);
        }
        Ok(Some(self.segmenter(mtu, 1).packet(0)))
    }

    /// The iterator over `packets` packets (which `check` counted).
    #[inline]
    fn segmenter(&self, mtu: u64, packets: u64) -> Segmenter {
        let fast = self.meta_index == FAST_META_INDEX;
        let mut base = Header::new(Op::Write);
        base.src = self.src;
        base.dst = self.dst;
        base.slot = self.slot;
        base.meta_index = self.meta_index;
        base.key = self.key;
        base.word = self.word;
        base.request = self.request;
        let mut flags = Flags::empty();
        if self.notify {
            flags = flags | Flags::NOTIFY;
        }
        if self.wake {
            flags = flags | Flags::WAKE;
        }
        if fast {
            flags = flags | Flags::FAST;
        }
        if packets == 1 && (self.y == 0 || fast) {
            flags = flags | Flags::NOTIFY_NOW;
        }
        base.flags = flags;
        Segmenter {
            base,
            meta_len: self.meta.len() as u16,
            start: self.offset,
            len: self.len,
            mtu,
            y: self.y,
            packets,
            next: 0,
        }
    }

    /// The checks [`SendSpec::segment`] makes, without building the packets: on success,
    /// how many packets of at most `mtu` payload bytes the message needs. (A sender that
    /// only validates a send, as the library does before queueing it, calls this.)
    #[inline]
    pub fn check(&self, mtu: u64) -> Result<u64, SegmentError> {
        if mtu == 0 || mtu > u64::from(u32::MAX) {
            return Err(SegmentError::BadMtu(mtu));
        }
        if self.meta.len() > MAX_META_LEN {
            return Err(SegmentError::MetaTooLong(self.meta.len()));
        }
        if self.offset.checked_add(self.len).is_none() {
            // No range can hold it, and the packets' offsets would overflow.
            return Err(SegmentError::OutsideTicket {
                offset: self.offset,
                end: u128::from(self.offset) + u128::from(self.len),
            });
        }
        let packets = self.packet_count(mtu);
        if let Some(budget) = self.max_packets {
            if packets > budget {
                return Err(SegmentError::TooManyPackets {
                    need: packets,
                    budget,
                });
            }
        }
        let fast = self.meta_index == FAST_META_INDEX;
        if fast && (packets != 1 || !self.meta.is_empty()) {
            return Err(SegmentError::FastTooBig);
        }
        Ok(packets)
    }
}

/// One packet of a segmented message: its header, and which bytes of the message it
/// carries (relative to the message's first byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The packet's header (`meta_len` set on the first packet only).
    pub header: Header,
    /// First message byte in this packet.
    pub start: u64,
    /// Payload bytes in this packet.
    pub len: u32,
}

/// Iterator over a message's packets, in order (a fabric may deliver them in any order).
#[derive(Clone, Debug)]
pub struct Segmenter {
    base: Header,
    meta_len: u16,
    start: u64,
    len: u64,
    mtu: u64,
    y: u32,
    packets: u64,
    next: u64,
}

impl Segmenter {
    /// The same packets with another op (READ_REQ, READ_RESP, ATOMIC_REQ, ATOMIC_RESP use
    /// the write layout).
    pub fn with_op(mut self, op: Op) -> Segmenter {
        self.base.op = op;
        self
    }

    /// Total packets.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Packet `i` (below `packets`).
    #[inline]
    fn packet(&self, i: u64) -> Segment {
        let rel = i * self.mtu;
        let n = (self.len - rel).min(self.mtu) as u32;
        let mut h = self.base;
        let first = i == 0;
        let last = i + 1 == self.packets;
        if first {
            h.flags = h.flags | Flags::FIRST;
            h.meta_len = self.meta_len;
        }
        h.delta = if last {
            h.flags = h.flags | Flags::LAST;
            self.y.wrapping_sub((self.packets - 1) as u32)
        } else {
            1
        };
        h.offset = self.start + rel;
        h.payload_len = n;
        Segment {
            header: h,
            start: rel,
            len: n,
        }
    }
}

impl Iterator for Segmenter {
    type Item = Segment;

    #[inline]
    fn next(&mut self) -> Option<Segment> {
        if self.next >= self.packets {
            return None;
        }
        let i = self.next;
        self.next += 1;
        Some(self.packet(i))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.packets - self.next) as usize;
        (left, Some(left))
    }
}

impl ExactSizeIterator for Segmenter {}
