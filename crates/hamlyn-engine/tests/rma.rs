//! One-sided operations executed by the target engine: remote read, compare-and-swap and
//! fetch-add, intra-node and across two engines; permissions, write-inhibit and a lock.
#![allow(clippy::unwrap_used)]

mod common;

use common::{atomic_req, read_req, reply_ticket, slot_with_perms, RawClient};
use hamlyn_core::RejectReason;
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_shm::region::ShmRegion;
use hamlyn_testkit::channel::link;
use hamlyn_wire::control::{perm, Reply, Request};
use hamlyn_wire::rma::AtomicOp;
use hamlyn_wire::{NodeId, NotifKind};

fn word(r: &ShmRegion, off: usize) -> u64 {
    let mut b = [0u8; 8];
    r.read(off, &mut b).unwrap();
    u64::from_le_bytes(b)
}

fn status(c: &mut RawClient, pos: u64) -> Option<RejectReason> {
    c.wait_finished(0, pos + 1);
    c.errors()
        .iter()
        .find(|e| u64::from(e.seq) == pos)
        .and_then(|e| RejectReason::from_code(u64::from(e.status)))
}

#[test]
fn local_read_and_atomics_are_executed_by_the_engine() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let mut owner = RawClient::attach(engine.socket_path(), 1, 1, 256);
    let mut user = RawClient::attach(engine.socket_path(), 1, 1, 256);
    let (src, skey, data) = slot_with_perms(
        &owner,
        300 * 1024,
        1,
        perm::WRITE | perm::READ | perm::ATOMIC,
    );
    let pattern: Vec<u8> = (0..300 * 1024u32).map(|i| (i % 253) as u8).collect();
    data.write(0, &pattern).unwrap();
    let (rslot, rkey, reply) = slot_with_perms(&user, 300 * 1024, 1, perm::WRITE);
    let rt = reply_ticket(&user, rslot, rkey, 300 * 1024);
    user.open(0, 0);
    owner.open(0, 0);

    // Read 290 KiB at offset 1000: more than one intra-node packet, one ReadDone.
    let len = 290 * 1024u64;
    let p = user
        .push(0, read_req(user.node, src, skey, 1000, len, rt, 64))
        .unwrap();
    let n = user.wait_notif(0).unwrap();
    assert_eq!(n.kind(), Some(NotifKind::ReadDone));
    assert_eq!(status(&mut user, p), None);
    let mut got = vec![0u8; len as usize];
    reply.read(64, &mut got).unwrap();
    assert!(
        got[..] == pattern[1000..1000 + len as usize],
        "read byte-exact"
    );

    // Compare-and-swap and fetch-add on the word at 8; the old value comes back.
    data.write(8, &0u64.to_le_bytes()).unwrap();
    let cas = |c: &mut RawClient, cmp, new| {
        c.push(
            0,
            atomic_req(c.node, src, skey, 8, AtomicOp::CompareSwap, cmp, new, rt, 0),
        )
        .unwrap()
    };
    cas(&mut user, 0, 1);
    let n = user.wait_notif(0).unwrap();
    assert_eq!((n.kind(), n.word.get()), (Some(NotifKind::AtomicDone), 0));
    assert_eq!(word(&reply, 0), 0, "old value written into the reply slot");
    assert_eq!(word(&data, 8), 1);
    cas(&mut user, 0, 2);
    assert_eq!(
        user.wait_notif(0).unwrap().word.get(),
        1,
        "failed compare returns the current value"
    );
    assert_eq!(word(&data, 8), 1, "and changes nothing");
    user.push(
        0,
        atomic_req(user.node, src, skey, 8, AtomicOp::FetchAdd, 0, 5, rt, 0),
    )
    .unwrap();
    assert_eq!(user.wait_notif(0).unwrap().word.get(), 1);
    assert_eq!(word(&data, 8), 6);

    // Unaligned atomics, reads past the end and a wrong key are refused.
    let p = user
        .push(
            0,
            atomic_req(user.node, src, skey, 4, AtomicOp::FetchAdd, 0, 1, rt, 0),
        )
        .unwrap();
    assert_eq!(status(&mut user, p), Some(RejectReason::OutOfBounds));
    let p = user
        .push(0, read_req(user.node, src, skey, 300 * 1024 - 8, 16, rt, 0))
        .unwrap();
    assert_eq!(status(&mut user, p), Some(RejectReason::OutOfBounds));
    let p = user
        .push(0, read_req(user.node, src, skey ^ 1, 0, 16, rt, 0))
        .unwrap();
    assert_eq!(status(&mut user, p), Some(RejectReason::BadKey));
    // A reply that would not fit the reply ticket changes nothing at the target.
    let p = user
        .push(
            0,
            atomic_req(
                user.node,
                src,
                skey,
                8,
                AtomicOp::FetchAdd,
                0,
                1,
                rt,
                300 * 1024 - 4,
            ),
        )
        .unwrap();
    assert_eq!(status(&mut user, p), Some(RejectReason::OutOfBounds));
    assert_eq!(word(&data, 8), 6);

    // Write-inhibit (Thekkath): reads still served, atomics refused.
    assert_eq!(
        owner.call(Request::Inhibit {
            slot: src,
            on: true
        }),
        Reply::Ok
    );
    let p = user
        .push(
            0,
            atomic_req(user.node, src, skey, 8, AtomicOp::FetchAdd, 0, 1, rt, 0),
        )
        .unwrap();
    assert_eq!(status(&mut user, p), Some(RejectReason::Inhibited));
    let p = user
        .push(0, read_req(user.node, src, skey, 8, 8, rt, 0))
        .unwrap();
    assert_eq!(status(&mut user, p), None);
    assert_eq!(
        user.wait_notif(0).unwrap().kind(),
        Some(NotifKind::ReadDone)
    );
    assert_eq!(word(&reply, 0), 6);

    // A slot without read or atomic permission refuses both.
    let (wo, wokey, _) = slot_with_perms(&owner, 4096, 1, perm::WRITE);
    let p = user
        .push(0, read_req(user.node, wo, wokey, 0, 8, rt, 0))
        .unwrap();
    assert_eq!(status(&mut user, p), Some(RejectReason::NotPermitted));
    let p = user
        .push(
            0,
            atomic_req(user.node, wo, wokey, 0, AtomicOp::FetchAdd, 0, 1, rt, 0),
        )
        .unwrap();
    assert_eq!(status(&mut user, p), Some(RejectReason::NotPermitted));
    let _ = owner.errors();
}

#[test]
fn remote_read_and_a_fetch_add_lock_across_two_engines() {
    let (fa, fb, _cut) = link(NodeId(1), NodeId(2));
    let start = |node, f| {
        let mut cfg = EngineConfig::embedded();
        cfg.node = node;
        cfg.incarnation = 7;
        EngineHandle::start_with_fabric(cfg, Some(Box::new(f))).unwrap()
    };
    let (ea, eb) = (start(1, fa), start(2, fb));
    let mut a = RawClient::attach(ea.socket_path(), 1, 1, 1024);
    let b = RawClient::attach(eb.socket_path(), 1, 1, 1024);
    let mut b2 = RawClient::attach(eb.socket_path(), 1, 1, 1024);
    // The shared counter lives on node 2.
    let (ctr, ckey, counter) =
        slot_with_perms(&b, 4096, 1, perm::WRITE | perm::READ | perm::ATOMIC);
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 3 % 256) as u8).collect();
    counter.write(0, &pattern).unwrap();
    counter.write(0, &0u64.to_le_bytes()).unwrap();
    let (ra, rak, reply_a) = slot_with_perms(&a, 8192, 1, perm::WRITE);
    let (rb, rbk, _) = slot_with_perms(&b2, 64, 1, perm::WRITE);
    let ta = reply_ticket(&a, ra, rak, 8192);
    let tb = reply_ticket(&b2, rb, rbk, 64);
    a.open(0, 0);
    b2.open(0, 0);

    // Remote read of 4 KiB from node 2 into node 1.
    a.push(0, read_req(2, ctr, ckey, 8, 4088, ta, 100)).unwrap();
    let n = a.wait_notif(0).unwrap();
    assert_eq!((n.kind(), n.src_node.get()), (Some(NotifKind::ReadDone), 2));
    let mut got = vec![0u8; 4088];
    reply_a.read(100, &mut got).unwrap();
    assert!(got[..] == pattern[8..], "remote read byte-exact");

    // Both nodes take turns incrementing the counter with fetch-add: a remote client on
    // node 1 and a local one on node 2. Every old value is distinct and the sum is exact.
    let rounds = 200u64;
    let mut olds = Vec::new();
    for _ in 0..rounds {
        a.push(
            0,
            atomic_req(2, ctr, ckey, 0, AtomicOp::FetchAdd, 0, 1, ta, 0),
        )
        .unwrap();
        b2.push(
            0,
            atomic_req(2, ctr, ckey, 0, AtomicOp::FetchAdd, 0, 1, tb, 0),
        )
        .unwrap();
        olds.push(a.wait_notif(0).unwrap().word.get());
        olds.push(b2.wait_notif(0).unwrap().word.get());
    }
    olds.sort_unstable();
    assert_eq!(
        olds,
        (0..2 * rounds).collect::<Vec<_>>(),
        "each increment saw a distinct old value"
    );
    assert_eq!(word(&counter, 0), 2 * rounds);

    // A refused remote atomic comes back as an error on the requesting terminus.
    let p = a
        .push(
            0,
            atomic_req(2, ctr, ckey ^ 1, 0, AtomicOp::FetchAdd, 0, 1, ta, 0),
        )
        .unwrap();
    a.wait_finished(0, p + 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let errs = a.errors();
        if let Some(e) = errs.iter().find(|e| u64::from(e.seq) == p) {
            assert_eq!(
                RejectReason::from_code(u64::from(e.status)),
                Some(RejectReason::BadKey)
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no NACK for the refused atomic"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(
        word(&counter, 0),
        2 * rounds,
        "the refused atomic changed nothing"
    );
}
