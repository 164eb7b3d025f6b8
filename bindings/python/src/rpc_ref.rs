//! RPC call by reference from Python (seed 004 §3.1): the client names a segment of its
//! memory in the call (`RpcClient.segment(area)` → `RpcSegment`,
//! `RpcClient.call_by_ref`), and a procedure that takes a second argument gets the
//! call's `RpcContext`, whose `read` and `write` are remote reads and writes of that
//! segment while the procedure runs.

use std::ffi::c_void;
use std::sync::Mutex;

use hamlyn_rpc::{Ctx, Segment};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors;
use crate::ticket::with_bytes;
use crate::unblocked;

/// Whether procedure `f` takes the call's context as a second argument (its signature
/// binds two positional arguments).
pub(crate) fn takes_context(py: Python<'_>, f: &Bound<'_, PyAny>) -> bool {
    let Ok(inspect) = py.import("inspect") else {
        return false;
    };
    let Ok(sig) = inspect.call_method1("signature", (f,)) else {
        return false; // no signature to look at (some builtins): arguments only
    };
    sig.call_method1("bind", (py.None(), py.None())).is_ok()
}

/// The `Ctx` a server lends a procedure for one call, as an address: null once the call
/// is over (and while one of the context's calls uses it).
struct Loan(*mut c_void);

// SAFETY: the address is only ever dereferenced on the thread that lent it, inside the
// call that lent it (`PyRpcContext::with_ctx` checks the thread; `run` nulls it when the
// call returns); on any other thread it is only a value.
unsafe impl Send for Loan {}

/// The context of a running call, lent to a procedure that takes two arguments
/// (`def proc(args, ctx)`): `segment_len` (None unless the call is by reference),
/// `read(offset, length)` and `write(offset, data)` on the caller's segment (remote
/// reads and writes, without the GIL). Valid while the procedure runs, on the server's
/// thread: `StateError` after, `WrongThreadError` elsewhere. The call's result reaches
/// the caller only once every write has landed.
#[pyclass(module = "hamlyn._hamlyn", name = "RpcContext", frozen)]
pub struct PyRpcContext {
    loan: Mutex<Loan>,
    /// The serving thread, the only one that may use the loan.
    owner: std::thread::ThreadId,
    segment_len: Option<u64>,
}

impl PyRpcContext {
    /// Calls the procedure `f` with `args` and a context lending `ctx` for the call.
    pub(crate) fn run(
        py: Python<'_>,
        f: &Py<PyAny>,
        args: Bound<'_, PyBytes>,
        ctx: &mut Ctx<'_>,
    ) -> PyResult<PyObject> {
        let segment_len = ctx.segment_len();
        let lent = Bound::new(
            py,
            PyRpcContext {
                loan: Mutex::new(Loan(std::ptr::from_mut(ctx).cast::<c_void>())),
                owner: std::thread::current().id(),
                segment_len,
            },
        )?;
        let out = f.call1(py, (args, lent.clone()));
        // The loan ends with the call, whatever the procedure kept of the object.
        crate::lock(py, &lent.get().loan)?.0 = std::ptr::null_mut();
        out
    }

    /// Runs `f` on the lent `Ctx` without the GIL.
    fn with_ctx<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Ctx<'static>) -> Result<T, String>,
    ) -> PyResult<T> {
        if std::thread::current().id() != self.owner {
            return Err(errors::wrong_thread());
        }
        if self.segment_len.is_none() {
            return Err(errors::state(
                "the call named no segment (call it with RpcClient.call_by_ref)".to_owned(),
            ));
        }
        let p = std::mem::replace(&mut crate::lock(py, &self.loan)?.0, std::ptr::null_mut());
        if p.is_null() {
            return Err(errors::state(
                "the call is over: a context is valid while its procedure runs".to_owned(),
            ));
        }
        // SAFETY: `p` is the `&mut Ctx` the server lent `run` for the procedure's call,
        // which has not returned (`run` nulls the address when it does), on this thread
        // (checked above: the call is running further down this thread's stack). The
        // loan holds null while the reference lives, so no second one is made from it.
        // The `'static` is never relied on: the reference does not outlive this call.
        let ctx = unsafe { &mut *p.cast::<Ctx<'static>>() };
        let r = unblocked(py, ctx, f);
        crate::lock(py, &self.loan)?.0 = p;
        r.map_err(errors::segment)
    }
}

#[pymethods]
impl PyRpcContext {
    /// Bytes of the caller's segment, or None if the call named none.
    #[getter]
    fn segment_len(&self) -> Option<u64> {
        self.segment_len
    }

    /// `length` bytes at `offset` of the caller's segment (remote reads).
    /// `RejectedError` outside the segment (the engine checks the caller's ticket).
    fn read<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        length: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let got = self.with_ctx(py, |c| c.read(offset, length))?;
        Ok(PyBytes::new(py, &got))
    }

    /// Writes `data` (a bytes-like object) at `offset` of the caller's segment (remote
    /// writes). `RejectedError` outside the segment.
    fn write(&self, py: Python<'_>, offset: u64, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let bytes = with_bytes(data, |b| Ok(b.to_vec()))?;
        self.with_ctx(py, |c| c.write(offset, &bytes))
    }
}

/// A part of the client's memory that calls by reference name
/// (`RpcClient.segment(area)`: all of `area`, which must be of the client's node): the
/// server may read and write it while such a call runs. Keep it while calls use it;
/// `close()` withdraws it.
#[pyclass(module = "hamlyn._hamlyn", name = "RpcSegment", frozen)]
pub struct PyRpcSegment {
    pub(crate) segment: Mutex<Option<Segment>>,
    pub(crate) length: u64,
}

#[pymethods]
impl PyRpcSegment {
    /// Bytes of the segment.
    #[getter]
    fn length(&self) -> u64 {
        self.length
    }

    /// Withdraws the segment (calls naming it fail after). Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        drop(crate::lock(py, &self.segment)?.take());
        Ok(())
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(crate::lock(py, &self.segment)?.is_none())
    }

    fn __repr__(&self) -> String {
        format!("<hamlyn.RpcSegment {} bytes>", self.length)
    }
}
