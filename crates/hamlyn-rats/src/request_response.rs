//! Initial request/response (seed 001 §3.2, seed 000 §6.3): a server with no resources
//! set aside for any client answers requests from anyone holding its seed — an ASCII
//! string a client gets from a file, an environment variable, an argument or the
//! registry ([`RequestClient::lookup`]).
//!
//! The server has one receive buffer on a `paranoid_one_shot` entry: it takes one
//! request and refuses every other (the engine says `Disarmed` to their senders, nothing
//! is overwritten) until the server [`RequestServer::release`]s it. A client whose
//! request was refused, or not answered in time, retransmits with the same sequence
//! number; the server drops a sequence number it has seen from that client
//! (duplicates filtered). A server that is gone is an error within the client's
//! timeout.
//!
//! A retransmission sent while the first copy was still on its way (a large request on
//! a loaded machine outlasts [`RETRANSMIT_AFTER`]) can land in the server's buffer
//! together with the client's *next* request: the entry counts the packets of both
//! into one completion, and their bytes overlap. So a request declares its length, and
//! the server drops (and counts, [`RequestServer::mixed`]) one whose bytes do not add up
//! to it; the client retransmits it.
//!
//! Request metadata (57 bytes, [`request_meta`]): version ([`REQUEST_VERSION`]),
//! client id (u64, random per client), sequence number (u32), timestamp (u32:
//! microseconds since the client started, wrapping; echoed in the reply), length (u32,
//! the request's bytes modulo 2^32, as notifications count them), reply ticket
//! (compact). Reply metadata: version, sequence number, timestamp (u64).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use hamlyn::{
    Notification, NotificationKind, RejectReason, Seed, SendOptions, SlotMode, Status, Ticket,
};

use crate::error::RatsError;
use crate::manager::{Endpoint, EndpointSpec, InstanceId, Manager};
use crate::protocol::{
    check_seed, decode_compact, encode_compact, make_seed, MetaWriter, ProtocolId, Reader,
    COMPACT_TICKET_LEN, VERSION,
};

/// Clients whose last sequence number the server remembers (the oldest is forgotten).
pub const REMEMBERED_CLIENTS: usize = 4096;
/// First wait for a reply before retransmitting; doubled on each retry up to 8×.
pub const RETRANSMIT_AFTER: Duration = Duration::from_millis(20);

/// One request, as the server sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Its first byte (slot-relative).
    pub offset: u64,
    /// Its bytes.
    pub len: u64,
    /// The client's id.
    pub client: u64,
    /// The client's sequence number.
    pub seq: u32,
    /// The client's timestamp (µs since it started, wrapping).
    pub timestamp: u32,
    reply: Ticket,
}

/// The version byte of request metadata: 2 since requests declare their length (a
/// server of version 1 counts a newer request as forged, and the reverse).
pub const REQUEST_VERSION: u8 = 2;

/// A request's metadata, as it travels (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestMeta {
    /// The client's id.
    pub client: u64,
    /// The client's sequence number.
    pub seq: u32,
    /// The client's timestamp (µs, wrapping).
    pub timestamp: u32,
    /// The request's bytes, modulo 2^32.
    pub len: u32,
    /// Where the reply goes.
    pub reply: Ticket,
}

/// Encodes request metadata (57 bytes).
pub fn request_meta(m: &RequestMeta) -> Result<Vec<u8>, RatsError> {
    let reply = encode_compact(&m.reply)?;
    let meta = write_request_meta((m.client, m.seq, m.timestamp, m.len), &reply)?;
    Ok(meta.bytes().to_vec())
}

/// Request metadata of (client, sequence number, timestamp, length), with the reply
/// ticket already encoded: a client encodes its reply ticket once.
fn write_request_meta(
    (client, seq, timestamp, len): (u64, u32, u32, u32),
    reply: &[u8; COMPACT_TICKET_LEN],
) -> Result<MetaWriter, RatsError> {
    let mut meta = MetaWriter::new();
    meta.put(&[REQUEST_VERSION])?
        .put(&client.to_le_bytes())?
        .put(&seq.to_le_bytes())?
        .put(&timestamp.to_le_bytes())?
        .put(&len.to_le_bytes())?
        .put(reply)?;
    Ok(meta)
}

/// Parses a request's metadata. Whatever a peer wrote, a value or
/// [`RatsError::Forged`] (fuzzed).
pub fn parse_request_meta(meta: &[u8]) -> Result<RequestMeta, RatsError> {
    let mut r = Reader::new(meta);
    if r.u8()? != REQUEST_VERSION {
        return Err(RatsError::Forged("version"));
    }
    let client = r.u64()?;
    let seq = r.u32()?;
    let timestamp = r.u32()?;
    let len = r.u32()?;
    let reply = decode_compact(&mut r)?;
    if !r.rest().is_empty() {
        return Err(RatsError::Forged("trailing bytes"));
    }
    Ok(RequestMeta {
        client,
        seq,
        timestamp,
        len,
        reply,
    })
}

/// The server.
#[derive(Debug)]
pub struct RequestServer {
    mgr: Manager,
    id: InstanceId,
    ep: Endpoint,
    seed: Seed,
    /// Names this server published ([`RequestServer::publish`]), withdrawn when it goes.
    published: Vec<String>,
    seen: HashMap<u64, u32>,
    seen_order: VecDeque<u64>,
    busy: bool,
    duplicates: u64,
    forged: u64,
    mixed: u64,
}

impl RequestServer {
    /// A server taking requests of at most `max_request` bytes.
    pub fn new(mgr: &Manager, max_request: u64) -> Result<RequestServer, RatsError> {
        let id = mgr.register();
        let spec = EndpointSpec {
            mode: SlotMode::ParanoidOneShot,
            ..EndpointSpec::default()
        };
        let ep = match mgr.endpoint(id, max_request.max(1), 1, spec) {
            Ok(ep) => ep,
            Err(e) => {
                mgr.unregister(id);
                return Err(e);
            }
        };
        // One ticket for all: its key is the entry's; arming is ours.
        let t = ep.ticket(0..ep.len(), 0..1)?;
        let seed = make_seed(ProtocolId::RequestResponse, vec![t], &[]);
        Ok(RequestServer {
            mgr: mgr.clone(),
            id,
            ep,
            seed,
            published: Vec::new(),
            seen: HashMap::new(),
            seen_order: VecDeque::new(),
            busy: false,
            duplicates: 0,
            forged: 0,
            mixed: 0,
        })
    }

    /// The seed (its text form is what clients are given).
    pub fn make_seed(&self) -> Seed {
        self.seed.clone()
    }

    /// The seed's ASCII text.
    pub fn seed_text(&self) -> Result<String, RatsError> {
        Ok(hamlyn::seed::to_text(&self.seed)?)
    }

    /// Publishes the seed in the cluster's registry under `name`, until the server is
    /// dropped (the name lives on the manager's connection, which may outlive it).
    pub fn publish(&mut self, name: &str) -> Result<(), RatsError> {
        self.mgr.node().publish(name, &self.seed)?;
        if !self.published.iter().any(|n| n == name) {
            self.published.push(name.to_owned());
        }
        Ok(())
    }

    /// Retransmitted requests dropped as duplicates.
    pub fn duplicates(&self) -> u64 {
        self.duplicates
    }

    /// Requests refused as forged.
    pub fn forged(&self) -> u64 {
        self.forged
    }

    /// Requests dropped because the bytes that arrived did not add up to the length
    /// they declared: a late copy of an earlier request landed with them (module docs).
    /// Their clients retransmit.
    pub fn mixed(&self) -> u64 {
        self.mixed
    }

    /// The next request, waiting up to `timeout`. While one is held (not released) the
    /// buffer is busy and other requests are refused by the engine.
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<Option<Request>, RatsError> {
        if self.busy {
            return Err(RatsError::State("release the last request first"));
        }
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let Some(n) = self.mgr.wait(self.id, deadline)? else {
                return Ok(None);
            };
            if n.kind != NotificationKind::Message {
                continue;
            }
            match self.parse(&n) {
                Ok(Some(r)) => {
                    self.busy = true;
                    return Ok(Some(r));
                }
                // A duplicate, or bytes of two requests: dropped, the buffer taken
                // again.
                Ok(None) => self.rearm()?,
                Err(_) => {
                    self.forged += 1;
                    self.mgr.count_forged();
                    self.rearm()?;
                }
            }
        }
    }

    /// A request's bytes, copied out.
    pub fn to_vec(&self, r: &Request) -> Result<Vec<u8>, RatsError> {
        let mut v = vec![0u8; r.len as usize];
        self.ep.read(r.offset, &mut v)?;
        Ok(v)
    }

    /// Sends the reply to `r`'s client.
    pub fn send_reply(&self, r: &Request, bytes: &[u8]) -> Result<hamlyn::SendHandle, RatsError> {
        let mut meta = MetaWriter::new();
        meta.put(&[VERSION])?
            .put(&r.seq.to_le_bytes())?
            .put(&u64::from(r.timestamp).to_le_bytes())?;
        let opts = SendOptions::new().meta(meta.bytes()).entry(0);
        self.mgr.send_bytes(&r.reply, &opts, bytes)
    }

    /// Frees the receive buffer for the next request.
    pub fn release(&mut self) -> Result<(), RatsError> {
        self.busy = false;
        self.rearm()
    }

    fn rearm(&self) -> Result<(), RatsError> {
        let m = self.ep.meta().ok_or(RatsError::State("no entry"))?;
        Ok(m.arm(0)?)
    }

    /// The request, `None` for a duplicate or for bytes of two requests, or an error for
    /// forged metadata.
    fn parse(&mut self, n: &Notification) -> Result<Option<Request>, RatsError> {
        let offset = n.offset.ok_or(RatsError::Forged("no offset"))?;
        let len = u64::from(n.len);
        self.ep.check(offset, len)?;
        let entry = self.ep.meta().ok_or(RatsError::Forged("entry"))?.entry(0)?;
        let RequestMeta {
            client,
            seq,
            timestamp,
            len: declared,
            reply,
        } = parse_request_meta(entry.metadata())?;
        if declared != n.len {
            // Not recorded as seen: the client's retransmission is this request whole.
            self.mixed += 1;
            return Ok(None);
        }
        if let Some(&last) = self.seen.get(&client) {
            if seq.wrapping_sub(last).wrapping_sub(1) >= u32::MAX / 2 {
                self.duplicates += 1;
                return Ok(None);
            }
        } else {
            self.seen_order.push_back(client);
            if self.seen_order.len() > REMEMBERED_CLIENTS {
                if let Some(old) = self.seen_order.pop_front() {
                    self.seen.remove(&old);
                }
            }
        }
        self.seen.insert(client, seq);
        Ok(Some(Request {
            offset,
            len,
            client,
            seq,
            timestamp,
            reply,
        }))
    }
}

impl Drop for RequestServer {
    /// Withdraws the server's names before its endpoint goes (the fields drop after
    /// this): a client that finds one must not be sent to a slot that is gone, and the
    /// manager's connection, which would take the names with it, may live on.
    fn drop(&mut self) {
        let node = self.mgr.node();
        for name in &self.published {
            // Only while it still names this server: another server on the same
            // connection may have published its own seed under it since. Errors are
            // ignored: a name already gone needs nothing, and an engine that cannot
            // answer has lost the connection, names and all.
            if node.lookup(name).is_ok_and(|seed| seed == self.seed) {
                let _ = node.unpublish(name);
            }
        }
        self.mgr.unregister(self.id);
    }
}

/// A reply, held in the client's reply buffer until [`RequestClient::release`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Its bytes.
    pub len: u64,
    /// The sequence number it answers.
    pub seq: u32,
    /// Round trip, by the echoed timestamp.
    pub round_trip: Duration,
}

/// The client.
#[derive(Debug)]
pub struct RequestClient {
    mgr: Manager,
    id: InstanceId,
    server: Ticket,
    reply_ep: Endpoint,
    reply_compact: [u8; COMPACT_TICKET_LEN],
    client: u64,
    seq: u32,
    started: Instant,
    holding: bool,
    /// Retransmissions made.
    pub retransmissions: u64,
}

impl RequestClient {
    /// A client of the server `seed` names, taking replies of at most `max_reply` bytes.
    pub fn from_seed(
        mgr: &Manager,
        seed: &Seed,
        max_reply: u64,
    ) -> Result<RequestClient, RatsError> {
        check_seed(seed, ProtocolId::RequestResponse, 1)?;
        let id = mgr.register();
        let reply_ep = match mgr.endpoint(id, max_reply.max(1), 1, EndpointSpec::default()) {
            Ok(ep) => ep,
            Err(e) => {
                mgr.unregister(id);
                return Err(e);
            }
        };
        let reply_compact = encode_compact(&reply_ep.ticket(0..reply_ep.len(), 0..1)?)?;
        Ok(RequestClient {
            mgr: mgr.clone(),
            id,
            server: seed.tickets[0],
            reply_ep,
            reply_compact,
            client: std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish(),
            seq: 0,
            started: Instant::now(),
            holding: false,
            retransmissions: 0,
        })
    }

    /// A client from the seed's ASCII text.
    pub fn from_text(
        mgr: &Manager,
        text: &str,
        max_reply: u64,
    ) -> Result<RequestClient, RatsError> {
        let seed = hamlyn::seed::from_text(text)?;
        RequestClient::from_seed(mgr, &seed, max_reply)
    }

    /// A client of the server published under `name` in the registry.
    pub fn lookup(mgr: &Manager, name: &str, max_reply: u64) -> Result<RequestClient, RatsError> {
        let seed = mgr.node().lookup(name)?;
        RequestClient::from_seed(mgr, &seed, max_reply)
    }

    fn send_once(&self, bytes: &[u8], ts: u32) -> Result<hamlyn::SendHandle, RatsError> {
        // The length modulo 2^32, as the server's notification counts it.
        let fields = (self.client, self.seq, ts, bytes.len() as u32);
        let meta = write_request_meta(fields, &self.reply_compact)?;
        let opts = SendOptions::new().meta(meta.bytes()).entry(0);
        self.mgr.send_bytes(&self.server, &opts, bytes)
    }

    /// Sends `request` and waits up to `timeout` for its reply, retransmitting while the
    /// server is busy or silent. [`RatsError::PeerGone`] if the server is gone,
    /// [`RatsError::Timeout`] if no reply came in time.
    pub fn call(&mut self, request: &[u8], timeout: Duration) -> Result<Reply, RatsError> {
        if self.holding {
            return Err(RatsError::State("release the last reply first"));
        }
        self.seq = self.seq.wrapping_add(1);
        let deadline = Instant::now() + timeout;
        let mut wait = RETRANSMIT_AFTER;
        let ts = self.micros();
        let mut h = self.send_once(request, ts)?;
        loop {
            let slice = (Instant::now() + wait).min(deadline);
            // Look at the send while waiting: a refusal is known before the slice ends.
            let mut slice_end = Instant::now();
            while slice_end < slice {
                let step = (slice_end + Duration::from_millis(5)).min(slice);
                if let Some(r) = self.wait_reply(step)? {
                    return Ok(r);
                }
                match h.status() {
                    Status::Failed(RejectReason::PeerDown)
                    | Status::Failed(RejectReason::UnknownSlot)
                    | Status::Failed(RejectReason::Revoked)
                    | Status::Failed(RejectReason::StaleIncarnation) => {
                        // A retransmission may find the server gone after it answered
                        // the first copy: an answer already here wins.
                        if let Some(r) = self.wait_reply(Instant::now())? {
                            return Ok(r);
                        }
                        return Err(RatsError::PeerGone);
                    }
                    Status::Failed(_) | Status::FailedCode(_) => break,
                    _ => {}
                }
                slice_end = Instant::now();
            }
            if Instant::now() >= deadline {
                return Err(RatsError::Timeout);
            }
            // Busy (refused) or silent: the same request again, same sequence number.
            self.retransmissions += 1;
            h = self.send_once(request, ts)?;
            wait = (wait * 2).min(RETRANSMIT_AFTER * 8);
        }
    }

    /// Microseconds since the client started, wrapping at 2^32 (71 minutes): a round
    /// trip is measured by wrapping subtraction.
    fn micros(&self) -> u32 {
        self.started.elapsed().as_micros() as u32
    }

    /// Waits until `until` for the reply to the current sequence number.
    fn wait_reply(&mut self, until: Instant) -> Result<Option<Reply>, RatsError> {
        let Some(n) = self.mgr.wait(self.id, Some(until))? else {
            return Ok(None);
        };
        if n.kind != NotificationKind::Message {
            return Ok(None);
        }
        let len = u64::from(n.len);
        let entry = self
            .reply_ep
            .meta()
            .ok_or(RatsError::State("no entry"))?
            .entry(0)?;
        let mut r = Reader::new(entry.metadata());
        let parsed = (|| -> Result<(u32, u64), RatsError> {
            if r.u8()? != VERSION {
                return Err(RatsError::Forged("version"));
            }
            Ok((r.u32()?, r.u64()?))
        })();
        match parsed {
            Ok((seq, ts)) if seq == self.seq && self.reply_ep.check(0, len).is_ok() => {
                self.holding = true;
                // The echo of a u32 timestamp: its low 32 bits, subtracted wrapping.
                let since = self.micros().wrapping_sub(ts as u32);
                Ok(Some(Reply {
                    len,
                    seq,
                    round_trip: Duration::from_micros(u64::from(since)),
                }))
            }
            // A late reply to an earlier sequence number: dropped.
            Ok(_) => Ok(None),
            Err(_) => {
                self.mgr.count_forged();
                Ok(None)
            }
        }
    }

    /// The reply's bytes.
    pub fn reply_bytes(&self, r: &Reply) -> Result<Vec<u8>, RatsError> {
        let mut v = vec![0u8; r.len as usize];
        self.reply_ep.read(0, &mut v)?;
        Ok(v)
    }

    /// Done with the reply buffer.
    pub fn release(&mut self) {
        self.holding = false;
    }
}

impl Drop for RequestClient {
    fn drop(&mut self) {
        self.mgr.unregister(self.id);
    }
}
