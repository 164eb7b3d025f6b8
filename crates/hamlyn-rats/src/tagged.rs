//! Tagged remote write (seed 001 §3.2): the client writes a buffer at an offset of the
//! server's slot with an integer tag; the server learns of it by the tag, in any order
//! ([`TaggedServer::get_tag`]) or waiting for one tag ([`TaggedServer::get_specific_tag`],
//! which leaves every other arrival where it was). Each message is one packet (at most
//! [`MAX_TAGGED`] bytes); in-order delivery is not promised.
//!
//! Every message is a single packet on the server's one metadata entry with NOTIFY_NOW,
//! so concurrent senders never share a packet count. The packet's word carries the
//! 32-bit tag and the offset written (in the high 32 bits; slots are at most 4 GiB): the
//! entry is shared by every message, so per-message state cannot live there, and the
//! word comes back in the notification with the message's length (the instance comes
//! back in the entry's cookie). The receiver checks offset and length against its slot;
//! a sender that lies about its offset only misleads the receiver about its own bytes.

use std::time::{Duration, Instant};

use hamlyn::{NodeId, NotificationKind, Seed, SendHandle, SendOptions, SlotId, Ticket};

use crate::error::RatsError;
use crate::manager::{Buffer, Endpoint, EndpointSpec, InstanceId, Manager};
use crate::protocol::{check_seed, make_seed, ProtocolId};

/// The largest tagged write: one packet at the smallest packet size engines use.
pub const MAX_TAGGED: u64 = hamlyn::BUDGET_PACKET_BYTES;

/// One tagged write that arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TagArrival {
    /// Its tag.
    pub tag: u32,
    /// Where it landed (slot-relative).
    pub offset: u64,
    /// Its bytes.
    pub len: u64,
    /// The node that wrote it.
    pub src: NodeId,
}

/// The receiving side: a slot of message space others write with tags.
#[derive(Debug)]
pub struct TaggedServer {
    mgr: Manager,
    id: InstanceId,
    ep: Endpoint,
    /// The endpoint's slot and its bytes, kept here for the check of every arrival.
    slot: SlotId,
    len: u64,
}

impl TaggedServer {
    /// A server over `len` bytes of the manager's message space.
    pub fn new(mgr: &Manager, len: u64) -> Result<TaggedServer, RatsError> {
        if len > u64::from(u32::MAX) {
            return Err(RatsError::InvalidArgument("a tagged slot is at most 4 GiB"));
        }
        let id = mgr.register();
        // Routed by slot: the tag carries the offset, so the entry's cookie and first
        // offset need not be read on every poll.
        let spec = EndpointSpec {
            by_slot: true,
            ..EndpointSpec::default()
        };
        let ep = match mgr.endpoint(id, len, 1, spec) {
            Ok(ep) => ep,
            Err(e) => {
                mgr.unregister(id);
                return Err(e);
            }
        };
        let Some(slot) = ep.slot().map(hamlyn::Slot::id) else {
            mgr.unregister(id);
            return Err(RatsError::State("endpoint closed"));
        };
        Ok(TaggedServer {
            mgr: mgr.clone(),
            id,
            len: ep.len(),
            ep,
            slot,
        })
    }

    /// The instance's number in its manager.
    pub fn id(&self) -> InstanceId {
        self.id
    }

    /// Bytes of the slot.
    pub fn len(&self) -> u64 {
        self.ep.len()
    }

    /// Whether the slot has no bytes.
    pub fn is_empty(&self) -> bool {
        self.ep.is_empty()
    }

    /// A seed a client is built from: a ticket for the whole slot.
    pub fn make_seed(&self) -> Result<Seed, RatsError> {
        let t = self.ep.ticket(0..self.ep.len(), 0..1)?;
        Ok(make_seed(ProtocolId::Tagged, vec![t], &[]))
    }

    /// The next arrival, any tag, if one is there (never blocks).
    #[inline]
    pub fn get_tag(&self) -> Result<Option<TagArrival>, RatsError> {
        loop {
            match self.mgr.take_map(self.id, |n| self.judge(n)) {
                None => return Ok(None),
                Some(Ok(a)) => return Ok(Some(a)),
                Some(Err(skip)) => self.skipped(skip),
            }
        }
    }

    /// The next arrival, any tag, waiting up to `timeout` (`None`: forever).
    pub fn wait_tag(&self, timeout: Option<Duration>) -> Result<Option<TagArrival>, RatsError> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let Some(n) = self.mgr.wait(self.id, deadline)? else {
                return Ok(None);
            };
            if let Some(a) = self.check(&n) {
                return Ok(Some(a));
            }
        }
    }

    /// The arrival with `tag`, waiting up to `timeout` for it; every other arrival stays
    /// queued, in order, for later calls.
    pub fn get_specific_tag(
        &self,
        tag: u32,
        timeout: Option<Duration>,
    ) -> Result<Option<TagArrival>, RatsError> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let n = self.mgr.wait_where(self.id, deadline, |n| {
                n.word as u32 == tag && n.kind == NotificationKind::Message
            })?;
            let Some(n) = n else {
                return Ok(None);
            };
            if let Some(a) = self.check(&n) {
                return Ok(Some(a));
            }
        }
    }

    /// Copies bytes of the slot out (`off` slot-relative, e.g. an arrival's offset).
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), RatsError> {
        self.ep.read(off, buf)
    }

    /// An arrival's bytes, copied out.
    pub fn read_arrival(&self, a: &TagArrival) -> Result<Vec<u8>, RatsError> {
        let mut v = vec![0u8; usize::try_from(a.len).map_err(|_| RatsError::Forged("length"))?];
        self.ep.read(a.offset, &mut v)?;
        Ok(v)
    }

    /// An arrival as the protocol allows it, or `None` (counted as forged or skipped).
    #[inline]
    fn check(&self, n: &hamlyn::Notification) -> Option<TagArrival> {
        match self.judge(n) {
            Ok(a) => Some(a),
            Err(skip) => {
                self.skipped(skip);
                None
            }
        }
    }

    /// An arrival as the protocol allows it, or why it is skipped (without counting:
    /// this runs while the manager is borrowed).
    #[inline]
    fn judge(&self, n: &hamlyn::Notification) -> Result<TagArrival, Skip> {
        if n.kind != NotificationKind::Message {
            // Peer-down news: a tagged server keeps no per-peer state.
            return Err(Skip::News);
        }
        let offset = n.word >> 32;
        let len = u64::from(n.len);
        // The offset is at most 2^32 - 1 and len at most MAX_TAGGED: no overflow.
        if n.slot != self.slot || len > MAX_TAGGED || offset + len > self.len {
            return Err(Skip::Forged);
        }
        Ok(TagArrival {
            tag: n.word as u32,
            offset,
            len,
            src: n.src_node,
        })
    }

    #[cold]
    fn skipped(&self, skip: Skip) {
        if skip == Skip::Forged {
            self.mgr.count_forged();
        }
    }
}

/// Why an arrival is not handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Skip {
    /// Not a message (peer-down news).
    News,
    /// It broke the protocol (counted).
    Forged,
}

impl Drop for TaggedServer {
    fn drop(&mut self) {
        self.mgr.unregister(self.id);
    }
}

/// The sending side, built from a server's seed.
#[derive(Debug, Clone)]
pub struct TaggedClient {
    mgr: Manager,
    ticket: Ticket,
}

impl TaggedClient {
    /// A client of the server `seed` names (a seed of another protocol or version is an
    /// error).
    pub fn from_seed(mgr: &Manager, seed: &Seed) -> Result<TaggedClient, RatsError> {
        check_seed(seed, ProtocolId::Tagged, 1)?;
        Ok(TaggedClient {
            mgr: mgr.clone(),
            ticket: seed.tickets[0],
        })
    }

    /// Writes `bytes` at `offset` of the server's slot with `tag` (copied if longer than
    /// a terminus entry holds).
    #[inline]
    pub fn write(&self, offset: u64, bytes: &[u8], tag: u32) -> Result<SendHandle, RatsError> {
        check_len(bytes.len() as u64)?;
        self.mgr
            .send_bytes(&self.ticket, &opts(offset, tag)?, bytes)
    }

    /// Writes `len` bytes of `buf` from `from` without a copy; the buffer is freed when
    /// the send is done.
    pub fn write_buffer(
        &self,
        offset: u64,
        buf: Buffer,
        from: u64,
        len: u64,
        tag: u32,
    ) -> Result<SendHandle, RatsError> {
        check_len(len)?;
        let h = {
            let span = [buf.span(from, len)?];
            self.mgr.send(
                &self.ticket,
                &opts(offset, tag)?,
                hamlyn::Data::Gather(&span),
            )?
        };
        buf.free_after(&h);
        Ok(h)
    }
}

#[inline]
fn opts(offset: u64, tag: u32) -> Result<SendOptions<'static>, RatsError> {
    let at = u32::try_from(offset).map_err(|_| RatsError::InvalidArgument("offset over 4 GiB"))?;
    Ok(SendOptions::new()
        .offset(offset)
        .tag(u64::from(at) << 32 | u64::from(tag))
        .entry(0))
}

#[inline]
fn check_len(len: u64) -> Result<(), RatsError> {
    if len > MAX_TAGGED {
        return Err(RatsError::TooLong {
            len,
            max: MAX_TAGGED,
        });
    }
    Ok(())
}
