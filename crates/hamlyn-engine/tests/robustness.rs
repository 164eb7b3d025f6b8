//! What a client can do to the engine, on purpose or by dying: nothing that hurts others.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{inline, receiver_slot, RawClient};
use hamlyn_core::RejectReason;
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_shm::memory::RingMemory;
use hamlyn_wire::control::{Reply, Request};
use hamlyn_wire::request::{Gather, Payload, REQUEST_LEN};
use hamlyn_wire::NotifKind;

/// xorshift, so the scribbling is reproducible.
fn noise(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn a_scribbling_client_cannot_crash_hang_or_corrupt_the_engine_for_others() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let mut rx = RawClient::attach(engine.socket_path(), 1, 1, 4096);
    let mut tx = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let mut bad = RawClient::attach(engine.socket_path(), 2, 2, 64);
    let (slot, key, region) = receiver_slot(&rx, 4096, 4);
    tx.open(0, 0);
    bad.open(0, 0);
    bad.open(1, 0);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    // Garbage entries pushed properly: each must come back as an error completion.
    for _ in 0..20 {
        let mut junk = [0u8; REQUEST_LEN];
        for b in junk.iter_mut() {
            *b = noise(&mut rng) as u8;
        }
        junk[0] = 1 + (noise(&mut rng) % 3) as u8; // sometimes a plausible kind
        bad.termini[0].try_push(&junk).unwrap();
    }
    // Then scribble over the whole port: rings, indices, entries, completion words.
    let len = bad.port.len();
    let mut sent = 0u64;
    for round in 0..200u64 {
        for _ in 0..64 {
            let off = (noise(&mut rng) as usize % (len / 8)) * 8;
            let _ = bad.port.store_bytes(off, &noise(&mut rng).to_le_bytes());
        }
        // Meanwhile a well-behaved client keeps sending.
        let msg = round.to_le_bytes();
        if tx
            .push(
                0,
                inline(
                    tx.node,
                    slot,
                    key,
                    (round % 4) as u32,
                    round * 8 % 4088,
                    &msg,
                    round,
                ),
            )
            .is_ok()
        {
            sent += 1;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    tx.wait_finished(0, sent);
    assert!(
        tx.errors().is_empty(),
        "the good client's sends all succeed"
    );
    let mut got = 0;
    while got < sent {
        let n = rx.wait_notif(0).expect("every good message is notified");
        let round = n.word.get();
        let mut b = [0u8; 8];
        region.read((round * 8 % 4088) as usize, &mut b).unwrap();
        assert_eq!(
            u64::from_le_bytes(b),
            round,
            "rounds write disjoint offsets (200 × 8 < 4088)"
        );
        got += 1;
    }
    // The engine still answers control requests and counted what it saw.
    let stats = bad.stats();
    assert!(
        stats.engine.bad_requests + stats.engine.corrupt_rings > 0,
        "the garbage was seen and refused: {stats:?}"
    );
    drop(bad);
    engine.stop().unwrap();
}

/// Issue 17's hang: a client that makes the wake-up descriptors it was given blocking
/// (with eventfds that changed the engine's shared file description too) and fills them,
/// while a well-behaved pair keeps exchanging messages through sleeps of the engine (so
/// the engine drains its doorbell and pokes event descriptors all along). The good
/// messages all arrive and the engine still answers control requests.
#[test]
fn a_client_cannot_make_the_engine_block_on_its_wake_up_descriptors() {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let mut rx = RawClient::attach(engine.socket_path(), 1, 1, 4096);
    let mut tx = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let bad = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let (slot, key, region) = receiver_slot(&rx, 4096, 4);
    let (bad_slot, bad_key, _) = receiver_slot(&bad, 4096, 4);
    tx.open(0, 0);
    for fd in [bad.doorbell.as_fd(), bad.port_eventfd.as_fd()] {
        // Fill it while it is still non-blocking (an eventfd's counter to its maximum, a
        // socket's queue), then make it blocking.
        let _ = rustix::io::write(fd, &(u64::MAX - 1).to_ne_bytes());
        for _ in 0..100_000 {
            if rustix::io::write(fd, &1u64.to_ne_bytes()).is_err() {
                break;
            }
        }
        let flags = fcntl_getfl(fd).unwrap();
        fcntl_setfl(fd, flags - OFlags::NONBLOCK).unwrap();
    }
    const ROUNDS: u64 = 40;
    for round in 0..ROUNDS {
        // The bad client asks to be poked and never drains.
        let _ = bad.queues[0].arm_eventfd();
        let to_bad = inline(tx.node, bad_slot, bad_key, 0, 0, b"poke", round);
        tx.push(0, to_bad).unwrap();
        let msg = round.to_le_bytes();
        tx.push(0, inline(tx.node, slot, key, 0, round * 8, &msg, round))
            .unwrap();
        let n = rx.wait_notif(0).expect("the good message arrives");
        assert_eq!(n.word.get(), round);
        let mut b = [0u8; 8];
        region.read((round * 8) as usize, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), round);
        // Long enough for the engine to go to sleep and be rung awake next round.
        std::thread::sleep(Duration::from_millis(5));
    }
    tx.wait_finished(0, 2 * ROUNDS);
    assert!(tx.errors().is_empty());
    let stats = rx.stats();
    assert!(
        stats.engine.sleeps > 0,
        "the engine slept and was woken: {stats:?}"
    );
    drop(bad);
    engine.stop().unwrap();
}

/// Issue 17: a client that dies with a message half sent (a request of thousands of
/// packets still in flight) leaves its receiver told that the message will never
/// complete, as a lost peer would; a message it finished is not reported, and other
/// senders' messages are untouched.
#[test]
fn a_client_that_dies_mid_message_leaves_its_receiver_told() {
    let mut cfg = EngineConfig::embedded();
    // One packet per turn, and a message of thousands: the engine sees the sender's
    // socket close (every few hundred busy turns) long before the last packet.
    cfg.intra_mtu = 512;
    let engine = EngineHandle::start(cfg).unwrap();
    let mut rx = RawClient::attach(engine.socket_path(), 1, 1, 256);
    let mut done_tx = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let mut dying = RawClient::attach(engine.socket_path(), 1, 1, 64);
    const BIG: usize = 32 << 20;
    let (slot, key, region) = receiver_slot(&rx, BIG, 4);
    done_tx.open(0, 0);
    dying.open(0, 0);
    // A whole message on entry 0 from one client, then it leaves: nothing to report.
    done_tx
        .push(0, inline(rx.node, slot, key, 0, 0, b"whole", 1))
        .unwrap();
    let n = rx.wait_notif(0).expect("the whole message");
    assert_eq!(n.kind(), Some(NotifKind::Message));
    // 65,536 packets on entry 1; the sender dies once the first have landed.
    let (area, src) = dying.area(BIG);
    src.write(0, b"first packet").unwrap();
    let mut req = inline(rx.node, slot, key, 1, 0, b"", 2);
    let mut list = [Gather::default(); hamlyn_wire::request::MAX_GATHER];
    list[0] = Gather {
        area,
        offset: 0,
        len: BIG as u64,
    };
    req.payload = Payload::Gather { list, count: 1 };
    dying.push(0, req).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut b = [0u8; 12];
        region.read(0, &mut b).unwrap();
        if &b == b"first packet" {
            break;
        }
        assert!(Instant::now() < deadline, "the message never started");
        std::hint::spin_loop();
    }
    drop(dying);
    let n = rx.wait_notif(0).expect("a peer-down notification");
    assert_eq!(n.kind(), Some(NotifKind::PeerDown), "{n:?}");
    assert_eq!((n.slot.get(), n.meta_index.get()), (slot, 1));
    assert_eq!(n.src_node.get(), rx.node);
    // Only that message: the survivor's traffic goes on, nothing else is reported.
    drop(done_tx);
    let mut tx = RawClient::attach(engine.socket_path(), 1, 1, 64);
    tx.open(0, 0);
    tx.push(0, inline(rx.node, slot, key, 2, 0, b"again", 3))
        .unwrap();
    let n = rx.wait_notif(0).expect("the next message");
    assert_eq!((n.kind(), n.word.get()), (Some(NotifKind::Message), 3));
    engine.stop().unwrap();
}

/// Issue 17: a client that rings the doorbell in a loop, with nothing behind the rings,
/// costs the engine one turn per ring: each such wake-up is counted and the engine goes
/// straight back to sleep (no spin), while a well-behaved pair keeps exchanging messages.
#[test]
fn a_doorbell_rung_for_nothing_sends_the_engine_back_to_sleep() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let mut rx = RawClient::attach(engine.socket_path(), 1, 1, 256);
    let mut tx = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let bad = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let (slot, key, _region) = receiver_slot(&rx, 4096, 4);
    tx.open(0, 0);
    // Let the engine settle into its sleep.
    std::thread::sleep(Duration::from_millis(20));
    let before = rx.stats().engine;
    for round in 0..200u64 {
        bad.doorbell.notify().unwrap();
        std::thread::sleep(Duration::from_micros(200));
        if round % 20 == 0 {
            tx.push(
                0,
                inline(tx.node, slot, key, 0, 0, &round.to_le_bytes(), round),
            )
            .unwrap();
            let n = rx.wait_notif(0).expect("the good message arrives");
            assert_eq!(n.word.get(), round);
        }
    }
    let after = rx.stats().engine;
    let idle_wakes = after.idle_wakes - before.idle_wakes;
    let sleeps = after.sleeps - before.sleeps;
    assert!(idle_wakes > 0, "rings for nothing are counted: {after:?}");
    assert!(
        sleeps >= idle_wakes,
        "each wake-up for nothing went back to sleep: {sleeps} sleeps, {idle_wakes} idle wakes"
    );
    assert!(tx.errors().is_empty());
    drop(bad);
    engine.stop().unwrap();
}

#[test]
fn a_full_terminus_is_back_pressure_and_nothing_is_dropped() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let mut c = RawClient::attach(engine.socket_path(), 1, 1, 4096);
    let (slot, key, _) = receiver_slot(&c, 4096, 4);
    // Not opened yet: the engine does not consume, so the ring fills.
    let mut pushed = 0;
    loop {
        match c.push(0, inline(c.node, slot, key, 0, 0, b"x", pushed)) {
            Ok(_) => pushed += 1,
            Err(hamlyn_shm::spsc::PushError::Full) => break,
            Err(e) => panic!("{e}"),
        }
        assert!(pushed <= 64, "ring capacity is 64");
    }
    assert_eq!(pushed, 64, "at least 63 requests fit (seed 000 §2.3)");
    c.open(0, 0);
    c.wait_finished(0, pushed);
    let tags: Vec<u64> = (0..pushed)
        .map(|_| c.wait_notif(0).unwrap().word.get())
        .collect();
    assert_eq!(
        tags,
        (0..pushed).collect::<Vec<_>>(),
        "every request delivered, in order"
    );
    engine.stop().unwrap();
}

#[test]
fn a_full_notification_queue_is_counted_and_nothing_is_overwritten() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let mut c = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let (slot, key, _) = receiver_slot(&c, 4096, 4);
    c.open(0, 0);
    for i in 0..100u64 {
        while c.push(0, inline(c.node, slot, key, 0, 0, b"y", i)).is_err() {
            std::thread::yield_now();
        }
    }
    c.wait_finished(0, 100);
    assert_eq!(
        c.queues[0].overflows(),
        36,
        "100 notifications into 64 entries"
    );
    let tags: Vec<u64> = (0..64)
        .map(|_| c.queues[0].poll().unwrap().word.get())
        .collect();
    assert_eq!(
        tags,
        (0..64).collect::<Vec<_>>(),
        "the first 64 kept, none overwritten"
    );
    // Room again: the owner is told how many were lost, once.
    let n = c.wait_notif(0).expect("an Overflow report");
    assert_eq!((n.kind(), n.word.get()), (Some(NotifKind::Overflow), 36));
    assert!(c.queues[0].poll().is_none());
    let stats = c.stats();
    assert_eq!(stats.engine.queue_overflows, 36, "{stats:?}");
    engine.stop().unwrap();
}

const CHILD_ENV: &str = "HAMLYN_TEST_CHILD_SOCKET";

/// Not a test on its own: the body of the child process of `a_killed_client...` (it
/// returns at once unless the parent started it).
#[test]
fn child_process_receiver() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let c = RawClient::attach(std::path::Path::new(&path), 1, 1, 64);
    let (slot, key, _) = receiver_slot(&c, 1 << 16, 4);
    let mut out = std::io::stdout();
    writeln!(out, "SLOT {slot} {key}").unwrap();
    out.flush().unwrap();
    // Stay attached until killed.
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_killed_client_loses_its_slots_and_senders_get_peer_down() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process_receiver",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, engine.socket_path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    loop {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "child ended before its slot"
        );
        // libtest may print "test name ... " on the same line first.
        if let Some(at) = line.find("SLOT ") {
            line.drain(..at);
            break;
        }
    }
    let mut parts = line.split_whitespace().skip(1);
    let slot: u32 = parts.next().unwrap().parse().unwrap();
    let key: u64 = parts.next().unwrap().parse().unwrap();

    let mut tx = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let mut other = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let (oslot, okey, _) = receiver_slot(&other, 4096, 4);
    tx.open(0, 0);
    // Traffic to the child works while it lives.
    let p = tx
        .push(0, inline(tx.node, slot, key, 0, 0, b"alive", 1))
        .unwrap();
    tx.wait_finished(0, p + 1);
    assert!(tx.errors().is_empty());
    // SIGKILL in the middle of traffic.
    for i in 0..20 {
        let _ = tx.push(0, inline(tx.node, slot, key, 0, 0, b"during", i));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // The engine notices (socket closed); then sends aimed at the dead client fail.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = tx.stats();
        if stats.engine.clients_lost == 1 {
            assert!(
                stats.slot(slot).is_none(),
                "dead client's slot still listed: {stats:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "engine never noticed the death: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = tx.errors();
    let p = tx
        .push(0, inline(tx.node, slot, key, 0, 0, b"dead?", 2))
        .unwrap();
    tx.wait_finished(0, p + 1);
    let errs = tx.errors();
    let last = errs
        .last()
        .expect("an error completion for the send to the dead client");
    assert_eq!(
        (
            last.seq as u64,
            RejectReason::from_code(u64::from(last.status))
        ),
        (p, Some(RejectReason::PeerDown))
    );
    // Other traffic is unaffected.
    let p = tx
        .push(0, inline(tx.node, oslot, okey, 1, 0, b"fine", 3))
        .unwrap();
    tx.wait_finished(0, p + 1);
    assert!(tx.errors().is_empty());
    assert_eq!(other.wait_notif(0).unwrap().word.get(), 3);
    engine.stop().unwrap();
}

#[test]
fn a_client_that_detaches_is_not_lost_and_one_that_just_closes_is() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let watcher = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let clean = RawClient::attach(engine.socket_path(), 1, 1, 64);
    assert_eq!(clean.call(Request::Detach), Reply::Ok);
    drop(clean);
    let rude = RawClient::attach(engine.socket_path(), 1, 1, 64);
    drop(rude);
    let deadline = Instant::now() + Duration::from_secs(10);
    let stats = loop {
        let stats = watcher.stats();
        if stats.engine.clients_detached + stats.engine.clients_lost >= 2 {
            break stats;
        }
        assert!(
            Instant::now() < deadline,
            "the engine never saw both go: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(
        (stats.engine.clients_detached, stats.engine.clients_lost),
        (1, 1),
        "{stats:?}"
    );
    assert_eq!(stats.ports.len(), 1, "only the watcher is left");
    drop(watcher);
    engine.stop().unwrap();
}

/// A client that leaves its error ring full while its refused writes keep coming, then
/// reads the ring and pushes nothing more: every refusal comes out, the ones the engine
/// held back for room included, with nothing else to wake the engine. Reading a ring
/// rings no doorbell, so the engine must look again by itself; an engine that otherwise
/// sleeps a minute (as here) left the rest waiting for that minute.
#[test]
fn refusals_held_for_room_come_out_when_the_ring_is_read_and_nothing_is_pushed() {
    let mut cfg = EngineConfig::embedded();
    cfg.max_sleep = Duration::from_secs(60);
    let engine = EngineHandle::start(cfg).unwrap();
    let rx = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let mut tx = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let (slot, key, _region) = receiver_slot(&rx, 4096, 4);
    tx.open(0, 0);
    // Forged writes until the terminus takes no more (its ring full behind a refusal
    // that waits for room in the error ring, which nobody reads yet).
    let mut pushed = 0u64;
    let mut refused_in_a_row = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while refused_in_a_row < 200 {
        assert!(Instant::now() < deadline, "the terminus never filled");
        if tx
            .push(0, inline(rx.node, slot, key ^ 1, 0, 0, b"forged", pushed))
            .is_ok()
        {
            pushed += 1;
            refused_in_a_row = 0;
        } else {
            refused_in_a_row += 1;
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // Let the engine go idle and to sleep.
    std::thread::sleep(Duration::from_millis(300));
    // Read the ring, and only read it.
    tx.read_errors_until(pushed, u16::from(RejectReason::BadKey.code()));
}
