//! Messages over three nodes (TCP, two rails): bulk 64 KiB from 8 senders into one
//! receiver under sender-based credit (checksums exact, nothing overrun, back-pressure
//! seen by every sender); replies, remote completion, memory messages; and bad input
//! (forged ids, lying lengths, a reply token used twice) refused, typed and counted,
//! with no handler ever called on it.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::{cluster, endpoint, serve, WAIT};
use hamlyn_am::header::{Header, Kind};
use hamlyn_am::{fingerprint, AmError, CallId, Outcome, Refusal, Want};

const SENDERS: usize = 8;
const PER_SENDER: usize = 6;
const BULK: usize = 64 * 1024;

fn payload(sender: usize, i: usize) -> Vec<u8> {
    (0..BULK as u32)
        .map(|k| (k.wrapping_mul(2_654_435_761) ^ (sender * 131 + i) as u32) as u8)
        .collect()
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[test]
fn bulk_from_eight_senders_lands_exactly_under_credit_with_back_pressure() {
    let engines = cluster(3);
    let layout = fingerprint("u64 checksum, u64 sender, u64 index; 64 KiB payload");
    // The receiver on node 0 checks every payload against the checksum its sender
    // computed; a mismatch is a handler error (and fails the test below).
    let (paused_tx, paused_rx) = mpsc::channel();
    let receiver = serve(
        engines[0].socket_path(),
        move |ep| {
            ep.register("sink", layout, |c| {
                let bytes = c.payload().map_err(|e| e.to_string())?;
                let [sum, ..] = c.args();
                if bytes.len() != BULK || checksum(&bytes) != sum {
                    return Err("checksum".into());
                }
                // A part of the view, and nothing past its end.
                let mut last = [0u8; 2];
                c.read_payload(BULK as u64 - 2, &mut last)
                    .map_err(|e| e.to_string())?;
                if last[..] != bytes[BULK - 2..] {
                    return Err("the view's tail".into());
                }
                if c.read_payload(BULK as u64 - 1, &mut last).is_ok()
                    || c.read_payload(u64::MAX, &mut last).is_ok()
                {
                    return Err("read past the payload".into());
                }
                Ok(())
            })
            .unwrap();
            ep.synch().unwrap();
        },
        |ep| (ep.handler_counters(), ep.counters()),
    );
    let sink = {
        let mut probe = endpoint(engines[0].socket_path());
        probe.refresh().unwrap();
        probe.handler_by_name("sink").unwrap()
    };
    let to = receiver.addr;
    // Senders on nodes 1 and 2, four each: link, then wait for the receiver to stop
    // polling, send until the link is full (it must be: nothing is given back while
    // the receiver does not poll), report, then send the rest, waiting out Full.
    let (go_txs, senders): (Vec<_>, Vec<_>) = (0..SENDERS)
        .map(|s| {
            let path = engines[1 + s % 2].socket_path().to_path_buf();
            let (go_tx, go_rx) = mpsc::channel::<()>();
            let (full_tx, linked_tx) = (paused_tx.clone(), paused_tx.clone());
            let t = std::thread::spawn(move || {
                let mut ep = endpoint(&path);
                ep.connect(to, WAIT).unwrap();
                let channel = ep.open_channel((s % 3) as u8).unwrap();
                linked_tx.send(()).unwrap();
                go_rx.recv_timeout(WAIT).unwrap();
                let mut calls: Vec<CallId> = Vec::new();
                let mut fulls = 0u64;
                for i in 0..PER_SENDER {
                    let p = payload(s, i);
                    let args = [checksum(&p), s as u64, i as u64, 0];
                    loop {
                        match ep.send_bulk(to, sink, channel, args, &p, Want::Ack) {
                            Ok(c) => {
                                calls.push(c);
                                break;
                            }
                            Err(AmError::Full) => {
                                if fulls == 0 {
                                    full_tx.send(()).unwrap();
                                }
                                fulls += 1;
                                ep.poll(Some(Duration::from_millis(1))).unwrap();
                            }
                            Err(e) => panic!("sender {s}: {e}"),
                        }
                    }
                }
                for c in calls {
                    assert_eq!(ep.wait(c, WAIT).unwrap(), Outcome::Done);
                }
                (fulls, ep.counters().full)
            });
            (go_tx, t)
        })
        .unzip();
    for _ in 0..SENDERS {
        paused_rx.recv_timeout(WAIT).unwrap();
    }
    // Everyone is linked: the receiver stops polling until every sender saw Full.
    let (held_tx, held_rx) = mpsc::channel::<()>();
    let (release, release_rx) = mpsc::channel::<()>();
    receiver.post(move |_| {
        held_tx.send(()).unwrap();
        let _ = release_rx.recv_timeout(WAIT * 4);
    });
    held_rx.recv_timeout(WAIT).unwrap();
    for g in &go_txs {
        g.send(()).unwrap();
    }
    for _ in 0..SENDERS {
        paused_rx.recv_timeout(WAIT).unwrap();
    }
    release.send(()).unwrap();
    for (s, t) in senders.into_iter().enumerate() {
        let (fulls, counted) = t.join().unwrap();
        assert!(
            fulls > 0 && counted == fulls,
            "sender {s} saw back-pressure"
        );
    }
    let (handlers, counters) = receiver.finish();
    let sink = handlers.iter().find(|(n, _)| n == "sink").unwrap().1;
    assert_eq!(sink.calls, (SENDERS * PER_SENDER) as u64);
    assert_eq!(sink.errors, 0, "every checksum exact");
    assert_eq!(counters.malformed, 0);
    for e in engines {
        e.stop().unwrap();
    }
}

/// Waits (bounded) until `f` holds, polling `ep` meanwhile.
fn until(ep: &mut hamlyn_am::AmEndpoint, mut f: impl FnMut(&mut hamlyn_am::AmEndpoint) -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !f(ep) {
        assert!(std::time::Instant::now() < deadline, "never happened");
        ep.poll(Some(Duration::from_millis(5))).unwrap();
    }
}

#[test]
fn replies_completion_memory_and_bad_input_across_nodes() {
    let engines = cluster(2);
    let server = serve(
        engines[0].socket_path(),
        |ep| {
            let fp = fingerprint("u64 a, u64 b");
            ep.register("add", fp, |c| {
                let [a, b, ..] = c.args();
                c.reply([a + b, u64::from(c.channel()), c.payload_len(), 0])
                    .map_err(|e| e.to_string())
            })
            .unwrap();
            ep.register("noop", fp, |_| Ok(())).unwrap();
            ep.register("twice", fp, |c| {
                c.reply([1; 4]).map_err(|e| e.to_string())?;
                match c.reply([2; 4]) {
                    Err(AmError::ReplyTwice) => Err("replied twice".into()),
                    other => panic!("a second reply must be refused: {other:?}"),
                }
            })
            .unwrap();
            ep.register("fails", fp, |_| Err("no".into())).unwrap();
            ep.synch().unwrap();
        },
        |ep| (ep.handler_counters(), ep.counters()),
    );
    let to = server.addr;
    let mut client = endpoint(engines[1].socket_path());
    client.refresh().unwrap();
    let id = |n: &str| client.handler_by_name(n).unwrap();
    let (add, noop, twice, fails) = (id("add"), id("noop"), id("twice"), id("fails"));

    // A reply, with the logical channel it came on (a terminus of the client's, at a
    // priority of its own); a bulk message's reply; a channel not opened is refused.
    let (urgent, lazy) = (
        client.open_channel(0).unwrap(),
        client.open_channel(3).unwrap(),
    );
    assert_eq!((urgent, lazy), (1, 2));
    assert_eq!(
        client.call(to, add, lazy, [2, 3, 0, 0], WAIT).unwrap(),
        [5, 2, 0, 0]
    );
    assert!(matches!(
        client.send_short(to, add, 7, [0; 4], Want::Nothing),
        Err(AmError::NoChannel(7))
    ));
    let c = client
        .send_bulk(
            to,
            add,
            urgent,
            [1, 1, 0, 0],
            &[9u8; 70_000 - 64 * 1024 + 100],
            Want::Reply,
        )
        .unwrap();
    assert_eq!(
        client.wait(c, WAIT).unwrap(),
        Outcome::Reply([2, 1, 4_564, 0])
    );
    // Remote completion of a message without reply.
    let c = client.send_short(to, noop, 0, [0; 4], Want::Ack).unwrap();
    assert_eq!(client.wait(c, WAIT).unwrap(), Outcome::Done);
    // A reply asked of a handler that gives none; a reply token used twice; a handler
    // that fails: each an error naming the handler.
    for (h, name, why) in [
        (noop, "noop", Refusal::NoReply),
        (twice, "twice", Refusal::HandlerFailed),
        (fails, "fails", Refusal::HandlerFailed),
    ] {
        match client.call(to, h, 0, [0; 4], WAIT) {
            Err(AmError::Refused {
                handler, why: w, ..
            }) => assert_eq!((handler.as_str(), w), (name, why)),
            other => panic!("{name}: {other:?}"),
        }
    }
    // Too long for a bulk buffer: refused here, nothing sent.
    assert!(matches!(
        client.send_bulk(to, add, 0, [0; 4], &vec![0u8; 64 * 1024 + 1], Want::Nothing),
        Err(AmError::TooLong { .. })
    ));

    // Bad input, sent raw: a short message claiming a payload, a bulk one lying about
    // its length, a bulk header on the short channel, bytes that are no header.
    let mut lying = Header::new(Kind::Short);
    lying.handler = noop.id;
    lying.epoch = noop.epoch;
    lying.payload_len = 100;
    client.send_raw(to, &lying.encode(), false).unwrap();
    let mut bulk = Header::new(Kind::Bulk);
    bulk.handler = add.id;
    bulk.epoch = add.epoch;
    bulk.payload_len = 1000;
    let mut bytes = bulk.encode().to_vec();
    bytes.extend_from_slice(&[0u8; 10]);
    client.send_raw(to, &bytes, true).unwrap();
    bulk.payload_len = 0;
    client.send_raw(to, &bulk.encode(), false).unwrap();
    client.send_raw(to, b"garbage", false).unwrap();
    // A forged id and an old epoch.
    let mut forged = Header::new(Kind::Short);
    forged.handler = 999;
    client.send_raw(to, &forged.encode(), false).unwrap();
    forged.handler = add.id;
    forged.epoch = add.epoch + 1;
    client.send_raw(to, &forged.encode(), false).unwrap();
    // A knock on the server's door naming a client that published no link.
    let door = client
        .node()
        .lookup(&format!("am.door.{}.{}", to.node.0, to.client))
        .unwrap();
    let other = hamlyn::Node::connect(engines[1].socket_path()).unwrap();
    let knocker = hamlyn_rats::Manager::new(&other).unwrap();
    let knock = hamlyn_rats::tagged::TaggedClient::from_seed(&knocker, &door).unwrap();
    assert!(!knock
        .write(0, &[1], 4242)
        .unwrap()
        .wait(Some(WAIT))
        .is_failed());
    // A reply for no call of the server's.
    let mut reply = Header::new(Kind::Reply);
    reply.call = 1 << 40;
    client.send_raw(to, &reply.encode(), false).unwrap();
    let counted = {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let c = server.run(|ep| ep.counters());
            if c.malformed == 4
                && c.unknown_handler == 1
                && c.stale_epoch == 1
                && c.reply_refused == 1
                && c.bad_hellos == 1
            {
                break c;
            }
            assert!(std::time::Instant::now() < deadline, "not counted: {c:?}");
            client.poll(Some(Duration::from_millis(5))).unwrap();
        }
    };
    assert_eq!(counted.handled, 6, "no handler ran on bad input");

    // The server sends the reply of our last call again (a token used twice): refused
    // here, counted.
    let c = client
        .send_short(to, add, 0, [1, 2, 0, 0], Want::Reply)
        .unwrap();
    assert!(matches!(
        client.wait(c, WAIT).unwrap(),
        Outcome::Reply([3, ..])
    ));
    let me = client.addr();
    let mut again = Header::new(Kind::Reply);
    again.handler = add.id;
    again.epoch = add.epoch;
    again.call = c.0;
    again.args = [3, 0, 0, 0];
    server.run(move |ep| ep.send_raw(me, &again.encode(), false).unwrap());
    until(&mut client, |ep| ep.counters().reply_refused == 1);

    // A memory message: a block copy into our region, no handler.
    let region = client.memory_region(4096).unwrap();
    let seed = region.seed().unwrap();
    let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let d = data.clone();
    let sent = server.run(move |ep| {
        let t = ep.memory_target(&seed).unwrap();
        t.write(500, &d).unwrap().wait(Some(WAIT))
    });
    assert!(!sent.is_failed(), "{sent:?}");
    let mut got = vec![0u8; 3000];
    until(&mut client, |_| {
        region.read(500, &mut got).unwrap();
        got == data
    });
    let (handlers, _) = server.finish();
    let calls = |n: &str| handlers.iter().find(|(h, _)| h == n).unwrap().1;
    assert_eq!((calls("add").calls, calls("add").replies), (3, 3));
    assert_eq!((calls("twice").calls, calls("twice").errors), (1, 1));
    assert_eq!((calls("noop").calls, calls("noop").errors), (2, 1));
    for e in engines {
        e.stop().unwrap();
    }
}

/// A server that serves until told to go quiet, then leaves (its connection closes)
/// when told to, with whatever arrived meanwhile unanswered.
fn leaving_server(
    path: std::path::PathBuf,
) -> (
    hamlyn_am::Addr,
    mpsc::Sender<()>,
    mpsc::Receiver<()>,
    mpsc::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let (addr_tx, addr_rx) = mpsc::channel();
    let (quiet_tx, quiet_rx) = mpsc::channel::<()>();
    let (quiet_ack, quiet_acked) = mpsc::channel::<()>();
    let (die_tx, die_rx) = mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        let mut ep = endpoint(&path);
        ep.register("echo", fingerprint("any"), |c| {
            c.reply(c.args()).map_err(|e| e.to_string())
        })
        .unwrap();
        ep.synch().unwrap();
        addr_tx.send(ep.addr()).unwrap();
        while quiet_rx.try_recv().is_err() {
            ep.poll(Some(Duration::from_millis(5))).unwrap();
        }
        quiet_ack.send(()).unwrap();
        die_rx.recv_timeout(WAIT).unwrap();
        drop(ep);
    });
    let addr = addr_rx.recv_timeout(WAIT).unwrap();
    (addr, quiet_tx, quiet_acked, die_tx, t)
}

#[test]
fn a_call_to_an_endpoint_that_goes_away_fails_instead_of_waiting_out() {
    let engines = cluster(2);
    // Across nodes: the message finds the peer's slot gone (its send fails), or it
    // landed before and the waiting call sees the peer's door leave the registry.
    // On one node a message reported sent has landed: only the second can happen.
    for (server_node, client_node) in [(0, 1), (0, 0)] {
        let (to, quiet, quieted, die, server) =
            leaving_server(engines[server_node].socket_path().to_path_buf());
        let mut client = endpoint(engines[client_node].socket_path());
        client.refresh().unwrap();
        let echo = client.handler_by_name("echo").unwrap();
        assert_eq!(
            client.call(to, echo, 0, [1, 2, 3, 4], WAIT).unwrap(),
            [1, 2, 3, 4]
        );
        quiet.send(()).unwrap();
        quieted.recv_timeout(WAIT).unwrap();
        let c = client.send_short(to, echo, 0, [0; 4], Want::Reply).unwrap();
        if server_node == client_node {
            let deadline = std::time::Instant::now() + WAIT;
            while !client.send_status(c).unwrap().is_done() {
                assert!(std::time::Instant::now() < deadline);
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(client.send_status(c), Some(hamlyn::Status::Sent));
        }
        die.send(()).unwrap();
        server.join().unwrap();
        match client.wait(c, WAIT) {
            Err(AmError::PeerGone(a)) => assert_eq!(a, to),
            Err(AmError::SendFailed(s)) if server_node != client_node => {
                assert!(s.is_failed())
            }
            other => panic!("the call must fail when its peer leaves: {other:?}"),
        }
    }
    for e in engines {
        e.stop().unwrap();
    }
}

/// An endpoint's names go with it, before its door and receivers: a connection that
/// outlives it (a clone of its node) keeps none of them, so no peer is led to its dead
/// slots. Before, they stayed as long as the connection.
#[test]
fn a_dropped_endpoints_names_go_with_it() {
    let engines = cluster(1);
    let path = engines[0].socket_path();
    let peer = serve(path, |_| {}, |_| ());
    let node = hamlyn::Node::connect(path).unwrap();
    let mut ep = hamlyn_am::AmEndpoint::new(node.clone(), hamlyn_am::AmOptions::default()).unwrap();
    ep.connect(peer.addr, WAIT).unwrap();
    let (me, to) = (ep.addr(), peer.addr);
    let names = [
        format!("am.door.{}.{}", me.node.0, me.client),
        format!(
            "am.link.{}.{}.{}.{}.s",
            me.node.0, me.client, to.node.0, to.client
        ),
        format!(
            "am.link.{}.{}.{}.{}.b",
            me.node.0, me.client, to.node.0, to.client
        ),
    ];
    for name in &names {
        assert!(node.lookup(name).is_ok(), "{name} published");
    }
    drop(ep);
    for name in &names {
        assert!(
            matches!(
                node.lookup(name),
                Err(hamlyn::Error::Refused {
                    code: Some(hamlyn::ControlErrorCode::NotFound),
                    ..
                })
            ),
            "{name} outlived its endpoint"
        );
    }
    peer.finish();
    for e in engines {
        e.stop().unwrap();
    }
}
