//! What a notification tells its receiver about a whole message, through a real engine:
//! the length of all its packets, where its first byte landed, and the cookie the owner
//! put on its metadata entry.

use std::time::Duration;

use hamlyn::{Data, Node, NotificationKind, SendOptions};

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

#[test]
fn a_multi_packet_message_is_reported_whole_with_its_first_offset_and_entry_cookie() {
    let node = Node::embedded().expect("engine");
    let inbox = node.area(4 << 20).expect("area");
    let meta = node.meta_area(4).expect("meta");
    let slot = node
        .slot(&inbox)
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot");
    for i in 0..4 {
        meta.set_cookie(i, 0xC0DE_0000 + u64::from(i))
            .expect("cookie");
    }
    let ticket = slot.ticket_all().expect("ticket");
    let mut q = node.queue(0).expect("queue");
    q.read_entries_of(&slot).expect("the slot has entries");
    let mut t = node.terminus(0).expect("terminus");
    let out = node.area(3 << 20).expect("send area");
    let bytes: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7 + 1) as u8).collect();
    out.write(0, &bytes).expect("fill");

    // Three MiB and change: more than one packet of the engine (256 KiB).
    let len = (3 << 20) - 5;
    let spans = [out.span(0, len)];
    let h = t
        .send(
            &ticket,
            &SendOptions::new().offset(4096 + 3).entry(2).tag(9),
            Data::Gather(&spans),
        )
        .expect("send");
    let n = q.wait(WAIT).expect("wait").expect("notified");
    assert_eq!(n.kind, NotificationKind::Message);
    assert_eq!(n.len as u64, len, "the whole message, not its last packet");
    assert_eq!(n.offset, Some(4096 + 3), "where its first byte is");
    assert_eq!(n.cookie, Some(0xC0DE_0002), "the entry's cookie");
    assert_eq!((n.meta_index, n.word), (Some(2), 9));
    assert!(h.wait(WAIT).is_done());
    assert_eq!(
        inbox.read_vec(4096 + 3, len as usize).expect("read"),
        bytes[..len as usize]
    );

    // A single-packet message on another entry reports its own numbers.
    t.send(
        &ticket,
        &SendOptions::new().offset(17).entry(1),
        Data::Inline(b"hello"),
    )
    .expect("send");
    let n = q.wait(WAIT).expect("wait").expect("notified");
    assert_eq!(
        (n.len, n.offset, n.cookie),
        (5, Some(17), Some(0xC0DE_0001))
    );

    // A queue not told to read a slot's entries leaves them out.
    q.forget_entries_of(slot.id());
    t.send(&ticket, &SendOptions::new().entry(3), Data::Inline(b"x"))
        .expect("send");
    let n = q.wait(WAIT).expect("wait").expect("notified");
    assert_eq!((n.len, n.offset, n.cookie), (1, None, None));
}

/// A queue reading the entries of some slots and not of others (more slots than its
/// 64-bit filter has bits, so ids share bits) gives the cookie of exactly the slots it
/// reads, before and after it forgets some of them.
#[test]
fn cookies_come_with_exactly_the_slots_whose_entries_the_queue_reads() {
    let node = Node::embedded().expect("engine");
    let inbox = node.area(80 * 64).expect("area");
    let meta = node.meta_area(80).expect("meta");
    let mut slots = Vec::new();
    for i in 0..80u32 {
        let m = hamlyn::MetaArea::new(meta.area(), meta.base() + u64::from(i) * 128, 1)
            .expect("one entry");
        m.set_cookie(0, 1000 + u64::from(i)).expect("cookie");
        let slot = node
            .slot(&inbox)
            .range(u64::from(i) * 64..u64::from(i + 1) * 64)
            .meta(&m)
            .queue(0)
            .create()
            .expect("slot");
        slots.push(slot);
    }
    let mut q = node.queue(0).expect("queue");
    let mut t = node.terminus(0).expect("terminus");
    // Every even slot; then the first few of them are forgotten, while slots 64 places
    // on (sharing their bits, slot ids being handed out in order) are still read.
    let reads = |i: usize, forgot: bool| i % 2 == 0 && !(forgot && i < 16);
    for (i, slot) in slots.iter().enumerate() {
        if reads(i, false) {
            q.read_entries_of(slot).expect("the slot has entries");
        }
    }
    for forgot in [false, true] {
        if forgot {
            for (i, slot) in slots.iter().enumerate() {
                if reads(i, false) && !reads(i, true) {
                    q.forget_entries_of(slot.id());
                }
            }
        }
        for (i, slot) in slots.iter().enumerate() {
            let ticket = slot.ticket_all().expect("ticket");
            t.send(&ticket, &SendOptions::new().entry(0), Data::Inline(b"x"))
                .expect("send");
            let n = q.wait(WAIT).expect("wait").expect("notified");
            assert_eq!(n.slot, slot.id());
            let want = reads(i, forgot).then_some(1000 + i as u64);
            assert_eq!(n.cookie, want, "slot {i} (forgot some: {forgot})");
        }
    }
}
