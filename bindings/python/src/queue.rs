//! `hamlyn.Queue` (the consumer of one notification queue: poll, wait, the event fd,
//! `await queue.wait_async()`) and `hamlyn.Notification`.

use std::sync::{Arc, Mutex};

use hamlyn::{Node, Notification, NotificationKind, NotifyQueue};
use pyo3::prelude::*;

use crate::errors::{self, check};
use crate::Life;

/// The consumer of one notification queue (`Node.queue(index)`), where arrivals, read
/// answers and atomic answers are reported. One per queue: `close()` lets another take it.
#[pyclass(module = "hamlyn._hamlyn", name = "Queue", frozen)]
pub struct PyQueue {
    life: Arc<Life>,
    /// The node, for its event descriptor.
    node: Node,
    index: u16,
    queue: Mutex<Option<NotifyQueue>>,
}

impl PyQueue {
    pub(crate) fn new(life: Arc<Life>, node: Node, q: NotifyQueue) -> PyQueue {
        PyQueue {
            life,
            node,
            index: q.index(),
            queue: Mutex::new(Some(q)),
        }
    }

    /// Runs `f` on the queue, if it and its node are open.
    pub(crate) fn with<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut NotifyQueue) -> PyResult<T>,
    ) -> PyResult<T> {
        self.life.check()?;
        let mut g = crate::lock(py, &self.queue)?;
        match g.as_mut() {
            Some(q) => f(q),
            None => Err(errors::closed("the queue is closed")),
        }
    }
}

impl PyQueue {
    /// The node's life (to check that objects come from the same node).
    pub(crate) fn life(&self) -> Arc<Life> {
        self.life.clone()
    }

    /// The queue's index.
    pub(crate) fn index_of(&self) -> u16 {
        self.index
    }

    /// Takes the consumer out of this handle (an endpoint group takes over the queue;
    /// the handle is closed from then on).
    pub(crate) fn take(&self, py: Python<'_>) -> PyResult<NotifyQueue> {
        self.life.check()?;
        crate::lock(py, &self.queue)?
            .take()
            .ok_or_else(|| errors::closed("the queue is closed"))
    }
}

/// Why a wait without the GIL could not run.
enum Blocked {
    Closed,
    Poisoned,
}

#[pymethods]
impl PyQueue {
    /// The queue's index in the port (what `Node.slot(queue=...)` takes).
    #[getter]
    fn index(&self) -> u16 {
        self.index
    }

    /// The next notification, or None if there is none: never blocks.
    fn poll(&self, py: Python<'_>) -> PyResult<Option<PyNotification>> {
        self.with(py, |q| Ok(q.poll().map(PyNotification::from)))
    }

    /// The next notification, waiting up to `timeout` seconds (None: forever) for one
    /// without the GIL: spins briefly, then sleeps until the engine posts. None at the
    /// timeout; `EngineGoneError` if the engine died (after what it had posted).
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyNotification>> {
        let timeout = crate::timeout(timeout)?;
        if let Some(n) = self.with(py, |q| Ok(q.poll()))? {
            return Ok(Some(n.into()));
        }
        // In slices, so that a signal (Ctrl-C) raises between them: a wait without the
        // GIL cannot run Python's signal handlers.
        let slices = crate::Slices::new(timeout);
        loop {
            let slice = slices.next();
            let got = py.allow_threads(|| {
                let mut g = self.queue.lock().map_err(|_| Err(Blocked::Poisoned))?;
                let q = g.as_mut().ok_or(Err(Blocked::Closed))?;
                q.wait(Some(slice)).map_err(Ok)
            });
            match got {
                Ok(Some(n)) => return Ok(Some(n.into())),
                Ok(None) if slices.over() => return Ok(None),
                Ok(None) => py.check_signals()?,
                Err(Ok(e)) => return check(Err(e)),
                Err(Err(Blocked::Closed)) => return Err(errors::closed("the queue is closed")),
                Err(Err(Blocked::Poisoned)) => return Err(errors::poisoned()),
            }
        }
    }

    /// Event-loop mode: asks for the node's event descriptor (`event_fd`) to become
    /// readable on the next post to this queue. True if a notification is already
    /// waiting (poll it before going back to the event loop).
    fn arm(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |q| Ok(q.arm()))
    }

    /// The node's event descriptor (`Node.event_fd`).
    #[getter]
    fn event_fd(&self) -> PyResult<i32> {
        use std::os::fd::AsRawFd;
        self.life.check()?;
        Ok(self.node.event_fd().as_raw_fd())
    }

    /// `event_fd`, for `select` and `selectors`.
    fn fileno(&self) -> PyResult<i32> {
        self.event_fd()
    }

    /// Takes the pokes waiting on the event descriptor (`Node.drain_event_fd`).
    fn drain_event_fd(&self) -> PyResult<u64> {
        self.life.check()?;
        check(self.node.drain_event_fd())
    }

    /// Notifications lost to this queue being full.
    #[getter]
    fn overflows(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |q| Ok(q.overflows()))
    }

    /// `await queue.wait_async(timeout)`: the next notification, waiting in the running
    /// asyncio loop (`loop.add_reader` on the event descriptor), never blocking it; None
    /// at the timeout.
    #[pyo3(signature = (timeout=None))]
    fn wait_async<'py>(
        slf: &Bound<'py, Self>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let aio = slf.py().import("hamlyn._aio")?;
        aio.getattr("wait")?.call1((slf, timeout))
    }

    /// Gives the queue back (another handle may take it). Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let q = crate::lock(py, &self.queue)?.take();
        drop(q);
        Ok(())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(crate::lock(py, &self.queue)?.is_none())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<PyObject>,
        _v: Option<PyObject>,
        _tb: Option<PyObject>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("<hamlyn.Queue {}>", self.index)
    }
}

/// One notification. `kind` is 'message' (every packet of a message arrived), 'fast'
/// (a fast-mode message; `word` is its metadata), 'peer_down', 'read_done',
/// 'atomic_done' (`word` is the old value), 'overflow' (`word` notifications were lost)
/// or 'unknown' (`raw_kind` is its code).
#[pyclass(module = "hamlyn._hamlyn", name = "Notification", frozen, eq)]
#[derive(Clone, Copy, PartialEq)]
pub struct PyNotification(Notification);

impl From<Notification> for PyNotification {
    fn from(n: Notification) -> PyNotification {
        PyNotification(n)
    }
}

#[pymethods]
impl PyNotification {
    /// What happened: 'message', 'fast', 'peer_down', 'read_done', 'atomic_done',
    /// 'overflow' or 'unknown'.
    #[getter]
    fn kind(&self) -> &'static str {
        match self.0.kind {
            NotificationKind::Message => "message",
            NotificationKind::Fast => "fast",
            NotificationKind::PeerDown => "peer_down",
            NotificationKind::ReadDone => "read_done",
            NotificationKind::AtomicDone => "atomic_done",
            NotificationKind::Overflow => "overflow",
            _ => "unknown",
        }
    }

    /// The kind's code as posted (for 'unknown'), else 0.
    #[getter]
    fn raw_kind(&self) -> u16 {
        match self.0.kind {
            NotificationKind::Unknown(raw) => raw,
            _ => 0,
        }
    }

    /// The slot the message arrived in.
    #[getter]
    fn slot(&self) -> u32 {
        self.0.slot.0
    }

    /// The message's metadata entry (slot-relative), None in fast mode.
    #[getter]
    fn meta_index(&self) -> Option<u32> {
        self.0.meta_index
    }

    /// The tag, the fast-mode metadata, the old value of an atomic, or a count.
    #[getter]
    fn word(&self) -> u64 {
        self.0.word
    }

    /// The sending node.
    #[getter]
    fn src_node(&self) -> u32 {
        self.0.src_node.0
    }

    /// 'message': the message's payload bytes (modulo 2**32); 'fast': its packet's.
    #[getter]
    fn length(&self) -> u32 {
        self.0.len
    }

    /// Header flags of the packet that completed the message.
    #[getter]
    fn flags(&self) -> u16 {
        self.0.flags
    }

    /// The request `(terminus, seq)` a 'read_done' or 'atomic_done' answers (equal to
    /// that request's `Send.request`), else None.
    #[getter]
    fn request(&self) -> Option<(u16, u32)> {
        self.0.request.map(|r| (r.terminus, r.seq))
    }

    fn __repr__(&self) -> String {
        format!(
            "<hamlyn.Notification {} slot {} entry {} word {} length {}>",
            self.kind(),
            self.0.slot.0,
            self.0
                .meta_index
                .map_or_else(|| "None".to_owned(), |i| i.to_string()),
            self.0.word,
            self.0.len
        )
    }
}
