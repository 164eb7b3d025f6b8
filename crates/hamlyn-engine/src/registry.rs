//! The cluster-wide name registry (seed 000 §6.3, bootstrap): `publish` a name → seed,
//! `lookup` it from any node. The registry lives in the engine of one designated node;
//! other engines forward requests to it over the fabric as `Op::Registry` packets whose
//! payload is the encoded control request (and, coming back, the encoded reply), so a
//! client's `lookup` looks the same wherever it runs. A client waiting on a forwarded
//! request gets its reply when the answer arrives, or an error if the registry node is
//! lost.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::AsFd;

use hamlyn_shm::fdpass::send_with_fds;
use hamlyn_wire::control::{ControlErrorCode, Reply, Request, MAX_NAME, MAX_SEED_TEXT};
use hamlyn_wire::{Header, NodeId, Op, RequestId, Seed};

use hamlyn_core::Instant;

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

/// The registry's entries (on the registry node) and requests waiting for a forwarded
/// answer (on every node).
#[derive(Debug, Default)]
pub(crate) struct Registry {
    entries: BTreeMap<String, String>,
    /// Forwarded requests: sequence → (client, node asked).
    pending: HashMap<u32, (u32, NodeId)>,
    next: u32,
}

fn error(code: ControlErrorCode, message: impl Into<String>) -> Reply {
    Reply::Error {
        code: code as u16,
        message: message.into(),
    }
}

impl Registry {
    /// Answers a publish or lookup here (this node holds the registry).
    pub(crate) fn answer(&mut self, req: &Request) -> Reply {
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
                if self.entries.len() >= MAX_ENTRIES && !self.entries.contains_key(name) {
                    return error(ControlErrorCode::Exhausted, "registry full");
                }
                self.entries.insert(name.clone(), seed.clone());
                Reply::Ok
            }
            Request::Lookup { name } => match self.entries.get(name) {
                Some(seed) => Reply::Seed { seed: seed.clone() },
                None => error(
                    ControlErrorCode::NotFound,
                    format!("no seed published as {name:?}"),
                ),
            },
            Request::Ping { .. } => Reply::Ok,
            _ => error(ControlErrorCode::BadRequest, "not a registry request"),
        }
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
        let home = match req {
            Request::Ping { node } => NodeId(node),
            _ => at.home,
        };
        if home == at.me {
            return Some(self.answer(&req));
        }
        let Some(remote) = remote else {
            return Some(error(
                ControlErrorCode::NotFound,
                "the registry node is unreachable: no fabric",
            ));
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
        h.word = 0;
        h.request = RequestId { terminus: 0, seq };
        let body = req.encode();
        h.payload_len = body.len() as u32;
        match remote.send_bytes(at.now, &h, &body) {
            Ok(()) => {
                self.pending.insert(seq, (cid, home));
                None
            }
            Err(e) => Some(error(
                ControlErrorCode::NotFound,
                format!("the registry node is unreachable: {e}"),
            )),
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
        if h.word == 0 {
            let reply = match Request::decode(body) {
                Ok(req @ Request::Ping { .. }) => self.answer(&req),
                Ok(req) if at.home == at.me => self.answer(&req),
                Ok(_) => error(
                    ControlErrorCode::NotFound,
                    "this node does not hold the registry",
                ),
                Err(e) => error(ControlErrorCode::BadRequest, e.to_string()),
            };
            let mut r = Header::new(Op::Registry);
            r.src = at.me;
            r.dst = h.src;
            r.word = 1;
            r.request = h.request;
            let bytes = reply.encode();
            r.payload_len = bytes.len() as u32;
            if remote.send_bytes(at.now, &r, &bytes).is_err() {
                counters.registry_undeliverable += 1;
            }
            return;
        }
        let Some((cid, _)) = self.pending.remove(&h.request.seq) else {
            return;
        };
        let reply = Reply::decode(body)
            .unwrap_or_else(|e| error(ControlErrorCode::BadRequest, e.to_string()));
        reply_to(clients, cid, &reply);
    }

    /// Client `cid` is gone: answers to its forwarded requests go nowhere (and never to a
    /// later client given the same id).
    pub(crate) fn forget_client(&mut self, cid: u32) {
        self.pending.retain(|_, (c, _)| *c != cid);
    }

    /// A node is lost: every client waiting on an answer from it gets an error.
    pub(crate) fn peer_down(&mut self, node: NodeId, clients: &mut Clients) {
        let mut waiting = Vec::new();
        self.pending.retain(|_, &mut (cid, from)| {
            if from == node {
                waiting.push(cid);
            }
            from != node
        });
        for cid in waiting {
            reply_to(
                clients,
                cid,
                &error(
                    ControlErrorCode::NotFound,
                    format!("node {} went down", node.0),
                ),
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
