//! `hamlyn.DirectTarget`: a direct slot of this node mapped into the sender's process
//! (`Node.slot(..., direct=True)`), deposited into without the engine.

use std::sync::{Arc, Mutex};

use hamlyn::{Data, DirectTarget};
use pyo3::prelude::*;

use crate::area::PyArea;
use crate::errors::{self, check};
use crate::terminus::options;
use crate::ticket::{with_bytes, PyTicket};
use crate::Life;

/// A direct slot mapped in this process (`Node.open_direct(ticket)`): `send` copies,
/// counts and notifies here, one hop, with the engine's own counting code. The mapping
/// stays until `close()`, whatever the receiver does later (a direct slot gives up
/// revoking mappings already given).
#[pyclass(module = "hamlyn._hamlyn", name = "DirectTarget", frozen)]
pub struct PyDirectTarget {
    life: Arc<Life>,
    target: Mutex<Option<Arc<DirectTarget>>>,
}

impl PyDirectTarget {
    pub(crate) fn new(life: Arc<Life>, target: DirectTarget) -> PyDirectTarget {
        PyDirectTarget {
            life,
            target: Mutex::new(Some(Arc::new(target))),
        }
    }

    fn get(&self, py: Python<'_>) -> PyResult<Arc<DirectTarget>> {
        self.life.check()?;
        crate::lock(py, &self.target)?
            .clone()
            .ok_or_else(|| errors::closed("the direct target is closed"))
    }
}

#[pymethods]
impl PyDirectTarget {
    /// Deposits `data` (a bytes-like object, any length that fits the ticket) into the
    /// slot, with the options of `Terminus.send`. When it returns, the message is in
    /// place and counted (no `Send` handle); refusals raise as `Terminus.send`'s would.
    #[pyo3(signature = (data, *, tag=0, offset=0, meta=None, notify=true, wake=true, fast=false, entry=None))]
    #[allow(clippy::too_many_arguments)] // Python keywords.
    fn send(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        tag: u64,
        offset: u64,
        meta: Option<&[u8]>,
        notify: bool,
        wake: bool,
        fast: bool,
        entry: Option<u32>,
    ) -> PyResult<()> {
        let o = options(tag, offset, meta.unwrap_or(&[]), notify, wake, fast, entry)?;
        let target = self.get(py)?;
        with_bytes(data, |bytes| check(target.send(&o, Data::Inline(bytes))))
    }

    /// Deposits `length` bytes at `area_offset` of `area` (an area of the node this
    /// target was opened through; to its end by default). Otherwise as `send`.
    #[pyo3(signature = (area, area_offset=0, length=None, *, tag=0, offset=0, meta=None, notify=true, wake=true, fast=false, entry=None))]
    #[allow(clippy::too_many_arguments)] // Python keywords.
    fn send_area(
        &self,
        py: Python<'_>,
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
    ) -> PyResult<()> {
        let o = options(tag, offset, meta.unwrap_or(&[]), notify, wake, fast, entry)?;
        let target = self.get(py)?;
        let area = area.get(py)?;
        let length = length.unwrap_or_else(|| area.len().saturating_sub(area_offset));
        check(target.send(&o, Data::Gather(&[area.span(area_offset, length)])))
    }

    /// The ticket this target was opened for.
    #[getter]
    fn ticket(&self, py: Python<'_>) -> PyResult<PyTicket> {
        Ok(PyTicket {
            ticket: *self.get(py)?.ticket(),
        })
    }

    /// Whether the slot is a fast-mode one.
    #[getter]
    fn fast(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.get(py)?.is_fast())
    }

    /// Unmaps the slot. Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let t = crate::lock(py, &self.target)?.take();
        drop(t);
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
}
