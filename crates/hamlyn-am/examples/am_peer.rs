//! A Rust active-message endpoint that other languages call, and that calls theirs, by
//! name (issue 12 item 5: handlers written in C or Python register under the same
//! names). The Python package's tests run it beside a Python endpoint on one engine.
//!
//! `am_peer` connects to the engine at `$HAMLYN_SOCKET` (else `/tmp/hamlyn.sock`),
//! registers `rust.add` (layout "u64 a, u64 b": replies `[a + b, channel, 0, 0]`) and
//! `rust.sum` (layout "u64 seed; payload bytes": replies `[seed + the payload's byte
//! sum, payload length, 0, 0]`), synchs, and prints `addr NODE CLIENT` and
//! `fingerprint F` (that of "u64 a, u64 b"). Then it serves its handlers while it reads
//! commands from stdin, one per line:
//!
//! - `call NODE CLIENT NAME A B`: looks `NAME` up (after a refresh) and calls it at
//!   endpoint `NODE CLIENT` with arguments `[A, B, 0, 0]`; prints `reply R0 R1 R2 R3`,
//!   or `error MESSAGE`;
//! - `bulk NODE CLIENT NAME LEN`: the same with a bulk payload of `LEN` bytes
//!   `i % 251`;
//! - end of input: prints `served N` (messages its handlers ran) and exits.
//!
//! Every wait is bounded (30 s): a lost peer makes it fail, never hang.
#![allow(clippy::unwrap_used)]

use std::io::BufRead;
use std::sync::mpsc;
use std::time::Duration;

use hamlyn::{Node, NodeId};
use hamlyn_am::{fingerprint, Addr, AmEndpoint, AmError, AmOptions, Outcome, Want};

const WAIT: Duration = Duration::from_secs(30);

fn main() {
    let node = Node::connect(hamlyn::default_socket_path()).unwrap();
    let mut ep = AmEndpoint::new(node, AmOptions::default()).unwrap();
    let pair = fingerprint("u64 a, u64 b");
    ep.register("rust.add", pair, |c| {
        let [a, b, ..] = c.args();
        c.reply([a.wrapping_add(b), u64::from(c.channel()), 0, 0])
            .map_err(|e| e.to_string())
    })
    .unwrap();
    ep.register("rust.sum", fingerprint("u64 seed; payload bytes"), |c| {
        let p = c.payload().map_err(|e| e.to_string())?;
        let sum = p.iter().map(|&b| u64::from(b)).sum::<u64>();
        c.reply([c.args()[0] + sum, p.len() as u64, 0, 0])
            .map_err(|e| e.to_string())
    })
    .unwrap();
    ep.synch().unwrap();
    let a = ep.addr();
    println!("addr {} {}", a.node.0, a.client);
    println!("fingerprint {pair}");

    // Commands arrive on a thread of their own, so this one keeps serving meanwhile.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    loop {
        match rx.try_recv() {
            Ok(line) => command(&mut ep, &line),
            Err(mpsc::TryRecvError::Disconnected) => break,
            Err(mpsc::TryRecvError::Empty) => {
                ep.poll(Some(Duration::from_millis(5))).unwrap();
            }
        }
    }
    println!("served {}", ep.counters().handled);
}

fn command(ep: &mut AmEndpoint, line: &str) {
    let w: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| -> u64 { w.get(i).and_then(|s| s.parse().ok()).unwrap_or(0) };
    let to = Addr {
        node: NodeId(num(1) as u32),
        client: num(2) as u32,
    };
    let name = w.get(3).copied().unwrap_or("");
    let result = ep.refresh().and_then(|()| {
        let h = ep.handler_by_name(name)?;
        match w.first().copied() {
            Some("call") => ep.call(to, h, 0, [num(4), num(5), 0, 0], WAIT),
            Some("bulk") => {
                let payload: Vec<u8> = (0..num(4)).map(|i| (i % 251) as u8).collect();
                let c = ep.send_bulk(to, h, 0, [0; 4], &payload, Want::Reply)?;
                match ep.wait(c, WAIT)? {
                    Outcome::Reply(r) => Ok(r),
                    Outcome::Done => Ok([0; 4]),
                }
            }
            _ => Err(AmError::BadName(line.to_owned())),
        }
    });
    match result {
        Ok([a, b, c, d]) => println!("reply {a} {b} {c} {d}"),
        Err(e) => println!("error {e}"),
    }
}
