//! `hamlyn.Endpoint` (a FLIPC receive endpoint: messages land in buffers the receiver
//! posted; a message that finds none is discarded and counted), `hamlyn.EndpointGroup`
//! (receive-any over endpoints, a blocking receive several threads may share) and
//! `hamlyn.EndpointMessage`.
//!
//! Buffers are named by their index, as in the C API: the handle remembers which buffers
//! the program holds (allocated or received, not posted), so a buffer is never posted
//! twice, nor read while the engine may fill it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use hamlyn::{Buffer, Endpoint, EndpointGroup, Received, SharedGroup};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{self, check};
use crate::queue::PyQueue;
use crate::ticket::{with_bytes, PyTicket};
use crate::Life;

/// Where an endpoint lives: its own handle's, or a member of a group.
enum Place {
    Own(Endpoint),
    /// Member `.1` of a group, which owns it (gone once the group is closed).
    Member(Weak<SharedGroup>, usize),
}

struct Inner {
    place: Place,
    /// Buffers the program holds, by index.
    held: HashMap<u32, Buffer>,
}

/// What an endpoint handle shares with the group it joined (which files the buffers of
/// the messages it receives for the member here).
struct Shared {
    inner: Mutex<Option<Inner>>,
    id: u32,
    buf_size: u32,
    buffers: u32,
    queue: Option<u16>,
}

/// A receive endpoint (`Node.endpoint(buf_size, buffers)`): a slot whose messages land
/// in buffers the receiver posted, in posting order, each message in one buffer of
/// `buf_size` bytes. A message that finds no posted buffer is discarded and counted
/// (`take_discards()`), and also refused to its sender (`RejectedError` from
/// `Send.result()`, reason 'no_buffer') when the endpoint was made with
/// `report_discards=True`. Buffers are named by index: `alloc()` hands one out,
/// `post(i)` gives it to the engine, `receive()` hands a filled one back (post it again,
/// or receive with `repost=True`). `close()` destroys the endpoint: its tickets stop
/// working.
#[pyclass(module = "hamlyn._hamlyn", name = "Endpoint", frozen)]
pub struct PyEndpoint {
    life: Arc<Life>,
    shared: Arc<Shared>,
}

impl PyEndpoint {
    pub(crate) fn new(life: Arc<Life>, endpoint: Endpoint) -> PyEndpoint {
        PyEndpoint {
            life,
            shared: Arc::new(Shared {
                id: endpoint.id().0,
                buf_size: endpoint.buf_size(),
                buffers: endpoint.buffers(),
                queue: endpoint.queue(),
                inner: Mutex::new(Some(Inner {
                    place: Place::Own(endpoint),
                    held: HashMap::new(),
                })),
            }),
        }
    }

    /// Runs `f` on the endpoint and the buffers held, if it, its node and its group are
    /// open.
    fn with<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Endpoint, &mut HashMap<u32, Buffer>) -> PyResult<T>,
    ) -> PyResult<T> {
        self.life.check()?;
        let mut g = crate::lock(py, &self.shared.inner)?;
        let inner = g
            .as_mut()
            .ok_or_else(|| errors::closed("the endpoint is closed"))?;
        let held = &mut inner.held;
        match &mut inner.place {
            Place::Own(ep) => f(ep, held),
            Place::Member(group, i) => {
                let group = group.upgrade().ok_or_else(|| {
                    errors::closed("the endpoint's group is closed (it destroyed its members)")
                })?;
                group
                    .with_endpoint(*i, |ep| f(ep, held))
                    .ok_or_else(|| errors::closed("the endpoint left its group"))?
            }
        }
    }
}

/// `Received` as Python sees it, the bytes copied out; with `repost`, its buffer posted
/// again at once, else filed as held.
fn take(
    ep: &mut Endpoint,
    held: &mut HashMap<u32, Buffer>,
    r: Received,
    repost: bool,
) -> PyResult<PyEndpointMessage> {
    let data = check(ep.bytes(&r))?;
    let m = PyEndpointMessage {
        buffer: r.buffer.index(),
        length: r.len,
        src_node: r.src_node,
        tag: r.word,
        data,
        member: None,
    };
    if repost {
        check(ep.post(r.buffer))?;
    } else {
        held.insert(m.buffer, r.buffer);
    }
    Ok(m)
}

#[pymethods]
impl PyEndpoint {
    /// Its slot number.
    #[getter]
    fn id(&self) -> u32 {
        self.shared.id
    }

    /// Bytes per buffer: the largest message.
    #[getter]
    fn buf_size(&self) -> u32 {
        self.shared.buf_size
    }

    /// Number of buffers.
    #[getter]
    fn buffers(&self) -> u32 {
        self.shared.buffers
    }

    /// The notification queue arrivals are reported to (None: none).
    #[getter]
    fn queue(&self) -> Option<u16> {
        self.shared.queue
    }

    /// A ticket for sending to the endpoint (`Terminus.send(ticket, data)`): a message
    /// longer than `buf_size` is refused by the sender's library before it is queued.
    fn ticket(&self, py: Python<'_>) -> PyResult<PyTicket> {
        self.with(py, |ep, _| {
            Ok(PyTicket {
                ticket: ep.ticket(),
            })
        })
    }

    /// Posts every buffer neither posted nor held by the program; how many.
    fn post_all(&self, py: Python<'_>) -> PyResult<u32> {
        self.with(py, |ep, _| check(ep.post_all()))
    }

    /// Takes a buffer neither posted nor held (its index), for the program to post (or
    /// fill with `write`); None if there is none.
    fn alloc(&self, py: Python<'_>) -> PyResult<Option<u32>> {
        self.with(py, |ep, held| {
            Ok(ep.alloc().map(|b| {
                let i = b.index();
                held.insert(i, b);
                i
            }))
        })
    }

    /// Posts buffer `buffer` (an index the program holds: allocated, or a received
    /// message's `buffer`) for the next message to land in. `InvalidArgumentError` for a
    /// buffer the program does not hold (never posted twice). Wait-free.
    fn post(&self, py: Python<'_>, buffer: u32) -> PyResult<()> {
        self.with(py, |ep, held| {
            let b = held.remove(&buffer).ok_or_else(|| {
                errors::invalid(format!(
                    "buffer {buffer} is not held by the program (posted already, or no such buffer)"
                ))
            })?;
            check(ep.post(b))
        })
    }

    /// Buffers posted and not yet filled.
    #[getter]
    fn posted(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |ep, _| Ok(ep.posted()))
    }

    /// Buffer indices the program holds (allocated or received, not posted), sorted.
    #[getter]
    fn held(&self, py: Python<'_>) -> PyResult<Vec<u32>> {
        self.with(py, |_, held| {
            let mut v: Vec<u32> = held.keys().copied().collect();
            v.sort_unstable();
            Ok(v)
        })
    }

    /// Whether a message is waiting to be received (takes nothing).
    fn ready(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, |ep, _| Ok(ep.ready()))
    }

    /// The next message, in arrival order, or None: never blocks (to wait, make a group:
    /// `EndpointGroup(queue, [(endpoint, 0)])`). Its bytes are copied into the message;
    /// its buffer is the program's until posted again (`repost=True`: posted again at
    /// once).
    #[pyo3(signature = (*, repost=false))]
    fn receive(&self, py: Python<'_>, repost: bool) -> PyResult<Option<PyEndpointMessage>> {
        self.with(py, |ep, held| match ep.receive() {
            Some(r) => take(ep, held, r, repost).map(Some),
            None => Ok(None),
        })
    }

    /// The first `length` bytes (all `buf_size` by default) of buffer `buffer`, which the
    /// program holds.
    #[pyo3(signature = (buffer, length=None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        buffer: u32,
        length: Option<u32>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let v = self.with(py, |ep, held| {
            let b = held.get(&buffer).ok_or_else(|| {
                errors::invalid(format!("buffer {buffer} is not held by the program"))
            })?;
            let mut v = vec![0u8; length.unwrap_or(ep.buf_size()) as usize];
            check(ep.read(b, &mut v))?;
            Ok(v)
        })?;
        Ok(PyBytes::new(py, &v))
    }

    /// Writes `data` (a bytes-like object, at most `buf_size` bytes) at the start of
    /// buffer `buffer`, which the program holds.
    fn write(&self, py: Python<'_>, buffer: u32, data: &Bound<'_, PyAny>) -> PyResult<()> {
        with_bytes(data, |bytes| {
            self.with(py, |ep, held| {
                let b = held.get(&buffer).ok_or_else(|| {
                    errors::invalid(format!("buffer {buffer} is not held by the program"))
                })?;
                check(ep.write(b, bytes))
            })
        })
    }

    /// Messages discarded for want of a posted buffer since the last call; the count is
    /// reset in the same wait-free step (no discard is lost between the two, and the
    /// engine is never blocked by it).
    fn take_discards(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |ep, _| Ok(ep.take_discards()))
    }

    /// Destroys the endpoint (its tickets stop working); in a group, only closes this
    /// handle (the group owns the endpoint). Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let inner = crate::lock(py, &self.shared.inner)?.take();
        py.allow_threads(|| drop(inner));
        Ok(())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(crate::lock(py, &self.shared.inner)?.is_none())
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
        format!(
            "<hamlyn.Endpoint {} ({} buffers of {} bytes)>",
            self.shared.id, self.shared.buffers, self.shared.buf_size
        )
    }
}

/// A message taken from an endpoint: its bytes (`data`, copied out of the buffer), the
/// `buffer` holding it (the program's until posted again, unless received with
/// `repost=True`), its `tag`, the sending node, and (from a group) the member it came
/// to.
#[pyclass(module = "hamlyn._hamlyn", name = "EndpointMessage", frozen)]
pub struct PyEndpointMessage {
    buffer: u32,
    length: u32,
    src_node: u32,
    tag: u64,
    data: Vec<u8>,
    member: Option<usize>,
}

#[pymethods]
impl PyEndpointMessage {
    /// The buffer that holds it.
    #[getter]
    fn buffer(&self) -> u32 {
        self.buffer
    }

    /// Payload bytes.
    #[getter]
    fn length(&self) -> u32 {
        self.length
    }

    /// The sending node.
    #[getter]
    fn src_node(&self) -> u32 {
        self.src_node
    }

    /// The message's tag (`Terminus.send(..., tag=)`).
    #[getter]
    fn tag(&self) -> u64 {
        self.tag
    }

    /// The message's bytes.
    #[getter]
    fn data<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.data)
    }

    /// From `EndpointGroup.receive`: the member it came to (its place in the group's
    /// list); else None.
    #[getter]
    fn member(&self) -> Option<usize> {
        self.member
    }

    fn __repr__(&self) -> String {
        format!(
            "<hamlyn.EndpointMessage buffer {} tag {} length {} from node {}>",
            self.buffer, self.tag, self.length, self.src_node
        )
    }
}

/// Receive-any over endpoints that report to one notification queue:
/// `EndpointGroup(queue, [(endpoint, priority), ...], starvation_bound=16)`. The group
/// takes the queue and owns the endpoints from then on (their handles keep working:
/// post, take_discards, receive; closing the group destroys them). A receive picks the
/// highest-priority member with a message waiting (0 is the highest), but a member
/// passed over `starvation_bound` times while it had one is served next.
/// `receive_wait` sleeps on the queue without the GIL; when several threads wait, each
/// arrival goes to the one of highest `priority` first.
#[pyclass(module = "hamlyn._hamlyn", name = "EndpointGroup", frozen)]
pub struct PyEndpointGroup {
    life: Arc<Life>,
    group: Mutex<Option<Arc<SharedGroup>>>,
    /// The members' handles' shared parts, by member number.
    members: Vec<Arc<Shared>>,
}

impl PyEndpointGroup {
    /// The group, if it and its node are open.
    fn get(&self, py: Python<'_>) -> PyResult<Arc<SharedGroup>> {
        self.life.check()?;
        crate::lock(py, &self.group)?
            .clone()
            .ok_or_else(|| errors::closed("the endpoint group is closed"))
    }

    /// A message the group received for member `i`, its buffer filed with the member's
    /// handle (or posted again).
    fn file(
        &self,
        py: Python<'_>,
        group: &SharedGroup,
        (i, r): (usize, Received),
        repost: bool,
    ) -> PyResult<PyEndpointMessage> {
        let member = self
            .members
            .get(i)
            .ok_or_else(|| errors::invalid(format!("no group member {i}")))?;
        let mut g = crate::lock(py, &member.inner)?;
        let mut ignored = HashMap::new();
        // A member whose handle was closed still gets its buffer back when reposted;
        // otherwise the buffer is lost with the handle (as the handle's held ones are).
        let held = g.as_mut().map_or(&mut ignored, |inner| &mut inner.held);
        let mut m = group
            .with_endpoint(i, |ep| take(ep, held, r, repost))
            .ok_or_else(|| errors::invalid(format!("no group member {i}")))??;
        m.member = Some(i);
        Ok(m)
    }
}

#[pymethods]
impl PyEndpointGroup {
    /// Makes the group: `queue` (a `Queue` every member reports to; the group consumes
    /// every notification in it), `members` a list of `(endpoint, priority)`.
    /// `InvalidArgumentError` for an endpoint that does not report to `queue`, one
    /// already in a group, or an empty list.
    #[new]
    #[pyo3(signature = (queue, members, *, starvation_bound=hamlyn::DEFAULT_STARVATION_BOUND))]
    fn new(
        py: Python<'_>,
        queue: &PyQueue,
        members: Vec<(PyRef<'_, PyEndpoint>, u8)>,
        starvation_bound: u32,
    ) -> PyResult<PyEndpointGroup> {
        if members.is_empty() {
            return Err(errors::invalid(
                "an endpoint group needs at least one member".to_owned(),
            ));
        }
        let life = queue.life();
        life.check()?;
        // Check every endpoint first, so that the group takes all of them or none.
        for (k, (ep, _)) in members.iter().enumerate() {
            if !Arc::ptr_eq(&ep.life, &life) {
                return Err(errors::invalid(
                    "the endpoints and the queue must come from the same node".to_owned(),
                ));
            }
            if members[..k]
                .iter()
                .any(|(other, _)| Arc::ptr_eq(&other.shared, &ep.shared))
            {
                return Err(errors::invalid(format!(
                    "endpoint {} is given twice",
                    ep.shared.id
                )));
            }
            match crate::lock(py, &ep.shared.inner)?
                .as_ref()
                .map(|i| &i.place)
            {
                Some(Place::Own(_)) => {}
                Some(Place::Member(..)) => {
                    return Err(errors::invalid(format!(
                        "endpoint {} is in a group already",
                        ep.shared.id
                    )))
                }
                None => return Err(errors::closed("an endpoint given is closed")),
            }
            if ep.shared.queue != Some(queue.index_of()) {
                return Err(errors::invalid(format!(
                    "endpoint {} does not report to queue {} (make it with queue={})",
                    ep.shared.id,
                    queue.index_of(),
                    queue.index_of()
                )));
            }
        }
        let mut group = EndpointGroup::new(queue.take(py)?).starvation_bound(starvation_bound);
        let mut taken = Vec::with_capacity(members.len());
        for (ep, prio) in &members {
            let mut g = crate::lock(py, &ep.shared.inner)?;
            let inner = g
                .as_mut()
                .ok_or_else(|| errors::closed("an endpoint given is closed"))?;
            // A member of no group until the group exists (below).
            let place = std::mem::replace(&mut inner.place, Place::Member(Weak::new(), 0));
            match place {
                Place::Own(endpoint) => {
                    let i = check(group.add(endpoint, *prio))?;
                    taken.push((ep.shared.clone(), i));
                }
                other => inner.place = other,
            }
        }
        let group = Arc::new(group.into_shared());
        for (shared, i) in &taken {
            if let Some(inner) = crate::lock(py, &shared.inner)?.as_mut() {
                inner.place = Place::Member(Arc::downgrade(&group), *i);
            }
        }
        Ok(PyEndpointGroup {
            life,
            group: Mutex::new(Some(group)),
            members: taken.into_iter().map(|(s, _)| s).collect(),
        })
    }

    /// Number of members.
    fn __len__(&self) -> usize {
        self.members.len()
    }

    /// The next message of any member (priority first, no member starved), or None:
    /// never blocks. `repost=True` posts its buffer again at once.
    #[pyo3(signature = (*, repost=false))]
    fn receive(&self, py: Python<'_>, repost: bool) -> PyResult<Option<PyEndpointMessage>> {
        let group = self.get(py)?;
        match group.receive() {
            Some(r) => self.file(py, &group, r, repost).map(Some),
            None => Ok(None),
        }
    }

    /// The next message of any member, sleeping without the GIL (on the queue's futex,
    /// no busy loop) up to `timeout` seconds (None: forever); None at the timeout. When
    /// several threads wait, each arrival goes to the one of highest `priority` (0 is
    /// the highest) first. `repost=True` posts its buffer again at once.
    #[pyo3(signature = (timeout=None, *, priority=0, repost=false))]
    fn receive_wait(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        priority: u8,
        repost: bool,
    ) -> PyResult<Option<PyEndpointMessage>> {
        let timeout = crate::timeout(timeout)?;
        let group = self.get(py)?;
        // In slices, so that a signal (Ctrl-C) raises between them.
        let slices = crate::Slices::new(timeout);
        loop {
            self.life.check()?;
            let slice = slices.next();
            if crate::lock(py, &self.group)?.is_none() {
                return Err(errors::closed("the endpoint group is closed"));
            }
            let got = py.allow_threads(|| group.receive_wait(priority, Some(slice)));
            match check(got)? {
                Some(r) => return self.file(py, &group, r, repost).map(Some),
                None if slices.over() => return Ok(None),
                None => py.check_signals()?,
            }
        }
    }

    /// Threads waiting in `receive_wait` now.
    #[getter]
    fn waiting(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.get(py)?.waiting())
    }

    /// Destroys the group and its endpoints (their tickets stop working, their handles
    /// raise `ClosedError`) and gives its queue back. Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let g = crate::lock(py, &self.group)?.take();
        py.allow_threads(|| drop(g));
        Ok(())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(crate::lock(py, &self.group)?.is_none())
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
        format!("<hamlyn.EndpointGroup of {}>", self.members.len())
    }
}
