//! The two Rats protocols on remote memory from C: remote write (the client writes at
//! offsets of the server's slot, scatter-gather, the server is not told) and remote read
//! (the client reads the server's slot: blocking, or started and then polled with
//! `_ready` and collected with `_take`). Handles and seeds as the other Rats protocols.

use std::ffi::c_char;

use ::hamlyn_rats::remote_read::{RemoteReadClient, RemoteReadServer};
use ::hamlyn_rats::remote_write::{RemoteWriteClient, RemoteWriteServer};

use super::{free_instance, make, out_bytes, seed_in, seed_out, send_out, wrong, Held, Inst};
use crate::{guard, hamlyn_rats, hamlyn_result, hamlyn_send, handle, non_null, put, Life};

/// The side of a remote write that is written: a slot others write without notifying it.
pub struct hamlyn_rats_remote_write_server {
    held: Held,
}

/// Frees the instance (NULL: nothing).
///
/// # Safety
///
/// `h` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_write_server_free(
    h: *mut hamlyn_rats_remote_write_server,
) {
    // SAFETY: the function's contract.
    unsafe { free_instance(h, |x| &x.held) }
}

/// The writing side of a remote write, made from a server's seed.
pub struct hamlyn_rats_remote_write_client {
    held: Held,
}

/// Frees the instance (NULL: nothing). Writes already made go on.
///
/// # Safety
///
/// `h` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_write_client_free(
    h: *mut hamlyn_rats_remote_write_client,
) {
    // SAFETY: the function's contract.
    unsafe { free_instance(h, |x| &x.held) }
}

/// The side of a remote read that is read: a slot others may read.
pub struct hamlyn_rats_remote_read_server {
    held: Held,
}

/// Frees the instance (NULL: nothing).
///
/// # Safety
///
/// `h` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_read_server_free(
    h: *mut hamlyn_rats_remote_read_server,
) {
    // SAFETY: the function's contract.
    unsafe { free_instance(h, |x| &x.held) }
}

/// The reading side of a remote read, made from a server's seed, with a reply buffer of
/// its own; one read in flight at a time.
pub struct hamlyn_rats_remote_read_client {
    held: Held,
}

/// Frees the instance (NULL: nothing).
///
/// # Safety
///
/// `h` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_read_client_free(
    h: *mut hamlyn_rats_remote_read_client,
) {
    // SAFETY: the function's contract.
    unsafe { free_instance(h, |x| &x.held) }
}

/// One piece of a scattered remote write (`hamlyn_rats_remote_write_scatter`): `len`
/// bytes at `data`, written at `offset` of the server's slot.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hamlyn_rats_scatter_piece {
    /// Where the piece lands in the server's slot.
    pub offset: u64,
    /// Its bytes (may be NULL when `len` is 0).
    pub data: *const u8,
    /// How many.
    pub len: usize,
}

/// One piece of a gathered remote write (`hamlyn_rats_remote_write_gather`): `len`
/// bytes at `data`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hamlyn_rats_gather_piece {
    /// Its bytes (may be NULL when `len` is 0).
    pub data: *const u8,
    /// How many.
    pub len: usize,
}

/// The most pieces one scatter or gather call takes.
pub const HAMLYN_RATS_MAX_PIECES: usize = 1024;

/// `count` pieces of C's at `pieces` as a slice (empty for 0).
///
/// # Safety
///
/// `pieces` is NULL or readable for `count` elements.
unsafe fn pieces_in<'a, T>(pieces: *const T, count: usize) -> Result<&'a [T], hamlyn_result> {
    if count == 0 {
        return Ok(&[]);
    }
    if count > HAMLYN_RATS_MAX_PIECES {
        return Err(hamlyn_result::InvalidArgument);
    }
    non_null(pieces)?;
    // SAFETY: the caller's contract: `count` readable elements at a non-NULL `pieces`.
    Ok(unsafe { std::slice::from_raw_parts(pieces, count) })
}

/// `Err(OutOfRange)` unless `offset..offset + len` lies in `0..size`.
fn within(offset: u64, len: usize, size: u64) -> Result<(), hamlyn_result> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(hamlyn_result::OutOfRange),
    }
}

// ----- remote write -----

/// A remote-write server over `len` bytes of message space.
///
/// # Safety
///
/// `rats` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_write_server_new(
    rats: *const hamlyn_rats,
    len: u64,
    out: *mut *mut hamlyn_rats_remote_write_server,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        unsafe {
            make(
                rats,
                out,
                |m| Ok(Inst::RemoteWriteServer(RemoteWriteServer::new(m, len)?)),
                |held| hamlyn_rats_remote_write_server { held },
            )
        }
    })
}

/// The server's seed text (what a client is made from), as
/// `hamlyn_rats_tagged_server_seed`.
///
/// # Safety
///
/// `server` is NULL or live; `buf` is NULL or writable for `cap` bytes; `out_needed` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_write_server_seed(
    server: *const hamlyn_rats_remote_write_server,
    buf: *mut c_char,
    cap: usize,
    out_needed: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(server) }?;
        let seed = s.held.with(|i, _| match i {
            Inst::RemoteWriteServer(t) => Ok(t.make_seed()?),
            _ => Err(wrong()),
        })?;
        // SAFETY: the function's contract.
        unsafe { seed_out(&seed, buf, cap, out_needed) }
    })
}

/// Copies `len` bytes at `offset` of the server's slot into `buf` (what clients wrote;
/// nothing says when they did: the client's send handle, or a message of another
/// protocol, does). `HAMLYN_RESULT_OUT_OF_RANGE` past the slot's end.
///
/// # Safety
///
/// `server` is NULL or live; `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_write_server_read(
    server: *const hamlyn_rats_remote_write_server,
    offset: u64,
    buf: *mut u8,
    len: usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(server) }?;
        // SAFETY: the function's contract.
        let dst = unsafe { out_bytes(buf, len) }?;
        s.held.with(|i, _| match i {
            Inst::RemoteWriteServer(t) => {
                within(offset, dst.len(), t.len())?;
                Ok(t.read(offset, dst)?)
            }
            _ => Err(wrong()),
        })
    })
}

/// A remote-write client of the server whose seed text is `seed_text`
/// (`HAMLYN_RESULT_BAD_SEED` for another protocol's seed, or text that is no seed).
///
/// # Safety
///
/// `rats` is NULL or live; `seed_text` is NULL or NUL-terminated; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_write_client_new(
    rats: *const hamlyn_rats,
    seed_text: *const c_char,
    out: *mut *mut hamlyn_rats_remote_write_client,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let seed = unsafe { seed_in(seed_text) }?;
        // SAFETY: the function's contract.
        unsafe {
            make(
                rats,
                out,
                |m| {
                    Ok(Inst::RemoteWriteClient(RemoteWriteClient::from_seed(
                        m, &seed,
                    )?))
                },
                |held| hamlyn_rats_remote_write_client { held },
            )
        }
    })
}

/// Bytes of the server's slot the client may write, into `*out_len`.
///
/// # Safety
///
/// `client` is NULL or live; `out_len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_write_client_len(
    client: *const hamlyn_rats_remote_write_client,
    out_len: *mut u64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let c = unsafe { handle(client) }?;
        non_null(out_len)?;
        let len = c.held.with(|i, _| match i {
            Inst::RemoteWriteClient(t) => Ok(t.len()),
            _ => Err(wrong()),
        })?;
        // SAFETY: `out_len` is non-NULL and writable.
        unsafe { put(out_len, len) };
        Ok(())
    })
}

/// Writes the `len` bytes at `data` (copied before this returns) at `offset` of the
/// server's slot; the server is not notified. `*out` (if `out` is not NULL) is the
/// send's handle. A write outside the slot is `HAMLYN_RESULT_BAD_TICKET` (nothing sent).
///
/// # Safety
///
/// `client` is NULL or live; `data` is readable for `len` bytes; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_write(
    client: *const hamlyn_rats_remote_write_client,
    offset: u64,
    data: *const u8,
    len: usize,
    out: *mut *mut hamlyn_send,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let c = unsafe { handle(client) }?;
        // SAFETY: the function's contract.
        let bytes = unsafe { crate::bytes(data, len) }?;
        let h = c.held.with(|i, _| match i {
            Inst::RemoteWriteClient(t) => Ok(t.write(offset, bytes)?),
            _ => Err(wrong()),
        })?;
        // SAFETY: the function's contract.
        unsafe { send_out(&c.held.life, h, out) };
        Ok(())
    })
}

/// Scatter: each of the `count` pieces (at most `HAMLYN_RATS_MAX_PIECES`) is written at
/// its own offset of the server's slot (copied before this returns), one send each, in
/// no promised order. `out_sends` (if not NULL) is an array of `count` handles, filled
/// in the pieces' order. On an error no handle is given, but pieces before the one that
/// failed may have been sent.
///
/// # Safety
///
/// `client` is NULL or live; `pieces` is readable for `count` pieces, each readable for
/// its `len` bytes; `out_sends` is NULL or writable for `count` handles.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_write_scatter(
    client: *const hamlyn_rats_remote_write_client,
    pieces: *const hamlyn_rats_scatter_piece,
    count: usize,
    out_sends: *mut *mut hamlyn_send,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let c = unsafe { handle(client) }?;
        // SAFETY: the function's contract.
        let pieces = unsafe { pieces_in(pieces, count) }?;
        let mut parts = Vec::with_capacity(pieces.len());
        for p in pieces {
            // SAFETY: the function's contract: each piece is readable for its `len`.
            parts.push((p.offset, unsafe { crate::bytes(p.data, p.len) }?));
        }
        let handles = c.held.with(|i, _| match i {
            Inst::RemoteWriteClient(t) => Ok(t.write_scatter(&parts)?),
            _ => Err(wrong()),
        })?;
        // SAFETY: the function's contract; one handle per piece.
        unsafe { hand_out(&c.held.life, handles, out_sends) };
        Ok(())
    })
}

/// Hands `handles` to C's array `out` (NULL: dropped; the sends go on).
///
/// # Safety
///
/// `out` is NULL or writable for `handles.len()` handles.
unsafe fn hand_out(
    life: &std::sync::Arc<Life>,
    handles: Vec<hamlyn::SendHandle>,
    out: *mut *mut hamlyn_send,
) {
    if out.is_null() {
        return;
    }
    for (k, h) in handles.into_iter().enumerate() {
        // SAFETY: `out` is writable for `handles.len()` handles (the caller's contract),
        // so `out + k` is in C's array.
        unsafe { send_out(life, h, out.add(k)) };
    }
}

/// Gather: the `count` pieces (at most `HAMLYN_RATS_MAX_PIECES`), in order, land
/// contiguously at `offset` of the server's slot as one message. They are gathered into
/// the manager's message space (one copy, as every C write: C's memory is not message
/// space) before this returns. `*out` (if not NULL) is the send's handle.
///
/// # Safety
///
/// `client` is NULL or live; `pieces` is readable for `count` pieces, each readable for
/// its `len` bytes; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_write_gather(
    client: *const hamlyn_rats_remote_write_client,
    offset: u64,
    pieces: *const hamlyn_rats_gather_piece,
    count: usize,
    out: *mut *mut hamlyn_send,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let c = unsafe { handle(client) }?;
        // SAFETY: the function's contract.
        let pieces = unsafe { pieces_in(pieces, count) }?;
        let mut total = 0usize;
        let mut parts = Vec::with_capacity(pieces.len());
        for p in pieces {
            total = total
                .checked_add(p.len)
                .ok_or(hamlyn_result::InvalidArgument)?;
            // SAFETY: the function's contract: each piece is readable for its `len`.
            parts.push(unsafe { crate::bytes(p.data, p.len) }?);
        }
        let h = c.held.with(|i, _| match i {
            Inst::RemoteWriteClient(t) => {
                if total as u64 > t.len() {
                    return Err(hamlyn_result::TooLong);
                }
                Ok(t.write(offset, &parts.concat())?)
            }
            _ => Err(wrong()),
        })?;
        // SAFETY: the function's contract.
        unsafe { send_out(&c.held.life, h, out) };
        Ok(())
    })
}

// ----- remote read -----

/// A remote-read server: `len` bytes of message space that clients may read (not write).
///
/// # Safety
///
/// `rats` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_read_server_new(
    rats: *const hamlyn_rats,
    len: u64,
    out: *mut *mut hamlyn_rats_remote_read_server,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        unsafe {
            make(
                rats,
                out,
                |m| Ok(Inst::RemoteReadServer(RemoteReadServer::new(m, len)?, len)),
                |held| hamlyn_rats_remote_read_server { held },
            )
        }
    })
}

/// The server's seed text (what a reader is made from), as
/// `hamlyn_rats_tagged_server_seed`.
///
/// # Safety
///
/// `server` is NULL or live; `buf` is NULL or writable for `cap` bytes; `out_needed` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_read_server_seed(
    server: *const hamlyn_rats_remote_read_server,
    buf: *mut c_char,
    cap: usize,
    out_needed: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(server) }?;
        let seed = s.held.with(|i, _| match i {
            Inst::RemoteReadServer(t, _) => Ok(t.make_seed()?),
            _ => Err(wrong()),
        })?;
        // SAFETY: the function's contract.
        unsafe { seed_out(&seed, buf, cap, out_needed) }
    })
}

/// Writes the `len` bytes at `data` at `offset` of the server's slot: what readers will
/// see. `HAMLYN_RESULT_OUT_OF_RANGE` past the `len` it was made with.
///
/// # Safety
///
/// `server` is NULL or live; `data` is readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_read_server_write(
    server: *const hamlyn_rats_remote_read_server,
    offset: u64,
    data: *const u8,
    len: usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(server) }?;
        // SAFETY: the function's contract.
        let bytes = unsafe { crate::bytes(data, len) }?;
        s.held.with(|i, _| match i {
            Inst::RemoteReadServer(t, size) => {
                within(offset, bytes.len(), *size)?;
                Ok(t.write(offset, bytes)?)
            }
            _ => Err(wrong()),
        })
    })
}

/// A reader of the server whose seed text is `seed_text`, reading at most `max_len`
/// bytes at a time (its reply buffer). `HAMLYN_RESULT_BAD_SEED` for another protocol's
/// seed, or text that is no seed.
///
/// # Safety
///
/// `rats` is NULL or live; `seed_text` is NULL or NUL-terminated; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_read_client_new(
    rats: *const hamlyn_rats,
    seed_text: *const c_char,
    max_len: u64,
    out: *mut *mut hamlyn_rats_remote_read_client,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let seed = unsafe { seed_in(seed_text) }?;
        // SAFETY: the function's contract.
        unsafe {
            make(
                rats,
                out,
                |m| {
                    Ok(Inst::RemoteReadClient(
                        RemoteReadClient::from_seed(m, &seed, max_len)?,
                        None,
                    ))
                },
                |held| hamlyn_rats_remote_read_client { held },
            )
        }
    })
}

/// Runs `f` on the reader and its answer taken but not handed out yet.
///
/// # Safety
///
/// `client` is NULL or live.
unsafe fn with_reader<T>(
    client: *const hamlyn_rats_remote_read_client,
    f: impl FnOnce(&mut RemoteReadClient, &mut Option<Vec<u8>>) -> Result<T, hamlyn_result>,
) -> Result<T, hamlyn_result> {
    // SAFETY: the caller's contract.
    let c = unsafe { handle(client) }?;
    c.held.with(|i, _| match i {
        Inst::RemoteReadClient(r, kept) => f(r, kept),
        _ => Err(wrong()),
    })
}

/// Reads `len` bytes at `offset` of the server's slot into `buf`, waiting up to
/// `timeout_ms` (negative: without end) for the answer. `HAMLYN_RESULT_TOO_LONG` past the
/// client's `max_len`; `HAMLYN_RESULT_OUTSIDE_TICKET` past the server's slot, another
/// refusal code (`HAMLYN_RESULT_REJECTED`, ...) if the server's side refused it; `HAMLYN_RESULT_TIMEOUT` when no answer came (the read
/// is then still in flight: `hamlyn_rats_remote_read_ready` and `_take` get it);
/// `HAMLYN_RESULT_STATE` while another read is in flight or not taken.
///
/// # Safety
///
/// `client` is NULL or live; `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_read(
    client: *const hamlyn_rats_remote_read_client,
    offset: u64,
    len: usize,
    timeout_ms: i64,
    buf: *mut u8,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let dst = unsafe { out_bytes(buf, len) }?;
        let got = {
            // SAFETY: the function's contract.
            unsafe {
                with_reader(client, |r, kept| {
                    if kept.is_some() {
                        return Err(hamlyn_result::State);
                    }
                    Ok(r.remote_read(offset, len as u64, crate::timeout(timeout_ms))?)
                })
            }
        }?;
        let part = dst.get_mut(..got.len()).ok_or(hamlyn_result::Panic)?;
        part.copy_from_slice(&got);
        Ok(())
    })
}

/// Starts reading `len` bytes at `offset` of the server's slot and returns at once;
/// `hamlyn_rats_remote_read_ready` says when the answer is there, `_take` collects it.
/// `HAMLYN_RESULT_STATE` while another read is in flight or not taken;
/// `HAMLYN_RESULT_TOO_LONG` past the client's `max_len`.
///
/// # Safety
///
/// `client` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_read_start(
    client: *const hamlyn_rats_remote_read_client,
    offset: u64,
    len: u64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        unsafe {
            with_reader(client, |r, kept| {
                if kept.is_some() {
                    return Err(hamlyn_result::State);
                }
                Ok(r.async_remote_read(offset, len)?)
            })
        }
    })
}

/// Whether the started read has its answer, into `*out_ready` (1 or 0); never blocks.
/// A refusal is its code (`HAMLYN_RESULT_OUTSIDE_TICKET`, ...; the read is over);
/// `HAMLYN_RESULT_STATE` if no read was started.
///
/// # Safety
///
/// `client` is NULL or live; `out_ready` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_read_ready(
    client: *const hamlyn_rats_remote_read_client,
    out_ready: *mut u32,
) -> hamlyn_result {
    guard(|| {
        non_null(out_ready)?;
        // SAFETY: the function's contract.
        let ready = unsafe {
            with_reader(client, |r, kept| {
                if kept.is_some() {
                    return Ok(true);
                }
                Ok(r.ready()?)
            })
        }?;
        // SAFETY: `out_ready` is non-NULL and writable.
        unsafe { put(out_ready, u32::from(ready)) };
        Ok(())
    })
}

/// The answer of the started read, once ready, into `buf` (capacity `cap`); `*out_len`
/// is its length (also written with `HAMLYN_RESULT_BUFFER_TOO_SMALL`: the answer is kept
/// for a larger buffer). The read is then over. `HAMLYN_RESULT_STATE` if no answer is
/// there yet.
///
/// # Safety
///
/// `client` is NULL or live; `buf` is NULL or writable for `cap` bytes; `out_len` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_remote_read_take(
    client: *const hamlyn_rats_remote_read_client,
    buf: *mut u8,
    cap: usize,
    out_len: *mut usize,
) -> hamlyn_result {
    guard(|| {
        non_null(out_len)?;
        let take = |r: &mut RemoteReadClient, kept: &mut Option<Vec<u8>>| {
            let v = match kept.take() {
                Some(v) => v,
                None => r.take()?,
            };
            if !v.is_empty() && buf.is_null() {
                *kept = Some(v);
                return Err(hamlyn_result::NullArgument);
            }
            if v.len() > cap {
                // SAFETY: `out_len` is non-NULL and writable; written even when too
                // small.
                unsafe { put(out_len, v.len()) };
                *kept = Some(v);
                return Err(hamlyn_result::BufferTooSmall);
            }
            Ok(v)
        };
        // SAFETY: the function's contract.
        let got = unsafe { with_reader(client, take) }?;
        // SAFETY: the function's contract.
        let dst = unsafe { out_bytes(buf, got.len()) }?;
        dst.copy_from_slice(&got);
        // SAFETY: `out_len` is non-NULL and writable.
        unsafe { put(out_len, got.len()) };
        Ok(())
    })
}
