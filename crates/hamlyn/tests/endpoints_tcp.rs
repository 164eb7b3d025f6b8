//! Ordered delivery per endpoint pair across two nodes: two engines joined by the TCP
//! fabric with 4 rails (which reorder packets of different rails), senders on one node
//! flooding receive endpoints on the other. Every message a terminus sends to one endpoint
//! arrives in the order sent (the fabric keeps a pair on one rail), and every message is
//! delivered or counted as discarded.

#[allow(dead_code, reason = "the helpers are shared by several test files")]
mod common;

use std::time::{Duration, Instant};

use hamlyn::{Data, Node, RejectReason, SendError, SendOptions, Status};
use hamlyn_engine::{EngineConfig, EngineHandle};

const WAIT: Duration = Duration::from_secs(30);

fn two_nodes(rails: usize) -> (EngineHandle, EngineHandle, Node, Node) {
    common::tcp_pair(rails, EngineConfig::embedded)
}

#[test]
fn each_pair_is_delivered_in_order_over_reordering_rails() {
    let (_ea, _eb, rx, tx) = two_nodes(4);
    const PAIRS: usize = 3;
    const PER: u64 = 3000;
    let mut eps: Vec<_> = (0..PAIRS)
        .map(|_| {
            let mut ep = rx
                .endpoint(64, 1024)
                .report_discards()
                .create()
                .expect("endpoint");
            ep.post_all().expect("post");
            ep
        })
        .collect();
    let tickets: Vec<_> = eps.iter().map(|e| e.ticket()).collect();
    let senders: Vec<_> = tickets
        .into_iter()
        .enumerate()
        .map(|(i, ticket)| {
            let mut t = tx.terminus(0).expect("terminus");
            std::thread::spawn(move || {
                // Every handle is kept: a refusal by the remote engine arrives after the
                // send was reported sent and turns it Failed then.
                let mut handles: Vec<hamlyn::SendHandle> = Vec::new();
                let mut waited = 0;
                for seq in 0..PER {
                    // Sizes vary so that packets differ in length on the rails.
                    let len = 8 + (seq as usize * 7) % 56;
                    let mut body = [0u8; 64];
                    body[..8].copy_from_slice(&seq.to_le_bytes());
                    loop {
                        let opts = SendOptions::new().tag(seq);
                        match t.send(&ticket, &opts, Data::Inline(&body[..len])) {
                            Ok(h) => {
                                handles.push(h);
                                break;
                            }
                            Err(SendError::Full) => {
                                let s = handles[waited].wait(Some(WAIT));
                                assert!(s != Status::Pending, "pair {i}: stuck");
                                waited += 1;
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                for h in &handles[waited..] {
                    assert!(h.wait(Some(WAIT)) != Status::Pending, "pair {i}: stuck");
                }
                (t, handles)
            })
        })
        .collect();
    let mut got: Vec<Vec<u64>> = vec![Vec::new(); PAIRS];
    let mut discarded = vec![0u64; PAIRS];
    let mut done = false;
    let deadline = Instant::now() + WAIT * 4;
    while !done {
        assert!(
            Instant::now() < deadline,
            "deliveries stalled: {:?}",
            got.iter().map(Vec::len).collect::<Vec<_>>()
        );
        let mut idle = true;
        for (i, ep) in eps.iter_mut().enumerate() {
            while let Some(r) = ep.receive() {
                let mut b = [0u8; 8];
                ep.read(&r.buffer, &mut b).expect("read");
                assert_eq!(
                    u64::from_le_bytes(b),
                    r.word,
                    "the buffer holds its message"
                );
                got[i].push(r.word);
                ep.post(r.buffer).expect("repost");
                idle = false;
            }
            discarded[i] += ep.take_discards();
        }
        done = senders.iter().all(|s| s.is_finished())
            && got
                .iter()
                .zip(&discarded)
                .all(|(g, d)| g.len() as u64 + d == PER);
        if idle {
            std::thread::yield_now();
        }
    }
    for (i, s) in senders.into_iter().enumerate() {
        let (_t, handles) = s.join().expect("sender");
        // The sender learns of each discard from the receiving engine's NACK: its count
        // of NoBuffer failures reaches the endpoint's (bounded wait, nothing timed).
        let failed = || {
            handles
                .iter()
                .filter(|h| match h.status() {
                    Status::Sent => false,
                    Status::Failed(RejectReason::NoBuffer) => true,
                    other => panic!("pair {i}: {other:?}"),
                })
                .count() as u64
        };
        let deadline = Instant::now() + WAIT;
        while failed() < discarded[i] {
            assert!(Instant::now() < deadline, "pair {i}: NACKs missing");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            failed(),
            discarded[i],
            "pair {i}: discards seen by both sides"
        );
        let g = &got[i];
        assert!(
            g.windows(2).all(|w| w[0] < w[1]),
            "pair {i} out of order: {:?}",
            g.windows(2).find(|w| w[0] >= w[1])
        );
    }
}
