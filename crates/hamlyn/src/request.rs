//! Turning a ticket, send options and data into a terminus work-queue entry, with every
//! check the engine would make that the client can make first (seed 000 §2.3, §3.2).
//!
//! Pure: no port, no engine. [`build_into`] writes the entry [`crate::Terminus::send`] queues.

use hamlyn_core::{SegmentError, SendSpec};
use hamlyn_wire::request::{
    encode_entry, send_flags, EntryBody, EntryHead, Gather, Payload, SendRequest, MAX_GATHER,
    MAX_INLINE, REQUEST_LEN,
};
use hamlyn_wire::{NodeId, RequestId, Ticket, TicketFlags, MAX_META_LEN};

use crate::area::Span;
use crate::error::SendError;

/// Payload bytes per packet assumed when checking a ticket's packet budget before
/// queueing. Engines use packets at least this large, so a message that passes here is
/// never refused by the engine for its packet count; the budget of an unsplit ticket is
/// then 64 GiB per message, of a ticket split the most, 512 MiB.
pub const BUDGET_PACKET_BYTES: u64 = 4096;

/// Which metadata entry a message uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MetaIndex {
    /// Fast mode if the ticket is a fast one; otherwise an entry of the ticket that no
    /// unfinished message of this terminus that may be multi-packet counts in (the
    /// first such for a single-packet message, the next round robin for a longer one),
    /// so two messages in flight never share an entry's packet count; all of them busy
    /// is [`crate::SendError::EntriesBusy`]. "Unfinished" is what the terminus knows:
    /// a message the engine finished sending may still be on the wire to another node,
    /// so a sender that reuses entries faster than its receiver completes messages
    /// (fewer entries than messages in flight) must name entries itself and recycle
    /// them when the receiver says so, as the protocols of `hamlyn-rats` do.
    /// [`crate::DirectTarget::send`] deposits before it returns and takes the
    /// ticket's first entry.
    #[default]
    Auto,
    /// Entry `n` of the ticket's metadata range (0 is the ticket's first entry).
    Entry(u32),
    /// Fast mode: no metadata entry; the word is the message's metadata.
    Fast,
}

/// How to send one message. Built with [`SendOptions::new`] and the setters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendOptions<'a> {
    /// Where the message lands, in bytes from the start of the ticket's range.
    pub offset: u64,
    /// User metadata deposited in the metadata entry (at most 60 bytes).
    pub meta: &'a [u8],
    /// The tag (or fast-mode metadata) reported in the receiver's notification.
    pub word: u64,
    /// Post a notification when the message is complete (default true).
    pub notify: bool,
    /// Wake the receiver if it sleeps on its queue (default true).
    pub wake: bool,
    /// Which metadata entry the message uses.
    pub meta_index: MetaIndex,
}

impl Default for SendOptions<'_> {
    fn default() -> Self {
        SendOptions {
            offset: 0,
            meta: &[],
            word: 0,
            notify: true,
            wake: true,
            meta_index: MetaIndex::Auto,
        }
    }
}

impl<'a> SendOptions<'a> {
    /// Offset 0, no metadata, tag 0, notify and wake, the ticket's first entry (or fast).
    pub fn new() -> Self {
        SendOptions::default()
    }

    /// Lands the message `offset` bytes into the ticket's range.
    pub fn offset(mut self, offset: u64) -> Self {
        self.offset = offset;
        self
    }

    /// User metadata (at most 60 bytes).
    pub fn meta(mut self, meta: &'a [u8]) -> Self {
        self.meta = meta;
        self
    }

    /// The tag or fast-mode word.
    pub fn tag(mut self, word: u64) -> Self {
        self.word = word;
        self
    }

    /// Whether to post a notification.
    pub fn notify(mut self, on: bool) -> Self {
        self.notify = on;
        self
    }

    /// Whether to wake a sleeping receiver.
    pub fn wake(mut self, on: bool) -> Self {
        self.wake = on;
        self
    }

    /// Uses entry `n` of the ticket's metadata range.
    pub fn entry(mut self, n: u32) -> Self {
        self.meta_index = MetaIndex::Entry(n);
        self
    }

    /// Sends in fast mode.
    pub fn fast(mut self) -> Self {
        self.meta_index = MetaIndex::Fast;
        self
    }
}

/// A message's data.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Data<'a> {
    /// Bytes copied into the terminus entry ("direct I/O", at most
    /// [`MAX_INLINE`](crate::MAX_INLINE) = 128): the buffer is free as soon as `send`
    /// returns.
    Inline(&'a [u8]),
    /// Up to [`MAX_GATHER`](crate::MAX_GATHER) spans of this node's areas, sent in order
    /// without a copy by the client: do not rewrite them until the send is done
    /// ([`crate::Terminus::can_reuse`]).
    Gather(&'a [Span<'a>]),
}

/// The checks the engine makes from the ticket alone, made before anything is queued or
/// deposited: the ticket grants writes, the message fits its range, its metadata entry
/// and its packet budget, the metadata fits, fast mode is one packet without metadata
/// bytes. On success, the message's [`SendSpec`] from node `src` (notify and wake as
/// `opts` says), ready to segment. Shared by [`build`] and direct sends
/// ([`crate::DirectTarget::send`]), so both refuse exactly the same messages.
#[inline]
pub(crate) fn plan<'a>(
    src: NodeId,
    ticket: &Ticket,
    opts: &SendOptions<'a>,
    len: u64,
) -> Result<SendSpec<'a>, SendError> {
    if !ticket.flags.contains(TicketFlags::WRITE) {
        return Err(SendError::NotWritable);
    }
    let meta_rel = match opts.meta_index {
        MetaIndex::Fast => None,
        MetaIndex::Auto if ticket.flags.contains(TicketFlags::FAST) => None,
        MetaIndex::Auto => Some(0),
        MetaIndex::Entry(n) => Some(n),
    };
    let mut spec = SendSpec::from_ticket(
        src,
        ticket,
        opts.offset,
        len,
        meta_rel,
        opts.meta,
        opts.word,
        RequestId::default(),
    )?;
    spec.notify = opts.notify;
    spec.wake = opts.wake;
    // The checks of segmentation, without building the packets.
    spec.check(BUDGET_PACKET_BYTES)?;
    Ok(spec)
}

/// Writes the work-queue entry for one send into `entry`, straight from the ticket, the
/// options and the data (no [`hamlyn_wire::request::SendRequest`] in between: a small
/// message's send is this, a ring store and a doorbell look). `instance` is the sending
/// node handle's (gather spans must name its areas), `seq` the request's ring position.
/// On an error `entry` holds nothing to queue.
pub(crate) fn build_into(
    instance: u64,
    ticket: &Ticket,
    opts: &SendOptions<'_>,
    data: &Data<'_>,
    seq: u32,
    entry: &mut [u8; REQUEST_LEN],
) -> Result<(), SendError> {
    if !ticket.flags.contains(TicketFlags::WRITE) {
        return Err(SendError::NotWritable);
    }
    let mut list = [Gather::default(); MAX_GATHER];
    let (body, len) = match *data {
        Data::Inline(bytes) => {
            if bytes.len() > MAX_INLINE {
                return Err(SendError::InlineTooLong {
                    len: bytes.len(),
                    max: MAX_INLINE,
                });
            }
            (EntryBody::Inline(bytes), bytes.len() as u64)
        }
        Data::Gather(spans) => {
            let total = gather_list(instance, spans, &mut list)?;
            (EntryBody::Gather(&list[..spans.len()]), total)
        }
    };
    let spec = plan(NodeId(0), ticket, opts, len)?;
    let mut flags = 0;
    if opts.notify {
        flags |= send_flags::NOTIFY;
    }
    if opts.wake {
        flags |= send_flags::WAKE;
    }
    let head = EntryHead {
        op: hamlyn_wire::request::RequestOp::Write,
        seq,
        dst_node: spec.dst.0,
        slot: spec.slot.0,
        meta_index: spec.meta_index,
        key: spec.key,
        offset: spec.offset,
        y: spec.y,
        incarnation: ticket.incarnation,
        word: opts.word,
        flags,
    };
    // `plan` refused metadata longer than 60 bytes.
    encode_entry(entry, &head, opts.meta, body);
    Ok(())
}

/// A gather span must name an area of the sending node handle (`instance`) and lie
/// inside it.
pub(crate) fn check_span(instance: u64, s: &Span<'_>) -> Result<(), SendError> {
    if !s.area.belongs_to(instance) {
        return Err(SendError::ForeignArea);
    }
    let area_len = s.area.len();
    if s.offset.checked_add(s.len).is_none_or(|end| end > area_len) {
        return Err(SendError::SpanOutOfArea {
            offset: s.offset,
            len: s.len,
            area_len,
        });
    }
    Ok(())
}

/// Checks `spans` (at most [`MAX_GATHER`], each inside an area of node handle
/// `instance`) and writes them to `list` as gather ranges; returns the message length.
fn gather_list(
    instance: u64,
    spans: &[Span<'_>],
    list: &mut [Gather; MAX_GATHER],
) -> Result<u64, SendError> {
    if spans.len() > MAX_GATHER {
        return Err(SendError::TooManySpans {
            count: spans.len(),
            max: MAX_GATHER,
        });
    }
    let mut total: u64 = 0;
    for (g, s) in list.iter_mut().zip(spans) {
        check_span(instance, s)?;
        // Five spans of areas mapped in this process cannot reach 2^64 bytes, but a
        // checked sum costs nothing here.
        total = total
            .checked_add(s.len)
            .ok_or(SendError::Ticket(SegmentError::OutsideTicket {
                offset: 0,
                end: u128::MAX,
            }))?;
        *g = Gather {
            area: s.area.id(),
            offset: s.offset,
            len: s.len,
        };
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fake_node;
    use crate::NodeOptions;
    use hamlyn_wire::request::REQUEST_LEN;
    use hamlyn_wire::{SlotId, FAST_META_INDEX, FULL_SHARE};

    fn ticket() -> Ticket {
        Ticket {
            node: NodeId(7),
            incarnation: 99,
            slot: SlotId(3),
            key: 0xFEED,
            meta_first: 10,
            meta_count: 4,
            offset: 1000,
            len: 4096,
            share: FULL_SHARE,
            flags: TicketFlags::WRITE,
        }
    }

    /// The entry [`build_into`] writes, read back by the engine's checks
    /// ([`SendRequest::decode`]): what the engine would take from the ring.
    fn build(
        instance: u64,
        ticket: &Ticket,
        opts: &SendOptions<'_>,
        data: &Data<'_>,
        seq: u32,
    ) -> Result<SendRequest, SendError> {
        let mut entry = [0x5Au8; REQUEST_LEN];
        build_into(instance, ticket, opts, data, seq, &mut entry)?;
        Ok(SendRequest::decode(&entry).expect("a built entry passes the engine's checks"))
    }

    #[test]
    fn inline_request_carries_ticket_fields_and_flags() {
        let opts = SendOptions::new()
            .offset(16)
            .meta(b"hdr")
            .tag(0xABCD)
            .entry(2)
            .wake(false);
        let r = build(1, &ticket(), &opts, &Data::Inline(b"12345678"), 77).unwrap();
        assert_eq!(r.seq, 77);
        assert_eq!((r.dst_node, r.slot, r.key), (7, 3, 0xFEED));
        assert_eq!(r.offset, 1016, "slot-relative: ticket offset + send offset");
        assert_eq!(r.meta_index, 12, "ticket's first entry + 2");
        assert_eq!(r.metadata(), b"hdr");
        assert_eq!(r.word, 0xABCD);
        assert_eq!(r.flags, send_flags::NOTIFY);
        assert_eq!(r.y, 0);
        assert_eq!(r.len(), 8);
        // The entry survives the engine's decoder.
        let mut buf = [0u8; REQUEST_LEN];
        r.encode(&mut buf);
        assert_eq!(SendRequest::decode(&buf).unwrap(), r);
    }

    #[test]
    fn ticket_range_entry_and_inline_limits_are_checked() {
        let t = ticket();
        let o = SendOptions::new();
        let inline = |b: &'static [u8]| Data::Inline(b);
        assert!(build(1, &t, &o.offset(4088), &inline(&[0; 8]), 0).is_ok());
        assert!(matches!(
            build(1, &t, &o.offset(4089), &inline(&[0; 8]), 0),
            Err(SendError::Ticket(SegmentError::OutsideTicket { .. }))
        ));
        assert!(matches!(
            build(1, &t, &o.offset(u64::MAX), &inline(&[0; 8]), 0),
            Err(SendError::Ticket(SegmentError::OutsideTicket { .. }))
        ));
        assert!(matches!(
            build(1, &t, &o.entry(4), &inline(b"x"), 0),
            Err(SendError::Ticket(SegmentError::MetaIndexOutsideTicket(4)))
        ));
        assert!(matches!(
            build(1, &t, &o.meta(&[0; 61]), &inline(b"x"), 0),
            Err(SendError::Ticket(SegmentError::MetaTooLong(61)))
        ));
        assert_eq!(
            build(1, &t, &o, &Data::Inline(&[0; 129]), 0).err(),
            Some(SendError::InlineTooLong { len: 129, max: 128 })
        );
        let ro = Ticket {
            flags: TicketFlags::READ,
            ..t
        };
        assert_eq!(
            build(1, &ro, &o, &inline(b"x"), 0).err(),
            Some(SendError::NotWritable)
        );
    }

    #[test]
    fn fast_mode_is_automatic_for_fast_tickets_and_single_packet_only() {
        let fast = Ticket {
            flags: TicketFlags::WRITE | TicketFlags::FAST,
            meta_count: 0,
            ..ticket()
        };
        let r = build(
            1,
            &fast,
            &SendOptions::new().tag(5),
            &Data::Inline(b"hi"),
            0,
        )
        .unwrap();
        assert_eq!(r.meta_index, FAST_META_INDEX);
        assert!(r.is_fast());
        assert!(matches!(
            build(
                1,
                &fast,
                &SendOptions::new().meta(b"m"),
                &Data::Inline(b"hi"),
                0
            ),
            Err(SendError::Ticket(SegmentError::FastTooBig))
        ));
        // An explicit fast send on a normal ticket is shaped the same way.
        let r = build(
            1,
            &ticket(),
            &SendOptions::new().fast(),
            &Data::Inline(b""),
            0,
        )
        .unwrap();
        assert_eq!(r.meta_index, FAST_META_INDEX);
    }

    #[test]
    fn gather_lists_name_this_nodes_areas_within_bounds_and_budget() {
        let (node, _fake) = fake_node(NodeOptions::default());
        let (other, _fake2) = fake_node(NodeOptions::default());
        let a = node.area(1 << 20).unwrap();
        let b = node.area(4096).unwrap();
        let foreign = other.area(4096).unwrap();
        let inst = node.shared.instance;
        let t = Ticket {
            len: 1 << 21,
            ..ticket()
        };
        let spans = [a.span(0, 1 << 20), b.span(100, 200)];
        let r = build(inst, &t, &SendOptions::new(), &Data::Gather(&spans), 3).unwrap();
        assert_eq!(r.len(), (1 << 20) + 200);
        match r.payload {
            Payload::Gather { list, count } => {
                assert_eq!(count, 2);
                assert_eq!(
                    (list[0].area, list[0].offset, list[0].len),
                    (a.id(), 0, 1 << 20)
                );
                assert_eq!(
                    (list[1].area, list[1].offset, list[1].len),
                    (b.id(), 100, 200)
                );
            }
            Payload::Inline { .. } => panic!("gather expected"),
        }
        let mut buf = [0u8; REQUEST_LEN];
        r.encode(&mut buf);
        assert_eq!(SendRequest::decode(&buf).unwrap(), r);

        let g = |s: &[Span<'_>]| build(inst, &t, &SendOptions::new(), &Data::Gather(s), 0).err();
        assert_eq!(
            g(&[b.span(4000, 97)]),
            Some(SendError::SpanOutOfArea {
                offset: 4000,
                len: 97,
                area_len: 4096
            })
        );
        assert_eq!(
            g(&[b.span(u64::MAX, 2)]).map(|e| matches!(e, SendError::SpanOutOfArea { .. })),
            Some(true)
        );
        assert_eq!(g(&[foreign.span(0, 1)]), Some(SendError::ForeignArea));
        assert_eq!(
            g(&[b.span(0, 1); 6]),
            Some(SendError::TooManySpans { count: 6, max: 5 })
        );
        // A ticket split very small allows few packets per message.
        let small = Ticket {
            share: 1 << 12, // budget: 16 packets
            ..t
        };
        let r = build(
            inst,
            &small,
            &SendOptions::new(),
            &Data::Gather(&[a.span(0, 16 * 4096)]),
            0,
        );
        assert!(r.is_ok());
        assert_eq!(r.unwrap().y, 1 << 12);
        assert!(matches!(
            build(
                inst,
                &small,
                &SendOptions::new(),
                &Data::Gather(&[a.span(0, 16 * 4096 + 1)]),
                0
            ),
            Err(SendError::Ticket(SegmentError::TooManyPackets {
                need: 17,
                budget: 16
            }))
        ));
    }
}

/// A one-sided request: what to do at the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rma {
    /// Read `len` bytes.
    Read { len: u64 },
    /// An atomic on one 8-byte word.
    Atomic {
        op: hamlyn_wire::rma::AtomicOp,
        compare: u64,
        operand: u64,
    },
}

fn fits(which: &'static str, ticket: &Ticket, offset: u64, len: u64) -> Result<(), SendError> {
    match offset.checked_add(len) {
        Some(end) if end <= ticket.len => Ok(()),
        _ => Err(SendError::OutsideRange { which, offset, len }),
    }
}

/// Builds the work-queue entry for a remote read or atomic (seed 004 §2): the target
/// engine checks `source`'s key and the slot's permission, executes, and writes the
/// answer to `reply` at `reply_offset` (both offsets are within the tickets' ranges).
pub(crate) fn build_rma(
    source: &Ticket,
    offset: u64,
    rma: Rma,
    reply: &Ticket,
    reply_offset: u64,
    seq: u32,
) -> Result<SendRequest, SendError> {
    use hamlyn_wire::request::RequestOp;
    use hamlyn_wire::rma::{AtomicBody, ReadBody};
    let (op, len, word, body): (RequestOp, u64, u64, Vec<u8>) = match rma {
        Rma::Read { len } => {
            if !source.flags.contains(TicketFlags::READ) {
                return Err(SendError::NotGranted("reads"));
            }
            let body = ReadBody {
                reply: *reply,
                reply_offset,
            }
            .encode()
            .to_vec();
            (RequestOp::Read, len, len, body)
        }
        Rma::Atomic {
            op,
            compare,
            operand,
        } => {
            if !source.flags.contains(TicketFlags::ATOMIC) {
                return Err(SendError::NotGranted("atomics"));
            }
            let body = AtomicBody {
                reply: *reply,
                reply_offset,
                op,
                compare,
                operand,
            }
            .encode()
            .to_vec();
            (RequestOp::Atomic, 8, 0, body)
        }
    };
    fits("source", source, offset, len)?;
    fits("reply", reply, reply_offset, len)?;
    if !reply.flags.contains(TicketFlags::WRITE) {
        return Err(SendError::NotWritable);
    }
    let mut data = [0u8; MAX_INLINE];
    data[..body.len()].copy_from_slice(&body);
    Ok(SendRequest {
        op,
        seq,
        dst_node: source.node.0,
        slot: source.slot.0,
        meta_index: source.meta_first,
        key: source.key,
        offset: source.offset + offset,
        y: 0,
        incarnation: source.incarnation,
        word,
        flags: 0,
        meta: [0; MAX_META_LEN],
        meta_len: 0,
        payload: Payload::Inline {
            data,
            len: body.len() as u8,
        },
    })
}
