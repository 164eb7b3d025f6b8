//! Which packets of a rail the other end has confirmed (sans-IO): the sending side keeps
//! every packet the fabric accepted until the receiver acknowledges it, so that a lost
//! session can name exactly the packets that may not have arrived.
//!
//! A rail is one TCP connection: its packets arrive in the order they were written, so
//! neither side numbers them. The receiver counts the packets it delivered to its sink
//! *whole* (header, metadata and payload: [`Received::packets`]) and tells the count back
//! on the same connection, in the `offset` field of a heartbeat ([`Received::ack_due`]):
//! a cumulative acknowledgement. The sender keeps the header of every packet it accepted
//! for the rail, in order ([`Unacked::sent`]), and drops the first `n - acked` of them
//! when an acknowledgement of `n` arrives ([`Unacked::ack`]). When the connection's
//! session is lost, what is left ([`Unacked::drain`]) is every packet the receiver may
//! not have: the fabric reports each one to its sink
//! ([`crate::PacketSink::on_unconfirmed`]), and the engine turns the requests they
//! belong to into `PeerDown` failures. A packet acknowledged was delivered; a packet
//! reported unconfirmed may or may not have been (its acknowledgement may be what was
//! lost), never neither.
//!
//! Memory is bounded: a rail keeps at most [`MAX_UNACKED`] headers; past that the fabric
//! answers `Full` (back-pressure, as for a full send queue). The receiver acknowledges
//! every [`ACK_EVERY`] packets, so a sender streaming at full speed never waits on the
//! bound, and on every timer tick of the fabric otherwise.

use std::collections::VecDeque;

use hamlyn_wire::Header;

/// Packets a rail keeps unacknowledged at most (then `Full`).
pub(crate) const MAX_UNACKED: usize = 4096;

/// A receiver acknowledges at the latest once this many packets arrived since its last
/// acknowledgement (well below [`MAX_UNACKED`], so a streaming sender is acknowledged
/// long before it hits the bound).
pub(crate) const ACK_EVERY: u64 = 512;

/// Headers a rail's queue keeps room for when it empties ([`Unacked::ack`]).
const KEPT: usize = ACK_EVERY as usize;

/// An acknowledgement that cannot be right.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum AckError {
    /// The peer acknowledged more packets than were sent on the rail.
    #[error("acknowledged {acked} packets, {sent} were sent")]
    TooMany {
        /// The count the peer acknowledged.
        acked: u64,
        /// Packets sent on the rail.
        sent: u64,
    },
}

/// The sending side of one rail: packets accepted and not yet acknowledged.
#[derive(Debug, Default)]
pub(crate) struct Unacked {
    /// Headers of the packets after the first `acked`, in the order they were accepted.
    waiting: VecDeque<Header>,
    /// Packets the receiver acknowledged (cumulative).
    acked: u64,
}

impl Unacked {
    /// Whether one more packet may be accepted.
    pub(crate) fn has_room(&self) -> bool {
        self.waiting.len() < MAX_UNACKED
    }

    /// Packets waiting for an acknowledgement.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// The fabric accepted a packet for the rail (in the rail's byte order).
    pub(crate) fn sent(&mut self, header: &Header) {
        self.waiting.push_back(*header);
    }

    /// The receiver says it has the first `count` packets of the rail; returns how many
    /// were newly acknowledged. An older (smaller) count acknowledges nothing.
    pub(crate) fn ack(&mut self, count: u64) -> Result<usize, AckError> {
        let sent = self.acked + self.waiting.len() as u64;
        if count > sent {
            return Err(AckError::TooMany { acked: count, sent });
        }
        let Some(new) = count.checked_sub(self.acked) else {
            return Ok(0);
        };
        // `new <= waiting.len()`, checked above.
        let new = usize::try_from(new).unwrap_or(usize::MAX);
        self.waiting.drain(..new.min(self.waiting.len()));
        self.acked = count;
        // What a burst made it hold goes back, down to what a steady sender keeps
        // between two acknowledgements (one every ACK_EVERY packets, or every tick):
        // freeing all of it made every acknowledgement cycle allocate again as the
        // queue grew back (four to eight times per 512 packets of a plain ping-pong).
        if self.waiting.is_empty() && self.waiting.capacity() > 2 * KEPT {
            self.waiting.shrink_to(KEPT);
        }
        Ok(new)
    }

    /// The rail is gone: the headers of every packet not acknowledged, oldest first.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Header> + '_ {
        self.waiting.drain(..)
    }
}

/// The receiving side of one rail: packets delivered and how many were acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Received {
    /// Packets delivered whole to the sink.
    delivered: u64,
    /// The count last sent back.
    told: u64,
}

impl Received {
    /// Adds `n` packets delivered whole (each header shown to the sink, its payload
    /// placed or discarded).
    pub(crate) fn packets(&mut self, n: u64) {
        self.delivered += n;
    }

    /// The count to acknowledge now, if any: with `tick` (a timer tick, or a heartbeat
    /// about to go anyway) whenever something is unacknowledged, else once
    /// [`ACK_EVERY`] packets are.
    pub(crate) fn ack_due(&self, tick: bool) -> Option<u64> {
        let pending = self.delivered - self.told;
        (pending >= ACK_EVERY || (tick && pending > 0)).then_some(self.delivered)
    }

    /// The count every acknowledgement carries (a heartbeat carries it too).
    pub(crate) fn delivered(&self) -> u64 {
        self.delivered
    }

    /// `count` was sent back.
    pub(crate) fn told(&mut self, count: u64) {
        self.told = self.told.max(count);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use hamlyn_wire::{Op, RequestId};
    use proptest::prelude::*;

    fn header(n: u64) -> Header {
        let mut h = Header::new(Op::Write);
        h.offset = n;
        h.request = RequestId {
            terminus: 1,
            seq: n as u32,
        };
        h
    }

    /// A steady sender's queue keeps its room from one acknowledgement to the next (no
    /// allocation per cycle); what a burst made it hold goes back down to `KEPT`.
    #[test]
    fn an_empty_queue_keeps_room_for_a_steady_sender_and_gives_back_a_burst() {
        let mut u = Unacked::default();
        let mut sent = 0u64;
        let mut cycle = |u: &mut Unacked, n: u64| {
            for _ in 0..n {
                u.sent(&header(sent));
                sent += 1;
            }
            assert_eq!(u.ack(sent).unwrap(), n as usize);
        };
        cycle(&mut u, ACK_EVERY);
        let room = u.waiting.capacity();
        assert!(room >= KEPT);
        for _ in 0..4 {
            cycle(&mut u, ACK_EVERY);
            assert_eq!(u.waiting.capacity(), room, "kept: no allocation per cycle");
        }
        cycle(&mut u, MAX_UNACKED as u64);
        assert!(
            u.waiting.capacity() <= 2 * KEPT,
            "a burst's room given back"
        );
        assert!(u.waiting.capacity() >= KEPT);
    }

    #[test]
    fn acknowledging_more_than_was_sent_is_refused() {
        let mut u = Unacked::default();
        u.sent(&header(0));
        assert_eq!(u.ack(2), Err(AckError::TooMany { acked: 2, sent: 1 }));
        assert_eq!(u.ack(1), Ok(1));
        assert_eq!(u.ack(0), Ok(0), "an old count acknowledges nothing");
        assert_eq!(u.len(), 0);
    }

    #[test]
    fn acks_are_due_every_so_many_packets_or_on_a_tick() {
        let mut r = Received::default();
        assert_eq!(r.ack_due(true), None);
        r.packets(1);
        assert_eq!((r.ack_due(false), r.ack_due(true)), (None, Some(1)));
        r.packets(ACK_EVERY - 1);
        assert_eq!(r.ack_due(false), Some(ACK_EVERY));
        r.told(ACK_EVERY);
        assert_eq!(r.ack_due(true), None);
    }

    /// One step of [`acks_leave_exactly_the_unconfirmed`].
    #[derive(Clone, Debug)]
    enum Step {
        /// The sender accepts a packet (if there is room).
        Send,
        /// The receiver gets the next `n` packets written.
        Deliver(u8),
        /// The receiver sends an acknowledgement; `tick` or not.
        Ack(bool),
        /// An acknowledgement in flight arrives (the oldest one).
        Arrive,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => Just(Step::Send),
            3 => (1u8..40).prop_map(Step::Deliver),
            2 => any::<bool>().prop_map(Step::Ack),
            2 => Just(Step::Arrive),
        ]
    }

    proptest! {
        /// Against a model (a list of sent packets and how far the receiver got): the
        /// headers left unacknowledged when the rail dies are exactly the packets after
        /// the last acknowledgement that arrived, in order; so every packet is either
        /// delivered or reported, and no delivered-and-acknowledged packet is reported.
        #[test]
        fn acks_leave_exactly_the_unconfirmed(
            steps in proptest::collection::vec(step(), 1..400),
        ) {
            let mut u = Unacked::default();
            let mut r = Received::default();
            let mut sent: Vec<u64> = Vec::new();
            let mut delivered = 0u64;
            let mut in_flight: VecDeque<u64> = VecDeque::new();
            let mut acked = 0u64;
            for st in steps {
                match st {
                    Step::Send => {
                        if u.has_room() {
                            let n = sent.len() as u64;
                            u.sent(&header(n));
                            sent.push(n);
                        }
                    }
                    Step::Deliver(k) => {
                        let k = u64::from(k).min(sent.len() as u64 - delivered);
                        r.packets(k);
                        delivered += k;
                    }
                    Step::Ack(tick) => {
                        if let Some(c) = r.ack_due(tick) {
                            prop_assert_eq!(c, delivered);
                            r.told(c);
                            in_flight.push_back(c);
                        }
                    }
                    Step::Arrive => {
                        if let Some(c) = in_flight.pop_front() {
                            u.ack(c).unwrap();
                            acked = acked.max(c);
                        }
                    }
                }
                prop_assert!(u.len() <= MAX_UNACKED);
                prop_assert_eq!(u.len() as u64, sent.len() as u64 - acked);
            }
            let left: Vec<u64> = u.drain().map(|h| h.offset).collect();
            prop_assert_eq!(&left[..], &sent[acked as usize..]);
            prop_assert!(acked <= delivered);
        }
    }
}
