//! Notification queues: where arrivals, read answers and atomic answers are reported.

use std::sync::{Arc, Mutex};

use hamlyn::{Notification, NotificationKind, NotifyQueue};

use crate::{
    free_box, guard, hamlyn_node, hamlyn_result, handle, lock, non_null, put, timeout, Life,
};

/// `hamlyn_notification.kind`: every packet of a message arrived.
pub const HAMLYN_NOTIFY_MESSAGE: u32 = 1;
/// A fast-mode message arrived; `word` is its metadata.
pub const HAMLYN_NOTIFY_FAST: u32 = 2;
/// A peer with partial messages to this queue is gone.
pub const HAMLYN_NOTIFY_PEER_DOWN: u32 = 3;
/// A remote read's reply landed; `request_*` name the read.
pub const HAMLYN_NOTIFY_READ_DONE: u32 = 4;
/// A remote atomic's old value landed (`word`); `request_*` name the atomic.
pub const HAMLYN_NOTIFY_ATOMIC_DONE: u32 = 5;
/// Notifications were lost to a full queue; `word` says how many.
pub const HAMLYN_NOTIFY_OVERFLOW: u32 = 6;
/// A kind this library does not know; `raw_kind` is its code.
pub const HAMLYN_NOTIFY_UNKNOWN: u32 = 0;

/// `hamlyn_notification.meta_index` of a fast-mode message (no metadata entry).
pub const HAMLYN_NO_META_INDEX: u32 = u32::MAX;

/// One notification.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hamlyn_notification {
    /// `HAMLYN_NOTIFY_*`.
    pub kind: u32,
    /// The kind's code as posted (for `HAMLYN_NOTIFY_UNKNOWN`).
    pub raw_kind: u32,
    /// The slot the message arrived in.
    pub slot: u32,
    /// The message's metadata entry (slot-relative), `HAMLYN_NO_META_INDEX` in fast mode.
    pub meta_index: u32,
    /// The tag, the fast-mode metadata, the old value of an atomic, or a count.
    pub word: u64,
    /// The sending node.
    pub src_node: u32,
    /// Payload bytes of the packet that completed the message (or a status code).
    pub len: u32,
    /// Header flags of that packet.
    pub flags: u32,
    /// 1 if `request_terminus` and `request_seq` name the read or atomic answered.
    pub has_request: u32,
    /// The answered request's terminus (see `hamlyn_send_request`).
    pub request_terminus: u32,
    /// The answered request's sequence number.
    pub request_seq: u32,
}

fn notification(n: &Notification) -> hamlyn_notification {
    let (kind, raw_kind) = match n.kind {
        NotificationKind::Message => (HAMLYN_NOTIFY_MESSAGE, HAMLYN_NOTIFY_MESSAGE),
        NotificationKind::Fast => (HAMLYN_NOTIFY_FAST, HAMLYN_NOTIFY_FAST),
        NotificationKind::PeerDown => (HAMLYN_NOTIFY_PEER_DOWN, HAMLYN_NOTIFY_PEER_DOWN),
        NotificationKind::ReadDone => (HAMLYN_NOTIFY_READ_DONE, HAMLYN_NOTIFY_READ_DONE),
        NotificationKind::AtomicDone => (HAMLYN_NOTIFY_ATOMIC_DONE, HAMLYN_NOTIFY_ATOMIC_DONE),
        NotificationKind::Overflow => (HAMLYN_NOTIFY_OVERFLOW, HAMLYN_NOTIFY_OVERFLOW),
        NotificationKind::Unknown(raw) => (HAMLYN_NOTIFY_UNKNOWN, u32::from(raw)),
        _ => (HAMLYN_NOTIFY_UNKNOWN, 0),
    };
    hamlyn_notification {
        kind,
        raw_kind,
        slot: n.slot.0,
        meta_index: n.meta_index.unwrap_or(HAMLYN_NO_META_INDEX),
        word: n.word,
        src_node: n.src_node.0,
        len: n.len,
        flags: u32::from(n.flags),
        has_request: u32::from(n.request.is_some()),
        request_terminus: n.request.map_or(0, |r| u32::from(r.terminus)),
        request_seq: n.request.map_or(0, |r| r.seq),
    }
}

/// The consumer of one notification queue. Made by `hamlyn_queue_new`, freed by
/// `hamlyn_queue_free`.
pub struct hamlyn_queue {
    life: Arc<Life>,
    queue: Mutex<NotifyQueue>,
}

/// Takes the consumer of notification queue `index` (each queue has one: a second
/// `hamlyn_queue_new` for it is `HAMLYN_RESULT_QUEUE_TAKEN` until the first is freed);
/// `*out` is the new handle.
///
/// # Safety
///
/// `node` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_queue_new(
    node: *const hamlyn_node,
    index: u16,
    out: *mut *mut hamlyn_queue,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let n = unsafe { handle(node) }?;
        let node = n.get()?;
        non_null(out)?;
        let q = node.queue(index)?;
        let h = Box::into_raw(Box::new(hamlyn_queue {
            life: n.life.clone(),
            queue: Mutex::new(q),
        }));
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, h) };
        Ok(())
    })
}

/// Runs `f` on the queue behind `queue`, if it and its node are live.
///
/// # Safety
///
/// `queue` is NULL or live.
unsafe fn with<T>(
    queue: *const hamlyn_queue,
    f: impl FnOnce(&mut NotifyQueue) -> Result<T, hamlyn_result>,
) -> Result<T, hamlyn_result> {
    // SAFETY: the caller's contract.
    let q = unsafe { handle(queue) }?;
    q.life.check()?;
    f(&mut *lock(&q.queue)?)
}

/// The next notification, if one is there (`*out`); `HAMLYN_RESULT_EMPTY` if not. Never
/// blocks.
///
/// # Safety
///
/// `queue` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_queue_poll(
    queue: *const hamlyn_queue,
    out: *mut hamlyn_notification,
) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        // SAFETY: the function's contract.
        let n = unsafe { with(queue, |q| q.poll().ok_or(hamlyn_result::Empty)) }?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, notification(&n)) };
        Ok(())
    })
}

/// The next notification (`*out`), waiting up to `timeout_ms` (negative: forever) for
/// one: spins briefly, then sleeps until the engine posts. `HAMLYN_RESULT_TIMEOUT` if
/// none came; `HAMLYN_RESULT_ENGINE_GONE` if the engine died (after the notifications
/// it had posted).
///
/// # Safety
///
/// `queue` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_queue_wait(
    queue: *const hamlyn_queue,
    timeout_ms: i64,
    out: *mut hamlyn_notification,
) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        // SAFETY: the function's contract.
        let n = unsafe {
            with(queue, |q| {
                q.wait(timeout(timeout_ms))?.ok_or(hamlyn_result::Timeout)
            })
        }?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, notification(&n)) };
        Ok(())
    })
}

/// Event-loop mode: asks for the node's event descriptor (`hamlyn_node_event_fd`) to
/// become readable on the next post to this queue. `*out_ready` is 1 if a notification
/// is already waiting (poll it before going back to the event loop), else 0.
///
/// # Safety
///
/// `queue` is NULL or live; `out_ready` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_queue_arm(
    queue: *const hamlyn_queue,
    out_ready: *mut u32,
) -> hamlyn_result {
    guard(|| {
        non_null(out_ready)?;
        // SAFETY: the function's contract.
        let ready = unsafe { with(queue, |q| Ok(q.arm())) }?;
        // SAFETY: `out_ready` is non-NULL and writable (the contract).
        unsafe { put(out_ready, u32::from(ready)) };
        Ok(())
    })
}

/// Notifications lost to this queue being full (`*out`).
///
/// # Safety
///
/// `queue` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_queue_overflows(
    queue: *const hamlyn_queue,
    out: *mut u64,
) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        // SAFETY: the function's contract.
        let n = unsafe { with(queue, |q| Ok(q.overflows())) }?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, n) };
        Ok(())
    })
}

/// Frees the queue's consumer (NULL is ignored): the queue can be taken again.
///
/// # Safety
///
/// `queue` is NULL or live, not used again.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_queue_free(queue: *mut hamlyn_queue) {
    // SAFETY: the function's contract; made with `Box::into_raw`.
    unsafe { free_box(queue) }
}
