//! The engine's event loop: serve termini while there is work, spin a little when there
//! is none, then sleep in epoll on the control sockets and the doorbell until a client
//! needs something. Control sockets are Unix SOCK_SEQPACKET, one request per message.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering as StdOrdering;
use std::sync::Arc;
use std::time::Duration;

use hamlyn_shm::fdpass::{recv_with_fds, send_with_fds, FdPassError};
use hamlyn_shm::memory::RingMemory;
use hamlyn_shm::port::header;
use hamlyn_shm::ready;
use hamlyn_shm::sync::{AtomicBool, Ordering};
use hamlyn_shm::wake::{self, EventFd};
use hamlyn_wire::control::{Reply, Request, MAX_CONTROL_MSG};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::clients::Clients;
use crate::config::EngineConfig;
use crate::engine::EngineState;
use crate::error::EngineError;
use crate::hint_ports::ColdLook;
use crate::port::Port;
use crate::remote::Remote;
use hamlyn_core::Instant;
use hamlyn_fabric::Fabric;

/// How long an idle engine sleeps at most while a queue owes an Overflow report.
const LOSS_REPORT_EVERY: Duration = Duration::from_millis(1);
/// The longest the engine thread sleeps while something waits for room a client makes
/// without ringing (`EngineState::waits_for_room`): its sleeps double from
/// [`LOSS_REPORT_EVERY`] up to this while the wait lasts.
const OWED_ROOM_WAIT_MOST: Duration = Duration::from_millis(100);
/// Glances a waiting thread may make in a row instead of turns while the engine is quiet
/// (`EngineState::quiet`); the next is a turn regardless, for what only a turn looks at
/// (the sweep of termini whose clients set no hints, the cold ports' backstop). A glance
/// costs about 100 instructions against an idle turn's 266 (`path8`), so a waiter looks
/// at what it waits for about twice as often (an arrival during a turn waits for its
/// end).
const QUIET_GLANCES: u32 = 3;
const LISTENER: Token = Token(0);
const DOORBELL: Token = Token(1);
pub(crate) const FABRIC: Token = Token(2);
const FIRST_CLIENT: usize = 3;
/// Idle turns between two polls of the fabric while spinning (0 turns while busy).
const FABRIC_IDLE_EVERY: u32 = 32;
/// A waiting thread's idle turns poll the fabric every this many: it stays for its whole
/// budget when the engine has a fabric (`crate::hosted`), so a look every few turns
/// sees an arrival within a fraction of a microsecond of its coming, at a system call
/// per few turns.
const FABRIC_DRIVEN_EVERY: u32 = 4;
/// The engine thread's first sleep when it lets go for waiting threads that drive: if
/// the drivers ran no turn meanwhile, it serves anyway (the poller's granularity is a
/// millisecond). Once a look finds that they did, it sleeps [`DRIVER_LOOK_MOST`]
/// (`Engine::driver_look`).
pub(crate) const DRIVER_STALL: Duration = Duration::from_millis(1);
/// The longest sleep of the engine thread while waiting threads drive and keep running
/// turns. Each look wakes the thread, which on a machine with few cores takes the CPU of
/// a thread that waits (the bench pins the two to one core): at one look a millisecond
/// an 8-byte TCP ping-pong (9 µs round trips) met one in a hundred exchanges, its p99
/// 13-17 µs against a p50 of 4.5 (2026-12-07). The cost is on the other side: a lease
/// ends within two looks of the last call (`crate::hosted`), so the first arrival after
/// a process's threads stop calling without going to sleep waits up to twice this.
pub(crate) const DRIVER_LOOK_MOST: Duration = Duration::from_millis(4);
/// Turns the last driver to leave runs to finish what the drivers' last busy turn
/// started before it wakes the engine thread for the rest ([`Engine::hand_back`]).
const HAND_BACK_TURNS: u32 = 16;

/// Busy turns between two looks at the control sockets.
const IO_EVERY: u32 = 256;
/// Idle turns between two looks at the clock while spinning before a sleep.
const CLOCK_EVERY: u32 = 16;

/// A running engine: its state, its control socket and its poller.
#[derive(Debug)]
pub(crate) struct Engine {
    state: EngineState,
    /// Registers and deregisters descriptors in the poller the engine thread sleeps in
    /// ([`Io`]), from whichever thread runs the engine.
    registry: Registry,
    listener: OwnedFd,
    buf: Vec<u8>,
    /// When connections that never attached were last looked for.
    last_sweep: std::time::Instant,
    /// Tries of waiting threads ([`Engine::driven_turn`]): turns, and glances at a quiet
    /// engine ([`crate::Drove::Glance`]).
    driven_turns: u64,
    /// Times the engine thread let go because a waiting thread drove.
    let_go: u64,
    /// Times the engine thread served again after waiting threads ran turns.
    resumed: u64,
    /// The engine thread let go and has not served since.
    gone_for_driver: bool,
    /// A waiting thread ran a turn since the engine thread last served.
    driven_since_served: bool,
    /// Turns run by sending threads ([`Engine::sender_turn`]; also in `driven_turns`).
    sender_turns: u64,
    /// Waiting threads' turns when the engine thread last let go for them.
    turns_at_let_go: u64,
    /// Waiting threads' turns (not sending threads') when the engine thread last went
    /// idle ([`Engine::spin_wanted`]).
    turns_at_idle: u64,
    /// How long the engine thread sleeps at its next let-go for waiting threads:
    /// [`DRIVER_STALL`] at the first, [`DRIVER_LOOK_MOST`] once a look found that the
    /// drivers ran turns.
    driver_look: Duration,
    /// Times drivers ran no turn for a look (`driver_look`) and the engine thread served
    /// anyway.
    stalled_drivers: u64,
    /// Serving despite drivers (they stalled) until the next turn without work.
    ignore_drivers: bool,
    /// The last driven turn had work.
    driven_busy: bool,
    /// Waiters' glances in a row that found the engine quiet and ran no turn
    /// (`EngineState::quiet`; at most [`QUIET_GLANCES`], then a turn).
    glances: u32,
    /// All glances so far (counted in `driven_turns` too, which is waiters' tries).
    glances_total: u64,
    /// The engine thread's sleep bound while something waits for room
    /// (`EngineState::waits_for_room`): [`LOSS_REPORT_EVERY`], doubled at each sleep the
    /// wait outlasts, up to [`OWED_ROOM_WAIT_MOST`].
    owed_room_wait: Duration,
    /// The clients' doorbells are armed: the engine thread sleeps, or is about to.
    doorbells_armed: bool,
    /// The last turn was the first after a sleep.
    woke: bool,
    /// When the engine thread's current (or last) sleep ends at the latest, on the
    /// engine's clock: a hand-back that leaves it asleep wakes it if a timer set
    /// meanwhile comes sooner. Computed from the same reading as the sleep's length, so
    /// that a sleep bounded by a timer ends exactly at that timer's instant, and the
    /// hand-back finds the same timer not sooner (`Engine::hand_back`).
    sleep_ends: Instant,
    /// The engine thread gives the engine up between the turns of its idle spin
    /// ([`Step::Spin`]): set for an engine its application's threads may drive.
    spin_unheld: bool,
    /// Where an idle spin given up for a step ([`Step::Spin`]) resumes.
    idle_spin: Option<IdleSpin>,
    /// What [`Engine::spin_wanted`] said of the clients when the engine last went idle
    /// ([`Engine::spins_for_clients`]).
    spins_for_clients: bool,
    /// Packets from other nodes when the engine thread last went idle
    /// ([`EngineState::fabric_packets_in`], [`Engine::spin_wanted`]).
    packets_at_idle: u64,
    /// When the engine thread last went idle ([`Engine::spin_wanted`]).
    went_idle_at: std::time::Instant,
}

/// Whom the engine thread, gone idle, spins for before it sleeps ([`Engine::spin_wanted`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SpinFor {
    /// A client that cannot drive the engine: one in another process.
    clients: bool,
    /// Other nodes whose packets this thread served itself, nobody of this process
    /// waiting for them, and lately (a passive target of reads and atomics, a stream
    /// into a process that does not wait).
    peers: bool,
}

/// An idle spin between two calls of [`Engine::serve`] ([`Step::Spin`]).
#[derive(Clone, Copy, Debug)]
struct IdleSpin {
    /// Idle turns so far.
    idle: u32,
    /// When the engine went idle.
    since: std::time::Instant,
    /// Turns since the serve began (for `IO_EVERY`).
    turns: u32,
    /// Whether to spin at all ([`Engine::spin_wanted`]).
    wanted: bool,
}

/// The poller the engine's thread sleeps in (the control socket, the clients' control
/// connections, the doorbell, the fabric), kept apart from the engine so that the thread
/// sleeps in it without holding the engine: a waiting thread may drive meanwhile.
#[derive(Debug)]
pub(crate) struct Io {
    poll: Poll,
    events: Events,
    /// What became ready, not handled yet ([`Engine::handle_events`] takes it), each
    /// token once: the poller is edge-triggered, so what one wait reported and nobody
    /// handled is not reported again. Several waits may add to it (the engine thread
    /// waiting again while a driving thread holds the engine). At most one entry per
    /// registered descriptor.
    pending: Vec<Token>,
}

impl Io {
    /// Waits at most `timeout` for readiness, adding what became ready to what is
    /// pending.
    pub(crate) fn wait(&mut self, timeout: Duration) -> Result<(), EngineError> {
        match self.poll.poll(&mut self.events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(EngineError::io("epoll_wait", e)),
        }
        // One wait reports a descriptor once: only what an earlier, unhandled wait
        // reported needs the look for duplicates.
        let earlier = self.pending.len();
        for token in self.events.iter().map(|e| e.token()) {
            if !self.pending[..earlier].contains(&token) {
                self.pending.push(token);
            }
        }
        Ok(())
    }
}

/// What the engine's thread does after serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The stop flag is set.
    Stop,
    /// Sleep in the poller at most this long (without holding the engine), then
    /// [`Engine::after_sleep`].
    Sleep(Duration),
    /// One step of the idle spin is done: pause without holding the engine, then serve
    /// again (the spin resumes where it was). Only for an engine that its application's
    /// threads may drive ([`Engine::set_spin_unheld`]), and not busy-polling: a thread
    /// that holds the engine while it spins idle and is then preempted — two cores, four
    /// busy threads over TCP — kept a waiting thread from running a single turn for
    /// whole time slices.
    Spin,
}

/// Binds `listener` to `path` (`addr`) and listens, so that the path appears only once
/// connections are accepted: bound under a temporary name beside it, listening, then
/// renamed into place without replacing anything (`RENAME_NOREPLACE`: a live engine's
/// socket there fails the bind, as binding on it would). Binding at `path` directly made
/// it exist before `listen`, and a client that connected as soon as it saw the path was
/// refused (a Python test of a daemon failed that way in CI, 2026-11-25). Falls back to
/// binding directly when the temporary name would be too long for a socket address.
fn bind_listening(
    listener: &rustix::fd::OwnedFd,
    path: &std::path::Path,
    addr: &SocketAddrUnix,
) -> Result<(), EngineError> {
    static BINDING: hamlyn_shm::sync::AtomicU32 = hamlyn_shm::sync::AtomicU32::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    // Relaxed: only uniqueness matters.
    let n = BINDING.fetch_add(1, hamlyn_shm::sync::Ordering::Relaxed);
    let tmp =
        name.map(|name| path.with_file_name(format!(".{name}.{}.{n}.binding", std::process::id())));
    let tmp_addr = tmp.as_ref().and_then(|t| SocketAddrUnix::new(t).ok());
    let (Some(tmp), Some(tmp_addr)) = (tmp, tmp_addr) else {
        rustix::net::bind(listener, addr).map_err(|e| EngineError::io("bind control socket", e))?;
        return rustix::net::listen(listener, 128).map_err(|e| EngineError::io("listen", e));
    };
    let _ = std::fs::remove_file(&tmp);
    rustix::net::bind(listener, &tmp_addr)
        .map_err(|e| EngineError::io("bind control socket", e))?;
    let placed = rustix::net::listen(listener, 128)
        .map_err(|e| EngineError::io("listen", e))
        .and_then(|()| {
            rustix::fs::renameat_with(
                rustix::fs::CWD,
                &tmp,
                rustix::fs::CWD,
                path,
                rustix::fs::RenameFlags::NOREPLACE,
            )
            .map_err(|e| EngineError::io("bind control socket", e))
        });
    if placed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    placed
}

impl Engine {
    /// Binds the control socket and prepares the engine (nothing runs until [`Engine::run`]).
    pub(crate) fn new(
        cfg: EngineConfig,
        stop: Arc<AtomicBool>,
    ) -> Result<(Engine, Io), EngineError> {
        Engine::with_fabric(cfg, stop, None)
    }

    /// As [`Engine::new`], with a fabric to other nodes.
    pub(crate) fn with_fabric(
        cfg: EngineConfig,
        stop: Arc<AtomicBool>,
        fabric: Option<Box<dyn Fabric + Send>>,
    ) -> Result<(Engine, Io), EngineError> {
        let path = cfg.socket.clone();
        let addr = SocketAddrUnix::new(&path).map_err(|_| {
            EngineError::SocketPath(path.display().to_string(), "too long for a Unix socket")
        })?;
        if path.exists() {
            // A socket nobody answers on is stale: a previous engine died. A live one is
            // left alone and binding fails below.
            if hamlyn_shm::fdpass::seqpacket_connect(&path).is_err() {
                let _ = std::fs::remove_file(&path);
            }
        }
        let listener = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )
        .map_err(|e| EngineError::io("socket", e))?;
        bind_listening(&listener, &path, &addr)?;
        // Clients (and the handle) poke one end; the engine waits on the other.
        let (doorbell_poker, doorbell) =
            EventFd::pair().map_err(|e| EngineError::Shm(e.to_string()))?;
        let poll = Poll::new().map_err(|e| EngineError::io("epoll", e))?;
        poll.registry()
            .register(
                &mut SourceFd(&listener.as_raw_fd()),
                LISTENER,
                Interest::READABLE,
            )
            .map_err(|e| EngineError::io("register listener", e))?;
        poll.registry()
            .register(
                &mut SourceFd(&doorbell.as_fd().as_raw_fd()),
                DOORBELL,
                Interest::READABLE,
            )
            .map_err(|e| EngineError::io("register doorbell", e))?;
        let incarnation = if cfg.incarnation != 0 {
            cfg.incarnation
        } else {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            (t.as_secs() as u32) | 1
        };
        tracing::info!(socket = %path.display(), node = cfg.node, incarnation, busy_poll = cfg.busy_poll, "engine ready");
        let remote = match fabric {
            Some(f) => {
                if let Some(fd) = f.wait_fd() {
                    poll.registry()
                        .register(&mut SourceFd(&fd.as_raw_fd()), FABRIC, Interest::READABLE)
                        .map_err(|e| EngineError::io("register fabric", e))?;
                }
                Some(Remote::new(f))
            }
            None => None,
        };
        let state = EngineState::new(cfg, incarnation, (doorbell_poker, doorbell), stop, remote);
        let registry = poll
            .registry()
            .try_clone()
            .map_err(|e| EngineError::io("epoll registry", e))?;
        let io = Io {
            poll,
            events: Events::with_capacity(256),
            pending: Vec::with_capacity(256),
        };
        let engine = Engine {
            state,
            registry,
            listener,
            buf: vec![0; MAX_CONTROL_MSG],
            last_sweep: std::time::Instant::now(),
            driven_turns: 0,
            let_go: 0,
            resumed: 0,
            gone_for_driver: false,
            driven_since_served: false,
            turns_at_let_go: 0,
            driver_look: DRIVER_STALL,
            turns_at_idle: 0,
            sender_turns: 0,
            stalled_drivers: 0,
            ignore_drivers: false,
            driven_busy: false,
            glances: 0,
            glances_total: 0,
            owed_room_wait: LOSS_REPORT_EVERY,
            doorbells_armed: false,
            woke: false,
            sleep_ends: Instant(0),
            spin_unheld: false,
            spins_for_clients: true,
            packets_at_idle: 0,
            went_idle_at: std::time::Instant::now(),
            idle_spin: None,
        };
        Ok((engine, io))
    }

    /// Whether the engine thread gives the engine up between the turns of its idle spin
    /// ([`Step::Spin`]): for an engine that its application's threads may drive.
    pub(crate) fn set_spin_unheld(&mut self, unheld: bool) {
        self.spin_unheld = unheld;
    }

    /// The doorbell, to wake the engine from another thread (e.g. after setting stop).
    pub(crate) fn doorbell(&self) -> BorrowedFd<'_> {
        self.state.doorbell_poker.as_fd()
    }

    /// Serves until the stop flag is set ([`Step::Stop`]), until it is time to sleep, or
    /// until `driven()` says a waiting thread of this process wants to run the turns
    /// itself (both [`Step::Sleep`]; see `crate::hosted`). `driven` is one relaxed load,
    /// asked once per turn. Before an idle sleep the clients' doorbells are armed; before
    /// a sleep because someone drives they are not: the last driver to leave rings the
    /// engine's own doorbell, and this thread serves again, spinning before it sleeps as
    /// after any work.
    pub(crate) fn serve(
        &mut self,
        io: &mut Io,
        driven: &dyn Fn() -> bool,
    ) -> Result<Step, EngineError> {
        // No step of the clock is open between turns (one left by a panic ends here).
        self.state.clock.reset();
        // Armed for a sleep (ours, or while a waiting thread drove): we serve now.
        if self.doorbells_armed {
            self.disarm_doorbells();
        }
        let (mut idle, mut idle_since, mut turns, mut spin_wanted) = match self.idle_spin.take() {
            Some(s) => (s.idle, s.since, s.turns, s.wanted),
            None => (0, std::time::Instant::now(), 0, true),
        };
        // Acquire: pairs with the Release store of the stop flag in `EngineHandle::drop`
        // (or the daemon's signal handler).
        while !self.state.stop.load(StdOrdering::Acquire) {
            if driven() && !self.ignore_drivers {
                self.woke = false;
                if !std::mem::replace(&mut self.gone_for_driver, true) {
                    self.let_go += 1;
                    self.driver_look = DRIVER_STALL;
                } else if self.driven_turns != self.turns_at_let_go {
                    // Looked, and the drivers ran turns since: they are about, look
                    // less often.
                    self.driver_look = DRIVER_LOOK_MOST;
                }
                self.turns_at_let_go = self.driven_turns;
                let sleep = self.state.cfg.max_sleep.min(self.driver_look);
                self.sleep_ends = self.state.now().plus(sleep);
                return Ok(Step::Sleep(sleep));
            }
            self.gone_for_driver = false;
            if std::mem::take(&mut self.driven_since_served) {
                self.resumed += 1;
            }
            turns = turns.wrapping_add(1);
            // One clock reading for the turn and its fabric poll (`step_clock`).
            let step = self.state.begin_step();
            let mut busy = self.state.turn(ColdLook::Share);
            // Polling the fabric is a system call: every turn while there is traffic,
            // every FABRIC_IDLE_EVERY-th turn while spinning idle.
            if self.state.remote.is_some() && idle % FABRIC_IDLE_EVERY == 0 {
                busy |= self.state.poll_fabric(idle > 0);
            }
            self.state.end_step(step);
            if busy {
                idle = 0;
                self.woke = false;
                if turns % IO_EVERY == 0 {
                    self.poll_io(io)?;
                }
                continue;
            }
            // Nothing left to do for stalled drivers: let them have the engine again.
            self.ignore_drivers = false;
            let busy_poll = self.state.cfg.busy_poll;
            // Woken for nothing (a timer; a doorbell rung with no request behind it, as a
            // client ringing in a loop would): back to sleep without spinning, so such a
            // client costs the engine one turn per ring, not a spin.
            let woke_for_nothing = std::mem::take(&mut self.woke) && !busy_poll;
            if woke_for_nothing {
                self.state.counters.idle_wakes += 1;
            }
            if idle == 0 && !busy_poll {
                idle_since = std::time::Instant::now();
                let spin_for = self.spin_wanted(idle_since);
                self.spins_for_clients = spin_for.clients;
                spin_wanted = spin_for.clients || spin_for.peers;
            }
            idle = idle.saturating_add(1);
            // A busy-polling engine never sleeps, so it never reads the clock; one that
            // spins before it sleeps reads it every CLOCK_EVERY-th idle turn only (reading
            // the clock costs more than an idle turn, and would delay the next request).
            let spinning = busy_poll
                || (spin_wanted
                    && !woke_for_nothing
                    && idle < self.state.cfg.spin_turns
                    && (idle % CLOCK_EVERY != 0 || idle_since.elapsed() < self.state.cfg.spin));
            if spinning {
                if idle % IO_EVERY == 0 {
                    self.poll_io(io)?;
                }
                // A busy-polling engine owns its core: it holds itself through its spin
                // and lets go only when a waiting thread asks (`driven`).
                if self.spin_unheld && !busy_poll {
                    self.idle_spin = Some(IdleSpin {
                        idle,
                        since: idle_since,
                        turns,
                        wanted: spin_wanted,
                    });
                    return Ok(Step::Spin);
                }
                std::hint::spin_loop();
                continue;
            }
            // Packets the fabric holds back for a stream go out now (nothing follows them
            // while we sleep), and its poller is drained so that the next arrival wakes us
            // (issue 14: idle daemons answered pings in 1.6–2 ms).
            if self.state.prepare_fabric_sleep() {
                idle = 0;
                continue;
            }
            if self.arm_doorbells(true) {
                idle = 0;
                continue;
            }
            self.doorbells_armed = true;
            self.state.counters.sleeps += 1;
            // The sleep's length and its end from one reading of the clock (`sleep_ends`).
            let step = self.state.begin_step();
            let sleep = self.idle_sleep();
            // Still waiting for room at this sleep: the next such sleep is twice as long
            // (up to `OWED_ROOM_WAIT_MOST`); a client that never reads its ring costs the
            // engine ten wake-ups a second, not a thousand.
            self.owed_room_wait = if self.state.waits_for_room() {
                (self.owed_room_wait * 2).min(OWED_ROOM_WAIT_MOST)
            } else {
                LOSS_REPORT_EVERY
            };
            self.sleep_ends = self.state.now().plus(sleep);
            self.state.end_step(step);
            return Ok(Step::Sleep(sleep));
        }
        tracing::info!("engine stopping");
        Ok(Step::Stop)
    }

    /// Whom the engine thread, gone idle at `now`, spins for before it sleeps (asked
    /// once per idle spell): only parties that cannot run the engine's turns
    /// themselves. An engine its application's threads
    /// drive whose attached clients all run in its process sleeps at once: their waiting
    /// threads drive it (and poll the fabric for what comes from other nodes), and their
    /// pushes run the turn that takes them in (`Driver::nudge`). A spinning engine thread
    /// was a third busy thread beside them that, once woken, stayed awake from one
    /// message to the next (each restarting its spin): over TCP, two processes and two
    /// engines on two cores, a ping-pong then ran 13-50 µs one-way instead of 5.6-6 µs.
    /// A client in another process still gets the spin (its pushes find the engine
    /// awake instead of waking it), unless waiting threads drove since the engine
    /// thread last went idle: they are about, and their turns take that client's pushes
    /// in. Spinning then made the engine's thread a third busy thread again: in a
    /// mediated ping-pong with the peer in another process, the two processes ended up
    /// sharing one core in half the quick runs (the engine's thread spinning on the
    /// other), each hop a sleep and a wake-up, 6.8-10 µs one-way instead of 0.6
    /// (2026-11-25, `perf sched`). Without that spin the other core is idle when one
    /// of them wakes, and the scheduler puts it there.
    ///
    /// Other nodes get the spin on the same terms ([`SpinFor::peers`]): when this thread
    /// served packets from them itself since it last went idle (no waiting thread drove
    /// meanwhile: nobody here waits for them), and went idle less than the spin's length
    /// (`EngineConfig::spin`) before, so that the next packet is likely to come within
    /// the spin. A process whose memory other nodes read or update while its own threads
    /// do something else (seed 004's remote memory, the point of which is that the
    /// target process takes no part) otherwise had its engine thread sleep after every
    /// answer and be woken by the next request: an 8-byte remote read over TCP took
    /// 24 µs instead of 11 (2026-12-07, `hamlyn bench --modes tcp`). Heartbeats are not
    /// packets, and a trickle slower than the spin's length does not keep the thread
    /// awake.
    fn spin_wanted(&mut self, now: std::time::Instant) -> SpinFor {
        let packets = self.state.fabric_packets_in();
        let served_peers = packets != self.packets_at_idle;
        self.packets_at_idle = packets;
        let since_idle =
            now.saturating_duration_since(std::mem::replace(&mut self.went_idle_at, now));
        if !self.spin_unheld {
            return SpinFor {
                clients: true,
                peers: true,
            };
        }
        // Waiting threads' turns only: a push's own turn (`sender_turn`) happens because
        // this thread sleeps, and would keep it from spinning for good.
        let waiter_turns = self.driven_turns.wrapping_sub(self.sender_turns);
        let drove = waiter_turns != self.turns_at_idle;
        self.turns_at_idle = waiter_turns;
        SpinFor {
            clients: !drove && self.state.clients.any_in_other_process(),
            peers: !drove && served_peers && since_idle < self.state.cfg.spin,
        }
    }

    /// How long the engine thread sleeps while waiting threads drive: the sleep of its
    /// current let-go for them (`driver_look`), or [`DRIVER_STALL`] if it has not let go
    /// for them since it last served.
    pub(crate) fn driver_look(&self) -> Duration {
        if self.gone_for_driver {
            self.driver_look
        } else {
            DRIVER_STALL
        }
    }

    /// Whether the engine spun for its clients when it last went idle
    /// ([`Engine::spin_wanted`], asked once per idle spell, not per turn): what its
    /// thread does while a driver holds it (`crate::hosted::run_engine_thread`).
    pub(crate) fn spins_for_clients(&self) -> bool {
        self.spins_for_clients
    }

    /// How long the engine thread may sleep with nothing to do. A fabric's sockets wake
    /// it through its descriptor; its timers (heartbeats, reconnects) bound the sleep.
    fn idle_sleep(&self) -> Duration {
        let mut sleep = self
            .state
            .fabric_sleep_bound()
            .min(self.state.cfg.max_sleep);
        if self.state.waits_for_room() {
            sleep = sleep.min(self.owed_room_wait);
        }
        sleep
    }

    /// After the engine thread's sleep in `io` (which it slept in without holding the
    /// engine): what woke it is handled (the doorbells are disarmed when it serves next,
    /// [`Engine::serve`], or by a waiting thread's first turn).
    pub(crate) fn after_sleep(&mut self, io: &mut Io) {
        self.handle_events(io);
        // Let go for a driver, which has not run a turn since: it stopped driving
        // without leaving (descheduled, or holding a `Driving` it does not use). Serve
        // anyway, so that nobody waits for it.
        if self.gone_for_driver && self.driven_turns == self.turns_at_let_go {
            self.stalled_drivers += 1;
            self.ignore_drivers = true;
        }
        // Whoever rang announced its terminus in its port's ready words, cold port or
        // not: read every port's next turn. (A client that sets no hints is found by
        // the sweep while the engine spins before its next sleep, and by the thorough
        // look of `arm_doorbells` before it.)
        self.state.read_all_hints = true;
        self.woke = true;
    }

    /// The last driver leaves: whether the engine thread must be woken (its doorbell
    /// rung) to take over. Only if work is left (a message in the middle, fabric input,
    /// held packets) or the engine thread serves stalled drivers' work: otherwise the
    /// clients' doorbells (which the first driven turn cleared) are armed again, as the
    /// engine thread arms them before an idle sleep, and it stays asleep — also when it
    /// let go for the drivers: it then wakes once at the end of that sleep
    /// ([`DRIVER_STALL`]), finds nothing and sleeps on. No system call, and the next push
    /// wakes it (or is driven by its sender, `Driver::nudge`). Waking it here instead,
    /// every time the last waiter stops, made it a third busy thread beside two threads
    /// that wait for each other (issue 14's RPC regression).
    pub(crate) fn hand_back(&mut self) -> bool {
        if self.ignore_drivers {
            return true;
        }
        // Armed throughout (no driven turn cleared them, or only a sending thread's
        // turn ran, `sender_turn`, and no port changed its doorbell): every push since
        // rang or nudged. Unless that turn left work or a timer (a terminus in a ready
        // queue, also one waiting for its tokens; an answer; a fabric; a queue owing its
        // owner an overflow report), nothing is left to hand back.
        if self.doorbells_armed
            && !self.state.may_have_more()
            && !self.state.clients.has_unreported_losses()
        {
            return false;
        }
        // The last turn had work: what it started (a read's answer, the next packet of a
        // message) may need more turns, which `has_work` below does not see. The leaving
        // thread runs them, a few at most, rather than waking the engine thread for them.
        // A turn that left nothing behind (`may_have_more`: single-packet messages, each
        // completed) needs no turn more to find that out.
        let mut more = 0;
        while self.driven_busy && self.state.may_have_more() {
            if more == HAND_BACK_TURNS {
                return true;
            }
            self.waiter_step(false, false);
            more += 1;
        }
        // One clock reading for the fabric's sleep preparation, the sleep bound and its
        // comparison with the engine thread's sleep (`step_clock`). Not for the turns
        // above: each is a step of its own, since packets a stream holds must see time
        // pass between turns to go out.
        let step = self.state.begin_step();
        let ring = self.hand_back_after_turns();
        self.state.end_step(step);
        ring
    }

    /// [`Engine::hand_back`] after its turns: the fabric's sleep preparation, the
    /// doorbells armed, and whether a timer comes before the engine thread's sleep ends.
    #[inline]
    fn hand_back_after_turns(&mut self) -> bool {
        if self.state.prepare_fabric_sleep() {
            return true;
        }
        // Arm-and-recheck (`wake::arm_eventfd`): a push either is seen here (ring now) or
        // sees the armed doorbell (and rings, or drives a turn itself).
        let work = self.arm_doorbells(false);
        self.doorbells_armed = true;
        // The engine thread's sleep for the drivers ends as an idle one (not a stall).
        self.gone_for_driver = false;
        // A timer the drivers' turns set (a retransmission, a throttled terminus's
        // tokens) that comes before the engine thread's sleep ends: wake it to look.
        // Without one the bound is `max_sleep`, which no sleep of that thread outlasts:
        // no clock read.
        if work {
            return true;
        }
        // The bound and the instant it ends from one reading (this step's, taken only
        // if a timer asks for it), as the sleep's own end was (`sleep_ends`): the timer
        // the engine's thread sleeps for is then not sooner than itself. With two
        // readings (the length from one, the instant from the next), a stream's
        // hand-backs found the tick it slept for sooner by the jitter between them and
        // woke it for nothing: one in ten, nine in ten once the length came from an
        // earlier reading than the sleep's end.
        let bound = self.idle_sleep();
        bound < self.state.cfg.max_sleep && self.state.now().plus(bound) < self.sleep_ends
    }

    /// A drive ends while others (a lease) keep the engine's thread asleep: what the
    /// fabric holds back goes out now, as before a sleep (`Engine::hand_back`), since
    /// the next turn may be far off.
    pub(crate) fn end_of_drive(&mut self) {
        self.state.flush_fabric();
    }

    /// What progress by the waiting thread did so far.
    pub(crate) fn drive_stats(&self) -> crate::hosted::DriveStats {
        crate::hosted::DriveStats {
            turns_by_waiters: self.driven_turns.wrapping_sub(self.glances_total),
            glances_by_waiters: self.glances_total,
            engine_thread_let_go: self.let_go,
            engine_thread_resumed: self.resumed,
            stalled_drivers: self.stalled_drivers,
            turns_by_senders: self.sender_turns,
            // Kept by the hosting side (`crate::hosted::Driver::stats`).
            ..Default::default()
        }
    }

    /// One turn run by a waiting thread of this process instead of the engine's thread:
    /// the termini and the fabric (every turn while busy, every [`FABRIC_DRIVEN_EVERY`]-th
    /// while idle). The control sockets stay with the engine's thread, which sleeps in
    /// its poller meanwhile and wakes for them. Whether there was work. Nothing once the
    /// engine is stopping.
    /// `arrival`: the waiting thread waits for what other nodes send
    /// (`Driving::awaiting_arrival`): the turn's look at the fabric reads its
    /// connections directly.
    pub(crate) fn driven_turn(&mut self, arrival: bool) -> bool {
        self.waiter_step(false, arrival) == crate::Drove::Work
    }

    /// [`Engine::driven_turn`], saying whether a turn ran or only a glance
    /// ([`crate::Drove`]).
    pub(crate) fn driven_step(&mut self, arrival: bool) -> crate::Drove {
        self.waiter_step(false, arrival)
    }

    /// A turn run by a thread that pushed a request and found the engine asleep
    /// (`Driver::nudge`): as a waiter's, counted apart. `cold`: its port was cold
    /// (`hamlyn_shm::ready::COLD`), so the turn reads every port's ready words.
    ///
    /// The clients' doorbells stay armed through it if they were (the engine's thread
    /// sleeps): a push meanwhile rings, or nudges in turn, as it would with nobody
    /// driving, and the hand-back that follows has nothing to re-arm unless the turn
    /// left work or a timer (`Engine::hand_back`), or a port changed its doorbell (a
    /// cold port turned hot, `HintPorts::disarmed`). A waiter's drive clears them, so
    /// that pushes during its many turns make no system call; for one turn, clearing
    /// them and arming them again (a fence and a look at every hot port) cost about 350
    /// of a mediated message's instructions (`path8`'s hand-off, 462 -> 113).
    pub(crate) fn sender_turn(&mut self, cold: bool) -> bool {
        self.sender_turns = self.sender_turns.wrapping_add(1);
        self.state.read_all_hints |= cold;
        self.waiter_step(true, false) == crate::Drove::Work
    }

    /// The count of clients in other processes, kept up to date as they come and go:
    /// while there is one, a waiting thread that finds no work drives on
    /// (`Driving::stays_when_idle`).
    pub(crate) fn foreign_clients(&self) -> std::sync::Arc<hamlyn_shm::sync::AtomicU32> {
        self.state.clients.foreign_count()
    }

    /// Whether the engine has a fabric (other nodes).
    pub(crate) fn has_fabric(&self) -> bool {
        self.state.remote.is_some()
    }

    /// The engine thread's poller (a handle that may add and remove its descriptors
    /// from any thread) and the fabric's descriptor in it, registered as [`FABRIC`]:
    /// for waiting threads that take the fabric's wake-ups from the engine's thread
    /// while they poll the fabric themselves (`crate::hosted::FabricWatch`). `None`
    /// without a fabric, or a fabric without a descriptor.
    pub(crate) fn fabric_watch(&self) -> Option<(Registry, std::os::fd::RawFd)> {
        let fd = self.state.remote.as_ref()?.fabric().wait_fd()?.as_raw_fd();
        Some((self.registry.try_clone().ok()?, fd))
    }

    /// A turn for a thread of the host, or a glance at a quiet engine; `keep_armed`:
    /// leave the clients' doorbells armed if they are (a sending thread's one turn,
    /// [`Engine::sender_turn`]); `arrival`: the thread waits for what other nodes send
    /// ([`Engine::driven_turn`]).
    #[inline]
    fn waiter_step(&mut self, keep_armed: bool, arrival: bool) -> crate::Drove {
        // Acquire: pairs with the Release store of the stop flag in `EngineHandle::drop`.
        if self.state.stop.load(StdOrdering::Acquire) {
            return crate::Drove::Idle;
        }
        if self.doorbells_armed && !keep_armed {
            // The engine thread sleeps (it need not wake while we drive): clients'
            // pushes need not ring. Their rings so far wake it once, harmlessly. Pushes
            // meanwhile announced themselves in their ports' ready words: a hot port's
            // are read on every turn, and a cold port's push rang (`ready::COLD`),
            // which makes the engine's thread read every port's (`after_sleep`).
            self.doorbells_armed = false;
            self.clear_doorbell_flags();
        }
        self.driven_turns = self.driven_turns.wrapping_add(1);
        self.driven_since_served = true;
        if !keep_armed && self.glances < QUIET_GLANCES && self.state.quiet() {
            self.glances += 1;
            self.glances_total += 1;
            self.driven_busy = false;
            return crate::Drove::Glance;
        }
        self.glances = 0;
        let disarmed = self.state.hint_ports.disarmed();
        // One clock reading for the turn and its fabric poll (`step_clock`).
        let step = self.state.begin_step();
        let mut busy = self.state.turn(ColdLook::Backstop);
        if self.doorbells_armed && self.state.hint_ports.disarmed() != disarmed {
            // Kept armed, but a port turned hot (its doorbell cleared) or withdrew its
            // going cold: not armed throughout, so the hand-back arms and looks again.
            self.doorbells_armed = false;
        }
        if self.state.remote.is_some()
            && (self.driven_busy || self.driven_turns % u64::from(FABRIC_DRIVEN_EVERY) == 0)
        {
            busy |= self.state.poll_fabric(arrival);
        }
        self.state.end_step(step);
        self.driven_busy = busy;
        if busy {
            crate::Drove::Work
        } else {
            crate::Drove::Idle
        }
    }

    /// Asks every client to ring the doorbell on its next push; true if work is already
    /// there (then the engine must not sleep). Batched arm-and-recheck
    /// (`wake::set_eventfd_armed`): the doorbells armed, one fence F1 for all, then the
    /// looks. No reference count is touched per port: a waiting thread hands back once
    /// per message.
    ///
    /// Light (`thorough` false: a leaving waiting thread, `hand_back`, many times a
    /// second): the hot ports only (`hint_ports`), their ready words, and the termini
    /// known to have work (the scheduler's ready queues). Cold ports' doorbells are
    /// armed already ([`hamlyn_shm::ready::COLD`]), so the cost follows the ports in use,
    /// not those attached.
    ///
    /// `thorough` (the engine thread's own idle sleep, after its spin): every port armed
    /// and looked at, its words and every terminus's ring, so that a client that sets
    /// no ready hints is not left asleep either.
    fn arm_doorbells(&mut self, thorough: bool) -> bool {
        if !thorough {
            return self.arm_hot_doorbells();
        }
        for client in self.state.clients.iter() {
            if let Some(word) = client
                .port
                .as_ref()
                .and_then(|p| p.region.atomic_u32(header::DOORBELL))
            {
                // The engine's thread sleeps until poked: no grace for pushers.
                wake::set_eventfd_armed_for_sleep(word);
            }
        }
        wake::armed_fence();
        let mut work = false;
        for client in self.state.clients.iter_mut() {
            let Some(port) = client.port.as_mut() else {
                continue;
            };
            let held = Clients::is_held(port);
            let Port {
                region, termini, ..
            } = port;
            let Some(word) = region.atomic_u32(header::DOORBELL) else {
                continue;
            };
            let hinted = (0..ready::words_for(termini.len())).any(|i| {
                region.atomic_u64(header::READY + i * 8).is_some_and(|w| {
                    // Relaxed: ordered after the arming by F1 (`armed_fence`).
                    w.load(Ordering::Relaxed) != 0
                })
            });
            if hinted || termini.iter_mut().any(|t| t.has_work(held)) {
                // A cold port's doorbell stays armed (`ready::COLD`): the turns that
                // follow may find no hint on it (work without one), and a cold port
                // unarmed would neither ring nor be read every turn.
                // Relaxed: the engine's own bit, read back.
                if word.load(Ordering::Relaxed) & ready::COLD == 0 {
                    wake::withdraw_eventfd_armed(word);
                }
                work = true;
            }
        }
        if work {
            // The port may be cold: its words are read by the next turn.
            self.state.read_all_hints = true;
        }
        work
    }

    /// [`Self::arm_doorbells`], light: the hot ports and the queued termini.
    fn arm_hot_doorbells(&mut self) -> bool {
        // Only a hand-back arms this way (`hand_back_after_turns`): a thread of the
        // host that will most likely drive again at its next wait. A client of another
        // process whose push finds that arming waits a moment for the next wait to
        // disarm it before it rings (`wake::HANDED_BACK`).
        for (bell, _) in self.state.hint_ports.hot_bells() {
            wake::set_eventfd_armed_handed_back(bell);
        }
        wake::armed_fence();
        let mut work = false;
        for (bell, port) in self.state.hint_ports.hot_bells() {
            // After F1 (`armed_fence`).
            if port.hinted() {
                wake::withdraw_eventfd_armed(bell);
                work = true;
            }
        }
        if work {
            return true;
        }
        let state = &mut self.state;
        let (sched, clients) = (&state.sched, &mut state.clients);
        for (cid, t) in sched.ready_keys() {
            let Some(port) = clients.port_mut(cid) else {
                continue;
            };
            let held = Clients::is_held(port);
            if port
                .termini
                .get_mut(usize::from(t))
                .is_some_and(|t| t.has_work(held))
            {
                // Its port may be cold (a long message in the middle): every doorbell
                // armed so far stays armed; the engine stays awake.
                return true;
            }
        }
        false
    }

    fn disarm_doorbells(&mut self) {
        self.count_rings();
        self.clear_doorbell_flags();
        self.doorbells_armed = false;
    }

    /// Takes the doorbell's rings in (the eventfd drained), counting them.
    fn count_rings(&mut self) {
        if let Ok(n) = self.state.doorbell.drain() {
            self.state.counters.doorbell_rings += n;
        }
    }

    /// Clients of hot ports need not ring the doorbell (no system call: what they rang
    /// already is drained after the engine thread's next sleep). Cold ports' doorbells
    /// stay armed ([`hamlyn_shm::ready::COLD`]).
    fn clear_doorbell_flags(&mut self) {
        for (bell, _) in self.state.hint_ports.hot_bells() {
            // Only saves clients a needless eventfd write while we are awake (the
            // hand-back's mark goes with the flag).
            wake::withdraw_eventfd_armed(bell);
        }
    }

    /// A look at the control sockets without sleeping (the engine thread, while it
    /// serves).
    fn poll_io(&mut self, io: &mut Io) -> Result<(), EngineError> {
        io.wait(Duration::ZERO)?;
        self.handle_events(io);
        Ok(())
    }

    fn handle_events(&mut self, io: &mut Io) {
        for token in io.pending.drain(..) {
            match token {
                LISTENER => self.accept(),
                DOORBELL => {
                    self.count_rings();
                    // A cold port's push rings (`ready::COLD`): read every port's words.
                    self.state.read_all_hints = true;
                }
                // The fabric is polled on every turn; waking is all this is for.
                FABRIC => {}
                Token(t) => self.client_readable((t - FIRST_CLIENT) as u32),
            }
        }
        // Off the busy path: this runs when the engine sleeps or every few hundred turns.
        let timeout = self.state.cfg.attach_timeout;
        if self.last_sweep.elapsed() >= timeout / 4 {
            self.last_sweep = std::time::Instant::now();
            for cid in self.state.clients.unattached_since(timeout) {
                self.state.counters.idle_closed += 1;
                self.drop_client(cid, "did not attach in time");
            }
        }
    }

    fn accept(&mut self) {
        loop {
            let sock = match rustix::net::accept_with(
                &self.listener,
                SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            ) {
                Ok(s) => s,
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    return;
                }
            };
            let cred = rustix::net::sockopt::socket_peercred(&sock).ok();
            let uid = cred.map_or(u32::MAX, |c| c.uid.as_raw());
            // The kernel's word, not the client's: a client that lies about its pid in
            // `Attach` changes nothing here.
            let in_process = cred.is_some_and(|c| {
                u32::try_from(c.pid.as_raw_nonzero().get()) == Ok(std::process::id())
            });
            let cfg = &self.state.cfg;
            let full = self.state.clients.live() >= cfg.max_clients as usize;
            if full || self.state.clients.of_user(uid) >= cfg.max_clients_per_user as usize {
                self.refused(uid, full);
                continue;
            }
            let raw = sock.as_raw_fd();
            let id = self.state.clients.insert(sock, uid, in_process);
            let token = Token(FIRST_CLIENT + id as usize);
            if let Err(e) = self
                .registry
                .register(&mut SourceFd(&raw), token, Interest::READABLE)
            {
                tracing::warn!(error = %e, "cannot watch client socket");
                self.state.clients.remove(id);
                continue;
            }
            // The client may have written before we registered (edge-triggered): read now.
            self.client_readable(id);
        }
    }

    /// A connection refused at accept: counted, and logged only now and then (a flood of
    /// connections must not become a flood of log lines).
    #[cold]
    fn refused(&mut self, uid: u32, all_full: bool) {
        let c = &mut self.state.counters.connections_refused;
        *c += 1;
        if c.is_power_of_two() {
            tracing::warn!(
                uid,
                refused = *c,
                why = if all_full {
                    "max_clients"
                } else {
                    "the user's share of max_clients"
                },
                "connection refused"
            );
        }
    }

    fn client_readable(&mut self, cid: u32) {
        loop {
            let Some(client) = self.state.clients.get_mut(cid) else {
                return;
            };
            let got = recv_with_fds(client.sock.as_fd(), &mut self.buf);
            let received = match got {
                Ok(r) => r,
                Err(FdPassError::Sys {
                    source: Errno::AGAIN,
                    ..
                }) => return,
                Err(FdPassError::Closed) => return self.drop_client(cid, "socket closed"),
                Err(e) => {
                    self.state.counters.bad_control += 1;
                    tracing::warn!(client = cid, error = %e, "bad control message");
                    return self.drop_client(cid, "bad control message");
                }
            };
            let (reply, fds) = match Request::decode(&self.buf[..received.len]) {
                Ok(
                    req @ (Request::Publish { .. }
                    | Request::Unpublish { .. }
                    | Request::Lookup { .. }
                    | Request::Ping { .. }
                    | Request::AmRegister { .. }
                    | Request::AmUnregister { .. }
                    | Request::AmTable { .. }
                    | Request::AmCall { .. }
                    | Request::AmReport { .. }
                    | Request::AmCounters),
                ) => {
                    let at = self.state.registry_place();
                    let remote = self.state.remote.as_mut();
                    match self.state.registry.client_request(cid, req, at, remote) {
                        Some(reply) => (reply, Vec::new()),
                        // Forwarded: the reply goes out when the registry node answers.
                        None => continue,
                    }
                }
                Ok(req) => self.state.handle(cid, req, received.fds),
                Err(e) => {
                    self.state.counters.bad_control += 1;
                    let code = hamlyn_wire::control::ControlErrorCode::BadRequest as u16;
                    (
                        Reply::Error {
                            code,
                            message: e.to_string(),
                        },
                        Vec::new(),
                    )
                }
            };
            let Some(client) = self.state.clients.get_mut(cid) else {
                return;
            };
            let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
            if let Err(e) = send_with_fds(client.sock.as_fd(), &reply.encode(), &borrowed) {
                tracing::warn!(client = cid, error = %e, "cannot reply");
                return self.drop_client(cid, "cannot reply");
            }
        }
    }

    /// A client is gone: its slots are destroyed (packets to them now fail with
    /// PeerDown), its termini unscheduled, its areas unmapped.
    fn drop_client(&mut self, cid: u32, why: &str) {
        let Some(client) = self.state.clients.remove(cid) else {
            return;
        };
        let _ = self
            .registry
            .deregister(&mut SourceFd(&client.sock.as_raw_fd()));
        let slots = self.state.delivery.bury_owner(cid);
        let at = self.state.registry_place();
        self.state
            .registry
            .forget_client(cid, at, self.state.remote.as_mut());
        if let Some(port) = &client.port {
            self.state.client_gone(port);
        }
        self.state.sched.remove_client(cid);
        self.state.hint_ports.remove(cid);
        let areas = self.state.delivery.areas.remove_owner(cid);
        if client.port.is_some() {
            if client.detached {
                self.state.counters.clients_detached += 1;
            } else {
                self.state.counters.clients_lost += 1;
            }
        }
        tracing::info!(
            client = cid,
            pid = client.pid,
            why,
            slots,
            areas,
            "client gone"
        );
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.state.cfg.socket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An idle engine with a spin of `turns` turns (and a time bound far off), its
    /// thread giving the engine up between idle turns or not, with one connected client
    /// that runs in another process or in this one (`foreign`).
    fn idle_engine(turns: u32, unheld: bool, foreign: bool) -> (Engine, Io) {
        let cfg = EngineConfig {
            spin_turns: turns,
            spin: Duration::from_secs(60),
            ..EngineConfig::embedded()
        };
        let (mut engine, io) = Engine::new(cfg, Arc::new(AtomicBool::new(false))).expect("engine");
        engine.set_spin_unheld(unheld);
        attach_client(&mut engine, !foreign);
        (engine, io)
    }

    /// A client attached to `engine` (its socket's other end closed at once), of the
    /// engine's own process or not.
    fn attach_client(engine: &mut Engine, own_process: bool) {
        let (a, _b) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .expect("socketpair");
        engine.state.clients.insert(a, 0, own_process);
    }

    /// A hand-back arms the hot ports' doorbells marked as handed back
    /// (`wake::HANDED_BACK`: a client of another process then gives the host's next wait
    /// a moment before it rings), and the next driven turn takes them back, mark and
    /// all; a ring taken in is counted.
    #[test]
    fn a_hand_back_marks_the_doorbells_it_arms_and_the_next_drive_takes_them_back() {
        let (mut engine, mut io) = idle_engine(8, true, true);
        let region =
            Arc::new(hamlyn_shm::region::ShmRegion::create("bell-test", 4096).expect("region"));
        engine.state.hint_ports.add(7, region.clone(), 8, 0);
        engine.state.hint_ports.opened(7, 0);
        let bell = || {
            region
                .atomic_u32(header::DOORBELL)
                .expect("doorbell")
                .load(Ordering::Relaxed)
        };
        engine.driven_step(false);
        assert_eq!(bell(), 0, "driven: not armed");
        assert!(
            !engine.hand_back(),
            "nothing to wake the engine's thread for"
        );
        assert_eq!(
            bell(),
            wake::EVENTFD_ARMED | wake::HANDED_BACK,
            "armed, handed back"
        );
        engine.driven_step(false);
        assert_eq!(bell(), 0, "the next drive took it back, mark and all");
        // A ring (what a push that found it armed does) is counted when the engine's
        // thread takes it in (here: it serves, and lets go for the driver at once).
        engine.hand_back();
        engine.state.doorbell_poker.notify().expect("ring");
        let before = engine.state.counters.doorbell_rings;
        let step = engine.serve(&mut io, &|| true).expect("serve");
        assert!(matches!(step, Step::Sleep(_)), "{step:?}");
        assert_eq!(engine.state.counters.doorbell_rings, before + 1);
    }

    /// A waiting thread's tries at a quiet engine are glances, with a turn after every
    /// [`QUIET_GLANCES`] (what only a turn looks at: the sweep, the cold ports); anything
    /// a turn would act on (here: a wider look asked for, a request held for room) makes
    /// the next try a turn at once.
    #[test]
    fn a_quiet_engine_is_glanced_at_and_still_turned_every_few_tries() {
        let (mut engine, _io) = idle_engine(8, true, true);
        let steps: Vec<_> = (0..12).map(|_| engine.driven_step(false)).collect();
        let turns = steps.iter().filter(|s| **s == crate::Drove::Idle).count();
        assert_eq!(
            turns,
            12 / (QUIET_GLANCES as usize + 1),
            "a turn every {} tries: {steps:?}",
            QUIET_GLANCES + 1
        );
        assert!(steps.iter().all(|s| *s != crate::Drove::Work), "{steps:?}");
        let glances = steps.iter().filter(|s| **s == crate::Drove::Glance).count();
        assert_eq!(glances, 12 - turns);
        assert!(
            steps
                .windows(QUIET_GLANCES as usize + 1)
                .all(|w| w.contains(&crate::Drove::Idle)),
            "never more than {QUIET_GLANCES} glances in a row: {steps:?}"
        );
        // Each thing a turn would act on makes the next try a turn.
        for ask in [
            |e: &mut Engine| e.state.read_all_hints = true,
            |e: &mut Engine| e.state.held_for_room = true,
            |e: &mut Engine| e.state.look_at_all = true,
        ] {
            while engine.driven_step(false) != crate::Drove::Glance {}
            ask(&mut engine);
            assert!(!engine.state.quiet());
            assert_eq!(engine.driven_step(false), crate::Drove::Idle);
        }
    }

    /// A drivable engine's thread returns after each idle turn of its spin (so that it
    /// does not hold the engine between them), and the spin resumes where it was: as
    /// many idle turns in all before the sleep as an engine that holds itself throughout.
    #[test]
    fn an_unheld_spin_returns_between_idle_turns_and_resumes() {
        let (mut engine, mut io) = idle_engine(5, true, true);
        let mut spins = 0;
        loop {
            match engine.serve(&mut io, &|| false).expect("serve") {
                Step::Spin => spins += 1,
                Step::Sleep(_) => break,
                Step::Stop => panic!("stopped"),
            }
            assert!(spins < 100, "the spin never ended");
        }
        // Idle turns 1-4 spin; the fifth reaches `spin_turns` and sleeps.
        assert_eq!(spins, 4);
        assert_eq!(engine.state.counters.sleeps, 1);
    }

    /// A drivable engine whose clients all run in its process does not spin at all: their
    /// threads drive it; its thread sleeps as soon as it is idle.
    #[test]
    fn a_drivable_engine_with_only_its_own_process_as_client_sleeps_at_once() {
        let (mut engine, mut io) = idle_engine(1000, true, false);
        assert!(matches!(
            engine.serve(&mut io, &|| false).expect("serve"),
            Step::Sleep(_)
        ));
        assert_eq!(engine.state.counters.sleeps, 1);
    }

    /// An engine nobody else drives (a daemon) spins within one serve and then sleeps,
    /// for a client of its own process too.
    #[test]
    fn a_held_spin_runs_within_one_serve() {
        let (mut engine, mut io) = idle_engine(5, false, false);
        assert!(matches!(
            engine.serve(&mut io, &|| false).expect("serve"),
            Step::Sleep(_)
        ));
        assert_eq!(engine.state.counters.sleeps, 1);
    }

    /// The engine's thread lets go for waiting threads that drive with a first sleep of
    /// [`DRIVER_STALL`] (a driver that stops at once is found within it), and once a look
    /// found them running turns it sleeps [`DRIVER_LOOK_MOST`] between looks (each look
    /// takes a waiter's CPU on a small machine). A look that finds no turn since the one
    /// before serves anyway, and the next let-go starts again at [`DRIVER_STALL`].
    #[test]
    fn the_engine_thread_looks_at_drivers_that_keep_turning_less_often() {
        let (mut engine, mut io) = idle_engine(1000, true, false);
        let let_go =
            |engine: &mut Engine, io: &mut Io| match engine.serve(io, &|| true).expect("serve") {
                Step::Sleep(d) => d,
                other => panic!("let go for the drivers, not {other:?}"),
            };
        assert_eq!(let_go(&mut engine, &mut io), DRIVER_STALL);
        for _ in 0..3 {
            engine.driven_step(false);
            engine.after_sleep(&mut io);
            assert_eq!(let_go(&mut engine, &mut io), DRIVER_LOOK_MOST);
        }
        // What the engine's thread sleeps between tries at a word a driver holds.
        assert_eq!(engine.driver_look(), DRIVER_LOOK_MOST);
        // No turn since the last look: a stall, served; then a first let-go again.
        engine.after_sleep(&mut io);
        assert_eq!(engine.stalled_drivers, 1);
        assert!(matches!(
            engine.serve(&mut io, &|| true).expect("serve"),
            Step::Sleep(_)
        ));
        assert!(!engine.gone_for_driver, "served for the stalled drivers");
        assert_eq!(
            engine.driver_look(),
            DRIVER_STALL,
            "not let go since it served"
        );
        assert_eq!(let_go(&mut engine, &mut io), DRIVER_STALL);
    }

    /// A waiting thread that comes during an unheld spin is seen on the next serve: the
    /// engine's thread lets go for it.
    #[test]
    fn a_driver_that_comes_during_an_unheld_spin_is_let_in() {
        let (mut engine, mut io) = idle_engine(1000, true, true);
        assert_eq!(engine.serve(&mut io, &|| false).expect("serve"), Step::Spin);
        assert!(matches!(
            engine.serve(&mut io, &|| true).expect("serve"),
            Step::Sleep(_)
        ));
        assert_eq!(engine.let_go, 1);
        assert_eq!(
            engine.state.counters.sleeps, 0,
            "a let-go, not an idle sleep"
        );
    }

    /// A fabric for the tests below: from its peer node 1 the test sends packets (each
    /// poll delivers those `released` so far: writes to a slot that does not exist, which
    /// the engine refuses and NACKs, as it would a stranger's), and its next timer is
    /// `at` (`u64::MAX`: none due).
    struct TestFabric {
        wakes: std::os::unix::net::UnixStream,
        /// The other end of `wakes`, kept open (closed, `wakes` would read as ready).
        _peer_end: std::os::unix::net::UnixStream,
        at: Arc<hamlyn_shm::sync::AtomicU64>,
        released: Arc<hamlyn_shm::sync::AtomicU64>,
        delivered: u64,
    }

    /// The handles a test keeps of its [`TestFabric`]: the next timer and the packets
    /// released.
    #[derive(Clone, Default)]
    struct FabricKnobs {
        at: Arc<hamlyn_shm::sync::AtomicU64>,
        released: Arc<hamlyn_shm::sync::AtomicU64>,
    }

    impl TestFabric {
        /// A fabric with no packet released and no timer due, and its knobs.
        fn new() -> (TestFabric, FabricKnobs) {
            let knobs = FabricKnobs::default();
            knobs.at.store(u64::MAX, Ordering::Relaxed);
            let (wakes, peer_end) = std::os::unix::net::UnixStream::pair().expect("socketpair");
            let fabric = TestFabric {
                wakes,
                _peer_end: peer_end,
                at: knobs.at.clone(),
                released: knobs.released.clone(),
                delivered: 0,
            };
            (fabric, knobs)
        }
    }

    impl Fabric for TestFabric {
        fn local(&self) -> hamlyn_wire::NodeId {
            hamlyn_wire::NodeId(0)
        }
        fn send(
            &mut self,
            _now: Instant,
            _header: &hamlyn_wire::Header,
            _meta: &[u8],
            _payload: &[hamlyn_shm::bytes::SharedBytes<'_>],
        ) -> Result<(), hamlyn_fabric::FabricError> {
            Ok(())
        }
        fn poll(
            &mut self,
            _now: Instant,
            sink: &mut dyn hamlyn_fabric::PacketSink,
            budget: usize,
        ) -> Result<usize, hamlyn_fabric::FabricError> {
            let mut n = 0;
            while n < budget && self.delivered < self.released.load(Ordering::Relaxed) {
                let mut h = hamlyn_wire::Header::new(hamlyn_wire::Op::Write);
                h.src = hamlyn_wire::NodeId(1);
                h.dst = hamlyn_wire::NodeId(0);
                h.slot = hamlyn_wire::SlotId(99);
                let landing = sink.on_header(h.src, &h, &[]);
                assert!(
                    matches!(landing, hamlyn_fabric::Landing::Discard),
                    "a write to no slot is refused"
                );
                self.delivered += 1;
                n += 1;
            }
            Ok(n)
        }
        fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
            Some(self.wakes.as_fd())
        }
        fn next_timer(&self) -> Option<Instant> {
            Some(Instant(self.at.load(Ordering::Relaxed)))
        }
    }

    /// An engine on a [`TestFabric`] whose threads may drive it, with one client of its
    /// own process (which drives, so never needs the spin), spinning at most `turns`
    /// idle turns; and the count of packets the test has released.
    fn peer_engine(turns: u32) -> (Engine, Io, Arc<hamlyn_shm::sync::AtomicU64>) {
        let (fabric, knobs) = TestFabric::new();
        let released = knobs.released;
        let cfg = EngineConfig {
            spin_turns: turns,
            spin: Duration::from_secs(60),
            ..EngineConfig::embedded()
        };
        let (mut engine, io) = Engine::with_fabric(
            cfg,
            Arc::new(AtomicBool::new(false)),
            Some(Box::new(fabric)),
        )
        .expect("engine");
        engine.set_spin_unheld(true);
        attach_client(&mut engine, true);
        (engine, io, released)
    }

    /// Serves until the engine thread sleeps: the idle turns it spun through first.
    fn spins_before_sleep(engine: &mut Engine, io: &mut Io) -> u32 {
        let mut spins = 0;
        loop {
            match engine.serve(io, &|| false).expect("serve") {
                Step::Spin => spins += 1,
                Step::Sleep(_) => return spins,
                Step::Stop => panic!("stopped"),
            }
            assert!(spins < 1000, "the spin never ended");
        }
    }

    /// A drivable engine whose only client drives it sleeps at once, unless its own
    /// thread served other nodes' packets since it last went idle, lately: then it spins
    /// before it sleeps (the next request to a passive target finds it awake). Not when a
    /// waiting thread took the packets in (it is about), not after an idle spell with no
    /// packet, and not when the packets came after a gap longer than the spin.
    #[test]
    fn the_engine_thread_spins_after_serving_other_nodes_itself() {
        let (mut engine, mut io, released) = peer_engine(6);
        let relaxed = Ordering::Relaxed;
        assert_eq!(spins_before_sleep(&mut engine, &mut io), 0, "nothing came");
        // A packet served by this thread: a spin of the whole budget (idle turns 1-5),
        // then the sleep.
        released.store(1, relaxed);
        assert_eq!(spins_before_sleep(&mut engine, &mut io), 5, "served a peer");
        assert_eq!(engine.state.fabric_packets_in(), 1);
        // Woken with nothing new: it sleeps at once.
        assert_eq!(
            spins_before_sleep(&mut engine, &mut io),
            0,
            "no packet since"
        );
        // Again and again while packets come.
        for n in 2..5 {
            released.store(n, relaxed);
            assert_eq!(spins_before_sleep(&mut engine, &mut io), 5, "packet {n}");
        }
        // A waiting thread's turn takes the next packet in: somebody here waits, no spin.
        released.store(5, relaxed);
        while engine.driven_step(false) != crate::Drove::Work {}
        assert_eq!(engine.state.fabric_packets_in(), 5);
        assert_eq!(
            spins_before_sleep(&mut engine, &mut io),
            0,
            "a waiter drove"
        );
        // A packet after a gap longer than the spin: it sleeps at once.
        engine.went_idle_at -= Duration::from_secs(61);
        released.store(6, relaxed);
        assert_eq!(
            spins_before_sleep(&mut engine, &mut io),
            0,
            "after a long gap"
        );
        assert_eq!(engine.state.fabric_packets_in(), 6);
        // The spin for peers is the engine thread's own: a driver is never spun for.
        assert!(!engine.spins_for_clients());
    }

    /// The engine's thread sleeps until its fabric's next timer; a waiting thread that
    /// hands the engine back wakes it only for a timer that comes sooner than that
    /// sleep's end, never for the one it sleeps for. The sleep's end and the hand-back's
    /// deadline are each one reading of the clock plus a length from that reading: with
    /// two readings each, the same timer came out sooner than itself by the jitter
    /// between them, and a stream's hand-backs woke the engine's thread for nothing
    /// (one in ten, nine in ten once the hand-back took one reading for both; TCP 8 B
    /// message rate 1.0 -> 0.6 M/s, 2026-11-26). Fails if the sleep's end is taken from
    /// a later reading than its length (a hand-back's deadline from a later reading only
    /// errs the other way, towards not waking). The timer is seconds away, so that a
    /// test thread off its CPU for a while still finds it ahead.
    #[test]
    fn a_hand_back_wakes_the_engine_thread_only_for_a_sooner_timer() {
        let (fabric, knobs) = TestFabric::new();
        let at = knobs.at;
        let cfg = EngineConfig {
            spin_turns: 1,
            max_sleep: Duration::from_secs(100),
            ..EngineConfig::embedded()
        };
        let (mut engine, mut io) = Engine::with_fabric(
            cfg,
            Arc::new(AtomicBool::new(false)),
            Some(Box::new(fabric)),
        )
        .expect("engine");
        let relaxed = Ordering::Relaxed;
        // The fabric's timer 10 s on: the engine's thread sleeps until then.
        let timer = engine.state.now().plus_nanos(10_000_000_000);
        at.store(timer.0, relaxed);
        let sleep = loop {
            match engine.serve(&mut io, &|| false).expect("serve") {
                Step::Sleep(d) => break d,
                Step::Spin => {}
                Step::Stop => panic!("stopped"),
            }
        };
        assert!(
            sleep > Duration::from_secs(9) && sleep <= Duration::from_secs(10),
            "a sleep until the timer: {sleep:?}"
        );
        // Waiting threads drive and hand back, the timer unchanged: never a wake-up.
        for i in 0..200 {
            engine.driven_step(false);
            assert!(
                !engine.hand_back(),
                "hand-back {i} woke the thread for its own timer"
            );
        }
        // A timer sooner than the sleep's end wakes it; a later one does not.
        at.store(timer.0 - 1_000_000, relaxed);
        engine.driven_step(false);
        assert!(engine.hand_back(), "a timer a millisecond sooner");
        at.store(timer.0 + 1_000_000, relaxed);
        engine.driven_step(false);
        assert!(!engine.hand_back(), "a timer a millisecond later");
    }
}
