//! Progress by the waiting thread: who runs the turns of an engine hosted in this
//! process (an embedded engine), its own thread or a thread of the application that waits
//! for the engine anyway.
//!
//! [`Handoff`] holds the engine and two words:
//!
//! - the *ownership word*: whoever moves it from [`FREE`] to [`HELD`] (one
//!   compare-and-swap, never a lock, never a system call) has the engine to itself until
//!   it stores [`FREE`] again. A waiting thread holds it for one turn at a time; the
//!   engine's own thread holds it while it serves, and lets go as soon as a waiter wants
//!   to drive. Several waiting threads may try at once: one wins each turn, the others
//!   find it held and look at what they wait for again.
//! - the *driver count*: threads inside a drive ([`Handoff::enter`] .. [`Handoff::leave`]).
//!   The engine's thread reads it once per turn; while it is not zero the engine's thread
//!   lets go and sleeps. [`Handoff::leave`] tells the driver that takes the count back to
//!   zero that it was the last: it then hands the engine back — waking the engine's
//!   thread (the engine's doorbell) if work is left, e.g. the rest of a message the
//!   driver was in the middle of, and otherwise re-arming the clients' doorbells so that
//!   the next push wakes it (or drives a turn itself: `loom_a_push_is_never_stranded`).
//!
//! # Why the engine is never left without a thread
//!
//! Every drive ends with a leave, and exactly one leave takes the count to zero after the
//! engine's thread saw it above zero: that one wakes the thread (or is the engine's
//! thread itself, ending a [`Lease`]: it then serves at once). The wake is a readable
//! descriptor, not a flag, so it is not lost if it comes before the thread sleeps.
//! `loom_last_leave_hands_back` checks it with several drivers leaving at once. (The
//! engine skips the wake when its thread was asleep after going idle, not for the
//! drivers: it arms its clients' doorbells again instead, with the wake module's
//! arm-and-recheck, checked by that module's loom models.)
//!
//! # Why two threads never run the engine at once
//!
//! The compare-and-swap to [`HELD`] is Acquire and the store of [`FREE`] Release: each
//! holder's accesses to the engine happen-before the next holder's. The loom models below
//! check both properties (the engine is a loom-tracked cell there, so an overlap would be
//! reported as a data race).

use crate::sync::{AtomicU32, Ordering};

/// Ownership word: nobody runs the engine.
pub const FREE: u32 = 0;
/// Ownership word: a thread runs the engine.
pub const HELD: u32 = 1;

#[cfg(loom)]
use loom::cell::UnsafeCell;

/// `std`'s cell with loom's access API, so the same code runs under both.
#[cfg(not(loom))]
#[derive(Debug)]
struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    fn new(v: T) -> UnsafeCell<T> {
        UnsafeCell(std::cell::UnsafeCell::new(v))
    }
    fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// An engine (any `T`) that whichever thread holds the ownership word may run.
#[derive(Debug)]
pub struct Handoff<T> {
    /// [`FREE`] or [`HELD`].
    owner: AtomicU32,
    /// Threads inside a drive.
    drivers: AtomicU32,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through `try_run`/`run`, by the one thread that moved
// the ownership word from FREE to HELD, until it stores FREE again (the Acquire/Release
// pair orders successive holders). So `&Handoff<T>` shared between threads gives at most
// one of them `&mut T` at a time, which is what `T: Send` allows.
unsafe impl<T: Send> Sync for Handoff<T> {}

/// Gives the ownership word back when the holder is done, also if it panics.
struct Held<'a>(&'a AtomicU32);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire compare-and-swap in `try_run` of the next holder,
        // so everything this holder did to the engine is seen by it.
        self.0.store(FREE, Ordering::Release);
    }
}

impl<T> Handoff<T> {
    /// `value`, owned by nobody, driven by nobody.
    pub fn new(value: T) -> Handoff<T> {
        Handoff {
            owner: AtomicU32::new(FREE),
            drivers: AtomicU32::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// Runs `f` on the value if nobody else does (one compare-and-swap); `None` if another
    /// thread holds it.
    #[inline]
    pub fn try_run<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        // Acquire: pairs with the Release store of FREE in `Held::drop` by the previous
        // holder. Relaxed on failure: nothing is read then.
        if self
            .owner
            .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        let _held = Held(&self.owner);
        // SAFETY: this thread moved the word from FREE to HELD and is the only one that
        // can until `_held` stores FREE, after `f` returns: no other reference to the
        // value exists meanwhile.
        Some(self.value.with_mut(|p| f(unsafe { &mut *p })))
    }

    /// Runs `f` on the value, spinning until the holder (if any) lets go: holders keep it
    /// for one turn, or for the engine thread's run, which ends as soon as someone drives.
    pub fn run<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut f = Some(f);
        loop {
            // `f` is still there until the one successful try takes it.
            if let Some(Some(r)) = self.try_run(|v| f.take().map(|f| f(v))) {
                return r;
            }
            yield_spin();
        }
    }

    /// A thread starts driving: the engine's thread is asked to let go and sleep.
    #[inline]
    pub fn enter(&self) {
        // Relaxed: a request, read by the engine thread between turns; what a driver
        // does to the engine is ordered by the ownership word, not by the count.
        self.drivers.fetch_add(1, Ordering::Relaxed);
    }

    /// A thread stops driving; `true` if it was the last one: it must then hand the
    /// engine back to its thread (see the module docs).
    #[inline]
    pub fn leave(&self) -> bool {
        // Relaxed: the count is the only thing decided here; the hand-back that follows
        // is ordered by the ownership word.
        self.drivers.fetch_sub(1, Ordering::Relaxed) == 1
    }

    /// Threads inside a drive now (a hint: they come and go).
    #[inline]
    pub fn drivers(&self) -> u32 {
        // Relaxed: a hint; see `enter`.
        self.drivers.load(Ordering::Relaxed)
    }

    /// Whether some thread drives (the engine's thread checks it between turns).
    #[inline]
    pub fn driven(&self) -> bool {
        // Relaxed: a hint; see `enter`.
        self.drivers.load(Ordering::Relaxed) != 0
    }
}

/// [`Lease`]: nobody holds it.
const LEASE_OFF: u32 = 0;
/// [`Lease`]: a polling call is starting it (its `start` runs).
const LEASE_TAKING: u32 = 1;
/// [`Lease`]: held, until someone ends it ([`Lease::lapse_if_idle`]).
const LEASE_ON: u32 = 2;
/// [`Lease`]: the one who moved it from on is ending it (its `end` runs).
const LEASE_ENDING: u32 = 3;

/// A drive that outlasts the calls that use it: for the threads of a process that wait
/// for the engine or poll it by calling a progress function in a loop
/// (`hamlyn::Node::progress`, as a UCX loop calls `ucp_worker_progress`). Each call or
/// wait is a drive of its own; what a drive of their whole run would set up (over TCP,
/// taking the fabric's wake-ups from the engine's thread: two system calls) and tear down
/// (the hand-back) is done once, by the first, and undone by whoever ends the lease
/// ([`Lease::lapse_if_idle`]): the engine's thread when it finds that none came for a
/// while, or a caller that must not leave it held (a waiter going to sleep). The lease holds one count of the [`Handoff`] (its `start`
/// enters, its `end` leaves), so the calls' own leaves are never the last while it is
/// on.
///
/// States: off, taking (a caller runs `start`), on, ending (the engine's thread runs
/// `end`). Only the caller that moved it from off to taking starts it, and only the one
/// that moved it from on to ending ends it; each stores the next state (on, off) when
/// done, so starts and ends alternate: the lease's count and what it took are balanced
/// (`loom_a_lease_starts_and_ends_in_turn`).
#[derive(Debug)]
pub struct Lease {
    /// [`LEASE_OFF`], [`LEASE_TAKING`], [`LEASE_ON`] or [`LEASE_ENDING`].
    state: AtomicU32,
    /// Calls counted while on (wrapping): the engine's thread compares it between two
    /// looks.
    calls: AtomicU32,
}

impl Default for Lease {
    fn default() -> Lease {
        Lease::new()
    }
}

impl Lease {
    /// A lease nobody holds.
    pub fn new() -> Lease {
        Lease {
            state: AtomicU32::new(LEASE_OFF),
            calls: AtomicU32::new(0),
        }
    }

    /// A wait or a polling call: counts it if the lease is on, or starts the lease if it
    /// is off (`start` runs here, once per lease). Whether it is on now; `false` while
    /// another caller starts it or someone ends it (this call then goes without, as
    /// a call without a lease).
    /// Two loads and a store once on: no read-modify-write. A count can be lost (two
    /// callers at once; or a caller preempted between its load and its store, whose
    /// store then repeats a value already seen): at worst the lease lapses early, and a
    /// caller still inside holds its own driver count.
    #[inline]
    pub fn hold(&self, start: impl FnOnce()) -> bool {
        // Acquire: pairs with the Release store of LEASE_ON by the starter, so what
        // `start` did is seen by a caller that counts on the lease.
        let state = self.state.load(Ordering::Acquire);
        if state != LEASE_ON {
            // Acquire: pairs with the Release store of LEASE_OFF that ended the previous
            // lease in `lapse_if_idle`, so this start follows that end.
            if state != LEASE_OFF
                || self
                    .state
                    .compare_exchange(
                        LEASE_OFF,
                        LEASE_TAKING,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_err()
            {
                return false;
            }
            start();
            // Release: pairs with the Acquire loads of `hold` and the Acquire
            // compare-and-swap of `lapse_if_idle`: whoever sees the lease on sees it
            // started.
            self.state.store(LEASE_ON, Ordering::Release);
        }
        // Relaxed: a sign of life only, compared by the engine's thread between looks.
        let calls = self.calls.load(Ordering::Relaxed);
        self.calls.store(calls.wrapping_add(1), Ordering::Relaxed);
        true
    }

    /// A look at the lease (the engine thread's, between sleeps; or a caller's that must
    /// end it, with `now`): ends it (`end` runs here) if it is on and no call was counted
    /// since the last look (`seen`, kept by the looker between looks), or at once if
    /// `now`. Whether it ended (`false` also while another ends or starts it).
    pub fn lapse_if_idle(&self, seen: &mut u32, now: bool, end: impl FnOnce()) -> bool {
        // Relaxed: a hint; the compare-and-swap below decides.
        if self.state.load(Ordering::Relaxed) != LEASE_ON {
            return false;
        }
        // Relaxed: see `hold`.
        let calls = self.calls.load(Ordering::Relaxed);
        if calls != *seen && !now {
            *seen = calls;
            return false;
        }
        // Acquire: pairs with the starter's Release store of LEASE_ON (the start
        // happens before this end).
        if self
            .state
            .compare_exchange(LEASE_ON, LEASE_ENDING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        end();
        // Release: pairs with the Acquire compare-and-swap of the next start in `hold`
        // (this end happens before it; a call that comes while `end` runs goes without).
        self.state.store(LEASE_OFF, Ordering::Release);
        true
    }

    /// Whether the lease is on (or being started or ended): the engine's thread must
    /// look again soon, and a push must run its own turn (nothing rings for it). A hint
    /// read without ordering: a push that reads it stale (off while a lease starts)
    /// rings as usual or is seen by the engine thread's next look.
    #[inline]
    pub fn is_held(&self) -> bool {
        // Relaxed: a hint (see above).
        self.state.load(Ordering::Relaxed) != LEASE_OFF
    }
}

#[cfg(not(loom))]
fn yield_spin() {
    std::hint::spin_loop();
}

#[cfg(loom)]
fn yield_spin() {
    loom::thread::yield_now();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn one_holder_at_a_time_and_the_value_is_kept() {
        let h = Handoff::new(0u64);
        assert_eq!(h.try_run(|v| *v += 1), Some(()));
        let nested = h.try_run(|_| h.try_run(|v| *v += 100));
        assert_eq!(nested, Some(None), "held: a second holder is refused");
        assert_eq!(h.run(|v| *v), 1);
    }

    #[test]
    fn many_threads_count_exactly() {
        let h = Arc::new(Handoff::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let h = h.clone();
                std::thread::spawn(move || {
                    let mut done = 0;
                    while done < 10_000 {
                        if h.try_run(|v| *v += 1).is_some() {
                            done += 1;
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(h.run(|v| *v), 40_000);
    }

    #[test]
    fn a_panicking_holder_lets_go() {
        let h = Handoff::new(0u64);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            h.try_run(|_| panic!("engine bug"));
        }));
        assert!(r.is_err());
        assert_eq!(h.try_run(|v| *v), Some(0), "free again after the panic");
    }

    #[test]
    fn a_lease_starts_once_counts_calls_and_lapses_when_they_stop() {
        let lease = Lease::new();
        let mut starts = 0;
        assert!(!lease.is_held());
        assert!(lease.hold(|| starts += 1));
        assert!(lease.hold(|| starts += 1));
        assert_eq!(starts, 1, "started by the first call only");
        assert!(lease.is_held());
        let mut seen = 0;
        let mut ends = 0;
        assert!(
            !lease.lapse_if_idle(&mut seen, false, || ends += 1),
            "calls came since the last look"
        );
        assert_eq!(seen, 2);
        assert!(lease.hold(|| starts += 1));
        assert!(!lease.lapse_if_idle(&mut seen, false, || ends += 1));
        assert!(
            lease.lapse_if_idle(&mut seen, false, || ends += 1),
            "no call since the last look"
        );
        assert_eq!(ends, 1);
        assert!(!lease.is_held());
        assert!(
            !lease.lapse_if_idle(&mut seen, true, || ends += 1),
            "off: nothing to end"
        );
        assert!(lease.hold(|| starts += 1));
        assert_eq!(starts, 2, "a call after the lapse starts it again");
        assert!(
            lease.lapse_if_idle(&mut seen, true, || ends += 1),
            "ended at once"
        );
        assert_eq!(ends, 2);
    }

    #[test]
    fn only_the_last_leave_says_so() {
        let h = Handoff::new(());
        h.enter();
        h.enter();
        assert!(h.driven());
        assert!(!h.leave());
        assert!(h.driven());
        assert!(h.leave());
        assert!(!h.driven());
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;

    use super::*;

    /// A driver and the engine's thread each run the engine once, through the ownership
    /// word (the driver spinning on it): loom reports any overlap of their accesses to
    /// the value as a race, and the count shows no turn was lost.
    #[test]
    fn loom_one_runner_at_a_time() {
        crate::loom_model(|| {
            let h = Arc::new(Handoff::new(0u32));
            let h2 = h.clone();
            let driver = loom::thread::spawn(move || {
                h2.enter();
                while h2.try_run(|v| *v += 1).is_none() {
                    loom::thread::yield_now();
                }
                h2.leave();
            });
            h.run(|v| *v += 1);
            driver.join().expect("driver");
            assert_eq!(h.run(|v| *v), 2);
        });
    }

    /// Three threads each try once at the same time: whoever wins runs alone (loom reports
    /// an overlap as a race), and every win is counted.
    #[test]
    fn loom_three_tries_at_once() {
        crate::loom_model(|| {
            let h = Arc::new(Handoff::new(0u32));
            let wins = Arc::new(AtomicU32::new(0));
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (h, wins) = (h.clone(), wins.clone());
                    loom::thread::spawn(move || {
                        if h.try_run(|v| *v += 1).is_some() {
                            // Relaxed: counted only; read after the joins.
                            wins.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            if h.try_run(|v| *v += 1).is_some() {
                // Relaxed: as above.
                wins.fetch_add(1, Ordering::Relaxed);
            }
            for t in threads {
                t.join().expect("thread");
            }
            let won = wins.load(Ordering::Relaxed);
            assert!(won >= 1, "the first try always wins");
            assert_eq!(h.run(|v| *v), won);
        });
    }

    /// The hand-back: two drivers run a turn each and leave at the same time, while the
    /// engine's thread, which saw them driving, sleeps until woken (a `Notify`, which,
    /// like the engine's doorbell, keeps a wake that comes before the sleep). If no leave
    /// reported itself the last, the engine's thread would sleep forever: loom reports
    /// that as a deadlock.
    #[test]
    fn loom_last_leave_hands_back() {
        crate::loom_model(|| {
            let h = Arc::new(Handoff::new(0u32));
            let doorbell = Arc::new(loom::sync::Notify::new());
            h.enter();
            h.enter();
            let drivers: Vec<_> = (0..2)
                .map(|_| {
                    let (h, doorbell) = (h.clone(), doorbell.clone());
                    loom::thread::spawn(move || {
                        // One turn if the engine is free (another driver may hold it).
                        let _ = h.try_run(|turns| *turns += 1);
                        if h.leave() {
                            doorbell.notify();
                        }
                    })
                })
                .collect();
            // The engine's thread: it let go because someone drives, and sleeps.
            while h.driven() {
                doorbell.wait();
            }
            for d in drivers {
                d.join().expect("driver");
            }
            let turns = h.run(|turns| *turns);
            assert!(turns <= 2);
        });
    }

    /// The engine's thread never spins for a word a driver holds
    /// (`hamlyn_engine::hosted::run_engine_thread`): finding it held while the count is
    /// not zero, it sleeps until rung, and the driver's last leave rings it (here always:
    /// the hand-back rings when work is left, and otherwise the next push does). Whatever
    /// the interleaving — the driver leaving between the failed try and the look at the
    /// count, or after it — the engine's thread gets the engine: a thread asleep for good
    /// is a loom deadlock.
    #[test]
    fn loom_an_engine_thread_that_finds_the_word_held_sleeps_until_rung() {
        crate::loom_model(|| {
            let h = Arc::new(Handoff::new(0u32));
            let doorbell = Arc::new(loom::sync::Notify::new());
            h.enter();
            let driver = {
                let (h, doorbell) = (h.clone(), doorbell.clone());
                loom::thread::spawn(move || {
                    let _ = h.try_run(|turns| *turns += 1);
                    if h.leave() {
                        doorbell.notify();
                    }
                })
            };
            // The engine's thread, as `run_engine_thread`.
            loop {
                if h.try_run(|turns| *turns += 10).is_some() {
                    break;
                }
                if h.driven() {
                    doorbell.wait();
                } else {
                    loom::thread::yield_now();
                }
            }
            driver.join().expect("driver");
            let turns = h.run(|turns| *turns);
            assert!(turns == 10 || turns == 11, "{turns}");
        });
    }

    /// A lease (`Lease`) started by a polling thread's calls and ended by the engine's
    /// thread at the same time, with a second call after: starts and ends alternate,
    /// so whatever the interleaving, the count the lease holds and what it took (here
    /// a counter, the fabric's watch in the engine) are held once while it is on and
    /// not at all once it is off.
    #[test]
    fn loom_a_lease_starts_and_ends_in_turn() {
        crate::loom_model(|| {
            let h = Arc::new(Handoff::new(0u32));
            let lease = Arc::new(Lease::new());
            let taken = Arc::new(AtomicU32::new(0));
            let poller = {
                let (h, lease, taken) = (h.clone(), lease.clone(), taken.clone());
                loom::thread::spawn(move || {
                    for _ in 0..2 {
                        // A call: a drive of one turn inside the lease.
                        h.enter();
                        lease.hold(|| {
                            h.enter();
                            // Relaxed: the starts and ends are ordered by the lease.
                            assert_eq!(taken.fetch_add(1, Ordering::Relaxed), 0);
                        });
                        let _ = h.try_run(|turns| *turns += 1);
                        h.leave();
                    }
                })
            };
            // The engine's thread looks once and ends the lease if it is on.
            let engine = {
                let (h, lease, taken) = (h.clone(), lease.clone(), taken.clone());
                loom::thread::spawn(move || {
                    let mut seen = 0;
                    lease.lapse_if_idle(&mut seen, true, || {
                        // Relaxed: as above.
                        assert_eq!(taken.fetch_sub(1, Ordering::Relaxed), 1);
                        h.leave();
                    });
                })
            };
            engine.join().expect("engine");
            poller.join().expect("poller");
            let held = u32::from(lease.is_held());
            // Relaxed: after the join.
            assert_eq!(taken.load(Ordering::Relaxed), held);
            assert_eq!(h.driven(), held == 1, "the lease's count, and no other");
        });
    }

    /// The engine's thread ends the lease (its look, or a waiter's or nudger's end in
    /// the real code): the lease's count is left, and if that was the last, this thread
    /// serves — a turn, then the doorbell armed with arm-and-recheck, taking what the
    /// recheck finds. Whether it ended the lease.
    fn model_engine_look(
        h: &Handoff<ModelEngine>,
        lease: &Lease,
        doorbell_word: &AtomicU32,
        pushed: &AtomicU32,
    ) -> bool {
        let mut seen = 0;
        let mut last = false;
        let ended = lease.lapse_if_idle(&mut seen, true, || last = h.leave());
        if last {
            h.run(|e| {
                model_turn(e, doorbell_word, pushed);
                if model_hand_back(e, doorbell_word, pushed) {
                    model_turn(e, doorbell_word, pushed);
                }
            });
        }
        ended
    }

    /// A push under a lease (`hamlyn_engine::Driver::nudge`): the waiters' drives hand
    /// nothing back, the doorbell is not armed, so the pusher runs a turn whatever the
    /// doorbell says; finding the engine held (a waiter's turn) it tries once more, and
    /// then ends the lease, so that the last driver's leave hands back (arm-and-recheck)
    /// and rings, and rings itself if the doorbell is armed, as any push that could not
    /// run its turn. Meanwhile a waiter drives a turn (holding the lease too) and the
    /// engine's thread may end the lease at any point. The push is never stranded:
    /// some turn takes it, or the engine's thread is rung, or the lease is still held
    /// (then the engine thread's look ends it and serves, as at the end here). Else the
    /// engine's thread below sleeps forever: a loom deadlock. Preemption bound 2: four
    /// threads at the usual 4 took 18 minutes; at 2 it still finds the interleaving of
    /// a pusher that does not ring when its nudge under the lease fails.
    #[test]
    fn loom_a_push_under_a_lease_is_never_stranded() {
        crate::loom_model_bounded(2, || {
            let h = Arc::new(Handoff::new(ModelEngine {
                taken: 0,
                armed: false,
            }));
            let lease = Arc::new(Lease::new());
            let word = Arc::new(AtomicU32::new(0));
            let pushed = Arc::new(AtomicU32::new(0));
            let doorbell = Arc::new(loom::sync::Notify::new());
            // An earlier wait started the lease; the engine's thread sleeps for it.
            assert!(lease.hold(|| h.enter()));
            let all = || {
                (
                    h.clone(),
                    lease.clone(),
                    word.clone(),
                    pushed.clone(),
                    doorbell.clone(),
                )
            };
            let waiter = {
                let (h, lease, word, pushed, doorbell) = all();
                loom::thread::spawn(move || {
                    h.enter();
                    lease.hold(|| h.enter());
                    let _ = h.try_run(|e| model_turn(e, &word, &pushed));
                    model_leave(&h, &word, &pushed, &doorbell);
                })
            };
            let pusher = {
                let (h, lease, word, pushed, doorbell) = all();
                loom::thread::spawn(move || {
                    // Release: pairs with the Acquire loads of `pushed` in the turns.
                    pushed.store(1, Ordering::Release);
                    if crate::wake::asleep_after_publish(&word) || lease.is_held() {
                        h.enter();
                        let mut ran = h.try_run(|e| model_turn(e, &word, &pushed)).is_some();
                        if !ran && lease.is_held() {
                            ran = h.try_run(|e| model_turn(e, &word, &pushed)).is_some();
                            if !ran {
                                let mut seen = 0;
                                // This thread still drives: the lease's leave is not
                                // the last; its own below hands back.
                                lease.lapse_if_idle(&mut seen, true, || {
                                    h.leave();
                                });
                            }
                        }
                        if !ran {
                            // Held: ring as a push without a nudge does (the nudge
                            // returned false, `after_push` rings). Relaxed: as
                            // `wake_after_publish`.
                            let old =
                                word.fetch_and(!crate::wake::EVENTFD_ARMED, Ordering::Relaxed);
                            if old & crate::wake::EVENTFD_ARMED != 0 {
                                doorbell.notify();
                            }
                        }
                        model_leave(&h, &word, &pushed, &doorbell);
                    }
                })
            };
            let engine = {
                let (h, lease, word, pushed) =
                    (h.clone(), lease.clone(), word.clone(), pushed.clone());
                loom::thread::spawn(move || {
                    model_engine_look(&h, &lease, &word, &pushed);
                })
            };
            waiter.join().expect("waiter");
            pusher.join().expect("pusher");
            engine.join().expect("engine");
            // The engine thread's next look, if a lease is still held (the waiter may
            // have started a new one); then it sleeps until rung unless a turn took the
            // request.
            if lease.is_held() {
                assert!(model_engine_look(&h, &lease, &word, &pushed));
            }
            while h.run(|e| e.taken) == 0 {
                doorbell.wait();
                h.run(|e| model_turn(e, &word, &pushed));
            }
        });
    }

    /// The model engine of `loom_a_push_is_never_stranded`: requests taken so far, and
    /// whether the clients' doorbell is armed (the engine's thread asleep, or about to be).
    struct ModelEngine {
        taken: u32,
        armed: bool,
    }

    /// A turn: clears the doorbell flag if armed (as a driven turn does), takes a pushed
    /// request if there is one.
    fn model_turn(e: &mut ModelEngine, doorbell_word: &AtomicU32, pushed: &AtomicU32) {
        if std::mem::take(&mut e.armed) {
            // Relaxed: as `clear_doorbell_flags`.
            doorbell_word.fetch_and(!crate::wake::EVENTFD_ARMED, Ordering::Relaxed);
        }
        // Acquire: pairs with the pusher's Release store of `pushed`.
        if pushed.load(Ordering::Acquire) > e.taken {
            e.taken += 1;
        }
    }

    /// The hand-back (`Engine::hand_back`): the doorbell re-armed with arm-and-recheck;
    /// whether work is left (then the engine's thread must be rung).
    fn model_hand_back(e: &mut ModelEngine, doorbell_word: &AtomicU32, pushed: &AtomicU32) -> bool {
        if e.armed {
            return false;
        }
        e.armed = true;
        let taken = e.taken;
        // Acquire (inside `ready`): pairs with the pusher's Release store of `pushed`.
        crate::wake::arm_eventfd(doorbell_word, || pushed.load(Ordering::Acquire) > taken)
    }

    /// A driver leaves: the last one hands back, ringing the engine's thread if work is
    /// left or if it cannot get the engine (as `Driving::drop`).
    fn model_leave(
        h: &Handoff<ModelEngine>,
        doorbell_word: &AtomicU32,
        pushed: &AtomicU32,
        doorbell: &loom::sync::Notify,
    ) {
        if h.leave()
            && h.try_run(|e| model_hand_back(e, doorbell_word, pushed))
                .unwrap_or(true)
        {
            doorbell.notify();
        }
    }

    /// Progress by the sending thread (`Driver::nudge`): a thread pushes a request and,
    /// finding the doorbell armed, runs a turn itself instead of ringing (or rings after
    /// all if another thread holds the engine: that one may be a hand-back that armed
    /// the doorbell and looks no more), while a waiting
    /// thread ends its drive (its hand-back re-arms the doorbell) and the engine's thread
    /// sleeps for them. The request is never stranded: either some turn takes it, or the
    /// engine's thread is rung and takes it. If neither happened, the engine's thread
    /// below would sleep forever: loom reports a deadlock.
    #[test]
    fn loom_a_push_is_never_stranded() {
        crate::loom_model(|| {
            let h = Arc::new(Handoff::new(ModelEngine {
                taken: 0,
                armed: false,
            }));
            let word = Arc::new(AtomicU32::new(0));
            let pushed = Arc::new(AtomicU32::new(0));
            let doorbell = Arc::new(loom::sync::Notify::new());
            // The waiting thread drives; the engine's thread has let go for it.
            h.enter();
            let driver = {
                let (h, word, pushed, doorbell) =
                    (h.clone(), word.clone(), pushed.clone(), doorbell.clone());
                loom::thread::spawn(move || {
                    let _ = h.try_run(|e| model_turn(e, &word, &pushed));
                    model_leave(&h, &word, &pushed, &doorbell);
                })
            };
            let pusher = {
                let (h, word, pushed, doorbell) =
                    (h.clone(), word.clone(), pushed.clone(), doorbell.clone());
                loom::thread::spawn(move || {
                    // Release: pairs with the Acquire loads of `pushed` in the turns.
                    pushed.store(1, Ordering::Release);
                    if crate::wake::asleep_after_publish(&word) {
                        h.enter();
                        if h.try_run(|e| model_turn(e, &word, &pushed)).is_none() {
                            // Held: ring as a push without a nudge does
                            // (`wake_after_publish`: clear the flag, the one who cleared
                            // it pokes). Relaxed: as there.
                            let old =
                                word.fetch_and(!crate::wake::EVENTFD_ARMED, Ordering::Relaxed);
                            if old & crate::wake::EVENTFD_ARMED != 0 {
                                doorbell.notify();
                            }
                        }
                        model_leave(&h, &word, &pushed, &doorbell);
                    }
                })
            };
            driver.join().expect("driver");
            pusher.join().expect("pusher");
            // The engine's thread: asleep until rung, unless a turn took the request.
            while h.run(|e| e.taken) == 0 {
                doorbell.wait();
                h.run(|e| model_turn(e, &word, &pushed));
            }
        });
    }
}
