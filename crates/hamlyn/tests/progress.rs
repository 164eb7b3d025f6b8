//! Progress by the waiting thread (issue 14): threads of the process hosting an embedded
//! engine run its turns while they wait; the engine's thread lets go meanwhile and takes
//! over when they stop; other processes' clients never depend on a host thread that
//! stopped driving; a daemon is never driven. Child processes are this test binary
//! re-executed (see `multiprocess.rs`). Every wait is bounded; nothing asserts on timing.

#[allow(dead_code, reason = "the helpers are shared by several test files")]
mod common;

use std::time::Duration;

use common::{child_env, pattern_at, send_bytes, Proc, WAIT};
use hamlyn::seed::{ticket_from_text, ticket_to_text};
use hamlyn::{Node, NodeOptions, NotificationKind, SendOptions, Status};
use hamlyn_engine::{DriveStats, Driver, EngineConfig, EngineHandle};
use hamlyn_shm::sync::{AtomicBool, Ordering};

/// An embedded engine that waiting threads drive (whatever the environment says), with
/// small intra-node packets so that a large message takes many turns.
fn driven_engine() -> EngineHandle {
    EngineHandle::start(EngineConfig {
        driven: true,
        intra_mtu: 4096,
        ..EngineConfig::embedded()
    })
    .expect("engine")
}

/// An engine that waiting threads drive and whose thread sleeps up to a minute when
/// idle: a push that nobody takes in and nobody rings for fails a test's 30 s wait
/// rather than being served at the end of a short sleep.
fn sleepy_driven_engine() -> EngineHandle {
    EngineHandle::start(EngineConfig {
        driven: true,
        max_sleep: Duration::from_secs(60),
        ..EngineConfig::embedded()
    })
    .expect("engine")
}

/// A client of a driven engine in this process that sends 8-byte writes, tagged with
/// their round, to its own 64-byte slot, which reports to its queue 0. The engine is
/// dropped last.
struct ToItself {
    t: hamlyn::Terminus,
    q: hamlyn::NotifyQueue,
    ticket: hamlyn::Ticket,
    _slot: (hamlyn::MetaArea, hamlyn::Slot),
    _inbox: hamlyn::Area,
    _host: Node,
    engine: EngineHandle,
}

impl ToItself {
    fn new() -> ToItself {
        let engine = driven_engine();
        let host = Node::connect(engine.socket_path()).expect("connect");
        let inbox = host.area(64).expect("area");
        let (meta, slot) = slot_on(&host, &inbox, 0);
        let ticket = slot.ticket_all().expect("ticket");
        ToItself {
            t: host.terminus(0).expect("terminus"),
            q: host.queue(0).expect("queue"),
            ticket,
            _slot: (meta, slot),
            _inbox: inbox,
            _host: host,
            engine,
        }
    }

    /// Sends round `round`'s write.
    fn send(&mut self, round: u64) -> hamlyn::SendHandle {
        self.t
            .send(
                &self.ticket,
                &SendOptions::new().tag(round),
                hamlyn::Data::Inline(&round.to_le_bytes()),
            )
            .expect("send")
    }

    /// Waits for round `round`'s notification and checks it is that round's 8 bytes.
    fn arrives(&mut self, round: u64, context: &str) {
        let n = self.q.wait(Some(WAIT)).expect("wait").expect("arrives");
        assert_eq!((n.word, n.len), (round, 8), "{context}");
    }
}

fn stats(engine: &EngineHandle) -> DriveStats {
    Driver::for_socket(engine.socket_path())
        .expect("the engine is drivable")
        .stats()
        .expect("the engine runs")
}

/// A receiver in a child process: a slot of `len` bytes; for each `expect SEED LEN` it
/// waits for one message (through its own engine connection: a child never drives) and
/// reports whether the bytes are right; each `self LEN` sends LEN bytes to itself and
/// reports when they arrived.
#[test]
fn child_receiver() {
    let Some(mut env) = child_env("child_receiver") else {
        return;
    };
    let node = Node::connect(&env.socket).expect("connect");
    let inbox = node.area(1 << 20).expect("inbox");
    let (_meta, slot) = slot_on(&node, &inbox, 0);
    let ticket = slot.ticket_all().expect("ticket");
    env.say("ticket", ticket_to_text(&ticket).expect("seed"));
    let mut q = node.queue(0).expect("queue");
    let mut t = node.terminus(0).expect("terminus");
    while let Some((cmd, args)) = env.next_command() {
        let [seed, len] = common::numbers::<2>(&args);
        if cmd == "self" {
            let data = pattern_at(seed, 0, len as usize);
            let h = send_bytes(&node, &mut t, &ticket, &SendOptions::new(), &data);
            assert_eq!(h.wait(Some(WAIT)), Status::Sent);
        }
        let n = q
            .wait(Some(WAIT))
            .expect("wait")
            .expect("a message arrives");
        assert_eq!((n.kind, n.len), (NotificationKind::Message, len as u32));
        let right =
            inbox.read_vec(0, len as usize).expect("read") == pattern_at(seed, 0, len as usize);
        env.say("got", right);
    }
}

/// Several threads of the hosting process wait at once, each for its own messages, each
/// driving the engine: every message arrives, in order, and the turns were indeed run by
/// waiting threads, with the engine's thread letting go for them.
#[test]
fn many_threads_waiting_at_once_all_get_their_messages() {
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 300;
    let engine = driven_engine();
    let host = Node::connect(engine.socket_path()).expect("connect");
    let sender = Node::connect(engine.socket_path()).expect("second client");
    let mut waiters = Vec::new();
    let mut tickets = Vec::new();
    for i in 0..THREADS {
        let inbox = host.area(64).expect("area");
        let (meta, slot) = slot_on(&host, &inbox, i as u16);
        tickets.push(slot.ticket_all().expect("ticket"));
        let mut q = host.queue(i as u16).expect("queue");
        waiters.push(std::thread::spawn(move || {
            let _slot = (meta, slot);
            for round in 0..ROUNDS {
                let n = q.wait(Some(WAIT)).expect("wait").expect("arrives");
                assert_eq!((n.word, n.len), (round, 8), "waiter {i}, in order");
            }
            // The last write is the last one to land (each send was waited for).
            assert_eq!(
                inbox.read_vec(0, 8).expect("read"),
                (i * ROUNDS + ROUNDS - 1).to_le_bytes()
            );
        }));
    }
    // One sender thread, itself waiting (and so driving) on each send.
    let mut t = sender.terminus(0).expect("terminus");
    for round in 0..ROUNDS {
        for (i, ticket) in tickets.iter().enumerate() {
            let data = (i as u64 * ROUNDS + round).to_le_bytes();
            let h = t
                .send(
                    ticket,
                    &SendOptions::new().tag(round),
                    hamlyn::Data::Inline(&data),
                )
                .expect("send");
            assert_eq!(h.wait(Some(WAIT)), Status::Sent);
        }
    }
    for w in waiters {
        w.join().expect("waiter");
    }
    let s = stats(&engine);
    assert!(s.turns_by_waiters > 0, "waiting threads ran turns: {s:?}");
}

/// Two threads of the hosting process wait for each other, as an RPC client and its
/// server do: each sends the round number to the other's slot and waits on its queue
/// for the answer. Both wait at once (one for the answer, one for the next round), so
/// both may drive; every round arrives, in order, with the right bytes, whether waiting
/// threads drive the engine or not (`driven` both ways).
fn ping_pong_between_two_host_threads(driven: bool) {
    const ROUNDS: u64 = 2000;
    let engine = EngineHandle::start(EngineConfig {
        driven,
        ..EngineConfig::embedded()
    })
    .expect("engine");
    let ping = Node::connect(engine.socket_path()).expect("connect");
    let pong = Node::connect(engine.socket_path()).expect("second connection");
    let ping_inbox = ping.area(64).expect("area");
    let pong_inbox = pong.area(64).expect("area");
    let (ping_meta, ping_slot) = slot_on(&ping, &ping_inbox, 0);
    let (pong_meta, pong_slot) = slot_on(&pong, &pong_inbox, 0);
    let to_ping = ping_slot.ticket_all().expect("ticket");
    let to_pong = pong_slot.ticket_all().expect("ticket");
    let answerer = std::thread::spawn(move || {
        let _kept = (pong_meta, pong_slot);
        let mut q = pong.queue(0).expect("queue");
        let mut t = pong.terminus(0).expect("terminus");
        for round in 0..ROUNDS {
            let n = q.wait(Some(WAIT)).expect("wait").expect("a round arrives");
            assert_eq!((n.word, n.len), (round, 8), "rounds in order");
            let got = pong_inbox.read_vec(0, 8).expect("read");
            assert_eq!(got, round.to_le_bytes(), "the round's bytes");
            // The answer is sent and not waited for: the next wait drives it if need be.
            t.send(
                &to_ping,
                &SendOptions::new().tag(round),
                hamlyn::Data::Inline(&(!round).to_le_bytes()),
            )
            .expect("answer");
        }
    });
    let mut q = ping.queue(0).expect("queue");
    let mut t = ping.terminus(0).expect("terminus");
    for round in 0..ROUNDS {
        t.send(
            &to_pong,
            &SendOptions::new().tag(round),
            hamlyn::Data::Inline(&round.to_le_bytes()),
        )
        .expect("send");
        let n = q
            .wait(Some(WAIT))
            .expect("wait")
            .expect("the answer arrives");
        assert_eq!((n.word, n.len), (round, 8), "answers in order");
        let got = ping_inbox.read_vec(0, 8).expect("read");
        assert_eq!(got, (!round).to_le_bytes(), "the answer's bytes");
    }
    answerer.join().expect("answerer");
    drop((ping_meta, ping_slot, q, t));
    if driven {
        // Nothing is left to the engine's thread that a waiter took from it: a last
        // message between the two still arrives.
        round_trip(&ping);
    }
}

#[test]
fn two_host_threads_waiting_for_each_other_driven() {
    ping_pong_between_two_host_threads(true);
}

#[test]
fn two_host_threads_waiting_for_each_other_undriven() {
    ping_pong_between_two_host_threads(false);
}

/// A thread of the host pushes a request while the engine's thread sleeps (idle, its
/// doorbells armed): the pushing thread runs the turn that takes it in (`Driver::nudge`)
/// instead of waking the engine's thread, and the message arrives. Bounded: a push
/// that finds the engine's thread awake (it spins a while after work) is repeated after
/// a pause.
#[test]
fn a_push_that_finds_the_engine_asleep_runs_its_own_turn() {
    let mut own = ToItself::new();
    let before = stats(&own.engine);
    let mut nudged = false;
    for round in 0..200u64 {
        std::thread::sleep(Duration::from_millis(10));
        own.send(round);
        own.arrives(round, "");
        if stats(&own.engine).turns_by_senders > before.turns_by_senders {
            nudged = true;
            break;
        }
    }
    assert!(nudged, "a push ran its own turn: {:?}", stats(&own.engine));
}

/// A host thread's wait that finds no work leaves the engine after a few turns while
/// every client runs in the host (the next work is another host thread's push, which
/// drives itself), and drives on for its whole budget once a client in another process
/// is attached (that client's push cannot drive, and the waiter's turn takes it in, where
/// a waiter that left made the push wake the engine's thread, and that thread wake the
/// waiter). The waits time out with nothing coming; the difference shows in the turns
/// they ran. Bounded: a wait whose turns found the engine held (its thread serving the
/// child's attach) is repeated.
#[test]
fn a_waiter_drives_on_only_while_a_client_of_another_process_is_attached() {
    let engine = driven_engine();
    let host = Node::connect(engine.socket_path()).expect("connect");
    let budget = u64::from(NodeOptions::default().spin);
    let mut q = host.queue(0).expect("queue");
    // Tries: turns, and glances at the quiet engine (`Drove::Glance`), which a drive
    // counts as half a turn of its budget.
    let tries = |s: DriveStats| s.turns_by_waiters + s.glances_by_waiters;
    let mut turns_of_a_wait = || {
        let before = tries(stats(&engine));
        assert!(q
            .wait(Some(Duration::from_millis(1)))
            .expect("wait")
            .is_none());
        tries(stats(&engine)) - before
    };
    let alone = turns_of_a_wait();
    assert!(
        alone < budget / 4,
        "with only host clients a wait leaves early: {alone} turns"
    );
    let mut child = Proc::spawn("child_receiver", engine.socket_path());
    child.expect("ticket", WAIT);
    let mut most = 0;
    for _ in 0..100 {
        most = most.max(turns_of_a_wait());
        if most >= budget / 2 {
            break;
        }
    }
    assert!(
        most >= budget / 2,
        "with a client in another process a wait drives on: at most {most} turns"
    );
    // And the child's own traffic still flows while host threads wait that way.
    child.tell("self", "91 4096");
    assert_eq!(child.expect("got", WAIT), "true");
    child.finish();
    // The engine forgets the child when its thread sees the hang-up: bounded.
    let mut gone = u64::MAX;
    for _ in 0..1000 {
        gone = turns_of_a_wait();
        if gone < budget / 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        gone < budget / 4,
        "once it is gone, waits leave early again: {gone} turns"
    );
}

/// A push that finds the engine's thread asleep runs the turn that takes, delivers and
/// completes its single-packet message (`Driver::nudge`), and the hand-back that follows
/// runs no turn more: nothing of that message is left for one to find. So a host thread
/// that sends to its own slot, waits for the send and for the notification costs one
/// driven turn per message. A hand-back that ran one more turn whenever the last had
/// work cost two. Bounded: a round whose push found the engine's thread awake (it
/// serves, or waits may drive more turns) is measured again, the fewest turns taken.
#[test]
fn a_pushed_single_packet_message_costs_one_driven_turn() {
    const ROUNDS: u64 = 300;
    let mut own = ToItself::new();
    let mut fewest = u64::MAX;
    for attempt in 0..10u64 {
        let before = stats(&own.engine).turns_by_waiters;
        for round in 0..ROUNDS {
            let h = own.send(round);
            assert_eq!(h.wait(Some(WAIT)), Status::Sent);
            own.arrives(round, &format!("attempt {attempt}, in order"));
        }
        fewest = fewest.min(stats(&own.engine).turns_by_waiters - before);
        if fewest < ROUNDS * 5 / 4 {
            break;
        }
    }
    assert!(
        fewest < ROUNDS * 5 / 4,
        "{ROUNDS} single-packet messages took at least {fewest} driven turns"
    );
}

/// `Node::progress`: a thread that waits by polling memory runs the hosted engine's
/// turns itself (counted as a waiting thread's), and a polled write from a child arrives
/// while it does; with an engine that waiting threads may not drive, it is a no-op.
#[test]
fn a_polling_thread_runs_the_engines_turns_with_progress() {
    let engine = driven_engine();
    let host = Node::connect(engine.socket_path()).expect("connect");
    // A progress that finds the engine's thread serving runs nothing (that thread lets
    // go on its next turn, seeing a driver): bounded, until 100 turns were this thread's.
    let before = stats(&engine).turns_by_waiters;
    let mut calls = 0u64;
    while stats(&engine).turns_by_waiters < before + 100 {
        for _ in 0..100 {
            host.progress();
        }
        calls += 100;
        assert!(calls < 1_000_000, "progress ran the engine's turns");
    }
    // A write from the child's terminus (no notification), polled for on its data.
    let inbox = host.area(4096).expect("area");
    let (_meta, slot) = slot_on(&host, &inbox, 0);
    let ticket = slot.ticket_all().expect("ticket");
    let mut child = Proc::spawn("child_writer", engine.socket_path());
    child.tell("write", ticket_to_text(&ticket).expect("seed"));
    let want = pattern_at(9, 0, 4096);
    let mut polls = 0u64;
    loop {
        host.progress();
        if inbox.read_vec(0, 4096).expect("read") == want {
            break;
        }
        polls += 1;
        assert!(polls < 10_000_000, "the polled write arrived");
        std::thread::yield_now();
    }
    child.finish();
    let undriven = EngineHandle::start(EngineConfig {
        driven: false,
        ..EngineConfig::embedded()
    })
    .expect("engine");
    let other = Node::connect(undriven.socket_path()).expect("connect");
    assert!(!other.progress(), "nothing to drive");
}

/// Two driven engines joined by TCP; node 0's client polls for writes from node 1.
fn polled_over_tcp() -> (EngineHandle, EngineHandle, Node, Node) {
    common::tcp_pair(1, || EngineConfig {
        driven: true,
        ..EngineConfig::embedded()
    })
}

/// An area of `to` with a slot (its metadata area kept alive), a ticket to it, and a
/// terminus of `from` to write there.
fn polled_inbox(
    to: &Node,
    from: &Node,
) -> (
    hamlyn::Area,
    (hamlyn::MetaArea, hamlyn::Slot),
    hamlyn::Ticket,
    hamlyn::Terminus,
) {
    let inbox = to.area(4096).expect("area");
    let (meta, slot) = slot_on(to, &inbox, 0);
    let ticket = slot.ticket_all().expect("ticket");
    let t = from.terminus(0).expect("terminus");
    (inbox, (meta, slot), ticket, t)
}

/// `from` writes `round` (8 bytes, no notification) to `to`; `to`'s thread polls its
/// memory for it, calling `progress` in the loop if `progress` (else sleeping), and the
/// send handle is then waited for. Bounded by `WAIT`.
fn write_and_poll(
    from: &mut hamlyn::Terminus,
    ticket: &hamlyn::Ticket,
    to: &Node,
    inbox: &hamlyn::Area,
    round: u64,
    progress: bool,
) {
    let h = from
        .send(
            ticket,
            &SendOptions::new().notify(false),
            hamlyn::Data::Inline(&round.to_le_bytes()),
        )
        .expect("send");
    let deadline = std::time::Instant::now() + WAIT;
    while inbox.read_vec(0, 8).expect("read") != round.to_le_bytes() {
        assert!(
            std::time::Instant::now() < deadline,
            "round {round} arrived"
        );
        if progress {
            to.progress();
        } else {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    assert_eq!(h.wait(Some(WAIT)), Status::Sent);
}

/// Waits (bounded) until `engine`'s polling leases have all ended and nothing holds the
/// fabric's wake-ups: the engine's thread took over again. Meanwhile `polling` (if any)
/// calls `progress` without pause, else the thread sleeps.
fn leases_end(engine: &EngineHandle, polling: Option<&Node>) -> DriveStats {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let s = stats(engine);
        if s.leases_ended == s.leases && s.fabric_takers == 0 {
            return s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the leases end: {s:?}"
        );
        match polling {
            Some(node) => {
                for _ in 0..100 {
                    node.progress();
                }
            }
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// Over TCP, the `progress` calls of a polling loop share one drive (a lease) that
/// holds the fabric's wake-ups: arrivals are read by the loop's calls, and the engine's
/// thread stays asleep instead of being woken for each (it served again in under an
/// eighth of the rounds: none in runs on the development VM, against 110-156 times in
/// 400 rounds with a drive per call). When the
/// calls stop, the engine's thread ends the lease and takes the fabric back: writes then
/// arrive with nobody polling.
///
/// Bounded: the engine's thread also serves, correctly, when the polling thread is off
/// its CPU for a millisecond or two (a stalled driver, or a lease that lapsed for lack
/// of calls), which a loaded machine may do often; the rounds are run again up to five
/// times and the fewest resumptions asserted on. A drive per call (the breakage this
/// guards) shows in every attempt.
#[test]
fn a_polling_loop_over_tcp_shares_one_drive_and_gives_it_back() {
    const ROUNDS: u64 = 400;
    let (ea, _eb, a, b) = polled_over_tcp();
    let (inbox, _meta, ticket, mut t) = polled_inbox(&a, &b);
    let mut fewest = u64::MAX;
    let mut round = 0;
    for _attempt in 0..5 {
        // A first call starts the lease (the engine's thread may serve until it sees it).
        let leases = stats(&ea).leases;
        a.progress();
        round += 1;
        write_and_poll(&mut t, &ticket, &a, &inbox, round, true);
        let before = stats(&ea);
        assert!(before.leases > leases, "a lease started: {before:?}");
        for _ in 1..ROUNDS {
            round += 1;
            write_and_poll(&mut t, &ticket, &a, &inbox, round, true);
        }
        let during = stats(&ea);
        assert!(
            during.turns_by_waiters > before.turns_by_waiters + ROUNDS / 2,
            "the loop ran the turns: {during:?}"
        );
        fewest = fewest.min(during.engine_thread_resumed - before.engine_thread_resumed);
        if fewest < ROUNDS / 8 {
            break;
        }
    }
    assert!(
        fewest < ROUNDS / 8,
        "the engine's thread served again {fewest} times in {ROUNDS} rounds (the fewest)"
    );
    let after = leases_end(&ea, None);
    assert!(after.leases >= 1);
    // Nobody polls now: the engine's thread takes the writes in.
    for round in round + 1..round + 6 {
        write_and_poll(&mut t, &ticket, &a, &inbox, round, false);
    }
    assert_eq!(stats(&ea).leases, after.leases, "no lease without calls");
}

/// Over TCP, the waits of a ping-pong share one lease: each side's wait holds it, and a
/// wait's end hands nothing back, so a few leases serve hundreds of rounds (a lease per
/// wait took and gave back the fabric's wake-ups each time); the pushes between the
/// waits find the engine's thread asleep under the lease and run their own turns.
///
/// Each side is a thread of its own that waits right after it sent, so that its wait
/// begins before the other side can have answered: there is something to wait for, and
/// the wait drives. One thread that sent to the other side and only then waited for that
/// message raced the receiving engine's thread, awake after the setup: on a fast machine
/// that thread took every message in before the wait looked, nothing was ever waited
/// for, and no lease began (CI, 2026-11-26).
///
/// Bounded: a lease also ends, correctly, when one side's thread is off its CPU long
/// enough for the other side's wait to use up its budget and sleep, which a loaded
/// machine may do often; the rounds are run again (each time after the leases so far
/// ended) up to five times, and the fewest leases are asserted on. A lease per wait
/// (the breakage this guards) shows in every attempt.
#[test]
fn the_waits_of_a_ping_pong_over_tcp_share_one_lease() {
    const ROUNDS: u64 = 300;
    let (ea, eb, a, b) = polled_over_tcp();
    let inboxes: Vec<_> = [&a, &b]
        .iter()
        .map(|n| {
            let area = n.area(64).expect("area");
            let (meta, slot) = slot_on(n, &area, 0);
            (area, meta, slot.ticket_all().expect("ticket"), slot)
        })
        .collect();
    let mut qa = a.queue(0).expect("queue");
    let mut qb = b.queue(0).expect("queue");
    let mut ta = a.terminus(0).expect("terminus");
    let mut tb = b.terminus(0).expect("terminus");
    let opts = SendOptions::new();
    // Waits for every send kept in `handles`.
    let all_sent = |handles: &mut Vec<hamlyn::SendHandle>| {
        for h in handles.drain(..) {
            assert_eq!(h.wait(Some(WAIT)), Status::Sent);
        }
    };
    // Sends `word` to `to` through `t`, keeping the handle; waits for the sends so far
    // once more than 64 are out.
    let send = |t: &mut hamlyn::Terminus,
                to: &hamlyn::Ticket,
                word: &[u8; 8],
                handles: &mut Vec<hamlyn::SendHandle>| {
        handles.push(t.send(to, &opts, hamlyn::Data::Inline(word)).expect("send"));
        if handles.len() > 64 {
            all_sent(handles);
        }
    };
    // Per attempt: the leases begun at a and at b, and a's sending turns.
    let mut fewest: Option<(u64, u64, u64)> = None;
    for _attempt in 0..5 {
        let (before_a, before_b) = (leases_end(&ea, None), leases_end(&eb, None));
        std::thread::scope(|scope| {
            // b: waits for each round, then answers it.
            let (to_a, b_inbox) = (&inboxes[0].2, &inboxes[1].0);
            let (qb, tb) = (&mut qb, &mut tb);
            let answerer = scope.spawn(move || {
                let mut handles = Vec::new();
                for round in 0..ROUNDS {
                    let n = qb.wait(Some(WAIT)).expect("wait").expect("arrives at b");
                    assert_eq!(n.len, 8);
                    let word = round.to_le_bytes();
                    assert_eq!(b_inbox.read_vec(0, 8).expect("read"), word);
                    send(tb, to_a, &word, &mut handles);
                }
                all_sent(&mut handles);
            });
            // a: sends each round, then waits for its answer.
            let mut handles = Vec::new();
            for round in 0..ROUNDS {
                let word = round.to_le_bytes();
                send(&mut ta, &inboxes[1].2, &word, &mut handles);
                let n = qa.wait(Some(WAIT)).expect("wait").expect("arrives at a");
                assert_eq!(n.len, 8);
                assert_eq!(inboxes[0].0.read_vec(0, 8).expect("read"), word);
            }
            all_sent(&mut handles);
            answerer.join().expect("the answering side");
        });
        let (sa, sb) = (stats(&ea), stats(&eb));
        let this = (
            sa.leases - before_a.leases,
            sb.leases - before_b.leases,
            sa.turns_by_senders - before_a.turns_by_senders,
        );
        assert!(
            this.0 >= 1 && this.1 >= 1,
            "the waits held a lease at a and at b: {sa:?}, {sb:?}"
        );
        if fewest.is_none_or(|f| this.0.max(this.1) < f.0.max(f.1)) {
            fewest = Some(this);
        }
        if this.0.max(this.1) < ROUNDS / 4 {
            break;
        }
    }
    let (at_a, at_b, sending_turns) = fewest.expect("an attempt ran");
    assert!(
        at_a < ROUNDS / 4 && at_b < ROUNDS / 4,
        "{at_a} leases at a and {at_b} at b for {ROUNDS} rounds"
    );
    assert!(
        sending_turns > 0,
        "pushes under the lease ran their own turns"
    );
    leases_end(&ea, None);
    leases_end(&eb, None);
}

/// Reads of node `peer`'s connections by `node`'s engine that found nothing.
fn empty_reads(node: &Node, peer: u32) -> u64 {
    node.stats()
        .expect("stats")
        .peer(peer)
        .and_then(|p| p.link.as_ref().map(|l| l.counters.empty_reads))
        .expect("a link to the peer")
}

/// Over TCP, a thread waiting on a notification queue (for what another node sends)
/// looks at the fabric by reading its connections directly, so that the call that finds
/// a packet is the read itself; a thread waiting for its own sends (a send handle, room
/// in its terminus: the engine's work, not an arrival) asks the fabric's poller, and
/// reads a connection only when the poller says it has data. Without the difference a
/// waiter asked the poller too (no read found nothing); with direct reads for every
/// waiter, a stream's sender waiting for room read every connection on every turn (an
/// 8-byte message stream fell from 1.2 to 0.3 M/s).
#[test]
fn a_waiter_for_a_notification_reads_the_fabric_and_a_waiter_for_its_sends_asks() {
    let (_ea, _eb, a, b) = common::tcp_pair(2, || EngineConfig {
        driven: true,
        ..EngineConfig::embedded()
    });
    const BIG: u64 = 16 << 20;
    let inbox = b.area(BIG).expect("area");
    let (_meta, slot) = slot_on(&b, &inbox, 0);
    let ticket = slot.ticket_all().expect("ticket");
    let mut t = a.terminus(0).expect("terminus");
    let outbox = a.area(BIG).expect("area");
    // Large messages, each waited for: many turns of sending (the fabric's queues fill
    // and drain), the waiter's looks at the fabric asking the poller.
    let before = empty_reads(&a, 1);
    for _ in 0..4 {
        let span = hamlyn::Span {
            area: &outbox,
            offset: 0,
            len: BIG,
        };
        let h = t
            .send(&ticket, &SendOptions::new(), hamlyn::Data::Gather(&[span]))
            .expect("send");
        assert_eq!(h.wait(Some(WAIT)), Status::Sent);
    }
    let sending = empty_reads(&a, 1) - before;
    // A wait for a notification that does not come: the waiter drives for its budget,
    // its looks at the fabric reading both rails, then sleeps until the timeout.
    let mut q = a.queue(0).expect("queue");
    let before = empty_reads(&a, 1);
    // The engine's thread answers a statistics request holding the engine, and may
    // still hold it for a while after the answer (a waiter's tries at a held engine
    // use its budget up in about 80 µs): the wait starts once it is done.
    std::thread::sleep(Duration::from_millis(10));
    assert!(q
        .wait(Some(Duration::from_millis(20)))
        .expect("wait")
        .is_none());
    let waiting = empty_reads(&a, 1) - before;
    assert!(
        waiting >= 20,
        "a wait for a notification read the rails {waiting} times with nothing there"
    );
    assert!(
        sending < 20,
        "waits for four 16 MiB sends read the rails {sending} times with nothing there"
    );
}

/// A wait that found nothing within its budget and goes to sleep ends the lease itself
/// (`Driving::end_lease`): nobody polls the fabric while it sleeps, so the engine's
/// thread gets the fabric's wake-ups back at once.
#[test]
fn a_waiter_that_goes_to_sleep_ends_the_lease() {
    let (ea, _eb, a, _b) = polled_over_tcp();
    let driver = Driver::for_socket(ea.socket_path()).expect("drivable");
    let waiting = driver.drive_waiting().expect("engine runs");
    assert!(driver.leased(), "the wait holds the lease");
    let held = stats(&ea);
    assert_eq!(
        (held.leases - held.leases_ended, held.fabric_takers),
        (1, 1),
        "{held:?}"
    );
    waiting.end_lease();
    assert!(!driver.leased());
    let ended = stats(&ea);
    assert_eq!(ended.leases_ended, ended.leases, "{ended:?}");
    assert_eq!(ended.fabric_takers, 0, "{ended:?}");
    drop(waiting);
    // A wait with nothing coming drives its budget and sleeps: the lease it held is
    // over when it returns.
    let mut q = a.queue(0).expect("queue");
    assert!(q
        .wait(Some(Duration::from_millis(20)))
        .expect("wait")
        .is_none());
    let s = stats(&ea);
    assert!(s.leases > ended.leases, "the wait held a lease: {s:?}");
    assert_eq!((s.leases_ended, s.fabric_takers), (s.leases, 0), "{s:?}");
}

/// A lease that starts while the engine's thread is in a long idle sleep (no fabric
/// timer for a minute, `max_sleep` a minute: longer than `WAIT`) still ends soon after
/// the calls stop: its
/// start rings that thread, which from then on sleeps at most a millisecond at a time.
/// Without the ring the thread slept on with the fabric's wake-ups taken, and this test
/// waited the whole bound (`WAIT`) for the lease to end. Then a write from the other
/// node arrives with nobody polling.
#[test]
fn a_lease_that_starts_during_a_long_idle_sleep_still_ends() {
    let (ea, _eb, a, b) = common::tcp_pair_with(
        1,
        || EngineConfig {
            driven: true,
            max_sleep: Duration::from_secs(60),
            ..EngineConfig::embedded()
        },
        |tcp| {
            // The fabric's tick is a quarter of the shorter of these: a minute.
            tcp.heartbeat_interval = Duration::from_secs(240);
            tcp.reconnect_interval = Duration::from_secs(240);
            tcp.peer_timeout = Duration::from_secs(1200);
        },
    );
    let (inbox, _meta, ticket, mut t) = polled_inbox(&a, &b);
    // Let the engine's thread go to its idle sleep.
    std::thread::sleep(Duration::from_millis(50));
    let before = stats(&ea);
    std::thread::sleep(Duration::from_millis(50));
    a.progress();
    let held = stats(&ea);
    assert_eq!(held.leases, before.leases + 1, "one call started a lease");
    leases_end(&ea, None);
    write_and_poll(&mut t, &ticket, &a, &inbox, 7, false);
}

/// A client of another process attaches while a polling loop holds the lease: the
/// engine's thread ends it although the calls go on (only that thread takes the
/// client's pushes in promptly), and no lease starts while the client stays; its write
/// arrives.
#[test]
fn a_client_of_another_process_ends_the_polling_lease() {
    let (ea, _eb, a, b) = polled_over_tcp();
    let (inbox, _meta, ticket, mut t) = polled_inbox(&a, &b);
    a.progress();
    assert!(stats(&ea).leases >= 1, "a lease started");
    write_and_poll(&mut t, &ticket, &a, &inbox, 1, true);
    let mut child = Proc::spawn("child_writer", ea.socket_path());
    child.tell("write", ticket_to_text(&ticket).expect("seed"));
    let want = pattern_at(9, 0, 4096);
    let deadline = std::time::Instant::now() + WAIT;
    while inbox.read_vec(0, 4096).expect("read") != want {
        assert!(
            std::time::Instant::now() < deadline,
            "the child's write arrived"
        );
        a.progress();
        std::thread::yield_now();
    }
    // Ended although the calls go on.
    let ended = leases_end(&ea, Some(&a));
    for round in 2..50 {
        write_and_poll(&mut t, &ticket, &a, &inbox, round, true);
    }
    assert_eq!(
        stats(&ea).leases,
        ended.leases,
        "no lease while the child is attached"
    );
    child.finish();
}

/// The child of `a_polling_thread_runs_the_engines_turns_with_progress`: on `write
/// SEED`, writes 4,096 bytes of pattern 9 to that ticket without a notification.
#[test]
fn child_writer() {
    let Some(mut env) = child_env("child_writer") else {
        return;
    };
    let node = Node::connect(&env.socket).expect("connect");
    let mut t = node.terminus(0).expect("terminus");
    while let Some((cmd, args)) = env.next_command() {
        if cmd == "write" {
            let ticket = ticket_from_text(args.trim()).expect("ticket");
            let data = pattern_at(9, 0, 4096);
            let h = send_bytes(
                &node,
                &mut t,
                &ticket,
                &SendOptions::new().notify(false),
                &data,
            );
            assert_eq!(h.wait(Some(WAIT)), Status::Sent);
        }
    }
}

/// Ports idle while another port is busy go cold (`hamlyn_shm::ready::COLD`: their
/// ready words read now and then only, their doorbells left armed, so a hand-back costs
/// the hot ports alone). The next push on each still gets through: from a host thread
/// that finds the engine asleep and then does not wait (its own turn is told to read
/// every port: nobody else would drive), and from another process (it rings). The
/// engine sleeps up to a minute, longer than the waits here, so a push it did not see
/// would fail the test rather than wait for a timer. The push after that one, on the
/// port now hot again, gets through the same way. Bounded: a push that finds the
/// engine's thread awake is tried again.
#[test]
fn a_port_gone_cold_is_served_at_its_next_push() {
    let engine = sleepy_driven_engine();
    let busy = Node::connect(engine.socket_path()).expect("connect");
    let idle = Node::connect(engine.socket_path()).expect("connect");
    let mut child = Proc::spawn("child_receiver", engine.socket_path());
    let child_ticket = ticket_from_text(&child.expect("ticket", WAIT)).expect("ticket");
    let inbox = busy.area(64).expect("area");
    let (_meta, slot) = slot_on(&busy, &inbox, 0);
    let ticket = slot.ticket_all().expect("ticket");
    let mut q = busy.queue(0).expect("queue");
    let mut bt = busy.terminus(0).expect("terminus");
    let mut it = idle.terminus(0).expect("terminus");
    let gone_cold = || busy.stats().expect("stats").engine.ports_gone_cold;
    let mut nudged = false;
    for attempt in 0..50u64 {
        // 2,048 messages of the busy port: at least as many engine turns, so the idle
        // port (and the child's) went 1,024 turns without a hint; and a pause longer
        // than `COLD_AFTER` halfway, so that they also went that long without one,
        // however fast the messages go (without it, a machine that sends 2,048 in under
        // 2 ms left the idle port hot): cold.
        let before = gone_cold();
        for round in 0..2048u64 {
            if round == 1024 {
                std::thread::sleep(Duration::from_millis(5));
            }
            bt.send(
                &ticket,
                &SendOptions::new().tag(round),
                hamlyn::Data::Inline(&round.to_le_bytes()),
            )
            .expect("send");
            let n = q.wait(Some(WAIT)).expect("wait").expect("arrives");
            assert_eq!(n.word, round);
        }
        assert!(gone_cold() > before, "the idle port went cold");
        let sender_turns = stats(&engine).turns_by_senders;
        // Time for the engine's thread to finish its spin and sleep.
        std::thread::sleep(Duration::from_millis(20));
        // Pushed, not waited for: only the push's own turn (or a ring) takes it in.
        let data = pattern_at(attempt, 0, 64);
        let _h = send_bytes(&idle, &mut it, &child_ticket, &SendOptions::new(), &data);
        child.tell("expect", format!("{attempt} 64"));
        assert_eq!(child.expect("got", WAIT), "true");
        if stats(&engine).turns_by_senders > sender_turns {
            // That turn took the port hot again (its doorbell cleared) with the engine's
            // thread still asleep: the hand-back armed it again, so the next push on it
            // nudges or rings too, rather than waiting out the engine's minute.
            let seed = attempt + 1000;
            let data = pattern_at(seed, 0, 64);
            let _h = send_bytes(&idle, &mut it, &child_ticket, &SendOptions::new(), &data);
            child.tell("expect", format!("{seed} 64"));
            assert_eq!(
                child.expect("got", WAIT),
                "true",
                "the push after the cold port turned hot"
            );
            nudged = true;
            break;
        }
    }
    assert!(nudged, "a push on a cold port ran its own turn");
    // The child's port, idle since its ticket, is cold: its push rings the engine.
    std::thread::sleep(Duration::from_millis(20));
    child.tell("self", "5 4096");
    assert_eq!(child.expect("got", WAIT), "true");
    child.finish();
}

/// A push on a rate-limited terminus whose tokens are spent, found by its own turn
/// (`Driver::nudge`) and not waited for, leaves when its tokens are back: the hand-back
/// after that turn sees the terminus waiting in its ready queue and rings the engine's
/// thread, whose sleep then ends at the tokens' time. The engine sleeps up to a minute
/// otherwise, longer than the wait here, so a hand-back that returned without looking
/// fails the test rather than wait for a timer. Not timed: only "sent within 30 s" is
/// checked, for a message whose tokens take 50 ms.
#[test]
fn a_throttled_push_nobody_waits_for_leaves_when_its_tokens_are_back() {
    let engine = sleepy_driven_engine();
    let host = Node::connect(engine.socket_path()).expect("connect");
    let inbox = host.area(4096).expect("area");
    let slot = host.slot(&inbox).fast().create().expect("slot");
    let ticket = slot.ticket_all().expect("ticket");
    let mut t = host
        .terminus_with_rate(
            0,
            hamlyn::RateLimit {
                bytes_per_sec: 2000,
                msgs_per_sec: 0,
            },
        )
        .expect("terminus");
    let body = [7u8; 100];
    let mut send = || {
        t.send(
            &ticket,
            &SendOptions::new().fast(),
            hamlyn::Data::Inline(&body),
        )
        .expect("queued")
    };
    let first = send();
    assert_eq!(first.wait(Some(WAIT)), Status::Sent);
    // Time for the engine's thread to finish its spin and sleep (a minute at most).
    std::thread::sleep(Duration::from_millis(20));
    let sender_turns = stats(&engine).turns_by_senders;
    let second = send();
    let deadline = std::time::Instant::now() + WAIT;
    while second.status() == Status::Pending {
        assert!(
            std::time::Instant::now() < deadline,
            "the throttled push never left (sender turns {} -> {})",
            sender_turns,
            stats(&engine).turns_by_senders
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(second.status(), Status::Sent);
}

/// An engine that never sleeps (busy-poll) holds itself while it serves: a waiting
/// thread gets turns only because the engine's thread lets go for it, and the engine's
/// thread serves again after (a child's messages arrive with no host thread waiting).
#[test]
fn the_engine_thread_lets_go_for_a_driver_and_resumes() {
    let engine = EngineHandle::start(EngineConfig {
        driven: true,
        busy_poll: true,
        ..EngineConfig::embedded()
    })
    .expect("engine");
    let host = Node::connect(engine.socket_path()).expect("connect");
    let mut child = Proc::spawn("child_receiver", engine.socket_path());
    child.expect("ticket", WAIT);
    let before = stats(&engine);
    let mut q = host.queue(0).expect("queue");
    // Waits with nothing coming: each drives (its turns find nothing), then times out.
    // Bounded: a wait whose drive got no turn (the engine's thread descheduled while
    // holding itself) is simply repeated.
    for _ in 0..1000 {
        assert!(q
            .wait(Some(Duration::from_micros(1)))
            .expect("wait")
            .is_none());
        if stats(&engine).turns_by_waiters > before.turns_by_waiters {
            break;
        }
    }
    let driven = stats(&engine);
    assert!(
        driven.turns_by_waiters > before.turns_by_waiters,
        "the waits drove: {driven:?}"
    );
    // (Reading the statistics is itself a short drive, so the letting go may already
    // have happened when `before` was read: counted since the start.)
    assert!(
        driven.engine_thread_let_go > 0,
        "the busy-polling engine thread let go: {driven:?}"
    );
    child.tell("self", "77 4096");
    assert_eq!(child.expect("got", WAIT), "true");
    let end = stats(&engine);
    assert!(
        end.engine_thread_resumed > before.engine_thread_resumed,
        "the engine thread served again: {end:?}"
    );
    child.finish();
}

/// A driver that stops turning without leaving (a thread descheduled in its drive, or
/// one holding a `Driving` it does not use) in the middle of a large message: the child
/// still gets every byte, and then a message to itself, both moved by the engine's
/// thread, which stopped waiting for the driver.
#[test]
fn a_driver_that_stops_turning_mid_message_does_not_stall_other_clients() {
    const LEN: usize = 1 << 20;
    const SEED: u64 = 0x14_0002;
    let engine = driven_engine();
    let host = Node::connect(engine.socket_path()).expect("connect");
    let mut child = Proc::spawn("child_receiver", engine.socket_path());
    let to_child = ticket_from_text(&child.expect("ticket", WAIT)).expect("seed");
    let area = host.area(LEN as u64).expect("area");
    area.write(0, &pattern_at(SEED, 0, LEN)).expect("fill");
    let mut t = host.terminus(0).expect("terminus");
    child.tell("expect", format!("{SEED} {LEN}"));
    let driver = Driver::for_socket(engine.socket_path()).expect("drivable");
    let mut driving = driver.drive().expect("engine runs");
    let h = t
        .send(
            &to_child,
            &SendOptions::new(),
            hamlyn::Data::Gather(&common::spans(&area, 0, LEN as u64)),
        )
        .expect("send");
    // A few of the message's 256 packets, then no more turns, the drive still held.
    for _ in 0..8 {
        driving.turn();
    }
    assert_eq!(child.expect("got", WAIT), "true", "every byte arrived");
    child.tell("self", format!("{} 4096", SEED + 1));
    assert_eq!(
        child.expect("got", WAIT),
        "true",
        "the child's own message too"
    );
    assert_eq!(h.status(), Status::Sent);
    drop(driving);
    let s = stats(&engine);
    assert!(
        s.stalled_drivers > 0,
        "the engine thread served anyway: {s:?}"
    );
    drop(t);
    child.finish();
}

/// A host thread's wait drives part of a large message to a child process, then ends
/// (it gave up at once) and the host waits through the library no more: the child still
/// gets every byte, and then a message it sends itself.
#[test]
fn a_host_that_stops_driving_mid_message_does_not_stall_other_clients() {
    const LEN: usize = 1 << 20;
    const SEED: u64 = 0x14_0001;
    let engine = driven_engine();
    // 64 turns of driving per wait: fewer than the 256 packets of the message.
    let options = NodeOptions {
        spin: 64,
        ..NodeOptions::default()
    };
    let host = Node::connect_with(engine.socket_path(), options).expect("connect");
    let mut child = Proc::spawn("child_receiver", engine.socket_path());
    let to_child = ticket_from_text(&child.expect("ticket", WAIT)).expect("seed");
    let mut t = host.terminus(0).expect("terminus");
    let data = pattern_at(SEED, 0, LEN);
    child.tell("expect", format!("{SEED} {LEN}"));
    let h = send_bytes(&host, &mut t, &to_child, &SendOptions::new(), &data);
    // A wait that gives up right after its drive.
    let _ = h.wait(Some(Duration::from_nanos(1)));
    // No host thread waits through the library from here on.
    assert_eq!(child.expect("got", WAIT), "true", "every byte arrived");
    child.tell("self", format!("{} 4096", SEED + 1));
    assert_eq!(
        child.expect("got", WAIT),
        "true",
        "the child's own message too"
    );
    assert_eq!(h.status(), Status::Sent);
    drop(t);
    child.finish();
}

/// A thread that waits, parked on its own futex after its drive, with nothing coming:
/// the engine's thread keeps serving others meanwhile (the child's messages to itself).
#[test]
fn the_engine_thread_serves_while_a_host_thread_sleeps_in_a_wait() {
    let engine = driven_engine();
    let host = Node::connect(engine.socket_path()).expect("connect");
    let mut child = Proc::spawn("child_receiver", engine.socket_path());
    child.expect("ticket", WAIT);
    let mut q = host.queue(0).expect("queue");
    let sleeper = std::thread::spawn(move || {
        // Nothing is ever sent to this queue: the wait drives, then sleeps, and times out.
        q.wait(Some(Duration::from_millis(300))).expect("wait")
    });
    for k in 0..20u64 {
        child.tell("self", format!("{} 100000", 0x14_0100 + k));
        assert_eq!(child.expect("got", WAIT), "true");
    }
    assert!(sleeper.join().expect("sleeper").is_none());
    child.finish();
}

/// A daemon is never driven by anyone but its own thread (nor is an embedded engine
/// started with `driven: false`, which is what `HAMLYN_DRIVE=0` selects): no driver is
/// found for it, and clients of it work as before.
#[test]
fn a_daemon_and_an_undriven_engine_keep_their_own_thread() {
    let dir = std::env::temp_dir().join(format!("hamlyn-progress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let socket = dir.join("daemon.sock");
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let daemon = std::thread::spawn({
        let (socket, stop) = (socket.clone(), stop.clone());
        move || hamlyn_engine::run_daemon(EngineConfig::daemon(socket), stop)
    });
    let mut node = None;
    for _ in 0..1000 {
        match Node::connect(&socket) {
            Ok(n) => {
                node = Some(n);
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    let node = node.expect("the daemon answers");
    assert!(
        Driver::for_socket(&socket).is_none(),
        "a daemon is not drivable"
    );
    round_trip(&node);
    drop(node);
    // Release: pairs with the daemon loop's Acquire load of its stop flag.
    stop.store(true, Ordering::Release);
    // The daemon sleeps at most its max_sleep; its flag is looked at after.
    daemon.join().expect("daemon thread").expect("daemon ran");

    let undriven = EngineHandle::start(EngineConfig {
        driven: false,
        ..EngineConfig::embedded()
    })
    .expect("engine");
    assert!(Driver::for_socket(undriven.socket_path()).is_none());
    round_trip(&Node::connect(undriven.socket_path()).expect("connect"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// One message from the node to itself, waited for.
fn round_trip(node: &Node) {
    let inbox = node.area(64).expect("area");
    let (_meta, slot) = slot_on(node, &inbox, 0);
    let mut q = node.queue(0).expect("queue");
    let mut t = node.terminus(0).expect("terminus");
    let h = t
        .send(
            &slot.ticket_all().expect("ticket"),
            &SendOptions::new(),
            hamlyn::Data::Inline(b"12345678"),
        )
        .expect("send");
    assert_eq!(h.wait(Some(WAIT)), Status::Sent);
    let n = q.wait(Some(WAIT)).expect("wait").expect("arrives");
    assert_eq!(n.len, 8);
    assert_eq!(inbox.read_vec(0, 8).expect("read"), b"12345678");
}

/// A slot on `area` reporting to `queue`, with one metadata entry.
fn slot_on(node: &Node, area: &hamlyn::Area, queue: u16) -> (hamlyn::MetaArea, hamlyn::Slot) {
    let meta = node.meta_area(1).expect("meta area");
    let slot = node
        .slot(area)
        .meta(&meta)
        .queue(queue)
        .create()
        .expect("slot");
    (meta, slot)
}
