//! `hamlyn.AmEndpoint` (GRIM's active messages, crate hamlyn-am): Python callables
//! registered as handlers by name, numbered cluster-wide by `synch`, called by short,
//! bulk and memory messages; `hamlyn.AmCall` (what a handler gets: the message and its
//! reply token), `hamlyn.AmMemoryRegion` and `hamlyn.AmMemoryTarget`.
//!
//! Handlers run inside `poll()` (and inside the calls that poll while they wait: `wait`,
//! `call`, `connect`, a first send to a peer) on the endpoint's thread, holding the GIL
//! while they run, never from another thread: the endpoint is a thread's own, as in Rust
//! (its protocol manager is not `Send`), kept in a [`ThreadBound`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hamlyn_am::{
    fingerprint, Addr, AmEndpoint, AmError, AmOptions, CallId, Ctx, HandlerId, MemoryRegion,
    MemoryTarget, Outcome, Want,
};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{self, am_check};
use crate::node::PyNode;
use crate::terminus::PySend;
use crate::ticket::with_bytes;
use crate::{unblocked, Life, ThreadBound};

/// An endpoint's address as Python sees it: `(node, client)`.
type PyAddr = (u32, u32);

fn addr((node, client): PyAddr) -> Addr {
    Addr {
        node: hamlyn::NodeId(node),
        client,
    }
}

fn py_addr(a: Addr) -> PyAddr {
    (a.node.0, a.client)
}

/// A fingerprint given as an int, or as the text of an argument layout (hashed by
/// `hamlyn_am::fingerprint`).
#[derive(FromPyObject)]
enum Fingerprint {
    Int(u64),
    Layout(String),
}

/// A handler named by name (resolved from the local table) or by `(id, epoch)`.
#[derive(FromPyObject)]
enum HandlerRef {
    Name(String),
    Id((u32, u32)),
}

/// Parses what a sender waits for.
fn want(name: &str) -> PyResult<Want> {
    match name {
        "nothing" => Ok(Want::Nothing),
        "ack" => Ok(Want::Ack),
        "reply" => Ok(Want::Reply),
        other => Err(errors::invalid(format!(
            "want must be 'nothing', 'ack' or 'reply', not {other:?}"
        ))),
    }
}

/// Four arguments from a sequence of at most four ints (the rest 0).
fn args(a: Vec<u64>) -> PyResult<[u64; 4]> {
    if a.len() > 4 {
        return Err(errors::invalid(format!(
            "at most four arguments, not {}",
            a.len()
        )));
    }
    let mut out = [0u64; 4];
    out[..a.len()].copy_from_slice(&a);
    Ok(out)
}

/// What a Python handler's call object shares with the Rust handler around it.
#[derive(Default)]
struct Token {
    /// Whether the handler is still running (a reply after it returned is refused).
    open: bool,
    /// The reply given, if any.
    reply: Option<[u64; 4]>,
    /// Whether a second reply was tried (refused; the message's sender gets an error).
    twice: bool,
}

/// One message, as its handler sees it: `args` (four ints), `channel` (the sender's
/// logical channel), `src` (the sending endpoint's `(node, client)`), `payload` (a bulk
/// message's bytes, copied out of the receive buffer; empty for a short message), and
/// the reply token: `reply(a, b, c, d)` at most once, while the handler runs.
#[pyclass(module = "hamlyn._hamlyn", name = "AmCall", frozen)]
pub struct PyAmCall {
    args: [u64; 4],
    channel: u16,
    src: PyAddr,
    payload: Vec<u8>,
    token: Arc<Mutex<Token>>,
}

#[pymethods]
impl PyAmCall {
    /// The four arguments.
    #[getter]
    fn args(&self) -> (u64, u64, u64, u64) {
        let [a, b, c, d] = self.args;
        (a, b, c, d)
    }

    /// The sender's logical channel.
    #[getter]
    fn channel(&self) -> u16 {
        self.channel
    }

    /// The sending endpoint, `(node, client)`.
    #[getter]
    fn src(&self) -> PyAddr {
        self.src
    }

    /// A bulk message's payload (a copy; empty for a short message).
    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.payload)
    }

    /// Replies with up to four ints (the rest 0), once: a second reply raises
    /// `ReplyTwiceError` and the sender gets an error instead of a reply; a reply after
    /// the handler returned raises `ClosedError`.
    #[pyo3(signature = (*args))]
    fn reply(&self, py: Python<'_>, args: Vec<u64>) -> PyResult<()> {
        let a = self::args(args)?;
        let mut t = crate::lock(py, &self.token)?;
        if !t.open {
            return Err(errors::closed(
                "the handler has returned: its reply token is spent",
            ));
        }
        if t.reply.is_some() {
            t.twice = true;
            return Err(errors::am(AmError::ReplyTwice));
        }
        t.reply = Some(a);
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!(
            "<hamlyn.AmCall args {:?} channel {} from {:?}, {} payload bytes>",
            self.args,
            self.channel,
            self.src,
            self.payload.len()
        )
    }
}

/// Runs Python handler `f` for the message in `ctx`: an exception it raises (or a reply
/// token used twice) goes back to the sender as an error completion naming the handler,
/// with the exception's text.
fn run_handler(f: &Py<PyAny>, ctx: &mut Ctx<'_>) -> Result<(), String> {
    let payload = if ctx.payload_len() > 0 {
        ctx.payload().map_err(|e| e.to_string())?
    } else {
        Vec::new()
    };
    let token = Arc::new(Mutex::new(Token {
        open: true,
        ..Token::default()
    }));
    let call = PyAmCall {
        args: ctx.args(),
        channel: ctx.channel(),
        src: py_addr(ctx.src()),
        payload,
        token: token.clone(),
    };
    let ran = Python::with_gil(|py| f.call1(py, (call,)).map(drop).map_err(|e| e.to_string()));
    let t = {
        let mut g = token
            .lock()
            .map_err(|_| "a reply token's lock was poisoned")?;
        g.open = false;
        std::mem::take(&mut *g)
    };
    if let Some(r) = t.reply {
        ctx.reply(r).map_err(|e| e.to_string())?;
        if t.twice {
            // Through the token, so that the endpoint counts it and answers with an error.
            let _ = ctx.reply(r);
        }
    }
    ran
}

/// An active-message endpoint on a node (`AmEndpoint(node)`): it registers handlers by
/// name, sends short, bulk and memory messages to other endpoints (`(node, client)`
/// addresses), and runs the handlers of what arrives inside `poll()`. It takes a
/// notification queue and termini of the node for itself (make it on a node of its
/// own when the program uses the node for other things too). One thread's: calls from
/// another thread raise `WrongThreadError`. Inside a handler, the endpoint is busy
/// (polling): answer through the call's reply token, not with the endpoint's methods.
#[pyclass(module = "hamlyn._hamlyn", name = "AmEndpoint")]
pub struct PyAmEndpoint {
    life: Arc<Life>,
    ep: ThreadBound<Option<AmEndpoint>>,
}

impl PyAmEndpoint {
    fn ep(&mut self) -> PyResult<&mut AmEndpoint> {
        self.life.check()?;
        self.ep
            .get_mut()?
            .as_mut()
            .ok_or_else(|| errors::closed("the active-message endpoint is closed"))
    }

    fn handler(&mut self, h: HandlerRef) -> PyResult<HandlerId> {
        match h {
            HandlerRef::Name(n) => am_check(self.ep()?.handler_by_name(&n)),
            HandlerRef::Id((id, epoch)) => Ok(HandlerId { id, epoch }),
        }
    }
}

#[pymethods]
impl PyAmEndpoint {
    /// An endpoint on `node` (its connection). `max_peers`: most peers it links with;
    /// `short_credits`, `bulk_credits` (1..=16): messages a peer may have in flight to
    /// it; `bulk_max`: the largest bulk payload it takes.
    #[new]
    #[pyo3(signature = (node, *, max_peers=16, short_credits=16, bulk_credits=2, bulk_max=65536))]
    fn new(
        py: Python<'_>,
        node: &PyNode,
        max_peers: u32,
        short_credits: u32,
        bulk_credits: u32,
        bulk_max: u64,
    ) -> PyResult<PyAmEndpoint> {
        let n = node.get(py)?;
        let options = AmOptions {
            max_peers,
            short_credits,
            bulk_credits,
            bulk_max,
        };
        let ep = unblocked(py, n, move |n| AmEndpoint::new(n, options));
        Ok(PyAmEndpoint {
            life: node.life(),
            ep: ThreadBound::new(Some(am_check(ep)?)),
        })
    }

    /// Where this endpoint is, `(node, client)`: what other endpoints send to.
    #[getter]
    fn addr(&mut self) -> PyResult<PyAddr> {
        Ok(py_addr(self.ep()?.addr()))
    }

    /// The address of `node`'s engine, which runs the engine-resident handlers
    /// ('hamlyn.ping', 'hamlyn.echo', 'hamlyn.counter', 'hamlyn.stats').
    #[staticmethod]
    fn engine_addr(node: u32) -> PyAddr {
        py_addr(Addr::engine(hamlyn::NodeId(node)))
    }

    /// Registers callable `handler` locally under `name`, with the fingerprint of its
    /// argument layout (`fingerprint`: an int, or the layout's text, hashed as
    /// `hamlyn.am_fingerprint` does, so a Rust handler registered with
    /// `fingerprint("u64 a, u64 b")` and a Python one with "u64 a, u64 b" agree). The
    /// cluster numbers it at the next `synch()`. The handler is called with an
    /// `AmCall` inside `poll()`; an exception it raises is an error completion at the
    /// sender. `InvalidArgumentError` for a bad or duplicate name.
    fn register(
        &mut self,
        name: &str,
        fingerprint: Fingerprint,
        handler: Py<PyAny>,
    ) -> PyResult<()> {
        let fp = match fingerprint {
            Fingerprint::Int(v) => v,
            Fingerprint::Layout(text) => self::fingerprint(&text),
        };
        am_check(
            self.ep()?
                .register(name, fp, move |ctx| run_handler(&handler, ctx)),
        )
    }

    /// Removes a local handler at once: a message for it fails here from now on (its
    /// sender gets an error naming it). The cluster hears at the next `synch()`.
    fn unregister(&mut self, name: &str) -> PyResult<()> {
        am_check(self.ep()?.unregister(name))
    }

    /// Sends the local handler list's changes to the cluster's registry node, which
    /// numbers new names, and fetches the cluster's table back. A name the cluster has
    /// with another fingerprint is `CollisionError` (that handler is dropped here).
    fn synch(&mut self, py: Python<'_>) -> PyResult<()> {
        let ep = self.ep()?;
        am_check(unblocked(py, ep, |ep| ep.synch()))
    }

    /// Fetches the cluster's table (a late joiner's first step).
    fn refresh(&mut self, py: Python<'_>) -> PyResult<()> {
        let ep = self.ep()?;
        am_check(unblocked(py, ep, |ep| ep.refresh()))
    }

    /// A live handler's `(id, epoch)` by name, from the local copy of the cluster's
    /// table; `UnknownHandlerError` if it has none.
    fn handler_by_name(&mut self, name: &str) -> PyResult<(u32, u32)> {
        let h = am_check(self.ep()?.handler_by_name(name))?;
        Ok((h.id, h.epoch))
    }

    /// The local copy of the cluster's table: `(version, [(name, id, epoch, live,
    /// fingerprint), ...])`.
    #[allow(clippy::type_complexity)] // Python's tuples.
    fn table(&mut self) -> PyResult<(u64, Vec<(String, u32, u32, bool, u64)>)> {
        let (version, rows) = self.ep()?.table();
        Ok((
            version,
            rows.iter()
                .map(|r| (r.name.clone(), r.id, r.epoch, r.live, r.fingerprint))
                .collect(),
        ))
    }

    /// Per-handler counters of this process's handlers: `{name: {'calls', 'replies',
    /// 'errors', 'refused'}}`.
    fn handler_counters(
        &mut self,
    ) -> PyResult<std::collections::BTreeMap<String, std::collections::BTreeMap<&'static str, u64>>>
    {
        Ok(self
            .ep()?
            .handler_counters()
            .into_iter()
            .map(|(n, c)| {
                let m = [
                    ("calls", c.calls),
                    ("replies", c.replies),
                    ("errors", c.errors),
                    ("refused", c.refused),
                ]
                .into_iter()
                .collect();
                (n, m)
            })
            .collect())
    }

    /// Endpoint-wide counters, as a dict: 'handled', 'unknown_handler', 'stale_epoch',
    /// 'malformed', 'reply_refused', 'full', 'bad_hellos', 'failures_dropped',
    /// 'answers_dropped', 'link_failures'.
    fn counters(&mut self) -> PyResult<std::collections::BTreeMap<&'static str, u64>> {
        let c = self.ep()?.counters();
        Ok([
            ("handled", c.handled),
            ("unknown_handler", c.unknown_handler),
            ("stale_epoch", c.stale_epoch),
            ("malformed", c.malformed),
            ("reply_refused", c.reply_refused),
            ("full", c.full),
            ("bad_hellos", c.bad_hellos),
            ("failures_dropped", c.failures_dropped),
            ("answers_dropped", c.answers_dropped),
            ("link_failures", c.link_failures),
        ]
        .into_iter()
        .collect())
    }

    /// Reports the per-handler counters to the engine now (for `hamlyn stat`; `poll`
    /// does it by itself at most once a second while they change).
    fn report_counters(&mut self, py: Python<'_>) -> PyResult<()> {
        let ep = self.ep()?;
        am_check(unblocked(py, ep, |ep| ep.report_counters()))
    }

    /// Opens a logical channel: a terminus of this endpoint's own at `priority` (0
    /// first); its number, which travels with every message sent on it (channel 0 is
    /// always open).
    fn open_channel(&mut self, py: Python<'_>, priority: u8) -> PyResult<u16> {
        let ep = self.ep()?;
        am_check(unblocked(py, ep, |ep| ep.open_channel(priority)))
    }

    /// Links with endpoint `peer` (a first send does it too), waiting up to `timeout`
    /// seconds and running arriving handlers meanwhile.
    #[pyo3(signature = (peer, timeout=30.0))]
    fn connect(&mut self, py: Python<'_>, peer: PyAddr, timeout: f64) -> PyResult<()> {
        let t = crate::timeout(Some(timeout))?.unwrap_or(Duration::ZERO);
        let ep = self.ep()?;
        am_check(unblocked(py, ep, |ep| ep.connect(addr(peer), t)))
    }

    /// Sends a short message (handler, logical channel, up to four int arguments; one
    /// packet) to `to`; the call's number. `handler` is a name (resolved from the local
    /// table) or an `(id, epoch)`. `want`: 'nothing' (an error still comes back, see
    /// `failures()`), 'ack' (remote completion) or 'reply', waited for with `wait(call)`.
    /// `FullError` when the link has no credit (nothing sent: `poll()` and send again).
    #[pyo3(signature = (to, handler, args=Vec::new(), *, channel=0, want="nothing"))]
    fn send_short(
        &mut self,
        py: Python<'_>,
        to: PyAddr,
        handler: HandlerRef,
        args: Vec<u64>,
        channel: u16,
        want: &str,
    ) -> PyResult<u64> {
        let (h, a, w) = (self.handler(handler)?, self::args(args)?, self::want(want)?);
        let ep = self.ep()?;
        let c = unblocked(py, ep, |ep| ep.send_short(addr(to), h, channel, a, w));
        Ok(am_check(c)?.0)
    }

    /// Sends a bulk message: arguments and `payload` (a bytes-like object, up to the
    /// receiver's `bulk_max`) into a receive buffer the receiver granted. `FullError`
    /// when the link has no bulk credit; `TooLongError` for a payload too long.
    /// Otherwise as `send_short`.
    #[pyo3(signature = (to, handler, payload, args=Vec::new(), *, channel=0, want="nothing"))]
    #[allow(clippy::too_many_arguments)] // Python keywords.
    fn send_bulk(
        &mut self,
        py: Python<'_>,
        to: PyAddr,
        handler: HandlerRef,
        payload: &Bound<'_, PyAny>,
        args: Vec<u64>,
        channel: u16,
        want: &str,
    ) -> PyResult<u64> {
        let (h, a, w) = (self.handler(handler)?, self::args(args)?, self::want(want)?);
        let bytes = with_bytes(payload, |b| Ok(b.to_vec()))?;
        let ep = self.ep()?;
        let c = unblocked(py, ep, |ep| {
            ep.send_bulk(addr(to), h, channel, a, &bytes, w)
        });
        Ok(am_check(c)?.0)
    }

    /// Waits up to `timeout` seconds for call `call` (sent with want 'ack' or 'reply'),
    /// running arriving handlers meanwhile: the reply's four ints, or None for remote
    /// completion. `HandlerRefusedError` if the receiver refused it or its handler
    /// failed (the message names the handler), `TimeoutError`, `PeerGoneError`.
    #[pyo3(signature = (call, timeout=30.0))]
    fn wait(
        &mut self,
        py: Python<'_>,
        call: u64,
        timeout: f64,
    ) -> PyResult<Option<(u64, u64, u64, u64)>> {
        let t = crate::timeout(Some(timeout))?.unwrap_or(Duration::ZERO);
        let ep = self.ep()?;
        match am_check(unblocked(py, ep, |ep| ep.wait(CallId(call), t)))? {
            Outcome::Reply([a, b, c, d]) => Ok(Some((a, b, c, d))),
            Outcome::Done => Ok(None),
        }
    }

    /// A short message asking for a reply, waited for up to `timeout` seconds (sent
    /// again while the link is full): the reply's four ints.
    #[pyo3(signature = (to, handler, args=Vec::new(), *, channel=0, timeout=30.0))]
    fn call(
        &mut self,
        py: Python<'_>,
        to: PyAddr,
        handler: HandlerRef,
        args: Vec<u64>,
        channel: u16,
        timeout: f64,
    ) -> PyResult<(u64, u64, u64, u64)> {
        let t = crate::timeout(Some(timeout))?.unwrap_or(Duration::ZERO);
        let (h, a) = (self.handler(handler)?, self::args(args)?);
        let ep = self.ep()?;
        let [a, b, c, d] = am_check(unblocked(py, ep, |ep| ep.call(addr(to), h, channel, a, t)))?;
        Ok((a, b, c, d))
    }

    /// Failures of messages nobody waits for (want 'nothing'), oldest first, taken:
    /// `[(call, exception), ...]`.
    fn failures(&mut self) -> PyResult<Vec<(u64, PyErr)>> {
        Ok(self
            .ep()?
            .failures()
            .into_iter()
            .map(|f| (f.call.0, errors::am(f.error)))
            .collect())
    }

    /// Runs the handlers of what arrived (GRIM's `grim_poll`), waiting up to `timeout`
    /// seconds (None: until something arrives) without the GIL when nothing has; the
    /// handlers run with the GIL, on this thread. The number of messages handled (a
    /// bounded number: call it again while it returns work).
    #[pyo3(signature = (timeout=None))]
    fn poll(&mut self, py: Python<'_>, timeout: Option<f64>) -> PyResult<usize> {
        let timeout = crate::timeout(timeout)?;
        let slices = crate::Slices::new(timeout);
        loop {
            // In slices, so that a signal (Ctrl-C) raises between them.
            let slice = slices.next();
            let ep = self.ep()?;
            let n = am_check(unblocked(py, ep, |ep| ep.poll(Some(slice))))?;
            if n > 0 || slices.over() {
                return Ok(n);
            }
            py.check_signals()?;
        }
    }

    /// A region of this endpoint's memory of `length` bytes that memory messages copy
    /// into (a block copy, no handler).
    fn memory_region(&mut self, py: Python<'_>, length: u64) -> PyResult<PyAmMemoryRegion> {
        let ep = self.ep()?;
        let r = am_check(unblocked(py, ep, |ep| ep.memory_region(length)))?;
        Ok(PyAmMemoryRegion {
            life: self.life.clone(),
            region: ThreadBound::new(r),
        })
    }

    /// The sending side of memory messages to the region seed text `seed` names.
    fn memory_target(&mut self, py: Python<'_>, seed: &str) -> PyResult<PyAmMemoryTarget> {
        let seed = crate::ticket::seed_from_text(seed)?;
        let ep = self.ep()?;
        let t = am_check(unblocked(py, ep, |ep| ep.memory_target(&seed)))?;
        Ok(PyAmMemoryTarget {
            life: self.life.clone(),
            target: ThreadBound::new(t),
        })
    }

    /// Closes the endpoint (its handlers are gone; calls raise `ClosedError`). Closing
    /// twice does nothing.
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        if let Some(ep) = self.ep.get_mut()?.take() {
            unblocked(py, ep, drop);
        }
        Ok(())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> PyResult<bool> {
        Ok(self.ep.get()?.is_none())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &mut self,
        py: Python<'_>,
        _t: Option<PyObject>,
        _v: Option<PyObject>,
        _tb: Option<PyObject>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match self.ep.get() {
            Ok(Some(ep)) => {
                let a = ep.addr();
                format!("<hamlyn.AmEndpoint node {} client {}>", a.node.0, a.client)
            }
            Ok(None) => "<hamlyn.AmEndpoint (closed)>".to_owned(),
            Err(_) => "<hamlyn.AmEndpoint (another thread's)>".to_owned(),
        }
    }
}

/// A region of an endpoint's memory that memory messages copy into.
#[pyclass(module = "hamlyn._hamlyn", name = "AmMemoryRegion", frozen)]
pub struct PyAmMemoryRegion {
    life: Arc<Life>,
    region: ThreadBound<MemoryRegion>,
}

#[pymethods]
impl PyAmMemoryRegion {
    /// The seed text a sender writes it through (`AmEndpoint.memory_target(seed)`).
    #[getter]
    fn seed(&self) -> PyResult<String> {
        self.life.check()?;
        let seed = am_check(self.region.get()?.seed())?;
        crate::ticket::seed_to_text(&seed)
    }

    /// `length` bytes at `offset`, copied out.
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        length: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.life.check()?;
        let mut v = vec![0u8; length];
        am_check(self.region.get()?.read(offset, &mut v))?;
        Ok(PyBytes::new(py, &v))
    }
}

/// The sending side of memory messages to one region.
#[pyclass(module = "hamlyn._hamlyn", name = "AmMemoryTarget", frozen)]
pub struct PyAmMemoryTarget {
    life: Arc<Life>,
    target: ThreadBound<MemoryTarget>,
}

#[pymethods]
impl PyAmMemoryTarget {
    /// Copies `data` (a bytes-like object) to `offset` of the region; the `Send` turns
    /// 'sent' once the bytes left this engine, or fails (outside the region, peer
    /// gone...).
    fn write(&self, offset: u64, data: &Bound<'_, PyAny>) -> PyResult<PySend> {
        self.life.check()?;
        let target = self.target.get()?;
        let h = with_bytes(data, |b| am_check(target.write(offset, b)))?;
        Ok(PySend::new(self.life.clone(), h))
    }
}

/// The fingerprint of an argument layout given as text (FNV-1a, 64 bits): what
/// `AmEndpoint.register` computes from a layout string, and Rust's
/// `hamlyn_am::fingerprint`.
#[pyfunction]
pub fn am_fingerprint(layout: &str) -> u64 {
    fingerprint(layout)
}
