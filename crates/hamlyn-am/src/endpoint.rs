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
use hamlyn_rats::datagram::DatagramReceiver;
use hamlyn_rats::{Manager, ManagerOptions, RatsError};

use crate::header::HEADER_LEN;
use crate::link::Links;
use crate::table::{Handler, HandlerCounters, HandlerId, Handlers};
use crate::AmError;

mod handler_ctx;
mod receive;
mod send;

pub use handler_ctx::{Ctx, MemoryRegion, MemoryTarget};

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

impl Drop for AmEndpoint {
    /// Withdraws the endpoint's names before its door and receivers go (the fields drop
    /// after this). The names live on the connection: left to go with it, they led
    /// peers to dead slots until it closed (after the slots, or much later if a clone
    /// of `node` kept it open).
    fn drop(&mut self) {
        self.links.withdraw_names();
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

    /// The options it was made with.
    pub fn options(&self) -> AmOptions {
        self.options
    }
}
