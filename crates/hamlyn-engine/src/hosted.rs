//! Progress by the waiting thread (issue 14): an engine embedded in a process is run by
//! whichever thread of that process waits for it. A thread that waits for the engine
//! (the library's notification queue, send handle and terminus waits) runs the engine's
//! turns itself instead of spinning on a word and waking the engine's thread; the
//! engine's thread sleeps while someone drives and takes over when nobody does.
//!
//! Who runs a turn is decided by the ownership word of a [`Handoff`]
//! (`hamlyn_shm::drive`, loom-checked): no lock, no system call on the way. The code that
//! runs is the trusted engine, in the process that already hosts it: protection is
//! unchanged. A daemon (`run_daemon`) is not hosted by any application and keeps its
//! own thread.
//!
//! Embedded engines are found by their control socket: [`Driver::for_socket`] looks the
//! path up among the engines this process started ([`crate::EngineHandle::start`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use hamlyn_shm::drive::{Handoff, Lease};
use hamlyn_shm::sync::{AtomicU32, AtomicU64, Ordering};
use hamlyn_shm::wake::EventFd;

use crate::error::EngineError;
use crate::event_loop::{Engine, Io, Step, DRIVER_LOOK_MOST, DRIVER_STALL};

/// The environment variable that turns progress by the waiting thread off for every
/// engine this process starts (`0`); [`crate::EngineConfig::driven`] defaults from it.
pub const DRIVE_ENV: &str = "HAMLYN_DRIVE";

/// Whether engines are driven by waiting threads unless said otherwise: yes, unless
/// [`DRIVE_ENV`] is `0`.
pub(crate) fn driven_by_default() -> bool {
    std::env::var_os(DRIVE_ENV).is_none_or(|v| v != "0")
}

/// An engine, the word deciding who runs it, and its doorbell: the last driver to leave
/// rings it to hand the engine back to its thread.
#[derive(Debug)]
pub(crate) struct Hosted {
    handoff: Handoff<Engine>,
    doorbell: EventFd,
    /// Consecutive turns without work after which a waiting thread stops driving
    /// ([`Driving::idle_turns_before_leave`]).
    idle_limit: u32,
    /// Clients of the engine in other processes (`Driving::stays_when_idle`).
    foreign: Arc<AtomicU32>,
    /// The fabric's wake-ups, which waiting threads take from the engine's thread while
    /// they poll the fabric themselves (`None`: no fabric).
    fabric: Option<FabricWatch>,
    /// The drive shared by the waits and polling calls of this process's threads over
    /// a fabric ([`Driver::drive_waiting`], [`Driver::progress`]), which outlasts each:
    /// it holds a driver count and the fabric's wake-ups until the engine's thread finds
    /// that none came for a while (`Hosted::lapse_lease`), or a waiter goes to sleep
    /// ([`Driving::end_lease`]). Shared with the [`Driver`]s, whose pushes read it.
    lease: Arc<Lease>,
    /// Leases started and ended so far ([`DriveStats::leases`]).
    lease_starts: AtomicU64,
    lease_ends: AtomicU64,
    /// The CPU the engine's thread ran on when it last tried to take the engine
    /// ([`NO_CPU`]: not yet): a waiting thread that finds the engine held and shares
    /// that CPU gives it up ([`HeldByEngineThread`]).
    thread_cpu: AtomicU32,
    /// Times a waiting thread gave its CPU up at an engine held by the engine's thread
    /// on that CPU ([`DriveStats::yields_to_engine_thread`]).
    yields_to_thread: AtomicU64,
}

/// [`Hosted::thread_cpu`] before the engine's thread first ran.
const NO_CPU: u32 = u32::MAX;

/// Who is woken when data comes from another node: the engine's thread (its poller
/// watches the fabric's descriptor), or nobody while waiting threads drive — they poll
/// the fabric in their turns, and a wake of the engine's thread for each arrival was a
/// context switch per message that found nothing to do (the waiter had read it) and took
/// a core from the two processes on a two-core machine.
///
/// The first waiting thread to come turns the descriptor's readiness off in the engine
/// thread's poller; the last to leave turns it on again before it hands the engine
/// back, so an arrival after that wakes the engine's thread (turning on the interest in
/// a descriptor that is readable already reports it at once: nothing that came
/// meanwhile is missed). Each thread turns off before it turns on, and the count's
/// read-modify-writes order the last turn-on after every turn-off, so the descriptor is
/// never left unwatched with nobody driving.
///
/// Off is an interest in priority data only (`EPOLLPRI`), which the fabric's
/// descriptor (its own poller, or an eventfd) never reports: the registration stays, and
/// each switch is one `EPOLL_CTL_MOD`. Removing and adding the descriptor instead cost
/// 1.5 µs a drive on the development VM against 0.65 µs, the turn-on on the path from an
/// arrival to its reply (2026-11-25).
#[derive(Debug)]
struct FabricWatch {
    /// The engine thread's poller.
    registry: mio::Registry,
    /// The fabric's descriptor there (owned by the engine's fabric, which lives as long
    /// as the [`Hosted`] that holds this).
    fd: std::os::fd::RawFd,
    /// Waiting threads that took the wake-ups.
    takers: AtomicU32,
}

impl FabricWatch {
    /// A waiting thread starts driving: the first takes the wake-ups.
    fn take(&self) {
        // AcqRel: orders this thread's turn-off after the previous last taker's turn-on
        // (its Release fetch_sub, which this pairs with) in the count's order.
        if self.takers.fetch_add(1, Ordering::AcqRel) == 0 {
            // A late turn-on of the previous last taker may still follow: the engine
            // thread is then woken by arrivals while this one drives, a spare wake,
            // never a lost one.
            self.watch(mio::Interest::PRIORITY);
        }
    }

    /// A waiting thread stops driving: the last gives the wake-ups back.
    fn give_back(&self) {
        // AcqRel: pairs with the fetch_add of `take` (see there).
        if self.takers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.watch(mio::Interest::READABLE);
        }
    }

    /// The engine thread's poller watches the descriptor for `interest`.
    fn watch(&self, interest: mio::Interest) {
        let r = self.registry.reregister(
            &mut mio::unix::SourceFd(&self.fd),
            crate::event_loop::FABRIC,
            interest,
        );
        if let Err(e) = r {
            // Only if the descriptor left the poller, which nothing but the fabric's
            // end does.
            tracing::warn!(error = %e, "cannot change the watch of the fabric");
        }
    }
}

impl Hosted {
    /// `engine`, with a duplicate of its doorbell.
    pub(crate) fn new(engine: Engine) -> Result<Hosted, EngineError> {
        let fd = rustix::io::fcntl_dupfd_cloexec(engine.doorbell(), 0)
            .map_err(|e| EngineError::io("dup", e))?;
        // With a fabric, what a waiter waits for may be on its way from another node,
        // and only a turn that polls the fabric sees it come: the waiter drives for its
        // whole budget (`drive_until`'s turns). Leaving after a few idle turns handed
        // every arrival to the engine's thread, asleep in its poller: a wake-up per
        // message, 12-50 µs one-way over loopback against 5.5 µs when the waiters
        // drive (docs/PERFORMANCE.md, "Over TCP, the waiting threads poll the sockets").
        let idle_limit = if engine.has_fabric() {
            u32::MAX
        } else {
            IDLE_TURNS_BEFORE_LEAVE
        };
        let fabric = engine.fabric_watch().map(|(registry, fd)| FabricWatch {
            registry,
            fd,
            takers: AtomicU32::new(0),
        });
        let foreign = engine.foreign_clients();
        Ok(Hosted {
            handoff: Handoff::new(engine),
            doorbell: EventFd::from_fd(fd),
            idle_limit,
            foreign,
            fabric,
            lease: Arc::new(Lease::new()),
            lease_starts: AtomicU64::new(0),
            lease_ends: AtomicU64::new(0),
            thread_cpu: AtomicU32::new(NO_CPU),
            yields_to_thread: AtomicU64::new(0),
        })
    }

    /// A wait or a polling call holds the lease, starting it if it is off: with a
    /// fabric, and no client in another process (whose pushes only the engine's thread
    /// takes in promptly: it spins for them, and a lease would keep it asleep). Whether
    /// it is held (`false`: the caller drives on its own, with its hand-back).
    #[inline]
    fn hold_lease(&self) -> bool {
        let Some(fabric) = &self.fabric else {
            return false;
        };
        // Relaxed: a hint; a client that attached a moment ago ends the lease at the
        // engine thread's next look (`lapse_lease`).
        if self.foreign.load(Ordering::Relaxed) > 0 {
            return false;
        }
        self.lease.hold(|| {
            self.handoff.enter();
            fabric.take();
            // The engine's thread may be in an idle sleep as long as the fabric's next
            // timer (a heartbeat, tens of milliseconds) or `max_sleep`, which no lease
            // shortens once begun: woken now, it sleeps at most `LEASE_LOOK_EVERY` from
            // here on, so the lease's end stays within two looks of the last call. One
            // eventfd write per lease; fails only if the doorbell is full, when it is
            // readable already.
            let _ = self.doorbell.notify();
            // Relaxed: a statistic.
            self.lease_starts.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// The engine's thread looks at the lease after a sleep: ends it if no wait or
    /// polling call came since its last look (`seen`) and none drives now, or at once
    /// if a client of another process attached; it then serves again itself (its own
    /// loop takes over: no ring needed).
    fn lapse_lease(&self, seen: &mut u32) {
        // Relaxed: as in `hold_lease`.
        let foreign = self.foreign.load(Ordering::Relaxed) > 0;
        // A waiter inside a long drive counts no call meanwhile: the lease's own count
        // is the only one when nobody drives.
        if !foreign && self.handoff.drivers() > 1 {
            return;
        }
        self.lease
            .lapse_if_idle(seen, foreign, || self.end_lease_now());
    }

    /// What ending the lease undoes (its `end`): the fabric's wake-ups go back to the
    /// engine's thread and the lease's driver count is left. The caller sees to the
    /// hand-back if that leave was the last: the engine's thread serves next anyway, a
    /// waiter ([`Driving::end_lease`]) still holds its own count.
    fn end_lease_now(&self) {
        if let Some(fabric) = &self.fabric {
            fabric.give_back();
        }
        let _ = self.handoff.leave();
        // Relaxed: a statistic.
        self.lease_ends.fetch_add(1, Ordering::Relaxed);
    }

    /// The engine's thread notes the CPU it runs on before it takes the engine (one
    /// `getcpu`, answered by the vDSO: no system call; a store only when it moved).
    fn note_thread_cpu(&self) {
        let cpu = u32::try_from(rustix::thread::sched_getcpu()).unwrap_or(NO_CPU);
        // Relaxed: a hint for waiters (`HeldByEngineThread`); a stale one costs a
        // pause or a yield, never a turn.
        if self.thread_cpu.load(Ordering::Relaxed) != cpu {
            self.thread_cpu.store(cpu, Ordering::Relaxed);
        }
    }

    /// Whether the engine's thread last took the engine on the CPU this thread runs on.
    fn engine_thread_shares_cpu(&self) -> bool {
        // Relaxed: a hint (`note_thread_cpu`).
        let thread = self.thread_cpu.load(Ordering::Relaxed);
        thread != NO_CPU && u32::try_from(rustix::thread::sched_getcpu()).ok() == Some(thread)
    }

    /// How long the engine's thread may sleep for `want`: at most [`LEASE_LOOK_MOST`]
    /// while the lease is held, so that it ends within two looks of the last call.
    fn sleep_for(&self, want: std::time::Duration) -> std::time::Duration {
        if self.lease.is_held() {
            want.min(LEASE_LOOK_MOST)
        } else {
            want
        }
    }
}

/// The longest the engine's thread goes between two looks at a held lease
/// ([`Hosted::lapse_lease`]). The lease holds a driver's count, so the thread sleeps as
/// for any driver: [`DRIVER_STALL`] at first, this once a look found the drivers
/// running turns (`Engine::driver_look`). A lease ends between
/// one and two looks after the last wait or polling call (its start rings the engine's
/// thread out of a longer idle sleep, `Hosted::hold_lease`). Until then the fabric's
/// arrivals wait for a call or for that look (the first look that finds no driven turn
/// since the one before serves them, as for a stalled driver): up to twice this for the
/// first one after the process's threads stop calling without going to sleep in a wait
/// (a thread that computes between two waits; a wait that sleeps ends the lease first).
/// It was one look a millisecond until 2026-12-07 (up to 2 ms for that arrival), and
/// those looks were the TCP ping-pong's p99 (`DRIVER_LOOK_MOST`).
const LEASE_LOOK_MOST: std::time::Duration = DRIVER_LOOK_MOST;

/// The engines this process runs and lets waiting threads drive, by control socket. Only
/// touched when an engine starts and when a client connects (never on a fast path).
static HOSTED: Mutex<Vec<HostedEntry>> = Mutex::new(Vec::new());

/// An engine this process runs: its control socket, the engine (not kept alive by the
/// list), and its lease if it has a fabric (for [`Driver::leased`], taken without
/// upgrading the `Weak`: an upgrade could hold the last reference and drop the engine,
/// which removes its socket file, after its handle's drop returned).
type HostedEntry = (PathBuf, Weak<Hosted>, Option<Arc<Lease>>);

/// Lists `hosted` as drivable at `socket` (forgetting engines that are gone).
pub(crate) fn register(socket: &Path, hosted: &Arc<Hosted>) {
    let mut list = HOSTED.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|(_, w, _)| w.strong_count() > 0);
    let lease = hosted.fabric.is_some().then(|| hosted.lease.clone());
    list.push((socket.to_path_buf(), Arc::downgrade(hosted), lease));
}

/// The engine thread's life: serve while nobody drives; sleep in the poller (without
/// holding the engine) when idle or while someone drives; until the stop flag is set.
/// A daemon's thread lives the same way, with nobody ever driving.
pub(crate) fn run_engine_thread(host: &Hosted, io: &mut Io) -> Result<(), EngineError> {
    let hosted = &host.handoff;
    // The lease's count of calls at this thread's last look (`Hosted::lapse_lease`).
    let mut lease_seen = 0;
    // Whether the engine spins for its clients (one of them runs in another process and
    // cannot drive it), as of the last time this thread held it.
    let mut spins = true;
    // A thread drives: it holds the word for a turn at a time and takes it again at
    // once, and hands the engine back when it leaves (ringing this thread if work is
    // left). Unless the engine spins for a client in another process, this thread then
    // waits in its poller rather than spin for a gap between the driver's turns: on two
    // cores the two engine threads' spins for the word took a quarter of the machine in
    // a TCP stream (2026-11-25). An engine that spins anyway keeps spinning for the
    // word, so that it serves the moment the driver leaves (a foreign client's next
    // push then finds it awake). Sleeping there too (tried 2026-11-25) left a mediated
    // ping-pong as fast but cost the Rats stream a third of its bandwidth in half the
    // runs (quick runs 0.63-0.98x raw sends, 0.97-1.02 spinning).
    let sleeps_for_driver = |spins: bool| hosted.driven() && !spins;
    let mut held = HeldWordWait::default();
    // How long the engine sleeps for its drivers now (`Engine::driver_look`): its sleeps
    // between tries at a word a driver holds are as long.
    let mut look = DRIVER_STALL;
    loop {
        host.note_thread_cpu();
        // Holds the ownership word while it serves: a driver finds it held until the
        // engine thread sees the driver count on its next turn and lets go.
        let served = hosted.try_run(|engine| {
            let step = engine.serve(io, &|| hosted.driven());
            spins = engine.spins_for_clients();
            look = engine.driver_look();
            step
        });
        let step = match served {
            Some(step) => {
                held.had();
                step?
            }
            None if sleeps_for_driver(spins) => Step::Sleep(look),
            // A hand-back's last turns (the count is zero), or a driver while the
            // engine spins for a foreign client: over in a moment (`HeldWordWait`).
            None => {
                held.held();
                continue;
            }
        };
        match step {
            Step::Stop => return Ok(()),
            // Between two idle turns the engine is free: a waiting thread takes it at once,
            // also while this thread is preempted.
            Step::Spin => std::hint::spin_loop(),
            Step::Sleep(timeout) => {
                io.wait(host.sleep_for(timeout))?;
                host.lapse_lease(&mut lease_seen);
                // What woke it is handled before the next sleep. While a thread drives,
                // it waits in the poller again between tries (what it reports is kept
                // with what is pending): a driver that leaves with work rings the
                // doorbell, and the wait ends at once.
                host.note_thread_cpu();
                while hosted.try_run(|engine| engine.after_sleep(io)).is_none() {
                    if sleeps_for_driver(spins) {
                        io.wait(look)?;
                        host.lapse_lease(&mut lease_seen);
                    } else {
                        held.held();
                    }
                }
                held.had();
            }
        }
    }
}

/// How the engine's thread waits for the ownership word when it does not sleep for the
/// holder: a thread that holds it without counting as a driver (a driver's hand-back,
/// which runs up to `HAND_BACK_TURNS` turns after the count went to zero), or any holder
/// while the engine spins for a client in another process. A moment, but the holder may
/// be the thread this one took the core from. A few pauses, then the core is given up on
/// every try (`sched_yield`, which returns at once when nothing else waits for the core),
/// so that such a holder runs and lets go. Spinning alone, on two cores with three
/// runnable threads (the engine's, a stream's sender and receiver), the engine thread
/// spent half its samples on the word of a preempted hand-back: raw 64 KiB sends through
/// one engine ran at 9-18 GB/s, 15-26 with the yield (2026-11-25).
#[derive(Debug, Default)]
struct HeldWordWait {
    /// Tries that found the word held since the engine was last had.
    tries: u32,
}

/// Pauses of [`HeldWordWait`] before it yields the core on every try: a hand-back that
/// runs is done within a few hundred nanoseconds of them only if it is short; one that is
/// not running is not helped by more.
const PAUSES_BEFORE_YIELD: u32 = 32;

impl HeldWordWait {
    /// The word was found held: pause, or give the core up.
    fn held(&mut self) {
        self.tries = self.tries.saturating_add(1);
        if self.tries > PAUSES_BEFORE_YIELD {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }

    /// The engine was had (or the thread slept): the next wait starts with pauses.
    fn had(&mut self) {
        self.tries = 0;
    }
}

/// How a waiting thread waits for an engine another thread holds: pauses (the holder,
/// running on another CPU, lets go within a turn), and after [`PAUSES_BEFORE_YIELD`] of
/// them, if the engine's thread last took the engine on this thread's own CPU, gives the
/// CPU up on every try. The holder may be that thread, preempted in the middle of a
/// turn by this one (a process and its embedded engine bound to one core, as an MPI
/// rank is): no number of pauses lets it go, and a waiter that only paused spent its
/// whole budget on the word, slept, and woke the engine's thread for the next message
/// (an 8-byte mediated stream to a process bound with its engine to one core of two:
/// 1.4 M/s, 3.3-3.5 with the yield, 2026-12-07). A holder on another CPU (the engine's
/// thread there, or another waiting thread) is never yielded to: a yield then cost a
/// waiter whose CPU another spinning process shares its turn (the same stream's
/// latency with the engine's thread alone on the other core rose 5.9 -> 6.9 µs).
#[derive(Debug, Default)]
struct HeldByEngineThread {
    /// Tries that found the engine held since the wait began.
    tries: u32,
}

impl HeldByEngineThread {
    /// The engine was found held (another try follows).
    fn held(&mut self, hosted: &Hosted) {
        self.tries = self.tries.saturating_add(1);
        if self.tries > PAUSES_BEFORE_YIELD && hosted.engine_thread_shares_cpu() {
            // Relaxed: a statistic.
            hosted.yields_to_thread.fetch_add(1, Ordering::Relaxed);
            std::thread::yield_now();
        } else {
            hamlyn_shm::sync::spin_loop();
        }
    }
}

/// A way for a thread of this process to run the turns of an engine the process hosts.
/// Holds no reference that keeps the engine alive: once the engine stops, drives do
/// nothing.
#[derive(Clone, Debug)]
pub struct Driver {
    hosted: Weak<Hosted>,
    /// The hosted engine's lease (read by pushes, [`Driver::leased`]): kept apart from
    /// the `Weak`, whose upgrade is a read-modify-write. `None` without a fabric, where
    /// there is never a lease.
    lease: Option<Arc<Lease>>,
}

impl Driver {
    /// The engine this process runs at control socket `socket`, if there is one and it
    /// lets waiting threads drive ([`crate::EngineConfig::driven`]).
    pub fn for_socket(socket: &Path) -> Option<Driver> {
        let list = HOSTED.lock().unwrap_or_else(|e| e.into_inner());
        list.iter()
            .find(|(p, w, _)| p == socket && w.strong_count() > 0)
            .map(|(_, w, lease)| Driver {
                hosted: w.clone(),
                lease: lease.clone(),
            })
    }

    /// Whether the threads of this process hold the engine's lease (their waits and
    /// polling calls over a fabric share one drive, `Driver::drive_waiting`): the
    /// engine's thread then sleeps, and a push must run the turn that takes it in
    /// itself ([`Driver::nudge`]) — nothing rings for it. One load.
    #[inline]
    pub fn leased(&self) -> bool {
        self.lease.as_ref().is_some_and(|l| l.is_held())
    }

    /// What progress by the waiting thread did so far (`None` once the engine is gone).
    /// Asking is itself a short drive (the engine's thread lets go for it, once): for
    /// tests and tools, not for a fast path.
    pub fn stats(&self) -> Option<DriveStats> {
        let driving = self.drive()?;
        let hosted = &driving.hosted;
        let mut stats = hosted.handoff.run(|engine| engine.drive_stats());
        // Relaxed: statistics.
        stats.leases = hosted.lease_starts.load(Ordering::Relaxed);
        stats.leases_ended = hosted.lease_ends.load(Ordering::Relaxed);
        stats.yields_to_engine_thread = hosted.yields_to_thread.load(Ordering::Relaxed);
        stats.fabric_takers = hosted
            .fabric
            .as_ref()
            .map_or(0, |f| f.takers.load(Ordering::Relaxed));
        Some(stats)
    }

    /// Starts a drive: until the [`Driving`] is dropped, the engine's thread lets go and
    /// sleeps, and [`Driving::turn`] runs turns. `None` if the engine is gone.
    pub fn drive(&self) -> Option<Driving> {
        let hosted = self.hosted.upgrade()?;
        hosted.handoff.enter();
        Some(Driving {
            hosted,
            took_fabric: false,
            leased_wait: false,
            awaits_arrival: false,
            held: HeldByEngineThread::default(),
        })
    }

    /// A drive by a thread that waits and will poll for a while (a notification queue's
    /// or a send handle's wait): as [`Driver::drive`], and while it lasts the engine's
    /// thread is not woken by data from other nodes — the waiting threads' turns poll
    /// the fabric ([`FabricWatch`]). With a fabric, the waits share one drive that
    /// outlasts each (the lease, [`Lease`]): the first takes the fabric's wake-ups,
    /// later ones only count themselves, and a wait's end hands nothing back; the
    /// engine's thread ends the lease a millisecond or two after the last wait, and a
    /// wait that goes to sleep ends it first ([`Driving::end_lease`]). Taking and giving
    /// back the wake-ups per wait (two system calls, and a hand-back that polls the
    /// fabric's poller) cost about 1 µs of a TCP one-way (2026-11-25). With a client of
    /// another process attached there is no lease: each wait takes and gives back.
    pub fn drive_waiting(&self) -> Option<Driving> {
        let mut driving = self.drive()?;
        if driving.hosted.hold_lease() {
            driving.leased_wait = true;
            return Some(driving);
        }
        if let Some(f) = &driving.hosted.fabric {
            f.take();
            driving.took_fabric = true;
        }
        Some(driving)
    }

    /// Progress by the sending thread: a thread of this process pushed a request and
    /// found the engine asleep (the port's doorbell armed). Instead of waking the
    /// engine's thread (a system call, and a third thread to schedule), it runs one
    /// turn itself, which takes the request in, and hands back as any driver does
    /// (the doorbells re-armed, no system call, unless work is left: then the engine's
    /// thread is rung after all). `false` if it could not: the engine is gone, or
    /// another thread holds it — perhaps a driver's hand-back that armed the doorbells
    /// and will not look again — so the caller rings as usual (checked by the loom model
    /// `loom_a_push_is_never_stranded` in `hamlyn_shm::drive`). `cold`: the port pushed
    /// to was cold (`hamlyn_shm::ready::cold_after_fence`): the engine reads its ready
    /// words only now and then, so this turn reads every port's.
    ///
    /// Under a lease ([`Driver::leased`]) the push is nudged even though the doorbell is
    /// not armed (the engine's thread sleeps for the lease and nothing rings), and a
    /// held engine is tried again a bounded number of times (holders hold it for a
    /// turn); if it stays held — its holder descheduled mid-turn — the lease ends here,
    /// so the last driver's hand-back (this one's, or the holder's when it leaves) sees
    /// the push and rings the engine's thread as without a lease.
    ///
    /// Kept out of line (as it was across the crate boundary before the release profile
    /// optimised at link time): `bench/instructions.sh` counts the hand-off as this
    /// function less the turns it runs.
    #[inline(never)]
    pub fn nudge(&self, cold: bool) -> bool {
        let Some(mut driving) = self.drive() else {
            return false;
        };
        if driving.try_run(|e| e.sender_turn(cold)).is_some() {
            return true;
        }
        self.leased() && Driver::nudge_held_under_lease(&mut driving, cold)
    }

    /// [`Driver::nudge`] found the engine held under a lease: tries again a bounded
    /// number of times, then ends the lease (see there). Out of line: rare, and kept
    /// off the nudge's own code.
    #[cold]
    #[inline(never)]
    fn nudge_held_under_lease(driving: &mut Driving, cold: bool) -> bool {
        if driving.run_within_tries(|e| e.sender_turn(cold)).is_some() {
            return true;
        }
        driving.end_lease();
        false
    }

    /// One turn for a thread that polls in a loop (`hamlyn::Node::progress`, as a UCX
    /// loop calls `ucp_worker_progress`): whether it found work; `false` if the engine
    /// is gone or another thread runs it at that moment. With a fabric, the calls share
    /// one drive that outlasts them (the hosted engine's [`Lease`]): the first takes the
    /// fabric's wake-ups from the engine's thread (which then sleeps: the calls poll the
    /// fabric), and the engine's thread gives them back when it finds that no call came
    /// for a millisecond or two. A call of a drive of its own instead handed the engine
    /// back every time (a poll of the fabric's poller, a system call), and every arrival
    /// woke the engine's thread for a message the loop itself read: a write polled on
    /// its data over TCP took 1.2-1.9× a tagged write (2026-11-25).
    #[inline]
    pub fn progress(&self) -> bool {
        let Some(mut driving) = self.drive() else {
            return false;
        };
        let _ = driving.hosted.hold_lease();
        // A polling loop waits for data that another node's write brings.
        driving.awaiting_arrival();
        driving.try_turn().unwrap_or(false)
    }
}

/// What a waiting thread's try at the engine did ([`Driving::try_step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drove {
    /// A turn ran and found work.
    Work,
    /// A turn ran and found nothing.
    Idle,
    /// No turn: a look found the engine quiet (nothing announced, queued or owed, no
    /// fabric). A turn would have served nothing announced either; what only a turn
    /// looks at (the sweep of termini whose clients set no hints, the cold ports'
    /// backstop) waits for the turn that comes after a few glances.
    Glance,
}

/// Tries of [`Driving::turn`] at a held engine before it gives up: a few engine turns'
/// worth of pauses.
const TURN_TRIES: u32 = 256;

/// Consecutive turns without work after which a waiting thread stops driving an engine
/// without a fabric: nothing is in flight, so what it waits for needs another thread
/// (which drives its own push, [`Driver::nudge`]). Staying would only take a core (and
/// the ownership word) from that thread: with two threads of the host waiting for each
/// other, each drove for the other's message while the one that had to wake waited for
/// a core (issue 14's RPC regression).
const IDLE_TURNS_BEFORE_LEAVE: u32 = 2;

/// [`Driving::turn_budget`]'s factor for an engine with a fabric.
const FABRIC_BUDGET_FACTOR: u32 = 10;

/// What progress by the waiting thread did on one engine ([`Driver::stats`]).
/// Non-exhaustive: counters are added as the ways of driving grow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DriveStats {
    /// Engine turns run by waiting threads.
    pub turns_by_waiters: u64,
    /// Tries of waiting threads that found the engine quiet and ran no turn
    /// ([`Drove::Glance`]).
    pub glances_by_waiters: u64,
    /// Times the engine's thread let go (and slept) because a thread drove.
    pub engine_thread_let_go: u64,
    /// Times the engine's thread served again after waiting threads ran turns (it took
    /// over when they stopped).
    pub engine_thread_resumed: u64,
    /// Times drivers ran no turn for a millisecond while the engine's thread slept for
    /// them, and it served anyway. This includes the end of each lease for lack of calls
    /// ([`DriveStats::leases_ended`]): the engine's thread finds no driven turn since its
    /// last look then too.
    pub stalled_drivers: u64,
    /// Engine turns run by sending threads that found the engine asleep
    /// ([`Driver::nudge`]), instead of waking its thread.
    pub turns_by_senders: u64,
    /// Drives shared by waits and polling calls started so far (leases:
    /// [`Driver::drive_waiting`], [`Driver::progress`]; only with a fabric).
    pub leases: u64,
    /// Of those, the ones that ended (no call came for a while, a client of another
    /// process attached, or a waiter went to sleep).
    pub leases_ended: u64,
    /// Drives holding the fabric's wake-ups now (waiting threads and a lease):
    /// while not zero, data from other nodes does not wake the engine's thread.
    pub fabric_takers: u32,
    /// Times a waiting thread found the engine held by the engine's thread on its own
    /// CPU (preempted by the waiter, most likely) and gave that CPU up for it.
    pub yields_to_engine_thread: u64,
}

/// A drive in progress (see [`Driver::drive`]); dropping it hands the engine back to its
/// thread, which takes over at once.
#[derive(Debug)]
pub struct Driving {
    hosted: Arc<Hosted>,
    /// Took the fabric's wake-ups ([`Driver::drive_waiting`]): gives them back first
    /// when it ends.
    took_fabric: bool,
    /// A wait under the lease ([`Driver::drive_waiting`]): writes what the fabric holds
    /// when it ends, which no hand-back does under a lease.
    leased_wait: bool,
    /// The drive waits for what other nodes send ([`Driving::awaiting_arrival`]).
    awaits_arrival: bool,
    /// Its consecutive tries that found the engine held ([`Driving::wait_held`]).
    held: HeldByEngineThread,
}

impl Driving {
    /// This drive waits for something other nodes may send (a notification, data a
    /// remote write puts in memory), not for the engine's own work (room in a ring, a
    /// send's completion): its turns' looks at the fabric read its connections directly
    /// (`hamlyn_fabric::Fabric::poll_spinning`), so that the system call that finds a
    /// packet is the read itself, not a look at the fabric's poller followed by the
    /// read (TCP 8 B one-way 5.3 -> 4.6 µs, 2026-12-07). A drive for the engine's own
    /// work keeps asking the poller: a thread waiting for room in a stream it sends
    /// would otherwise read every connection on every turn for nothing (an 8-byte
    /// message stream fell from 1.2 to 0.3 M/s).
    pub fn awaiting_arrival(&mut self) {
        self.awaits_arrival = true;
    }

    /// Runs one turn of the engine; whether it found work. If another thread holds the
    /// engine, tries again a bounded number of times (the engine's thread lets go on its
    /// next turn; another driver holds it for one turn), then gives up (`false`).
    #[inline]
    pub fn turn(&mut self) -> bool {
        let arrival = self.awaits_arrival;
        self.run_within_tries(|engine| engine.driven_turn(arrival))
            .unwrap_or(false)
    }

    /// Runs `f` on the engine, trying a held engine again up to [`TURN_TRIES`] times
    /// with a pause between (holders hold it for a turn); `None` if it stayed held.
    fn run_within_tries<R>(&mut self, mut f: impl FnMut(&mut Engine) -> R) -> Option<R> {
        let mut held = HeldByEngineThread::default();
        for _ in 0..TURN_TRIES {
            if let Some(r) = self.hosted.handoff.try_run(&mut f) {
                return Some(r);
            }
            held.held(&self.hosted);
        }
        None
    }

    /// [`Driving::try_turn`], saying whether a turn ran or, the engine being quiet, only a
    /// glance at whether one would find anything ([`Drove::Glance`], a fraction of a
    /// turn's cost): a waiting thread that counts its drive in turns counts a glance as
    /// less.
    #[inline]
    pub fn try_step(&mut self) -> Option<Drove> {
        let arrival = self.awaits_arrival;
        let step = self
            .hosted
            .handoff
            .try_run(|engine| engine.driven_step(arrival));
        if step.is_some() {
            self.held.tries = 0;
        }
        step
    }

    /// Waits a moment after a try ([`Driving::try_step`]) found the engine held, before
    /// the next: a pause, or — the engine's thread having taken it on this thread's CPU,
    /// and the engine held through [`PAUSES_BEFORE_YIELD`] tries — this CPU given up, so
    /// that the holder runs and lets go (`HeldByEngineThread`).
    pub fn wait_held(&mut self) {
        self.held.held(&self.hosted);
    }

    /// Runs one turn of the engine if no other thread holds it (one compare-and-swap):
    /// whether it found work, or `None` if another thread runs the engine (and so sees
    /// what this one would have).
    #[inline]
    pub fn try_turn(&mut self) -> Option<bool> {
        let arrival = self.awaits_arrival;
        self.try_run(|engine| engine.driven_turn(arrival))
    }

    fn try_run(&mut self, f: impl FnOnce(&mut Engine) -> bool) -> Option<bool> {
        self.hosted.handoff.try_run(f)
    }

    /// How many turns a waiting thread whose own budget is `turns` (its spin) drives
    /// for: ten times as many when the engine has a fabric. A reply from another node
    /// takes a round trip over the network and the other side's turns (about 12 µs
    /// over loopback, 60-80 turns); a waiter that gave up after 200 turns (about 30 µs)
    /// now and then slept, the engine's thread then took the arrival, and the two nodes
    /// fell into waking each other (45-50 µs one-way) for the rest of the exchange.
    /// Still bounded (a few hundred microseconds): a waiter with nothing coming sleeps.
    pub fn turn_budget(&self, turns: u32) -> u32 {
        if self.hosted.fabric.is_some() {
            turns.saturating_mul(FABRIC_BUDGET_FACTOR)
        } else {
            turns
        }
    }

    /// Consecutive turns without work after which a waiting thread should stop driving
    /// (drop this) and wait on its own word: nothing is in flight, so the next work is
    /// another thread's push, which that thread drives itself ([`Driver::nudge`]). Two
    /// for an engine without a fabric whose clients all run in this process; otherwise
    /// never ([`u32::MAX`]; the budget, [`Driving::turn_budget`], bounds the drive):
    /// with a fabric, what the waiter waits for may be on its way from another node, and
    /// its turns are what poll for it; with a client in another process, see
    /// [`Driving::stays_when_idle`].
    pub fn idle_turns_before_leave(&self) -> u32 {
        if self.stays_when_idle() {
            u32::MAX
        } else {
            self.hosted.idle_limit
        }
    }

    /// Whether a waiting thread that finds no work should drive on for its budget
    /// ([`Driving::idle_turns_before_leave`] is then never): a client in another process
    /// is attached, and what the waiter waits for may be that
    /// client's next push, which cannot drive the engine. A waiter that left then armed
    /// the doorbells in its hand-back, the push woke the engine's thread, and that
    /// thread's turn woke the waiter: two wake-ups per message where the waiter's own
    /// turn takes it in. An 8-byte mediated ping-pong between two processes on two cores
    /// ran 18-27 µs one-way that way, 0.55-0.9 µs driving on (2026-11-25). (Staying only
    /// while such a client had pushed within the last thousand turns was worse for
    /// both that ping-pong and a direct one: the drive, which yields its core now and
    /// then, kept the direct receiver awake through its peer's turnaround, where its
    /// own 200-poll spin ended in a sleep — p90 0.7-0.8 µs against 18-26.) One load.
    pub fn stays_when_idle(&self) -> bool {
        // Relaxed: a hint; a client that attached a moment ago is seen by a later wait.
        self.hosted.foreign.load(Ordering::Relaxed) > 0
    }

    /// A waiter that drove for its whole budget and now goes to sleep ends the lease
    /// (if held): nobody polls the fabric while it sleeps, so its wake-ups go back to
    /// the engine's thread now rather than at that thread's next look. (A polling loop
    /// in another thread that still runs starts a new one at its next call.)
    pub fn end_lease(&self) {
        let mut seen = 0;
        let hosted = &self.hosted;
        hosted
            .lease
            .lapse_if_idle(&mut seen, true, || hosted.end_lease_now());
    }
}

impl Drop for Driving {
    /// The last driver to leave hands the engine back (`Engine::hand_back`): if work is
    /// left (or a timer the driven turns set comes before the engine thread's sleep
    /// ends), it rings the engine's doorbell, so the thread wakes and serves (spinning,
    /// then sleeping with the clients' doorbells armed, as after any work): the rest of
    /// a message the driver was in the middle of is finished by it, and another client
    /// never waits for a thread that stopped driving. Otherwise the clients' doorbells
    /// are armed again (no system call) and the engine's thread sleeps on, also if it
    /// had let go for the drivers: waking it every time the last waiter stops made it a
    /// third busy thread beside two host threads waiting for each other.
    fn drop(&mut self) {
        if self.took_fabric {
            if let Some(f) = &self.hosted.fabric {
                f.give_back();
            }
        }
        if self.leased_wait {
            // The lease keeps the engine's thread asleep and this leave is then not the
            // last: no hand-back writes what the fabric holds for a stream, and the
            // thread may now compute for a while. Tried a bounded number of times if
            // another thread holds the engine (for a turn, or the engine's thread for
            // a moment after a sleep); if it stays held, what is held goes out at that
            // holder's next fabric poll or the engine thread's look. Not after a push's
            // nudge or a polling call: the next push or call follows, and a write each
            // would undo the holding of a stream's packets (an 8-byte message stream
            // fell from 0.9 to 0.16 M/s).
            let _ = self.run_within_tries(Engine::end_of_drive);
        }
        if self.hosted.handoff.leave() {
            // Held for a turn by a driver that came since: it drives, and hands back when
            // it leaves; the ring below is then only a spare wake.
            let ring = self
                .hosted
                .handoff
                .try_run(Engine::hand_back)
                .unwrap_or(true);
            if ring {
                // Fails only if the doorbell is full, when it is readable already.
                let _ = self.hosted.doorbell.notify();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watch of a descriptor in a real poller; `poke` makes the descriptor readable.
    fn watched() -> (mio::Poll, FabricWatch, EventFd, EventFd) {
        use std::os::fd::AsRawFd;
        let poll = mio::Poll::new().expect("poll");
        let (poke, fabric) = EventFd::pair().expect("pair");
        let fd = fabric.as_fd().as_raw_fd();
        poll.registry()
            .register(
                &mut mio::unix::SourceFd(&fd),
                crate::event_loop::FABRIC,
                mio::Interest::READABLE,
            )
            .expect("register");
        let watch = FabricWatch {
            registry: poll.registry().try_clone().expect("registry"),
            fd,
            takers: AtomicU32::new(0),
        };
        (poll, watch, poke, fabric)
    }

    /// Whether the poller reports the fabric's descriptor now.
    fn reports(poll: &mut mio::Poll) -> bool {
        let mut events = mio::Events::with_capacity(4);
        poll.poll(&mut events, Some(std::time::Duration::ZERO))
            .expect("poll");
        events
            .iter()
            .any(|e| e.token() == crate::event_loop::FABRIC)
    }

    /// Pins the calling thread to `cpu`.
    fn pin_to(cpu: usize) {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).expect("sched_setaffinity");
    }

    /// A waiting thread that keeps finding the engine held gives its CPU up only if the
    /// engine's thread last took the engine on that CPU (`HeldByEngineThread`): then
    /// the holder is most likely the engine's thread, preempted by the waiter, and only
    /// a yield lets it go on. The holder here is a thread that keeps the engine for
    /// 50 ms; the engine thread's CPU is set as `note_thread_cpu` would.
    #[test]
    fn a_waiter_at_a_held_engine_yields_only_on_the_engine_threads_cpu() {
        let cfg = crate::EngineConfig::embedded();
        let stop = Arc::new(hamlyn_shm::sync::AtomicBool::new(false));
        let (engine, _io) = crate::event_loop::Engine::new(cfg, stop).expect("engine");
        let hosted = Arc::new(Hosted::new(engine).expect("hosted"));
        let cpus: Vec<usize> = {
            let set = rustix::thread::sched_getaffinity(None).expect("affinity");
            (0..rustix::thread::CpuSet::MAX_CPU)
                .filter(|&c| set.is_set(c))
                .collect()
        };
        let here = cpus[0];
        pin_to(here);
        let elsewhere = cpus.iter().copied().find(|&c| c != here);
        let yields_with_engine_thread_on = |cpu: u32| {
            hosted.thread_cpu.store(cpu, Ordering::Relaxed);
            let (held_tx, held_rx) = std::sync::mpsc::channel();
            let holder = {
                let hosted = hosted.clone();
                std::thread::spawn(move || {
                    hosted.handoff.run(|_| {
                        held_tx.send(()).expect("send");
                        std::thread::sleep(std::time::Duration::from_millis(50));
                    });
                })
            };
            held_rx.recv().expect("held");
            let before = hosted.yields_to_thread.load(Ordering::Relaxed);
            let mut driving = Driving {
                hosted: hosted.clone(),
                took_fabric: false,
                leased_wait: false,
                awaits_arrival: false,
                held: HeldByEngineThread::default(),
            };
            hosted.handoff.enter();
            assert_eq!(driving.try_step(), None, "held");
            for _ in 0..2 * PAUSES_BEFORE_YIELD {
                driving.wait_held();
            }
            let yields = hosted.yields_to_thread.load(Ordering::Relaxed) - before;
            holder.join().expect("holder");
            drop(driving);
            yields
        };
        let cpu = |c: usize| u32::try_from(c).expect("cpu");
        assert_eq!(
            yields_with_engine_thread_on(cpu(here)),
            u64::from(PAUSES_BEFORE_YIELD),
            "past the pauses, every try yields"
        );
        assert_eq!(yields_with_engine_thread_on(NO_CPU), 0, "not run yet");
        match elsewhere {
            Some(c) => assert_eq!(yields_with_engine_thread_on(cpu(c)), 0, "another CPU"),
            None => eprintln!("one CPU: the case of an engine thread elsewhere is skipped"),
        }
    }

    /// While waiting threads drive, data does not wake the engine thread's poller; when
    /// the last of them leaves it does, also for data that came meanwhile.
    #[test]
    fn the_last_waiter_to_leave_gives_the_fabric_back_with_what_came_meanwhile() {
        let (mut poll, watch, poke, _fabric) = watched();
        watch.take();
        watch.take();
        poke.notify().expect("poke");
        assert!(!reports(&mut poll), "taken: the engine thread is not woken");
        watch.give_back();
        assert!(!reports(&mut poll), "one waiter still drives");
        watch.give_back();
        assert!(
            reports(&mut poll),
            "given back: what came meanwhile wakes it"
        );
        assert_eq!(watch.takers.load(Ordering::Relaxed), 0);
    }

    /// The race between one waiter's turn-on and the next one's turn-off: a late
    /// turn-on that runs while the next waiter drives leaves the descriptor watched (a
    /// spare wake), and the next waiter's own turn-on leaves it watched too.
    #[test]
    fn a_late_turn_on_leaves_the_fabric_watched() {
        let (mut poll, watch, poke, _fabric) = watched();
        watch.take();
        // The previous waiter's turn-on, late: it runs after this waiter's turn-off.
        watch.watch(mio::Interest::READABLE);
        poke.notify().expect("poke");
        assert!(reports(&mut poll), "a spare wake while this waiter drives");
        watch.give_back();
        poke.notify().expect("poke");
        assert!(reports(&mut poll), "watched when the last waiter left");
        assert_eq!(watch.takers.load(Ordering::Relaxed), 0);
    }
}
