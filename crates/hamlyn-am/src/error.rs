//! What can go wrong with active messages.

use crate::header::{HeaderError, Refusal};

/// An active-message error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AmError {
    /// The library below refused or failed.
    #[error(transparent)]
    Hamlyn(#[from] hamlyn::Error),
    /// The protocol layer below (credits, datagrams) refused or failed.
    #[error(transparent)]
    Rats(#[from] hamlyn_rats::RatsError),
    /// The receiver has no room for this message now (no credit left on the link):
    /// back-pressure; call [`crate::AmEndpoint::poll`] and send again.
    #[error("no credit at the receiver")]
    Full,
    /// The same handler name is registered in the cluster with another argument layout.
    #[error("handler {name:?} has argument fingerprint {cluster:#018x} in the cluster, not {ours:#018x}")]
    Collision {
        /// The handler's name.
        name: String,
        /// Our fingerprint.
        ours: u64,
        /// The cluster's.
        cluster: u64,
    },
    /// No live handler of this name in the local copy of the cluster's table (synch or
    /// refresh first, or nobody registered it).
    #[error("no handler named {0:?} in the cluster's table")]
    UnknownName(String),
    /// No live handler with this id in the local copy of the cluster's table.
    #[error("no live handler with id {0} in the cluster's table")]
    UnknownId(u32),
    /// The receiver refused the message for `handler`, or the handler failed.
    #[error("handler {handler:?} (id {id}) at the receiver: {why:?}")]
    Refused {
        /// The handler's name (as this process's table knows it).
        handler: String,
        /// Its id.
        id: u32,
        /// Why.
        why: Refusal,
    },
    /// A handler name is empty or too long, or registered twice locally.
    #[error("bad handler name {0:?}")]
    BadName(String),
    /// A handler replied twice through one token.
    #[error("a reply token was used twice")]
    ReplyTwice,
    /// A peer's message did not parse (counted; no handler ran).
    #[error("malformed message: {0}")]
    Malformed(#[from] HeaderError),
    /// A payload is too long (or too short) for its kind.
    #[error("{len} bytes do not fit: at most {max}")]
    TooLong {
        /// Bytes given.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The peer endpoint did not answer (link set-up, a reply) in time.
    #[error("timed out")]
    Timeout,
    /// The call is not outstanding (finished already, or never started here).
    #[error("call {0} is not outstanding")]
    NoCall(u64),
    /// No logical channel with this number is open here ([`crate::AmEndpoint::open_channel`]).
    #[error("logical channel {0} is not open")]
    NoChannel(u16),
    /// The peer endpoint is gone (its connection closed) while a call to it waited.
    #[error("the endpoint at node {} client {} is gone", .0.node.0, .0.client)]
    PeerGone(crate::Addr),
    /// A send failed at the engine or the receiving engine (e.g. the peer is gone).
    #[error("send failed: {0:?}")]
    SendFailed(hamlyn::Status),
}
