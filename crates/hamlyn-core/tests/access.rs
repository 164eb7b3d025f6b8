//! One-sided access checks (seed 004 §2): who may read or update a slot, and where.
#![allow(clippy::unwrap_used)]

use hamlyn_core::{
    Access, Interface, Memory, MetaRange, OwnerId, RejectReason, SlotConfig, SlotMode, SlotPerms,
    VecAreas,
};
use hamlyn_wire::{Header, NodeId, Op, SlotId};

const NODE: NodeId = NodeId(3);
const KEY: u64 = 0xABCD_EF01_2345_6789;

fn fixture(perms: SlotPerms, mode: SlotMode) -> (Interface, VecAreas, SlotId) {
    let mut areas = VecAreas::new();
    let msg = areas.add(4096);
    let meta = areas.add(128 * 2);
    let mut iface = Interface::new(NODE);
    let config = SlotConfig {
        owner: OwnerId(1),
        area: msg,
        base: 1024,
        len: 2048,
        mode,
        meta: Some(MetaRange {
            area: meta,
            base: 0,
            count: 2,
        }),
        queue: None,
        perms,
    };
    let slot = iface.slots_mut().create(config, KEY).unwrap();
    (iface, areas, slot)
}

fn req(op: Op, slot: SlotId, key: u64, offset: u64) -> Header {
    let mut h = Header::new(op);
    h.src = NodeId(9);
    h.dst = NODE;
    h.slot = slot;
    h.key = key;
    h.offset = offset;
    h
}

const ALL: SlotPerms = SlotPerms {
    write: true,
    read: true,
    atomic: true,
};

#[test]
fn reads_need_the_key_the_permission_and_the_range() {
    let (mut iface, mut areas, slot) = fixture(ALL, SlotMode::Normal);
    let p = iface
        .check_access(
            &req(Op::ReadReq, slot, KEY, 100),
            Access::Read { len: 50 },
            &mut areas,
        )
        .unwrap();
    assert_eq!((p.offset, p.len), (1124, 50), "slot base + offset");
    let reason = |iface: &mut Interface, areas: &mut VecAreas, h: Header, a| {
        iface.check_access(&h, a, areas).unwrap_err().reason
    };
    assert_eq!(
        reason(
            &mut iface,
            &mut areas,
            req(Op::ReadReq, slot, KEY ^ 1, 0),
            Access::Read { len: 1 }
        ),
        RejectReason::BadKey
    );
    assert_eq!(
        reason(
            &mut iface,
            &mut areas,
            req(Op::ReadReq, slot, KEY, 2000),
            Access::Read { len: 49 }
        ),
        RejectReason::OutOfBounds
    );
    assert_eq!(
        reason(
            &mut iface,
            &mut areas,
            req(Op::ReadReq, slot, KEY, u64::MAX),
            Access::Read { len: 2 }
        ),
        RejectReason::OutOfBounds
    );
    assert_eq!(
        reason(
            &mut iface,
            &mut areas,
            req(Op::ReadReq, SlotId(9), KEY, 0),
            Access::Read { len: 1 }
        ),
        RejectReason::UnknownSlot
    );
    let mut wrong = req(Op::ReadReq, slot, KEY, 0);
    wrong.dst = NodeId(4);
    assert_eq!(
        reason(&mut iface, &mut areas, wrong, Access::Read { len: 1 }),
        RejectReason::WrongNode
    );
    let (mut iface, mut areas, slot) = fixture(SlotPerms::default(), SlotMode::Normal);
    assert_eq!(
        reason(
            &mut iface,
            &mut areas,
            req(Op::ReadReq, slot, KEY, 0),
            Access::Read { len: 1 }
        ),
        RejectReason::NotPermitted
    );
    assert_eq!(
        reason(
            &mut iface,
            &mut areas,
            req(Op::AtomicReq, slot, KEY, 0),
            Access::Atomic
        ),
        RejectReason::NotPermitted
    );
    assert_eq!(iface.stats().rejects.total(), 2, "every refusal counted");
}

#[test]
fn atomics_are_aligned_and_respect_write_inhibit_while_reads_do_not() {
    let (mut iface, mut areas, slot) = fixture(ALL, SlotMode::Normal);
    assert!(iface
        .check_access(
            &req(Op::AtomicReq, slot, KEY, 8),
            Access::Atomic,
            &mut areas
        )
        .is_ok());
    let r = iface.check_access(
        &req(Op::AtomicReq, slot, KEY, 4),
        Access::Atomic,
        &mut areas,
    );
    assert_eq!(
        r.unwrap_err().reason,
        RejectReason::OutOfBounds,
        "unaligned"
    );
    let r = iface.check_access(
        &req(Op::AtomicReq, slot, KEY, 2044),
        Access::Atomic,
        &mut areas,
    );
    assert_eq!(
        r.unwrap_err().reason,
        RejectReason::OutOfBounds,
        "past the end"
    );
    iface.slots_mut().inhibit(OwnerId(1), slot, true).unwrap();
    let r = iface.check_access(
        &req(Op::AtomicReq, slot, KEY, 8),
        Access::Atomic,
        &mut areas,
    );
    assert_eq!(r.unwrap_err().reason, RejectReason::Inhibited);
    assert!(iface
        .check_access(
            &req(Op::ReadReq, slot, KEY, 8),
            Access::Read { len: 8 },
            &mut areas
        )
        .is_ok());
    iface.slots_mut().revoke(OwnerId(1), slot).unwrap();
    let r = iface.check_access(
        &req(Op::ReadReq, slot, KEY, 8),
        Access::Read { len: 8 },
        &mut areas,
    );
    assert_eq!(r.unwrap_err().reason, RejectReason::Revoked);
}

#[test]
fn paranoid_slots_check_the_entry_key_and_range() {
    let (mut iface, mut areas, slot) = fixture(ALL, SlotMode::Paranoid);
    let meta = hamlyn_core::AreaId(1);
    let mut e = hamlyn_wire::MetaEntry::zeroed();
    e.paranoid_key.set(77);
    e.paranoid_low.set(64);
    e.paranoid_high.set(128);
    areas.area_write(meta, 128, e.as_bytes());
    let mut h = req(Op::ReadReq, slot, 77, 64);
    h.meta_index = 1;
    assert!(iface
        .check_access(&h, Access::Read { len: 64 }, &mut areas)
        .is_ok());
    let r = iface.check_access(&h, Access::Read { len: 65 }, &mut areas);
    assert_eq!(r.unwrap_err().reason, RejectReason::ParanoidBounds);
    h.key = KEY;
    let r = iface.check_access(&h, Access::Read { len: 8 }, &mut areas);
    assert_eq!(
        r.unwrap_err().reason,
        RejectReason::ParanoidKey,
        "the slot key is not enough"
    );
    h.meta_index = 5;
    let r = iface.check_access(&h, Access::Read { len: 8 }, &mut areas);
    assert_eq!(r.unwrap_err().reason, RejectReason::BadMetaIndex);
}

#[test]
fn vec_memory_atomics_behave_like_the_real_ones() {
    let mut m = vec![0u8; 16];
    assert_eq!(m.compare_swap_u64(8, 0, 5).unwrap(), 0);
    assert_eq!(
        m.compare_swap_u64(8, 0, 9).unwrap(),
        5,
        "failed compare keeps the value"
    );
    assert_eq!(m.fetch_add_u64(8, u64::MAX).unwrap(), 5);
    assert_eq!(m.fetch_add_u64(8, 0).unwrap(), 4, "wrapping add");
    assert!(m.fetch_add_u64(4, 1).is_err(), "unaligned");
    assert!(m.compare_swap_u64(16, 0, 1).is_err(), "out of range");
}

trait AreaWrite {
    fn area_write(&mut self, id: hamlyn_core::AreaId, off: usize, bytes: &[u8]);
}

impl AreaWrite for VecAreas {
    fn area_write(&mut self, id: hamlyn_core::AreaId, off: usize, bytes: &[u8]) {
        self.bytes_mut(id).unwrap()[off..off + bytes.len()].copy_from_slice(bytes);
    }
}
