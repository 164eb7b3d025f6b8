//! An active-message endpoint (seed 003 §4.3, §5): one per node handle and thread. It
//! sends short, bulk and memory messages to other endpoints, and runs the handlers of
//! arriving messages when its thread calls [`AmEndpoint::poll`] (GRIM's `grim_poll`),
//! which sleeps on the port's event descriptor while nothing arrives — never as an
//! interrupt-style upcall.
//!
//! Messages travel over links ([`crate::link`]): per pair of endpoints, datagram
//! channels into receive buffers the receiver granted (sender-based credit: a sender
//! without credit gets [`AmError::Full`]; nothing overruns the receiver). A bulk message
//! is one message of many packets, counted back together by the engine; its handler
//! sees it as a view of the receive buffer ([`Ctx::read_payload`]), released after the
//! handler returns.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use hamlyn::{Node, NodeId, SendHandle};
use hamlyn_rats::datagram::{Datagram, DatagramReceiver};
use hamlyn_rats::remote_write::{RemoteWriteClient, RemoteWriteServer};
use hamlyn_rats::{Manager, ManagerOptions, RatsError};

use crate::header::{self, Header, Kind, Refusal, HEADER_LEN, WANT_ACK, WANT_REPLY};
use crate::link::Links;
use crate::table::{Handler, HandlerCounters, HandlerId, Handlers};
use crate::AmError;

/// Where an endpoint is: its node and its client id on that node's engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr {
    /// The node.
    pub node: NodeId,
    /// The endpoint's connection (client id) on that node.
    pub client: u32,
}

impl Addr {
    /// The client number that names a node's engine itself.
    pub const ENGINE: u32 = u32::MAX;

    /// `node`'s engine, which runs the engine-resident handlers (`hamlyn.ping`,
    /// `hamlyn.echo`, `hamlyn.counter`, `hamlyn.stats`: [`hamlyn::am_engine`]).
    pub fn engine(node: NodeId) -> Addr {
        Addr {
            node,
            client: Addr::ENGINE,
        }
    }
}

/// How an endpoint is sized.
#[derive(Clone, Copy, Debug)]
pub struct AmOptions {
    /// Most peers it links with.
    pub max_peers: u32,
    /// Short messages a peer may have in flight to it (1..=16).
    pub short_credits: u32,
    /// Bulk messages a peer may have in flight to it (1..=16).
    pub bulk_credits: u32,
    /// The largest bulk payload.
    pub bulk_max: u64,
}

impl Default for AmOptions {
    fn default() -> Self {
        AmOptions {
            max_peers: 16,
            short_credits: 16,
            bulk_credits: 2,
            bulk_max: 64 * 1024,
        }
    }
}

/// What a sender waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// Nothing (an error still comes back, see [`AmEndpoint::failures`]).
    Nothing,
    /// Remote completion: the handler ran.
    Ack,
    /// The handler's reply.
    Reply,
}

/// A call's number at its sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallId(pub u64);

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The handler ran (remote completion).
    Done,
    /// The handler's reply arguments.
    Reply([u64; 4]),
}

/// A failure reported for a message nobody waits for.
#[derive(Debug)]
pub struct Failure {
    /// The call.
    pub call: CallId,
    /// Why.
    pub error: AmError,
}

/// Endpoint-wide counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AmCounters {
    /// Messages whose handler ran here.
    pub handled: u64,
    /// Messages refused here for naming no handler of this process (forged or gone ids).
    pub unknown_handler: u64,
    /// Messages refused here for naming an old epoch of a handler.
    pub stale_epoch: u64,
    /// Messages that did not parse (lying lengths, bad kinds...): no handler ran.
    pub malformed: u64,
    /// Replies, acks or errors for calls not outstanding here (a token used twice, or
    /// made up): refused.
    pub reply_refused: u64,
    /// Sends refused for want of credit (back-pressure seen here).
    pub full: u64,
    /// Hellos naming no endpoint that published a link to us.
    pub bad_hellos: u64,
    /// Failures not kept (more than [`MAX_FAILURES`] unread).
    pub failures_dropped: u64,
    /// Answers (replies, acks, errors) given up: their peer never took them (no credit
    /// or no link back for very long, the peer gone) or too many waited.
    pub answers_dropped: u64,
    /// Link set-ups with a peer that failed (its seeds were not a link's, no room).
    pub link_failures: u64,
}

/// Unread failures kept at most ([`AmEndpoint::failures`]).
pub const MAX_FAILURES: usize = 4096;
/// Ready protocol instances one `poll` serves at most (each with all it has waiting).
const POLL_BUDGET: usize = 64;
/// How often, at most, `poll` reports changed handler counters to the engine.
const REPORT_EVERY: Duration = Duration::from_secs(1);
/// How often a waiting call looks whether its peer endpoint is still there.
const PROBE_EVERY: Duration = Duration::from_millis(500);
/// Replies and errors waiting for credit, at most.
const MAX_OUTBOX: usize = 65_536;
/// Polls an answer waits for credit (or for its peer to link back) before it is given up.
const ANSWER_TRIES: u32 = 10_000;

#[derive(Debug)]
struct Pending {
    to: Addr,
    handler: u32,
    sent: SendHandle,
    outcome: Option<Result<Outcome, AmError>>,
}

/// The context a handler runs with: the message and its reply token.
pub struct Ctx<'a> {
    header: &'a Header,
    src: Addr,
    /// The bulk payload (a view of the receive buffer), if any.
    payload: Option<(&'a DatagramReceiver, &'a Datagram)>,
    reply: Option<[u64; 4]>,
    replied_twice: bool,
}

impl std::fmt::Debug for Ctx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("header", self.header)
            .field("src", &self.src)
            .finish_non_exhaustive()
    }
}

impl Ctx<'_> {
    /// The four arguments.
    pub fn args(&self) -> [u64; 4] {
        self.header.args
    }

    /// The sender's logical channel.
    pub fn channel(&self) -> u16 {
        self.header.channel
    }

    /// The sending endpoint.
    pub fn src(&self) -> Addr {
        self.src
    }

    /// Bytes of the bulk payload (0 for a short message).
    pub fn payload_len(&self) -> u64 {
        u64::from(self.header.payload_len)
    }

    /// Copies payload bytes from `off` into `buf` (the payload stays in the receive
    /// buffer it landed in; nothing is copied until asked).
    pub fn read_payload(&self, off: u64, buf: &mut [u8]) -> Result<(), AmError> {
        let end = off.checked_add(buf.len() as u64);
        let fits = matches!(end, Some(e) if e <= self.payload_len());
        let Some((rx, d)) = self.payload.filter(|_| fits) else {
            return Err(AmError::TooLong {
                len: end.unwrap_or(u64::MAX),
                max: self.payload_len(),
            });
        };
        // A view of the part wanted: the same receive buffer, further in.
        let mut part = *d;
        part.offset += HEADER_LEN as u64 + off;
        part.len = buf.len() as u64;
        rx.read(&part, buf)?;
        Ok(())
    }

    /// The address of the bulk payload's first byte in the receive buffer it landed in
    /// ([`Ctx::payload_len`] bytes; `None` for a short message): the zero-copy view a
    /// foreign-language handler reads (the C API's `hamlyn_am_ctx_payload`). Valid only
    /// while the handler runs: the buffer goes back to its sender after. Other processes
    /// may write that memory, so never form a Rust reference to it
    /// ([`Ctx::read_payload`] is the safe accessor).
    pub fn payload_ptr(&self) -> Result<Option<*const u8>, AmError> {
        let Some((rx, d)) = self.payload else {
            return Ok(None);
        };
        let mut part = *d;
        part.offset += HEADER_LEN as u64;
        part.len = self.payload_len();
        Ok(Some(rx.view(&part)?))
    }

    /// The whole payload, copied out.
    pub fn payload(&self) -> Result<Vec<u8>, AmError> {
        let mut v = vec![0u8; self.payload_len() as usize];
        self.read_payload(0, &mut v)?;
        Ok(v)
    }

    /// Replies once (the token): a second reply is [`AmError::ReplyTwice`] and is not
    /// sent.
    pub fn reply(&mut self, args: [u64; 4]) -> Result<(), AmError> {
        if self.reply.is_some() {
            self.replied_twice = true;
            return Err(AmError::ReplyTwice);
        }
        self.reply = Some(args);
        Ok(())
    }
}

/// A region of this endpoint's memory that memory messages copy into (seed 003 §5.1:
/// a block copy, no handler): [`MemoryRegion::seed`] gives the capability to write it.
#[derive(Debug)]
pub struct MemoryRegion {
    server: RemoteWriteServer,
}

impl MemoryRegion {
    /// The seed a sender writes it through ([`AmEndpoint::memory_target`]).
    pub fn seed(&self) -> Result<hamlyn::Seed, AmError> {
        Ok(self.server.make_seed()?)
    }

    /// Copies bytes out.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), AmError> {
        Ok(self.server.read(off, buf)?)
    }
}

/// The sending side of memory messages to one region.
#[derive(Debug)]
pub struct MemoryTarget {
    client: RemoteWriteClient,
}

impl MemoryTarget {
    /// Copies `bytes` to `offset` of the region; the handle turns `Sent` when they left
    /// this engine, or failed (out of the ticket's range, peer gone...).
    pub fn write(&self, offset: u64, bytes: &[u8]) -> Result<SendHandle, AmError> {
        Ok(self.client.write(offset, bytes)?)
    }
}

/// An active-message endpoint (see the module docs).
pub struct AmEndpoint {
    node: Node,
    mgr: Manager,
    pub(crate) links: Links,
    short_rx: DatagramReceiver,
    bulk_rx: DatagramReceiver,
    handlers: Handlers,
    options: AmOptions,
    next_call: u64,
    pending: HashMap<u64, Pending>,
    /// Outcomes of calls to engine-resident handlers, until waited for.
    engine_done: HashMap<u64, Result<Outcome, AmError>>,
    failures: VecDeque<Failure>,
    /// Answers waiting for credit: to whom, the bytes, polls tried.
    outbox: VecDeque<(Addr, [u8; HEADER_LEN], u32)>,
    counters: AmCounters,
    /// Logical channels opened (channel 0, the manager's own terminus, is always open).
    channels: u16,
    /// When the counters were last reported to the engine.
    reported: Option<Instant>,
    /// Whether they changed since.
    unreported: bool,
}

impl std::fmt::Debug for AmEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmEndpoint")
            .field("addr", &self.addr())
            .field("handlers", &self.handlers)
            .finish_non_exhaustive()
    }
}

impl AmEndpoint {
    /// An endpoint on `node` (a connection it keeps for itself), reachable by
    /// [`AmEndpoint::addr`].
    pub fn new(node: Node, options: AmOptions) -> Result<AmEndpoint, AmError> {
        let o = options;
        if !(1..=16).contains(&o.short_credits) || !(1..=16).contains(&o.bulk_credits) {
            return Err(AmError::Rats(RatsError::InvalidArgument(
                "credits must be 1..=16",
            )));
        }
        let peers = u64::from(o.max_peers.max(1));
        let (sc, bc) = (u64::from(o.short_credits), u64::from(o.bulk_credits));
        let bulk_len = (HEADER_LEN as u64 + o.bulk_max).next_multiple_of(64);
        // Receive buffers, credit slots of our senders, bulk copies in flight, the door.
        let space = peers * (sc * 64 + bc * bulk_len) + peers * 2 * 64 + peers * bc * bulk_len;
        let entries = peers * (sc + bc) * 2 + 64;
        let mgr = Manager::with_options(
            &node,
            ManagerOptions {
                space: space + (1 << 20),
                entries: u32::try_from(entries)
                    .map_err(|_| RatsError::InvalidArgument("too many peers"))?,
                ..ManagerOptions::default()
            },
        )?;
        let short_rx = DatagramReceiver::new(&mgr, (peers * sc) as u32, HEADER_LEN as u64)?;
        let bulk_rx = DatagramReceiver::new(&mgr, (peers * bc) as u32, bulk_len)?;
        let links = Links::new(&node, &mgr, o)?;
        Ok(AmEndpoint {
            node,
            mgr,
            links,
            short_rx,
            bulk_rx,
            handlers: Handlers::default(),
            options: o,
            next_call: 1,
            pending: HashMap::new(),
            engine_done: HashMap::new(),
            failures: VecDeque::new(),
            outbox: VecDeque::new(),
            counters: AmCounters::default(),
            channels: 1,
            reported: None,
            unreported: false,
        })
    }

    /// Where this endpoint is.
    pub fn addr(&self) -> Addr {
        Addr {
            node: self.node.id(),
            client: self.node.client_id(),
        }
    }

    /// The endpoint's connection.
    pub fn node(&self) -> &Node {
        &self.node
    }

    // ----- handlers -----

    /// Registers `handler` locally under `name` with the fingerprint of its argument
    /// layout ([`crate::fingerprint`]); the cluster numbers it at the next
    /// [`AmEndpoint::synch`] (GRIM's `grim_registerHandler`).
    pub fn register(
        &mut self,
        name: &str,
        fingerprint: u64,
        handler: impl FnMut(&mut Ctx<'_>) -> Result<(), String> + 'static,
    ) -> Result<(), AmError> {
        let h: Handler = Box::new(handler);
        self.handlers.register(name, fingerprint, h)
    }

    /// Removes a local handler at once: a message for it fails here from now on, and
    /// its sender gets an error completion naming it. The cluster hears at the next
    /// synch.
    pub fn unregister(&mut self, name: &str) -> Result<(), AmError> {
        self.handlers.unregister(name)
    }

    /// Sends the local handler list's changes to the cluster's registry node, which
    /// numbers new names, and fetches the cluster's table back (`grim_synchHandlers`).
    /// A name the cluster has with another fingerprint is [`AmError::Collision`]
    /// (that handler is dropped here; the others are registered).
    pub fn synch(&mut self) -> Result<(), AmError> {
        self.handlers.synch(&self.node)
    }

    /// Fetches the cluster's table (a late joiner's first step; see
    /// [`AmEndpoint::synch`]).
    pub fn refresh(&mut self) -> Result<(), AmError> {
        self.handlers.refresh(&self.node)
    }

    /// A live handler's id by name, from the local copy of the table
    /// (`grim_getHandlerByName`).
    pub fn handler_by_name(&self, name: &str) -> Result<HandlerId, AmError> {
        self.handlers.by_name(name)
    }

    /// The local copy of the cluster's table and its version.
    pub fn table(&self) -> (u64, &[hamlyn::AmHandlerEntry]) {
        self.handlers.table()
    }

    /// Per-handler counters of this process's handlers.
    pub fn handler_counters(&self) -> Vec<(String, HandlerCounters)> {
        self.handlers.counters()
    }

    /// Reports the per-handler counters ([`AmEndpoint::handler_counters`]) to this
    /// endpoint's engine, which sums them over its clients for `hamlyn stat` (the first
    /// [`hamlyn::MAX_AM_REPORT`] handlers). [`AmEndpoint::poll`] does it by itself at
    /// most once a second while they change.
    pub fn report_counters(&mut self) -> Result<(), AmError> {
        let rows: Vec<(String, hamlyn::AmCounts)> = self
            .handlers
            .counters()
            .into_iter()
            .take(hamlyn::MAX_AM_REPORT)
            .map(|(n, c)| {
                let counts = hamlyn::AmCounts {
                    calls: c.calls,
                    replies: c.replies,
                    errors: c.errors,
                    refused: c.refused,
                };
                (n, counts)
            })
            .collect();
        self.node.am_report(&rows)?;
        self.reported = Some(Instant::now());
        self.unreported = false;
        Ok(())
    }

    /// Endpoint-wide counters.
    pub fn counters(&self) -> AmCounters {
        self.counters
    }

    // ----- sending -----

    /// Opens a logical channel (seed 003 §4.2): a terminus of this endpoint's own,
    /// served at `priority` (0 first; the engine schedules termini round robin within a
    /// priority), and returns its number, which travels with every message sent on it.
    /// Channel 0 is always open (priority 0). A port has as many termini as its
    /// `NodeOptions::termini` (4 by default, at most 256), one of them channel 0's.
    pub fn open_channel(&mut self, priority: u8) -> Result<u16, AmError> {
        let t = self.mgr.open_terminus(priority)?;
        let c = u16::try_from(t).map_err(|_| AmError::NoChannel(u16::MAX))?;
        self.channels = c + 1;
        Ok(c)
    }

    /// Sends through `channel`'s terminus.
    fn on_channel<T>(
        &mut self,
        channel: u16,
        send: impl FnOnce(&mut Links) -> Result<T, AmError>,
    ) -> Result<T, AmError> {
        if channel >= self.channels {
            return Err(AmError::NoChannel(channel));
        }
        let before = self.mgr.select_terminus(usize::from(channel))?;
        let r = send(&mut self.links);
        self.mgr.select_terminus(before)?;
        r
    }

    /// Links with `peer` (done by the first send too), waiting up to `timeout`; this
    /// endpoint keeps serving its own arrivals meanwhile.
    pub fn connect(&mut self, peer: Addr, timeout: Duration) -> Result<(), AmError> {
        let deadline = Instant::now() + timeout;
        self.links
            .grant(peer, &mut self.short_rx, &mut self.bulk_rx)?;
        if self.links.try_link(peer)? {
            return Ok(());
        }
        self.links.hello(peer)?;
        loop {
            self.poll(Some(Duration::from_millis(2)))?;
            if self.links.try_link(peer)? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(AmError::Timeout);
            }
        }
    }

    fn header(
        &mut self,
        kind: Kind,
        h: HandlerId,
        channel: u16,
        args: [u64; 4],
        want: Want,
    ) -> Header {
        let mut hd = Header::new(kind);
        hd.handler = h.id;
        hd.epoch = h.epoch;
        hd.channel = channel;
        hd.args = args;
        hd.flags = match want {
            Want::Nothing => 0,
            Want::Ack => WANT_ACK,
            Want::Reply => WANT_REPLY,
        };
        hd.call = self.next_call;
        self.next_call += 1;
        hd
    }

    /// Sends a short message (handler, logical channel, four arguments; one packet) to
    /// `to`. [`AmError::Full`] when the link has no credit (nothing sent).
    pub fn send_short(
        &mut self,
        to: Addr,
        handler: HandlerId,
        channel: u16,
        args: [u64; 4],
        want: Want,
    ) -> Result<CallId, AmError> {
        if to.client == Addr::ENGINE {
            return self.engine_call(to.node, handler, channel, args, want);
        }
        if channel >= self.channels {
            return Err(AmError::NoChannel(channel));
        }
        self.ensure_link(to)?;
        let hd = self.header(Kind::Short, handler, channel, args, want);
        let sent = match self.on_channel(channel, |links| {
            let link = links.get(to).ok_or(AmError::Timeout)?;
            Ok(link.short.send(&hd.encode(), &[]))
        })? {
            Err(RatsError::Full) => {
                self.counters.full += 1;
                return Err(AmError::Full);
            }
            other => other?,
        };
        Ok(self.track(hd, to, sent, want))
    }

    /// Sends a bulk message: arguments and `payload` (up to [`AmOptions::bulk_max`] of
    /// the receiver) into a receive buffer the receiver granted. [`AmError::Full`] when
    /// the link has no bulk credit.
    pub fn send_bulk(
        &mut self,
        to: Addr,
        handler: HandlerId,
        channel: u16,
        args: [u64; 4],
        payload: &[u8],
        want: Want,
    ) -> Result<CallId, AmError> {
        if channel >= self.channels {
            return Err(AmError::NoChannel(channel));
        }
        self.ensure_link(to)?;
        let max = self.links.get(to).map_or(0, |l| l.bulk_max);
        let len = payload.len() as u64;
        if len + HEADER_LEN as u64 > max || len > u64::from(u32::MAX) {
            return Err(AmError::TooLong {
                len,
                max: max.saturating_sub(HEADER_LEN as u64),
            });
        }
        let mut hd = self.header(Kind::Bulk, handler, channel, args, want);
        hd.payload_len = len as u32;
        let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
        bytes.extend_from_slice(&hd.encode());
        bytes.extend_from_slice(payload);
        let sent = match self.on_channel(channel, |links| {
            let link = links.get(to).ok_or(AmError::Timeout)?;
            Ok(link.bulk.send(&bytes, &[]))
        })? {
            Err(RatsError::Full) => {
                self.counters.full += 1;
                return Err(AmError::Full);
            }
            other => other?,
        };
        Ok(self.track(hd, to, sent, want))
    }

    /// A short message to a node's engine: its engine-resident handler runs at once
    /// (through this endpoint's engine, forwarded over the fabric), and the outcome waits
    /// for [`AmEndpoint::wait`].
    fn engine_call(
        &mut self,
        node: NodeId,
        handler: HandlerId,
        channel: u16,
        args: [u64; 4],
        want: Want,
    ) -> Result<CallId, AmError> {
        let hd = self.header(Kind::Short, handler, channel, args, want);
        let outcome = match self.node.am_engine_call(node, handler.id, args) {
            Ok(r) if want == Want::Reply => Ok(Outcome::Reply(r)),
            Ok(_) => Ok(Outcome::Done),
            Err(hamlyn::Error::Refused {
                code: Some(hamlyn::ControlErrorCode::NotFound),
                ..
            }) => Err(AmError::Refused {
                handler: self.handlers.name_of(handler.id),
                id: handler.id,
                why: Refusal::NoHandler,
            }),
            Err(e) => Err(e.into()),
        };
        match (want, outcome) {
            (Want::Nothing, Ok(_)) => {}
            (Want::Nothing, Err(error)) => {
                if self.failures.len() >= MAX_FAILURES {
                    self.counters.failures_dropped += 1;
                } else {
                    self.failures.push_back(Failure {
                        call: CallId(hd.call),
                        error,
                    });
                }
            }
            (_, outcome) => {
                self.engine_done.insert(hd.call, outcome);
            }
        }
        Ok(CallId(hd.call))
    }

    fn ensure_link(&mut self, to: Addr) -> Result<(), AmError> {
        if self.links.get(to).is_some() {
            return Ok(());
        }
        self.connect(to, Duration::from_secs(30))
    }

    fn track(&mut self, hd: Header, to: Addr, sent: SendHandle, want: Want) -> CallId {
        if want != Want::Nothing {
            self.pending.insert(
                hd.call,
                Pending {
                    to,
                    handler: hd.handler,
                    sent,
                    outcome: None,
                },
            );
        }
        CallId(hd.call)
    }

    /// Waits up to `timeout` for a call sent with [`Want::Ack`] or [`Want::Reply`],
    /// running arriving handlers meanwhile.
    pub fn wait(&mut self, call: CallId, timeout: Duration) -> Result<Outcome, AmError> {
        let deadline = Instant::now() + timeout;
        if let Some(out) = self.engine_done.remove(&call.0) {
            return out;
        }
        let mut probed = Instant::now();
        loop {
            let p = self
                .pending
                .get_mut(&call.0)
                .ok_or(AmError::NoCall(call.0))?;
            if let Some(out) = p.outcome.take() {
                self.pending.remove(&call.0);
                return out;
            }
            let s = p.sent.status();
            if s.is_failed() {
                self.pending.remove(&call.0);
                return Err(AmError::SendFailed(s));
            }
            let to = p.to;
            let now = Instant::now();
            if now >= deadline {
                return Err(AmError::Timeout);
            }
            if now.duration_since(probed) >= PROBE_EVERY {
                probed = now;
                if self.links.is_gone(to) {
                    self.pending.remove(&call.0);
                    return Err(AmError::PeerGone(to));
                }
            }
            self.poll(Some((deadline - now).min(Duration::from_millis(20))))?;
        }
    }

    /// The state of an outstanding call's send (`None`: not outstanding): `Sent` to a
    /// peer on this node means it landed in the peer's receive buffer.
    pub fn send_status(&self, call: CallId) -> Option<hamlyn::Status> {
        self.pending.get(&call.0).map(|p| p.sent.status())
    }

    /// A short message with [`Want::Reply`], waited for (up to `timeout`); sends again
    /// while the link is full.
    pub fn call(
        &mut self,
        to: Addr,
        handler: HandlerId,
        channel: u16,
        args: [u64; 4],
        timeout: Duration,
    ) -> Result<[u64; 4], AmError> {
        let deadline = Instant::now() + timeout;
        let c = loop {
            match self.send_short(to, handler, channel, args, Want::Reply) {
                Err(AmError::Full) if Instant::now() < deadline => {
                    self.poll(Some(Duration::from_millis(1)))?;
                }
                other => break other?,
            }
        };
        match self.wait(c, deadline.saturating_duration_since(Instant::now()))? {
            Outcome::Reply(a) => Ok(a),
            Outcome::Done => Ok([0; 4]),
        }
    }

    /// Sends `bytes` as they are on the link to `to` (short channel, or bulk): a test
    /// of what a receiver refuses (forged headers, lying lengths); a sender never needs
    /// it.
    pub fn send_raw(&mut self, to: Addr, bytes: &[u8], bulk: bool) -> Result<(), AmError> {
        self.ensure_link(to)?;
        let link = self.links.get(to).ok_or(AmError::Timeout)?;
        let tx = if bulk {
            &mut link.bulk
        } else {
            &mut link.short
        };
        tx.send(bytes, &[])?;
        Ok(())
    }

    /// Failures of messages nobody waits for, oldest first (taken).
    pub fn failures(&mut self) -> Vec<Failure> {
        self.failures.drain(..).collect()
    }

    /// A region of this endpoint's memory for memory messages.
    pub fn memory_region(&self, len: u64) -> Result<MemoryRegion, AmError> {
        Ok(MemoryRegion {
            server: RemoteWriteServer::new(&self.mgr, len)?,
        })
    }

    /// The sending side of memory messages to the region `seed` names.
    pub fn memory_target(&self, seed: &hamlyn::Seed) -> Result<MemoryTarget, AmError> {
        Ok(MemoryTarget {
            client: RemoteWriteClient::from_seed(&self.mgr, seed)?,
        })
    }

    // ----- receiving -----

    /// Runs the handlers of what arrived (GRIM's `grim_poll`), waiting up to `timeout`
    /// (`None`: until something arrives) when nothing has; the thread sleeps on the
    /// port's event descriptor meanwhile. Returns the messages handled (a bounded
    /// number: call it again while it returns work).
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<usize, AmError> {
        if self.unreported && self.reported.is_none_or(|t| t.elapsed() >= REPORT_EVERY) {
            // Counters are for people: a report that fails is tried again next time.
            let _ = self.report_counters();
            self.reported = Some(Instant::now());
        }
        self.flush_outbox();
        let mut handled = 0;
        let mut wait = timeout;
        // Bounded, so a caller waiting for something else (a reply, a deadline) gets
        // control back under a steady stream of arrivals.
        for _ in 0..POLL_BUDGET {
            let ready = self.mgr.poll(wait)?;
            wait = Some(Duration::ZERO);
            let Some(id) = ready else {
                return Ok(handled);
            };
            if id == self.short_rx.id() {
                while let Some(d) = self.short_rx.try_recv()? {
                    handled += self.arrived(d, false)?;
                }
            } else if id == self.bulk_rx.id() {
                while let Some(d) = self.bulk_rx.try_recv()? {
                    handled += self.arrived(d, true)?;
                }
            } else if id == self.links.door_id() {
                let (bad, failed) = self.links.hellos(&mut self.short_rx, &mut self.bulk_rx)?;
                self.counters.bad_hellos += bad;
                self.counters.link_failures += failed;
            }
            // Anything else is a credit for one of our senders: taken when it sends.
            self.flush_outbox();
        }
        Ok(handled)
    }

    fn arrived(&mut self, d: Datagram, bulk: bool) -> Result<usize, AmError> {
        let rx = if bulk { &self.bulk_rx } else { &self.short_rx };
        let mut hb = [0u8; HEADER_LEN];
        let parsed = if d.len >= HEADER_LEN as u64 {
            rx.read(&d, &mut hb)
                .map_err(AmError::from)
                .and_then(|()| header::parse(&hb, d.len).map_err(AmError::from))
        } else {
            Err(AmError::Malformed(header::HeaderError::Short(
                d.len as usize,
            )))
        };
        let src = if bulk {
            self.links.bulk_peer(d.sender)
        } else {
            self.links.short_peer(d.sender)
        };
        let (hd, src) = match (parsed, src) {
            (Ok(hd), Some(src)) if src.node == d.src && (bulk == (hd.kind == Kind::Bulk)) => {
                (hd, src)
            }
            _ => {
                self.counters.malformed += 1;
                self.release(d, bulk)?;
                return Ok(0);
            }
        };
        match hd.kind {
            Kind::Short | Kind::Bulk => {
                let r = self.run(&hd, src, if bulk { Some(&d) } else { None });
                self.release(d, bulk)?;
                r?;
                Ok(1)
            }
            Kind::Reply | Kind::Ack | Kind::Error => {
                self.release(d, bulk)?;
                self.completion(&hd, src);
                Ok(0)
            }
        }
    }

    fn release(&mut self, d: Datagram, bulk: bool) -> Result<(), AmError> {
        if bulk {
            self.bulk_rx.release(d)?;
        } else {
            self.short_rx.release(d)?;
        }
        Ok(())
    }

    /// Runs the handler a message names, and answers as its flags ask.
    fn run(&mut self, hd: &Header, src: Addr, d: Option<&Datagram>) -> Result<(), AmError> {
        self.unreported = true;
        let mut answer = Header::new(Kind::Ack);
        answer.handler = hd.handler;
        answer.epoch = hd.epoch;
        answer.channel = hd.channel;
        answer.call = hd.call;
        match self.handlers.local_by_id(hd.handler) {
            None => {
                self.counters.unknown_handler += 1;
                self.handlers.refused(hd.handler);
                answer.kind = Kind::Error;
                answer.refusal = Some(Refusal::NoHandler);
            }
            Some((id, _, _)) if id.epoch != hd.epoch => {
                self.counters.stale_epoch += 1;
                self.handlers.refused(hd.handler);
                answer.kind = Kind::Error;
                answer.refusal = Some(Refusal::StaleEpoch);
            }
            Some((_, handler, counters)) => {
                let mut ctx = Ctx {
                    header: hd,
                    src,
                    payload: d.map(|d| (&self.bulk_rx, d)),
                    reply: None,
                    replied_twice: false,
                };
                counters.calls += 1;
                self.counters.handled += 1;
                let r = handler(&mut ctx);
                if r.is_err() || ctx.replied_twice {
                    counters.errors += 1;
                    answer.kind = Kind::Error;
                    answer.refusal = Some(Refusal::HandlerFailed);
                } else if let Some(args) = ctx.reply {
                    counters.replies += 1;
                    answer.kind = Kind::Reply;
                    answer.args = args;
                } else if hd.flags & WANT_REPLY != 0 {
                    counters.errors += 1;
                    answer.kind = Kind::Error;
                    answer.refusal = Some(Refusal::NoReply);
                } else if hd.flags & WANT_ACK == 0 {
                    return Ok(());
                }
            }
        }
        if self.outbox.len() >= MAX_OUTBOX {
            // Bounded: the peer sends faster than it takes our answers.
            self.counters.answers_dropped += 1;
            return Ok(());
        }
        self.outbox.push_back((src, answer.encode(), 0));
        Ok(())
    }

    /// Sends queued answers while their links have credit; an answer to a peer without
    /// credit waits (behind it, only that peer's); one to a peer that never links back
    /// is given up after [`ANSWER_TRIES`] polls (counted).
    fn flush_outbox(&mut self) {
        let mut kept = VecDeque::new();
        let mut blocked: Vec<Addr> = Vec::new();
        while let Some((to, bytes, tries)) = self.outbox.pop_front() {
            if blocked.contains(&to) {
                kept.push_back((to, bytes, tries));
                continue;
            }
            let linked =
                self.links.get(to).is_some() || matches!(self.links.try_link(to), Ok(true));
            let sent = match self.links.get(to) {
                Some(link) if linked => link.short.send(&bytes, &[]),
                _ => Err(RatsError::Full),
            };
            match sent {
                Ok(_) => {}
                Err(RatsError::Full) if tries < ANSWER_TRIES => {
                    blocked.push(to);
                    kept.push_back((to, bytes, tries + 1));
                }
                Err(_) => self.counters.answers_dropped += 1,
            }
        }
        self.outbox = kept;
    }

    /// A reply, ack or error for one of our calls.
    fn completion(&mut self, hd: &Header, src: Addr) {
        let outcome = match (hd.kind, hd.refusal) {
            (Kind::Reply, _) => Ok(Outcome::Reply(hd.args)),
            (Kind::Ack, _) => Ok(Outcome::Done),
            (_, Some(why)) => Err(AmError::Refused {
                handler: self.handlers.name_of(hd.handler),
                id: hd.handler,
                why,
            }),
            _ => return,
        };
        match self.pending.get_mut(&hd.call) {
            Some(p) if p.to == src && p.outcome.is_none() && p.handler == hd.handler => {
                p.outcome = Some(outcome);
            }
            None if hd.kind == Kind::Error && hd.call < self.next_call => {
                if self.failures.len() >= MAX_FAILURES {
                    self.counters.failures_dropped += 1;
                } else if let Err(error) = outcome {
                    self.failures.push_back(Failure {
                        call: CallId(hd.call),
                        error,
                    });
                }
            }
            _ => self.counters.reply_refused += 1,
        }
    }

    /// The options it was made with.
    pub fn options(&self) -> AmOptions {
        self.options
    }
}
