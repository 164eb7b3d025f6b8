//! Tickets (the capability to write, read or update part of a slot) and seeds, their text
//! form ("hmseed1-..."), which one process hands another.

use std::ffi::c_char;

use hamlyn::Ticket;

use crate::{free_box, guard, hamlyn_result, handle, non_null, put, text, text_out};

/// A ticket: a plain value (no connection), valid after its node is freed; freed with
/// `hamlyn_ticket_free`.
pub struct hamlyn_ticket {
    pub(crate) ticket: Ticket,
}

pub(crate) fn give(ticket: Ticket) -> *mut hamlyn_ticket {
    Box::into_raw(Box::new(hamlyn_ticket { ticket }))
}

/// Parses seed text (a one-ticket seed, or the first ticket of a seed; white space
/// around it is ignored); `*out` is a new ticket. `HAMLYN_RESULT_BAD_SEED` for text that
/// does not decode (a typo or a cut string fails the checksum).
///
/// # Safety
///
/// `seed_text` is NULL or NUL-terminated; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_ticket_from_seed(
    seed_text: *const c_char,
    out: *mut *mut hamlyn_ticket,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { text(seed_text) }.map_err(|e| match e {
            hamlyn_result::InvalidArgument => hamlyn_result::BadSeed,
            e => e,
        })?;
        non_null(out)?;
        let ticket = hamlyn::seed::ticket_from_text(s).map_err(|e| match e {
            hamlyn::Error::InvalidArgument(_) => hamlyn_result::BadSeed,
            e => e.into(),
        })?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, give(ticket)) };
        Ok(())
    })
}

/// Writes the ticket's seed text and a NUL into `buf` (capacity `cap`). `*out_needed`
/// (if `out_needed` is not NULL) is the length it needs, NUL included, whether or not it
/// fits: `HAMLYN_RESULT_BUFFER_TOO_SMALL` if `cap` is less (then `buf` is untouched).
/// `HAMLYN_SEED_TEXT_MAX` bytes always suffice.
///
/// # Safety
///
/// `ticket` is NULL or live; `buf` is NULL or writable for `cap` bytes; `out_needed` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_ticket_to_seed(
    ticket: *const hamlyn_ticket,
    buf: *mut c_char,
    cap: usize,
    out_needed: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let t = unsafe { handle(ticket) }?;
        let s = hamlyn::seed::ticket_to_text(&t.ticket)?;
        // SAFETY: the function's contract.
        unsafe { text_out(&s, buf, cap, out_needed) }
    })
}

/// Longest seed text of one ticket, NUL included: a buffer this long always suffices for
/// `hamlyn_ticket_to_seed`.
pub const HAMLYN_SEED_TEXT_MAX: usize = 256;

/// Splits `ticket` among `parts` delegates (group receive): the byte range in even
/// contiguous parts (the remainder to the last), the share likewise, so that the
/// receiver's metadata entry completes once every part has been sent. `out` is an array
/// of `parts` ticket pointers the new tickets are written into (each freed with
/// `hamlyn_ticket_free`). `HAMLYN_RESULT_SPLIT` if the ticket cannot be split that many
/// ways (at most 128).
///
/// # Safety
///
/// `ticket` is NULL or live; `out` is NULL or writable for `parts` pointers.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_ticket_split(
    ticket: *const hamlyn_ticket,
    parts: usize,
    out: *mut *mut hamlyn_ticket,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let t = unsafe { handle(ticket) }?;
        non_null(out)?;
        let split = t.ticket.split(parts).map_err(hamlyn::Error::Split)?;
        for (i, part) in split.into_iter().enumerate() {
            // SAFETY: `out` is writable for `parts` pointers (the contract) and
            // `split` has `parts` entries.
            unsafe { put(out.add(i), give(part)) };
        }
        Ok(())
    })
}

/// What a ticket grants, copied out of it (`hamlyn_ticket_get_info`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hamlyn_ticket_info {
    /// The node of the slot.
    pub node: u32,
    /// The slot.
    pub slot: u32,
    /// Start of the byte range, slot-relative.
    pub offset: u64,
    /// Bytes in the range.
    pub len: u64,
    /// First metadata entry granted.
    pub meta_first: u32,
    /// Metadata entries granted.
    pub meta_count: u32,
    /// `HAMLYN_TICKET_*` flags (write, read, atomic, fast, ...).
    pub flags: u32,
}

/// The ticket grants writes.
pub const HAMLYN_TICKET_WRITE: u32 = 1;
/// The ticket grants remote reads.
pub const HAMLYN_TICKET_READ: u32 = 2;
/// The ticket grants atomics.
pub const HAMLYN_TICKET_ATOMIC: u32 = 4;
/// The ticket names a fast-mode slot.
pub const HAMLYN_TICKET_FAST: u32 = 8;

/// What `ticket` grants (`*out`).
///
/// # Safety
///
/// `ticket` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_ticket_get_info(
    ticket: *const hamlyn_ticket,
    out: *mut hamlyn_ticket_info,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let t = unsafe { handle(ticket) }?.ticket;
        non_null(out)?;
        use hamlyn::TicketFlags as F;
        let mut flags = 0;
        for (f, bit) in [
            (F::WRITE, HAMLYN_TICKET_WRITE),
            (F::READ, HAMLYN_TICKET_READ),
            (F::ATOMIC, HAMLYN_TICKET_ATOMIC),
            (F::FAST, HAMLYN_TICKET_FAST),
        ] {
            if t.flags.contains(f) {
                flags |= bit;
            }
        }
        let info = hamlyn_ticket_info {
            node: t.node.0,
            slot: t.slot.0,
            offset: t.offset,
            len: t.len,
            meta_first: t.meta_first,
            meta_count: t.meta_count,
            flags,
        };
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, info) };
        Ok(())
    })
}

/// Frees a ticket (NULL is ignored).
///
/// # Safety
///
/// `ticket` is NULL or a live ticket, not used again.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_ticket_free(ticket: *mut hamlyn_ticket) {
    // SAFETY: the function's contract; made by `give`.
    unsafe { free_box(ticket) }
}

/// Most tickets one seed holds (`hamlyn_seed_tickets`, `hamlyn_seed_from_tickets`).
pub const HAMLYN_SEED_TICKETS_MAX: usize = 16;

/// Parses seed text holding one or more tickets (a group's parts, a service's frames):
/// `*out_count` is how many it holds; the first `min(count, cap)` are written to `out` as
/// new tickets (each freed with `hamlyn_ticket_free`). `HAMLYN_RESULT_BUFFER_TOO_SMALL`
/// (and nothing written) if `cap` is less than the count; `HAMLYN_RESULT_BAD_SEED` for
/// text that does not decode.
///
/// # Safety
///
/// `seed_text` is NULL or NUL-terminated; `out` is NULL or writable for `cap` pointers;
/// `out_count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_seed_tickets(
    seed_text: *const c_char,
    out: *mut *mut hamlyn_ticket,
    cap: usize,
    out_count: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { text(seed_text) }.map_err(|e| match e {
            hamlyn_result::InvalidArgument => hamlyn_result::BadSeed,
            e => e,
        })?;
        non_null(out_count)?;
        let seed = hamlyn::seed::from_text(s.trim()).map_err(|e| match e {
            hamlyn::Error::InvalidArgument(_) => hamlyn_result::BadSeed,
            e => e.into(),
        })?;
        // SAFETY: `out_count` is non-NULL and writable (the contract).
        unsafe { put(out_count, seed.tickets.len()) };
        if seed.tickets.len() > cap {
            return Err(hamlyn_result::BufferTooSmall);
        }
        if seed.tickets.is_empty() {
            return Ok(());
        }
        non_null(out)?;
        for (i, t) in seed.tickets.into_iter().enumerate() {
            // SAFETY: `out` is writable for `cap` pointers and `i < count <= cap`.
            unsafe { put(out.add(i), give(t)) };
        }
        Ok(())
    })
}

/// Writes the seed text of `count` tickets (one seed holding them all, in order) and a
/// NUL into `buf` (capacity `cap`); `*out_needed` (if not NULL) is the length it needs,
/// NUL included. `HAMLYN_RESULT_BUFFER_TOO_SMALL` if `cap` is less (`buf` untouched);
/// `HAMLYN_RESULT_INVALID_ARGUMENT` for 0 or more than `HAMLYN_SEED_TICKETS_MAX` tickets.
///
/// # Safety
///
/// `tickets` is NULL or readable for `count` pointers, each NULL or live; `buf` is NULL
/// or writable for `cap` bytes; `out_needed` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_seed_from_tickets(
    tickets: *const *const hamlyn_ticket,
    count: usize,
    buf: *mut c_char,
    cap: usize,
    out_needed: *mut usize,
) -> hamlyn_result {
    guard(|| {
        non_null(tickets)?;
        if count == 0 || count > HAMLYN_SEED_TICKETS_MAX {
            return Err(hamlyn_result::InvalidArgument);
        }
        let mut list = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: `tickets` is readable for `count` pointers (the contract).
            let p = unsafe { *tickets.add(i) };
            // SAFETY: each pointer is NULL or a live ticket (the contract).
            list.push(unsafe { handle(p) }?.ticket);
        }
        let seed = hamlyn::Seed {
            protocol: 0,
            tickets: list,
            data: Vec::new(),
        };
        let s = hamlyn::seed::to_text(&seed)?;
        // SAFETY: the function's contract.
        unsafe { text_out(&s, buf, cap, out_needed) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn::{NodeId, SlotId, TicketFlags};

    #[test]
    fn the_longest_seed_text_fits_the_advertised_buffer() {
        let t = Ticket {
            node: NodeId(u32::MAX),
            incarnation: u32::MAX,
            slot: SlotId(u32::MAX),
            key: u64::MAX,
            meta_first: u32::MAX,
            meta_count: u32::MAX,
            offset: u64::MAX,
            len: u64::MAX,
            share: u64::MAX,
            flags: TicketFlags(u16::MAX),
        };
        let s = hamlyn::seed::ticket_to_text(&t).expect("text");
        assert!(s.len() < HAMLYN_SEED_TEXT_MAX, "{} bytes", s.len());
    }
}
