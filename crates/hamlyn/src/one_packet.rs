//! The small message's way through a [`crate::DirectTarget`]: what `request::plan` and
//! `SendSpec::only_packet` would decide and build for a one-packet message, with what
//! depends on the ticket alone worked out once, when the target is opened.
//!
//! A direct send of 8 bytes spent about 120 of its 576 instructions (callgrind, `path8`,
//! 2026-11-26) checking the ticket and building the packet's header field by field,
//! every time, from a ticket that never changes. Here the ticket's checks (writable, a
//! packet budget) are made once and the header's fixed fields kept; a send then checks
//! only what its options and length change (its range, entry, metadata and mode), and
//! anything else (gather spans, a message of more than [`BUDGET_PACKET_BYTES`], an
//! error of any kind) takes the general way, which decides and reports as before. The
//! property test below holds the two to the same decisions and headers.

use hamlyn_wire::{Flags, Header, NodeId, Op, Ticket, TicketFlags, FAST_META_INDEX, MAX_META_LEN};

use crate::request::{MetaIndex, SendOptions, BUDGET_PACKET_BYTES};

/// The fixed part of the header of every one-packet message a direct target sends (see
/// the module docs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct OnePacket {
    /// Op, source, destination, slot, key, `FIRST` and `LAST`; `delta` is the ticket's
    /// start value `Y` (its share mod 2^32: the last packet's delta, `Y` less one per
    /// packet before it, of which there are none).
    base: Header,
    /// The ticket's byte range, for the per-send range check.
    ticket_len: u64,
    /// The ticket's offset in the slot (the header's offset is relative to the slot).
    ticket_offset: u64,
    /// The ticket's entries, for the per-send choice of one.
    meta_first: u32,
    meta_count: u32,
    /// The ticket is a fast one ([`MetaIndex::Auto`] then means fast mode).
    ticket_fast: bool,
    /// The slot is a fast one (a message's mode must be the slot's).
    slot_fast: bool,
}

impl OnePacket {
    /// The header's fixed part for sends from `src` with `ticket` to a slot that is a
    /// fast one or not (`slot_fast`); `None` if the general way must decide every send
    /// (the ticket is not writable, or has no packet budget). The caller has checked
    /// that the ticket's range lies in the slot (`DirectTarget::new`), so that a
    /// header's offset (the ticket's plus the send's, within the range) cannot overflow.
    pub(crate) fn for_ticket(src: NodeId, ticket: &Ticket, slot_fast: bool) -> Option<OnePacket> {
        if !ticket.flags.contains(TicketFlags::WRITE) || ticket.packet_budget() == 0 {
            return None;
        }
        let mut base = Header::new(Op::Write);
        base.src = src;
        base.dst = ticket.node;
        base.slot = ticket.slot;
        base.key = ticket.key;
        base.flags = Flags::FIRST | Flags::LAST;
        base.delta = ticket.y();
        Some(OnePacket {
            base,
            ticket_len: ticket.len,
            ticket_offset: ticket.offset,
            meta_first: ticket.meta_first,
            meta_count: ticket.meta_count,
            ticket_fast: ticket.flags.contains(TicketFlags::FAST),
            slot_fast,
        })
    }

    /// The header of a message of `len` bytes sent with `opts`, if it is a one-packet
    /// message the general way would accept with this very header; `None` sends it the
    /// general way (which may accept it too, or say why not).
    #[inline]
    pub(crate) fn header(&self, opts: &SendOptions<'_>, len: u64) -> Option<Header> {
        let rel = match opts.meta_index {
            MetaIndex::Fast => None,
            MetaIndex::Auto if self.ticket_fast => None,
            MetaIndex::Auto => Some(0),
            MetaIndex::Entry(n) => Some(n),
        };
        let meta_index = match rel {
            None => FAST_META_INDEX,
            Some(i) if i < self.meta_count => self.meta_first.checked_add(i)?,
            Some(_) => return None,
        };
        let fast = meta_index == FAST_META_INDEX;
        let fits = opts
            .offset
            .checked_add(len)
            .is_some_and(|end| end <= self.ticket_len);
        if fast != self.slot_fast
            || len > BUDGET_PACKET_BYTES
            || !fits
            || opts.meta.len() > MAX_META_LEN
            || (fast && !opts.meta.is_empty())
        {
            return None;
        }
        let mut h = self.base;
        h.meta_index = meta_index;
        if opts.notify {
            h.flags = h.flags | Flags::NOTIFY;
        }
        if opts.wake {
            h.flags = h.flags | Flags::WAKE;
        }
        if fast {
            h.flags = h.flags | Flags::FAST;
        }
        if h.delta == 0 || fast {
            h.flags = h.flags | Flags::NOTIFY_NOW;
        }
        // Bounded by the checks above: MAX_META_LEN and BUDGET_PACKET_BYTES are small.
        h.meta_len = opts.meta.len() as u16;
        h.payload_len = len as u32;
        h.word = opts.word;
        // `DirectTarget::new` checked that the ticket's range lies in the slot.
        h.offset = self.ticket_offset + opts.offset;
        Some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::direct::DIRECT_PACKET_BYTES;
    use crate::request::plan;
    use hamlyn_wire::SlotId;
    use proptest::prelude::*;

    /// The general way's header for the same send: `plan`, the mode check, and the
    /// one packet of `DIRECT_PACKET_BYTES` (what `DirectTarget::send_message` does).
    fn general(
        src: NodeId,
        ticket: &Ticket,
        fast_slot: bool,
        opts: &SendOptions<'_>,
        len: u64,
    ) -> Option<Header> {
        let spec = plan(src, ticket, opts, len).ok()?;
        if (spec.meta_index == FAST_META_INDEX) != fast_slot || len > DIRECT_PACKET_BYTES {
            return None;
        }
        Some(spec.only_packet(DIRECT_PACKET_BYTES).ok()??.header)
    }

    fn ticket(flags: u8, offset: u64, len: u64, meta: (u32, u32), share: u64) -> Ticket {
        Ticket {
            node: NodeId(3),
            incarnation: 9,
            slot: SlotId(7),
            key: 0x1234_5678_9abc_def0,
            meta_first: meta.0,
            meta_count: meta.1,
            offset,
            len,
            share,
            flags: TicketFlags(u16::from(flags)),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Whenever the quick way gives a header, the general way accepts the same send
        /// with the same header; and every send the general way accepts as a one-packet
        /// message of at most 4 KiB goes the quick way.
        #[test]
        fn the_quick_way_decides_and_builds_as_the_general_one(
            // Weighted towards sends that are accepted (a writable ticket, a budget,
            // the slot's mode, a range and entry that fit), with the edges around them.
            flags in prop_oneof![3 => Just(1u8), 2 => Just(9u8), 2 => 0u8..16],
            slot_as_ticket in prop_oneof![3 => Just(true), 1 => Just(false)],
            t_off in prop_oneof![Just(0u64), 0u64..10_000],
            t_len in prop_oneof![Just(0u64), Just(4096u64), Just(8192u64), 0u64..20_000],
            meta in prop_oneof![
                3 => Just((0u32, 1u32)),
                2 => (0u32..4, 0u32..4),
                1 => (u32::MAX - 3..=u32::MAX, 0u32..4),
            ],
            // A budget of 0, 1 and more (the budget is the share's high bits).
            share in prop_oneof![
                3 => Just(1u64 << 32),
                2 => (0u64..4, 0u64..3).prop_map(|(b, y)| (b << 32) | y),
                2 => prop_oneof![Just(255u64), Just(256), Just(257), Just(511), Just(512)],
                1 => any::<u64>(),
            ],
            off in prop_oneof![3 => Just(0u64), 2 => 0u64..5_000, 1 => Just(u64::MAX - 3)],
            len in prop_oneof![Just(0u64), Just(8u64), 0u64..5_000, Just(4096u64), Just(4097u64)],
            meta_len in prop_oneof![3 => Just(0usize), 1 => 0usize..64],
            index in prop_oneof![3 => Just(0u8), 1 => 0u8..4],
            // Sometimes the message ends at the ticket's end, or one byte past it.
            at_end in prop_oneof![2 => Just(None), 1 => (0u64..2).prop_map(Some)],
            notify: bool,
            wake: bool,
            word: u64,
        ) {
            let fast_slot = (flags & 8 != 0) == slot_as_ticket;
            let t = ticket(flags, t_off, t_len, meta, share);
            let bytes = [0xA5u8; 64];
            let mut opts = SendOptions::new().tag(word);
            opts.offset = at_end.map_or(off, |past| t_len.saturating_sub(len) + past);
            opts.meta = &bytes[..meta_len];
            opts.notify = notify;
            opts.wake = wake;
            opts.meta_index = match index {
                0 => MetaIndex::Auto,
                1 => MetaIndex::Fast,
                2 => MetaIndex::Entry(0),
                _ => MetaIndex::Entry(2),
            };
            let src = NodeId(3);
            let quick = OnePacket::for_ticket(src, &t, fast_slot).and_then(|q| q.header(&opts, len));
            let general = general(src, &t, fast_slot, &opts, len);
            if let Some(h) = quick {
                prop_assert_eq!(Some(h), general);
            } else if len <= BUDGET_PACKET_BYTES {
                prop_assert_eq!(general, None, "an accepted small send took the general way");
            }
        }
    }
}
