//! `path8`: one 8-byte message at a time down each small-message path, for instruction
//! counts (callgrind), system-call counts (strace) and allocation counts (built in).
//! docs/PERFORMANCE.md, "Where the time goes (8-byte messages)", has the commands and
//! what they measured.
//!
//! An embedded engine is driven by the waiting thread (the default for a host): its own
//! thread sleeps, and the sending thread runs the engine's turns. A receiver node has
//! three slots reporting to one notification queue: a normal slot with metadata
//! entries, a fast slot, and a normal slot opened for direct deposits
//! (`danger_direct`). A sender node in the same process sends tagged 8-byte inline
//! messages with notification, one at a time:
//!
//! - `normal` / `fast` (mediated): `Terminus::send`, whose push finds the engine asleep
//!   and runs its turns (`Driver::nudge`: the turn that takes, delivers, notifies and
//!   completes, then the hand-back's), then `SendHandle::wait` (done already), then
//!   one `NotifyQueue::poll`, which must return the message;
//! - `direct`: `DirectTarget::send` (deposit, count and notify in this thread), then one
//!   `NotifyQueue::poll`;
//! - `tcp`: from a sender on a second engine A to a receiver on a third engine B, joined
//!   by the TCP fabric over loopback (one rail, links secured, no packet held back for
//!   the next: `TcpConfig::hold` zero): `Terminus::send` (A's
//!   turn writes the packet), a wait on B's queue (B's turns read, deliver, notify), then
//!   `SendHandle::wait` (A's turns until B's acknowledgement);
//! - `stream` (mediated, normal slot): batches of `STREAM_BATCH` (16) messages pushed
//!   while this thread holds a drive, so that no push runs a turn (a host's waiter
//!   drives while a client of another process streams), each batch taken, delivered and
//!   notified in one turn (a visit's quantum), then its 16 notifications polled: the
//!   per-message cost behind the 8-byte message rate.
//!
//! So `Terminus::send`, `DirectTarget::send` and `NotifyQueue::poll` are each called
//! exactly once per message, and their inclusive instruction counts divided by the
//! message count are the send side and the receive side; the engine's share is its
//! turns' (`Engine::turn_for_waiter`), all run inside the send.
//!
//! Phases are separated by calls to `path8_mark`, which callgrind can dump before
//! (`--dump-before=path8_mark`) and which writes one line to standard error (a `write`
//! that marks the phase in an strace log): `idle` (this thread runs N engine turns that
//! find nothing: the cost of an idle turn), then `normal`, `fast`, `direct` (N messages
//! each, after a warm-up of `WARMUP` each), `tcp`, `stream` (N messages rounded up to
//! whole batches), then `end`.
//!
//! Usage: `path8 [N] [PHASE]` (default 10000 messages per path; with PHASE, that phase
//! alone, for a profiler). Each phase's line also gives its wall-clock time per message.

use std::alloc::{GlobalAlloc, Layout, System};
use std::error::Error;
use std::io::Write;
use std::time::{Duration, Instant};

use hamlyn::{
    Data, DirectTarget, Node, NodeOptions, NotificationKind, NotifyQueue, SendOptions, Terminus,
    Ticket,
};
use hamlyn_engine::{Driver, Driving, EngineConfig, EngineHandle};
use hamlyn_fabric::tcp::{tcp_cluster, TcpConfig};
use hamlyn_shm::sync::{AtomicU64, Ordering};
use hamlyn_wire::NodeId;

/// Messages sent down each path before its phase starts.
const WARMUP: u64 = 2000;

/// Messages pushed before each turn of the stream phase: one visit's quantum
/// (`hamlyn_engine`'s `QUANTUM_PACKETS`).
const STREAM_BATCH: u64 = 16;

/// Counts allocations (and reallocations) of every thread, engine included.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to the system allocator with the caller's arguments
// unchanged; counting touches only a process-local atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: a statistic, read after the phase by the same thread or after a join.
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `GlobalAlloc::alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // Relaxed: a statistic.
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `GlobalAlloc::alloc_zeroed` is passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Relaxed: a statistic.
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `GlobalAlloc::realloc` is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `GlobalAlloc::dealloc` is passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    // Relaxed: see `Counting::alloc`.
    ALLOCS.load(Ordering::Relaxed)
}

/// Marks the start of a phase: callgrind dumps its counters before each call
/// (`--dump-before=path8_mark`), and the line on standard error marks strace logs.
#[no_mangle]
#[inline(never)]
pub extern "C" fn path8_mark(phase: u32) {
    // One `write`, so that an strace log shows the whole line.
    let line = format!("path8: phase {phase}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    std::hint::black_box(phase);
}

/// Wall-clock time per `unit` since `began` over `n` of them: all of a phase runs on
/// this one thread, so this is the path's own time, stalls included (a store that a wider
/// load cannot be forwarded from costs no instruction but a dozen cycles), without the
/// cross-core traffic and scheduling of two processes. Meaningless under callgrind.
fn per(began: Instant, n: u64, unit: &str) -> String {
    let ns = began.elapsed().as_nanos() as f64 / n.max(1) as f64;
    format!("{ns:.1} ns per {unit}")
}

/// One message phase: its mark, `n` messages through `one` (numbered after the
/// warm-up's), and its report line (allocations and wall-clock time per message).
fn message_phase(
    mark: u32,
    name: &str,
    n: u64,
    mut one: impl FnMut(u64) -> Result<(), Box<dyn Error>>,
) -> Result<String, Box<dyn Error>> {
    path8_mark(mark);
    let before = allocs();
    let began = Instant::now();
    for i in 0..n {
        one(WARMUP + i)?;
    }
    let a = allocs() - before;
    Ok(format!(
        "{name}: {n} messages, {a} allocations ({:.4} per message), {}",
        a as f64 / n as f64,
        per(began, n, "message")
    ))
}

/// The paths measured.
#[derive(Clone, Copy, Debug)]
enum Path {
    Normal,
    Fast,
    Direct,
}

/// The TCP path: a sender on engine A, a receiver on engine B, the engines joined by the
/// TCP fabric over loopback (one rail, links secured as every node's), both driven by
/// this thread.
struct TcpRig {
    terminus: Terminus,
    queue: NotifyQueue,
    ticket: Ticket,
    /// The receiver's slot and its areas, then the nodes, then the engines (dropped in
    /// that order).
    _slot: (hamlyn::Slot, hamlyn::MetaArea, hamlyn::Area),
    _nodes: [Node; 2],
    _engines: [EngineHandle; 2],
}

impl TcpRig {
    /// Sends message `i` from A to B: the push runs A's turn (which writes it to the
    /// socket), the receive waits on B's queue (running B's turns: read, deliver,
    /// notify), then the send handle's wait runs A's turns until B's acknowledgement.
    #[inline(never)]
    fn one(&mut self, i: u64) -> Result<(), Box<dyn Error>> {
        let payload = i.to_le_bytes();
        let opts = SendOptions::new().tag(i).entry(0);
        let handle = self
            .terminus
            .send(&self.ticket, &opts, Data::Inline(&payload))?;
        let n = receive_tcp(&mut self.queue)
            .ok_or_else(|| format!("no notification over TCP; the send: {:?}", handle.status()))?;
        if n.kind != NotificationKind::Message || n.word != i || n.len != 8 {
            return Err(format!("unexpected notification {n:?} for message {i} over TCP").into());
        }
        if handle.wait(Some(Duration::from_secs(60))) != hamlyn::Status::Sent {
            return Err(format!("message {i} over TCP not sent").into());
        }
        Ok(())
    }

    /// Two driven engines joined by TCP, a sender node on the first, a receiver node
    /// with a normal slot on the second; returned once the link is up.
    fn start() -> Result<TcpRig, Box<dyn Error>> {
        let mut tcp = TcpConfig::new(NodeId(0), "127.0.0.1:0".parse()?);
        tcp.rails = 1;
        // The engines' incarnation is the fabric's: tickets name it.
        tcp.incarnation = 1;
        // Every packet written when it is sent: whether a small packet is held for the
        // next one depends on how soon that comes, which under valgrind is not the
        // path's doing (the sending engine's work would move between its turn and a
        // later flush from run to run).
        tcp.hold = Duration::ZERO;
        let mut fabrics = tcp_cluster(2, &tcp)?;
        let fb = fabrics.pop().ok_or("no fabric")?;
        let fa = fabrics.pop().ok_or("no fabric")?;
        let start = |node: u32, f: hamlyn_fabric::tcp::TcpFabric| {
            let cfg = EngineConfig {
                node,
                incarnation: 1,
                ..driven_config()
            };
            EngineHandle::start_with_fabric(cfg, Some(Box::new(f)))
        };
        let (ea, eb) = (start(0, fa)?, start(1, fb)?);
        let options = one_terminus_one_queue();
        let sender = Node::connect_with(ea.socket_path(), options.clone())?;
        let receiver = Node::connect_with(eb.socket_path(), options)?;
        let inbox = receiver.area(4096)?;
        let meta = receiver.meta_area(4)?;
        let slot = receiver.slot(&inbox).meta(&meta).queue(0).create()?;
        let ticket = slot.ticket_all()?;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !sender.stats()?.peer(1).is_some_and(|p| p.up) {
            if std::time::Instant::now() > deadline {
                return Err("the TCP link between the engines never came up".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(TcpRig {
            terminus: sender.terminus(0)?,
            queue: receiver.queue(0)?,
            ticket,
            _slot: (slot, meta, inbox),
            _nodes: [sender, receiver],
            _engines: [ea, eb],
        })
    }
}

/// Everything one run needs.
struct Rig {
    terminus: Terminus,
    queue: NotifyQueue,
    normal: Ticket,
    fast: Ticket,
    direct: DirectTarget,
}

impl Rig {
    /// Pushes `STREAM_BATCH` messages (tags from `first`) to the normal slot without
    /// running a turn (`driving` is held, so no push finds the engine asleep), takes
    /// them in one turn, and polls their notifications, in order.
    #[inline(never)]
    fn stream_batch(&mut self, driving: &mut Driving, first: u64) -> Result<(), Box<dyn Error>> {
        for i in first..first + STREAM_BATCH {
            let payload = i.to_le_bytes();
            let opts = SendOptions::new().tag(i).entry(0);
            drop(
                self.terminus
                    .send(&self.normal, &opts, Data::Inline(&payload))?,
            );
        }
        if !driving.turn() {
            return Err("a stream batch's turn found no work".into());
        }
        for i in first..first + STREAM_BATCH {
            let n = receive(&mut self.queue).ok_or("a stream batch's message not delivered")?;
            if n.kind != NotificationKind::Message || n.word != i || n.len != 8 {
                return Err(format!("unexpected notification {n:?} for stream message {i}").into());
            }
        }
        Ok(())
    }

    /// Sends message `i` down `path` and takes its notification.
    #[inline(never)]
    fn one(&mut self, path: Path, i: u64) -> Result<(), Box<dyn Error>> {
        let payload = i.to_le_bytes();
        let (kind, slot) = match path {
            Path::Normal | Path::Fast => {
                let (ticket, opts, kind) = match path {
                    Path::Normal => (
                        &self.normal,
                        SendOptions::new().tag(i).entry(0),
                        NotificationKind::Message,
                    ),
                    _ => (
                        &self.fast,
                        SendOptions::new().tag(i),
                        NotificationKind::Fast,
                    ),
                };
                let handle = self.terminus.send(ticket, &opts, Data::Inline(&payload))?;
                // The push found the engine asleep and ran its turns itself (`nudge`);
                // a wait would drive more if the request were not done (it never is
                // here: `path8_table.py` checks the turns per message).
                if handle.wait(Some(Duration::from_secs(60))) != hamlyn::Status::Sent {
                    return Err(format!("message {i} on {path:?} not sent").into());
                }
                (kind, ticket.slot)
            }
            Path::Direct => {
                let opts = SendOptions::new().tag(i).entry(0);
                direct_send(&self.direct, &opts, &payload)?;
                (NotificationKind::Message, self.direct.ticket().slot)
            }
        };
        let n = receive(&mut self.queue).ok_or("no notification after the send finished")?;
        if n.kind != kind || n.word != i || n.slot != slot || n.len != 8 {
            return Err(
                format!("unexpected notification {n:?} for message {i} on {path:?}").into(),
            );
        }
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let n: u64 = match std::env::args().nth(1) {
        Some(a) => a.parse()?,
        None => 10_000,
    };
    // A second argument runs that phase alone (`idle`, `normal`, `fast`, `direct`, `tcp`,
    // `stream`), for a profiler: the others are skipped, marks and all.
    let only = std::env::args().nth(2);
    let runs = |phase: &str| {
        only.as_deref()
            .is_none_or(|o| o.eq_ignore_ascii_case(phase))
    };
    let engine = EngineHandle::start(driven_config())?;
    let options = one_terminus_one_queue();
    let receiver = Node::connect_with(engine.socket_path(), options.clone())?;
    let sender = Node::connect_with(engine.socket_path(), options)?;

    let inbox = receiver.area(4096)?;
    let meta = receiver.meta_area(4)?;
    let normal = receiver
        .slot(&inbox)
        .range(0..1024)
        .meta(&meta)
        .queue(0)
        .create()?;
    let fast = receiver
        .slot(&inbox)
        .range(1024..2048)
        .fast()
        .queue(0)
        .create()?;
    let direct_inbox = receiver.area(4096)?;
    let direct_meta = receiver.meta_area(4)?;
    let direct = receiver
        .slot(&direct_inbox)
        .meta(&direct_meta)
        .queue(0)
        .danger_direct()
        .create()?;
    let mut rig = Rig {
        terminus: sender.terminus(0)?,
        queue: receiver.queue(0)?,
        normal: normal.ticket_all()?,
        fast: fast.ticket_all()?,
        direct: sender.open_direct(&direct.ticket_all()?)?,
    };

    let mut tcp = TcpRig::start()?;
    let paths = [Path::Normal, Path::Fast, Path::Direct];
    for path in paths {
        for i in 0..WARMUP {
            rig.one(path, i)?;
        }
    }
    for i in 0..WARMUP {
        tcp.one(i)?;
    }
    let mut report = Vec::new();
    // The idle phase: N turns that find nothing, run by this thread.
    let driver = Driver::for_socket(engine.socket_path()).ok_or("the engine is not drivable")?;
    if runs("idle") {
        path8_mark(0);
        let before = allocs();
        let began = Instant::now();
        {
            let mut driving = driver.drive().ok_or("the engine is gone")?;
            for _ in 0..n {
                std::hint::black_box(driving.turn());
            }
        }
        report.push(format!(
            "idle: {n} turns, {} allocations, {}",
            allocs() - before,
            per(began, n, "turn")
        ));
    }
    for (k, path) in paths.into_iter().enumerate() {
        let name = format!("{path:?}");
        if runs(&name) {
            report.push(message_phase(k as u32 + 1, &name, n, |i| rig.one(path, i))?);
        }
    }
    if runs("tcp") {
        report.push(message_phase(4, "Tcp", n, |i| tcp.one(i))?);
    }
    // The stream phase: batches of `STREAM_BATCH` messages pushed while this thread
    // holds a drive (so no push runs a turn: as a host's waiter drives while a client of
    // another process streams), each batch taken in one turn (one visit's quantum), then
    // its notifications polled.
    if runs("stream") {
        path8_mark(5);
        let before = allocs();
        let batches = n.div_ceil(STREAM_BATCH);
        let began = Instant::now();
        {
            let mut driving = driver.drive().ok_or("the engine is gone")?;
            // A waiter's first turn clears the doorbells (`sender_turn` leaves them armed),
            // so that the pushes below find the engine awake and run no turn of their own.
            std::hint::black_box(driving.turn());
            for b in 0..batches {
                rig.stream_batch(&mut driving, WARMUP + b * STREAM_BATCH)?;
            }
        }
        let a = allocs() - before;
        report.push(format!(
            "Stream: {} messages in batches of {STREAM_BATCH}, {a} allocations, {}",
            batches * STREAM_BATCH,
            per(began, batches * STREAM_BATCH, "message")
        ));
    }
    path8_mark(6);
    // Who ran the TCP engines' turns: this thread, or their own threads, woken (by a
    // socket, a timer) since they started.
    for (name, e, node) in [
        ("A", &tcp._engines[0], &tcp._nodes[0]),
        ("B", &tcp._engines[1], &tcp._nodes[1]),
    ] {
        let driven = Driver::for_socket(e.socket_path())
            .and_then(|d| d.stats())
            .ok_or("a TCP engine is gone")?;
        let st = node.stats()?;
        report.push(format!(
            "Tcp engine {name}: {} turns run by this thread ({} in its pushes), its own \
             thread slept {} times ({} woken for nothing)",
            driven.turns_by_waiters,
            driven.turns_by_senders,
            st.engine.sleeps,
            st.engine.idle_wakes
        ));
    }
    for line in report {
        println!("{line}");
    }
    Ok(())
}

/// Every node here: one terminus, one notification queue.
fn one_terminus_one_queue() -> NodeOptions {
    NodeOptions {
        termini: 1,
        queues: 1,
        ..NodeOptions::default()
    }
}

/// Progress by the waiting thread, as a host runs by default: the engine's thread
/// sleeps (for a minute at most: no timer wakes it during a phase), and the sending
/// thread's push runs the turns that take, deliver and complete each message
/// (`Driver::nudge`). So every engine turn of a message phase is one of this thread's,
/// with no idle spin between messages.
fn driven_config() -> EngineConfig {
    EngineConfig {
        driven: true,
        max_sleep: Duration::from_secs(60),
        ..EngineConfig::embedded()
    }
}

/// The receive side over TCP: a wait on the receiving node's queue, which runs its
/// engine's turns (reading the socket) until the message is there.
#[inline(never)]
fn receive_tcp(queue: &mut hamlyn::NotifyQueue) -> Option<hamlyn::Notification> {
    queue.wait(Some(Duration::from_secs(60))).ok().flatten()
}

/// The direct send side, kept a function of its own so that callgrind counts it even
/// where the compiler inlines `DirectTarget::send` (the release profile's link-time
/// optimisation does; path8_table.py looks for `path8::direct_send`).
#[inline(never)]
fn direct_send(
    target: &DirectTarget,
    opts: &SendOptions<'_>,
    payload: &[u8],
) -> Result<(), hamlyn::SendError> {
    target.send(opts, Data::Inline(payload))
}

/// The receive side, kept a function of its own so that callgrind counts it even where
/// the compiler inlines `NotifyQueue::poll` (path8_table.py looks for `path8::receive`).
#[inline(never)]
fn receive(queue: &mut hamlyn::NotifyQueue) -> Option<hamlyn::Notification> {
    queue.poll()
}
