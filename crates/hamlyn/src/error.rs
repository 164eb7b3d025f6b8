//! The library's errors: [`Error`] for everything but sending, [`SendError`] for
//! [`Terminus::send`](crate::Terminus::send), whose refusals the caller handles case by
//! case (back-pressure above all).
//!
//! Every error type a caller may need to match is re-exported at the crate root
//! ([`ControlErrorCode`], [`WireError`], [`SplitError`], [`SegmentError`], and the
//! shared-memory errors inside [`Error`]'s variants), and each converts into [`Error`]
//! with `From`, so `?` works in a function returning `Result<_, hamlyn::Error>`.

use hamlyn_core::SegmentError;
use hamlyn_shm::fdpass::FdPassError;
use hamlyn_shm::memory::LayoutError;
use hamlyn_shm::region::RegionError;
use hamlyn_shm::wake::WakeError;
use hamlyn_wire::control::ControlErrorCode;
use hamlyn_wire::{SplitError, WireError};

/// Why a library call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The engine's control socket could not be reached.
    #[error("cannot connect to the engine at {path}: {source}")]
    Connect {
        /// The socket path.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// Sending or receiving on the control socket failed.
    #[error("control socket: {0}")]
    Control(#[from] FdPassError),
    /// The engine did not answer a control request in time; the connection is now
    /// unusable (a late reply would be taken for the next request's).
    #[error("the engine did not answer within the control timeout")]
    ControlTimeout,
    /// The control connection failed earlier (or timed out) and is no longer used.
    #[error("the control connection to the engine is broken")]
    Disconnected,
    /// The engine is gone (its process died or it stopped): this node can do nothing
    /// more. Connect again (`Node::connect`) to a restarted engine.
    #[error("the engine is gone")]
    EngineGone,
    /// The engine refused a request.
    #[error("the engine refused the request ({code:?}, code {raw}): {message}")]
    Refused {
        /// The code, if this library knows it.
        code: Option<ControlErrorCode>,
        /// The code as sent.
        raw: u16,
        /// The engine's explanation.
        message: String,
    },
    /// The engine's reply did not decode.
    #[error("undecodable reply from the engine: {0}")]
    BadReply(WireError),
    /// The engine answered with something this request does not expect.
    #[error("engine protocol violation: {0}")]
    Protocol(&'static str),
    /// Creating, mapping or accessing shared memory failed.
    #[error("shared memory: {0}")]
    Region(#[from] RegionError),
    /// The port the engine sent does not have a valid layout.
    #[error("bad port layout: {0}")]
    Layout(#[from] LayoutError),
    /// Sleeping on or arming a wake word failed.
    #[error("wait failed: {0}")]
    Wake(#[from] WakeError),
    /// The embedded engine could not be started.
    #[error("cannot start the embedded engine: {0}")]
    Embedded(String),
    /// Every terminus of the port is in use.
    #[error("all {0} termini of the port are in use")]
    NoTerminus(u16),
    /// The notification queue index does not exist in this port.
    #[error("notification queue {index} does not exist (the port has {count})")]
    NoSuchQueue {
        /// The index asked for.
        index: u16,
        /// Queues in the port.
        count: u16,
    },
    /// The notification queue's handle was already taken ([`crate::Node::queue`] hands
    /// out each queue once: it has a single consumer).
    #[error("notification queue {0} is already taken")]
    QueueTaken(u16),
    /// A byte range lies outside an area, slot or ticket.
    #[error("bytes {start}..{end} are outside the {len}-byte {what}")]
    OutOfRange {
        /// What the range was checked against.
        what: &'static str,
        /// Start of the range.
        start: u64,
        /// End of the range (exclusive).
        end: u128,
        /// Length of what it was checked against.
        len: u64,
    },
    /// A metadata entry index or range lies outside the slot's entries.
    #[error("metadata entries {start}..{end} are outside the {count} entries")]
    MetaOutOfRange {
        /// First entry.
        start: u64,
        /// End (exclusive).
        end: u64,
        /// Entries available.
        count: u32,
    },
    /// An argument is not acceptable (the message says which and why).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The area, metadata area or terminus belongs to another [`crate::Node`].
    #[error("the object belongs to another node handle")]
    ForeignObject,
    /// The operation does not fit the slot's mode.
    #[error("not possible on a {0:?} slot")]
    WrongMode(hamlyn_core::SlotMode),
    /// A seed or ticket could not be encoded or parsed. (`?` on a [`WireError`] lands
    /// here: the wire types a caller decodes are seeds and tickets.)
    #[error("seed: {0}")]
    Seed(#[from] WireError),
    /// A ticket could not be split ([`hamlyn_wire::Ticket::split`]).
    #[error("cannot split the ticket: {0}")]
    Split(#[from] SplitError),
    /// A send, read or atomic was refused before it was queued ([`SendError`]; `?` on a
    /// [`crate::Terminus`] call lands here).
    #[error("send refused: {0}")]
    Send(#[from] SendError),
    /// A direct slot was asked for through a ticket naming another node: direct slots
    /// are reached only by clients of their own node's engine ([`crate::Node::open_direct`]).
    #[error("the ticket names node {ticket:?}, this engine is node {node:?}")]
    NotLocal {
        /// The node the ticket names.
        ticket: hamlyn_wire::NodeId,
        /// This node.
        node: hamlyn_wire::NodeId,
    },
    /// A system call failed.
    #[error("{op}: {source}")]
    Io {
        /// What the library was doing.
        op: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

impl From<SegmentError> for Error {
    /// A message that does not fit its ticket: [`Error::Send`] with [`SendError::Ticket`].
    fn from(e: SegmentError) -> Error {
        Error::Send(SendError::Ticket(e))
    }
}

/// Why a send was refused before it reached the engine. Nothing was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// The terminus's work queue is full: back-pressure. Retry once the engine has taken
    /// some requests (poll a [`crate::SendHandle`] or a notification queue meanwhile).
    #[error("terminus full")]
    Full,
    /// The engine is gone ([`Error::EngineGone`]): nothing can be sent through it.
    #[error("the engine is gone")]
    EngineGone,
    /// The message does not fit the ticket, its metadata entries, its packet budget or
    /// its mode (the checks the engine would make, done before queueing).
    #[error("{0}")]
    Ticket(#[from] SegmentError),
    /// The ticket does not grant writes.
    #[error("the ticket does not grant writes")]
    NotWritable,
    /// More inline bytes than a terminus entry carries (use a gather list).
    #[error("{len} inline bytes exceed the {max}-byte limit of direct I/O")]
    InlineTooLong {
        /// Bytes given.
        len: usize,
        /// The limit ([`crate::MAX_INLINE`]).
        max: usize,
    },
    /// More gather spans than a terminus entry names.
    #[error("{count} gather spans exceed the limit of {max}")]
    TooManySpans {
        /// Spans given.
        count: usize,
        /// The limit ([`crate::MAX_GATHER`]).
        max: usize,
    },
    /// A gather span lies outside its area.
    #[error("gather span {offset}+{len} is outside the {area_len}-byte area")]
    SpanOutOfArea {
        /// The span's offset.
        offset: u64,
        /// The span's length.
        len: u64,
        /// The area's length.
        area_len: u64,
    },
    /// A gather span names an area registered by another [`crate::Node`].
    #[error("a gather span names another node handle's area")]
    ForeignArea,
    /// A read or atomic does not fit the source ticket's range, or its answer does not
    /// fit the reply ticket's range.
    #[error("bytes {offset}..+{len} are outside the {which} ticket's range")]
    OutsideRange {
        /// Which ticket: "source" or "reply".
        which: &'static str,
        /// Offset asked for, within the ticket.
        offset: u64,
        /// Bytes asked for.
        len: u64,
    },
    /// The ticket does not grant this operation (reads or atomics).
    #[error("the ticket does not grant {0}")]
    NotGranted(&'static str),
    /// [`crate::MetaIndex::Auto`] found every metadata entry of the ticket it looks at
    /// still used by an unfinished message of this terminus that may be multi-packet:
    /// back-pressure, as [`SendError::Full`]. Retry when one finished, or name an entry.
    #[error("every metadata entry of the ticket has a message of this terminus in flight")]
    EntriesBusy,
    /// The terminus ring is corrupt (someone scribbled on the port); it cannot be used.
    #[error("the terminus ring is corrupt")]
    Corrupt,
    /// A direct send was refused for a reason the engine would have refused its packets
    /// for (a fast-mode message to a slot that is not fast, `BadMode`), or the mapped
    /// slot could not be written (`AreaGone`). Nothing was counted.
    #[error("refused: {0:?}")]
    Rejected(hamlyn_core::RejectReason),
}
