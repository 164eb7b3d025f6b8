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
//! The engine checks every entry with [`RequestView::check`], which checks every field
//! (as [`SendRequest::decode`] does) where the entry lies, and then reads the fields it
//! needs from the entry's bytes: a client that scribbles over its own ring gets errors,
//! never a confused engine, and a small message is not copied out field by field.

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

    /// Writes the entry's 256 bytes (the metadata and inline arrays whole, as they are).
    pub fn encode(&self, out: &mut [u8; REQUEST_LEN]) {
        out.fill(0);
        let (gathered, n_gather, inline_len) = match &self.payload {
            Payload::Inline { len, .. } => (false, 0u8, u16::from(*len)),
            Payload::Gather { count, .. } => (true, *count, 0u16),
        };
        write_head(
            out,
            &self.head(),
            gathered,
            n_gather,
            u16::from(self.meta_len),
            inline_len,
            self.len(),
        );
        out[META_AT..META_AT + MAX_META_LEN].copy_from_slice(&self.meta);
        match &self.payload {
            Payload::Inline { data, .. } => out[BODY_AT..].copy_from_slice(data),
            Payload::Gather { list, count } => {
                write_gathers(out, &list[..usize::from(*count).min(MAX_GATHER)]);
            }
        }
    }

    /// The request's fields other than its metadata and data.
    pub fn head(&self) -> EntryHead {
        EntryHead {
            op: self.op,
            seq: self.seq,
            dst_node: self.dst_node,
            slot: self.slot,
            meta_index: self.meta_index,
            key: self.key,
            offset: self.offset,
            y: self.y,
            incarnation: self.incarnation,
            word: self.word,
            flags: self.flags,
        }
    }

    /// Decodes and validates an entry (at least [`REQUEST_LEN`] bytes): the checks of
    /// [`RequestView::check`], then every field copied out.
    pub fn decode(b: &[u8]) -> Result<SendRequest, WireError> {
        let Some(entry) = b.first_chunk::<REQUEST_LEN>() else {
            return Err(WireError::Truncated {
                need: REQUEST_LEN,
                have: b.len(),
            });
        };
        RequestView::check(entry).map(|v| v.to_request())
    }
}

/// Bytes of one gather range in an entry: area (4), padding (4), offset (8), len (8).
pub const GATHER_LEN: usize = 24;

/// Where an entry's inline data or gather list starts.
const BODY_AT: usize = 128;

/// Where an entry's metadata bytes start.
const META_AT: usize = 64;

/// An entry's fields other than its metadata and data: what [`encode_entry`] writes
/// at the head of the entry, with the lengths it works out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryHead {
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
    /// The destination's incarnation the ticket was made for (0: do not check).
    pub incarnation: u32,
    /// Tag or fast-mode metadata.
    pub word: u64,
    /// [`send_flags`] bits.
    pub flags: u16,
}

/// An entry's data, borrowed from where the client has it.
#[derive(Clone, Copy, Debug)]
pub enum EntryBody<'a> {
    /// Inline bytes (at most [`MAX_INLINE`]; more are cut off).
    Inline(&'a [u8]),
    /// Gather ranges (at most [`MAX_GATHER`]; more are cut off).
    Gather(&'a [Gather]),
}

/// Writes a whole entry from its parts, straight into `out`, with no [`SendRequest`]
/// in between: what a client's send does for every message. Every byte is written (what
/// the parts do not fill is zero), so the entry equals what [`SendRequest::encode`]
/// writes for the request with these fields, `meta` in its metadata array and `body`
/// as its payload, zero-padded. Metadata past [`MAX_META_LEN`] bytes, inline data past
/// [`MAX_INLINE`] and ranges past [`MAX_GATHER`] are cut off; the caller checked them.
#[inline]
pub fn encode_entry(
    out: &mut [u8; REQUEST_LEN],
    head: &EntryHead,
    meta: &[u8],
    body: EntryBody<'_>,
) {
    out.fill(0);
    let meta = &meta[..meta.len().min(MAX_META_LEN)];
    out[META_AT..META_AT + meta.len()].copy_from_slice(meta);
    match body {
        EntryBody::Inline(data) => {
            let data = &data[..data.len().min(MAX_INLINE)];
            out[BODY_AT..BODY_AT + data.len()].copy_from_slice(data);
            let len = data.len() as u16;
            write_head(out, head, false, 0, meta.len() as u16, len, u64::from(len));
        }
        EntryBody::Gather(list) => {
            let list = &list[..list.len().min(MAX_GATHER)];
            write_gathers(out, list);
            let total = list.iter().fold(0u64, |t, g| t.wrapping_add(g.len));
            write_head(
                out,
                head,
                true,
                list.len() as u8,
                meta.len() as u16,
                0,
                total,
            );
        }
    }
}

/// The first 64 bytes of an entry: kind (`gathered`: a gather list, else inline data
/// of `head.op`'s kind), counts and lengths, then `head`'s fields.
#[inline]
fn write_head(
    out: &mut [u8; REQUEST_LEN],
    head: &EntryHead,
    gathered: bool,
    n_gather: u8,
    meta_len: u16,
    inline_len: u16,
    total: u64,
) {
    out[0] = match (gathered, head.op) {
        (true, _) => 2,
        (false, RequestOp::Write) => 1,
        (false, RequestOp::Read) => 3,
        (false, RequestOp::Atomic) => 4,
    };
    out[1] = n_gather;
    out[2..4].copy_from_slice(&head.flags.to_le_bytes());
    out[4..6].copy_from_slice(&meta_len.to_le_bytes());
    out[6..8].copy_from_slice(&inline_len.to_le_bytes());
    out[8..12].copy_from_slice(&head.seq.to_le_bytes());
    out[12..16].copy_from_slice(&head.dst_node.to_le_bytes());
    out[16..20].copy_from_slice(&head.slot.to_le_bytes());
    out[20..24].copy_from_slice(&head.meta_index.to_le_bytes());
    out[24..32].copy_from_slice(&head.key.to_le_bytes());
    out[32..40].copy_from_slice(&head.offset.to_le_bytes());
    out[40..48].copy_from_slice(&total.to_le_bytes());
    out[48..52].copy_from_slice(&head.y.to_le_bytes());
    out[52..56].copy_from_slice(&head.incarnation.to_le_bytes());
    out[56..64].copy_from_slice(&head.word.to_le_bytes());
}

/// An entry's gather list (at most [`MAX_GATHER`] ranges, which `list` must not exceed).
fn write_gathers(out: &mut [u8; REQUEST_LEN], list: &[Gather]) {
    for (i, g) in list.iter().enumerate() {
        let at = BODY_AT + i * GATHER_LEN;
        out[at..at + 4].copy_from_slice(&g.area.to_le_bytes());
        out[at + 8..at + 16].copy_from_slice(&g.offset.to_le_bytes());
        out[at + 16..at + 24].copy_from_slice(&g.len.to_le_bytes());
    }
}

/// A list of gather ranges, as an entry holds them or decoded: read one range at a time,
/// so that an entry's list is never copied out whole.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum GatherList<'a> {
    /// [`GATHER_LEN`] bytes per range, as in an entry (a trailing partial range is not
    /// part of the list).
    Encoded(&'a [u8]),
    /// Ranges decoded already.
    Decoded(&'a [Gather]),
}

impl<'a> GatherList<'a> {
    /// Ranges in the list.
    pub fn len(&self) -> usize {
        match self {
            GatherList::Encoded(b) => b.len() / GATHER_LEN,
            GatherList::Decoded(l) => l.len(),
        }
    }

    /// Whether the list has no range.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Range `i`, if the list has it.
    pub fn get(&self, i: usize) -> Option<Gather> {
        match self {
            GatherList::Encoded(b) => {
                let at = i.checked_mul(GATHER_LEN)?;
                let r: &[u8; GATHER_LEN] =
                    b.get(at..at.checked_add(GATHER_LEN)?)?.try_into().ok()?;
                Some(Gather {
                    area: u32::from_le_bytes(get(r, 0)),
                    offset: u64::from_le_bytes(get(r, 8)),
                    len: u64::from_le_bytes(get(r, 16)),
                })
            }
            GatherList::Decoded(l) => l.get(i).copied(),
        }
    }

    /// The ranges in order.
    pub fn iter(self) -> impl Iterator<Item = Gather> + 'a {
        (0..self.len()).filter_map(move |i| self.get(i))
    }
}

/// A work-queue entry checked where it lies. [`RequestView::check`] checks every field
/// as [`SendRequest::decode`] does, without copying anything; each accessor then reads
/// its field from the entry's bytes, and the metadata and inline data are borrowed. This
/// is what the engine reads requests through: one copy of the entry out of the client's
/// ring (after which the client cannot change it), none after.
///
/// Every accessor is total on any bytes (lengths are clamped to the entry), so a view
/// made with [`RequestView::unchecked`] of bytes that were never checked reads wrong
/// values, never out of bounds.
#[derive(Clone, Copy, Debug)]
pub struct RequestView<'a> {
    b: &'a [u8; REQUEST_LEN],
}

impl<'a> RequestView<'a> {
    /// Checks an entry: known kind and flags, metadata and inline lengths in range, the
    /// total length equal to the inline length or the sum of the gather lengths, a
    /// read's or atomic's body of its fixed length, no offset + length that overflows.
    pub fn check(b: &'a [u8; REQUEST_LEN]) -> Result<RequestView<'a>, WireError> {
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
        match (b[0], b[1]) {
            (1, 0) | (3, 0) | (4, 0) => {
                if usize::from(inline_len) > MAX_INLINE || u64::from(inline_len) != total {
                    return Err(invalid("inline_len", "must match len and be at most 128"));
                }
                let body_len = match b[0] {
                    3 => crate::rma::READ_BODY_LEN,
                    4 => crate::rma::ATOMIC_BODY_LEN,
                    _ => usize::from(inline_len),
                };
                if usize::from(inline_len) != body_len {
                    return Err(invalid(
                        "inline_len",
                        "a read or atomic body has a fixed length",
                    ));
                }
            }
            (2, n) if usize::from(n) <= MAX_GATHER && inline_len == 0 => {
                let list = GatherList::Encoded(&b[BODY_AT..BODY_AT + usize::from(n) * GATHER_LEN]);
                let mut sum: u64 = 0;
                for g in list.iter() {
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
        }
        let offset = u64::from_le_bytes(get(b, 32));
        if offset.checked_add(total).is_none() {
            return Err(invalid("offset", "offset + len overflows"));
        }
        Ok(RequestView { b })
    }

    /// A view of bytes that [`RequestView::check`] accepted before (a copy the caller
    /// owns, which nobody else can change), not checked again.
    pub fn unchecked(b: &'a [u8; REQUEST_LEN]) -> RequestView<'a> {
        RequestView { b }
    }

    /// The entry's bytes.
    pub fn bytes(&self) -> &'a [u8; REQUEST_LEN] {
        self.b
    }

    /// What the request asks for.
    #[inline]
    pub fn op(&self) -> RequestOp {
        match self.b[0] {
            3 => RequestOp::Read,
            4 => RequestOp::Atomic,
            _ => RequestOp::Write,
        }
    }

    /// The client's sequence number for this request (its handle).
    #[inline]
    pub fn seq(&self) -> u32 {
        u32::from_le_bytes(get(self.b, 8))
    }

    /// Destination node.
    #[inline]
    pub fn dst_node(&self) -> u32 {
        u32::from_le_bytes(get(self.b, 12))
    }

    /// Destination slot.
    #[inline]
    pub fn slot(&self) -> u32 {
        u32::from_le_bytes(get(self.b, 16))
    }

    /// Metadata entry, or all ones for fast mode.
    #[inline]
    pub fn meta_index(&self) -> u32 {
        u32::from_le_bytes(get(self.b, 20))
    }

    /// Key presented.
    #[inline]
    pub fn key(&self) -> u64 {
        u64::from_le_bytes(get(self.b, 24))
    }

    /// Destination offset from the slot's base.
    #[inline]
    pub fn offset(&self) -> u64 {
        u64::from_le_bytes(get(self.b, 32))
    }

    /// Total message bytes.
    #[inline]
    pub fn len(&self) -> u64 {
        u64::from_le_bytes(get(self.b, 40))
    }

    /// Whether the message has no data bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Start value Y.
    #[inline]
    pub fn y(&self) -> u32 {
        u32::from_le_bytes(get(self.b, 48))
    }

    /// The destination's incarnation the ticket was made for (0: do not check).
    #[inline]
    pub fn incarnation(&self) -> u32 {
        u32::from_le_bytes(get(self.b, 52))
    }

    /// Tag or fast-mode metadata.
    #[inline]
    pub fn word(&self) -> u64 {
        u64::from_le_bytes(get(self.b, 56))
    }

    /// [`send_flags`] bits.
    #[inline]
    pub fn flags(&self) -> u16 {
        u16::from_le_bytes(get(self.b, 2))
    }

    /// Whether this is a fast-mode send.
    #[inline]
    pub fn is_fast(&self) -> bool {
        self.meta_index() == FAST_META_INDEX
    }

    /// The valid metadata bytes.
    #[inline]
    pub fn metadata(&self) -> &'a [u8] {
        let n = usize::from(u16::from_le_bytes(get(self.b, 4))).min(MAX_META_LEN);
        &self.b[64..64 + n]
    }

    /// Whether the data comes from send areas (a gather list) rather than the entry.
    #[inline]
    pub fn is_gather(&self) -> bool {
        self.b[0] == 2
    }

    /// The inline data (empty for a gather request).
    #[inline]
    pub fn inline_data(&self) -> &'a [u8] {
        if self.is_gather() {
            return &[];
        }
        let n = usize::from(u16::from_le_bytes(get(self.b, 6))).min(MAX_INLINE);
        &self.b[BODY_AT..BODY_AT + n]
    }

    /// The gather list (empty for an inline request).
    #[inline]
    pub fn gathers(&self) -> GatherList<'a> {
        let n = if self.is_gather() {
            usize::from(self.b[1]).min(MAX_GATHER)
        } else {
            0
        };
        GatherList::Encoded(&self.b[BODY_AT..BODY_AT + n * GATHER_LEN])
    }

    /// Every field copied out.
    pub fn to_request(&self) -> SendRequest {
        let payload = if self.is_gather() {
            let mut list = [Gather::default(); MAX_GATHER];
            let gathers = self.gathers();
            for (i, g) in list.iter_mut().enumerate().take(gathers.len()) {
                *g = gathers.get(i).unwrap_or_default();
            }
            Payload::Gather {
                list,
                count: gathers.len() as u8,
            }
        } else {
            Payload::Inline {
                data: get(self.b, BODY_AT),
                len: self.inline_data().len() as u8,
            }
        };
        SendRequest {
            op: self.op(),
            seq: self.seq(),
            dst_node: self.dst_node(),
            slot: self.slot(),
            meta_index: self.meta_index(),
            key: self.key(),
            offset: self.offset(),
            y: self.y(),
            incarnation: self.incarnation(),
            word: self.word(),
            flags: self.flags(),
            meta: get(self.b, 64),
            meta_len: self.metadata().len() as u8,
            payload,
        }
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

    /// Every accessor of a view reads what the request it was encoded from holds.
    fn assert_view_reads(v: &RequestView<'_>, r: &SendRequest) {
        assert_eq!(
            (v.op(), v.seq(), v.dst_node(), v.slot(), v.meta_index()),
            (r.op, r.seq, r.dst_node, r.slot, r.meta_index)
        );
        assert_eq!(
            (v.key(), v.offset(), v.len(), v.y(), v.incarnation()),
            (r.key, r.offset, r.len(), r.y, r.incarnation)
        );
        assert_eq!(
            (v.word(), v.flags(), v.is_fast()),
            (r.word, r.flags, r.is_fast())
        );
        assert_eq!(v.metadata(), r.metadata());
        match &r.payload {
            Payload::Inline { data, len } => {
                assert!(!v.is_gather());
                assert_eq!(v.inline_data(), &data[..usize::from(*len)]);
                assert!(v.gathers().is_empty());
            }
            Payload::Gather { list, count } => {
                assert!(v.is_gather());
                assert!(v.inline_data().is_empty());
                let got: Vec<Gather> = v.gathers().iter().collect();
                assert_eq!(got, list[..usize::from(*count)].to_vec());
            }
        }
    }

    fn any_gather() -> impl Strategy<Value = Gather> {
        (any::<u32>(), 0u64..1 << 40, 0u64..1 << 40).prop_map(|(area, offset, len)| Gather {
            area,
            offset,
            len,
        })
    }

    fn any_request() -> impl Strategy<Value = SendRequest> {
        let inline = (proptest::collection::vec(any::<u8>(), 0..=MAX_INLINE)).prop_map(|d| {
            let mut data = [0u8; MAX_INLINE];
            data[..d.len()].copy_from_slice(&d);
            Payload::Inline {
                data,
                len: d.len() as u8,
            }
        });
        let gather = proptest::collection::vec(any_gather(), 0..=MAX_GATHER).prop_map(|l| {
            let mut list = [Gather::default(); MAX_GATHER];
            list[..l.len()].copy_from_slice(&l);
            Payload::Gather {
                list,
                count: l.len() as u8,
            }
        });
        // A read's or an atomic's body: inline, of its fixed length.
        let body = |op: RequestOp, n: usize| {
            proptest::collection::vec(any::<u8>(), n).prop_map(move |d| {
                let mut data = [0u8; MAX_INLINE];
                data[..n].copy_from_slice(&d);
                (op, Payload::Inline { data, len: n as u8 })
            })
        };
        let op_and_payload = prop_oneof![
            prop_oneof![inline, gather].prop_map(|p| (RequestOp::Write, p)),
            body(RequestOp::Read, crate::rma::READ_BODY_LEN),
            body(RequestOp::Atomic, crate::rma::ATOMIC_BODY_LEN),
        ];
        (
            (
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
                any::<u64>(),
            ),
            (
                0u64..1 << 40,
                any::<u32>(),
                any::<u32>(),
                any::<u64>(),
                0u16..=send_flags::ALL,
            ),
            proptest::collection::vec(any::<u8>(), 0..=MAX_META_LEN),
            op_and_payload,
        )
            .prop_map(
                |(
                    (seq, dst_node, slot, meta_index, key),
                    (offset, y, incarnation, word, flags),
                    m,
                    (op, payload),
                )| {
                    let mut meta = [0u8; MAX_META_LEN];
                    meta[..m.len()].copy_from_slice(&m);
                    SendRequest {
                        op,
                        seq,
                        dst_node,
                        slot,
                        meta_index,
                        key,
                        offset,
                        y,
                        incarnation,
                        word,
                        flags,
                        meta,
                        meta_len: m.len() as u8,
                        payload,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = SendRequest::decode(&bytes);
            let _ = Completion::decode(&bytes);
        }

        /// A request encoded and checked in place reads back field by field, and
        /// copies out (`decode`) to itself.
        #[test]
        fn a_view_reads_every_field_of_an_encoded_request(r in any_request()) {
            let mut buf = [0u8; REQUEST_LEN];
            r.encode(&mut buf);
            let v = RequestView::check(&buf).expect("a valid request checks");
            assert_view_reads(&v, &r);
            prop_assert_eq!(SendRequest::decode(&buf), Ok(r));
        }

        /// An entry written from its parts (`encode_entry`, what a client's send
        /// does) is byte for byte the entry of the request with those parts.
        #[test]
        fn an_entry_from_its_parts_is_the_requests_entry(r in any_request()) {
            let mut whole = [0u8; REQUEST_LEN];
            r.encode(&mut whole);
            let mut parts = [0xA5u8; REQUEST_LEN];
            let body = match &r.payload {
                Payload::Inline { data, len } => EntryBody::Inline(&data[..usize::from(*len)]),
                Payload::Gather { list, count } => EntryBody::Gather(&list[..usize::from(*count)]),
            };
            encode_entry(&mut parts, &r.head(), r.metadata(), body);
            prop_assert_eq!(&parts[..], &whole[..]);
        }

        /// A valid entry with one byte changed: if it still checks, the view's
        /// lengths agree with its total and its copy re-encodes to the same view (the
        /// branch random bytes almost never reach).
        #[test]
        fn a_changed_byte_either_fails_the_check_or_reads_consistently(
            r in any_request(),
            at in 0usize..REQUEST_LEN,
            value in any::<u8>(),
        ) {
            let mut buf = [0u8; REQUEST_LEN];
            r.encode(&mut buf);
            buf[at] = value;
            if let Ok(v) = RequestView::check(&buf) {
                let gathered: u64 = v.gathers().iter().map(|g| g.len).sum();
                if v.is_gather() {
                    prop_assert_eq!(gathered, v.len());
                } else {
                    prop_assert_eq!(v.inline_data().len() as u64, v.len());
                }
                let copy = v.to_request();
                assert_view_reads(&v, &copy);
                let mut again = [0u8; REQUEST_LEN];
                copy.encode(&mut again);
                let w = RequestView::check(&again).expect("a copy of a valid entry checks");
                assert_view_reads(&w, &copy);
            }
        }

        /// On any bytes, a view never reads out of bounds, checked or not; what checks
        /// copies out to a request that encodes to a view reading the same.
        #[test]
        fn a_view_of_any_bytes_is_total(bytes in proptest::collection::vec(any::<u8>(), REQUEST_LEN)) {
            let b: &[u8; REQUEST_LEN] = bytes.as_slice().try_into().expect("256 bytes");
            let u = RequestView::unchecked(b);
            let _ = (u.metadata(), u.inline_data(), u.gathers().iter().count(), u.to_request());
            if let Ok(v) = RequestView::check(b) {
                let r = v.to_request();
                assert_view_reads(&v, &r);
            }
        }
    }

    /// A gather list as an entry holds it reads the same ranges as decoded, and a
    /// trailing partial range is not part of it.
    #[test]
    fn encoded_and_decoded_gather_lists_agree() {
        let ranges = [
            Gather {
                area: 1,
                offset: 2,
                len: 3,
            },
            Gather {
                area: 4,
                offset: 5,
                len: 6,
            },
        ];
        let mut bytes = vec![0u8; 2 * GATHER_LEN + 7];
        for (i, g) in ranges.iter().enumerate() {
            let at = i * GATHER_LEN;
            bytes[at..at + 4].copy_from_slice(&g.area.to_le_bytes());
            bytes[at + 8..at + 16].copy_from_slice(&g.offset.to_le_bytes());
            bytes[at + 16..at + 24].copy_from_slice(&g.len.to_le_bytes());
        }
        let encoded: Vec<Gather> = GatherList::Encoded(&bytes).iter().collect();
        let decoded: Vec<Gather> = GatherList::Decoded(&ranges).iter().collect();
        assert_eq!(encoded, ranges.to_vec());
        assert_eq!(decoded, ranges.to_vec());
        assert_eq!(GatherList::Encoded(&bytes).get(2), None);
    }
}
