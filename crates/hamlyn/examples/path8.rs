//! `path8`: one 8-byte message at a time down each small-message path, for instruction
//! counts (callgrind), system-call counts (strace) and allocation counts (built in).
//! docs/PERFORMANCE.md, "Where the time goes (8-byte messages)", has the commands and
//! what they measured.
//!
//! An embedded engine busy-polls on its own thread. A receiver node has three slots
//! reporting to one notification queue: a normal slot with metadata entries, a fast slot,
//! and a normal slot opened for direct deposits (`danger_direct`). A sender node in the
//! same process sends tagged 8-byte inline messages with notification, one at a time:
//!
//! - `normal` / `fast` (mediated): `Terminus::send`, spin until the completion word says
//!   the engine finished the request (`SendHandle::is_done`, which the engine advances on
//!   the turn after it posted the notification), then one `NotifyQueue::poll`, which
//!   must return the message;
//! - `direct`: `DirectTarget::send` (deposit, count and notify in this thread), then one
//!   `NotifyQueue::poll`.
//!
//! So `Terminus::send`, `DirectTarget::send` and `NotifyQueue::poll` are each called
//! exactly once per message, and their inclusive instruction counts divided by the
//! message count are the send side and the receive side. The engine's share is its
//! thread's instructions minus its idle turns (see the docs).
//!
//! Phases are separated by calls to `path8_mark`, which callgrind can dump before
//! (`--dump-before=path8_mark`) and which writes one line to standard error (a `write`
//! that marks the phase in an strace log): `idle` (the engine spins, nobody sends, for
//! `IDLE_MS`), then `normal`, `fast`, `direct` (N messages each, after a warm-up of
//! `WARMUP` each), then `end`.
//!
//! Usage: `path8 [N]` (default 10000 messages per path).

use std::alloc::{GlobalAlloc, Layout, System};
use std::error::Error;
use std::io::Write;
use std::time::Duration;

use hamlyn::{
    Data, DirectTarget, Node, NodeOptions, NotificationKind, NotifyQueue, SendOptions, Terminus,
    Ticket,
};
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_shm::sync::{AtomicU64, Ordering};

/// Messages sent down each path before its phase starts.
const WARMUP: u64 = 2000;
/// How long the idle phase lets the engine spin with nothing to do.
const IDLE_MS: u64 = 200;

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

/// The paths measured.
#[derive(Clone, Copy, Debug)]
enum Path {
    Normal,
    Fast,
    Direct,
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
                // No yield and no sleep: a system call here would be the harness's, not
                // the path's (valgrind, which runs one thread at a time, switches
                // threads after a time slice anyway).
                while !handle.is_done() {
                    std::hint::spin_loop();
                }
                (kind, ticket.slot)
            }
            Path::Direct => {
                let opts = SendOptions::new().tag(i).entry(0);
                self.direct.send(&opts, Data::Inline(&payload))?;
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
    let cfg = EngineConfig {
        busy_poll: true,
        ..EngineConfig::embedded()
    };
    let engine = EngineHandle::start(cfg)?;
    let options = NodeOptions {
        termini: 1,
        queues: 1,
        ..NodeOptions::default()
    };
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

    let paths = [Path::Normal, Path::Fast, Path::Direct];
    for path in paths {
        for i in 0..WARMUP {
            rig.one(path, i)?;
        }
    }
    let mut report = Vec::new();
    path8_mark(0);
    let before = allocs();
    std::thread::sleep(Duration::from_millis(IDLE_MS));
    report.push(format!("idle: {} allocations", allocs() - before));
    for (k, path) in paths.into_iter().enumerate() {
        path8_mark(k as u32 + 1);
        let before = allocs();
        for i in 0..n {
            rig.one(path, WARMUP + i)?;
        }
        let a = allocs() - before;
        report.push(format!(
            "{path:?}: {n} messages, {a} allocations ({:.4} per message)",
            a as f64 / n as f64
        ));
    }
    path8_mark(4);
    for line in report {
        println!("{line}");
    }
    Ok(())
}

/// The receive side, kept a function of its own so that callgrind counts it even where
/// the compiler inlines `NotifyQueue::poll` (path8_table.py looks for `path8::receive`).
#[inline(never)]
fn receive(queue: &mut hamlyn::NotifyQueue) -> Option<hamlyn::Notification> {
    queue.poll()
}
