//! The core's packet ingress on arbitrary packet sequences (what a peer can send once its
//! link is up): `hamlyn_core::Interface::receive_packet` against a slot table of every
//! mode, with answers (`READ_RESP`, `ATOMIC_RESP`) first checked by
//! `hamlyn_core::Expected` as the engine does. Never panics, and nothing is ever written
//! outside the slots' byte ranges or their metadata entries, whatever is accepted.
//!
//! Input: packets, each a little-endian `u16` length then that many bytes (a packet as
//! the wire carries it: header, metadata, payload). Slot keys are small constants so the
//! fuzzer finds them (libFuzzer's comparison tracing helps), and slot 0 of a
//! fresh table is the normal slot.
#![no_main]

use hamlyn_core::{
    Answer, Expected, Interface, MetaRange, OwnerId, SlotConfig, SlotMode, SlotPerms, VecAreas,
};
use hamlyn_wire::{Header, NodeId, Op, RequestId, SlotId, META_ENTRY_LEN};
use libfuzzer_sys::fuzz_target;

const AREA: usize = 8192;
const META: usize = 16 * META_ENTRY_LEN;

/// (area, base, len, meta base, meta count) of each slot: guard bytes around and between.
const SLOTS: [(SlotMode, u64, u64, u64, u32, u64); 4] = [
    (SlotMode::Normal, 512, 1024, 0, 4, 0x11),
    (SlotMode::Fast, 2048, 256, 0, 0, 0x22),
    (
        SlotMode::Paranoid,
        3072,
        1024,
        5 * META_ENTRY_LEN as u64,
        4,
        0x33,
    ),
    (
        SlotMode::ParanoidOneShot,
        5120,
        1024,
        10 * META_ENTRY_LEN as u64,
        4,
        0x44,
    ),
];

fuzz_target!(|data: &[u8]| {
    let mut areas = VecAreas::new();
    let msg = areas.add(AREA);
    let meta = areas.add(META);
    let mut iface = Interface::new(NodeId(1));
    for (mode, base, len, meta_base, count, key) in SLOTS {
        let config = SlotConfig {
            owner: OwnerId(1),
            area: msg,
            base,
            len,
            mode,
            meta: (count > 0).then_some(MetaRange {
                area: meta,
                base: meta_base,
                count,
            }),
            queue: None,
            perms: SlotPerms {
                write: true,
                read: true,
                atomic: true,
            },
        };
        if iface.slots_mut().create(config, key).is_err() {
            return;
        }
    }
    // One read awaited from node 2, answering into the normal slot.
    let mut expected = Expected::new();
    let read = RequestId {
        terminus: 0x100,
        seq: 1,
    };
    let _ = expected.expect_answer(
        NodeId(2),
        read,
        Answer {
            op: Op::ReadResp,
            slot: SlotId(0),
            start: 0,
            len: 256,
        },
    );

    let mut rest = data;
    while rest.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let (packet, tail) = rest[2..].split_at(len);
        rest = tail;
        if let Ok((h, _, _)) = Header::parse_packet(packet) {
            if matches!(h.op, Op::ReadResp | Op::AtomicResp) {
                if expected.check_answer(h.src, &h).is_err() {
                    continue;
                }
                if iface.receive_packet(packet, &mut areas).is_ok() {
                    expected.answered(h.src, &h);
                }
                continue;
            }
            if h.op == Op::Nack {
                let _ = expected.nack(h.src, h.request);
                continue;
            }
        }
        let _ = iface.receive_packet(packet, &mut areas);
    }

    // Nothing outside a slot's range or its metadata entries was written.
    let m = areas.bytes(msg).map(<[u8]>::to_vec).unwrap_or_default();
    for (i, b) in m.iter().enumerate() {
        let inside = SLOTS
            .iter()
            .any(|&(_, base, len, ..)| (base..base + len).contains(&(i as u64)));
        assert!(inside || *b == 0, "byte {i} of the message area written");
    }
    let e = areas.bytes(meta).map(<[u8]>::to_vec).unwrap_or_default();
    for (i, b) in e.iter().enumerate() {
        let inside = SLOTS.iter().any(|&(_, _, _, base, count, _)| {
            (base..base + u64::from(count) * META_ENTRY_LEN as u64).contains(&(i as u64))
        });
        assert!(inside || *b == 0, "byte {i} of the metadata area written");
    }
});
