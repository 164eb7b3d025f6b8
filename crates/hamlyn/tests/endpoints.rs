//! Receive endpoints (seed 002, FLIPC) through a real engine: messages land in posted
//! buffers in order, a message that finds none is discarded and counted (and reported to
//! its sender only when the endpoint asks), and bad input — a destroyed endpoint, a message
//! larger than the buffers, forged ids and keys, a receiver scribbling over its own ring —
//! is refused with a typed reason, counted, and writes nothing outside a posted buffer.
//! The flood test runs real sender processes (the harness of `multiprocess.rs`).

#[allow(dead_code)] // the helpers other test files use
mod common;

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use common::{child_env, numbers, Proc, WAIT};
use hamlyn::seed::{ticket_from_text, ticket_to_text};
use hamlyn::{
    Data, Endpoint, Node, RejectReason, SendError, SendHandle, SendOptions, Status, Terminus,
    Ticket,
};
use hamlyn_engine::{EngineConfig, EngineHandle};

fn send(t: &mut Terminus, ticket: &Ticket, tag: u64, bytes: &[u8]) -> SendHandle {
    t.send(ticket, &SendOptions::new().tag(tag), Data::Inline(bytes))
        .expect("queued")
}

fn endpoint_stats(node: &Node, ep: &Endpoint) -> hamlyn::stats::SlotStats {
    node.stats()
        .expect("stats")
        .slots
        .into_iter()
        .find(|s| s.slot == ep.id().0)
        .expect("the endpoint's slot in the statistics")
}

#[test]
fn messages_land_in_posted_buffers_in_order_and_the_rest_are_only_counted() {
    let node = Node::embedded().expect("engine");
    let mut ep = node.endpoint(128, 4).create().expect("endpoint");
    let mut t = node.terminus(0).expect("terminus");
    let ticket = ep.ticket();
    // Post buffers 0 and 1 only (in the order 1, 0: the engine follows the posting order).
    let b0 = ep.alloc().expect("buffer");
    let b1 = ep.alloc().expect("buffer");
    let (i0, i1) = (b0.index(), b1.index());
    ep.post(b1).expect("post");
    ep.post(b0).expect("post");
    assert_eq!(ep.posted(), 2);
    let hs: Vec<_> = (0..5u64)
        .map(|i| send(&mut t, &ticket, i, format!("message {i}").as_bytes()))
        .collect();
    for h in &hs {
        // Optimistic discard: the senders are told nothing.
        assert_eq!(h.wait(Some(WAIT)), Status::Sent);
    }
    let first = ep.receive().expect("first message");
    assert_eq!((first.buffer.index(), first.word), (i1, 0));
    assert_eq!(ep.bytes(&first).expect("read"), b"message 0");
    let second = ep.receive().expect("second message");
    assert_eq!((second.buffer.index(), second.word), (i0, 1));
    assert_eq!(ep.bytes(&second).expect("read"), b"message 1");
    assert_eq!(second.src_node, node.id().0);
    assert!(ep.receive().is_none(), "three found no buffer");
    assert_eq!(ep.take_discards(), 3, "and were counted");
    assert_eq!(ep.take_discards(), 0, "read and reset");
    // A reposted buffer takes the next message.
    ep.post(first.buffer).expect("repost");
    let h = send(&mut t, &ticket, 9, b"again");
    assert_eq!(h.wait(Some(WAIT)), Status::Sent);
    let again = ep.receive().expect("arrived");
    assert_eq!((again.buffer.index(), again.len), (i1, 5));
    let s = endpoint_stats(&node, &ep);
    let e = s.endpoint.expect("endpoint statistics");
    assert_eq!(s.mode.name(), "endpoint");
    assert_eq!((e.buf_size, e.buffers, e.report_discards), (128, 4, false));
    assert_eq!((e.delivered, e.discarded, e.posted), (3, 3, 0));
}

#[test]
fn a_reporting_endpoint_fails_the_sender_with_no_buffer() {
    let node = Node::embedded().expect("engine");
    let mut ep = node
        .endpoint(64, 2)
        .report_discards()
        .create()
        .expect("endpoint");
    let mut t = node.terminus(0).expect("terminus");
    let b = ep.alloc().expect("buffer");
    ep.post(b).expect("post");
    let ok = send(&mut t, &ep.ticket(), 1, b"fits");
    let refused = send(&mut t, &ep.ticket(), 2, b"no room");
    assert_eq!(ok.wait(Some(WAIT)), Status::Sent);
    assert_eq!(
        refused.wait(Some(WAIT)),
        Status::Failed(RejectReason::NoBuffer)
    );
    assert_eq!(ep.take_discards(), 1, "reported and counted");
    assert_eq!(ep.receive().map(|r| r.word), Some(1));
}

#[test]
fn one_endpoints_traffic_never_takes_anothers_buffers() {
    let node = Node::embedded().expect("engine");
    let mut busy = node.endpoint(64, 2).create().expect("endpoint");
    let mut calm = node.endpoint(64, 2).create().expect("endpoint");
    busy.post_all().expect("post");
    calm.post_all().expect("post");
    let mut t = node.terminus(0).expect("terminus");
    let flood: Vec<_> = (0..20)
        .map(|i| send(&mut t, &busy.ticket(), i, b"x"))
        .collect();
    for h in &flood {
        assert_eq!(h.wait(Some(WAIT)), Status::Sent);
    }
    let h = send(&mut t, &calm.ticket(), 99, b"important");
    assert_eq!(h.wait(Some(WAIT)), Status::Sent);
    assert_eq!(calm.receive().map(|r| r.word), Some(99));
    assert_eq!(calm.take_discards(), 0);
    assert_eq!(busy.take_discards(), 18);
}

/// Everything in the endpoint's area but the buffers named, as a snapshot.
fn outside_buffers(ep: &Endpoint, allowed: &[u32]) -> Vec<u8> {
    let layout =
        hamlyn_wire::endpoint::EndpointLayout::new(ep.buf_size(), ep.buffers()).expect("layout");
    let mut all = ep.area().read_vec(0, layout.len() as usize).expect("read");
    for &b in allowed {
        let off = layout.buffer_offset(b).expect("buffer") as usize;
        all[off..off + ep.buf_size() as usize].fill(0);
    }
    // The ring's words move with every message; what must not change is the buffers.
    all.drain(..layout.buffers_offset() as usize);
    all
}

#[test]
fn bad_input_is_refused_counted_and_writes_nothing_outside_a_posted_buffer() {
    let node = Node::embedded().expect("engine");
    let mut ep = node.endpoint(64, 4).create().expect("endpoint");
    let mut other = node.endpoint(64, 1).create().expect("endpoint");
    other.post_all().expect("post");
    let mut t = node.terminus(0).expect("terminus");
    let good = ep.ticket();
    let b = ep.alloc().expect("buffer");
    let posted_index = b.index();
    ep.post(b).expect("post");
    // Mark every unposted buffer, to see that nothing lands there.
    for _ in 0..3 {
        let b = ep.alloc().expect("buffer");
        ep.write(&b, &[0xEE; 64]).expect("mark");
        ep.free(b);
    }
    let before = outside_buffers(&ep, &[posted_index]);

    // Larger than a buffer: the library refuses it from the ticket alone...
    let too_big = t.send(&good, &SendOptions::new(), Data::Inline(&[1; 65]));
    assert!(matches!(too_big, Err(SendError::Ticket(_))), "{too_big:?}");
    // ...and the engine from the packet, for a forged ticket that claims more room.
    let forged_len = Ticket { len: 128, ..good };
    let h = send(&mut t, &forged_len, 1, &[2; 100]);
    assert_eq!(h.wait(Some(WAIT)), Status::Failed(RejectReason::TooLarge));
    let at_offset = t
        .send(
            &forged_len,
            &SendOptions::new().offset(32),
            Data::Inline(&[3; 40]),
        )
        .expect("queued");
    assert_eq!(
        at_offset.wait(Some(WAIT)),
        Status::Failed(RejectReason::TooLarge)
    );
    // Forged endpoint ids and keys.
    let wrong_key = Ticket {
        key: good.key ^ 1,
        ..good
    };
    let h = send(&mut t, &wrong_key, 1, b"k");
    assert_eq!(h.wait(Some(WAIT)), Status::Failed(RejectReason::BadKey));
    let wrong_slot = Ticket {
        slot: hamlyn::SlotId(good.slot.0 + 1000),
        ..good
    };
    let h = send(&mut t, &wrong_slot, 1, b"s");
    assert_eq!(
        h.wait(Some(WAIT)),
        Status::Failed(RejectReason::UnknownSlot)
    );
    // The receiver scribbles over its own ring: more posted than the ring holds.
    ep.area()
        .write(0, &u64::MAX.to_le_bytes())
        .expect("scribble");
    let h = send(&mut t, &good, 1, b"into a broken ring");
    assert_eq!(
        h.wait(Some(WAIT)),
        Status::Failed(RejectReason::RingCorrupt)
    );
    ep.area().write(0, &1u64.to_le_bytes()).expect("repair");
    // A buffer number past the last at the next position.
    ep.area()
        .write(256, &u64::from(u32::MAX).to_le_bytes())
        .expect("scribble the entry");
    let h = send(&mut t, &good, 1, b"into a bad buffer");
    assert_eq!(
        h.wait(Some(WAIT)),
        Status::Failed(RejectReason::RingCorrupt)
    );
    ep.area()
        .write(256, &u64::from(posted_index).to_le_bytes())
        .expect("repair");
    // The repaired endpoint still works, and the other endpoint never noticed.
    let h = send(&mut t, &good, 7, b"fine");
    assert_eq!(h.wait(Some(WAIT)), Status::Sent);
    let got = ep.receive().expect("delivered");
    assert_eq!((got.buffer.index(), got.word), (posted_index, 7));
    let h = send(&mut t, &other.ticket(), 8, b"other");
    assert_eq!(h.wait(Some(WAIT)), Status::Sent);
    assert_eq!(other.receive().map(|r| r.word), Some(8));
    assert_eq!(
        outside_buffers(&ep, &[posted_index]),
        before,
        "nothing written outside the posted buffer"
    );
    let s = endpoint_stats(&node, &ep);
    let count = |name: &str| s.rejects.get(name).copied().unwrap_or(0);
    assert_eq!(count("too_large"), 2);
    assert_eq!(count("bad_key"), 1);
    assert_eq!(count("ring_corrupt"), 2);
    assert_eq!(s.endpoint.expect("endpoint").corrupt, 2);
    // A destroyed endpoint: its tickets are refused.
    let ticket = other.ticket();
    drop(other);
    let h = send(&mut t, &ticket, 1, b"gone");
    assert_eq!(
        h.wait(Some(WAIT)),
        Status::Failed(RejectReason::UnknownSlot)
    );
}

// ---------------------------------------------------------------------------------------
// The flood: N sender processes, a receiver that posts slowly.

const SENDERS: usize = 3;
const PER_SENDER: u64 = 400;

/// Sends `PER_SENDER` tagged messages to the endpoint as fast as its terminus takes them
/// and reports how many were sent and how many the engine refused as `NoBuffer`.
#[test]
fn child_flood_sender() {
    let Some(mut env) = child_env("child_flood_sender") else {
        return;
    };
    let node = Node::connect(&env.socket).expect("connect");
    let ticket = ticket_from_text(&env.hear("ticket")).expect("seed");
    let me: u64 = env.hear("id").parse().expect("id");
    let mut t = node.terminus(0).expect("terminus");
    let mut inflight = VecDeque::new();
    let (mut sent, mut discarded) = (0u64, 0u64);
    let mut settle = |h: SendHandle| match h.wait(Some(WAIT)) {
        Status::Sent => sent += 1,
        Status::Failed(RejectReason::NoBuffer) => discarded += 1,
        other => panic!("unexpected status {other:?}"),
    };
    for seq in 0..PER_SENDER {
        let tag = (me << 32) | seq;
        let body = tag.to_le_bytes();
        loop {
            match t.send(&ticket, &SendOptions::new().tag(tag), Data::Inline(&body)) {
                Ok(h) => {
                    inflight.push_back(h);
                    break;
                }
                Err(SendError::Full) => settle(inflight.pop_front().expect("in flight")),
                Err(e) => panic!("{e}"),
            }
        }
    }
    while let Some(h) = inflight.pop_front() {
        settle(h);
    }
    env.say("done", format!("{sent} {discarded}"));
}

#[test]
fn flooding_senders_each_see_delivered_plus_discarded_equal_sent() {
    let engine = EngineHandle::start(EngineConfig::embedded()).expect("engine");
    let node = Node::connect(engine.socket_path()).expect("connect");
    let mut ep = node
        .endpoint(64, 8)
        .report_discards()
        .create()
        .expect("endpoint");
    let seed = ticket_to_text(&ep.ticket()).expect("seed");
    let waiters: Vec<_> = (0..SENDERS)
        .map(|i| {
            let mut p = Proc::spawn("child_flood_sender", engine.socket_path());
            p.tell("ticket", &seed);
            p.tell("id", i);
            std::thread::spawn(move || {
                let [sent, discarded] = numbers::<2>(&p.expect("done", WAIT * 4));
                p.finish();
                (sent, discarded)
            })
        })
        .collect();
    // Post slowly: two buffers at a time, and only after taking what arrived.
    let mut held = Vec::new();
    let mut delivered: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut take = |ep: &mut Endpoint, held: &mut Vec<hamlyn::Buffer>| {
        while let Some(r) = ep.receive() {
            let mut body = [0u8; 8];
            ep.read(&r.buffer, &mut body).expect("read");
            assert_eq!(
                u64::from_le_bytes(body),
                r.word,
                "the buffer holds its message"
            );
            delivered
                .entry(r.word >> 32)
                .or_default()
                .push(r.word & 0xFFFF_FFFF);
            held.push(r.buffer);
        }
    };
    ep.post_all().expect("post");
    while !waiters.iter().all(|w| w.is_finished()) {
        take(&mut ep, &mut held);
        for b in held.drain(..held.len().min(2)) {
            ep.post(b).expect("repost");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    take(&mut ep, &mut held);
    let reports: Vec<_> = waiters
        .into_iter()
        .map(|w| w.join().expect("sender"))
        .collect();
    let mut total_discarded = 0;
    for (i, &(sent, discarded)) in reports.iter().enumerate() {
        let got = delivered.get(&(i as u64)).map_or(&[][..], Vec::as_slice);
        assert_eq!(
            sent + discarded,
            PER_SENDER,
            "sender {i} settled every send"
        );
        assert_eq!(
            got.len() as u64 + discarded,
            PER_SENDER,
            "sender {i}: delivered + discarded = sent"
        );
        assert_eq!(
            got.len() as u64,
            sent,
            "sender {i}: every Sent was delivered"
        );
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "sender {i}: delivered in order, none twice"
        );
        total_discarded += discarded;
    }
    assert!(
        total_discarded > 0,
        "the slow receiver made the engine discard"
    );
    assert_eq!(
        ep.take_discards(),
        total_discarded,
        "the endpoint's counter agrees with the senders"
    );
}

#[test]
fn a_direct_sender_claims_buffers_with_the_engines_code_beside_mediated_sends() {
    let engine = EngineHandle::start(EngineConfig::embedded()).expect("engine");
    let rx = Node::connect(engine.socket_path()).expect("receiver");
    let tx = Node::connect(engine.socket_path()).expect("sender");
    let mut ep = rx
        .endpoint(64, 3)
        .queue(0)
        .danger_direct()
        .create()
        .expect("endpoint");
    let mut q = rx.queue(0).expect("queue");
    ep.post_all().expect("post");
    let direct = tx.open_direct(&ep.ticket()).expect("mapped");
    let mut t = tx.terminus(0).expect("terminus");
    direct
        .send(&SendOptions::new().tag(1), Data::Inline(b"direct one"))
        .expect("deposited");
    let h = send(&mut t, &ep.ticket(), 2, b"mediated");
    assert_eq!(h.wait(Some(WAIT)), Status::Sent);
    direct
        .send(&SendOptions::new().tag(3), Data::Inline(b"direct two"))
        .expect("deposited");
    assert_eq!(
        direct.send(&SendOptions::new().tag(4), Data::Inline(b"no room")),
        Err(SendError::Rejected(RejectReason::NoBuffer)),
        "a direct sender learns of its discard at once"
    );
    assert_eq!(
        direct.send(&SendOptions::new(), Data::Inline(&[0; 65])),
        Err(SendError::Ticket(hamlyn::SegmentError::OutsideTicket {
            offset: 0,
            end: 65
        })),
        "larger than a buffer"
    );
    let mut seen = Vec::new();
    while let Some(r) = ep.receive() {
        // The notification names the same buffer.
        let n = q.wait(Some(WAIT)).expect("wait").expect("notified");
        assert_eq!((n.word, n.meta_index), (r.word, Some(r.buffer.index())));
        seen.push((r.word, ep.bytes(&r).expect("read"), r.buffer.index()));
    }
    let words: Vec<_> = seen.iter().map(|s| s.0).collect();
    assert_eq!(words, [1, 2, 3], "in the order they were deposited");
    assert_eq!(seen[0].1, b"direct one");
    assert_eq!(seen[1].1, b"mediated");
    let mut bufs: Vec<_> = seen.iter().map(|s| s.2).collect();
    bufs.sort_unstable();
    assert_eq!(bufs, [0, 1, 2], "each in a buffer of its own");
    assert_eq!(ep.take_discards(), 1);
}
