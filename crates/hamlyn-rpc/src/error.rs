//! What can go wrong in a call.

use crate::frame::Status;

/// A call, a connection or a server failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RpcError {
    /// The Hamlyn library failed.
    #[error(transparent)]
    Hamlyn(#[from] hamlyn::Error),
    /// A send was refused before it was queued.
    #[error(transparent)]
    Send(#[from] hamlyn::SendError),
    /// No service of that name is published (or it published something else).
    #[error("no RPC service {0:?}")]
    NoService(String),
    /// The service has no procedure of that name.
    #[error("the service has no procedure {0:?}")]
    NoProcedure(String),
    /// Every call frame is busy (as many calls outstanding as frames).
    #[error("every call frame is busy")]
    Busy,
    /// The arguments do not fit a frame, or the result does not fit a reply.
    #[error("{what} of {len} bytes is more than {max}")]
    TooLong {
        /// Arguments or result.
        what: &'static str,
        /// Their length.
        len: usize,
        /// The most that fits.
        max: usize,
    },
    /// The server refused the call (it says why).
    #[error("the server refused the call: {0:?}")]
    Refused(Status),
    /// The procedure failed (its message).
    #[error("the procedure failed: {0}")]
    Procedure(String),
    /// No reply within the call's timeout.
    #[error("no reply within {0:?}")]
    Timeout(std::time::Duration),
    /// The server is gone: the call frame can no longer be written.
    #[error("the server is gone ({0:?})")]
    ServerGone(hamlyn::Status),
    /// A reply or a frame did not decode.
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// Typed arguments or results have the wrong size.
    #[error("typed {what}: {got} bytes, expected {want}")]
    WrongSize {
        /// Arguments or result.
        what: &'static str,
        /// What came.
        got: usize,
        /// What the type needs.
        want: usize,
    },
}
