//! Group receive through `Ticket::split` (seed 000 §2.5, DESIGN §3).
//!
//! A receiver hands out one full ticket; its holder splits it recursively among
//! delegates, who split it further, without telling the receiver. Every leaf sends one
//! message into the same metadata entry. The properties:
//! - the entry notifies exactly once, when the last packet of the last member arrives,
//!   for any tree, any message sizes and mtus and any interleaving of all packets;
//! - each leaf's bytes land byte-exact in its part of the range;
//! - `split` refuses exactly the splits that would leave a share below
//!   `MIN_SPLIT_SHARE`, and `segment` refuses sends beyond the ticket's packet budget;
//! - the invariant behind the refusal rule: no proper non-empty subset of the leaves'
//!   shares, nor of the group's packets, sums to 0 mod 2^32.

mod common;

use common::*;
use hamlyn_core::{
    Interface, MetaRange, OwnerId, QueueId, SegmentError, SendSpec, SlotConfig, SlotMode,
    SlotPerms, VecAreas,
};
use hamlyn_wire::entry::NotifKind;
use hamlyn_wire::{
    Flags, MetaEntry, NodeId, RequestId, SlotId, SplitError, Ticket, TicketFlags, FULL_SHARE,
    META_ENTRY_LEN, MIN_SPLIT_SHARE,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const MAX_LEAVES: usize = 64;

fn root_ticket(offset: u64, len: u64, key: u64) -> Ticket {
    Ticket {
        node: NODE,
        incarnation: 1,
        slot: SlotId(0),
        key,
        meta_first: 0,
        meta_count: 1,
        offset,
        len,
        share: FULL_SHARE,
        flags: TicketFlags::WRITE,
    }
}

/// `k` byte sizes adding up to `len`, cut at points from the choice stream (zero-length
/// parts included).
fn cut(len: u64, k: usize, ch: &mut Choices) -> Vec<u64> {
    let mut cuts: Vec<u64> = (0..k - 1)
        .map(|_| u64::from(ch.below(len.min(u64::from(u32::MAX - 1)) as u32 + 1)))
        .collect();
    cuts.sort_unstable();
    let mut sizes = Vec::with_capacity(k);
    let mut at = 0;
    for c in cuts {
        sizes.push(c - at);
        at = c;
    }
    sizes.push(len - at);
    sizes
}

/// Checks one successful split: shares add up, ranges are contiguous, nothing else moves.
fn check_split(
    parent: &Ticket,
    kids: &[Ticket],
    sizes: Option<&[u64]>,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(kids.iter().map(|k| k.share).sum::<u64>(), parent.share);
    let mut at = parent.offset;
    for (i, k) in kids.iter().enumerate() {
        prop_assert!(
            k.share >= MIN_SPLIT_SHARE,
            "share {} below the minimum",
            k.share
        );
        prop_assert_eq!(k.offset, at);
        if let Some(s) = sizes {
            prop_assert_eq!(k.len, s[i]);
        }
        at += k.len;
        prop_assert_eq!(
            (k.node, k.slot, k.key, k.meta_first, k.meta_count, k.flags),
            (
                parent.node,
                parent.slot,
                parent.key,
                parent.meta_first,
                parent.meta_count,
                parent.flags
            )
        );
    }
    prop_assert_eq!(at, parent.offset + parent.len);
    Ok(())
}

/// Grows a random split tree under `t` with at most `max_leaves` leaves and returns its
/// leaves in range order. A split the ticket refuses turns the node into a leaf (after
/// checking the refusal was owed); `refused` counts them.
fn grow(
    t: Ticket,
    ch: &mut Choices,
    max_leaves: usize,
    depth: u32,
    refused: &mut u32,
) -> Result<Vec<Ticket>, TestCaseError> {
    if max_leaves < 2 || depth >= 10 || ch.below(4) == 0 {
        return Ok(vec![t]);
    }
    // Mostly small fan-outs; sometimes as wide as the leaf budget allows (up to 64).
    let k = if ch.below(8) == 0 {
        max_leaves
    } else {
        2 + ch.below(max_leaves.min(16) as u32 - 1) as usize
    };
    let (kids, sizes) = if ch.below(2) == 0 {
        (t.split(k), None)
    } else {
        let sizes = cut(t.len, k, ch);
        (t.split_sizes(&sizes), Some(sizes))
    };
    let kids = match kids {
        Ok(kids) => kids,
        Err(SplitError::ShareTooSmall { share, parts, min }) => {
            prop_assert_eq!((share, parts, min), (t.share, k, MIN_SPLIT_SHARE));
            prop_assert!(t.share < k as u64 * MIN_SPLIT_SHARE, "refused a safe split");
            *refused += 1;
            return Ok(vec![t]);
        }
        Err(e) => return Err(TestCaseError::fail(format!("split: {e}"))),
    };
    check_split(&t, &kids, sizes.as_deref())?;
    // Every child may grow at least one leaf; the rest of the budget goes at random.
    // Sometimes one heir takes it all, so that deep, narrow paths (whose shares shrink
    // fastest) appear too.
    let mut budgets = vec![1usize; k];
    if ch.below(2) == 0 {
        budgets[ch.below(k as u32) as usize] += max_leaves - k;
    } else {
        for _ in 0..max_leaves - k {
            if ch.below(2) == 0 {
                let i = ch.below(k as u32) as usize;
                budgets[i] += 1;
            }
        }
    }
    let mut leaves = Vec::new();
    for (kid, budget) in kids.into_iter().zip(budgets) {
        leaves.extend(grow(kid, ch, budget, depth + 1, refused)?);
    }
    Ok(leaves)
}

/// A random tree of at most 64 leaves under `root`.
fn tree(root: Ticket, choices: Vec<u32>) -> Result<(Vec<Ticket>, u32), TestCaseError> {
    let mut ch = Choices::new(choices);
    let mut refused = 0;
    let leaves = grow(root, &mut ch, MAX_LEAVES, 0, &mut refused)?;
    prop_assert!(!leaves.is_empty() && leaves.len() <= MAX_LEAVES);
    prop_assert_eq!(leaves.iter().map(|l| l.share).sum::<u64>(), FULL_SHARE);
    prop_assert_eq!(
        leaves.iter().map(|l| l.y()).fold(0u32, u32::wrapping_add),
        0
    );
    Ok((leaves, refused))
}

fn choice_stream() -> impl Strategy<Value = Vec<u32>> {
    proptest::collection::vec(any::<u32>(), 0..400)
}

/// One packet in flight: which leaf sent it, its header and its bytes.
struct InFlight {
    leaf: usize,
    header: hamlyn_wire::Header,
    meta: Vec<u8>,
    payload: Vec<u8>,
}

fn group_run(
    mode: SlotMode,
    total: u64,
    choices: Vec<u32>,
    seed: u64,
) -> Result<(), TestCaseError> {
    let mut rng = SplitMix::new(seed);
    let paranoid = mode.is_paranoid();
    let mut iface = Interface::new(NODE);
    let mut areas = VecAreas::new();

    // The slot: the group's range sits inside it with random bytes around.
    let before = rng.below(512);
    let slot_len = before + total + rng.below(512);
    let head = rng.below(512);
    let msg_area = areas.add((head + slot_len + rng.below(512)) as usize);
    rng.fill(areas.bytes_mut(msg_area).expect("area"));
    let entries = 1 + rng.below(4) as u32;
    let index = rng.below(u64::from(entries)) as u32;
    let meta_area = areas.add(entries as usize * META_ENTRY_LEN);
    rng.fill(areas.bytes_mut(meta_area).expect("area"));
    let entry_off = u64::from(index) * META_ENTRY_LEN as u64;
    let slot_key = rng.next_u64();
    let entry_key = slot_key ^ (rng.next_u64() | 1);
    let mut e = entry_at(&areas, meta_area, entry_off);
    e.accumulator.set(0);
    e.assembling_bytes.set(0);
    e.assembling_low.set(0);
    if paranoid {
        e.paranoid_key.set(entry_key);
        e.paranoid_low.set(before);
        e.paranoid_high.set(before + total);
    }
    if mode == SlotMode::ParanoidOneShot {
        e.state.set(e.state.get() | MetaEntry::ARMED);
    }
    put_entry(&mut areas, meta_area, entry_off, &e);
    let queue = QueueId(rng.next_u64() as u32);
    let slot = iface
        .slots_mut()
        .create(
            SlotConfig {
                owner: OwnerId(1),
                area: msg_area,
                base: head,
                len: slot_len,
                mode,
                meta: Some(MetaRange {
                    area: meta_area,
                    base: 0,
                    count: entries,
                }),
                queue: Some(queue),
                perms: SlotPerms::default(),
            },
            slot_key,
        )
        .expect("slot");

    let mut root = root_ticket(before, total, if paranoid { entry_key } else { slot_key });
    root.slot = slot;
    root.meta_first = index;
    let (leaves, _) = tree(root, choices)?;

    // Each leaf sends one message over its whole range with its own mtu and metadata.
    let mut messages = Vec::new();
    let mut packets = Vec::new();
    for (i, leaf) in leaves.iter().enumerate() {
        let msg = rng.bytes(leaf.len as usize);
        let meta_len = rng.below(61) as usize;
        let meta = rng.bytes(meta_len);
        let mtu = match rng.below(4) {
            0 => rng.between(1, 16),
            1 => rng.between(1, 256),
            2 => rng.between(1, 4096),
            _ => rng.between(1, 65536),
        }
        .max(leaf.len.div_ceil(1024));
        let request = RequestId {
            terminus: i as u32,
            seq: rng.next_u64() as u32,
        };
        let spec = SendSpec::from_ticket(
            NodeId(100 + i as u32),
            leaf,
            0,
            leaf.len,
            Some(0),
            &meta,
            rng.next_u64(),
            request,
        )
        .map_err(|e| TestCaseError::fail(format!("from_ticket: {e}")))?;
        let segs = spec
            .segment(mtu)
            .map_err(|e| TestCaseError::fail(format!("segment: {e}")))?;
        for s in segs {
            let first = s.header.flags.contains(Flags::FIRST);
            packets.push(InFlight {
                leaf: i,
                header: s.header,
                meta: if first { meta.clone() } else { Vec::new() },
                payload: msg[s.start as usize..(s.start + u64::from(s.len)) as usize].to_vec(),
            });
        }
        messages.push(msg);
    }
    // Any interleaving of all members' packets.
    for i in (1..packets.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        packets.swap(i, j);
    }

    let msg_before = snapshot(&areas, msg_area);
    let meta_before = snapshot(&areas, meta_area);
    let entry_before = entry_at(&areas, meta_area, entry_off);
    let mut acc = 0u32;
    let mut meta_writes = Vec::new();
    let n = packets.len();
    for (k, p) in packets.iter().enumerate() {
        let path = Path::pick(rng.next_u64());
        let r =
            deliver(&mut iface, &mut areas, &p.header, &p.meta, &p.payload, path).map_err(|r| {
                TestCaseError::fail(format!(
                    "arrival {k} of {n} (leaf {} of {}) rejected: {:?}",
                    p.leaf,
                    leaves.len(),
                    r.reason
                ))
            })?;
        if !p.header.flags.contains(Flags::NOTIFY_NOW) {
            acc = acc.wrapping_add(p.header.delta);
        }
        if p.header.flags.contains(Flags::FIRST) {
            meta_writes.push((p.meta.clone(), p.header.src));
        }
        prop_assert_eq!(
            entry_at(&areas, meta_area, entry_off).accumulator.get(),
            acc,
            "accumulator after arrival {}",
            k
        );
        if k + 1 < n {
            prop_assert!(
                r.is_none(),
                "premature notification at arrival {} of {} ({} leaves)",
                k,
                n,
                leaves.len()
            );
        } else {
            let note = r.ok_or_else(|| {
                TestCaseError::fail(format!("no notification after all {n} packets"))
            })?;
            prop_assert_eq!(note.queue, queue);
            prop_assert_eq!(note.entry.kind(), Some(NotifKind::Message));
            prop_assert_eq!(note.entry.slot.get(), slot.0);
            prop_assert_eq!(note.entry.meta_index.get(), index);
            prop_assert_eq!(note.entry.src_node.get(), p.header.src.0);
            prop_assert_eq!(note.entry.word.get(), p.header.word);
            prop_assert_eq!(
                u64::from(note.entry.len.get()),
                total,
                "the whole group's length"
            );
        }
    }
    prop_assert_eq!(acc, 0);
    let stats = iface.stats();
    prop_assert_eq!(
        (stats.packets, stats.messages, stats.notifications),
        (n as u64, 1, 1)
    );
    prop_assert_eq!(stats.bytes, total);

    // Every leaf's range holds its message; nothing outside the group's range changed.
    let after = snapshot(&areas, msg_area);
    for (leaf, msg) in leaves.iter().zip(&messages) {
        let at = (head + leaf.offset) as usize;
        prop_assert!(
            after[at..at + msg.len()] == msg[..],
            "leaf at {} is not byte-exact",
            leaf.offset
        );
    }
    let start = (head + before) as usize;
    only_changed_within(
        "message area",
        &msg_before,
        &after,
        start..start + total as usize,
    )?;
    let first_offset = packets
        .iter()
        .filter(|p| p.header.flags.contains(Flags::FIRST))
        .map(|p| p.header.offset)
        .min()
        .unwrap_or(0);
    let want = expected_entry(
        &entry_before,
        &meta_writes,
        mode == SlotMode::ParanoidOneShot,
        first_offset,
    );
    prop_assert_eq!(entry_at(&areas, meta_area, entry_off), want);
    let eo = entry_off as usize;
    only_changed_within(
        "metadata area",
        &meta_before,
        &snapshot(&areas, meta_area),
        eo..eo + META_ENTRY_LEN,
    )?;
    Ok(())
}

fn group_len() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => 0u64..=64,
        3 => 0u64..=4096,
        2 => 4097u64..=65536,
    ]
}

/// Ways to divide `share` into `parts` non-empty pieces: shares near the thresholds
/// `parts * MIN_SPLIT_SHARE` are over-weighted.
fn share_and_parts() -> impl Strategy<Value = (u64, usize)> {
    prop_oneof![
        (1u64..=FULL_SHARE, 0usize..=300),
        (1usize..=200, -3i64..=3).prop_map(|(parts, d)| {
            let s = (parts as u64 * MIN_SPLIT_SHARE).saturating_add_signed(d);
            (s.clamp(1, FULL_SHARE), parts)
        }),
        (0usize..=200).prop_map(|parts| (FULL_SHARE, parts)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Exactly one notification, after every packet of every member, for any split tree
    /// and any interleaving; each leaf's bytes land byte-exact.
    #[test]
    fn split_group_notifies_once_when_complete(
        total in group_len(),
        choices in choice_stream(),
        seed: u64,
        mode in prop_oneof![
            3 => Just(SlotMode::Normal),
            1 => Just(SlotMode::Paranoid),
            1 => Just(SlotMode::ParanoidOneShot),
        ],
    ) {
        group_run(mode, total, choices, seed)?;
    }

    /// `split` refuses exactly the splits that cannot keep every share at least
    /// `MIN_SPLIT_SHARE` (n parts of `share` can all reach the minimum if and only if
    /// `share >= n * MIN`), and a split it makes keeps every share there.
    #[test]
    fn split_refuses_shares_below_the_minimum(
        (share, parts) in share_and_parts(),
        len in prop_oneof![0u64..=1000, any::<u32>().prop_map(u64::from)],
        sizes_seed: u64,
    ) {
        let t = Ticket { share, ..root_ticket(17, len, 5) };
        let r = t.split(parts);
        // The same rule holds for split_sizes with any sizes that add up.
        let sizes = if parts == 0 {
            Vec::new()
        } else {
            let mut rng = SplitMix::new(sizes_seed);
            let mut cuts: Vec<u64> = (0..parts - 1).map(|_| rng.between(0, len)).collect();
            cuts.sort_unstable();
            cuts.push(len);
            let mut at = 0;
            cuts.into_iter().map(|c| { let s = c - at; at = c; s }).collect()
        };
        let rs = t.split_sizes(&sizes);
        if parts == 0 {
            prop_assert_eq!(r, Err(SplitError::NoParts));
            prop_assert_eq!(rs, Err(SplitError::NoParts));
        } else if u128::from(share) < parts as u128 * u128::from(MIN_SPLIT_SHARE) {
            let want = Err(SplitError::ShareTooSmall { share, parts, min: MIN_SPLIT_SHARE });
            prop_assert_eq!(&r, &want);
            prop_assert_eq!(&rs, &want);
        } else {
            let kids = r.map_err(|e| TestCaseError::fail(format!("split refused: {e}")))?;
            prop_assert_eq!(kids.len(), parts);
            check_split(&t, &kids, None)?;
            let kids = rs.map_err(|e| TestCaseError::fail(format!("split_sizes refused: {e}")))?;
            check_split(&t, &kids, Some(&sizes))?;
        }
        // Sizes that do not add up are refused whatever the share.
        if parts > 0 {
            let mut bad = sizes.clone();
            bad[0] += 1;
            let sum: u128 = bad.iter().map(|&s| u128::from(s)).sum();
            prop_assert_eq!(t.split_sizes(&bad), Err(SplitError::SizesMismatch { sum, len }));
        }
    }

    /// `segment` refuses a send that needs more packets than the ticket's budget
    /// (`share >> 8`), and allows every send within it.
    #[test]
    fn segment_refuses_sends_beyond_the_packet_budget(
        share in prop_oneof![
            1u64..=FULL_SHARE,
            Just(MIN_SPLIT_SHARE),
            Just(FULL_SHARE),
            (1u32..=64).prop_map(|n| FULL_SHARE / u64::from(n)),
            1u64..=1024,
        ],
        mtu in 1u64..=64,
        slack in -3i64..=3,
        far in prop::bool::weighted(0.2),
    ) {
        let budget = share >> 8;
        let t = Ticket { share, ..root_ticket(0, u64::MAX >> 1, 9) };
        prop_assert_eq!(t.packet_budget(), budget);
        // Messages of about `budget` packets, a few either side (or anywhere).
        let packets = if far { budget.saturating_mul(7) / 3 } else { budget.saturating_add_signed(slack) };
        let len = packets * mtu;
        let spec = SendSpec::from_ticket(SRC, &t, 0, len, Some(0), &[], 0, RequestId::default())
            .map_err(|e| TestCaseError::fail(format!("from_ticket: {e}")))?;
        prop_assert_eq!(spec.max_packets, Some(budget));
        let need = len.div_ceil(mtu).max(1);
        match spec.segment(mtu) {
            Ok(s) => {
                prop_assert!(need <= budget, "{} packets allowed with budget {}", need, budget);
                prop_assert_eq!(s.packets(), need);
            }
            Err(e) => prop_assert_eq!(e, SegmentError::TooManyPackets { need, budget }),
        }
    }

    /// The premise of the refusal rule holds for every tree: the packets a whole group
    /// may send (the sum of the leaves' budgets) stay below the smallest share.
    /// And no proper non-empty subset of the leaves' shares sums to 0 mod 2^32:
    /// exhaustively for up to 16 leaves, by sampling above.
    #[test]
    fn no_proper_subset_of_leaf_shares_sums_to_zero(choices in choice_stream(), seed: u64) {
        let (leaves, _) = tree(root_ticket(0, 1 << 20, 1), choices)?;
        let min = leaves.iter().map(|l| l.share).min().unwrap_or(FULL_SHARE);
        let budget: u64 = leaves.iter().map(Ticket::packet_budget).sum();
        prop_assert!(budget < min, "group budget {} reaches the smallest share {}", budget, min);
        let ys: Vec<u32> = leaves.iter().map(Ticket::y).collect();
        let n = ys.len();
        let full = u64::MAX >> (64 - n);
        let check = |mask: u64| -> Result<(), TestCaseError> {
            let sum = (0..n)
                .filter(|i| mask >> i & 1 == 1)
                .fold(0u32, |a, i| a.wrapping_add(ys[i]));
            if mask != full {
                prop_assert_ne!(sum, 0, "subset {:#x} of {} leaves sums to 0", mask, n);
            } else {
                prop_assert_eq!(sum, 0);
            }
            Ok(())
        };
        if n <= 16 {
            for mask in 1..=full {
                check(mask)?;
            }
        } else {
            let mut rng = SplitMix::new(seed);
            for _ in 0..4096 {
                let mask = rng.next_u64() & full;
                if mask != 0 {
                    check(mask)?;
                }
            }
            // The subsets nearest to the whole: all but one leaf.
            for i in 0..n {
                check(full & !(1 << i))?;
            }
        }
    }

    /// The packets of a group, each leaf sending as many as its budget allows (or fewer):
    /// no proper non-empty subset of all their deltas sums to 0 mod 2^32, so the
    /// accumulator cannot reach 0 before the last packet arrives. Subsets are sampled,
    /// biased toward the dangerous ones (many last packets, all but a few packets).
    #[test]
    fn no_proper_subset_of_group_packets_sums_to_zero(choices in choice_stream(), seed: u64) {
        let (leaves, _) = tree(root_ticket(0, 1 << 20, 1), choices)?;
        let mut rng = SplitMix::new(seed);
        // Packets per leaf: p_i in 1..=budget, mostly the whole budget.
        let p: Vec<u64> = leaves
            .iter()
            .map(|l| if rng.below(4) == 0 { rng.between(1, l.packet_budget()) } else { l.packet_budget() })
            .collect();
        // Leaf i sends p_i - 1 packets of delta 1 and a last of y_i - (p_i - 1).
        let last: Vec<u32> = leaves
            .iter()
            .zip(&p)
            .map(|(l, &p)| l.y().wrapping_sub((p - 1) as u32))
            .collect();
        let n = leaves.len();
        for round in 0..512 {
            // A subset: which leaves' last packets arrived, and how many of each leaf's
            // other packets.
            let dense = round % 2 == 0;
            let mut sum = 0u32;
            let mut all = true;
            let mut any = false;
            for i in 0..n {
                let with_last = if dense { rng.below(8) != 0 } else { rng.below(2) == 0 };
                let ones = match rng.below(4) {
                    0 => 0,
                    1 => rng.below(p[i]),
                    _ => p[i] - 1 - rng.below(p[i].min(3)),
                };
                if with_last {
                    sum = sum.wrapping_add(last[i]);
                }
                sum = sum.wrapping_add(ones as u32);
                all &= with_last && ones == p[i] - 1;
                any |= with_last || ones > 0;
            }
            if all {
                prop_assert_eq!(sum, 0, "the whole group must sum to 0");
            } else if any {
                prop_assert_ne!(sum, 0, "a proper subset of the group's packets sums to 0");
            }
        }
    }
}
