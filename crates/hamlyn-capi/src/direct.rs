//! Direct targets: a direct slot of this node mapped into the sender's process
//! (`HAMLYN_SLOT_DANGER_DIRECT`), deposited into without the engine.

use std::sync::Arc;

use hamlyn::{Data, DirectTarget};

use crate::terminus::{hamlyn_send_options, options};
use crate::{
    bytes, free_box, guard, hamlyn_node, hamlyn_result, hamlyn_ticket, handle, non_null, put, Life,
};

/// A direct slot mapped in this process (`hamlyn_direct_open`), freed by
/// `hamlyn_direct_free`.
pub struct hamlyn_direct {
    life: Arc<Life>,
    target: DirectTarget,
}

/// Maps the direct slot `ticket` names (a slot of this node made with
/// `HAMLYN_SLOT_DANGER_DIRECT`); `*out` is the new handle. The engine checks the ticket
/// now and only now (`HAMLYN_RESULT_NOT_LOCAL`, `HAMLYN_RESULT_BAD_KEY`,
/// `HAMLYN_RESULT_REFUSED`).
///
/// # Safety
///
/// `node` and `ticket` are NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_direct_open(
    node: *const hamlyn_node,
    ticket: *const hamlyn_ticket,
    out: *mut *mut hamlyn_direct,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let n = unsafe { handle(node) }?;
        let node = n.get()?;
        // SAFETY: the function's contract.
        let ticket = unsafe { handle(ticket) }?;
        non_null(out)?;
        let target = node.open_direct(&ticket.ticket)?;
        let h = Box::into_raw(Box::new(hamlyn_direct {
            life: n.life.clone(),
            target,
        }));
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, h) };
        Ok(())
    })
}

/// Deposits the `len` bytes at `data` into the direct slot, counts them and notifies the
/// receiver, in this process: done when the call returns. `opts` as for
/// `hamlyn_terminus_send_inline`; `data` may be longer than `HAMLYN_MAX_INLINE`.
///
/// # Safety
///
/// `direct` is NULL or live; `opts` is NULL or valid; `data` is readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_direct_send(
    direct: *const hamlyn_direct,
    opts: *const hamlyn_send_options,
    data: *const u8,
    len: usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let d = unsafe { handle(direct) }?;
        d.life.check()?;
        // SAFETY: the function's contract.
        let opts = unsafe { options(opts) }?;
        // SAFETY: the function's contract.
        let data = unsafe { bytes(data, len) }?;
        d.target.send(&opts, Data::Inline(data))?;
        Ok(())
    })
}

/// Unmaps the direct slot and frees the handle (NULL is ignored).
///
/// # Safety
///
/// `direct` is NULL or live, not used again.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_direct_free(direct: *mut hamlyn_direct) {
    // SAFETY: the function's contract; made with `Box::into_raw`.
    unsafe { free_box(direct) }
}
