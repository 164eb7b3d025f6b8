//! RPC over remote memory (seed 004 §3.1), a server and clients on separate connections
//! to one engine: typed and byte calls, many outstanding, failures and refusals, a client
//! scribbling over its frame while the procedure runs, a server that goes away, a client
//! that goes away.
#![allow(clippy::unwrap_used)]

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hamlyn::{Data, Node, RejectReason, SendOptions, Status};
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_rpc::typed::procedure;
use hamlyn_rpc::{frame, Ctx, RpcClient, RpcError, RpcServer, ServerCounters};
use hamlyn_shm::sync::{AtomicBool, Ordering};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Seed 004 Table 4's "Simple" call: four integers in, one out.
#[derive(Clone, Copy, Debug, IntoBytes, FromBytes, Immutable, KnownLayout)]
#[repr(C)]
struct Four {
    a: u64,
    b: u64,
    c: u64,
    d: u64,
}

const WAIT: Duration = Duration::from_secs(30);

/// A server in a thread; returns its counters when stopped.
struct Served {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<(ServerCounters, usize)>>,
}

impl Served {
    fn start(
        path: &std::path::Path,
        service: &str,
        gate: Option<mpsc::Receiver<()>>,
        running: Option<mpsc::Sender<()>>,
    ) -> Served {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = {
            let (stop, path, service) = (stop.clone(), path.to_path_buf(), service.to_owned());
            std::thread::spawn(move || {
                let node = Node::connect(&path).unwrap();
                let mut procs = vec![
                    (
                        "add".to_string(),
                        procedure(|x: &Four| Ok(x.a + x.b + x.c + x.d)),
                    ),
                    (
                        "echo".to_string(),
                        Box::new(|b: &[u8], _: &mut Ctx<'_>| Ok(b.iter().rev().copied().collect()))
                            as _,
                    ),
                    (
                        "fail".to_string(),
                        Box::new(|_: &[u8], _: &mut Ctx<'_>| Err("no such luck".to_string())) as _,
                    ),
                ];
                procs.push((
                    "sum_and_double".to_string(),
                    Box::new(|_: &[u8], ctx: &mut Ctx<'_>| {
                        let len = ctx.segment_len().ok_or("no segment")? as usize;
                        let bytes = ctx.read(0, len)?;
                        let mut sum = 0u64;
                        let doubled: Vec<u8> = bytes
                            .chunks(8)
                            .flat_map(|w| {
                                let v = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
                                sum = sum.wrapping_add(v);
                                (v * 2).to_le_bytes()
                            })
                            .collect();
                        ctx.write(0, &doubled)?;
                        Ok(sum.to_le_bytes().to_vec())
                    }) as _,
                ));
                procs.push((
                    "write_at".to_string(),
                    Box::new(|args: &[u8], ctx: &mut Ctx<'_>| {
                        let at = u64::from_le_bytes(args.try_into().map_err(|_| "8 bytes")?);
                        ctx.write(at, b"written!")?;
                        Ok(Vec::new())
                    }) as _,
                ));
                if let (Some(gate), Some(running)) = (gate, running) {
                    procs.push((
                        "slow".to_string(),
                        Box::new(move |b: &[u8], _: &mut Ctx<'_>| {
                            running.send(()).unwrap();
                            gate.recv_timeout(WAIT).unwrap();
                            Ok(b.to_vec())
                        }) as _,
                    ));
                }
                let mut server = RpcServer::publish(node, &service, procs).unwrap();
                ready_tx.send(()).unwrap();
                // Acquire: pairs with the Release store in `stop`.
                server.serve_until(|| stop.load(Ordering::Acquire)).unwrap();
                (server.counters(), server.clients())
            })
        };
        ready_rx.recv_timeout(WAIT).unwrap();
        Served {
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> (ServerCounters, usize) {
        // Release: pairs with the server loop's Acquire load.
        self.stop.store(true, Ordering::Release);
        self.thread.take().unwrap().join().unwrap()
    }
}

#[test]
fn calls_typed_and_bytes_many_outstanding_failures_and_refusals() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let server = Served::start(engine.socket_path(), "calc", None, None);
    let mut client =
        RpcClient::connect(Node::connect(engine.socket_path()).unwrap(), "calc", WAIT).unwrap();
    assert_eq!(
        client.procedures(),
        ["add", "echo", "fail", "sum_and_double", "write_at"]
    );
    let sum: u64 = client
        .call_typed(
            "add",
            &Four {
                a: 1,
                b: 2,
                c: 3,
                d: 400,
            },
        )
        .unwrap();
    assert_eq!(sum, 406);
    // Arguments longer than a packet's inline bytes go from a staging copy.
    let long: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let back = client.call("echo", &long).unwrap();
    assert_eq!(back, long.iter().rev().copied().collect::<Vec<_>>());
    // Every frame outstanding at once, finished in any order.
    let calls: Vec<_> = (0..frame::FRAMES as u8)
        .map(|i| client.start("echo", &[i, i + 1]).unwrap())
        .collect();
    assert!(matches!(client.start("echo", b"x"), Err(RpcError::Busy)));
    for (i, c) in calls.into_iter().enumerate().rev() {
        let i = i as u8;
        assert_eq!(client.finish(c).unwrap(), vec![i + 1, i]);
    }
    // Failures and refusals, with the server still serving after each.
    assert!(matches!(client.call("fail", b""), Err(RpcError::Procedure(m)) if m == "no such luck"));
    assert!(matches!(
        client.call("nope", b""),
        Err(RpcError::NoProcedure(_))
    ));
    // Procedures are numbered in the cluster's active-message handler table; a number
    // that is not one of the service's is refused by the server.
    let (_, table) = client.node().am_table().unwrap();
    for name in ["add", "echo", "fail", "sum_and_double"] {
        let entry = table
            .iter()
            .find(|e| e.name == format!("rpc/calc/{name}"))
            .expect("registered as an active-message handler");
        assert!(entry.live);
        assert_eq!(entry.fingerprint, hamlyn_rpc::PROCEDURE_FINGERPRINT);
        assert_eq!(
            entry.fingerprint,
            hamlyn_am::fingerprint("rpc: bytes -> bytes")
        );
        assert_eq!(client.number(name).unwrap(), entry.id);
    }
    let c = client.start_number(99, b"").unwrap();
    assert!(matches!(
        client.finish(c),
        Err(RpcError::Refused(frame::Status::UnknownProcedure))
    ));
    let add = client.number("add").unwrap();
    let c = client.start_number(add, b"short").unwrap();
    assert!(
        matches!(client.finish(c), Err(RpcError::Procedure(m)) if m.contains("expected 32")),
        "typed arguments of the wrong size"
    );
    // A frame whose lengths lie, written raw: refused at the server, counted.
    let raw = {
        let mut f = frame::encode_call(1, 777, b"abc").unwrap();
        f[4..8].copy_from_slice(&5000u32.to_le_bytes());
        f
    };
    // (Frame 1: the next call takes frame 0, so this one is read as written.)
    let t = client.frame_ticket(1).unwrap();
    let h = client
        .terminus()
        .send(&t, &SendOptions::new().tag(777), Data::Inline(&raw))
        .unwrap();
    assert_eq!(h.wait(Some(WAIT)), Status::Sent);
    assert_eq!(
        client
            .call_typed::<Four, u64>(
                "add",
                &Four {
                    a: 1,
                    b: 1,
                    c: 1,
                    d: 1
                }
            )
            .unwrap(),
        4
    );
    drop(client);
    let (counters, _) = server.stop();
    assert_eq!(counters.bad_frames, 1, "{counters:?}");
    assert_eq!(counters.unknown_procedure, 1, "{counters:?}");
    assert_eq!(counters.failed, 2, "{counters:?}");
    engine.stop().unwrap();
}

#[test]
fn a_timed_out_calls_frame_waits_for_its_late_reply_before_it_is_used_again() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let (go_tx, go_rx) = mpsc::channel();
    let (running_tx, running_rx) = mpsc::channel();
    let server = Served::start(engine.socket_path(), "late", Some(go_rx), Some(running_tx));
    let mut client =
        RpcClient::connect(Node::connect(engine.socket_path()).unwrap(), "late", WAIT).unwrap();
    client.set_timeout(Duration::from_millis(50));
    let call = client.start("slow", b"late").unwrap();
    running_rx.recv_timeout(WAIT).unwrap();
    assert!(matches!(client.finish(call), Err(RpcError::Timeout(_))));
    // The procedure still runs, its frame (0) write-inhibited: the next call must take
    // another frame, not be refused as if the server were gone.
    client.set_timeout(WAIT);
    go_tx.send(()).unwrap();
    assert_eq!(client.call("echo", b"ab").unwrap(), b"ba");
    // Every frame is usable again once the late reply was seen: as many calls
    // outstanding as there are frames.
    let calls: Vec<_> = (0..frame::FRAMES)
        .map(|i| loop {
            match client.start("echo", &[i as u8]) {
                Ok(c) => break c,
                // The late reply not seen yet: a call's wait takes it in.
                Err(RpcError::Busy) => assert_eq!(client.call("echo", b"x").unwrap(), b"x"),
                Err(e) => panic!("{e}"),
            }
        })
        .collect();
    for (i, c) in calls.into_iter().enumerate() {
        assert_eq!(client.finish(c).unwrap(), [i as u8]);
    }
    drop(client);
    server.stop();
    engine.stop().unwrap();
}

#[test]
fn a_frame_is_write_inhibited_while_its_procedure_runs() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let (go_tx, go_rx) = mpsc::channel();
    let (running_tx, running_rx) = mpsc::channel();
    let server = Served::start(engine.socket_path(), "slow", Some(go_rx), Some(running_tx));
    let mut client =
        RpcClient::connect(Node::connect(engine.socket_path()).unwrap(), "slow", WAIT).unwrap();
    let call = client.start("slow", b"the real arguments").unwrap();
    running_rx.recv_timeout(WAIT).unwrap();
    // The procedure runs: the client scribbles over its own frame, and is refused.
    let t = client.frame_ticket(0).unwrap();
    let h = client
        .terminus()
        .send(
            &t,
            &SendOptions::new().tag(1),
            Data::Inline(b"scribble scribble"),
        )
        .unwrap();
    assert_eq!(h.wait(Some(WAIT)), Status::Failed(RejectReason::Inhibited));
    go_tx.send(()).unwrap();
    assert_eq!(client.finish(call).unwrap(), b"the real arguments");
    // Lifted afterwards: the next call goes through.
    let call = client.start("echo", b"ab").unwrap();
    assert_eq!(client.finish(call).unwrap(), b"ba");
    drop(client);
    server.stop();
    engine.stop().unwrap();
}

#[test]
fn a_server_that_is_gone_is_an_error_and_a_client_that_is_gone_is_forgotten() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let server = Served::start(engine.socket_path(), "svc", None, None);
    // A client that goes away: the server frees its frames.
    let gone =
        RpcClient::connect(Node::connect(engine.socket_path()).unwrap(), "svc", WAIT).unwrap();
    let mut staying =
        RpcClient::connect(Node::connect(engine.socket_path()).unwrap(), "svc", WAIT).unwrap();
    assert_eq!(staying.call("echo", b"12").unwrap(), b"21");
    drop(gone);
    let deadline = Instant::now() + WAIT;
    let counters = loop {
        // The server thread's view, through a call that still works.
        assert_eq!(staying.call("echo", b"xy").unwrap(), b"yx");
        let stats = staying.node().stats().unwrap();
        // Frames are slots of the server: 8 per client still connected, a door and the
        // scratch slot segment reads land in.
        let server_slots = stats
            .slots
            .iter()
            .filter(|s| s.owner != staying.node().client_id())
            .count();
        if server_slots == 2 + frame::FRAMES {
            break server_slots;
        }
        assert!(
            Instant::now() < deadline,
            "the gone client's frames stayed ({server_slots} slots)"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(counters, 10);
    // The server goes away: calls fail as such, within their timeout.
    let (c, clients) = server.stop();
    assert_eq!((c.clients_freed, clients), (1, 1), "{c:?}");
    staying.set_timeout(Duration::from_secs(10));
    let err = staying.call("echo", b"?").unwrap_err();
    assert!(matches!(err, RpcError::ServerGone(_)), "{err}");
    engine.stop().unwrap();
}

/// The server side of `a_server_killed_mid_call_is_an_error_within_the_timeout`: a
/// process that serves `svc` (with a procedure that never returns) until it is killed.
#[test]
fn child_server() {
    let Ok(path) = std::env::var("HAMLYN_RPC_CHILD_SERVER") else {
        return;
    };
    let node = Node::connect(&path).unwrap();
    let procs: Vec<(String, hamlyn_rpc::Procedure)> = vec![
        (
            "echo".to_string(),
            Box::new(|b: &[u8], _: &mut Ctx<'_>| Ok(b.to_vec())),
        ),
        (
            "hang".to_string(),
            Box::new(|_: &[u8], _: &mut Ctx<'_>| {
                std::thread::sleep(Duration::from_secs(600));
                Ok(Vec::new())
            }),
        ),
    ];
    let mut server = RpcServer::publish(node, "remote", procs).unwrap();
    server.serve_until(|| false).unwrap();
}

/// Across processes: a server in another process answers; killed in the middle of a
/// call, the client's call ends with an error (not a hang) within its timeout, and the
/// next call says the server is gone.
#[test]
fn a_server_killed_mid_call_is_an_error_within_the_timeout() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_server", "--nocapture"])
        .env("HAMLYN_RPC_CHILD_SERVER", engine.socket_path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + WAIT;
    let mut client = loop {
        match RpcClient::connect(Node::connect(engine.socket_path()).unwrap(), "remote", WAIT) {
            Ok(c) => break c,
            Err(RpcError::NoService(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(client.call("echo", b"across").unwrap(), b"across");
    client.set_timeout(Duration::from_secs(20));
    let call = client.start("hang", b"").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    child.kill().unwrap();
    child.wait().unwrap();
    let err = client.finish(call).unwrap_err();
    assert!(matches!(err, RpcError::ServerGone(_)), "{err}");
    let err = client.call("echo", b"?").unwrap_err();
    assert!(matches!(err, RpcError::ServerGone(_)), "{err}");
    engine.stop().unwrap();
}

/// Call by reference (seed 004 §3.1): the frame names a segment of the client; the
/// procedure reads it and writes it back through remote reads and writes, past the size
/// of one transfer; a forged segment ticket fails the call, not the server.
#[test]
fn call_by_reference_reads_and_writes_the_callers_segment() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let server = Served::start(engine.socket_path(), "byref", None, None);
    let mut client =
        RpcClient::connect(Node::connect(engine.socket_path()).unwrap(), "byref", WAIT).unwrap();
    const WORDS: u64 = 25_000; // 200 KB: several transfers each way
    let area = client.node().area(WORDS * 8).unwrap();
    let words: Vec<u8> = (0..WORDS).flat_map(|i| (i * 3).to_le_bytes()).collect();
    area.write(0, &words).unwrap();
    let segment = client.segment(&area).unwrap();
    let sum = client.call_by_ref("sum_and_double", b"", &segment).unwrap();
    let want: u64 = (0..WORDS).map(|i| i * 3).sum();
    assert_eq!(sum, want.to_le_bytes());
    let back = area.read_vec(0, (WORDS * 8) as usize).unwrap();
    for (i, w) in back.chunks(8).enumerate() {
        assert_eq!(
            u64::from_le_bytes(w.try_into().unwrap()),
            i as u64 * 6,
            "word {i}"
        );
    }
    // A forged ticket (wrong key): the procedure's read is refused by the engine.
    let meta = client.node().meta_area(1).unwrap();
    let other = client.node().slot(&area).meta(&meta).create().unwrap();
    let mut forged = other.ticket_all().unwrap();
    forged.key ^= 1;
    let err = client
        .call_by_ticket("sum_and_double", b"", &forged)
        .unwrap_err();
    assert!(
        matches!(&err, RpcError::Procedure(m) if m.contains("segment read")),
        "{err}"
    );
    // A write past the segment's end: refused, and the call ends with the procedure's
    // error (not a `Timeout` waiting for a segment write that never comes).
    let err = client
        .call_by_ref("write_at", &(WORDS * 8 - 4).to_le_bytes(), &segment)
        .unwrap_err();
    assert!(
        matches!(&err, RpcError::Procedure(m) if m.contains("segment write")),
        "{err}"
    );
    client
        .call_by_ref("write_at", &8u64.to_le_bytes(), &segment)
        .unwrap();
    assert_eq!(area.read_vec(8, 8).unwrap(), b"written!");
    // A call without a segment, to a procedure that wants one.
    let err = client.call("sum_and_double", b"").unwrap_err();
    assert!(
        matches!(&err, RpcError::Procedure(m) if m.contains("no segment")),
        "{err}"
    );
    assert_eq!(
        client.call("echo", b"ok").unwrap(),
        b"ko",
        "the server serves on"
    );
    drop(client);
    server.stop();
    engine.stop().unwrap();
}

/// Knocks on `service`'s door as a client would, with `reply` published as its reply
/// ticket under `key`; returns the frames the server hands out (none if it ignored the
/// knock within a second).
fn knock(node: &Node, service: &str, key: u64, reply: hamlyn::Ticket) -> Vec<hamlyn::Ticket> {
    let door = node.lookup(&format!("rpc/{service}")).unwrap().tickets[0];
    node.publish(
        &format!("rpc/{service}/client/{key:016x}"),
        &hamlyn::Seed::single(reply),
    )
    .unwrap();
    let mut t = node.terminus(0).unwrap();
    let h = t
        .send(&door, &SendOptions::new().tag(key), Data::Inline(b"!"))
        .unwrap();
    assert_eq!(h.wait(Some(WAIT)), Status::Sent);
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        if let Ok(seed) = node.lookup(&format!("rpc/{service}/frames/{key:016x}")) {
            return seed.tickets;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Vec::new()
}

/// Bad input at the door and in the reply path: a reply ticket too small for the replies
/// is refused at the knock; one with a forged key is accepted, but the reply it names is
/// refused by its node, so the server counts it, forgets that client (its frames go) and
/// goes on serving a good client throughout.
#[test]
fn a_forged_reply_ticket_is_counted_and_the_server_keeps_serving() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let server = Served::start(engine.socket_path(), "svc", None, None);
    let mut good =
        RpcClient::connect(Node::connect(engine.socket_path()).unwrap(), "svc", WAIT).unwrap();
    assert_eq!(good.call("echo", b"xy").unwrap(), b"yx");

    let bad = Node::connect(engine.socket_path()).unwrap();
    let replies = bad
        .area((frame::FRAMES * frame::REPLY_BYTES) as u64)
        .unwrap();
    let meta = bad.meta_area(4).unwrap();
    let slot = bad.slot(&replies).meta(&meta).queue(0).create().unwrap();
    // Too small for the replies: ignored at the door.
    let small = slot.ticket(0..64, 0..1).unwrap();
    assert!(knock(&bad, "svc", 0x5111, small).is_empty());
    // A forged key: frames are handed out, the first reply is refused.
    let mut forged = slot.ticket_all().unwrap();
    forged.key ^= 0xDEAD;
    let frames = knock(&bad, "svc", 0x5222, forged);
    assert_eq!(frames.len(), frame::FRAMES);
    let call = frame::encode_call(0, 1, &[0u8; 32]).unwrap();
    let mut t = bad.terminus(0).unwrap();
    let h = t
        .send(&frames[0], &SendOptions::new().tag(1), Data::Inline(&call))
        .unwrap();
    assert_eq!(h.wait(Some(WAIT)), Status::Sent);
    // The good client is served meanwhile, and after.
    for i in 0..20u8 {
        assert_eq!(good.call("echo", &[i, 1]).unwrap(), [1, i]);
        std::thread::sleep(Duration::from_millis(10));
    }
    let (counters, clients) = server.stop();
    assert_eq!(counters.bad_reply_tickets, 2, "{counters:?}");
    assert_eq!(counters.clients_freed, 1, "{counters:?}");
    assert_eq!(clients, 1, "only the good client is left");
    drop(good);
    engine.stop().unwrap();
}

/// A client that finds a service's name finds its procedures too: the server registers
/// them in the handler table before it publishes the name. A watcher on its own
/// connection looks the name up as fast as it can while the server starts, and reads
/// the handler table the moment the name is there (published first, the name was
/// visible for a round trip or two without the procedures, and a client connecting
/// then was told the service had no procedure "echo").
#[test]
fn a_service_found_by_name_has_its_procedures_registered() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    for round in 0..40 {
        let service = format!("race{round}");
        let watcher = {
            let (path, service) = (engine.socket_path().to_path_buf(), service.clone());
            std::thread::spawn(move || {
                let node = Node::connect(&path).unwrap();
                let deadline = Instant::now() + WAIT;
                while node.lookup(&format!("rpc/{service}")).is_err() {
                    assert!(Instant::now() < deadline, "{service} never published");
                    std::thread::yield_now();
                }
                let (_, table) = node.am_table().unwrap();
                ["add", "echo", "fail", "sum_and_double", "write_at"]
                    .iter()
                    .filter(|p| {
                        let name = format!("rpc/{service}/{p}");
                        !table.iter().any(|e| e.name == name && e.live)
                    })
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
            })
        };
        // Let the watcher connect and start looking before the server starts.
        std::thread::sleep(Duration::from_millis(5));
        let server = Served::start(engine.socket_path(), &service, None, None);
        let missing = watcher.join().unwrap();
        assert!(
            missing.is_empty(),
            "round {round}: {service} was found without {missing:?}"
        );
        server.stop();
    }
    engine.stop().unwrap();
}

/// A client whose knock is refused is told at once there is no such service: its name
/// outlived its door (a server going away), so no frames will ever come. Before, the
/// knock's refusal went unread and the client looked for frames until its timeout.
#[test]
fn a_knock_on_a_dead_door_is_no_service_not_a_timeout() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let gone = Node::connect(engine.socket_path()).unwrap();
    let area = gone.area(4096).unwrap();
    let meta = gone.meta_area(4).unwrap();
    let door = gone
        .slot(&area)
        .range(0..64)
        .meta(&meta)
        .queue(0)
        .create()
        .unwrap();
    let ticket = door.ticket_all().unwrap();
    // A service with no procedures whose door is destroyed before anyone knocks.
    gone.publish("rpc/dead", &hamlyn::Seed::single(ticket))
        .unwrap();
    drop(door);
    let err = RpcClient::connect(
        Node::connect(engine.socket_path()).unwrap(),
        "dead",
        Duration::from_secs(10),
    )
    .unwrap_err();
    assert!(matches!(err, RpcError::NoService(_)), "{err}");
    drop(gone);
    engine.stop().unwrap();
}

/// A server's name goes before its door: once a knock is refused because the door is
/// gone, the name is gone too (it went first), so a client connecting while the server
/// is dropped is told there is no service. A watcher knocks as fast as it can while the
/// server is dropped and, at the first refused knock, looks the name up. Before, the
/// fields dropped in order, the door before the connection whose Detach took the name:
/// for a few round trips, the name led to a dead door.
#[test]
fn a_dropped_servers_name_goes_before_its_door() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    for round in 0..40 {
        let service = format!("dropped{round}");
        let procs: Vec<(String, hamlyn_rpc::Procedure)> = vec![(
            "echo".to_string(),
            Box::new(|b: &[u8], _: &mut Ctx<'_>| Ok(b.to_vec())),
        )];
        let server = RpcServer::publish(
            Node::connect(engine.socket_path()).unwrap(),
            &service,
            procs,
        )
        .unwrap();
        let (ready_tx, ready_rx) = mpsc::channel();
        let watcher = {
            let (path, name) = (engine.socket_path().to_path_buf(), format!("rpc/{service}"));
            std::thread::spawn(move || {
                let node = Node::connect(&path).unwrap();
                let door = node.lookup(&name).unwrap().tickets[0];
                let mut t = node.terminus(0).unwrap();
                ready_tx.send(()).unwrap();
                let deadline = Instant::now() + WAIT;
                loop {
                    assert!(Instant::now() < deadline, "the door never went");
                    let h = t
                        .send(&door, &SendOptions::new().tag(1), Data::Inline(b"!"))
                        .unwrap();
                    match h.wait(Some(WAIT)) {
                        Status::Sent => {}
                        Status::Failed(RejectReason::UnknownSlot) => {
                            // Whether the name outlived the door.
                            return node.lookup(&name).is_ok();
                        }
                        s => panic!("knock: {s:?}"),
                    }
                }
            })
        };
        ready_rx.recv_timeout(WAIT).unwrap();
        drop(server);
        assert!(
            !watcher.join().unwrap(),
            "round {round}: the name led to a dead door"
        );
    }
    engine.stop().unwrap();
}
