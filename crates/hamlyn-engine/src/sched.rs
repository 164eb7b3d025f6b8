//! Terminus scheduling: strict priority between levels, round robin within a level,
//! one visit per terminus per turn (seed 000 §2.3, seed 002 priorities). A visit sends
//! one packet, or a quantum of small single-packet writes to this node (the engine's
//! `visit`: up to 16 packets, none once 4 KiB were delivered), by the same rule for
//! every terminus: termini of like messages get equal shares.
//!
//! The scheduler knows termini only by an opaque key; the engine tells it which termini
//! have work and asks it for the order in which to visit them this turn.
//!
//! **Ready termini.** Looking at a terminus costs a read of its ring's index in the
//! client's shared memory (a cache line of its own; with hundreds of ports, mostly TLB
//! and cache misses), and a request waits for the walk to reach it. So a turn visits
//! only the termini known to have work: those a client announced by its ready hint
//! since the last turn ([`hamlyn_shm::ready`], taken by the engine and passed to
//! [`Scheduler::mark_ready`]) and those that still had work after their last visit (a
//! ring with more requests, a message in the middle). Each level keeps them in a queue
//! in the order they became ready: a visited terminus with more work goes to the back,
//! which is round robin among the busy termini of a level. A turn's cost grows with
//! the termini that have work, not with those that exist (seed 003 Figure 6: the round
//! trip does not grow with the logical channels).
//!
//! **The sweep.** Hints are the client's to set, so they are never the only way to be
//! served: every [`SWEEP_EVERY`]-th turn also looks at [`SWEEP_PER_LEVEL`] more termini
//! of every level, in turn, so a terminus whose client set no hint (an older or careless
//! client) waits at most `SWEEP_EVERY * n / SWEEP_PER_LEVEL` turns for a level of `n`
//! termini, and the sweep costs an idle turn a quarter of a terminus visit however many
//! termini exist. (Such a client also loses strict priority
//! among its own termini: a lower one the sweep finds may go before a higher one it has
//! not reached yet.) Termini throttled by their rate or held by a full error ring stay
//! in their ready queue while their rings hold requests. When a rate changes, the next
//! turn looks at every terminus (`all`).
//!
//! **Strict priority.** The levels are visited from the highest priority down; a lower
//! level is visited only if no terminus of a higher level had work this turn (its ready
//! queue and sweep share are kept for the next turn).

use std::collections::VecDeque;

/// Opaque terminus key: (client id, terminus index).
pub(crate) type TerminusKey = (u32, u16);

/// Priority levels: 0 is served first.
pub(crate) const PRIORITY_LEVELS: usize = 4;
/// Termini of each level the sweep looks at on a sweeping turn: a level of `n` termini
/// is swept whole every `SWEEP_EVERY * n / SWEEP_PER_LEVEL` turns (rounded up).
pub(crate) const SWEEP_PER_LEVEL: usize = 2;
/// The sweep runs on one turn in this many.
pub(crate) const SWEEP_EVERY: u64 = 8;

/// How a terminus came to be visited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Visit {
    /// From its level's ready queue (it was announced, or had more work last time).
    Ready,
    /// By the sweep (its share of this turn, or every terminus after a sleep): it may
    /// be in the ready queue already, in which case the queue's visit serves it.
    Swept,
}

/// What a visit found: whether the terminus had work (sent or refused a packet), and
/// whether it is to be (or stays) in its level's ready queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Served {
    /// It had work this visit.
    pub(crate) work: bool,
    /// Put it at the back of its level's ready queue (it has more work, and is not
    /// queued already; the engine keeps that flag with the terminus).
    pub(crate) requeue: bool,
}

/// Round robin within priority levels, over the termini that have work.
#[derive(Debug, Default)]
pub(crate) struct Scheduler {
    /// Every terminus, by level (for the sweep).
    levels: [Vec<TerminusKey>; PRIORITY_LEVELS],
    /// Termini with work, by level, in the order they are served.
    ready: [VecDeque<TerminusKey>; PRIORITY_LEVELS],
    /// Where each level's sweep goes on next (a place in `levels`).
    sweep_at: [usize; PRIORITY_LEVELS],
    /// Turns taken (the sweep runs on every `SWEEP_EVERY`-th).
    turns: u64,
}

/// The level of a priority (clamped to the lowest level).
#[inline]
pub(crate) fn level_of(priority: u8) -> usize {
    usize::from(priority).min(PRIORITY_LEVELS - 1)
}

impl Scheduler {
    /// No termini.
    pub(crate) fn new() -> Scheduler {
        Scheduler::default()
    }

    /// Adds a terminus at `priority` (clamped to the lowest level).
    pub(crate) fn add(&mut self, key: TerminusKey, priority: u8) {
        self.remove(key);
        if let Some(keys) = self.levels.get_mut(level_of(priority)) {
            keys.push(key);
        }
    }

    /// Removes a terminus.
    pub(crate) fn remove(&mut self, key: TerminusKey) {
        self.remove_where(|k| k == key);
    }

    /// Removes every terminus of a client.
    pub(crate) fn remove_client(&mut self, client: u32) {
        self.remove_where(|k| k.0 == client);
    }

    /// Removes the termini `gone` says, from the sweep and the ready queues.
    fn remove_where(&mut self, gone: impl Fn(TerminusKey) -> bool) {
        for keys in &mut self.levels {
            keys.retain(|&k| !gone(k));
        }
        for q in &mut self.ready {
            q.retain(|&k| !gone(k));
        }
    }

    /// Number of termini.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.levels.iter().map(Vec::len).sum()
    }

    /// The termini in ready queues (known to have work), every level.
    pub(crate) fn ready_keys(&self) -> impl Iterator<Item = TerminusKey> + '_ {
        self.ready.iter().flatten().copied()
    }

    /// Whether any terminus waits in a ready queue.
    #[inline]
    pub(crate) fn has_ready(&self) -> bool {
        self.ready.iter().any(|q| !q.is_empty())
    }

    /// Termini in ready queues.
    #[cfg(test)]
    pub(crate) fn ready_len(&self) -> usize {
        self.ready.iter().map(VecDeque::len).sum()
    }

    /// Puts a terminus that has work at the back of `level`'s ready queue. The engine
    /// calls it once per terminus until a visit says it is done (it keeps a "queued"
    /// flag with the terminus), so a queue holds each terminus at most once.
    #[inline]
    pub(crate) fn mark_ready(&mut self, key: TerminusKey, level: usize) {
        if let Some(q) = self.ready.get_mut(level) {
            q.push_back(key);
        }
    }

    /// One turn: visits the levels from highest priority down; within a level, the
    /// termini of its ready queue (in order, each once), then its sweep share (every
    /// terminus when `all`), calling `serve`, which sends one packet or one quantum. A
    /// lower level is visited only if no terminus of a higher level had work. Returns
    /// whether anything had work. This is the engine's own walk. `serve` is also told
    /// whether the terminus is above the lowest level in use (its single-packet messages
    /// are express: `Fabric::send_express`).
    pub(crate) fn turn(
        &mut self,
        all: bool,
        mut serve: impl FnMut(TerminusKey, bool, Visit) -> Served,
    ) -> bool {
        self.turns = self.turns.wrapping_add(1);
        let sweeping = all || self.turns % SWEEP_EVERY == 0;
        if !sweeping && !self.has_ready() {
            // Nothing queued and no sweep due: the walk would visit nobody (an idle
            // turn, as most of a waiting thread's are, skips it).
            return false;
        }
        let mut busy = false;
        let lowest = self.lowest_level();
        for level in 0..PRIORITY_LEVELS {
            let express = level < lowest;
            let Some(q) = self.ready.get_mut(level) else {
                continue;
            };
            // Those queued before this turn; a terminus put back goes behind them.
            for _ in 0..q.len() {
                let Some(key) = q.pop_front() else {
                    break;
                };
                let s = serve(key, express, Visit::Ready);
                if s.requeue {
                    q.push_back(key);
                }
                busy |= s.work;
            }
            let Some(keys) = self.levels.get(level) else {
                continue;
            };
            let n = keys.len();
            // The sweep: every terminus after a sleep, else on a sweeping turn the next
            // SWEEP_PER_LEVEL from where the last sweep of this level stopped.
            let (start, count) = if all {
                (0, n)
            } else if sweeping {
                (self.sweep_at[level], n.min(SWEEP_PER_LEVEL))
            } else {
                (0, 0)
            };
            for i in 0..count {
                let mut p = start + i;
                if p >= n {
                    p -= n;
                }
                if let Some(&key) = keys.get(p) {
                    let s = serve(key, express, Visit::Swept);
                    if s.requeue {
                        q.push_back(key);
                    }
                    busy |= s.work;
                }
            }
            if n > 0 && count > 0 {
                self.sweep_at[level] = (start + count) % n;
            }
            if busy {
                break;
            }
        }
        busy
    }

    /// The lowest priority level in use (0 when there are no termini).
    #[inline]
    pub(crate) fn lowest_level(&self) -> usize {
        (0..PRIORITY_LEVELS)
            .rev()
            .find(|&l| self.level_len(l) > 0)
            .unwrap_or(0)
    }

    /// Termini at priority `level` (0 for a level that does not exist).
    #[inline]
    pub(crate) fn level_len(&self, level: usize) -> usize {
        self.levels.get(level).map_or(0, Vec::len)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    /// What the engine keeps per terminus, for the scheduler's tests: requests waiting
    /// and the "queued" flag, with the engine's rules for a visit
    /// (`EngineState::visit`).
    #[derive(Default)]
    struct World {
        work: HashMap<TerminusKey, u32>,
        queued: HashSet<TerminusKey>,
        /// Every visit this turn.
        visits: Vec<TerminusKey>,
        /// The visits this turn that took a request.
        sent: Vec<TerminusKey>,
    }

    impl World {
        /// A client pushes `n` requests and sets its hint; the engine takes the hint.
        fn push(&mut self, s: &mut Scheduler, key: TerminusKey, level: usize, n: u32) {
            *self.work.entry(key).or_default() += n;
            if self.queued.insert(key) {
                s.mark_ready(key, level);
            }
        }

        /// Requests pushed without a hint (a client that does not set them).
        fn push_silently(&mut self, key: TerminusKey, n: u32) {
            *self.work.entry(key).or_default() += n;
        }

        fn serve(&mut self, key: TerminusKey, visit: Visit) -> Served {
            if visit == Visit::Swept && self.queued.contains(&key) {
                return Served::default();
            }
            self.visits.push(key);
            let w = self.work.entry(key).or_default();
            let had = *w > 0;
            if had {
                *w -= 1;
                self.sent.push(key);
            }
            let more = *w > 0;
            match visit {
                Visit::Ready => {
                    if !more {
                        self.queued.remove(&key);
                    }
                }
                Visit::Swept => {
                    if more {
                        self.queued.insert(key);
                    }
                }
            }
            Served {
                work: had,
                requeue: more,
            }
        }

        fn turn(&mut self, s: &mut Scheduler, _turn: u64) -> bool {
            self.visits.clear();
            self.sent.clear();
            s.turn(false, |k, _, v| self.serve(k, v))
        }
    }

    #[test]
    fn round_robin_is_fair_within_a_level() {
        let mut s = Scheduler::new();
        let mut w = World::default();
        for t in 0..3 {
            s.add((1, t), 0);
            w.push(&mut s, (1, t), 0, 100);
        }
        let mut served = [0u32; 3];
        for turn in 0..100 {
            w.turn(&mut s, turn);
            let mut seen = w.sent.clone();
            seen.sort();
            seen.dedup();
            assert_eq!(
                seen.len(),
                w.sent.len(),
                "one request per terminus per turn"
            );
            for k in &w.sent {
                served[usize::from(k.1)] += 1;
            }
        }
        assert_eq!(served, [100, 100, 100]);
        assert_eq!(s.ready_len(), 0, "all done: nothing left queued");
        assert!(w.queued.is_empty());
    }

    /// A turn visits the termini with work and its sweep share, not every terminus: the
    /// cost of a turn does not grow with idle termini.
    #[test]
    fn a_turn_visits_ready_termini_and_its_sweep_share_only() {
        let mut s = Scheduler::new();
        let mut w = World::default();
        for t in 0..64 {
            s.add((1, t), 0);
        }
        for turn in 0..64u64 {
            let t = (turn * 7 % 64) as u16;
            w.push(&mut s, (1, t), 0, 1);
            assert!(
                w.turn(&mut s, turn),
                "the pushed request is served this turn"
            );
            assert!(w.visits.contains(&(1, t)));
            assert_eq!(w.work[&(1, t)], 0);
            assert!(w.visits.len() <= 1 + SWEEP_PER_LEVEL, "{:?}", w.visits);
        }
        // With no work anywhere, SWEEP_EVERY * 64 / SWEEP_PER_LEVEL turns look at every
        // terminus exactly once.
        let mut swept = Vec::new();
        for turn in 100..100 + SWEEP_EVERY * (64 / SWEEP_PER_LEVEL) as u64 {
            assert!(!w.turn(&mut s, turn));
            swept.extend(w.visits.iter().copied());
        }
        swept.sort();
        assert_eq!(swept, (0..64).map(|t| (1, t)).collect::<Vec<_>>());
        // After a sleep, every terminus.
        w.visits.clear();
        s.turn(true, |k, _, v| w.serve(k, v));
        assert_eq!(w.visits.len(), 64);
    }

    /// A client that never sets a hint is still served: within
    /// SWEEP_EVERY * n / SWEEP_PER_LEVEL turns for its first request, and then every turn
    /// while it has more (queued by the sweep).
    #[test]
    fn a_terminus_without_hints_is_served_by_the_sweep() {
        let mut s = Scheduler::new();
        let mut w = World::default();
        for t in 0..40 {
            s.add((1, t), 0);
        }
        w.push_silently((1, 33), 5);
        let mut first = None;
        for turn in 0..SWEEP_EVERY * 40u64.div_ceil(SWEEP_PER_LEVEL as u64) {
            if w.turn(&mut s, turn) {
                first = Some(turn);
                break;
            }
        }
        let first = first.expect("served within SWEEP_EVERY * 40 / SWEEP_PER_LEVEL turns");
        for turn in first + 1..first + 5 {
            assert!(w.turn(&mut s, turn), "turn {turn}: queued by the sweep");
        }
        assert_eq!(w.work[&(1, 33)], 0);
        assert!(!w.turn(&mut s, first + 5));
        assert!(w.queued.is_empty());
    }

    /// A high-priority terminus with work is served before a busy lower one on every
    /// turn, however long it idled before.
    #[test]
    fn a_high_priority_terminus_is_never_overtaken() {
        let mut s = Scheduler::new();
        let mut w = World::default();
        s.add((1, 0), 0);
        s.add((2, 0), 1);
        s.add((3, 0), 2);
        w.push(&mut s, (2, 0), 1, 10_000);
        for turn in 0..2000 {
            w.turn(&mut s, turn);
            assert_eq!(w.sent.iter().filter(|k| k.0 == 2).count(), 1);
        }
        w.push(&mut s, (1, 0), 0, 32);
        for turn in 2000..2032 {
            w.turn(&mut s, turn);
            let served: Vec<u32> = w.sent.iter().filter(|k| k.0 != 3).map(|k| k.0).collect();
            assert_eq!(served, [1], "turn {turn}: only the top level");
        }
        // Then level 1 again, its queue kept meanwhile.
        w.turn(&mut s, 3000);
        assert!(w.visits.contains(&(2, 0)));
    }

    #[test]
    fn lower_priority_waits_while_higher_has_work() {
        let mut s = Scheduler::new();
        let mut w = World::default();
        s.add((1, 0), 0);
        s.add((2, 0), 3);
        w.push(&mut s, (1, 0), 0, 5);
        w.push(&mut s, (2, 0), 3, 100);
        let mut low_served = 0;
        for turn in 0..10 {
            w.turn(&mut s, turn);
            low_served += w.sent.iter().filter(|k| k.0 == 2).count();
        }
        assert_eq!(w.work[&(1, 0)], 0);
        assert_eq!(
            low_served, 5,
            "served only in the 5 turns where priority 0 was idle"
        );
        s.remove_client(1);
        s.remove_client(2);
        assert_eq!(s.len(), 0);
        assert_eq!(s.ready_len(), 0, "removed from the ready queues too");
    }

    #[test]
    fn termini_above_the_lowest_level_are_express() {
        let mut s = Scheduler::new();
        s.add((1, 0), 0);
        s.add((1, 1), 2);
        s.mark_ready((1, 0), 0);
        let mut seen = Vec::new();
        s.turn(true, |k, express, _| {
            seen.push((k, express));
            Served::default()
        });
        assert!(seen.contains(&((1, 0), true)));
        assert!(seen.contains(&((1, 1), false)));
    }
}
