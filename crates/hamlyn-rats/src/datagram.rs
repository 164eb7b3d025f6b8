//! Datagram (seed 001 §3.2): reliable, unordered messages into buffers the receiver
//! owns; the receiver gets a view of each (offset and length in its area, no copy) and
//! [`DatagramReceiver::release`]s it, which sends that sender a fresh ticket for the
//! buffer behind the scenes (a credit). Many-to-one: every [`DatagramReceiver::make_seed`]
//! starts one more sender with its own buffers. A sender without credit gets
//! [`RatsError::Full`] ([`DatagramSender::send`]) or waits for one
//! ([`DatagramSender::send_wait`]) — it never overruns the receiver.
//!
//! Protection: the receiver's slot is `paranoid_one_shot`. Each buffer has its own
//! metadata entry with its own key and byte range, armed for one message; a grant is a
//! ticket for one buffer (a fresh key each time). So a sender can write only buffers it
//! was granted, once per grant, and never one the receiver is reading: the engine
//! refuses anything else, and no byte outside a granted range changes.
//!
//! Metadata of a datagram (49 bytes + user bytes): version, sender id (u32), the sender's
//! token (u64, from its seed), the sender's credit ticket (compact, 36 bytes), then up to
//! [`MAX_DATAGRAM_OOB`] user bytes. A credit message carries the fresh compact ticket in
//! its metadata and lands on the sender's credit entry for that grant.

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use hamlyn::{
    Data, NodeId, Notification, NotificationKind, Seed, SendHandle, SendOptions, SlotMode, Ticket,
};

use crate::error::RatsError;
use crate::manager::{Buffer, Endpoint, EndpointSpec, InstanceId, Manager};
use crate::protocol::{
    check_seed, decode_compact, encode_compact, make_seed, MetaWriter, ProtocolId, Reader,
    COMPACT_TICKET_LEN, VERSION,
};

/// Grants one seed can carry (a seed holds at most 16 tickets).
pub const MAX_CREDITS: u32 = 16;
/// User out-of-band bytes a datagram carries beside the protocol's.
pub const MAX_DATAGRAM_OOB: usize = hamlyn::MAX_META_LEN - DATAGRAM_HEADER;
const DATAGRAM_HEADER: usize = 1 + 4 + 8 + COMPACT_TICKET_LEN;

/// Where a buffer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BufState {
    /// Not granted to anyone.
    Free,
    /// Granted to `sender` as its credit `grant`; empty.
    Granted { sender: u32, grant: u32 },
    /// Holds a datagram of `sender` not released yet.
    Full { sender: u32, grant: u32 },
}

#[derive(Debug)]
struct SenderInfo {
    token: u64,
    /// Its credit ticket, once its first datagram named it.
    credit: Option<Ticket>,
    credits: u32,
}

/// One datagram received: a view of the receiver's buffer (no copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// The buffer it is in.
    pub buffer: u32,
    /// Its first byte (slot-relative).
    pub offset: u64,
    /// Its bytes.
    pub len: u64,
    /// The sender (its number at this receiver).
    pub sender: u32,
    /// The sending node.
    pub src: NodeId,
    oob: [u8; MAX_DATAGRAM_OOB],
    oob_len: u8,
}

impl Datagram {
    /// The sender's out-of-band bytes.
    pub fn oob(&self) -> &[u8] {
        &self.oob[..usize::from(self.oob_len)]
    }
}

/// The receiving side.
#[derive(Debug)]
pub struct DatagramReceiver {
    mgr: Manager,
    id: InstanceId,
    ep: Endpoint,
    buffer_len: u64,
    bufs: Vec<BufState>,
    senders: Vec<SenderInfo>,
    forged: u64,
}

impl DatagramReceiver {
    /// A receiver with `buffers` buffers of `buffer_len` bytes each.
    pub fn new(
        mgr: &Manager,
        buffers: u32,
        buffer_len: u64,
    ) -> Result<DatagramReceiver, RatsError> {
        if buffers == 0 || buffer_len == 0 {
            return Err(RatsError::InvalidArgument("no buffers"));
        }
        let buffer_len = buffer_len.next_multiple_of(crate::SPACE_GRANULE);
        let total = buffer_len
            .checked_mul(u64::from(buffers))
            .ok_or(RatsError::InvalidArgument("too much space"))?;
        let id = mgr.register();
        let spec = EndpointSpec {
            mode: SlotMode::ParanoidOneShot,
            ..EndpointSpec::default()
        };
        let ep = match mgr.endpoint(id, total, buffers, spec) {
            Ok(ep) => ep,
            Err(e) => {
                mgr.unregister(id);
                return Err(e);
            }
        };
        // Nothing is armed until it is granted.
        if let Some(m) = ep.meta() {
            for i in 0..buffers {
                m.disarm(i)?;
            }
        }
        Ok(DatagramReceiver {
            mgr: mgr.clone(),
            id,
            ep,
            buffer_len,
            bufs: vec![BufState::Free; buffers as usize],
            senders: Vec::new(),
            forged: 0,
        })
    }

    /// The instance's number.
    pub fn id(&self) -> InstanceId {
        self.id
    }

    /// Bytes of each buffer.
    pub fn buffer_len(&self) -> u64 {
        self.buffer_len
    }

    /// Arrivals this instance refused as forged.
    pub fn forged(&self) -> u64 {
        self.forged
    }

    /// A fresh one-message ticket for buffer `i`.
    fn grant(&self, i: u32) -> Result<Ticket, RatsError> {
        let start = u64::from(i) * self.buffer_len;
        self.ep.ticket(start..start + self.buffer_len, i..i + 1)
    }

    /// A seed for one more sender, granting it `credits` (1..=16) free buffers.
    pub fn make_seed(&mut self, credits: u32) -> Result<Seed, RatsError> {
        if credits == 0 || credits > MAX_CREDITS {
            return Err(RatsError::InvalidArgument("credits must be 1..=16"));
        }
        let free: Vec<u32> = (0..self.bufs.len() as u32)
            .filter(|&i| self.bufs[i as usize] == BufState::Free)
            .take(credits as usize)
            .collect();
        if free.len() < credits as usize {
            return Err(RatsError::NoSpace {
                need: u64::from(credits),
            });
        }
        let sender = self.senders.len() as u32;
        let token = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let mut tickets = Vec::with_capacity(free.len());
        for (grant, &i) in free.iter().enumerate() {
            tickets.push(self.grant(i)?);
            self.bufs[i as usize] = BufState::Granted {
                sender,
                grant: grant as u32,
            };
        }
        self.senders.push(SenderInfo {
            token,
            credit: None,
            credits,
        });
        let mut params = Vec::with_capacity(12);
        params.extend_from_slice(&sender.to_le_bytes());
        params.extend_from_slice(&token.to_le_bytes());
        Ok(make_seed(ProtocolId::Datagram, tickets, &params))
    }

    /// The next datagram, if one is there (never blocks).
    pub fn try_recv(&mut self) -> Result<Option<Datagram>, RatsError> {
        while let Some(n) = self.mgr.take(self.id) {
            if let Some(d) = self.accept(&n) {
                return Ok(Some(d));
            }
        }
        Ok(None)
    }

    /// The next datagram, waiting up to `timeout` (`None`: forever).
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<Option<Datagram>, RatsError> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let Some(n) = self.mgr.wait(self.id, deadline)? else {
                return Ok(None);
            };
            if let Some(d) = self.accept(&n) {
                return Ok(Some(d));
            }
        }
    }

    /// Copies a datagram's bytes out.
    pub fn read(&self, d: &Datagram, buf: &mut [u8]) -> Result<(), RatsError> {
        if buf.len() as u64 > d.len {
            return Err(RatsError::InvalidArgument("more than the datagram"));
        }
        self.ep.read(d.offset, buf)
    }

    /// The address of a datagram's first byte in its receive buffer (`d.len` bytes), for
    /// foreign-language bindings that read it without a copy: valid until the datagram
    /// is released ([`DatagramReceiver::release`]) or the receiver dropped. Other
    /// processes may write that memory: never form a Rust reference to it
    /// ([`DatagramReceiver::read`] is the safe accessor).
    pub fn view(&self, d: &Datagram) -> Result<*const u8, RatsError> {
        self.ep.as_ptr_at(d.offset, d.len)
    }

    /// A datagram's bytes, copied into a new vector.
    pub fn to_vec(&self, d: &Datagram) -> Result<Vec<u8>, RatsError> {
        let mut v = vec![0u8; d.len as usize];
        self.ep.read(d.offset, &mut v)?;
        Ok(v)
    }

    /// Gives the datagram's buffer back to its sender (a fresh grant, sent as a credit).
    pub fn release(&mut self, d: Datagram) -> Result<(), RatsError> {
        let state = self
            .bufs
            .get(d.buffer as usize)
            .copied()
            .ok_or(RatsError::InvalidArgument("no such buffer"))?;
        let BufState::Full { sender, grant } = state else {
            return Err(RatsError::State("buffer not full: released twice?"));
        };
        let credit = self
            .senders
            .get(sender as usize)
            .and_then(|s| s.credit)
            .ok_or(RatsError::State("sender has no credit ticket"))?;
        let t = self.grant(d.buffer)?;
        self.bufs[d.buffer as usize] = BufState::Granted { sender, grant };
        let mut meta = MetaWriter::new();
        meta.put(&[VERSION])?.put(&encode_compact(&t)?)?;
        let opts = SendOptions::new()
            .meta(meta.bytes())
            .tag(u64::from(grant))
            .entry(grant);
        self.mgr.send(&credit, &opts, Data::Inline(&[]))?;
        Ok(())
    }

    /// The arrival as a datagram, or `None` (forged or not ours: counted).
    fn accept(&mut self, n: &Notification) -> Option<Datagram> {
        if n.kind != NotificationKind::Message {
            return None;
        }
        match self.parse(n) {
            Ok(d) => Some(d),
            Err(_) => {
                self.forged += 1;
                self.mgr.count_forged();
                None
            }
        }
    }

    fn parse(&mut self, n: &Notification) -> Result<Datagram, RatsError> {
        let buffer = n.meta_index.ok_or(RatsError::Forged("no entry"))?;
        let state = *self
            .bufs
            .get(buffer as usize)
            .ok_or(RatsError::Forged("entry"))?;
        let BufState::Granted { sender, grant } = state else {
            return Err(RatsError::Forged("buffer not granted"));
        };
        let start = u64::from(buffer) * self.buffer_len;
        let offset = n.offset.ok_or(RatsError::Forged("no offset"))?;
        let len = u64::from(n.len);
        if offset < start || offset + len > start + self.buffer_len {
            return Err(RatsError::Forged("length or offset lies"));
        }
        let entry = self
            .ep
            .meta()
            .ok_or(RatsError::Forged("entry"))?
            .entry(buffer)?;
        let meta = entry.metadata();
        let (claimed, token, credit, oob) = parse_meta(meta)?;
        let info = self
            .senders
            .get_mut(sender as usize)
            .ok_or(RatsError::Forged("sender"))?;
        if claimed != sender || token != info.token {
            return Err(RatsError::Forged("sender or token"));
        }
        let credit = Ticket {
            meta_count: info.credits,
            ..credit
        };
        match info.credit {
            None => info.credit = Some(credit),
            Some(c) if c == credit => {}
            Some(_) => return Err(RatsError::Forged("a different credit ticket")),
        }
        self.bufs[buffer as usize] = BufState::Full { sender, grant };
        let mut d = Datagram {
            buffer,
            offset,
            len,
            sender,
            src: n.src_node,
            oob: [0; MAX_DATAGRAM_OOB],
            oob_len: oob.len().min(MAX_DATAGRAM_OOB) as u8,
        };
        d.oob[..usize::from(d.oob_len)].copy_from_slice(&oob[..usize::from(d.oob_len)]);
        Ok(d)
    }
}

/// Parses a datagram's metadata: (sender id, token, the sender's credit ticket, user
/// bytes). Whatever a peer wrote, a value or [`RatsError::Forged`] (fuzzed).
pub fn parse_meta(meta: &[u8]) -> Result<(u32, u64, Ticket, &[u8]), RatsError> {
    let mut r = Reader::new(meta);
    if r.u8()? != VERSION {
        return Err(RatsError::Forged("version"));
    }
    let sender = r.u32()?;
    let token = r.u64()?;
    let credit = decode_compact(&mut r)?;
    let oob = r.rest();
    if oob.len() > MAX_DATAGRAM_OOB {
        return Err(RatsError::Forged("metadata too long"));
    }
    Ok((sender, token, credit, oob))
}

impl Drop for DatagramReceiver {
    fn drop(&mut self) {
        self.mgr.unregister(self.id);
    }
}

/// The sending side, built from one of the receiver's seeds.
#[derive(Debug)]
pub struct DatagramSender {
    mgr: Manager,
    id: InstanceId,
    /// Its credit slot: one entry per grant.
    credit_ep: Endpoint,
    credit_ticket: [u8; COMPACT_TICKET_LEN],
    sender: u32,
    token: u64,
    /// The receiver's slot (what credits must name).
    target: (NodeId, hamlyn::SlotId),
    /// Grants by number: the ticket of the buffer it may write, if it holds that credit.
    grants: Vec<Option<Ticket>>,
    free: VecDeque<u32>,
    forged: u64,
}

impl DatagramSender {
    /// A sender with the credits `seed` grants.
    pub fn from_seed(mgr: &Manager, seed: &Seed) -> Result<DatagramSender, RatsError> {
        let params = check_seed(seed, ProtocolId::Datagram, 1)?;
        let mut r = Reader::new(params);
        let (sender, token) = match (r.u32(), r.u64()) {
            (Ok(s), Ok(t)) => (s, t),
            _ => return Err(RatsError::BadSeed("sender id and token")),
        };
        let first = seed.tickets[0];
        if seed
            .tickets
            .iter()
            .any(|t| t.node != first.node || t.slot != first.slot)
        {
            return Err(RatsError::BadSeed("grants name different slots"));
        }
        let credits = seed.tickets.len() as u32;
        let id = mgr.register();
        let credit_ep =
            match mgr.endpoint(id, crate::SPACE_GRANULE, credits, EndpointSpec::default()) {
                Ok(ep) => ep,
                Err(e) => {
                    mgr.unregister(id);
                    return Err(e);
                }
            };
        let credit_ticket = encode_compact(&credit_ep.ticket(0..0, 0..1)?)?;
        Ok(DatagramSender {
            mgr: mgr.clone(),
            id,
            credit_ep,
            credit_ticket,
            sender,
            token,
            target: (first.node, first.slot),
            grants: seed.tickets.iter().copied().map(Some).collect(),
            free: (0..credits).collect(),
            forged: 0,
        })
    }

    /// Credits held now (datagrams it may send without waiting).
    pub fn credits(&mut self) -> usize {
        self.collect_credits();
        self.free.len()
    }

    /// Credit messages refused as forged.
    pub fn forged(&self) -> u64 {
        self.forged
    }

    /// The largest datagram (the receiver's buffer size).
    pub fn max_len(&self) -> u64 {
        self.grants
            .iter()
            .flatten()
            .map(|t| t.len)
            .next()
            .unwrap_or(0)
    }

    /// Sends `bytes` with user out-of-band bytes `oob` if it holds a credit; otherwise
    /// [`RatsError::Full`] (nothing sent).
    pub fn send(&mut self, bytes: &[u8], oob: &[u8]) -> Result<SendHandle, RatsError> {
        let (grant, ticket) = self.credit_for(bytes.len() as u64, oob)?;
        let meta = self.meta(oob)?;
        let opts = SendOptions::new().meta(meta.bytes()).entry(0);
        let h = self.mgr.send_bytes(&ticket, &opts, bytes)?;
        self.spend(grant);
        Ok(h)
    }

    /// As [`DatagramSender::send`], without a copy: the first `len` bytes of `buf`
    /// (message space of this sender's manager), freed when the send is done.
    pub fn send_buffer(
        &mut self,
        buf: Buffer,
        len: u64,
        oob: &[u8],
    ) -> Result<SendHandle, RatsError> {
        let (grant, ticket) = self.credit_for(len, oob)?;
        let meta = self.meta(oob)?;
        let opts = SendOptions::new().meta(meta.bytes()).entry(0);
        let h = {
            let span = [buf.span(0, len)?];
            self.mgr.send(&ticket, &opts, Data::Gather(&span))?
        };
        buf.free_after(&h);
        self.spend(grant);
        Ok(h)
    }

    /// A credit for a datagram of `len` bytes with `oob`, or why not.
    fn credit_for(&mut self, len: u64, oob: &[u8]) -> Result<(u32, Ticket), RatsError> {
        self.collect_credits();
        let Some(&grant) = self.free.front() else {
            return Err(RatsError::Full);
        };
        let ticket = self.grants[grant as usize].ok_or(RatsError::State("grant lost"))?;
        if len > ticket.len {
            return Err(RatsError::TooLong {
                len,
                max: ticket.len,
            });
        }
        if oob.len() > MAX_DATAGRAM_OOB {
            return Err(RatsError::TooLong {
                len: oob.len() as u64,
                max: MAX_DATAGRAM_OOB as u64,
            });
        }
        Ok((grant, ticket))
    }

    fn meta(&self, oob: &[u8]) -> Result<MetaWriter, RatsError> {
        let mut meta = MetaWriter::new();
        meta.put(&[VERSION])?
            .put(&self.sender.to_le_bytes())?
            .put(&self.token.to_le_bytes())?
            .put(&self.credit_ticket)?
            .put(oob)?;
        Ok(meta)
    }

    fn spend(&mut self, grant: u32) {
        self.free.pop_front();
        self.grants[grant as usize] = None;
    }

    /// As [`DatagramSender::send`], but waits up to `timeout` for a credit.
    pub fn send_wait(
        &mut self,
        bytes: &[u8],
        oob: &[u8],
        timeout: Option<Duration>,
    ) -> Result<SendHandle, RatsError> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            match self.send(bytes, oob) {
                Err(RatsError::Full) => {}
                other => return other,
            }
            match self.mgr.wait(self.id, deadline)? {
                Some(n) => self.credit_arrived(&n),
                None => return Err(RatsError::Timeout),
            }
        }
    }

    fn collect_credits(&mut self) {
        while let Some(n) = self.mgr.take(self.id) {
            self.credit_arrived(&n);
        }
    }

    fn credit_arrived(&mut self, n: &Notification) {
        if n.kind == NotificationKind::PeerDown {
            return;
        }
        if let Err(_e) = self.parse_credit(n) {
            self.forged += 1;
            self.mgr.count_forged();
        }
    }

    fn parse_credit(&mut self, n: &Notification) -> Result<(), RatsError> {
        let grant = n.meta_index.ok_or(RatsError::Forged("no entry"))?;
        match self.grants.get(grant as usize) {
            Some(None) => {}
            Some(Some(_)) => return Err(RatsError::Forged("a credit it still had")),
            None => return Err(RatsError::Forged("no such grant")),
        }
        let entry = self
            .credit_ep
            .meta()
            .ok_or(RatsError::Forged("entry"))?
            .entry(grant)?;
        let mut r = Reader::new(entry.metadata());
        if r.u8()? != VERSION {
            return Err(RatsError::Forged("version"));
        }
        let t = decode_compact(&mut r)?;
        if (t.node, t.slot) != self.target || n.src_node != t.node {
            return Err(RatsError::Forged("a ticket for another slot"));
        }
        self.grants[grant as usize] = Some(t);
        self.free.push_back(grant);
        Ok(())
    }
}

impl Drop for DatagramSender {
    fn drop(&mut self) {
        self.mgr.unregister(self.id);
    }
}
