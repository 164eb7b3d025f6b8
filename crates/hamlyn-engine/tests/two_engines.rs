//! Two engines joined by an in-process channel fabric: the engine's remote logic (send
//! from the terminus through the fabric, admit/commit on arrival, NACKs back to the
//! sending terminus, peer-down containment). The real network is the TCP fabric's job;
//! this double only moves whole packets between two threads.
#![allow(clippy::unwrap_used)]

mod common;

use hamlyn_testkit::channel::{link, ChannelFabric};

use std::time::{Duration, Instant as StdInstant};

use common::{inline, receiver_slot as make_slot, RawClient};
use hamlyn_core::RejectReason;
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_wire::control::{mode, perm, Reply, Request};
use hamlyn_wire::request::{Gather, Payload};
use hamlyn_wire::{NodeId, NotifKind};

fn engine(node: u32, fabric: ChannelFabric) -> EngineHandle {
    let mut cfg = EngineConfig::embedded();
    cfg.node = node;
    cfg.incarnation = 7;
    EngineHandle::start_with_fabric(cfg, Some(Box::new(fabric))).unwrap()
}

#[test]
fn writes_cross_engines_and_refusals_come_back_to_the_sending_terminus() {
    let (fa, fb, _cut) = link(NodeId(1), NodeId(2));
    let (ea, eb) = (engine(1, fa), engine(2, fb));
    let mut a = RawClient::attach(ea.socket_path(), 1, 1, 256);
    let mut b = RawClient::attach(eb.socket_path(), 1, 1, 256);
    let (slot, key, region) = make_slot(&b, 1 << 20, 4);
    a.open(0, 0);

    // A small inline write.
    let p = a
        .push(0, inline(2, slot, key, 1, 100, b"across engines", 42))
        .unwrap();
    let n = b.wait_notif(0).unwrap();
    assert_eq!(
        (n.kind(), n.word.get(), n.src_node.get()),
        (Some(NotifKind::Message), 42, 1)
    );
    let mut got = [0u8; 14];
    region.read(100, &mut got).unwrap();
    assert_eq!(&got, b"across engines");
    a.wait_finished(0, p + 1);

    // A 600 KiB gather write: several 64 KiB packets through the fabric, one notification.
    let (src_area, src) = a.area(600 * 1024);
    let pattern: Vec<u8> = (0..600 * 1024u32).map(|i| (i * 7 % 251) as u8).collect();
    src.write(0, &pattern).unwrap();
    let mut req = inline(2, slot, key, 2, 4096, b"", 43);
    let mut list = [Gather::default(); 5];
    list[0] = Gather {
        area: src_area,
        offset: 0,
        len: pattern.len() as u64,
    };
    req.payload = Payload::Gather { list, count: 1 };
    let p = a.push(0, req).unwrap();
    let n = b.wait_notif(0).unwrap();
    assert_eq!(n.word.get(), 43);
    let mut got = vec![0u8; pattern.len()];
    region.read(4096, &mut got).unwrap();
    assert!(got == pattern, "600 KiB byte-exact across the fabric");
    a.wait_finished(0, p + 1);
    assert!(a.errors().is_empty());

    // A forged key: "sent" locally, then the remote NACK fails it on the same terminus.
    let p = a
        .push(0, inline(2, slot, key ^ 0xFF, 1, 0, b"forged", 44))
        .unwrap();
    a.wait_finished(0, p + 1);
    let deadline = StdInstant::now() + Duration::from_secs(10);
    let errs = loop {
        let e = a.errors();
        if !e.is_empty() {
            break e;
        }
        assert!(StdInstant::now() < deadline, "no NACK came back");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(
        (
            errs[0].seq as u64,
            RejectReason::from_code(u64::from(errs[0].status))
        ),
        (p, Some(RejectReason::BadKey))
    );

    // A ticket for another incarnation of node 2 is refused before anything is sent.
    let mut stale = inline(2, slot, key, 1, 0, b"stale", 45);
    stale.incarnation = 6;
    let p = a.push(0, stale).unwrap();
    a.wait_finished(0, p + 1);
    let errs = a.errors();
    assert_eq!(
        RejectReason::from_code(u64::from(errs[0].status)),
        Some(RejectReason::StaleIncarnation)
    );
    let stats = b.stats();
    assert_eq!(
        stats.interface.rejects.get("bad_key"),
        Some(&1),
        "{stats:?}"
    );
}

#[test]
fn a_lost_peer_fails_what_depends_on_it_and_tells_receivers_with_partial_messages() {
    let (fa, fb, cut) = link(NodeId(1), NodeId(2));
    let (ea, eb) = (engine(1, fa), engine(2, fb));
    let mut a = RawClient::attach(ea.socket_path(), 1, 1, 256);
    let mut b = RawClient::attach(eb.socket_path(), 1, 1, 256);
    let (slot, key, _) = make_slot(&b, 1 << 20, 4);
    let (bslot, bkey, _) = make_slot(&a, 4096, 4);
    a.open(0, 0);
    b.open(0, 0);
    // A group of two members: member one's packet arrives at B, member two never sends.
    // B holds a partial message from node 1.
    let mut first = inline(2, slot, key, 3, 0, b"half", 46);
    first.y = 1 << 31; // a group member's share: the accumulator stays non-zero
    let p = a.push(0, first).unwrap();
    a.wait_finished(0, p + 1);
    let deadline = StdInstant::now() + Duration::from_secs(10);
    loop {
        let stats = b.stats();
        if stats.engine.remote_packets == 1 {
            break;
        }
        assert!(StdInstant::now() < deadline, "{stats:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        b.queues[0].poll().is_none(),
        "half a group is not a message"
    );
    // The link breaks.
    *cut.lock().unwrap() = true;
    let n = b.wait_notif(0).expect("peer-down notification");
    assert_eq!(
        (n.kind(), n.slot.get(), n.meta_index.get(), n.src_node.get()),
        (Some(NotifKind::PeerDown), slot, 3, 1)
    );
    // New sends to the lost peer fail with PeerDown, on both sides.
    let p = a.push(0, inline(2, slot, key, 0, 0, b"gone?", 47)).unwrap();
    a.wait_finished(0, p + 1);
    assert_eq!(
        RejectReason::from_code(u64::from(a.errors()[0].status)),
        Some(RejectReason::PeerDown)
    );
    let p = b
        .push(0, inline(1, bslot, bkey, 0, 0, b"gone?", 48))
        .unwrap();
    b.wait_finished(0, p + 1);
    assert_eq!(
        RejectReason::from_code(u64::from(b.errors()[0].status)),
        Some(RejectReason::PeerDown)
    );
    // Local traffic on each node is undisturbed.
    let p = b.push(0, inline(2, slot, key, 0, 8, b"local", 49)).unwrap();
    b.wait_finished(0, p + 1);
    assert!(b.errors().is_empty());
    assert_eq!(b.wait_notif(0).unwrap().word.get(), 49);
}

#[test]
fn the_name_registry_answers_from_any_node() {
    let (fa, fb, _cut) = link(NodeId(1), NodeId(2));
    let start = |node, f| {
        let mut cfg = EngineConfig::embedded();
        cfg.node = node;
        cfg.incarnation = 7;
        cfg.registry = Some(1);
        EngineHandle::start_with_fabric(cfg, Some(Box::new(f))).unwrap()
    };
    let (ea, eb) = (start(1, fa), start(2, fb));
    let a = RawClient::attach(ea.socket_path(), 1, 1, 64);
    let b = RawClient::attach(eb.socket_path(), 1, 1, 64);
    let (slot, key, _) = make_slot(&b, 4096, 1);
    let ticket = hamlyn_wire::Ticket {
        node: NodeId(2),
        incarnation: 7,
        slot: hamlyn_wire::SlotId(slot),
        key,
        meta_first: 0,
        meta_count: 1,
        offset: 0,
        len: 4096,
        share: hamlyn_wire::FULL_SHARE,
        flags: hamlyn_wire::TicketFlags::WRITE,
    };
    let seed = hamlyn_wire::Seed::single(ticket).to_text().unwrap();
    // Published on node 2: forwarded to the registry on node 1.
    assert_eq!(
        b.call(Request::Publish {
            name: "inbox".into(),
            seed: seed.clone()
        }),
        Reply::Ok
    );
    // Looked up on node 1 (local) and node 2 (forwarded).
    assert_eq!(
        a.call(Request::Lookup {
            name: "inbox".into()
        }),
        Reply::Seed { seed: seed.clone() }
    );
    assert_eq!(
        b.call(Request::Lookup {
            name: "inbox".into()
        }),
        Reply::Seed { seed }
    );
    // Unknown names and things that are not seeds are refused with a clear error.
    let Reply::Error { code, message } = b.call(Request::Lookup {
        name: "nope".into(),
    }) else {
        panic!()
    };
    assert_eq!(
        code,
        hamlyn_wire::control::ControlErrorCode::NotFound as u16,
        "{message}"
    );
    let Reply::Error { code, .. } = a.call(Request::Publish {
        name: "x".into(),
        seed: "hmseed1-zz".into(),
    }) else {
        panic!()
    };
    assert_eq!(
        code,
        hamlyn_wire::control::ControlErrorCode::InvalidArgument as u16
    );
    // A ping is a round trip through both engines; an unknown node is an error.
    assert_eq!(b.call(Request::Ping { node: 1 }), Reply::Ok);
    assert_eq!(
        a.call(Request::Ping { node: 1 }),
        Reply::Ok,
        "pinging yourself"
    );
    assert!(matches!(
        a.call(Request::Ping { node: 9 }),
        Reply::Error { .. }
    ));
    let stats = a.stats();
    assert_eq!(
        (stats.registry.home, stats.registry.names),
        (1, 1),
        "{stats:?}"
    );
    assert_eq!(
        stats
            .peers
            .iter()
            .map(|p| (p.node, p.up, p.incarnation))
            .collect::<Vec<_>>(),
        [(2, true, 7)],
        "{stats:?}"
    );
}

/// Issue 17: a client that stops reading its error ring while the other engine refuses
/// thousands of its writes. The error completions for it are kept (never dropped) within
/// a bound: past it, its own termini are held, so it cannot cause more; another client of
/// the same engine keeps exchanging messages meanwhile; when the stopped client reads its
/// ring again, every refusal is there, each exactly once.
#[test]
fn a_client_that_leaves_its_error_ring_full_holds_only_itself() {
    let (fa, fb, _cut) = link(NodeId(1), NodeId(2));
    let (ea, eb) = (engine(1, fa), engine(2, fb));
    let mut stopped = RawClient::attach(ea.socket_path(), 1, 1, 256);
    let mut good = RawClient::attach(ea.socket_path(), 1, 1, 256);
    let mut b = RawClient::attach(eb.socket_path(), 1, 1, 256);
    let (slot, key, _region) = make_slot(&b, 4096, 4);
    stopped.open(0, 0);
    good.open(0, 0);

    // More refused writes than the error ring (1,024) and the hold bound (1,024) together.
    const BAD: u64 = 3000;
    let mut pushed = 0u64;
    let mut rounds = 0u64;
    let deadline = StdInstant::now() + Duration::from_secs(60);
    while pushed < BAD {
        assert!(StdInstant::now() < deadline, "pushed only {pushed}");
        // Push what fits, at most 64 a round, so that the good client's round trip
        // below paces them: all 3,000 pushed at once, while engine b lags, could be
        // taken in before their refusals come back, and with nothing left on the
        // terminus nothing visits it to hold it. A held terminus fills up and refuses
        // (back-pressure).
        let mut this_round = 0;
        while pushed < BAD
            && this_round < 64
            && stopped
                .push(0, inline(2, slot, key ^ 1, 0, 0, b"forged?", pushed))
                .is_ok()
        {
            pushed += 1;
            this_round += 1;
        }
        // Meanwhile the other client's messages keep arriving.
        let msg = rounds.to_le_bytes();
        good.push(0, inline(2, slot, key, 1, 8, &msg, rounds))
            .unwrap();
        let n = b.wait_notif(0).expect("the good client's message arrives");
        assert_eq!(n.word.get(), rounds);
        rounds += 1;
        let s = stopped.stats();
        if s.engine.termini_held > 0 && pushed < BAD {
            // Held: it can cause no more until it reads its ring.
            break;
        }
    }
    let held = stopped.stats();
    assert!(held.engine.termini_held > 0, "{:?}", held.engine);
    assert_eq!(held.engine.errors_dropped, 0);
    // Now it reads its ring: every refusal comes back exactly once, in order, and the
    // rest of its writes go out and are refused in turn.
    let mut seqs = Vec::new();
    let deadline = StdInstant::now() + Duration::from_secs(60);
    while (seqs.len() as u64) < pushed {
        assert!(
            StdInstant::now() < deadline,
            "{} of {pushed} refusals",
            seqs.len()
        );
        for c in stopped.errors() {
            assert_eq!(c.status, u16::from(RejectReason::BadKey.code()));
            seqs.push(c.seq);
        }
        while pushed < BAD
            && stopped
                .push(0, inline(2, slot, key ^ 1, 0, 0, b"forged?", pushed))
                .is_ok()
        {
            pushed += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(pushed, BAD);
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len() as u64, BAD, "each refusal exactly once");
    assert!(good.errors().is_empty());
}

/// Issue 17: forwarded registry requests are bounded per client. The registry node's
/// engine never answers (its end of the link is there, nobody polls it): a client that
/// pipelines lookups has 16 forwarded and the rest refused as `Busy` at once; when the
/// node is lost, the 16 waiting get an error each.
#[test]
fn a_client_cannot_pile_up_forwarded_registry_requests() {
    use hamlyn_wire::control::ControlErrorCode;
    use std::os::fd::AsFd;
    let (fa, _silent_b, cut) = link(NodeId(1), NodeId(2));
    let mut cfg = EngineConfig::embedded();
    cfg.node = 1;
    cfg.incarnation = 7;
    cfg.registry = Some(2);
    let ea = EngineHandle::start_with_fabric(cfg, Some(Box::new(fa))).unwrap();
    let a = RawClient::attach(ea.socket_path(), 1, 1, 64);
    const ASKED: usize = 20;
    for i in 0..ASKED {
        let req = Request::Lookup {
            name: format!("name-{i}"),
        };
        hamlyn_shm::fdpass::send_with_fds(a.sock.as_fd(), &req.encode(), &[]).unwrap();
    }
    let mut buf = vec![0u8; hamlyn_wire::control::MAX_CONTROL_MSG];
    let mut next_reply = || {
        let r = hamlyn_shm::fdpass::recv_with_fds(a.sock.as_fd(), &mut buf).unwrap();
        Reply::decode(&buf[..r.len]).unwrap()
    };
    for _ in 0..ASKED - 16 {
        let r = next_reply();
        assert!(
            matches!(r, Reply::Error { code, .. } if code == ControlErrorCode::Busy as u16),
            "{r:?}"
        );
    }
    *cut.lock().unwrap() = true;
    for _ in 0..16 {
        let r = next_reply();
        assert!(
            matches!(r, Reply::Error { code, .. } if code == ControlErrorCode::Unreachable as u16),
            "{r:?}"
        );
    }
    drop(a);
    ea.stop().unwrap();
}

/// Issue 16: a registry name belongs to the client that published it. Nobody else may
/// overwrite or remove it (`NotOwner`, naming the owner); it leaves with its publisher
/// (a local or a remote client that disconnects, a node that is lost); an unreachable
/// node is `Unreachable`, naming it.
#[test]
fn registry_names_are_owned_and_leave_with_their_publisher() {
    use hamlyn_wire::control::ControlErrorCode;
    let (fa, fb, cut) = link(NodeId(1), NodeId(2));
    let start = |node, f| {
        let mut cfg = EngineConfig::embedded();
        cfg.node = node;
        cfg.incarnation = 7;
        cfg.registry = Some(1);
        EngineHandle::start_with_fabric(cfg, Some(Box::new(f))).unwrap()
    };
    let (ea, eb) = (start(1, fa), start(2, fb));
    let a = RawClient::attach(ea.socket_path(), 1, 1, 64);
    let a2 = RawClient::attach(ea.socket_path(), 1, 1, 64);
    let b = RawClient::attach(eb.socket_path(), 1, 1, 64);
    let (slot, key, _) = make_slot(&b, 4096, 1);
    let seed = |len| {
        hamlyn_wire::Seed::single(hamlyn_wire::Ticket {
            node: NodeId(2),
            incarnation: 7,
            slot: hamlyn_wire::SlotId(slot),
            key,
            meta_first: 0,
            meta_count: 1,
            offset: 0,
            len,
            share: hamlyn_wire::FULL_SHARE,
            flags: hamlyn_wire::TicketFlags::WRITE,
        })
        .to_text()
        .unwrap()
    };
    let publish = |c: &RawClient, name: &str, len| {
        c.call(Request::Publish {
            name: name.into(),
            seed: seed(len),
        })
    };
    let code = |r: Reply| match r {
        Reply::Error { code, message } => (ControlErrorCode::from_u16(code), message),
        other => panic!("{other:?}"),
    };
    let lookup = |c: &RawClient, name: &str| c.call(Request::Lookup { name: name.into() });
    let unpublish = |c: &RawClient, name: &str| c.call(Request::Unpublish { name: name.into() });

    // Published from node 2 (forwarded): node 1's clients can neither overwrite nor
    // remove it, and the error names the owner.
    assert_eq!(publish(&b, "svc", 64), Reply::Ok);
    let (c, msg) = code(publish(&a, "svc", 128));
    assert_eq!(c, Some(ControlErrorCode::NotOwner), "{msg}");
    assert!(msg.contains("node 2"), "{msg}");
    assert_eq!(
        code(unpublish(&a, "svc")).0,
        Some(ControlErrorCode::NotOwner)
    );
    assert_eq!(lookup(&a, "svc"), Reply::Seed { seed: seed(64) });
    // The owner may replace and remove it.
    assert_eq!(publish(&b, "svc", 128), Reply::Ok);
    assert_eq!(lookup(&a, "svc"), Reply::Seed { seed: seed(128) });
    assert_eq!(unpublish(&b, "svc"), Reply::Ok);
    assert_eq!(code(lookup(&b, "svc")).0, Some(ControlErrorCode::NotFound));
    assert_eq!(
        code(unpublish(&b, "svc")).0,
        Some(ControlErrorCode::NotFound)
    );

    // Two clients of the registry node: one's name is not the other's.
    assert_eq!(publish(&a2, "local", 64), Reply::Ok);
    assert_eq!(
        code(publish(&a, "local", 32)).0,
        Some(ControlErrorCode::NotOwner)
    );

    // Names leave with their publishers: a local client, then a remote one.
    let names = |c: &RawClient| c.stats().registry.names;
    assert_eq!(publish(&b, "remote", 64), Reply::Ok);
    assert_eq!(names(&a), 2);
    drop(a2);
    let deadline = StdInstant::now() + Duration::from_secs(30);
    while !matches!(
        lookup(&a, "local"),
        Reply::Error { code, .. } if code == ControlErrorCode::NotFound as u16
    ) {
        assert!(
            StdInstant::now() < deadline,
            "the local publisher's name stayed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(b);
    let deadline = StdInstant::now() + Duration::from_secs(30);
    while names(&a) > 0 {
        assert!(
            StdInstant::now() < deadline,
            "the remote publisher's name stayed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        code(lookup(&a, "remote")).0,
        Some(ControlErrorCode::NotFound)
    );

    // A node that is lost takes its clients' names with it.
    let b = RawClient::attach(eb.socket_path(), 1, 1, 64);
    assert_eq!(publish(&b, "lost", 64), Reply::Ok);
    assert_eq!(names(&a), 1);
    *cut.lock().unwrap() = true;
    let deadline = StdInstant::now() + Duration::from_secs(30);
    while names(&a) > 0 {
        assert!(StdInstant::now() < deadline, "a lost node's names stayed");
        std::thread::sleep(Duration::from_millis(5));
    }
    // From node 2, the registry node is now unreachable, and the error says which.
    let deadline = StdInstant::now() + Duration::from_secs(30);
    let (c, msg) = loop {
        match lookup(&b, "x") {
            Reply::Error { code, message } if code == ControlErrorCode::Unreachable as u16 => {
                break (code, message)
            }
            _ => {}
        }
        assert!(StdInstant::now() < deadline, "never unreachable");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(c, ControlErrorCode::Unreachable as u16);
    assert!(msg.contains("registry node 1"), "{msg}");
    let (c, msg) = code(a.call(Request::Ping { node: 9 }));
    assert_eq!(c, Some(ControlErrorCode::Unreachable), "{msg}");
    assert!(msg.contains("node 9"), "{msg}");
}

/// Pushes `make(i)` for the next `i` up to `total` while terminus 0 of `c` takes them.
fn push_what_fits(
    c: &mut RawClient,
    pushed: &mut u64,
    total: u64,
    make: impl Fn(u64) -> hamlyn_wire::request::SendRequest,
) {
    while *pushed < total && c.push(0, make(*pushed)).is_ok() {
        *pushed += 1;
    }
}

/// One message between a pair of clients of node 2 (entry 1 of `slot`), checked.
fn local_round(tx: &mut RawClient, rx: &mut RawClient, slot: u32, key: u64, rounds: &mut u64) {
    let r = *rounds;
    tx.push(0, inline(2, slot, key, 1, 8, &r.to_le_bytes(), r))
        .unwrap();
    assert_eq!(
        rx.wait_notif(0)
            .expect("node 2's own message arrives")
            .word
            .get(),
        r
    );
    *rounds += 1;
}

/// Issue 17, the NACK queue flooded: node 2's path back to node 1 is congested (its
/// sends are `Full`) while a client of node 1 floods node 2 with writes node 2 refuses.
/// The NACKs node 2 owes wait in a bounded queue; past the bound it stops taking packets
/// from the fabric (`fabric_polls_held`) instead of growing, while a pair of its own
/// clients keeps exchanging messages. When the path clears, every refusal reaches the
/// flooding client, each once.
#[test]
fn a_nack_flood_into_a_congested_path_is_held_not_grown() {
    let (fa, fb, _cut, valve) = hamlyn_testkit::channel::link_with_valve(NodeId(1), NodeId(2));
    let (ea, eb) = (engine(1, fa), engine(2, fb));
    let mut bad = RawClient::attach(ea.socket_path(), 1, 1, 256);
    let mut rx = RawClient::attach(eb.socket_path(), 1, 1, 256);
    let mut tx = RawClient::attach(eb.socket_path(), 1, 1, 256);
    let (slot, key, _) = make_slot(&rx, 4096, 4);
    bad.open(0, 0);
    tx.open(0, 0);
    *valve.lock().unwrap() = true;
    const BAD: u64 = 6000; // past the 4,096 NACKs node 2 may hold
    let mut pushed = 0u64;
    let mut rounds = 0u64;
    let deadline = StdInstant::now() + Duration::from_secs(60);
    let refused = |i: u64| inline(2, slot, key ^ 1, 0, 0, b"refused", i);
    loop {
        push_what_fits(&mut bad, &mut pushed, BAD, refused);
        // Node 2's own pair goes on meanwhile.
        local_round(&mut tx, &mut rx, slot, key, &mut rounds);
        if rx.stats().engine.fabric_polls_held > 0 {
            break;
        }
        assert!(StdInstant::now() < deadline, "never held: pushed {pushed}");
    }
    for _ in 0..20 {
        local_round(&mut tx, &mut rx, slot, key, &mut rounds);
    }
    // The path clears: every refusal comes back to the flooding client, once.
    *valve.lock().unwrap() = false;
    let mut seqs = std::collections::BTreeSet::new();
    let deadline = StdInstant::now() + Duration::from_secs(60);
    while (seqs.len() as u64) < BAD {
        push_what_fits(&mut bad, &mut pushed, BAD, refused);
        for e in bad.errors() {
            assert_eq!(
                RejectReason::from_code(u64::from(e.status)),
                Some(RejectReason::BadKey)
            );
            assert!(seqs.insert(e.seq), "refusal {} twice", e.seq);
        }
        assert!(
            StdInstant::now() < deadline,
            "{} of {BAD} refusals came back",
            seqs.len()
        );
        std::thread::yield_now();
    }
    let s = rx.stats();
    assert!(s.engine.fabric_polls_held > 0, "{:?}", s.engine);
    assert_eq!(s.engine.nacks_undeliverable, 0, "{:?}", s.engine);
}

/// Issue 17, the answers queue flooded: node 2's path back is congested while a client of
/// node 1 floods it with remote reads. The answers node 2 owes wait in a bounded queue;
/// past it node 2 stops taking packets (`fabric_polls_held`), its own pair goes on, and
/// when the path clears every read is answered, once.
#[test]
fn a_read_flood_into_a_congested_path_is_held_not_grown() {
    use common::{read_req, reply_ticket};
    let (fa, fb, _cut, valve) = hamlyn_testkit::channel::link_with_valve(NodeId(1), NodeId(2));
    let (ea, eb) = (engine(1, fa), engine(2, fb));
    let mut reader = RawClient::attach(ea.socket_path(), 1, 1, 4096);
    let mut rx = RawClient::attach(eb.socket_path(), 1, 1, 256);
    let mut tx = RawClient::attach(eb.socket_path(), 1, 1, 256);
    // The slot read on node 2 (reads allowed), and the reply slot on node 1.
    let (area, _) = rx.area(4096);
    let (meta_area, _) = rx.area(128);
    let Reply::Slot {
        slot: src,
        key: src_key,
    } = rx.call(Request::CreateSlot {
        area,
        base: 0,
        len: 4096,
        mode: mode::NORMAL,
        perms: perm::WRITE | perm::READ,
        meta_area,
        meta_base: 0,
        meta_count: 1,
        queue: 0,
    })
    else {
        panic!("source slot")
    };
    let (slot, key, _) = make_slot(&rx, 4096, 4);
    let (rslot, rkey, _) = make_slot(&reader, 4096, 1);
    let reply = reply_ticket(&reader, rslot, rkey, 4096);
    reader.open(0, 0);
    tx.open(0, 0);
    *valve.lock().unwrap() = true;
    const READS: u64 = 3000; // past the 1,024 answers node 2 may hold
    let mut pushed = 0u64;
    let mut rounds = 0u64;
    let deadline = StdInstant::now() + Duration::from_secs(60);
    let read = |_| read_req(2, src, src_key, 0, 8, reply, 0);
    loop {
        push_what_fits(&mut reader, &mut pushed, READS, read);
        local_round(&mut tx, &mut rx, slot, key, &mut rounds);
        if rx.stats().engine.fabric_polls_held > 0 {
            break;
        }
        assert!(StdInstant::now() < deadline, "never held: pushed {pushed}");
    }
    *valve.lock().unwrap() = false;
    let mut answered = 0u64;
    let deadline = StdInstant::now() + Duration::from_secs(60);
    while answered < READS {
        push_what_fits(&mut reader, &mut pushed, READS, read);
        while let Some(n) = reader.queues[0].poll() {
            assert_eq!(n.kind(), Some(NotifKind::ReadDone), "{n:?}");
            answered += 1;
        }
        assert!(reader.errors().is_empty());
        assert!(
            StdInstant::now() < deadline,
            "{answered} of {READS} reads answered"
        );
        std::thread::yield_now();
    }
    assert!(reader.queues[0].poll().is_none(), "each read answered once");
}

/// Refusals from the other engine (NACKs) that find the sending client's error ring
/// full wait in the engine for room (`Clients::fail`). When the client then reads its
/// ring and pushes nothing more (reading a ring rings no doorbell), the kept ones come
/// out too, each once: the engine, set to sleep up to a minute, looks for room by itself
/// (a kept error bounds its sleep, as its fabric's timers do).
#[test]
fn nacks_kept_for_room_come_out_when_the_ring_is_read_and_nothing_is_pushed() {
    let (fa, fb, _cut) = link(NodeId(1), NodeId(2));
    let sleepy = |node: u32, fabric: ChannelFabric| {
        let mut cfg = EngineConfig::embedded();
        cfg.node = node;
        cfg.incarnation = 7;
        cfg.max_sleep = Duration::from_secs(60);
        EngineHandle::start_with_fabric(cfg, Some(Box::new(fabric))).unwrap()
    };
    let (ea, eb) = (sleepy(1, fa), sleepy(2, fb));
    let mut tx = RawClient::attach(ea.socket_path(), 1, 1, 256);
    let b = RawClient::attach(eb.socket_path(), 1, 1, 256);
    let (slot, key, _region) = make_slot(&b, 4096, 4);
    tx.open(0, 0);
    // More forged writes than the error ring holds (1,024), fewer than hold the terminus.
    const BAD: u64 = 1100;
    let mut pushed = 0u64;
    let deadline = StdInstant::now() + Duration::from_secs(30);
    while pushed < BAD {
        assert!(StdInstant::now() < deadline, "pushed only {pushed}");
        if tx
            .push(0, inline(2, slot, key ^ 1, 0, 0, b"forged?", pushed))
            .is_ok()
        {
            pushed += 1;
        } else {
            std::thread::yield_now();
        }
    }
    // Every refusal is back at the sending engine: the ring's worth posted, the rest kept.
    let deadline = StdInstant::now() + Duration::from_secs(30);
    while tx.stats().engine.nacks_received < BAD {
        assert!(StdInstant::now() < deadline, "{:?}", tx.stats().engine);
        std::thread::sleep(Duration::from_millis(1));
    }
    // Let the engines go idle and to sleep; then read the ring, and only read it.
    std::thread::sleep(Duration::from_millis(300));
    tx.read_errors_until(BAD, u16::from(RejectReason::BadKey.code()));
}
