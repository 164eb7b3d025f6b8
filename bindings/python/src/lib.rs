//! `hamlyn._hamlyn`: the extension module of the Python package `hamlyn`
//! (bindings/python), a PyO3 wrapper over the application library (`hamlyn`).
//!
//! The Python package (python/hamlyn) re-exports these classes, defines the exceptions
//! (`_errors.py`) and the asyncio wait (`_aio.py`); `_hamlyn.pyi` types them.
//!
//! Conventions, those of the C API (crates/hamlyn-capi) in Python style:
//!
//! - every object is a handle with `close()` and a context manager; a handle made from a
//!   node keeps the node's [`Life`], so after `Node.close()` every call on it raises
//!   `ClosedError` (never a crash), and after its own `close()` too;
//! - the library's errors become exceptions of `hamlyn` (`errors.rs`), each a subclass of
//!   `HamlynError` with the library's message;
//! - every call that may block (a control request, a wait) releases the GIL
//!   (`Python::allow_threads`); a terminus and a queue, single-consumer objects in Rust,
//!   carry a lock, taken without the GIL when another thread holds it ([`lock`]);
//! - an area is a buffer (`memoryview(area)`, `numpy.frombuffer(area, ...)`) over its
//!   shared memory, without a copy; the buffer keeps the mapping alive until released.
//!
//! Nothing another process can write is ever a Rust reference here: the area's bytes are
//! handed to Python as a raw buffer, exactly as the C API hands them to C.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use pyo3::prelude::*;

mod am;
mod area;
mod bench;
mod direct;
mod endpoint;
mod errors;
mod job;
mod node;
mod queue;
mod rats;
mod rats_remote;
mod rpc;
mod rpc_ref;
mod slot;
mod terminus;
mod ticket;

/// Whether the node a handle was made from is still open: shared by the node and every
/// handle made from it (`Node.close()` closes them all).
#[derive(Debug, Default)]
pub(crate) struct Life {
    closed: Flag,
}

/// A closed-flag. A plain atomic: this crate does not depend on hamlyn-shm's atomics
/// facade, and the flag is never model-checked (nothing is published through it).
#[allow(clippy::disallowed_types)]
#[derive(Debug, Default)]
struct Flag(std::sync::atomic::AtomicBool);

impl Life {
    /// `ClosedError` once the node was closed.
    pub(crate) fn check(&self) -> PyResult<()> {
        // Acquire: pairs with the Release in `close`, so that a call starting after
        // `Node.close()` returned sees the flag.
        if self.closed.0.load(std::sync::atomic::Ordering::Acquire) {
            Err(errors::closed(
                "the node this handle was made from is closed",
            ))
        } else {
            Ok(())
        }
    }

    pub(crate) fn close(&self) {
        // Release: pairs with the Acquire in `check`.
        self.closed
            .0
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

/// Locks a handle's mutex. Never blocks while holding the GIL: if another thread holds
/// the lock (a `wait` on the same queue, say, which runs without the GIL), the GIL is
/// released while this thread waits for it, so the holder can finish and come back. The
/// lock is taken in that wait and kept while the GIL is taken back (not dropped and
/// tried again, which a thread that re-locks in a loop, like a serving RPC server,
/// could win every time). No thread ever blocks on a handle's mutex while holding the
/// GIL, so a thread holding one while it waits for the GIL cannot deadlock. A lock
/// poisoned by a panic is an error, not a crash.
pub(crate) fn lock<'a, T: Send>(py: Python<'_>, m: &'a Mutex<T>) -> PyResult<MutexGuard<'a, T>> {
    match m.try_lock() {
        Ok(g) => Ok(g),
        // The guard comes back across `allow_threads` on this same thread.
        Err(std::sync::TryLockError::WouldBlock) => {
            unblocked(py, m, |m| m.lock()).map_err(|_| errors::poisoned())
        }
        Err(std::sync::TryLockError::Poisoned(_)) => Err(errors::poisoned()),
    }
}

/// A value that is not `Send` (the protocol layers' objects share an `Rc` with their
/// manager), carried into [`unblocked`]'s closure on the thread that owns it.
struct OnThisThread<T>(T);

// SAFETY: an `OnThisThread` is made only in `unblocked`, whose closure
// `Python::allow_threads` runs on the calling thread, never another (it only releases the
// GIL around it), so the value never leaves the thread that owns it. The values that go
// through here are a `ThreadBound`'s, taken out on its owner thread (while this thread
// waits without the GIL, no other thread can reach them, nor so the `Rc`s they share),
// and a `MutexGuard` (`lock`), which must be unlocked on the thread that locked it: this
// one. Python objects the values hold (handlers) are touched only under
// `Python::with_gil`.
unsafe impl<T> Send for OnThisThread<T> {}

impl<T> OnThisThread<T> {
    /// The value (a method, so that a closure captures the whole wrapper, not its field).
    fn into_inner(self) -> T {
        self.0
    }
}

/// Runs `f(value)` without the GIL on this thread, for a blocking call of a layer whose
/// objects are not `Send` (active messages, RPC, jobs, Rats): see [`OnThisThread`]. Code
/// inside that needs Python (a handler) takes the GIL with `Python::with_gil`.
pub(crate) fn unblocked<T, R>(py: Python<'_>, value: T, f: impl FnOnce(T) -> R) -> R {
    let carried = OnThisThread((value, f));
    py.allow_threads(move || {
        let (value, f) = carried.into_inner();
        OnThisThread(f(value))
    })
    .into_inner()
}

/// A value of the protocol layers (not `Send`: their objects share an `Rc` with their
/// manager) that only the thread that made it may use: another thread's access is
/// `WrongThreadError`, and a drop on another thread (a handle collected there) leaks the
/// value rather than touch its `Rc`s from there.
pub(crate) struct ThreadBound<T> {
    owner: std::thread::ThreadId,
    value: std::mem::ManuallyDrop<T>,
}

// SAFETY: the value is reached only through `get` and `get_mut`, which refuse every
// thread but `owner`, and dropped only on `owner` (`Drop` leaks it elsewhere): it never
// leaves its thread, whichever thread holds the wrapper.
unsafe impl<T> Send for ThreadBound<T> {}
// SAFETY: as for `Send`: a shared wrapper hands the value out on `owner` only.
unsafe impl<T> Sync for ThreadBound<T> {}

impl<T> ThreadBound<T> {
    /// `value`, bound to this thread.
    pub(crate) fn new(value: T) -> ThreadBound<T> {
        ThreadBound {
            owner: std::thread::current().id(),
            value: std::mem::ManuallyDrop::new(value),
        }
    }

    fn on_owner(&self) -> PyResult<()> {
        if std::thread::current().id() == self.owner {
            Ok(())
        } else {
            Err(errors::wrong_thread())
        }
    }

    /// The value, on its thread.
    pub(crate) fn get(&self) -> PyResult<&T> {
        self.on_owner()?;
        Ok(&self.value)
    }

    /// The value, on its thread.
    pub(crate) fn get_mut(&mut self) -> PyResult<&mut T> {
        self.on_owner()?;
        Ok(&mut self.value)
    }
}

impl<T> Drop for ThreadBound<T> {
    fn drop(&mut self) {
        if std::thread::current().id() == self.owner {
            // SAFETY: dropped once, here, on the owner thread; never used again.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.value) }
        }
    }
}

/// Longest a blocking wait runs without the GIL before it looks for a signal (Ctrl-C
/// raises `KeyboardInterrupt` within this long) and starts another slice.
pub(crate) const SIGNAL_SLICE: Duration = Duration::from_millis(100);

/// A blocking wait of `timeout` (`None`: forever) cut into slices of at most
/// [`SIGNAL_SLICE`], each run without the GIL, with a look for a signal between them.
pub(crate) struct Slices {
    deadline: Option<std::time::Instant>,
}

impl Slices {
    /// The wait starts now.
    pub(crate) fn new(timeout: Option<Duration>) -> Slices {
        Slices {
            deadline: timeout.and_then(|t| std::time::Instant::now().checked_add(t)),
        }
    }

    /// The next slice: what is left of the wait, at most [`SIGNAL_SLICE`].
    pub(crate) fn next(&self) -> Duration {
        self.deadline.map_or(SIGNAL_SLICE, |d| {
            d.saturating_duration_since(std::time::Instant::now())
                .min(SIGNAL_SLICE)
        })
    }

    /// Whether the wait's time is up.
    pub(crate) fn over(&self) -> bool {
        self.deadline
            .is_some_and(|d| std::time::Instant::now() >= d)
    }
}

/// A timeout in seconds from Python (`None`: forever).
pub(crate) fn timeout(seconds: Option<f64>) -> PyResult<Option<Duration>> {
    seconds
        .map(|s| {
            Duration::try_from_secs_f64(s).map_err(|_| {
                errors::invalid(format!(
                    "timeout must be a finite number of seconds >= 0, not {s}"
                ))
            })
        })
        .transpose()
}

/// The library's version (`hamlyn.__version__`).
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The extension module.
#[pymodule]
fn _hamlyn(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", VERSION)?;
    m.add("MAX_INLINE", hamlyn::MAX_INLINE)?;
    m.add("DEFAULT_SOCKET", hamlyn::DEFAULT_SOCKET)?;
    m.add("SOCKET_ENV", hamlyn::SOCKET_ENV)?;
    m.add("DEFAULT_STARVATION_BOUND", hamlyn::DEFAULT_STARVATION_BOUND)?;
    m.add("RPC_FRAMES", hamlyn_rpc::FRAMES)?;
    m.add("RPC_MAX_ARGS", hamlyn_rpc::MAX_ARGS)?;
    m.add("RPC_MAX_RESULT", hamlyn_rpc::MAX_RESULT)?;
    m.add_class::<node::PyNode>()?;
    m.add_class::<area::PyArea>()?;
    m.add_class::<area::PyMetaArea>()?;
    m.add_class::<slot::PySlot>()?;
    m.add_class::<ticket::PyTicket>()?;
    m.add_class::<terminus::PyTerminus>()?;
    m.add_class::<terminus::PySend>()?;
    m.add_class::<terminus::PyStatus>()?;
    m.add_class::<queue::PyQueue>()?;
    m.add_class::<queue::PyNotification>()?;
    m.add_class::<direct::PyDirectTarget>()?;
    m.add_class::<endpoint::PyEndpoint>()?;
    m.add_class::<endpoint::PyEndpointMessage>()?;
    m.add_class::<endpoint::PyEndpointGroup>()?;
    m.add_class::<am::PyAmEndpoint>()?;
    m.add_class::<am::PyAmCall>()?;
    m.add_class::<am::PyAmMemoryRegion>()?;
    m.add_class::<am::PyAmMemoryTarget>()?;
    m.add_function(wrap_pyfunction!(am::am_fingerprint, m)?)?;
    m.add_class::<rpc::PyRpcServer>()?;
    m.add_class::<rpc::PyRpcClient>()?;
    m.add_class::<rpc::PyRpcCall>()?;
    m.add_class::<rpc_ref::PyRpcContext>()?;
    m.add_class::<rpc_ref::PyRpcSegment>()?;
    m.add_class::<job::PyJob>()?;
    m.add_class::<rats::PyRats>()?;
    m.add_class::<rats::PyRatsTaggedServer>()?;
    m.add_class::<rats::PyRatsTaggedClient>()?;
    m.add_class::<rats::PyRatsRequestServer>()?;
    m.add_class::<rats::PyRatsRequest>()?;
    m.add_class::<rats::PyRatsRequestClient>()?;
    m.add_class::<rats::PyRatsDatagramReceiver>()?;
    m.add_class::<rats::PyRatsDatagram>()?;
    m.add_class::<rats::PyRatsDatagramSender>()?;
    m.add_class::<rats::PyRatsStreamReceiver>()?;
    m.add_class::<rats::PyRatsStreamSender>()?;
    m.add_class::<rats::PyRatsSimpleDatagram>()?;
    m.add_class::<rats::PyRatsSimpleClient>()?;
    m.add_class::<rats_remote::PyRatsRemoteWriteServer>()?;
    m.add_class::<rats_remote::PyRatsRemoteWriteClient>()?;
    m.add_class::<rats_remote::PyRatsRemoteReadServer>()?;
    m.add_class::<rats_remote::PyRatsRemoteReadClient>()?;
    m.add_function(wrap_pyfunction!(ticket::seed_from_tickets, m)?)?;
    m.add_function(wrap_pyfunction!(ticket::tickets_from_seed, m)?)?;
    m.add_function(wrap_pyfunction!(bench::bench_pong, m)?)?;
    m.add_function(wrap_pyfunction!(bench::bench_ping, m)?)?;
    Ok(())
}
