//! The library against a real engine started inside the test process
//! ([`Node::embedded`]): data lands byte-exact, refusals come back as typed failures
//! with the receiver untouched, and a full terminus is back-pressure.

use std::time::{Duration, Instant};

use hamlyn::{
    Area, Data, MetaArea, Node, NodeOptions, NotificationKind, RejectReason, SendError,
    SendOptions, Slot, SlotPerms, Status, Ticket,
};

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

/// A receiver: an area, its metadata entries and a normal slot reporting to `queue`.
struct Inbox {
    area: Area,
    meta: MetaArea,
    slot: Slot,
}

fn inbox(node: &Node, len: u64, entries: u32, queue: u16) -> Inbox {
    let area = node.area(len).expect("area");
    let meta = node.meta_area(entries).expect("meta area");
    let slot = node
        .slot(&area)
        .meta(&meta)
        .queue(queue)
        .create()
        .expect("slot");
    Inbox { area, meta, slot }
}

#[test]
fn ping_pong_of_tagged_8_byte_writes_between_two_clients() {
    let a = Node::embedded().expect("embedded engine");
    let b = Node::connect(a.socket_path()).expect("second client");
    let in_a = inbox(&a, 64, 1, 0);
    let in_b = inbox(&b, 64, 1, 0);
    let to_a = in_a.slot.ticket_all().expect("ticket");
    let to_b = in_b.slot.ticket_all().expect("ticket");
    // Tickets travel as text, as they would between processes.
    let to_b = hamlyn::seed::ticket_from_text(&hamlyn::seed::ticket_to_text(&to_b).unwrap())
        .expect("seed round trip");
    const ROUNDS: u64 = 1000;
    let pong = std::thread::spawn({
        let b = b.clone();
        let area = in_b.area.clone();
        move || {
            let mut q = b.queue(0).expect("queue");
            let mut t = b.terminus(0).expect("terminus");
            for round in 0..ROUNDS {
                let n = q.wait(WAIT).expect("wait").expect("ping arrives");
                assert_eq!(
                    (n.kind, n.word, n.len),
                    (NotificationKind::Message, round, 8)
                );
                assert_eq!(n.src_node, b.id());
                let got = area.read_vec(0, 8).expect("read");
                assert_eq!(got, round.to_le_bytes());
                let reply = (round + 1_000_000).to_le_bytes();
                t.send(&to_a, &SendOptions::new().tag(round), Data::Inline(&reply))
                    .expect("pong");
            }
        }
    });
    let mut q = a.queue(0).expect("queue");
    let mut t = a.terminus(0).expect("terminus");
    let start = Instant::now();
    let mut last = None;
    for round in 0..ROUNDS {
        let h = t
            .send(
                &to_b,
                &SendOptions::new().tag(round),
                Data::Inline(&round.to_le_bytes()),
            )
            .expect("ping");
        let n = q.wait(WAIT).expect("wait").expect("pong arrives");
        assert_eq!((n.kind, n.word), (NotificationKind::Message, round));
        let got = in_a.area.read_vec(0, 8).expect("read");
        assert_eq!(got, (round + 1_000_000).to_le_bytes());
        last = Some(h);
    }
    let elapsed = start.elapsed();
    pong.join().expect("pong thread");
    assert_eq!(last.expect("sent").wait(WAIT), Status::Sent);
    eprintln!(
        "ping-pong: {ROUNDS} round trips, {:.2} µs each",
        elapsed.as_secs_f64() * 1e6 / ROUNDS as f64
    );
}

#[test]
fn one_mebibyte_gather_send_lands_byte_exact_with_its_metadata() {
    let node = Node::embedded().expect("embedded engine");
    const MIB: u64 = 1 << 20;
    let rx = inbox(&node, MIB + 4096, 2, 1);
    // Two send areas, three spans: the message is their concatenation.
    let s1 = node.area(MIB / 2).expect("area");
    let s2 = node.area(MIB).expect("area");
    let pattern = |i: u64| (i.wrapping_mul(2_654_435_761) >> 13) as u8;
    let mut expect = Vec::with_capacity(MIB as usize);
    let bytes1: Vec<u8> = (0..MIB / 2).map(pattern).collect();
    let bytes2: Vec<u8> = (0..MIB).map(|i| pattern(i + 7)).collect();
    s1.write(0, &bytes1).expect("fill");
    s2.write(0, &bytes2).expect("fill");
    expect.extend_from_slice(&bytes1[..(MIB / 4) as usize]);
    expect.extend_from_slice(&bytes2[..(MIB / 2) as usize]);
    expect.extend_from_slice(&bytes1[(MIB / 4) as usize..]);
    assert_eq!(expect.len() as u64, MIB);
    let spans = [
        s1.span(0, MIB / 4),
        s2.span(0, MIB / 2),
        s1.span(MIB / 4, MIB / 4),
    ];
    let ticket = rx.slot.ticket(4096..MIB + 4096, 0..2).expect("ticket");
    let mut q = node.queue(1).expect("queue");
    let mut t = node.terminus(0).expect("terminus");
    let opts = SendOptions::new().meta(b"one mebibyte").tag(0x1D).entry(1);
    let h = t.send(&ticket, &opts, Data::Gather(&spans)).expect("send");
    assert!(!t.can_reuse(&s1, 0, 1) || h.is_done());
    let n = q.wait(WAIT).expect("wait").expect("arrival");
    assert_eq!(
        (n.kind, n.word, n.meta_index),
        (NotificationKind::Message, 0x1D, Some(1))
    );
    assert_eq!(h.wait(WAIT), Status::Sent);
    assert!(t.can_reuse(&s1, 0, MIB / 2) && t.can_reuse(&s2, 0, MIB));
    let got = rx.area.read_vec(4096, MIB as usize).expect("read");
    assert!(got == expect, "1 MiB arrived byte-exact");
    assert_eq!(
        rx.area.read_vec(0, 4096).expect("read"),
        vec![0u8; 4096],
        "nothing before"
    );
    assert_eq!(rx.meta.metadata(1).expect("meta"), b"one mebibyte");
    assert_eq!(rx.meta.entry(1).expect("entry").accumulator.get(), 0);
}

#[test]
fn a_bad_key_fails_the_send_and_leaves_the_receiver_untouched() {
    let node = Node::embedded().expect("embedded engine");
    let rx = inbox(&node, 4096, 1, 0);
    let good = rx.slot.ticket_all().expect("ticket");
    let forged = Ticket {
        key: good.key ^ 1,
        ..good
    };
    let mut q = node.queue(0).expect("queue");
    let mut t = node.terminus(0).expect("terminus");
    let send = |t: &mut hamlyn::Terminus, ticket: &Ticket| {
        t.send(
            ticket,
            &SendOptions::new().meta(b"m"),
            Data::Inline(&[0xAA; 100]),
        )
        .expect("queued")
    };
    let h = send(&mut t, &forged);
    assert_eq!(h.wait(WAIT), Status::Failed(RejectReason::BadKey));
    assert_eq!(rx.area.read_vec(0, 4096).expect("read"), vec![0u8; 4096]);
    assert!(rx.meta.metadata(0).expect("meta").is_empty());
    assert_eq!(q.wait(Some(Duration::from_millis(50))).expect("wait"), None);
    // The terminus goes on: the next send with the real key lands.
    let h = send(&mut t, &good);
    assert_eq!(h.wait(WAIT), Status::Sent);
    assert!(q.wait(WAIT).expect("wait").is_some());
    assert_eq!(rx.area.read_vec(0, 100).expect("read"), vec![0xAA; 100]);
}

#[test]
fn revoke_rekey_and_inhibit_are_enforced() {
    let node = Node::embedded().expect("embedded engine");
    let mut rx = inbox(&node, 4096, 1, 0);
    let old = rx.slot.ticket_all().expect("ticket");
    let mut t = node.terminus(0).expect("terminus");
    let mut send = |ticket: &Ticket| {
        t.send(ticket, &SendOptions::new(), Data::Inline(b"x"))
            .expect("queued")
            .wait(WAIT)
    };
    rx.slot.revoke().expect("revoke");
    assert_eq!(send(&old), Status::Failed(RejectReason::Revoked));
    rx.slot.rekey().expect("rekey");
    assert_eq!(send(&old), Status::Failed(RejectReason::BadKey));
    let new = rx.slot.ticket_all().expect("ticket");
    assert_eq!(send(&new), Status::Sent);
    rx.slot.inhibit(true).expect("inhibit");
    assert_eq!(send(&new), Status::Failed(RejectReason::Inhibited));
    rx.slot.inhibit(false).expect("allow");
    assert_eq!(send(&new), Status::Sent);
}

#[test]
fn paranoid_one_shot_entries_take_one_message_within_their_range() {
    let node = Node::embedded().expect("embedded engine");
    let area = node.area(4096).expect("area");
    let meta = node.meta_area(2).expect("meta");
    let slot = node
        .slot(&area)
        .paranoid_one_shot()
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot");
    let ticket = slot.ticket(1024..2048, 1..2).expect("ticket");
    let mut q = node.queue(0).expect("queue");
    let mut t = node.terminus(0).expect("terminus");
    let mut send = |ticket: &Ticket, offset: u64| {
        t.send(
            ticket,
            &SendOptions::new().offset(offset),
            Data::Inline(b"paranoid"),
        )
        .expect("queued")
        .wait(WAIT)
    };
    // A slot-keyed ticket is not good for paranoid entries.
    let slot_keyed = Ticket {
        key: slot.key(),
        ..ticket
    };
    assert_eq!(
        send(&slot_keyed, 0),
        Status::Failed(RejectReason::ParanoidKey)
    );
    // The ticket's range is checked client-side, the entry's range by the engine.
    let wider = Ticket {
        offset: 0,
        len: 4096,
        ..ticket
    };
    assert_eq!(
        send(&wider, 0),
        Status::Failed(RejectReason::ParanoidBounds)
    );
    assert_eq!(send(&ticket, 8), Status::Sent);
    assert_eq!(
        q.wait(WAIT).expect("wait").map(|n| n.meta_index),
        Some(Some(1))
    );
    assert_eq!(area.read_vec(1032, 8).expect("read"), b"paranoid");
    assert!(
        !meta.is_armed(1).expect("state"),
        "the engine disarmed the entry"
    );
    assert_eq!(send(&ticket, 16), Status::Failed(RejectReason::Disarmed));
    meta.arm(1).expect("re-arm");
    assert_eq!(send(&ticket, 16), Status::Sent);
}

#[test]
fn fast_mode_carries_its_word_in_the_notification() {
    let node = Node::embedded().expect("embedded engine");
    let area = node.area(256).expect("area");
    let slot = node
        .slot(&area)
        .fast()
        .perms(SlotPerms::default())
        .queue(2)
        .create()
        .expect("slot");
    let ticket = slot.ticket(0..256, 0..0).expect("ticket");
    let mut q = node.queue(2).expect("queue");
    let mut t = node.terminus(0).expect("terminus");
    let h = t
        .send(
            &ticket,
            &SendOptions::new().tag(0xFA57).offset(8),
            Data::Inline(b"fast"),
        )
        .expect("send");
    let n = q.wait(WAIT).expect("wait").expect("arrival");
    assert_eq!(
        (n.kind, n.word, n.meta_index),
        (NotificationKind::Fast, 0xFA57, None)
    );
    assert_eq!(h.wait(WAIT), Status::Sent);
    assert_eq!(area.read_vec(8, 4).expect("read"), b"fast");
    assert_eq!(
        t.send(&ticket, &SendOptions::new().meta(b"no"), Data::Inline(b"x"))
            .err(),
        Some(SendError::Ticket(hamlyn::SegmentError::FastTooBig))
    );
}

/// Sends `len` bytes of `src` to `ticket` on `t` until the terminus is full (`Full`),
/// keeping the handles; panics if it never fills.
fn fill_until_full(
    t: &mut hamlyn::Terminus,
    ticket: &hamlyn::Ticket,
    src: &hamlyn::Area,
    len: u64,
    handles: &mut Vec<hamlyn::SendHandle>,
) {
    // Each send is 1 MiB, several packets: the engine cannot keep the ring from filling.
    // The entry is named: `MetaIndex::Auto` would refuse a second long message in flight
    // on the ticket's one entry (`SendError::EntriesBusy`) before the ring fills.
    for _ in 0..10_000 {
        let opts = SendOptions::new().notify(false).entry(0);
        match t.send(ticket, &opts, Data::Gather(&[src.span(0, len)])) {
            Ok(h) => handles.push(h),
            Err(SendError::Full) => return,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    panic!("the terminus never filled");
}

/// The engine's packets are 4 KiB here, so that a 1 MiB message is 256 of them: a
/// push that finds the engine asleep runs its own turn and hands back after a few more
/// (`Driver::nudge`), so a message of four 256 KiB packets was sent whole by its own
/// push, the ring never filled, and the fill failed in most runs on a loaded machine.
/// With 256 packets the engine's thread is rung for the rest and serves while the
/// pushes fill the ring, whether waiting threads drive or not.
#[test]
fn a_full_terminus_is_back_pressure_and_every_queued_send_completes() {
    let engine = hamlyn_engine::EngineHandle::start(hamlyn_engine::EngineConfig {
        intra_mtu: 4096,
        ..hamlyn_engine::EngineConfig::embedded()
    })
    .expect("engine");
    let node = Node::connect_with(
        engine.socket_path(),
        NodeOptions {
            termini: 1,
            ..NodeOptions::default()
        },
    )
    .expect("connect");
    const LEN: u64 = 1 << 20;
    let rx = inbox(&node, LEN, 1, 0);
    let src = node.area(LEN).expect("area");
    let ticket = rx.slot.ticket_all().expect("ticket");
    let mut t = node.terminus(0).expect("terminus");
    let mut handles = Vec::new();
    // Waiting for room (this thread runs the engine's turns) gives room for a send while
    // the queue still holds work: not the whole drain `wait_idle` waits for. A thread
    // descheduled between the fill and the wait (a loaded machine) can find the engine's
    // own thread drained it all meanwhile, so the fill and wait are tried a few times:
    // a `wait_room` that waited for the drain would leave at most one request every
    // time.
    let mut left_work = false;
    for _ in 0..20 {
        fill_until_full(&mut t, &ticket, &src, LEN, &mut handles);
        let reading = !t.can_reuse(&src, 0, 1);
        assert!(t.wait_room(WAIT), "room comes back");
        if reading && t.in_flight() > 1 {
            left_work = true;
            break;
        }
        assert!(t.wait_idle(WAIT), "the engine drains the terminus");
    }
    assert!(
        left_work,
        "wait_room waited for the queue to drain, 20 times"
    );
    let opts = SendOptions::new().notify(false).entry(0);
    handles.push(
        t.send(&ticket, &opts, Data::Gather(&[src.span(0, LEN)]))
            .expect("a send after wait_room"),
    );
    assert!(t.wait_idle(WAIT), "the engine drains the terminus");
    for h in &handles {
        assert_eq!(h.status(), Status::Sent);
    }
    assert!(t.can_reuse(&src, 0, LEN));
    // Room again.
    let h = t
        .send(
            &ticket,
            &SendOptions::new(),
            Data::Gather(&[src.span(0, 64)]),
        )
        .expect("room after draining");
    assert_eq!(h.wait(WAIT), Status::Sent);
    assert_eq!(node.stats().expect("stats").node, node.id().0);
}

#[test]
fn a_dropped_node_is_a_clean_exit_not_a_lost_client() {
    let node = Node::embedded().expect("embedded engine");
    let other = Node::connect(node.socket_path()).expect("second client");
    drop(other);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = node.stats().expect("stats");
        if stats.engine.clients_detached == 1 {
            assert_eq!(stats.engine.clients_lost, 0, "{stats:?}");
            assert_eq!(stats.ports.len(), 1, "{stats:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the engine never saw the client go: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Two embedded engines are both node 0; a ticket of one used at the other is refused as
/// naming another incarnation of the node, not as a bad key, and nothing lands.
#[test]
fn a_ticket_of_another_embedded_engine_is_refused_as_foreign() {
    let a = Node::embedded().expect("engine a");
    let b = Node::embedded().expect("engine b");
    assert_eq!(a.id(), b.id(), "both are node 0");
    assert_ne!(
        a.incarnation(),
        b.incarnation(),
        "told apart by incarnation"
    );
    let in_a = inbox(&a, 64, 1, 0);
    let to_a = in_a.slot.ticket_all().expect("ticket");
    let mut t = b.terminus(0).expect("terminus");
    let h = t
        .send(&to_a, &SendOptions::new(), Data::Inline(b"lost?"))
        .expect("queued");
    assert_eq!(h.wait(WAIT), Status::Failed(RejectReason::StaleIncarnation));
    assert_eq!(in_a.area.read_vec(0, 5).expect("read"), vec![0; 5]);
}
