//! The cluster's active-message handler table (seed 003 §4.3, §5.4), kept by the
//! registry node: handler names with the fingerprint of their argument layout, each
//! given a dense cluster-wide id the first time it is registered. Ids are never reused:
//! a name nobody has registered any more stays, not live, and its epoch moves on when it
//! becomes live again, so a message numbered for the old epoch is told apart. A client's
//! registrations leave with it (the registry's [`Owner`]s). The engine-resident handlers
//! (`crate::am_engine`) hold the first ids, live for good.
//!
//! An owner whose node was lost (cut off, not known dead) *lapses*: it no longer keeps
//! the handler live, but while nobody else makes the handler live again, its node's
//! engine may bring it back in the same epoch ([`HandlerTable::reassert`], after the
//! partition heals), so messages numbered before the partition still name it. A node
//! that comes back as a new incarnation loses its lapsed registrations
//! ([`HandlerTable::drop_owners`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use hamlyn_wire::control::{
    am_engine, AmHandlerEntry, ControlErrorCode, Reply, AM_TABLE_PAGE, MAX_AM_HANDLERS_PER_REQUEST,
    MAX_AM_HANDLER_NAME,
};
use hamlyn_wire::NodeId;

use crate::registry::Owner;

/// Most handler names the table holds.
pub(crate) const MAX_HANDLERS: usize = 65_536;
/// Most lapsed registrations the table remembers, for all handlers (beyond it, an owner
/// cut off is simply dropped, and coming back moves the epoch on).
const MAX_LAPSED: usize = 65_536;

#[derive(Debug)]
struct Handler {
    name: String,
    fingerprint: u64,
    epoch: u32,
    owners: BTreeSet<Owner>,
    /// Owners whose node was lost while they had it, and who may bring it back in this
    /// epoch; emptied when the epoch moves on.
    lapsed: BTreeSet<Owner>,
    /// An engine-resident handler: live whoever registers it.
    permanent: bool,
}

impl Handler {
    fn live(&self) -> bool {
        self.permanent || !self.owners.is_empty()
    }
}

/// The table (meaningful on the registry node only).
#[derive(Debug)]
pub(crate) struct HandlerTable {
    /// By id (the index).
    handlers: Vec<Handler>,
    by_name: HashMap<String, u32>,
    /// Every change moves it on.
    version: u64,
    /// Registrations per owner (to refuse an owner registering without bound).
    per_owner: BTreeMap<Owner, usize>,
    /// Lapsed registrations, all handlers (at most [`MAX_LAPSED`]).
    lapsed: usize,
}

impl Default for HandlerTable {
    fn default() -> Self {
        let mut t = HandlerTable {
            handlers: Vec::new(),
            by_name: HashMap::new(),
            version: 1,
            per_owner: BTreeMap::new(),
            lapsed: 0,
        };
        for name in am_engine::NAMES {
            t.by_name.insert(name.to_owned(), t.handlers.len() as u32);
            t.handlers.push(Handler {
                name: name.to_owned(),
                fingerprint: am_engine::FINGERPRINT,
                epoch: 1,
                owners: BTreeSet::new(),
                lapsed: BTreeSet::new(),
                permanent: true,
            });
        }
        t
    }
}

fn refuse(code: ControlErrorCode, message: String) -> Reply {
    Reply::Error {
        code: code as u16,
        message,
    }
}

impl HandlerTable {
    /// `owner` registers `handlers`: all or none.
    pub(crate) fn register(&mut self, handlers: &[(String, u64)], owner: Owner) -> Reply {
        self.add(handlers, owner, false)
    }

    /// `owner`'s node engine registers again what `owner` had before its node was cut
    /// off: all or none, like [`Self::register`], except that a handler `owner` lapsed
    /// from, with the same layout, that nobody made live in between comes back in its
    /// old epoch.
    pub(crate) fn reassert(&mut self, handlers: &[(String, u64)], owner: Owner) -> Reply {
        self.add(handlers, owner, true)
    }

    fn add(&mut self, handlers: &[(String, u64)], owner: Owner, reassert: bool) -> Reply {
        if handlers.len() > MAX_AM_HANDLERS_PER_REQUEST {
            return refuse(
                ControlErrorCode::InvalidArgument,
                "too many handlers".into(),
            );
        }
        let mut fresh = 0;
        for (name, fp) in handlers {
            if name.is_empty() || name.len() > MAX_AM_HANDLER_NAME {
                return refuse(
                    ControlErrorCode::InvalidArgument,
                    format!("handler name {name:?}: 1..={MAX_AM_HANDLER_NAME} bytes"),
                );
            }
            match self
                .by_name
                .get(name)
                .map(|&id| &self.handlers[id as usize])
            {
                Some(h) if h.live() && h.fingerprint != *fp => {
                    return refuse(
                        ControlErrorCode::InvalidArgument,
                        format!(
                            "handler {name:?} is registered with argument fingerprint \
                             {:#018x}, not {fp:#018x}",
                            h.fingerprint
                        ),
                    )
                }
                Some(_) => {}
                None => fresh += 1,
            }
        }
        if self.handlers.len() + fresh > MAX_HANDLERS
            || self.per_owner.get(&owner).copied().unwrap_or(0) + handlers.len() > MAX_HANDLERS
        {
            return refuse(ControlErrorCode::Exhausted, "handler table full".into());
        }
        for (name, fp) in handlers {
            let id = match self.by_name.get(name) {
                Some(&id) => id,
                None => {
                    let id = self.handlers.len() as u32;
                    self.handlers.push(Handler {
                        name: name.clone(),
                        fingerprint: *fp,
                        epoch: 0,
                        owners: BTreeSet::new(),
                        lapsed: BTreeSet::new(),
                        permanent: false,
                    });
                    self.by_name.insert(name.clone(), id);
                    id
                }
            };
            let h = &mut self.handlers[id as usize];
            let was_lapsed = h.lapsed.remove(&owner);
            if was_lapsed {
                self.lapsed -= 1;
            }
            if !h.live() {
                if !(reassert && was_lapsed && h.fingerprint == *fp) {
                    // Live again (or for the first time): a new epoch, perhaps a new
                    // layout. Owners that lapsed in the old one cannot bring it back.
                    h.epoch = h.epoch.wrapping_add(1);
                    h.fingerprint = *fp;
                    self.lapsed -= h.lapsed.len();
                    h.lapsed.clear();
                }
                self.version += 1;
            }
            if h.owners.insert(owner) {
                *self.per_owner.entry(owner).or_insert(0) += 1;
            }
        }
        Reply::Ok
    }

    /// `owner` no longer has `names` (names it never had are ignored).
    pub(crate) fn unregister(&mut self, names: &[String], owner: Owner) -> Reply {
        for name in names {
            if let Some(&id) = self.by_name.get(name) {
                self.remove_owner(id, owner, false);
            }
        }
        Reply::Ok
    }

    fn remove_owner(&mut self, id: u32, owner: Owner, lapse: bool) {
        let h = &mut self.handlers[id as usize];
        if h.lapsed.remove(&owner) {
            self.lapsed -= 1;
        }
        if h.owners.remove(&owner) {
            if lapse && self.lapsed < MAX_LAPSED {
                h.lapsed.insert(owner);
                self.lapsed += 1;
            }
            if let Some(n) = self.per_owner.get_mut(&owner) {
                *n -= 1;
                if *n == 0 {
                    self.per_owner.remove(&owner);
                }
            }
            if !h.live() {
                self.version += 1;
            }
        }
    }

    /// Every owner `pick` selects is gone: its registrations go, lapsed ones too.
    pub(crate) fn drop_owners(&mut self, pick: impl Fn(Owner) -> bool) {
        self.remove_owners(pick, false);
    }

    /// `node` was lost (cut off, perhaps alive): its owners' registrations lapse.
    pub(crate) fn lapse_node(&mut self, node: NodeId) {
        self.remove_owners(|o| o.node == node, true);
    }

    fn remove_owners(&mut self, pick: impl Fn(Owner) -> bool, lapse: bool) {
        let gone: Vec<Owner> = self
            .per_owner
            .keys()
            .copied()
            .filter(|o| pick(*o))
            .collect();
        let lapsed_gone = !lapse && self.lapsed > 0;
        if gone.is_empty() && !lapsed_gone {
            return;
        }
        for id in 0..self.handlers.len() as u32 {
            for &o in &gone {
                self.remove_owner(id, o, lapse);
            }
            if lapsed_gone {
                let h = &mut self.handlers[id as usize];
                let before = h.lapsed.len();
                h.lapsed.retain(|o| !pick(*o));
                self.lapsed -= before - h.lapsed.len();
            }
        }
    }

    /// A page of the table from id `start`.
    pub(crate) fn page(&self, start: u32) -> Reply {
        let from = (start as usize).min(self.handlers.len());
        let entries: Vec<AmHandlerEntry> = self.handlers[from..]
            .iter()
            .take(AM_TABLE_PAGE)
            .enumerate()
            .map(|(i, h)| AmHandlerEntry {
                id: (from + i) as u32,
                epoch: h.epoch,
                live: h.live(),
                fingerprint: h.fingerprint,
                name: h.name.clone(),
            })
            .collect();
        let end = from + entries.len();
        Reply::AmTable {
            version: self.version,
            entries,
            next: (end < self.handlers.len()).then_some(end as u32),
        }
    }

    /// Number of names (live or not).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.handlers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn_wire::NodeId;

    fn owner(node: u32, client: u32) -> Owner {
        Owner {
            node: NodeId(node),
            client,
        }
    }

    fn entries(t: &HandlerTable) -> Vec<AmHandlerEntry> {
        let mut all = Vec::new();
        let mut start = Some(0);
        while let Some(s) = start {
            let Reply::AmTable { entries, next, .. } = t.page(s) else {
                panic!("not a page")
            };
            all.extend(entries);
            start = next;
        }
        all
    }

    #[test]
    fn ids_are_dense_and_stable_epochs_move_on_and_collisions_are_refused() {
        let mut t = HandlerTable::default();
        let (a, b) = (owner(0, 1), owner(1, 1));
        assert_eq!(
            t.register(&[("x".into(), 1), ("y".into(), 2)], a),
            Reply::Ok
        );
        assert_eq!(
            t.register(&[("y".into(), 2), ("z".into(), 3)], b),
            Reply::Ok
        );
        let e = entries(&t);
        let names: Vec<_> = e.iter().map(|e| (e.id, e.name.as_str())).collect();
        assert_eq!(
            &names[..4],
            [
                (0, "hamlyn.ping"),
                (1, "hamlyn.echo"),
                (2, "hamlyn.counter"),
                (3, "hamlyn.stats")
            ]
        );
        assert_eq!(&names[4..], [(4, "x"), (5, "y"), (6, "z")]);
        // A collision refuses the whole request.
        let r = t.register(&[("w".into(), 9), ("y".into(), 99)], b);
        assert!(matches!(r, Reply::Error { .. }), "{r:?}");
        assert_eq!(t.len(), 7, "nothing of a refused request stays");
        // y stays live while b has it; once nobody has it, its layout may change, in a
        // new epoch, under the same id.
        t.unregister(&["y".into()], a);
        assert!(entries(&t)[5].live);
        t.drop_owners(|o| o == b);
        let y = &entries(&t)[5];
        assert!(!y.live && y.epoch == 1);
        assert_eq!(t.register(&[("y".into(), 99)], a), Reply::Ok);
        let y = &entries(&t)[5];
        assert!(y.live && y.epoch == 2 && y.fingerprint == 99 && y.id == 5);
        // Engine-resident handlers stay live and keep their layout.
        let r = t.register(&[("hamlyn.echo".into(), 1)], a);
        assert!(matches!(r, Reply::Error { .. }), "{r:?}");
        t.register(&[("hamlyn.echo".into(), am_engine::FINGERPRINT)], a);
        t.drop_owners(|_| true);
        assert!(entries(&t)[1].live);
    }

    fn epoch_and_live(t: &HandlerTable, id: usize) -> (u32, bool) {
        let e = &entries(t)[id];
        (e.epoch, e.live)
    }

    fn lapsed_count_is_right(t: &HandlerTable) {
        let sum: usize = t.handlers.iter().map(|h| h.lapsed.len()).sum();
        assert_eq!(t.lapsed, sum);
    }

    #[test]
    fn an_owner_cut_off_comes_back_in_its_epoch_unless_someone_else_moved_it_on() {
        let mut t = HandlerTable::default();
        let (a, b) = (owner(1, 5), owner(2, 7));
        let x = [("x".to_string(), 11)];
        assert_eq!(t.register(&x, a), Reply::Ok);
        assert_eq!(epoch_and_live(&t, 4), (1, true));
        // Cut off and back: the same epoch, so messages numbered before still name it.
        t.lapse_node(NodeId(1));
        assert_eq!(epoch_and_live(&t, 4), (1, false));
        lapsed_count_is_right(&t);
        assert_eq!(t.reassert(&x, a), Reply::Ok);
        assert_eq!(epoch_and_live(&t, 4), (1, true));
        lapsed_count_is_right(&t);
        // A plain registration after a lapse is a new life: a new epoch.
        t.lapse_node(NodeId(1));
        assert_eq!(t.register(&x, a), Reply::Ok);
        assert_eq!(epoch_and_live(&t, 4), (2, true));
        // Someone else made it live meanwhile: the lapsed owner joins that epoch.
        t.lapse_node(NodeId(1));
        assert_eq!(t.register(&x, b), Reply::Ok);
        assert_eq!(epoch_and_live(&t, 4), (3, true));
        assert_eq!(t.reassert(&x, a), Reply::Ok);
        assert_eq!(epoch_and_live(&t, 4), (3, true));
        t.drop_owners(|o| o == b);
        assert_eq!(epoch_and_live(&t, 4), (3, true), "a still has it");
        // Another layout coming back is a new epoch.
        t.lapse_node(NodeId(1));
        assert_eq!(t.reassert(&[("x".to_string(), 12)], a), Reply::Ok);
        assert_eq!(epoch_and_live(&t, 4), (4, true));
        // An owner whose node restarted (dropped, not lapsed) cannot come back in the
        // old epoch.
        t.lapse_node(NodeId(1));
        t.drop_owners(|o| o.node == NodeId(1));
        lapsed_count_is_right(&t);
        assert_eq!(t.lapsed, 0);
        assert_eq!(t.reassert(&[("x".to_string(), 12)], a), Reply::Ok);
        assert_eq!(epoch_and_live(&t, 4), (5, true));
        // A reassertion that collides with a live layout is refused, all of it.
        t.lapse_node(NodeId(1));
        assert_eq!(t.register(&[("x".to_string(), 13)], b), Reply::Ok);
        let r = t.reassert(&[("y".to_string(), 1), ("x".to_string(), 12)], a);
        assert!(matches!(r, Reply::Error { .. }), "{r:?}");
        assert_eq!(t.len(), 5, "nothing of a refused reassertion stays");
        lapsed_count_is_right(&t);
    }

    #[test]
    fn pages_cover_the_table() {
        let mut t = HandlerTable::default();
        for i in 0..100u64 {
            assert_eq!(t.register(&[(format!("h{i}"), i)], owner(0, 1)), Reply::Ok);
        }
        let e = entries(&t);
        assert_eq!(e.len(), 104);
        assert!(e.iter().enumerate().all(|(i, e)| e.id as usize == i));
        let Reply::AmTable { entries, next, .. } = t.page(1000) else {
            panic!()
        };
        assert!(entries.is_empty() && next.is_none());
    }
}
