//! The control protocol between a client library and its engine.
//!
//! One request or reply per SOCK_SEQPACKET message: a one-byte tag, then the fields in
//! little-endian order ([`crate::codec`]). File descriptors travel beside the bytes with
//! SCM_RIGHTS: [`Request::RegisterArea`] carries the area's memfd; the
//! [`Reply::Attached`] reply carries the port memfd, the port's queue memfd (its
//! notification queues), the port's eventfd (readable when the port has work for the
//! client) and the engine's doorbell eventfd (written by a client that finds the engine
//! asleep). [`Reply::Direct`] carries the descriptors a direct sender maps (see there).
//! Decoding checks every length and never panics.

use crate::codec::{Reader, Writer};
use crate::error::WireError;
use crate::stats::{StatsPage, StatsSection};

/// Control protocol version (2: the port's queues in their own memfd; direct slots; 3:
/// typed statistics in pages, [`Request::Stats`] and [`Reply::StatsPage`]; 4: the
/// engine's back-pressure counters in the statistics, the wake-up descriptors are socket
/// pair ends; 6: receive endpoints and terminus rate limits, [`Request::CreateEndpoint`],
/// [`Request::SetRate`], and their statistics).
pub const CONTROL_VERSION: u16 = 6;
/// Largest control message in bytes (a statistics page included: see
/// [`crate::stats::PAGE_BUDGET`]).
pub const MAX_CONTROL_MSG: usize = 64 * 1024;
/// "No notification queue" in [`Request::CreateSlot`].
pub const NO_QUEUE: u32 = u32::MAX;

/// Slot mode codes used on the control socket.
pub mod mode {
    /// Normal.
    pub const NORMAL: u8 = 0;
    /// Paranoid.
    pub const PARANOID: u8 = 1;
    /// Paranoid one-shot.
    pub const PARANOID_ONE_SHOT: u8 = 2;
    /// Fast.
    pub const FAST: u8 = 3;
    /// A receive endpoint ([`super::Request::CreateEndpoint`]; never in `CreateSlot`).
    pub const ENDPOINT: u8 = 4;
}

/// Flag bits of [`Request::CreateEndpoint`].
pub mod endpoint_flag {
    /// A message that finds no posted buffer is also refused to its sender (an error
    /// completion, `NoBuffer`), not only counted (FLIPC's optimistic discard).
    pub const REPORT_DISCARDS: u8 = 1;
    /// Danger: same-node ticket holders may map the endpoint and deposit into its posted
    /// buffers without the engine, as for direct slots ([`super::perm::DANGER_DIRECT`]).
    pub const DANGER_DIRECT: u8 = 2;
}

/// Slot permission bits used on the control socket.
pub mod perm {
    /// Remote writes.
    pub const WRITE: u8 = 1;
    /// Remote reads.
    pub const READ: u8 = 2;
    /// Remote atomics.
    pub const ATOMIC: u8 = 4;
    /// Danger: holders of the slot's key on this node may map the slot and its
    /// notification queue and deposit without the engine ([`super::Request::OpenDirect`];
    /// DESIGN §2, "Direct slots"). Not for paranoid modes.
    pub const DANGER_DIRECT: u8 = 8;
}

/// A client's request to its engine.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// Attach: make this connection a port with the given numbers of termini and queues.
    Attach {
        /// [`CONTROL_VERSION`] the client speaks.
        version: u16,
        /// The client's process id (for stats and logs).
        pid: u32,
        /// Termini wanted (1..=64).
        termini: u16,
        /// Notification queues wanted (1..=64).
        queues: u16,
        /// Entries per notification queue (power of two, 64..=65536).
        queue_cap: u32,
    },
    /// Register the memfd sent with this message as an area of `len` bytes.
    RegisterArea {
        /// Bytes of the area.
        len: u64,
    },
    /// Unregister an area (refused while a slot uses it).
    UnregisterArea {
        /// The area.
        area: u32,
    },
    /// Create a slot.
    CreateSlot {
        /// Message area.
        area: u32,
        /// Offset of the slot's base in the area.
        base: u64,
        /// Bytes the slot covers.
        len: u64,
        /// [`mode`] code.
        mode: u8,
        /// [`perm`] bits.
        perms: u8,
        /// Metadata area (ignored for fast slots).
        meta_area: u32,
        /// Offset of metadata entry 0 in the metadata area.
        meta_base: u64,
        /// Number of metadata entries.
        meta_count: u32,
        /// Notification queue index in the port, or [`NO_QUEUE`].
        queue: u32,
    },
    /// Give a slot a new key (and lift a revocation).
    Rekey {
        /// The slot.
        slot: u32,
    },
    /// Revoke every ticket for a slot until it is rekeyed.
    Revoke {
        /// The slot.
        slot: u32,
    },
    /// Set or clear write-inhibit on a slot.
    Inhibit {
        /// The slot.
        slot: u32,
        /// Inhibit (true) or allow (false) writes.
        on: bool,
    },
    /// Destroy a slot.
    DestroySlot {
        /// The slot.
        slot: u32,
    },
    /// Start serving a terminus of the port at a priority (0 = highest).
    OpenTerminus {
        /// Terminus index in the port.
        index: u16,
        /// Priority; lower numbers are served first.
        priority: u8,
    },
    /// A page of the engine's statistics ([`crate::stats`]; [`crate::stats::fetch`]
    /// walks them all); answered [`Reply::StatsPage`]. Allowed before attaching.
    Stats {
        /// The part wanted.
        section: StatsSection,
        /// The first key wanted (client id, node id or slot number; ignored for the
        /// summary): 0, then the `next` of the previous page.
        start: u32,
    },
    /// Publish `seed` (its text form) under `name` in the cluster's name registry
    /// (seed 000 §6.3 bootstrap). The name is then owned by the publishing client: it
    /// may publish it again (replacing the seed) or unpublish it; anyone else is refused
    /// (`NotOwner`). It is removed when its publisher disconnects.
    Publish {
        /// The name (1..=255 bytes of UTF-8).
        name: String,
        /// The seed's text form.
        seed: String,
    },
    /// Removes `name` from the registry; only the client that published it may
    /// (`NotOwner` otherwise). A name is also removed when its publisher disconnects.
    Unpublish {
        /// The name.
        name: String,
    },
    /// Look a name up in the cluster's name registry.
    Lookup {
        /// The name.
        name: String,
    },
    /// A round trip through this engine and `node`'s engine (`hamlyn ping`); answered
    /// `Ok` when the echo returns.
    Ping {
        /// The node to reach.
        node: u32,
    },
    /// Map a direct slot (one created with [`perm::DANGER_DIRECT`]) to deposit into it
    /// without the engine: answered [`Reply::Direct`] after the engine checked the ticket
    /// names this engine, the slot exists, is not revoked, `key` is its key, it allows
    /// direct access and writes, and is not write-inhibited.
    OpenDirect {
        /// The node the ticket names (must be this engine's).
        node: u32,
        /// The incarnation the ticket names (0: any; otherwise this engine's).
        incarnation: u32,
        /// The slot.
        slot: u32,
        /// The key the ticket carries.
        key: u64,
    },
    /// Goodbye: the client is about to close its connection on purpose, so the engine
    /// counts it as detached, not lost (`clients_detached` in [`crate::stats`]).
    /// Answered `Ok`.
    Detach,
    /// Create a receive endpoint (seed 002): a slot over `base..base + layout.len()` of
    /// `area` laid out as [`crate::endpoint`] says, whose messages (single packets of at
    /// most `buf_size` bytes, sent with fast tickets) land in the next buffer the receiver
    /// posted. Answered [`Reply::Slot`].
    CreateEndpoint {
        /// The area holding the endpoint.
        area: u32,
        /// Offset of the endpoint in the area (a multiple of 64).
        base: u64,
        /// Bytes per buffer (see [`crate::endpoint::EndpointLayout::new`]).
        buf_size: u32,
        /// Number of buffers.
        buffers: u32,
        /// Notification queue index in the port, or [`NO_QUEUE`].
        queue: u32,
        /// [`endpoint_flag`] bits.
        flags: u8,
    },
    /// Limits what a terminus of the port sends (token buckets the engine keeps per
    /// terminus; 0 is unlimited, both 0 lifts the limit). Answered `Ok`.
    SetRate {
        /// Terminus index in the port.
        terminus: u16,
        /// Payload bytes per second.
        bytes_per_sec: u64,
        /// Messages per second.
        msgs_per_sec: u64,
    },
    /// Active messages (seed 003 §5.4, `grim_synchHandlers`): this client registers
    /// handlers by name and argument-layout fingerprint in the cluster's handler table
    /// (on the registry node), which gives each name a dense cluster-wide id the first
    /// time it is registered. Answered `Ok`; refused whole (`InvalidArgument`, naming
    /// it) if a name is live with another fingerprint. A client's registrations leave
    /// with it.
    AmRegister {
        /// (name, fingerprint) pairs, at most [`MAX_AM_HANDLERS_PER_REQUEST`].
        handlers: Vec<(String, u64)>,
    },
    /// Active messages: this client no longer has these handlers. A name nobody has any
    /// more stays in the table with its id (ids are never reused), not live, and its
    /// epoch moves on when it is registered again. Answered `Ok`.
    AmUnregister {
        /// Names, at most [`MAX_AM_HANDLERS_PER_REQUEST`].
        names: Vec<String>,
    },
    /// Active messages: a page of the cluster's handler table, from id `start`;
    /// answered [`Reply::AmTable`].
    AmTable {
        /// The first id wanted: 0, then the `next` of the previous page.
        start: u32,
    },
    /// Active messages: run engine-resident handler `handler` (one of
    /// [`am_engine`]'s, which every engine has, under the same ids everywhere) on
    /// `node`'s engine with four arguments; answered [`Reply::AmReply`].
    AmCall {
        /// The node whose engine runs it.
        node: u32,
        /// The handler's id.
        handler: u32,
        /// Its arguments.
        args: [u64; 4],
    },
    /// Active messages: this client's per-handler counters, replacing what it reported
    /// before (kept by its engine until it leaves, shown by `hamlyn stat`); answered `Ok`.
    AmReport {
        /// (handler name, [`AmCounts`]), at most [`MAX_AM_REPORT`].
        handlers: Vec<(String, AmCounts)>,
    },
    /// Active messages: the per-handler counters this engine's clients reported, summed
    /// by handler name; answered [`Reply::AmCounters`].
    AmCounters,
}

/// Most handlers one [`Request::AmReport`] or [`Reply::AmCounters`] carries.
pub const MAX_AM_REPORT: usize = 256;

/// What happened to one active-message handler in a process (or summed over a node's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AmCounts {
    /// Times it ran.
    pub calls: u64,
    /// Replies it gave.
    pub replies: u64,
    /// Times it failed (an error, a second reply, no reply when one was asked for).
    pub errors: u64,
    /// Messages naming it refused without running it (not registered there any more,
    /// an old epoch).
    pub refused: u64,
}

fn put_counts(w: &mut Writer, c: &AmCounts) {
    w.u64(c.calls).u64(c.replies).u64(c.errors).u64(c.refused);
}

fn get_counts(r: &mut Reader<'_>) -> Result<AmCounts, WireError> {
    Ok(AmCounts {
        calls: r.u64()?,
        replies: r.u64()?,
        errors: r.u64()?,
        refused: r.u64()?,
    })
}

fn put_report(w: &mut Writer, rows: &[(String, AmCounts)]) {
    w.u16(rows.len() as u16);
    for (name, c) in rows {
        w.bytes(name.as_bytes());
        put_counts(w, c);
    }
}

fn get_report(r: &mut Reader<'_>) -> Result<Vec<(String, AmCounts)>, WireError> {
    let n = am_count(r, MAX_AM_REPORT)?;
    let mut rows = Vec::with_capacity(n);
    for _ in 0..n {
        rows.push((handler_name(r)?, get_counts(r)?));
    }
    Ok(rows)
}

/// The handlers every engine runs itself (seed 003 §5.4's predefined handlers), with
/// their ids: the first ids of every cluster's active-message table.
pub mod am_engine {
    /// `hamlyn.ping`: replies `[args[0], the engine's node id, 0, 0]`.
    pub const PING: u32 = 0;
    /// `hamlyn.echo`: replies its arguments.
    pub const ECHO: u32 = 1;
    /// `hamlyn.counter`: adds `args[0]` to the engine's counter; replies
    /// `[the value before, the value after, 0, 0]`.
    pub const COUNTER: u32 = 2;
    /// `hamlyn.stats`: replies the calls each of these four handlers answered.
    pub const STATS: u32 = 3;
    /// Their names, by id.
    pub const NAMES: [&str; 4] = [
        "hamlyn.ping",
        "hamlyn.echo",
        "hamlyn.counter",
        "hamlyn.stats",
    ];
    /// The fingerprint every engine-resident handler is registered with (four u64
    /// arguments, no payload).
    pub const FINGERPRINT: u64 = 0x4841_4d4c_594e_3455;
}

/// Longest active-message handler name in bytes.
pub const MAX_AM_HANDLER_NAME: usize = 64;
/// Most handlers one [`Request::AmRegister`] or [`Request::AmUnregister`] names.
pub const MAX_AM_HANDLERS_PER_REQUEST: usize = 32;
/// Most entries one [`Reply::AmTable`] page carries.
pub const AM_TABLE_PAGE: usize = 32;

/// One entry of the cluster's active-message handler table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AmHandlerEntry {
    /// The dense cluster-wide id.
    pub id: u32,
    /// Moves on each time the name becomes live again after nobody had it.
    pub epoch: u32,
    /// Whether some client has it registered now.
    pub live: bool,
    /// The fingerprint of its argument layout.
    pub fingerprint: u64,
    /// Its name.
    pub name: String,
}

/// The engine's answer to a [`Request`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// Attached; the port memfd, queue memfd, port eventfd and doorbell eventfd travel
    /// with this reply, in that order.
    Attached {
        /// The client's id on this engine (owner of its slots).
        client: u32,
        /// The engine's node id.
        node: u32,
        /// The engine's incarnation.
        incarnation: u32,
        /// Bytes of the port memfd.
        port_len: u64,
    },
    /// An area was registered.
    Area {
        /// Its id.
        area: u32,
    },
    /// A slot was created or rekeyed.
    Slot {
        /// Its number.
        slot: u32,
        /// Its key.
        key: u64,
    },
    /// Done.
    Ok,
    /// A page of statistics.
    StatsPage {
        /// The page.
        page: StatsPage,
        /// The `start` of the section's next page; `None`: this page ends the section.
        next: Option<u32>,
    },
    /// A registry lookup's answer: the seed's text form.
    Seed {
        /// The seed text.
        seed: String,
    },
    /// A direct slot's geometry. Descriptors travel with it, in this order: the message
    /// area's memfd; the metadata area's memfd (not for fast slots); and if the slot has
    /// a notification queue, the queue memfd of its owner's port and that port's eventfd.
    Direct {
        /// The slot's [`mode`] code ([`mode::NORMAL`] or [`mode::FAST`]).
        mode: u8,
        /// Offset of the slot's first byte in the message area.
        base: u64,
        /// Bytes the slot covers.
        len: u64,
        /// Offset of the slot's metadata entry 0 in the metadata area (0 for fast slots;
        /// an endpoint's buffer size for [`mode::ENDPOINT`]).
        meta_base: u64,
        /// The slot's metadata entries (0 for fast slots; an endpoint's number of
        /// buffers for [`mode::ENDPOINT`]).
        meta_count: u32,
        /// Offset of the slot's notification queue in the queue memfd.
        queue_offset: u64,
        /// Entries of that queue; 0: the slot has no queue (and no queue descriptors
        /// come).
        queue_cap: u32,
    },
    /// The request failed.
    Error {
        /// A [`ControlErrorCode`] value.
        code: u16,
        /// What went wrong, for people.
        message: String,
    },
    /// A page of the active-message handler table ([`Request::AmTable`]).
    AmTable {
        /// The table's version (moves on with every change).
        version: u64,
        /// Entries in id order, at most [`AM_TABLE_PAGE`].
        entries: Vec<AmHandlerEntry>,
        /// The `start` of the next page; `None`: this page ends the table.
        next: Option<u32>,
    },
    /// An engine-resident handler's reply ([`Request::AmCall`]).
    AmReply {
        /// Its four values.
        args: [u64; 4],
    },
    /// The per-handler counters of an engine's clients, summed by name
    /// ([`Request::AmCounters`]), at most [`MAX_AM_REPORT`] handlers.
    AmCounters {
        /// (handler name, counters), by name.
        handlers: Vec<(String, AmCounts)>,
    },
}

/// Error codes in [`Reply::Error`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u16)]
pub enum ControlErrorCode {
    /// The request did not decode.
    BadRequest = 1,
    /// The client is not attached yet (or attached twice).
    NotAttached = 2,
    /// An argument is out of range.
    InvalidArgument = 3,
    /// The named object does not exist or is not the client's.
    NotFound = 4,
    /// The named object belongs to another client.
    NotOwner = 5,
    /// An area fd failed the checks (size, seals).
    BadArea = 6,
    /// The object is in use.
    Busy = 7,
    /// The engine ran out of a resource.
    Exhausted = 8,
    /// The protocol version is not supported.
    Version = 9,
    /// The ticket names another node, or an earlier incarnation of this one.
    WrongNode = 10,
    /// The key is not the slot's.
    BadKey = 11,
    /// The slot is revoked.
    Revoked = 12,
    /// The slot does not allow direct access (not created with [`perm::DANGER_DIRECT`],
    /// or it refuses writes).
    NotDirect = 13,
    /// The slot is write-inhibited.
    Inhibited = 14,
    /// The request would take the client past one of its quotas (areas, bytes mapped,
    /// slots, termini, queues) or the engine past its mapping budget.
    Quota = 15,
    /// The node that must answer (the registry node, a pinged node) cannot be reached.
    Unreachable = 16,
}

impl ControlErrorCode {
    /// The code for a wire value.
    pub fn from_u16(v: u16) -> Option<ControlErrorCode> {
        use ControlErrorCode::*;
        [
            BadRequest,
            NotAttached,
            InvalidArgument,
            NotFound,
            NotOwner,
            BadArea,
            Busy,
            Exhausted,
            Version,
            WrongNode,
            BadKey,
            Revoked,
            NotDirect,
            Inhibited,
            Quota,
            Unreachable,
        ]
        .into_iter()
        .find(|c| *c as u16 == v)
    }
}

const MAX_TEXT: usize = MAX_CONTROL_MSG - 16;

impl Request {
    /// The request's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match *self {
            Request::Attach {
                version,
                pid,
                termini,
                queues,
                queue_cap,
            } => {
                w.u8(1)
                    .u16(version)
                    .u32(pid)
                    .u16(termini)
                    .u16(queues)
                    .u32(queue_cap);
            }
            Request::RegisterArea { len } => {
                w.u8(2).u64(len);
            }
            Request::UnregisterArea { area } => {
                w.u8(3).u32(area);
            }
            Request::CreateSlot {
                area,
                base,
                len,
                mode,
                perms,
                meta_area,
                meta_base,
                meta_count,
                queue,
            } => {
                w.u8(4).u32(area).u64(base).u64(len).u8(mode).u8(perms);
                w.u32(meta_area).u64(meta_base).u32(meta_count).u32(queue);
            }
            Request::Rekey { slot } => {
                w.u8(5).u32(slot);
            }
            Request::Revoke { slot } => {
                w.u8(6).u32(slot);
            }
            Request::Inhibit { slot, on } => {
                w.u8(7).u32(slot).u8(u8::from(on));
            }
            Request::DestroySlot { slot } => {
                w.u8(8).u32(slot);
            }
            Request::OpenTerminus { index, priority } => {
                w.u8(9).u16(index).u8(priority);
            }
            Request::Stats { section, start } => {
                w.u8(10).u8(section as u8).u32(start);
            }
            Request::Publish { ref name, ref seed } => {
                w.u8(11).bytes(name.as_bytes()).bytes(seed.as_bytes());
            }
            Request::Lookup { ref name } => {
                w.u8(12).bytes(name.as_bytes());
            }
            Request::Ping { node } => {
                w.u8(13).u32(node);
            }
            Request::OpenDirect {
                node,
                incarnation,
                slot,
                key,
            } => {
                w.u8(14).u32(node).u32(incarnation).u32(slot).u64(key);
            }
            Request::Detach => {
                w.u8(15);
            }
            Request::CreateEndpoint {
                area,
                base,
                buf_size,
                buffers,
                queue,
                flags,
            } => {
                w.u8(32).u32(area).u64(base).u32(buf_size).u32(buffers);
                w.u32(queue).u8(flags);
            }
            Request::SetRate {
                terminus,
                bytes_per_sec,
                msgs_per_sec,
            } => {
                w.u8(33).u16(terminus).u64(bytes_per_sec).u64(msgs_per_sec);
            }
            Request::Unpublish { ref name } => {
                w.u8(16).bytes(name.as_bytes());
            }
            Request::AmRegister { ref handlers } => {
                w.u8(40).u16(handlers.len() as u16);
                for (name, fp) in handlers {
                    w.bytes(name.as_bytes()).u64(*fp);
                }
            }
            Request::AmUnregister { ref names } => {
                w.u8(41).u16(names.len() as u16);
                for name in names {
                    w.bytes(name.as_bytes());
                }
            }
            Request::AmTable { start } => {
                w.u8(42).u32(start);
            }
            Request::AmCall {
                node,
                handler,
                args,
            } => {
                w.u8(43).u32(node).u32(handler);
                for a in args {
                    w.u64(a);
                }
            }
            Request::AmReport { ref handlers } => {
                w.u8(44);
                put_report(&mut w, handlers);
            }
            Request::AmCounters => {
                w.u8(45);
            }
        }
        w.0
    }

    /// Decodes a request; every byte must be used.
    pub fn decode(bytes: &[u8]) -> Result<Request, WireError> {
        let mut r = Reader::new(bytes);
        let req = match r.u8()? {
            1 => Request::Attach {
                version: r.u16()?,
                pid: r.u32()?,
                termini: r.u16()?,
                queues: r.u16()?,
                queue_cap: r.u32()?,
            },
            2 => Request::RegisterArea { len: r.u64()? },
            3 => Request::UnregisterArea { area: r.u32()? },
            4 => Request::CreateSlot {
                area: r.u32()?,
                base: r.u64()?,
                len: r.u64()?,
                mode: r.u8()?,
                perms: r.u8()?,
                meta_area: r.u32()?,
                meta_base: r.u64()?,
                meta_count: r.u32()?,
                queue: r.u32()?,
            },
            5 => Request::Rekey { slot: r.u32()? },
            6 => Request::Revoke { slot: r.u32()? },
            7 => {
                let slot = r.u32()?;
                let on = match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => {
                        return Err(WireError::InvalidField {
                            field: "on",
                            why: "must be 0 or 1",
                        })
                    }
                };
                Request::Inhibit { slot, on }
            }
            8 => Request::DestroySlot { slot: r.u32()? },
            9 => Request::OpenTerminus {
                index: r.u16()?,
                priority: r.u8()?,
            },
            10 => Request::Stats {
                section: StatsSection::from_u8(r.u8()?).ok_or(WireError::InvalidField {
                    field: "stats section",
                    why: "unknown section",
                })?,
                start: r.u32()?,
            },
            11 => Request::Publish {
                name: name(&mut r)?,
                seed: seed_text(&mut r)?,
            },
            12 => Request::Lookup {
                name: name(&mut r)?,
            },
            13 => Request::Ping { node: r.u32()? },
            14 => Request::OpenDirect {
                node: r.u32()?,
                incarnation: r.u32()?,
                slot: r.u32()?,
                key: r.u64()?,
            },
            15 => Request::Detach,
            32 => Request::CreateEndpoint {
                area: r.u32()?,
                base: r.u64()?,
                buf_size: r.u32()?,
                buffers: r.u32()?,
                queue: r.u32()?,
                flags: r.u8()?,
            },
            33 => Request::SetRate {
                terminus: r.u16()?,
                bytes_per_sec: r.u64()?,
                msgs_per_sec: r.u64()?,
            },
            16 => Request::Unpublish {
                name: name(&mut r)?,
            },
            40 => {
                let n = am_count(&mut r, MAX_AM_HANDLERS_PER_REQUEST)?;
                let mut handlers = Vec::with_capacity(n);
                for _ in 0..n {
                    handlers.push((handler_name(&mut r)?, r.u64()?));
                }
                Request::AmRegister { handlers }
            }
            41 => {
                let n = am_count(&mut r, MAX_AM_HANDLERS_PER_REQUEST)?;
                let mut names = Vec::with_capacity(n);
                for _ in 0..n {
                    names.push(handler_name(&mut r)?);
                }
                Request::AmUnregister { names }
            }
            42 => Request::AmTable { start: r.u32()? },
            43 => Request::AmCall {
                node: r.u32()?,
                handler: r.u32()?,
                args: [r.u64()?, r.u64()?, r.u64()?, r.u64()?],
            },
            44 => Request::AmReport {
                handlers: get_report(&mut r)?,
            },
            45 => Request::AmCounters,
            _ => {
                return Err(WireError::InvalidField {
                    field: "request tag",
                    why: "unknown tag",
                })
            }
        };
        r.finish()?;
        Ok(req)
    }
}

/// Longest registry name in bytes.
pub const MAX_NAME: usize = 255;
/// Longest seed text in bytes.
pub const MAX_SEED_TEXT: usize = 4096;

fn name(r: &mut Reader<'_>) -> Result<String, WireError> {
    let b = r.bytes(MAX_NAME)?;
    if b.is_empty() {
        return Err(WireError::InvalidField {
            field: "name",
            why: "empty",
        });
    }
    String::from_utf8(b.to_vec()).map_err(|_| WireError::InvalidField {
        field: "name",
        why: "not UTF-8",
    })
}

fn am_count(r: &mut Reader<'_>, max: usize) -> Result<usize, WireError> {
    let n = usize::from(r.u16()?);
    if n > max {
        return Err(WireError::InvalidField {
            field: "handler count",
            why: "more than one request or page carries",
        });
    }
    Ok(n)
}

fn handler_name(r: &mut Reader<'_>) -> Result<String, WireError> {
    let b = r.bytes(MAX_AM_HANDLER_NAME)?;
    if b.is_empty() {
        return Err(WireError::InvalidField {
            field: "handler name",
            why: "empty",
        });
    }
    String::from_utf8(b.to_vec()).map_err(|_| WireError::InvalidField {
        field: "handler name",
        why: "not UTF-8",
    })
}

fn seed_text(r: &mut Reader<'_>) -> Result<String, WireError> {
    let b = r.bytes(MAX_SEED_TEXT)?;
    String::from_utf8(b.to_vec()).map_err(|_| WireError::InvalidField {
        field: "seed",
        why: "not UTF-8",
    })
}

fn text(r: &mut Reader<'_>) -> Result<String, WireError> {
    let b = r.bytes(MAX_TEXT)?;
    String::from_utf8(b.to_vec()).map_err(|_| WireError::InvalidField {
        field: "text",
        why: "not UTF-8",
    })
}

impl Reply {
    /// The reply's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            Reply::Attached {
                client,
                node,
                incarnation,
                port_len,
            } => {
                w.u8(1)
                    .u32(*client)
                    .u32(*node)
                    .u32(*incarnation)
                    .u64(*port_len);
            }
            Reply::Area { area } => {
                w.u8(2).u32(*area);
            }
            Reply::Slot { slot, key } => {
                w.u8(3).u32(*slot).u64(*key);
            }
            Reply::Ok => {
                w.u8(4);
            }
            Reply::StatsPage { page, next } => {
                // Tag 5 was the JSON text of control version 2.
                w.u8(9);
                page.put(&mut w);
                match next {
                    None => w.u8(0),
                    Some(n) => w.u8(1).u32(*n),
                };
            }
            Reply::Seed { seed } => {
                w.u8(7).bytes(seed.as_bytes());
            }
            Reply::Direct {
                mode,
                base,
                len,
                meta_base,
                meta_count,
                queue_offset,
                queue_cap,
            } => {
                w.u8(8).u8(*mode).u64(*base).u64(*len);
                w.u64(*meta_base).u32(*meta_count);
                w.u64(*queue_offset).u32(*queue_cap);
            }
            Reply::AmTable {
                version,
                entries,
                next,
            } => {
                w.u8(40).u64(*version).u16(entries.len() as u16);
                for e in entries {
                    w.u32(e.id)
                        .u32(e.epoch)
                        .u8(u8::from(e.live))
                        .u64(e.fingerprint);
                    w.bytes(e.name.as_bytes());
                }
                match next {
                    None => w.u8(0),
                    Some(n) => w.u8(1).u32(*n),
                };
            }
            Reply::AmReply { args } => {
                w.u8(41);
                for a in args {
                    w.u64(*a);
                }
            }
            Reply::AmCounters { handlers } => {
                w.u8(42);
                put_report(&mut w, handlers);
            }
            Reply::Error { code, message } => {
                let n = message.len().min(1024);
                w.u8(6)
                    .u16(*code)
                    .bytes(&message.as_bytes()[..floor_char(message, n)]);
            }
        }
        w.0
    }

    /// Decodes a reply; every byte must be used.
    pub fn decode(bytes: &[u8]) -> Result<Reply, WireError> {
        let mut r = Reader::new(bytes);
        let rep = match r.u8()? {
            1 => Reply::Attached {
                client: r.u32()?,
                node: r.u32()?,
                incarnation: r.u32()?,
                port_len: r.u64()?,
            },
            2 => Reply::Area { area: r.u32()? },
            3 => Reply::Slot {
                slot: r.u32()?,
                key: r.u64()?,
            },
            4 => Reply::Ok,
            9 => Reply::StatsPage {
                page: StatsPage::get(&mut r)?,
                next: match r.u8()? {
                    0 => None,
                    1 => Some(r.u32()?),
                    _ => {
                        return Err(WireError::InvalidField {
                            field: "next",
                            why: "presence must be 0 or 1",
                        })
                    }
                },
            },
            6 => Reply::Error {
                code: r.u16()?,
                message: text(&mut r)?,
            },
            7 => Reply::Seed {
                seed: seed_text(&mut r)?,
            },
            40 => {
                let version = r.u64()?;
                let n = am_count(&mut r, AM_TABLE_PAGE)?;
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    let id = r.u32()?;
                    let epoch = r.u32()?;
                    let live = match r.u8()? {
                        0 => false,
                        1 => true,
                        _ => {
                            return Err(WireError::InvalidField {
                                field: "live",
                                why: "must be 0 or 1",
                            })
                        }
                    };
                    entries.push(AmHandlerEntry {
                        id,
                        epoch,
                        live,
                        fingerprint: r.u64()?,
                        name: handler_name(&mut r)?,
                    });
                }
                let next = match r.u8()? {
                    0 => None,
                    1 => Some(r.u32()?),
                    _ => {
                        return Err(WireError::InvalidField {
                            field: "next",
                            why: "presence must be 0 or 1",
                        })
                    }
                };
                Reply::AmTable {
                    version,
                    entries,
                    next,
                }
            }
            41 => Reply::AmReply {
                args: [r.u64()?, r.u64()?, r.u64()?, r.u64()?],
            },
            42 => Reply::AmCounters {
                handlers: get_report(&mut r)?,
            },
            8 => Reply::Direct {
                mode: r.u8()?,
                base: r.u64()?,
                len: r.u64()?,
                meta_base: r.u64()?,
                meta_count: r.u32()?,
                queue_offset: r.u64()?,
                queue_cap: r.u32()?,
            },
            _ => {
                return Err(WireError::InvalidField {
                    field: "reply tag",
                    why: "unknown tag",
                })
            }
        };
        r.finish()?;
        Ok(rep)
    }
}

/// The largest index ≤ `n` on a char boundary of `s`.
fn floor_char(s: &str, mut n: usize) -> usize {
    while n > 0 && !s.is_char_boundary(n) {
        n -= 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_requests() -> Vec<Request> {
        vec![
            Request::Attach {
                version: 1,
                pid: 42,
                termini: 4,
                queues: 2,
                queue_cap: 1024,
            },
            Request::RegisterArea { len: 1 << 20 },
            Request::UnregisterArea { area: 3 },
            Request::CreateSlot {
                area: 1,
                base: 64,
                len: 4096,
                mode: mode::PARANOID,
                perms: perm::WRITE | perm::READ,
                meta_area: 2,
                meta_base: 0,
                meta_count: 16,
                queue: 0,
            },
            Request::CreateEndpoint {
                area: 1,
                base: 128,
                buf_size: 256,
                buffers: 9,
                queue: 0,
                flags: endpoint_flag::REPORT_DISCARDS,
            },
            Request::SetRate {
                terminus: 3,
                bytes_per_sec: 1 << 30,
                msgs_per_sec: 7,
            },
            Request::Rekey { slot: 5 },
            Request::Revoke { slot: 5 },
            Request::Inhibit { slot: 5, on: true },
            Request::DestroySlot { slot: 5 },
            Request::OpenTerminus {
                index: 2,
                priority: 1,
            },
            Request::Stats {
                section: StatsSection::Slots,
                start: 1500,
            },
            Request::Publish {
                name: "svc".into(),
                seed: "hmseed1-abc".into(),
            },
            Request::Lookup { name: "svc".into() },
            Request::Unpublish { name: "svc".into() },
            Request::Ping { node: 3 },
            Request::OpenDirect {
                node: 7,
                incarnation: 99,
                slot: 5,
                key: 0xFEED_FACE_CAFE_BEEF,
            },
            Request::Detach,
            Request::AmRegister {
                handlers: vec![("ping".into(), 7), ("sum".into(), u64::MAX)],
            },
            Request::AmUnregister {
                names: vec!["sum".into()],
            },
            Request::AmTable { start: 3 },
            Request::AmCall {
                node: 2,
                handler: am_engine::COUNTER,
                args: [1, 2, 3, u64::MAX],
            },
            Request::AmReport {
                handlers: vec![(
                    "sum".into(),
                    AmCounts {
                        calls: 5,
                        replies: 4,
                        errors: 1,
                        refused: 2,
                    },
                )],
            },
            Request::AmCounters,
        ]
    }

    #[test]
    fn requests_round_trip_and_reject_truncation_and_trailing_bytes() {
        for req in all_requests() {
            let b = req.encode();
            assert_eq!(Request::decode(&b).unwrap(), req);
            for n in 0..b.len() {
                assert!(Request::decode(&b[..n]).is_err(), "{req:?} cut at {n}");
            }
            let mut longer = b.clone();
            longer.push(0);
            assert!(Request::decode(&longer).is_err());
        }
        assert!(Request::decode(&[0]).is_err());
        assert!(
            Request::decode(&[7, 1, 0, 0, 0, 2]).is_err(),
            "bool must be 0 or 1"
        );
        let empty = Request::Lookup {
            name: String::new(),
        };
        assert!(Request::decode(&empty.encode()).is_err(), "empty name");
        let long = Request::Lookup {
            name: "x".repeat(MAX_NAME + 1),
        };
        assert!(Request::decode(&long.encode()).is_err(), "name too long");
    }

    #[test]
    fn replies_round_trip() {
        let replies = vec![
            Reply::Attached {
                client: 1,
                node: 2,
                incarnation: 3,
                port_len: 4,
            },
            Reply::Area { area: 9 },
            Reply::Slot {
                slot: 1,
                key: u64::MAX,
            },
            Reply::Ok,
            Reply::StatsPage {
                page: StatsPage::Ports(Vec::new()),
                next: Some(4),
            },
            Reply::Seed {
                seed: "hmseed1-abc".into(),
            },
            Reply::AmTable {
                version: 9,
                entries: vec![AmHandlerEntry {
                    id: 1,
                    epoch: 2,
                    live: true,
                    fingerprint: 3,
                    name: "echo".into(),
                }],
                next: Some(2),
            },
            Reply::AmReply { args: [4, 3, 2, 1] },
            Reply::AmCounters {
                handlers: vec![("x".into(), AmCounts::default())],
            },
            Reply::Direct {
                mode: mode::NORMAL,
                base: 4096,
                len: 1 << 20,
                meta_base: 256,
                meta_count: 8,
                queue_offset: 3 * 4096,
                queue_cap: 1024,
            },
            Reply::Direct {
                mode: mode::FAST,
                base: 0,
                len: 64,
                meta_base: 0,
                meta_count: 0,
                queue_offset: 0,
                queue_cap: 0,
            },
            Reply::Error {
                code: ControlErrorCode::NotOwner as u16,
                message: "no".into(),
            },
        ];
        for rep in replies {
            let b = rep.encode();
            assert_eq!(Reply::decode(&b).unwrap(), rep);
            for n in 0..b.len() {
                assert!(Reply::decode(&b[..n]).is_err());
            }
            let mut longer = b.clone();
            longer.push(0);
            assert!(
                Reply::decode(&longer).is_err(),
                "{rep:?} with a trailing byte"
            );
        }
        assert_eq!(
            ControlErrorCode::from_u16(5),
            Some(ControlErrorCode::NotOwner)
        );
        assert_eq!(ControlErrorCode::from_u16(0), None);
        for v in 1..=16 {
            let c = ControlErrorCode::from_u16(v).expect("every code up to 16 is known");
            assert_eq!(c as u16, v);
        }
        assert_eq!(ControlErrorCode::from_u16(17), None);
    }
}
