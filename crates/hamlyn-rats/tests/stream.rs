//! The stream between two node handles (local, mediated) and between two nodes over TCP
//! with 2 rails (messages arrive out of order): records of random sizes (1 B – 64 KiB)
//! interleaved with byte writes, read back as records and bytes in order, byte-exact,
//! by a receiver slower than its sender (it releases late), which is never overrun.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use hamlyn::{Data, Node, SendOptions};
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
    let mut out: Vec<(Vec<u8>, bool)> = Vec::with_capacity(count + count / 1000);
    for i in 0..count {
        out.push({
            let len = match r.below(100) {
                0..=69 => 1 + r.below(100),
                70..=94 => 100 + r.below(4000),
                _ => 4096 + r.below(65536 - 4096 + 1),
            } as usize;
            let bytes = (0..len)
                .map(|k| (k as u64 * 31 + i as u64 * 7) as u8)
                .collect();
            (bytes, r.below(4) != 0)
        });
        // What `send_all` adds without a copy (`write_buffer`).
        if i % 1000 == 999 {
            out.push((vec![0xA5; 65_536], true));
        }
    }
    out
}

/// A write `send_all` makes from message space (not from `w`'s bytes).
fn is_buffered(b: &[u8]) -> bool {
    b.len() == 65_536 && b.iter().all(|&x| x == 0xA5)
}

/// Sends `w` on `node` into the ring `seed_text` names, flushing now and then, and
/// closes the stream.
fn send_all(node: Node, seed_text: String, w: Vec<(Vec<u8>, bool)>) -> u64 {
    let m = Manager::new(&node).unwrap();
    let seed = hamlyn::seed::from_text(&seed_text).unwrap();
    let mut s = StreamSender::from_seed(&m, &seed).unwrap();
    let mut copied = 0u64;
    for (i, (bytes, record)) in w.iter().filter(|(b, _)| !is_buffered(b)).enumerate() {
        let st = if *record {
            s.write_record(bytes).unwrap()
        } else {
            s.write_bytes(bytes).unwrap()
        };
        if matches!(st, WriteStatus::Copied) {
            copied += 1;
        }
        // Now and then a large one without a copy, from message space.
        if i % 1000 == 999 {
            // Exactly the record: its end goes as a flag, not in the buffer.
            let b = m.alloc(65_536).unwrap();
            b.write(0, &[0xA5; 65_536]).unwrap();
            s.write_buffer(b, 65_536, true).unwrap();
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
            Ok(None) => panic!(
                "stream stalled at {} of {} bytes",
                got.len(),
                expected.len()
            ),
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
            assert!(
                record_ends.contains(&end),
                "record end at {end} that was not written"
            );
        }
        // Slow: release only every eighth view (and everything before it).
        unreleased.push(v);
        if unreleased.len() == 8 {
            rx.release(unreleased.last().unwrap()).unwrap();
            unreleased.clear();
        }
    }
    assert!(
        got == expected,
        "stream bytes differ ({} of {})",
        got.len(),
        expected.len()
    );
    assert_eq!(rx.forged(), 0);
}

/// Writes per stream test: 20,000 by default (about 45 MB); `RATS_STREAM_WRITES=1000000`
/// runs the million (about 2.3 GB through the ring).
fn count() -> usize {
    std::env::var("RATS_STREAM_WRITES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
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
    run(b, &a, count());
}

#[test]
fn records_and_bytes_in_order_between_two_nodes_over_tcp() {
    let (_ea, _eb, a, b) = common::two_nodes();
    run(b, &a, count());
}

#[test]
fn forged_stream_metadata_is_refused_counted_and_the_stream_goes_on() {
    let a = Node::embedded().unwrap();
    let m = Manager::new(&a).unwrap();
    let mut rx = StreamReceiver::new(&m, 1 << 20, 4).unwrap();
    let seed = rx.make_seed().unwrap();
    let ring = seed.tickets[0];
    // An attacker holding the ring's ticket, writing by hand.
    let evil = Node::connect(a.socket_path()).unwrap();
    let mut et = evil.terminus(0).unwrap();
    let forge = |et: &mut hamlyn::Terminus, seq: u32, records: u16, len: usize| {
        let mut meta = vec![1u8, 0];
        meta.extend_from_slice(&seq.to_le_bytes());
        meta.extend_from_slice(&0u64.to_le_bytes());
        meta.extend_from_slice(&records.to_le_bytes());
        meta.extend_from_slice(&[0u8; 36]);
        let opts = SendOptions::new().meta(&meta).entry(seq % 4);
        let h = et
            .send(&ring, &opts, Data::Inline(&vec![7u8; len]))
            .unwrap();
        assert!(!h.wait(WAIT).is_failed());
    };
    // A sequence number far outside the window; a record table longer than the message.
    forge(&mut et, 1000, 0, 8);
    forge(&mut et, 0, 5, 4);
    assert!(rx.read_record(Some(Duration::ZERO)).unwrap().is_none());
    assert_eq!(rx.forged(), 2);
    assert_eq!(m.stats().forged, 2);
    // The real sender's stream goes through untouched.
    let sm = Manager::new(&Node::connect(a.socket_path()).unwrap()).unwrap();
    let mut tx = StreamSender::from_seed(&sm, &seed).unwrap();
    tx.write_record(b"hello").unwrap();
    tx.write_bytes(&[9u8; 10_000]).unwrap();
    tx.close().unwrap();
    let v = rx.read_record(WAIT).unwrap().unwrap();
    assert_eq!(
        (rx.copy(&v).unwrap(), v.record_end),
        (b"hello".to_vec(), true)
    );
    let v = rx.read_bytes(WAIT).unwrap().unwrap();
    assert_eq!(rx.copy(&v).unwrap(), vec![9u8; 10_000]);
    rx.release(&v).unwrap();
    assert!(matches!(rx.read_record(WAIT), Err(RatsError::EndOfStream)));
    assert_eq!(rx.forged(), 2);
}

#[test]
fn a_credit_that_is_no_credit_is_refused_and_a_stale_one_changes_nothing() {
    // The attacker plays the receiver: a ring of its own, a seed made by hand.
    let a = Node::embedded().unwrap();
    let ring = a.area(1 << 20).unwrap();
    let meta = a.meta_area(4).unwrap();
    let slot = a.slot(&ring).meta(&meta).create().unwrap();
    let mut params = (1u64 << 20).to_le_bytes().to_vec();
    params.extend_from_slice(&4u32.to_le_bytes());
    let seed = hamlyn_rats::protocol::make_seed(
        hamlyn_rats::ProtocolId::Stream,
        vec![slot.ticket_all().unwrap()],
        &params,
    );
    let sm = Manager::new(&Node::connect(a.socket_path()).unwrap()).unwrap();
    let mut tx = StreamSender::from_seed(&sm, &seed).unwrap();
    tx.timeout = Some(Duration::from_secs(10));
    tx.write_record(b"x").unwrap();
    let h = tx.flush().unwrap().unwrap();
    assert!(!h.wait(WAIT).is_failed());
    // Its credit ticket is in the message's metadata.
    let (_, credit) = hamlyn_rats::stream::parse_meta(&meta.metadata(0).unwrap()).unwrap();
    let mut et = a.terminus(0).unwrap();
    // Bytes where a credit has none (the engine takes them: the slot has room past the
    // ticket's empty range): refused by the protocol, counted.
    let wide = hamlyn::Ticket { len: 64, ..credit };
    et.send(&wide, &SendOptions::new().entry(0), Data::Inline(b"junk"))
        .unwrap();
    // A stale credit (nothing released): ignored.
    et.send(
        &credit,
        &SendOptions::new().entry(0).tag(0),
        Data::Inline(&[]),
    )
    .unwrap();
    assert!(et.wait_idle(WAIT));
    // The sender has room for 3 more messages (4 entries) before it needs a credit;
    // writing them pumps its arrivals.
    for _ in 0..3 {
        tx.write_record(&[1u8; 5000]).unwrap();
    }
    assert_eq!(tx.forged(), 1);
    assert_eq!(sm.stats().forged, 1);
}

#[test]
fn either_side_may_be_created_first() {
    let a = Node::embedded().unwrap();
    let b = Node::connect(a.socket_path()).unwrap();
    let ma = Manager::new(&a).unwrap();
    // The sender first (in its own thread): its seed builds the receiver, which says
    // where its ring is.
    let (seed_tx, seed_rx) = std::sync::mpsc::channel();
    let sender = std::thread::spawn(move || {
        let mb = Manager::new(&b).unwrap();
        let mut tx = StreamSender::new(&mb).unwrap();
        let seed = tx.make_seed().unwrap();
        seed_tx.send(hamlyn::seed::to_text(&seed).unwrap()).unwrap();
        for i in 0..500u32 {
            tx.write_record(&vec![i as u8; 1 + (i as usize * 331) % 9000])
                .unwrap();
        }
        // The end must have left before this thread's node handle goes.
        let h = tx.close().unwrap();
        assert!(!h.wait(WAIT).is_failed());
        // A sender-first seed cannot build a sender.
        assert!(matches!(
            StreamSender::from_seed(&mb, &seed),
            Err(RatsError::BadSeed(_))
        ));
    });
    let text = seed_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let mut rx =
        StreamReceiver::from_seed(&ma, &hamlyn::seed::from_text(&text).unwrap(), 1 << 20, 8)
            .unwrap();
    for i in 0..500u32 {
        let v = rx.read_record(WAIT).unwrap().unwrap();
        assert_eq!(
            rx.copy(&v).unwrap(),
            vec![i as u8; 1 + (i as usize * 331) % 9000]
        );
        rx.release(&v).unwrap();
    }
    assert!(matches!(rx.read_record(WAIT), Err(RatsError::EndOfStream)));
    sender.join().unwrap();
    // A receiver-first seed cannot build a receiver.
    let rx2 = StreamReceiver::new(&ma, 1 << 20, 4).unwrap();
    assert!(matches!(
        StreamReceiver::from_seed(&ma, &rx2.make_seed().unwrap(), 1 << 20, 4),
        Err(RatsError::BadSeed(_))
    ));
}

/// Credit comes back in batches (a quarter of the ring or of the entries), so a
/// receiver that released a little and then waits for the next record while it holds
/// the rest would stall a sender that needs that little: the sender, out of room, asks
/// for the credit held back with an empty probe on the entry it keeps for that, and the
/// receiver answers at once. Every record arrives byte-exact.
#[test]
fn a_sender_out_of_room_gets_the_credit_held_back_by_asking() {
    let a = Node::embedded().unwrap();
    let b = Node::connect(a.socket_path()).unwrap();
    let ma = Manager::new(&a).unwrap();
    // 8 entries: batched (a credit per 2 messages or 16 KiB released), 7 for data.
    // The receiver holds 6 records and has released one more, uncredited: the sender
    // has all 7 out and needs the one released to send the record waited for.
    let mut rx = StreamReceiver::new(&ma, 64 << 10, 8).unwrap();
    assert!(hamlyn_rats::stream::batches_credit(8));
    let seed = rx.make_seed().unwrap();
    // 4 KiB: sent as they are (not coalesced), 7 of them well inside the ring.
    let record = |i: u32| vec![i as u8 ^ 0x5A; 4096];
    let n = 40u32;
    let sender = std::thread::spawn(move || {
        let mb = Manager::new(&b).unwrap();
        let mut tx = StreamSender::from_seed(&mb, &seed).unwrap();
        for i in 0..n {
            tx.write_record(&record(i)).unwrap();
        }
        let h = tx.close().unwrap();
        assert!(!h.wait(WAIT).is_failed());
        tx.probes()
    });
    let mut held = std::collections::VecDeque::new();
    for i in 0..n {
        // Each record is waited for while six earlier ones are held (not released):
        // at seven the oldest is released alone.
        let v = rx
            .read_record(Some(Duration::from_secs(20)))
            .unwrap()
            .unwrap_or_else(|| panic!("record {i} never came: the sender stalled"));
        assert_eq!(rx.copy(&v).unwrap(), record(i), "record {i}");
        held.push_back((i, v));
        if held.len() == 7 {
            let (j, oldest) = held.pop_front().unwrap();
            // Still intact: nothing was written over a view not released.
            assert_eq!(rx.copy(&oldest).unwrap(), record(j), "held record {j}");
            rx.release(&oldest).unwrap();
        }
    }
    for (j, v) in held {
        assert_eq!(rx.copy(&v).unwrap(), record(j), "held record {j}");
        rx.release(&v).unwrap();
    }
    assert!(matches!(rx.read_record(WAIT), Err(RatsError::EndOfStream)));
    let probes = sender.join().unwrap();
    assert!(probes > 0, "the sender never had to ask");
    assert_eq!(rx.forged(), 0);
}

/// With batched credit, a fast sender and a receiver that holds a random number of
/// views (one to three: with the next record and a skip at the ring's end, at most the
/// ring) before releasing them in random steps: every view's bytes are checked again
/// just before it is released (an overrun would have written over them), and every
/// record arrives, in order, byte-exact. Records of 4 – 10 KB are sent as they are
/// (not coalesced), so each is a message of its own.
#[test]
fn batched_credit_never_lets_the_sender_overrun_the_ring() {
    let a = Node::embedded().unwrap();
    let b = Node::connect(a.socket_path()).unwrap();
    let ma = Manager::new(&a).unwrap();
    let mut rx = StreamReceiver::new(&ma, 64 << 10, 16).unwrap();
    let seed = rx.make_seed().unwrap();
    let n = 3000u32;
    let record = |i: u32| -> Vec<u8> {
        let len = 4096 + (i as usize * 7919) % 6000;
        (0..len)
            .map(|k| (k as u32 ^ i.wrapping_mul(2_654_435_761)) as u8)
            .collect()
    };
    let sender = std::thread::spawn(move || {
        let mb = Manager::new(&b).unwrap();
        let mut tx = StreamSender::from_seed(&mb, &seed).unwrap();
        for i in 0..n {
            tx.write_record(&record(i)).unwrap();
        }
        let h = tx.close().unwrap();
        assert!(!h.wait(WAIT).is_failed());
    });
    let mut r = Rng(0x9E37_79B9);
    let mut held: std::collections::VecDeque<(u32, hamlyn_rats::stream::View)> =
        std::collections::VecDeque::new();
    let mut next = 0u32;
    let mut hold = 1 + r.below(3) as usize;
    while next < n {
        let v = match rx.read_record(WAIT).unwrap() {
            Some(v) => v,
            None => panic!("record {next} never came"),
        };
        assert_eq!(rx.copy(&v).unwrap(), record(next), "record {next}");
        held.push_back((next, v));
        next += 1;
        if held.len() >= hold || next == n {
            let release = 1 + r.below(held.len() as u64) as usize;
            for _ in 0..release {
                let (j, v) = held.pop_front().unwrap();
                assert_eq!(rx.copy(&v).unwrap(), record(j), "held record {j}");
                rx.release(&v).unwrap();
            }
            hold = 1 + r.below(3) as usize;
        }
    }
    for (j, v) in held {
        assert_eq!(rx.copy(&v).unwrap(), record(j), "held record {j}");
        rx.release(&v).unwrap();
    }
    assert!(matches!(rx.read_record(WAIT), Err(RatsError::EndOfStream)));
    sender.join().unwrap();
    assert_eq!(rx.forged(), 0);
}

/// An empty record is refused (its end would be its predecessor's, which the receiver
/// refuses as a lie): the write is an error and the stream goes on.
#[test]
fn an_empty_record_is_refused_and_the_stream_goes_on() {
    let a = Node::embedded().unwrap();
    let b = Node::connect(a.socket_path()).unwrap();
    let (ma, mb) = (Manager::new(&a).unwrap(), Manager::new(&b).unwrap());
    let mut rx = StreamReceiver::new(&ma, 64 << 10, 8).unwrap();
    let mut tx = StreamSender::from_seed(&mb, &rx.make_seed().unwrap()).unwrap();
    tx.write_record(b"one").unwrap();
    assert!(matches!(
        tx.write_record(b""),
        Err(RatsError::InvalidArgument(_))
    ));
    assert!(matches!(
        tx.write_buffer(mb.alloc(16).unwrap(), 0, true),
        Err(RatsError::InvalidArgument(_))
    ));
    tx.write_record(b"two").unwrap();
    tx.close().unwrap();
    for want in [&b"one"[..], b"two"] {
        let v = rx.read_record(WAIT).unwrap().expect("a record");
        assert_eq!(rx.copy(&v).unwrap(), want);
        assert!(v.record_end);
        rx.release(&v).unwrap();
    }
    assert!(matches!(rx.read_record(WAIT), Err(RatsError::EndOfStream)));
    assert_eq!(rx.forged(), 0);
}

/// A flush that cannot get room in time (the receiver holds the whole ring) fails with
/// `Timeout` and keeps what was coalesced: once the receiver releases, the next flush
/// sends it, and no byte a write reported `Copied` is lost.
#[test]
fn a_flush_that_times_out_keeps_the_coalesced_bytes() {
    let a = Node::embedded().unwrap();
    let b = Node::connect(a.socket_path()).unwrap();
    let (ma, mb) = (Manager::new(&a).unwrap(), Manager::new(&b).unwrap());
    // 4 entries (credit unbatched): four 8 KiB records take every entry.
    let mut rx = StreamReceiver::new(&ma, 64 << 10, 4).unwrap();
    let mut tx = StreamSender::from_seed(&mb, &rx.make_seed().unwrap()).unwrap();
    let big = |i: u8| vec![i; 8 << 10];
    for i in 0..4 {
        assert!(matches!(
            tx.write_record(&big(i)).unwrap(),
            WriteStatus::Sent(_)
        ));
    }
    let mut held = Vec::new();
    for i in 0..4 {
        let v = rx.read_record(WAIT).unwrap().expect("a record");
        assert_eq!(rx.copy(&v).unwrap(), big(i));
        held.push(v);
    }
    // Coalesced, then a flush with no entry free: it times out, the bytes stay.
    assert!(matches!(
        tx.write_record(b"small").unwrap(),
        WriteStatus::Copied
    ));
    tx.timeout = Some(Duration::from_millis(200));
    assert!(matches!(tx.flush(), Err(RatsError::Timeout)));
    for v in &held {
        rx.release(v).unwrap();
    }
    tx.timeout = Some(Duration::from_secs(20));
    assert!(
        tx.flush().unwrap().is_some(),
        "what was coalesced is still there"
    );
    let v = rx.read_record(WAIT).unwrap().expect("the coalesced record");
    assert_eq!(rx.copy(&v).unwrap(), b"small");
    rx.release(&v).unwrap();
    tx.close().unwrap();
    assert!(matches!(rx.read_record(WAIT), Err(RatsError::EndOfStream)));
    assert_eq!(rx.forged(), 0);
}
