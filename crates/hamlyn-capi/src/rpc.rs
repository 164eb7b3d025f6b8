//! RPC over remote memory (hamlyn-rpc, seed 004 §3.1): a server of C procedures (a
//! function pointer and user data each: argument bytes in, result bytes out, and the
//! caller's segment through the context for calls by reference) published under a
//! service name; a client that connects by that name, calls, starts several calls and
//! finishes them, with a timeout.
//!
//! Procedures run inside `hamlyn_rpc_server_serve` on the thread that called it. A call
//! on the same server from inside one of its procedures is `HAMLYN_RESULT_IN_HANDLER`.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::time::Duration;

use hamlyn::Node;
use hamlyn_rpc::{Call, Ctx, Procedure, RpcClient, RpcError, RpcServer};

use crate::{
    free_box, guard, hamlyn_area, hamlyn_node, hamlyn_result, handle, non_null, put, remember,
    text, text_out, Life, Serial,
};

// Literals, so that cbindgen writes them into the header; the tests below hold them to
// the RPC layer's values.
/// Most argument bytes one call carries.
pub const HAMLYN_RPC_MAX_ARGS: usize = 4080;
/// Most result bytes one call returns: a result buffer this long always suffices.
pub const HAMLYN_RPC_MAX_RESULT: usize = 4080;
/// Calls one client may have outstanding at once (its call frames).
pub const HAMLYN_RPC_FRAMES: usize = 8;

/// A procedure written in C: runs inside `hamlyn_rpc_server_serve` on the thread that
/// called it. `args` holds the call's `args_len` argument bytes (valid during the call);
/// the procedure writes its result into `result` (room for `result_cap` bytes, which is
/// `HAMLYN_RPC_MAX_RESULT`) and its length into `*result_len`, and returns 0. Any other
/// return value fails the call: the client gets `HAMLYN_RESULT_HANDLER_FAILED`. `ctx`
/// (valid during the call) reaches the caller's segment of a call by reference.
pub type hamlyn_rpc_procedure_fn = Option<
    unsafe extern "C" fn(
        ctx: *mut hamlyn_rpc_ctx,
        args: *const u8,
        args_len: usize,
        result: *mut u8,
        result_cap: usize,
        result_len: *mut usize,
        user: *mut c_void,
    ) -> i32,
>;

/// One procedure a server offers (`hamlyn_rpc_server_new`): its name, its function and
/// the user pointer it is called with (the caller's; valid as long as the server).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hamlyn_rpc_procedure {
    /// The name clients call it by (NUL-terminated UTF-8, copied).
    pub name: *const c_char,
    /// The function.
    pub func: hamlyn_rpc_procedure_fn,
    /// Passed to `func` as `user`.
    pub user: *mut c_void,
}

/// What a server has done and refused (`hamlyn_rpc_server_counters`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hamlyn_rpc_server_counters {
    /// Clients connected.
    pub connected: u64,
    /// Calls whose procedure ran (successfully or not).
    pub calls: u64,
    /// Calls whose procedure failed.
    pub failed: u64,
    /// Calls naming no procedure.
    pub unknown_procedure: u64,
    /// Call frames whose lengths did not fit.
    pub bad_frames: u64,
    /// Frames rewritten between their notification and the server's read.
    pub mismatched: u64,
    /// Clients whose replies could not be delivered: their frames were freed.
    pub clients_freed: u64,
    /// Reply tickets refused.
    pub bad_reply_tickets: u64,
}

/// What a running procedure may use besides its arguments: the caller's segment (call by
/// reference). Lent for the length of the call: never keep it.
pub struct hamlyn_rpc_ctx {
    /// The running procedure's `Ctx`, its lifetime erased.
    ctx: *mut c_void,
}

/// A C procedure as the server calls it.
struct CProcedure {
    func: unsafe extern "C" fn(
        *mut hamlyn_rpc_ctx,
        *const u8,
        usize,
        *mut u8,
        usize,
        *mut usize,
        *mut c_void,
    ) -> i32,
    user: *mut c_void,
}

// SAFETY: a C procedure and its user pointer are called only on the thread that runs
// `hamlyn_rpc_server_serve`, one call at a time (the server's lock); C code that
// registers one agrees that it runs on whichever thread serves (the header says so at
// `hamlyn_rpc_procedure_fn`).
unsafe impl Send for CProcedure {}

impl CProcedure {
    fn call(&mut self, args: &[u8], ctx: &mut Ctx<'_>) -> Result<Vec<u8>, String> {
        let mut out = vec![0u8; HAMLYN_RPC_MAX_RESULT];
        let mut len = 0usize;
        let mut c = hamlyn_rpc_ctx {
            ctx: std::ptr::from_mut(ctx).cast::<c_void>(),
        };
        // SAFETY: the registrant's contract: `func` is a C procedure of this type; every
        // pointer it gets is valid for the call (`args` for its length, `out` for
        // `out.len()` bytes, `len` and `c` on this stack frame).
        let rc = unsafe {
            (self.func)(
                &mut c,
                args.as_ptr(),
                args.len(),
                out.as_mut_ptr(),
                out.len(),
                &mut len,
                self.user,
            )
        };
        if rc != 0 {
            return Err(format!("the C procedure returned {rc}"));
        }
        if len > out.len() {
            return Err(format!(
                "the C procedure gave a result of {len} bytes, more than {}",
                out.len()
            ));
        }
        out.truncate(len);
        Ok(out)
    }
}

/// An RPC server (`hamlyn_rpc_server_new`, freed by `hamlyn_rpc_server_free`, which
/// withdraws the service). It has a connection of its own to the node's engine.
pub struct hamlyn_rpc_server {
    life: std::sync::Arc<Life>,
    server: Serial<RpcServer>,
}

/// An RPC client connected to one service (`hamlyn_rpc_client_connect`, freed by
/// `hamlyn_rpc_client_free`). It has a connection of its own to the node's engine.
pub struct hamlyn_rpc_client {
    life: std::sync::Arc<Life>,
    inner: Serial<ClientInner>,
}

struct ClientInner {
    client: RpcClient,
    /// Calls started and not finished, by number.
    calls: HashMap<u64, Call>,
    next: u64,
}

// The handles are used from any thread: what they hold must be `Send`.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<RpcServer>();
    send::<RpcClient>();
    send::<Call>();
};

impl From<RpcError> for hamlyn_result {
    fn from(e: RpcError) -> hamlyn_result {
        use hamlyn_result as R;
        use hamlyn_rpc::frame::Status;
        let code = match &e {
            RpcError::Hamlyn(_) | RpcError::Send(_) => {
                let text = e.to_string();
                let code = match e {
                    RpcError::Hamlyn(inner) => R::from(inner),
                    RpcError::Send(inner) => R::from(inner),
                    _ => R::Refused,
                };
                return remember(code, &text);
            }
            RpcError::NoService(_) => R::NotFound,
            RpcError::NoProcedure(_) => R::UnknownHandler,
            RpcError::Busy => R::Full,
            RpcError::TooLong { .. } => R::TooLong,
            RpcError::Refused(Status::UnknownProcedure) => R::UnknownHandler,
            RpcError::Refused(Status::Failed) | RpcError::Procedure(_) => R::HandlerFailed,
            RpcError::Refused(_) | RpcError::Malformed(_) => R::Malformed,
            RpcError::Timeout(_) => R::Timeout,
            RpcError::ServerGone(_) => R::PeerGone,
            RpcError::WrongSize { .. } => R::InvalidArgument,
            _ => R::Refused,
        };
        remember(code, &e)
    }
}

/// A connection of its own to the engine `node` is connected to, with its options.
fn own_connection(node: &Node) -> Result<Node, hamlyn_result> {
    Ok(Node::connect_with(
        node.socket_path(),
        node.options().clone(),
    )?)
}

/// Publishes a server of the `count` procedures at `procedures` as `service` on `node`'s
/// engine (names and functions copied; each `user` stays the caller's). Names must be
/// distinct and non-empty (`HAMLYN_RESULT_INVALID_ARGUMENT`).
///
/// # Safety
///
/// `node` is NULL or live; `service` is NULL or NUL-terminated; `procedures` is NULL or
/// readable for `count` entries whose names are NUL-terminated; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_server_new(
    node: *const hamlyn_node,
    service: *const c_char,
    procedures: *const hamlyn_rpc_procedure,
    count: usize,
    out: *mut *mut hamlyn_rpc_server,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let n = unsafe { handle(node) }?;
        let base = n.get()?;
        // SAFETY: the function's contract.
        let service = unsafe { text(service) }?;
        non_null(out)?;
        if count == 0 {
            return Err(hamlyn_result::InvalidArgument);
        }
        non_null(procedures)?;
        // SAFETY: the function's contract: `count` readable entries.
        let given = unsafe { std::slice::from_raw_parts(procedures, count) };
        let mut procs: Vec<(String, Procedure)> = Vec::with_capacity(count);
        for p in given {
            // SAFETY: the function's contract: each name NULL or NUL-terminated.
            let name = unsafe { text(p.name) }?;
            let func = p.func.ok_or(hamlyn_result::NullArgument)?;
            if name.is_empty() || name.contains('\n') || procs.iter().any(|(n, _)| n == name) {
                return Err(hamlyn_result::InvalidArgument);
            }
            let mut c = CProcedure { func, user: p.user };
            procs.push((
                name.to_owned(),
                Box::new(move |args, ctx| c.call(args, ctx)),
            ));
        }
        let server = RpcServer::publish(own_connection(base)?, service, procs)?;
        let h = Box::into_raw(Box::new(hamlyn_rpc_server {
            life: n.life.clone(),
            server: Serial::new(server),
        }));
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, h) };
        Ok(())
    })
}

/// Serves what arrives within `timeout_ms` (negative: until something does; 0: only what
/// is there): a client's connection or a call, whose procedure runs on this thread.
/// `*out_handled` (may be NULL) is 1 if something was handled, else 0. Clients that
/// disconnect are noticed and their frames freed while the server serves.
///
/// # Safety
///
/// `server` is NULL or live; `out_handled` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_server_serve(
    server: *const hamlyn_rpc_server,
    timeout_ms: i64,
    out_handled: *mut u32,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(server) }?;
        s.life.check()?;
        let t = crate::timeout(timeout_ms);
        let done = s.server.with(|srv| Ok(srv.serve_once(t)?))?;
        if !out_handled.is_null() {
            // SAFETY: `out_handled` is non-NULL and writable.
            unsafe { put(out_handled, u32::from(done)) };
        }
        Ok(())
    })
}

/// Whether call frames are write-inhibited while their procedure runs (on by default:
/// a client scribbling over its frame meanwhile is refused). 0 turns it off.
///
/// # Safety
///
/// `server` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_server_set_protect(
    server: *const hamlyn_rpc_server,
    on: u32,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(server) }?;
        s.life.check()?;
        s.server.with(|srv| {
            srv.set_protect_frames(on != 0);
            Ok(())
        })
    })
}

/// What the server has done so far, and the clients connected now (`out_clients` may be
/// NULL).
///
/// # Safety
///
/// `server` is NULL or live; `out` is NULL or writable; `out_clients` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_server_counters_of(
    server: *const hamlyn_rpc_server,
    out: *mut hamlyn_rpc_server_counters,
    out_clients: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(server) }?;
        s.life.check()?;
        non_null(out)?;
        let (c, clients) = s.server.with(|srv| Ok((srv.counters(), srv.clients())))?;
        let c = hamlyn_rpc_server_counters {
            connected: c.connected,
            calls: c.calls,
            failed: c.failed,
            unknown_procedure: c.unknown_procedure,
            bad_frames: c.bad_frames,
            mismatched: c.mismatched,
            clients_freed: c.clients_freed,
            bad_reply_tickets: c.bad_reply_tickets,
        };
        // SAFETY: `out` is non-NULL and writable; `out_clients` when not NULL.
        unsafe {
            put(out, c);
            if !out_clients.is_null() {
                put(out_clients, clients);
            }
        }
        Ok(())
    })
}

/// Frees a server (NULL: nothing): its service leaves the registry and its clients' calls
/// fail with `HAMLYN_RESULT_PEER_GONE`. Never from inside one of its procedures.
///
/// # Safety
///
/// `server` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_server_free(server: *mut hamlyn_rpc_server) {
    // SAFETY: the function's contract.
    unsafe { free_box(server) }
}

// ----- the context a procedure runs with -----

/// Runs `f` on the context behind `ctx`.
///
/// # Safety
///
/// `ctx` is NULL or the context of a procedure that is running.
unsafe fn with_ctx<T>(
    ctx: *mut hamlyn_rpc_ctx,
    f: impl FnOnce(&mut Ctx<'_>) -> Result<T, hamlyn_result>,
) -> Result<T, hamlyn_result> {
    // SAFETY: the caller's contract: NULL or the running procedure's context.
    let c = unsafe { ctx.as_mut() }.ok_or(hamlyn_result::NullArgument)?;
    // SAFETY: as above: the `Ctx` it points to is alive while the procedure runs.
    f(unsafe { &mut *c.ctx.cast::<Ctx<'_>>() })
}

/// Bytes of the caller's segment: `HAMLYN_RESULT_STATE` if the call named none (not a
/// call by reference).
///
/// # Safety
///
/// `ctx` is NULL or the running procedure's context; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_ctx_segment_len(
    ctx: *mut hamlyn_rpc_ctx,
    out: *mut u64,
) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        // SAFETY: the function's contract.
        let len = unsafe { with_ctx(ctx, |c| c.segment_len().ok_or(hamlyn_result::State)) }?;
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, len) };
        Ok(())
    })
}

/// Reads `len` bytes at `offset` of the caller's segment into `buf` (remote reads; the
/// engine checks the caller's ticket). `HAMLYN_RESULT_STATE` without a segment,
/// `HAMLYN_RESULT_REJECTED` if the reads fail (outside the segment: `hamlyn_last_error`
/// says why).
///
/// # Safety
///
/// `ctx` is NULL or the running procedure's context; `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_ctx_read(
    ctx: *mut hamlyn_rpc_ctx,
    offset: u64,
    buf: *mut u8,
    len: usize,
) -> hamlyn_result {
    guard(|| {
        if len > 0 {
            non_null(buf)?;
        }
        // SAFETY: the function's contract.
        let bytes = unsafe {
            with_ctx(ctx, |c| {
                c.segment_len().ok_or(hamlyn_result::State)?;
                c.read(offset, len)
                    .map_err(|e| remember(hamlyn_result::Rejected, &e))
            })
        }?;
        if bytes.len() != len {
            return Err(remember(hamlyn_result::Rejected, &"segment read cut short"));
        }
        if len > 0 {
            // SAFETY: `buf` is non-NULL and writable for `len` bytes; `bytes` is ours.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf, len) };
        }
        Ok(())
    })
}

/// Writes the `len` bytes at `data` at `offset` of the caller's segment (remote writes;
/// the client counts them in before its call returns). Errors as `hamlyn_rpc_ctx_read`.
///
/// # Safety
///
/// `ctx` is NULL or the running procedure's context; `data` is readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_ctx_write(
    ctx: *mut hamlyn_rpc_ctx,
    offset: u64,
    data: *const u8,
    len: usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let bytes = unsafe { crate::bytes(data, len) }?;
        // SAFETY: the function's contract.
        unsafe {
            with_ctx(ctx, |c| {
                c.segment_len().ok_or(hamlyn_result::State)?;
                c.write(offset, bytes)
                    .map_err(|e| remember(hamlyn_result::Rejected, &e))
            })
        }
    })
}

// ----- clients -----

/// Connects to the service published as `service`, through a connection of its own to
/// `node`'s engine, waiting up to `timeout_ms` (negative: 30 s) for the server to answer.
/// `HAMLYN_RESULT_NOT_FOUND` if no such service is published. Calls time out after 30 s
/// unless `hamlyn_rpc_client_set_timeout` says otherwise.
///
/// # Safety
///
/// `node` is NULL or live; `service` is NULL or NUL-terminated; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_client_connect(
    node: *const hamlyn_node,
    service: *const c_char,
    timeout_ms: i64,
    out: *mut *mut hamlyn_rpc_client,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let n = unsafe { handle(node) }?;
        let base = n.get()?;
        // SAFETY: the function's contract.
        let service = unsafe { text(service) }?;
        non_null(out)?;
        let t = crate::timeout(timeout_ms).unwrap_or(Duration::from_secs(30));
        let client = RpcClient::connect(own_connection(base)?, service, t)?;
        let h = Box::into_raw(Box::new(hamlyn_rpc_client {
            life: n.life.clone(),
            inner: Serial::new(ClientInner {
                client,
                calls: HashMap::new(),
                next: 1,
            }),
        }));
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, h) };
        Ok(())
    })
}

impl hamlyn_rpc_client {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut ClientInner) -> Result<T, hamlyn_result>,
    ) -> Result<T, hamlyn_result> {
        self.life.check()?;
        self.inner.with(f)
    }
}

/// How long a call waits for its reply from now on (`timeout_ms` > 0).
///
/// # Safety
///
/// `client` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_client_set_timeout(
    client: *const hamlyn_rpc_client,
    timeout_ms: u64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let c = unsafe { handle(client) }?;
        if timeout_ms == 0 {
            return Err(hamlyn_result::InvalidArgument);
        }
        c.with(|i| {
            i.client.set_timeout(Duration::from_millis(timeout_ms));
            Ok(())
        })
    })
}

/// The name of the service's procedure `index` (0-based) and a NUL into `buf` (capacity
/// `cap`); `*out_needed` (may be NULL) is the length it needs, also written with
/// `HAMLYN_RESULT_BUFFER_TOO_SMALL`. `HAMLYN_RESULT_OUT_OF_RANGE` past the last one.
///
/// # Safety
///
/// `client` is NULL or live; `buf` is NULL or writable for `cap` bytes; `out_needed` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_client_procedure(
    client: *const hamlyn_rpc_client,
    index: usize,
    buf: *mut c_char,
    cap: usize,
    out_needed: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let c = unsafe { handle(client) }?;
        let name = c.with(|i| {
            i.client
                .procedures()
                .get(index)
                .cloned()
                .ok_or(hamlyn_result::OutOfRange)
        })?;
        // SAFETY: the function's contract.
        unsafe { text_out(&name, buf, cap, out_needed) }
    })
}

/// Writes `result` into `buf` (capacity `cap`) and its length into `*out_len`.
///
/// # Safety
///
/// `buf` is NULL or writable for `cap` bytes; `out_len` is non-NULL and writable.
unsafe fn result_out(
    result: &[u8],
    buf: *mut u8,
    cap: usize,
    out_len: *mut usize,
) -> Result<(), hamlyn_result> {
    // SAFETY: the caller's contract. Written even when the buffer is too small.
    unsafe { put(out_len, result.len()) };
    if result.len() > cap {
        return Err(hamlyn_result::BufferTooSmall);
    }
    if !result.is_empty() {
        non_null(buf)?;
        // SAFETY: `buf` is non-NULL and writable for `cap >= result.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(result.as_ptr(), buf, result.len()) };
    }
    Ok(())
}

/// Calls `procedure` with the `args_len` bytes at `args` and waits for its result (up to
/// the client's timeout): the result goes to `result` (capacity `result_cap`;
/// `HAMLYN_RPC_MAX_RESULT` always suffices) and its length to `*out_len`. A longer result
/// than `result_cap` is `HAMLYN_RESULT_BUFFER_TOO_SMALL` with its length in `*out_len`,
/// and is lost (the call is over). Errors: `HAMLYN_RESULT_UNKNOWN_HANDLER` (no such
/// procedure), `HAMLYN_RESULT_TOO_LONG`, `HAMLYN_RESULT_FULL` (every frame busy with
/// started calls), `HAMLYN_RESULT_HANDLER_FAILED`, `HAMLYN_RESULT_TIMEOUT`,
/// `HAMLYN_RESULT_PEER_GONE` (the server is gone).
///
/// # Safety
///
/// `client` is NULL or live; `procedure` is NULL or NUL-terminated; `args` is readable
/// for `args_len` bytes; `result` is NULL or writable for `result_cap` bytes; `out_len`
/// is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_client_call(
    client: *const hamlyn_rpc_client,
    procedure: *const c_char,
    args: *const u8,
    args_len: usize,
    result: *mut u8,
    result_cap: usize,
    out_len: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let c = unsafe { handle(client) }?;
        // SAFETY: the function's contract.
        let procedure = unsafe { text(procedure) }?;
        // SAFETY: the function's contract.
        let args = unsafe { crate::bytes(args, args_len) }?;
        non_null(out_len)?;
        let r = c.with(|i| Ok(i.client.call(procedure, args)?))?;
        // SAFETY: the function's contract; `out_len` checked.
        unsafe { result_out(&r, result, result_cap, out_len) }
    })
}

/// An area of `len` bytes on the client's own connection: the memory a call by reference
/// (`hamlyn_rpc_client_call_by_ref`) names (an area of another connection is
/// `HAMLYN_RESULT_FOREIGN_OBJECT` there). Read and write it with `hamlyn_area_*`; free
/// it with `hamlyn_area_free`.
///
/// # Safety
///
/// `client` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_client_area_new(
    client: *const hamlyn_rpc_client,
    len: u64,
    out: *mut *mut hamlyn_area,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let c = unsafe { handle(client) }?;
        non_null(out)?;
        let area = c.with(|i| Ok(i.client.node().area(len)?))?;
        let h = Box::into_raw(Box::new(hamlyn_area {
            life: c.life.clone(),
            area,
        }));
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, h) };
        Ok(())
    })
}

/// As `hamlyn_rpc_client_call`, by reference: the procedure may read and write the
/// client's `area` (the whole of it; made by `hamlyn_rpc_client_area_new`) through its
/// context while it runs; its writes have landed when this returns.
///
/// # Safety
///
/// As `hamlyn_rpc_client_call`; `area` is NULL or live.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // The C signature: one value per argument.
pub unsafe extern "C" fn hamlyn_rpc_client_call_by_ref(
    client: *const hamlyn_rpc_client,
    procedure: *const c_char,
    args: *const u8,
    args_len: usize,
    area: *const hamlyn_area,
    result: *mut u8,
    result_cap: usize,
    out_len: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let c = unsafe { handle(client) }?;
        // SAFETY: the function's contract.
        let procedure = unsafe { text(procedure) }?;
        // SAFETY: the function's contract.
        let args = unsafe { crate::bytes(args, args_len) }?;
        // SAFETY: the function's contract.
        let area = unsafe { handle(area) }?.get()?;
        non_null(out_len)?;
        let r = c.with(|i| {
            let seg = i.client.segment(area)?;
            Ok(i.client.call_by_ref(procedure, args, &seg)?)
        })?;
        // SAFETY: the function's contract; `out_len` checked.
        unsafe { result_out(&r, result, result_cap, out_len) }
    })
}

/// Starts a call of `procedure` with the `args_len` bytes at `args` (copied before this
/// returns) without waiting: `*out_call` is its number, for
/// `hamlyn_rpc_client_finish`. Up to `HAMLYN_RPC_FRAMES` calls may be outstanding; one
/// more is `HAMLYN_RESULT_FULL` (finish one first).
///
/// # Safety
///
/// `client` is NULL or live; `procedure` is NULL or NUL-terminated; `args` is readable
/// for `args_len` bytes; `out_call` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_client_start(
    client: *const hamlyn_rpc_client,
    procedure: *const c_char,
    args: *const u8,
    args_len: usize,
    out_call: *mut u64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let c = unsafe { handle(client) }?;
        // SAFETY: the function's contract.
        let procedure = unsafe { text(procedure) }?;
        // SAFETY: the function's contract.
        let args = unsafe { crate::bytes(args, args_len) }?;
        non_null(out_call)?;
        let id = c.with(|i| {
            let call = i.client.start(procedure, args)?;
            let id = i.next;
            i.next += 1;
            i.calls.insert(id, call);
            Ok(id)
        })?;
        // SAFETY: `out_call` is non-NULL and writable.
        unsafe { put(out_call, id) };
        Ok(())
    })
}

/// Waits (up to the client's timeout) for the result of started call `call`, as
/// `hamlyn_rpc_client_call` returns it. The call is over when this returns, whatever it
/// returns (its frame is free again); `HAMLYN_RESULT_NO_CALL` if `call` is not an
/// outstanding call of this client.
///
/// # Safety
///
/// `client` is NULL or live; `result` is NULL or writable for `result_cap` bytes;
/// `out_len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_client_finish(
    client: *const hamlyn_rpc_client,
    call: u64,
    result: *mut u8,
    result_cap: usize,
    out_len: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let c = unsafe { handle(client) }?;
        non_null(out_len)?;
        let r = c.with(|i| {
            let call = i.calls.remove(&call).ok_or(hamlyn_result::NoCall)?;
            Ok(i.client.finish(call)?)
        })?;
        // SAFETY: the function's contract; `out_len` checked.
        unsafe { result_out(&r, result, result_cap, out_len) }
    })
}

/// Frees a client (NULL: nothing): its calls still outstanding are abandoned, and the
/// server frees its frames.
///
/// # Safety
///
/// `client` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rpc_client_free(client: *mut hamlyn_rpc_client) {
    // SAFETY: the function's contract.
    unsafe { free_box(client) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_constants_are_the_rpc_layers() {
        assert_eq!(HAMLYN_RPC_MAX_ARGS, hamlyn_rpc::MAX_ARGS);
        assert_eq!(HAMLYN_RPC_MAX_RESULT, hamlyn_rpc::MAX_RESULT);
        assert_eq!(HAMLYN_RPC_FRAMES, hamlyn_rpc::FRAMES);
    }
}
