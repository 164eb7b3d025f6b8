//! Handlers: the ones this process registered (by name, with the fingerprint of their
//! argument layout) and the local copy of the cluster's table (seed 003 §5.4:
//! `grim_registerHandler`, `grim_synchHandlers`, `grim_getHandlerByName`). The table
//! itself lives on the registry node (`hamlyn::Node::am_register`, `am_table`), which
//! gives each name a dense id, cluster-wide and never reused; `synch` sends what changed
//! here since the last one and fetches the table back.

use std::collections::{BTreeMap, HashMap};

use hamlyn::{AmHandlerEntry, Node, MAX_AM_HANDLERS_PER_REQUEST, MAX_AM_HANDLER_NAME};

use crate::endpoint::Ctx;
use crate::AmError;

/// A handler: runs in [`crate::AmEndpoint::poll`] with the message's context; an `Err`
/// goes back to the sender as an error completion.
pub type Handler = Box<dyn FnMut(&mut Ctx<'_>) -> Result<(), String>>;

/// A handler as the cluster numbers it: what a message names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HandlerId {
    /// Dense, cluster-wide.
    pub id: u32,
    /// Moves on each time the name becomes live again after nobody had it.
    pub epoch: u32,
}

/// What happened to one handler of this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandlerCounters {
    /// Times it ran.
    pub calls: u64,
    /// Replies it gave.
    pub replies: u64,
    /// Times it returned an error (or gave no reply that was asked for).
    pub errors: u64,
    /// Messages naming it refused here without running it (it was not registered here
    /// (any more), or they named an old epoch).
    pub refused: u64,
}

/// The fingerprint of an argument layout described as text (for example
/// `"u64 len, u64 seed; payload bytes"`): FNV-1a, 64 bits. Two registrations of one name
/// must agree on it.
pub fn fingerprint(layout: &str) -> u64 {
    layout.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

struct Local {
    fingerprint: u64,
    handler: Handler,
    /// Sent to the registry node.
    synched: bool,
    /// Its number, once synched.
    id: Option<HandlerId>,
    counters: HandlerCounters,
}

/// Local handlers and the local copy of the cluster's table.
#[derive(Default)]
pub(crate) struct Handlers {
    local: BTreeMap<String, Local>,
    /// Synched names unregistered here since (to tell the registry node).
    removed: Vec<String>,
    /// The cluster's table by id, and its version.
    table: Vec<AmHandlerEntry>,
    by_name: HashMap<String, u32>,
    version: u64,
    /// Local handlers by cluster id.
    by_id: HashMap<u32, String>,
    /// Messages refused here, by the id they named (ids of the table copy only, so
    /// forged ids cannot grow it).
    refused: HashMap<u32, u64>,
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handlers")
            .field("local", &self.local.keys().collect::<Vec<_>>())
            .field("table", &self.table.len())
            .field("version", &self.version)
            .finish()
    }
}

impl Handlers {
    pub(crate) fn register(
        &mut self,
        name: &str,
        fingerprint: u64,
        handler: Handler,
    ) -> Result<(), AmError> {
        if name.is_empty() || name.len() > MAX_AM_HANDLER_NAME || self.local.contains_key(name) {
            return Err(AmError::BadName(name.to_owned()));
        }
        self.removed.retain(|n| n != name);
        self.local.insert(
            name.to_owned(),
            Local {
                fingerprint,
                handler,
                synched: false,
                id: None,
                counters: HandlerCounters::default(),
            },
        );
        Ok(())
    }

    /// Removes a local handler at once (messages for it fail here from now on); the
    /// cluster hears of it at the next synch.
    pub(crate) fn unregister(&mut self, name: &str) -> Result<(), AmError> {
        let l = self
            .local
            .remove(name)
            .ok_or_else(|| AmError::UnknownName(name.to_owned()))?;
        if let Some(id) = l.id {
            self.by_id.remove(&id.id);
        }
        if l.synched {
            self.removed.push(name.to_owned());
        }
        Ok(())
    }

    /// Sends what changed to the registry node, then fetches the table.
    pub(crate) fn synch(&mut self, node: &Node) -> Result<(), AmError> {
        for names in self.removed.chunks(MAX_AM_HANDLERS_PER_REQUEST) {
            node.am_unregister(names)?;
        }
        self.removed.clear();
        let fresh: Vec<(String, u64)> = self
            .local
            .iter()
            .filter(|(_, l)| !l.synched)
            .map(|(n, l)| (n.clone(), l.fingerprint))
            .collect();
        let mut refused = None;
        for batch in fresh.chunks(MAX_AM_HANDLERS_PER_REQUEST) {
            match node.am_register(batch) {
                Ok(()) => {
                    for (n, _) in batch {
                        if let Some(l) = self.local.get_mut(n) {
                            l.synched = true;
                        }
                    }
                }
                Err(hamlyn::Error::Refused {
                    code: Some(hamlyn::ControlErrorCode::InvalidArgument),
                    ..
                }) => {
                    // A name of the batch is live with another layout: register the
                    // others one by one and name the collision.
                    for (n, fp) in batch {
                        match node.am_register(&[(n.clone(), *fp)]) {
                            Ok(()) => {
                                if let Some(l) = self.local.get_mut(n) {
                                    l.synched = true;
                                }
                            }
                            Err(hamlyn::Error::Refused {
                                code: Some(hamlyn::ControlErrorCode::InvalidArgument),
                                ..
                            }) => {
                                self.local.remove(n);
                                refused.get_or_insert((n.clone(), *fp));
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.refresh(node)?;
        match refused {
            None => Ok(()),
            Some((name, ours)) => {
                let cluster = self
                    .by_name
                    .get(&name)
                    .map_or(0, |&id| self.table[id as usize].fingerprint);
                Err(AmError::Collision {
                    name,
                    ours,
                    cluster,
                })
            }
        }
    }

    /// Fetches the cluster's table (what a late joiner does; `synch` does it too) and
    /// numbers the local handlers by it.
    pub(crate) fn refresh(&mut self, node: &Node) -> Result<(), AmError> {
        let (version, entries) = node.am_table()?;
        let mut table = Vec::with_capacity(entries.len());
        let mut by_name = HashMap::with_capacity(entries.len());
        for e in entries {
            // Ids are dense: the page order is the id order; anything else is ignored.
            if e.id as usize != table.len() {
                continue;
            }
            by_name.insert(e.name.clone(), e.id);
            table.push(e);
        }
        self.by_id.clear();
        for (name, l) in &mut self.local {
            l.id = None;
            if !l.synched {
                continue;
            }
            if let Some(&id) = by_name.get(name) {
                let e = &table[id as usize];
                if e.live && e.fingerprint == l.fingerprint {
                    l.id = Some(HandlerId { id, epoch: e.epoch });
                    self.by_id.insert(id, name.clone());
                }
            }
        }
        self.table = table;
        self.by_name = by_name;
        self.version = version;
        Ok(())
    }

    /// A live handler by name, from the local copy.
    pub(crate) fn by_name(&self, name: &str) -> Result<HandlerId, AmError> {
        self.by_name
            .get(name)
            .map(|&id| &self.table[id as usize])
            .filter(|e| e.live)
            .map(|e| HandlerId {
                id: e.id,
                epoch: e.epoch,
            })
            .ok_or_else(|| AmError::UnknownName(name.to_owned()))
    }

    /// A handler's name by id, from the local copy (for errors).
    pub(crate) fn name_of(&self, id: u32) -> String {
        self.table
            .get(id as usize)
            .map_or_else(|| format!("#{id}"), |e| e.name.clone())
    }

    /// The whole local copy of the table.
    pub(crate) fn table(&self) -> (u64, &[AmHandlerEntry]) {
        (self.version, &self.table)
    }

    /// The local handler numbered `id`: its id as registered, handler and counters.
    pub(crate) fn local_by_id(
        &mut self,
        id: u32,
    ) -> Option<(HandlerId, &mut Handler, &mut HandlerCounters)> {
        let name = self.by_id.get(&id)?;
        let l = self.local.get_mut(name)?;
        let hid = l.id?;
        Some((hid, &mut l.handler, &mut l.counters))
    }

    /// A message naming `id` was refused here.
    pub(crate) fn refused(&mut self, id: u32) {
        if (id as usize) < self.table.len() {
            *self.refused.entry(id).or_insert(0) += 1;
        }
    }

    /// Counters of every handler this process ran or refused, by name.
    pub(crate) fn counters(&self) -> Vec<(String, HandlerCounters)> {
        let mut all: BTreeMap<String, HandlerCounters> = self
            .local
            .iter()
            .map(|(n, l)| (n.clone(), l.counters))
            .collect();
        for (&id, &n) in &self.refused {
            all.entry(self.name_of(id)).or_default().refused += n;
        }
        all.into_iter().collect()
    }
}
