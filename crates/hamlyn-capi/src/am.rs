//! Active messages (hamlyn-am, seed 003 GRIM): an endpoint, handlers written in C
//! (a function pointer and user data) registered by name with the fingerprint of their
//! argument layout, the cluster's handler table, short / bulk / memory messages, replies
//! and remote completion.
//!
//! Handlers run inside `hamlyn_am_poll` (and inside the calls that wait: `hamlyn_am_wait`,
//! `hamlyn_am_call`, `hamlyn_am_connect`), on the thread that called it, never as an
//! upcall. The endpoint and everything made from it (regions, targets) share one lock:
//! the layers below are single-threaded objects, so every call takes it, and a call on
//! the endpoint from inside one of its own handlers is `HAMLYN_RESULT_IN_HANDLER`, never
//! a deadlock.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_void};
use std::sync::Arc;
use std::time::Duration;

use ::hamlyn_am::{
    Addr, AmEndpoint, AmOptions, CallId, Ctx, MemoryRegion, MemoryTarget, Outcome, Want,
};
use hamlyn::{Node, NodeId};

use crate::{
    free_box, guard, hamlyn_node, hamlyn_result, hamlyn_send, handle, non_null, put, text,
    text_out, Life, Serial,
};

/// `hamlyn_am_addr.client` naming a node's engine itself, which runs the
/// engine-resident handlers (`hamlyn.ping`, `hamlyn.echo`, `hamlyn.counter`,
/// `hamlyn.stats`).
pub const HAMLYN_AM_ENGINE_CLIENT: u32 = u32::MAX;

/// What a sender waits for (`want` of the sends): nothing (a failure still comes back
/// through `hamlyn_am_next_failure`).
pub const HAMLYN_AM_WANT_NOTHING: u32 = 0;
/// What a sender waits for: remote completion (the handler ran).
pub const HAMLYN_AM_WANT_ACK: u32 = 1;
/// What a sender waits for: the handler's reply.
pub const HAMLYN_AM_WANT_REPLY: u32 = 2;

/// How a waited-for call ended (`hamlyn_am_wait`): the handler ran (remote completion).
pub const HAMLYN_AM_OUTCOME_DONE: u32 = 1;
/// How a waited-for call ended: the handler replied (the reply's four arguments).
pub const HAMLYN_AM_OUTCOME_REPLY: u32 = 2;

/// Where an active-message endpoint is: its node and its connection (client id) on that
/// node's engine. `client == HAMLYN_AM_ENGINE_CLIENT` names the node's engine.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hamlyn_am_addr {
    /// The node.
    pub node: u32,
    /// The endpoint's client id on that node (or `HAMLYN_AM_ENGINE_CLIENT`).
    pub client: u32,
}

impl From<Addr> for hamlyn_am_addr {
    fn from(a: Addr) -> hamlyn_am_addr {
        hamlyn_am_addr {
            node: a.node.0,
            client: a.client,
        }
    }
}

impl From<hamlyn_am_addr> for Addr {
    fn from(a: hamlyn_am_addr) -> Addr {
        Addr {
            node: NodeId(a.node),
            client: a.client,
        }
    }
}

/// A handler as the cluster numbers it (`hamlyn_am_handler_by_name`): what a message
/// names.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hamlyn_am_handler_id {
    /// Dense, cluster-wide.
    pub id: u32,
    /// Moves on each time the name becomes live again after nobody had it.
    pub epoch: u32,
}

/// How an active-message endpoint is sized (`hamlyn_am_new`). All zeros is valid: every
/// zero field takes the library's default.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hamlyn_am_options {
    /// Most peers it links with (0: the default, 16).
    pub max_peers: u32,
    /// Short messages a peer may have in flight to it (1..=16; 0: the default).
    pub short_credits: u32,
    /// Bulk messages a peer may have in flight to it (1..=16; 0: the default).
    pub bulk_credits: u32,
    /// The largest bulk payload in bytes (0: the default, 64 KiB).
    pub bulk_max: u64,
}

impl hamlyn_am_options {
    fn to_options(self) -> AmOptions {
        let d = AmOptions::default();
        let or = |v: u32, default: u32| if v == 0 { default } else { v };
        AmOptions {
            max_peers: or(self.max_peers, d.max_peers),
            short_credits: or(self.short_credits, d.short_credits),
            bulk_credits: or(self.bulk_credits, d.bulk_credits),
            bulk_max: if self.bulk_max == 0 {
                d.bulk_max
            } else {
                self.bulk_max
            },
        }
    }
}

/// Endpoint-wide counters (`hamlyn_am_counters`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hamlyn_am_counters {
    /// Messages whose handler ran here.
    pub handled: u64,
    /// Messages refused here for naming no handler of this process (forged or gone ids).
    pub unknown_handler: u64,
    /// Messages refused here for naming an old epoch of a handler.
    pub stale_epoch: u64,
    /// Messages that did not parse (lying lengths, bad kinds): no handler ran.
    pub malformed: u64,
    /// Replies, acks or errors for calls not outstanding here: refused.
    pub reply_refused: u64,
    /// Sends refused for want of credit (back-pressure seen here).
    pub full: u64,
}

/// What happened to one handler of this process (`hamlyn_am_handler_counters`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hamlyn_am_handler_counters {
    /// Times it ran.
    pub calls: u64,
    /// Replies it gave.
    pub replies: u64,
    /// Times it returned non-zero (or gave no reply that was asked for).
    pub errors: u64,
    /// Messages naming it refused here without running it.
    pub refused: u64,
}

/// A handler written in C: runs inside `hamlyn_am_poll` (or a call that waits) on the
/// thread that called it, with the message's context and the `user` pointer given at
/// registration. `ctx` is valid only until the handler returns. Returns 0 on success;
/// any other value goes back to the sender as an error completion
/// (`HAMLYN_RESULT_HANDLER_FAILED`). Inside it, use the `hamlyn_am_ctx_*` calls; a call
/// on the same endpoint returns `HAMLYN_RESULT_IN_HANDLER`.
pub type hamlyn_am_handler_fn =
    Option<unsafe extern "C" fn(ctx: *mut hamlyn_am_ctx, user: *mut c_void) -> i32>;

/// The context a handler runs with: the message (arguments, channel, sender, payload)
/// and its reply token. Lent to the handler for the length of its call: never keep it.
pub struct hamlyn_am_ctx {
    /// The `Ctx` of the running handler, its lifetime erased (it outlives this value,
    /// which lives on the handler's stack frame).
    ctx: *mut c_void,
}

impl hamlyn_am_ctx {
    /// # Safety
    ///
    /// `self.ctx` is the live `Ctx` the handler was called with.
    unsafe fn get(&mut self) -> &mut Ctx<'_> {
        // SAFETY: the caller's contract: `ctx` points to the `Ctx` borrowed for the
        // handler's call, which is still running.
        unsafe { &mut *self.ctx.cast::<Ctx<'_>>() }
    }
}

/// An endpoint and what the C layer keeps beside it. Everything in it shares one
/// single-threaded manager (`Rc` inside): it is only touched under `Shared::inner`'s lock.
struct Inner {
    /// `None` once `hamlyn_am_free` freed the endpoint handle (its regions and targets
    /// may outlive it).
    ep: Option<AmEndpoint>,
    /// Failures of messages nobody waits for, taken from the endpoint, oldest first.
    failures: VecDeque<(u64, hamlyn_result)>,
    regions: HashMap<u64, MemoryRegion>,
    targets: HashMap<u64, MemoryTarget>,
    next_key: u64,
}

impl Inner {
    fn ep(&mut self) -> Result<&mut AmEndpoint, hamlyn_result> {
        self.ep.as_mut().ok_or(hamlyn_result::Closed)
    }
}

/// The endpoint's lock, shared by the endpoint handle and the regions and targets made
/// from it.
struct Shared {
    inner: Serial<Inner>,
}

// SAFETY: `Inner` is not `Send` for two reasons, both handled here. (1) The endpoint,
// its regions and targets share a manager through `Rc`/`RefCell`: every one of them
// lives inside `Inner`, which is reached only through `inner`'s lock (and dropped when
// the last `Arc<Shared>` goes, by then exclusively), so no two threads ever touch those
// counts or cells at once. (2) The handlers hold C function pointers and C user data:
// C code that registers a handler agrees that it runs on whichever thread polls the
// endpoint (the header says so at `hamlyn_am_handler_fn`).
unsafe impl Send for Shared {}
// SAFETY: as above: shared references to `Shared` reach `Inner` only through its lock.
unsafe impl Sync for Shared {}

impl Shared {
    /// Runs `f` with the endpoint locked (`InHandler` from inside its own handlers).
    fn with<T>(
        &self,
        f: impl FnOnce(&mut Inner) -> Result<T, hamlyn_result>,
    ) -> Result<T, hamlyn_result> {
        self.inner.with(f)
    }
}

/// An active-message endpoint (`hamlyn_am_new`, freed by `hamlyn_am_free`). It has a
/// connection of its own to the node's engine. Usable from any thread, one call at a
/// time (a lock inside); its handlers run on the thread that polls.
pub struct hamlyn_am {
    life: Arc<Life>,
    shared: Arc<Shared>,
}

impl hamlyn_am {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut Inner) -> Result<T, hamlyn_result>,
    ) -> Result<T, hamlyn_result> {
        self.life.check()?;
        self.shared.with(f)
    }
}

/// A region of an endpoint's memory that memory messages copy into
/// (`hamlyn_am_region_new`, freed by `hamlyn_am_region_free`).
pub struct hamlyn_am_region {
    life: Arc<Life>,
    shared: Arc<Shared>,
    key: u64,
    len: u64,
}

/// The sending side of memory messages to one region (`hamlyn_am_target_new`, freed by
/// `hamlyn_am_target_free`).
pub struct hamlyn_am_target {
    life: Arc<Life>,
    shared: Arc<Shared>,
    key: u64,
}

/// A C timeout in milliseconds for calls that take a `Duration`: negative waits (in
/// effect) forever.
fn bounded(ms: i64) -> Duration {
    crate::timeout(ms).unwrap_or(Duration::from_secs(1 << 32))
}

/// The four `u64` at `p`.
///
/// # Safety
///
/// `p` is NULL or readable for four `u64`.
unsafe fn args_in(p: *const u64) -> Result<[u64; 4], hamlyn_result> {
    non_null(p)?;
    // SAFETY: the caller's contract: four readable, aligned u64.
    Ok(unsafe { p.cast::<[u64; 4]>().read() })
}

fn want_of(want: u32) -> Result<Want, hamlyn_result> {
    match want {
        HAMLYN_AM_WANT_NOTHING => Ok(Want::Nothing),
        HAMLYN_AM_WANT_ACK => Ok(Want::Ack),
        HAMLYN_AM_WANT_REPLY => Ok(Want::Reply),
        _ => Err(hamlyn_result::InvalidArgument),
    }
}

fn hid(h: hamlyn_am_handler_id) -> ::hamlyn_am::HandlerId {
    ::hamlyn_am::HandlerId {
        id: h.id,
        epoch: h.epoch,
    }
}

/// Makes an active-message endpoint on `node`'s engine (a connection of its own, with
/// the node's options); `options` may be NULL (the defaults). Freeing `node` closes it
/// (`HAMLYN_RESULT_CLOSED`).
///
/// # Safety
///
/// `node` is NULL or live; `options` is NULL or valid; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_new(
    node: *const hamlyn_node,
    options: *const hamlyn_am_options,
    out: *mut *mut hamlyn_am,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let n = unsafe { handle(node) }?;
        let base = n.get()?;
        non_null(out)?;
        // SAFETY: the function's contract: NULL or valid.
        let o = unsafe { options.as_ref() }.copied().unwrap_or_default();
        let own = Node::connect_with(base.socket_path(), base.options().clone())?;
        let ep = AmEndpoint::new(own, o.to_options())?;
        let h = Box::into_raw(Box::new(hamlyn_am {
            life: n.life.clone(),
            shared: Arc::new(Shared {
                inner: Serial::new(Inner {
                    ep: Some(ep),
                    failures: VecDeque::new(),
                    regions: HashMap::new(),
                    targets: HashMap::new(),
                    next_key: 1,
                }),
            }),
        }));
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, h) };
        Ok(())
    })
}

/// Frees an endpoint (NULL: nothing): its handlers and its connection are gone at once;
/// regions and targets made from it stay usable until freed. Never from inside one of
/// its own handlers.
///
/// # Safety
///
/// `am` is NULL or a live endpoint, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_free(am: *mut hamlyn_am) {
    // SAFETY: the function's contract.
    if let Ok(a) = unsafe { handle(am.cast_const()) } {
        // Dropped under the lock its regions and targets share (see `Inner`).
        let _ = guard(|| {
            a.shared.with(|i| {
                drop(i.ep.take());
                Ok(())
            })
        });
    }
    // SAFETY: the function's contract.
    unsafe { free_box(am) }
}

/// Where the endpoint is: what other processes send to.
///
/// # Safety
///
/// `am` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_addr_of(
    am: *const hamlyn_am,
    out: *mut hamlyn_am_addr,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        non_null(out)?;
        let addr = a.with(|i| Ok(i.ep()?.addr()))?;
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, addr.into()) };
        Ok(())
    })
}

/// The fingerprint of an argument layout described as text (for example
/// `"u64 len, u64 seed; payload bytes"`): the same function Rust handlers use, so a C
/// and a Rust handler of one layout agree.
///
/// # Safety
///
/// `layout` is NULL or NUL-terminated; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_fingerprint(
    layout: *const c_char,
    out: *mut u64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let l = unsafe { text(layout) }?;
        non_null(out)?;
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, ::hamlyn_am::fingerprint(l)) };
        Ok(())
    })
}

/// Registers the C handler `handler` (called with `user`) locally under `name` with the
/// argument fingerprint `fingerprint`; the cluster numbers it at the next
/// `hamlyn_am_synch`. `user` belongs to the caller and must stay valid until the handler
/// is unregistered or the endpoint freed. `HAMLYN_RESULT_INVALID_ARGUMENT` for an empty,
/// too long or already registered name.
///
/// # Safety
///
/// `am` is NULL or live; `name` is NULL or NUL-terminated; `handler` is NULL or a
/// function of that type; `user` is whatever the handler expects.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_register(
    am: *const hamlyn_am,
    name: *const c_char,
    fingerprint: u64,
    handler: hamlyn_am_handler_fn,
    user: *mut c_void,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        // SAFETY: the function's contract.
        let name = unsafe { text(name) }?;
        let f = handler.ok_or(hamlyn_result::NullArgument)?;
        a.with(|i| {
            i.ep()?
                .register(name, fingerprint, move |ctx: &mut Ctx<'_>| {
                    let mut c = hamlyn_am_ctx {
                        ctx: (ctx as *mut Ctx<'_>).cast::<c_void>(),
                    };
                    // SAFETY: the registrant's contract: `f` is a C handler that takes this
                    // context (valid for the call) and its own `user`.
                    match unsafe { f(&mut c, user) } {
                        0 => Ok(()),
                        rc => Err(format!("the C handler returned {rc}")),
                    }
                })?;
            Ok(())
        })
    })
}

/// Removes a local handler at once: a message for it fails here from now on and its
/// sender gets `HAMLYN_RESULT_HANDLER_GONE`. The cluster hears at the next synch.
///
/// # Safety
///
/// `am` is NULL or live; `name` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_unregister(
    am: *const hamlyn_am,
    name: *const c_char,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        // SAFETY: the function's contract.
        let name = unsafe { text(name) }?;
        a.with(|i| Ok(i.ep()?.unregister(name)?))
    })
}

/// Sends the local handler list's changes to the cluster's registry node, which numbers
/// new names, and fetches the cluster's table back. A name the cluster has with another
/// fingerprint is `HAMLYN_RESULT_COLLISION` (that handler is dropped here; the others
/// are registered; `hamlyn_last_error` names it).
///
/// # Safety
///
/// `am` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_synch(am: *const hamlyn_am) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        a.with(|i| Ok(i.ep()?.synch()?))
    })
}

/// Fetches the cluster's handler table (a late joiner's first step).
///
/// # Safety
///
/// `am` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_refresh(am: *const hamlyn_am) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        a.with(|i| Ok(i.ep()?.refresh()?))
    })
}

/// A live handler's id by name, from the local copy of the cluster's table
/// (`HAMLYN_RESULT_UNKNOWN_HANDLER` if it has none: synch or refresh first).
///
/// # Safety
///
/// `am` is NULL or live; `name` is NULL or NUL-terminated; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_handler_by_name(
    am: *const hamlyn_am,
    name: *const c_char,
    out: *mut hamlyn_am_handler_id,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        // SAFETY: the function's contract.
        let name = unsafe { text(name) }?;
        non_null(out)?;
        let h = a.with(|i| Ok(i.ep()?.handler_by_name(name)?))?;
        // SAFETY: `out` is non-NULL and writable.
        unsafe {
            put(
                out,
                hamlyn_am_handler_id {
                    id: h.id,
                    epoch: h.epoch,
                },
            )
        };
        Ok(())
    })
}

/// Opens a logical channel served at `priority` (0 first): a terminus of the endpoint's
/// own; `*out` is its number, which travels with every message sent on it. Channel 0 is
/// always open.
///
/// # Safety
///
/// `am` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_open_channel(
    am: *const hamlyn_am,
    priority: u8,
    out: *mut u16,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        non_null(out)?;
        let c = a.with(|i| Ok(i.ep()?.open_channel(priority)?))?;
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, c) };
        Ok(())
    })
}

/// Links with the endpoint at `peer` (the first send does it too), waiting up to
/// `timeout_ms` (negative: without end); runs this endpoint's handlers meanwhile.
///
/// # Safety
///
/// `am` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_connect(
    am: *const hamlyn_am,
    peer: hamlyn_am_addr,
    timeout_ms: i64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        a.with(|i| Ok(i.ep()?.connect(peer.into(), bounded(timeout_ms))?))
    })
}

/// Sends a short message (handler, logical channel, the four `u64` at `args`; one
/// packet) to `to`. `want` is `HAMLYN_AM_WANT_*`; with ACK or REPLY, wait for it with
/// `hamlyn_am_wait(*out_call)`. `out_call` may be NULL. `HAMLYN_RESULT_FULL` when the
/// link has no credit (nothing sent: poll, and send again).
///
/// # Safety
///
/// `am` is NULL or live; `args` is NULL or readable for four `u64`; `out_call` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_send_short(
    am: *const hamlyn_am,
    to: hamlyn_am_addr,
    handler: hamlyn_am_handler_id,
    channel: u16,
    args: *const u64,
    want: u32,
    out_call: *mut u64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        // SAFETY: the function's contract.
        let args = unsafe { args_in(args) }?;
        let want = want_of(want)?;
        let call = a.with(|i| {
            Ok(i.ep()?
                .send_short(to.into(), hid(handler), channel, args, want)?)
        })?;
        if !out_call.is_null() {
            // SAFETY: `out_call` is non-NULL and writable.
            unsafe { put(out_call, call.0) };
        }
        Ok(())
    })
}

/// Sends a bulk message: the four `u64` at `args` and the `len` bytes at `payload` (up
/// to the receiver's bulk maximum, else `HAMLYN_RESULT_TOO_LONG`), copied before the call
/// returns. The receiving handler sees the payload in place (`hamlyn_am_ctx_payload`).
/// `HAMLYN_RESULT_FULL` when the link has no bulk credit. `out_call` may be NULL.
///
/// # Safety
///
/// As `hamlyn_am_send_short`; `payload` is readable for `len` bytes.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // The C signature: one value per argument.
pub unsafe extern "C" fn hamlyn_am_send_bulk(
    am: *const hamlyn_am,
    to: hamlyn_am_addr,
    handler: hamlyn_am_handler_id,
    channel: u16,
    args: *const u64,
    payload: *const u8,
    len: usize,
    want: u32,
    out_call: *mut u64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        // SAFETY: the function's contract.
        let args = unsafe { args_in(args) }?;
        // SAFETY: the function's contract.
        let payload = unsafe { crate::bytes(payload, len) }?;
        let want = want_of(want)?;
        let call = a.with(|i| {
            Ok(i.ep()?
                .send_bulk(to.into(), hid(handler), channel, args, payload, want)?)
        })?;
        if !out_call.is_null() {
            // SAFETY: `out_call` is non-NULL and writable.
            unsafe { put(out_call, call.0) };
        }
        Ok(())
    })
}

/// Waits up to `timeout_ms` (negative: without end) for call `call` (sent with ACK or
/// REPLY), running this endpoint's handlers meanwhile. `*out_outcome` is
/// `HAMLYN_AM_OUTCOME_DONE` or `_REPLY`; with a reply, `out_reply` (four `u64`, may be
/// NULL) gets its arguments (zeros with DONE). Errors: `HAMLYN_RESULT_TIMEOUT` (the call
/// stays outstanding), `HAMLYN_RESULT_NO_CALL`, `HAMLYN_RESULT_HANDLER_GONE`,
/// `HAMLYN_RESULT_HANDLER_FAILED`, `HAMLYN_RESULT_PEER_GONE`.
///
/// # Safety
///
/// `am` is NULL or live; `out_outcome` is NULL or writable; `out_reply` is NULL or
/// writable for four `u64`.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_wait(
    am: *const hamlyn_am,
    call: u64,
    timeout_ms: i64,
    out_outcome: *mut u32,
    out_reply: *mut u64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        non_null(out_outcome)?;
        let o = a.with(|i| Ok(i.ep()?.wait(CallId(call), bounded(timeout_ms))?))?;
        let (kind, reply) = match o {
            Outcome::Done => (HAMLYN_AM_OUTCOME_DONE, [0; 4]),
            Outcome::Reply(r) => (HAMLYN_AM_OUTCOME_REPLY, r),
        };
        // SAFETY: `out_outcome` is non-NULL and writable; `out_reply`, when not NULL,
        // is writable for four u64 (the contract).
        unsafe {
            put(out_outcome, kind);
            if !out_reply.is_null() {
                put(out_reply.cast::<[u64; 4]>(), reply);
            }
        }
        Ok(())
    })
}

/// A short message wanting a reply, waited for up to `timeout_ms` (negative: without
/// end; sends again while the link is full): the reply's four arguments go to
/// `out_reply`.
///
/// # Safety
///
/// `am` is NULL or live; `args` is NULL or readable for four `u64`; `out_reply` is NULL
/// or writable for four `u64`.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_call(
    am: *const hamlyn_am,
    to: hamlyn_am_addr,
    handler: hamlyn_am_handler_id,
    channel: u16,
    args: *const u64,
    timeout_ms: i64,
    out_reply: *mut u64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        // SAFETY: the function's contract.
        let args = unsafe { args_in(args) }?;
        non_null(out_reply)?;
        let r = a.with(|i| {
            Ok(i.ep()?
                .call(to.into(), hid(handler), channel, args, bounded(timeout_ms))?)
        })?;
        // SAFETY: `out_reply` is non-NULL and writable for four u64.
        unsafe { put(out_reply.cast::<[u64; 4]>(), r) };
        Ok(())
    })
}

/// Runs the handlers of what arrived (GRIM's `grim_poll`), waiting up to `timeout_ms`
/// (negative: until something arrives; 0: not at all) when nothing has; the thread
/// sleeps on the port's event descriptor meanwhile. `*out_handled` (may be NULL) is the
/// number of messages handled (bounded: call again while it is not 0).
///
/// # Safety
///
/// `am` is NULL or live; `out_handled` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_poll(
    am: *const hamlyn_am,
    timeout_ms: i64,
    out_handled: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        let n = a.with(|i| Ok(i.ep()?.poll(crate::timeout(timeout_ms))?))?;
        if !out_handled.is_null() {
            // SAFETY: `out_handled` is non-NULL and writable.
            unsafe { put(out_handled, n) };
        }
        Ok(())
    })
}

/// Takes the oldest failure of a message sent with `HAMLYN_AM_WANT_NOTHING`: its call
/// number and its result code. `HAMLYN_RESULT_EMPTY` when there is none.
///
/// # Safety
///
/// `am` is NULL or live; `out_call` and `out_code` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_next_failure(
    am: *const hamlyn_am,
    out_call: *mut u64,
    out_code: *mut hamlyn_result,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        non_null(out_call)?;
        non_null(out_code)?;
        let (call, code) = a.with(|i| {
            for f in i.ep()?.failures() {
                let code = hamlyn_result::from(f.error);
                i.failures.push_back((f.call.0, code));
            }
            i.failures.pop_front().ok_or(hamlyn_result::Empty)
        })?;
        // SAFETY: both are non-NULL and writable.
        unsafe {
            put(out_call, call);
            put(out_code, code);
        }
        Ok(())
    })
}

/// The endpoint's counters.
///
/// # Safety
///
/// `am` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_counters_of(
    am: *const hamlyn_am,
    out: *mut hamlyn_am_counters,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        non_null(out)?;
        let c = a.with(|i| Ok(i.ep()?.counters()))?;
        let c = hamlyn_am_counters {
            handled: c.handled,
            unknown_handler: c.unknown_handler,
            stale_epoch: c.stale_epoch,
            malformed: c.malformed,
            reply_refused: c.reply_refused,
            full: c.full,
        };
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, c) };
        Ok(())
    })
}

/// The counters of this process's handler `name` (`HAMLYN_RESULT_UNKNOWN_HANDLER` if it
/// registered none of that name).
///
/// # Safety
///
/// `am` is NULL or live; `name` is NULL or NUL-terminated; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_handler_counters_of(
    am: *const hamlyn_am,
    name: *const c_char,
    out: *mut hamlyn_am_handler_counters,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        // SAFETY: the function's contract.
        let name = unsafe { text(name) }?;
        non_null(out)?;
        let c = a.with(|i| {
            i.ep()?
                .handler_counters()
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, c)| c)
                .ok_or(hamlyn_result::UnknownHandler)
        })?;
        let c = hamlyn_am_handler_counters {
            calls: c.calls,
            replies: c.replies,
            errors: c.errors,
            refused: c.refused,
        };
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, c) };
        Ok(())
    })
}

// ----- the context a handler runs with -----

/// Runs `f` on the context behind `ctx`.
///
/// # Safety
///
/// `ctx` is NULL or the context of a handler that is running.
unsafe fn with_ctx<T>(
    ctx: *mut hamlyn_am_ctx,
    f: impl FnOnce(&mut Ctx<'_>) -> Result<T, hamlyn_result>,
) -> Result<T, hamlyn_result> {
    // SAFETY: the caller's contract: NULL or the running handler's context.
    let c = unsafe { ctx.as_mut() }.ok_or(hamlyn_result::NullArgument)?;
    // SAFETY: as above: the `Ctx` it points to is alive while the handler runs.
    f(unsafe { c.get() })
}

/// The message's four arguments, into `out` (four `u64`).
///
/// # Safety
///
/// `ctx` is NULL or the running handler's context; `out` is NULL or writable for four
/// `u64`.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_ctx_args(
    ctx: *mut hamlyn_am_ctx,
    out: *mut u64,
) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        // SAFETY: the function's contract.
        let a = unsafe { with_ctx(ctx, |c| Ok(c.args())) }?;
        // SAFETY: `out` is non-NULL and writable for four u64.
        unsafe { put(out.cast::<[u64; 4]>(), a) };
        Ok(())
    })
}

/// The sender's logical channel.
///
/// # Safety
///
/// `ctx` is NULL or the running handler's context; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_ctx_channel(
    ctx: *mut hamlyn_am_ctx,
    out: *mut u16,
) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        // SAFETY: the function's contract.
        let ch = unsafe { with_ctx(ctx, |c| Ok(c.channel())) }?;
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, ch) };
        Ok(())
    })
}

/// The sending endpoint.
///
/// # Safety
///
/// `ctx` is NULL or the running handler's context; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_ctx_src(
    ctx: *mut hamlyn_am_ctx,
    out: *mut hamlyn_am_addr,
) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        // SAFETY: the function's contract.
        let src = unsafe { with_ctx(ctx, |c| Ok(c.src())) }?;
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, src.into()) };
        Ok(())
    })
}

/// The bulk payload in place (zero copy): `*out_data` is its first byte in the receive
/// buffer and `*out_len` its length (NULL and 0 for a short message). The bytes are
/// valid only until the handler returns (the buffer goes back to its sender then): copy
/// what must outlive the call. Read them only.
///
/// # Safety
///
/// `ctx` is NULL or the running handler's context; `out_data` and `out_len` are NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_ctx_payload(
    ctx: *mut hamlyn_am_ctx,
    out_data: *mut *const u8,
    out_len: *mut usize,
) -> hamlyn_result {
    guard(|| {
        non_null(out_data)?;
        non_null(out_len)?;
        // SAFETY: the function's contract.
        let (p, len) = unsafe {
            with_ctx(ctx, |c| {
                let len = usize::try_from(c.payload_len()).map_err(|_| hamlyn_result::TooLong)?;
                Ok((c.payload_ptr()?.unwrap_or(std::ptr::null()), len))
            })
        }?;
        // SAFETY: both are non-NULL and writable.
        unsafe {
            put(out_data, p);
            put(out_len, len);
        }
        Ok(())
    })
}

/// Copies payload bytes `off..off + len` into `buf`: `HAMLYN_RESULT_OUT_OF_RANGE` if they
/// go past the payload's end (`buf` untouched).
///
/// # Safety
///
/// `ctx` is NULL or the running handler's context; `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_ctx_read_payload(
    ctx: *mut hamlyn_am_ctx,
    off: u64,
    buf: *mut u8,
    len: usize,
) -> hamlyn_result {
    guard(|| {
        let dst: &mut [u8] = if len == 0 {
            &mut []
        } else {
            non_null(buf)?;
            // SAFETY: `buf` is non-NULL and writable for `len` bytes (the contract), C's
            // memory, not the shared receive buffer.
            unsafe { std::slice::from_raw_parts_mut(buf, len) }
        };
        // SAFETY: the function's contract.
        unsafe {
            with_ctx(ctx, |c| {
                let fits = off
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= c.payload_len());
                if !fits {
                    return Err(hamlyn_result::OutOfRange);
                }
                if len == 0 {
                    return Ok(());
                }
                Ok(c.read_payload(off, dst)?)
            })
        }
    })
}

/// Replies once with the four `u64` at `args` (the token): a second reply is
/// `HAMLYN_RESULT_REPLY_TWICE` and is not sent. The reply leaves after the handler
/// returns.
///
/// # Safety
///
/// `ctx` is NULL or the running handler's context; `args` is NULL or readable for four
/// `u64`.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_ctx_reply(
    ctx: *mut hamlyn_am_ctx,
    args: *const u64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let args = unsafe { args_in(args) }?;
        // SAFETY: the function's contract.
        unsafe { with_ctx(ctx, |c| Ok(c.reply(args)?)) }
    })
}

// ----- memory messages -----

/// A region of `len` bytes of the endpoint's memory that memory messages (block copies,
/// no handler) land in; `hamlyn_am_region_seed` gives the seed a sender writes it
/// through.
///
/// # Safety
///
/// `am` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_region_new(
    am: *const hamlyn_am,
    len: u64,
    out: *mut *mut hamlyn_am_region,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        non_null(out)?;
        let key = a.with(|i| {
            let r = i.ep()?.memory_region(len)?;
            let key = i.next_key;
            i.next_key += 1;
            i.regions.insert(key, r);
            Ok(key)
        })?;
        let h = Box::into_raw(Box::new(hamlyn_am_region {
            life: a.life.clone(),
            shared: a.shared.clone(),
            key,
            len,
        }));
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, h) };
        Ok(())
    })
}

/// Runs `f` on the region behind `region`.
///
/// # Safety
///
/// `region` is NULL or live.
unsafe fn with_region<T>(
    region: *const hamlyn_am_region,
    f: impl FnOnce(&MemoryRegion) -> Result<T, hamlyn_result>,
) -> Result<T, hamlyn_result> {
    // SAFETY: the caller's contract.
    let r = unsafe { handle(region) }?;
    r.life.check()?;
    r.shared
        .with(|i| f(i.regions.get(&r.key).ok_or(hamlyn_result::Closed)?))
}

/// The region's seed text and a NUL into `buf` (capacity `cap`); `*out_needed` (may be
/// NULL) is the length it needs, also written with `HAMLYN_RESULT_BUFFER_TOO_SMALL`.
/// `HAMLYN_SEED_TEXT_MAX` bytes always suffice.
///
/// # Safety
///
/// `region` is NULL or live; `buf` is NULL or writable for `cap` bytes; `out_needed` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_region_seed(
    region: *const hamlyn_am_region,
    buf: *mut c_char,
    cap: usize,
    out_needed: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { with_region(region, |r| Ok(r.seed()?)) }?;
        let s = hamlyn::seed::to_text(&s)?;
        // SAFETY: the function's contract.
        unsafe { text_out(&s, buf, cap, out_needed) }
    })
}

/// Copies region bytes `off..off + len` into `buf` (`HAMLYN_RESULT_OUT_OF_RANGE` past
/// its end, `buf` untouched).
///
/// # Safety
///
/// `region` is NULL or live; `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_region_read(
    region: *const hamlyn_am_region,
    off: u64,
    buf: *mut u8,
    len: usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let r = unsafe { handle(region) }?;
        r.life.check()?;
        if off.checked_add(len as u64).is_none_or(|end| end > r.len) {
            return Err(hamlyn_result::OutOfRange);
        }
        if len == 0 {
            return Ok(());
        }
        non_null(buf)?;
        // SAFETY: `buf` is non-NULL and writable for `len` bytes (the contract).
        let dst = unsafe { std::slice::from_raw_parts_mut(buf, len) };
        // SAFETY: the function's contract.
        unsafe { with_region(region, |r| Ok(r.read(off, dst)?)) }
    })
}

/// Frees a region (NULL: nothing): senders' writes to it fail from then on.
///
/// # Safety
///
/// `region` is NULL or live, not used after.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_region_free(region: *mut hamlyn_am_region) {
    // SAFETY: the function's contract.
    if let Ok(r) = unsafe { handle(region.cast_const()) } {
        // The region shares the endpoint's single-threaded manager: dropped under its
        // lock. (From inside a handler of that endpoint it cannot be: it is then dropped
        // with the endpoint.)
        let _ = guard(|| {
            r.shared.with(|i| {
                drop(i.regions.remove(&r.key));
                Ok(())
            })
        });
    }
    // SAFETY: the function's contract.
    unsafe { free_box(region) }
}

/// The sending side of memory messages to the region whose seed text is `seed_text`
/// (`HAMLYN_RESULT_BAD_SEED` if it is not a region's seed).
///
/// # Safety
///
/// `am` is NULL or live; `seed_text` is NULL or NUL-terminated; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_target_new(
    am: *const hamlyn_am,
    seed_text: *const c_char,
    out: *mut *mut hamlyn_am_target,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let a = unsafe { handle(am) }?;
        // SAFETY: the function's contract.
        let s = unsafe { text(seed_text) }?;
        non_null(out)?;
        let seed = hamlyn::seed::from_text(s.trim()).map_err(|_| hamlyn_result::BadSeed)?;
        let key = a.with(|i| {
            let t = i.ep()?.memory_target(&seed)?;
            let key = i.next_key;
            i.next_key += 1;
            i.targets.insert(key, t);
            Ok(key)
        })?;
        let h = Box::into_raw(Box::new(hamlyn_am_target {
            life: a.life.clone(),
            shared: a.shared.clone(),
            key,
        }));
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, h) };
        Ok(())
    })
}

/// Copies the `len` bytes at `data` to `offset` of the target's region (a memory
/// message: no handler runs). `data` is free again when the call returns. `*out` (if
/// `out` is not NULL) is the send's handle: `hamlyn_send_wait` says when the bytes left
/// this engine, or that the send failed (outside the region...); free it with
/// `hamlyn_send_free`.
///
/// # Safety
///
/// `target` is NULL or live; `data` is readable for `len` bytes; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_target_write(
    target: *const hamlyn_am_target,
    offset: u64,
    data: *const u8,
    len: usize,
    out: *mut *mut hamlyn_send,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let t = unsafe { handle(target) }?;
        t.life.check()?;
        // SAFETY: the function's contract.
        let bytes = unsafe { crate::bytes(data, len) }?;
        let h = t.shared.with(|i| {
            let target = i.targets.get(&t.key).ok_or(hamlyn_result::Closed)?;
            Ok(target.write(offset, bytes)?)
        })?;
        if !out.is_null() {
            // SAFETY: `out` is non-NULL and writable.
            unsafe { put(out, hamlyn_send::boxed(t.life.clone(), h)) };
        }
        Ok(())
    })
}

/// Frees a target (NULL: nothing).
///
/// # Safety
///
/// `target` is NULL or live, not used after.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_am_target_free(target: *mut hamlyn_am_target) {
    // SAFETY: the function's contract.
    if let Ok(t) = unsafe { handle(target.cast_const()) } {
        // Dropped under the endpoint's lock, as a region is.
        let _ = guard(|| {
            t.shared.with(|i| {
                drop(i.targets.remove(&t.key));
                Ok(())
            })
        });
    }
    // SAFETY: the function's contract.
    unsafe { free_box(target) }
}
