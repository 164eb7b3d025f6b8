//! Nodes: a connection to an engine (embedded in the process or a daemon), the name
//! registry and statistics.

use std::ffi::c_char;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use hamlyn::Node;

use crate::{free_box, guard, hamlyn_result, handle, non_null, put, text, Life};

/// A connection to an engine: one control socket and one port. Made by
/// `hamlyn_node_embedded`, `hamlyn_node_connect` or `hamlyn_node_connect_default`; freed
/// by `hamlyn_node_free`, which closes every handle made from it (`HAMLYN_RESULT_CLOSED`).
pub struct hamlyn_node {
    pub(crate) life: Arc<Life>,
    pub(crate) node: Node,
}

impl hamlyn_node {
    /// The node, if it is still open. (A live node handle is never closed: closing frees
    /// it; the check is for symmetry with the other handles.)
    pub(crate) fn get(&self) -> Result<&Node, hamlyn_result> {
        self.life.check()?;
        Ok(&self.node)
    }
}

fn give(node: Node, out: *mut *mut hamlyn_node) {
    let h = Box::into_raw(Box::new(hamlyn_node {
        life: Arc::new(Life::default()),
        node,
    }));
    // SAFETY: `out` was checked non-NULL by the caller; C passes a writable pointer.
    unsafe { put(out, h) };
}

/// Starts an engine thread inside this process and connects to it. On success `*out`
/// is a new node (free it with `hamlyn_node_free`).
#[no_mangle]
pub extern "C" fn hamlyn_node_embedded(out: *mut *mut hamlyn_node) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        give(Node::embedded()?, out);
        Ok(())
    })
}

/// Connects to the engine (a `hamlyn node` daemon) listening at the NUL-terminated
/// `socket_path`. On success `*out` is a new node.
///
/// # Safety
///
/// `socket_path` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_node_connect(
    socket_path: *const c_char,
    out: *mut *mut hamlyn_node,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let path = unsafe { text(socket_path) }?;
        non_null(out)?;
        give(Node::connect(path)?, out);
        Ok(())
    })
}

/// How a node's port is made (`hamlyn_node_embedded_with`, `hamlyn_node_connect_with`).
/// All zeros is valid: every zero field takes the library's default.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hamlyn_node_options {
    /// Termini in the port (1..=256; 0: 4): how many `hamlyn_terminus` may exist at once.
    pub termini: u16,
    /// Notification queues in the port (1..=64; 0: 4).
    pub queues: u16,
    /// Entries per notification queue (a power of two, 64..=65536; 0: 1024).
    pub queue_cap: u32,
    /// Polls a waiter spins through before it sleeps (0: 200, about 10 µs).
    pub spin: u32,
    /// Longest wait for a control reply, in milliseconds (0: 10 s).
    pub control_timeout_ms: u32,
}

impl hamlyn_node_options {
    // `..d`: options the library gains later take their defaults here.
    #[allow(clippy::needless_update)]
    fn to_options(self) -> hamlyn::NodeOptions {
        let d = hamlyn::NodeOptions::default();
        let or = |v: u32, default: u32| if v == 0 { default } else { v };
        hamlyn::NodeOptions {
            termini: if self.termini == 0 {
                d.termini
            } else {
                self.termini
            },
            queues: if self.queues == 0 {
                d.queues
            } else {
                self.queues
            },
            queue_cap: or(self.queue_cap, d.queue_cap),
            spin: or(self.spin, d.spin),
            control_timeout: if self.control_timeout_ms == 0 {
                d.control_timeout
            } else {
                std::time::Duration::from_millis(u64::from(self.control_timeout_ms))
            },
            ..d
        }
    }
}

/// The options `options` points to (NULL: the defaults).
///
/// # Safety
///
/// `options` is NULL or valid.
unsafe fn options_of(options: *const hamlyn_node_options) -> hamlyn::NodeOptions {
    // SAFETY: the caller's contract: NULL or a valid struct.
    unsafe { options.as_ref() }
        .copied()
        .unwrap_or_default()
        .to_options()
}

/// `hamlyn_node_embedded` with a port made as `options` says (NULL: the defaults). Values
/// out of range are `HAMLYN_RESULT_INVALID_ARGUMENT`.
///
/// # Safety
///
/// `options` is NULL or valid; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_node_embedded_with(
    options: *const hamlyn_node_options,
    out: *mut *mut hamlyn_node,
) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        // SAFETY: the function's contract.
        let o = unsafe { options_of(options) };
        give(Node::embedded_with(o)?, out);
        Ok(())
    })
}

/// `hamlyn_node_connect` with a port made as `options` says (NULL: the defaults).
///
/// # Safety
///
/// `socket_path` is NULL or NUL-terminated; `options` is NULL or valid; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_node_connect_with(
    socket_path: *const c_char,
    options: *const hamlyn_node_options,
    out: *mut *mut hamlyn_node,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let path = unsafe { text(socket_path) }?;
        non_null(out)?;
        // SAFETY: the function's contract.
        let o = unsafe { options_of(options) };
        give(Node::connect_with(path, o)?, out);
        Ok(())
    })
}

/// The socket path of the engine `node` is connected to, NUL-terminated, into `buf`
/// (capacity `cap`); `*out_needed` (if not NULL) is the length it needs, NUL included:
/// `HAMLYN_RESULT_BUFFER_TOO_SMALL` if `cap` is less. How a second connection (another
/// thread, a child process) finds an embedded engine.
///
/// # Safety
///
/// `node` is NULL or live; `buf` is NULL or writable for `cap` bytes; `out_needed` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_node_socket_path(
    node: *const hamlyn_node,
    buf: *mut c_char,
    cap: usize,
    out_needed: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let node = unsafe { handle(node) }?.get()?;
        let p = node
            .socket_path()
            .to_str()
            .ok_or(hamlyn_result::InvalidArgument)?
            .to_owned();
        // SAFETY: the function's contract.
        unsafe { crate::text_out(&p, buf, cap, out_needed) }
    })
}

/// Connects to the node's daemon at `$HAMLYN_SOCKET`, else at `/tmp/hamlyn.sock`.
#[no_mangle]
pub extern "C" fn hamlyn_node_connect_default(out: *mut *mut hamlyn_node) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        give(Node::connect_default()?, out);
        Ok(())
    })
}

/// Frees `node` (NULL is ignored) and closes it for every handle made from it: their
/// calls return `HAMLYN_RESULT_CLOSED` from then on, and they must still be freed. The
/// connection ends when the last of them is freed.
///
/// # Safety
///
/// `node` is NULL or a node of this library not freed yet; it must not be used again.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_node_free(node: *mut hamlyn_node) {
    // The panic boundary: closing cannot panic, and `free_box` has its own.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the function's contract: a live node handle or NULL.
        if let Ok(n) = unsafe { handle(node) } {
            n.life.close();
        }
    }));
    // SAFETY: the function's contract; made by `give` with `Box::into_raw`.
    unsafe { free_box(node) };
}

/// The node's id in the cluster (`*out`).
///
/// # Safety
///
/// `node` is NULL or a live node; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_node_id(node: *const hamlyn_node, out: *mut u32) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let node = unsafe { handle(node) }?.get()?;
        non_null(out)?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, node.id().0) };
        Ok(())
    })
}

/// Runs one turn of the engine this process hosts, if it may (an embedded engine that
/// waiting threads drive): `*out` is 1 if the turn found work, else 0. For a thread that
/// waits by polling memory itself (a write polled on its data), as UCX users call
/// `ucp_worker_progress`. `*out` is 0 at once when there is nothing to drive (a
/// daemon's engine) or another thread runs the engine at that moment. With other nodes,
/// a loop's calls (and the process's waits) share one drive: after they stop, data from
/// another node may wait up to 2 ms for the engine's thread (`hamlyn::Node::progress`).
///
/// # Safety
///
/// `node` is NULL or a live node; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_node_progress(
    node: *const hamlyn_node,
    out: *mut u8,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let node = unsafe { handle(node) }?.get()?;
        non_null(out)?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, u8::from(node.progress())) };
        Ok(())
    })
}

/// The port's event descriptor (`*out`), for poll/epoll: it becomes readable when a queue
/// armed with `hamlyn_queue_arm` gets an entry (and for good when the engine dies). It
/// belongs to the node: do not close it; it stays valid while the node or any handle
/// made from it lives. Drain it with `hamlyn_node_drain_event_fd`.
///
/// # Safety
///
/// `node` is NULL or a live node; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_node_event_fd(
    node: *const hamlyn_node,
    out: *mut i32,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let node = unsafe { handle(node) }?.get()?;
        non_null(out)?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, node.event_fd().as_raw_fd()) };
        Ok(())
    })
}

/// Takes the pokes waiting on the event descriptor; `*out` is how many (0 if it was not
/// readable). `HAMLYN_RESULT_ENGINE_GONE` once the engine is gone.
///
/// # Safety
///
/// `node` is NULL or a live node; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_node_drain_event_fd(
    node: *const hamlyn_node,
    out: *mut u64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let node = unsafe { handle(node) }?.get()?;
        non_null(out)?;
        let n = node.drain_event_fd()?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, n) };
        Ok(())
    })
}

/// Publishes `ticket` (as a one-ticket seed) under the NUL-terminated `name` in the
/// cluster's name registry. The name is this node's until it unpublishes it or
/// disconnects (`HAMLYN_RESULT_NOT_OWNER` for another client's name).
///
/// # Safety
///
/// `node` and `ticket` are NULL or live handles; `name` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_node_publish(
    node: *const hamlyn_node,
    name: *const c_char,
    ticket: *const crate::hamlyn_ticket,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let node = unsafe { handle(node) }?.get()?;
        // SAFETY: the function's contract.
        let name = unsafe { text(name) }?;
        // SAFETY: the function's contract.
        let ticket = unsafe { handle(ticket) }?;
        node.publish(name, &hamlyn::Seed::single(ticket.ticket))?;
        Ok(())
    })
}

/// Removes `name`, which this node published, from the registry
/// (`HAMLYN_RESULT_NOT_FOUND`, `HAMLYN_RESULT_NOT_OWNER`).
///
/// # Safety
///
/// `node` is NULL or a live node; `name` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_node_unpublish(
    node: *const hamlyn_node,
    name: *const c_char,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let node = unsafe { handle(node) }?.get()?;
        // SAFETY: the function's contract.
        let name = unsafe { text(name) }?;
        node.unpublish(name)?;
        Ok(())
    })
}

/// Looks `name` up in the registry; on success `*out` is a new ticket (the seed's first),
/// freed with `hamlyn_ticket_free`. `HAMLYN_RESULT_NOT_FOUND` if no one published it.
///
/// # Safety
///
/// `node` is NULL or a live node; `name` is NULL or NUL-terminated; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_node_lookup(
    node: *const hamlyn_node,
    name: *const c_char,
    out: *mut *mut crate::hamlyn_ticket,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let node = unsafe { handle(node) }?.get()?;
        // SAFETY: the function's contract.
        let name = unsafe { text(name) }?;
        non_null(out)?;
        let seed = node.lookup(name)?;
        let ticket = *seed.tickets.first().ok_or(hamlyn_result::BadSeed)?;
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, crate::ticket::give(ticket)) };
        Ok(())
    })
}

/// A few of the engine's counters (`hamlyn_node_stats`). Its layout is fixed within a
/// major version (ABI.md): more counters come with a new struct and function.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hamlyn_stats {
    /// The engine's node id.
    pub node: u32,
    /// The engine's incarnation.
    pub incarnation: u32,
    /// Requests taken from termini.
    pub requests: u64,
    /// Requests finished (successfully or not).
    pub completed: u64,
    /// Error completions handed to clients.
    pub error_completions: u64,
    /// Packets delivered.
    pub packets: u64,
    /// Payload bytes delivered.
    pub bytes: u64,
    /// Notifications posted.
    pub notifications: u64,
    /// Notifications refused by a full queue.
    pub queue_overflows: u64,
    /// Areas registered.
    pub areas: u64,
    /// Slots that exist.
    pub slots: u64,
    /// Clients attached now (ports).
    pub clients: u64,
}

/// The engine's statistics (`*out`).
///
/// # Safety
///
/// `node` is NULL or a live node; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_node_stats(
    node: *const hamlyn_node,
    out: *mut hamlyn_stats,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let node = unsafe { handle(node) }?.get()?;
        non_null(out)?;
        let s = node.stats()?;
        let e = &s.engine;
        let stats = hamlyn_stats {
            node: s.node,
            incarnation: s.incarnation,
            requests: e.requests,
            completed: e.completed,
            error_completions: e.error_completions,
            packets: e.packets,
            bytes: e.bytes,
            notifications: e.notifications,
            queue_overflows: e.queue_overflows,
            areas: s.areas,
            slots: s.slots.len() as u64,
            clients: s.ports.len() as u64,
        };
        // SAFETY: `out` is non-NULL and writable (the contract).
        unsafe { put(out, stats) };
        Ok(())
    })
}
