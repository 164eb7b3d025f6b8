//! Hamlyn's shared-memory layer: the memory a port is made of and the wait-free
//! structures in it (DESIGN §2, §6).
//!
//! - [`region`]: [`ShmRegion`](region::ShmRegion), a sealed memfd mapped shared; ports and
//!   areas (message, metadata, send) are regions.
//! - [`area_mem`]: the one adapter from a region to the core's `Memory` (engine areas and
//!   direct senders alike), copying in and out, never holding a reference.
//! - [`bytes`]: [`SharedBytes`](bytes::SharedBytes) and
//!   [`SharedBytesMut`](bytes::SharedBytesMut), bytes another process may write, held by
//!   raw parts: what fabrics send from and receive into.
//! - [`keys`]: random 64-bit keys (engine and library share the generator).
//! - [`fdpass`]: passing region and eventfd descriptors over a `SOCK_SEQPACKET` socket.
//! - [`spsc`]: single-producer single-consumer rings of fixed-size entries (termini),
//!   robust against a hostile producer.
//! - [`drain_watch`]: whether everything pushed into a ring was drained and recorded,
//!   known without the drainers' lock (a send handle's status).
//! - [`notifq`]: the multi-producer notification queue of 32-byte entries.
//! - [`endpoint`]: a receive endpoint's receiver side: posting buffers, taking arrivals,
//!   reading and resetting the discard counter.
//! - [`ready`]: the ready hints a client sets for the termini it pushed to, so the
//!   engine looks at those instead of every ring.
//! - [`cpu_demand`]: whether more threads are runnable than this process has CPUs (an
//!   adaptive spin's check before it spins beyond its floor).
//! - [`wake`]: spin-then-sleep on a shared futex without lost wakeups, and the port's
//!   eventfd for event loops.
//! - [`drive`]: progress by the waiting thread: the ownership word that decides who runs
//!   the turns of an engine hosted in this process (its thread, or a thread that waits).
//! - [`memory`]: the small memory abstraction the rings are written over, so that loom can
//!   check them on the heap; [`sync`]: the one atomics facade (std or loom).
//!
//! Every index has one writer and its own cache line (FLIPC). No lock is ever shared with
//! a peer, so a stuck or dead peer cannot stall the other side; the fast paths (push, pop,
//! post, poll) neither allocate, lock nor make system calls.
//!
//! Loom model checks sit next to the code (`loom_*` tests). Run them with:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p hamlyn-shm --release --lib loom
//! ```
//!
//! The preemption bound defaults to 4 (override with `LOOM_MAX_PREEMPTIONS`); the models
//! then take about 10 s on a 2-core VM after the build (about 2 minutes from cold). The
//! bound of 6 also passes, in about a minute.
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(not(loom))]
pub mod area_mem;
pub mod bytes;
pub mod cpu_demand;
pub mod drain_watch;
pub mod drive;
pub mod endpoint;
#[cfg(not(loom))]
pub mod entry_mem;
pub mod fdpass;
pub mod keys;
pub mod memory;
pub mod notifq;
pub mod port;
pub mod ready;
#[cfg(not(loom))]
pub mod region;
pub mod spsc;
pub mod sync;
pub mod wake;

/// Runs a loom model with this crate's default bounds: a preemption bound of 4 unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise.
///
/// A model's main thread should only spawn and join (or yield before its own part):
/// loom 0.7 explored a main thread whose part opens with a look (a load) that the other
/// threads also open with in one interleaving only, the look before anything else ran,
/// so the model checked nothing about the race it was written for (found 2026-11-25 in
/// two models, by printing iteration counts and by mutations they should have caught).
#[cfg(all(test, loom))]
pub(crate) fn loom_model<F: Fn() + Sync + Send + 'static>(f: F) {
    loom_model_bounded(4, f);
}

/// [`loom_model`] with a preemption bound of `bound` unless `LOOM_MAX_PREEMPTIONS` says
/// otherwise: for a model of four threads, which at 4 took 18 minutes.
#[cfg(all(test, loom))]
pub(crate) fn loom_model_bounded<F: Fn() + Sync + Send + 'static>(bound: usize, f: F) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(bound);
    }
    b.check(f);
}
