//! Termini (private send work queues), sends, remote reads and atomics, and the handles
//! that report how a request ended.

use std::sync::{Arc, Mutex};

use hamlyn::{
    CompareSwapArgs, Data, FetchAddArgs, ReadArgs, SendHandle, SendOptions, Status, Terminus,
};

use crate::{
    bytes, free_box, guard, hamlyn_area, hamlyn_node, hamlyn_result, hamlyn_ticket, handle, lock,
    non_null, put, timeout, Life,
};

/// Longest inline message (`hamlyn_terminus_send_inline`), in bytes.
pub const HAMLYN_MAX_INLINE: usize = 128;

/// `hamlyn_send_options.flags`: post no notification at the receiver.
pub const HAMLYN_SEND_NO_NOTIFY: u32 = 1;
/// `hamlyn_send_options.flags`: do not wake a receiver asleep on its queue.
pub const HAMLYN_SEND_NO_WAKE: u32 = 2;
/// `hamlyn_send_options.flags`: send in fast mode (the tag is the metadata).
pub const HAMLYN_SEND_FAST: u32 = 4;
/// `hamlyn_send_options.flags`: use metadata entry `entry` of the ticket's range (else
/// its first entry).
pub const HAMLYN_SEND_ENTRY: u32 = 8;

/// How to send one message. All zeros (or a NULL pointer) is the default: offset 0, no
/// metadata, tag 0, notify and wake, the ticket's first metadata entry (or fast mode for
/// a fast ticket).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hamlyn_send_options {
    /// Where the message lands, in bytes from the start of the ticket's range.
    pub offset: u64,
    /// The tag (or fast-mode metadata) reported in the receiver's notification.
    pub tag: u64,
    /// User metadata deposited in the metadata entry (at most 60 bytes); NULL if none.
    pub meta: *const u8,
    /// Bytes at `meta`.
    pub meta_len: usize,
    /// `HAMLYN_SEND_*` bits.
    pub flags: u32,
    /// The metadata entry, with `HAMLYN_SEND_ENTRY`.
    pub entry: u32,
}

/// The options behind `opts` (the defaults for NULL).
///
/// # Safety
///
/// `opts` is NULL or a valid `hamlyn_send_options` whose `meta` is readable for
/// `meta_len` bytes.
pub(crate) unsafe fn options<'a>(
    opts: *const hamlyn_send_options,
) -> Result<SendOptions<'a>, hamlyn_result> {
    // SAFETY: the caller's contract.
    let Some(o) = (unsafe { opts.as_ref() }) else {
        return Ok(SendOptions::new());
    };
    let all = HAMLYN_SEND_NO_NOTIFY | HAMLYN_SEND_NO_WAKE | HAMLYN_SEND_FAST | HAMLYN_SEND_ENTRY;
    if o.flags & !all != 0
        || o.flags & (HAMLYN_SEND_FAST | HAMLYN_SEND_ENTRY) == HAMLYN_SEND_FAST | HAMLYN_SEND_ENTRY
    {
        return Err(hamlyn_result::InvalidArgument);
    }
    // SAFETY: the caller's contract: `meta` readable for `meta_len` bytes.
    let meta = unsafe { bytes(o.meta, o.meta_len) }?;
    let mut s = SendOptions::new()
        .offset(o.offset)
        .tag(o.tag)
        .meta(meta)
        .notify(o.flags & HAMLYN_SEND_NO_NOTIFY == 0)
        .wake(o.flags & HAMLYN_SEND_NO_WAKE == 0);
    if o.flags & HAMLYN_SEND_FAST != 0 {
        s = s.fast();
    }
    if o.flags & HAMLYN_SEND_ENTRY != 0 {
        s = s.entry(o.entry);
    }
    Ok(s)
}

/// A private send work queue. Made by `hamlyn_terminus_new`, freed by
/// `hamlyn_terminus_free` (which waits, bounded, for its gather sends).
pub struct hamlyn_terminus {
    life: Arc<Life>,
    terminus: Mutex<Terminus>,
}

impl hamlyn_terminus {
    /// Runs `f` on the terminus, if its node is live.
    pub(crate) fn with_terminus<T>(
        &self,
        f: impl FnOnce(&mut Terminus) -> Result<T, hamlyn_result>,
    ) -> Result<T, hamlyn_result> {
        self.life.check()?;
        f(&mut *crate::lock(&self.terminus)?)
    }
}

/// The state of a request once its engine looked at it: how it ended, or that it has not.
pub struct hamlyn_send {
    life: Arc<Life>,
    handle: SendHandle,
}

impl hamlyn_send {
    /// A send handle for C, made by a layer above the terminus (a memory message).
    pub(crate) fn boxed(life: Arc<Life>, handle: SendHandle) -> *mut hamlyn_send {
        Box::into_raw(Box::new(hamlyn_send { life, handle }))
    }
}

/// `hamlyn_status.state`: the engine has not finished the request (its buffers may still
/// be read).
pub const HAMLYN_STATUS_PENDING: u32 = 0;
/// `hamlyn_status.state`: sent without error (a remote refusal may still turn it failed).
pub const HAMLYN_STATUS_SENT: u32 = 1;
/// `hamlyn_status.state`: refused; `reason` says why.
pub const HAMLYN_STATUS_FAILED: u32 = 2;

/// `hamlyn_status.reason`: the packet did not parse.
pub const HAMLYN_REJECT_MALFORMED: u32 = 1;
/// `hamlyn_status.reason`: the packet was addressed to another node.
pub const HAMLYN_REJECT_WRONG_NODE: u32 = 2;
/// `hamlyn_status.reason`: no such slot.
pub const HAMLYN_REJECT_UNKNOWN_SLOT: u32 = 3;
/// `hamlyn_status.reason`: the key does not match the slot's (a wrong or stale ticket).
pub const HAMLYN_REJECT_BAD_KEY: u32 = 4;
/// `hamlyn_status.reason`: the slot's tickets were revoked.
pub const HAMLYN_REJECT_REVOKED: u32 = 5;
/// `hamlyn_status.reason`: the payload falls outside the slot or the ticket's range.
pub const HAMLYN_REJECT_OUT_OF_BOUNDS: u32 = 6;
/// `hamlyn_status.reason`: the slot is write-inhibited.
pub const HAMLYN_REJECT_INHIBITED: u32 = 7;
/// `hamlyn_status.reason`: the metadata index is outside the slot's metadata range.
pub const HAMLYN_REJECT_BAD_META_INDEX: u32 = 8;
/// `hamlyn_status.reason`: a paranoid entry's key does not match.
pub const HAMLYN_REJECT_PARANOID_KEY: u32 = 9;
/// `hamlyn_status.reason`: the payload falls outside a paranoid entry's byte range.
pub const HAMLYN_REJECT_PARANOID_BOUNDS: u32 = 10;
/// `hamlyn_status.reason`: a one-shot entry already took its message and was not re-armed.
pub const HAMLYN_REJECT_DISARMED: u32 = 11;
/// `hamlyn_status.reason`: the message's form does not fit the slot's mode.
pub const HAMLYN_REJECT_BAD_MODE: u32 = 12;
/// `hamlyn_status.reason`: the slot does not permit the operation (read, atomic).
pub const HAMLYN_REJECT_NOT_PERMITTED: u32 = 13;
/// `hamlyn_status.reason`: the slot's area is no longer registered.
pub const HAMLYN_REJECT_AREA_GONE: u32 = 14;
/// `hamlyn_status.reason`: the peer (or the engine) the request depended on is down.
pub const HAMLYN_REJECT_PEER_DOWN: u32 = 15;
/// `hamlyn_status.reason`: the ticket names an older incarnation of the node.
pub const HAMLYN_REJECT_STALE_INCARNATION: u32 = 16;
/// `hamlyn_status.reason`: the engine does not support the operation.
pub const HAMLYN_REJECT_UNSUPPORTED: u32 = 17;
/// `hamlyn_status.reason`: the receive endpoint had no buffer posted (the message was
/// discarded and counted; reported only by endpoints made with
/// `HAMLYN_ENDPOINT_REPORT_DISCARDS`).
pub const HAMLYN_REJECT_NO_BUFFER: u32 = 18;
/// `hamlyn_status.reason`: the message is larger than the receive endpoint's buffers.
pub const HAMLYN_REJECT_TOO_LARGE: u32 = 19;
/// `hamlyn_status.reason`: the receive endpoint's posted-buffer ring is corrupt (its
/// owner wrote impossible indices); nothing was deposited.
pub const HAMLYN_REJECT_RING_CORRUPT: u32 = 20;

/// How a request stands (`hamlyn_send_status`, `hamlyn_send_wait`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hamlyn_status {
    /// `HAMLYN_STATUS_PENDING`, `_SENT` or `_FAILED`.
    pub state: u32,
    /// With `HAMLYN_STATUS_FAILED`: the engine's reject code (`HAMLYN_REJECT_*`; the wire
    /// spec lists all of them), else 0.
    pub reason: u32,
}

fn status(s: Status) -> hamlyn_status {
    match s {
        Status::Pending => hamlyn_status {
            state: HAMLYN_STATUS_PENDING,
            reason: 0,
        },
        Status::Sent => hamlyn_status {
            state: HAMLYN_STATUS_SENT,
            reason: 0,
        },
        Status::Failed(r) => hamlyn_status {
            state: HAMLYN_STATUS_FAILED,
            reason: u32::from(r.code()),
        },
        Status::FailedCode(c) => hamlyn_status {
            state: HAMLYN_STATUS_FAILED,
            reason: u32::from(c),
        },
        _ => hamlyn_status {
            state: HAMLYN_STATUS_FAILED,
            reason: 0,
        },
    }
}

/// Opens a terminus served at `priority` (0 first); `*out` is the new terminus.
/// `HAMLYN_RESULT_NO_TERMINUS` when the node's termini are all in use.
///
/// # Safety
///
/// `node` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_terminus_new(
    node: *const hamlyn_node,
    priority: u8,
    out: *mut *mut hamlyn_terminus,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let n = unsafe { handle(node) }?;
        let node = n.get()?;
        non_null(out)?;
        let t = node.terminus(priority)?;
        let h = Box::into_raw(Box::new(hamlyn_terminus {
            life: n.life.clone(),
            terminus: Mutex::new(t),
        }));
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, h) };
        Ok(())
    })
}

/// Queues a request on the terminus with `f` and hands its handle to `out` (if not NULL).
///
/// # Safety
///
/// `terminus` is NULL or live; `out` is NULL or writable.
unsafe fn queue(
    terminus: *const hamlyn_terminus,
    out: *mut *mut hamlyn_send,
    f: impl FnOnce(&mut Terminus) -> Result<SendHandle, hamlyn_result>,
) -> Result<(), hamlyn_result> {
    // SAFETY: the caller's contract.
    let t = unsafe { handle(terminus) }?;
    t.life.check()?;
    let h = f(&mut *lock(&t.terminus)?)?;
    if !out.is_null() {
        let s = Box::into_raw(Box::new(hamlyn_send {
            life: t.life.clone(),
            handle: h,
        }));
        // SAFETY: `out` is non-NULL and writable (the caller's contract).
        unsafe { put(out, s) };
    }
    Ok(())
}

/// Sends the `len` bytes at `data` (at most `HAMLYN_MAX_INLINE`), copied into the work
/// queue: `data` is free again when the call returns. `opts` may be NULL (defaults).
/// `*out` (if `out` is not NULL) is the request's handle, freed with `hamlyn_send_free`;
/// pass NULL when the outcome does not matter (no allocation then).
/// `HAMLYN_RESULT_FULL` when the work queue is full, `HAMLYN_RESULT_ENTRIES_BUSY` when no
/// entry was named and every entry the default choice may take is busy with an
/// unfinished long message of this terminus: nothing was queued.
///
/// # Safety
///
/// `terminus` and `ticket` are NULL or live; `data` is readable for `len` bytes; `opts`
/// is NULL or valid; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_terminus_send_inline(
    terminus: *const hamlyn_terminus,
    ticket: *const hamlyn_ticket,
    opts: *const hamlyn_send_options,
    data: *const u8,
    len: usize,
    out: *mut *mut hamlyn_send,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let ticket = unsafe { handle(ticket) }?;
        // SAFETY: the function's contract.
        let opts = unsafe { options(opts) }?;
        // SAFETY: the function's contract.
        let data = unsafe { bytes(data, len) }?;
        // SAFETY: the function's contract.
        unsafe {
            queue(terminus, out, |t| {
                Ok(t.send(&ticket.ticket, &opts, Data::Inline(data))?)
            })
        }
    })
}

/// Sends `len` bytes at `offset` of `area` (an area of this node) without copying them:
/// do not rewrite them until the request is done (`hamlyn_send_wait`). Otherwise as
/// `hamlyn_terminus_send_inline`.
///
/// # Safety
///
/// `terminus`, `ticket` and `area` are NULL or live; `opts` is NULL or valid; `out` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_terminus_send_area(
    terminus: *const hamlyn_terminus,
    ticket: *const hamlyn_ticket,
    opts: *const hamlyn_send_options,
    area: *const hamlyn_area,
    offset: u64,
    len: u64,
    out: *mut *mut hamlyn_send,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let ticket = unsafe { handle(ticket) }?;
        // SAFETY: the function's contract.
        let area = unsafe { handle(area) }?.get()?;
        // SAFETY: the function's contract.
        let opts = unsafe { options(opts) }?;
        let spans = [area.span(offset, len)];
        // SAFETY: the function's contract.
        unsafe {
            queue(terminus, out, |t| {
                Ok(t.send(&ticket.ticket, &opts, Data::Gather(&spans))?)
            })
        }
    })
}

/// A remote read: `len` bytes at `offset` of `source`'s range (a ticket granting reads)
/// land at `reply_offset` of `reply`'s slot (a ticket to a slot of this node granting
/// writes), with a `HAMLYN_NOTIFY_READ_DONE` notification on the reply slot's queue
/// naming this request (`hamlyn_send_request`).
///
/// # Safety
///
/// `terminus`, `source` and `reply` are NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_terminus_read(
    terminus: *const hamlyn_terminus,
    source: *const hamlyn_ticket,
    offset: u64,
    len: u64,
    reply: *const hamlyn_ticket,
    reply_offset: u64,
    out: *mut *mut hamlyn_send,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let source = &unsafe { handle(source) }?.ticket;
        // SAFETY: the function's contract.
        let reply = &unsafe { handle(reply) }?.ticket;
        let args = ReadArgs {
            source,
            offset,
            len,
            reply,
            reply_offset,
        };
        // SAFETY: the function's contract.
        unsafe { queue(terminus, out, |t| Ok(t.read(&args)?)) }
    })
}

/// Compare-and-swap on the 8-byte word at `offset` of `target`'s range (a ticket granting
/// atomics): if it equals `expected` it becomes `desired`. The old value arrives as the
/// word of a `HAMLYN_NOTIFY_ATOMIC_DONE` notification naming this request, and as 8 bytes
/// at `reply_offset` of `reply`'s slot.
///
/// # Safety
///
/// `terminus`, `target` and `reply` are NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_terminus_compare_swap(
    terminus: *const hamlyn_terminus,
    target: *const hamlyn_ticket,
    offset: u64,
    expected: u64,
    desired: u64,
    reply: *const hamlyn_ticket,
    reply_offset: u64,
    out: *mut *mut hamlyn_send,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let target = &unsafe { handle(target) }?.ticket;
        // SAFETY: the function's contract.
        let reply = &unsafe { handle(reply) }?.ticket;
        let args = CompareSwapArgs {
            target,
            offset,
            expected,
            new: desired,
            reply,
            reply_offset,
        };
        // SAFETY: the function's contract.
        unsafe { queue(terminus, out, |t| Ok(t.compare_swap(&args)?)) }
    })
}

/// Fetch-and-add (wrapping) of `addend` on the 8-byte word at `offset` of `target`'s
/// range; the old value arrives as for `hamlyn_terminus_compare_swap`.
///
/// # Safety
///
/// `terminus`, `target` and `reply` are NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_terminus_fetch_add(
    terminus: *const hamlyn_terminus,
    target: *const hamlyn_ticket,
    offset: u64,
    addend: u64,
    reply: *const hamlyn_ticket,
    reply_offset: u64,
    out: *mut *mut hamlyn_send,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let target = &unsafe { handle(target) }?.ticket;
        // SAFETY: the function's contract.
        let reply = &unsafe { handle(reply) }?.ticket;
        let args = FetchAddArgs {
            target,
            offset,
            addend,
            reply,
            reply_offset,
        };
        // SAFETY: the function's contract.
        unsafe { queue(terminus, out, |t| Ok(t.fetch_add(&args)?)) }
    })
}

/// Waits up to `timeout_ms` (negative: forever) until every request queued on the
/// terminus is finished; `*out_idle` is 1 if they are, 0 at the timeout.
///
/// # Safety
///
/// `terminus` is NULL or live; `out_idle` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_terminus_wait_idle(
    terminus: *const hamlyn_terminus,
    timeout_ms: i64,
    out_idle: *mut u32,
) -> hamlyn_result {
    // SAFETY: the function's contract.
    unsafe { wait_for(terminus, out_idle, |t| t.wait_idle(timeout(timeout_ms))) }
}

/// Waits up to `timeout_ms` (negative: forever) until the terminus's work queue has
/// room for one more request (a send would not be `HAMLYN_RESULT_FULL`); `*out_room` is 1 if
/// it has, 0 at the timeout or if the engine is gone. What a sender that got
/// `HAMLYN_RESULT_FULL` calls before it tries again: the queue stays as full as the engine
/// takes it (an engine this process hosts is run by the waiting thread meanwhile).
/// (After `HAMLYN_RESULT_ENTRIES_BUSY`, wait for a send to finish instead:
/// `hamlyn_send_wait` or `hamlyn_terminus_wait_idle`.)
///
/// # Safety
///
/// `terminus` is NULL or live; `out_room` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_terminus_wait_room(
    terminus: *const hamlyn_terminus,
    timeout_ms: i64,
    out_room: *mut u32,
) -> hamlyn_result {
    // SAFETY: the function's contract.
    unsafe { wait_for(terminus, out_room, |t| t.wait_room(timeout(timeout_ms))) }
}

/// A terminus wait: `wait` on the terminus, its answer (1 or 0) in `*out`.
///
/// # Safety
///
/// `terminus` is NULL or live; `out` is NULL or writable.
unsafe fn wait_for(
    terminus: *const hamlyn_terminus,
    out: *mut u32,
    wait: impl FnOnce(&mut Terminus) -> bool,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the caller's contract.
        let t = unsafe { handle(terminus) }?;
        t.life.check()?;
        non_null(out)?;
        let yes = wait(&mut *lock(&t.terminus)?);
        // SAFETY: `out` is non-NULL and writable (the caller's contract).
        unsafe { put(out, u32::from(yes)) };
        Ok(())
    })
}

/// Frees the terminus (NULL is ignored), after waiting (bounded) for its gather sends.
///
/// # Safety
///
/// `terminus` is NULL or live, not used again.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_terminus_free(terminus: *mut hamlyn_terminus) {
    // SAFETY: the function's contract; made with `Box::into_raw`.
    unsafe { free_box(terminus) }
}

/// The request's status now (`*out`): one shared-memory load, no waiting.
///
/// # Safety
///
/// `send` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_send_status(
    send: *const hamlyn_send,
    out: *mut hamlyn_status,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(send) }?;
        s.life.check()?;
        non_null(out)?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, status(s.handle.status())) };
        Ok(())
    })
}

/// Waits up to `timeout_ms` (negative: forever) for the request to finish; `*out` is its
/// status (`HAMLYN_STATUS_PENDING` at the timeout). A dead engine ends the wait with
/// `HAMLYN_STATUS_FAILED` / `HAMLYN_REJECT_PEER_DOWN`.
///
/// # Safety
///
/// `send` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_send_wait(
    send: *const hamlyn_send,
    timeout_ms: i64,
    out: *mut hamlyn_status,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(send) }?;
        s.life.check()?;
        non_null(out)?;
        let st = s.handle.wait(timeout(timeout_ms));
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, status(st)) };
        Ok(())
    })
}

/// The request's name, as the notification answering a read or atomic gives it:
/// `*out_terminus` and `*out_seq` (compare with `hamlyn_notification.request_*`).
///
/// # Safety
///
/// `send` is NULL or live; the outputs are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_send_request(
    send: *const hamlyn_send,
    out_terminus: *mut u16,
    out_seq: *mut u32,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(send) }?;
        s.life.check()?;
        non_null(out_terminus)?;
        non_null(out_seq)?;
        let r = s.handle.request();
        // SAFETY: both outputs are non-NULL and writable (the contract).
        unsafe {
            put(out_terminus, r.terminus);
            put(out_seq, r.seq);
        }
        Ok(())
    })
}

/// Frees a request handle (NULL is ignored); the request itself goes on.
///
/// # Safety
///
/// `send` is NULL or live, not used again.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_send_free(send: *mut hamlyn_send) {
    // SAFETY: the function's contract; made with `Box::into_raw`.
    unsafe { free_box(send) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn::RejectReason;

    #[test]
    fn the_reject_constants_are_the_engines_codes() {
        let ours = [
            HAMLYN_REJECT_MALFORMED,
            HAMLYN_REJECT_WRONG_NODE,
            HAMLYN_REJECT_UNKNOWN_SLOT,
            HAMLYN_REJECT_BAD_KEY,
            HAMLYN_REJECT_REVOKED,
            HAMLYN_REJECT_OUT_OF_BOUNDS,
            HAMLYN_REJECT_INHIBITED,
            HAMLYN_REJECT_BAD_META_INDEX,
            HAMLYN_REJECT_PARANOID_KEY,
            HAMLYN_REJECT_PARANOID_BOUNDS,
            HAMLYN_REJECT_DISARMED,
            HAMLYN_REJECT_BAD_MODE,
            HAMLYN_REJECT_NOT_PERMITTED,
            HAMLYN_REJECT_AREA_GONE,
            HAMLYN_REJECT_PEER_DOWN,
            HAMLYN_REJECT_STALE_INCARNATION,
            HAMLYN_REJECT_UNSUPPORTED,
            HAMLYN_REJECT_NO_BUFFER,
            HAMLYN_REJECT_TOO_LARGE,
            HAMLYN_REJECT_RING_CORRUPT,
        ];
        assert_eq!(ours.len(), RejectReason::ALL.len());
        for (c, r) in ours.iter().zip(RejectReason::ALL) {
            assert_eq!(*c, u32::from(r.code()), "{r:?}");
        }
        assert_eq!(HAMLYN_MAX_INLINE, hamlyn::MAX_INLINE);
    }
}
