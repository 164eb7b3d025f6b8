//! Receive endpoints (seed 002, FLIPC): a receiver posts buffers of one fixed size and
//! each arriving message lands in the next one posted, chosen by the engine (or, on a
//! `danger_direct` endpoint, by the sender's library with the same core code). A message
//! that finds no buffer is discarded and counted where the receiver reads and resets the
//! count without blocking anyone ([`Endpoint::take_discards`]); per endpoint, the sender
//! is also told (an error completion, `RejectReason::NoBuffer`) or not (FLIPC's
//! optimistic style, the default).
//!
//! Buffers are the endpoint's own, allocated with it and aligned (FLIPC internalised its
//! buffers the same way); a buffer is a move-only [`Buffer`] token, so a buffer cannot be
//! posted twice or read while the engine may fill it. One endpoint's traffic can never
//! take another's buffers: each has its own.

use std::sync::Arc;

use hamlyn_shm::endpoint::{EndpointError, Receiver};
use hamlyn_shm::memory::RingMemory;
use hamlyn_shm::sync::{AtomicU32, AtomicU64};
use hamlyn_wire::control::{endpoint_flag, Request, NO_QUEUE};
use hamlyn_wire::endpoint::EndpointLayout;
use hamlyn_wire::{SlotId, Ticket, TicketFlags, FULL_SHARE};

use crate::area::Area;
use crate::error::Error;
use crate::node::Shared;

/// Builds an endpoint: [`crate::Node::endpoint`], then the settings, then
/// [`EndpointBuilder::create`].
#[must_use = "an endpoint builder does nothing until `create` is called"]
#[derive(Debug)]
pub struct EndpointBuilder {
    shared: Arc<Shared>,
    buf_size: u32,
    buffers: u32,
    queue: Option<u16>,
    report_discards: bool,
    direct: bool,
}

impl EndpointBuilder {
    pub(crate) fn new(shared: Arc<Shared>, buf_size: u32, buffers: u32) -> EndpointBuilder {
        EndpointBuilder {
            shared,
            buf_size,
            buffers,
            queue: None,
            report_discards: false,
            direct: false,
        }
    }

    /// The notification queue arrivals are also reported to (its entries name the buffer
    /// in `meta_index`): what a blocking receive sleeps on. Default: none.
    pub fn queue(mut self, index: u16) -> Self {
        self.queue = Some(index);
        self
    }

    /// A message that finds no posted buffer is also refused to its sender (an error
    /// completion, `RejectReason::NoBuffer`), not only counted.
    pub fn report_discards(mut self) -> Self {
        self.report_discards = true;
        self
    }

    /// **Danger:** same-node ticket holders may map the endpoint and deposit into its
    /// posted buffers without the engine ([`crate::Node::open_direct`]), as for
    /// [`crate::SlotBuilder::danger_direct`], with what that gives up.
    pub fn danger_direct(mut self) -> Self {
        self.direct = true;
        self
    }

    /// Allocates the endpoint's memory (an area of its own) and asks the engine for it.
    /// No buffer is posted yet: [`Endpoint::alloc`] and [`Endpoint::post`], or
    /// [`Endpoint::post_all`].
    pub fn create(self) -> Result<Endpoint, Error> {
        let layout = EndpointLayout::new(self.buf_size, self.buffers).map_err(|_| {
            Error::InvalidArgument(
                "endpoint buffers: a size that is a multiple of 64 in 64..=65536, 1..=65536 of them",
            )
        })?;
        let count = self.shared.layout.geometry.queues;
        let queue = match self.queue {
            Some(index) if index >= count => return Err(Error::NoSuchQueue { index, count }),
            Some(index) => u32::from(index),
            None => NO_QUEUE,
        };
        let area = Area::register(&self.shared, layout.len())?;
        let mut flags = 0;
        if self.report_discards {
            flags |= endpoint_flag::REPORT_DISCARDS;
        }
        if self.direct {
            flags |= endpoint_flag::DANGER_DIRECT;
        }
        let req = Request::CreateEndpoint {
            area: area.id(),
            base: 0,
            buf_size: self.buf_size,
            buffers: self.buffers,
            queue,
            flags,
        };
        let (slot, key) = self.shared.control().call_slot(&req)?;
        let rx = Receiver::attach(AreaRing(area.clone()), 0, layout).map_err(endpoint_err)?;
        Ok(Endpoint {
            shared: self.shared.clone(),
            id: SlotId(slot),
            key,
            area,
            rx,
            free: (0..self.buffers).rev().collect(),
            queue: self.queue,
        })
    }
}

fn endpoint_err(e: EndpointError) -> Error {
    match e {
        EndpointError::Full => Error::InvalidArgument("every ring position is in use"),
        EndpointError::NoSuchBuffer(_) => Error::InvalidArgument("no such buffer"),
        _ => Error::InvalidArgument("endpoint outside its area"),
    }
}

/// An area as ring memory (the receiver's side of an endpoint reaches it only through
/// `hamlyn-shm`'s checked accessors).
#[derive(Debug)]
struct AreaRing(Area);

impl RingMemory for AreaRing {
    fn len(&self) -> usize {
        self.0.inner.region.len()
    }
    fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
        RingMemory::atomic_u32(&self.0.inner.region, off)
    }
    fn atomic_u64(&self, off: usize) -> Option<&AtomicU64> {
        RingMemory::atomic_u64(&self.0.inner.region, off)
    }
    fn load_bytes(&self, off: usize, dst: &mut [u8]) -> bool {
        RingMemory::load_bytes(&self.0.inner.region, off, dst)
    }
    fn store_bytes(&self, off: usize, src: &[u8]) -> bool {
        RingMemory::store_bytes(&self.0.inner.region, off, src)
    }
}

/// One of an endpoint's buffers while it is the receiver's (not posted): post it
/// ([`Endpoint::post`]) or keep it. Move-only, so a buffer is never posted twice.
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "a buffer not posted again is lost to the endpoint until then"]
pub struct Buffer {
    index: u32,
}

impl Buffer {
    /// Its number in the endpoint.
    pub fn index(&self) -> u32 {
        self.index
    }
}

/// A message taken from an endpoint: the buffer holding it (the receiver's now) and what
/// the engine reported about it.
#[derive(Debug, PartialEq, Eq)]
pub struct Received {
    /// The buffer holding the message; post it again when done with it.
    pub buffer: Buffer,
    /// Payload bytes, from the start of the buffer.
    pub len: u32,
    /// The sending node.
    pub src_node: u32,
    /// The message's word (tag).
    pub word: u64,
}

/// A receive endpoint: a slot whose messages land in buffers its owner posted.
///
/// Dropping it destroys the endpoint (tickets to it then fail with `UnknownSlot`).
#[must_use = "dropping an Endpoint destroys it: every ticket to it stops working"]
pub struct Endpoint {
    shared: Arc<Shared>,
    id: SlotId,
    key: u64,
    area: Area,
    rx: Receiver<AreaRing>,
    /// Buffers that are the receiver's and not handed out.
    free: Vec<u32>,
    queue: Option<u16>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("id", &self.id)
            .field("buf_size", &self.buf_size())
            .field("buffers", &self.buffers())
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// Its slot number.
    pub fn id(&self) -> SlotId {
        self.id
    }

    /// Bytes per buffer: the largest message.
    pub fn buf_size(&self) -> u32 {
        self.rx.layout().buf_size()
    }

    /// Number of buffers.
    pub fn buffers(&self) -> u32 {
        self.rx.layout().buffers()
    }

    /// The notification queue it reports to, if any.
    pub fn queue(&self) -> Option<u16> {
        self.queue
    }

    /// The area holding the endpoint (ring and buffers).
    pub fn area(&self) -> &Area {
        &self.area
    }

    /// A ticket for sending to the endpoint: a fast ticket over one buffer's bytes, so a
    /// sender's library refuses a message larger than a buffer before queueing it.
    pub fn ticket(&self) -> Ticket {
        Ticket {
            node: self.shared.node,
            incarnation: self.shared.incarnation,
            slot: self.id,
            key: self.key,
            meta_first: 0,
            meta_count: 0,
            offset: 0,
            len: u64::from(self.buf_size()),
            share: FULL_SHARE,
            flags: TicketFlags::WRITE | TicketFlags::FAST,
        }
    }

    /// A buffer of the endpoint's that is neither posted nor handed out, if any.
    pub fn alloc(&mut self) -> Option<Buffer> {
        self.free.pop().map(|index| Buffer { index })
    }

    /// Gives a buffer back unposted.
    pub fn free(&mut self, buffer: Buffer) {
        self.free.push(buffer.index);
    }

    /// Posts `buffer` for the next message to land in. Wait-free: one store of the ring
    /// entry and one Release store of the posted count.
    pub fn post(&mut self, buffer: Buffer) -> Result<(), Error> {
        self.rx.post(buffer.index).map_err(endpoint_err)
    }

    /// Posts every buffer not handed out; how many.
    pub fn post_all(&mut self) -> Result<u32, Error> {
        let mut n = 0;
        while let Some(b) = self.alloc() {
            if let Err(e) = self.post(Buffer { index: b.index }) {
                self.free(b);
                return Err(e);
            }
            n += 1;
        }
        Ok(n)
    }

    /// Buffers posted and not yet filled.
    pub fn posted(&self) -> u64 {
        self.rx.waiting()
    }

    /// Whether a message is waiting to be received (wait-free, takes nothing).
    pub fn ready(&self) -> bool {
        self.rx.ready()
    }

    /// The next message, in arrival order, if one arrived. Wait-free.
    pub fn receive(&mut self) -> Option<Received> {
        loop {
            let t = self.rx.take()?;
            if t.aborted {
                // A claim its sender's node never finished: the buffer is ours again.
                self.free.push(t.buf);
                continue;
            }
            return Some(Received {
                buffer: Buffer { index: t.buf },
                len: t.len.min(self.buf_size()),
                src_node: t.src_node,
                word: t.word,
            });
        }
    }

    /// Copies the first `dst.len()` bytes of a buffer out.
    pub fn read(&self, buffer: &Buffer, dst: &mut [u8]) -> Result<(), Error> {
        if dst.len() > self.buf_size() as usize {
            return Err(Error::InvalidArgument("longer than a buffer"));
        }
        let off = self
            .rx
            .buffer_offset(buffer.index)
            .ok_or(Error::InvalidArgument("no such buffer"))?;
        self.area.read(off as u64, dst)
    }

    /// A received message's bytes, copied out.
    pub fn bytes(&self, msg: &Received) -> Result<Vec<u8>, Error> {
        let mut v = vec![0; msg.len as usize];
        self.read(&msg.buffer, &mut v)?;
        Ok(v)
    }

    /// Writes into a buffer the receiver holds (to prepare a reply in place, or in tests).
    pub fn write(&self, buffer: &Buffer, src: &[u8]) -> Result<(), Error> {
        if src.len() > self.buf_size() as usize {
            return Err(Error::InvalidArgument("longer than a buffer"));
        }
        let off = self
            .rx
            .buffer_offset(buffer.index)
            .ok_or(Error::InvalidArgument("no such buffer"))?;
        self.area.write(off as u64, src)
    }

    /// Messages discarded for want of a posted buffer since the last call, and the count
    /// reset, in one wait-free step (an atomic swap): no discard is lost between the read
    /// and the reset, and the engine is never blocked by it.
    pub fn take_discards(&self) -> u64 {
        self.rx.take_discards()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // Best effort: a broken connection took the endpoint with it.
        let _ = self
            .shared
            .control()
            .call_ok(&Request::DestroySlot { slot: self.id.0 });
    }
}
