//! Direct slots in the core (DESIGN §2, "Direct slots"): the commit a direct sender runs
//! in its own process is the engine's commit, and the check before a mapping is given.
//!
//! - A group whose members deposit some packets through the engine (`Interface::commit`)
//!   and the others by themselves (`count_packet` + `notification_entry`, what the
//!   library of a direct sender calls), in any interleaving, leaves the same metadata
//!   entry and posts the same single notification as the same packets all through the
//!   engine.
//! - `check_direct` refuses in the order of `admit` and names each reason; only slots
//!   made with `create_direct` pass, and paranoid slots cannot be made so.

mod common;

use common::*;
use hamlyn_core::{
    count_packet, notification_entry, AreaId, Interface, MetaRange, OwnerId, QueueId, RejectReason,
    SendSpec, SlotConfig, SlotError, SlotMode, SlotPerms, VecAreas,
};
use hamlyn_wire::entry::NotifKind;
use hamlyn_wire::{Header, NodeId, NotifEntry, RequestId, SlotId, Ticket, TicketFlags};
use hamlyn_wire::{FULL_SHARE, META_ENTRY_LEN};
use proptest::prelude::*;

const KEY: u64 = 0xD1EC_7000_0000_0001;
const SLOT_BASE: u64 = 512;
const SLOT_LEN: u64 = 64 * 1024;
const ENTRY: u32 = 2;
const QUEUE: QueueId = QueueId(9);

struct World {
    iface: Interface,
    areas: VecAreas,
    msg: AreaId,
    meta: AreaId,
    slot: SlotId,
}

fn world(mode: SlotMode, direct: bool) -> World {
    let mut areas = VecAreas::new();
    let msg = areas.add((SLOT_BASE + SLOT_LEN + 256) as usize);
    let meta = areas.add(4 * META_ENTRY_LEN);
    let mut iface = Interface::new(NODE);
    let config = SlotConfig {
        owner: OwnerId(1),
        area: msg,
        base: SLOT_BASE,
        len: SLOT_LEN,
        mode,
        meta: (mode != SlotMode::Fast).then_some(MetaRange {
            area: meta,
            base: 0,
            count: 4,
        }),
        queue: Some(QUEUE),
        perms: SlotPerms::default(),
    };
    let slot = if direct {
        iface.slots_mut().create_direct(config, KEY)
    } else {
        iface.slots_mut().create(config, KEY)
    }
    .expect("slot");
    World {
        iface,
        areas,
        msg,
        meta,
        slot,
    }
}

fn ticket(slot: SlotId) -> Ticket {
    Ticket {
        node: NODE,
        incarnation: 1,
        slot,
        key: KEY,
        meta_first: ENTRY,
        meta_count: 1,
        offset: 0,
        len: SLOT_LEN,
        share: FULL_SHARE,
        flags: TicketFlags::WRITE,
    }
}

/// One packet of a group member's message: header, metadata (first packet) and payload.
#[derive(Clone, Debug)]
struct Packet {
    h: Header,
    meta: Vec<u8>,
    payload: Vec<u8>,
}

/// Splits the slot's ticket among `sizes.len()` members and segments each member's
/// message with `mtu`; every member sends from its own node with its own metadata.
fn group_packets(slot: SlotId, sizes: &[u64], mtu: u64, rng: &mut SplitMix) -> Vec<Packet> {
    let root = ticket(slot);
    let total: u64 = sizes.iter().sum();
    let root = Ticket { len: total, ..root };
    let members = if sizes.len() == 1 {
        vec![root]
    } else {
        root.split_sizes(sizes).expect("split")
    };
    let mut out = Vec::new();
    for (i, t) in members.iter().enumerate() {
        let meta_len = rng.below(61) as usize;
        let meta = rng.bytes(meta_len);
        let data = rng.bytes(t.len as usize);
        let spec = SendSpec::from_ticket(
            NodeId(100 + i as u32),
            t,
            0,
            t.len,
            Some(0),
            &meta,
            0x7A6 + i as u64,
            RequestId::default(),
        )
        .expect("spec");
        for seg in spec.segment(mtu).expect("segments") {
            let first = seg.start == 0;
            out.push(Packet {
                h: seg.header,
                meta: if first { meta.clone() } else { Vec::new() },
                payload: data[seg.start as usize..(seg.start + u64::from(seg.len)) as usize]
                    .to_vec(),
            });
        }
    }
    out
}

/// A packet deposited the direct way: the payload copied to its place in the slot, then
/// the core's `count_packet` over the metadata area (standing in for the direct sender's
/// mapping of it), then the notification it earns.
fn direct_deposit(w: &mut World, p: &Packet) -> Option<NotifEntry> {
    let at = (SLOT_BASE + p.h.offset) as usize;
    let msg = w.areas.bytes_mut(w.msg).expect("message area");
    msg[at..at + p.payload.len()].copy_from_slice(&p.payload);
    let mode = w.iface.slots().get(w.slot).expect("slot").config.mode;
    let entry_off = u64::from(p.h.meta_index) * META_ENTRY_LEN as u64;
    let kind = if mode == SlotMode::Fast {
        count_packet::<Vec<u8>>(mode, None, &p.h, &p.meta)
    } else {
        let mem = w.areas.bytes_mut(w.meta).expect("metadata area");
        count_packet(mode, Some((mem, entry_off)), &p.h, &p.meta)
    }
    .expect("direct commit");
    kind.map(|d| notification_entry(d, &p.h))
}

fn engine_deposit(w: &mut World, p: &Packet, path: Path) -> Option<NotifEntry> {
    deliver(&mut w.iface, &mut w.areas, &p.h, &p.meta, &p.payload, path)
        .expect("engine accepts")
        .map(|n| {
            assert_eq!(n.queue, QUEUE);
            n.entry
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Mixed depositors on one entry behave exactly as the engine alone.
    #[test]
    fn direct_and_engine_deposits_count_as_one(
        seed: u64,
        sizes in proptest::collection::vec(0u64..3000, 1..5),
        mtu in 1u64..1200,
        order in any::<Vec<u32>>(),
        how in any::<Vec<u8>>(),
    ) {
        let mut rng = SplitMix::new(seed);
        let mut all_engine = world(SlotMode::Normal, true);
        let mut mixed = world(SlotMode::Normal, true);
        let mut packets = group_packets(all_engine.slot, &sizes, mtu, &mut rng);
        let mut ch = Choices::new(order);
        ch.shuffle(&mut packets);
        let mut got_engine = Vec::new();
        let mut got_mixed = Vec::new();
        for (i, p) in packets.iter().enumerate() {
            let choice = how.get(i).copied().unwrap_or(0);
            got_engine.extend(engine_deposit(&mut all_engine, p, Path::Copy));
            let n = if choice % 2 == 0 {
                direct_deposit(&mut mixed, p)
            } else {
                engine_deposit(&mut mixed, p, Path::pick(u64::from(choice / 2)))
            };
            got_mixed.extend(n);
            // The entry is the same after every packet, whoever deposited it.
            prop_assert_eq!(snapshot(&mixed.areas, mixed.meta), snapshot(&all_engine.areas, all_engine.meta));
        }
        prop_assert_eq!(got_engine.len(), 1, "one notification, after the last packet");
        prop_assert_eq!(&got_mixed, &got_engine);
        prop_assert_eq!(snapshot(&mixed.areas, mixed.msg), snapshot(&all_engine.areas, all_engine.msg));
        let n = got_engine[0];
        prop_assert_eq!(n.kind.get(), NotifKind::Message as u16);
        prop_assert_eq!((n.slot.get(), n.meta_index.get()), (all_engine.slot.0, ENTRY));
        let e = entry_at(&mixed.areas, mixed.meta, u64::from(ENTRY) * META_ENTRY_LEN as u64);
        prop_assert_eq!((e.accumulator.get(), e.completed.get()), (0, 1));
    }
}

#[test]
fn fast_messages_complete_at_once_with_their_word() {
    let mut engine = world(SlotMode::Fast, true);
    let mut direct = world(SlotMode::Fast, true);
    let t = Ticket {
        meta_count: 0,
        flags: TicketFlags::WRITE | TicketFlags::FAST,
        ..ticket(engine.slot)
    };
    let spec = SendSpec::from_ticket(
        SRC,
        &t,
        40,
        8,
        None,
        &[],
        0xFA57_0000_0000_0042,
        RequestId::default(),
    )
    .expect("spec");
    let seg = spec.segment(4096).expect("one packet").next().expect("one");
    let p = Packet {
        h: seg.header,
        meta: Vec::new(),
        payload: b"fastfast".to_vec(),
    };
    let a = engine_deposit(&mut engine, &p, Path::TwoPhase).expect("notified");
    let b = direct_deposit(&mut direct, &p).expect("notified");
    assert_eq!(a, b);
    assert_eq!(a.kind.get(), NotifKind::Fast as u16);
    assert_eq!(a.word.get(), 0xFA57_0000_0000_0042);
    assert_eq!(a.len.get(), 8);
    assert_eq!(
        snapshot(&engine.areas, engine.msg),
        snapshot(&direct.areas, direct.msg)
    );
    // A fast slot has no entry to count in: the metadata area is untouched.
    assert!(snapshot(&direct.areas, direct.meta).iter().all(|&b| b == 0));
    // A counting mode without an entry is refused, not a panic.
    assert_eq!(
        count_packet::<Vec<u8>>(SlotMode::Normal, None, &p.h, &[]),
        Err(RejectReason::BadMetaIndex)
    );
}

#[test]
fn check_direct_refuses_in_admission_order() {
    let mut w = world(SlotMode::Normal, true);
    let s = w.slot;
    let ok = |w: &World| w.iface.check_direct(NODE, s, KEY).map(|slot| slot.direct);
    assert_eq!(ok(&w), Ok(true));
    assert_eq!(
        w.iface.check_direct(NodeId(NODE.0 + 1), s, KEY).err(),
        Some(RejectReason::WrongNode)
    );
    assert_eq!(
        w.iface.check_direct(NODE, SlotId(s.0 + 1), KEY).err(),
        Some(RejectReason::UnknownSlot)
    );
    assert_eq!(
        w.iface.check_direct(NODE, s, KEY ^ 1).err(),
        Some(RejectReason::BadKey)
    );
    // Revoked comes before the key (as in `admit`), and a rekey lifts it with a new key.
    w.iface.slots_mut().revoke(OwnerId(1), s).expect("revoke");
    assert_eq!(
        w.iface.check_direct(NODE, s, KEY ^ 1).err(),
        Some(RejectReason::Revoked)
    );
    w.iface
        .slots_mut()
        .rekey(OwnerId(1), s, KEY + 1)
        .expect("rekey");
    assert_eq!(
        w.iface.check_direct(NODE, s, KEY).err(),
        Some(RejectReason::BadKey),
        "the old key no longer opens the slot"
    );
    assert!(w.iface.check_direct(NODE, s, KEY + 1).is_ok());
    w.iface
        .slots_mut()
        .inhibit(OwnerId(1), s, true)
        .expect("inhibit");
    assert_eq!(
        w.iface.check_direct(NODE, s, KEY + 1).err(),
        Some(RejectReason::Inhibited)
    );
    // Checking counts nothing: it is not a packet.
    assert_eq!(w.iface.stats().rejects, Default::default());

    // A slot made the ordinary way never allows direct access, whatever the key.
    let plain = world(SlotMode::Normal, false);
    assert_eq!(
        plain.iface.check_direct(NODE, plain.slot, KEY).err(),
        Some(RejectReason::BadMode)
    );
    // A direct slot that refuses writes cannot be written directly either.
    let mut ro = world(SlotMode::Fast, true);
    let id = ro.slot;
    let cfg = ro.iface.slots().get(id).expect("slot").config;
    ro.iface
        .slots_mut()
        .destroy(OwnerId(1), id)
        .expect("destroy");
    let id = ro
        .iface
        .slots_mut()
        .create_direct(
            SlotConfig {
                perms: SlotPerms {
                    write: false,
                    read: true,
                    atomic: false,
                },
                ..cfg
            },
            KEY,
        )
        .expect("slot");
    assert_eq!(
        ro.iface.check_direct(NODE, id, KEY).err(),
        Some(RejectReason::NotPermitted)
    );
}

#[test]
fn paranoid_slots_cannot_be_direct() {
    for mode in [SlotMode::Paranoid, SlotMode::ParanoidOneShot] {
        let w = world(SlotMode::Normal, false);
        let mut iface = w.iface;
        let cfg = iface.slots().get(w.slot).expect("slot").config;
        assert_eq!(
            iface
                .slots_mut()
                .create_direct(SlotConfig { mode, ..cfg }, KEY),
            Err(SlotError::DirectParanoid)
        );
    }
}
