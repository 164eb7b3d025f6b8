//! What this node expects back from its peers, sans-IO (issue 16: "NACKs and replies are
//! accepted only for requests that were really sent to that peer — a write ticket cannot
//! forge them either").
//!
//! An authenticated link proves a packet comes from a member of the cluster, not that it
//! answers anything. A member that once served a read knows the reader's reply ticket; one
//! that holds a write ticket to a reply slot could aim `READ_RESP` / `ATOMIC_RESP` packets at
//! it whenever it liked, and any member could NACK requests it never received, failing a
//! client's delivered sends. So the engine records what it sends to each peer, and an
//! answer or a NACK from a peer is taken only when it matches:
//!
//! - **Reads and atomics** ([`Expected::expect_answer`]) are recorded exactly until their
//!   answer has arrived in full, a NACK from that peer refused them, or the peer went down
//!   ([`Expected::peer_down`] returns them, to be failed with `PeerDown`). An answer packet
//!   must come from the peer the request went to, carry its request id and operation, and
//!   land inside the reply range the request named ([`Expected::check_answer`]). At most
//!   [`MAX_ANSWERS`] are awaited at once; past that a new read waits in its terminus
//!   (back-pressure, [`ExpectFull`]).
//! - **Writes** ([`Expected::sent_write`]) are remembered per peer for the last
//!   [`WRITE_WINDOW`] requests sent to it: a NACK names a request of that window or is
//!   refused. The window is larger than what a sender can have outstanding to one peer (the
//!   TCP fabric holds at most 4096 unacknowledged packets per rail, and a receiver stops
//!   reading while 4096 of its NACKs wait), so a genuine NACK is never outside it in
//!   practice; one that is (a peer that NACKs a request this old) is refused and counted,
//!   like a forged one.
//!
//! Memory is bounded: per peer one window (grown with the writes sent to it, up to
//! [`WRITE_WINDOW`] ids, freed when it goes down) and the awaited answers (bounded in
//! total).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use hamlyn_wire::{Header, NodeId, Op, RequestId, SlotId};

/// Hashes for the maps here, whose keys this node chose itself: its own request ids and
/// the peers it sent them to. A multiply and a fold per word instead of SipHash: the
/// window's two to four hashes per write sent cost about 500 instructions, a seventh of
/// the sending engine's work for an 8-byte message over TCP (2026-11-25). A peer only
/// chooses keys that are looked up (a NACK's or an answer's request id), never ones that
/// are stored, so it cannot crowd the tables however it picks them.
#[derive(Clone, Copy, Debug, Default)]
struct OwnKeys;

impl BuildHasher for OwnKeys {
    type Hasher = OwnKeyHasher;
    fn build_hasher(&self) -> OwnKeyHasher {
        OwnKeyHasher(0)
    }
}

/// [`OwnKeys`]' hasher (the Fx hash's step: rotate, xor, multiply).
#[derive(Clone, Copy, Debug)]
struct OwnKeyHasher(u64);

/// An odd constant with well-spread bits (2^64 divided by the golden ratio).
const SPREAD: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for OwnKeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(SPREAD);
    }
    fn finish(&self) -> u64 {
        // The table takes its bucket from the low bits and a tag from the top ones: fold
        // the well-mixed high half into the low one.
        self.0 ^ (self.0 >> 32)
    }
}

/// Reads and atomics awaited at once, over all peers.
pub const MAX_ANSWERS: usize = 65_536;
/// Write requests remembered per peer, for matching NACKs.
pub const WRITE_WINDOW: usize = 32_768;

/// The answer a read or atomic sent to a peer is awaited as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// `READ_RESP` or `ATOMIC_RESP`.
    pub op: Op,
    /// The reply slot (on this node).
    pub slot: SlotId,
    /// Where in the reply slot the answer lands: `start..start + len`, in the slot's
    /// offsets (what answer packets carry in `offset`).
    pub start: u64,
    /// Bytes of the answer.
    pub len: u64,
}

/// Why an answer packet was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unexpected {
    /// No read or atomic with this request id is awaited from this peer.
    #[error("no request of this id was sent to that peer")]
    NotAwaited,
    /// The request was awaited, but the packet's operation, slot or range differs from it.
    #[error("the answer does not match its request (operation, slot or range)")]
    Mismatch,
}

/// As many reads and atomics are awaited as the node keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{MAX_ANSWERS} answers are awaited already")]
pub struct ExpectFull;

/// An answer being received: what was asked, and how many bytes are still to come.
#[derive(Clone, Copy, Debug)]
struct Awaited {
    answer: Answer,
    left: u64,
}

/// The write requests last sent to one peer: a ring in sending order and a count per id
/// (one id may be sent more than once: a request's packets, a retried packet).
#[derive(Debug)]
struct Window {
    ring: Vec<u64>,
    next: usize,
    count: HashMap<u64, u32, OwnKeys>,
}

impl Window {
    fn new() -> Window {
        // Grown as writes are sent, not set aside up front: a peer written to a few
        // times costs a few entries, and only a busy one the whole window (≈ 0.9 MB).
        Window {
            ring: Vec::new(),
            next: 0,
            count: HashMap::with_hasher(OwnKeys),
        }
    }

    fn push(&mut self, id: u64) {
        if self.ring.len() < WRITE_WINDOW {
            self.ring.push(id);
        } else {
            let old = std::mem::replace(&mut self.ring[self.next], id);
            if let Some(n) = self.count.get_mut(&old) {
                *n -= 1;
                if *n == 0 {
                    self.count.remove(&old);
                }
            }
            self.next = (self.next + 1) % WRITE_WINDOW;
        }
        *self.count.entry(id).or_insert(0) += 1;
    }

    fn contains(&self, id: u64) -> bool {
        self.count.contains_key(&id)
    }
}

/// What this node awaits from each peer; see the module documentation.
#[derive(Debug, Default)]
pub struct Expected {
    answers: HashMap<(NodeId, u64), Awaited, OwnKeys>,
    writes: HashMap<NodeId, Window, OwnKeys>,
}

/// What a NACK from a peer was found to refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nacked {
    /// A read or atomic awaited from that peer: no longer awaited.
    Answer,
    /// A write recently sent to that peer.
    Write,
    /// Nothing sent to that peer: the NACK is refused.
    Unknown,
}

impl Expected {
    /// Nothing sent, nothing awaited.
    pub fn new() -> Expected {
        Expected::default()
    }

    /// A read or atomic `request` is about to go to `peer`; its answer is awaited as
    /// `answer`. Recording it again (a packet retried after `Full`) replaces the record.
    pub fn expect_answer(
        &mut self,
        peer: NodeId,
        request: RequestId,
        answer: Answer,
    ) -> Result<(), ExpectFull> {
        let key = (peer, request.to_u64());
        if self.answers.len() >= MAX_ANSWERS && !self.answers.contains_key(&key) {
            return Err(ExpectFull);
        }
        self.answers.insert(
            key,
            Awaited {
                answer,
                left: answer.len,
            },
        );
        Ok(())
    }

    /// The read or atomic `request` to `peer` is no longer awaited: it never left (its
    /// send failed), or its answer could not be taken here (refused by the reply slot:
    /// the request fails).
    pub fn cancel(&mut self, peer: NodeId, request: RequestId) {
        self.answers.remove(&(peer, request.to_u64()));
    }

    /// Whether as many answers are awaited as the node keeps.
    pub fn is_full(&self) -> bool {
        self.answers.len() >= MAX_ANSWERS
    }

    /// Answers awaited now.
    pub fn awaited(&self) -> usize {
        self.answers.len()
    }

    /// Peers with a window of recent writes.
    pub fn peers_with_writes(&self) -> usize {
        self.writes.len()
    }

    /// A write request went to `peer` (called once per packet handed to the fabric, or
    /// once per request: a NACK of any of its packets names the request).
    pub fn sent_write(&mut self, peer: NodeId, request: RequestId) {
        self.writes
            .entry(peer)
            .or_insert_with(Window::new)
            .push(request.to_u64());
    }

    /// Whether the answer packet `h` that came from `from` answers a read or atomic sent
    /// to that peer, and lands inside the range it named.
    pub fn check_answer(&self, from: NodeId, h: &Header) -> Result<(), Unexpected> {
        let a = self
            .answers
            .get(&(from, h.request.to_u64()))
            .ok_or(Unexpected::NotAwaited)?;
        let end = h.offset.checked_add(u64::from(h.payload_len));
        let inside = h.offset >= a.answer.start
            && end.is_some_and(|e| e <= a.answer.start.saturating_add(a.answer.len));
        if h.op != a.answer.op || h.slot != a.answer.slot || !inside {
            return Err(Unexpected::Mismatch);
        }
        Ok(())
    }

    /// The answer packet `h` from `from` (checked by [`Expected::check_answer`]) was
    /// committed. Whether that completed the answer (it is then no longer awaited).
    pub fn answered(&mut self, from: NodeId, h: &Header) -> bool {
        let key = (from, h.request.to_u64());
        let Some(a) = self.answers.get_mut(&key) else {
            return false;
        };
        a.left = a.left.saturating_sub(u64::from(h.payload_len));
        if a.left == 0 {
            self.answers.remove(&key);
            return true;
        }
        false
    }

    /// A NACK from `from` naming `request`: what it refuses (a read or atomic is then no
    /// longer awaited).
    pub fn nack(&mut self, from: NodeId, request: RequestId) -> Nacked {
        let id = request.to_u64();
        if self.answers.remove(&(from, id)).is_some() {
            return Nacked::Answer;
        }
        if self.writes.get(&from).is_some_and(|w| w.contains(id)) {
            return Nacked::Write;
        }
        Nacked::Unknown
    }

    /// `peer` is down: nothing more will come from it. Returns the reads and atomics that
    /// were still awaited from it, sorted (each fails with `PeerDown`).
    pub fn peer_down(&mut self, peer: NodeId) -> Vec<RequestId> {
        self.writes.remove(&peer);
        let mut lost = Vec::new();
        self.answers.retain(|&(node, id), _| {
            if node == peer {
                lost.push(RequestId::from_u64(id));
            }
            node != peer
        });
        lost.sort_unstable_by_key(|r| r.to_u64());
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn req(seq: u32) -> RequestId {
        RequestId {
            terminus: 0x105,
            seq,
        }
    }

    fn answer_packet(slot: u32, offset: u64, len: u32, request: RequestId) -> Header {
        let mut h = Header::new(Op::ReadResp);
        h.slot = SlotId(slot);
        h.offset = offset;
        h.payload_len = len;
        h.request = request;
        h
    }

    fn read_answer(slot: u32, start: u64, len: u64) -> Answer {
        Answer {
            op: Op::ReadResp,
            slot: SlotId(slot),
            start,
            len,
        }
    }

    #[test]
    fn an_answer_is_taken_only_from_the_peer_asked_and_inside_its_range() {
        let mut e = Expected::new();
        let (p, q) = (NodeId(2), NodeId(3));
        e.expect_answer(p, req(1), read_answer(7, 4096, 8192))
            .unwrap();
        let good = answer_packet(7, 4096, 4096, req(1));
        assert_eq!(e.check_answer(p, &good), Ok(()));
        assert_eq!(e.check_answer(q, &good), Err(Unexpected::NotAwaited));
        assert_eq!(
            e.check_answer(p, &answer_packet(7, 4096, 1, req(2))),
            Err(Unexpected::NotAwaited)
        );
        for bad in [
            answer_packet(8, 4096, 4096, req(1)),  // another slot
            answer_packet(7, 4095, 4096, req(1)),  // starts before
            answer_packet(7, 8192, 4097, req(1)),  // ends after
            answer_packet(7, u64::MAX, 2, req(1)), // wraps
        ] {
            assert_eq!(
                e.check_answer(p, &bad),
                Err(Unexpected::Mismatch),
                "{bad:?}"
            );
        }
        let mut atomic = good;
        atomic.op = Op::AtomicResp;
        assert_eq!(e.check_answer(p, &atomic), Err(Unexpected::Mismatch));
        assert!(!e.answered(p, &good));
        assert!(e.answered(p, &answer_packet(7, 8192, 4096, req(1))));
        assert_eq!(e.awaited(), 0, "a complete answer is no longer awaited");
        assert_eq!(e.check_answer(p, &good), Err(Unexpected::NotAwaited));
    }

    #[test]
    fn nacks_name_something_sent_to_that_peer_or_are_refused() {
        let mut e = Expected::new();
        let (p, q) = (NodeId(2), NodeId(3));
        e.sent_write(p, req(10));
        e.expect_answer(q, req(11), read_answer(1, 0, 8)).unwrap();
        assert_eq!(e.nack(q, req(10)), Nacked::Unknown, "the write went to p");
        assert_eq!(e.nack(p, req(10)), Nacked::Write);
        assert_eq!(e.nack(p, req(11)), Nacked::Unknown, "the read went to q");
        assert_eq!(e.nack(q, req(11)), Nacked::Answer);
        assert_eq!(
            e.nack(q, req(11)),
            Nacked::Unknown,
            "a read is refused once"
        );
    }

    #[test]
    fn a_down_peer_fails_its_awaited_answers_and_forgets_its_writes() {
        let mut e = Expected::new();
        let (p, q) = (NodeId(2), NodeId(3));
        e.sent_write(p, req(1));
        e.expect_answer(p, req(3), read_answer(1, 0, 8)).unwrap();
        e.expect_answer(p, req(2), read_answer(1, 8, 8)).unwrap();
        e.expect_answer(q, req(4), read_answer(1, 16, 8)).unwrap();
        assert_eq!(e.peer_down(p), vec![req(2), req(3)]);
        assert_eq!(e.nack(p, req(1)), Nacked::Unknown);
        assert_eq!(e.peers_with_writes(), 0);
        assert_eq!(e.awaited(), 1);
    }

    #[test]
    #[cfg_attr(miri, ignore = "65,536 inserts: minutes under miri")]
    fn answers_awaited_are_bounded() {
        let mut e = Expected::new();
        for i in 0..MAX_ANSWERS as u32 {
            e.expect_answer(NodeId(1), req(i), read_answer(1, 0, 8))
                .unwrap();
        }
        assert!(e.is_full());
        assert_eq!(
            e.expect_answer(NodeId(1), req(u32::MAX), read_answer(1, 0, 8)),
            Err(ExpectFull)
        );
        // A retried request replaces its own record.
        assert_eq!(
            e.expect_answer(NodeId(1), req(0), read_answer(1, 0, 8)),
            Ok(())
        );
        e.cancel(NodeId(1), req(0));
        assert!(!e.is_full());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        /// The write window against a model: a NACK matches exactly the ids among the
        /// last `WRITE_WINDOW` sent. Ids come from a space small enough that they repeat
        /// (a repeated id stays until its last sending leaves the window), and the probe
        /// is one of the ids sent, early or late, or one never sent.
        #[test]
        #[cfg_attr(miri, ignore = "tens of thousands of inserts per case: hours under miri")]
        fn the_write_window_holds_exactly_the_last_requests(
            ids in proptest::collection::vec(0u32..50_000, 0..(WRITE_WINDOW + 4000)),
            pick in any::<prop::sample::Index>(),
            never in any::<bool>(),
        ) {
            let mut e = Expected::new();
            for &i in &ids {
                e.sent_write(NodeId(1), req(i));
            }
            let probe = if never || ids.is_empty() {
                60_000
            } else {
                ids[pick.index(ids.len())]
            };
            let recent = &ids[ids.len().saturating_sub(WRITE_WINDOW)..];
            let want = if recent.contains(&probe) { Nacked::Write } else { Nacked::Unknown };
            prop_assert_eq!(e.nack(NodeId(1), req(probe)), want);
        }
    }
}
