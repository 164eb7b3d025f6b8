//! The library across real processes: each test starts an engine thread in the test
//! process and re-executes this test binary as child processes, which reach the engine
//! only through its control socket and their ports, as separate programs would. Tickets
//! travel between processes as seed text over the children's stdin and stdout.
//!
//! The `child_*` functions are the children's entry points. They are `#[test]`s so that
//! the re-executed binary can run exactly one of them (`--exact child_name`); in an
//! ordinary test run the environment does not name them and they return at once.
//!
//! Every wait is bounded ([`common::WAIT`]), every child is reaped, and a child is only
//! ever killed through its own `Child` handle. Nothing asserts on timing.

#[allow(dead_code, reason = "the helpers are shared by several test files")]
mod common;

use std::time::{Duration, Instant};

use common::{child_env, numbers, pattern_at, send_bytes, spans, Proc, WAIT};
use hamlyn::seed::{ticket_from_text, ticket_to_text};
use hamlyn::{
    Data, MetaArea, Node, NodeOptions, NotificationKind, RejectReason, SendError, SendHandle,
    SendOptions, Status, Ticket, MAX_INLINE,
};
use hamlyn_engine::{EngineConfig, EngineHandle};

fn start_engine() -> EngineHandle {
    EngineHandle::start(EngineConfig::embedded()).expect("engine")
}

/// A status as a child reports it (and as the parent compares it).
fn status_text(s: Status) -> String {
    format!("{s:?}")
}

/// The metadata a child's `send` command attaches: distinct per tag.
fn sender_meta(tag: u64) -> Vec<u8> {
    format!("tag {tag}").into_bytes()
}

// ---------------------------------------------------------------------------------------
// 1. Ping-pong of every size.

/// Message sizes: empty, inline (≤ 128 bytes) and gather (above), up to 1 MiB.
const SIZES: [usize; 11] = [0, 1, 7, 8, 64, 127, 128, 129, 4096, 65536, 1 << 20];
/// Metadata lengths used with each size (0..=60 bytes).
const META_LENS: [usize; 11] = [0, 60, 1, 8, 0, 60, 33, 59, 60, 5, 60];
/// Room past the largest message, checked to stay zero (nothing overruns).
const SLACK: u64 = 4096;
const PING_TAG: u64 = 0x5100_0000;
const PONG_TAG: u64 = 0x9200_0000;

fn ping_seed(k: usize) -> u64 {
    0xB00_0000 + k as u64
}

fn ping_meta(k: usize) -> Vec<u8> {
    (0..META_LENS[k])
        .map(|i| (k * 37 + i * 5 + 1) as u8)
        .collect()
}

/// Echoes every message of the ping-pong test back to the parent, from the very bytes
/// that arrived (a zero-copy gather out of its inbox, or inline), with the same metadata
/// and a reply tag, after checking them itself.
#[test]
fn child_echo() {
    let Some(mut env) = child_env("child_echo") else {
        return;
    };
    let node = Node::connect(&env.socket).expect("connect");
    let inbox = node.area((1 << 20) + SLACK).expect("inbox");
    let meta = node.meta_area(1).expect("meta");
    let slot = node
        .slot(&inbox)
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot");
    env.say(
        "ticket",
        ticket_to_text(&slot.ticket_all().expect("ticket")).expect("seed"),
    );
    let to_parent = ticket_from_text(&env.hear("ticket")).expect("parent's seed");
    let mut q = node.queue(0).expect("queue");
    let mut t = node.terminus(0).expect("terminus");
    for (k, &size) in SIZES.iter().enumerate() {
        let n = q.wait(Some(WAIT)).expect("wait").expect("a ping arrives");
        assert_eq!(n.kind, NotificationKind::Message);
        assert_eq!((n.word, n.meta_index), (PING_TAG + k as u64, Some(0)));
        let got = inbox.read_vec(0, size).expect("read");
        assert!(
            got == pattern_at(ping_seed(k), 0, size),
            "ping of {size} bytes arrived byte-exact"
        );
        assert_eq!(meta.metadata(0).expect("metadata"), ping_meta(k));
        let m = ping_meta(k);
        let opts = SendOptions::new().meta(&m).tag(PONG_TAG + k as u64);
        let h = if size <= MAX_INLINE {
            t.send(&to_parent, &opts, Data::Inline(&got))
        } else {
            t.send(
                &to_parent,
                &opts,
                Data::Gather(&spans(&inbox, 0, size as u64)),
            )
        }
        .expect("echo");
        assert_eq!(h.wait(Some(WAIT)), Status::Sent);
        env.say("echoed", size);
    }
}

#[test]
fn ping_pong_of_every_size_with_a_child_that_echoes() {
    let engine = start_engine();
    let node = Node::connect(engine.socket_path()).expect("connect");
    let inbox = node.area((1 << 20) + SLACK).expect("inbox");
    let meta = node.meta_area(1).expect("meta");
    let slot = node
        .slot(&inbox)
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot");
    let mut child = Proc::spawn("child_echo", engine.socket_path());
    let to_child = ticket_from_text(&child.expect("ticket", WAIT)).expect("child's seed");
    child.tell(
        "ticket",
        ticket_to_text(&slot.ticket_all().expect("ticket")).expect("seed"),
    );
    let mut q = node.queue(0).expect("queue");
    let mut t = node.terminus(0).expect("terminus");
    // Sizes go up, so the bytes just past each message must still be zero.
    for (k, &size) in SIZES.iter().enumerate() {
        let data = pattern_at(ping_seed(k), 0, size);
        let m = ping_meta(k);
        let opts = SendOptions::new().meta(&m).tag(PING_TAG + k as u64);
        let h = send_bytes(&node, &mut t, &to_child, &opts, &data);
        assert_eq!(h.wait(Some(WAIT)), Status::Sent, "ping of {size} bytes");
        let Some(n) = q.wait(Some(WAIT)).expect("wait") else {
            child.fail(&format!("no echo of the {size}-byte ping"));
        };
        assert_eq!(child.expect("echoed", WAIT), size.to_string());
        assert_eq!(n.kind, NotificationKind::Message);
        assert_eq!(
            (n.word, n.meta_index, n.src_node),
            (PONG_TAG + k as u64, Some(0), node.id())
        );
        let echo = inbox.read_vec(0, size).expect("read");
        assert!(echo == data, "echo of {size} bytes came back byte-exact");
        let past = inbox.read_vec(size as u64, SLACK as usize).expect("read");
        assert!(
            past.iter().all(|&b| b == 0),
            "nothing written past {size} bytes"
        );
        assert_eq!(meta.metadata(0).expect("metadata"), ping_meta(k));
    }
    assert_eq!(q.poll(), None, "one echo per ping");
    child.finish();
}

// ---------------------------------------------------------------------------------------
// A child that sends on command (tests 2 to 6).

/// Sends what the parent asks, with the last ticket it was given, and reports statuses.
///
/// - `ticket <seed>`: the ticket for what follows.
/// - `send <tag> <offset> <len> <seed>`: one message of pattern `seed` (its bytes
///   numbered from the ticket's start, so the parts of a split ticket make one pattern),
///   inline or gather; answers `status <Status>`.
/// - `burst <count>`: `count` 8-byte messages tagged 0.., waiting out a full terminus;
///   answers `burst <sent> <not sent>`.
/// - `flood <max>`: 8-byte messages tagged 0.. without waiting until the terminus is full
///   (at most `max`); answers `flood <accepted> <hit full: 0|1>`, then, when every
///   accepted one is finished, `flooded <sent> <not sent> <tag of one more>`.
#[test]
fn child_sender() {
    let Some(mut env) = child_env("child_sender") else {
        return;
    };
    let node = Node::connect(&env.socket).expect("connect");
    let mut t = node.terminus(0).expect("terminus");
    let mut ticket: Option<Ticket> = None;
    env.say("ready", node.client_id());
    while let Some((cmd, args)) = env.next_command() {
        let tk = ticket.as_ref();
        match cmd.as_str() {
            "ticket" => ticket = Some(ticket_from_text(&args).expect("seed")),
            "send" => {
                let tk = tk.expect("a ticket first");
                let [tag, offset, len, seed] = numbers::<4>(&args);
                let data = pattern_at(seed, tk.offset + offset, len as usize);
                let meta = sender_meta(tag);
                let opts = SendOptions::new().tag(tag).offset(offset).meta(&meta);
                let h = send_bytes(&node, &mut t, tk, &opts, &data);
                env.say("status", status_text(h.wait(Some(WAIT))));
            }
            "burst" => {
                let tk = tk.expect("a ticket first");
                let [count] = numbers::<1>(&args);
                let deadline = Instant::now() + WAIT;
                let mut handles: Vec<SendHandle> = Vec::new();
                for tag in 0..count {
                    let opts = SendOptions::new().tag(tag);
                    loop {
                        match t.send(tk, &opts, Data::Inline(&tag.to_le_bytes())) {
                            Ok(h) => break handles.push(h),
                            // Back-pressure: wait for room (the engine is in
                            // another process: on the completion word), then retry.
                            Err(SendError::Full) if Instant::now() < deadline => {
                                assert!(t.wait_room(Some(WAIT)), "room comes back");
                            }
                            Err(e) => panic!("burst send {tag}: {e}"),
                        }
                    }
                }
                let sent = handles
                    .iter()
                    .filter(|h| h.wait(Some(WAIT)) == Status::Sent)
                    .count();
                env.say("burst", format!("{sent} {}", handles.len() - sent));
            }
            "flood" => {
                let tk = tk.expect("a ticket first");
                let [max] = numbers::<1>(&args);
                let mut handles: Vec<SendHandle> = Vec::new();
                let mut full = false;
                // Why the terminus fills: `send` only encodes a 128-byte entry and stores
                // it in shared memory, while the engine has to take every entry through
                // decoding, segmentation, the key and bounds checks, the copy, packet
                // counting and a notification (two scheduling turns per request), sharing
                // two cores with us. A sender that never waits outruns it, and the 64
                // entries of the ring fill up.
                for tag in 0..max {
                    let opts = SendOptions::new().tag(tag);
                    match t.send(tk, &opts, Data::Inline(&tag.to_le_bytes())) {
                        Ok(h) => handles.push(h),
                        Err(SendError::Full) => {
                            full = true;
                            break;
                        }
                        Err(e) => panic!("flood send {tag}: {e}"),
                    }
                }
                let accepted = handles.len() as u64;
                env.say("flood", format!("{accepted} {}", u8::from(full)));
                assert!(t.wait_idle(Some(WAIT)), "the engine drains the terminus");
                let sent = handles
                    .iter()
                    .filter(|h| h.status() == Status::Sent)
                    .count();
                // Room again: one more goes through.
                let opts = SendOptions::new().tag(accepted);
                let h = t
                    .send(tk, &opts, Data::Inline(&accepted.to_le_bytes()))
                    .expect("room after the engine drained the terminus");
                assert_eq!(h.wait(Some(WAIT)), Status::Sent);
                env.say(
                    "flooded",
                    format!("{sent} {} {accepted}", handles.len() - sent),
                );
            }
            "quit" => break,
            other => panic!("unknown command {other:?}"),
        }
    }
}

/// Starts a `child_sender` and waits until it is attached.
fn sender(engine: &EngineHandle) -> Proc {
    let mut p = Proc::spawn("child_sender", engine.socket_path());
    p.expect("ready", WAIT);
    p
}

fn tell_ticket(p: &mut Proc, ticket: &Ticket) {
    p.tell("ticket", ticket_to_text(ticket).expect("seed"));
}

/// Asks a `child_sender` for one message and returns the status it reports.
fn child_send(p: &mut Proc, tag: u64, offset: u64, len: u64, seed: u64) -> String {
    p.tell("send", format!("{tag} {offset} {len} {seed}"));
    p.expect("status", WAIT)
}

// ---------------------------------------------------------------------------------------
// 2. Many senders in different processes, one message through a split ticket.

#[test]
fn split_ticket_senders_in_four_processes_make_one_notification() {
    const CHILDREN: usize = 4;
    // Each part is larger than the engine's 256 KiB intra-node packet: several packets
    // per sender. The remainder of the split goes to the last part.
    const TOTAL: u64 = CHILDREN as u64 * 600 * 1024 + 5;
    const SEED: u64 = 0x5911;
    const TAG: u64 = 0x0006_E00F;
    let engine = start_engine();
    let node = Node::connect(engine.socket_path()).expect("connect");
    let area = node.area(TOTAL + SLACK).expect("area");
    let meta = node.meta_area(1).expect("meta");
    let slot = node
        .slot(&area)
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot");
    let mut q = node.queue(0).expect("queue");
    let whole = slot.ticket(0..TOTAL, 0..1).expect("ticket");
    let parts = whole.split(CHILDREN).expect("split");
    let mut kids: Vec<Proc> = (0..CHILDREN).map(|_| sender(&engine)).collect();
    for (p, part) in kids.iter_mut().zip(&parts) {
        assert!(part.len > 256 * 1024, "several packets per part");
        tell_ticket(p, part);
    }
    // All but the last send their whole part: no notification may be pending.
    let (last, first) = kids.split_last_mut().expect("children");
    for (p, part) in first.iter_mut().zip(&parts) {
        assert_eq!(
            child_send(p, TAG, 0, part.len, SEED),
            status_text(Status::Sent)
        );
    }
    assert_eq!(q.poll(), None, "no notification before the last part");
    let acc = meta.entry(0).expect("entry").accumulator.get();
    assert_ne!(acc, 0, "the group's count is partial");
    let last_len = parts[CHILDREN - 1].len;
    assert_eq!(
        child_send(last, TAG, 0, last_len, SEED),
        status_text(Status::Sent)
    );
    let Some(n) = q.wait(Some(WAIT)).expect("wait") else {
        panic!("the last part did not complete the message")
    };
    assert_eq!(
        (n.kind, n.word, n.meta_index),
        (NotificationKind::Message, TAG, Some(0))
    );
    assert_eq!(
        q.wait(Some(Duration::from_millis(200))).expect("wait"),
        None,
        "exactly one notification"
    );
    assert_eq!(meta.entry(0).expect("entry").accumulator.get(), 0);
    assert_eq!(meta.metadata(0).expect("metadata"), sender_meta(TAG));
    let got = area.read_vec(0, TOTAL as usize).expect("read");
    assert!(
        got == pattern_at(SEED, 0, TOTAL as usize),
        "every part landed byte-exact"
    );
    let past = area.read_vec(TOTAL, SLACK as usize).expect("read");
    assert!(past.iter().all(|&b| b == 0), "nothing past the ticket");
    for mut p in kids {
        p.tell("quit", "");
        p.finish();
    }
}

// ---------------------------------------------------------------------------------------
// 3. paranoid_one_shot across processes.

#[test]
fn paranoid_one_shot_entry_takes_one_message_until_rearmed() {
    let engine = start_engine();
    let node = Node::connect(engine.socket_path()).expect("connect");
    let area = node.area(4096).expect("area");
    let meta = node.meta_area(2).expect("meta");
    let slot = node
        .slot(&area)
        .paranoid_one_shot()
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot");
    let mut q = node.queue(0).expect("queue");
    // Entry 1, bytes 1024..2048: the ticket arms the entry.
    let ticket = slot.ticket(1024..2048, 1..2).expect("ticket");
    assert!(meta.is_armed(1).expect("state"));
    let mut child = sender(&engine);
    tell_ticket(&mut child, &ticket);
    let snapshot = |area: &hamlyn::Area, meta: &MetaArea| {
        (
            area.read_vec(0, 4096).expect("read"),
            meta.area().read_vec(0, 256).expect("read"),
        )
    };

    assert_eq!(
        child_send(&mut child, 1, 8, 100, 11),
        status_text(Status::Sent)
    );
    let n = q.wait(Some(WAIT)).expect("wait").expect("first message");
    assert_eq!((n.word, n.meta_index), (1, Some(1)));
    assert_eq!(
        area.read_vec(1032, 100).expect("read"),
        pattern_at(11, 1032, 100)
    );
    assert!(!meta.is_armed(1).expect("state"), "the engine disarmed it");

    // A second message to the disarmed entry, over the same bytes: refused, nothing moves.
    let before = snapshot(&area, &meta);
    assert_eq!(
        child_send(&mut child, 2, 8, 100, 22),
        status_text(Status::Failed(RejectReason::Disarmed))
    );
    assert!(
        snapshot(&area, &meta) == before,
        "the receiver is untouched"
    );
    assert_eq!(q.poll(), None, "no notification for a refused message");

    // Re-armed by the receiver: the next message is delivered.
    meta.arm(1).expect("arm");
    assert_eq!(
        child_send(&mut child, 3, 8, 100, 33),
        status_text(Status::Sent)
    );
    let n = q
        .wait(Some(WAIT))
        .expect("wait")
        .expect("message after re-arming");
    assert_eq!((n.word, n.meta_index), (3, Some(1)));
    assert_eq!(
        area.read_vec(1032, 100).expect("read"),
        pattern_at(33, 1032, 100)
    );
    assert_eq!(meta.metadata(1).expect("metadata"), sender_meta(3));
    assert_eq!(q.poll(), None);
    child.tell("quit", "");
    child.finish();
}

// ---------------------------------------------------------------------------------------
// 4. A forged key.

#[test]
fn a_forged_key_from_another_process_fails_and_touches_nothing() {
    let engine = start_engine();
    let node = Node::connect(engine.socket_path()).expect("connect");
    let area = node.area(8192).expect("area");
    let meta = node.meta_area(1).expect("meta");
    // Recognisable contents, so any write would show.
    area.write(0, &pattern_at(0xF111, 0, 8192)).expect("fill");
    let slot = node
        .slot(&area)
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot");
    let mut q = node.queue(0).expect("queue");
    let good = slot.ticket_all().expect("ticket");
    let forged = Ticket {
        key: good.key ^ 1,
        ..good
    };
    let before = (
        area.read_vec(0, 8192).expect("read"),
        meta.area().read_vec(0, 128).expect("read"),
    );
    let mut child = sender(&engine);
    tell_ticket(&mut child, &forged);
    let bad_key = status_text(Status::Failed(RejectReason::BadKey));
    assert_eq!(child_send(&mut child, 1, 0, 100, 1), bad_key, "inline");
    assert_eq!(child_send(&mut child, 2, 100, 5000, 2), bad_key, "gather");
    let after = (
        area.read_vec(0, 8192).expect("read"),
        meta.area().read_vec(0, 128).expect("read"),
    );
    assert!(after == before, "receiver memory untouched");
    assert_eq!(
        q.wait(Some(Duration::from_millis(200))).expect("wait"),
        None,
        "no notification"
    );
    // The same child with the real key gets through: only the key was wrong.
    tell_ticket(&mut child, &good);
    assert_eq!(
        child_send(&mut child, 3, 0, 100, 3),
        status_text(Status::Sent)
    );
    let n = q.wait(Some(WAIT)).expect("wait").expect("arrival");
    assert_eq!(n.word, 3);
    assert_eq!(area.read_vec(0, 100).expect("read"), pattern_at(3, 0, 100));
    child.tell("quit", "");
    child.finish();
}

// ---------------------------------------------------------------------------------------
// 5. A full terminus.

#[test]
fn a_flooding_child_sees_full_and_everything_it_queued_arrives_once_in_order() {
    // Bounded so that the receiver's queue (65536 entries) never overflows.
    const MAX: u64 = 60_000;
    let engine = start_engine();
    let node = Node::connect_with(
        engine.socket_path(),
        NodeOptions {
            queue_cap: 65536,
            ..NodeOptions::default()
        },
    )
    .expect("connect");
    let area = node.area(8).expect("area");
    let meta = node.meta_area(1).expect("meta");
    let slot = node
        .slot(&area)
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot");
    let mut q = node.queue(0).expect("queue");
    let mut child = sender(&engine);
    tell_ticket(&mut child, &slot.ticket_all().expect("ticket"));
    child.tell("flood", MAX);
    let [accepted, full] = numbers::<2>(&child.expect("flood", WAIT));
    assert_eq!(full, 1, "the terminus never filled in {accepted} sends");
    eprintln!("flood: the terminus was full after {accepted} sends");
    let [sent, failed, extra] = numbers::<3>(&child.expect("flooded", WAIT));
    assert_eq!(
        (sent, failed, extra),
        (accepted, 0, accepted),
        "every accepted send completed"
    );
    // Every accepted message, then the one sent after draining: once each, in order.
    for tag in 0..=accepted {
        let Some(n) = q.wait(Some(WAIT)).expect("wait") else {
            panic!("message {tag} of {accepted} never arrived")
        };
        assert_eq!((n.kind, n.word), (NotificationKind::Message, tag));
    }
    assert_eq!(q.poll(), None, "nothing delivered twice");
    assert_eq!(q.overflows(), 0);
    assert_eq!(area.read_vec(0, 8).expect("read"), accepted.to_le_bytes());
    child.tell("quit", "");
    child.finish();
}

// ---------------------------------------------------------------------------------------
// 6. A full notification queue.

#[test]
fn a_full_notification_queue_counts_overflows_and_overwrites_nothing() {
    let engine = start_engine();
    let node = Node::connect_with(
        engine.socket_path(),
        NodeOptions {
            queue_cap: 64,
            ..NodeOptions::default()
        },
    )
    .expect("connect");
    let area = node.area(64).expect("area");
    let meta = node.meta_area(1).expect("meta");
    let slot = node
        .slot(&area)
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot");
    let mut q = node.queue(0).expect("queue");
    let mut child = sender(&engine);
    tell_ticket(&mut child, &slot.ticket_all().expect("ticket"));
    // The receiver consumes nothing while 100 messages arrive.
    child.tell("burst", 100);
    assert_eq!(
        child.expect("burst", WAIT),
        "100 0",
        "senders complete regardless"
    );
    assert_eq!(q.overflows(), 36);
    for tag in 0..64 {
        let n = q.poll().expect("64 notifications kept");
        assert_eq!((n.kind, n.word), (NotificationKind::Message, tag));
    }
    // Room again: the engine tells the owner how many it lost, once.
    let n = q
        .wait(Some(WAIT))
        .expect("wait")
        .expect("an Overflow report");
    assert_eq!((n.kind, n.word), (NotificationKind::Overflow, 36));
    assert_eq!(q.poll(), None);
    assert_eq!(area.read_vec(0, 8).expect("read"), 99u64.to_le_bytes());
    child.tell("quit", "");
    child.finish();
}

// ---------------------------------------------------------------------------------------
// 7. A client killed with SIGKILL in the middle of traffic.

/// A receiver that owns a slot and consumes arrivals until its stdin closes (or it is
/// killed, which is what the test does to it).
#[test]
fn child_sink() {
    let Some(mut env) = child_env("child_sink") else {
        return;
    };
    let node = Node::connect(&env.socket).expect("connect");
    let area = node.area(1 << 20).expect("area");
    let meta = node.meta_area(1).expect("meta");
    let slot = node
        .slot(&area)
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot");
    env.say("client", node.client_id());
    env.say(
        "ticket",
        ticket_to_text(&slot.ticket_all().expect("ticket")).expect("seed"),
    );
    let mut q = node.queue(0).expect("queue");
    let consumer = std::thread::spawn(move || {
        let deadline = Instant::now() + 2 * WAIT;
        while Instant::now() < deadline {
            let _ = q.wait(Some(Duration::from_millis(50)));
        }
    });
    // Ends when the parent closes stdin.
    while env.next_command().is_some() {}
    drop(consumer);
    drop(slot);
}

/// The streaming sender of the SIGKILL test: messages `0..count`, message `i` of
/// `stream_len(i)` bytes at `i * STREAM_STRIDE`, pattern `STREAM_SEED + i`, tag `i`,
/// each waited for (all must be sent); says `progress` half way through the first
/// stretch, and waits for `go` before the last stretch.
#[test]
fn child_streamer() {
    let Some(mut env) = child_env("child_streamer") else {
        return;
    };
    let node = Node::connect(&env.socket).expect("connect");
    let mut t = node.terminus(0).expect("terminus");
    let ticket = ticket_from_text(&env.hear("ticket")).expect("seed");
    for i in 0..STREAM_COUNT {
        if i == STREAM_GATE {
            env.say("gate", i);
            env.hear("go");
        }
        let data = pattern_at(STREAM_SEED + i, 0, stream_len(i) as usize);
        let opts = SendOptions::new().tag(i).offset(i * STREAM_STRIDE);
        let h = send_bytes(&node, &mut t, &ticket, &opts, &data);
        let status = h.wait(Some(WAIT));
        assert_eq!(status, Status::Sent, "stream message {i}");
        if i + 1 == STREAM_PROGRESS {
            env.say("progress", i + 1);
        }
    }
    env.say("done", STREAM_COUNT);
    env.hear("quit");
}

const STREAM_COUNT: u64 = 48;
const STREAM_PROGRESS: u64 = 16;
const STREAM_GATE: u64 = 32;
const STREAM_STRIDE: u64 = 64 * 1024;
const STREAM_SEED: u64 = 0x57_0000;

fn stream_len(i: u64) -> u64 {
    STREAM_STRIDE - 7 * i
}

#[test]
fn a_client_killed_mid_traffic_fails_only_what_depends_on_it() {
    let engine = start_engine();
    let node = Node::connect(engine.socket_path()).expect("connect");
    let inbox = node.area(STREAM_COUNT * STREAM_STRIDE).expect("inbox");
    let meta = node.meta_area(1).expect("meta");
    let slot = node
        .slot(&inbox)
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot");
    let mut q = node.queue(0).expect("queue");
    let mut t = node.terminus(0).expect("terminus");
    let src = node.area(1 << 20).expect("send area");
    src.write(0, &pattern_at(0xDEAD, 0, 64 * 1024))
        .expect("fill");

    let mut sink = Proc::spawn("child_sink", engine.socket_path());
    let [sink_client] = numbers::<1>(&sink.expect("client", WAIT));
    let to_sink = ticket_from_text(&sink.expect("ticket", WAIT)).expect("seed");
    let mut streamer = Proc::spawn("child_streamer", engine.socket_path());
    tell_ticket(&mut streamer, &slot.ticket_all().expect("ticket"));

    // Traffic to the sink flows while it lives.
    for i in 0..8u64 {
        let h = t
            .send(&to_sink, &SendOptions::new().tag(i), Data::Inline(&[7; 64]))
            .expect("send");
        assert_eq!(h.wait(Some(WAIT)), Status::Sent);
    }
    let stats = node.stats().expect("stats");
    assert!(
        stats
            .slots
            .iter()
            .any(|s| u64::from(s.owner) == sink_client),
        "the sink owns a slot: {stats:?}"
    );
    assert!(
        stats
            .ports
            .iter()
            .any(|p| u64::from(p.client) == sink_client),
        "the sink has a port: {stats:?}"
    );
    streamer.expect("progress", WAIT);

    // Kill the sink with sends to it in flight (1 MiB each: four packets, one per turn).
    let mut in_flight = Vec::new();
    for i in 0..60u64 {
        match t.send(
            &to_sink,
            // Entry named: `MetaIndex::Auto` would refuse a second long message in
            // flight on the ticket's one entry before the terminus fills.
            &SendOptions::new().tag(100 + i).entry(0),
            Data::Gather(&[src.span(0, 1 << 20)]),
        ) {
            Ok(h) => in_flight.push(h),
            Err(SendError::Full) => break,
            Err(e) => panic!("send: {e}"),
        }
    }
    let status = sink.kill();
    assert!(!status.success(), "the sink died: {status}");
    let mut racing_sent = 0;
    for h in &in_flight {
        let s = h.wait(Some(WAIT));
        assert!(
            s == Status::Sent || s == Status::Failed(RejectReason::PeerDown),
            "a send racing the death ends sent or peer-down, not {s:?}"
        );
        racing_sent += usize::from(s == Status::Sent);
    }
    // Once the engine notices, every send to the dead client fails with PeerDown.
    let deadline = Instant::now() + WAIT;
    let mut probes_sent = 0;
    loop {
        let h = t
            .send(&to_sink, &SendOptions::new(), Data::Inline(b"anyone?"))
            .expect("send");
        match h.wait(Some(WAIT)) {
            Status::Failed(RejectReason::PeerDown) => break,
            Status::Sent if Instant::now() < deadline => {
                probes_sent += 1;
                std::thread::sleep(Duration::from_millis(5))
            }
            other => panic!("a send to the killed client ended {other:?}"),
        }
    }
    eprintln!(
        "sigkill: {} sends in flight at the kill, {racing_sent} of them delivered; \
         {probes_sent} probes delivered before the engine noticed",
        in_flight.len()
    );
    for _ in 0..8 {
        let h = t
            .send(
                &to_sink,
                &SendOptions::new(),
                Data::Gather(&[src.span(0, 300 * 1024)]),
            )
            .expect("send");
        assert_eq!(h.wait(Some(WAIT)), Status::Failed(RejectReason::PeerDown));
    }
    let stats = node.stats().expect("stats");
    assert!(
        !stats
            .slots
            .iter()
            .any(|s| u64::from(s.owner) == sink_client),
        "no slot of the dead client is left: {stats:?}"
    );
    assert!(
        !stats
            .ports
            .iter()
            .any(|p| u64::from(p.client) == sink_client),
        "the dead client's port is gone: {stats:?}"
    );

    // The streamer was never disturbed: let it finish, then check all it sent.
    assert_eq!(streamer.expect("gate", WAIT), STREAM_GATE.to_string());
    streamer.tell("go", "");
    assert_eq!(streamer.expect("done", WAIT), STREAM_COUNT.to_string());
    streamer.tell("quit", "");
    streamer.finish();
    for i in 0..STREAM_COUNT {
        let Some(n) = q.wait(Some(WAIT)).expect("wait") else {
            panic!("stream message {i} never arrived")
        };
        assert_eq!((n.kind, n.word), (NotificationKind::Message, i));
        let got = inbox
            .read_vec(i * STREAM_STRIDE, stream_len(i) as usize)
            .expect("read");
        assert!(
            got == pattern_at(STREAM_SEED + i, 0, stream_len(i) as usize),
            "stream message {i} byte-exact"
        );
    }
    assert_eq!(q.poll(), None);
}
