//! `hamlyn.Slot`: part of an area named by a key and a mode; tickets to it.

use std::sync::{Arc, Mutex, MutexGuard};

use hamlyn::{Slot, SlotMode};
use pyo3::prelude::*;

use crate::errors::{self, check};
use crate::ticket::PyTicket;
use crate::Life;

/// A slot (`Node.slot(...)`): tickets to it let other processes write (or read, or update)
/// its bytes. `close()` destroys it: its tickets stop working.
#[pyclass(module = "hamlyn._hamlyn", name = "Slot", frozen)]
pub struct PySlot {
    life: Arc<Life>,
    slot: Mutex<Option<Slot>>,
}

impl PySlot {
    pub(crate) fn new(life: Arc<Life>, slot: Slot) -> PySlot {
        PySlot {
            life,
            slot: Mutex::new(Some(slot)),
        }
    }

    /// Runs `f` on the slot, if it and its node are open.
    fn with<T>(&self, py: Python<'_>, f: impl FnOnce(&mut Slot) -> PyResult<T>) -> PyResult<T> {
        self.life.check()?;
        let mut g: MutexGuard<'_, Option<Slot>> = crate::lock(py, &self.slot)?;
        match g.as_mut() {
            Some(s) => f(s),
            None => Err(errors::closed("the slot is closed")),
        }
    }
}

#[pymethods]
impl PySlot {
    /// The slot's id, as notifications name it.
    #[getter]
    fn id(&self, py: Python<'_>) -> PyResult<u32> {
        self.with(py, |s| Ok(s.id().0))
    }

    /// The slot's mode: 'normal', 'paranoid', 'paranoid_one_shot' or 'fast'.
    #[getter]
    fn mode(&self, py: Python<'_>) -> PyResult<&'static str> {
        self.with(py, |s| {
            Ok(match s.mode() {
                SlotMode::Normal => "normal",
                SlotMode::Paranoid => "paranoid",
                SlotMode::ParanoidOneShot => "paranoid_one_shot",
                SlotMode::Fast => "fast",
                _ => "unknown",
            })
        })
    }

    /// Bytes in the slot.
    #[getter]
    fn length(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |s| Ok(s.len()))
    }

    /// Where the slot starts in its area.
    #[getter]
    fn base(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |s| Ok(s.base()))
    }

    /// A ticket for bytes `offset..offset + length` of the slot (slot-relative; to its
    /// end by default) and metadata entries `meta_first..meta_first + meta_count` (all
    /// from `meta_first` by default; ignored for fast slots). Without arguments: the
    /// whole slot and every entry. On a paranoid slot it gives those entries a fresh key
    /// and the byte range (earlier tickets for them stop working).
    #[pyo3(signature = (offset=0, length=None, meta_first=0, meta_count=None))]
    fn ticket(
        &self,
        py: Python<'_>,
        offset: u64,
        length: Option<u64>,
        meta_first: u32,
        meta_count: Option<u32>,
    ) -> PyResult<PyTicket> {
        self.with(py, |s| {
            let ticket =
                if offset == 0 && length.is_none() && meta_first == 0 && meta_count.is_none() {
                    check(py.allow_threads(|| s.ticket_all()))?
                } else {
                    let end = match length {
                        None => s.len(),
                        Some(n) => offset.checked_add(n).ok_or_else(|| {
                            errors::invalid(format!("offset {offset} + length {n} overflows"))
                        })?,
                    };
                    let entries = s.meta_area().map_or(0, |m| m.count());
                    let meta_end = match meta_count {
                        None => entries.max(meta_first),
                        Some(n) => meta_first.checked_add(n).ok_or_else(|| {
                            errors::invalid(format!(
                                "meta_first {meta_first} + meta_count {n} overflows"
                            ))
                        })?,
                    };
                    check(py.allow_threads(|| s.ticket(offset..end, meta_first..meta_end)))?
                };
            Ok(PyTicket { ticket })
        })
    }

    /// Gives the slot a new key (and lifts a revocation): every earlier ticket stops
    /// working (their sends fail with `BadKeyError`).
    fn rekey(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |s| check(py.allow_threads(|| s.rekey())).map(drop))
    }

    /// Revokes every ticket to the slot until it is rekeyed.
    fn revoke(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |s| check(py.allow_threads(|| s.revoke())))
    }

    /// Write-inhibits the slot (or, with `False`, lifts the inhibition).
    #[pyo3(signature = (on=true))]
    fn inhibit(&self, py: Python<'_>, on: bool) -> PyResult<()> {
        self.with(py, |s| check(py.allow_threads(|| s.inhibit(on))))
    }

    /// Destroys the slot: its tickets stop working. Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let slot = crate::lock(py, &self.slot)?.take();
        match slot {
            // A closed node's connection may be gone: the slot went with it.
            Some(s) if self.life.check().is_ok() => check(py.allow_threads(|| s.destroy())),
            other => {
                py.allow_threads(|| drop(other));
                Ok(())
            }
        }
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
        match self.with(py, |s| Ok((s.id().0, s.len()))) {
            Ok((id, len)) => format!("<hamlyn.Slot {id} of {len} bytes>"),
            Err(_) => "<hamlyn.Slot (closed)>".to_owned(),
        }
    }
}
