//! The two Rats protocols on remote memory from Python: remote write
//! (`RatsRemoteWriteServer`, `RatsRemoteWriteClient`: the client writes at offsets of
//! the server's slot, plainly, scattered or gathered; the server is not told) and remote
//! read (`RatsRemoteReadServer`, `RatsRemoteReadClient`: `remote_read` blocks,
//! `async_remote_read` starts a read that `ready()` polls and `take()` collects). Made by
//! `Rats.remote_write_server` and the like; one thread's, as every Rats object.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use hamlyn_rats::remote_read::{RemoteReadClient, RemoteReadServer};
use hamlyn_rats::remote_write::{RemoteWriteClient, RemoteWriteServer};
use hamlyn_rats::RatsError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{rats, rats_check};
use crate::terminus::PySend;
use crate::ticket::{seed_to_text, with_bytes};
use crate::{unblocked, Life, ThreadBound};

/// The bytes of a bytes-like object: `bytes` borrowed without a copy, any other buffer
/// (bytearray, memoryview, numpy arrays) copied out of a contiguous buffer.
fn bytes_of<'a>(data: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(b) = data.downcast::<PyBytes>() {
        return Ok(Cow::Borrowed(b.as_bytes()));
    }
    with_bytes(data, |b| Ok(Cow::Owned(b.to_vec())))
}

/// `length` bytes from `read` as a new `bytes`, filled in place (no copy in between).
fn bytes_from<'py>(
    py: Python<'py>,
    length: usize,
    read: impl FnOnce(&mut [u8]) -> Result<(), RatsError>,
) -> PyResult<Bound<'py, PyBytes>> {
    let mut failed = None;
    let out = PyBytes::new_with(py, length, |b| {
        if let Err(e) = read(b) {
            failed = Some(e);
        }
        Ok(())
    })?;
    match failed {
        Some(e) => Err(rats(e)),
        None => Ok(out),
    }
}

/// The side of a remote write that is written: a slot of `length` bytes that writers
/// (`Rats.remote_write_client(seed)`) fill without telling it; `read(offset, length)`
/// copies what is there.
#[pyclass(module = "hamlyn._hamlyn", name = "RatsRemoteWriteServer", frozen)]
pub struct PyRatsRemoteWriteServer {
    pub(crate) life: Arc<Life>,
    pub(crate) server: ThreadBound<RemoteWriteServer>,
}

#[pymethods]
impl PyRatsRemoteWriteServer {
    /// The seed text writers are made from (`Rats.remote_write_client(seed)`).
    #[getter]
    fn seed(&self) -> PyResult<String> {
        self.life.check()?;
        let seed = rats_check(self.server.get()?.make_seed())?;
        seed_to_text(&seed)
    }

    /// Bytes of the slot.
    #[getter]
    fn length(&self) -> PyResult<u64> {
        Ok(self.server.get()?.len())
    }

    /// `length` bytes at `offset` of the slot, as they are now (nothing says when a
    /// writer wrote them: its `Send`, or a message of another protocol, does).
    /// `InvalidArgumentError` past the slot's end.
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        length: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.life.check()?;
        let s = self.server.get()?;
        if offset
            .checked_add(length as u64)
            .is_none_or(|end| end > s.len())
        {
            return Err(rats(RatsError::InvalidArgument("outside the slot")));
        }
        bytes_from(py, length, |b| s.read(offset, b))
    }
}

/// The writing side of a remote write: `write(offset, data)`, `write_scatter([(offset,
/// data), ...])` (each piece at its own offset, a `Send` each) and `write_gather(offset,
/// [data, ...])` (the pieces contiguous, one message). The server is not notified.
#[pyclass(module = "hamlyn._hamlyn", name = "RatsRemoteWriteClient", frozen)]
pub struct PyRatsRemoteWriteClient {
    pub(crate) life: Arc<Life>,
    pub(crate) client: ThreadBound<RemoteWriteClient>,
}

#[pymethods]
impl PyRatsRemoteWriteClient {
    /// Bytes of the server's slot it may write.
    #[getter]
    fn length(&self) -> PyResult<u64> {
        Ok(self.client.get()?.len())
    }

    /// Writes `data` (a bytes-like object: `bytes` is sent from without a copy of
    /// ours) at `offset` of the server's slot; the request's `Send`. `BadTicketError`
    /// outside the slot (nothing sent).
    fn write(&self, offset: u64, data: &Bound<'_, PyAny>) -> PyResult<PySend> {
        self.life.check()?;
        let c = self.client.get()?;
        let h = with_bytes(data, |b| rats_check(c.write(offset, b)))?;
        Ok(PySend::new(self.life.clone(), h))
    }

    /// Scatter: each `(offset, data)` of `pieces` lands at its own offset; a `Send` per
    /// piece, in their order (the writes land in no promised order). On an error, pieces
    /// before the one that failed may have been sent.
    fn write_scatter(&self, pieces: Vec<(u64, Bound<'_, PyAny>)>) -> PyResult<Vec<PySend>> {
        self.life.check()?;
        let c = self.client.get()?;
        let parts = pieces
            .iter()
            .map(|(off, data)| Ok((*off, bytes_of(data)?)))
            .collect::<PyResult<Vec<_>>>()?;
        let refs: Vec<(u64, &[u8])> = parts.iter().map(|(o, b)| (*o, b.as_ref())).collect();
        let handles = rats_check(c.write_scatter(&refs))?;
        Ok(handles
            .into_iter()
            .map(|h| PySend::new(self.life.clone(), h))
            .collect())
    }

    /// Gather: the bytes-like objects of `pieces`, in order, land contiguously at
    /// `offset` as one message (gathered into the manager's message space on the way);
    /// its `Send`.
    fn write_gather(&self, offset: u64, pieces: Vec<Bound<'_, PyAny>>) -> PyResult<PySend> {
        self.life.check()?;
        let c = self.client.get()?;
        let parts = pieces
            .iter()
            .map(|p| bytes_of(p))
            .collect::<PyResult<Vec<_>>>()?;
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total as u64 > c.len() {
            return Err(rats(RatsError::TooLong {
                len: total as u64,
                max: c.len(),
            }));
        }
        let h = rats_check(c.write(offset, &parts.concat()))?;
        Ok(PySend::new(self.life.clone(), h))
    }
}

/// The side of a remote read that is read: a slot of `length` bytes that readers
/// (`Rats.remote_read_client(seed, max_len)`) read without involving this process;
/// `write(offset, data)` sets what they see.
#[pyclass(module = "hamlyn._hamlyn", name = "RatsRemoteReadServer", frozen)]
pub struct PyRatsRemoteReadServer {
    pub(crate) life: Arc<Life>,
    pub(crate) server: ThreadBound<RemoteReadServer>,
    pub(crate) length: u64,
}

#[pymethods]
impl PyRatsRemoteReadServer {
    /// The seed text readers are made from (`Rats.remote_read_client(seed, max_len)`).
    #[getter]
    fn seed(&self) -> PyResult<String> {
        self.life.check()?;
        let seed = rats_check(self.server.get()?.make_seed())?;
        seed_to_text(&seed)
    }

    /// Bytes of the slot (as asked for).
    #[getter]
    fn length(&self) -> u64 {
        self.length
    }

    /// Writes `data` (a bytes-like object) at `offset` of the slot: what readers will
    /// see. `InvalidArgumentError` past the slot's end.
    fn write(&self, offset: u64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        self.life.check()?;
        let s = self.server.get()?;
        with_bytes(data, |b| {
            if offset
                .checked_add(b.len() as u64)
                .is_none_or(|end| end > self.length)
            {
                return Err(rats(RatsError::InvalidArgument("outside the slot")));
            }
            rats_check(s.write(offset, b))
        })
    }
}

/// The reading side of a remote read, with a reply buffer of `max_len` bytes: one read
/// at a time, either `remote_read(offset, length, timeout)` (blocking, without the GIL)
/// or `async_remote_read(offset, length)`, then `ready()` until True, then `take()`.
#[pyclass(module = "hamlyn._hamlyn", name = "RatsRemoteReadClient")]
pub struct PyRatsRemoteReadClient {
    pub(crate) life: Arc<Life>,
    pub(crate) client: ThreadBound<RemoteReadClient>,
    pub(crate) max_len: u64,
}

#[pymethods]
impl PyRatsRemoteReadClient {
    /// The longest read (its reply buffer).
    #[getter]
    fn max_len(&self) -> u64 {
        self.max_len
    }

    /// Reads `length` bytes at `offset` of the server's slot, waiting up to `timeout`
    /// seconds (without the GIL) for the answer. `TooLongError` past `max_len`;
    /// `OutsideTicketError` past the server's slot; `TimeoutError` when no answer came
    /// (the read is then still in flight: `ready()` and `take()` get it); `StateError`
    /// while another read is in flight or not taken.
    #[pyo3(signature = (offset, length, timeout=30.0))]
    fn remote_read<'py>(
        &mut self,
        py: Python<'py>,
        offset: u64,
        length: u64,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.life.check()?;
        let t = crate::timeout(Some(timeout))?.unwrap_or(Duration::ZERO);
        let c = self.client.get_mut()?;
        let got = rats_check(unblocked(py, c, |c| c.remote_read(offset, length, Some(t))))?;
        Ok(PyBytes::new(py, &got))
    }

    /// Starts reading `length` bytes at `offset` of the server's slot and returns at
    /// once. `StateError` while another read is in flight or not taken; `TooLongError`
    /// past `max_len`.
    fn async_remote_read(&mut self, offset: u64, length: u64) -> PyResult<()> {
        self.life.check()?;
        rats_check(self.client.get_mut()?.async_remote_read(offset, length))
    }

    /// Whether the started read has its answer (never blocks); a refused read raises its
    /// error (and is over); `StateError` if none was started.
    fn ready(&mut self) -> PyResult<bool> {
        self.life.check()?;
        rats_check(self.client.get_mut()?.ready())
    }

    /// The started read's bytes, once `ready()`; the read is over. `StateError` before.
    fn take<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        self.life.check()?;
        let got = rats_check(self.client.get_mut()?.take())?;
        Ok(PyBytes::new(py, &got))
    }
}
