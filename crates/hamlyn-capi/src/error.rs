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
    /// A call on an active-message endpoint (or a region or target made from it) from
    /// inside one of that endpoint's own handlers: the endpoint is busy running it.
    /// Answer through the context (`hamlyn_am_ctx_reply`) and act after the poll.
    InHandler = 32,
    /// A handler name is registered in the cluster with another argument fingerprint.
    Collision = 33,
    /// No live handler of that name or id in the local copy of the cluster's table
    /// (synch or refresh first, or nobody registered it).
    UnknownHandler = 34,
    /// The receiver refused the message: no such handler there (it was unregistered), or
    /// an old epoch of it.
    HandlerGone = 35,
    /// The handler (or remote procedure) ran and failed, or gave no reply that was
    /// asked for.
    HandlerFailed = 36,
    /// A reply token was used twice: the second reply was not sent.
    ReplyTwice = 37,
    /// A payload, argument block or result is longer than the layer allows.
    TooLong = 38,
    /// No such call outstanding (finished already, or never started here).
    NoCall = 39,
    /// No logical channel with that number is open on the endpoint.
    NoChannel = 40,
    /// The peer (endpoint, server, process) is gone.
    PeerGone = 41,
    /// A peer's message, reply or call frame did not parse, or broke the protocol.
    Malformed = 42,
    /// The operation is not valid in the object's state (a stream closed, a datagram
    /// released twice, a request answered already).
    State = 43,
    /// The stream was closed by its sender: nothing more will come.
    EndOfStream = 44,
    /// A send with the default metadata entry (no entry named)
    /// found every entry of the ticket it may take still used by an unfinished
    /// multi-packet message of this terminus: nothing was queued. Room comes when one of
    /// those sends finishes (`hamlyn_send_wait`, `hamlyn_terminus_wait_idle`), not when
    /// the work queue drains; or name an entry.
    EntriesBusy = 45,
}

/// Every code, for `hamlyn_result_name` and the tests.
const ALL: [(hamlyn_result, &std::ffi::CStr); 46] = [
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
    (hamlyn_result::InHandler, c"HAMLYN_RESULT_IN_HANDLER"),
    (hamlyn_result::Collision, c"HAMLYN_RESULT_COLLISION"),
    (
        hamlyn_result::UnknownHandler,
        c"HAMLYN_RESULT_UNKNOWN_HANDLER",
    ),
    (hamlyn_result::HandlerGone, c"HAMLYN_RESULT_HANDLER_GONE"),
    (
        hamlyn_result::HandlerFailed,
        c"HAMLYN_RESULT_HANDLER_FAILED",
    ),
    (hamlyn_result::ReplyTwice, c"HAMLYN_RESULT_REPLY_TWICE"),
    (hamlyn_result::TooLong, c"HAMLYN_RESULT_TOO_LONG"),
    (hamlyn_result::NoCall, c"HAMLYN_RESULT_NO_CALL"),
    (hamlyn_result::NoChannel, c"HAMLYN_RESULT_NO_CHANNEL"),
    (hamlyn_result::PeerGone, c"HAMLYN_RESULT_PEER_GONE"),
    (hamlyn_result::Malformed, c"HAMLYN_RESULT_MALFORMED"),
    (hamlyn_result::State, c"HAMLYN_RESULT_STATE"),
    (hamlyn_result::EndOfStream, c"HAMLYN_RESULT_END_OF_STREAM"),
    (hamlyn_result::EntriesBusy, c"HAMLYN_RESULT_ENTRIES_BUSY"),
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
            SendError::Full => R::Full,
            SendError::EntriesBusy => R::EntriesBusy,
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

    /// A full work queue and busy metadata entries are two codes: a C sender that waits
    /// for room (`hamlyn_terminus_wait_room`) after busy entries would find room at once
    /// and spin, where it must wait for a send to finish.
    #[test]
    fn busy_entries_are_not_a_full_queue() {
        assert_eq!(hamlyn_result::from(SendError::Full), hamlyn_result::Full);
        assert_eq!(
            hamlyn_result::from(SendError::EntriesBusy),
            hamlyn_result::EntriesBusy
        );
        assert_eq!(
            hamlyn_result::from(Error::Send(SendError::EntriesBusy)),
            hamlyn_result::EntriesBusy
        );
    }
}

thread_local! {
    /// The text of the last error of the layers above the library (active messages, RPC,
    /// the job layer, Rats) on this thread: `hamlyn_last_error`.
    static LAST: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Keeps `error`'s text for `hamlyn_last_error` and returns `code`.
pub(crate) fn remember(code: hamlyn_result, error: &dyn std::fmt::Display) -> hamlyn_result {
    // `try_with`: during thread teardown the text is simply not kept.
    let _ = LAST.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            l.clear();
            use std::fmt::Write;
            let _ = write!(l, "{error}");
        }
    });
    code
}

/// Writes the text of the last error an active-message, RPC, job or Rats call returned
/// on this thread (what the code alone does not say: which handler refused, why a seed
/// is malformed) and a NUL into `buf` (capacity `cap`); `*out_needed` (if not NULL) is
/// the length it needs, NUL included, written even with `HAMLYN_RESULT_BUFFER_TOO_SMALL`.
/// An empty string if there was none. Successful calls do not clear it.
///
/// # Safety
///
/// `buf` is NULL or writable for `cap` bytes; `out_needed` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_last_error(
    buf: *mut c_char,
    cap: usize,
    out_needed: *mut usize,
) -> hamlyn_result {
    crate::guard(|| {
        let text = LAST
            .try_with(|l| l.try_borrow().map(|s| s.clone()).unwrap_or_default())
            .unwrap_or_default();
        // SAFETY: the function's contract.
        unsafe { crate::text_out(&text, buf, cap, out_needed) }
    })
}

impl From<::hamlyn_rats::RatsError> for hamlyn_result {
    fn from(e: ::hamlyn_rats::RatsError) -> hamlyn_result {
        use ::hamlyn_rats::RatsError as E;
        use hamlyn_result as R;
        let code = match &e {
            E::Hamlyn(_) | E::Send(_) => {
                // The library's own mapping; the text is still this error's.
                let text = e.to_string();
                let code = match e {
                    E::Hamlyn(inner) => R::from(inner),
                    E::Send(inner) => R::from(inner),
                    _ => R::Refused,
                };
                return remember(code, &text);
            }
            E::NoSpace { .. } => R::Full,
            E::NotAllocated(_) | E::State(_) => R::State,
            E::WrongProtocol { .. } | E::WrongVersion { .. } | E::BadSeed(_) => R::BadSeed,
            E::Forged(_) => R::Malformed,
            E::Full => R::Full,
            E::TooLong { .. } => R::TooLong,
            E::Timeout => R::Timeout,
            E::PeerGone => R::PeerGone,
            E::SendFailed(_) | E::Refused(_) => R::Rejected,
            E::NotificationsLost(_) => R::System,
            E::InvalidArgument(_) => R::InvalidArgument,
            E::EndOfStream => R::EndOfStream,
            _ => R::Refused,
        };
        remember(code, &e)
    }
}

impl From<::hamlyn_am::AmError> for hamlyn_result {
    fn from(e: ::hamlyn_am::AmError) -> hamlyn_result {
        use ::hamlyn_am::{AmError as E, Refusal};
        use hamlyn_result as R;
        let code = match &e {
            E::Hamlyn(_) | E::Rats(_) => {
                let text = e.to_string();
                let code = match e {
                    E::Hamlyn(inner) => R::from(inner),
                    E::Rats(inner) => R::from(inner),
                    _ => R::Refused,
                };
                return remember(code, &text);
            }
            E::Full => R::Full,
            E::Collision { .. } => R::Collision,
            E::UnknownName(_) | E::UnknownId(_) => R::UnknownHandler,
            E::Refused { why, .. } => match why {
                Refusal::NoHandler | Refusal::StaleEpoch => R::HandlerGone,
                Refusal::Malformed => R::Malformed,
                _ => R::HandlerFailed,
            },
            E::BadName(_) => R::InvalidArgument,
            E::ReplyTwice => R::ReplyTwice,
            E::Malformed(_) => R::Malformed,
            E::TooLong { .. } => R::TooLong,
            E::Timeout => R::Timeout,
            E::NoCall(_) => R::NoCall,
            E::NoChannel(_) => R::NoChannel,
            E::PeerGone(_) => R::PeerGone,
            E::SendFailed(_) => R::Rejected,
            _ => R::Refused,
        };
        remember(code, &e)
    }
}
