//! One-way latency of tagged writes with notification: a ping-pong between the two
//! processes through the engine; one-way = RTT / 2.
//!
//! The driver times each round trip: send a `size`-byte message tagged with the round
//! number, wait on its notification queue for the echo (the peer waits the same way and
//! answers with a message of the same size), check the tag.

use std::time::Instant;

use hamlyn::Ticket;
use hdrhistogram::Histogram;

use super::endpoint::{check_sent, Endpoint};
use super::error::BenchError;

/// Latency percentiles of one size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    /// Median one-way time in µs.
    pub p50_us: f64,
    /// 99th-percentile one-way time in µs.
    pub p99_us: f64,
}

/// Driver: `warmup` untimed round trips, then `iters` timed ones of `size`-byte messages
/// to `to` (whose owner runs [`pong`] for `warmup + iters` rounds).
pub fn ping(
    ep: &mut Endpoint,
    to: &Ticket,
    size: usize,
    warmup: u64,
    iters: u64,
) -> Result<Latency, BenchError> {
    // Round-trip times in ns, 1 ns to 100 s, three significant digits.
    let mut rtt = Histogram::<u64>::new_with_bounds(1, 100_000_000_000, 3)
        .map_err(|e| BenchError::Histogram(e.to_string()))?;
    let mut last = None;
    for round in 0..warmup + iters {
        let t0 = Instant::now();
        let h = ep.send(to, size, round, 0)?;
        let n = ep.next_message()?;
        let ns = t0.elapsed().as_nanos();
        if n.word != round {
            return Err(BenchError::Unexpected(format!(
                "echo of round {} during round {round}",
                n.word
            )));
        }
        if round >= warmup {
            let ns = u64::try_from(ns).unwrap_or(u64::MAX).max(1);
            rtt.saturating_record(ns);
        }
        last = Some(h);
    }
    if let Some(h) = last {
        check_sent(&h)?;
    }
    let one_way_us = |q: f64| rtt.value_at_quantile(q) as f64 / 2.0 / 1e3;
    Ok(Latency {
        p50_us: one_way_us(0.5),
        p99_us: one_way_us(0.99),
    })
}

/// Peer: echoes `rounds` messages, each with a `size`-byte message carrying its tag.
pub fn pong(ep: &mut Endpoint, to: &Ticket, size: usize, rounds: u64) -> Result<(), BenchError> {
    let mut last = None;
    for _ in 0..rounds {
        let n = ep.next_message()?;
        last = Some(ep.send(to, size, n.word, 0)?);
    }
    if let Some(h) = last {
        check_sent(&h)?;
    }
    Ok(())
}
