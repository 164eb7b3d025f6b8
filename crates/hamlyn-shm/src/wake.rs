//! Sleeping and waking without burning a core and without lost wakeups (DESIGN §2,
//! "Wait-free and sleep-friendly"; Hamlyn's coalesced interrupts).
//!
//! A consumer that finds nothing to do spins for a short budget, then publishes its
//! intent to sleep in a shared 32-bit *wake word* ([`SLEEPING`]), re-checks its condition,
//! and sleeps on the word with a shared (not process-private) futex, so a producer in
//! another process can wake it. A producer, after publishing work, looks at the word and
//! makes the wake system call only if the flag is set: while the consumer is awake,
//! producing costs one fence and one load, no system call.
//!
//! # Why no wakeup is lost
//!
//! This is Dekker's pattern; each side writes its own variable, then reads the other's:
//!
//! ```text
//!   consumer (wait_until)                    producer (publish + wake_after_publish)
//!   W1: word |= SLEEPING      (Relaxed RMW)  W2: publish the item   (Release store)
//!   F1: fence(SeqCst)                        F2: fence(SeqCst)
//!   R1: ready()?  (Acquire loads of items)   R2: word & SLEEPING?   (Relaxed load)
//! ```
//!
//! The two SeqCst fences are totally ordered. If F1 comes first, then W1 happens-before
//! R2 and the producer sees `SLEEPING` (and wakes the consumer); if F2 comes first, then
//! W2 happens-before R1 and the consumer's re-check sees the item (and does not sleep).
//! Release/Acquire alone would allow both reads to miss (store buffering), which is
//! exactly the lost wakeup. Only fences are SeqCst, never accesses: that is what loom
//! models precisely, and the loom test below checks it.
//!
//! Between R1 and the sleep itself, the kernel closes the window: `FUTEX_WAIT` compares
//! the word with the value that still has `SLEEPING` set and returns at once if a
//! producer has since cleared the flag (the producer clears it before `FUTEX_WAKE`, so
//! either the compare fails or the waiter is already queued when the wake comes).
//!
//! The producer clears the flag with one `fetch_and` and only the producer that saw it set
//! makes the system call: many producers publishing to one sleeper cost one wake.
//!
//! One waiter per word: the flag is not a count, so two consumers must not sleep on the
//! same word.
//!
//! # Event loops
//!
//! A consumer that lives in an event loop (epoll, tokio) instead calls [`arm_eventfd`],
//! which sets [`EVENTFD_ARMED`] with the same fence-and-recheck; a producer that holds the
//! port's [`EventFd`] then pokes it once and clears the flag. The consumer drains the
//! eventfd, consumes everything, and re-arms.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::io::Errno;

use crate::cpu_demand;
use crate::sync::{fence, spin_loop, AtomicU32, Ordering};

/// Wake-word bit: the consumer is asleep (or about to be) on the futex.
pub const SLEEPING: u32 = 1 << 0;
/// Wake-word bit: the consumer waits in an event loop for the eventfd.
pub const EVENTFD_ARMED: u32 = 1 << 1;
/// Wake-word bit, beside [`EVENTFD_ARMED`]: armed by a consumer that will most likely
/// look again in a moment without being woken — an engine's doorbell armed by the
/// hand-back of a thread of the hosting process, which drives it again at its next wait
/// (`hamlyn_engine::Driving`). A producer that finds both bits waits up to a grace for
/// the flag to be withdrawn before it pokes ([`wake_after_fence_with_grace`]). (Bit 2 of
/// an engine's doorbell is `crate::ready::COLD`.)
pub const HANDED_BACK: u32 = 1 << 3;

/// Why waiting or waking failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WakeError {
    /// `FUTEX_WAIT` failed other than by timeout, interruption or a changed word.
    #[error("futex wait failed: {0}")]
    Futex(Errno),
    /// The other end of a wake-up channel is closed for good (every process holding it
    /// is gone): nobody will poke again.
    #[error("the other end of the wake-up channel is closed")]
    Closed,
    /// A system call on a wake-up channel ([`EventFd`]) failed.
    #[error("wake-up channel {op} failed: {source}")]
    EventFd {
        /// The call that failed.
        op: &'static str,
        /// The error it returned.
        source: Errno,
    },
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitOutcome {
    /// The condition held.
    Ready {
        /// Futex sleeps that ended before the timeout (woken by a producer, or
        /// spuriously); 0 if the condition held before the consumer ever slept.
        woken: u32,
    },
    /// The timeout passed with the condition still false.
    TimedOut,
}

/// Waits until `ready()` returns true or `timeout` passes (`None`: no timeout): spins
/// `spin` times, then sleeps on `word` between re-checks.
///
/// `ready` must read the producers' publications with Acquire loads (the consumer's side
/// of the pattern in the module docs); it is called again after every wakeup.
pub fn wait_until(
    word: &AtomicU32,
    spin: u32,
    timeout: Option<Duration>,
    mut ready: impl FnMut() -> bool,
) -> Result<WaitOutcome, WakeError> {
    for _ in 0..spin {
        if ready() {
            return Ok(WaitOutcome::Ready { woken: 0 });
        }
        spin_loop();
    }
    if ready() {
        return Ok(WaitOutcome::Ready { woken: 0 });
    }
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    let mut woken = 0u32;
    loop {
        // W1. Relaxed: the ordering comes from F1.
        let before = word.fetch_or(SLEEPING, Ordering::Relaxed);
        // F1: pairs with the SeqCst fence F2 in `wake_after_publish` (Dekker; see the
        // module docs): either R1 below sees the item, or the producer sees SLEEPING.
        fence(Ordering::SeqCst);
        // R1
        if ready() {
            word.fetch_and(!SLEEPING, Ordering::Relaxed);
            return Ok(WaitOutcome::Ready { woken });
        }
        // No deadline: no timeout (also for a timeout too large for `Instant`).
        let remaining = match deadline {
            None => None,
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(r) if !r.is_zero() => Some(r),
                _ => {
                    word.fetch_and(!SLEEPING, Ordering::Relaxed);
                    return Ok(WaitOutcome::TimedOut);
                }
            },
        };
        match futex_wait(word, before | SLEEPING, remaining) {
            Ok(()) => woken = woken.saturating_add(1),
            // The word changed (a producer cleared SLEEPING): re-check at once.
            Err(Errno::AGAIN) | Err(Errno::INTR) | Err(Errno::TIMEDOUT) => {}
            Err(e) => {
                word.fetch_and(!SLEEPING, Ordering::Relaxed);
                return Err(WakeError::Futex(e));
            }
        }
    }
}

/// A spin-then-sleep budget that adapts to how soon work comes after a waiter starts
/// waiting (issue 14, tails): the rule of KVM's halt polling. A waiter spins
/// [`AdaptiveSpin::polls`] polls, then sleeps; after a sleep the budget
///
/// - **doubles** (up to what lasts `reach` at the pace of the spin) if the work came
///   within `reach` of the wait's start: arrivals come at that rate, and a sleep costs
///   a wake-up (tens of microseconds, on an idle virtual machine as on a busy one) that
///   spinning would have saved;
/// - **halves** (down to `min`) if it came later — the waiter slept long anyway — so a
///   waiter that waits long spins `min` polls, then sleeps.
///
/// A wait that finds its work while spinning leaves the budget as it is.
///
/// The reach is a time, not a number of polls: a poll's pace differs by an order of
/// magnitude between machines (a `pause` is 10 cycles on some, 140 on others), and what
/// a spin must outlast is the peer's wake-up, a time. With a cap in polls (8 × 200), a
/// machine polling at 10 ns reached 16 µs, short of the 28 µs an idle vCPU takes to
/// wake: two waiters in a ping-pong each slept every time, because the other one had.
///
/// And, as KVM stops polling when another task wants the CPU: a spin about to go beyond
/// its floor while more threads are runnable than this process has CPUs
/// ([`crate::cpu_demand`]) sleeps instead and halves the budget; a spin that took more
/// than [`PREEMPTED_PACE`] times as long per poll as the fastest spin seen was
/// descheduled — the CPU is wanted by others — and halves the budget whatever came
/// after; so does a yield of the spin beyond its floor that lasted
/// [`YIELD_CONTENDED`] (it gave the CPU to another thread), which also ends the spin. On a machine with more runnable threads than cores, spinning only burns the
/// time slice the thread that is to send needs (measured: a grown budget made an 8 B
/// ping-pong's median 10x slower under a load of 10 on 2 cores).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveSpin {
    polls: u32,
    min: u32,
    /// How long after a wait's start work may come for the budget to grow (zero: the
    /// budget stays at `min`).
    reach: Duration,
    /// The fastest pace seen, in nanoseconds per poll (`u32::MAX`: none yet).
    fastest: u32,
}

/// A spin this many times slower per poll than the fastest seen was descheduled.
pub const PREEMPTED_PACE: u32 = 4;

impl AdaptiveSpin {
    /// A budget of `min` polls that may grow while work comes within `reach` of a
    /// wait's start (`Duration::ZERO`: fixed at `min`).
    pub fn new(min: u32, reach: Duration) -> AdaptiveSpin {
        AdaptiveSpin {
            polls: min,
            min,
            reach,
            fastest: u32::MAX,
        }
    }

    /// Polls to spin before the next sleep.
    pub fn polls(&self) -> u32 {
        self.polls
    }

    /// How long a wait may spin in all before it sleeps (see [`wait_until_adaptive`]).
    pub fn reach(&self) -> Duration {
        self.reach
    }

    /// A yield of the spin gave the CPU to another thread: halves the budget.
    fn contended(&mut self) {
        self.polls = (self.polls / 2).max(self.min);
    }

    /// A wait spun `polls` polls tight for `spun` (the pace), found nothing, and then
    /// spun on (yielding) or slept for `asleep` before its work came or it timed out.
    fn after_sleep(&mut self, polls: u32, spun: Duration, asleep: Duration) {
        let per_poll = spun / polls.max(1);
        let pace = u32::try_from(per_poll.as_nanos())
            .unwrap_or(u32::MAX)
            .max(1);
        self.fastest = self.fastest.min(pace);
        let preempted = pace > self.fastest.saturating_mul(PREEMPTED_PACE);
        // The most polls that last `reach` at this spin's pace.
        let cap = u32::try_from(self.reach.as_nanos() / u128::from(pace))
            .unwrap_or(u32::MAX)
            .max(self.min);
        self.polls = if !preempted && spun.saturating_add(asleep) <= self.reach {
            self.polls.saturating_mul(2).min(cap)
        } else {
            (self.polls / 2).max(self.min)
        };
    }
}

/// [`wait_until`] with a budget that adapts ([`AdaptiveSpin`]): spins `spin.polls()`
/// polls, then sleeps on `word` between re-checks; a wait that slept updates `spin`. Two
/// clock reads, both only once the first poll found nothing.
pub fn wait_until_adaptive(
    word: &AtomicU32,
    spin: &mut AdaptiveSpin,
    timeout: Option<Duration>,
    mut ready: impl FnMut() -> bool,
) -> Result<WaitOutcome, WakeError> {
    if ready() {
        return Ok(WaitOutcome::Ready { woken: 0 });
    }
    let polls = spin.polls();
    // The floor is spun tight; the growth yields the CPU every YIELD_EVERY polls (as
    // Aeron's back-off idle strategy does): a thread that wants this core (perhaps the
    // one that is to send) gets it, and the spin goes on when it is done.
    let tight = polls.min(spin.min);
    let start = Instant::now();
    for _ in 0..tight {
        if ready() {
            return Ok(WaitOutcome::Ready { woken: 0 });
        }
        spin_loop();
    }
    let spun = start.elapsed();
    // More runnable threads than CPUs: spinning on would keep one of them (perhaps the
    // one that is to send) off a core. Sleep now, and spin less.
    let mut contended = polls > tight && cpu_demand::oversubscribed() == Some(true);
    let extend = if contended { 0 } else { polls - tight };
    for i in 0..extend {
        if ready() {
            if contended {
                spin.contended();
            }
            return Ok(WaitOutcome::Ready { woken: 0 });
        }
        if i % YIELD_EVERY == YIELD_EVERY - 1 {
            let before = Instant::now();
            yield_cpu();
            let after = Instant::now();
            // A yield that gave the CPU away for a while: other threads want this core
            // (perhaps the one that is to send). Stop spinning: sleep, and spin less.
            if after.saturating_duration_since(before) >= YIELD_CONTENDED {
                contended = true;
                break;
            }
            // Yields slow the pace: the spin ends at its reach, polls left or not.
            if after.saturating_duration_since(start) >= spin.reach() {
                break;
            }
        } else {
            spin_loop();
        }
    }
    let extended = start.elapsed();
    let left = timeout.map(|t| t.saturating_sub(extended));
    let out = wait_until(word, 0, left, ready)?;
    if contended {
        spin.contended();
    } else {
        spin.after_sleep(tight, spun, start.elapsed().saturating_sub(spun));
    }
    Ok(out)
}

/// A yield of the CPU that lasted this long gave it to another thread: the core is
/// wanted ([`wait_until_adaptive`]). On an idle core `sched_yield` returns in about a
/// microsecond.
pub const YIELD_CONTENDED: Duration = Duration::from_micros(20);

/// Polls between two yields of the CPU in the part of an adaptive spin beyond its floor.
const YIELD_EVERY: u32 = 32;

#[cfg(not(loom))]
fn yield_cpu() {
    rustix::thread::sched_yield();
}

#[cfg(loom)]
fn yield_cpu() {
    loom::thread::yield_now();
}

/// Producer side: call right after publishing (a Release store the consumer's `ready`
/// reads). Wakes the consumer if it sleeps on `word`, and pokes `eventfd` (if given) if
/// the consumer armed it. Returns whether a system call was made: never while the
/// consumer is awake.
#[inline]
pub fn wake_after_publish(word: &AtomicU32, eventfd: Option<&EventFd>) -> bool {
    publish_fence();
    wake_after_fence(word, eventfd)
}

/// Producer side: the SeqCst fence F2 that follows a publication, for a producer that
/// has more than one thing to look at after it (the doorbell, and the port's ready hints,
/// [`crate::ready`]) and issues it once, then calls [`wake_after_fence`] or
/// [`asleep_after_fence`].
#[inline]
pub fn publish_fence() {
    // F2: pairs with the SeqCst fence F1 in `wait_until` (and in `arm_eventfd`): either
    // the consumer's re-check sees what we published, or we see its flag after this.
    fence(Ordering::SeqCst);
}

/// [`wake_after_publish`] for a producer that issued F2 ([`publish_fence`]) itself.
#[inline]
pub fn wake_after_fence(word: &AtomicU32, eventfd: Option<&EventFd>) -> bool {
    // R2. Relaxed: ordered by F2.
    let w = word.load(Ordering::Relaxed);
    if w & (SLEEPING | EVENTFD_ARMED) == 0 {
        return false;
    }
    wake_slow(word, w, eventfd)
}

/// [`wake_after_fence`], but a word armed with [`HANDED_BACK`] is given up to `grace`
/// (re-read in a spin) to be disarmed before the poke: the consumer that armed it is
/// about to look again by itself, and a poke would wake a thread for nothing. Whether a
/// system call was made.
///
/// Why: an engine's hosting process hands the engine back after each wait and each push
/// (its doorbells armed) and drives it again at its next wait (disarmed). A client in
/// another process that answers a message of that host at once pushes inside that
/// window, and its poke woke the engine's thread, on a core the host was about to use:
/// in a pinned mediated ping-pong a third of the rounds (a thousand pokes in 2,500
/// rounds), enough to tip both processes into sleeping on every message (p50 6-7 µs at
/// 512 B, p99 30 µs at every size). Waiting for the host's next wait instead, the rounds
/// stayed at 0.33-0.37 µs, p99 0.4 µs (2026-12-07).
///
/// Safe as any late producer: seeing the flag withdrawn after F2 is what a producer
/// that published a little later would have seen, and the protocol holds for every
/// interleaving (the consumer that withdraws it looks at the work after, `arm_eventfd`'s
/// order; another producer that withdrew it pokes).
#[inline]
pub fn wake_after_fence_with_grace(
    word: &AtomicU32,
    eventfd: Option<&EventFd>,
    grace: Duration,
) -> bool {
    // R2. Relaxed: ordered by F2.
    let w = word.load(Ordering::Relaxed);
    if w & (SLEEPING | EVENTFD_ARMED) == 0 {
        return false;
    }
    // A cold port's doorbell (`crate::ready::COLD`) is read by nobody's turns until
    // it rings: no grace.
    let handed_back = EVENTFD_ARMED | HANDED_BACK;
    if w & (handed_back | crate::ready::COLD) == handed_back && disarmed_within(word, grace) {
        return false;
    }
    wake_after_fence(word, eventfd)
}

/// Whether `word`'s [`EVENTFD_ARMED`] (and [`SLEEPING`]) flags are withdrawn within
/// `grace`, re-read in a spin. The clock is read every 16 reads.
#[cold]
#[inline(never)]
fn disarmed_within(word: &AtomicU32, grace: Duration) -> bool {
    let start = Instant::now();
    let mut reads: u32 = 0;
    loop {
        spin_loop();
        // Relaxed: a later R2 (the producer's F2 orders its publication before it).
        if word.load(Ordering::Relaxed) & (SLEEPING | EVENTFD_ARMED) == 0 {
            return true;
        }
        reads = reads.wrapping_add(1);
        if cfg!(loom) && reads >= 2 {
            return false;
        }
        if reads % 16 == 0 && start.elapsed() >= grace {
            return false;
        }
    }
}

/// Producer side, for a producer that can do the consumer's work itself (a thread of
/// the process hosting an engine, `hamlyn_engine::Driver::nudge`): call right after
/// publishing; whether the consumer sleeps or waits in an event loop. Nothing is
/// cleared and no system call made: if the producer then does the work, the consumer
/// never had to wake (it clears its flags when it runs); if it cannot, it calls
/// [`wake_after_publish`], which wakes the consumer.
#[inline]
pub fn asleep_after_publish(word: &AtomicU32) -> bool {
    publish_fence();
    asleep_after_fence(word)
}

/// [`asleep_after_publish`] for a producer that issued F2 ([`publish_fence`]) itself.
#[inline]
pub fn asleep_after_fence(word: &AtomicU32) -> bool {
    // R2. Relaxed: ordered by F2.
    word.load(Ordering::Relaxed) & (SLEEPING | EVENTFD_ARMED) != 0
}

#[cold]
#[inline(never)]
fn wake_slow(word: &AtomicU32, seen: u32, eventfd: Option<&EventFd>) -> bool {
    let mut bits = SLEEPING;
    if eventfd.is_some() {
        bits |= EVENTFD_ARMED;
    }
    if seen & bits == 0 {
        return false;
    }
    // Only the producer that clears a bit acts on it: one wake per sleep. Relaxed: the
    // futex system call orders the clear before the wake, and the waiter's kernel-side
    // compare reads the word under the futex bucket lock.
    let old = word.fetch_and(!(bits | HANDED_BACK), Ordering::Relaxed);
    let mut syscall = false;
    if old & SLEEPING != 0 {
        futex_wake(word);
        syscall = true;
    }
    if old & bits & EVENTFD_ARMED != 0 {
        if let Some(efd) = eventfd {
            // The only failure is EAGAIN when the counter is saturated, in which case
            // the eventfd is readable already, which is all we want.
            let _ = efd.notify();
            syscall = true;
        }
    }
    syscall
}

/// Consumer side, event-loop mode, for many words at once: [`arm_eventfd`] split so
/// that one fence serves them all. Call [`set_eventfd_armed`] on every word, then
/// [`armed_fence`] once (F1), then look at each word's producers' work, and for each
/// word whose work is there, [`withdraw_eventfd_armed`]. Per word this is exactly
/// `arm_eventfd`'s order (its flag set, F1, its re-check), with one fence instead of one
/// per word: an engine arming hundreds of ports pays one.
#[inline]
pub fn set_eventfd_armed(word: &AtomicU32) {
    word.fetch_or(EVENTFD_ARMED, Ordering::Relaxed);
}

/// F1 of the batched arming ([`set_eventfd_armed`]): pairs with the producers' F2
/// (`publish_fence`).
#[inline]
pub fn armed_fence() {
    fence(Ordering::SeqCst);
}

/// The batched arming found work for this word: its producers need not poke.
#[inline]
pub fn withdraw_eventfd_armed(word: &AtomicU32) {
    word.fetch_and(!(EVENTFD_ARMED | HANDED_BACK), Ordering::Relaxed);
}

/// [`set_eventfd_armed`] by a consumer that will look again in a moment by itself
/// ([`HANDED_BACK`]).
#[inline]
pub fn set_eventfd_armed_handed_back(word: &AtomicU32) {
    word.fetch_or(EVENTFD_ARMED | HANDED_BACK, Ordering::Relaxed);
}

/// [`set_eventfd_armed`] by a consumer that will not look again until poked: withdraws
/// [`HANDED_BACK`] too.
#[inline]
pub fn set_eventfd_armed_for_sleep(word: &AtomicU32) {
    word.fetch_and(!HANDED_BACK, Ordering::Relaxed);
    word.fetch_or(EVENTFD_ARMED, Ordering::Relaxed);
}

/// Consumer side, event-loop mode: asks producers to poke the port's eventfd on their
/// next publication. Returns `true` if `ready()` already holds (consume before going back
/// to the event loop; the flag is withdrawn so producers skip the poke).
pub fn arm_eventfd(word: &AtomicU32, mut ready: impl FnMut() -> bool) -> bool {
    word.fetch_or(EVENTFD_ARMED, Ordering::Relaxed);
    // F1 (event-loop variant): pairs with the SeqCst fence F2 in `wake_after_publish`.
    fence(Ordering::SeqCst);
    if ready() {
        word.fetch_and(!EVENTFD_ARMED, Ordering::Relaxed);
        return true;
    }
    false
}

#[cfg(not(loom))]
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> Result<(), Errno> {
    use rustix::thread::futex;
    let ts = timeout.map(|t| futex::Timespec {
        tv_sec: i64::try_from(t.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(t.subsec_nanos()),
    });
    // Flags::empty(): a *shared* futex, keyed by the physical page, so that a producer in
    // another process mapping the same memfd can wake us. FUTEX_PRIVATE would key it by
    // this process's address space and the wake would never arrive.
    futex::wait(word, futex::Flags::empty(), expected, ts.as_ref())
}

#[cfg(not(loom))]
fn futex_wake(word: &AtomicU32) {
    use rustix::thread::futex;
    // Shared futex, as in `futex_wait`. The call fails only for a bad address or
    // alignment, impossible for a live `&AtomicU32`.
    let _ = futex::wake(word, futex::Flags::empty(), u32::MAX);
}

/// Loom's model of the futex: one bucket (a loom mutex and condition variable) for every
/// word, exactly the kernel's algorithm: the waiter compares the word under the bucket
/// lock and sleeps atomically with releasing it; the waker takes the lock and wakes all.
/// Timeouts are ignored so that a lost wakeup shows up as a deadlock, which loom reports.
#[cfg(loom)]
mod loom_futex {
    use loom::sync::{Condvar, Mutex};

    loom::lazy_static! {
        pub static ref BUCKET: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());
    }
}

#[cfg(loom)]
fn futex_wait(word: &AtomicU32, expected: u32, _timeout: Option<Duration>) -> Result<(), Errno> {
    let (lock, cond) = &*loom_futex::BUCKET;
    let guard = lock.lock().map_err(|_| Errno::INVAL)?;
    if word.load(Ordering::Relaxed) != expected {
        return Err(Errno::AGAIN);
    }
    let _guard = cond.wait(guard).map_err(|_| Errno::INVAL)?;
    Ok(())
}

#[cfg(loom)]
fn futex_wake(_word: &AtomicU32) {
    let (lock, cond) = &*loom_futex::BUCKET;
    let _guard = lock.lock();
    cond.notify_all();
}

/// Drains at most this many pokes per call: a peer that pokes in a loop costs the
/// drainer bounded work.
const DRAIN_MAX: u32 = 4096;

/// One end of a wake-up channel across a trust boundary: the port's event descriptor
/// (engine and direct senders poke, the client waits on it in epoll) and the engine's
/// doorbell (clients poke, the engine waits). It is an end of a close-on-exec
/// `SOCK_SEQPACKET` socket pair, not an eventfd(2): the two ends are separate open file
/// descriptions, and
/// every send and receive is non-blocking by its own flag (`MSG_DONTWAIT`), so nothing the
/// other side does to its descriptor (clearing `O_NONBLOCK`, filling the channel) can make
/// a poke or a drain block. A full channel is readable already, which is all a poke is for.
/// When every descriptor of the poking end is closed (the engine died), the waiting end
/// becomes readable with a hang-up, and [`EventFd::drain`] says [`WakeError::Closed`]: an
/// event loop learns it at once.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new channel: `(poker, waiter)`. Pokes sent on the first make the second
    /// readable; keep each end on the side that uses it and hand out duplicates of it
    /// only (`dup` shares the end, never the other one).
    pub fn pair() -> Result<(EventFd, EventFd), WakeError> {
        use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
        let (a, b) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )
        .map_err(|e| WakeError::EventFd {
            op: "socketpair",
            source: e,
        })?;
        Ok((EventFd { fd: a }, EventFd { fd: b }))
    }

    /// Wraps an end received from another process.
    pub fn from_fd(fd: OwnedFd) -> EventFd {
        EventFd { fd }
    }

    /// Pokes the other end: it becomes readable. Never blocks; a full channel (the other
    /// side has not drained) or a closed one (it is gone) is not an error worth a caller's
    /// attention, so only unexpected failures are returned.
    pub fn notify(&self) -> Result<(), WakeError> {
        use rustix::net::{send, SendFlags};
        loop {
            match send(&self.fd, &[1u8], SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
                Ok(_) => return Ok(()),
                Err(Errno::INTR) => continue,
                // Full: readable already. Gone: nobody to wake.
                Err(Errno::AGAIN | Errno::NOBUFS | Errno::CONNREFUSED | Errno::PIPE) => {
                    return Ok(())
                }
                Err(e) => {
                    return Err(WakeError::EventFd {
                        op: "send",
                        source: e,
                    })
                }
            }
        }
    }

    /// Takes the pokes waiting (at most a bounded number per call), returning how many
    /// there were (0 if none). Never blocks.
    pub fn drain(&self) -> Result<u64, WakeError> {
        use rustix::net::{recv, RecvFlags};
        let mut buf = [0u8; 8];
        let mut n = 0;
        while n < DRAIN_MAX {
            match recv(&self.fd, &mut buf, RecvFlags::DONTWAIT) {
                // Every poke is one byte: an empty read is the end of the channel.
                Ok((0, _)) if n == 0 => return Err(WakeError::Closed),
                Ok((0, _)) => break,
                Ok(_) => n += 1,
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => break,
                Err(e) => {
                    return Err(WakeError::EventFd {
                        op: "recv",
                        source: e,
                    })
                }
            }
        }
        Ok(u64::from(n))
    }

    /// The descriptor, to register with epoll or pass to another process.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Gives up the descriptor.
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::AtomicBool;

    /// A producer that finds a doorbell armed by a hand-back gives the consumer its
    /// grace: withdrawn meanwhile (here by a thread that withdraws it 20 ms on, well
    /// within the grace), it pokes nothing; left armed, it pokes once the grace
    /// is over. One armed by a consumer that sleeps for good (no mark) or a cold port's
    /// is poked at once: the withdrawing thread here waits for that poke (up to 5 s)
    /// before it withdraws, so a producer that waited for it would see it withdrawn and
    /// not poke.
    #[test]
    fn a_handed_back_doorbell_is_given_its_grace_and_no_other() {
        use std::sync::Arc;
        let run = |armed: u32, grace: Duration, withdraw_when_poked: bool| {
            let word = Arc::new(AtomicU32::new(armed));
            let (poke, bell) = EventFd::pair().expect("pair");
            let bell = Arc::new(bell);
            let withdrawer = {
                let (word, bell) = (word.clone(), bell.clone());
                std::thread::spawn(move || {
                    if withdraw_when_poked {
                        let deadline = Instant::now() + Duration::from_secs(5);
                        while bell.drain().unwrap_or(0) == 0 && Instant::now() < deadline {
                            std::thread::yield_now();
                        }
                    } else {
                        // Let the producer find it armed and start its grace first.
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    withdraw_eventfd_armed(&word);
                })
            };
            publish_fence();
            let poked = wake_after_fence_with_grace(&word, Some(&poke), grace);
            withdrawer.join().expect("withdrawer");
            poked
        };
        let handed_back = EVENTFD_ARMED | HANDED_BACK;
        let long = Duration::from_secs(30);
        assert!(!run(handed_back, long, false), "withdrawn within the grace");
        assert!(
            run(handed_back, Duration::from_millis(1), true),
            "still armed after the grace: poked"
        );
        assert!(run(EVENTFD_ARMED, long, true), "no mark: poked at once");
        assert!(
            run(handed_back | crate::ready::COLD, long, true),
            "a cold port: poked at once"
        );
        assert!(!run(0, long, false), "not armed: nothing to poke");
    }

    #[test]
    fn awake_consumer_costs_no_syscall() {
        let word = AtomicU32::new(0);
        assert!(!wake_after_publish(&word, None));
        let (efd, waiter) = EventFd::pair().expect("wake-up channel");
        assert!(!wake_after_publish(&word, Some(&efd)));
        assert_eq!(waiter.drain(), Ok(0));
    }

    /// The adaptive budget's rule, fed durations (no clock): a wake within the reach
    /// doubles it up to what lasts the reach at the spin's pace; a long sleep halves
    /// it down to the floor; a budget without reach stays fixed.
    #[test]
    fn the_spin_budget_grows_for_prompt_wakes_and_shrinks_for_long_sleeps() {
        // 50 ns a poll, a reach of 40 µs: at most 800 polls.
        let mut a = AdaptiveSpin::new(100, Duration::from_micros(40));
        let per_poll = Duration::from_nanos(50);
        let spin = |a: &AdaptiveSpin| per_poll * a.polls();
        // Woken 1 µs after the spin: within the reach.
        for want in [200, 400, 800] {
            let polls = a.polls();
            a.after_sleep(polls, spin(&a), Duration::from_micros(1));
            assert_eq!(a.polls(), want);
        }
        // At the cap, a wake after the spin is beyond the reach: back down.
        a.after_sleep(800, spin(&a), Duration::from_micros(1));
        assert_eq!(a.polls(), 400);
        // Asleep 10 ms: no spin within the reach would have caught it.
        for want in [200, 100, 100] {
            let polls = a.polls();
            a.after_sleep(polls, spin(&a), Duration::from_millis(10));
            assert_eq!(a.polls(), want);
        }
        // Exactly the reach (5 µs spun + 35 µs asleep): grows; a microsecond more:
        // does not.
        a.after_sleep(100, spin(&a), Duration::from_micros(35));
        assert_eq!(a.polls(), 200);
        a.after_sleep(200, spin(&a), Duration::from_micros(31));
        assert_eq!(a.polls(), 100);
        // The cap follows the pace: at 10 ns a poll the same reach is 4,000 polls (a
        // cap in polls would have stopped short of the wake-up it is there to outlast).
        let mut fast = AdaptiveSpin::new(100, Duration::from_micros(40));
        for _ in 0..6 {
            let polls = fast.polls();
            fast.after_sleep(
                polls,
                Duration::from_nanos(10) * polls,
                Duration::from_micros(1),
            );
        }
        assert_eq!(fast.polls(), 4000);
        // A spin descheduled on the way (5x slower per poll than the fastest seen):
        // halves, however soon the wake came.
        let mut b = AdaptiveSpin::new(100, Duration::from_micros(40));
        b.after_sleep(100, spin(&b), Duration::from_micros(1));
        assert_eq!(b.polls(), 200);
        b.after_sleep(200, spin(&b) * 5, Duration::from_micros(1));
        assert_eq!(b.polls(), 100, "preempted while spinning");
        let mut fixed = AdaptiveSpin::new(100, Duration::ZERO);
        fixed.after_sleep(100, Duration::from_micros(5), Duration::ZERO);
        assert_eq!(fixed.polls(), 100, "no reach to grow in");
    }

    /// A wait that times out with the adaptive budget reports it and leaves the budget at
    /// its floor (it slept the whole timeout: longer than any spin within the cap).
    #[test]
    fn an_adaptive_wait_times_out_and_keeps_the_floor() {
        let word = AtomicU32::new(0);
        let mut a = AdaptiveSpin::new(10, Duration::from_micros(100));
        let out = wait_until_adaptive(&word, &mut a, Some(Duration::from_millis(20)), || false);
        assert_eq!(out, Ok(WaitOutcome::TimedOut));
        assert_eq!(a.polls(), 10);
        assert_eq!(
            word.load(Ordering::Relaxed),
            0,
            "the sleeping flag is withdrawn"
        );
    }

    /// With more threads runnable than CPUs, a grown budget's wait does not spin beyond
    /// its floor: it looks at its condition the floor's polls and a few times around the
    /// sleep, never the hundreds of polls the growth would take (the first yield of the
    /// growth, which could also end it, comes after 32 of them).
    #[test]
    fn an_oversubscribed_machine_gets_no_spin_beyond_the_floor() {
        let crowd = crate::cpu_demand::Crowd::start();
        let counted = crowd.counted();
        let mut calls = 0u32;
        let mut a = AdaptiveSpin::new(10, Duration::from_millis(10));
        a.polls = 10_000;
        let word = AtomicU32::new(0);
        let out = counted.then(|| {
            wait_until_adaptive(&word, &mut a, Some(Duration::from_millis(5)), || {
                calls += 1;
                false
            })
        });
        drop(crowd);
        let Some(out) = out else {
            eprintln!("skipped: the runnable threads are not counted here (/proc/loadavg)");
            return;
        };
        assert_eq!(out, Ok(WaitOutcome::TimedOut));
        assert!(
            calls < 10 + 32,
            "the wait polled {calls} times: it spun beyond its floor of 10"
        );
        assert_eq!(a.polls(), 5_000, "a crowded machine halves the budget");
    }

    #[test]
    fn ready_before_sleep_returns_at_once() {
        let word = AtomicU32::new(0);
        let out = wait_until(&word, 0, Some(Duration::from_secs(5)), || true);
        assert_eq!(out, Ok(WaitOutcome::Ready { woken: 0 }));
        assert_eq!(word.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn times_out_and_clears_flag() {
        let word = AtomicU32::new(0);
        let t0 = Instant::now();
        let out = wait_until(&word, 10, Some(Duration::from_millis(30)), || false);
        assert_eq!(out, Ok(WaitOutcome::TimedOut));
        assert!(t0.elapsed() >= Duration::from_millis(30));
        assert_eq!(word.load(Ordering::Relaxed) & SLEEPING, 0);
    }

    #[test]
    fn producer_wakes_sleeping_consumer() {
        let word = AtomicU32::new(0);
        let item = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                // Wait until the consumer is (about to be) asleep.
                while word.load(Ordering::Relaxed) & SLEEPING == 0 {
                    std::thread::yield_now();
                }
                std::thread::sleep(Duration::from_millis(20));
                // Release: pairs with the Acquire load in the consumer's `ready`.
                item.store(true, Ordering::Release);
                assert!(wake_after_publish(&word, None), "consumer slept: syscall");
            });
            let t0 = Instant::now();
            let out = wait_until(&word, 100, Some(Duration::from_secs(20)), || {
                // Acquire: pairs with the Release store above.
                item.load(Ordering::Acquire)
            });
            assert!(matches!(out, Ok(WaitOutcome::Ready { .. })), "{out:?}");
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "woken, not timed out"
            );
        });
    }

    #[test]
    fn eventfd_armed_gets_poked_once() {
        let word = AtomicU32::new(0);
        let (efd, waiter) = EventFd::pair().expect("wake-up channel");
        assert!(!arm_eventfd(&word, || false));
        assert!(wake_after_publish(&word, Some(&efd)));
        assert!(
            !wake_after_publish(&word, Some(&efd)),
            "flag cleared: no second poke"
        );
        assert_eq!(waiter.drain(), Ok(1));
        assert_eq!(waiter.drain(), Ok(0));
        // Already ready: not armed, no poke.
        assert!(arm_eventfd(&word, || true));
        assert!(!wake_after_publish(&word, Some(&efd)));
        // A producer without the eventfd leaves the flag for one that has it.
        assert!(!arm_eventfd(&word, || false));
        assert!(!wake_after_publish(&word, None));
        assert!(wake_after_publish(&word, Some(&efd)));
    }

    /// What the other side does to its end cannot make a poke or a drain block: it may
    /// clear `O_NONBLOCK` on its descriptor (a shared file description would make ours
    /// blocking too) and fill the channel.
    #[test]
    fn neither_end_can_be_made_to_block() {
        use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
        let (poker, waiter) = EventFd::pair().expect("wake-up channel");
        // A duplicate of each end, as the other process holds it, made blocking.
        let their_poker = poker.as_fd().try_clone_to_owned().expect("dup");
        let their_waiter = waiter.as_fd().try_clone_to_owned().expect("dup");
        for fd in [&their_poker, &their_waiter] {
            let flags = fcntl_getfl(fd).expect("getfl");
            fcntl_setfl(fd, flags - OFlags::NONBLOCK).expect("setfl");
        }
        // Empty: a drain returns at once.
        assert_eq!(waiter.drain(), Ok(0));
        // Full: pokes return at once, and a drain takes a bounded number.
        for _ in 0..100_000 {
            poker.notify().expect("poke");
        }
        let first = waiter.drain().expect("drain");
        assert!(first > 0 && first <= u64::from(DRAIN_MAX), "{first}");
        while waiter.drain().expect("drain") > 0 {}
        // The other end gone: a poke is still not an error.
        drop(their_waiter);
        drop(waiter);
        poker.notify().expect("poke to nobody");
    }

    /// When the poking side is gone (the engine died), the waiting side's descriptor
    /// becomes readable and a drain says the channel is closed: an event loop learns it.
    #[test]
    fn the_waiter_learns_that_the_poker_is_gone() {
        let (poker, waiter) = EventFd::pair().expect("wake-up channel");
        poker.notify().expect("poke");
        drop(poker);
        let mut fds = [rustix::event::PollFd::new(
            &waiter,
            rustix::event::PollFlags::IN,
        )];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        assert_eq!(rustix::event::poll(&mut fds, Some(&zero)), Ok(1));
        assert_eq!(waiter.drain(), Ok(1), "the last poke is still read");
        assert_eq!(waiter.drain(), Err(WakeError::Closed));
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use std::sync::Arc;

    use super::*;

    /// No lost wakeup: a consumer that decides to sleep while a producer publishes is
    /// either woken or sees the item on its re-check. A lost wakeup would leave the
    /// consumer blocked forever in the futex model, which loom reports as a deadlock.
    #[test]
    fn loom_no_lost_wakeup() {
        crate::loom_model(|| {
            let word = Arc::new(AtomicU32::new(0));
            let item = Arc::new(AtomicU32::new(0));
            let (w2, i2) = (word.clone(), item.clone());
            let t = loom::thread::spawn(move || {
                // Release: pairs with the Acquire load in the consumer's `ready`.
                i2.store(1, Ordering::Release);
                wake_after_publish(&w2, None);
            });
            let out = wait_until(&word, 0, None, || {
                // Acquire: pairs with the Release store of `item` by the producer.
                item.load(Ordering::Acquire) == 1
            });
            assert!(matches!(out, Ok(WaitOutcome::Ready { .. })));
            t.join().expect("producer");
        });
    }

    /// The batched arming of two words with one fence: for each word, the consumer's
    /// re-check after the fence sees its producer's item, or the producer sees the
    /// word armed after its F2 (and would poke).
    #[test]
    fn loom_batched_arming_loses_no_push() {
        crate::loom_model(|| {
            let words = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
            let items = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
            let mut ts = Vec::new();
            for i in 0..2 {
                let (w, it) = (words.clone(), items.clone());
                ts.push(loom::thread::spawn(move || {
                    // Release: pairs with the consumer's Acquire re-check.
                    it[i].store(1, Ordering::Release);
                    publish_fence();
                    // Relaxed: ordered by F2.
                    w[i].load(Ordering::Relaxed) & EVENTFD_ARMED != 0
                }));
            }
            for w in words.iter() {
                set_eventfd_armed(w);
            }
            armed_fence();
            // Acquire: pairs with the producers' Release stores.
            let seen: Vec<bool> = items
                .iter()
                .map(|it| it.load(Ordering::Acquire) == 1)
                .collect();
            for (i, t) in ts.into_iter().enumerate() {
                let pokes = t.join().expect("producer");
                assert!(seen[i] || pokes, "push {i} neither seen nor poked");
            }
        });
    }

    /// A producer that finds a doorbell armed by a hand-back ([`HANDED_BACK`]) and waits
    /// for it to be withdrawn before it pokes never strands its item: the consumer's
    /// arming with a re-check, its withdrawal for its next drive (relaxed, as a driver's
    /// first turn does) with a look, and its re-arming with a re-check when that drive
    /// ends — either a look sees the item or the producer pokes.
    #[test]
    fn loom_a_grace_for_a_handed_back_arming_strands_no_push() {
        crate::loom_model(|| {
            let word = Arc::new(AtomicU32::new(0));
            let item = Arc::new(AtomicU32::new(0));
            let (poke, bell) = EventFd::pair().expect("eventfd");
            let (w2, i2) = (word.clone(), item.clone());
            let t = loom::thread::spawn(move || {
                // Release: pairs with the consumer's Acquire looks.
                i2.store(1, Ordering::Release);
                publish_fence();
                wake_after_fence_with_grace(&w2, Some(&poke), Duration::from_micros(1))
            });
            // Acquire: pairs with the producer's Release store.
            let look = || item.load(Ordering::Acquire) == 1;
            set_eventfd_armed_handed_back(&word);
            armed_fence();
            let mut seen = look();
            // The next drive: withdrawn, a look; then handed back again, a re-check.
            withdraw_eventfd_armed(&word);
            seen |= look();
            set_eventfd_armed_handed_back(&word);
            armed_fence();
            seen |= look();
            let poked = t.join().expect("producer");
            assert!(seen || poked, "the push was neither seen nor poked");
            if poked {
                assert!(bell.drain().is_ok());
            }
        });
    }

    /// One producer publishes to two consumers, each waiting on its own word, then issues
    /// one fence F2 for both publications and looks at both words (`publish_fence`, then
    /// `wake_after_fence` per word: what an engine does at the end of a visit that
    /// delivered to several queues). Neither consumer sleeps through its item.
    #[test]
    fn loom_one_fence_for_two_publications() {
        crate::loom_model(|| {
            let words = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
            let items = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
            let (w, i) = (words.clone(), items.clone());
            let producer = loom::thread::spawn(move || {
                for item in i.iter() {
                    // Release: pairs with the Acquire load in the consumer's `ready`.
                    item.store(1, Ordering::Release);
                }
                publish_fence();
                for word in w.iter() {
                    wake_after_fence(word, None);
                }
            });
            let (w, i) = (words.clone(), items.clone());
            let second = loom::thread::spawn(move || {
                wait_until(&w[1], 0, None, || {
                    // Acquire: pairs with the producer's Release store.
                    i[1].load(Ordering::Acquire) == 1
                })
            });
            let out = wait_until(&words[0], 0, None, || {
                // Acquire: pairs with the producer's Release store.
                items[0].load(Ordering::Acquire) == 1
            });
            assert!(matches!(out, Ok(WaitOutcome::Ready { .. })));
            let out = second.join().expect("second consumer");
            assert!(matches!(out, Ok(WaitOutcome::Ready { .. })));
            producer.join().expect("producer");
        });
    }

    /// Two producers, two items, one consumer waiting for both.
    #[test]
    fn loom_no_lost_wakeup_two_producers() {
        crate::loom_model(|| {
            let word = Arc::new(AtomicU32::new(0));
            let count = Arc::new(AtomicU32::new(0));
            let mut ts = Vec::new();
            for _ in 0..2 {
                let (w, c) = (word.clone(), count.clone());
                ts.push(loom::thread::spawn(move || {
                    // Release: pairs with the Acquire load in the consumer's `ready`.
                    c.fetch_add(1, Ordering::Release);
                    wake_after_publish(&w, None);
                }));
            }
            let out = wait_until(&word, 0, None, || {
                // Acquire: pairs with the producers' Release increments.
                count.load(Ordering::Acquire) == 2
            });
            assert!(matches!(out, Ok(WaitOutcome::Ready { .. })));
            for t in ts {
                t.join().expect("producer");
            }
        });
    }
}
