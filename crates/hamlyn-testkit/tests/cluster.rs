//! The simulated cluster: eight nodes' interfaces exchanging messages and group receives
//! over a reordering network, then one node crashing mid-traffic (DESIGN §2–3).
//!
//! What must hold, for every seed:
//! - traffic among the survivors completes byte-exact (payload and metadata) with exactly
//!   one notification per message or group, and every part's status is `Sent`;
//! - messages to the crashed node end `Sent` or `Failed(PeerDown)`, and their senders were
//!   told the node is down;
//! - messages (or group parts) from the crashed node complete at most once, byte-exact;
//!   if one did not complete although some of the crashed node's bytes landed, its
//!   receiver got a peer-down notification;
//! - no NACKs, rejects, overflows or fabric errors in honest traffic, and the run ends
//!   idle well before its bounds.
//!
//! Set `HAMLYN_SIM_DEBUG=1` (with `--nocapture`) to print each seed's traffic counters.

// Test code: the helpers below are test steps, and a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use hamlyn_core::{AreaId, Instant, QueueId, RejectReason};
use hamlyn_fabric::{SimConfig, SimRng};
use hamlyn_testkit::cluster::{
    ClusterConfig, ReceiveSlot, SendFailure, SendRequest, SendStatus, SimCluster,
};
use hamlyn_wire::{
    Flags, Header, MetaEntry, NodeId, NotifEntry, NotifKind, Op, RequestId, Ticket, META_ENTRY_LEN,
};

const NODES: usize = 8;
const MAX_LEN: usize = 256 << 10;
/// Simulated-time bound of every run: ten simulated seconds.
const TIME_LIMIT: Instant = Instant(10_000_000_000);

fn node(i: usize) -> NodeId {
    NodeId(i as u32)
}

/// One sender's share of a message.
#[derive(Clone, Debug)]
struct Part {
    sender: usize,
    /// Byte range within the message.
    start: usize,
    len: usize,
    mtu: u64,
    source_offset: usize,
    ticket: Option<Ticket>,
    request: Option<RequestId>,
}

/// A message (one part) or a group receive (several parts, one split ticket).
#[derive(Clone, Debug)]
struct Msg {
    receiver: usize,
    entry: u32,
    offset: usize,
    data: Vec<u8>,
    meta: Vec<u8>,
    parts: Vec<Part>,
}

impl Msg {
    fn senders(&self) -> impl Iterator<Item = usize> + '_ {
        self.parts.iter().map(|p| p.sender)
    }
}

fn pick_len(rng: &mut SimRng) -> usize {
    const EDGES: [usize; 10] = [0, 1, 59, 60, 61, 4095, 4096, 4097, 65536, MAX_LEN];
    if rng.chance(1, 2) {
        EDGES[rng.index(EDGES.len())]
    } else {
        rng.below(MAX_LEN as u64 + 1) as usize
    }
}

fn pick_mtu(rng: &mut SimRng) -> u64 {
    const MTUS: [u64; 6] = [256, 1024, 1500, 4096, 9000, 65536];
    MTUS[rng.index(MTUS.len())]
}

/// Random bytes with no zero among them, so landed bytes can be told from untouched ones.
fn nonzero_bytes(rng: &mut SimRng, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    rng.fill(&mut v);
    for b in &mut v {
        *b |= 1;
    }
    v
}

/// Plans `unicasts` messages and `groups` group receives among the nodes.
fn plan(rng: &mut SimRng, unicasts: usize, groups: usize) -> Vec<Msg> {
    let mut msgs = Vec::new();
    let mut entries = [0u32; NODES];
    let mut offsets = [0usize; NODES];
    let mut sources = [0usize; NODES];
    let mut add = |receiver: usize, senders: Vec<usize>, len: usize, rng: &mut SimRng| {
        let meta_len = rng.below(61) as usize;
        let k = senders.len();
        let mut parts = Vec::new();
        for (j, &sender) in senders.iter().enumerate() {
            // Ticket::split's cut: even parts, the remainder to the last.
            let base = len / k;
            let plen = if j + 1 == k {
                len - base * (k - 1)
            } else {
                base
            };
            parts.push(Part {
                sender,
                start: base * j,
                len: plen,
                mtu: pick_mtu(rng),
                source_offset: sources[sender],
                ticket: None,
                request: None,
            });
            sources[sender] += plen;
        }
        msgs.push(Msg {
            receiver,
            entry: entries[receiver],
            offset: offsets[receiver],
            data: nonzero_bytes(rng, len),
            meta: nonzero_bytes(rng, meta_len),
            parts,
        });
        entries[receiver] += 1;
        offsets[receiver] += len;
    };
    for _ in 0..unicasts {
        let sender = rng.index(NODES);
        let receiver = if rng.chance(1, 8) {
            sender
        } else {
            (sender + 1 + rng.index(NODES - 1)) % NODES
        };
        let len = pick_len(rng);
        add(receiver, vec![sender], len, rng);
    }
    for _ in 0..groups {
        let receiver = rng.index(NODES);
        let k = 2 + rng.index(3);
        let mut others: Vec<usize> = (0..NODES).filter(|&n| n != receiver).collect();
        let mut senders = Vec::new();
        for _ in 0..k {
            senders.push(others.swap_remove(rng.index(others.len())));
        }
        let len = pick_len(rng);
        add(receiver, senders, len, rng);
    }
    msgs
}

/// Per node: its notification queue, receive slot and source area.
struct Layout {
    queue: Vec<QueueId>,
    slot: Vec<ReceiveSlot>,
    source: Vec<AreaId>,
}

fn build(c: &mut SimCluster, msgs: &mut [Msg]) -> Layout {
    let mut layout = Layout {
        queue: Vec::new(),
        slot: Vec::new(),
        source: Vec::new(),
    };
    for n in 0..NODES {
        let here = msgs.iter().filter(|m| m.receiver == n);
        let (count, bytes) = here.fold((0, 0), |(c, b), m| (c + 1, b + m.data.len()));
        let queue = c.create_queue(node(n), 1024).unwrap();
        let slot = c
            .create_receive_slot(node(n), bytes.max(1), count.max(1), Some(queue))
            .unwrap();
        let sent: usize = msgs
            .iter()
            .flat_map(|m| &m.parts)
            .filter(|p| p.sender == n)
            .map(|p| p.len)
            .sum();
        let source = c.create_area(node(n), sent.max(1)).unwrap();
        layout.queue.push(queue);
        layout.slot.push(slot);
        layout.source.push(source);
    }
    for m in msgs.iter_mut() {
        let rs = layout.slot[m.receiver];
        let whole = Ticket {
            offset: m.offset as u64,
            len: m.data.len() as u64,
            meta_first: m.entry,
            meta_count: 1,
            ..c.ticket(node(m.receiver), rs.slot).unwrap()
        };
        let tickets = if m.parts.len() == 1 {
            vec![whole]
        } else {
            whole.split(m.parts.len()).unwrap()
        };
        for (p, t) in m.parts.iter_mut().zip(tickets) {
            assert_eq!(t.offset, (m.offset + p.start) as u64, "plan matches split");
            assert_eq!(t.len, p.len as u64);
            let src = c.area_mut(node(p.sender), layout.source[p.sender]).unwrap();
            src[p.source_offset..p.source_offset + p.len]
                .copy_from_slice(&m.data[p.start..p.start + p.len]);
            p.ticket = Some(t);
        }
    }
    layout
}

fn send_all(c: &mut SimCluster, msgs: &mut [Msg], layout: &Layout) -> u64 {
    let mut packets = 0;
    for m in msgs.iter_mut() {
        for p in &mut m.parts {
            let ticket = p.ticket.unwrap();
            let req = SendRequest {
                meta: &m.meta,
                mtu: p.mtu,
                word: u64::from(m.entry),
                ..SendRequest::new(
                    ticket,
                    layout.source[p.sender],
                    p.source_offset as u64,
                    p.len as u64,
                )
            };
            p.request = Some(c.send(node(p.sender), &req).unwrap());
            packets += (p.len as u64).div_ceil(p.mtu).max(1);
        }
    }
    packets
}

fn notifs_for(c: &SimCluster, layout: &Layout, m: &Msg, kind: NotifKind) -> Vec<NotifEntry> {
    let n = node(m.receiver);
    c.notifications(n, layout.queue[m.receiver])
        .unwrap()
        .iter()
        .filter(|e| {
            e.kind() == Some(kind)
                && e.slot.get() == layout.slot[m.receiver].slot.0
                && e.meta_index.get() == m.entry
        })
        .copied()
        .collect()
}

fn landed<'c>(c: &'c SimCluster, layout: &Layout, m: &Msg) -> &'c [u8] {
    let area = c
        .area(node(m.receiver), layout.slot[m.receiver].area)
        .unwrap();
    &area[m.offset..m.offset + m.data.len()]
}

fn metadata(c: &SimCluster, layout: &Layout, m: &Msg) -> Vec<u8> {
    let rs = layout.slot[m.receiver];
    let meta = c.area(node(m.receiver), rs.meta_area).unwrap();
    let at = m.entry as usize * META_ENTRY_LEN;
    MetaEntry::read(&meta[at..]).unwrap().metadata().to_vec()
}

/// A digest of a run, to compare replays.
#[derive(Debug, PartialEq, Eq)]
struct Summary {
    now: Instant,
    net: hamlyn_fabric::SimStats,
    notifications: Vec<Vec<NotifEntry>>,
}

/// Runs the whole scenario for one seed and checks every promise; returns its summary.
fn scenario(seed: u64) -> Summary {
    let mut rng = SimRng::new(seed);
    let config = ClusterConfig {
        sim: SimConfig {
            min_delay: 500,
            max_delay: 50_000,
            link_capacity: 16,
        },
        poll_budget: 32,
        max_steps: 1_000_000,
    };
    let mut c = SimCluster::new(NODES, seed, config);
    let mut msgs = plan(&mut rng, 28, 8);
    let layout = build(&mut c, &mut msgs);
    let packets = send_all(&mut c, &mut msgs, &layout);

    // Let about a third of the packets through, then crash one node mid-traffic.
    let mut steps = 0;
    while c.net().stats().delivered < packets / 3 && steps < 1_000_000 {
        assert!(c.step(), "traffic stalled before the crash");
        steps += 1;
    }
    // Crash the node with the most packets in flight to or from it.
    let busy = |x: usize| -> usize {
        (0..NODES)
            .map(|y| {
                c.net().in_flight_between(node(x), node(y))
                    + c.net().in_flight_between(node(y), node(x))
            })
            .sum()
    };
    let x = (0..NODES).max_by_key(|&x| (busy(x), x)).unwrap();
    assert!(busy(x) > 0, "seed {seed}: nothing in flight at the crash");
    let dropped_before = c.net().stats().dropped_by_fault;
    c.crash(node(x)).unwrap();
    assert!(
        c.net().stats().dropped_by_fault > dropped_before,
        "crash was mid-traffic"
    );
    let out = c.run_until_idle(TIME_LIMIT);
    assert!(out.idle, "seed {seed}: not idle after {out:?}");
    assert!(out.steps < config.max_steps && out.now < TIME_LIMIT);

    for n in (0..NODES).filter(|&n| n != x) {
        let id = node(n);
        assert!(c.nacks(id).is_empty(), "seed {seed}: node {n} got NACKs");
        let iface = c.interface(id).unwrap();
        assert_eq!(
            iface.stats().rejects.total(),
            0,
            "seed {seed}: node {n} rejected"
        );
        assert_eq!(c.queue_overflow(id, layout.queue[n]), Some(0));
        let k = c.counters(id).unwrap();
        assert_eq!(
            (k.malformed, k.fabric_errors, k.lost_notifications),
            (0, 0, 0)
        );
        assert!(
            c.saw_peer_down(id, node(x)),
            "seed {seed}: {n} not told of the crash"
        );
    }

    let mut expected_notifs = [0usize; NODES];
    for (i, m) in msgs.iter().enumerate() {
        let what = format!("seed {seed}, crashed {x}, message {i} {:?}", m.parts);
        let from_x = m.senders().any(|s| s == x);
        if m.receiver == x {
            for p in m.parts.iter().filter(|p| p.sender != x) {
                let status = c.status(node(p.sender), p.request.unwrap()).unwrap();
                let ok = match &status {
                    SendStatus::Sent => true,
                    SendStatus::Failed(SendFailure::PeerDown(d)) => *d == node(x),
                    _ => false,
                };
                assert!(ok, "{what}: status {status:?}");
                assert!(c.saw_peer_down(node(p.sender), node(x)), "{what}");
            }
            continue;
        }
        let done = notifs_for(&c, &layout, m, NotifKind::Message);
        let downs = notifs_for(&c, &layout, m, NotifKind::PeerDown);
        expected_notifs[m.receiver] += done.len() + downs.len();
        if !from_x {
            assert_eq!(done.len(), 1, "{what}: one notification");
            assert!(downs.is_empty(), "{what}: no peer-down");
            for p in &m.parts {
                let status = c.status(node(p.sender), p.request.unwrap());
                assert_eq!(status, Some(SendStatus::Sent), "{what}");
            }
        } else {
            assert!(done.len() <= 1, "{what}: at most one notification");
            let xs_bytes_landed = m.parts.iter().filter(|p| p.sender == x).any(|p| {
                landed(&c, &layout, m)[p.start..p.start + p.len]
                    .iter()
                    .any(|&b| b != 0)
            });
            if done.is_empty() && xs_bytes_landed {
                assert_eq!(downs.len(), 1, "{what}: partial from the crashed node");
                assert_eq!(downs[0].src_node.get(), x as u32);
            }
            if done.is_empty() {
                continue;
            }
        }
        let notifier = done[0].src_node.get() as usize;
        assert!(
            m.senders().any(|s| s == notifier),
            "{what}: notified by a sender"
        );
        assert!(landed(&c, &layout, m) == m.data, "{what}: payload differs");
        if m.parts.len() == 1 {
            assert_eq!(metadata(&c, &layout, m), m.meta, "{what}: metadata");
        }
    }
    if std::env::var_os("HAMLYN_SIM_DEBUG").is_some() {
        let failed = msgs
            .iter()
            .flat_map(|m| &m.parts)
            .filter(|p| {
                matches!(
                    c.status(node(p.sender), p.request.unwrap()),
                    Some(SendStatus::Failed(_))
                )
            })
            .count();
        let pd: usize = (0..NODES)
            .filter(|&n| n != x)
            .map(|n| {
                c.notifications(node(n), layout.queue[n])
                    .unwrap()
                    .iter()
                    .filter(|e| e.kind() == Some(NotifKind::PeerDown))
                    .count()
            })
            .sum();
        eprintln!(
            "seed {seed} x {x} packets {packets} failed {failed} peerdown-notifs {pd} {:?} {out:?}",
            c.net().stats()
        );
    }
    for n in (0..NODES).filter(|&n| n != x) {
        let all = c.notifications(node(n), layout.queue[n]).unwrap();
        assert_eq!(
            all.len(),
            expected_notifs[n],
            "seed {seed}: stray notifications"
        );
    }
    Summary {
        now: c.now(),
        net: c.net().stats(),
        notifications: (0..NODES)
            .map(|n| {
                c.notifications(node(n), layout.queue[n])
                    .unwrap()
                    .iter()
                    .copied()
                    .collect()
            })
            .collect(),
    }
}

#[test]
fn eight_nodes_reorder_and_survive_a_crash() {
    for seed in [1, 2, 3, 4, 5, 6, 7, 8, 77, 0xC0FFEE, 0x5EED_0005, u64::MAX] {
        scenario(seed);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(16))]
    #[test]
    fn eight_nodes_survive_a_crash_for_random_seeds(seed: u64) {
        scenario(seed);
    }
}

#[test]
fn same_seed_replays_exactly() {
    assert_eq!(scenario(11), scenario(11));
}

#[test]
fn forged_key_is_nacked_with_bad_key_and_the_area_is_untouched() {
    let (sender, receiver) = (node(0), node(1));
    let mut c = SimCluster::new(2, 5, ClusterConfig::default());
    let q = c.create_queue(receiver, 16).unwrap();
    let rs = c.create_receive_slot(receiver, 4096, 4, Some(q)).unwrap();
    let ticket = c.ticket(receiver, rs.slot).unwrap();

    // A raw packet with a guessed key.
    let mut h = Header::new(Op::Write);
    h.src = sender;
    h.dst = receiver;
    h.slot = rs.slot;
    h.key = ticket.key ^ 1;
    h.flags = Flags::FIRST | Flags::LAST | Flags::NOTIFY | Flags::NOTIFY_NOW;
    h.offset = 64;
    h.meta_len = 4;
    h.payload_len = 100;
    h.request = RequestId {
        terminus: 9,
        seq: 42,
    };
    c.inject(sender, h, b"meta", &[0xEE; 100]).unwrap();
    // The same through the ordinary send path, with a forged ticket.
    let src = c.create_area(sender, 8192).unwrap();
    c.area_mut(sender, src).unwrap().fill(0xDD);
    let forged = Ticket {
        key: ticket.key.wrapping_add(12345),
        ..ticket
    };
    let req = SendRequest {
        mtu: 1024,
        ..SendRequest::new(forged, src, 0, 4096)
    };
    let request = c.send(sender, &req).unwrap();

    let out = c.run_until_idle(TIME_LIMIT);
    assert!(out.idle);
    let nacks = c.nacks(sender);
    assert_eq!(nacks.len(), 1 + 4, "one NACK per refused packet");
    assert!(nacks.iter().all(|n| n.from == receiver
        && n.reason == Some(RejectReason::BadKey)
        && n.slot == rs.slot));
    let injected: Vec<_> = nacks.iter().filter(|n| n.request.terminus == 9).collect();
    assert_eq!(injected.len(), 1);
    assert_eq!((injected[0].request.seq, injected[0].offset), (42, 64));
    assert_eq!(
        c.status(sender, request),
        Some(SendStatus::Failed(SendFailure::Nack(Some(
            RejectReason::BadKey
        ))))
    );
    assert!(c.area(receiver, rs.area).unwrap().iter().all(|&b| b == 0));
    assert!(c
        .area(receiver, rs.meta_area)
        .unwrap()
        .iter()
        .all(|&b| b == 0));
    assert!(c.notifications(receiver, q).unwrap().is_empty());
    let rejects = c.interface(receiver).unwrap().stats().rejects;
    assert_eq!(rejects.get(RejectReason::BadKey), 5);
    assert_eq!(rejects.total(), 5);
}

#[test]
fn back_pressure_on_a_one_packet_link_loses_nothing() {
    let config = ClusterConfig {
        sim: SimConfig {
            min_delay: 0,
            max_delay: 100_000,
            link_capacity: 1,
        },
        ..ClusterConfig::default()
    };
    let mut c = SimCluster::new(2, 9, config);
    let q = c.create_queue(node(1), 4).unwrap();
    let rs = c.create_receive_slot(node(1), MAX_LEN, 1, Some(q)).unwrap();
    let t = c.ticket(node(1), rs.slot).unwrap();
    let src = c.create_area(node(0), MAX_LEN).unwrap();
    let data = nonzero_bytes(&mut SimRng::new(1), MAX_LEN);
    c.area_mut(node(0), src).unwrap().copy_from_slice(&data);
    let req = SendRequest {
        mtu: 512,
        ..SendRequest::new(t, src, 0, MAX_LEN as u64)
    };
    let r = c.send(node(0), &req).unwrap();
    assert_eq!(c.status(node(0), r), Some(SendStatus::Queued));
    let out = c.run_until_idle(TIME_LIMIT);
    assert!(out.idle);
    assert_eq!(c.status(node(0), r), Some(SendStatus::Sent));
    assert!(c.net().stats().refused_full > 0, "the link pushed back");
    assert_eq!(c.area(node(1), rs.area).unwrap(), &data[..]);
    assert_eq!(c.notifications(node(1), q).unwrap().len(), 1);
}

#[test]
fn a_full_notification_queue_counts_instead_of_overwriting() {
    let mut c = SimCluster::new(2, 3, ClusterConfig::default());
    let q = c.create_queue(node(1), 2).unwrap();
    let rs = c.create_receive_slot(node(1), 5 * 8, 5, Some(q)).unwrap();
    let src = c.create_area(node(0), 8).unwrap();
    for i in 0..5u32 {
        let t = Ticket {
            offset: u64::from(i) * 8,
            len: 8,
            meta_first: i,
            meta_count: 1,
            ..c.ticket(node(1), rs.slot).unwrap()
        };
        c.send(node(0), &SendRequest::new(t, src, 0, 8)).unwrap();
    }
    assert!(c.run_until_idle(TIME_LIMIT).idle);
    assert_eq!(c.notifications(node(1), q).unwrap().len(), 2);
    assert_eq!(c.queue_overflow(node(1), q), Some(3));
    let seqs: Vec<u32> = c
        .take_notifications(node(1), q)
        .iter()
        .map(|e| e.seq.get())
        .collect();
    assert_eq!(seqs, [1, 2], "the first two were kept, in order");
}

#[test]
fn restart_brings_a_new_incarnation_and_old_tickets_go_stale() {
    let mut c = SimCluster::new(2, 4, ClusterConfig::default());
    let q = c.create_queue(node(1), 4).unwrap();
    let rs = c.create_receive_slot(node(1), 64, 1, Some(q)).unwrap();
    let old = c.ticket(node(1), rs.slot).unwrap();
    assert!(c.run_until_idle(TIME_LIMIT).idle);
    c.restart(node(1)).unwrap();
    assert!(c.run_until_idle(TIME_LIMIT).idle);
    assert!(c.saw_peer_down(node(0), node(1)));
    let src = c.create_area(node(0), 8).unwrap();
    let err = c
        .send(node(0), &SendRequest::new(old, src, 0, 8))
        .unwrap_err();
    assert!(matches!(
        err,
        hamlyn_testkit::cluster::ClusterError::StaleTicket {
            ticket: 1,
            current: 2,
            ..
        }
    ));
    assert_eq!(
        c.interface(node(1)).unwrap().slots().len(),
        0,
        "state is new"
    );
}

#[test]
fn cut_link_fails_queued_messages_and_notifies_partial_receivers() {
    let config = ClusterConfig {
        sim: SimConfig {
            min_delay: 10,
            max_delay: 10,
            link_capacity: 4,
        },
        ..ClusterConfig::default()
    };
    let mut c = SimCluster::new(2, 6, config);
    let q = c.create_queue(node(1), 4).unwrap();
    let rs = c.create_receive_slot(node(1), 1 << 16, 1, Some(q)).unwrap();
    let t = c.ticket(node(1), rs.slot).unwrap();
    let src = c.create_area(node(0), 1 << 16).unwrap();
    c.area_mut(node(0), src).unwrap().fill(7);
    let req = SendRequest {
        mtu: 1024,
        ..SendRequest::new(t, src, 0, 1 << 16)
    };
    let r = c.send(node(0), &req).unwrap();
    // Let some packets land, then cut the link with the rest queued.
    while c.interface(node(1)).unwrap().stats().packets < 6 {
        assert!(c.step());
    }
    c.cut_link(node(0), node(1)).unwrap();
    assert!(c.run_until_idle(TIME_LIMIT).idle);
    assert_eq!(
        c.status(node(0), r),
        Some(SendStatus::Failed(SendFailure::PeerDown(node(1))))
    );
    let notifs = c.notifications(node(1), q).unwrap();
    assert_eq!(notifs.len(), 1);
    assert_eq!(notifs[0].kind(), Some(NotifKind::PeerDown));
    assert_eq!(notifs[0].src_node.get(), 0);
    assert!(c.saw_peer_down(node(0), node(1)) && c.saw_peer_down(node(1), node(0)));
}

#[test]
fn cluster_calls_on_bad_ids_are_errors() {
    let mut c = SimCluster::new(2, 0, ClusterConfig::default());
    assert!(c.create_area(node(5), 1).is_err());
    assert!(c.ticket(node(0), hamlyn_wire::SlotId(3)).is_err());
    assert!(c
        .create_receive_slot(node(0), 8, 1, Some(QueueId(9)))
        .is_err());
    let rs = c.create_receive_slot(node(1), 8, 1, None).unwrap();
    let t = c.ticket(node(1), rs.slot).unwrap();
    let src = c.create_area(node(0), 4).unwrap();
    assert!(
        c.send(node(0), &SendRequest::new(t, src, 0, 8)).is_err(),
        "source too short"
    );
    c.crash(node(0)).unwrap();
    assert!(c.send(node(0), &SendRequest::new(t, src, 0, 4)).is_err());
    assert!(c.run_until_idle(TIME_LIMIT).idle);
}

#[test]
fn send_to_a_crashed_node_fails_with_peer_down_at_once() {
    let mut c = SimCluster::new(3, 8, ClusterConfig::default());
    let rs = c.create_receive_slot(node(1), 64, 1, None).unwrap();
    let t = c.ticket(node(1), rs.slot).unwrap();
    let src = c.create_area(node(0), 64).unwrap();
    assert!(c.run_until_idle(TIME_LIMIT).idle);
    c.crash(node(1)).unwrap();
    // Before node 0 has polled the Down event: the fabric itself refuses.
    let r = c.send(node(0), &SendRequest::new(t, src, 0, 64)).unwrap();
    assert_eq!(
        c.status(node(0), r),
        Some(SendStatus::Failed(SendFailure::PeerDown(node(1))))
    );
    assert_eq!(c.net().stats().refused_down, 1);
    assert!(c.run_until_idle(TIME_LIMIT).idle);
    assert!(c.saw_peer_down(node(0), node(1)) && c.saw_peer_down(node(2), node(1)));
}
