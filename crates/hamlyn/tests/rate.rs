//! Rate limits per terminus through a real engine: a limited terminus's next message
//! waits for tokens while other termini go on, the engine sleeps meanwhile (a terminus
//! waiting for tokens is not work), a new limit takes effect at once, and `hamlyn stat`'s
//! statistics show the limit and what it did. Nothing here is timed: the limits are set so
//! far apart that "still pending" cannot be a matter of speed.

use std::time::{Duration, Instant};

use hamlyn::{Data, Node, RateLimit, SendOptions, Status};

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn a_limited_terminus_waits_for_tokens_without_holding_anyone_else() {
    let node = Node::embedded().expect("engine");
    let inbox = node.area(4096).expect("area");
    let slot = node.slot(&inbox).fast().create().expect("slot");
    let ticket = slot.ticket_all().expect("ticket");
    // One byte per second: the first 100-byte message leaves on the initial burst, and
    // puts the bucket 99 seconds in debt.
    let mut slow = node
        .terminus_with_rate(
            0,
            RateLimit {
                bytes_per_sec: 1,
                msgs_per_sec: 0,
            },
        )
        .expect("terminus");
    let mut fast = node.terminus(0).expect("terminus");
    let body = [7u8; 100];
    let first = slow
        .send(&ticket, &SendOptions::new().fast(), Data::Inline(&body))
        .expect("queued");
    assert_eq!(first.wait(Some(WAIT)), Status::Sent);
    let second = slow
        .send(&ticket, &SendOptions::new().fast(), Data::Inline(&body))
        .expect("queued");
    // Others are not held: 200 messages of an unlimited terminus go through.
    for _ in 0..200 {
        let h = fast
            .send(&ticket, &SendOptions::new().fast(), Data::Inline(b"x"))
            .expect("queued");
        assert_eq!(h.wait(Some(WAIT)), Status::Sent);
    }
    assert_eq!(second.status(), Status::Pending, "still waiting for tokens");
    // The engine sleeps meanwhile: waiting for tokens is not work.
    let slept = node.stats().expect("stats").engine.sleeps;
    let deadline = Instant::now() + WAIT;
    while node.stats().expect("stats").engine.sleeps < slept + 3 {
        assert!(Instant::now() < deadline, "the engine never slept");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(second.status(), Status::Pending);
    let stats = node.stats().expect("stats");
    let rate = stats
        .ports
        .iter()
        .flat_map(|p| p.rates.iter())
        .find(|r| r.terminus == slow.index())
        .copied()
        .expect("the limit is in the statistics");
    assert_eq!((rate.bytes_per_sec, rate.msgs_per_sec), (1, 0));
    assert_eq!((rate.passed, rate.passed_bytes), (1, 100));
    assert!(rate.held > 0, "the wait was counted");
    // A new limit takes effect at once.
    node.set_rate(
        &slow,
        RateLimit {
            bytes_per_sec: 0,
            msgs_per_sec: 1_000_000,
        },
    )
    .expect("set");
    assert_eq!(second.wait(Some(WAIT)), Status::Sent);
}
