//! The slot table against a simple model (`BTreeMap<u32, ModelSlot>`): generated
//! sequences of create (every mode, several owners, valid and invalid configurations),
//! rekey, revoke, inhibit, destroy, destroy_owner and lookups, with wrong owners and
//! unknown numbers mixed in. After every operation the table's answer equals the
//! model's (including `NotOwner` / `NoSuchSlot`), and so does everything it shows
//! (`len`, `is_empty`, `iter`, `get`). A freed number is reused before a new one is
//! taken, and a reused number carries the new key, so an old ticket's packets fail.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use hamlyn_core::{
    AreaId, Interface, MetaRange, OwnerId, QueueId, RejectReason, SlotConfig, SlotError, SlotMode,
    SlotPerms, SlotTable, VecAreas,
};
use hamlyn_wire::{Flags, Header, Op, SlotId};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// What the model knows about a live slot.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ModelSlot {
    config: SlotConfig,
    key: u64,
    revoked: bool,
    inhibited: bool,
}

/// The model: live slots by number, numbers ever handed out, numbers free for reuse.
#[derive(Default, Debug)]
struct Model {
    slots: BTreeMap<u32, ModelSlot>,
    high: u32,
    free: BTreeSet<u32>,
}

impl Model {
    fn owned(&mut self, owner: OwnerId, id: u32) -> Result<&mut ModelSlot, SlotError> {
        let s = self.slots.get_mut(&id).ok_or(SlotError::NoSuchSlot)?;
        if s.config.owner != owner {
            return Err(SlotError::NotOwner);
        }
        Ok(s)
    }
}

/// A slot number to act on: one that is (or was) live, or one never handed out.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// The n-th live slot (mod the number live), if any.
    Live(usize),
    /// Any number.
    Any(u32),
}

#[derive(Clone, Debug)]
enum Cmd {
    Create {
        owner: u32,
        mode: SlotMode,
        with_meta: bool,
        base: u64,
        len: u64,
        key: u64,
        queue: Option<u32>,
        perms: (bool, bool, bool),
    },
    Rekey(u32, Target, u64),
    Revoke(u32, Target),
    Inhibit(u32, Target, bool),
    Destroy(u32, Target),
    DestroyOwner(u32),
    Get(Target),
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        4 => any::<usize>().prop_map(Target::Live),
        1 => (0u32..40).prop_map(Target::Any),
        1 => any::<u32>().prop_map(Target::Any),
    ]
}

fn owner() -> impl Strategy<Value = u32> {
    0u32..4
}

fn mode() -> impl Strategy<Value = SlotMode> {
    prop_oneof![
        Just(SlotMode::Normal),
        Just(SlotMode::Paranoid),
        Just(SlotMode::ParanoidOneShot),
        Just(SlotMode::Fast),
    ]
}

fn cmd() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        6 => (
            owner(),
            mode(),
            prop::bool::weighted(0.9),
            prop_oneof![0u64..1 << 20, any::<u64>()],
            prop_oneof![0u64..1 << 20, any::<u64>()],
            any::<u64>(),
            prop::option::of(0u32..4),
            any::<(bool, bool, bool)>(),
        )
            .prop_map(|(owner, mode, with_meta, base, len, key, queue, perms)| Cmd::Create {
                owner,
                mode,
                with_meta,
                base,
                len,
                key,
                queue,
                perms,
            }),
        2 => (owner(), target(), any::<u64>()).prop_map(|(o, t, k)| Cmd::Rekey(o, t, k)),
        2 => (owner(), target()).prop_map(|(o, t)| Cmd::Revoke(o, t)),
        2 => (owner(), target(), any::<bool>()).prop_map(|(o, t, on)| Cmd::Inhibit(o, t, on)),
        3 => (owner(), target()).prop_map(|(o, t)| Cmd::Destroy(o, t)),
        1 => owner().prop_map(Cmd::DestroyOwner),
        2 => target().prop_map(Cmd::Get),
    ]
}

fn resolve(m: &Model, t: Target) -> u32 {
    match t {
        Target::Live(n) if !m.slots.is_empty() => {
            *m.slots.keys().nth(n % m.slots.len()).expect("in range")
        }
        Target::Live(n) => n as u32,
        Target::Any(id) => id,
    }
}

/// The table shows exactly what the model holds.
fn same(table: &SlotTable, m: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(table.len(), m.slots.len());
    prop_assert_eq!(table.is_empty(), m.slots.is_empty());
    let shown: Vec<(u32, ModelSlot)> = table
        .iter()
        .map(|(id, s)| {
            (
                id.0,
                ModelSlot {
                    config: s.config,
                    key: s.key,
                    revoked: s.revoked,
                    inhibited: s.inhibited,
                },
            )
        })
        .collect();
    let want: Vec<(u32, ModelSlot)> = m.slots.iter().map(|(&k, v)| (k, v.clone())).collect();
    prop_assert_eq!(shown, want);
    for (&id, want) in &m.slots {
        let s = table
            .get(SlotId(id))
            .ok_or_else(|| TestCaseError::fail("live slot missing"))?;
        prop_assert_eq!(&s.config, &want.config);
        prop_assert_eq!(
            (s.key, s.revoked, s.inhibited),
            (want.key, want.revoked, want.inhibited)
        );
        // Nothing but the interface counts traffic, and no traffic was sent.
        prop_assert_eq!(
            (s.packets, s.bytes, s.messages, s.rejects.total()),
            (0, 0, 0, 0)
        );
    }
    for &id in &m.free {
        prop_assert!(
            table.get(SlotId(id)).is_none(),
            "freed slot {} still visible",
            id
        );
    }
    prop_assert!(table.get(SlotId(m.high)).is_none());
    prop_assert!(table.get(SlotId(u32::MAX)).is_none());
    Ok(())
}

fn run(cmds: Vec<Cmd>) -> Result<(), TestCaseError> {
    let mut table = SlotTable::new();
    let mut m = Model::default();
    for (step, c) in cmds.into_iter().enumerate() {
        match c {
            Cmd::Create {
                owner,
                mode,
                with_meta,
                base,
                len,
                key,
                queue,
                perms,
            } => {
                let config = SlotConfig {
                    owner: OwnerId(owner),
                    area: AreaId(owner),
                    base,
                    len,
                    mode,
                    meta: with_meta.then_some(MetaRange {
                        area: AreaId(100),
                        base: base % 4096,
                        count: (len % 64) as u32,
                    }),
                    queue: queue.map(QueueId),
                    perms: SlotPerms {
                        write: perms.0,
                        read: perms.1,
                        atomic: perms.2,
                    },
                };
                let got = table.create(config, key);
                let want = if mode != SlotMode::Fast && !with_meta {
                    Err(SlotError::NeedsMetadata)
                } else if base.checked_add(len).is_none() {
                    Err(SlotError::RangeOverflow)
                } else {
                    Ok(())
                };
                match (want, got) {
                    (Ok(()), Ok(id)) => {
                        // A freed number is reused if there is one; otherwise the next.
                        if m.free.is_empty() {
                            prop_assert_eq!(id.0, m.high, "step {}: fresh number", step);
                            m.high += 1;
                        } else {
                            prop_assert!(
                                m.free.remove(&id.0),
                                "step {}: {:?} not a freed number",
                                step,
                                id
                            );
                        }
                        let old = m.slots.insert(
                            id.0,
                            ModelSlot {
                                config,
                                key,
                                revoked: false,
                                inhibited: false,
                            },
                        );
                        prop_assert!(old.is_none(), "step {}: {:?} handed out twice", step, id);
                    }
                    (Err(w), Err(g)) => prop_assert_eq!(w, g, "step {}", step),
                    (w, g) => {
                        return Err(TestCaseError::fail(format!(
                            "step {step}: create: model {w:?}, table {g:?}"
                        )))
                    }
                }
            }
            Cmd::Rekey(o, t, key) => {
                let id = resolve(&m, t);
                let want = m.owned(OwnerId(o), id).map(|s| {
                    s.key = key;
                    s.revoked = false;
                });
                prop_assert_eq!(
                    table.rekey(OwnerId(o), SlotId(id), key),
                    want,
                    "step {}",
                    step
                );
            }
            Cmd::Revoke(o, t) => {
                let id = resolve(&m, t);
                let want = m.owned(OwnerId(o), id).map(|s| s.revoked = true);
                prop_assert_eq!(table.revoke(OwnerId(o), SlotId(id)), want, "step {}", step);
            }
            Cmd::Inhibit(o, t, on) => {
                let id = resolve(&m, t);
                let want = m.owned(OwnerId(o), id).map(|s| s.inhibited = on);
                prop_assert_eq!(
                    table.inhibit(OwnerId(o), SlotId(id), on),
                    want,
                    "step {}",
                    step
                );
            }
            Cmd::Destroy(o, t) => {
                let id = resolve(&m, t);
                let want = m.owned(OwnerId(o), id).map(|s| s.clone());
                let got = table.destroy(OwnerId(o), SlotId(id));
                match (want, got) {
                    (Ok(w), Ok(g)) => {
                        prop_assert_eq!(g.config, w.config);
                        prop_assert_eq!(
                            (g.key, g.revoked, g.inhibited),
                            (w.key, w.revoked, w.inhibited)
                        );
                        m.slots.remove(&id);
                        m.free.insert(id);
                    }
                    (Err(w), Err(g)) => prop_assert_eq!(w, g, "step {}", step),
                    (w, g) => {
                        return Err(TestCaseError::fail(format!(
                            "step {step}: destroy {id}: model {:?}, table {:?}",
                            w.map(|_| ()),
                            g.map(|_| ())
                        )))
                    }
                }
            }
            Cmd::DestroyOwner(o) => {
                let want: Vec<u32> = m
                    .slots
                    .iter()
                    .filter(|(_, s)| s.config.owner == OwnerId(o))
                    .map(|(&id, _)| id)
                    .collect();
                let got: Vec<u32> = table
                    .destroy_owner(OwnerId(o))
                    .iter()
                    .map(|s| s.0)
                    .collect();
                prop_assert_eq!(&got, &want, "step {}", step);
                for id in want {
                    m.slots.remove(&id);
                    m.free.insert(id);
                }
            }
            Cmd::Get(t) => {
                let id = resolve(&m, t);
                prop_assert_eq!(
                    table.get(SlotId(id)).map(|s| (s.config, s.key)),
                    m.slots.get(&id).map(|s| (s.config, s.key)),
                    "step {}",
                    step
                );
            }
        }
        same(&table, &m)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn slot_table_matches_model(cmds in proptest::collection::vec(cmd(), 1..80)) {
        run(cmds)?;
    }

    /// Through the interface: a destroyed slot's number, reused with a new key, refuses
    /// the old ticket's packets (BadKey) and accepts the new ones; before reuse the number
    /// is unknown (UnknownSlot).
    #[test]
    fn reused_number_refuses_the_old_key(old_key: u64, new_key: u64, seed: u64) {
        prop_assume!(old_key != new_key);
        let mut rng = SplitMix::new(seed);
        let mut iface = Interface::new(NODE);
        let mut areas = VecAreas::new();
        let area = areas.add(4096);
        let meta = areas.add(128);
        let config = SlotConfig {
            owner: OwnerId(1),
            area,
            base: 0,
            len: 4096,
            mode: SlotMode::Normal,
            meta: Some(MetaRange { area: meta, base: 0, count: 1 }),
            queue: None,
            perms: SlotPerms::default(),
        };
        let id = iface.slots_mut().create(config, old_key).expect("create");
        let mut h = Header::new(Op::Write);
        h.dst = NODE;
        h.slot = id;
        h.key = old_key;
        h.flags = Flags::FIRST | Flags::LAST;
        h.offset = rng.below(4000);
        let n = rng.below(96) as usize;
        let payload = rng.bytes(n);
        h.payload_len = payload.len() as u32;
        prop_assert!(iface.receive(&h, &[], &payload, &mut areas).is_ok());

        // Fill the table with a few other slots, destroy ours, and create again until
        // the number comes back.
        let others: Vec<SlotId> = (0..rng.below(4))
            .map(|_| iface.slots_mut().create(config, rng.next_u64()).expect("create"))
            .collect();
        iface.slots_mut().destroy(OwnerId(1), id).expect("destroy");
        let r = iface.receive(&h, &[], &payload, &mut areas).map_err(|r| r.reason);
        prop_assert_eq!(r, Err(RejectReason::UnknownSlot));
        let reused = iface.slots_mut().create(config, new_key).expect("create");
        prop_assert_eq!(reused, id, "the freed number is reused first");
        prop_assert_eq!(iface.slots().get(id).map(|s| s.key), Some(new_key));
        let r = iface.receive(&h, &[], &payload, &mut areas).map_err(|r| r.reason);
        prop_assert_eq!(r, Err(RejectReason::BadKey));
        h.key = new_key;
        prop_assert!(iface.receive(&h, &[], &payload, &mut areas).is_ok());
        prop_assert_eq!(iface.slots().len(), others.len() + 1);
    }
}
