//! The protocol level (hamlyn-rats) from C: a manager (`hamlyn_rats`) and the protocol
//! instances made from it, one handle type per side: tagged write, datagram, simple
//! datagram with reply seeds, request/response and stream; remote write and remote read
//! in [`remote`]. Seeds travel as text.
//!
//! Rats is single-threaded (every instance shares its manager through `Rc`): the
//! manager and all its instances live in one `Inner` behind one lock, shared by their
//! handles, which hold a key into it; every call and every free takes that lock. Each
//! receive copies into the caller's buffer (no view outlives a call).

use std::collections::HashMap;
use std::ffi::c_char;
use std::sync::Arc;
use std::time::Duration;

use ::hamlyn_rats::datagram::{Datagram, DatagramReceiver, DatagramSender};
use ::hamlyn_rats::remote_read::{RemoteReadClient, RemoteReadServer};
use ::hamlyn_rats::remote_write::{RemoteWriteClient, RemoteWriteServer};
use ::hamlyn_rats::request_response::{Request, RequestClient, RequestServer};
use ::hamlyn_rats::simple_datagram::{SimpleClient, SimpleDatagram};
use ::hamlyn_rats::stream::{StreamReceiver, StreamSender, View};
use ::hamlyn_rats::tagged::{TaggedClient, TaggedServer};
use ::hamlyn_rats::Manager;
use hamlyn::Node;

mod remote;
pub use remote::*;

use crate::{
    free_box, guard, hamlyn_node, hamlyn_result, hamlyn_send, handle, non_null, put, text,
    text_out, Life, Serial,
};

/// One instance, of whichever protocol side.
enum Inst {
    TaggedServer(TaggedServer),
    TaggedClient(TaggedClient),
    DatagramReceiver(DatagramReceiver, HashMap<u64, Datagram>, u64),
    DatagramSender(DatagramSender),
    Simple(SimpleDatagram),
    SimpleClient(SimpleClient),
    RequestServer(RequestServer, Option<Request>),
    RequestClient(RequestClient),
    StreamReceiver(StreamReceiver, Option<View>),
    StreamSender(StreamSender),
    RemoteWriteServer(RemoteWriteServer),
    RemoteWriteClient(RemoteWriteClient),
    /// The reader and an answer taken but not handed out (C's buffer was too small).
    RemoteReadClient(RemoteReadClient, Option<Vec<u8>>),
    /// The server and the bytes it was made with.
    RemoteReadServer(RemoteReadServer, u64),
}

/// The manager, its instances and its connection. Fields drop in order: the instances
/// before the manager before the connection.
struct Inner {
    insts: HashMap<u64, Inst>,
    next: u64,
    mgr: Manager,
    _node: Node,
}

struct Shared {
    inner: Serial<Inner>,
}

// SAFETY: `Inner` is not `Send` because the manager and its instances share `Rc`s and
// `RefCell`s; all of them live in `Inner`, reached only through `inner`'s lock (and
// dropped with the last `Arc<Shared>`, by then exclusively), so no two threads touch
// them at once.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

/// A Rats manager (`hamlyn_rats_new`, freed by `hamlyn_rats_free`): message space,
/// metadata entries, a queue and a terminus on a connection of its own. The instances
/// made from it share it (and its lock).
pub struct hamlyn_rats {
    life: Arc<Life>,
    shared: Arc<Shared>,
}

/// What every instance handle holds.
struct Held {
    life: Arc<Life>,
    shared: Arc<Shared>,
    key: u64,
}

impl Held {
    /// Runs `f` on the instance and its manager.
    fn with<T>(
        &self,
        f: impl FnOnce(&mut Inst, &Manager) -> Result<T, hamlyn_result>,
    ) -> Result<T, hamlyn_result> {
        self.life.check()?;
        self.shared.inner.with(|i| {
            let inst = i.insts.get_mut(&self.key).ok_or(hamlyn_result::Closed)?;
            f(inst, &i.mgr)
        })
    }

    fn drop_instance(&self) {
        let _ = guard(|| {
            self.shared.inner.with(|i| {
                drop(i.insts.remove(&self.key));
                Ok(())
            })
        });
    }
}

/// Frees a protocol handle: its instance leaves the manager (under the manager's lock),
/// then the handle's box. Each handle's `_free` is written out for cbindgen (which does
/// not expand macros) and calls this.
///
/// # Safety
///
/// `h` is NULL or live, not used after, and no call on it is running.
unsafe fn free_instance<T>(h: *mut T, held: impl FnOnce(&T) -> &Held) {
    // SAFETY: the caller's contract.
    if let Ok(x) = unsafe { handle(h.cast_const()) } {
        held(x).drop_instance();
    }
    // SAFETY: the caller's contract.
    unsafe { free_box(h) }
}

// One handle type per protocol side, each written out (cbindgen does not expand macros).
/// The receiving side of tagged writes: a slot others write with tags.
pub struct hamlyn_rats_tagged_server {
    held: Held,
}

/// Frees the instance (NULL: nothing).
///
/// # Safety
///
/// `h` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_tagged_server_free(h: *mut hamlyn_rats_tagged_server) {
    // SAFETY: the function's contract.
    unsafe { free_instance(h, |x| &x.held) }
}

/// The writing side of tagged writes, made from a tagged server's seed.
pub struct hamlyn_rats_tagged_client {
    held: Held,
}

/// Frees the instance (NULL: nothing).
///
/// # Safety
///
/// `h` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_tagged_client_free(h: *mut hamlyn_rats_tagged_client) {
    // SAFETY: the function's contract.
    unsafe { free_instance(h, |x| &x.held) }
}

/// The receiving side of datagrams: buffers granted to senders as credits.
pub struct hamlyn_rats_datagram_receiver {
    held: Held,
}

/// Frees the instance (NULL: nothing).
///
/// # Safety
///
/// `h` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_datagram_receiver_free(h: *mut hamlyn_rats_datagram_receiver) {
    // SAFETY: the function's contract.
    unsafe { free_instance(h, |x| &x.held) }
}

/// The sending side of datagrams, made from a receiver's seed.
pub struct hamlyn_rats_datagram_sender {
    held: Held,
}

/// Frees the instance (NULL: nothing).
///
/// # Safety
///
/// `h` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_datagram_sender_free(h: *mut hamlyn_rats_datagram_sender) {
    // SAFETY: the function's contract.
    unsafe { free_instance(h, |x| &x.held) }
}

/// A simple datagram instance: one receive buffer; its messages may carry a reply
/// seed, and it answers through them.
pub struct hamlyn_rats_simple {
    held: Held,
}

/// Frees the instance (NULL: nothing).
///
/// # Safety
///
/// `h` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_simple_free(h: *mut hamlyn_rats_simple) {
    // SAFETY: the function's contract.
    unsafe { free_instance(h, |x| &x.held) }
}

/// The sending side of simple datagrams, made from an instance's seed.
pub struct hamlyn_rats_simple_client {
    held: Held,
}

/// Frees the instance (NULL: nothing).
///
/// # Safety
///
/// `h` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_simple_client_free(h: *mut hamlyn_rats_simple_client) {
    // SAFETY: the function's contract.
    unsafe { free_instance(h, |x| &x.held) }
}

/// A request/response server: one request at a time, answered, then released.
pub struct hamlyn_rats_request_server {
    held: Held,
}

/// Frees the instance (NULL: nothing).
///
/// # Safety
///
/// `h` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_request_server_free(h: *mut hamlyn_rats_request_server) {
    // SAFETY: the function's contract.
    unsafe { free_instance(h, |x| &x.held) }
}

/// A request/response client, made from a server's seed or its registry name.
pub struct hamlyn_rats_request_client {
    held: Held,
}

/// Frees the instance (NULL: nothing).
///
/// # Safety
///
/// `h` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_request_client_free(h: *mut hamlyn_rats_request_client) {
    // SAFETY: the function's contract.
    unsafe { free_instance(h, |x| &x.held) }
}

/// The receiving side of a stream (made first: its seed makes the sender).
pub struct hamlyn_rats_stream_receiver {
    held: Held,
}

/// Frees the instance (NULL: nothing).
///
/// # Safety
///
/// `h` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_stream_receiver_free(h: *mut hamlyn_rats_stream_receiver) {
    // SAFETY: the function's contract.
    unsafe { free_instance(h, |x| &x.held) }
}

/// The sending side of a stream, made from the receiver's seed.
pub struct hamlyn_rats_stream_sender {
    held: Held,
}

/// Frees the instance (NULL: nothing).
///
/// # Safety
///
/// `h` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_stream_sender_free(h: *mut hamlyn_rats_stream_sender) {
    // SAFETY: the function's contract.
    unsafe { free_instance(h, |x| &x.held) }
}

/// A tagged write that arrived (`hamlyn_rats_tagged_get_tag`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hamlyn_rats_tag {
    /// Its tag.
    pub tag: u32,
    /// The node that wrote it.
    pub src_node: u32,
    /// Where it landed in the server's slot.
    pub offset: u64,
    /// Its bytes.
    pub len: u64,
}

/// A datagram received (`hamlyn_rats_datagram_recv`), held until released.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hamlyn_rats_datagram {
    /// Its number here, for `hamlyn_rats_datagram_read` and `_release`.
    pub id: u64,
    /// Its bytes.
    pub len: u64,
    /// The node that sent it.
    pub src_node: u32,
    /// The sender (its number at this receiver).
    pub sender: u32,
}

/// A simple datagram message received (`hamlyn_rats_simple_recv`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hamlyn_rats_simple_message {
    /// Its first byte in the instance's buffer (`hamlyn_rats_simple_read`).
    pub offset: u64,
    /// Its bytes.
    pub len: u64,
    /// The node that sent it.
    pub src_node: u32,
    /// 1 if it carried a reply seed (`hamlyn_rats_simple_reply` answers through it).
    pub has_reply: u32,
}

/// A request received (`hamlyn_rats_request_recv`), held until released.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct hamlyn_rats_request {
    /// Its bytes (`hamlyn_rats_request_read`).
    pub len: u64,
    /// The client's id.
    pub client: u64,
    /// The client's sequence number.
    pub seq: u32,
}

/// Makes a Rats manager on `node`'s engine (a connection of its own, with the node's
/// options) with the default message space and metadata entries.
///
/// # Safety
///
/// `node` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_new(
    node: *const hamlyn_node,
    out: *mut *mut hamlyn_rats,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let n = unsafe { handle(node) }?;
        let base = n.get()?;
        non_null(out)?;
        let own = Node::connect_with(base.socket_path(), base.options().clone())?;
        let mgr = Manager::new(&own)?;
        let h = Box::into_raw(Box::new(hamlyn_rats {
            life: n.life.clone(),
            shared: Arc::new(Shared {
                inner: Serial::new(Inner {
                    insts: HashMap::new(),
                    next: 1,
                    mgr,
                    _node: own,
                }),
            }),
        }));
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, h) };
        Ok(())
    })
}

/// Frees a manager handle (NULL: nothing). Instances made from it keep it alive until
/// they are freed.
///
/// # Safety
///
/// `rats` is NULL or live, not used after.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_free(rats: *mut hamlyn_rats) {
    // SAFETY: the function's contract.
    unsafe { free_box(rats) }
}

/// Makes an instance with `f` and hands its handle (of type `H`, built by `wrap`) to
/// `out`.
///
/// # Safety
///
/// `rats` is NULL or live; `out` is NULL or writable.
unsafe fn make<H>(
    rats: *const hamlyn_rats,
    out: *mut *mut H,
    f: impl FnOnce(&Manager) -> Result<Inst, hamlyn_result>,
    wrap: impl FnOnce(Held) -> H,
) -> Result<(), hamlyn_result> {
    // SAFETY: the caller's contract.
    let r = unsafe { handle(rats) }?;
    r.life.check()?;
    non_null(out)?;
    let key = r.shared.inner.with(|i| {
        let inst = f(&i.mgr)?;
        let key = i.next;
        i.next += 1;
        i.insts.insert(key, inst);
        Ok(key)
    })?;
    let h = Box::into_raw(Box::new(wrap(Held {
        life: r.life.clone(),
        shared: r.shared.clone(),
        key,
    })));
    // SAFETY: `out` is non-NULL and writable (the caller's contract).
    unsafe { put(out, h) };
    Ok(())
}

/// Seed text from C, decoded.
///
/// # Safety
///
/// `seed_text` is NULL or NUL-terminated.
unsafe fn seed_in(seed_text: *const c_char) -> Result<hamlyn::Seed, hamlyn_result> {
    // SAFETY: the caller's contract.
    let s = unsafe { text(seed_text) }?;
    hamlyn::seed::from_text(s.trim()).map_err(|_| hamlyn_result::BadSeed)
}

/// A seed as text into C's buffer.
///
/// # Safety
///
/// `buf` is NULL or writable for `cap` bytes; `needed` is NULL or writable.
unsafe fn seed_out(
    seed: &hamlyn::Seed,
    buf: *mut c_char,
    cap: usize,
    needed: *mut usize,
) -> Result<(), hamlyn_result> {
    let s = hamlyn::seed::to_text(seed)?;
    // SAFETY: the caller's contract.
    unsafe { text_out(&s, buf, cap, needed) }
}

/// `len` bytes of C's at `buf` as a slice to fill (empty for 0).
///
/// # Safety
///
/// `buf` is NULL or writable for `len` bytes.
unsafe fn out_bytes<'a>(buf: *mut u8, len: usize) -> Result<&'a mut [u8], hamlyn_result> {
    if len == 0 {
        return Ok(&mut []);
    }
    non_null(buf)?;
    // SAFETY: the caller's contract: `len` writable bytes at a non-NULL `buf`, C's own.
    Ok(unsafe { std::slice::from_raw_parts_mut(buf, len) })
}

/// Hands a send handle to `out` if it is not NULL.
///
/// # Safety
///
/// `out` is NULL or writable.
unsafe fn send_out(life: &Arc<Life>, h: hamlyn::SendHandle, out: *mut *mut hamlyn_send) {
    if !out.is_null() {
        // SAFETY: the caller's contract.
        unsafe { put(out, hamlyn_send::boxed(life.clone(), h)) };
    }
}

fn wrong() -> hamlyn_result {
    hamlyn_result::InvalidArgument
}

/// A timeout from C: negative waits without end, 0 does not wait.
fn wait_of(ms: i64) -> Option<Duration> {
    crate::timeout(ms)
}

// ----- tagged write -----

/// A tagged server over `len` bytes of message space.
///
/// # Safety
///
/// `rats` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_tagged_server_new(
    rats: *const hamlyn_rats,
    len: u64,
    out: *mut *mut hamlyn_rats_tagged_server,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        unsafe {
            make(
                rats,
                out,
                |m| Ok(Inst::TaggedServer(TaggedServer::new(m, len)?)),
                |held| hamlyn_rats_tagged_server { held },
            )
        }
    })
}

/// The server's seed text (what a client is made from) and a NUL into `buf`; `*out_needed`
/// (may be NULL) is the length it needs, also written with
/// `HAMLYN_RESULT_BUFFER_TOO_SMALL`.
///
/// # Safety
///
/// `server` is NULL or live; `buf` is NULL or writable for `cap` bytes; `out_needed` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_tagged_server_seed(
    server: *const hamlyn_rats_tagged_server,
    buf: *mut c_char,
    cap: usize,
    out_needed: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(server) }?;
        let seed = s.held.with(|i, _| match i {
            Inst::TaggedServer(t) => Ok(t.make_seed()?),
            _ => Err(wrong()),
        })?;
        // SAFETY: the function's contract.
        unsafe { seed_out(&seed, buf, cap, out_needed) }
    })
}

/// The next tagged write that arrived, any tag, waiting up to `timeout_ms` (negative:
/// without end; 0: `HAMLYN_RESULT_EMPTY` if none is there). `HAMLYN_RESULT_TIMEOUT` when
/// none came.
///
/// # Safety
///
/// `server` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_tagged_get_tag(
    server: *const hamlyn_rats_tagged_server,
    timeout_ms: i64,
    out: *mut hamlyn_rats_tag,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(server) }?;
        non_null(out)?;
        let a = s.held.with(|i, _| match i {
            Inst::TaggedServer(t) if timeout_ms == 0 => t.get_tag()?.ok_or(hamlyn_result::Empty),
            Inst::TaggedServer(t) => t
                .wait_tag(wait_of(timeout_ms))?
                .ok_or(hamlyn_result::Timeout),
            _ => Err(wrong()),
        })?;
        let tag = hamlyn_rats_tag {
            tag: a.tag,
            src_node: a.src.0,
            offset: a.offset,
            len: a.len,
        };
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, tag) };
        Ok(())
    })
}

/// Copies `len` bytes at `offset` of the server's slot into `buf`.
///
/// # Safety
///
/// `server` is NULL or live; `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_tagged_read(
    server: *const hamlyn_rats_tagged_server,
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
            Inst::TaggedServer(t) => Ok(t.read(offset, dst)?),
            _ => Err(wrong()),
        })
    })
}

/// A tagged client of the server whose seed text is `seed_text`
/// (`HAMLYN_RESULT_BAD_SEED` for another protocol's seed).
///
/// # Safety
///
/// `rats` is NULL or live; `seed_text` is NULL or NUL-terminated; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_tagged_client_new(
    rats: *const hamlyn_rats,
    seed_text: *const c_char,
    out: *mut *mut hamlyn_rats_tagged_client,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let seed = unsafe { seed_in(seed_text) }?;
        // SAFETY: the function's contract.
        unsafe {
            make(
                rats,
                out,
                |m| Ok(Inst::TaggedClient(TaggedClient::from_seed(m, &seed)?)),
                |held| hamlyn_rats_tagged_client { held },
            )
        }
    })
}

/// Writes the `len` bytes at `data` (copied before this returns) at `offset` of the
/// server's slot with `tag`. `*out` (if `out` is not NULL) is the send's handle.
///
/// # Safety
///
/// `client` is NULL or live; `data` is readable for `len` bytes; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_tagged_write(
    client: *const hamlyn_rats_tagged_client,
    offset: u64,
    data: *const u8,
    len: usize,
    tag: u32,
    out: *mut *mut hamlyn_send,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let c = unsafe { handle(client) }?;
        // SAFETY: the function's contract.
        let bytes = unsafe { crate::bytes(data, len) }?;
        let h = c.held.with(|i, _| match i {
            Inst::TaggedClient(t) => Ok(t.write(offset, bytes, tag)?),
            _ => Err(wrong()),
        })?;
        // SAFETY: the function's contract.
        unsafe { send_out(&c.held.life, h, out) };
        Ok(())
    })
}

// ----- datagram -----

/// A datagram receiver with `buffers` buffers of `buffer_len` bytes each.
///
/// # Safety
///
/// `rats` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_datagram_receiver_new(
    rats: *const hamlyn_rats,
    buffers: u32,
    buffer_len: u64,
    out: *mut *mut hamlyn_rats_datagram_receiver,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        unsafe {
            make(
                rats,
                out,
                |m| {
                    let r = DatagramReceiver::new(m, buffers, buffer_len)?;
                    Ok(Inst::DatagramReceiver(r, HashMap::new(), 1))
                },
                |held| hamlyn_rats_datagram_receiver { held },
            )
        }
    })
}

/// A seed text for one sender, granting it `credits` buffers (datagrams in flight at
/// once), and a NUL into `buf` (as `hamlyn_rats_tagged_server_seed`).
///
/// # Safety
///
/// `receiver` is NULL or live; `buf` is NULL or writable for `cap` bytes; `out_needed`
/// is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_datagram_receiver_seed(
    receiver: *const hamlyn_rats_datagram_receiver,
    credits: u32,
    buf: *mut c_char,
    cap: usize,
    out_needed: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let r = unsafe { handle(receiver) }?;
        let seed = r.held.with(|i, _| match i {
            Inst::DatagramReceiver(d, _, _) => Ok(d.make_seed(credits)?),
            _ => Err(wrong()),
        })?;
        // SAFETY: the function's contract.
        unsafe { seed_out(&seed, buf, cap, out_needed) }
    })
}

/// The next datagram, waiting up to `timeout_ms` (negative: without end; 0: not at all):
/// `HAMLYN_RESULT_TIMEOUT` when none came. It holds its buffer (and its sender's credit)
/// until `hamlyn_rats_datagram_release`.
///
/// # Safety
///
/// `receiver` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_datagram_recv(
    receiver: *const hamlyn_rats_datagram_receiver,
    timeout_ms: i64,
    out: *mut hamlyn_rats_datagram,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let r = unsafe { handle(receiver) }?;
        non_null(out)?;
        let got = r.held.with(|i, _| match i {
            Inst::DatagramReceiver(d, held, next) => {
                let dg = if timeout_ms == 0 {
                    d.try_recv()?
                } else {
                    d.recv(wait_of(timeout_ms))?
                };
                let dg = dg.ok_or(hamlyn_result::Timeout)?;
                let id = *next;
                *next += 1;
                held.insert(id, dg);
                Ok(hamlyn_rats_datagram {
                    id,
                    len: dg.len,
                    src_node: dg.src.0,
                    sender: dg.sender,
                })
            }
            _ => Err(wrong()),
        })?;
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, got) };
        Ok(())
    })
}

/// Copies `len` bytes at `offset` of held datagram `id` into `buf`
/// (`HAMLYN_RESULT_OUT_OF_RANGE` past its end, `HAMLYN_RESULT_STATE` if it is not held).
///
/// # Safety
///
/// `receiver` is NULL or live; `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_datagram_read(
    receiver: *const hamlyn_rats_datagram_receiver,
    id: u64,
    offset: u64,
    buf: *mut u8,
    len: usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let r = unsafe { handle(receiver) }?;
        // SAFETY: the function's contract.
        let dst = unsafe { out_bytes(buf, len) }?;
        r.held.with(|i, _| match i {
            Inst::DatagramReceiver(d, held, _) => {
                let dg = held.get(&id).ok_or(hamlyn_result::State)?;
                if offset
                    .checked_add(len as u64)
                    .is_none_or(|end| end > dg.len)
                {
                    return Err(hamlyn_result::OutOfRange);
                }
                let mut part = *dg;
                part.offset += offset;
                part.len = len as u64;
                Ok(d.read(&part, dst)?)
            }
            _ => Err(wrong()),
        })
    })
}

/// Gives held datagram `id`'s buffer back to its sender (a fresh credit).
/// `HAMLYN_RESULT_STATE` if it is not held (released twice, or never received).
///
/// # Safety
///
/// `receiver` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_datagram_release(
    receiver: *const hamlyn_rats_datagram_receiver,
    id: u64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let r = unsafe { handle(receiver) }?;
        r.held.with(|i, _| match i {
            Inst::DatagramReceiver(d, held, _) => {
                let dg = held.remove(&id).ok_or(hamlyn_result::State)?;
                Ok(d.release(dg)?)
            }
            _ => Err(wrong()),
        })
    })
}

/// A datagram sender from a receiver's seed text.
///
/// # Safety
///
/// `rats` is NULL or live; `seed_text` is NULL or NUL-terminated; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_datagram_sender_new(
    rats: *const hamlyn_rats,
    seed_text: *const c_char,
    out: *mut *mut hamlyn_rats_datagram_sender,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let seed = unsafe { seed_in(seed_text) }?;
        // SAFETY: the function's contract.
        unsafe {
            make(
                rats,
                out,
                |m| Ok(Inst::DatagramSender(DatagramSender::from_seed(m, &seed)?)),
                |held| hamlyn_rats_datagram_sender { held },
            )
        }
    })
}

/// Sends the `len` bytes at `data` (copied before this returns) as one datagram, if the
/// sender holds a credit: `HAMLYN_RESULT_FULL` otherwise (nothing sent; the receiver's
/// releases give credits back). `*out` (if `out` is not NULL) is the send's handle.
///
/// # Safety
///
/// `sender` is NULL or live; `data` is readable for `len` bytes; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_datagram_send(
    sender: *const hamlyn_rats_datagram_sender,
    data: *const u8,
    len: usize,
    out: *mut *mut hamlyn_send,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(sender) }?;
        // SAFETY: the function's contract.
        let bytes = unsafe { crate::bytes(data, len) }?;
        let h = s.held.with(|i, _| match i {
            Inst::DatagramSender(d) => Ok(d.send(bytes, &[])?),
            _ => Err(wrong()),
        })?;
        // SAFETY: the function's contract.
        unsafe { send_out(&s.held.life, h, out) };
        Ok(())
    })
}

// ----- simple datagram -----

/// A simple datagram instance with one buffer of `len` bytes.
///
/// # Safety
///
/// `rats` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_simple_new(
    rats: *const hamlyn_rats,
    len: u64,
    out: *mut *mut hamlyn_rats_simple,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        unsafe {
            make(
                rats,
                out,
                |m| Ok(Inst::Simple(SimpleDatagram::new(m, len)?)),
                |held| hamlyn_rats_simple { held },
            )
        }
    })
}

/// The instance's seed text (what a client is made from), as
/// `hamlyn_rats_tagged_server_seed`.
///
/// # Safety
///
/// `simple` is NULL or live; `buf` is NULL or writable for `cap` bytes; `out_needed` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_simple_seed(
    simple: *const hamlyn_rats_simple,
    buf: *mut c_char,
    cap: usize,
    out_needed: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(simple) }?;
        let seed = s.held.with(|i, _| match i {
            Inst::Simple(d) => Ok(d.make_seed()?),
            _ => Err(wrong()),
        })?;
        // SAFETY: the function's contract.
        unsafe { seed_out(&seed, buf, cap, out_needed) }
    })
}

/// The next message, waiting up to `timeout_ms` (negative: without end; 0:
/// `HAMLYN_RESULT_EMPTY` if none is ready): `HAMLYN_RESULT_TIMEOUT` when none came. Its
/// bytes stay in the buffer until the next message overwrites them.
///
/// # Safety
///
/// `simple` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_simple_recv(
    simple: *const hamlyn_rats_simple,
    timeout_ms: i64,
    out: *mut hamlyn_rats_simple_message,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(simple) }?;
        non_null(out)?;
        let m = s.held.with(|i, _| match i {
            Inst::Simple(d) if timeout_ms == 0 => d.ready()?.ok_or(hamlyn_result::Empty),
            Inst::Simple(d) => d.recv(wait_of(timeout_ms))?.ok_or(hamlyn_result::Timeout),
            _ => Err(wrong()),
        })?;
        let msg = hamlyn_rats_simple_message {
            offset: m.offset,
            len: m.len,
            src_node: m.src.0,
            has_reply: u32::from(m.reply.is_some()),
        };
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, msg) };
        Ok(())
    })
}

/// Copies `len` bytes at `offset` of the instance's buffer into `buf`.
///
/// # Safety
///
/// `simple` is NULL or live; `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_simple_read(
    simple: *const hamlyn_rats_simple,
    offset: u64,
    buf: *mut u8,
    len: usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(simple) }?;
        // SAFETY: the function's contract.
        let dst = unsafe { out_bytes(buf, len) }?;
        s.held.with(|i, _| match i {
            Inst::Simple(d) => Ok(d.read(offset, dst)?),
            _ => Err(wrong()),
        })
    })
}

/// Answers the last message received with the `len` bytes at `data`, through the reply
/// seed it carried (`HAMLYN_RESULT_STATE` if it carried none); with `reply_with` 1 the
/// answer carries this instance's own reply seed, so the two can ping-pong.
///
/// # Safety
///
/// `simple` is NULL or live; `data` is readable for `len` bytes; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_simple_reply(
    simple: *const hamlyn_rats_simple,
    data: *const u8,
    len: usize,
    reply_with: u32,
    out: *mut *mut hamlyn_send,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(simple) }?;
        // SAFETY: the function's contract.
        let bytes = unsafe { crate::bytes(data, len) }?;
        let h = s.held.with(|i, mgr| match i {
            Inst::Simple(d) => {
                let to = d.reply_seed()?;
                let me = if reply_with != 0 {
                    Some(d.metadata_for_self()?)
                } else {
                    None
                };
                Ok(to.send(mgr, bytes, me.as_ref(), &[])?)
            }
            _ => Err(wrong()),
        })?;
        // SAFETY: the function's contract.
        unsafe { send_out(&s.held.life, h, out) };
        Ok(())
    })
}

/// A simple datagram client from an instance's seed text.
///
/// # Safety
///
/// `rats` is NULL or live; `seed_text` is NULL or NUL-terminated; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_simple_client_new(
    rats: *const hamlyn_rats,
    seed_text: *const c_char,
    out: *mut *mut hamlyn_rats_simple_client,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let seed = unsafe { seed_in(seed_text) }?;
        // SAFETY: the function's contract.
        unsafe {
            make(
                rats,
                out,
                |m| Ok(Inst::SimpleClient(SimpleClient::from_seed(m, &seed)?)),
                |held| hamlyn_rats_simple_client { held },
            )
        }
    })
}

/// Sends the `len` bytes at `data` (copied before this returns) to the instance the
/// client names; with `reply_to` (not NULL, an instance of the same manager) the message
/// carries its reply seed, and the answer lands there.
///
/// # Safety
///
/// `client` is NULL or live; `data` is readable for `len` bytes; `reply_to` is NULL or
/// live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_simple_client_send(
    client: *const hamlyn_rats_simple_client,
    data: *const u8,
    len: usize,
    reply_to: *const hamlyn_rats_simple,
    out: *mut *mut hamlyn_send,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let c = unsafe { handle(client) }?;
        // SAFETY: the function's contract.
        let bytes = unsafe { crate::bytes(data, len) }?;
        // SAFETY: the function's contract.
        let reply = unsafe { reply_to.as_ref() };
        if let Some(r) = reply {
            if !Arc::ptr_eq(&r.held.shared, &c.held.shared) {
                return Err(hamlyn_result::ForeignObject);
            }
        }
        let h = c.held.shared.inner.with(|i| {
            c.held.life.check()?;
            let seed = match reply {
                Some(r) => match i.insts.get(&r.held.key) {
                    Some(Inst::Simple(d)) => Some(d.metadata_for_self()?),
                    Some(_) => return Err(wrong()),
                    None => return Err(hamlyn_result::Closed),
                },
                None => None,
            };
            match i.insts.get(&c.held.key) {
                Some(Inst::SimpleClient(s)) => Ok(s.send(bytes, seed.as_ref(), &[])?),
                Some(_) => Err(wrong()),
                None => Err(hamlyn_result::Closed),
            }
        })?;
        // SAFETY: the function's contract.
        unsafe { send_out(&c.held.life, h, out) };
        Ok(())
    })
}

// ----- request/response -----

/// A request/response server taking requests of at most `max_request` bytes.
///
/// # Safety
///
/// `rats` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_request_server_new(
    rats: *const hamlyn_rats,
    max_request: u64,
    out: *mut *mut hamlyn_rats_request_server,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        unsafe {
            make(
                rats,
                out,
                |m| {
                    Ok(Inst::RequestServer(
                        RequestServer::new(m, max_request)?,
                        None,
                    ))
                },
                |held| hamlyn_rats_request_server { held },
            )
        }
    })
}

/// The server's seed text, as `hamlyn_rats_tagged_server_seed`.
///
/// # Safety
///
/// `server` is NULL or live; `buf` is NULL or writable for `cap` bytes; `out_needed` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_request_server_seed(
    server: *const hamlyn_rats_request_server,
    buf: *mut c_char,
    cap: usize,
    out_needed: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(server) }?;
        let seed = s.held.with(|i, _| match i {
            Inst::RequestServer(r, _) => Ok(r.make_seed()),
            _ => Err(wrong()),
        })?;
        // SAFETY: the function's contract.
        unsafe { seed_out(&seed, buf, cap, out_needed) }
    })
}

/// Publishes the server's seed in the registry under `name`
/// (`hamlyn_rats_request_client_lookup` finds it).
///
/// # Safety
///
/// `server` is NULL or live; `name` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_request_server_publish(
    server: *const hamlyn_rats_request_server,
    name: *const c_char,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(server) }?;
        // SAFETY: the function's contract.
        let name = unsafe { text(name) }?;
        s.held.with(|i, _| match i {
            Inst::RequestServer(r, _) => Ok(r.publish(name)?),
            _ => Err(wrong()),
        })
    })
}

/// The next request, waiting up to `timeout_ms` (negative: without end):
/// `HAMLYN_RESULT_TIMEOUT` when none came; `HAMLYN_RESULT_STATE` while one is held (answer
/// and release it first). Other requests are refused until it is released (their
/// clients retransmit).
///
/// # Safety
///
/// `server` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_request_recv(
    server: *const hamlyn_rats_request_server,
    timeout_ms: i64,
    out: *mut hamlyn_rats_request,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(server) }?;
        non_null(out)?;
        let r = s.held.with(|i, _| match i {
            Inst::RequestServer(srv, held) => {
                if held.is_some() {
                    return Err(hamlyn_result::State);
                }
                let r = srv
                    .recv(wait_of(timeout_ms))?
                    .ok_or(hamlyn_result::Timeout)?;
                *held = Some(r);
                Ok(r)
            }
            _ => Err(wrong()),
        })?;
        let req = hamlyn_rats_request {
            len: r.len,
            client: r.client,
            seq: r.seq,
        };
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, req) };
        Ok(())
    })
}

/// Runs `f` on the held request.
///
/// # Safety
///
/// `server` is NULL or live.
unsafe fn with_request<T>(
    server: *const hamlyn_rats_request_server,
    f: impl FnOnce(&mut RequestServer, &mut Option<Request>) -> Result<T, hamlyn_result>,
) -> Result<T, hamlyn_result> {
    // SAFETY: the caller's contract.
    let s = unsafe { handle(server) }?;
    s.held.with(|i, _| match i {
        Inst::RequestServer(srv, held) => f(srv, held),
        _ => Err(wrong()),
    })
}

/// Copies the held request's bytes (`len` of them, from `offset`) into `buf`
/// (`HAMLYN_RESULT_OUT_OF_RANGE` past its end, `HAMLYN_RESULT_STATE` if none is held).
///
/// # Safety
///
/// `server` is NULL or live; `buf` is writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_request_read(
    server: *const hamlyn_rats_request_server,
    offset: u64,
    buf: *mut u8,
    len: usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let dst = unsafe { out_bytes(buf, len) }?;
        // SAFETY: the function's contract.
        unsafe {
            with_request(server, |srv, held| {
                let r = held.as_ref().ok_or(hamlyn_result::State)?;
                let end = offset
                    .checked_add(len as u64)
                    .filter(|&e| e <= r.len)
                    .ok_or(hamlyn_result::OutOfRange)?;
                let all = srv.to_vec(r)?;
                let (from, to) = (offset as usize, end as usize);
                dst.copy_from_slice(all.get(from..to).ok_or(hamlyn_result::OutOfRange)?);
                Ok(())
            })
        }
    })
}

/// Sends the `len` bytes at `data` as the reply to the held request
/// (`HAMLYN_RESULT_STATE` if none is held). `*out` (if not NULL) is the send's handle.
///
/// # Safety
///
/// `server` is NULL or live; `data` is readable for `len` bytes; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_request_reply(
    server: *const hamlyn_rats_request_server,
    data: *const u8,
    len: usize,
    out: *mut *mut hamlyn_send,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let s = unsafe { handle(server) }?;
        // SAFETY: the function's contract.
        let bytes = unsafe { crate::bytes(data, len) }?;
        // SAFETY: the function's contract.
        let h = unsafe {
            with_request(server, |srv, held| {
                let r = held.as_ref().ok_or(hamlyn_result::State)?;
                Ok(srv.send_reply(r, bytes)?)
            })
        }?;
        // SAFETY: the function's contract.
        unsafe { send_out(&s.held.life, h, out) };
        Ok(())
    })
}

/// Frees the receive buffer for the next request (`HAMLYN_RESULT_STATE` if none is
/// held).
///
/// # Safety
///
/// `server` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_request_release(
    server: *const hamlyn_rats_request_server,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        unsafe {
            with_request(server, |srv, held| {
                held.take().ok_or(hamlyn_result::State)?;
                Ok(srv.release()?)
            })
        }
    })
}

/// A request/response client of the server whose seed text is `seed_text`, taking
/// replies of at most `max_reply` bytes.
///
/// # Safety
///
/// `rats` is NULL or live; `seed_text` is NULL or NUL-terminated; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_request_client_new(
    rats: *const hamlyn_rats,
    seed_text: *const c_char,
    max_reply: u64,
    out: *mut *mut hamlyn_rats_request_client,
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
                    Ok(Inst::RequestClient(RequestClient::from_seed(
                        m, &seed, max_reply,
                    )?))
                },
                |held| hamlyn_rats_request_client { held },
            )
        }
    })
}

/// A request/response client of the server published under `name`
/// (`HAMLYN_RESULT_NOT_FOUND` if none is).
///
/// # Safety
///
/// `rats` is NULL or live; `name` is NULL or NUL-terminated; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_request_client_lookup(
    rats: *const hamlyn_rats,
    name: *const c_char,
    max_reply: u64,
    out: *mut *mut hamlyn_rats_request_client,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let name = unsafe { text(name) }?;
        // SAFETY: the function's contract.
        unsafe {
            make(
                rats,
                out,
                |m| {
                    Ok(Inst::RequestClient(RequestClient::lookup(
                        m, name, max_reply,
                    )?))
                },
                |held| hamlyn_rats_request_client { held },
            )
        }
    })
}

/// Sends the `len` bytes at `data` as a request and waits up to `timeout_ms` (negative:
/// 30 s) for the reply, retransmitting while the server is busy or silent: the reply
/// goes to `reply` (capacity `cap`) and its length to `*out_len` (also written with
/// `HAMLYN_RESULT_BUFFER_TOO_SMALL`: the reply is then lost). `HAMLYN_RESULT_TIMEOUT`,
/// `HAMLYN_RESULT_PEER_GONE` (the server is gone).
///
/// # Safety
///
/// `client` is NULL or live; `data` is readable for `len` bytes; `reply` is NULL or
/// writable for `cap` bytes; `out_len` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_request_call(
    client: *const hamlyn_rats_request_client,
    data: *const u8,
    len: usize,
    timeout_ms: i64,
    reply: *mut u8,
    cap: usize,
    out_len: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let c = unsafe { handle(client) }?;
        // SAFETY: the function's contract.
        let bytes = unsafe { crate::bytes(data, len) }?;
        non_null(out_len)?;
        let t = crate::timeout(timeout_ms).unwrap_or(Duration::from_secs(30));
        let got = c.held.with(|i, _| match i {
            Inst::RequestClient(rc) => {
                let r = rc.call(bytes, t)?;
                let v = rc.reply_bytes(&r);
                rc.release();
                Ok(v?)
            }
            _ => Err(wrong()),
        })?;
        // SAFETY: `out_len` is non-NULL and writable; written even when too small.
        unsafe { put(out_len, got.len()) };
        if got.len() > cap {
            return Err(hamlyn_result::BufferTooSmall);
        }
        // SAFETY: the function's contract.
        let dst = unsafe { out_bytes(reply, got.len()) }?;
        dst.copy_from_slice(&got);
        Ok(())
    })
}

// ----- stream -----

/// A stream receiver with a ring of `ring` bytes and `entries` metadata entries
/// (messages in flight at once). Make it first: its seed makes the sender.
///
/// # Safety
///
/// `rats` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_stream_receiver_new(
    rats: *const hamlyn_rats,
    ring: u64,
    entries: u32,
    out: *mut *mut hamlyn_rats_stream_receiver,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        unsafe {
            make(
                rats,
                out,
                |m| {
                    Ok(Inst::StreamReceiver(
                        StreamReceiver::new(m, ring, entries)?,
                        None,
                    ))
                },
                |held| hamlyn_rats_stream_receiver { held },
            )
        }
    })
}

/// The receiver's seed text (what the sender is made from), as
/// `hamlyn_rats_tagged_server_seed`.
///
/// # Safety
///
/// `receiver` is NULL or live; `buf` is NULL or writable for `cap` bytes; `out_needed`
/// is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_stream_receiver_seed(
    receiver: *const hamlyn_rats_stream_receiver,
    buf: *mut c_char,
    cap: usize,
    out_needed: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let r = unsafe { handle(receiver) }?;
        let seed = r.held.with(|i, _| match i {
            Inst::StreamReceiver(s, _) => Ok(s.make_seed()?),
            _ => Err(wrong()),
        })?;
        // SAFETY: the function's contract.
        unsafe { seed_out(&seed, buf, cap, out_needed) }
    })
}

/// Reads the next bytes of the stream (`record` 0: whatever is there, crossing record
/// ends) or its next record (`record` 1), waiting up to `timeout_ms` (negative: without
/// end), into `buf` (capacity `cap`); `*out_len` is their length (also written with
/// `HAMLYN_RESULT_BUFFER_TOO_SMALL`: the same bytes come again with a larger buffer) and
/// `*out_record_end` (may be NULL) 1 if they end a record. Their ring space goes back to
/// the sender. `HAMLYN_RESULT_TIMEOUT` when nothing came, `HAMLYN_RESULT_END_OF_STREAM`
/// once the sender closed the stream and everything was read.
///
/// # Safety
///
/// `receiver` is NULL or live; `buf` is NULL or writable for `cap` bytes; `out_len` is
/// NULL or writable; `out_record_end` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_stream_read(
    receiver: *const hamlyn_rats_stream_receiver,
    record: u32,
    timeout_ms: i64,
    buf: *mut u8,
    cap: usize,
    out_len: *mut usize,
    out_record_end: *mut u32,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let r = unsafe { handle(receiver) }?;
        non_null(out_len)?;
        if record > 1 {
            return Err(hamlyn_result::InvalidArgument);
        }
        let (bytes, end) = r.held.with(|i, _| match i {
            Inst::StreamReceiver(s, pending) => {
                let v = match pending.take() {
                    Some(v) => v,
                    None => {
                        let t = wait_of(timeout_ms);
                        let v = if record == 1 {
                            s.read_record(t)?
                        } else {
                            s.read_bytes(t)?
                        };
                        v.ok_or(hamlyn_result::Timeout)?
                    }
                };
                let len = usize::try_from(v.len).map_err(|_| hamlyn_result::TooLong)?;
                if len > cap {
                    *pending = Some(v);
                    // SAFETY: `out_len` is non-NULL and writable.
                    unsafe { put(out_len, len) };
                    return Err(hamlyn_result::BufferTooSmall);
                }
                let bytes = s.copy(&v)?;
                s.release(&v)?;
                Ok((bytes, v.record_end))
            }
            _ => Err(wrong()),
        })?;
        // SAFETY: the function's contract.
        let dst = unsafe { out_bytes(buf, bytes.len()) }?;
        dst.copy_from_slice(&bytes);
        // SAFETY: `out_len` is non-NULL and writable; `out_record_end` when not NULL.
        unsafe {
            put(out_len, bytes.len());
            if !out_record_end.is_null() {
                put(out_record_end, u32::from(end));
            }
        }
        Ok(())
    })
}

/// A stream sender from a receiver's seed text.
///
/// # Safety
///
/// `rats` is NULL or live; `seed_text` is NULL or NUL-terminated; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_stream_sender_new(
    rats: *const hamlyn_rats,
    seed_text: *const c_char,
    out: *mut *mut hamlyn_rats_stream_sender,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let seed = unsafe { seed_in(seed_text) }?;
        // SAFETY: the function's contract.
        unsafe {
            make(
                rats,
                out,
                |m| Ok(Inst::StreamSender(StreamSender::from_seed(m, &seed)?)),
                |held| hamlyn_rats_stream_sender { held },
            )
        }
    })
}

/// Runs `f` on the stream sender.
///
/// # Safety
///
/// `sender` is NULL or live.
unsafe fn with_sender<T>(
    sender: *const hamlyn_rats_stream_sender,
    f: impl FnOnce(&mut StreamSender) -> Result<T, hamlyn_result>,
) -> Result<T, hamlyn_result> {
    // SAFETY: the caller's contract.
    let s = unsafe { handle(sender) }?;
    s.held.with(|i, _| match i {
        Inst::StreamSender(t) => f(t),
        _ => Err(wrong()),
    })
}

/// Writes the `len` bytes at `data` (copied before this returns) to the stream; with
/// `record` 1 they end a record. Small writes are coalesced until a flush or a larger
/// write. `HAMLYN_RESULT_FULL` when the receiver's ring has no room (nothing written:
/// write again once the receiver read on); `HAMLYN_RESULT_TOO_LONG` past the largest
/// write; `HAMLYN_RESULT_INVALID_ARGUMENT` for an empty record (`record` 1, `len` 0).
///
/// # Safety
///
/// `sender` is NULL or live; `data` is readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_stream_write(
    sender: *const hamlyn_rats_stream_sender,
    data: *const u8,
    len: usize,
    record: u32,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let bytes = unsafe { crate::bytes(data, len) }?;
        if record > 1 {
            return Err(hamlyn_result::InvalidArgument);
        }
        // SAFETY: the function's contract.
        unsafe {
            with_sender(sender, |s| {
                if record == 1 {
                    s.write_record(bytes)?;
                } else {
                    s.write_bytes(bytes)?;
                }
                Ok(())
            })
        }
    })
}

/// Sends what was coalesced.
///
/// # Safety
///
/// `sender` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_stream_flush(
    sender: *const hamlyn_rats_stream_sender,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        unsafe {
            with_sender(sender, |s| {
                s.flush()?;
                Ok(())
            })
        }
    })
}

/// Flushes and closes the stream: the receiver reads to its end, then gets
/// `HAMLYN_RESULT_END_OF_STREAM`. Nothing may be written after.
///
/// # Safety
///
/// `sender` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_rats_stream_close(
    sender: *const hamlyn_rats_stream_sender,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        unsafe {
            with_sender(sender, |s| {
                s.close()?;
                Ok(())
            })
        }
    })
}
