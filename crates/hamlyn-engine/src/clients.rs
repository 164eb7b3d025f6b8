//! The engine's clients: who is attached, their ports, and the two things the engine hands
//! back to a client through its port — error completions and notifications.
//!
//! This is the one place that pushes an error completion onto a client's error ring.
//! A full ring is back-pressure, never a drop: [`Clients::push_error`] says so and its
//! caller holds the request that failed; [`Clients::fail`] keeps the completion in the
//! port's own list and retries it on later turns ([`Clients::flush_late_errors`]). While
//! [`HOLD_AFTER`] are kept for a client, its termini are not served
//! ([`Clients::is_held`]): a client that does not read its error ring stops itself, not
//! the engine, and can cause no more of them. Past [`DROP_AFTER`] (more than its own sends
//! can explain while held: forged NACKs) they are counted and not kept, so the list is
//! bounded.

use std::os::fd::OwnedFd;

use hamlyn_core::{Notification, QueueId};
use hamlyn_wire::request::Completion;
use hamlyn_wire::RequestId;

use hamlyn_shm::sync::{AtomicU32, Ordering};

use crate::counters::EngineCounters;
use crate::port::Port;
use crate::wake_batch::WakeBatch;

/// One attached (or attaching) client.
#[derive(Debug)]
pub(crate) struct Client {
    /// Its id, also the owner id of its slots and areas.
    pub(crate) id: u32,
    /// Its process id, as it said.
    pub(crate) pid: u32,
    /// The control socket.
    pub(crate) sock: OwnedFd,
    /// Its port, once attached.
    pub(crate) port: Option<Port>,
    /// It said goodbye (`Detach`): its socket closing is a clean exit, not a loss.
    pub(crate) detached: bool,
    /// The user it runs as (`SO_PEERCRED`; `u32::MAX` if the kernel would not say).
    pub(crate) uid: u32,
    /// It runs in the engine's own process (`SO_PEERCRED`'s pid): its waiting threads
    /// can run the engine's turns themselves (`crate::hosted`).
    pub(crate) in_process: bool,
    /// What it holds, against its quotas.
    pub(crate) usage: Usage,
    /// When it connected (a connection that does not attach in time is closed).
    pub(crate) since: std::time::Instant,
}

/// What a client holds, counted against its quotas.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Areas registered.
    pub(crate) areas: u32,
    /// Bytes of those areas.
    pub(crate) area_bytes: u64,
    /// Slots created and not destroyed.
    pub(crate) slots: u32,
}

/// Error completions kept for a client beyond which its termini are held.
pub(crate) const HOLD_AFTER: usize = 1024;
/// Error completions kept for a client at most.
pub(crate) const DROP_AFTER: usize = 4 * HOLD_AFTER;

/// The error ring of a client is full: the completion was not pushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RingFull;

/// Every client by id, and the error completions waiting for room in their rings.
#[derive(Debug, Default)]
pub(crate) struct Clients {
    /// Clients by id (None: a free id).
    table: Vec<Option<Client>>,
    /// Error completions kept in all ports' `late` lists.
    late_total: usize,
    /// Some queue lost notifications not yet reported by an `Overflow` notification.
    losses_unreported: bool,
    /// Clients connected now that run in another process than the engine, shared with
    /// the threads that may drive the engine (`Engine::foreign_clients`), which read it
    /// without holding the engine.
    foreign: std::sync::Arc<AtomicU32>,
    /// Wake-ups the running visit owes (`crate::wake_batch`).
    wakes: WakeBatch,
}

/// Queue ids pack the client id and the queue's index in its port.
pub(crate) fn queue_id(client: u32, index: u16) -> QueueId {
    QueueId((client << 8) | u32::from(index))
}

/// The client and queue index a queue id packs.
pub(crate) fn queue_parts(q: QueueId) -> (u32, usize) {
    (q.0 >> 8, (q.0 & 0xFF) as usize)
}

/// The request id of request `seq` of client `cid`'s terminus `t`: the id packs the
/// client and terminus, so a NACK or an answer finds its way back.
pub(crate) fn request_id(cid: u32, t: usize, seq: u32) -> RequestId {
    RequestId {
        terminus: (cid << 8) | (t as u32 & 0xFF),
        seq,
    }
}

/// The client and terminus a request id of this engine names ([`request_id`]).
pub(crate) fn request_origin(r: RequestId) -> (u32, u16) {
    (r.terminus >> 8, (r.terminus & 0xFF) as u16)
}

impl Clients {
    /// The client, attached or not.
    pub(crate) fn get_mut(&mut self, cid: u32) -> Option<&mut Client> {
        self.table.get_mut(cid as usize).and_then(Option::as_mut)
    }

    /// The port of client `cid`, once attached.
    pub(crate) fn port(&self, cid: u32) -> Option<&Port> {
        self.table.get(cid as usize)?.as_ref()?.port.as_ref()
    }

    /// The port of client `cid`, once attached.
    pub(crate) fn port_mut(&mut self, cid: u32) -> Option<&mut Port> {
        self.table.get_mut(cid as usize)?.as_mut()?.port.as_mut()
    }

    /// Every client.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Client> {
        self.table.iter().flatten()
    }

    /// Every client.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Client> {
        self.table.iter_mut().flatten()
    }

    /// Every attached client's port.
    pub(crate) fn ports_mut(&mut self) -> impl Iterator<Item = &mut Port> {
        self.iter_mut().filter_map(|c| c.port.as_mut())
    }

    /// Bytes of areas mapped for every client together.
    pub(crate) fn mapped(&self) -> u64 {
        self.iter().map(|c| c.usage.area_bytes).sum()
    }

    /// Clients that connected more than `limit` ago and have not attached.
    pub(crate) fn unattached_since(&self, limit: std::time::Duration) -> Vec<u32> {
        self.iter()
            .filter(|c| c.port.is_none() && c.since.elapsed() > limit)
            .map(|c| c.id)
            .collect()
    }

    /// Clients connected now, attached or not.
    pub(crate) fn live(&self) -> usize {
        self.iter().count()
    }

    /// Connections of user `uid`.
    pub(crate) fn of_user(&self, uid: u32) -> usize {
        self.iter().filter(|c| c.uid == uid).count()
    }

    /// Whether a client runs in another process than the engine: one that cannot drive
    /// the engine itself, so the engine's thread spins for it after work, and a waiting
    /// thread of the host drives on when it finds no work (`Driving::stays_when_idle`).
    pub(crate) fn any_in_other_process(&self) -> bool {
        // Relaxed: only the engine's holder writes it, and it orders nothing.
        self.foreign.load(Ordering::Relaxed) > 0
    }

    /// The count of clients in other processes, kept up to date as clients come and go,
    /// for threads that do not hold the engine (a hint: read it Relaxed).
    pub(crate) fn foreign_count(&self) -> std::sync::Arc<AtomicU32> {
        self.foreign.clone()
    }

    /// Takes a new client of user `uid` on socket `sock` under the lowest free id;
    /// `in_process`: it runs in the engine's own process.
    pub(crate) fn insert(&mut self, sock: OwnedFd, uid: u32, in_process: bool) -> u32 {
        let id = match self.table.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.table.push(None);
                self.table.len() - 1
            }
        };
        self.table[id] = Some(Client {
            id: id as u32,
            pid: 0,
            sock,
            port: None,
            detached: false,
            uid,
            in_process,
            usage: Usage::default(),
            since: std::time::Instant::now(),
        });
        if !in_process {
            // Relaxed: a count read as a hint; no data is published with it.
            self.foreign.fetch_add(1, Ordering::Relaxed);
        }
        id as u32
    }

    /// The client leaves: its id is free again. Error completions still waiting for it
    /// go with it.
    pub(crate) fn remove(&mut self, cid: u32) -> Option<Client> {
        let client = self.table.get_mut(cid as usize).and_then(Option::take)?;
        if !client.in_process {
            // Relaxed: as in `insert`.
            self.foreign.fetch_sub(1, Ordering::Relaxed);
        }
        let late = client.port.as_ref().map_or(0, |p| p.late.len());
        self.late_total = self.late_total.saturating_sub(late);
        Some(client)
    }

    /// Whether client `cid`'s termini are held: too many error completions wait for room
    /// in its error ring.
    #[inline]
    pub(crate) fn is_held(port: &Port) -> bool {
        port.late.len() >= HOLD_AFTER
    }

    /// Pushes an error completion onto client `cid`'s error ring; `Err(RingFull)` if
    /// there is no room (the caller keeps what failed and tries again later). A client
    /// that is gone has nobody to tell: that is `Ok`.
    pub(crate) fn push_error(
        &mut self,
        cid: u32,
        c: &Completion,
        counters: &mut EngineCounters,
    ) -> Result<(), RingFull> {
        let Some(port) = self.port_mut(cid) else {
            return Ok(());
        };
        // Behind completions already waiting, it waits too: they keep their order.
        if !port.late.is_empty() {
            return Err(RingFull);
        }
        port.errors.try_push(&c.encode()).map_err(|_| RingFull)?;
        counters.error_completions += 1;
        Ok(())
    }

    /// Hands an error completion to client `cid` for a request that has already
    /// completed (a NACK, a failed one-sided request): kept for a later turn if its error
    /// ring is full, never dropped.
    pub(crate) fn fail(&mut self, cid: u32, c: Completion, counters: &mut EngineCounters) {
        if self.push_error(cid, &c, counters).is_ok() {
            return;
        }
        let Some(port) = self.port_mut(cid) else {
            return;
        };
        if port.late.len() >= DROP_AFTER {
            counters.errors_dropped += 1;
            return;
        }
        port.late.push_back(c);
        self.late_total += 1;
    }

    /// Whether error completions are waiting for room.
    pub(crate) fn has_late_errors(&self) -> bool {
        self.late_total > 0
    }

    /// Retries the error completions that found a full ring, oldest first per client;
    /// a client whose ring is still full costs one try.
    pub(crate) fn flush_late_errors(&mut self, counters: &mut EngineCounters) {
        let mut flushed = 0;
        for port in self
            .table
            .iter_mut()
            .flatten()
            .filter_map(|c| c.port.as_mut())
        {
            while let Some(c) = port.late.front() {
                if port.errors.try_push(&c.encode()).is_err() {
                    break;
                }
                port.late.pop_front();
                counters.error_completions += 1;
                flushed += 1;
            }
        }
        self.late_total = self.late_total.saturating_sub(flushed);
    }

    /// Posts a notification to its queue, waking the receiver if it sleeps and the
    /// sender asked for that (the WAKE flag). A full queue is never overwritten: the loss
    /// is counted by the queue itself, and the owner is later told how many it lost by an
    /// `Overflow` notification, posted before anything that follows the gap.
    pub(crate) fn notify(&mut self, n: &Notification, counters: &mut EngineCounters) {
        // Inside a visit the consumer's wake word is looked at once, at its end.
        let wake = n.wake && !self.wakes.owe_queue(n.queue);
        let (owner, index) = queue_parts(n.queue);
        let Some(port) = self.port_mut(owner) else {
            counters.orphan_notifications += 1;
            return;
        };
        let (Some(queue), Some(lost)) = (port.queues.get(index), port.lost.get_mut(index)) else {
            counters.orphan_notifications += 1;
            return;
        };
        // The report of an earlier gap goes first; if even it finds no room, this one
        // is lost too (and is counted by the refused report in its place).
        let posted = if *lost > 0 {
            report_losses(queue, lost, counters) && queue.post_with(&n.entry, wake).is_ok()
        } else {
            queue.post_with(&n.entry, wake).is_ok()
        };
        if posted {
            counters.notifications += 1;
        } else {
            *lost += 1;
            counters.queue_overflows += 1;
            self.losses_unreported = true;
        }
    }

    /// Terminus `t` of client `cid` finished one more request: its completion word moves,
    /// and a client asleep on it is woken (inside a visit: at the visit's end).
    pub(crate) fn finish(&mut self, cid: u32, t: usize) {
        let wake_now = !self.wakes.owe_terminus(cid, t as u16);
        if let Some(port) = self.port_mut(cid) {
            port.finish(t, wake_now);
        }
    }

    /// A visit starts: the wake-ups of its notifications and completions are owed to
    /// its end ([`Clients::flush_wakes`]).
    #[inline]
    pub(crate) fn open_wakes(&mut self) {
        self.wakes.open();
    }

    /// The visit ends: one fence F2 for everything it published, then a look at each
    /// owed wake word (a sleeping consumer is woken).
    #[inline]
    pub(crate) fn flush_wakes(&mut self) {
        let Some(owed) = self.wakes.take() else {
            return;
        };
        // F2: pairs with F1 of each consumer that arms its wake word before sleeping
        // (`hamlyn_shm::wake`); it follows every post and completion store of the visit.
        hamlyn_shm::wake::publish_fence();
        if let Some(q) = owed.queue {
            let (owner, index) = queue_parts(q);
            if let Some(queue) = self.port(owner).and_then(|p| p.queues.get(index)) {
                queue.wake_after_fence();
            }
        }
        if let Some((cid, t)) = owed.terminus {
            if let Some(port) = self.port(cid) {
                port.wake_finished_after_fence(usize::from(t));
            }
        }
    }

    /// Whether some queue lost notifications it has not been told of yet.
    pub(crate) fn has_unreported_losses(&self) -> bool {
        self.losses_unreported
    }

    /// Posts the `Overflow` reports that wait for room, to queues that have it now (a
    /// queue still full costs a look, not a refused post).
    pub(crate) fn report_losses(&mut self, counters: &mut EngineCounters) {
        let mut left = false;
        for port in self
            .table
            .iter_mut()
            .flatten()
            .filter_map(|c| c.port.as_mut())
        {
            for (queue, lost) in port.queues.iter().zip(port.lost.iter_mut()) {
                if *lost > 0 && queue.has_room() {
                    report_losses(queue, lost, counters);
                }
                left |= *lost > 0;
            }
        }
        self.losses_unreported = left;
    }
}

/// Posts one `Overflow` notification saying `lost` notifications were lost, and zeroes
/// `lost`; whether it was posted.
fn report_losses(
    queue: &hamlyn_shm::notifq::Producer<std::sync::Arc<hamlyn_shm::region::ShmRegion>>,
    lost: &mut u64,
    counters: &mut EngineCounters,
) -> bool {
    let mut e = hamlyn_wire::NotifEntry::zeroed();
    e.kind.set(hamlyn_wire::NotifKind::Overflow as u16);
    e.meta_index.set(hamlyn_wire::FAST_META_INDEX);
    e.word.set(*lost);
    let ok = queue.post(&e).is_ok();
    if ok {
        *lost = 0;
        counters.notifications += 1;
    }
    ok
}
