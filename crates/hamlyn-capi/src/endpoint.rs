//! Receive endpoints (FLIPC): messages land in buffers the receiver posted; a message
//! that finds none is discarded and counted. Buffers are named by their index here; the
//! handle remembers which ones the program holds (allocated or received, not posted), so
//! a buffer cannot be posted twice or read while the engine may fill it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hamlyn::{Buffer, Endpoint, RateLimit};

use crate::{
    free_box, guard, hamlyn_node, hamlyn_result, hamlyn_terminus, hamlyn_ticket, handle, lock,
    non_null, put, Life,
};

/// `hamlyn_endpoint_config.flags`: arrivals are also reported to notification queue
/// `queue` (entries name the buffer in `meta_index`).
pub const HAMLYN_ENDPOINT_QUEUE: u32 = 1;
/// `hamlyn_endpoint_config.flags`: a message that finds no posted buffer also fails its
/// send (`HAMLYN_REJECT_NO_BUFFER`), not only counted.
pub const HAMLYN_ENDPOINT_REPORT_DISCARDS: u32 = 2;
/// `hamlyn_endpoint_config.flags`: **danger**, same-node ticket holders may map the
/// endpoint and deposit without the engine (`hamlyn_direct_open`), as for
/// `HAMLYN_SLOT_DANGER_DIRECT`.
pub const HAMLYN_ENDPOINT_DANGER_DIRECT: u32 = 4;

/// How to make an endpoint (`hamlyn_endpoint_new`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hamlyn_endpoint_config {
    /// Bytes per buffer: a multiple of 64, 64..=65536 (the largest message).
    pub buf_size: u32,
    /// Number of buffers, 1..=65536.
    pub buffers: u32,
    /// `HAMLYN_ENDPOINT_*` bits.
    pub flags: u32,
    /// The notification queue, with `HAMLYN_ENDPOINT_QUEUE`.
    pub queue: u16,
}

/// A message taken from an endpoint (`hamlyn_endpoint_receive`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hamlyn_endpoint_message {
    /// The buffer holding it, the program's until posted again.
    pub buffer: u32,
    /// Payload bytes from the start of the buffer.
    pub len: u32,
    /// The sending node.
    pub src_node: u32,
    /// The message's tag.
    pub word: u64,
}

/// A receive endpoint, destroyed by `hamlyn_endpoint_free`.
pub struct hamlyn_endpoint {
    life: Arc<Life>,
    inner: Mutex<Inner>,
}

struct Inner {
    endpoint: Endpoint,
    /// Buffers the program holds, by index.
    held: HashMap<u32, Buffer>,
}

/// Creates an endpoint with its buffers (none posted yet); `*out` is the new handle.
///
/// # Safety
///
/// `node` is NULL or live; `config` is NULL or valid; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_endpoint_new(
    node: *const hamlyn_node,
    config: *const hamlyn_endpoint_config,
    out: *mut *mut hamlyn_endpoint,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let n = unsafe { handle(node) }?;
        let node = n.get()?;
        non_null(out)?;
        // SAFETY: the function's contract: a valid config, copied out.
        let cfg = unsafe { config.as_ref() }
            .copied()
            .ok_or(hamlyn_result::NullArgument)?;
        let all =
            HAMLYN_ENDPOINT_QUEUE | HAMLYN_ENDPOINT_REPORT_DISCARDS | HAMLYN_ENDPOINT_DANGER_DIRECT;
        if cfg.flags & !all != 0 {
            return Err(hamlyn_result::InvalidArgument);
        }
        let mut b = node.endpoint(cfg.buf_size, cfg.buffers);
        if cfg.flags & HAMLYN_ENDPOINT_QUEUE != 0 {
            b = b.queue(cfg.queue);
        }
        if cfg.flags & HAMLYN_ENDPOINT_REPORT_DISCARDS != 0 {
            b = b.report_discards();
        }
        if cfg.flags & HAMLYN_ENDPOINT_DANGER_DIRECT != 0 {
            b = b.danger_direct();
        }
        let endpoint = b.create()?;
        let h = Box::into_raw(Box::new(hamlyn_endpoint {
            life: n.life.clone(),
            inner: Mutex::new(Inner {
                endpoint,
                held: HashMap::new(),
            }),
        }));
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, h) };
        Ok(())
    })
}

/// Runs `f` on the endpoint, if it and its node are live.
///
/// # Safety
///
/// `ep` is NULL or a live endpoint.
unsafe fn with<T>(
    ep: *const hamlyn_endpoint,
    f: impl FnOnce(&mut Inner) -> Result<T, hamlyn_result>,
) -> Result<T, hamlyn_result> {
    // SAFETY: the caller's contract.
    let e = unsafe { handle(ep) }?;
    e.life.check()?;
    f(&mut *lock(&e.inner)?)
}

/// A ticket for sending to the endpoint (a fast ticket over one buffer's bytes); `*out`
/// is the new ticket.
///
/// # Safety
///
/// `ep` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_endpoint_ticket(
    ep: *const hamlyn_endpoint,
    out: *mut *mut hamlyn_ticket,
) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        // SAFETY: the function's contract.
        let t = unsafe { with(ep, |e| Ok(e.endpoint.ticket())) }?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, crate::ticket::give(t)) };
        Ok(())
    })
}

/// Posts every buffer neither posted nor held by the program; `*out` (if not NULL) is how
/// many.
///
/// # Safety
///
/// `ep` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_endpoint_post_all(
    ep: *const hamlyn_endpoint,
    out: *mut u32,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let n = unsafe { with(ep, |e| Ok(e.endpoint.post_all()?)) }?;
        if !out.is_null() {
            // SAFETY: `out` is non-NULL and writable (the contract).
            unsafe { put(out, n) };
        }
        Ok(())
    })
}

/// Takes a buffer neither posted nor held (`*out`, its index) for the program to fill or
/// post; `HAMLYN_RESULT_EMPTY` if there is none.
///
/// # Safety
///
/// `ep` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_endpoint_alloc(
    ep: *const hamlyn_endpoint,
    out: *mut u32,
) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        // SAFETY: the function's contract.
        let i = unsafe {
            with(ep, |e| {
                let b = e.endpoint.alloc().ok_or(hamlyn_result::Empty)?;
                let i = b.index();
                e.held.insert(i, b);
                Ok(i)
            })
        }?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, i) };
        Ok(())
    })
}

/// Posts buffer `buffer`, which the program must hold (allocated or received):
/// `HAMLYN_RESULT_INVALID_ARGUMENT` otherwise (never posted twice).
///
/// # Safety
///
/// `ep` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_endpoint_post(
    ep: *const hamlyn_endpoint,
    buffer: u32,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        unsafe {
            with(ep, |e| {
                let b = e
                    .held
                    .remove(&buffer)
                    .ok_or(hamlyn_result::InvalidArgument)?;
                Ok(e.endpoint.post(b)?)
            })
        }
    })
}

/// The next message (`*out`), if one arrived; `HAMLYN_RESULT_EMPTY` if not. Never
/// blocks. The message's buffer is the program's until posted again.
///
/// # Safety
///
/// `ep` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_endpoint_receive(
    ep: *const hamlyn_endpoint,
    out: *mut hamlyn_endpoint_message,
) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        // SAFETY: the function's contract.
        let m = unsafe {
            with(ep, |e| {
                let r = e.endpoint.receive().ok_or(hamlyn_result::Empty)?;
                let m = hamlyn_endpoint_message {
                    buffer: r.buffer.index(),
                    len: r.len,
                    src_node: r.src_node,
                    word: r.word,
                };
                e.held.insert(m.buffer, r.buffer);
                Ok(m)
            })
        }?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, m) };
        Ok(())
    })
}

/// Copies the first `len` bytes of held buffer `buffer` to `dst`.
///
/// # Safety
///
/// `ep` is NULL or live; `dst` is NULL or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_endpoint_read(
    ep: *const hamlyn_endpoint,
    buffer: u32,
    dst: *mut u8,
    len: usize,
) -> hamlyn_result {
    guard(|| {
        non_null(dst)?;
        let mut tmp = vec![0u8; len];
        // SAFETY: the function's contract.
        unsafe {
            with(ep, |e| {
                let b = e.held.get(&buffer).ok_or(hamlyn_result::InvalidArgument)?;
                Ok(e.endpoint.read(b, &mut tmp)?)
            })
        }?;
        // SAFETY: `dst` is non-NULL and writable for `len` bytes (the contract); `tmp`
        // is ours, so the ranges cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(tmp.as_ptr(), dst, len) };
        Ok(())
    })
}

/// Messages discarded for want of a posted buffer since the last call (`*out`), and the
/// count reset, in one wait-free step.
///
/// # Safety
///
/// `ep` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_endpoint_take_discards(
    ep: *const hamlyn_endpoint,
    out: *mut u64,
) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        // SAFETY: the function's contract.
        let n = unsafe { with(ep, |e| Ok(e.endpoint.take_discards())) }?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, n) };
        Ok(())
    })
}

/// Destroys the endpoint (its tickets stop working) and frees the handle (NULL is
/// ignored).
///
/// # Safety
///
/// `ep` is NULL or a live endpoint, not used again.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_endpoint_free(ep: *mut hamlyn_endpoint) {
    // SAFETY: the function's contract; made with `Box::into_raw`.
    unsafe { free_box(ep) }
}

/// Limits what `terminus` sends to `bytes_per_sec` payload bytes and `msgs_per_sec`
/// messages per second (0: unlimited; both 0 lifts the limit); the engine keeps the token
/// buckets.
///
/// # Safety
///
/// `node` and `terminus` are NULL or live, `terminus` made from `node`.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_terminus_set_rate(
    node: *const hamlyn_node,
    terminus: *const hamlyn_terminus,
    bytes_per_sec: u64,
    msgs_per_sec: u64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let n = unsafe { handle(node) }?;
        let node = n.get()?;
        // SAFETY: the function's contract.
        let t = unsafe { handle(terminus) }?;
        let limit = RateLimit {
            bytes_per_sec,
            msgs_per_sec,
        };
        t.with_terminus(|term| Ok(node.set_rate(term, limit)?))
    })
}
