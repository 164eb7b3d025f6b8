//! `hamlyn.RpcServer` and `hamlyn.RpcClient` (RPC over remote memory, crate hamlyn-rpc,
//! seed 004 §3.1): Python procedures (bytes in, bytes out) registered by name and
//! served; calls by name, several outstanding (`start`, `finish`), with timeouts; calls
//! by reference (a segment of the client's memory the procedure reads and writes) with
//! `rpc_ref`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hamlyn_rpc::{Call, Procedure, RpcClient, RpcError, RpcServer};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyMapping};

use crate::area::PyArea;
use crate::errors::{self, rpc_check};
use crate::node::PyNode;
use crate::rpc_ref::{takes_context, PyRpcContext, PyRpcSegment};
use crate::ticket::{with_bytes, PyTicket};
use crate::Life;

/// A Python callable as a procedure: called with the arguments as `bytes` (and, if it
/// takes two arguments, the call's `RpcContext`: `rpc_ref`), it returns a bytes-like
/// result (None: empty). An exception it raises is the call's error at the client
/// (`ProcedureError`, with the exception's text); the server keeps serving.
fn procedure(f: Py<PyAny>, with_ctx: bool) -> Procedure {
    Box::new(move |args, ctx| {
        Python::with_gil(|py| {
            let args = PyBytes::new(py, args);
            let out = if with_ctx {
                PyRpcContext::run(py, &f, args, ctx)
            } else {
                f.call1(py, (args,))
            }
            .map_err(|e| e.to_string())?;
            let out = out.bind(py);
            if out.is_none() {
                return Ok(Vec::new());
            }
            with_bytes(out, |b| Ok(b.to_vec())).map_err(|e| e.to_string())
        })
    })
}

/// An RPC server (`RpcServer(node, service, {name: procedure, ...})`): publishes
/// `service` in the cluster's name registry and serves the procedures (each called with
/// its arguments as `bytes`, returning bytes) to clients that connect by that name,
/// while `serve()` or `serve_once()` runs, on the thread that calls them (holding the
/// GIL while a procedure runs, not while it waits). Each client gets call frames of its
/// own (slots), write-inhibited while their procedure runs. The server keeps the node's
/// first notification queue and terminus for itself.
#[pyclass(module = "hamlyn._hamlyn", name = "RpcServer", frozen)]
pub struct PyRpcServer {
    life: Arc<Life>,
    server: Mutex<Option<RpcServer>>,
    service: String,
    /// Whether frames are write-inhibited while their procedure runs (as last set).
    protect: Mutex<bool>,
}

impl PyRpcServer {
    /// Runs `f` on the server without the GIL (procedures take it back to run).
    fn with_unlocked<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut RpcServer) -> Result<T, RpcError> + Send,
    ) -> PyResult<T> {
        self.life.check()?;
        let mut g = crate::lock(py, &self.server)?;
        let s = g
            .as_mut()
            .ok_or_else(|| errors::closed("the RPC server is closed"))?;
        rpc_check(py.allow_threads(|| f(s)))
    }
}

#[pymethods]
impl PyRpcServer {
    /// Serves `procedures` (a dict from name to callable, or a sequence of `(name,
    /// callable)` pairs, in the order clients number them) as `service` through `node`.
    #[new]
    fn new(
        py: Python<'_>,
        node: &PyNode,
        service: &str,
        procedures: &Bound<'_, PyAny>,
    ) -> PyResult<PyRpcServer> {
        let n = node.get(py)?;
        // A mapping (its items, in order), or a sequence of (name, callable) pairs.
        let procedures: Vec<(String, Py<PyAny>)> = match procedures.downcast::<PyMapping>() {
            Ok(m) => m.items()?.extract()?,
            Err(_) => procedures.extract()?,
        };
        for (name, f) in &procedures {
            if !f.bind(py).is_callable() {
                return Err(errors::invalid(format!(
                    "procedure {name:?} is not callable"
                )));
            }
        }
        let procs = procedures
            .into_iter()
            .map(|(name, f)| {
                let with_ctx = takes_context(py, f.bind(py));
                (name, procedure(f, with_ctx))
            })
            .collect();
        let s = py.allow_threads(|| RpcServer::publish(n, service, procs));
        Ok(PyRpcServer {
            life: node.life(),
            server: Mutex::new(Some(rpc_check(s)?)),
            service: service.to_owned(),
            protect: Mutex::new(true),
        })
    }

    /// The service's name.
    #[getter]
    fn service(&self) -> &str {
        &self.service
    }

    /// Handles what arrives within `timeout` seconds (None: until something does): a
    /// connection or a call. Whether anything was handled.
    #[pyo3(signature = (timeout=None))]
    fn serve_once(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let timeout = crate::timeout(timeout)?;
        let slices = crate::Slices::new(timeout);
        loop {
            // In slices, so that a signal (Ctrl-C) raises between them.
            let slice = slices.next();
            if self.with_unlocked(py, |s| s.serve_once(Some(slice)))? {
                return Ok(true);
            }
            if slices.over() {
                return Ok(false);
            }
            py.check_signals()?;
        }
    }

    /// Serves until `until()` returns true (checked between arrivals, at least every
    /// tenth of a second) or `timeout` seconds passed (None: no limit; Ctrl-C ends it
    /// too, with `KeyboardInterrupt`). How many connections and calls it handled.
    #[pyo3(signature = (until=None, timeout=None))]
    fn serve(
        &self,
        py: Python<'_>,
        until: Option<Py<PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<u64> {
        let timeout = crate::timeout(timeout)?;
        let slices = crate::Slices::new(timeout);
        let mut handled = 0;
        loop {
            if let Some(u) = &until {
                if u.call0(py)?.is_truthy(py)? {
                    return Ok(handled);
                }
            }
            let slice = slices.next();
            if self.with_unlocked(py, |s| s.serve_once(Some(slice)))? {
                handled += 1;
            }
            if slices.over() {
                return Ok(handled);
            }
            py.check_signals()?;
        }
    }

    /// Whether frames are write-inhibited while their procedure runs (on by default;
    /// off saves two control calls per call, and gives up the server's protection).
    #[getter]
    fn protect_frames(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(*crate::lock(py, &self.protect)?)
    }

    #[setter]
    fn set_protect_frames(&self, py: Python<'_>, on: bool) -> PyResult<()> {
        self.with_unlocked(py, |s| {
            s.set_protect_frames(on);
            Ok(())
        })?;
        *crate::lock(py, &self.protect)? = on;
        Ok(())
    }

    /// Clients connected now.
    #[getter]
    fn clients(&self, py: Python<'_>) -> PyResult<usize> {
        self.with_unlocked(py, |s| Ok(s.clients()))
    }

    /// What the server has done and refused, as a dict: 'connected', 'calls', 'failed',
    /// 'unknown_procedure', 'bad_frames', 'mismatched', 'clients_freed',
    /// 'bad_reply_tickets'.
    fn counters(&self, py: Python<'_>) -> PyResult<BTreeMap<&'static str, u64>> {
        let c = self.with_unlocked(py, |s| Ok(s.counters()))?;
        Ok([
            ("connected", c.connected),
            ("calls", c.calls),
            ("failed", c.failed),
            ("unknown_procedure", c.unknown_procedure),
            ("bad_frames", c.bad_frames),
            ("mismatched", c.mismatched),
            ("clients_freed", c.clients_freed),
            ("bad_reply_tickets", c.bad_reply_tickets),
        ]
        .into_iter()
        .collect())
    }

    /// Stops serving and withdraws the service (its clients' calls fail with
    /// `PeerGoneError`). Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let s = crate::lock(py, &self.server)?.take();
        py.allow_threads(|| drop(s));
        Ok(())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(crate::lock(py, &self.server)?.is_none())
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
        format!("<hamlyn.RpcServer {:?}>", self.service)
    }
}

/// A connection to one RPC service (`RpcClient(node, service, timeout=30.0)`, which
/// waits up to `timeout` seconds for the service to appear): `call(name, args)` calls
/// procedure `name` with `args` (bytes-like) and returns its result as `bytes`;
/// `start()` and `finish()` keep several calls outstanding (one per call frame:
/// `FullError` when every frame is busy). A call that gets no reply within `timeout`
/// raises `TimeoutError` (and frees its frame); a server that is gone, `PeerGoneError`;
/// a procedure that failed, `ProcedureError`. The client keeps the node's first
/// notification queue and terminus for itself.
#[pyclass(module = "hamlyn._hamlyn", name = "RpcClient", frozen)]
pub struct PyRpcClient {
    life: Arc<Life>,
    client: Mutex<Option<RpcClient>>,
    /// The calls' timeout in seconds, as last set.
    timeout: Mutex<f64>,
}

impl PyRpcClient {
    /// Runs `f` on the client without the GIL.
    fn with_unlocked<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut RpcClient) -> Result<T, RpcError> + Send,
    ) -> PyResult<T> {
        self.life.check()?;
        let mut g = crate::lock(py, &self.client)?;
        let c = g
            .as_mut()
            .ok_or_else(|| errors::closed("the RPC client is closed"))?;
        rpc_check(py.allow_threads(|| f(c)))
    }
}

#[pymethods]
impl PyRpcClient {
    /// Connects through `node` to `service`, waiting up to `timeout` seconds for it;
    /// calls wait as long for their replies (see `timeout`).
    #[new]
    #[pyo3(signature = (node, service, timeout=30.0))]
    fn new(py: Python<'_>, node: &PyNode, service: &str, timeout: f64) -> PyResult<PyRpcClient> {
        let t = crate::timeout(Some(timeout))?.unwrap_or(Duration::ZERO);
        let n = node.get(py)?;
        let c = py.allow_threads(|| {
            RpcClient::connect(n, service, t).map(|mut c| {
                c.set_timeout(t);
                c
            })
        });
        Ok(PyRpcClient {
            life: node.life(),
            client: Mutex::new(Some(rpc_check(c)?)),
            timeout: Mutex::new(timeout),
        })
    }

    /// How long a call waits for its reply, in seconds (settable).
    #[getter]
    fn timeout(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(*crate::lock(py, &self.timeout)?)
    }

    #[setter]
    fn set_timeout(&self, py: Python<'_>, seconds: f64) -> PyResult<()> {
        let t = crate::timeout(Some(seconds))?.unwrap_or(Duration::ZERO);
        self.with_unlocked(py, |c| {
            c.set_timeout(t);
            Ok(())
        })?;
        *crate::lock(py, &self.timeout)? = seconds;
        Ok(())
    }

    /// The procedures the service offers, in its order.
    #[getter]
    fn procedures(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.with_unlocked(py, |c| Ok(c.procedures().to_vec()))
    }

    /// Calls `procedure` with `args` (a bytes-like object) and waits for its result.
    /// `NoProcedureError` for a name the service does not offer.
    fn call<'py>(
        &self,
        py: Python<'py>,
        procedure: &str,
        args: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let args = with_bytes(args, |b| Ok(b.to_vec()))?;
        let out = self.with_unlocked(py, |c| c.call(procedure, &args))?;
        Ok(PyBytes::new(py, &out))
    }

    /// Starts a call (writes its frame and activates the server) and returns at once:
    /// `finish(call)` waits for its result. `FullError` when every frame is busy.
    fn start(
        &self,
        py: Python<'_>,
        procedure: &str,
        args: &Bound<'_, PyAny>,
    ) -> PyResult<PyRpcCall> {
        let args = with_bytes(args, |b| Ok(b.to_vec()))?;
        let call = self.with_unlocked(py, |c| c.start(procedure, &args))?;
        Ok(PyRpcCall {
            call: Mutex::new(Some(call)),
            procedure: procedure.to_owned(),
        })
    }

    /// Waits for a started call's result (up to the client's timeout). A call is
    /// finished once: `InvalidArgumentError` the second time.
    fn finish<'py>(&self, py: Python<'py>, call: &PyRpcCall) -> PyResult<Bound<'py, PyBytes>> {
        let c = crate::lock(py, &call.call)?
            .take()
            .ok_or_else(|| errors::invalid("the call was finished already".to_owned()))?;
        let out = self.with_unlocked(py, |client| client.finish(c))?;
        Ok(PyBytes::new(py, &out))
    }

    /// Makes `area` (an area of this client's node) a segment that calls by reference
    /// name: the server may read and write all of it while such a call runs.
    fn segment(&self, py: Python<'_>, area: &PyArea) -> PyResult<PyRpcSegment> {
        let a = area.get(py)?;
        let length = a.len();
        let seg = self.with_unlocked(py, |c| c.segment(&a))?;
        Ok(PyRpcSegment {
            segment: Mutex::new(Some(seg)),
            length,
        })
    }

    /// Calls `procedure` by reference: with `args`, and `segment` (from `segment()`),
    /// which the procedure may read and write (its `RpcContext`) while it runs. Returns
    /// its result once every write into the segment has landed.
    fn call_by_ref<'py>(
        &self,
        py: Python<'py>,
        procedure: &str,
        args: &Bound<'py, PyAny>,
        segment: &PyRpcSegment,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let args = with_bytes(args, |b| Ok(b.to_vec()))?;
        let g = crate::lock(py, &segment.segment)?;
        let seg = g
            .as_ref()
            .ok_or_else(|| errors::closed("the segment is closed"))?;
        let out = self.with_unlocked(py, |c| c.call_by_ref(procedure, &args, seg))?;
        Ok(PyBytes::new(py, &out))
    }

    /// A call by reference naming any `ticket` as the segment (what a server refuses is
    /// tested with it; `call_by_ref` is the call a program makes). Does not wait for
    /// segment writes to land.
    fn call_by_ticket<'py>(
        &self,
        py: Python<'py>,
        procedure: &str,
        args: &Bound<'py, PyAny>,
        ticket: &PyTicket,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let args = with_bytes(args, |b| Ok(b.to_vec()))?;
        let t = ticket.ticket;
        let out = self.with_unlocked(py, |c| c.call_by_ticket(procedure, &args, &t))?;
        Ok(PyBytes::new(py, &out))
    }

    /// Disconnects (the server frees this client's frames). Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let c = crate::lock(py, &self.client)?.take();
        py.allow_threads(|| drop(c));
        Ok(())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(crate::lock(py, &self.client)?.is_none())
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
}

/// A call started with `RpcClient.start`, to `RpcClient.finish` (once).
#[pyclass(module = "hamlyn._hamlyn", name = "RpcCall", frozen)]
pub struct PyRpcCall {
    call: Mutex<Option<Call>>,
    procedure: String,
}

#[pymethods]
impl PyRpcCall {
    /// The procedure called.
    #[getter]
    fn procedure(&self) -> &str {
        &self.procedure
    }

    /// Whether `RpcClient.finish` took it.
    #[getter]
    fn finished(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(crate::lock(py, &self.call)?.is_none())
    }

    fn __repr__(&self) -> String {
        format!("<hamlyn.RpcCall {:?}>", self.procedure)
    }
}
