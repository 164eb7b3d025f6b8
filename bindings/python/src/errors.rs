//! The library's errors as Python exceptions: each [`hamlyn::Error`] and
//! [`hamlyn::SendError`] becomes an instance of a class of `hamlyn._errors` (all
//! subclasses of `HamlynError`), with the library's message. The classes are defined in
//! Python (so they can also derive from `ValueError`, `TimeoutError`, ...), looked up once.

use hamlyn::{ControlErrorCode, Error, RejectReason, SendError};
use hamlyn_am::AmError;
use hamlyn_job::JobError;
use hamlyn_rats::RatsError;
use hamlyn_rpc::RpcError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyModule;

/// `hamlyn._errors`, imported once.
static ERRORS: GILOnceCell<Py<PyModule>> = GILOnceCell::new();

/// An exception of class `name` of `hamlyn._errors` with `message`; `RuntimeError` if the
/// module cannot be imported (a broken installation).
fn raise(name: &'static str, message: String) -> PyErr {
    Python::with_gil(|py| {
        let module = ERRORS.get_or_try_init(py, || {
            PyModule::import(py, "hamlyn._errors").map(|m| m.unbind())
        });
        match module.and_then(|m| m.bind(py).getattr(name)) {
            Ok(class) => PyErr::from_type(
                class
                    .downcast_into()
                    .unwrap_or_else(|_| py.get_type::<PyRuntimeError>()),
                message,
            ),
            Err(e) => e,
        }
    })
}

/// `ClosedError`: a handle used after it or its node was closed.
pub(crate) fn closed(message: &str) -> PyErr {
    raise("ClosedError", message.to_owned())
}

/// `StateError`: a call out of turn.
pub(crate) fn state(message: String) -> PyErr {
    raise("StateError", message)
}

/// A remote read or write of an RPC caller's segment that failed (outside it, or the
/// caller is gone): `RejectedError`.
pub(crate) fn segment(message: String) -> PyErr {
    raise("RejectedError", message)
}

/// `InvalidArgumentError` (a `ValueError`).
pub(crate) fn invalid(message: String) -> PyErr {
    raise("InvalidArgumentError", message)
}

/// `HamlynError` for a lock a panic poisoned (a bug in the library).
pub(crate) fn poisoned() -> PyErr {
    raise(
        "HamlynError",
        "the handle is unusable: a panic happened while it was in use".to_owned(),
    )
}

/// `WrongThreadError`: an object of the protocol layers used from a thread other than
/// the one that made it.
pub(crate) fn wrong_thread() -> PyErr {
    raise(
        "WrongThreadError",
        "this object belongs to the thread that made it (the protocol layers' objects are \
         not shared between threads): use it there, or make one on this thread"
            .to_owned(),
    )
}

/// `BadSeedError` (a `ValueError`): seed text that does not decode.
pub(crate) fn bad_seed(message: String) -> PyErr {
    raise("BadSeedError", message)
}

/// `TimeoutError` (also a builtin `TimeoutError`).
pub(crate) fn timed_out(message: String) -> PyErr {
    raise("TimeoutError", message)
}

/// `RejectedError` (or `BadKeyError` for a wrong key) for a request the engine refused.
pub(crate) fn rejected(reason: Option<RejectReason>, code: u16) -> PyErr {
    let (name, why) = match reason {
        Some(RejectReason::BadKey) | Some(RejectReason::ParanoidKey) => (
            "BadKeyError",
            "the key does not match the slot's (a wrong or stale ticket)",
        ),
        Some(RejectReason::Revoked) => ("RejectedError", "the slot's tickets were revoked"),
        Some(_) => ("RejectedError", "the engine refused it"),
        None => ("RejectedError", "a status code this library does not know"),
    };
    let name_of = reason.map_or("unknown", RejectReason::name);
    raise(
        name,
        format!("the request was refused: {name_of} (code {code}): {why}"),
    )
}

/// The exception class for a library error.
fn class_of(e: &Error) -> &'static str {
    match e {
        Error::Connect { .. } | Error::Embedded(_) => "ConnectError",
        Error::EngineGone => "EngineGoneError",
        Error::Control(_)
        | Error::ControlTimeout
        | Error::Disconnected
        | Error::BadReply(_)
        | Error::Protocol(_) => "ControlError",
        Error::Refused { code, .. } => match code {
            Some(ControlErrorCode::NotFound) => "NotFoundError",
            Some(ControlErrorCode::NotOwner) => "NotOwnerError",
            Some(ControlErrorCode::Unreachable) => "UnreachableError",
            Some(ControlErrorCode::BadKey) => "BadKeyError",
            Some(ControlErrorCode::InvalidArgument) => "InvalidArgumentError",
            _ => "RefusedError",
        },
        Error::Region(_) | Error::Layout(_) | Error::Wake(_) | Error::Io { .. } => "ResourceError",
        Error::NoTerminus(_) => "NoTerminusError",
        Error::NoSuchQueue { .. } => "NoSuchQueueError",
        Error::QueueTaken(_) => "QueueTakenError",
        Error::OutOfRange { .. } | Error::MetaOutOfRange { .. } => "OutOfRangeError",
        Error::InvalidArgument(_) => "InvalidArgumentError",
        Error::ForeignObject => "ForeignObjectError",
        Error::WrongMode(_) => "WrongModeError",
        Error::Seed(_) => "BadSeedError",
        Error::Split(_) => "SplitError",
        Error::Send(e) => send_class_of(e),
        Error::NotLocal { .. } => "NotLocalError",
        _ => "HamlynError",
    }
}

/// The exception class for a refused send.
fn send_class_of(e: &SendError) -> &'static str {
    match e {
        SendError::Full => "FullError",
        SendError::EntriesBusy => "EntriesBusyError",
        SendError::EngineGone => "EngineGoneError",
        SendError::Ticket(_) => "BadTicketError",
        SendError::NotWritable | SendError::NotGranted(_) => "NotGrantedError",
        SendError::InlineTooLong { .. } => "InlineTooLongError",
        SendError::TooManySpans { .. } => "InvalidArgumentError",
        SendError::SpanOutOfArea { .. } => "OutOfRangeError",
        SendError::ForeignArea => "ForeignObjectError",
        SendError::OutsideRange { .. } => "OutsideTicketError",
        SendError::Corrupt => "ControlError",
        _ => "RejectedError",
    }
}

/// The exception class for an error of the Rats protocols.
fn rats_class_of(e: &RatsError) -> &'static str {
    match e {
        RatsError::Hamlyn(e) => class_of(e),
        RatsError::Send(e) => send_class_of(e),
        RatsError::NoSpace { .. } => "NoSpaceError",
        RatsError::NotAllocated(_) | RatsError::InvalidArgument(_) => "InvalidArgumentError",
        RatsError::WrongProtocol { .. }
        | RatsError::WrongVersion { .. }
        | RatsError::BadSeed(_) => "BadSeedError",
        RatsError::Forged(_) => "ProtocolError",
        RatsError::Full => "FullError",
        RatsError::TooLong { .. } => "TooLongError",
        RatsError::Timeout => "TimeoutError",
        RatsError::PeerGone => "PeerGoneError",
        RatsError::SendFailed(_) | RatsError::Refused(_) => "RejectedError",
        RatsError::NotificationsLost(_) => "NotificationsLostError",
        RatsError::State(_) => "StateError",
        RatsError::EndOfStream => "EndOfStreamError",
        _ => "HamlynError",
    }
}

/// The exception class for an active-message error.
fn am_class_of(e: &AmError) -> &'static str {
    match e {
        AmError::Hamlyn(e) => class_of(e),
        AmError::Rats(e) => rats_class_of(e),
        AmError::Full => "FullError",
        AmError::Collision { .. } => "CollisionError",
        AmError::UnknownName(_) | AmError::UnknownId(_) => "UnknownHandlerError",
        AmError::Refused { .. } => "HandlerRefusedError",
        AmError::BadName(_) => "InvalidArgumentError",
        AmError::ReplyTwice => "ReplyTwiceError",
        AmError::Malformed(_) => "ProtocolError",
        AmError::TooLong { .. } => "TooLongError",
        AmError::Timeout => "TimeoutError",
        AmError::NoCall(_) => "NoCallError",
        AmError::NoChannel(_) => "NoChannelError",
        AmError::PeerGone(_) => "PeerGoneError",
        AmError::SendFailed(_) => "RejectedError",
        _ => "HamlynError",
    }
}

/// An error of the Rats protocols as a Python exception.
pub(crate) fn rats(e: RatsError) -> PyErr {
    raise(rats_class_of(&e), e.to_string())
}

/// `Ok` or the Rats error as a Python exception.
pub(crate) fn rats_check<T>(r: Result<T, RatsError>) -> PyResult<T> {
    r.map_err(rats)
}

/// The exception class for an RPC error.
fn rpc_class_of(e: &RpcError) -> &'static str {
    match e {
        RpcError::Hamlyn(e) => class_of(e),
        RpcError::Send(e) => send_class_of(e),
        RpcError::NoService(_) => "NoServiceError",
        RpcError::NoProcedure(_) => "NoProcedureError",
        RpcError::Busy => "FullError",
        RpcError::TooLong { .. } => "TooLongError",
        RpcError::Refused(_) => "CallRefusedError",
        RpcError::Procedure(_) => "ProcedureError",
        RpcError::Timeout(_) => "TimeoutError",
        RpcError::ServerGone(_) => "PeerGoneError",
        RpcError::Malformed(_) => "ProtocolError",
        RpcError::WrongSize { .. } => "InvalidArgumentError",
        _ => "HamlynError",
    }
}

/// `Ok` or the RPC error as a Python exception.
pub(crate) fn rpc_check<T>(r: Result<T, RpcError>) -> PyResult<T> {
    r.map_err(|e| raise(rpc_class_of(&e), e.to_string()))
}

/// The exception class for a job error.
fn job_class_of(e: &JobError) -> &'static str {
    match e {
        JobError::Environment(_) => "InvalidArgumentError",
        JobError::Hamlyn(e) => class_of(e),
        JobError::Send(e) => send_class_of(e),
        JobError::Failed { .. } => "RejectedError",
        JobError::Timeout { .. } => "TimeoutError",
        JobError::BadSeed { .. } => "BadSeedError",
        _ => "HamlynError",
    }
}

/// `Ok` or the job error as a Python exception.
pub(crate) fn job_check<T>(r: Result<T, JobError>) -> PyResult<T> {
    r.map_err(|e| raise(job_class_of(&e), e.to_string()))
}

/// An active-message error as a Python exception.
pub(crate) fn am(e: AmError) -> PyErr {
    raise(am_class_of(&e), e.to_string())
}

/// `Ok` or the active-message error as a Python exception.
pub(crate) fn am_check<T>(r: Result<T, AmError>) -> PyResult<T> {
    r.map_err(am)
}

/// A library error as a Python exception: `?` on a library call in a method.
pub(crate) struct HamlynErr(PyErr);

impl From<HamlynErr> for PyErr {
    fn from(e: HamlynErr) -> PyErr {
        e.0
    }
}

impl From<Error> for HamlynErr {
    fn from(e: Error) -> HamlynErr {
        HamlynErr(raise(class_of(&e), e.to_string()))
    }
}

impl From<SendError> for HamlynErr {
    fn from(e: SendError) -> HamlynErr {
        let message = match e {
            SendError::Full => {
                "terminus full: nothing was queued; retry once earlier requests are done".to_owned()
            }
            SendError::EntriesBusy => format!(
                "{e}: back-pressure, nothing was queued; retry once one is done, or name an entry"
            ),
            e => e.to_string(),
        };
        HamlynErr(raise(send_class_of(&e), message))
    }
}

impl From<PyErr> for HamlynErr {
    fn from(e: PyErr) -> HamlynErr {
        HamlynErr(e)
    }
}

/// `Ok` or the library error as a Python exception.
pub(crate) fn check<T, E: Into<HamlynErr>>(r: Result<T, E>) -> PyResult<T> {
    r.map_err(|e| e.into().0)
}
