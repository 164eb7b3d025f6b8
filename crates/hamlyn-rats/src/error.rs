//! What can go wrong in the protocol layer.

use hamlyn::{Error, RejectReason, SendError, Status};

/// An error of the protocol layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RatsError {
    /// The library below refused or failed.
    #[error(transparent)]
    Hamlyn(#[from] Error),
    /// A send was refused before it was queued.
    #[error("send refused: {0}")]
    Send(#[from] SendError),
    /// No free block of message space (or metadata entries) is this large.
    #[error("no free block of {need} units")]
    NoSpace {
        /// Units asked for (rounded to the granule).
        need: u64,
    },
    /// A block given back was not handed out by this allocator, or was given back already.
    #[error("block at {0} was not allocated")]
    NotAllocated(u64),
    /// A seed starts a different protocol than the one asked for.
    #[error("the seed is for protocol {found}, not {expected}")]
    WrongProtocol {
        /// The protocol id the caller builds.
        expected: u16,
        /// The seed's protocol id.
        found: u16,
    },
    /// A seed of the right protocol but a version this library does not speak.
    #[error("protocol {protocol} version {found} is not supported (this library: {supported})")]
    WrongVersion {
        /// The protocol id.
        protocol: u16,
        /// The seed's version.
        found: u8,
        /// The version this library speaks.
        supported: u8,
    },
    /// A seed's protocol data or tickets are not what its protocol needs.
    #[error("malformed seed: {0}")]
    BadSeed(&'static str),
    /// Metadata or a notification from a peer broke the protocol (counted in
    /// [`crate::RatsStats::forged`]; the instance keeps working).
    #[error("peer broke the protocol: {0}")]
    Forged(&'static str),
    /// The receiver has no room for this message now (no credit): back-pressure.
    #[error("no credit at the receiver")]
    Full,
    /// A message is larger than the protocol allows.
    #[error("{len} bytes exceed the limit of {max}")]
    TooLong {
        /// Bytes given.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// Nothing arrived (or nothing was answered) within the timeout.
    #[error("timed out")]
    Timeout,
    /// The peer is gone (its node, engine or process), or refused for good.
    #[error("the peer is gone")]
    PeerGone,
    /// A send this operation depended on failed at the engine or the receiver.
    #[error("send failed: {0:?}")]
    SendFailed(Status),
    /// The receiver refused the message for this reason.
    #[error("refused by the receiver: {0:?}")]
    Refused(RejectReason),
    /// Notifications were lost to a full queue (the queue is sized so this cannot
    /// happen while every instance releases what it received; see [`crate::Manager`]).
    #[error("{0} notifications were lost to a full queue")]
    NotificationsLost(u64),
    /// The operation is not valid in the instance's state.
    #[error("{0}")]
    State(&'static str),
    /// An argument is out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The stream was closed by its sender: nothing more will come.
    #[error("end of stream")]
    EndOfStream,
}
