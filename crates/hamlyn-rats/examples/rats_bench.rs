//! What the protocol layer costs, in one run on one engine (two threads, two node
//! handles, the mediated path): issue 10's performance rows.
//!
//! - 16-byte tagged-write ping-pong through Rats (`TaggedClient::write` / `wait_tag`)
//!   beside the same through the library alone (a terminus send to a slot, a
//!   notification-queue wait): half a round trip, µs;
//! - 16-byte simple-datagram ping-pong answered through the reply seed: round trip, µs;
//! - request/response round trip (16-byte request, 16-byte reply), µs;
//! - stream bandwidth with records of 64 B, 1 KiB and 64 KiB and with 64 KiB byte writes,
//!   beside the library's raw send bandwidth of 64 KiB messages on the same path, GB/s.
//!
//! Medians of several runs; nothing is asserted. Run:
//!   cargo run --release -p hamlyn-rats --example rats_bench
//! With `RATS_DIRECT=1` every manager is direct (`ManagerOptions::danger_direct`): the
//! Rats rows then skip the engine where the protocol allows (the raw rows do not change).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use hamlyn::{Data, Node, NodeOptions, SendOptions, SlotMode};
use hamlyn_rats::request_response::{RequestClient, RequestServer};
use hamlyn_rats::simple_datagram::{SimpleClient, SimpleDatagram};
use hamlyn_rats::stream::{StreamReceiver, StreamSender};
use hamlyn_rats::tagged::{TaggedClient, TaggedServer};
use hamlyn_rats::{Manager, RatsError};

const WAIT: Option<Duration> = Some(Duration::from_secs(30));
const RUNS: usize = 5;
const ROUNDS: usize = 2000;

/// A manager, direct if `RATS_DIRECT` is set.
fn mgr(node: &Node) -> Result<Manager, RatsError> {
    Manager::with_options(
        node,
        hamlyn_rats::ManagerOptions {
            danger_direct: std::env::var_os("RATS_DIRECT").is_some(),
            ..hamlyn_rats::ManagerOptions::default()
        },
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median over runs of `f`, which returns seconds for `ROUNDS` round trips, as µs each.
fn per_round(mut f: impl FnMut() -> f64) -> f64 {
    f();
    median((0..RUNS).map(|_| f() * 1e6 / ROUNDS as f64).collect())
}

fn attach(node: &Node) -> Node {
    Node::connect_with(
        node.socket_path(),
        NodeOptions {
            queue_cap: 4096,
            ..NodeOptions::default()
        },
    )
    .unwrap()
}

/// 16-byte ping-pong through the library alone: a fast slot each way.
fn raw_tagged(node: &Node) -> f64 {
    let b = attach(node);
    let slot_for = |n: &Node| {
        let area = n.area(4096).unwrap();
        let slot = n
            .slot(&area)
            .mode(SlotMode::Fast)
            .queue(0)
            .create()
            .unwrap();
        let t = slot.ticket_all().unwrap();
        (area, slot, t)
    };
    let (_aa, _as, to_a) = slot_for(node);
    let (_ba, _bs, to_b) = slot_for(&b);
    let echo = std::thread::spawn(move || {
        let mut q = b.queue(0).unwrap();
        let mut t = b.terminus(0).unwrap();
        for _ in 0..(RUNS + 1) * ROUNDS {
            let n = q.wait(WAIT).unwrap().unwrap();
            t.send(
                &to_a,
                &SendOptions::new().tag(n.word),
                Data::Inline(&[0; 16]),
            )
            .unwrap();
        }
    });
    let mut q = node.queue(0).unwrap();
    let mut t = node.terminus(0).unwrap();
    let us = per_round(|| {
        let s = Instant::now();
        for i in 0..ROUNDS as u64 {
            t.send(&to_b, &SendOptions::new().tag(i), Data::Inline(&[0; 16]))
                .unwrap();
            q.wait(WAIT).unwrap().unwrap();
        }
        s.elapsed().as_secs_f64()
    });
    echo.join().unwrap();
    us / 2.0
}

/// 16-byte ping-pong through Rats tagged writes.
fn rats_tagged(node: &Node) -> f64 {
    let b = attach(node);
    let ma = mgr(node).unwrap();
    let sa = TaggedServer::new(&ma, 4096).unwrap();
    let seed_a = sa.make_seed().unwrap();
    let (seed_tx, seed_rx) = std::sync::mpsc::channel();
    let echo = std::thread::spawn(move || {
        let mb = mgr(&b).unwrap();
        let sb = TaggedServer::new(&mb, 4096).unwrap();
        seed_tx.send(sb.make_seed().unwrap()).unwrap();
        let to_a = TaggedClient::from_seed(&mb, &seed_a).unwrap();
        for _ in 0..(RUNS + 1) * ROUNDS {
            let t = sb.wait_tag(WAIT).unwrap().unwrap();
            to_a.write(0, &[0; 16], t.tag).unwrap();
        }
    });
    let to_b = TaggedClient::from_seed(&ma, &seed_rx.recv().unwrap()).unwrap();
    let us = per_round(|| {
        let s = Instant::now();
        for i in 0..ROUNDS as u32 {
            to_b.write(0, &[0; 16], i).unwrap();
            sa.wait_tag(WAIT).unwrap().unwrap();
        }
        s.elapsed().as_secs_f64()
    });
    echo.join().unwrap();
    us / 2.0
}

/// 16-byte simple-datagram ping-pong through reply seeds: a round trip.
fn simple_datagram(node: &Node) -> f64 {
    let b = attach(node);
    let ma = mgr(node).unwrap();
    let mut a = SimpleDatagram::new(&ma, 4096).unwrap();
    let (seed_tx, seed_rx) = std::sync::mpsc::channel();
    let echo = std::thread::spawn(move || {
        let mb = mgr(&b).unwrap();
        let mut sb = SimpleDatagram::new(&mb, 4096).unwrap();
        seed_tx.send(sb.make_seed().unwrap()).unwrap();
        for _ in 0..(RUNS + 1) * ROUNDS {
            let m = sb.recv(WAIT).unwrap().unwrap();
            let got = sb.to_vec(&m).unwrap();
            sb.reply_seed().unwrap().send(&mb, &got, None, b"").unwrap();
        }
    });
    let to_b = SimpleClient::from_seed(&ma, &seed_rx.recv().unwrap()).unwrap();
    let me = a.metadata_for_self().unwrap();
    let us = per_round(|| {
        let s = Instant::now();
        for _ in 0..ROUNDS {
            to_b.send(&[7; 16], Some(&me), b"").unwrap();
            let m = a.recv(WAIT).unwrap().unwrap();
            a.to_vec(&m).unwrap();
        }
        s.elapsed().as_secs_f64()
    });
    echo.join().unwrap();
    us
}

/// Request/response round trip: 16 bytes each way.
fn request_response(node: &Node) -> f64 {
    let b = attach(node);
    let (seed_tx, seed_rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let mb = mgr(&b).unwrap();
        let mut srv = RequestServer::new(&mb, 4096).unwrap();
        seed_tx.send(srv.seed_text().unwrap()).unwrap();
        for _ in 0..(RUNS + 1) * ROUNDS {
            let r = srv.recv(WAIT).unwrap().unwrap();
            let bytes = srv.to_vec(&r).unwrap();
            srv.send_reply(&r, &bytes).unwrap();
            srv.release().unwrap();
        }
    });
    let ma = mgr(node).unwrap();
    let mut c = RequestClient::from_text(&ma, &seed_rx.recv().unwrap(), 4096).unwrap();
    let us = per_round(|| {
        let s = Instant::now();
        for _ in 0..ROUNDS {
            let r = c.call(&[1; 16], Duration::from_secs(30)).unwrap();
            c.reply_bytes(&r).unwrap();
            c.release();
        }
        s.elapsed().as_secs_f64()
    });
    server.join().unwrap();
    us
}

/// Stream bandwidth, GB/s: `total` bytes in writes of `size`, as records or bytes.
fn stream(node: &Node, size: usize, records: bool, total: usize) -> f64 {
    median(
        (0..RUNS)
            .map(|_| {
                let b = attach(node);
                let m = mgr(node).unwrap();
                let mut rx = StreamReceiver::new(&m, 8 << 20, 64).unwrap();
                let seed = rx.make_seed().unwrap();
                let start = Instant::now();
                let sender = std::thread::spawn(move || -> Result<(), RatsError> {
                    let mb = mgr(&b)?;
                    let mut tx = StreamSender::from_seed(&mb, &seed)?;
                    let chunk = vec![0x5Au8; size];
                    for _ in 0..total / size {
                        if records {
                            tx.write_record(&chunk)?;
                        } else {
                            tx.write_bytes(&chunk)?;
                        }
                    }
                    tx.close()?.wait(WAIT);
                    Ok(())
                });
                let mut got = 0usize;
                loop {
                    match rx.read_bytes(WAIT) {
                        Ok(Some(v)) => {
                            got += v.len as usize;
                            rx.release(&v).unwrap();
                        }
                        Ok(None) => panic!("the stream stalled"),
                        Err(RatsError::EndOfStream) => break,
                        Err(e) => panic!("{e}"),
                    }
                }
                sender.join().unwrap().unwrap();
                assert_eq!(got, total / size * size);
                got as f64 / start.elapsed().as_secs_f64() / 1e9
            })
            .collect(),
    )
}

/// The library's raw send bandwidth of 64 KiB messages on the same path, GB/s: the
/// receiver counts notifications; the sender keeps 32 messages in flight.
fn raw_bandwidth(node: &Node, total: usize) -> f64 {
    const MSG: u64 = 64 << 10;
    const ENTRIES: u32 = 32;
    median(
        (0..RUNS)
            .map(|_| {
                let b = attach(node);
                let area = node.area(MSG * u64::from(ENTRIES)).unwrap();
                let meta = node.meta_area(ENTRIES).unwrap();
                let slot = node.slot(&area).meta(&meta).queue(0).create().unwrap();
                let ticket = slot.ticket_all().unwrap();
                let count = total / MSG as usize;
                let start = Instant::now();
                let sender = std::thread::spawn(move || {
                    let src = b.area(MSG * u64::from(ENTRIES)).unwrap();
                    let mut t = b.terminus(0).unwrap();
                    let mut handles = std::collections::VecDeque::new();
                    for i in 0..count {
                        let e = (i % ENTRIES as usize) as u64;
                        if handles.len() == ENTRIES as usize {
                            let h: hamlyn::SendHandle = handles.pop_front().unwrap();
                            h.wait(WAIT);
                        }
                        let opts = SendOptions::new()
                            .offset(e * MSG)
                            .entry(e as u32)
                            .tag(i as u64);
                        let h = loop {
                            match t.send(&ticket, &opts, Data::Gather(&[src.span(e * MSG, MSG)])) {
                                Ok(h) => break h,
                                Err(_) => std::thread::yield_now(),
                            }
                        };
                        handles.push_back(h);
                    }
                    t.wait_idle(WAIT);
                });
                let mut q = node.queue(0).unwrap();
                for _ in 0..count {
                    q.wait(WAIT).unwrap().expect("a message");
                }
                sender.join().unwrap();
                drop(slot);
                (count as u64 * MSG) as f64 / start.elapsed().as_secs_f64() / 1e9
            })
            .collect(),
    )
}

fn main() {
    // The engine lives as long as `engine`; everything attaches to it.
    let engine = Node::embedded().unwrap();
    let node = Node::connect_with(
        engine.socket_path(),
        NodeOptions {
            queue_cap: 4096,
            ..NodeOptions::default()
        },
    )
    .unwrap();
    let raw = raw_tagged(&node);
    let tagged = rats_tagged(&node);
    let simple = simple_datagram(&node);
    let rr = request_response(&node);
    let total = 256 << 20;
    let raw_bw = raw_bandwidth(&node, total);
    let bw: Vec<(&str, f64)> = vec![
        ("records of 64 B", stream(&node, 64, true, 16 << 20)),
        ("records of 1 KiB", stream(&node, 1024, true, 64 << 20)),
        ("records of 64 KiB", stream(&node, 64 << 10, true, total)),
        (
            "bytes in writes of 64 KiB",
            stream(&node, 64 << 10, false, total),
        ),
    ];
    println!(
        "Rats on one engine, mediated, two threads ({} cores); medians of {RUNS} runs\n",
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    println!("| figure | µs |");
    println!("|---|---|");
    println!("| 16 B tagged write, one way, library alone | {raw:.2} |");
    println!("| 16 B tagged write, one way, through Rats | {tagged:.2} |");
    println!("| 16 B simple datagram with reply seed, round trip | {simple:.2} |");
    println!("| 16 B request/response, round trip | {rr:.2} |");
    println!("\n| stream | GB/s | ÷ raw 64 KiB sends ({raw_bw:.2} GB/s) |");
    println!("|---|---|---|");
    for (what, gbps) in bw {
        println!("| {what} | {gbps:.2} | {:.2} |", gbps / raw_bw);
    }
}
