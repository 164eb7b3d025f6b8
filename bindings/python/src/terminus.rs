//! `hamlyn.Terminus` (a private send work queue: sends, remote reads and atomics),
//! `hamlyn.Send` (how one request ended, or that it has not) and `hamlyn.Status`.

use std::sync::{Arc, Mutex};

use hamlyn::{
    CompareSwapArgs, Data, FetchAddArgs, ReadArgs, SendHandle, SendOptions, Status, Terminus,
};
use pyo3::prelude::*;

use crate::area::PyArea;
use crate::errors::{self, check};
use crate::ticket::{with_bytes, PyTicket};
use crate::Life;

/// A private send work queue (`Node.terminus()`). A full queue is `FullError`
/// (back-pressure: nothing was queued), never a drop. `close()` gives it back, after
/// waiting (bounded) for its sends from areas.
#[pyclass(module = "hamlyn._hamlyn", name = "Terminus", frozen)]
pub struct PyTerminus {
    life: Arc<Life>,
    terminus: Mutex<Option<Terminus>>,
}

impl PyTerminus {
    pub(crate) fn new(life: Arc<Life>, t: Terminus) -> PyTerminus {
        PyTerminus {
            life,
            terminus: Mutex::new(Some(t)),
        }
    }

    /// Runs `f` on the terminus, if it and its node are open.
    pub(crate) fn with<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Terminus) -> PyResult<T>,
    ) -> PyResult<T> {
        self.life.check()?;
        let mut g = crate::lock(py, &self.terminus)?;
        match g.as_mut() {
            Some(t) => f(t),
            None => Err(errors::closed("the terminus is closed")),
        }
    }

    /// A wait on the terminus with `timeout` in seconds (None: forever), in slices
    /// without the GIL, so that a signal (Ctrl-C) raises between them: `wait` with a
    /// slice's timeout says whether what is waited for came.
    fn wait_sliced(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        wait: impl Fn(&mut Terminus, Option<std::time::Duration>) -> bool + Sync,
    ) -> PyResult<bool> {
        let timeout = crate::timeout(timeout)?;
        let slices = crate::Slices::new(timeout);
        loop {
            self.life.check()?;
            let slice = slices.next();
            let came = py.allow_threads(|| {
                let mut g = self.terminus.lock().map_err(|_| ())?;
                let t = g.as_mut().ok_or(())?;
                let came = wait(t, Some(slice));
                Ok((came, !came && t.engine_gone()))
            });
            match came {
                Err(()) => return Err(errors::closed("the terminus is closed")),
                Ok((true, _)) => return Ok(true),
                Ok((false, true)) => return check(Err(hamlyn::Error::EngineGone)),
                Ok((false, _)) if slices.over() => return Ok(false),
                Ok((false, _)) => py.check_signals()?,
            }
        }
    }

    /// A handle for request `h`.
    fn handle(&self, h: SendHandle) -> PySend {
        PySend {
            life: self.life.clone(),
            handle: h,
        }
    }
}

/// Send options from Python keywords.
pub(crate) fn options<'a>(
    tag: u64,
    offset: u64,
    meta: &'a [u8],
    notify: bool,
    wake: bool,
    fast: bool,
    entry: Option<u32>,
) -> PyResult<SendOptions<'a>> {
    let mut o = SendOptions::new()
        .tag(tag)
        .offset(offset)
        .meta(meta)
        .notify(notify)
        .wake(wake);
    match (fast, entry) {
        (true, Some(_)) => {
            return Err(errors::invalid(
                "a fast-mode message has no metadata entry: give fast or entry, not both"
                    .to_owned(),
            ))
        }
        (true, None) => o = o.fast(),
        (false, Some(e)) => o = o.entry(e),
        (false, None) => {}
    }
    Ok(o)
}

#[pymethods]
impl PyTerminus {
    /// Sends `data` (a bytes-like object of at most `MAX_INLINE` bytes, copied into the
    /// work queue: free again when this returns) to `ticket`'s slot, `offset` bytes into
    /// the ticket's range. `tag` is reported in the receiver's notification, `meta` (at
    /// most 60 bytes) deposited in its metadata entry (`entry`, else the ticket's first);
    /// `fast` sends in fast mode; `notify=False` posts no notification, `wake=False`
    /// does not wake a sleeping receiver. Returns the request's `Send` handle.
    #[pyo3(signature = (ticket, data, *, tag=0, offset=0, meta=None, notify=true, wake=true, fast=false, entry=None))]
    #[allow(clippy::too_many_arguments)] // Python keywords.
    fn send(
        &self,
        py: Python<'_>,
        ticket: &PyTicket,
        data: &Bound<'_, PyAny>,
        tag: u64,
        offset: u64,
        meta: Option<&[u8]>,
        notify: bool,
        wake: bool,
        fast: bool,
        entry: Option<u32>,
    ) -> PyResult<PySend> {
        let o = options(tag, offset, meta.unwrap_or(&[]), notify, wake, fast, entry)?;
        let h = with_bytes(data, |bytes| {
            self.with(py, |t| {
                check(t.send(&ticket.ticket, &o, Data::Inline(bytes)))
            })
        })?;
        Ok(self.handle(h))
    }

    /// Sends `length` bytes at `area_offset` of `area` (an area of this node; to its end
    /// by default) without copying them: do not rewrite them until the request is done
    /// (`Send.wait()`). Otherwise as `send`.
    #[pyo3(signature = (ticket, area, area_offset=0, length=None, *, tag=0, offset=0, meta=None, notify=true, wake=true, fast=false, entry=None))]
    #[allow(clippy::too_many_arguments)] // Python keywords.
    fn send_area(
        &self,
        py: Python<'_>,
        ticket: &PyTicket,
        area: &PyArea,
        area_offset: u64,
        length: Option<u64>,
        tag: u64,
        offset: u64,
        meta: Option<&[u8]>,
        notify: bool,
        wake: bool,
        fast: bool,
        entry: Option<u32>,
    ) -> PyResult<PySend> {
        let o = options(tag, offset, meta.unwrap_or(&[]), notify, wake, fast, entry)?;
        let area = area.get(py)?;
        let length = length.unwrap_or_else(|| area.len().saturating_sub(area_offset));
        let spans = [area.span(area_offset, length)];
        let h = self.with(py, |t| {
            check(t.send(&ticket.ticket, &o, Data::Gather(&spans)))
        })?;
        Ok(self.handle(h))
    }

    /// A remote read: `length` bytes at `offset` of `source`'s range (a ticket granting
    /// reads) land at `reply_offset` of `reply`'s slot (a ticket to a slot of this node),
    /// with a 'read_done' notification on the reply slot's queue whose `request` is this
    /// request's.
    #[pyo3(signature = (source, offset, length, reply, reply_offset=0))]
    fn read(
        &self,
        py: Python<'_>,
        source: &PyTicket,
        offset: u64,
        length: u64,
        reply: &PyTicket,
        reply_offset: u64,
    ) -> PyResult<PySend> {
        let args = ReadArgs {
            source: &source.ticket,
            offset,
            len: length,
            reply: &reply.ticket,
            reply_offset,
        };
        let h = self.with(py, |t| check(t.read(&args)))?;
        Ok(self.handle(h))
    }

    /// Compare-and-swap on the 8-byte word at `offset` of `target`'s range (a ticket
    /// granting atomics): if it equals `expected` it becomes `desired`. The old value
    /// arrives as the `word` of an 'atomic_done' notification naming this request, and
    /// as 8 bytes at `reply_offset` of `reply`'s slot.
    #[pyo3(signature = (target, offset, expected, desired, reply, reply_offset=0))]
    #[allow(clippy::too_many_arguments)] // Python arguments.
    fn compare_swap(
        &self,
        py: Python<'_>,
        target: &PyTicket,
        offset: u64,
        expected: u64,
        desired: u64,
        reply: &PyTicket,
        reply_offset: u64,
    ) -> PyResult<PySend> {
        let args = CompareSwapArgs {
            target: &target.ticket,
            offset,
            expected,
            new: desired,
            reply: &reply.ticket,
            reply_offset,
        };
        let h = self.with(py, |t| check(t.compare_swap(&args)))?;
        Ok(self.handle(h))
    }

    /// Fetch-and-add (wrapping) of `addend` on the 8-byte word at `offset` of `target`'s
    /// range; the old value arrives as for `compare_swap`.
    #[pyo3(signature = (target, offset, addend, reply, reply_offset=0))]
    fn fetch_add(
        &self,
        py: Python<'_>,
        target: &PyTicket,
        offset: u64,
        addend: u64,
        reply: &PyTicket,
        reply_offset: u64,
    ) -> PyResult<PySend> {
        let args = FetchAddArgs {
            target: &target.ticket,
            offset,
            addend,
            reply: &reply.ticket,
            reply_offset,
        };
        let h = self.with(py, |t| check(t.fetch_add(&args)))?;
        Ok(self.handle(h))
    }

    /// Waits up to `timeout` seconds (None: forever) until every request queued here is
    /// finished; whether they are. `EngineGoneError` if the engine is gone.
    #[pyo3(signature = (timeout=None))]
    fn wait_idle(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        self.wait_sliced(py, timeout, Terminus::wait_idle)
    }

    /// Waits up to `timeout` seconds (None: forever) until the work queue has room for
    /// one more request (a send would not raise FullError); whether it has.
    /// `EngineGoneError` if the engine is gone. What a sender that got FullError calls before it tries
    /// again: the queue stays as full as the engine takes it.
    #[pyo3(signature = (timeout=None))]
    fn wait_room(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        self.wait_sliced(py, timeout, Terminus::wait_room)
    }

    /// Requests queued here and not finished yet.
    #[getter]
    fn in_flight(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |t| Ok(t.in_flight()))
    }

    /// The terminus's index in the port.
    #[getter]
    fn index(&self, py: Python<'_>) -> PyResult<u16> {
        self.with(py, |t| Ok(t.index()))
    }

    /// Gives the terminus back, after waiting (bounded) for its sends from areas.
    /// Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let t = crate::lock(py, &self.terminus)?.take();
        py.allow_threads(|| drop(t));
        Ok(())
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

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.with(py, |t| Ok(t.index())) {
            Ok(i) => format!("<hamlyn.Terminus {i}>"),
            Err(_) => "<hamlyn.Terminus (closed)>".to_owned(),
        }
    }
}

/// One request queued on a terminus: its status now (`status`), or waited for
/// (`wait()`), or its outcome as an exception (`result()`).
#[pyclass(module = "hamlyn._hamlyn", name = "Send", frozen)]
pub struct PySend {
    life: Arc<Life>,
    pub(crate) handle: SendHandle,
}

impl PySend {
    /// A handle for request `handle` of a node whose life is `life` (the layers above
    /// the interface level hand out their sends' handles too).
    pub(crate) fn new(life: Arc<Life>, handle: SendHandle) -> PySend {
        PySend { life, handle }
    }
}

#[pymethods]
impl PySend {
    /// The request's status now (one shared-memory load, no waiting).
    #[getter]
    fn status(&self) -> PyResult<PyStatus> {
        self.life.check()?;
        Ok(PyStatus(self.handle.status()))
    }

    /// Whether the engine is done with the request (sent or failed).
    #[getter]
    fn done(&self) -> PyResult<bool> {
        self.life.check()?;
        Ok(self.handle.is_done())
    }

    /// Waits up to `timeout` seconds (None: forever) for the request to finish; its
    /// status (still pending at the timeout). A dead engine ends the wait as failed,
    /// 'peer_down'.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<PyStatus> {
        let timeout = crate::timeout(timeout)?;
        self.life.check()?;
        if self.handle.is_done() {
            return Ok(PyStatus(self.handle.status()));
        }
        // In slices, so that a signal (Ctrl-C) raises between them.
        let slices = crate::Slices::new(timeout);
        loop {
            let slice = slices.next();
            let status = py.allow_threads(|| self.handle.wait(Some(slice)));
            if status != Status::Pending || slices.over() {
                return Ok(PyStatus(status));
            }
            py.check_signals()?;
            self.life.check()?;
        }
    }

    /// Waits as `wait` and returns None if the request was sent; raises `RejectedError`
    /// (`BadKeyError` for a wrong or stale key) if it failed, `TimeoutError` if it is
    /// still pending after `timeout` seconds.
    #[pyo3(signature = (timeout=None))]
    fn result(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<()> {
        match self.wait(py, timeout)?.0 {
            Status::Sent => Ok(()),
            Status::Pending => Err(errors::timed_out(format!(
                "the request is still pending after {:?} s",
                timeout.unwrap_or(f64::INFINITY)
            ))),
            Status::Failed(r) => Err(errors::rejected(Some(r), u16::from(r.code()))),
            Status::FailedCode(c) => Err(errors::rejected(None, c)),
            _ => Err(errors::rejected(None, 0)),
        }
    }

    /// The request's name `(terminus, seq)`, as the notification answering a read or an
    /// atomic gives it (`Notification.request`).
    #[getter]
    fn request(&self) -> (u16, u32) {
        let r = self.handle.request();
        (r.terminus, r.seq)
    }

    fn __repr__(&self) -> String {
        let r = self.handle.request();
        format!(
            "<hamlyn.Send {}:{} {}>",
            r.terminus,
            r.seq,
            PyStatus(self.handle.status()).__repr__()
        )
    }
}

/// How a request stands: `state` is 'pending', 'sent' or 'failed'; a failed one has a
/// `reason` (the engine's reject reason: 'bad_key', 'revoked', ...) and its `code`.
#[pyclass(module = "hamlyn._hamlyn", name = "Status", frozen, eq)]
#[derive(Clone, Copy, PartialEq)]
pub struct PyStatus(pub(crate) Status);

#[pymethods]
impl PyStatus {
    /// 'pending', 'sent' or 'failed'.
    #[getter]
    fn state(&self) -> &'static str {
        match self.0 {
            Status::Pending => "pending",
            Status::Sent => "sent",
            _ => "failed",
        }
    }

    /// A failed request's reason ('bad_key', 'revoked', 'out_of_bounds', ...; 'unknown'
    /// for a code this library does not know), else None.
    #[getter]
    fn reason(&self) -> Option<&'static str> {
        match self.0 {
            Status::Failed(r) => Some(r.name()),
            Status::Pending | Status::Sent => None,
            _ => Some("unknown"),
        }
    }

    /// A failed request's reject code (the wire spec lists them), else 0.
    #[getter]
    fn code(&self) -> u16 {
        match self.0 {
            Status::Failed(r) => u16::from(r.code()),
            Status::FailedCode(c) => c,
            _ => 0,
        }
    }

    /// Whether the engine has not finished the request.
    #[getter]
    fn pending(&self) -> bool {
        self.0 == Status::Pending
    }

    /// Whether it was sent without error.
    #[getter]
    fn sent(&self) -> bool {
        self.0 == Status::Sent
    }

    /// Whether it failed.
    #[getter]
    fn failed(&self) -> bool {
        self.0.is_failed()
    }

    fn __repr__(&self) -> String {
        match self.reason() {
            Some(r) => format!("<hamlyn.Status failed: {r}>"),
            None => format!("<hamlyn.Status {}>", self.state()),
        }
    }
}
