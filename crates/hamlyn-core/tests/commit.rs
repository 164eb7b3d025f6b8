//! `Interface::commit` says what each packet completed: the message (or group) is done
//! exactly when the last contribution is counted, whether or not a notification goes
//! with it — callers never diff counters to find out.
#![allow(clippy::unwrap_used)]

use hamlyn_core::{
    Areas, Interface, Memory, MetaRange, OwnerId, QueueId, SendSpec, SlotConfig, SlotMode,
    SlotPerms, VecAreas,
};
use hamlyn_wire::{NodeId, RequestId, Ticket, TicketFlags, FULL_SHARE};

const NODE: NodeId = NodeId(1);
const KEY: u64 = 0x0DDB_A11C_AFE0_0001;

fn setup(queue: Option<QueueId>) -> (Interface, VecAreas, Ticket) {
    let mut areas = VecAreas::new();
    let msg = areas.add(8192);
    let meta = areas.add(128);
    let mut iface = Interface::new(NODE);
    let config = SlotConfig {
        owner: OwnerId(1),
        area: msg,
        base: 0,
        len: 8192,
        mode: SlotMode::Normal,
        meta: Some(MetaRange {
            area: meta,
            base: 0,
            count: 1,
        }),
        queue,
        perms: SlotPerms::default(),
    };
    let slot = iface.slots_mut().create(config, KEY).unwrap();
    let ticket = Ticket {
        node: NODE,
        incarnation: 1,
        slot,
        key: KEY,
        meta_first: 0,
        meta_count: 1,
        offset: 0,
        len: 8192,
        share: FULL_SHARE,
        flags: TicketFlags::WRITE,
    };
    (iface, areas, ticket)
}

/// Admits, deposits and commits every packet of `spec`; what each commit said.
fn commit_all(
    iface: &mut Interface,
    areas: &mut VecAreas,
    spec: &SendSpec<'_>,
) -> Vec<hamlyn_core::Committed> {
    spec.segment(1024)
        .unwrap()
        .map(|seg| {
            let p = iface.admit(&seg.header, areas).unwrap();
            let mem = areas.area(p.area).unwrap();
            mem.write(p.offset, &vec![7; p.len as usize]).unwrap();
            iface.commit(&seg.header, &[], areas).unwrap()
        })
        .collect()
}

#[test]
fn a_group_is_done_on_its_last_contribution_only() {
    let (mut iface, mut areas, root) = setup(Some(QueueId(3)));
    let kids = root.split(2).unwrap();
    let mut done = Vec::new();
    // Member 0: 2 packets, member 1: 3 packets; interleaving does not matter for the sum.
    for (kid, at, len) in [(&kids[0], 0, 2048), (&kids[1], 0, 3072)] {
        let spec = SendSpec::from_ticket(NODE, kid, at, len, Some(0), b"", 9, RequestId::default())
            .unwrap();
        done.extend(commit_all(&mut iface, &mut areas, &spec));
    }
    assert_eq!(done.len(), 5);
    let flags: Vec<bool> = done.iter().map(|c| c.message_done).collect();
    assert_eq!(flags, [false, false, false, false, true]);
    assert!(done[..4].iter().all(|c| c.notification.is_none()));
    let n = done[4].notification.expect("the group's notification");
    assert_eq!(n.queue, QueueId(3));
    assert_eq!(iface.stats().messages, 1);
}

#[test]
fn a_message_without_a_queue_is_done_but_notifies_no_one() {
    let (mut iface, mut areas, ticket) = setup(None);
    let spec = SendSpec::from_ticket(
        NODE,
        &ticket,
        0,
        2500,
        Some(0),
        b"",
        1,
        RequestId::default(),
    )
    .unwrap();
    let done = commit_all(&mut iface, &mut areas, &spec);
    let flags: Vec<bool> = done.iter().map(|c| c.message_done).collect();
    assert_eq!(flags, [false, false, true]);
    assert!(done.iter().all(|c| c.notification.is_none()));
}
