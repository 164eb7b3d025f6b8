//! Issue 16: NACKs and answers (`READ_RESP`, `ATOMIC_RESP`) are accepted only for
//! requests that were really sent to the peer they come from. A real engine (node 1) is
//! linked to an end the test plays itself (node 2, an authenticated member that turned
//! hostile): it sees what node 1 really sends, and forges NACKs and answers — for
//! requests never sent, sent to someone else, already answered, or aimed outside the
//! range a read named — with the reply slot's real key, which a read's target learns.
//! Each forgery is refused and counted, the client sees nothing of it, and the genuine
//! NACKs and answers still work. A peer that goes down with a read unanswered fails it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant as StdInstant};

use common::{atomic_req, inline, read_req, receiver_slot, reply_ticket, RawClient};
use hamlyn_core::{Instant, RejectReason, SendSpec};
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_fabric::{Fabric, Landing, PacketSink, PeerEvent, SharedBytes, SharedBytesMut};
use hamlyn_testkit::channel::{link, ChannelFabric};
use hamlyn_wire::rma::{AtomicBody, ReadBody};
use hamlyn_wire::stats::EngineCounters;
use hamlyn_wire::{Flags, Header, NodeId, NotifKind, Op, RequestId};

fn engine(node: u32, fabric: ChannelFabric) -> EngineHandle {
    let mut cfg = EngineConfig::embedded();
    cfg.node = node;
    cfg.incarnation = 7;
    EngineHandle::start_with_fabric(cfg, Some(Box::new(fabric))).unwrap()
}

/// What the test's end of the link received: whole packets.
#[derive(Default)]
struct Seen {
    packets: Vec<(Header, Vec<u8>)>,
    buf: Vec<u8>,
}

impl PacketSink for Seen {
    fn on_header(&mut self, _: NodeId, _: &Header, _: &[u8]) -> Landing {
        Landing::Accept
    }
    fn payload_buf(&mut self, h: &Header) -> SharedBytesMut<'_> {
        self.buf = vec![0; h.payload_len as usize];
        SharedBytesMut::from(&mut self.buf[..])
    }
    fn on_payload(&mut self, _: NodeId, h: &Header, _: &[u8]) {
        self.packets.push((*h, std::mem::take(&mut self.buf)));
    }
    fn on_peer(&mut self, _: PeerEvent) {}
    fn on_unconfirmed(&mut self, _: NodeId, _: &Header) {}
}

/// The test's end: node 2.
struct Peer {
    fabric: ChannelFabric,
    seen: Seen,
}

impl Peer {
    /// Waits for the next packet node 1 sends.
    fn next(&mut self) -> (Header, Vec<u8>) {
        let deadline = StdInstant::now() + Duration::from_secs(10);
        loop {
            self.fabric.poll(Instant(0), &mut self.seen, 64).unwrap();
            if !self.seen.packets.is_empty() {
                return self.seen.packets.remove(0);
            }
            assert!(StdInstant::now() < deadline, "node 1 sent nothing");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn send(&mut self, h: &Header, payload: &[u8]) {
        self.fabric
            .send(Instant(0), h, &[], &[SharedBytes::from(payload)])
            .unwrap();
    }
}

fn nack(request: RequestId, reason: RejectReason) -> Header {
    let mut n = Header::new(Op::Nack);
    n.src = NodeId(2);
    n.dst = NodeId(1);
    n.word = u64::from(reason.code());
    n.request = request;
    n
}

/// An answer packet from node 2 to the reply slot `slot` (key `key`) at `offset`.
fn answer(op: Op, slot: u32, key: u64, offset: u64, len: u32, request: RequestId) -> Header {
    let mut h = Header::new(op);
    h.flags = Flags::FIRST | Flags::LAST | Flags::NOTIFY | Flags::WAKE;
    h.src = NodeId(2);
    h.dst = NodeId(1);
    h.slot = hamlyn_wire::SlotId(slot);
    h.key = key;
    h.offset = offset;
    h.payload_len = len;
    h.delta = 1;
    h.request = request;
    h
}

/// Waits until node 1's counters satisfy `done`.
fn until(c: &RawClient, what: &str, done: impl Fn(&EngineCounters) -> bool) -> EngineCounters {
    let deadline = StdInstant::now() + Duration::from_secs(10);
    loop {
        let e = c.stats().engine;
        if done(&e) {
            return e;
        }
        assert!(StdInstant::now() < deadline, "{what}: {e:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn forged_nacks_and_answers_are_refused_and_genuine_ones_work() {
    let (fa, fb, cut) = link(NodeId(1), NodeId(2));
    let e1 = engine(1, fa);
    let mut peer = Peer {
        fabric: fb,
        seen: Seen::default(),
    };
    let mut c = RawClient::attach(e1.socket_path(), 1, 1, 256);
    c.open(0, 0);
    // The reply slot on node 1: reads and atomics answer into it.
    let (rslot, rkey, rmem) = receiver_slot(&c, 4096, 4);
    let reply = reply_ticket(&c, rslot, rkey, 4096);

    // 1. A write to node 2: the test sees it, with its request id.
    c.push(0, inline(2, 9, 0x1234, 1, 0, b"to node 2", 1))
        .unwrap();
    let (w, _) = peer.next();
    assert_eq!(w.op, Op::Write);
    c.wait_finished(0, 1);

    // Forged NACKs: for a request never sent, for a read never sent.
    let never = RequestId {
        terminus: w.request.terminus,
        seq: w.request.seq + 100,
    };
    peer.send(&nack(never, RejectReason::BadKey), &[]);
    let e = until(&c, "a NACK for nothing sent", |e| e.unmatched_nacks == 1);
    assert_eq!(e.nacks_received, 0);
    // The genuine NACK for the write reaches its terminus.
    peer.send(&nack(w.request, RejectReason::BadKey), &[]);
    until(&c, "the genuine NACK", |e| e.nacks_received == 1);
    let errors = c.errors();
    assert_eq!(errors.len(), 1, "only the genuine NACK: {errors:?}");
    assert_eq!(
        (
            errors[0].seq,
            RejectReason::from_code(u64::from(errors[0].status))
        ),
        (w.request.seq, Some(RejectReason::BadKey))
    );

    // 2. A read of 64 bytes from node 2 into the reply slot at 128.
    c.push(0, read_req(2, 9, 0x1234, 0, 64, reply, 128))
        .unwrap();
    let (r, body) = peer.next();
    assert_eq!(r.op, Op::ReadReq);
    let asked = ReadBody::decode(&body).unwrap();
    assert_eq!(asked.reply.key, rkey, "the target learns the reply key");
    let data: Vec<u8> = (0..64u8).collect();
    // Forged answers, all with the real reply key: another request id; the right one
    // but outside the range the read named; the right one as an atomic's answer.
    let other = RequestId {
        terminus: r.request.terminus,
        seq: r.request.seq + 7,
    };
    peer.send(&answer(Op::ReadResp, rslot, rkey, 128, 64, other), &data);
    peer.send(&answer(Op::ReadResp, rslot, rkey, 0, 64, r.request), &data);
    peer.send(
        &answer(Op::ReadResp, rslot, rkey, 160, 64, r.request),
        &data,
    );
    peer.send(
        &answer(Op::AtomicResp, rslot, rkey, 128, 8, r.request),
        &data[..8],
    );
    until(&c, "forged answers", |e| e.unexpected_answers == 4);
    std::thread::sleep(Duration::from_millis(50));
    assert!(c.queues[0].poll().is_none(), "a forged answer notified");
    let mut zero = vec![0u8; 4096];
    rmem.read(0, &mut zero).unwrap();
    assert!(zero.iter().all(|&b| b == 0), "a forged answer wrote");
    // The genuine answer, in two packets, segmented as a target engine does.
    let spec = SendSpec {
        src: NodeId(2),
        dst: NodeId(1),
        slot: reply.slot,
        key: reply.key,
        meta_index: reply.meta_first,
        offset: reply.offset + 128,
        len: 64,
        meta: &[],
        y: reply.y(),
        max_packets: None,
        notify: true,
        wake: true,
        word: 0,
        request: r.request,
    };
    for seg in spec.segment(32).unwrap().with_op(Op::ReadResp) {
        let at = seg.start as usize;
        peer.send(&seg.header, &data[at..at + seg.len as usize]);
    }
    let n = c.wait_notif(0).expect("ReadDone");
    assert_eq!(n.kind.get(), NotifKind::ReadDone as u16);
    let mut got = vec![0u8; 64];
    rmem.read(128, &mut got).unwrap();
    assert_eq!(got, data);
    // Answered: the same answer again is refused.
    peer.send(
        &answer(Op::ReadResp, rslot, rkey, 128, 64, r.request),
        &data,
    );
    until(&c, "a replayed answer", |e| e.unexpected_answers == 5);
    // And so is a NACK for the answered read.
    peer.send(&nack(r.request, RejectReason::BadKey), &[]);
    until(&c, "a NACK for an answered read", |e| {
        e.unmatched_nacks == 2
    });

    // 3. An atomic refused by node 2 with a genuine NACK: its terminus learns why.
    c.push(
        0,
        atomic_req(
            2,
            9,
            0x1234,
            0,
            hamlyn_wire::rma::AtomicOp::FetchAdd,
            0,
            1,
            reply,
            0,
        ),
    )
    .unwrap();
    let (a, body) = peer.next();
    assert_eq!(a.op, Op::AtomicReq);
    AtomicBody::decode(&body).unwrap();
    peer.send(&nack(a.request, RejectReason::NotPermitted), &[]);
    until(&c, "the atomic's NACK", |e| e.nacks_received == 2);
    let errors = c.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].seq, a.request.seq);
    // Its answer, after the NACK, is refused.
    peer.send(
        &answer(Op::AtomicResp, rslot, rkey, 0, 8, a.request),
        &[1; 8],
    );
    until(&c, "an answer after its NACK", |e| {
        e.unexpected_answers == 6
    });

    // 4. A read left unanswered when node 2 goes down fails with PeerDown.
    c.push(0, read_req(2, 9, 0x1234, 0, 8, reply, 0)).unwrap();
    let (lost, _) = peer.next();
    *cut.lock().unwrap() = true;
    until(&c, "the unanswered read", |e| e.answers_lost == 1);
    let errors = c.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        (
            errors[0].seq,
            RejectReason::from_code(u64::from(errors[0].status))
        ),
        (lost.request.seq, Some(RejectReason::PeerDown))
    );
    assert!(
        c.queues[0].poll().is_none(),
        "no notification for any forgery"
    );
}
