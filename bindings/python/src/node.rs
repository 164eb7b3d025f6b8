//! `hamlyn.Node`: a connection to an engine (embedded in this process or a daemon), the
//! objects made from it, the name registry and statistics.

use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hamlyn::{Node, NodeOptions, RateLimit, SlotMode, SlotPerms};
use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::area::{PyArea, PyMetaArea};
use crate::direct::PyDirectTarget;
use crate::endpoint::PyEndpoint;
use crate::errors::{self, check};
use crate::queue::PyQueue;
use crate::slot::PySlot;
use crate::terminus::PyTerminus;
use crate::ticket::PyTicket;
use crate::Life;

/// A connection to an engine: one control socket and one port.
///
/// Made by `Node.embedded()` (an engine thread in this process, which other processes
/// can connect to at `node.socket_path`), `Node.connect(path)` or
/// `Node.connect_default()` (the `hamlyn node` daemon at `$HAMLYN_SOCKET`, else
/// `/tmp/hamlyn.sock`). `close()` (or leaving a `with` block) closes it and every handle
/// made from it: their calls raise `ClosedError` from then on.
#[pyclass(module = "hamlyn._hamlyn", name = "Node", frozen)]
pub struct PyNode {
    life: Arc<Life>,
    node: Mutex<Option<Node>>,
}

/// Node options from Python keywords.
fn options(
    termini: u16,
    queues: u16,
    queue_cap: u32,
    spin: u32,
    control_timeout: f64,
) -> PyResult<NodeOptions> {
    let control_timeout = Duration::try_from_secs_f64(control_timeout).map_err(|_| {
        errors::invalid(format!(
            "control_timeout must be a finite number of seconds >= 0, not {control_timeout}"
        ))
    })?;
    Ok(NodeOptions {
        termini,
        queues,
        queue_cap,
        spin,
        control_timeout,
    })
}

impl PyNode {
    fn new(node: Node) -> PyNode {
        PyNode {
            life: Arc::new(Life::default()),
            node: Mutex::new(Some(node)),
        }
    }

    /// The node (a cheap clone), or `ClosedError`.
    pub(crate) fn get(&self, py: Python<'_>) -> PyResult<Node> {
        crate::lock(py, &self.node)?
            .clone()
            .ok_or_else(|| errors::closed("the node is closed"))
    }

    pub(crate) fn life(&self) -> Arc<Life> {
        self.life.clone()
    }
}

/// Parses a slot mode's name.
fn mode(name: &str) -> PyResult<SlotMode> {
    match name {
        "normal" => Ok(SlotMode::Normal),
        "paranoid" => Ok(SlotMode::Paranoid),
        "paranoid_one_shot" => Ok(SlotMode::ParanoidOneShot),
        "fast" => Ok(SlotMode::Fast),
        other => Err(errors::invalid(format!(
            "mode must be 'normal', 'paranoid', 'paranoid_one_shot' or 'fast', not {other:?}"
        ))),
    }
}

#[pymethods]
impl PyNode {
    /// Starts an engine thread in this process and connects to it.
    #[classmethod]
    #[pyo3(signature = (*, termini=4, queues=4, queue_cap=1024, spin=200, control_timeout=10.0))]
    fn embedded(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        termini: u16,
        queues: u16,
        queue_cap: u32,
        spin: u32,
        control_timeout: f64,
    ) -> PyResult<PyNode> {
        let o = options(termini, queues, queue_cap, spin, control_timeout)?;
        Ok(PyNode::new(check(
            py.allow_threads(|| Node::embedded_with(o)),
        )?))
    }

    /// Connects to the engine listening at `path`.
    #[classmethod]
    #[pyo3(signature = (path, *, termini=4, queues=4, queue_cap=1024, spin=200, control_timeout=10.0))]
    #[allow(clippy::too_many_arguments)] // Python keywords.
    fn connect(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        path: std::path::PathBuf,
        termini: u16,
        queues: u16,
        queue_cap: u32,
        spin: u32,
        control_timeout: f64,
    ) -> PyResult<PyNode> {
        let o = options(termini, queues, queue_cap, spin, control_timeout)?;
        Ok(PyNode::new(check(
            py.allow_threads(|| Node::connect_with(path, o)),
        )?))
    }

    /// Connects to the node's daemon at `$HAMLYN_SOCKET`, else `/tmp/hamlyn.sock`.
    #[classmethod]
    #[pyo3(signature = (*, termini=4, queues=4, queue_cap=1024, spin=200, control_timeout=10.0))]
    fn connect_default(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        termini: u16,
        queues: u16,
        queue_cap: u32,
        spin: u32,
        control_timeout: f64,
    ) -> PyResult<PyNode> {
        let o = options(termini, queues, queue_cap, spin, control_timeout)?;
        let path = hamlyn::default_socket_path();
        Ok(PyNode::new(check(
            py.allow_threads(|| Node::connect_with(path, o)),
        )?))
    }

    /// Closes the node and every handle made from it (their calls raise `ClosedError`).
    /// The connection (and an embedded engine) ends once the last of them is gone too.
    /// Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.life.close();
        let node = crate::lock(py, &self.node)?.take();
        py.allow_threads(|| drop(node));
        Ok(())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(crate::lock(py, &self.node)?.is_none())
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
        match self.get(py) {
            Ok(n) => format!(
                "<hamlyn.Node {} client {} at {:?}>",
                n.id().0,
                n.client_id(),
                n.socket_path()
            ),
            Err(_) => "<hamlyn.Node (closed)>".to_owned(),
        }
    }

    /// The engine's node id (what tickets to this node's slots name).
    #[getter]
    fn id(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.get(py)?.id().0)
    }

    /// The engine's incarnation.
    #[getter]
    fn incarnation(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.get(py)?.incarnation())
    }

    /// Our client id on the engine.
    #[getter]
    fn client_id(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.get(py)?.client_id())
    }

    /// The engine's control socket (other processes can `Node.connect` to it).
    #[getter]
    fn socket_path(&self, py: Python<'_>) -> PyResult<std::path::PathBuf> {
        Ok(self.get(py)?.socket_path().to_path_buf())
    }

    /// Registers a new area of `length` bytes (zeroed shared memory).
    fn area(&self, py: Python<'_>, length: u64) -> PyResult<PyArea> {
        let node = self.get(py)?;
        if length == 0 {
            return Err(errors::invalid(
                "an area needs at least one byte".to_owned(),
            ));
        }
        let area = check(py.allow_threads(|| node.area(length)))?;
        Ok(PyArea::new(self.life(), area))
    }

    /// Registers a new metadata area of `count` 128-byte entries.
    fn meta_area(&self, py: Python<'_>, count: u32) -> PyResult<PyMetaArea> {
        let node = self.get(py)?;
        if count == 0 {
            return Err(errors::invalid(
                "a metadata area needs at least one entry".to_owned(),
            ));
        }
        let meta = check(py.allow_threads(|| node.meta_area(count)))?;
        Ok(PyMetaArea::new(self.life(), meta))
    }

    /// Creates a slot over `area` (bytes `offset..offset + length`, to its end by
    /// default) in `mode` ('normal', 'paranoid', 'paranoid_one_shot', 'fast'), with
    /// metadata entries `meta` (every mode but fast needs them), reporting arrivals to
    /// notification queue `queue` (None: no notifications), granting remote `write`,
    /// `read` and `atomic` operations. `direct=True` is the danger mode of
    /// `SlotBuilder::danger_direct` (the Rust docs list what it gives up).
    #[pyo3(signature = (area, *, meta=None, queue=None, mode="normal", offset=0, length=None, write=true, read=false, atomic=false, direct=false))]
    #[allow(clippy::too_many_arguments)] // Python keywords.
    fn slot(
        &self,
        py: Python<'_>,
        area: &PyArea,
        meta: Option<&PyMetaArea>,
        queue: Option<u16>,
        mode: &str,
        offset: u64,
        length: Option<u64>,
        write: bool,
        read: bool,
        atomic: bool,
        direct: bool,
    ) -> PyResult<PySlot> {
        let node = self.get(py)?;
        let mode = self::mode(mode)?;
        let area = area.get(py)?;
        let meta = meta.map(|m| m.get(py)).transpose()?;
        let end = match length {
            None => area.len(),
            Some(n) => offset.checked_add(n).ok_or_else(|| {
                errors::invalid(format!("offset {offset} + length {n} overflows"))
            })?,
        };
        let slot = py.allow_threads(|| {
            let mut b = node
                .slot(&area)
                .mode(mode)
                .perms(SlotPerms {
                    write,
                    read,
                    atomic,
                })
                .range(offset..end);
            if let Some(m) = &meta {
                b = b.meta(m);
            }
            if let Some(q) = queue {
                b = b.queue(q);
            }
            if direct {
                b = b.danger_direct();
            }
            b.create()
        });
        Ok(PySlot::new(self.life(), check(slot)?))
    }

    /// Opens a terminus (a private send work queue, FLIPC's send endpoint) served at
    /// `priority` (0 first; the engine has a few levels and clamps the rest), limited to
    /// `bytes_per_sec` payload bytes and `msgs_per_sec` messages per second (0:
    /// unlimited) by token buckets the engine keeps (`set_rate` changes them later).
    #[pyo3(signature = (priority=0, *, bytes_per_sec=0, msgs_per_sec=0))]
    fn terminus(
        &self,
        py: Python<'_>,
        priority: u8,
        bytes_per_sec: u64,
        msgs_per_sec: u64,
    ) -> PyResult<PyTerminus> {
        let node = self.get(py)?;
        let limit = RateLimit {
            bytes_per_sec,
            msgs_per_sec,
        };
        let t = check(py.allow_threads(|| {
            if limit.is_unlimited() {
                node.terminus(priority)
            } else {
                node.terminus_with_rate(priority, limit)
            }
        }))?;
        Ok(PyTerminus::new(self.life(), t))
    }

    /// Sets the rate limit of `terminus` (a terminus of this node): at most
    /// `bytes_per_sec` payload bytes and `msgs_per_sec` messages per second on average
    /// (0: that one unlimited; both 0 lifts the limit). A limited terminus's sends wait
    /// in its work queue for tokens: back-pressure (`FullError`) once it is full.
    #[pyo3(signature = (terminus, *, bytes_per_sec=0, msgs_per_sec=0))]
    fn set_rate(
        &self,
        py: Python<'_>,
        terminus: &PyTerminus,
        bytes_per_sec: u64,
        msgs_per_sec: u64,
    ) -> PyResult<()> {
        let node = self.get(py)?;
        let limit = RateLimit {
            bytes_per_sec,
            msgs_per_sec,
        };
        terminus.with(py, |t| check(py.allow_threads(|| node.set_rate(t, limit))))
    }

    /// Makes a receive endpoint (FLIPC): `buffers` buffers of `buf_size` bytes each (a
    /// multiple of 64 in 64..=65536: the largest message), none posted yet. `queue`:
    /// the notification queue arrivals are also reported to (what an `EndpointGroup`
    /// sleeps on). `report_discards=True`: a message that finds no posted buffer also
    /// fails its send (`RejectedError`, reason 'no_buffer'), not only counted (FLIPC's
    /// optimistic discard, the default). `direct=True` is the danger mode of
    /// `EndpointBuilder::danger_direct` (same-node senders deposit without the engine).
    #[pyo3(signature = (buf_size, buffers, *, queue=None, report_discards=false, direct=false))]
    fn endpoint(
        &self,
        py: Python<'_>,
        buf_size: u32,
        buffers: u32,
        queue: Option<u16>,
        report_discards: bool,
        direct: bool,
    ) -> PyResult<PyEndpoint> {
        let node = self.get(py)?;
        let ep = py.allow_threads(|| {
            let mut b = node.endpoint(buf_size, buffers);
            if let Some(q) = queue {
                b = b.queue(q);
            }
            if report_discards {
                b = b.report_discards();
            }
            if direct {
                b = b.danger_direct();
            }
            b.create()
        });
        Ok(PyEndpoint::new(self.life(), check(ep)?))
    }

    /// Maps the direct slot `ticket` names (a slot of this node made with
    /// `direct=True`), to deposit into it without the engine. The engine checks the ticket
    /// now and only now (`NotLocalError`, `BadKeyError`, `RefusedError`).
    fn open_direct(&self, py: Python<'_>, ticket: &PyTicket) -> PyResult<PyDirectTarget> {
        let node = self.get(py)?;
        let t = ticket.ticket;
        let target = check(py.allow_threads(|| node.open_direct(&t)))?;
        Ok(PyDirectTarget::new(self.life(), target))
    }

    /// Takes the consumer of notification queue `index` (one per queue:
    /// `QueueTakenError` until the first is closed).
    #[pyo3(signature = (index=0))]
    fn queue(&self, py: Python<'_>, index: u16) -> PyResult<PyQueue> {
        let node = self.get(py)?;
        let q = check(node.queue(index))?;
        Ok(PyQueue::new(self.life(), node, q))
    }

    /// The port's event descriptor, for `select`, `selectors` or an event loop: readable
    /// when a queue armed with `Queue.arm()` gets an entry (and for good once the engine
    /// is gone). It belongs to the node: do not close it.
    #[getter]
    fn event_fd(&self, py: Python<'_>) -> PyResult<i32> {
        Ok(self.get(py)?.event_fd().as_raw_fd())
    }

    /// `event_fd`, for `select` and `selectors`.
    fn fileno(&self, py: Python<'_>) -> PyResult<i32> {
        self.event_fd(py)
    }

    /// Takes the pokes waiting on the event descriptor; returns how many (0 if none).
    /// `EngineGoneError` once the engine is gone.
    fn drain_event_fd(&self, py: Python<'_>) -> PyResult<u64> {
        check(self.get(py)?.drain_event_fd())
    }

    /// Whether the engine is gone (it died or stopped).
    fn engine_gone(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.get(py)?.engine_gone())
    }

    /// Publishes `ticket` (as a one-ticket seed) under `name` in the cluster's name
    /// registry; the name is this node's until it unpublishes it or closes.
    fn publish(&self, py: Python<'_>, name: &str, ticket: &PyTicket) -> PyResult<()> {
        let node = self.get(py)?;
        let seed = hamlyn::Seed::single(ticket.ticket);
        check(py.allow_threads(|| node.publish(name, &seed)))
    }

    /// Removes `name`, which this node published, from the registry.
    fn unpublish(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let node = self.get(py)?;
        check(py.allow_threads(|| node.unpublish(name)))
    }

    /// The ticket published under `name` (the seed's first); `NotFoundError` if none.
    fn lookup(&self, py: Python<'_>, name: &str) -> PyResult<PyTicket> {
        let node = self.get(py)?;
        let seed = check(py.allow_threads(|| node.lookup(name)))?;
        match seed.tickets.first() {
            Some(t) => Ok(PyTicket { ticket: *t }),
            None => Err(errors::invalid(format!(
                "the seed published under {name:?} carries no ticket"
            ))),
        }
    }

    /// The engine's per-handler active-message counters, summed over its clients'
    /// reports (what `hamlyn stat` shows): `{name: {'calls', 'replies', 'errors',
    /// 'refused'}}`. An endpoint reports at most once a second while it polls, or at
    /// `AmEndpoint.report_counters()`.
    #[allow(clippy::type_complexity)] // Python's dicts.
    fn am_counters(
        &self,
        py: Python<'_>,
    ) -> PyResult<std::collections::BTreeMap<String, std::collections::BTreeMap<&'static str, u64>>>
    {
        let node = self.get(py)?;
        let rows = check(py.allow_threads(|| node.am_counters()))?;
        Ok(rows
            .into_iter()
            .map(|(name, c)| {
                let m = [
                    ("calls", c.calls),
                    ("replies", c.replies),
                    ("errors", c.errors),
                    ("refused", c.refused),
                ]
                .into_iter()
                .collect();
                (name, m)
            })
            .collect())
    }

    /// Runs one turn of the engine this process hosts, if it may (an embedded engine that
    /// waiting threads drive); whether the turn found work. For a loop that waits by
    /// polling memory itself, as UCX users call `ucp_worker_progress`. False at once
    /// when there is nothing to drive or another thread runs the engine. With other
    /// nodes, a loop's calls (and the process's waits) share one drive: after they stop,
    /// data from another node may wait up to 2 ms for the engine's thread.
    fn progress(&self, py: Python<'_>) -> PyResult<bool> {
        let node = self.get(py)?;
        Ok(py.allow_threads(|| node.progress()))
    }

    /// The engine's statistics, as a dict (what `hamlyn stat --json` shows): `node`,
    /// `incarnation`, `engine` (its counters), `interface`, `ports`, `peers`, `fabric`,
    /// `areas`, `registry`, `slots`.
    fn stats(&self, py: Python<'_>) -> PyResult<PyObject> {
        let node = self.get(py)?;
        let stats = check(py.allow_threads(|| node.stats()))?;
        let json = serde_json::to_string(&stats)
            .map_err(|e| errors::invalid(format!("statistics do not encode: {e}")))?;
        let loads = py.import("json")?.getattr("loads")?;
        Ok(loads.call1((json,))?.unbind())
    }
}
