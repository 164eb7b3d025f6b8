//! [`Node`]: one control connection to an engine and the port it gave us.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hamlyn_engine::Drove;
use hamlyn_shm::port::{PortLayout, MAX_QUEUES, MAX_TERMINI};
use hamlyn_shm::region::ShmRegion;
use hamlyn_shm::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use hamlyn_shm::wake::EventFd;
use hamlyn_wire::control::{Reply, Request, CONTROL_VERSION};
use hamlyn_wire::{NodeId, Ticket, TicketFlags};

use crate::area::{Area, MetaArea};
use crate::completion::Errors;
use crate::control::Control;
use crate::direct::DirectTarget;
use crate::embedded::EngineGuard;
use crate::error::Error;
use crate::queue::NotifyQueue;
use crate::slot::SlotBuilder;
use crate::terminus::Terminus;

/// The control socket [`Node::connect_default`] connects to when [`SOCKET_ENV`] is not
/// set: the one the node daemon (`hamlyn node`) binds by default.
pub const DEFAULT_SOCKET: &str = "/tmp/hamlyn.sock";

/// The environment variable naming the engine's control socket: it overrides
/// [`DEFAULT_SOCKET`] for [`Node::connect_default`] and for every `hamlyn` command.
pub const SOCKET_ENV: &str = "HAMLYN_SOCKET";

/// How a [`Node`] asks for its port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeOptions {
    /// Termini in the port (1..=256): how many [`Terminus`] handles can exist at once.
    pub termini: u16,
    /// Notification queues in the port (1..=64).
    pub queues: u16,
    /// Entries per notification queue (a power of two, 64..=65536).
    pub queue_cap: u32,
    /// Polls a waiter spins through before it sleeps on a futex. Each poll includes a CPU
    /// pause (tens of nanoseconds), so the default (200) spins for roughly 10 µs: long
    /// enough to catch a prompt reply, short enough not to starve the engine of a core on
    /// a small machine. Raise it only when every spinning thread has a core to itself.
    /// A notification queue's wait starts from this and spins up to
    /// [`crate::SPIN_REACH`] while notifications come soon after its waits start
    /// ([`crate::NotifyQueue::wait`]; [`crate::ADAPTIVE_SPIN_ENV`] `=0` keeps it at
    /// this), and so does a terminus's wait for room where it cannot drive the engine
    /// ([`crate::Terminus::wait_room`]).
    pub spin: u32,
    /// Longest wait for a control reply; a slower engine breaks the connection
    /// ([`Error::ControlTimeout`]). Zero: wait forever.
    pub control_timeout: Duration,
}

impl Default for NodeOptions {
    fn default() -> NodeOptions {
        NodeOptions {
            termini: 4,
            queues: 4,
            queue_cap: 1024,
            spin: 200,
            control_timeout: Duration::from_secs(10),
        }
    }
}

/// Distinguishes node handles, so that an area of one is never sent through another.
static INSTANCES: AtomicU64 = AtomicU64::new(1);

/// Which termini of the port are handed out, and the priority each was opened at (the
/// engine serves a terminus from its first `OpenTerminus` on, at that priority).
#[derive(Debug)]
pub(crate) struct TerminusSlots {
    in_use: Vec<bool>,
    opened: Vec<Option<u8>>,
    /// A rate limit was set on the terminus (lifted before the index is handed out again).
    rated: Vec<bool>,
}

/// Everything the handles of one node share. Field order is drop order: the engine (if
/// embedded) goes last, after our end of the connection and the port.
pub(crate) struct Shared {
    /// This handle's instance number.
    pub(crate) instance: u64,
    /// The control connection (slow path only).
    control: Mutex<Control>,
    /// The port.
    pub(crate) port: Arc<ShmRegion>,
    /// The port's queue file: its notification queues.
    pub(crate) queue_file: Arc<ShmRegion>,
    /// Where everything in the port is.
    pub(crate) layout: PortLayout,
    /// The port's event descriptor (our end of a socket pair the engine pokes): readable
    /// when an armed queue has work, or for good once the engine is gone.
    pub(crate) port_event: EventFd,
    /// The engine's doorbell, written when the engine sleeps.
    pub(crate) doorbell: EventFd,
    /// The error ring and the failures read from it.
    pub(crate) errors: Errors,
    /// Our client id on the engine.
    pub(crate) client: u32,
    /// The engine's node.
    pub(crate) node: NodeId,
    /// The engine's incarnation.
    pub(crate) incarnation: u32,
    /// Termini handed out.
    pub(crate) termini: Mutex<TerminusSlots>,
    /// Bit `i`: queue `i`'s consumer is handed out.
    pub(crate) queues_taken: AtomicU64,
    /// The options the node was made with.
    pub(crate) options: NodeOptions,
    /// The engine's control socket.
    socket: PathBuf,
    /// A duplicate of the control connection, only ever polled for a hang-up (without
    /// the control lock): how waiters learn that the engine is gone.
    watch: OwnedFd,
    /// The engine was found gone (latched).
    gone: AtomicBool,
    /// The engine, if this process hosts it and lets its waiting threads run its turns
    /// (progress by the waiting thread, [`Shared::drive_until`]).
    driver: Option<hamlyn_engine::Driver>,
    /// The embedded engine, if this node started one.
    _engine: Option<EngineGuard>,
}

impl std::fmt::Debug for Shared {
    /// A summary of the node: not its buffers, rings or tables.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("node", &self.node)
            .field("incarnation", &self.incarnation)
            .field("client", &self.client)
            .field("socket", &self.socket)
            .field("embedded", &self._engine.is_some())
            .field("driven_by_waiters", &self.driver.is_some())
            .field("termini", &self.layout.geometry.termini)
            .field("queues", &self.layout.geometry.queues)
            .finish_non_exhaustive()
    }
}

impl Drop for Shared {
    /// Says goodbye before the connection closes, so the engine counts a clean exit as
    /// detached, not lost (a failure changes nothing: the connection closes anyway).
    fn drop(&mut self) {
        let control = self.control.get_mut().unwrap_or_else(|e| e.into_inner());
        let _ = control.call_ok(&Request::Detach);
    }
}

/// Idle turns of a driving waiter between two yields of its CPU ([`Shared::drive_until`]).
/// What it waits for needs another thread to act (a peer that is to answer), and on a
/// machine with few cores that thread may be waiting for this one's: a mediated 8-byte
/// ping-pong between two processes that the scheduler had put on one core of two ran
/// 6.2 µs one-way with a yield every 32 idle turns, 18-27 µs with none, and mostly
/// 0.55-0.6 µs with one every 8. A yield costs about 0.5 µs when nobody else wants the
/// core (a virtual machine's system call); more often (every 2) slowed a direct
/// receiver's median from 0.28 to 0.6 µs.
const YIELD_EVERY_IDLE: u32 = 8;

/// Idle turns of a drive before its first yield ([`YIELD_EVERY_IDLE`]): about 2.5 µs,
/// within which a peer on another core usually answers. Yielding from the first idle
/// turn, a direct receiver (which drives while a client of another process is
/// attached) measured p50 0.52 µs, p90 up to 12.7; with this, 0.27 and 0.39-0.49, and
/// the mediated ping-pong as before.
const TIGHT_IDLE_TURNS: u32 = 32;

/// How long a client of another process waits, after a push that found the engine's
/// doorbell armed by a hand-back of a thread of the host, for that thread's next wait to
/// take the engine back (and the push with it) before it rings
/// (`hamlyn_shm::wake::wake_after_fence_with_grace`): the host answers and waits again
/// within a microsecond or so; a ring costs a system call here and a wake-up of the
/// engine's thread on the host's core. If the host does not come back, the push pays
/// this on top of the ring.
pub(crate) const RING_GRACE: Duration = Duration::from_micros(2);

/// How long a waiter sleeps before it looks whether the engine is still there.
const GONE_CHECK: Duration = Duration::from_millis(100);

impl Shared {
    /// Waits by calling `once(spin, slice)` — spin `spin` times, then sleep at most
    /// `slice` — until it yields a value or `timeout` passes (`Ok(None)`); between slices
    /// it looks whether the engine is gone (`Err(EngineGone)`): a wait never outlives its
    /// engine by more than a slice. Only the first slice spins.
    pub(crate) fn wait_sliced<T>(
        &self,
        spin: u32,
        timeout: Option<Duration>,
        mut once: impl FnMut(u32, Duration) -> Result<Option<T>, Error>,
    ) -> Result<Option<T>, Error> {
        let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        let mut spin = spin;
        loop {
            let slice = match deadline {
                None => GONE_CHECK,
                Some(d) => d
                    .saturating_duration_since(std::time::Instant::now())
                    .min(GONE_CHECK),
            };
            if let Some(v) = once(spin, slice)? {
                return Ok(Some(v));
            }
            spin = 0;
            if self.engine_gone() {
                return Err(Error::EngineGone);
            }
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Ok(None);
            }
        }
    }

    /// Progress by the waiting thread: if this process hosts the engine and lets its
    /// waiting threads drive it ([`hamlyn_engine::Driver`]), runs the engine's turns
    /// while `got()` yields nothing, the engine's own thread asleep meanwhile (it takes
    /// over if work is left when this returns). At most `turns` tries (ten times as many
    /// with a fabric, [`hamlyn_engine::Driving::turn_budget`]); and without a fabric it
    /// stops as soon as the engine has nothing in flight ([`hamlyn_engine::Driving::idle_turns_before_leave`]
    /// turns in a row without work): what the caller waits for then needs another thread
    /// to act, and that thread drives its own request ([`Shared::nudge`]), so staying
    /// would only take a core from it — unless that thread may be in another process,
    /// which cannot drive (a client of another process is attached,
    /// [`hamlyn_engine::Driving::stays_when_idle`]): then it drives on for its budget.
    /// Turns without work give the CPU up every [`YIELD_EVERY_IDLE`]-th after the first
    /// [`TIGHT_IDLE_TURNS`] (to the thread that is to act, if it waits for this core). A
    /// turn that another thread holds is not retried: that thread sees the same work. While it drives, data from other nodes does not
    /// wake the engine's thread ([`hamlyn_engine::Driver::drive_waiting`]): these turns
    /// poll the fabric. `arrival`: what the caller waits for may come from another node
    /// (a notification), not only from the engine's own work (room in a ring, a send's
    /// completion): the turns then read the fabric's connections directly
    /// ([`hamlyn_engine::Driving::awaiting_arrival`]).
    ///
    /// `Err(polls)` if `got()` never yielded: the caller then waits its usual way,
    /// `polls` spins on its own word (the whole budget, unless the drive used it up
    /// turning) and a futex sleep. Also `Err` at once if the engine is elsewhere (a
    /// daemon, another process).
    pub(crate) fn drive_until<T>(
        &self,
        turns: u32,
        timeout: Option<Duration>,
        arrival: bool,
        mut got: impl FnMut() -> Option<T>,
    ) -> Result<T, u32> {
        if timeout == Some(Duration::ZERO) {
            return Err(turns);
        }
        let Some(mut driving) = self.driver.as_ref().and_then(|d| d.drive_waiting()) else {
            return Err(turns);
        };
        if arrival {
            driving.awaiting_arrival();
        }
        // Counted in half turns: a glance (`Drove::Glance`, the engine quiet) costs
        // about half an idle turn, and the budget, the leave and the yields below were
        // set in turns of time.
        let idle_limit = u64::from(driving.idle_turns_before_leave()) * 2;
        let first_yield = u64::from(TIGHT_IDLE_TURNS + YIELD_EVERY_IDLE) * 2;
        let mut left = u64::from(driving.turn_budget(turns)) * 2;
        let mut idle = 0u64;
        let mut next_yield = first_yield;
        while left > 0 {
            if let Some(v) = got() {
                return Ok(v);
            }
            let cost = match driving.try_step() {
                Some(Drove::Work) => {
                    idle = 0;
                    next_yield = first_yield;
                    2
                }
                Some(step) => {
                    let cost = if step == Drove::Glance { 1 } else { 2 };
                    idle += cost;
                    if idle >= idle_limit {
                        drop(driving);
                        return got().ok_or(turns);
                    }
                    if idle >= next_yield {
                        next_yield += u64::from(YIELD_EVERY_IDLE) * 2;
                        std::thread::yield_now();
                    }
                    cost
                }
                // Another thread runs the turn: look at ours again after a pause (or,
                // if the engine's thread holds it on this CPU, after it has run).
                None => {
                    driving.wait_held();
                    2
                }
            };
            left = left.saturating_sub(cost);
        }
        // Nothing came within the budget: the caller goes to sleep, and nobody may be
        // left to poll the fabric.
        driving.end_lease();
        drop(driving);
        got().ok_or(0)
    }

    /// A request was just pushed (`word`: the port's doorbell word): wakes the engine if
    /// it sleeps — or, if this process hosts it and lets its threads drive, runs the
    /// turn that takes the request in here ([`hamlyn_engine::Driver::nudge`]), so the
    /// engine's thread need not wake (the hand-back that follows rings it only if work
    /// is left). Never a system call while the engine is awake or driven, but for the
    /// first push on a cold port (idle for 2 ms and 1,024 turns, `hamlyn_shm::ready::COLD`),
    /// which rings once.
    ///
    /// `ready`: the port's ready word for the terminus pushed to and its bit, set here
    /// (on the doorbell's cache line, which the look at the doorbell reads anyway) so
    /// the engine looks at that terminus next turn instead of finding it in a walk of
    /// every ring ([`hamlyn_shm::ready`]).
    #[inline]
    pub(crate) fn after_push(&self, word: &AtomicU32, ready: Option<(&AtomicU64, u64)>) {
        if let Some((w, bit)) = ready {
            hamlyn_shm::ready::announce(w, bit);
        }
        // F2 (`wake::publish_fence`): orders the push and the hint before the read of the
        // doorbell below; pairs with F1 (the engine arming it before a sleep).
        hamlyn_shm::wake::publish_fence();
        match &self.driver {
            Some(driver) => {
                // A cold port's words are read now and then only: the nudge's turn is
                // told to read every port's (`hamlyn_shm::ready::COLD`).
                // Under a lease (`Driver::leased`) the engine's thread sleeps for the
                // process's waiters and nothing rings for a push: it runs its turn.
                if (hamlyn_shm::wake::asleep_after_fence(word) || driver.leased())
                    && !driver.nudge(hamlyn_shm::ready::cold_after_fence(word))
                {
                    hamlyn_shm::wake::wake_after_fence(word, Some(&self.doorbell));
                }
            }
            // A client of another process (or of a daemon): it cannot drive, it rings;
            // but a doorbell that a thread of the host armed handing the engine back is
            // given a moment to be disarmed by that thread's next wait first
            // (`hamlyn_shm::wake::HANDED_BACK`).
            None => {
                hamlyn_shm::wake::wake_after_fence_with_grace(
                    word,
                    Some(&self.doorbell),
                    RING_GRACE,
                );
            }
        }
    }

    /// Whether the engine is gone: latched once seen; otherwise one zero-timeout poll of
    /// the control connection for a hang-up (never called on a fast path: waits ask
    /// between sleeps).
    pub(crate) fn engine_gone(&self) -> bool {
        // Relaxed: a latch read by this process only; the poll below is the real check.
        if self.gone.load(Ordering::Relaxed) {
            return true;
        }
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&self.watch, PollFlags::RDHUP)];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let hung_up = matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
            && fds[0]
                .revents()
                .intersects(PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR);
        if hung_up {
            self.mark_gone();
        }
        hung_up
    }

    /// Latches that the engine is gone.
    pub(crate) fn mark_gone(&self) {
        // Relaxed: see `engine_gone`.
        self.gone.store(true, Ordering::Relaxed);
    }

    /// Whether the engine was already found gone (one load: for fast paths).
    #[inline]
    pub(crate) fn known_gone(&self) -> bool {
        // Relaxed: see `engine_gone`.
        self.gone.load(Ordering::Relaxed)
    }

    /// The control connection; a panic in another thread while it held the lock does not
    /// make it unusable (every call leaves it consistent or marks it broken).
    pub(crate) fn control(&self) -> MutexGuard<'_, Control> {
        self.control.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn termini(&self) -> MutexGuard<'_, TerminusSlots> {
        self.termini.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives terminus `index` back (its handle was dropped).
    pub(crate) fn release_terminus(&self, index: u16) {
        if let Some(u) = self.termini().in_use.get_mut(usize::from(index)) {
            *u = false;
        }
    }

    /// Gives queue `index` back.
    pub(crate) fn release_queue(&self, index: u16) {
        // AcqRel: pairs with the `fetch_or` in `Node::queue`: the next handle of this
        // queue sees everything the dropped one did to the queue.
        self.queues_taken
            .fetch_and(!(1u64 << index), Ordering::AcqRel);
    }
}

/// A connection to an engine: one control socket and one port.
///
/// `Node` is `Send` and `Sync`; the handles it makes ([`Area`], [`crate::Slot`],
/// [`Terminus`], [`NotifyQueue`]) keep the connection alive, so the node may be dropped
/// before them. When the last handle goes, the connection closes and the engine frees
/// everything the client made.
#[derive(Clone)]
#[must_use = "dropping the last handle of a Node closes its connection (and stops an \
              embedded engine)"]
pub struct Node {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.fmt(f)
    }
}

impl Node {
    /// Connects to the node's engine (the `hamlyn node` daemon) at the path in
    /// `$HAMLYN_SOCKET` ([`SOCKET_ENV`]), else at [`DEFAULT_SOCKET`], with default
    /// [`NodeOptions`]: what every `hamlyn` command does without `--socket`.
    pub fn connect_default() -> Result<Node, Error> {
        Node::connect(default_socket_path())
    }

    /// Connects to the engine listening at `path` with default [`NodeOptions`].
    pub fn connect(path: impl AsRef<Path>) -> Result<Node, Error> {
        Node::connect_with(path, NodeOptions::default())
    }

    /// Connects to the engine listening at `path`.
    pub fn connect_with(path: impl AsRef<Path>, options: NodeOptions) -> Result<Node, Error> {
        let path = path.as_ref();
        let control = Control::connect(path, options.control_timeout)?;
        Node::attach(control, path.to_path_buf(), options, None)
    }

    /// Starts an engine thread inside this process and connects to it, with default
    /// [`NodeOptions`]. The engine stops when the node and every handle it made are gone.
    pub fn embedded() -> Result<Node, Error> {
        Node::embedded_with(NodeOptions::default())
    }

    /// [`Node::embedded`] with options.
    pub fn embedded_with(options: NodeOptions) -> Result<Node, Error> {
        let (guard, path) = EngineGuard::start()?;
        let control = Control::connect(&path, options.control_timeout)?;
        Node::attach(control, path, options, Some(guard))
    }

    /// Attaches over a connected control socket.
    pub(crate) fn attach(
        mut control: Control,
        socket: PathBuf,
        options: NodeOptions,
        engine: Option<EngineGuard>,
    ) -> Result<Node, Error> {
        if options.termini == 0 || options.termini > MAX_TERMINI {
            return Err(Error::InvalidArgument("termini must be in 1..=256"));
        }
        if options.queues == 0 || options.queues > MAX_QUEUES {
            return Err(Error::InvalidArgument("queues must be in 1..=64"));
        }
        let req = Request::Attach {
            version: CONTROL_VERSION,
            pid: std::process::id(),
            termini: options.termini,
            queues: options.queues,
            queue_cap: options.queue_cap,
        };
        let (reply, fds) = control.call(&req, &[])?;
        let Reply::Attached {
            client,
            node,
            incarnation,
            port_len,
        } = reply
        else {
            return Err(control.violation("expected Attached"));
        };
        let Ok::<[OwnedFd; 4], _>([port_fd, queue_fd, event_fd, doorbell_fd]) = fds.try_into()
        else {
            return Err(control.violation("Attached must carry exactly 4 descriptors"));
        };
        let port_len = usize::try_from(port_len).map_err(|_| control.violation("port length"))?;
        let port = Arc::new(ShmRegion::from_fd(port_fd, port_len)?);
        let layout = PortLayout::read_header(&*port)?;
        let queue_file = Arc::new(ShmRegion::from_fd(queue_fd, layout.queue_total)?);
        // Every request and notification reaches a new part of these: faulted in now,
        // not one page per 16 requests or 128 notifications on the way.
        port.fault_in();
        queue_file.fault_in();
        let g = layout.geometry;
        if g.termini != options.termini || g.queues != options.queues {
            return Err(control.violation("port geometry differs from the one asked for"));
        }
        let errors = Errors::attach(port.clone(), layout.errors, g.termini)?;
        let watch = control.watch()?;
        let shared = Shared {
            instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
            control: Mutex::new(control),
            errors,
            port,
            queue_file,
            layout,
            port_event: EventFd::from_fd(event_fd),
            doorbell: EventFd::from_fd(doorbell_fd),
            client,
            node: NodeId(node),
            incarnation,
            termini: Mutex::new(TerminusSlots {
                in_use: vec![false; usize::from(g.termini)],
                opened: vec![None; usize::from(g.termini)],
                rated: vec![false; usize::from(g.termini)],
            }),
            queues_taken: AtomicU64::new(0),
            options,
            driver: hamlyn_engine::Driver::for_socket(&socket),
            socket,
            watch,
            gone: AtomicBool::new(false),
            _engine: engine,
        };
        Ok(Node {
            shared: Arc::new(shared),
        })
    }

    /// The engine's node id (what tickets to this node's slots name).
    pub fn id(&self) -> NodeId {
        self.shared.node
    }

    /// The engine's incarnation (tickets carry it; a restarted engine has a new one).
    pub fn incarnation(&self) -> u32 {
        self.shared.incarnation
    }

    /// Our client id on the engine.
    pub fn client_id(&self) -> u32 {
        self.shared.client
    }

    /// The engine's control socket: other processes (or other `Node`s of this one) can
    /// [`Node::connect`] to it, to an embedded engine too, for as long as it runs.
    pub fn socket_path(&self) -> &Path {
        &self.shared.socket
    }

    /// The options the node was made with.
    pub fn options(&self) -> &NodeOptions {
        &self.shared.options
    }

    /// Creates and registers an area of `len` bytes (zero-filled shared memory).
    pub fn area(&self, len: u64) -> Result<Area, Error> {
        Area::register(&self.shared, len)
    }

    /// Creates and registers a metadata area of `count` 128-byte entries, all zero (so a
    /// paranoid_one_shot entry starts disarmed).
    pub fn meta_area(&self, count: u32) -> Result<MetaArea, Error> {
        let len = u64::from(count) * hamlyn_wire::META_ENTRY_LEN as u64;
        let area = self.area(len)?;
        // Its entries are written as messages complete: faulted in now, not on the way.
        area.inner.region.fault_in();
        MetaArea::new(&area, 0, count)
    }

    /// Starts building a slot over `area` (by default: all of it, normal mode, writes
    /// only, no notification queue).
    pub fn slot<'a>(&self, area: &'a Area) -> SlotBuilder<'a> {
        SlotBuilder::new(self.shared.clone(), area)
    }

    /// Starts building a receive endpoint of `buffers` buffers of `buf_size` bytes (a
    /// multiple of 64, at most 64 KiB): [`EndpointBuilder::create`] makes it.
    pub fn endpoint(&self, buf_size: u32, buffers: u32) -> crate::EndpointBuilder {
        crate::EndpointBuilder::new(self.shared.clone(), buf_size, buffers)
    }

    /// Opens a terminus served at `priority` (0 first; the engine has a few levels and
    /// clamps the rest). A terminus index keeps the priority it was first opened at: a
    /// dropped terminus is reused only for the same priority.
    pub fn terminus(&self, priority: u8) -> Result<Terminus, Error> {
        let shared = &self.shared;
        let mut slots = shared.termini();
        let free = |want: Option<u8>| {
            (0..slots.in_use.len()).find(|&i| !slots.in_use[i] && slots.opened[i] == want)
        };
        let (index, open) = match (free(Some(priority)), free(None)) {
            (Some(i), _) => (i, false),
            (None, Some(i)) => (i, true),
            (None, None) => return Err(Error::NoTerminus(shared.layout.geometry.termini)),
        };
        let idx = u16::try_from(index).map_err(|_| Error::NoTerminus(u16::MAX))?;
        if open {
            shared.control().call_ok(&Request::OpenTerminus {
                index: idx,
                priority,
            })?;
            slots.opened[index] = Some(priority);
        }
        if slots.rated[index] {
            // A limit set for an earlier user of this terminus does not carry over.
            shared.control().call_ok(&Request::SetRate {
                terminus: idx,
                bytes_per_sec: 0,
                msgs_per_sec: 0,
            })?;
            slots.rated[index] = false;
        }
        let t = Terminus::new(shared.clone(), idx)?;
        slots.in_use[index] = true;
        Ok(t)
    }

    /// A terminus as [`Node::terminus`] gives, limited from the start to `limit` (token
    /// buckets the engine keeps for it, in payload bytes and messages per second; 0 is
    /// unlimited). [`Node::set_rate`] changes the limit later.
    pub fn terminus_with_rate(
        &self,
        priority: u8,
        limit: hamlyn_core::RateLimit,
    ) -> Result<Terminus, Error> {
        let t = self.terminus(priority)?;
        self.set_rate(&t, limit)?;
        Ok(t)
    }

    /// Sets (or, with both rates 0, lifts) the rate limit of `terminus`: the engine starts
    /// a message of the terminus only when its buckets hold tokens, so the terminus
    /// sends at most `limit` on average (bursts of 10 ms of the rate), and a limited
    /// terminus never slows any other. Shown in `hamlyn stat`.
    pub fn set_rate(
        &self,
        terminus: &Terminus,
        limit: hamlyn_core::RateLimit,
    ) -> Result<(), Error> {
        let index = terminus.index();
        self.shared.control().call_ok(&Request::SetRate {
            terminus: index,
            bytes_per_sec: limit.bytes_per_sec,
            msgs_per_sec: limit.msgs_per_sec,
        })?;
        if let Some(r) = self.shared.termini().rated.get_mut(usize::from(index)) {
            *r = !limit.is_unlimited();
        }
        Ok(())
    }

    /// Maps the direct slot `ticket` names, to deposit into it without the engine
    /// ([`DirectTarget::send`]; docs/ARCHITECTURE.md, "Direct slots").
    ///
    /// The slot must have been created with [`crate::SlotBuilder::danger_direct`] on
    /// this node: the ticket must name this engine's node ([`Error::NotLocal`]) and
    /// grant writes. The engine then checks, now and only now, that the ticket's
    /// incarnation is this engine's, the slot exists, is not revoked, the key is the
    /// slot's, it allows direct access and writes, and is not write-inhibited; each
    /// refusal is [`Error::Refused`] with its code (`WrongNode`, `NotFound`, `Revoked`,
    /// `BadKey`, `NotDirect`, `Inhibited`). Paranoid slots are never direct.
    ///
    /// On success, the ticket's bytes of the slot, its metadata entries and the
    /// receiver's notification queue are mapped in this process, until the
    /// [`DirectTarget`] is dropped: a later revoke or rekey refuses new mappings but does
    /// not undo this one.
    pub fn open_direct(&self, ticket: &Ticket) -> Result<DirectTarget, Error> {
        if ticket.node != self.shared.node {
            return Err(Error::NotLocal {
                ticket: ticket.node,
                node: self.shared.node,
            });
        }
        if !ticket.flags.contains(TicketFlags::WRITE) {
            return Err(Error::InvalidArgument("the ticket does not grant writes"));
        }
        let req = Request::OpenDirect {
            node: ticket.node.0,
            incarnation: ticket.incarnation,
            slot: ticket.slot.0,
            key: ticket.key,
        };
        let mut control = self.shared.control();
        let (reply, fds) = control.call(&req, &[])?;
        match DirectTarget::new(ticket, self.shared.instance, reply, fds) {
            Err(Error::Protocol(what)) => Err(control.violation(what)),
            other => other,
        }
    }

    /// The consumer of notification queue `index`. Each queue has one consumer: a second
    /// call for the same queue fails with [`Error::QueueTaken`] until the first handle is
    /// dropped.
    pub fn queue(&self, index: u16) -> Result<NotifyQueue, Error> {
        let count = self.shared.layout.geometry.queues;
        if index >= count {
            return Err(Error::NoSuchQueue { index, count });
        }
        let bit = 1u64 << index;
        // AcqRel: hands the consumer (and its private head) from a dropped handle to the
        // next one, possibly on another thread.
        if self.shared.queues_taken.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
            return Err(Error::QueueTaken(index));
        }
        NotifyQueue::new(self.shared.clone(), index).inspect_err(|_| {
            self.shared.release_queue(index);
        })
    }

    /// Every notification queue not yet handed out, by index.
    pub fn queues(&self) -> Result<Vec<NotifyQueue>, Error> {
        let mut out = Vec::new();
        for i in 0..self.shared.layout.geometry.queues {
            match self.queue(i) {
                Ok(q) => out.push(q),
                Err(Error::QueueTaken(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// The port's event descriptor, for epoll, tokio or any event loop: it becomes
    /// readable when a queue armed with [`NotifyQueue::arm`] gets an entry (and, with a
    /// hang-up, when the engine dies). Drain it with [`Node::drain_event_fd`], consume,
    /// and re-arm.
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.shared.port_event.as_fd()
    }

    /// Takes the pokes waiting on the event descriptor, returning how many (0 if it was
    /// not readable).
    ///
    /// When the engine is gone the event fd becomes readable for good, and this returns
    /// [`Error::EngineGone`].
    pub fn drain_event_fd(&self) -> Result<u64, Error> {
        match self.shared.port_event.drain() {
            Ok(n) => Ok(n),
            Err(hamlyn_shm::wake::WakeError::Closed) => {
                self.shared.mark_gone();
                Err(Error::EngineGone)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the engine is gone (it died or stopped): one non-blocking look at the
    /// control connection. Waits notice it by themselves.
    pub fn engine_gone(&self) -> bool {
        self.shared.engine_gone()
    }

    /// Publishes `seed` under `name` in the cluster's name registry (on the registry node,
    /// reached through this node's engine): any node can then [`Node::lookup`] it.
    ///
    /// The name is this node handle's (its connection's) until it unpublishes it or
    /// disconnects: publishing it again replaces the seed; another client's publish or
    /// unpublish of it is refused with `NotOwner`. A registry node that cannot be reached
    /// is `Unreachable` ([`hamlyn_wire::control::ControlErrorCode`]), naming the node; one
    /// whose link is full or still coming up (`Busy`) is asked again, for at most the
    /// control timeout (so a publish right after the nodes start waits for their link).
    pub fn publish(&self, name: &str, seed: &hamlyn_wire::Seed) -> Result<(), Error> {
        let text = seed.to_text().map_err(Error::Seed)?;
        match self.registry_call(&Request::Publish {
            name: name.to_owned(),
            seed: text,
        })? {
            Reply::Ok => Ok(()),
            _ => Err(self.shared.control().violation("expected Ok")),
        }
    }

    /// Removes `name`, which this node handle published, from the cluster's name registry
    /// (`NotOwner` if another client published it, `NotFound` if no one did).
    pub fn unpublish(&self, name: &str) -> Result<(), Error> {
        match self.registry_call(&Request::Unpublish {
            name: name.to_owned(),
        })? {
            Reply::Ok => Ok(()),
            _ => Err(self.shared.control().violation("expected Ok")),
        }
    }

    /// Looks `name` up in the cluster's name registry.
    pub fn lookup(&self, name: &str) -> Result<hamlyn_wire::Seed, Error> {
        match self.registry_call(&Request::Lookup {
            name: name.to_owned(),
        })? {
            Reply::Seed { seed } => hamlyn_wire::Seed::from_text(&seed).map_err(Error::Seed),
            _ => Err(self.shared.control().violation("expected Seed")),
        }
    }

    /// Registers active-message handlers (name, argument-layout fingerprint) of this node
    /// handle in the cluster's handler table on the registry node (seed 003 §5.4; at most
    /// [`hamlyn_wire::control::MAX_AM_HANDLERS_PER_REQUEST`] at once): all or none; a
    /// name live with another fingerprint is refused (`InvalidArgument`, naming it). The
    /// registrations leave with this connection. The `hamlyn-am` crate builds on this.
    pub fn am_register(&self, handlers: &[(String, u64)]) -> Result<(), Error> {
        match self.registry_call(&Request::AmRegister {
            handlers: handlers.to_vec(),
        })? {
            Reply::Ok => Ok(()),
            _ => Err(self.shared.control().violation("expected Ok")),
        }
    }

    /// This node handle no longer has these active-message handlers.
    pub fn am_unregister(&self, names: &[String]) -> Result<(), Error> {
        match self.registry_call(&Request::AmUnregister {
            names: names.to_vec(),
        })? {
            Reply::Ok => Ok(()),
            _ => Err(self.shared.control().violation("expected Ok")),
        }
    }

    /// The cluster's active-message handler table, whole (fetched page by page), with
    /// its version as of the last page.
    pub fn am_table(&self) -> Result<(u64, Vec<hamlyn_wire::control::AmHandlerEntry>), Error> {
        let mut all = Vec::new();
        let mut start = 0;
        loop {
            match self.registry_call(&Request::AmTable { start })? {
                Reply::AmTable {
                    version,
                    entries,
                    next,
                } => {
                    all.extend(entries);
                    match next {
                        Some(n) if n > start => start = n,
                        Some(_) => {
                            return Err(self.shared.control().violation("table page goes back"))
                        }
                        None => return Ok((version, all)),
                    }
                }
                _ => return Err(self.shared.control().violation("expected AmTable")),
            }
        }
    }

    /// Runs engine-resident active-message handler `handler`
    /// ([`hamlyn_wire::control::am_engine`]) on `node`'s engine with `args`, and returns
    /// its reply (a node that cannot be reached is `Unreachable`).
    pub fn am_engine_call(
        &self,
        node: NodeId,
        handler: u32,
        args: [u64; 4],
    ) -> Result<[u64; 4], Error> {
        match self.registry_call(&Request::AmCall {
            node: node.0,
            handler,
            args,
        })? {
            Reply::AmReply { args } => Ok(args),
            _ => Err(self.shared.control().violation("expected AmReply")),
        }
    }

    /// Reports this connection's active-message handler counters to its engine
    /// (replacing the last report; at most
    /// [`hamlyn_wire::control::MAX_AM_REPORT`] handlers), for `hamlyn stat`.
    pub fn am_report(
        &self,
        handlers: &[(String, hamlyn_wire::control::AmCounts)],
    ) -> Result<(), Error> {
        match self.registry_call(&Request::AmReport {
            handlers: handlers.to_vec(),
        })? {
            Reply::Ok => Ok(()),
            _ => Err(self.shared.control().violation("expected Ok")),
        }
    }

    /// The active-message handler counters this engine's clients reported, summed by
    /// handler name.
    pub fn am_counters(&self) -> Result<Vec<(String, hamlyn_wire::control::AmCounts)>, Error> {
        match self.registry_call(&Request::AmCounters)? {
            Reply::AmCounters { handlers } => Ok(handlers),
            _ => Err(self.shared.control().violation("expected AmCounters")),
        }
    }

    /// A registry request, made again while the engine says `Busy` (the registry node's
    /// link is full or still coming up, or too many requests wait) for at most the
    /// control timeout ([`NodeOptions::control_timeout`]).
    fn registry_call(&self, req: &Request) -> Result<Reply, Error> {
        let deadline = std::time::Instant::now() + self.shared.options.control_timeout;
        let mut pause = std::time::Duration::from_millis(1);
        loop {
            let mut control = self.shared.control();
            match control.call(req, &[]) {
                Ok((reply, fds)) if fds.is_empty() => return Ok(reply),
                Ok(_) => return Err(control.violation("descriptors with a registry reply")),
                Err(Error::Refused {
                    code: Some(hamlyn_wire::control::ControlErrorCode::Busy),
                    ..
                }) if std::time::Instant::now() + pause < deadline => {
                    drop(control);
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(std::time::Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Runs one turn of the engine this process hosts, if it hosts the node's engine and
    /// lets waiting threads drive it (progress by the waiting thread, issue 14): whether
    /// the turn found work. For a thread that waits by polling memory itself (a write
    /// polled on its data, a flag in an area) rather than through a queue or a handle,
    /// whose waits drive the engine already: call it in the polling loop, as UCX users
    /// call `ucp_worker_progress`, and the engine's thread need not be woken (nor take a
    /// core) for what the loop waits for. `false` at once, with no system call, when
    /// there is nothing to drive (a daemon, an engine of another process, or one started
    /// with `driven` off), or when another thread runs the engine at that moment.
    ///
    /// With other nodes (a fabric), the calls of a polling loop share one drive with
    /// the process's waits (a lease, [`hamlyn_engine::Driver::drive_waiting`]): data
    /// from other nodes then waits for the next call or wait instead of waking the
    /// engine's thread, until that thread finds none came for a millisecond or two and
    /// takes over again. So the first arrival after the calls stop may wait up to 2 ms.
    /// A program whose threads compute for long stretches between calls and want
    /// one-sided operations on their memory served at once meanwhile should start its
    /// engine with `driven` off (`HAMLYN_DRIVE=0`), or run it as a daemon.
    pub fn progress(&self) -> bool {
        let Some(driver) = &self.shared.driver else {
            return false;
        };
        driver.progress()
    }

    /// The engine's statistics: its counters, ports, peers, fabric, registry and every
    /// slot, fetched page by page ([`hamlyn_wire::stats::fetch`]; a busy engine's pages
    /// are of slightly different moments).
    pub fn stats(&self) -> Result<crate::Stats, Error> {
        use hamlyn_wire::stats::{fetch, FetchError};
        let mut control = self.shared.control();
        let got = fetch(|req| match control.call(req, &[]).map_err(Some)? {
            (reply, fds) if fds.is_empty() => Ok(reply),
            _ => Err(None),
        });
        match got {
            Ok(stats) => Ok(stats),
            Err(FetchError::Ask(Some(e))) => Err(e),
            Err(FetchError::Refused { code, message }) => Err(Error::Refused {
                code: hamlyn_wire::control::ControlErrorCode::from_u16(code),
                raw: code,
                message,
            }),
            Err(_) => Err(control.violation("expected a StatsPage")),
        }
    }
}

/// Where [`Node::connect_default`] connects: `$HAMLYN_SOCKET` if set and not empty,
/// else [`DEFAULT_SOCKET`].
pub fn default_socket_path() -> PathBuf {
    socket_path_from(std::env::var_os(SOCKET_ENV))
}

fn socket_path_from(var: Option<std::ffi::OsString>) -> PathBuf {
    match var {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_SOCKET),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_socket_is_the_environments_else_the_daemons() {
        assert_eq!(socket_path_from(None), Path::new(DEFAULT_SOCKET));
        assert_eq!(socket_path_from(Some("".into())), Path::new(DEFAULT_SOCKET));
        assert_eq!(
            socket_path_from(Some("/run/h/n1.sock".into())),
            Path::new("/run/h/n1.sock")
        );
    }

    fn assert_send_sync<T: Send + Sync>() {}
    fn assert_send<T: Send>() {}

    #[test]
    fn handles_can_move_between_threads() {
        assert_send_sync::<Node>();
        assert_send::<Terminus>();
        assert_send::<NotifyQueue>();
        assert_send_sync::<Area>();
        assert_send_sync::<crate::Slot>();
        assert_send_sync::<crate::SendHandle>();
    }
}

#[cfg(test)]
mod attach_tests {
    use super::*;
    use crate::testing::fake_node;

    #[test]
    fn attach_takes_identity_from_the_engine() {
        let (node, fake) = fake_node(NodeOptions {
            termini: 3,
            queues: 2,
            queue_cap: 256,
            ..NodeOptions::default()
        });
        assert_eq!(
            (node.id(), node.incarnation(), node.client_id()),
            (NodeId(7), 99, 1)
        );
        match &fake.requests()[0] {
            Request::Attach {
                version,
                pid,
                termini,
                queues,
                queue_cap,
            } => {
                assert_eq!((*version, *pid), (CONTROL_VERSION, std::process::id()));
                assert_eq!((*termini, *queues, *queue_cap), (3, 2, 256));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(node.stats().unwrap().node, 7);
        assert!(matches!(
            Node::connect("/nonexistent/hamlyn.sock"),
            Err(Error::Connect { .. })
        ));
    }

    #[test]
    fn engine_refusals_are_typed() {
        let (node, _fake) = fake_node(NodeOptions::default());
        let area = node.area(64).unwrap();
        // The fake refuses to revoke slot 666; reach it through the control connection.
        let r = node
            .shared
            .control()
            .call_ok(&Request::Revoke { slot: 666 });
        assert!(matches!(
            r,
            Err(Error::Refused {
                code: Some(hamlyn_wire::control::ControlErrorCode::NotFound),
                ..
            })
        ));
        // The connection is still usable after a refusal.
        assert!(node.area(64).is_ok());
        drop(area);
    }
}
