//! Wake-ups owed by a visit of a terminus, checked with one fence at its end (issue 14
//! item 3: "batch notifications and wake-ups").
//!
//! Every notification the engine posts and every request it completes is followed by
//! the producer's side of the sleep protocol (`hamlyn_shm::wake`): the fence F2, then a
//! look at the consumer's wake word. One F2 serves any number of publications made
//! before it, so while a visit runs (`EngineState::visit`: one request, or a quantum of
//! up to 16 small ones) the posts and completion words are published without it, and
//! the queues and termini they concern are written down here. The visit's end issues
//! one F2 and looks at each word (`Clients::flush_wakes`). A single message then pays one
//! fence instead of two, a quantum of sixteen one instead of thirty-two; a sleeping
//! receiver is woken at the end of the visit, a few microseconds at most after its entry
//! was published, instead of at once. So a sender may see its request finished (the
//! completion word) a moment before the receiver's eventfd is poked or its futex woken:
//! the entry itself is in the queue before either.
//!
//! Bounded: one queue and one terminus, no allocation. A publication outside a visit,
//! or to a second queue within one, is checked at once, as before.

use hamlyn_core::QueueId;

/// The queue and terminus whose wake words a visit has yet to look at. One of each: a
/// visit serves one terminus, whose messages mostly go to one queue; a second queue's
/// post is checked at once.
#[derive(Debug, Default)]
pub(crate) struct WakeBatch {
    /// A visit is running: publications are batched.
    open: bool,
    /// The queue posted to with the sender's WAKE flag.
    queue: Option<QueueId>,
    /// The terminus (client, index) whose completion word moved.
    terminus: Option<(u32, u16)>,
}

impl WakeBatch {
    /// A visit starts: from now on publications are written down, not checked.
    #[inline]
    pub(crate) fn open(&mut self) {
        self.open = true;
    }

    /// Whether queue `q`'s wake-up is written down for the visit's end; `false`: no
    /// visit runs, or it owes another queue's already — the caller wakes now.
    #[inline]
    pub(crate) fn owe_queue(&mut self, q: QueueId) -> bool {
        self.open && *self.queue.get_or_insert(q) == q
    }

    /// As [`WakeBatch::owe_queue`], for terminus `t` of client `cid`'s completion word.
    #[inline]
    pub(crate) fn owe_terminus(&mut self, cid: u32, t: u16) -> bool {
        self.open && *self.terminus.get_or_insert((cid, t)) == (cid, t)
    }

    /// Closes the batch and hands over what it owes (the caller issues F2, then looks
    /// at each word), `None` if nothing.
    #[inline]
    pub(crate) fn take(&mut self) -> Option<Owed> {
        self.open = false;
        if self.queue.is_none() && self.terminus.is_none() {
            return None;
        }
        Some(Owed {
            queue: self.queue.take(),
            terminus: self.terminus.take(),
        })
    }
}

/// What a closed batch owed: the words to look at after the fence.
#[derive(Debug)]
pub(crate) struct Owed {
    /// The queue.
    pub(crate) queue: Option<QueueId>,
    /// The terminus.
    pub(crate) terminus: Option<(u32, u16)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_owed_outside_a_visit() {
        let mut b = WakeBatch::default();
        assert!(!b.owe_queue(QueueId(1)), "no visit: the caller wakes now");
        assert!(!b.owe_terminus(1, 0));
        assert!(b.take().is_none());
    }

    #[test]
    fn a_visit_owes_one_queue_and_one_terminus_and_wakes_others_at_once() {
        let mut b = WakeBatch::default();
        b.open();
        for _ in 0..3 {
            assert!(b.owe_queue(QueueId(7)));
            assert!(b.owe_terminus(2, 5));
        }
        assert!(
            !b.owe_queue(QueueId(8)),
            "a second queue is checked by the caller"
        );
        assert!(!b.owe_terminus(2, 6));
        let owed = b.take().expect("owes");
        assert_eq!(owed.queue, Some(QueueId(7)));
        assert_eq!(owed.terminus, Some((2, 5)));
        assert!(b.take().is_none(), "taken, and closed");
        assert!(!b.owe_queue(QueueId(7)), "closed");
    }
}
