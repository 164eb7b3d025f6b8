//! The engine's clock, read at most once per step.
//!
//! The core is sans-IO: it is handed `now` (DESIGN §7). The engine reads the clock for
//! it, and one step over TCP asked up to seven times: the packet's send, the fabric's
//! poll, the hand-back's sleep preparation, its sleep bound, and its comparison with
//! the engine thread's sleep. A read costs 35-45 ns on the KVM guests this project is
//! measured on, about as much as the rest of an idle turn. Inside a step (a turn and
//! its fabric poll; a hand-back) the first read is kept and the others get the same
//! instant; outside one every read is fresh, so a path nobody marked as a step reads
//! the clock as it always did.
//!
//! A step lasts one turn: every ready terminus's quantum of packets and one poll of the
//! fabric (up to 64 packets) — microseconds for small packets, up to milliseconds for
//! many 256 KiB ones. What the core times with its instant (a packet held for
//! coalescing, a retransmission's deadline, a rail's empty reads) then starts that much
//! early at most. Never more than one turn: the packets a stream holds go out once their
//! hold has passed, which a run of turns sharing one instant would never see (a
//! hand-back's turns are each a step of their own).
//!
//! Steps do not nest, and a step left open (a panic inside one: the engine lives on, a
//! holder's panic lets go of it) ends at the next step's start, which also starts
//! afresh: the engine's thread begins one every turn.
//!
//! Comparisons of instants must take both from readings of this clock made for that
//! purpose, not one from a step and one from a fresh read: the engine thread's sleep
//! ends at the instant of the timer it sleeps for, and a hand-back that compared that
//! timer against a later reading found it sooner than itself (`Engine::hand_back`).

use std::cell::Cell;

use hamlyn_core::Instant;

/// [`StepClock::step`] outside a step.
const OFF: u64 = u64::MAX;
/// [`StepClock::step`] in a step that has not read the clock yet.
const UNREAD: u64 = u64::MAX - 1;

/// The engine's monotonic clock (see the module docs).
#[derive(Debug)]
pub(crate) struct StepClock {
    /// Where the engine's `Instant`s count from: a reading of the monotonic clock, in
    /// nanoseconds.
    origin: u64,
    /// [`OFF`] outside a step; inside one, [`UNREAD`] or the nanoseconds of its first
    /// reading (which never reach `UNREAD`: that is 584 years after the origin).
    step: Cell<u64>,
}

/// Whether [`StepClock::begin`] began a step (and the matching [`StepClock::end`] ends
/// it) or [`StepClock::no_step`] stands for none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a begun step must be ended, or later reads keep its instant"]
pub(crate) struct Began(bool);

impl StepClock {
    /// A clock whose `Instant`s count from now.
    pub(crate) fn new() -> StepClock {
        StepClock {
            origin: monotonic_nanos(),
            step: Cell::new(OFF),
        }
    }

    /// Now, for the core (nanoseconds since the engine's origin): the step's reading, if
    /// one is in progress and has read the clock; else read now (and kept, in a step).
    #[inline]
    pub(crate) fn now(&self) -> Instant {
        let step = self.step.get();
        if step < UNREAD {
            return Instant(step);
        }
        let t = self.read();
        if step == UNREAD {
            self.step.set(t.0);
        }
        t
    }

    /// A reading of the clock (below [`UNREAD`]: saturating there).
    fn read(&self) -> Instant {
        let nanos = monotonic_nanos().saturating_sub(self.origin);
        Instant(nanos.min(UNREAD - 1))
    }

    /// The start of a step: reads until [`StepClock::end`] share the first one's instant.
    /// No clock read here: a step that never asks (an idle turn) costs none. Always a
    /// fresh step: one found open was left by a panic, and its instant is stale.
    #[inline]
    pub(crate) fn begin(&self) -> Began {
        self.step.set(UNREAD);
        Began(true)
    }

    /// Ends any step left open (by a panic inside it); reads are fresh again.
    #[inline]
    pub(crate) fn reset(&self) {
        self.step.set(OFF);
    }

    /// No step: [`StepClock::end`] of it does nothing, and reads stay fresh (an engine
    /// whose turns read the clock at most once has nothing to share).
    #[inline]
    pub(crate) fn no_step(&self) -> Began {
        Began(false)
    }

    /// The end of the step `begun` began (nothing, for [`StepClock::no_step`]).
    #[inline]
    pub(crate) fn end(&self, begun: Began) {
        if begun.0 {
            self.step.set(OFF);
        }
    }
}

/// The monotonic clock (`CLOCK_MONOTONIC`, the clock of `std::time::Instant`) in
/// nanoseconds: the vDSO's reading and two integer operations, where
/// `std::time::Instant::elapsed` also subtracts and range-checks two timespecs and builds
/// a `Duration` (about half of each read's instructions on a TCP message's path).
#[inline]
fn monotonic_nanos() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // Both are non-negative on Linux's monotonic clock (it starts at boot).
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(t.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn pause() {
        std::thread::sleep(Duration::from_millis(2));
    }

    /// Outside a step every read is fresh; inside one every read is the first one's;
    /// after it, fresh again.
    #[test]
    fn a_step_keeps_its_first_reading_and_nothing_else_does() {
        let c = StepClock::new();
        let a = c.now();
        pause();
        let b = c.now();
        assert!(
            b.0 >= a.0 + 2_000_000,
            "outside a step: fresh ({a:?}, {b:?})"
        );

        let began = c.begin();
        let first = c.now();
        pause();
        assert_eq!(c.now(), first, "inside a step: the first reading");
        // No step (an engine without a fabric) ends nothing.
        c.end(c.no_step());
        assert_eq!(c.now(), first, "the step goes on");
        c.end(began);
        pause();
        let after = c.now();
        assert!(
            after.0 >= first.0 + 4_000_000,
            "after the step: fresh ({first:?}, {after:?})"
        );
    }

    /// A step left open (its end never ran: a panic) does not outlive the next step's
    /// start, which reads afresh, nor a reset.
    #[test]
    fn a_step_left_open_ends_at_the_next_start_or_a_reset() {
        let c = StepClock::new();
        let _lost = c.begin();
        let stale = c.now();
        pause();
        let began = c.begin();
        let fresh = c.now();
        assert!(fresh.0 >= stale.0 + 2_000_000, "a fresh reading");
        c.end(began);
        let _lost = c.begin();
        let stale = c.now();
        c.reset();
        pause();
        assert!(c.now().0 >= stale.0 + 2_000_000, "fresh after a reset");
    }

    /// A step that never reads costs no reading: the next step reads its own.
    #[test]
    fn a_step_that_never_reads_leaves_nothing_behind() {
        let c = StepClock::new();
        let began = c.begin();
        c.end(began);
        let began = c.begin();
        let t = c.now();
        pause();
        assert_eq!(c.now(), t);
        c.end(began);
        assert!(c.now().0 >= t.0 + 2_000_000);
    }
}
