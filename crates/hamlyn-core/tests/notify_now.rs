//! NOTIFY_NOW cannot end someone else's group early: it must carry delta 0, and on an
//! entry whose accumulator is mid-count it completes nothing and adds nothing (its bytes
//! are not the group's).

use hamlyn_core::{
    Interface, MetaRange, OwnerId, RejectReason, SendSpec, SlotConfig, SlotMode, SlotPerms,
    VecAreas,
};
use hamlyn_wire::{Flags, NodeId, RequestId, Ticket, TicketFlags, FULL_SHARE};

const NODE: NodeId = NodeId(1);

#[test]
fn notify_now_cannot_complete_a_group_early() {
    let mut areas = VecAreas::new();
    let msg = areas.add(4096);
    let meta = areas.add(128);
    let mut iface = Interface::new(NODE);
    let config = SlotConfig {
        owner: OwnerId(1),
        area: msg,
        base: 0,
        len: 4096,
        mode: SlotMode::Normal,
        meta: Some(MetaRange {
            area: meta,
            base: 0,
            count: 1,
        }),
        queue: Some(hamlyn_core::QueueId(0)),
        perms: SlotPerms::default(),
    };
    let key = 0x1234_5678_9ABC_DEF0;
    let slot = iface.slots_mut().create(config, key).unwrap();
    let root = Ticket {
        node: NODE,
        incarnation: 1,
        slot,
        key,
        meta_first: 0,
        meta_count: 1,
        offset: 0,
        len: 4096,
        share: FULL_SHARE,
        flags: TicketFlags::WRITE,
    };
    let kids = root.split(2).unwrap();
    // Member 0 sends the first of its two packets: the accumulator is now mid-count.
    let spec = SendSpec::from_ticket(
        NODE,
        &kids[0],
        0,
        2048,
        Some(0),
        b"",
        7,
        RequestId::default(),
    )
    .unwrap();
    let segs: Vec<_> = spec.segment(1024).unwrap().collect();
    assert_eq!(segs.len(), 2);
    assert_eq!(
        iface
            .receive(&segs[0].header, &[], &[1; 1024], &mut areas)
            .unwrap(),
        None
    );

    // A key holder's lone NOTIFY_NOW packet (delta 0) mid-count: no early end.
    let mut lone = segs[0].header;
    lone.flags = Flags::FIRST | Flags::LAST | Flags::NOTIFY | Flags::NOTIFY_NOW;
    lone.delta = 0;
    lone.offset = 3000;
    lone.payload_len = 4;
    assert_eq!(
        iface.receive(&lone, &[], &[9; 4], &mut areas).unwrap(),
        None,
        "no early notification"
    );

    // With a non-zero delta it is refused outright.
    lone.delta = 5;
    assert_eq!(
        iface
            .receive(&lone, &[], &[9; 4], &mut areas)
            .unwrap_err()
            .reason,
        RejectReason::BadMode
    );

    // The group still completes exactly when both members are done.
    assert_eq!(
        iface
            .receive(&segs[1].header, &[], &[1; 1024], &mut areas)
            .unwrap(),
        None
    );
    let spec = SendSpec::from_ticket(NODE, &kids[1], 0, 10, Some(0), b"", 8, RequestId::default())
        .unwrap();
    let last: Vec<_> = spec.segment(1024).unwrap().collect();
    assert_eq!(last.len(), 1);
    assert!(
        !last[0].header.flags.contains(Flags::NOTIFY_NOW),
        "a group member never uses NOTIFY_NOW"
    );
    let done = iface
        .receive(&last[0].header, &[], &[2; 10], &mut areas)
        .unwrap()
        .expect("the group completes");
    assert_eq!(
        done.entry.len.get(),
        2048 + 10,
        "the group's own bytes, not the lone packet's with them"
    );

    // On an idle entry a lone message still completes at once.
    let mut lone = last[0].header;
    lone.flags = Flags::FIRST | Flags::LAST | Flags::NOTIFY | Flags::NOTIFY_NOW;
    lone.delta = 0;
    assert!(iface
        .receive(&lone, &[], &[3; 10], &mut areas)
        .unwrap()
        .is_some());
}
