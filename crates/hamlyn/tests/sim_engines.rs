//! Eight real engines, each with a client through the library, over one seeded simulated
//! network (`hamlyn_testkit::sim_engines`): every packet is delayed by a seeded random
//! amount (so the packets of a message arrive out of order), links hold a bounded number
//! of packets (back-pressure), and a node crashes. What is checked is what ships: the
//! engine's event loop, delivery, remote path and peer table, through the public API.
//!
//! - every message between every pair of nodes lands byte-exact and is notified once;
//! - a group member's half of a message, then its node's crash: the receiver is told the
//!   message will never complete (`PeerDown`, naming the crashed node);
//! - sends to the crashed node fail with `PeerDown`; traffic among the others goes on.

use std::time::{Duration, Instant};

use hamlyn::{
    Area, Data, MetaArea, Node, NotificationKind, NotifyQueue, RejectReason, SendOptions, Slot,
    Status, Terminus,
};
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_fabric::SimConfig;
use hamlyn_testkit::sim_engines::SharedNet;
use hamlyn_wire::NodeId;

const NODES: u32 = 8;
/// Bytes each sender may write into a receiver's inbox.
const SHARE: u64 = 4096;
/// Bytes of each message: several packets at the engines' packet size.
const MSG: usize = 3000;
const WAIT: Duration = Duration::from_secs(20);

struct Member {
    engine: Option<EngineHandle>,
    node: Node,
    inbox: Area,
    _meta: MetaArea,
    slot: Slot,
    outbox: Area,
    queue: NotifyQueue,
    terminus: Terminus,
}

fn start(net: &SharedNet, i: u32) -> Member {
    let mut cfg = EngineConfig::embedded();
    cfg.node = i;
    cfg.incarnation = net.incarnation(NodeId(i)).expect("node is up");
    // Small packets: a message is several, and the network reorders them.
    cfg.remote_mtu = 1024;
    let engine = EngineHandle::start_with_fabric(cfg, Some(Box::new(net.fabric(NodeId(i)))))
        .expect("engine");
    let node = Node::connect(engine.socket_path()).expect("client");
    // One share of the inbox and one metadata entry per sender (and one more for a group).
    let inbox = node.area(SHARE * u64::from(NODES + 1)).expect("inbox");
    let meta = node.meta_area(NODES + 1).expect("meta");
    let slot = node
        .slot(&inbox)
        .meta(&meta)
        .queue(0)
        .create()
        .expect("slot");
    let outbox = node.area(SHARE * u64::from(NODES)).expect("outbox");
    let queue = node.queue(0).expect("queue");
    let terminus = node.terminus(0).expect("terminus");
    Member {
        engine: Some(engine),
        node,
        inbox,
        _meta: meta,
        slot,
        outbox,
        queue,
        terminus,
    }
}

/// The bytes node `from` sends node `to` in round `round`.
fn pattern(from: u32, to: u32, round: u32) -> Vec<u8> {
    (0..MSG)
        .map(|k| ((k as u32).wrapping_mul(7) ^ (from * 31 + to * 17 + round * 5)) as u8)
        .collect()
}

/// Every live node sends every other live node one message; every receiver gets each
/// byte-exact, notified once, tagged with its sender.
fn all_to_all(members: &mut [Member], live: &[u32], round: u32) {
    let tickets: Vec<_> = (0..NODES)
        .map(|to| {
            let m = &members[to as usize];
            (0..NODES)
                .map(|from| {
                    let at = u64::from(from) * SHARE;
                    m.slot
                        .ticket(at..at + SHARE, from..from + 1)
                        .expect("ticket")
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let mut handles = Vec::new();
    for &from in live {
        for &to in live.iter().filter(|&&to| to != from) {
            let m = &mut members[from as usize];
            let at = u64::from(to) * SHARE;
            m.outbox
                .write(at, &pattern(from, to, round))
                .expect("fill outbox");
            let span = [m.outbox.span(at, MSG as u64)];
            let h = m
                .terminus
                .send(
                    &tickets[to as usize][from as usize],
                    &SendOptions::new().tag(u64::from(from)),
                    Data::Gather(&span),
                )
                .expect("send");
            handles.push((from, to, h));
        }
        // Let this sender's terminus drain before the next one fills its own.
        let m = &mut members[from as usize];
        assert!(m.terminus.wait_idle(Some(WAIT)), "node {from} sends finish");
    }
    for (from, to, h) in handles {
        assert_eq!(h.wait(Some(WAIT)), Status::Sent, "{from} → {to}");
    }
    for &to in live {
        let m = &mut members[to as usize];
        let mut seen = Vec::new();
        while seen.len() < live.len() - 1 {
            let n = m
                .queue
                .wait(Some(WAIT))
                .expect("wait")
                .unwrap_or_else(|| panic!("node {to} heard from only {seen:?}"));
            assert_eq!(n.kind, NotificationKind::Message, "node {to}: {n:?}");
            let from = n.word as u32;
            assert_eq!(n.src_node, NodeId(from));
            assert!(!seen.contains(&from), "node {to}: {from} notified twice");
            let got = m
                .inbox
                .read_vec(u64::from(from) * SHARE, MSG)
                .expect("read inbox");
            assert!(
                got == pattern(from, to, round),
                "node {to}: message from {from} garbled"
            );
            seen.push(from);
        }
    }
}

#[test]
fn eight_engines_reorder_and_contain_a_crash() {
    let net = SharedNet::new(
        NODES as usize,
        0x5EED_0008,
        SimConfig {
            min_delay: 1_000,
            max_delay: 200_000,
            link_capacity: 16,
        },
    );
    let mut members: Vec<Member> = (0..NODES).map(|i| start(&net, i)).collect();
    let everyone: Vec<u32> = (0..NODES).collect();
    all_to_all(&mut members, &everyone, 0);
    assert!(net.stats().delivered > 0);

    // Node 7 sends its half of a group message to node 0, then crashes.
    let group = members[0]
        .slot
        .ticket(
            u64::from(NODES) * SHARE..u64::from(NODES + 1) * SHARE,
            NODES..NODES + 1,
        )
        .expect("group ticket");
    let halves = group.split(2).expect("split");
    let m7 = &mut members[7];
    // Half the group's range (2 KiB): two packets, neither the group's last.
    let half = 2000;
    m7.outbox.write(0, &[0xAB; 2000]).expect("fill");
    let span = [m7.outbox.span(0, half)];
    let h = m7
        .terminus
        .send(&halves[0], &SendOptions::new().tag(77), Data::Gather(&span))
        .expect("half a group");
    assert_eq!(h.wait(Some(WAIT)), Status::Sent);
    // Every packet of it has reached node 0's engine (nothing left on the wires).
    let deadline = Instant::now() + WAIT;
    while net.in_flight() > 0 {
        assert!(Instant::now() < deadline, "the network drains");
        std::thread::sleep(Duration::from_millis(1));
    }
    net.crash(NodeId(7)).expect("crash");
    drop(members[7].engine.take());

    // Node 0 is told its partly received group will never complete, and by whom.
    let n = members[0]
        .queue
        .wait(Some(WAIT))
        .expect("wait")
        .expect("peer-down notification");
    assert_eq!(n.kind, NotificationKind::PeerDown, "{n:?}");
    assert_eq!(n.src_node, NodeId(7));
    assert_eq!(n.slot, members[0].slot.id());
    assert_eq!(n.meta_index, Some(NODES));

    // Sends to the crashed node fail with PeerDown (once node 1 has heard of the crash).
    let to_7 = members[7].slot.ticket(0..SHARE, 0..1).expect("ticket to 7");
    let deadline = Instant::now() + WAIT;
    loop {
        let h = members[1]
            .terminus
            .send(&to_7, &SendOptions::new(), Data::Inline(b"anyone there?"))
            .expect("queued");
        match h.wait(Some(WAIT)) {
            Status::Failed(RejectReason::PeerDown) => break,
            other => {
                assert!(Instant::now() < deadline, "still {other:?} after {WAIT:?}");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    // The seven others carry on, with nothing left over from before the crash.
    let live: Vec<u32> = (0..7).collect();
    all_to_all(&mut members, &live, 1);
    for m in &mut members[..7] {
        assert!(
            m.queue.poll().is_none(),
            "node {}: an unexpected notification",
            m.node.id().0
        );
    }
}
