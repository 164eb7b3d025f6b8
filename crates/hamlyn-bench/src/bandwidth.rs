//! Bandwidth and message rate: the peer streams messages as fast as the terminus takes
//! them (retrying on `Full`), the driver counts their notifications and times them.
//!
//! The clock runs from the moment the driver starts to wait (right after it asked the
//! peer to send) to the last notification: `count` messages over that interval, the
//! peer's start included (tens of microseconds against milliseconds of stream). Timing
//! from the first notification instead reported 70-540 GB/s for 64 KiB messages now
//! and then (2026-11-25): a driver that came late to its queue found a backlog, and
//! the messages a full queue could not post were counted all at once.

use std::time::{Duration, Instant};

use super::endpoint::{check_sent, Endpoint, Remote, Via, META_ENTRIES};
use super::error::BenchError;

/// What the receiver saw of one stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stream {
    /// Messages counted (notifications, plus any a full queue could not post).
    pub messages: u64,
    /// From the start of the wait to the last notification.
    pub elapsed: Duration,
}

impl Stream {
    /// Messages per second.
    pub fn msgs_per_s(&self) -> f64 {
        self.messages as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// GB/s (10^9 bytes per second) of `size`-byte messages.
    pub fn gbps(&self, size: usize) -> f64 {
        self.msgs_per_s() * size as f64 / 1e9
    }
}

/// Peer: sends `count` messages of `size` bytes to `to`'s inbox, tags counting up,
/// metadata entries in turn; waits until the last one is sent.
pub fn send_stream(
    ep: &mut Endpoint,
    to: &Remote,
    via: Via,
    size: usize,
    count: u64,
) -> Result<(), BenchError> {
    let mut last = None;
    for i in 0..count {
        let entry = (i % u64::from(META_ENTRIES)) as u32;
        if let Some(h) = ep.send(to, via, size, i, entry, false)? {
            last = Some(h);
        }
    }
    if let Some(h) = last {
        check_sent(&h)?;
    }
    Ok(())
}

/// Driver: counts `count` arrivals and times them. `lost_before`: the queue's overflow
/// counter before the peer was asked to stream (notifications a full queue refused
/// since then are messages of this stream that arrived).
pub fn receive_stream(
    ep: &mut Endpoint,
    count: u64,
    lost_before: u64,
) -> Result<Stream, BenchError> {
    let mut arrived = 0u64;
    let mut messages = 0u64;
    let start = Instant::now();
    while messages < count {
        // The queue polled here, and `Endpoint::next` (its wait) only when it is empty:
        // through `next_message` every notification went by two `Result`s of the whole
        // `Notification`, whose copies' loads waited on the stores of the one before
        // (perf: half the receiving thread's samples). On the mediated path that thread
        // shares its core with the engine's, and the 8 B message rate rose 7.1 -> 8.2 M/s
        // (five alternated quick runs).
        let n = match ep.queue.poll() {
            Some(n) => n,
            None => ep.next()?,
        };
        match n.kind {
            hamlyn::NotificationKind::Message => arrived += 1,
            hamlyn::NotificationKind::Overflow => {}
            _ => return Err(BenchError::Unexpected(format!("{n:?}"))),
        }
        // A notification the full queue could not post still means a message arrived.
        messages = arrived + ep.queue.overflows().wrapping_sub(lost_before);
    }
    // The loop ends at the last notification: the clock is read there, not per message
    // (two clock reads a message cost the receiver about a tenth of an 8 B stream's time).
    let elapsed = start.elapsed();
    Ok(Stream { messages, elapsed })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::{Endpoint, Remote};
    use hamlyn_engine::{EngineConfig, EngineHandle};

    /// A stream that outruns its receiver's queue (sent whole before the receiver
    /// reads anything: the 65,536-entry queue overflows) is counted whole, and the
    /// engine's report of the lost notifications, posted once the queue has room, is
    /// passed over by the next phase's receive instead of failing it.
    #[test]
    fn a_stream_that_overflows_the_queue_is_counted_and_its_report_passed_over() {
        let engine = EngineHandle::start(EngineConfig::embedded()).expect("engine");
        let socket = engine.socket_path().to_path_buf();
        let mut ep = Endpoint::connect(&socket, None).expect("driver endpoint");
        let mut peer = Endpoint::connect(&socket, None).expect("peer endpoint");
        let to_driver = Remote::new(ep.tickets().expect("tickets"));
        let count = 65_536 + 1_000;
        let lost_before = ep.queue.overflows();
        send_stream(&mut peer, &to_driver, Via::Mediated, 8, count).expect("stream");
        assert!(ep.queue.overflows() > lost_before, "the queue overflowed");
        let s = receive_stream(&mut ep, count, lost_before).expect("receive");
        assert!(s.messages >= count, "{s:?}");
        // The next message: the report of the losses comes first, and is passed over.
        let h = peer
            .send(&to_driver, Via::Mediated, 8, 7, 0, false)
            .expect("send")
            .expect("a mediated send has a handle");
        assert_eq!(ep.next_message().expect("message").word, 7);
        check_sent(&h).expect("sent");
        drop((ep, peer));
        engine.stop().expect("engine stop");
    }
}
