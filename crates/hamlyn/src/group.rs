//! Endpoint groups (seed 002, FLIPC): receive-any across endpoints that keep their own
//! buffer queues (FLIPC does this in the library too: the buffers belong to endpoints, so
//! their queues cannot be merged), in priority order without starving anyone, and a
//! blocking receive that sleeps on the group's notification queue (a futex: no busy loop)
//! with a timeout.
//!
//! Every member endpoint reports to the group's queue; its notifications only wake the
//! group — what arrived is read from the endpoints' rings, so a full notification queue
//! loses nothing.
//!
//! Choosing (`Picker`): the highest-priority member with a message waiting (0 is the
//! highest, as for termini), round robin among members of one priority; but a member
//! passed over `starvation_bound` times while it had a message waiting is served next,
//! so between two of a member's messages there are at most `starvation_bound + members`
//! receives while it has one pending.
//!
//! [`SharedGroup`] lets several threads wait on one group: one of them sleeps on the
//! queue's futex, the others on their own condition variables (synchronisation among the
//! application's threads is the library's, with ordinary locks, as in FLIPC), and each
//! arrival goes to the highest-priority waiter first.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::endpoint::{Buffer, Endpoint, Received};
use crate::error::Error;
use crate::queue::NotifyQueue;

/// Passes-over after which a waiting member is served regardless of priority (default).
pub const DEFAULT_STARVATION_BOUND: u32 = 16;

/// The choice among members: pure bookkeeping, no I/O.
#[derive(Debug, Clone)]
struct Picker {
    /// Per member: its priority and how often it was passed over while ready.
    members: Vec<(u8, u32)>,
    /// The member served last (where round robin resumes).
    last: usize,
    bound: u32,
}

impl Picker {
    /// The member to serve among those `ready` says have a message, and the bookkeeping
    /// of the choice.
    fn pick(&mut self, ready: impl Fn(usize) -> bool) -> Option<usize> {
        let n = self.members.len();
        let mut starving: Option<usize> = None;
        let mut best: Option<usize> = None;
        for k in 1..=n {
            // Round robin order, starting after the member served last.
            let i = (self.last + k) % n;
            if !ready(i) {
                continue;
            }
            let (prio, skipped) = self.members[i];
            if skipped >= self.bound && starving.is_none_or(|s| skipped > self.members[s].1) {
                starving = Some(i);
            }
            if best.is_none_or(|b| prio < self.members[b].0) {
                best = Some(i);
            }
        }
        let chosen = starving.or(best)?;
        for i in 0..n {
            if i != chosen && ready(i) {
                self.members[i].1 = self.members[i].1.saturating_add(1);
            }
        }
        self.members[chosen].1 = 0;
        self.last = chosen;
        Some(chosen)
    }
}

/// A group's members and their choice, without the queue.
#[derive(Debug)]
struct Members {
    endpoints: Vec<Endpoint>,
    picker: Picker,
}

impl Members {
    fn receive(&mut self) -> Option<(usize, Received)> {
        let eps = &self.endpoints;
        let i = self.picker.pick(|i| eps[i].ready())?;
        let r = self.endpoints[i].receive()?;
        Some((i, r))
    }
}

/// Receive-any over endpoints that report to one notification queue.
#[derive(Debug)]
pub struct EndpointGroup {
    members: Members,
    queue: NotifyQueue,
}

impl EndpointGroup {
    /// An empty group woken through `queue` (its members must report to it). The queue is
    /// the group's own: waiting consumes every notification in it, whatever slot posted it.
    pub fn new(queue: NotifyQueue) -> EndpointGroup {
        EndpointGroup {
            members: Members {
                endpoints: Vec::new(),
                picker: Picker {
                    members: Vec::new(),
                    last: 0,
                    bound: DEFAULT_STARVATION_BOUND,
                },
            },
            queue,
        }
    }

    /// Sets the starvation bound: a member passed over this many times while it had a
    /// message waiting is served next (at least 1).
    pub fn starvation_bound(mut self, bound: u32) -> EndpointGroup {
        self.members.picker.bound = bound.max(1);
        self
    }

    /// Adds `endpoint` at `priority` (0 is the highest); its member number. The endpoint
    /// must report to the group's queue ([`crate::EndpointBuilder::queue`]).
    pub fn add(&mut self, endpoint: Endpoint, priority: u8) -> Result<usize, Error> {
        if endpoint.queue() != Some(self.queue.index()) {
            return Err(Error::InvalidArgument(
                "a group member must report to the group's notification queue",
            ));
        }
        self.members.endpoints.push(endpoint);
        self.members.picker.members.push((priority, 0));
        Ok(self.members.endpoints.len() - 1)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.endpoints.len()
    }

    /// Whether the group has no members.
    pub fn is_empty(&self) -> bool {
        self.members.endpoints.is_empty()
    }

    /// Member `i`.
    pub fn endpoint(&self, i: usize) -> Option<&Endpoint> {
        self.members.endpoints.get(i)
    }

    /// Member `i`, mutably (to post buffers, read discards).
    pub fn endpoint_mut(&mut self, i: usize) -> Option<&mut Endpoint> {
        self.members.endpoints.get_mut(i)
    }

    /// The next message of any member, chosen by priority without starvation (above),
    /// with its member number. Never blocks.
    pub fn receive(&mut self) -> Option<(usize, Received)> {
        self.members.receive()
    }

    /// As [`EndpointGroup::receive`], sleeping on the group's queue until a message
    /// arrives or `timeout` passes (`None`: forever); `Ok(None)` on timeout.
    pub fn receive_wait(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<Option<(usize, Received)>, Error> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(m) = self.receive() {
                return Ok(Some(m));
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(None),
                },
                None => None,
            };
            // A notification only says "look again"; the rings hold the truth. Anything
            // posted after the look above wakes this wait.
            if self.queue.wait(left)?.is_some() {
                while self.queue.poll().is_some() {}
            }
        }
    }

    /// Lets several threads wait on the group ([`SharedGroup`]).
    pub fn into_shared(self) -> SharedGroup {
        SharedGroup {
            state: Mutex::new(State {
                members: self.members,
                waiters: Vec::new(),
                next_seq: 0,
            }),
            queue: Mutex::new(self.queue),
        }
    }
}

/// One thread waiting on a [`SharedGroup`].
#[derive(Debug)]
struct Waiter {
    priority: u8,
    seq: u64,
    mail: Mutex<Mail>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Mail {
    /// A message handed to this waiter.
    message: Option<(usize, Received)>,
    /// Asked to take over sleeping on the queue.
    lead: bool,
}

#[derive(Debug)]
struct State {
    members: Members,
    /// Waiting threads, highest priority (then longest waiting) first.
    waiters: Vec<Arc<Waiter>>,
    next_seq: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl State {
    /// Hands waiting messages to waiting threads, highest priority first.
    fn dispatch(&mut self) {
        while !self.waiters.is_empty() {
            let Some(m) = self.members.receive() else {
                return;
            };
            let w = self.waiters.remove(0);
            lock(&w.mail).message = Some(m);
            w.wake.notify_one();
        }
    }

    fn forget(&mut self, me: &Arc<Waiter>) {
        self.waiters.retain(|w| !Arc::ptr_eq(w, me));
    }

    /// Asks the first waiter to take over the queue.
    fn pass_lead(&self) {
        if let Some(w) = self.waiters.first() {
            lock(&w.mail).lead = true;
            w.wake.notify_one();
        }
    }
}

/// An endpoint group several threads may wait on; each arrival goes to the
/// highest-priority waiting thread first (equal priorities: the one waiting longest).
#[derive(Debug)]
pub struct SharedGroup {
    state: Mutex<State>,
    /// Held by the one waiter sleeping on the queue's futex.
    queue: Mutex<NotifyQueue>,
}

impl SharedGroup {
    /// The next message of any member, without waiting.
    pub fn receive(&self) -> Option<(usize, Received)> {
        lock(&self.state).members.receive()
    }

    /// Posts `buffer` to member `i`.
    pub fn post(&self, i: usize, buffer: Buffer) -> Result<(), Error> {
        match lock(&self.state).members.endpoints.get_mut(i) {
            Some(ep) => ep.post(buffer),
            None => Err(Error::InvalidArgument("no such group member")),
        }
    }

    /// Runs `f` on member `i`.
    pub fn with_endpoint<R>(&self, i: usize, f: impl FnOnce(&mut Endpoint) -> R) -> Option<R> {
        lock(&self.state).members.endpoints.get_mut(i).map(f)
    }

    /// Threads waiting now.
    pub fn waiting(&self) -> usize {
        lock(&self.state).waiters.len()
    }

    /// Waits for a message of any member, as a thread of `priority` (0 is the highest):
    /// when several threads wait, each arrival goes to the highest-priority one first.
    /// `Ok(None)` when `timeout` passed (`None`: wait forever).
    pub fn receive_wait(
        &self,
        priority: u8,
        timeout: Option<Duration>,
    ) -> Result<Option<(usize, Received)>, Error> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let me = {
            let mut st = lock(&self.state);
            if let Some(m) = st.members.receive() {
                return Ok(Some(m));
            }
            let me = Arc::new(Waiter {
                priority,
                seq: st.next_seq,
                mail: Mutex::new(Mail::default()),
                wake: Condvar::new(),
            });
            st.next_seq += 1;
            let at = st
                .waiters
                .iter()
                .position(|w| (w.priority, w.seq) > (me.priority, me.seq))
                .unwrap_or(st.waiters.len());
            st.waiters.insert(at, me.clone());
            me
        };
        let result = self.wait_as(&me, deadline);
        let mut st = lock(&self.state);
        st.forget(&me);
        // A message handed over after the wait ended is still this thread's.
        let late = lock(&me.mail).message.take();
        let got = match result {
            Ok(None) => Ok(late),
            Ok(Some(m)) => Ok(Some(m)),
            Err(e) => {
                if let Some(m) = late {
                    // Not lost: back to the others.
                    drop(st);
                    return Err(self.requeue(m, e));
                }
                Err(e)
            }
        };
        // Whoever sleeps on the queue next: the first waiter left, if no one does.
        st.pass_lead();
        got
    }

    /// A message taken for a thread whose wait failed goes to the next waiter (or, with
    /// none, is lost to this group's receivers only as far as its buffer: it is dropped
    /// with the error). The error is returned.
    #[cold]
    fn requeue(&self, m: (usize, Received), e: Error) -> Error {
        let st = lock(&self.state);
        if let Some(w) = st.waiters.first() {
            lock(&w.mail).message = Some(m);
            w.wake.notify_one();
        }
        e
    }

    fn wait_as(
        &self,
        me: &Arc<Waiter>,
        deadline: Option<Instant>,
    ) -> Result<Option<(usize, Received)>, Error> {
        loop {
            if let Some(m) = lock(&me.mail).message.take() {
                return Ok(Some(m));
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Ok(None),
                },
                None => None,
            };
            if let Ok(mut q) = self.queue.try_lock() {
                // The leader: hand out what is there, then sleep on the queue's futex.
                lock(&self.state).dispatch();
                if let Some(m) = lock(&me.mail).message.take() {
                    return Ok(Some(m));
                }
                if q.wait(left)?.is_some() {
                    while q.poll().is_some() {}
                }
                drop(q);
                lock(&self.state).dispatch();
                continue;
            }
            // A follower: sleep until handed a message, asked to lead, or out of time.
            let mut mail = lock(&me.mail);
            while mail.message.is_none() && !mail.lead {
                let wait = left.unwrap_or(Duration::from_secs(3600));
                let (m, timed_out) = me
                    .wake
                    .wait_timeout(mail, wait)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                mail = m;
                if timed_out.timed_out() {
                    break;
                }
            }
            mail.lead = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picker(prios: &[u8], bound: u32) -> Picker {
        Picker {
            members: prios.iter().map(|&p| (p, 0)).collect(),
            last: 0,
            bound,
        }
    }

    #[test]
    fn highest_priority_first_round_robin_within_a_level() {
        let mut p = picker(&[1, 0, 0, 2], 100);
        let picks: Vec<_> = (0..4).map(|_| p.pick(|_| true).unwrap()).collect();
        assert_eq!(picks, [1, 2, 1, 2], "priority 0 members alternate");
        assert_eq!(p.pick(|i| i == 0 || i == 3), Some(0));
        assert_eq!(p.pick(|_| false), None);
    }

    proptest::proptest! {
        /// For any priorities, bound and pattern of readiness: a member that stays ready
        /// is served within bound + members picks, and a pick is always a ready member.
        #[test]
        fn no_ready_member_waits_past_the_bound(
            prios in proptest::collection::vec(0u8..4, 1..6),
            bound in 1u32..8,
            pattern in proptest::collection::vec(proptest::collection::vec(proptest::bool::ANY, 6), 1..200),
        ) {
            let n = prios.len();
            let mut p = picker(&prios, bound);
            // Picks since each member became (and stayed) ready.
            let mut waiting = vec![0u32; n];
            for ready_now in &pattern {
                let ready = |i: usize| ready_now[i];
                let got = p.pick(ready);
                proptest::prop_assert_eq!(got.is_some(), (0..n).any(ready));
                for (i, w) in waiting.iter_mut().enumerate() {
                    if !ready(i) || got == Some(i) {
                        *w = 0;
                    } else {
                        *w += 1;
                        proptest::prop_assert!(
                            *w <= bound + n as u32,
                            "member {} passed over {} times", i, *w
                        );
                    }
                }
                if let Some(c) = got {
                    proptest::prop_assert!(ready(c));
                }
            }
        }
    }

    #[test]
    fn a_waiting_member_is_served_within_the_bound() {
        let bound = 5;
        let mut p = picker(&[0, 0, 9], bound);
        let mut since = 0;
        for _ in 0..200 {
            let i = p.pick(|_| true).unwrap();
            if i == 2 {
                assert!(since <= bound + 2, "served after {since} others");
                since = 0;
            } else {
                since += 1;
            }
        }
    }
}
