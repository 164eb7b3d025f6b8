//! Fairness: N termini, each of its own port (its own connection, as N applications
//! would have), stream `size`-byte messages as fast as their termini take them into one
//! receiver's slot; the receiver counts each sender's messages over a timed window and
//! the spread is summed up by Jain's index (DESIGN §8: "fair bandwidth across competing
//! termini", index ≥ 0.95).
//!
//! How it runs:
//! - The receiver (the calling thread) makes one normal-mode slot over `termini × size`
//!   bytes with `termini × META_PER_SENDER` metadata entries, notifying one queue of
//!   [`RECEIVER_QUEUE_CAP`] entries. Sender `i` gets a ticket for its own byte range and
//!   its own metadata entries, and tags every message `i`. A sender uses its entries in
//!   turn; an entry is used again only after the sender's terminus finished the message
//!   that used it before, because an engine carries a terminus's requests one after
//!   another (so messages of any size work, not only single-packet fast ones).
//! - Each sender thread sends as fast as its terminus takes requests; on
//!   [`SendError::Full`] it yields the core at once (a sender with a full ring has
//!   nothing to do, and on a small machine the engine needs the core: spinning 16 tries
//!   before each yield cost two thirds of the total on two cores). The first `Full`
//!   marks the sender *backlogged*. A send that finds its terminus empty is counted
//!   ([`Fairness::starved`]): the engine had nothing of this sender's to carry, which is
//!   the sender's (or the CPU scheduler's) doing, not the engine's.
//! - The receiver drains its queue all along. Once every sender is backlogged (waited
//!   for at most [`WAIT`]), it keeps draining for a warm-up ([`warmup_for`]), then counts
//!   each sender's notifications over `window`; bytes = messages × `size`, GB/s = 10^9
//!   bytes per second of the measured (wall-clock) window.
//! - Then a shared stop flag ends the senders, which wait for their last request and
//!   check it was sent; every thread is joined on every path (scoped threads, and a guard
//!   that raises the stop flag however the receiver leaves). Every wait is bounded.
//! - A notification the full queue could not post is a message that arrived but cannot be
//!   credited to a sender: the window's count is [`Fairness::overflows`], never hidden.

use std::path::Path;
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

use hamlyn::{
    Area, Data, Node, NodeOptions, NotificationKind, NotifyQueue, SendError, SendHandle,
    SendOptions, Terminus, Ticket, MAX_INLINE,
};
use hamlyn_shm::sync::{AtomicBool, AtomicU64, Ordering};

use super::endpoint::{check_sent, WAIT};
use super::error::BenchError;

/// Metadata entries of the receiver's slot each sender uses in turn.
pub const META_PER_SENDER: u32 = 16;
/// Entries of the receiver's notification queue (the library's largest): room for a
/// receiver descheduled for a while on a small machine.
pub const RECEIVER_QUEUE_CAP: u32 = 65536;
/// Longest nap of the receiver when its queue is empty (it spins first).
const IDLE_NAP: Duration = Duration::from_millis(1);

/// Per-terminus bandwidth of N senders competing for one receiver, and Jain's index.
#[derive(Clone, Debug, PartialEq)]
pub struct Fairness {
    /// Competing termini (one per sender thread, each of its own port).
    pub termini: usize,
    /// Bytes per message.
    pub size: usize,
    /// GB/s (10^9 bytes per second) the receiver saw from each sender over the window,
    /// by sender index.
    pub per_terminus_gbps: Vec<f64>,
    /// Their sum.
    pub total_gbps: f64,
    /// Jain's index of `per_terminus_gbps` ([`jain`]).
    pub jain: f64,
    /// Notifications the receiver's queue could not post during the window: messages
    /// that arrived but are missing from the per-terminus figures (should be 0).
    pub overflows: u64,
    /// Sends of each sender during the window (counted by the sender, so the window's
    /// edges are approximate) that found its terminus empty: each is a time the engine had
    /// drained this sender's ring while the sender thread was off the CPU. Many of these
    /// mean the shares measure the CPU scheduler (more threads than cores) as much as the
    /// engine.
    pub starved: Vec<u64>,
}

/// Jain's fairness index (Σx)²/(n·Σx²): 1 when all equal, 1/n when one takes all.
/// Nothing shared (no values, or all zero) gives 0, which no real share reaches, so a run
/// that measured nothing never passes for fair.
pub fn jain(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let squares: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || squares <= 0.0 {
        return 0.0;
    }
    (sum * sum / (xs.len() as f64 * squares)).min(1.0)
}

/// The warm-up after every sender is backlogged and before the window opens: a quarter
/// of the window, between 10 ms and 500 ms.
pub fn warmup_for(window: Duration) -> Duration {
    (window / 4).clamp(Duration::from_millis(10), Duration::from_millis(500))
}

/// Measures `termini` senders (threads of this process, each with its own port on the
/// engine at `socket`) streaming `size`-byte messages to one receiver: each one's share
/// of the receiver's bandwidth over `window`, after every sender is backlogged and a
/// warm-up. `spin` overrides how many polls the receiver spins through before it sleeps.
pub fn measure(
    socket: &Path,
    termini: usize,
    size: usize,
    window: Duration,
    spin: Option<u32>,
) -> Result<Fairness, BenchError> {
    if termini == 0 || size == 0 {
        return Err(BenchError::Usage(
            "fairness needs at least one terminus and messages of at least one byte",
        ));
    }
    let mut receiver = Receiver::connect(socket, termini, size, spin)?;
    let mut senders = Vec::with_capacity(termini);
    for i in 0..termini {
        senders.push(Sender::connect(socket, &receiver, i, size)?);
    }
    let backlogged: Vec<AtomicBool> = (0..termini).map(|_| AtomicBool::new(false)).collect();
    let starved: Vec<AtomicU64> = (0..termini).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    let shared = Flags {
        stop: &stop,
        backlogged: &backlogged,
        starved: &starved,
    };
    let counted = std::thread::scope(|scope| {
        // Raised however this closure is left (an error, a panic): the senders stop and
        // the scope's join cannot wait forever.
        let _stop = StopOnDrop(&stop);
        let mut handles = Vec::with_capacity(termini);
        let mut spawned = Ok(());
        for (i, sender) in senders.iter_mut().enumerate() {
            let spawn = std::thread::Builder::new()
                .name(format!("bench-fair-{i}"))
                .spawn_scoped(scope, move || sender.run(i, shared));
            match spawn {
                Ok(h) => handles.push(h),
                Err(e) => {
                    spawned = Err(BenchError::io("starting a sender thread", e));
                    break;
                }
            }
        }
        let received = spawned.and_then(|()| receiver.count(shared, &handles, window));
        // Relaxed: the flag carries no data; the joins below order everything else.
        stop.store(true, Ordering::Relaxed);
        let mut sent = Ok(());
        for h in handles {
            let r = h
                .join()
                .unwrap_or(Err(BenchError::Panicked("a fairness sender thread")));
            if sent.is_ok() {
                sent = r;
            }
        }
        // A sender's own failure explains the receiver's better than the other way round.
        sent.and(received)
    })?;
    let secs = counted.elapsed.as_secs_f64().max(1e-9);
    let per_terminus_gbps: Vec<f64> = counted
        .messages
        .iter()
        .map(|&m| m as f64 * size as f64 / secs / 1e9)
        .collect();
    Ok(Fairness {
        termini,
        size,
        total_gbps: per_terminus_gbps.iter().sum(),
        jain: jain(&per_terminus_gbps),
        per_terminus_gbps,
        overflows: counted.overflows,
        starved: counted.starved,
    })
}

/// The flags the receiver and the senders share.
#[derive(Clone, Copy)]
struct Flags<'a> {
    /// Raised when the senders are to stop.
    stop: &'a AtomicBool,
    /// Sender `i` has seen its terminus full.
    backlogged: &'a [AtomicBool],
    /// Sends of sender `i` that found its terminus empty.
    starved: &'a [AtomicU64],
}

/// Raises the stop flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        // Relaxed: the flag carries no data (the scope's joins order the rest).
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What the receiver counted over the window.
struct Counted {
    /// Messages from each sender.
    messages: Vec<u64>,
    /// Notifications lost to a full queue.
    overflows: u64,
    /// Sends that found their terminus empty, by sender.
    starved: Vec<u64>,
    /// The window's length as measured.
    elapsed: Duration,
}

/// The receiving side: one slot over every sender's range, one queue.
struct Receiver {
    queue: NotifyQueue,
    slot: hamlyn::Slot,
    _meta: hamlyn::MetaArea,
    _area: Area,
    _node: Node,
    size: usize,
    /// Messages from each sender since the start.
    counts: Vec<u64>,
}

impl Receiver {
    fn connect(
        socket: &Path,
        termini: usize,
        size: usize,
        spin: Option<u32>,
    ) -> Result<Receiver, BenchError> {
        let defaults = NodeOptions::default();
        let node = Node::connect_with(
            socket,
            NodeOptions {
                termini: 1,
                queues: 1,
                queue_cap: RECEIVER_QUEUE_CAP,
                spin: spin.unwrap_or(defaults.spin),
                ..defaults
            },
        )?;
        let too_many = || BenchError::Usage("too many fairness senders for one slot");
        let entries = u32::try_from(termini)
            .ok()
            .and_then(|n| n.checked_mul(META_PER_SENDER))
            .ok_or_else(too_many)?;
        let len = u64::try_from(termini.checked_mul(size).ok_or_else(too_many)?)
            .map_err(|_| too_many())?;
        let area = node.area(len)?;
        let meta = node.meta_area(entries)?;
        let slot = node.slot(&area).meta(&meta).queue(0).create()?;
        let queue = node.queue(0)?;
        Ok(Receiver {
            queue,
            slot,
            _meta: meta,
            _area: area,
            _node: node,
            size,
            counts: vec![0; termini],
        })
    }

    /// Sender `i`'s ticket: its own byte range and metadata entries.
    fn ticket_for(&self, i: usize) -> Result<Ticket, BenchError> {
        let (start, size) = (i as u64 * self.size as u64, self.size as u64);
        let first = i as u32 * META_PER_SENDER;
        Ok(self
            .slot
            .ticket(start..start + size, first..first + META_PER_SENDER)?)
    }

    /// Counts every notification waiting, and waits (spinning, then napping at most
    /// [`IDLE_NAP`]) for one if there is none.
    fn drain(&mut self) -> Result<(), BenchError> {
        let mut next = self.queue.wait(Some(IDLE_NAP))?;
        while let Some(n) = next {
            let from = usize::try_from(n.word).ok();
            let first = from.map(|i| i as u64 * u64::from(META_PER_SENDER));
            match (n.kind, from.and_then(|i| self.counts.get_mut(i)), first) {
                (NotificationKind::Message, Some(c), Some(first))
                    if n.meta_index.is_some_and(|m| {
                        (first..first + u64::from(META_PER_SENDER)).contains(&u64::from(m))
                    }) =>
                {
                    *c += 1;
                }
                // The engine's report of entries lost to the full queue: the window's
                // losses are counted by the queue's overflow counter already.
                (NotificationKind::Overflow, _, _) => {}
                _ => return Err(BenchError::Unexpected(format!("{n:?}"))),
            }
            next = self.queue.poll();
        }
        Ok(())
    }

    /// Drains until `deadline`; stops early (with an error) if a sender thread ended.
    fn drain_until<T>(
        &mut self,
        deadline: Instant,
        senders: &[ScopedJoinHandle<'_, T>],
    ) -> Result<(), BenchError> {
        while Instant::now() < deadline {
            self.drain()?;
            check_running(senders)?;
        }
        Ok(())
    }

    /// Waits for every sender to be backlogged, warms up, then counts over `window`.
    fn count<T>(
        &mut self,
        flags: Flags<'_>,
        senders: &[ScopedJoinHandle<'_, T>],
        window: Duration,
    ) -> Result<Counted, BenchError> {
        let deadline = Instant::now() + WAIT;
        // Relaxed: the flags carry no data.
        while !flags.backlogged.iter().all(|b| b.load(Ordering::Relaxed)) {
            if Instant::now() > deadline {
                return Err(BenchError::Timeout(WAIT, "every sender to be backlogged"));
            }
            self.drain()?;
            check_running(senders)?;
        }
        self.drain_until(Instant::now() + warmup_for(window), senders)?;
        let starved = |f: &Flags<'_>| -> Vec<u64> {
            // Relaxed: a statistic, no data hangs on it.
            f.starved
                .iter()
                .map(|s| s.load(Ordering::Relaxed))
                .collect()
        };
        let before = self.counts.clone();
        let starved_before = starved(&flags);
        let lost_before = self.queue.overflows();
        let t0 = Instant::now();
        self.drain_until(t0 + window, senders)?;
        let elapsed = t0.elapsed();
        let starved_after = starved(&flags);
        let messages = self
            .counts
            .iter()
            .zip(&before)
            .map(|(now, then)| now - then)
            .collect();
        Ok(Counted {
            messages,
            overflows: self.queue.overflows().wrapping_sub(lost_before),
            starved: starved_after
                .iter()
                .zip(&starved_before)
                .map(|(now, then)| now - then)
                .collect(),
            elapsed,
        })
    }
}

/// A sender that has ended before the stop flag ended the run: its error is what the
/// join reports.
fn check_running<T>(senders: &[ScopedJoinHandle<'_, T>]) -> Result<(), BenchError> {
    if senders.iter().any(ScopedJoinHandle::is_finished) {
        return Err(BenchError::Unexpected(
            "a fairness sender stopped before the window closed".into(),
        ));
    }
    Ok(())
}

/// One competing sender: its own port, send area and terminus.
struct Sender {
    terminus: Terminus,
    area: Area,
    ticket: Ticket,
    size: usize,
}

impl Sender {
    fn connect(
        socket: &Path,
        receiver: &Receiver,
        i: usize,
        size: usize,
    ) -> Result<Sender, BenchError> {
        let node = Node::connect_with(
            socket,
            NodeOptions {
                termini: 1,
                queues: 1,
                queue_cap: 64,
                ..NodeOptions::default()
            },
        )?;
        let area = node.area(size as u64)?;
        // Touch every page so that no send pays for a page fault.
        area.write(0, &vec![i as u8; size])?;
        let terminus = node.terminus(0)?;
        Ok(Sender {
            terminus,
            area,
            ticket: receiver.ticket_for(i)?,
            size,
        })
    }

    /// Sends as fast as the terminus takes requests until `flags.stop`, then checks that
    /// the last request was sent. A terminus full for [`WAIT`] is an error.
    fn run(&mut self, index: usize, flags: Flags<'_>) -> Result<(), BenchError> {
        let inline = [0x5Au8; MAX_INLINE];
        let spans;
        let data = if self.size <= MAX_INLINE {
            Data::Inline(&inline[..self.size])
        } else {
            spans = [self.area.span(0, self.size as u64)];
            Data::Gather(&spans)
        };
        let mut last: Option<SendHandle> = None;
        let mut entry: u32 = 0;
        let mut tries: u32 = 0;
        let mut full_since = Instant::now();
        // Relaxed (both): the flags carry no data.
        let (Some(backlogged), Some(starved)) =
            (flags.backlogged.get(index), flags.starved.get(index))
        else {
            return Err(BenchError::Usage("a fairness sender without its flags"));
        };
        while !flags.stop.load(Ordering::Relaxed) {
            if self.terminus.in_flight() == 0 {
                starved.fetch_add(1, Ordering::Relaxed);
            }
            let opts = SendOptions::new().tag(index as u64).entry(entry);
            match self.terminus.send(&self.ticket, &opts, data) {
                Ok(h) => {
                    last = Some(h);
                    entry = (entry + 1) % META_PER_SENDER;
                    tries = 0;
                }
                Err(SendError::Full) => {
                    if tries == 0 {
                        backlogged.store(true, Ordering::Relaxed);
                        full_since = Instant::now();
                    } else if tries % 64 == 0 && full_since.elapsed() > WAIT {
                        return Err(BenchError::Timeout(WAIT, "room in the terminus"));
                    }
                    tries = tries.wrapping_add(1);
                    std::thread::yield_now();
                }
                Err(e) => return Err(e.into()),
            }
        }
        match last {
            Some(h) => check_sent(&h),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn_engine::{EngineConfig, EngineHandle};

    #[test]
    fn jain_of_equal_shares_is_one() {
        for n in 1..10 {
            assert!((jain(&vec![3.5; n]) - 1.0).abs() < 1e-12);
        }
    }

    #[test]
    fn jain_when_one_takes_all_is_one_over_n() {
        for n in 1..10 {
            let mut xs = vec![0.0; n];
            xs[n / 2] = 7.0;
            assert!((jain(&xs) - 1.0 / n as f64).abs() < 1e-12);
        }
    }

    #[test]
    fn jain_of_nothing_is_zero() {
        assert_eq!(jain(&[]), 0.0);
        assert_eq!(jain(&[0.0, 0.0]), 0.0);
    }

    /// Property: for any non-negative shares, not all zero, the index lies in [1/n, 1].
    /// (proptest is not a dev-dependency of this crate: a seeded xorshift generator
    /// stands in, covering sizes 1..=64, zeros, and magnitudes from 1e-6 to 1e6.)
    #[test]
    fn jain_lies_between_one_over_n_and_one() {
        let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for _ in 0..20_000 {
            let n = (next() % 64 + 1) as usize;
            let mut xs: Vec<f64> = (0..n)
                .map(|_| match next() % 4 {
                    0 => 0.0,
                    1 => (next() % 1000) as f64 * 1e-6,
                    _ => (next() % 1_000_000) as f64 + 1.0,
                })
                .collect();
            if xs.iter().all(|&x| x == 0.0) {
                xs[0] = 1.0;
            }
            let j = jain(&xs);
            assert!(
                j >= 1.0 / n as f64 - 1e-12 && j <= 1.0 + 1e-12,
                "{j} for {xs:?}"
            );
        }
    }

    #[test]
    fn four_termini_each_get_a_share_and_the_shares_add_up() {
        let engine = EngineHandle::start(EngineConfig::embedded()).expect("engine");
        let f = measure(
            engine.socket_path(),
            4,
            4096,
            Duration::from_millis(100),
            None,
        )
        .expect("fairness");
        assert_eq!((f.termini, f.size), (4, 4096));
        assert_eq!(f.per_terminus_gbps.len(), 4);
        assert!(
            f.per_terminus_gbps.iter().all(|&g| g > 0.0),
            "every terminus got a share: {f:?}"
        );
        let sum: f64 = f.per_terminus_gbps.iter().sum();
        assert!((f.total_gbps - sum).abs() <= 1e-9 * sum.max(1.0), "{f:?}");
        assert!(f.jain > 0.25 - 1e-12 && f.jain <= 1.0 + 1e-12, "{f:?}");
        assert_eq!(f.overflows, 0, "{f:?}");
        assert_eq!(f.starved.len(), 4);
        eprintln!("fairness: {f:?}");
        engine.stop().expect("engine stop");
    }
}
