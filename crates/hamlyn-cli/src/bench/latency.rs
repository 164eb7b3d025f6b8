//! One-way latency of tagged writes with notification.
//!
//! - [`ping`]/[`pong`]: a ping-pong between the two processes through the engine; the
//!   driver times each round trip (send a `size`-byte message tagged with the round
//!   number, wait on its notification queue for the echo, check the tag); one-way =
//!   RTT / 2. The peer waits the same way and answers with a message of the same size.
//! - [`loopback`]: the driver sends to its own inbox and waits for the notification: one
//!   hop through the engine with only two busy threads (the driver and the engine), so
//!   on a two-core machine the engine has a core of its own.

use std::time::Instant;

use hamlyn::{SendHandle, Ticket};
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

/// Runs `warmup` untimed rounds, then `iters` timed ones, and returns the percentiles of
/// the round times divided by `hops` (2 for a round trip).
pub fn timed_rounds(
    warmup: u64,
    iters: u64,
    hops: u32,
    mut round: impl FnMut(u64) -> Result<(), BenchError>,
) -> Result<Latency, BenchError> {
    // Round times in ns, 1 ns to 100 s, three significant digits.
    let mut times = Histogram::<u64>::new_with_bounds(1, 100_000_000_000, 3)
        .map_err(|e| BenchError::Histogram(e.to_string()))?;
    for r in 0..warmup + iters {
        let t0 = Instant::now();
        round(r)?;
        let ns = t0.elapsed().as_nanos();
        if r >= warmup {
            times.saturating_record(u64::try_from(ns).unwrap_or(u64::MAX).max(1));
        }
    }
    let one_way_us = |q: f64| times.value_at_quantile(q) as f64 / f64::from(hops) / 1e3;
    Ok(Latency {
        p50_us: one_way_us(0.5),
        p99_us: one_way_us(0.99),
    })
}

/// Sends a `size`-byte message tagged `round` to `to` and waits for the notification
/// tagged `round` on this side's queue.
fn send_and_wait(
    ep: &mut Endpoint,
    to: &Ticket,
    size: usize,
    round: u64,
) -> Result<SendHandle, BenchError> {
    let h = ep.send(to, size, round, 0)?;
    let n = ep.next_message()?;
    if n.word != round {
        return Err(BenchError::Unexpected(format!(
            "message tagged {} during round {round}",
            n.word
        )));
    }
    Ok(h)
}

/// Driver: `warmup` untimed round trips, then `iters` timed ones of `size`-byte messages
/// to `to` (whose owner runs [`pong`] for `warmup + iters` rounds). One-way = RTT / 2.
pub fn ping(
    ep: &mut Endpoint,
    to: &Ticket,
    size: usize,
    warmup: u64,
    iters: u64,
) -> Result<Latency, BenchError> {
    let mut last = None;
    let lat = timed_rounds(warmup, iters, 2, |r| {
        last = Some(send_and_wait(ep, to, size, r)?);
        Ok(())
    })?;
    if let Some(h) = last {
        check_sent(&h)?;
    }
    Ok(lat)
}

/// Driver alone: `size`-byte messages to its own inbox, each timed from the send to its
/// notification (one hop through the engine).
pub fn loopback(
    ep: &mut Endpoint,
    size: usize,
    warmup: u64,
    iters: u64,
) -> Result<Latency, BenchError> {
    let own = ep.own_ticket()?;
    let mut last = None;
    let lat = timed_rounds(warmup, iters, 1, |r| {
        last = Some(send_and_wait(ep, &own, size, r)?);
        Ok(())
    })?;
    if let Some(h) = last {
        check_sent(&h)?;
    }
    Ok(lat)
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
