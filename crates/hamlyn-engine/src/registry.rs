//! The cluster-wide name registry (seed 000 §6.3, bootstrap): `publish` a name → seed,
//! `lookup` it from any node. The registry lives in the engine of one designated node;
//! other engines forward requests to it over the fabric as `Op::Registry` packets whose
//! payload is the encoded control request (and, coming back, the encoded reply), so a
//! client's `lookup` looks the same wherever it runs. A client waiting on a forwarded
//! request gets its reply when the answer arrives, or an error if the registry node is
//! lost.
//!
//! A name is owned by the client that published it, named by its node (the
//! authenticated source of the packet that carried the request) and its client id on
//! that node (the header's `meta_index` of a forwarded request). Only the owner may
//! publish it again or unpublish it (`NotOwner`). Names leave with their publisher: a
//! client that disconnects (its node tells the registry node with a `word` 2 packet, or
//! the registry node sees it itself), a node that goes down or comes back as a new
//! incarnation. A node that was only cut off, not dead, gets its live clients' names back:
//! each engine remembers what its clients published through it, and publishes it again
//! whenever the registry node comes (back) up ([`Registry::republish`]) — so a partition
//! never leaves a live publisher with a name the cluster forgot. The same holds for
//! active-message handlers: the engine remembers what its clients registered (once the
//! registry node said yes) and registers it again, as a `word` 3 packet the registry node
//! takes only from engines, in the handler's old epoch when nobody made it live in
//! between ([`HandlerTable::reassert`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::AsFd;

use hamlyn_shm::fdpass::send_with_fds;
use hamlyn_wire::control::{
    ControlErrorCode, Reply, Request, MAX_AM_HANDLERS_PER_REQUEST, MAX_NAME, MAX_SEED_TEXT,
};
use hamlyn_wire::{Header, NodeId, Op, RequestId, Seed};

use hamlyn_core::Instant;

use crate::am_engine::{ClientReports, EngineHandlers};
use crate::am_table::HandlerTable;
use crate::clients::Clients;
use crate::counters::EngineCounters;
use crate::remote::Remote;

/// Most names one registry holds.
pub(crate) const MAX_ENTRIES: usize = 65_536;
/// Forwarded requests one client may have waiting at once (the library makes one at a
/// time; a client that pipelines more is told `Busy`).
const MAX_PENDING_PER_CLIENT: usize = 16;
/// Forwarded requests waiting at once, for all clients.
const MAX_PENDING: usize = 4096;

/// `word` of a registry packet: a request to answer.
const ASK: u64 = 0;
/// `word` of a registry packet: the answer to a forwarded request.
const ANSWER: u64 = 1;
/// `word` of a registry packet: the client `meta_index` of the sending node is gone;
/// its names go too. No answer.
const CLIENT_GONE: u64 = 2;
/// `word` of a registry packet: an engine registers again the active-message handlers
/// its client `meta_index` had before the link to the registry node was lost (the body
/// is an encoded [`Request::AmRegister`]). No answer.
const REASSERT: u64 = 3;

/// Who published a name: a client of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Owner {
    /// The client's node.
    pub(crate) node: NodeId,
    /// The client's id on that node.
    pub(crate) client: u32,
}

/// One name: its seed and who may change it.
#[derive(Debug)]
struct Entry {
    seed: String,
    owner: Owner,
}

/// The registry's entries (on the registry node) and requests waiting for a forwarded
/// answer (on every node).
#[derive(Debug, Default)]
pub(crate) struct Registry {
    entries: BTreeMap<String, Entry>,
    /// Forwarded requests: sequence → (client, node asked).
    pending: HashMap<u32, (u32, NodeId)>,
    /// What local clients published through the registry node (name → seed text, per
    /// client): the registry node is told when they leave, and given their names again
    /// when it comes back up after losing them. At most [`MAX_ENTRIES`] in all.
    published: HashMap<u32, BTreeMap<String, String>>,
    /// Names in `published`.
    published_names: usize,
    /// Active-message handlers local clients registered through the registry node and
    /// the registry node accepted (name → fingerprint, per client): registered again
    /// after it lost them. At most [`MAX_ENTRIES`] in all.
    registered: HashMap<u32, BTreeMap<String, u64>>,
    /// Handlers in `registered`.
    registered_names: usize,
    /// Forwarded registrations waiting for their answer, by sequence (a subset of
    /// `pending`'s keys).
    registering: HashMap<u32, Vec<(String, u64)>>,
    /// Publications and registrations (client, packet `word`, encoded request) to send
    /// to the registry node again, in order, when its link has room: at most what
    /// `published` and `registered` hold.
    resend: VecDeque<(u32, u64, Vec<u8>)>,
    next: u32,
    /// The active-message handler table (on the registry node).
    handlers: HandlerTable,
    /// The active-message handlers this engine runs itself (on every node).
    engine_handlers: EngineHandlers,
    /// This engine's clients' own handler counters (answered here, never forwarded).
    reports: ClientReports,
}

fn not_found(name: &str) -> Reply {
    error(
        ControlErrorCode::NotFound,
        format!("no seed published as {name:?}"),
    )
}

fn not_owner(name: &str, owner: Owner) -> Reply {
    error(
        ControlErrorCode::NotOwner,
        format!(
            "{name:?} is published by client {} of node {}; only it may change it",
            owner.client, owner.node.0
        ),
    )
}

fn unreachable(what: &str, node: NodeId, why: impl std::fmt::Display) -> Reply {
    error(
        ControlErrorCode::Unreachable,
        format!("{what} node {} unreachable: {why}", node.0),
    )
}

fn error(code: ControlErrorCode, message: impl Into<String>) -> Reply {
    Reply::Error {
        code: code as u16,
        message: message.into(),
    }
}

impl Registry {
    /// Answers a publish, unpublish, lookup or ping here (this node holds the registry),
    /// asked by `owner`.
    pub(crate) fn answer(&mut self, req: &Request, owner: Owner, me: NodeId) -> Reply {
        match req {
            Request::Publish { name, seed } => {
                if name.is_empty() || name.len() > MAX_NAME || seed.len() > MAX_SEED_TEXT {
                    return error(ControlErrorCode::InvalidArgument, "name or seed too long");
                }
                if let Err(e) = Seed::from_text(seed) {
                    return error(
                        ControlErrorCode::InvalidArgument,
                        format!("not a seed: {e}"),
                    );
                }
                let full = self.entries.len() >= MAX_ENTRIES;
                match self.entries.get_mut(name) {
                    Some(e) if e.owner != owner => not_owner(name, e.owner),
                    Some(e) => {
                        e.seed.clone_from(seed);
                        Reply::Ok
                    }
                    None if full => error(ControlErrorCode::Exhausted, "registry full"),
                    None => {
                        let seed = seed.clone();
                        self.entries.insert(name.clone(), Entry { seed, owner });
                        Reply::Ok
                    }
                }
            }
            Request::Unpublish { name } => match self.entries.get(name) {
                None => not_found(name),
                Some(e) if e.owner != owner => not_owner(name, e.owner),
                Some(_) => {
                    self.entries.remove(name);
                    Reply::Ok
                }
            },
            Request::Lookup { name } => match self.entries.get(name) {
                Some(e) => Reply::Seed {
                    seed: e.seed.clone(),
                },
                None => not_found(name),
            },
            Request::Ping { .. } => Reply::Ok,
            Request::AmRegister { handlers } => self.handlers.register(handlers, owner),
            Request::AmUnregister { names } => self.handlers.unregister(names, owner),
            Request::AmTable { start } => self.handlers.page(*start),
            Request::AmCall { handler, args, .. } => self.engine_handlers.call(me, *handler, *args),
            _ => error(ControlErrorCode::BadRequest, "not a registry request"),
        }
    }

    /// Removes every name `pick` selects (their publisher is gone); how many.
    fn drop_names(&mut self, pick: impl Fn(Owner) -> bool) -> usize {
        let before = self.entries.len();
        self.handlers.drop_owners(&pick);
        self.entries.retain(|_, e| !pick(e.owner));
        before - self.entries.len()
    }

    /// Number of names.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Where registry traffic of this node goes and comes from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Place {
    /// This node.
    pub(crate) me: NodeId,
    /// The node holding the registry.
    pub(crate) home: NodeId,
    /// Now, for the fabric.
    pub(crate) now: Instant,
}

impl Registry {
    /// A client's publish, lookup or ping: answered now (`Some`), or forwarded to the
    /// node that answers it (the registry node; the pinged node) with the reply sent when
    /// its answer comes back (`None`).
    pub(crate) fn client_request(
        &mut self,
        cid: u32,
        req: Request,
        at: Place,
        remote: Option<&mut Remote>,
    ) -> Option<Reply> {
        let req = match req {
            Request::AmReport { handlers } => return Some(self.reports.report(cid, handlers)),
            Request::AmCounters => return Some(self.reports.sum()),
            other => other,
        };
        let (home, what) = match req {
            Request::Ping { node } => (NodeId(node), "the pinged"),
            Request::AmCall { node, .. } => (NodeId(node), "the called"),
            _ => (at.home, "the registry"),
        };
        if home == at.me {
            let owner = Owner {
                node: at.me,
                client: cid,
            };
            return Some(self.answer(&req, owner, at.me));
        }
        let Some(remote) = remote else {
            return Some(unreachable(what, home, "this node has no fabric"));
        };
        if self.pending.len() >= MAX_PENDING
            || self.pending.values().filter(|(c, _)| *c == cid).count() >= MAX_PENDING_PER_CLIENT
        {
            return Some(error(
                ControlErrorCode::Busy,
                "too many registry requests waiting for an answer",
            ));
        }
        let seq = self.next;
        self.next = seq.wrapping_add(1);
        let mut h = Header::new(Op::Registry);
        h.src = at.me;
        h.dst = home;
        h.word = ASK;
        h.meta_index = cid;
        h.request = RequestId { terminus: 0, seq };
        let body = req.encode();
        h.payload_len = body.len() as u32;
        match remote.send_bytes(at.now, &h, &body) {
            Ok(()) => {
                self.pending.insert(seq, (cid, home));
                if let Request::AmRegister { handlers } = &req {
                    self.registering.insert(seq, handlers.clone());
                }
                self.remember(cid, &req);
                None
            }
            // Back-pressure (or a link still coming up): the request can be made again.
            Err(hamlyn_fabric::FabricError::Full) => Some(error(
                ControlErrorCode::Busy,
                format!(
                    "{what} node {}: its link is full or not up yet; try again",
                    home.0
                ),
            )),
            Err(e) => Some(unreachable(what, home, e)),
        }
    }

    /// A registry packet from another engine: a request to answer (we are the registry
    /// node) or an answer for a waiting client.
    pub(crate) fn packet(
        &mut self,
        h: &Header,
        body: &[u8],
        at: Place,
        remote: &mut Remote,
        clients: &mut Clients,
        counters: &mut EngineCounters,
    ) {
        let owner = Owner {
            node: h.src,
            client: h.meta_index,
        };
        if h.word == CLIENT_GONE {
            if at.home == at.me {
                self.drop_names(|o| o == owner);
            }
            return;
        }
        if h.word == REASSERT {
            if at.home == at.me {
                match Request::decode(body) {
                    Ok(Request::AmRegister { handlers }) => {
                        if let Reply::Error { message, .. } =
                            self.handlers.reassert(&handlers, owner)
                        {
                            tracing::debug!(node = h.src.0, %message, "handlers not registered again");
                        }
                    }
                    _ => tracing::debug!(node = h.src.0, "a registration again that is not one"),
                }
            }
            return;
        }
        if h.word == ASK {
            let reply = match Request::decode(body) {
                Ok(req @ (Request::Ping { .. } | Request::AmCall { .. })) => {
                    self.answer(&req, owner, at.me)
                }
                Ok(req) if at.home == at.me => self.answer(&req, owner, at.me),
                Ok(_) => error(
                    ControlErrorCode::NotFound,
                    "this node does not hold the registry",
                ),
                Err(e) => error(ControlErrorCode::BadRequest, e.to_string()),
            };
            let mut r = Header::new(Op::Registry);
            r.src = at.me;
            r.dst = h.src;
            r.word = ANSWER;
            r.request = h.request;
            let bytes = reply.encode();
            r.payload_len = bytes.len() as u32;
            if remote.send_bytes(at.now, &r, &bytes).is_err() {
                counters.registry_undeliverable += 1;
            }
            return;
        }
        if h.word != ANSWER {
            return;
        }
        // Only the node asked may answer (the source is the authenticated link's).
        match self.pending.get(&h.request.seq) {
            Some(&(_, asked)) if asked == h.src => {}
            _ => return,
        }
        let Some((cid, _)) = self.pending.remove(&h.request.seq) else {
            return;
        };
        let reply = Reply::decode(body)
            .unwrap_or_else(|e| error(ControlErrorCode::BadRequest, e.to_string()));
        if let Some(handlers) = self.registering.remove(&h.request.seq) {
            if reply == Reply::Ok {
                self.registered_ok(cid, handlers);
            }
        }
        reply_to(clients, cid, &reply);
    }

    /// Client `cid` is gone: answers to its forwarded requests go nowhere (and never to a
    /// later client given the same id), and its names go: here if this node holds the
    /// registry, else the registry node is told (if the client ever published there).
    pub(crate) fn forget_client(&mut self, cid: u32, at: Place, remote: Option<&mut Remote>) {
        self.pending.retain(|_, (c, _)| *c != cid);
        let pending = &self.pending;
        self.registering.retain(|seq, _| pending.contains_key(seq));
        if let Some(handlers) = self.registered.remove(&cid) {
            self.registered_names -= handlers.len();
        }
        self.reports.forget(cid);
        if at.home == at.me {
            let me = Owner {
                node: at.me,
                client: cid,
            };
            self.drop_names(|o| o == me);
            return;
        }
        let Some(names) = self.published.remove(&cid) else {
            return;
        };
        self.published_names -= names.len();
        if let Some(remote) = remote {
            let mut h = Header::new(Op::Registry);
            h.src = at.me;
            h.dst = at.home;
            h.word = CLIENT_GONE;
            h.meta_index = cid;
            // Lost only with the link; the registry node then drops every name of this
            // node when it declares it down.
            let _ = remote.send_bytes(at.now, &h, &[]);
        }
    }

    /// Remembers what client `cid` publishes or unpublishes through another node.
    fn remember(&mut self, cid: u32, req: &Request) {
        match req {
            Request::Publish { name, seed } => {
                let names = self.published.entry(cid).or_default();
                let room = names.contains_key(name) || self.published_names < MAX_ENTRIES;
                if room && names.insert(name.clone(), seed.clone()).is_none() {
                    self.published_names += 1;
                }
            }
            // Handlers registered in the cluster's table: nothing to publish again, but
            // the registry node must hear when this client leaves.
            Request::AmRegister { .. } => {
                self.published.entry(cid).or_default();
            }
            Request::Unpublish { name } => {
                if let Some(names) = self.published.get_mut(&cid) {
                    if names.remove(name).is_some() {
                        self.published_names -= 1;
                    }
                }
            }
            // Never registered again once the client asked to drop them (whatever the
            // answer).
            Request::AmUnregister { names } => {
                if let Some(handlers) = self.registered.get_mut(&cid) {
                    for name in names {
                        if handlers.remove(name).is_some() {
                            self.registered_names -= 1;
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// The registry node accepted client `cid`'s registration of `handlers`.
    fn registered_ok(&mut self, cid: u32, handlers: Vec<(String, u64)>) {
        let mine = self.registered.entry(cid).or_default();
        for (name, fp) in handlers {
            let room = mine.contains_key(&name) || self.registered_names < MAX_ENTRIES;
            if room && mine.insert(name, fp).is_none() {
                self.registered_names += 1;
            }
        }
    }

    /// The registry node came (back) up: it may have dropped this node's names while it
    /// could not reach it (or restarted empty). Every name live clients published
    /// through it is published again, as its client; the answers go to nobody (a name
    /// taken meanwhile by someone else stays theirs). How many were sent.
    ///
    /// Handlers go before names: the link is FIFO, so a client elsewhere that finds a
    /// name again (say an RPC service's) finds the handlers it stands for already live,
    /// never a name whose procedures are not (`NoProcedure`).
    pub(crate) fn republish(&mut self, at: Place, remote: &mut Remote) -> usize {
        self.resend.clear();
        if at.home == at.me {
            return 0;
        }
        for (&cid, handlers) in &self.registered {
            let all: Vec<(String, u64)> = handlers.iter().map(|(n, &f)| (n.clone(), f)).collect();
            for batch in all.chunks(MAX_AM_HANDLERS_PER_REQUEST) {
                let req = Request::AmRegister {
                    handlers: batch.to_vec(),
                };
                self.resend.push_back((cid, REASSERT, req.encode()));
            }
        }
        for (&cid, names) in &self.published {
            for (name, seed) in names {
                let req = Request::Publish {
                    name: name.clone(),
                    seed: seed.clone(),
                };
                self.resend.push_back((cid, ASK, req.encode()));
            }
        }
        self.send_again(at, remote)
    }

    /// Whether publications and registrations wait to be sent to the registry node again
    /// (its link was full).
    pub(crate) fn has_resend(&self) -> bool {
        !self.resend.is_empty()
    }

    /// Sends what waits to go to the registry node again, until its link is full (the
    /// rest goes on a later turn); how many were sent.
    pub(crate) fn send_again(&mut self, at: Place, remote: &mut Remote) -> usize {
        let mut sent = 0;
        while let Some((cid, word, body)) = self.resend.front() {
            let mut h = Header::new(Op::Registry);
            h.src = at.me;
            h.dst = at.home;
            h.word = *word;
            h.meta_index = *cid;
            if *word == ASK {
                // Answers go to nobody: the sequence is in no client's `pending`.
                h.request = RequestId {
                    terminus: 0,
                    seq: self.next,
                };
            }
            h.payload_len = body.len() as u32;
            match remote.send_bytes(at.now, &h, body) {
                Ok(()) => sent += 1,
                Err(hamlyn_fabric::FabricError::Full) => break,
                Err(e) => {
                    // The link is gone: everything is sent again when it is back up.
                    tracing::warn!(error = %e, left = self.resend.len(), "registry: cannot publish or register again");
                    self.resend.clear();
                    break;
                }
            }
            if *word == ASK {
                self.next = self.next.wrapping_add(1);
            }
            self.resend.pop_front();
        }
        sent
    }

    /// `node` came back as a new incarnation (its clients are gone): its clients' names
    /// and handler registrations go, lapsed ones too.
    pub(crate) fn node_gone(&mut self, node: NodeId) -> usize {
        self.drop_names(|o| o.node == node)
    }

    /// A node is lost: every client waiting on an answer from it gets an error, its
    /// clients' names go and their handler registrations lapse (its engine registers
    /// them again if it was only cut off).
    pub(crate) fn peer_down(&mut self, node: NodeId, clients: &mut Clients) {
        self.entries.retain(|_, e| e.owner.node != node);
        self.handlers.lapse_node(node);
        let mut waiting = Vec::new();
        self.pending.retain(|_, &mut (cid, from)| {
            if from == node {
                waiting.push(cid);
            }
            from != node
        });
        let pending = &self.pending;
        self.registering.retain(|seq, _| pending.contains_key(seq));
        for cid in waiting {
            reply_to(
                clients,
                cid,
                &unreachable("the asked", node, "it went down"),
            );
        }
    }
}

/// Sends a (deferred) control reply to a client.
fn reply_to(clients: &mut Clients, cid: u32, reply: &Reply) {
    if let Some(c) = clients.get_mut(cid) {
        if let Err(e) = send_with_fds(c.sock.as_fd(), &reply.encode(), &[]) {
            tracing::warn!(client = cid, error = %e, "cannot deliver a registry reply");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn_fabric::{Fabric, FabricError, PacketSink, SharedBytes};
    use std::sync::{Arc, Mutex};

    /// A registry packet a fabric took: word, client, body.
    type Taken = (u64, u32, Vec<u8>);

    /// A fabric whose link has room for `room` packets at a time (refusing the rest with
    /// `Full`), recording what it took.
    struct Narrow {
        room: Arc<Mutex<usize>>,
        sent: Arc<Mutex<Vec<Taken>>>,
    }

    impl Fabric for Narrow {
        fn local(&self) -> NodeId {
            NodeId(2)
        }
        fn send(
            &mut self,
            _now: Instant,
            h: &Header,
            _meta: &[u8],
            payload: &[SharedBytes<'_>],
        ) -> Result<(), FabricError> {
            let mut room = self.room.lock().unwrap();
            if *room == 0 {
                return Err(FabricError::Full);
            }
            *room -= 1;
            let mut body = Vec::new();
            for p in payload {
                p.append_to(&mut body);
            }
            self.sent.lock().unwrap().push((h.word, h.meta_index, body));
            Ok(())
        }
        fn poll(
            &mut self,
            _now: Instant,
            _sink: &mut dyn PacketSink,
            _budget: usize,
        ) -> Result<usize, FabricError> {
            Ok(0)
        }
    }

    #[test]
    fn what_finds_the_link_full_is_sent_again_later_in_order_and_once() {
        let room = Arc::new(Mutex::new(3));
        let sent = Arc::new(Mutex::new(Vec::new()));
        let mut remote = Remote::new(Box::new(Narrow {
            room: room.clone(),
            sent: sent.clone(),
        }));
        let mut reg = Registry::default();
        // (Only the registry node checks that a seed parses.)
        let seed = "a seed".to_string();
        for i in 0..10 {
            reg.remember(
                7,
                &Request::Publish {
                    name: format!("n{i}"),
                    seed: seed.clone(),
                },
            );
        }
        reg.registered_ok(7, vec![("h".into(), 5)]);
        let at = Place {
            me: NodeId(2),
            home: NodeId(1),
            now: Instant(0),
        };
        assert_eq!(reg.republish(at, &mut remote), 3);
        assert!(reg.has_resend());
        // Room comes back a little at a time; nothing is sent twice, nothing skipped.
        for _ in 0..4 {
            *room.lock().unwrap() = 2;
            reg.send_again(at, &mut remote);
        }
        assert!(!reg.has_resend());
        let sent = sent.lock().unwrap();
        assert_eq!(sent.len(), 11);
        // The handlers first: a name found again must stand for live handlers.
        assert_eq!(sent[0].0, REASSERT);
        assert_eq!(
            Request::decode(&sent[0].2).unwrap(),
            Request::AmRegister {
                handlers: vec![("h".into(), 5)]
            }
        );
        let names: Vec<String> = sent[1..]
            .iter()
            .map(|(word, cid, body)| {
                assert_eq!((*word, *cid), (ASK, 7));
                match Request::decode(body).unwrap() {
                    Request::Publish { name, .. } => name,
                    other => panic!("{other:?}"),
                }
            })
            .collect();
        let mut want: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
        want.sort();
        assert_eq!(names, want);
    }
}
