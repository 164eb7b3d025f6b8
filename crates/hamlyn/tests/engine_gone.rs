//! Issue 17: a client learns that its engine died. The engine runs in a child process
//! (a daemon, as `hamlyn node` would be) and is killed with SIGKILL; the client's waits
//! end with `EngineGone` instead of hanging, its unfinished sends fail, its event fd
//! becomes readable, and a restarted engine on the same socket can be connected to.

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use common::{child_env, Proc, WAIT};
use hamlyn::{Data, Error, Node, RejectReason, SendError, SendOptions, Status};
use hamlyn_engine::{EngineConfig, EngineHandle};

/// Child entry point: an engine on the socket the parent names, until stdin closes.
#[test]
fn child_engine() {
    let Some(mut env) = child_env("child_engine") else {
        return;
    };
    let engine = EngineHandle::start(EngineConfig::daemon(&env.socket)).expect("engine");
    env.say("ready", 1);
    while env.next_command().is_some() {}
    drop(engine);
}

fn socket() -> std::path::PathBuf {
    socket_named("gone")
}

/// A socket path of this process's, apart from other tests' (they run at once).
fn socket_named(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("hamlyn-{name}-{}.sock", std::process::id()))
}

fn readable(fd: std::os::fd::BorrowedFd<'_>, within: Duration) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let t = Timespec {
        tv_sec: within.as_secs() as i64,
        tv_nsec: 0,
    };
    matches!(poll(&mut fds, Some(&t)), Ok(1))
}

/// An engine in a child process on `path`, a client of it, and an inbox slot on queue 0.
fn start(path: &std::path::Path) -> (Proc, Node, (hamlyn::Area, hamlyn::MetaArea, hamlyn::Slot)) {
    let mut engine = Proc::spawn("child_engine", path);
    engine.expect("ready", WAIT);
    let node = Node::connect(path).expect("connect");
    let inbox = node.area(4096).expect("area");
    let meta = node.meta_area(1).expect("meta");
    let slot = node
        .slot(&inbox)
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot");
    (engine, node, (inbox, meta, slot))
}

#[test]
fn a_client_learns_that_its_engine_died_and_can_reconnect() {
    let path = socket();
    let (mut engine, node, (inbox, meta, slot)) = start(&path);
    let ticket = slot.ticket_all().expect("ticket");
    let mut queue = node.queue(0).expect("queue");
    let mut queue1 = node.queue(1).expect("queue 1");
    let mut terminus = node.terminus(0).expect("terminus");

    // It works: one message goes through.
    terminus
        .send(&ticket, &SendOptions::new().tag(1), Data::Inline(b"hello"))
        .expect("send");
    assert_eq!(
        queue.wait(Some(WAIT)).expect("wait").expect("message").word,
        1
    );

    // A thread sleeps in a wait with no timeout; the event fd is armed.
    let sleeper = std::thread::spawn(move || queue1.wait(None));
    assert!(!queue.arm(), "nothing is waiting");
    // Sends go out as the engine dies.
    let handles: Vec<_> = (0..32)
        .filter_map(|i| {
            terminus
                .send(
                    &ticket,
                    &SendOptions::new().tag(100 + i),
                    Data::Inline(b"x"),
                )
                .ok()
        })
        .collect();
    engine.kill();

    // The sleeping wait ends, with EngineGone (bounded here only so that a regression
    // fails instead of hanging).
    let deadline = Instant::now() + WAIT;
    while !sleeper.is_finished() {
        assert!(
            Instant::now() < deadline,
            "a wait(None) outlived its engine"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(matches!(
        sleeper.join().expect("sleeper"),
        Err(Error::EngineGone)
    ));
    // The event fd is readable, and says why.
    assert!(readable(node.event_fd(), WAIT), "the event fd fires");
    // Pokes sent before the death are drained first; then the fd says why it fires.
    let mut drains = 0;
    loop {
        match node.drain_event_fd() {
            Ok(_) if drains < 8 => drains += 1,
            Err(Error::EngineGone) => break,
            other => panic!("{other:?} after {drains} drains"),
        }
        assert!(readable(node.event_fd(), WAIT), "still readable");
    }
    assert!(node.engine_gone());
    // Every send is finished one way or another: none is left pending.
    for h in &handles {
        let s = h.wait(Some(WAIT));
        assert!(
            matches!(s, Status::Sent | Status::Failed(RejectReason::PeerDown)),
            "{s:?}"
        );
    }
    // New sends and waits say so at once.
    assert_eq!(
        terminus
            .send(&ticket, &SendOptions::new(), Data::Inline(b"?"))
            .err(),
        Some(SendError::EngineGone)
    );
    // What was posted before the death is still read, then the wait says it is gone.
    loop {
        match queue.wait(Some(WAIT)) {
            Ok(Some(_)) => continue,
            Err(Error::EngineGone) => break,
            other => panic!("{other:?}"),
        }
    }
    drop((terminus, queue, slot, meta, inbox, node));

    // A restarted engine on the same socket: connect again and carry on.
    let (again, node, (inbox, meta, slot)) = start(&path);
    let mut queue = node.queue(0).expect("queue");
    node.terminus(0)
        .expect("terminus")
        .send(
            &slot.ticket_all().expect("ticket"),
            &SendOptions::new().tag(7),
            Data::Inline(b"back"),
        )
        .expect("send");
    assert_eq!(
        queue.wait(Some(WAIT)).expect("wait").expect("message").word,
        7
    );
    drop((queue, slot, meta, inbox, node));
    again.finish();
}

/// A sender that fills its ring after the engine died learns it from its retries (a
/// `poll` on every 64th refusal in a row, not on each), and `wait_room` says there will
/// be no room instead of waiting for ever.
#[test]
fn a_sender_retrying_on_a_full_ring_learns_that_its_engine_died() {
    let path = socket_named("gone-full");
    let (mut engine, node, (_inbox, _meta, slot)) = start(&path);
    let ticket = slot.ticket_all().expect("ticket");
    let mut terminus = node.terminus(0).expect("terminus");
    engine.kill();
    let (mut queued, mut full) = (0u32, 0u32);
    let gone = loop {
        match terminus.send(&ticket, &SendOptions::new(), Data::Inline(b"x")) {
            Ok(_) => queued += 1,
            Err(SendError::Full) => full += 1,
            Err(SendError::EngineGone) => break true,
            Err(e) => panic!("{e}"),
        }
        if queued + full > 100_000 {
            break false;
        }
    };
    assert!(
        gone,
        "{queued} queued, {full} refused as Full, never EngineGone"
    );
    assert!(full < 64, "{full} refusals before EngineGone");
    assert!(
        !terminus.wait_room(Some(WAIT)),
        "no room will come from a dead engine"
    );
    let _ = std::fs::remove_file(&path);
}
