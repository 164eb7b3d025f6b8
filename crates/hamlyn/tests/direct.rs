//! Direct slots (docs/ARCHITECTURE.md, "Direct slots") against a real engine.
//!
//! The behavioural tests run twice, through the engine (`Mode::Mediated`: a terminus,
//! the engine deposits) and directly (`Mode::Direct`: a `danger_direct` slot, the
//! sender's library deposits), and must observe the same thing both times: data in
//! place, metadata entries, packet counting of split groups, fast mode, notifications
//! field for field, client-side refusals. Then what only direct slots have: the
//! engine's check before a mapping, what revoke and rekey do (and do not do) to it, a
//! group mixing both kinds of sender, event-loop wakeups, and a child process depositing
//! into its parent's slot while the parent sleeps on a futex.

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use common::{child_env, numbers, pattern_at, spans, Proc, WAIT};
use hamlyn::seed::{ticket_from_text, ticket_to_text};
use hamlyn::{
    Area, Data, DirectTarget, Error, MetaArea, Node, NodeId, Notification, NotificationKind,
    NotifyQueue, SegmentError, SendError, SendOptions, Slot, SlotPerms, Status, Ticket, MAX_INLINE,
};
use hamlyn_wire::control::ControlErrorCode;

const T: Option<Duration> = Some(WAIT);

/// How a test's senders reach the receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// A terminus; the engine checks, deposits, counts and notifies.
    Mediated,
    /// A `danger_direct` slot; the sender's library does it all.
    Direct,
}

const MODES: [Mode; 2] = [Mode::Mediated, Mode::Direct];

/// Runs `test` in both modes and insists both observed the same thing.
fn same_in_both_modes<O: PartialEq + std::fmt::Debug>(test: impl Fn(Mode) -> O) -> O {
    let [mediated, direct] = MODES.map(&test);
    assert_eq!(
        mediated, direct,
        "mediated and direct slots must behave alike"
    );
    direct
}

/// A receiving client: an area, its metadata entries, a slot reporting to queue 0.
struct Receiver {
    node: Node,
    area: Area,
    meta: Option<MetaArea>,
    slot: Slot,
    queue: NotifyQueue,
}

/// A receiver with a slot over `len` bytes and `entries` entries (none: a fast slot);
/// the slot is `danger_direct` in direct mode only.
fn receiver(mode: Mode, len: u64, entries: Option<u32>) -> Receiver {
    let node = Node::embedded().expect("engine");
    let area = node.area(len).expect("area");
    let meta = entries.map(|n| node.meta_area(n).expect("meta area"));
    let mut b = node.slot(&area).queue(0);
    b = match &meta {
        Some(m) => b.meta(m),
        None => b.fast(),
    };
    if mode == Mode::Direct {
        b = b.danger_direct();
    }
    let slot = b.create().expect("slot");
    let queue = node.queue(0).expect("queue");
    Receiver {
        node,
        area,
        meta,
        slot,
        queue,
    }
}

/// A sending client of the receiver's engine (another `Node`: another client, as a
/// separate process would be).
struct Sender {
    node: Node,
    mode: Mode,
    terminus: hamlyn::Terminus,
}

impl Sender {
    fn new(to: &Node, mode: Mode) -> Sender {
        let node = Node::connect(to.socket_path()).expect("second client");
        let terminus = node.terminus(0).expect("terminus");
        Sender {
            node,
            mode,
            terminus,
        }
    }

    /// Sends `data` and returns once it is in place (mediated: the engine finished the
    /// request). Inline up to 128 bytes, otherwise three gather spans of a fresh area of
    /// this sender, in both modes.
    fn send(
        &mut self,
        ticket: &Ticket,
        opts: &SendOptions<'_>,
        data: &[u8],
    ) -> Result<(), SendError> {
        let area;
        let pieces;
        let data = if data.len() <= MAX_INLINE {
            Data::Inline(data)
        } else {
            area = self.node.area(data.len() as u64).expect("send area");
            area.write(0, data).expect("fill");
            pieces = spans(&area, 0, data.len() as u64);
            Data::Gather(&pieces)
        };
        match self.mode {
            Mode::Mediated => {
                let h = self.terminus.send(ticket, opts, data)?;
                assert_eq!(h.wait(T), Status::Sent);
                Ok(())
            }
            Mode::Direct => self.open(ticket).send(opts, data),
        }
    }

    fn open(&self, ticket: &Ticket) -> DirectTarget {
        self.node.open_direct(ticket).expect("open_direct")
    }
}

/// A notification with what differs between engines taken out (the node ids: every test
/// starts its own engine).
fn shape(n: &Notification, receiver: NodeId) -> Notification {
    assert_eq!(
        n.src_node, receiver,
        "intra-node messages come from this node"
    );
    let mut shaped = *n;
    shaped.src_node = NodeId(0);
    shaped
}

#[test]
fn a_tagged_single_packet_write_lands_and_is_notified() {
    let seen = same_in_both_modes(|mode| {
        let mut r = receiver(mode, 4096, Some(4));
        let mut s = Sender::new(&r.node, mode);
        let t = r.slot.ticket(1024..2048, 1..3).expect("ticket");
        let opts = SendOptions::new()
            .offset(8)
            .meta(b"hdr")
            .tag(0x7A6)
            .entry(1);
        s.send(&t, &opts, b"hello, direct").expect("send");
        let n = r.queue.wait(T).expect("wait").expect("notified");
        assert_eq!(
            r.area.read_vec(1024 + 8, 13).expect("read"),
            b"hello, direct"
        );
        assert!(r.queue.poll().is_none(), "one notification per message");
        let meta = r.meta.as_ref().expect("entries");
        assert_eq!(meta.metadata(2).expect("entry"), b"hdr");
        (shape(&n, r.node.id()), n.slot == r.slot.id())
    });
    let (n, right_slot) = seen;
    assert!(right_slot);
    assert_eq!(n.kind, NotificationKind::Message);
    assert_eq!((n.meta_index, n.word, n.len), (Some(2), 0x7A6, 13));
}

#[test]
fn a_large_message_is_several_packets_counted_back_to_zero() {
    // 600 KiB: three packets of the engine's 256 KiB, three of a direct sender's.
    const LEN: usize = 600 * 1024;
    let seen = same_in_both_modes(|mode| {
        let mut r = receiver(mode, LEN as u64 + 4096, Some(1));
        let mut s = Sender::new(&r.node, mode);
        let t = r.slot.ticket_all().expect("ticket");
        let data = pattern_at(0x1A26E, 0, LEN);
        s.send(&t, &SendOptions::new().offset(100).tag(5), &data)
            .expect("send");
        let n = r.queue.wait(T).expect("wait").expect("notified");
        assert!(
            r.area.read_vec(100, LEN).expect("read") == data,
            "byte-exact"
        );
        let e = r.meta.as_ref().expect("entries").entry(0).expect("entry");
        (
            shape(&n, r.node.id()),
            e.accumulator.get(),
            e.completed.get(),
        )
    });
    let (n, acc, completed) = seen;
    assert_eq!((acc, completed), (0, 1));
    assert_eq!(
        n.len as usize, LEN,
        "the whole message, not its last packet"
    );
}

#[test]
fn a_group_of_three_senders_notifies_once_after_the_last() {
    let seen = same_in_both_modes(|mode| {
        let mut r = receiver(mode, 3 * 4096, Some(2));
        let whole = r.slot.ticket(0..3000, 1..2).expect("ticket");
        let parts = whole.split_sizes(&[1000, 1500, 500]).expect("split");
        let data = pattern_at(0x6209, 0, 3000);
        // Two members send at once from two threads (two clients), the third later.
        std::thread::scope(|sc| {
            for (i, part) in parts[..2].iter().enumerate() {
                let (node, data) = (&r.node, &data);
                sc.spawn(move || {
                    let mut s = Sender::new(node, mode);
                    let bytes = &data[part.offset as usize..(part.offset + part.len) as usize];
                    let meta = format!("member {i}");
                    let opts = SendOptions::new().tag(i as u64).meta(meta.as_bytes());
                    s.send(part, &opts, bytes).expect("member sends");
                });
            }
        });
        // Both are in place and counted: a proper subset of the group never notifies.
        assert_eq!(
            r.queue.wait(Some(Duration::from_millis(50))).expect("wait"),
            None,
            "no notification before the last member"
        );
        let e = r.meta.as_ref().expect("entries").entry(1).expect("entry");
        assert_ne!(e.accumulator.get(), 0, "the group is still counting");
        let mut last = Sender::new(&r.node, mode);
        let p = &parts[2];
        last.send(p, &SendOptions::new().tag(2), &data[p.offset as usize..])
            .expect("last member sends");
        let n = r.queue.wait(T).expect("wait").expect("the group completes");
        assert!(r.queue.poll().is_none(), "exactly one notification");
        assert!(r.area.read_vec(0, 3000).expect("read") == data);
        let e = r.meta.as_ref().expect("entries").entry(1).expect("entry");
        (
            shape(&n, r.node.id()),
            e.accumulator.get(),
            e.completed.get(),
        )
    });
    let (n, acc, completed) = seen;
    assert_eq!(
        (n.kind, n.meta_index, n.word),
        (NotificationKind::Message, Some(1), 2)
    );
    assert_eq!((acc, completed), (0, 1));
}

#[test]
fn metadata_lands_zero_padded_with_its_length_and_source() {
    let seen = same_in_both_modes(|mode| {
        let mut r = receiver(mode, 4096, Some(2));
        let mut s = Sender::new(&r.node, mode);
        let t = r.slot.ticket_all().expect("ticket");
        let long: Vec<u8> = (1..=60).collect();
        s.send(&t, &SendOptions::new().meta(&long).entry(1), b"a")
            .expect("send");
        r.queue.wait(T).expect("wait").expect("first");
        let meta = r.meta.as_ref().expect("entries");
        assert_eq!(meta.metadata(1).expect("entry"), long);
        s.send(&t, &SendOptions::new().meta(b"short").entry(1), b"b")
            .expect("send");
        r.queue.wait(T).expect("wait").expect("second");
        let e = meta.entry(1).expect("entry");
        assert_eq!(e.src_node.get(), r.node.id().0);
        assert_eq!(
            meta.entry(0).expect("entry 0"),
            hamlyn::MetaEntry::read(&[0; 128]).expect("zero"),
            "other entries untouched"
        );
        (
            e.user,
            e.meta_len.get(),
            e.accumulator.get(),
            e.completed.get(),
        )
    });
    let (user, meta_len, acc, completed) = seen;
    assert_eq!(&user[..5], b"short");
    assert!(user[5..].iter().all(|&b| b == 0), "no stale tail");
    assert_eq!((meta_len, acc, completed), (5, 0, 2));
}

#[test]
fn fast_mode_carries_its_word_in_the_notification() {
    let seen = same_in_both_modes(|mode| {
        let mut r = receiver(mode, 4096, None);
        let mut s = Sender::new(&r.node, mode);
        let t = r.slot.ticket(64..128, 0..0).expect("ticket");
        s.send(
            &t,
            &SendOptions::new().tag(0xFA57_0000_0000_0001),
            b"12345678",
        )
        .expect("send");
        let n = r.queue.wait(T).expect("wait").expect("notified");
        assert_eq!(r.area.read_vec(64, 8).expect("read"), b"12345678");
        // Metadata bytes do not fit fast mode, in either mode, before anything is sent.
        assert_eq!(
            s.send(&t, &SendOptions::new().meta(b"m"), b"x"),
            Err(SendError::Ticket(SegmentError::FastTooBig))
        );
        shape(&n, r.node.id())
    });
    assert_eq!(seen.kind, NotificationKind::Fast);
    assert_eq!(
        (seen.meta_index, seen.word, seen.len),
        (None, 0xFA57_0000_0000_0001, 8)
    );
}

#[test]
fn sends_outside_the_ticket_are_refused_by_the_sender_and_write_nothing() {
    let (range, entry, meta) = same_in_both_modes(|mode| {
        let mut r = receiver(mode, 4096, Some(2));
        let mut s = Sender::new(&r.node, mode);
        let t = r.slot.ticket(1000..1100, 0..1).expect("ticket");
        let got = (
            s.send(&t, &SendOptions::new().offset(95), b"123456"),
            s.send(&t, &SendOptions::new().entry(1), b"x"),
            s.send(&t, &SendOptions::new().meta(&[0; 61]), b"x"),
        );
        assert!(r
            .area
            .read_vec(0, 4096)
            .expect("read")
            .iter()
            .all(|&b| b == 0));
        assert!(r.queue.poll().is_none());
        // And a message that asks for no notification still lands.
        s.send(&t, &SendOptions::new().notify(false), b"quiet")
            .expect("send");
        assert_eq!(r.area.read_vec(1000, 5).expect("read"), b"quiet");
        assert_eq!(
            r.queue.wait(Some(Duration::from_millis(20))).expect("wait"),
            None
        );
        got
    });
    assert!(matches!(
        range,
        Err(SendError::Ticket(SegmentError::OutsideTicket {
            offset: 95,
            ..
        }))
    ));
    assert_eq!(
        entry,
        Err(SendError::Ticket(SegmentError::MetaIndexOutsideTicket(1)))
    );
    assert_eq!(meta, Err(SendError::Ticket(SegmentError::MetaTooLong(61))));
}

fn refusal(e: Error) -> ControlErrorCode {
    match e {
        Error::Refused {
            code: Some(code), ..
        } => code,
        other => panic!("expected a typed refusal, got {other:?}"),
    }
}

#[test]
fn the_engine_checks_before_it_maps() {
    let r = receiver(Mode::Direct, 4096, Some(2));
    let other = Node::connect(r.node.socket_path()).expect("client");
    let t = r.slot.ticket_all().expect("ticket");
    let wrong_key = Ticket {
        key: t.key ^ 1,
        ..t
    };
    assert_eq!(
        refusal(other.open_direct(&wrong_key).expect_err("wrong key")),
        ControlErrorCode::BadKey
    );
    let stale = Ticket {
        incarnation: t.incarnation.wrapping_add(1),
        ..t
    };
    assert_eq!(
        refusal(other.open_direct(&stale).expect_err("stale")),
        ControlErrorCode::WrongNode
    );
    let elsewhere = Ticket {
        node: NodeId(t.node.0 + 1),
        ..t
    };
    assert!(matches!(
        other.open_direct(&elsewhere),
        Err(Error::NotLocal { .. })
    ));
    // A slot made without danger_direct is never direct, whatever the ticket.
    let plain_area = r.node.area(4096).expect("area");
    let plain = r.node.slot(&plain_area).fast().create().expect("slot");
    let pt = plain.ticket(0..64, 0..0).expect("ticket");
    assert_eq!(
        refusal(other.open_direct(&pt).expect_err("not direct")),
        ControlErrorCode::NotDirect
    );
    // Paranoid slots cannot be made direct.
    let meta = r.node.meta_area(1).expect("meta");
    assert!(matches!(
        r.node
            .slot(&plain_area)
            .meta(&meta)
            .paranoid()
            .danger_direct()
            .create(),
        Err(Error::InvalidArgument(_))
    ));
    // Write-inhibited and read-only direct slots are not opened for writing.
    r.slot.inhibit(true).expect("inhibit");
    assert_eq!(
        refusal(other.open_direct(&t).expect_err("inhibited")),
        ControlErrorCode::Inhibited
    );
    r.slot.inhibit(false).expect("lift");
    let ro = r
        .node
        .slot(&plain_area)
        .fast()
        .perms(SlotPerms {
            write: false,
            read: true,
            atomic: false,
        })
        .danger_direct()
        .create()
        .expect("slot");
    let mut rt = ro.ticket(0..64, 0..0).expect("ticket");
    rt.flags = rt.flags | hamlyn::TicketFlags::WRITE;
    assert_eq!(
        refusal(other.open_direct(&rt).expect_err("read-only")),
        ControlErrorCode::NotDirect
    );
    assert!(other.open_direct(&t).is_ok());
}

#[test]
fn revoke_and_rekey_stop_new_mappings_not_old_ones() {
    let mut r = receiver(Mode::Direct, 4096, Some(1));
    let sender = Node::connect(r.node.socket_path()).expect("client");
    let old = r.slot.ticket_all().expect("ticket");
    let open = sender.open_direct(&old).expect("open");

    r.slot.revoke().expect("revoke");
    assert_eq!(
        refusal(sender.open_direct(&old).expect_err("revoked")),
        ControlErrorCode::Revoked
    );
    r.slot.rekey().expect("rekey");
    assert_eq!(
        refusal(sender.open_direct(&old).expect_err("old key")),
        ControlErrorCode::BadKey
    );
    let new = r.slot.ticket_all().expect("new ticket");
    sender
        .open_direct(&new)
        .expect("the new key opens")
        .send(&SendOptions::new().tag(1), Data::Inline(b"new"))
        .expect("send");
    assert_eq!(r.queue.wait(T).expect("wait").map(|n| n.word), Some(1));
    // What a direct slot gives up: the mapping granted before still writes, and the
    // mediated path with the same old ticket is refused.
    open.send(&SendOptions::new().tag(2).offset(8), Data::Inline(b"old"))
        .expect("an open mapping outlives revoke and rekey");
    assert_eq!(r.queue.wait(T).expect("wait").map(|n| n.word), Some(2));
    assert_eq!(r.area.read_vec(8, 3).expect("read"), b"old");
    let mut t = sender.terminus(0).expect("terminus");
    let h = t
        .send(&old, &SendOptions::new(), Data::Inline(b"x"))
        .expect("queued");
    assert_eq!(h.wait(T), Status::Failed(hamlyn::RejectReason::BadKey));
    // The mapping does not need the node it came from.
    drop(t);
    drop(sender);
    open.send(&SendOptions::new().tag(3), Data::Inline(b"still"))
        .expect("send");
    assert_eq!(r.queue.wait(T).expect("wait").map(|n| n.word), Some(3));
}

#[test]
fn a_group_may_mix_mediated_and_direct_members() {
    let mut r = receiver(Mode::Direct, 4096, Some(1));
    let parts = r
        .slot
        .ticket(0..200, 0..1)
        .expect("ticket")
        .split(2)
        .expect("split");
    let mut mediated = Sender::new(&r.node, Mode::Mediated);
    let direct = Sender::new(&r.node, Mode::Direct);
    mediated
        .send(&parts[0], &SendOptions::new(), &[1; 100])
        .expect("mediated member");
    assert_eq!(
        r.queue.wait(Some(Duration::from_millis(20))).expect("wait"),
        None
    );
    direct
        .open(&parts[1])
        .send(&SendOptions::new().tag(9), Data::Inline(&[2; 100]))
        .expect("direct member");
    let n = r.queue.wait(T).expect("wait").expect("the group completes");
    assert_eq!((n.word, n.meta_index), (9, Some(0)));
    assert!(r.queue.poll().is_none());
    let got = r.area.read_vec(0, 200).expect("read");
    assert!(got[..100].iter().all(|&b| b == 1) && got[100..].iter().all(|&b| b == 2));
}

#[test]
fn a_direct_send_wakes_an_event_loop() {
    let r = receiver(Mode::Direct, 4096, Some(1));
    let sender = Node::connect(r.node.socket_path()).expect("client");
    let target = sender
        .open_direct(&r.slot.ticket_all().expect("ticket"))
        .expect("open");
    assert!(!r.queue.arm(), "nothing waiting yet");
    target
        .send(&SendOptions::new(), Data::Inline(b"poke"))
        .expect("send");
    let fd = r.node.event_fd();
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let ready = rustix::event::poll(
        &mut fds,
        Some(&rustix::event::Timespec {
            tv_sec: 10,
            tv_nsec: 0,
        }),
    )
    .expect("poll");
    assert_eq!(ready, 1, "the port's eventfd became readable");
    assert_eq!(r.node.drain_event_fd().expect("drain"), 1);
}

// ---------------------------------------------------------------------------------------
// Two processes.

/// Opens the parent's direct slot from another process, and on `go` deposits one message
/// with metadata and a tag into entry 0, then a large one (gathered) into entry 1.
#[test]
fn child_direct_sender() {
    let Some(mut env) = child_env("child_direct_sender") else {
        return;
    };
    let node = Node::connect(&env.socket).expect("connect");
    let ticket = ticket_from_text(&env.hear("ticket")).expect("seed");
    let target = node.open_direct(&ticket).expect("open_direct");
    env.say("ready", std::process::id());
    let [tag] = numbers::<1>(&env.hear("go"));
    target
        .send(
            &SendOptions::new().tag(tag).meta(b"from the child"),
            Data::Inline(b"deposited by another process"),
        )
        .expect("send");
    let big = pattern_at(tag, 0, 100_000);
    let area = node.area(big.len() as u64).expect("area");
    area.write(0, &big).expect("fill");
    target
        .send(
            &SendOptions::new().tag(tag + 1).offset(4096).entry(1),
            Data::Gather(&spans(&area, 0, big.len() as u64)),
        )
        .expect("send");
    env.say("sent", 2);
}

/// The state letter of thread `tid` of this process (`S`: asleep in the kernel).
fn thread_state(tid: &str) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // "tid (comm) S ...": the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[test]
fn a_child_process_deposits_into_its_parents_slot_and_wakes_it() {
    let r = receiver(Mode::Direct, 128 * 1024, Some(2));
    let Receiver {
        node,
        area,
        meta,
        slot,
        mut queue,
    } = r;
    let mut child = Proc::spawn("child_direct_sender", node.socket_path());
    child.tell(
        "ticket",
        ticket_to_text(&slot.ticket_all().expect("ticket")).expect("seed"),
    );
    child.expect("ready", WAIT);
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        // This thread's id, for the parent to watch it fall asleep.
        let me = std::fs::read_link("/proc/thread-self").expect("thread-self");
        let tid = me
            .file_name()
            .and_then(|s| s.to_str())
            .expect("tid")
            .to_string();
        tx.send(tid).expect("parent alive");
        let first = queue.wait(T).expect("wait");
        let second = queue.wait(T).expect("wait");
        (first, second)
    });
    let tid = rx.recv().expect("waiter's tid");
    // The waiter spins briefly, then sleeps on the queue's futex; only then go.
    let deadline = Instant::now() + WAIT;
    while thread_state(&tid) != Some('S') {
        assert!(Instant::now() < deadline, "the waiter never fell asleep");
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
    assert!(!waiter.is_finished(), "nothing came before the child sends");
    // Still asleep: a sleeping wait wakes every 100 ms to see whether the engine is
    // gone, and a single look may fall on that moment, so the state is looked at until
    // it says asleep (a waiter that spins never does).
    let deadline = Instant::now() + Duration::from_secs(1);
    while thread_state(&tid) != Some('S') {
        assert!(
            Instant::now() < deadline,
            "still asleep before the child sends"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    child.tell("go", 77);
    let (first, second) = waiter.join().expect("waiter");
    assert_eq!(child.expect("sent", WAIT), "2");
    let first = first.expect("woken by the child's post");
    assert_eq!(first.kind, NotificationKind::Message);
    assert_eq!(
        (first.slot, first.word, first.meta_index),
        (slot.id(), 77, Some(0))
    );
    assert_eq!(first.src_node, node.id());
    assert_eq!(
        area.read_vec(0, 28).expect("read"),
        b"deposited by another process"
    );
    let meta = meta.expect("entries");
    assert_eq!(meta.metadata(0).expect("entry"), b"from the child");
    let second = second.expect("the large one");
    assert_eq!((second.word, second.len), (78, 100_000));
    assert!(area.read_vec(4096, 100_000).expect("read") == pattern_at(77, 0, 100_000));
    assert_eq!(second.meta_index, Some(1));
    for i in 0..2 {
        let e = meta.entry(i).expect("entry");
        assert_eq!((e.accumulator.get(), e.completed.get()), (0, 1));
    }
    child.finish();
}
