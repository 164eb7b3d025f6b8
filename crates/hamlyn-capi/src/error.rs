//! Result codes: what every fallible function returns, and how the library's errors map
//! onto them.

use std::ffi::c_char;

use hamlyn::{ControlErrorCode, Error, SendError};

/// What a call did. `HAMLYN_RESULT_OK` (0) is success; every other value names why the
/// call failed (or, for `HAMLYN_RESULT_EMPTY` and `HAMLYN_RESULT_TIMEOUT`, that there was
/// nothing to take). New codes may be added in a minor version: treat unknown codes as
/// errors and name them with `hamlyn_result_name`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum hamlyn_result {
    /// Success: the outputs were written.
    Ok = 0,
    /// A required pointer argument was NULL.
    NullArgument = 1,
    /// An argument is out of range: an unknown enumeration value, a bad flag, text that
    /// is not UTF-8, a size the library refuses.
    InvalidArgument = 2,
    /// An output buffer is too small; the length needed was stored where the call says.
    BufferTooSmall = 3,
    /// The library panicked (a bug): the call did nothing reliable. A handle whose lock a
    /// panic poisoned returns this from then on.
    Panic = 4,
    /// The node this handle was made from was freed (`hamlyn_node_free`).
    Closed = 5,
    /// Nothing to take: a poll found no notification.
    Empty = 6,
    /// A wait ended at its timeout with nothing to take.
    Timeout = 7,
    /// Seed text that does not decode (bad characters, checksum, version, cut short).
    BadSeed = 8,
    /// A ticket cannot be split that way (no parts, share too small, sizes).
    Split = 9,
    /// The engine cannot be reached at the socket path.
    Connect = 10,
    /// The engine is gone (it stopped or died).
    EngineGone = 11,
    /// The control connection broke, timed out, or the engine broke the protocol.
    Control = 12,
    /// The engine refused the request (a control error code not listed below).
    Refused = 13,
    /// The engine knows no such object or name.
    NotFound = 14,
    /// The name (or object) belongs to another client.
    NotOwner = 15,
    /// A node the request needed cannot be reached.
    Unreachable = 16,
    /// The engine refused a key (a stale or wrong ticket).
    BadKey = 17,
    /// Every terminus of the node is in use.
    NoTerminus = 18,
    /// No notification queue with that index.
    NoSuchQueue = 19,
    /// The queue already has a consumer.
    QueueTaken = 20,
    /// A byte or metadata range falls outside its area, slot or ticket.
    OutOfRange = 21,
    /// The slot's mode does not allow that.
    WrongMode = 22,
    /// An object of another node was passed (an area of another node, say).
    ForeignObject = 23,
    /// The ticket names another node (direct slots are local).
    NotLocal = 24,
    /// A system resource failed: shared memory, a descriptor, a wake-up.
    System = 25,
    /// The terminus's work queue is full, or every metadata entry of the ticket is held
    /// by a long message of this terminus still in flight: back-pressure, nothing was
    /// queued; retry after earlier sends complete.
    Full = 26,
    /// The ticket does not allow this send (fast-mode shape, packet budget, metadata).
    BadTicket = 27,
    /// The ticket does not grant what the operation needs (writes, reads, atomics).
    NotGranted = 28,
    /// Inline data longer than `HAMLYN_MAX_INLINE`.
    InlineTooLong = 29,
    /// The send falls outside the ticket's range.
    OutsideTicket = 30,
    /// The request was refused before or while being sent (see the send's status).
    Rejected = 31,
}

/// Every code, for `hamlyn_result_name` and the tests.
const ALL: [(hamlyn_result, &std::ffi::CStr); 32] = [
    (hamlyn_result::Ok, c"HAMLYN_RESULT_OK"),
    (hamlyn_result::NullArgument, c"HAMLYN_RESULT_NULL_ARGUMENT"),
    (
        hamlyn_result::InvalidArgument,
        c"HAMLYN_RESULT_INVALID_ARGUMENT",
    ),
    (
        hamlyn_result::BufferTooSmall,
        c"HAMLYN_RESULT_BUFFER_TOO_SMALL",
    ),
    (hamlyn_result::Panic, c"HAMLYN_RESULT_PANIC"),
    (hamlyn_result::Closed, c"HAMLYN_RESULT_CLOSED"),
    (hamlyn_result::Empty, c"HAMLYN_RESULT_EMPTY"),
    (hamlyn_result::Timeout, c"HAMLYN_RESULT_TIMEOUT"),
    (hamlyn_result::BadSeed, c"HAMLYN_RESULT_BAD_SEED"),
    (hamlyn_result::Split, c"HAMLYN_RESULT_SPLIT"),
    (hamlyn_result::Connect, c"HAMLYN_RESULT_CONNECT"),
    (hamlyn_result::EngineGone, c"HAMLYN_RESULT_ENGINE_GONE"),
    (hamlyn_result::Control, c"HAMLYN_RESULT_CONTROL"),
    (hamlyn_result::Refused, c"HAMLYN_RESULT_REFUSED"),
    (hamlyn_result::NotFound, c"HAMLYN_RESULT_NOT_FOUND"),
    (hamlyn_result::NotOwner, c"HAMLYN_RESULT_NOT_OWNER"),
    (hamlyn_result::Unreachable, c"HAMLYN_RESULT_UNREACHABLE"),
    (hamlyn_result::BadKey, c"HAMLYN_RESULT_BAD_KEY"),
    (hamlyn_result::NoTerminus, c"HAMLYN_RESULT_NO_TERMINUS"),
    (hamlyn_result::NoSuchQueue, c"HAMLYN_RESULT_NO_SUCH_QUEUE"),
    (hamlyn_result::QueueTaken, c"HAMLYN_RESULT_QUEUE_TAKEN"),
    (hamlyn_result::OutOfRange, c"HAMLYN_RESULT_OUT_OF_RANGE"),
    (hamlyn_result::WrongMode, c"HAMLYN_RESULT_WRONG_MODE"),
    (
        hamlyn_result::ForeignObject,
        c"HAMLYN_RESULT_FOREIGN_OBJECT",
    ),
    (hamlyn_result::NotLocal, c"HAMLYN_RESULT_NOT_LOCAL"),
    (hamlyn_result::System, c"HAMLYN_RESULT_SYSTEM"),
    (hamlyn_result::Full, c"HAMLYN_RESULT_FULL"),
    (hamlyn_result::BadTicket, c"HAMLYN_RESULT_BAD_TICKET"),
    (hamlyn_result::NotGranted, c"HAMLYN_RESULT_NOT_GRANTED"),
    (
        hamlyn_result::InlineTooLong,
        c"HAMLYN_RESULT_INLINE_TOO_LONG",
    ),
    (
        hamlyn_result::OutsideTicket,
        c"HAMLYN_RESULT_OUTSIDE_TICKET",
    ),
    (hamlyn_result::Rejected, c"HAMLYN_RESULT_REJECTED"),
];

/// The name of result code `code` ("HAMLYN_RESULT_FULL"), or "HAMLYN_RESULT_UNKNOWN"
/// for a value this library does not define: a static string, never freed, never NULL.
#[no_mangle]
pub extern "C" fn hamlyn_result_name(code: u32) -> *const c_char {
    // A panic boundary like every entry point's, though a lookup in a constant table
    // cannot panic.
    std::panic::catch_unwind(|| {
        ALL.iter()
            .find(|(r, _)| *r as u32 == code)
            .map_or(c"HAMLYN_RESULT_UNKNOWN", |(_, name)| name)
    })
    .unwrap_or(c"HAMLYN_RESULT_UNKNOWN")
    .as_ptr()
}

impl From<Error> for hamlyn_result {
    fn from(e: Error) -> hamlyn_result {
        use hamlyn_result as R;
        match e {
            Error::Connect { .. } => R::Connect,
            Error::EngineGone => R::EngineGone,
            Error::Control(_)
            | Error::ControlTimeout
            | Error::Disconnected
            | Error::BadReply(_)
            | Error::Protocol(_) => R::Control,
            Error::Refused { code, .. } => match code {
                Some(ControlErrorCode::NotFound) => R::NotFound,
                Some(ControlErrorCode::NotOwner) => R::NotOwner,
                Some(ControlErrorCode::Unreachable) => R::Unreachable,
                Some(ControlErrorCode::BadKey) => R::BadKey,
                Some(ControlErrorCode::InvalidArgument) => R::InvalidArgument,
                _ => R::Refused,
            },
            Error::Region(_) | Error::Layout(_) | Error::Wake(_) | Error::Io { .. } => R::System,
            Error::Embedded(_) => R::Connect,
            Error::NoTerminus(_) => R::NoTerminus,
            Error::NoSuchQueue { .. } => R::NoSuchQueue,
            Error::QueueTaken(_) => R::QueueTaken,
            Error::OutOfRange { .. } | Error::MetaOutOfRange { .. } => R::OutOfRange,
            Error::InvalidArgument(_) => R::InvalidArgument,
            Error::ForeignObject => R::ForeignObject,
            Error::WrongMode(_) => R::WrongMode,
            Error::Seed(_) => R::BadSeed,
            Error::Split(_) => R::Split,
            Error::Send(e) => e.into(),
            Error::NotLocal { .. } => R::NotLocal,
            _ => R::Refused,
        }
    }
}

impl From<SendError> for hamlyn_result {
    fn from(e: SendError) -> hamlyn_result {
        use hamlyn_result as R;
        match e {
            SendError::Full | SendError::EntriesBusy => R::Full,
            SendError::EngineGone => R::EngineGone,
            SendError::Ticket(_) => R::BadTicket,
            SendError::NotWritable | SendError::NotGranted(_) => R::NotGranted,
            SendError::InlineTooLong { .. } => R::InlineTooLong,
            SendError::TooManySpans { .. } => R::InvalidArgument,
            SendError::SpanOutOfArea { .. } => R::OutOfRange,
            SendError::ForeignArea => R::ForeignObject,
            SendError::OutsideRange { .. } => R::OutsideTicket,
            SendError::Corrupt => R::Control,
            _ => R::Rejected,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_own_name_and_unknown_codes_are_named_too() {
        for (i, (code, name)) in ALL.iter().enumerate() {
            assert_eq!(*code as u32, i as u32, "codes are dense, in order");
            // SAFETY: hamlyn_result_name returns a static NUL-terminated string.
            let got = unsafe { std::ffi::CStr::from_ptr(hamlyn_result_name(i as u32)) };
            assert_eq!(got, *name);
        }
        // SAFETY: as above.
        let unknown = unsafe { std::ffi::CStr::from_ptr(hamlyn_result_name(9999)) };
        assert_eq!(unknown, c"HAMLYN_RESULT_UNKNOWN");
    }
}
