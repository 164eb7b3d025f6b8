//! Segmentation (seed 000 §2.3, §2.5; DESIGN §3–4): for any message, mtu and start value
//! Y, `SendSpec::segment` produces packets that
//! - cover the message exactly once, in order, each at most one mtu;
//! - carry deltas summing to Y mod 2^32 (1 on every packet but the last);
//! - put the metadata on the first packet only, FIRST on the first, LAST on the last;
//! - set NOTIFY_NOW exactly on a single-packet message with Y = 0, or in fast mode;
//! - round-trip through the wire format (`emit`/`parse`, `to_packet`/`parse_packet`);
//!
//! and refuse what cannot be sent, without panicking on any input.

mod common;

use common::*;
use hamlyn_core::{SegmentError, SendSpec};
use hamlyn_wire::{
    Flags, Header, NodeId, Op, RequestId, SlotId, Ticket, TicketFlags, FAST_META_INDEX,
    MAX_META_LEN,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// A message shape: mtu, packet count and length consistent with them.
fn shape() -> impl Strategy<Value = (u64, u64, u64)> {
    let mtu = prop_oneof![
        2 => 1u64..=8,
        3 => 1u64..=65536,
        1 => 65536u64..=u64::from(u32::MAX),
        1 => Just(u64::from(u32::MAX)),
    ];
    let packets = prop_oneof![3 => Just(1u64), 3 => 1u64..=16, 2 => 1u64..=3000];
    (mtu, packets).prop_flat_map(|(mtu, p)| {
        // p packets need a length in ((p-1)*mtu, p*mtu], or 0..=mtu for one.
        let lo = if p == 1 { 0 } else { (p - 1) * mtu + 1 };
        (Just(mtu), Just(p), lo..=p * mtu)
    })
}

#[derive(Debug, Clone)]
struct Spec {
    mtu: u64,
    packets: u64,
    len: u64,
    offset: u64,
    meta: Vec<u8>,
    y: u32,
    fast: bool,
    meta_index: u32,
    notify: bool,
    wake: bool,
    key: u64,
    word: u64,
    request: RequestId,
    src: u32,
    dst: u32,
    slot: u32,
}

impl Spec {
    fn send(&self) -> SendSpec<'_> {
        SendSpec {
            src: NodeId(self.src),
            dst: NodeId(self.dst),
            slot: SlotId(self.slot),
            key: self.key,
            meta_index: if self.fast {
                FAST_META_INDEX
            } else {
                self.meta_index
            },
            offset: self.offset,
            len: self.len,
            meta: &self.meta,
            y: self.y,
            max_packets: None,
            notify: self.notify,
            wake: self.wake,
            word: self.word,
            request: self.request,
        }
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        shape(),
        any::<u64>(),
        proptest::collection::vec(any::<u8>(), 0..=MAX_META_LEN),
        prop_oneof![Just(0u32), any::<u32>(), Just(1u32), Just(u32::MAX)],
        prop::bool::weighted(0.2),
        (0u32..u32::MAX, any::<bool>(), any::<bool>()),
        (any::<u64>(), any::<u64>(), any::<(u32, u32)>()),
        any::<(u32, u32, u32)>(),
    )
        .prop_map(
            |(
                (mtu, packets, len),
                off,
                meta,
                y,
                fast,
                (meta_index, notify, wake),
                (key, word, (terminus, seq)),
                (src, dst, slot),
            )| {
                // Fast messages are one packet without metadata bytes.
                let fast = fast && packets == 1;
                Spec {
                    mtu,
                    packets,
                    len,
                    // Any offset that leaves room for the message.
                    offset: off % (u64::MAX - len).saturating_add(1),
                    meta: if fast { Vec::new() } else { meta },
                    y,
                    fast,
                    meta_index,
                    notify,
                    wake,
                    key,
                    word,
                    request: RequestId { terminus, seq },
                    src,
                    dst,
                    slot,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn segments_cover_count_and_round_trip(s in spec()) {
        let send = s.send();
        prop_assert_eq!(send.packet_count(s.mtu), s.packets);
        let seg = send
            .segment(s.mtu)
            .map_err(|e| TestCaseError::fail(format!("refused: {e}")))?;
        prop_assert_eq!(seg.packets(), s.packets);
        prop_assert_eq!(seg.len() as u64, s.packets);
        let mut at = 0u64;
        let mut sum = 0u32;
        let mut count = 0u64;
        for (i, p) in seg.enumerate() {
            let i = i as u64;
            let h = p.header;
            let first = i == 0;
            let last = i + 1 == s.packets;
            count += 1;
            // Coverage: contiguous, in order, full mtu except the last.
            prop_assert_eq!(p.start, at, "packet {} starts elsewhere", i);
            prop_assert_eq!(u64::from(p.len), (s.len - at).min(s.mtu));
            prop_assert!(last || u64::from(p.len) == s.mtu);
            prop_assert_eq!(h.offset, s.offset + at);
            prop_assert_eq!(h.payload_len, p.len);
            at += u64::from(p.len);
            // Counting.
            if !last {
                prop_assert_eq!(h.delta, 1);
            }
            sum = sum.wrapping_add(h.delta);
            // Flags and metadata.
            prop_assert_eq!(h.flags.contains(Flags::FIRST), first);
            prop_assert_eq!(h.flags.contains(Flags::LAST), last);
            prop_assert_eq!(usize::from(h.meta_len), if first { s.meta.len() } else { 0 });
            prop_assert_eq!(
                h.flags.contains(Flags::NOTIFY_NOW),
                s.packets == 1 && (s.y == 0 || s.fast)
            );
            prop_assert_eq!(h.flags.contains(Flags::FAST), s.fast);
            prop_assert_eq!(h.flags.contains(Flags::NOTIFY), s.notify);
            prop_assert_eq!(h.flags.contains(Flags::WAKE), s.wake);
            prop_assert_eq!(h.flags.0 & !Flags::ALL.0, 0);
            // Addressing is copied from the spec into every packet.
            prop_assert_eq!(h.op, Op::Write);
            prop_assert_eq!((h.src, h.dst, h.slot), (NodeId(s.src), NodeId(s.dst), SlotId(s.slot)));
            prop_assert_eq!(h.meta_index, if s.fast { FAST_META_INDEX } else { s.meta_index });
            prop_assert_eq!((h.key, h.word, h.request), (s.key, s.word, s.request));
            // Wire round trip of the header, and of the whole packet when it is small.
            prop_assert_eq!(Header::parse(&h.to_bytes()), Ok(h));
            if p.len <= 4096 {
                let meta: &[u8] = if first { &s.meta } else { &[] };
                let payload = SplitMix::new(i).bytes(p.len as usize);
                let pkt = h.to_packet(meta, &payload).expect("packet");
                let (ph, pm, pp) = Header::parse_packet(&pkt)
                    .map_err(|e| TestCaseError::fail(format!("packet {i} does not parse: {e}")))?;
                prop_assert_eq!((ph, pm, pp), (h, meta, &payload[..]));
            }
        }
        prop_assert_eq!(count, s.packets);
        prop_assert_eq!(at, s.len, "packets do not cover the message");
        prop_assert_eq!(sum, s.y, "deltas do not sum to Y");
    }

    /// The refusals, each on its own: a bad mtu, too much metadata, more packets than the
    /// budget, a fast message that does not fit one packet.
    #[test]
    fn segment_refuses_what_cannot_be_sent(s in spec(), bad_mtu in prop_oneof![
        Just(0u64), u64::from(u32::MAX) + 1..=u64::MAX
    ], extra_meta in 1usize..100) {
        let send = s.send();
        prop_assert_eq!(send.segment(bad_mtu).err(), Some(SegmentError::BadMtu(bad_mtu)));

        let long = vec![0u8; MAX_META_LEN + extra_meta];
        let too_long = SendSpec { meta: &long, ..send };
        prop_assert_eq!(
            too_long.segment(s.mtu).err(),
            Some(SegmentError::MetaTooLong(long.len()))
        );

        for budget in [s.packets - 1, s.packets, s.packets + 1] {
            let r = SendSpec { max_packets: Some(budget), ..send }.segment(s.mtu);
            if s.packets > budget {
                prop_assert_eq!(r.err(), Some(SegmentError::TooManyPackets { need: s.packets, budget }));
            } else {
                prop_assert_eq!(r.map(|g| g.packets()).ok(), Some(s.packets));
            }
        }

        let fast = SendSpec { meta_index: FAST_META_INDEX, ..send };
        let r = fast.segment(s.mtu);
        if s.packets == 1 && s.meta.is_empty() {
            prop_assert!(r.is_ok());
        } else {
            prop_assert_eq!(r.err(), Some(SegmentError::FastTooBig));
        }
    }

    /// `only_packet` is `segment`'s one packet for a message of one packet, `None` for
    /// a longer one, and refuses what `segment` refuses with the same error, for any mtu
    /// (the small message's path must send exactly what the iterator would).
    #[test]
    fn only_packet_is_the_segmenters_single_packet(
        s in spec(),
        mtu in prop_oneof![Just(0u64), 1u64..=1 << 20, u64::from(u32::MAX) - 1..=u64::from(u32::MAX) + 1],
        budget in prop::option::of(0u64..4),
    ) {
        let send = SendSpec { max_packets: budget, ..s.send() };
        match (send.only_packet(mtu), send.segment(mtu)) {
            (Ok(one), Ok(mut all)) => {
                if all.packets() == 1 {
                    prop_assert_eq!(one, all.next());
                } else {
                    prop_assert_eq!(one, None);
                }
            }
            (one, all) => prop_assert_eq!(one.err(), all.err()),
        }
    }

    /// `from_ticket` stays inside the ticket: its byte range and its metadata entries,
    /// with Y and the packet budget taken from the share.
    #[test]
    fn from_ticket_stays_inside_the_ticket(
        t_off in 0u64..1 << 40,
        t_len in 0u64..1 << 20,
        rel in 0u64..(1 << 20) + 10,
        len in 0u64..(1 << 20) + 10,
        meta_first in 0u32..1 << 20,
        meta_count in 0u32..8,
        meta_rel in prop::option::of(0u32..10),
        share in 1u64..=1 << 32,
        word: u64,
    ) {
        let t = Ticket {
            node: NodeId(5),
            incarnation: 2,
            slot: SlotId(9),
            key: 0xABCD,
            meta_first,
            meta_count,
            offset: t_off,
            len: t_len,
            share,
            flags: TicketFlags::WRITE,
        };
        let req = RequestId { terminus: 1, seq: 2 };
        let r = SendSpec::from_ticket(SRC, &t, rel, len, meta_rel, &[], word, req);
        if rel + len > t_len {
            prop_assert_eq!(
                r,
                Err(SegmentError::OutsideTicket { offset: rel, end: u128::from(rel + len) })
            );
        } else if meta_rel.is_some_and(|i| i >= meta_count) {
            prop_assert_eq!(r, Err(SegmentError::MetaIndexOutsideTicket(meta_rel.unwrap_or(0))));
        } else {
            let s = r.map_err(|e| TestCaseError::fail(format!("refused: {e}")))?;
            prop_assert_eq!((s.dst, s.slot, s.key), (t.node, t.slot, t.key));
            prop_assert_eq!(s.offset, t_off + rel);
            prop_assert_eq!(s.len, len);
            prop_assert_eq!(s.meta_index, meta_rel.map_or(FAST_META_INDEX, |i| meta_first + i));
            prop_assert_eq!(s.y, share as u32);
            prop_assert_eq!(s.max_packets, Some(share >> 8));
            prop_assert_eq!((s.src, s.word, s.request), (SRC, word, req));
        }
    }

    /// No spec makes `segment` or its iterator panic: messages that would run past the
    /// end of the 64-bit offset space are refused, everything else iterates.
    #[test]
    fn segment_never_panics(
        offset in prop_oneof![any::<u64>(), (0u64..1 << 16).prop_map(|d| u64::MAX - d)],
        len in prop_oneof![0u64..1 << 16, any::<u64>()],
        mtu in prop_oneof![1u64..1 << 16, Just(u64::from(u32::MAX))],
        y: u32,
    ) {
        let send = SendSpec {
            src: SRC,
            dst: NODE,
            slot: SlotId(0),
            key: 0,
            meta_index: 0,
            offset,
            len,
            meta: &[],
            y,
            max_packets: Some(1 << 12),
            notify: true,
            wake: false,
            word: 0,
            request: RequestId::default(),
        };
        match send.segment(mtu) {
            Ok(seg) => {
                prop_assert!(offset.checked_add(len).is_some(), "accepted a message past 2^64");
                let mut end = offset;
                for p in seg {
                    prop_assert_eq!(p.header.offset, end);
                    end += u64::from(p.len);
                }
                prop_assert_eq!(end, offset + len);
            }
            Err(SegmentError::TooManyPackets { need, .. }) => {
                prop_assert!(need > 1 << 12);
            }
            Err(SegmentError::OutsideTicket { offset: o, end }) => {
                prop_assert_eq!(o, offset);
                prop_assert_eq!(end, u128::from(offset) + u128::from(len));
                prop_assert!(end > u128::from(u64::MAX));
            }
            Err(e) => return Err(TestCaseError::fail(format!("unexpected refusal {e}"))),
        }
    }
}
