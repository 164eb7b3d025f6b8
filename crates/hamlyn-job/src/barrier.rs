//! The barrier (seed 004's "per-sweep synchronisation"): a fetch-and-add on one counter
//! word on rank 0's node, and a release message from the last rank to arrive.
//!
//! Rank `i` adds 1 to the counter and reads the old value `v`: the barrier it is in is
//! generation `v / size`, and it is the `(v % size + 1)`-th to arrive. The last to arrive
//! sends every rank (itself included) a release tagged with the generation; a rank
//! leaves the barrier when its release arrives. The counter only grows, so generations
//! never mix; a release can arrive before the fetch-and-add's answer (another rank was
//! last), so releases seen early are kept.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use hamlyn::{
    Data, FetchAddArgs, NotificationKind, SendError, SendHandle, SendOptions, SlotId, Ticket,
};

use crate::{Job, JobError};

/// The barrier's tickets and what it has seen.
#[derive(Debug)]
pub(crate) struct Barrier {
    /// This rank's release slot (where releases land).
    release_slot: SlotId,
    /// Where the fetch-and-add's old value lands.
    reply: Ticket,
    /// Rank 0's counter word.
    counter: Option<Ticket>,
    /// Every rank's release slot.
    releases: Vec<Ticket>,
    /// Generations whose release arrived and was not consumed yet.
    released: BTreeSet<u64>,
    /// The generation this rank is in (or last left): releases for others are dropped.
    current: u64,
}

/// How long one wait sleeps before it looks whether its request failed.
const SLICE: Duration = Duration::from_millis(50);

impl Barrier {
    pub(crate) fn new(release_slot: SlotId, reply: Ticket) -> Barrier {
        Barrier {
            release_slot,
            reply,
            counter: None,
            releases: Vec::new(),
            released: BTreeSet::new(),
            current: 0,
        }
    }

    pub(crate) fn connect(&mut self, counter: Ticket, releases: Vec<Ticket>) {
        self.counter = Some(counter);
        self.releases = releases;
    }
}

impl Job {
    /// Waits until every rank of the job has called `barrier` (as often as this one).
    pub fn barrier(&mut self) -> Result<(), JobError> {
        let size = u64::from(self.launch.size);
        if size == 1 {
            return Ok(());
        }
        let deadline = Instant::now() + self.timeout;
        let counter = self.barrier.counter.ok_or(JobError::BadSeed {
            rank: 0,
            why: "no barrier counter".into(),
        })?;
        let reply = self.barrier.reply;
        let h = self.send_retrying(deadline, |t| {
            t.fetch_add(&FetchAddArgs {
                target: &counter,
                offset: 0,
                addend: 1,
                reply: &reply,
                reply_offset: 0,
            })
        })?;
        let want = h.request();
        let old = self.wait_for(deadline, "the barrier counter", &h, |b, n| {
            (n.kind == NotificationKind::AtomicDone && n.request == Some(want))
                .then_some(n.word)
                .or_else(|| {
                    b.note_release(n);
                    None
                })
        })?;
        let generation = old / size;
        self.barrier.current = generation;
        self.barrier.released.retain(|g| *g >= generation);
        let mut sent = Vec::new();
        if old % size == size - 1 {
            // The last to arrive lets everyone go.
            for i in 0..self.barrier.releases.len() {
                let to = self.barrier.releases[i];
                let tag = generation.to_le_bytes();
                sent.push(self.send_retrying(deadline, |t| {
                    t.send(&to, &SendOptions::new().tag(generation), Data::Inline(&tag))
                })?);
            }
        }
        if !self.barrier.released.remove(&generation) {
            let what = format!("the release of barrier {generation}");
            // Our own fetch-and-add is done; failures of our releases are the ones to
            // watch now.
            let watch = sent.first().cloned().unwrap_or(h);
            self.wait_for(deadline, &what, &watch, |b, n| {
                b.note_release(n);
                b.released.remove(&generation).then_some(())
            })?;
        }
        for h in sent {
            let s = h.status();
            if s.is_failed() {
                return Err(JobError::Failed {
                    what: "a barrier release",
                    status: s,
                });
            }
        }
        Ok(())
    }

    /// Queues a request, waiting for room while the terminus is full.
    fn send_retrying(
        &mut self,
        deadline: Instant,
        mut send: impl FnMut(&mut hamlyn::Terminus) -> Result<SendHandle, SendError>,
    ) -> Result<SendHandle, JobError> {
        loop {
            match send(&mut self.terminus) {
                Err(SendError::Full) if Instant::now() < deadline => {
                    self.terminus.wait_idle(Some(SLICE));
                }
                Err(e) => return Err(e.into()),
                Ok(h) => return Ok(h),
            }
        }
    }

    /// Reads the job's queue until `take` accepts a notification, `watched` fails, or
    /// the deadline passes.
    fn wait_for<T>(
        &mut self,
        deadline: Instant,
        what: &str,
        watched: &SendHandle,
        mut take: impl FnMut(&mut Barrier, &hamlyn::Notification) -> Option<T>,
    ) -> Result<T, JobError> {
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(JobError::Timeout {
                    what: what.to_owned(),
                    after_ms: self.timeout.as_millis(),
                });
            }
            match self.queue.wait(Some(SLICE.min(deadline - now)))? {
                Some(n) => {
                    if let Some(v) = take(&mut self.barrier, &n) {
                        return Ok(v);
                    }
                }
                None => {
                    let s = watched.status();
                    if s.is_failed() {
                        return Err(JobError::Failed {
                            what: "a barrier request",
                            status: s,
                        });
                    }
                }
            }
        }
    }
}

impl Barrier {
    /// Keeps a release that arrived: only for this rank's barrier or the next (a rank
    /// can be at most one barrier ahead of the last to arrive), so no sender can grow
    /// the set.
    fn note_release(&mut self, n: &hamlyn::Notification) {
        let near = n.word >= self.current && n.word <= self.current.saturating_add(1);
        if n.kind == NotificationKind::Message && n.slot == self.release_slot && near {
            self.released.insert(n.word);
        }
    }
}
