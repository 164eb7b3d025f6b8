//! Latency: ping-pongs between the two processes, remote reads and fetch-adds.
//!
//! - [`ping`]/[`pong`]: the driver times each round trip of an [`Exchange`] (send a
//!   `size`-byte message for round `r`, wait for the echo and check it is round `r`'s);
//!   one-way = RTT / 2. The peer waits the same way and answers with a message of the
//!   same size. Either side sends through the engine or deposits directly ([`Via`]).
//! - [`read`], [`fetch_add`]: the driver alone times remote reads of `size` bytes of the
//!   peer's rma slot, and fetch-adds on its first word, each from the request to the
//!   answer's notification: a full round trip through the engine(s), not halved; the
//!   peer process does nothing (its engine answers).
//! - [`loopback`]: the driver sends to its own inbox and waits for the notification: one
//!   hop through the engine, whose turn the driver's thread runs itself in its push
//!   (progress by the waiting thread; DESIGN §8's "when the engine has a core" dates from
//!   when the engine's thread ran every turn).

use std::time::Instant;

use hamlyn::SendHandle;
use hdrhistogram::Histogram;

use super::endpoint::{check_sent, Endpoint, Remote, Via, DATAGRAM_META};
use super::error::BenchError;

/// Latency percentiles of one size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    /// Median one-way time in µs.
    pub p50_us: f64,
    /// 99th-percentile one-way time in µs.
    pub p99_us: f64,
    /// 99.9th-percentile one-way time in µs.
    pub p999_us: f64,
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
        p999_us: one_way_us(0.999),
    })
}

/// What a ping-pong sends each way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exchange {
    /// A write with notification, tagged with the round (the tag word of the inbox's
    /// metadata entry 0, reported in the notification).
    Tagged,
    /// A datagram: the same, plus 16 bytes of user metadata that the receiver reads out
    /// of its metadata entry and checks.
    Datagram,
    /// A write without notification to the polled slot; the receiver spins on the last 8
    /// bytes of the message until they hold the round's flag.
    Polled,
}

impl Exchange {
    /// Every exchange, in the order measured. Polled first: both processes then spin
    /// without sleeping, so the scheduler spreads them over the CPUs before the exchanges
    /// whose receivers sleep (two processes that wake each other tend to be kept on one
    /// CPU, and a ping-pong between them then pays a context switch per message).
    pub const ALL: [Exchange; 3] = [Exchange::Polled, Exchange::Tagged, Exchange::Datagram];

    /// The word used in the peer protocol.
    pub fn word(self) -> &'static str {
        match self {
            Exchange::Tagged => "tagged",
            Exchange::Datagram => "datagram",
            Exchange::Polled => "polled",
        }
    }

    /// The exchange named by `word`.
    pub fn from_word(word: &str) -> Option<Exchange> {
        Exchange::ALL.into_iter().find(|e| e.word() == word)
    }
}

/// One side's half of round `round` of a ping-pong: sends, then waits for the answer
/// (`first`: the driver) or waits, then answers (the peer).
struct Side<'a> {
    ep: &'a mut Endpoint,
    to: &'a Remote,
    via: Via,
    exchange: Exchange,
    size: usize,
    series: u32,
    last: Option<SendHandle>,
}

impl Side<'_> {
    fn send(&mut self, round: u64) -> Result<(), BenchError> {
        let h = match self.exchange {
            Exchange::Tagged => self
                .ep
                .send(self.to, self.via, self.size, round, 0, false)?,
            Exchange::Datagram => self.ep.send(self.to, self.via, self.size, round, 0, true)?,
            Exchange::Polled => {
                self.ep
                    .send_polled(self.to, self.via, self.size, self.series, round)?
            }
        };
        if h.is_some() {
            self.last = h;
        }
        Ok(())
    }

    fn receive(&mut self, round: u64) -> Result<(), BenchError> {
        let tag = match self.exchange {
            Exchange::Polled => {
                return self.ep.wait_polled(self.via, self.size, self.series, round)
            }
            Exchange::Tagged => self.ep.next_message()?.word,
            Exchange::Datagram => {
                let n = self.ep.next_message()?;
                let meta = self.ep.datagram_meta(0)?;
                let mut want = [0u8; DATAGRAM_META];
                want[..8].copy_from_slice(&n.word.to_le_bytes());
                if meta != want {
                    return Err(BenchError::Unexpected(format!(
                        "datagram {} carried metadata {meta:?}",
                        n.word
                    )));
                }
                n.word
            }
        };
        if tag != round {
            return Err(BenchError::Unexpected(format!(
                "message tagged {tag} during round {round}"
            )));
        }
        Ok(())
    }

    /// Checks the last mediated send ended `Sent`.
    fn finish(self) -> Result<(), BenchError> {
        match &self.last {
            Some(h) => check_sent(h),
            None => Ok(()),
        }
    }
}

/// How a ping-pong runs: path, exchange, size, and the polled-write series number (the
/// same on both sides; the driver numbers them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PingPong {
    /// Through the engine or deposited directly.
    pub via: Via,
    /// What is sent each way.
    pub exchange: Exchange,
    /// Message size in bytes.
    pub size: usize,
    /// Polled-write series number (never 0).
    pub series: u32,
}

impl PingPong {
    fn side<'a>(&self, ep: &'a mut Endpoint, to: &'a Remote) -> Side<'a> {
        Side {
            ep,
            to,
            via: self.via,
            exchange: self.exchange,
            size: self.size,
            series: self.series,
            last: None,
        }
    }
}

/// Driver: `warmup` untimed round trips, then `iters` timed ones (the peer runs [`pong`]
/// for `warmup + iters` rounds). One-way = RTT / 2.
pub fn ping(
    ep: &mut Endpoint,
    to: &Remote,
    how: PingPong,
    warmup: u64,
    iters: u64,
) -> Result<Latency, BenchError> {
    let mut side = how.side(ep, to);
    let lat = timed_rounds(warmup, iters, 2, |r| {
        side.send(r)?;
        side.receive(r)
    })?;
    side.finish()?;
    Ok(lat)
}

/// Peer: answers `rounds` rounds of [`ping`], each with a message of the same kind.
pub fn pong(ep: &mut Endpoint, to: &Remote, how: PingPong, rounds: u64) -> Result<(), BenchError> {
    let mut side = how.side(ep, to);
    for r in 0..rounds {
        side.receive(r)?;
        side.send(r)?;
    }
    side.finish()
}

/// Driver alone: `size`-byte messages to its own inbox, each timed from the send to its
/// notification (one hop through the engine).
pub fn loopback(
    ep: &mut Endpoint,
    size: usize,
    warmup: u64,
    iters: u64,
) -> Result<Latency, BenchError> {
    let own = Remote::new(ep.tickets()?);
    let how = PingPong {
        via: Via::Mediated,
        exchange: Exchange::Tagged,
        size,
        series: 1,
    };
    let mut side = how.side(ep, &own);
    let lat = timed_rounds(warmup, iters, 1, |r| {
        side.send(r)?;
        side.receive(r)
    })?;
    side.finish()?;
    Ok(lat)
}

/// Driver alone: remote reads of `size` bytes of the peer's rma slot, each timed from
/// the request to the `ReadDone` notification (a round trip, not halved).
pub fn read(
    ep: &mut Endpoint,
    to: &Remote,
    size: usize,
    warmup: u64,
    iters: u64,
) -> Result<Latency, BenchError> {
    let reply = ep.tickets()?.inbox;
    let mut last = None;
    let lat = timed_rounds(warmup, iters, 1, |_| {
        last = Some(ep.read(to, &reply, size)?);
        Ok(())
    })?;
    if let Some(h) = last {
        check_sent(&h)?;
    }
    Ok(lat)
}

/// Driver alone: fetch-and-add 1 on the peer's rma word, each timed from the request to
/// the old value's notification (a round trip, not halved). The old values must count
/// up by one: nothing else touches the word.
pub fn fetch_add(
    ep: &mut Endpoint,
    to: &Remote,
    warmup: u64,
    iters: u64,
) -> Result<Latency, BenchError> {
    let reply = ep.tickets()?.inbox;
    let mut last: Option<(SendHandle, u64)> = None;
    let lat = timed_rounds(warmup, iters, 1, |_| {
        let (h, old) = ep.fetch_add(to, &reply)?;
        if let Some((_, prev)) = &last {
            if old != prev.wrapping_add(1) {
                return Err(BenchError::Unexpected(format!(
                    "fetch-add returned {old} after {prev}"
                )));
            }
        }
        last = Some((h, old));
        Ok(())
    })?;
    if let Some((h, _)) = last {
        check_sent(&h)?;
    }
    Ok(lat)
}
