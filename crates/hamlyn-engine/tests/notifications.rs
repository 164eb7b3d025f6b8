//! What the engine promises about notifications beyond "posted": the sender's WAKE flag is
//! honoured, and notifications lost to a full queue are reported by an `Overflow`
//! notification that comes before anything posted after the gap.
#![allow(clippy::unwrap_used)]

mod common;

use common::{inline, RawClient};
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_wire::control::{mode, perm, Reply, Request};
use hamlyn_wire::request::send_flags;
use hamlyn_wire::NotifKind;

/// A slot of 4 KiB with 4 metadata entries reporting to queue `queue`; (slot, key).
fn slot(c: &RawClient, queue: u32) -> (u32, u64) {
    let (area, _region) = c.area(4096);
    let (meta_area, _meta) = c.area(128 * 4);
    let reply = c.call(Request::CreateSlot {
        area,
        base: 0,
        len: 4096,
        mode: mode::NORMAL,
        perms: perm::WRITE,
        meta_area,
        meta_base: 0,
        meta_count: 4,
        queue,
    });
    let Reply::Slot { slot, key } = reply else {
        panic!("{reply:?}")
    };
    (slot, key)
}

/// Pushes `n` small messages to `slot` on terminus 0 and waits until all are finished.
fn send(c: &mut RawClient, slot: (u32, u64), n: u64, flags: u16) {
    let mut pushed = 0;
    // Bounded: each round either pushes or waits for the engine to take one.
    for _ in 0..(n * 1000) {
        if pushed == n {
            break;
        }
        let mut req = inline(c.node, slot.0, slot.1, 0, 0, b"x", pushed);
        req.flags = flags;
        match c.push(0, req) {
            Ok(_) => pushed += 1,
            Err(_) => c.wait_finished(0, c.finished(0) + 1),
        }
    }
    assert_eq!(pushed, n);
    let total = c.pushed[0];
    c.wait_finished(0, total);
    assert!(c.errors().is_empty());
}

#[test]
fn without_the_wake_flag_the_receiver_is_not_woken_but_still_notified() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let mut c = RawClient::attach(engine.socket_path(), 1, 1, 64);
    let s = slot(&c, 0);
    c.open(0, 0);
    c.port_eventfd.drain().unwrap();

    // Event-loop mode: the event descriptor is poked by a post that wakes.
    assert!(!c.queues[0].arm_eventfd(), "nothing waiting yet");
    send(&mut c, s, 1, send_flags::NOTIFY);
    // The notification was posted before the request finished; no poke came with it.
    assert_eq!(c.port_eventfd.drain().unwrap(), 0, "woken without WAKE");
    let n = c.queues[0].poll().expect("notified all the same");
    assert_eq!(n.kind(), Some(NotifKind::Message));

    assert!(!c.queues[0].arm_eventfd());
    send(&mut c, s, 1, send_flags::NOTIFY | send_flags::WAKE);
    // The engine looks at the queue's wake word at the end of its visit of the terminus,
    // with one fence for the visit's posts and completions (`wake_batch`): the poke may
    // come just after the request finished, so it is waited for (bounded).
    assert!(readable_within(&c.port_eventfd, 10_000), "WAKE pokes");
    // Once: the send without WAKE poked nothing, not even late (a late poke would have
    // cleared the arming, the second arming would have made this one poke again).
    assert_eq!(c.port_eventfd.drain().unwrap(), 1, "WAKE pokes once");
    assert!(c.queues[0].poll().is_some());
    engine.stop().unwrap();
}

/// Whether `fd` becomes readable within `ms` milliseconds.
fn readable_within(fd: &hamlyn_shm::wake::EventFd, ms: i32) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let borrowed = fd.as_fd();
    let mut fds = [PollFd::new(&borrowed, PollFlags::IN)];
    let timeout = Timespec {
        tv_sec: i64::from(ms / 1000),
        tv_nsec: i64::from(ms % 1000) * 1_000_000,
    };
    matches!(poll(&mut fds, Some(&timeout)), Ok(n) if n > 0)
}

#[test]
fn lost_notifications_are_reported_by_an_overflow_before_what_follows() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let cap = 64u64;
    let mut c = RawClient::attach(engine.socket_path(), 1, 2, cap as u32);
    let full = slot(&c, 0);
    let other = slot(&c, 1);
    c.open(0, 0);
    let flags = send_flags::NOTIFY | send_flags::WAKE;

    // Three more than the queue holds: three are lost (never overwritten).
    send(&mut c, full, cap + 3, flags);
    for i in 0..cap {
        let n = c.queues[0].poll().expect("the first ones are kept");
        assert_eq!(
            (n.kind(), n.word.get()),
            (Some(NotifKind::Message), i),
            "in order, unharmed"
        );
    }
    // Room again: the engine reports the gap on its next turn (here one spent on another
    // queue), though nothing new arrived for this queue — or sooner: an idle engine that
    // owes a report looks for room every millisecond, so it may be there already.
    send(&mut c, other, 1, flags);
    let n = c.wait_notif(0).expect("an Overflow report");
    assert_eq!((n.kind(), n.word.get()), (Some(NotifKind::Overflow), 3));
    assert!(c.wait_notif(1).is_some());

    // Lost again, then a message comes while the report still waits: report first.
    send(&mut c, full, cap + 1, flags);
    for _ in 0..cap {
        assert_eq!(c.queues[0].poll().unwrap().kind(), Some(NotifKind::Message));
    }
    send(&mut c, full, 1, flags);
    let n = c.wait_notif(0).unwrap();
    assert_eq!((n.kind(), n.word.get()), (Some(NotifKind::Overflow), 1));
    let n = c.wait_notif(0).unwrap();
    assert_eq!(n.kind(), Some(NotifKind::Message));
    assert!(c.queues[0].poll().is_none());
    assert_eq!(c.queues[0].overflows(), 4, "each lost entry counted once");
    engine.stop().unwrap();
}
