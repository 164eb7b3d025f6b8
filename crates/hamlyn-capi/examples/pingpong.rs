//! The Rust twin of the C ping-pong (`tests/c/pingpong.c`): the same two roles, the same
//! messages (the pinger's seed as a hello from an area, then 8-byte words, each sent and
//! waited for, answered with the word plus one), the same waits, through the Rust
//! library instead of the C API — so `bench/bindings.sh` can put the C API's cost per
//! message beside nothing but itself. Connects to `$HAMLYN_SOCKET`.
//!
//!   pingpong pong    prints its inbox's seed, answers until the bye
//!   pingpong ping    `HAMLYN_PEER_SEED` is the pong's seed; `HAMLYN_ROUNDS` pings
//!                    (default 100); prints the mean round trip on stderr
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use hamlyn::{Data, Node, NotificationKind, NotifyQueue, SendOptions, Status, Terminus, Ticket};

const TAG_HELLO: u64 = 1;
const TAG_PING: u64 = 2;
const TAG_BYE: u64 = 3;
const AREA: u64 = 4096;
const HELLO: u64 = 1024;
const WAIT: Option<Duration> = Some(Duration::from_secs(60));

struct End {
    node: Node,
    area: hamlyn::Area,
    _meta: hamlyn::MetaArea,
    _slot: hamlyn::Slot,
    ticket: Ticket,
    queue: NotifyQueue,
    terminus: Terminus,
}

fn open_end() -> End {
    let node = Node::connect_default().unwrap();
    let area = node.area(AREA).unwrap();
    let meta = node.meta_area(4).unwrap();
    let slot = node.slot(&area).meta(&meta).queue(0).create().unwrap();
    let ticket = slot.ticket_all().unwrap();
    let queue = node.queue(0).unwrap();
    let terminus = node.terminus(0).unwrap();
    End {
        node,
        area,
        _meta: meta,
        _slot: slot,
        ticket,
        queue,
        terminus,
    }
}

fn send_word(e: &mut End, to: &Ticket, tag: u64, value: u64) {
    let h = e
        .terminus
        .send(
            to,
            &SendOptions::new().tag(tag),
            Data::Inline(&value.to_le_bytes()),
        )
        .unwrap();
    assert_eq!(h.wait(WAIT), Status::Sent);
}

fn next(e: &mut End) -> hamlyn::Notification {
    let n = e.queue.wait(WAIT).unwrap().expect("a message");
    assert_eq!(n.kind, NotificationKind::Message);
    n
}

fn word_at_0(e: &End) -> u64 {
    let mut w = [0u8; 8];
    e.area.read(0, &mut w).unwrap();
    u64::from_le_bytes(w)
}

fn pong() {
    let mut e = open_end();
    println!("{}", hamlyn::seed::ticket_to_text(&e.ticket).unwrap());
    let n = next(&mut e);
    assert_eq!(n.word, TAG_HELLO);
    let text = e.area.read_vec(HELLO, n.len as usize).unwrap();
    let text = std::str::from_utf8(&text).unwrap().trim_end_matches('\0');
    let peer = hamlyn::seed::ticket_from_text(text).unwrap();
    loop {
        let n = next(&mut e);
        if n.word == TAG_BYE {
            break;
        }
        let v = word_at_0(&e);
        send_word(&mut e, &peer, TAG_PING, v + 1);
    }
    drop(e.node);
}

fn ping() {
    let mut e = open_end();
    let rounds: u64 = std::env::var("HAMLYN_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let peer = hamlyn::seed::ticket_from_text(&std::env::var("HAMLYN_PEER_SEED").unwrap()).unwrap();
    let out = e.node.area(AREA).unwrap();
    let mut text = hamlyn::seed::ticket_to_text(&e.ticket)
        .unwrap()
        .into_bytes();
    text.push(0);
    out.write(0, &text).unwrap();
    let h = e
        .terminus
        .send(
            &peer,
            &SendOptions::new().tag(TAG_HELLO).offset(HELLO),
            Data::Gather(&[out.span(0, text.len() as u64)]),
        )
        .unwrap();
    assert_eq!(h.wait(WAIT), Status::Sent);
    let t = Instant::now();
    for i in 0..rounds {
        send_word(&mut e, &peer, TAG_PING, i * 2);
        let n = next(&mut e);
        assert_eq!(n.word, TAG_PING);
        assert_eq!(word_at_0(&e), i * 2 + 1);
    }
    let ns = t.elapsed().as_nanos() as f64;
    eprintln!(
        "ping: {:.1} ns per round trip",
        if rounds > 0 { ns / rounds as f64 } else { 0.0 }
    );
    send_word(&mut e, &peer, TAG_BYE, 0);
}

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("pong") => pong(),
        Some("ping") => ping(),
        _ => {
            eprintln!("usage: pingpong ping|pong");
            std::process::exit(2);
        }
    }
}
