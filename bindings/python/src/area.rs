//! `hamlyn.Area` (registered shared memory, a zero-copy buffer) and `hamlyn.MetaArea`
//! (128-byte metadata entries).

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

use hamlyn::{Area, MetaArea};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyMemoryView};

use crate::errors::{self, check};
use crate::Life;

/// Registered memory (a sealed memfd shared with the engine) that messages land in or
/// are sent from.
///
/// It is a writable buffer of its bytes, without a copy: `memoryview(area)` (or
/// `area.view()`), `numpy.frombuffer(area, dtype=...)`. The engine writes arriving
/// messages into it: read a message's bytes after its notification, and do not rewrite
/// bytes a pending send is reading. A view keeps the memory mapped until it is released,
/// even after `close()`.
#[pyclass(module = "hamlyn._hamlyn", name = "Area", frozen)]
pub struct PyArea {
    life: Arc<Life>,
    area: Mutex<Option<Area>>,
}

impl PyArea {
    pub(crate) fn new(life: Arc<Life>, area: Area) -> PyArea {
        PyArea {
            life,
            area: Mutex::new(Some(area)),
        }
    }

    /// The area (a cheap clone), or `ClosedError`.
    pub(crate) fn get(&self, py: Python<'_>) -> PyResult<Area> {
        self.life.check()?;
        crate::lock(py, &self.area)?
            .clone()
            .ok_or_else(|| errors::closed("the area is closed"))
    }
}

#[pymethods]
impl PyArea {
    /// Bytes in the area.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        usize::try_from(self.get(py)?.len())
            .map_err(|_| errors::invalid("the area is too large for len()".to_owned()))
    }

    /// The engine's id for the area.
    #[getter]
    fn id(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.get(py)?.id())
    }

    /// A writable `memoryview` of the area's bytes (no copy).
    fn view<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyMemoryView>> {
        PyMemoryView::from(slf.as_any())
    }

    /// `length` bytes at `offset`, copied into a new `bytes`.
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        length: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let area = self.get(py)?;
        PyBytes::new_with(py, length, |buf| check(area.read(offset, buf)))
    }

    /// Copies `data` (any bytes-like object) into the area at `offset`.
    fn write(&self, py: Python<'_>, offset: u64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let area = self.get(py)?;
        crate::ticket::with_bytes(data, |bytes| check(area.write(offset, bytes)))
    }

    /// Gives the handle back: the registration ends when no slot, pending send or view
    /// uses the area any more. Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let area = crate::lock(py, &self.area)?.take();
        py.allow_threads(|| drop(area));
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
        match self.get(py) {
            Ok(a) => format!("<hamlyn.Area {} of {} bytes>", a.id(), a.len()),
            Err(_) => "<hamlyn.Area (closed)>".to_owned(),
        }
    }

    /// The buffer protocol: a one-dimensional, writable buffer of unsigned bytes over the
    /// area's memory. The view holds a clone of the area (in `internal`), so the memory
    /// stays mapped until `__releasebuffer__`, whatever happens to this handle.
    ///
    /// # Safety
    ///
    /// Called by the interpreter with a `Py_buffer` to fill (PyO3's contract).
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(pyo3::exceptions::PyBufferError::new_err("view is NULL"));
        }
        let area = slf.get().get(slf.py())?;
        let len = isize::try_from(area.len())
            .map_err(|_| pyo3::exceptions::PyBufferError::new_err("area too large"))?;
        let ptr = area.as_ptr();
        let internal = Box::into_raw(Box::new(area));
        // SAFETY: `view` is non-NULL and points to a `Py_buffer` the interpreter gave us
        // to fill (the method's contract). `buf` is the area's mapping, which the clone in
        // `internal` keeps mapped until `__releasebuffer__` frees it; `shape` and
        // `strides` point into the view itself, which outlives its own use of them.
        unsafe {
            (*view).obj = slf.into_any().into_ptr();
            (*view).buf = ptr.cast::<c_void>();
            (*view).len = len;
            (*view).readonly = 0;
            (*view).itemsize = 1;
            (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
                c"B".as_ptr().cast_mut()
            } else {
                std::ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
                &raw mut (*view).len
            } else {
                std::ptr::null_mut()
            };
            (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
                &raw mut (*view).itemsize
            } else {
                std::ptr::null_mut()
            };
            (*view).suboffsets = std::ptr::null_mut();
            (*view).internal = internal.cast::<c_void>();
        }
        Ok(())
    }

    /// Releases a view: drops the area clone `__getbuffer__` left in it.
    ///
    /// # Safety
    ///
    /// `view` was filled by `__getbuffer__` above and is released once (the interpreter's
    /// contract).
    unsafe fn __releasebuffer__(&self, view: *mut ffi::Py_buffer) {
        if view.is_null() {
            return;
        }
        // SAFETY: the method's contract: `internal` is the `Box<Area>` made by
        // `__getbuffer__`, freed here once.
        unsafe {
            let internal = (*view).internal.cast::<Area>();
            if !internal.is_null() {
                drop(Box::from_raw(internal));
                (*view).internal = std::ptr::null_mut();
            }
        }
    }
}

/// An area of 128-byte metadata entries: every slot mode but fast records each message's
/// metadata in one.
#[pyclass(module = "hamlyn._hamlyn", name = "MetaArea", frozen)]
pub struct PyMetaArea {
    life: Arc<Life>,
    meta: Mutex<Option<MetaArea>>,
}

impl PyMetaArea {
    pub(crate) fn new(life: Arc<Life>, meta: MetaArea) -> PyMetaArea {
        PyMetaArea {
            life,
            meta: Mutex::new(Some(meta)),
        }
    }

    /// The metadata area (a cheap clone), or `ClosedError`.
    pub(crate) fn get(&self, py: Python<'_>) -> PyResult<MetaArea> {
        self.life.check()?;
        crate::lock(py, &self.meta)?
            .clone()
            .ok_or_else(|| errors::closed("the metadata area is closed"))
    }
}

#[pymethods]
impl PyMetaArea {
    /// Entries in the area.
    #[getter]
    fn count(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.get(py)?.count())
    }

    /// Entries in the area.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.get(py)?.count() as usize)
    }

    /// The user metadata the last message left in entry `index` (at most 60 bytes).
    fn metadata<'py>(&self, py: Python<'py>, index: u32) -> PyResult<Bound<'py, PyBytes>> {
        let md = check(self.get(py)?.metadata(index))?;
        Ok(PyBytes::new(py, &md))
    }

    /// Re-arms entry `index` of a paranoid one-shot slot: it takes one more message.
    fn arm(&self, py: Python<'_>, index: u32) -> PyResult<()> {
        check(self.get(py)?.arm(index))
    }

    /// Disarms entry `index`: it refuses messages until re-armed.
    fn disarm(&self, py: Python<'_>, index: u32) -> PyResult<()> {
        check(self.get(py)?.disarm(index))
    }

    /// Whether entry `index` is armed.
    fn is_armed(&self, py: Python<'_>, index: u32) -> PyResult<bool> {
        check(self.get(py)?.is_armed(index))
    }

    /// Gives the handle back. Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let meta = crate::lock(py, &self.meta)?.take();
        py.allow_threads(|| drop(meta));
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
        match self.get(py) {
            Ok(m) => format!("<hamlyn.MetaArea of {} entries>", m.count()),
            Err(_) => "<hamlyn.MetaArea (closed)>".to_owned(),
        }
    }
}
