//! Remote read, compare-and-swap and fetch-add through the library against a real
//! engine: the target engine executes them; answers land in the reply slot.

use std::time::Duration;

use hamlyn::{
    CompareSwapArgs, FetchAddArgs, Node, NotificationKind, ReadArgs, RejectReason, SendError,
    SlotPerms, Status,
};

const WAIT: Option<Duration> = Some(Duration::from_secs(10));
const ALL: SlotPerms = SlotPerms {
    write: true,
    read: true,
    atomic: true,
};

#[test]
fn read_cas_and_fetch_add_through_the_library() {
    let owner = Node::embedded().expect("engine");
    let user = Node::connect(owner.socket_path()).expect("second client");
    let data = owner.area(64 * 1024).expect("area");
    let meta = owner.meta_area(1).expect("meta");
    let shared = owner
        .slot(&data)
        .meta(&meta)
        .perms(ALL)
        .create()
        .expect("slot");
    let pattern: Vec<u8> = (0..64 * 1024u32).map(|i| (i % 241) as u8).collect();
    data.write(0, &pattern).expect("fill");
    data.write(0, &0u64.to_le_bytes()).expect("lock word");
    let target = shared.ticket_all().expect("ticket");

    let inbox = user.area(64 * 1024).expect("reply area");
    let rmeta = user.meta_area(1).expect("reply meta");
    let reply_slot = user
        .slot(&inbox)
        .meta(&rmeta)
        .queue(0)
        .create()
        .expect("reply slot");
    let reply = reply_slot.ticket_all().expect("reply ticket");
    let mut q = user.queue(0).expect("queue");
    let mut t = user.terminus(0).expect("terminus");

    // Read 60 KiB.
    let h = t
        .read(&ReadArgs {
            source: &target,
            offset: 100,
            len: 60 * 1024,
            reply: &reply,
            reply_offset: 0,
        })
        .expect("read");
    let n = q.wait(WAIT).expect("wait").expect("ReadDone");
    assert_eq!(n.kind, NotificationKind::ReadDone);
    assert_eq!(n.request, Some(h.request()), "ReadDone names the read");
    assert_eq!(h.wait(WAIT), Status::Sent);
    assert_eq!(
        inbox.read_vec(0, 60 * 1024).expect("read back"),
        pattern[100..100 + 60 * 1024]
    );

    // A compare-and-swap lock: take it, fail to take it again, release it.
    let cas = |expected, new| CompareSwapArgs {
        target: &target,
        offset: 0,
        expected,
        new,
        reply: &reply,
        reply_offset: 0,
    };
    let h = t.compare_swap(&cas(0, 1)).expect("cas");
    let n = q.wait(WAIT).expect("wait").expect("AtomicDone");
    assert_eq!(
        (n.kind, n.word),
        (NotificationKind::AtomicDone, 0),
        "lock taken: it was free"
    );
    assert_eq!(n.request, Some(h.request()), "AtomicDone names the atomic");
    t.compare_swap(&cas(0, 1)).expect("cas");
    assert_eq!(
        q.wait(WAIT).expect("wait").expect("AtomicDone").word,
        1,
        "held: not taken again"
    );
    t.compare_swap(&cas(1, 0)).expect("release");
    assert_eq!(q.wait(WAIT).expect("wait").expect("AtomicDone").word, 1);
    assert_eq!(
        data.read_vec(0, 8).expect("word"),
        0u64.to_le_bytes(),
        "released"
    );
    let h = t
        .fetch_add(&FetchAddArgs {
            target: &target,
            offset: 8,
            addend: 41,
            reply: &reply,
            reply_offset: 16,
        })
        .expect("fetch-add");
    let old = u64::from_le_bytes(pattern[8..16].try_into().expect("8 bytes"));
    let n = q.wait(WAIT).expect("wait").expect("AtomicDone");
    assert_eq!(n.word, old);
    assert_eq!(n.request, Some(h.request()));
    assert_eq!(
        inbox.read_vec(16, 8).expect("reply bytes"),
        old.to_le_bytes(),
        "old value in the reply slot"
    );

    // Client-side checks: ranges, and what the ticket grants.
    let read8 = |source, offset, reply_offset| ReadArgs {
        source,
        offset,
        len: 8,
        reply: &reply,
        reply_offset,
    };
    assert!(matches!(
        t.read(&read8(&target, 64 * 1024 - 4, 0)),
        Err(SendError::OutsideRange {
            which: "source",
            ..
        })
    ));
    assert!(matches!(
        t.read(&read8(&target, 0, 64 * 1024 - 4)),
        Err(SendError::OutsideRange { which: "reply", .. })
    ));
    let wo_area = owner.area(4096).expect("area");
    let wo_meta = owner.meta_area(1).expect("meta");
    let wo_slot = owner.slot(&wo_area).meta(&wo_meta).create().expect("slot");
    let write_only = wo_slot.ticket_all().expect("ticket");
    assert!(matches!(
        t.read(&read8(&write_only, 0, 0)),
        Err(SendError::NotGranted("reads"))
    ));
    // A forged grant is still refused by the engine.
    let mut forged = write_only;
    forged.flags = forged.flags | hamlyn::TicketFlags::READ;
    let h = t.read(&read8(&forged, 0, 0)).expect("queued");
    assert_eq!(h.wait(WAIT), Status::Failed(RejectReason::NotPermitted));
}
