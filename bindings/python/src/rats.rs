//! The protocol level, Rats (crate hamlyn-rats, issue 10), from Python: `hamlyn.Rats`
//! (a protocol manager on a node), tagged remote writes (`RatsTaggedServer`,
//! `RatsTaggedClient`) and request/response (`RatsRequestServer`, `RatsRequest`,
//! `RatsRequestClient`); remote write and remote read are in `rats_remote`. Seeds travel
//! as text. A manager and the protocol instances made from it share an `Rc`: they are
//! one thread's ([`ThreadBound`]), as in Rust.

use std::time::Duration;

use hamlyn_rats::datagram::{Datagram, DatagramReceiver, DatagramSender};
use hamlyn_rats::remote_read::{RemoteReadClient, RemoteReadServer};
use hamlyn_rats::remote_write::{RemoteWriteClient, RemoteWriteServer};
use hamlyn_rats::request_response::{Request, RequestClient, RequestServer};
use hamlyn_rats::simple_datagram::{SimpleClient, SimpleDatagram};
use hamlyn_rats::stream::{StreamReceiver, StreamSender, View, WriteStatus};
use hamlyn_rats::tagged::{TaggedClient, TaggedServer};
use hamlyn_rats::{Manager, RatsError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::rats_check;
use crate::node::PyNode;
use crate::rats_remote::{
    PyRatsRemoteReadClient, PyRatsRemoteReadServer, PyRatsRemoteWriteClient,
    PyRatsRemoteWriteServer,
};
use crate::terminus::PySend;
use crate::ticket::{seed_from_text, seed_to_text, with_bytes};
use crate::{unblocked, Life, ThreadBound};
use std::sync::Arc;

/// Runs a blocking wait `f(value, slice)` without the GIL in slices (a signal raises
/// between them) until it returns something or `timeout` seconds passed (None: forever).
fn wait_sliced<T, R>(
    py: Python<'_>,
    value: &mut T,
    timeout: Option<f64>,
    mut f: impl FnMut(&mut T, Duration) -> Result<Option<R>, RatsError>,
) -> PyResult<Option<R>> {
    let timeout = crate::timeout(timeout)?;
    let slices = crate::Slices::new(timeout);
    loop {
        let slice = slices.next();
        let got = unblocked(py, (&mut *value, &mut f), |(v, f)| f(v, slice));
        if let Some(r) = rats_check(got)? {
            return Ok(Some(r));
        }
        if slices.over() {
            return Ok(None);
        }
        py.check_signals()?;
    }
}

/// A protocol manager on a node (`Rats(node)`): message space, metadata entries, a
/// notification queue and a terminus of the node's, shared by the protocol instances
/// made from it. One thread's (`WrongThreadError` elsewhere), as are its instances.
#[pyclass(module = "hamlyn._hamlyn", name = "Rats", frozen)]
pub struct PyRats {
    life: Arc<Life>,
    mgr: ThreadBound<Manager>,
}

impl PyRats {
    fn mgr(&self) -> PyResult<&Manager> {
        self.life.check()?;
        self.mgr.get()
    }
}

#[pymethods]
impl PyRats {
    /// A manager on `node` (it takes the node's first notification queue and a
    /// terminus).
    #[new]
    fn new(py: Python<'_>, node: &PyNode) -> PyResult<PyRats> {
        let n = node.get(py)?;
        let mgr = rats_check(unblocked(py, n, |n| Manager::new(&n)))?;
        Ok(PyRats {
            life: node.life(),
            mgr: ThreadBound::new(mgr),
        })
    }

    /// Message space not allocated, in bytes.
    #[getter]
    fn space_free(&self) -> PyResult<u64> {
        Ok(self.mgr()?.space_free())
    }

    /// Protocol messages whose metadata did not parse (forged), counted and dropped.
    #[getter]
    fn forged(&self) -> PyResult<u64> {
        Ok(self.mgr()?.stats().forged)
    }

    /// A tagged-write server over `length` bytes of message space: others write into it
    /// with tags (`RatsTaggedClient.write`), it takes the arrivals by tag.
    fn tagged_server(&self, length: u64) -> PyResult<PyRatsTaggedServer> {
        let s = rats_check(TaggedServer::new(self.mgr()?, length))?;
        Ok(PyRatsTaggedServer {
            life: self.life.clone(),
            server: ThreadBound::new(s),
        })
    }

    /// The client of the tagged-write server seed text `seed` names.
    fn tagged_client(&self, seed: &str) -> PyResult<PyRatsTaggedClient> {
        let seed = seed_from_text(seed)?;
        let c = rats_check(TaggedClient::from_seed(self.mgr()?, &seed))?;
        Ok(PyRatsTaggedClient {
            life: self.life.clone(),
            client: ThreadBound::new(c),
        })
    }

    /// A request/response server taking requests of at most `max_request` bytes.
    fn request_server(&self, max_request: u64) -> PyResult<PyRatsRequestServer> {
        let s = rats_check(RequestServer::new(self.mgr()?, max_request))?;
        Ok(PyRatsRequestServer {
            life: self.life.clone(),
            server: ThreadBound::new(s),
        })
    }

    /// The client of the request/response server seed text `seed` names, taking replies
    /// of at most `max_reply` bytes.
    fn request_client(&self, seed: &str, max_reply: u64) -> PyResult<PyRatsRequestClient> {
        let seed = seed_from_text(seed)?;
        let c = rats_check(RequestClient::from_seed(self.mgr()?, &seed, max_reply))?;
        Ok(PyRatsRequestClient {
            life: self.life.clone(),
            client: ThreadBound::new(c),
        })
    }

    /// A datagram receiver with `buffers` buffers of `buffer_len` bytes (the largest
    /// datagram); its senders get credits for them (`seed(credits)`).
    fn datagram_receiver(&self, buffers: u32, buffer_len: u64) -> PyResult<PyRatsDatagramReceiver> {
        let r = rats_check(DatagramReceiver::new(self.mgr()?, buffers, buffer_len))?;
        Ok(PyRatsDatagramReceiver {
            life: self.life.clone(),
            receiver: ThreadBound::new(r),
        })
    }

    /// The sender of the datagram receiver seed text `seed` names (a seed the receiver
    /// made for one sender: `RatsDatagramReceiver.seed(credits)`).
    fn datagram_sender(&self, seed: &str) -> PyResult<PyRatsDatagramSender> {
        let seed = seed_from_text(seed)?;
        let sender = rats_check(DatagramSender::from_seed(self.mgr()?, &seed))?;
        Ok(PyRatsDatagramSender {
            life: self.life.clone(),
            sender: ThreadBound::new(sender),
        })
    }

    /// A stream receiver with a ring of `ring` bytes and `entries` messages in flight;
    /// its `seed` builds the sender.
    fn stream_receiver(&self, ring: u64, entries: u32) -> PyResult<PyRatsStreamReceiver> {
        let r = rats_check(StreamReceiver::new(self.mgr()?, ring, entries))?;
        Ok(PyRatsStreamReceiver {
            life: self.life.clone(),
            receiver: ThreadBound::new(r),
        })
    }

    /// The sender into the stream receiver seed text `seed` names.
    fn stream_sender(&self, seed: &str) -> PyResult<PyRatsStreamSender> {
        let seed = seed_from_text(seed)?;
        let sender = rats_check(StreamSender::from_seed(self.mgr()?, &seed))?;
        Ok(PyRatsStreamSender {
            life: self.life.clone(),
            sender: ThreadBound::new(sender),
        })
    }

    /// A simple-datagram receiver: one buffer of `length` bytes, no queue (a message
    /// overwrites the last); messages may carry a reply seed.
    fn simple_datagram(&self, length: u64) -> PyResult<PyRatsSimpleDatagram> {
        let r = rats_check(SimpleDatagram::new(self.mgr()?, length))?;
        Ok(PyRatsSimpleDatagram {
            life: self.life.clone(),
            inner: ThreadBound::new((r, self.mgr()?.clone())),
        })
    }

    /// The sender to the simple-datagram receiver seed text `seed` names.
    fn simple_client(&self, seed: &str) -> PyResult<PyRatsSimpleClient> {
        let seed = seed_from_text(seed)?;
        let c = rats_check(SimpleClient::from_seed(self.mgr()?, &seed))?;
        Ok(PyRatsSimpleClient {
            life: self.life.clone(),
            client: ThreadBound::new(c),
        })
    }

    /// A remote-write server over `length` bytes of message space: writers
    /// (`remote_write_client(seed)`) fill it without telling it.
    fn remote_write_server(&self, length: u64) -> PyResult<PyRatsRemoteWriteServer> {
        let s = rats_check(RemoteWriteServer::new(self.mgr()?, length))?;
        Ok(PyRatsRemoteWriteServer {
            life: self.life.clone(),
            server: ThreadBound::new(s),
        })
    }

    /// The writer of the remote-write server seed text `seed` names (`BadSeedError`
    /// for another protocol's seed).
    fn remote_write_client(&self, seed: &str) -> PyResult<PyRatsRemoteWriteClient> {
        let seed = seed_from_text(seed)?;
        let c = rats_check(RemoteWriteClient::from_seed(self.mgr()?, &seed))?;
        Ok(PyRatsRemoteWriteClient {
            life: self.life.clone(),
            client: ThreadBound::new(c),
        })
    }

    /// A remote-read server: `length` bytes of message space that readers
    /// (`remote_read_client(seed, max_len)`) may read, not write.
    fn remote_read_server(&self, length: u64) -> PyResult<PyRatsRemoteReadServer> {
        let s = rats_check(RemoteReadServer::new(self.mgr()?, length))?;
        Ok(PyRatsRemoteReadServer {
            life: self.life.clone(),
            server: ThreadBound::new(s),
            length,
        })
    }

    /// The reader of the remote-read server seed text `seed` names, reading at most
    /// `max_len` bytes at a time (`BadSeedError` for another protocol's seed).
    fn remote_read_client(&self, seed: &str, max_len: u64) -> PyResult<PyRatsRemoteReadClient> {
        let seed = seed_from_text(seed)?;
        let c = rats_check(RemoteReadClient::from_seed(self.mgr()?, &seed, max_len))?;
        Ok(PyRatsRemoteReadClient {
            life: self.life.clone(),
            client: ThreadBound::new(c),
            max_len,
        })
    }

    fn __repr__(&self) -> String {
        "<hamlyn.Rats>".to_owned()
    }
}

/// A simple-datagram receiver (one buffer, "ready" or not): `seed` for senders,
/// `recv(timeout)` the next message as `(data, oob)`, and `reply(data, oob)` answers
/// the last message through the reply seed it carried, sending this receiver's own
/// reply seed along (so two of them ping-pong).
#[pyclass(module = "hamlyn._hamlyn", name = "RatsSimpleDatagram")]
pub struct PyRatsSimpleDatagram {
    life: Arc<Life>,
    /// The receiver and its manager (to send replies through).
    inner: ThreadBound<(SimpleDatagram, Manager)>,
}

#[pymethods]
impl PyRatsSimpleDatagram {
    /// The seed text senders are made from (`Rats.simple_client(seed)`).
    #[getter]
    fn seed(&self) -> PyResult<String> {
        self.life.check()?;
        let seed = rats_check(self.inner.get()?.0.make_seed())?;
        seed_to_text(&seed)
    }

    /// Arrivals refused as forged.
    #[getter]
    fn forged(&self) -> PyResult<u64> {
        Ok(self.inner.get()?.0.forged())
    }

    /// The next message as `(data, oob)`, waiting up to `timeout` seconds (None:
    /// forever) without the GIL; None at the timeout.
    #[pyo3(signature = (timeout=None))]
    fn recv<'py>(
        &mut self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        self.life.check()?;
        let (r, _) = self.inner.get_mut()?;
        let Some(m) = wait_sliced(py, r, timeout, |r, slice| r.recv(Some(slice)))? else {
            return Ok(None);
        };
        let data = rats_check(r.to_vec(&m))?;
        Ok(Some((PyBytes::new(py, &data), PyBytes::new(py, m.oob()))))
    }

    /// Answers the last message received with `data` and out-of-band bytes `oob`,
    /// through the reply seed it carried, with this receiver's own reply seed along;
    /// `StateError` if it carried none. The request's `Send`.
    #[pyo3(signature = (data, oob=None))]
    fn reply(&self, data: &Bound<'_, PyAny>, oob: Option<&[u8]>) -> PyResult<PySend> {
        self.life.check()?;
        let (r, mgr) = self.inner.get()?;
        let to = rats_check(r.reply_seed())?;
        let me = rats_check(r.metadata_for_self())?;
        let h = with_bytes(data, |b| {
            rats_check(to.send(mgr, b, Some(&me), oob.unwrap_or(&[])))
        })?;
        Ok(PySend::new(self.life.clone(), h))
    }
}

/// The sending side of a simple datagram.
#[pyclass(module = "hamlyn._hamlyn", name = "RatsSimpleClient", frozen)]
pub struct PyRatsSimpleClient {
    life: Arc<Life>,
    client: ThreadBound<SimpleClient>,
}

#[pymethods]
impl PyRatsSimpleClient {
    /// Bytes it may send.
    #[getter]
    fn length(&self) -> PyResult<u64> {
        Ok(self.client.get()?.len())
    }

    /// Sends `data` with out-of-band bytes `oob` and, with `reply_to` (a
    /// `RatsSimpleDatagram` of this thread), that receiver's reply seed, so the other
    /// side can `reply()`. The request's `Send`.
    #[pyo3(signature = (data, oob=None, reply_to=None))]
    fn send(
        &self,
        data: &Bound<'_, PyAny>,
        oob: Option<&[u8]>,
        reply_to: Option<&PyRatsSimpleDatagram>,
    ) -> PyResult<PySend> {
        self.life.check()?;
        let reply = match reply_to {
            Some(r) => Some(rats_check(r.inner.get()?.0.metadata_for_self())?),
            None => None,
        };
        let c = self.client.get()?;
        let h = with_bytes(data, |b| {
            rats_check(c.send(b, reply.as_ref(), oob.unwrap_or(&[])))
        })?;
        Ok(PySend::new(self.life.clone(), h))
    }
}

/// The receiving side of a stream (one-way, one-to-one, in order): `read_bytes` and
/// `read_record` give the next bytes or record (copied out of the ring, whose space goes
/// back to the sender at once), None at the timeout, `EndOfStreamError` once the sender
/// closed it and everything was read. A slow reader holds a fast sender back (credit),
/// never loses data.
#[pyclass(module = "hamlyn._hamlyn", name = "RatsStreamReceiver")]
pub struct PyRatsStreamReceiver {
    life: Arc<Life>,
    receiver: ThreadBound<StreamReceiver>,
}

impl PyRatsStreamReceiver {
    /// Waits for a view with `read`, copies it out and releases it.
    fn take<'py>(
        &mut self,
        py: Python<'py>,
        timeout: Option<f64>,
        read: fn(&mut StreamReceiver, Option<Duration>) -> Result<Option<View>, RatsError>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        self.life.check()?;
        let r = self.receiver.get_mut()?;
        let Some(v) = wait_sliced(py, r, timeout, |r, slice| read(r, Some(slice)))? else {
            return Ok(None);
        };
        let bytes = rats_check(r.copy(&v))?;
        rats_check(r.release(&v))?;
        Ok(Some(PyBytes::new(py, &bytes)))
    }
}

#[pymethods]
impl PyRatsStreamReceiver {
    /// The seed text that builds the sender (`Rats.stream_sender(seed)`).
    #[getter]
    fn seed(&self) -> PyResult<String> {
        self.life.check()?;
        let seed = rats_check(self.receiver.get()?.make_seed())?;
        seed_to_text(&seed)
    }

    /// Whether the sender closed the stream and everything before was read.
    #[getter]
    fn at_end(&self) -> PyResult<bool> {
        Ok(self.receiver.get()?.at_end())
    }

    /// Arrivals refused as forged.
    #[getter]
    fn forged(&self) -> PyResult<u64> {
        Ok(self.receiver.get()?.forged())
    }

    /// The next bytes of the stream (as much of the current message as is there,
    /// crossing record ends), waiting up to `timeout` seconds (None: forever) without
    /// the GIL.
    #[pyo3(signature = (timeout=None))]
    fn read_bytes<'py>(
        &mut self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        self.take(py, timeout, StreamReceiver::read_bytes)
    }

    /// The next record (as the sender wrote it with `write_record`), waiting up to
    /// `timeout` seconds (None: forever) without the GIL.
    #[pyo3(signature = (timeout=None))]
    fn read_record<'py>(
        &mut self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        self.take(py, timeout, StreamReceiver::read_record)
    }
}

/// The sending side of a stream: small writes are coalesced until `flush()` or a
/// large write; `close()` ends the stream (the receiver reads what was written, then
/// `EndOfStreamError`). A write waits (without the GIL) while the receiver's ring is
/// full.
#[pyclass(module = "hamlyn._hamlyn", name = "RatsStreamSender")]
pub struct PyRatsStreamSender {
    life: Arc<Life>,
    sender: ThreadBound<StreamSender>,
}

impl PyRatsStreamSender {
    fn write(
        &mut self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        record: bool,
    ) -> PyResult<Option<PySend>> {
        self.life.check()?;
        let bytes = with_bytes(data, |b| Ok(b.to_vec()))?;
        let s = self.sender.get_mut()?;
        let st = rats_check(unblocked(py, s, |s| {
            if record {
                s.write_record(&bytes)
            } else {
                s.write_bytes(&bytes)
            }
        }))?;
        Ok(match st {
            WriteStatus::Sent(h) => Some(PySend::new(self.life.clone(), h)),
            _ => None,
        })
    }
}

#[pymethods]
impl PyRatsStreamSender {
    /// The largest write (half the receiver's ring).
    #[getter]
    fn max_write(&self) -> PyResult<u64> {
        Ok(self.sender.get()?.max_write())
    }

    /// Writes `data` (a bytes-like object) as part of the byte stream: the `Send` of
    /// the message it went out in, or None when it was coalesced (sent by a later
    /// write or `flush()`).
    fn write_bytes(&mut self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Option<PySend>> {
        self.write(py, data, false)
    }

    /// Writes `data` as one record (`read_record` gives it back whole); as
    /// `write_bytes` otherwise.
    fn write_record(
        &mut self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<Option<PySend>> {
        self.write(py, data, true)
    }

    /// Sends what was coalesced, if anything: its `Send`, else None.
    fn flush(&mut self, py: Python<'_>) -> PyResult<Option<PySend>> {
        self.life.check()?;
        let s = self.sender.get_mut()?;
        let h = rats_check(unblocked(py, s, |s| s.flush()))?;
        Ok(h.map(|h| PySend::new(self.life.clone(), h)))
    }

    /// Flushes and ends the stream; the last message's `Send` (wait for it before the
    /// node goes).
    fn close(&mut self, py: Python<'_>) -> PyResult<PySend> {
        self.life.check()?;
        let s = self.sender.get_mut()?;
        let h = rats_check(unblocked(py, s, |s| s.close()))?;
        Ok(PySend::new(self.life.clone(), h))
    }
}

/// The receiving side of datagrams: each sender is given a seed of its own
/// (`seed(credits)`: that many buffers it may fill before the receiver releases
/// some; a sender without credit gets `FullError`, nothing overruns the receiver).
/// `recv(timeout)` gives a `RatsDatagram`, a view of the buffer it landed in (its bytes
/// are read from there on demand, `read(datagram, offset, length)`), held until
/// `release(datagram)` gives the buffer back to its sender as a credit.
#[pyclass(module = "hamlyn._hamlyn", name = "RatsDatagramReceiver")]
pub struct PyRatsDatagramReceiver {
    life: Arc<Life>,
    receiver: ThreadBound<DatagramReceiver>,
}

/// One datagram received: where it is (a buffer of the receiver's, until released),
/// its `length`, its sender, its out-of-band bytes.
#[pyclass(module = "hamlyn._hamlyn", name = "RatsDatagram", frozen)]
pub struct PyRatsDatagram {
    /// None once released.
    datagram: std::sync::Mutex<Option<Datagram>>,
    length: u64,
    sender: u32,
    src_node: u32,
    oob: Vec<u8>,
}

impl PyRatsDatagram {
    fn new(d: Datagram) -> PyRatsDatagram {
        PyRatsDatagram {
            length: d.len,
            sender: d.sender,
            src_node: d.src.0,
            oob: d.oob().to_vec(),
            datagram: std::sync::Mutex::new(Some(d)),
        }
    }

    /// The datagram, unless it was released.
    fn get(&self, py: Python<'_>) -> PyResult<Datagram> {
        crate::lock(py, &self.datagram)?.ok_or_else(|| {
            rats_err(RatsError::State(
                "the datagram was released: its buffer is its sender's again",
            ))
        })
    }
}

/// A Rats error as a Python exception.
fn rats_err(e: RatsError) -> PyErr {
    crate::errors::rats(e)
}

#[pymethods]
impl PyRatsDatagram {
    /// Its bytes.
    #[getter]
    fn length(&self) -> u64 {
        self.length
    }

    /// The sender (its number at this receiver).
    #[getter]
    fn sender(&self) -> u32 {
        self.sender
    }

    /// The sending node.
    #[getter]
    fn src_node(&self) -> u32 {
        self.src_node
    }

    /// The sender's out-of-band bytes.
    #[getter]
    fn oob<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.oob)
    }

    /// Whether it was released.
    #[getter]
    fn released(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(crate::lock(py, &self.datagram)?.is_none())
    }
}

#[pymethods]
impl PyRatsDatagramReceiver {
    /// A seed for one more sender, with `credits` buffers it may fill at once (text).
    fn seed(&mut self, credits: u32) -> PyResult<String> {
        self.life.check()?;
        let seed = rats_check(self.receiver.get_mut()?.make_seed(credits))?;
        seed_to_text(&seed)
    }

    /// Bytes of each buffer (the largest datagram).
    #[getter]
    fn buffer_len(&self) -> PyResult<u64> {
        Ok(self.receiver.get()?.buffer_len())
    }

    /// Messages refused as forged (their metadata did not parse), dropped.
    #[getter]
    fn forged(&self) -> PyResult<u64> {
        Ok(self.receiver.get()?.forged())
    }

    /// The next datagram, or None: never blocks.
    fn try_recv(&mut self) -> PyResult<Option<PyRatsDatagram>> {
        self.life.check()?;
        let d = rats_check(self.receiver.get_mut()?.try_recv())?;
        Ok(d.map(PyRatsDatagram::new))
    }

    /// The next datagram, waiting up to `timeout` seconds (None: forever) without the
    /// GIL; None at the timeout.
    #[pyo3(signature = (timeout=None))]
    fn recv(&mut self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyRatsDatagram>> {
        self.life.check()?;
        let r = self.receiver.get_mut()?;
        let d = wait_sliced(py, r, timeout, |r, slice| r.recv(Some(slice)))?;
        Ok(d.map(PyRatsDatagram::new))
    }

    /// `length` bytes (to its end by default) of `datagram` from `offset`, read from
    /// the buffer it landed in; `StateError` once it was released.
    #[pyo3(signature = (datagram, offset=0, length=None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        datagram: &PyRatsDatagram,
        offset: u64,
        length: Option<u64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.life.check()?;
        let d = datagram.get(py)?;
        let end = match length {
            Some(n) => offset.checked_add(n),
            None => Some(d.len),
        }
        .filter(|&e| e <= d.len && offset <= e)
        .ok_or_else(|| rats_err(RatsError::InvalidArgument("outside the datagram")))?;
        let mut part = d;
        part.offset += offset;
        part.len = end - offset;
        let mut v = vec![0u8; part.len as usize];
        rats_check(self.receiver.get()?.read(&part, &mut v))?;
        Ok(PyBytes::new(py, &v))
    }

    /// Gives `datagram`'s buffer back to its sender (a credit). Releasing twice is
    /// `StateError`.
    fn release(&mut self, py: Python<'_>, datagram: &PyRatsDatagram) -> PyResult<()> {
        self.life.check()?;
        let d = datagram.get(py)?;
        rats_check(self.receiver.get_mut()?.release(d))?;
        *crate::lock(py, &datagram.datagram)? = None;
        Ok(())
    }
}

/// The sending side of datagrams to one receiver.
#[pyclass(module = "hamlyn._hamlyn", name = "RatsDatagramSender")]
pub struct PyRatsDatagramSender {
    life: Arc<Life>,
    sender: ThreadBound<DatagramSender>,
}

#[pymethods]
impl PyRatsDatagramSender {
    /// Sends `data` (at most `max_len` bytes) with out-of-band bytes `oob`, if it holds
    /// a credit: `FullError` otherwise (nothing sent; the receiver has not released
    /// enough yet). The request's `Send`.
    #[pyo3(signature = (data, oob=None))]
    fn send(&mut self, data: &Bound<'_, PyAny>, oob: Option<&[u8]>) -> PyResult<PySend> {
        self.life.check()?;
        let s = self.sender.get_mut()?;
        let h = with_bytes(data, |b| rats_check(s.send(b, oob.unwrap_or(&[]))))?;
        Ok(PySend::new(self.life.clone(), h))
    }

    /// As `send`, waiting up to `timeout` seconds for a credit (`TimeoutError`).
    #[pyo3(signature = (data, oob=None, timeout=30.0))]
    fn send_wait(
        &mut self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        oob: Option<&[u8]>,
        timeout: f64,
    ) -> PyResult<PySend> {
        self.life.check()?;
        let t = crate::timeout(Some(timeout))?.unwrap_or(Duration::ZERO);
        let bytes = with_bytes(data, |b| Ok(b.to_vec()))?;
        let oob = oob.unwrap_or(&[]).to_vec();
        let s = self.sender.get_mut()?;
        let h = rats_check(unblocked(py, s, |s| s.send_wait(&bytes, &oob, Some(t))))?;
        Ok(PySend::new(self.life.clone(), h))
    }

    /// Credits held now (datagrams it may send without waiting).
    #[getter]
    fn credits(&mut self) -> PyResult<usize> {
        Ok(self.sender.get_mut()?.credits())
    }

    /// The largest datagram (the receiver's buffer size).
    #[getter]
    fn max_len(&self) -> PyResult<u64> {
        Ok(self.sender.get()?.max_len())
    }
}

/// The receiving side of tagged remote writes: `seed` (text) is what a writer needs;
/// `get_tag()` / `wait_tag(timeout)` give the next arrival as `(tag, offset, length,
/// src_node)`, and `read(offset, length)` its bytes.
#[pyclass(module = "hamlyn._hamlyn", name = "RatsTaggedServer", frozen)]
pub struct PyRatsTaggedServer {
    life: Arc<Life>,
    server: ThreadBound<TaggedServer>,
}

/// A tag arrival as Python sees it.
type PyArrival = (u32, u64, u64, u32);

#[pymethods]
impl PyRatsTaggedServer {
    /// The seed text a writer is made from (`Rats.tagged_client(seed)`).
    #[getter]
    fn seed(&self) -> PyResult<String> {
        self.life.check()?;
        let seed = rats_check(self.server.get()?.make_seed())?;
        seed_to_text(&seed)
    }

    /// Bytes of the server's slot.
    #[getter]
    fn length(&self) -> PyResult<u64> {
        Ok(self.server.get()?.len())
    }

    /// The next arrival, any tag, as `(tag, offset, length, src_node)`, or None: never
    /// blocks.
    fn get_tag(&self) -> PyResult<Option<PyArrival>> {
        self.life.check()?;
        let a = rats_check(self.server.get()?.get_tag())?;
        Ok(a.map(|a| (a.tag, a.offset, a.len, a.src.0)))
    }

    /// The next arrival, waiting up to `timeout` seconds (None: forever) without the
    /// GIL; None at the timeout.
    #[pyo3(signature = (timeout=None))]
    fn wait_tag(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyArrival>> {
        self.life.check()?;
        let mut s = self.server.get()?;
        let a = wait_sliced(py, &mut s, timeout, |s, slice| s.wait_tag(Some(slice)))?;
        Ok(a.map(|a| (a.tag, a.offset, a.len, a.src.0)))
    }

    /// `length` bytes at `offset` of the slot, copied out.
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        length: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.life.check()?;
        let mut v = vec![0u8; length];
        rats_check(self.server.get()?.read(offset, &mut v))?;
        Ok(PyBytes::new(py, &v))
    }
}

/// The writing side of a tagged-write server.
#[pyclass(module = "hamlyn._hamlyn", name = "RatsTaggedClient", frozen)]
pub struct PyRatsTaggedClient {
    life: Arc<Life>,
    client: ThreadBound<TaggedClient>,
}

#[pymethods]
impl PyRatsTaggedClient {
    /// Writes `data` (a bytes-like object, one packet at most) at `offset` of the
    /// server's slot with `tag`; the request's `Send`.
    fn write(&self, offset: u64, data: &Bound<'_, PyAny>, tag: u32) -> PyResult<PySend> {
        self.life.check()?;
        let c = self.client.get()?;
        let h = with_bytes(data, |b| rats_check(c.write(offset, b, tag)))?;
        Ok(PySend::new(self.life.clone(), h))
    }
}

/// A request/response server: `seed` (text) names it to clients; `recv(timeout)` gives
/// the next request (a `RatsRequest`: its bytes and who sent it); `reply(request,
/// data)` answers it and frees the buffer for the next one. Retransmitted requests are
/// recognised and dropped (`duplicates`).
#[pyclass(module = "hamlyn._hamlyn", name = "RatsRequestServer")]
pub struct PyRatsRequestServer {
    life: Arc<Life>,
    server: ThreadBound<RequestServer>,
}

/// One request a `RatsRequestServer` received.
#[pyclass(module = "hamlyn._hamlyn", name = "RatsRequest", frozen)]
pub struct PyRatsRequest {
    request: ThreadBound<Request>,
    data: Vec<u8>,
    client: u64,
    seq: u32,
}

#[pymethods]
impl PyRatsRequest {
    /// The request's bytes.
    #[getter]
    fn data<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.data)
    }

    /// The client's id.
    #[getter]
    fn client(&self) -> u64 {
        self.client
    }

    /// The client's sequence number for it.
    #[getter]
    fn seq(&self) -> u32 {
        self.seq
    }
}

#[pymethods]
impl PyRatsRequestServer {
    /// The seed text clients are made from (`Rats.request_client(seed, max_reply)`).
    #[getter]
    fn seed(&self) -> PyResult<String> {
        self.life.check()?;
        rats_check(self.server.get()?.seed_text())
    }

    /// Publishes the seed in the cluster's name registry under `name`.
    fn publish(&mut self, py: Python<'_>, name: &str) -> PyResult<()> {
        self.life.check()?;
        let s = self.server.get_mut()?;
        rats_check(unblocked(py, s, |s| s.publish(name)))
    }

    /// Retransmitted requests dropped as duplicates.
    #[getter]
    fn duplicates(&self) -> PyResult<u64> {
        Ok(self.server.get()?.duplicates())
    }

    /// Requests whose metadata did not parse (forged), dropped.
    #[getter]
    fn forged(&self) -> PyResult<u64> {
        Ok(self.server.get()?.forged())
    }

    /// Requests dropped because their bytes did not add up to the length they declared
    /// (a late copy of an earlier request landed with them); their clients retransmit.
    #[getter]
    fn mixed(&self) -> PyResult<u64> {
        Ok(self.server.get()?.mixed())
    }

    /// The next request, waiting up to `timeout` seconds (None: forever) without the
    /// GIL; None at the timeout. `StateError` while the last one is not answered.
    #[pyo3(signature = (timeout=None))]
    fn recv(&mut self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyRatsRequest>> {
        self.life.check()?;
        let s = self.server.get_mut()?;
        let Some(r) = wait_sliced(py, s, timeout, |s, slice| s.recv(Some(slice)))? else {
            return Ok(None);
        };
        let data = rats_check(s.to_vec(&r))?;
        Ok(Some(PyRatsRequest {
            client: r.client,
            seq: r.seq,
            data,
            request: ThreadBound::new(r),
        }))
    }

    /// Answers `request` with `data` (a bytes-like object) and frees the receive buffer
    /// for the next request; the reply's `Send`.
    fn reply(&mut self, request: &PyRatsRequest, data: &Bound<'_, PyAny>) -> PyResult<PySend> {
        self.life.check()?;
        let r = *request.request.get()?;
        let life = self.life.clone();
        let s = self.server.get_mut()?;
        let h = with_bytes(data, |b| rats_check(s.send_reply(&r, b)))?;
        rats_check(s.release())?;
        Ok(PySend::new(life, h))
    }

    /// Frees the receive buffer without answering (the client retransmits, and times
    /// out).
    fn release(&mut self) -> PyResult<()> {
        self.life.check()?;
        rats_check(self.server.get_mut()?.release())
    }
}

/// A request/response client: `call(data, timeout)` sends a request and waits for its
/// reply (retransmitting while none comes), returning the reply's bytes.
#[pyclass(module = "hamlyn._hamlyn", name = "RatsRequestClient")]
pub struct PyRatsRequestClient {
    life: Arc<Life>,
    client: ThreadBound<RequestClient>,
}

#[pymethods]
impl PyRatsRequestClient {
    /// Sends `data` and waits up to `timeout` seconds for the reply (`TimeoutError`),
    /// without the GIL; the reply's bytes.
    #[pyo3(signature = (data, timeout=30.0))]
    fn call<'py>(
        &mut self,
        py: Python<'py>,
        data: &Bound<'py, PyAny>,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.life.check()?;
        let t = crate::timeout(Some(timeout))?.unwrap_or(Duration::ZERO);
        let bytes = with_bytes(data, |b| Ok(b.to_vec()))?;
        let c = self.client.get_mut()?;
        let reply = rats_check(unblocked(py, &mut *c, |c| c.call(&bytes, t)))?;
        let out = rats_check(c.reply_bytes(&reply));
        c.release();
        Ok(PyBytes::new(py, &out?))
    }

    /// Requests sent again for want of a reply, so far.
    #[getter]
    fn retransmissions(&self) -> PyResult<u64> {
        Ok(self.client.get()?.retransmissions)
    }
}
