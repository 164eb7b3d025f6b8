//! The engine end to end with a raw client: attach, areas, a slot, a terminus, one
//! inline write, its notification and completion; a bad key gives an error completion.
#![allow(clippy::unwrap_used)]

mod common;

use common::{inline, RawClient};
use hamlyn_core::RejectReason;
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_wire::control::{mode, perm, Reply, Request};
use hamlyn_wire::NotifKind;

#[test]
fn inline_write_is_deposited_notified_and_completed() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let mut c = RawClient::attach(engine.socket_path(), 2, 2, 64);
    let (area, region) = c.area(4096);
    let (meta_area, meta) = c.area(128 * 4);
    let reply = c.call(Request::CreateSlot {
        area,
        base: 1024,
        len: 1024,
        mode: mode::NORMAL,
        perms: perm::WRITE,
        meta_area,
        meta_base: 0,
        meta_count: 4,
        queue: 1,
    });
    let Reply::Slot { slot, key } = reply else {
        panic!("{reply:?}")
    };
    c.open(0, 0);
    let pos = c
        .push(0, inline(c.node, slot, key, 2, 8, b"hello, hamlyn", 77))
        .unwrap();
    let n = c.wait_notif(1).unwrap();
    assert_eq!(n.kind(), Some(NotifKind::Message));
    assert_eq!(
        (n.slot.get(), n.meta_index.get(), n.word.get()),
        (slot, 2, 77)
    );
    c.wait_finished(0, pos + 1);
    let mut got = [0u8; 13];
    region.read(1024 + 8, &mut got).unwrap();
    assert_eq!(&got, b"hello, hamlyn");
    assert!(c.errors().is_empty());
    let mut acc = [0u8; 4];
    meta.read(2 * 128 + 60, &mut acc).unwrap();
    assert_eq!(
        acc, [0; 4],
        "single-packet NOTIFY_NOW leaves the accumulator alone"
    );

    let before = {
        let mut b = vec![0u8; 4096];
        region.read(0, &mut b).unwrap();
        b
    };
    let pos = c
        .push(0, inline(c.node, slot, key ^ 1, 2, 8, b"forged", 1))
        .unwrap();
    c.wait_finished(0, pos + 1);
    let errs = c.errors();
    assert_eq!(errs.len(), 1);
    assert_eq!(
        (
            errs[0].seq as u64,
            RejectReason::from_code(u64::from(errs[0].status))
        ),
        (pos, Some(RejectReason::BadKey))
    );
    let mut after = vec![0u8; 4096];
    region.read(0, &mut after).unwrap();
    assert_eq!(before, after, "a refused write changes nothing");
    let stats = c.stats();
    assert_eq!(
        stats.interface.rejects.get("bad_key"),
        Some(&1),
        "{stats:?}"
    );
    engine.stop().unwrap();
}

/// A client asleep on a terminus's completion word is woken by the engine when it
/// finishes a request there: the engine clears the sleeper's flag on the completion
/// line's wake word, and a waiter with no timeout returns (a lost wake-up would leave it
/// asleep until the test's bound).
#[test]
fn finishing_a_request_wakes_a_client_asleep_on_its_completion_word() {
    use hamlyn_shm::sync::Ordering;
    use hamlyn_shm::wake::{wait_until, WaitOutcome, SLEEPING};
    use std::time::Duration;
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let mut c = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let (area, _region) = c.area(4096);
    let (meta_area, _meta) = c.area(128 * 4);
    let Reply::Slot { slot, key } = c.call(Request::CreateSlot {
        area,
        base: 0,
        len: 4096,
        mode: mode::NORMAL,
        perms: perm::WRITE,
        meta_area,
        meta_base: 0,
        meta_count: 4,
        queue: 0,
    }) else {
        panic!("slot")
    };
    c.open(0, 0);
    let port = c.port.clone();
    let wake = port
        .atomic_u32(c.layout.completion_wake_word(0).unwrap())
        .unwrap();
    // The flag a sleeper sets: the engine must clear it (and wake) when it finishes.
    wake.fetch_or(SLEEPING, Ordering::Relaxed);
    let pos = c.push(0, inline(c.node, slot, key, 0, 0, b"x", 1)).unwrap();
    c.wait_finished(0, pos + 1);
    // The engine wakes right after it moves the word: wait (bounded) for the flag to go.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while wake.load(Ordering::Relaxed) & SLEEPING != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the engine never woke the sleeper"
        );
        std::thread::yield_now();
    }
    for round in 0..50u64 {
        let pos = c
            .push(0, inline(c.node, slot, key, 0, 0, b"y", round))
            .unwrap();
        let got = wait_until(wake, 0, Some(Duration::from_secs(30)), || {
            c.finished(0) > pos
        })
        .unwrap();
        assert!(matches!(got, WaitOutcome::Ready { .. }), "round {round}");
    }
    assert!(c.errors().is_empty());
    engine.stop().unwrap();
}
