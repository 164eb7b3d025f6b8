//! Terminus scheduling: strict priority between levels, round robin within a level,
//! one packet per terminus per turn (seed 000 §2.3, seed 002 priorities).
//!
//! The scheduler knows termini only by an opaque key; the engine asks it for the order in
//! which to visit termini this turn and tells it which ones had work.
//!
//! **Cold termini.** Looking at a terminus costs a read of its ring's index in the
//! client's shared memory (a page of its own per port: with hundreds of ports, mostly TLB
//! and cache misses). A terminus that has had no work for [`HOT_TURNS`] turns is *cold*
//! and is looked at only every [`COLD_STRIDE`]-th turn (staggered, so each turn looks at
//! a 1/`COLD_STRIDE` share of them); one that has work is hot again at once. A turn's
//! cost then grows with the busy termini, not with every terminus that exists, and a
//! cold terminus's first request waits at most `COLD_STRIDE` turns. After the engine
//! slept, its first turn looks at every terminus ([`Scheduler::due`]'s `all`): a doorbell
//! is not left waiting. Only termini of the lowest priority level in use go cold: a
//! terminus of a higher level is looked at on every turn, since a lower level may be
//! served only once every higher terminus is known idle (strict priority, never
//! inverted by a cold high-priority terminus).

/// Opaque terminus key: (client id, terminus index).
pub(crate) type TerminusKey = (u32, u16);

/// Priority levels: 0 is served first.
pub(crate) const PRIORITY_LEVELS: usize = 4;
/// Turns without work after which a terminus is cold.
pub(crate) const HOT_TURNS: u32 = 1024;
/// A cold terminus is looked at every this many turns.
pub(crate) const COLD_STRIDE: u64 = 16;

/// Round robin within priority levels.
#[derive(Debug, Default)]
pub(crate) struct Scheduler {
    levels: [Vec<TerminusKey>; PRIORITY_LEVELS],
    /// Consecutive turns each terminus had no work, by its place in `levels`.
    idle: [Vec<u32>; PRIORITY_LEVELS],
    /// Where the next turn starts in each level (rotates so no terminus is always first).
    cursor: [usize; PRIORITY_LEVELS],
}

impl Scheduler {
    /// No termini.
    pub(crate) fn new() -> Scheduler {
        Scheduler::default()
    }

    /// Adds a terminus at `priority` (clamped to the lowest level).
    pub(crate) fn add(&mut self, key: TerminusKey, priority: u8) {
        self.remove(key);
        let level = usize::from(priority).min(PRIORITY_LEVELS - 1);
        self.levels[level].push(key);
        // A new terminus is hot: its first requests are usually on their way.
        self.idle[level].push(0);
    }

    /// Removes a terminus.
    pub(crate) fn remove(&mut self, key: TerminusKey) {
        self.remove_where(|k| k == key);
    }

    /// Removes every terminus of a client.
    pub(crate) fn remove_client(&mut self, client: u32) {
        self.remove_where(|k| k.0 == client);
    }

    /// Removes the termini `gone` says, with their idle counts.
    fn remove_where(&mut self, gone: impl Fn(TerminusKey) -> bool) {
        for (keys, idle) in self.levels.iter_mut().zip(self.idle.iter_mut()) {
            let mut i = 0;
            while i < keys.len() {
                if gone(keys[i]) {
                    keys.remove(i);
                    if i < idle.len() {
                        idle.remove(i);
                    }
                } else {
                    i += 1;
                }
            }
        }
    }

    /// Number of termini.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.levels.iter().map(Vec::len).sum()
    }

    /// One turn (number `turn`): visits the levels from highest priority down; within a
    /// level, every terminus that is due ([`Scheduler::due`]; `all` after a sleep) once,
    /// in rotating order, calling `serve` (which sends at most one packet and says whether
    /// the terminus had work). A lower level is visited only if no terminus of a higher
    /// level had work. Returns whether anything had work. This is the engine's own walk.
    /// `serve` is also told whether the terminus is above the lowest level in use (its
    /// single-packet messages are express: `Fabric::send_express`).
    pub(crate) fn turn(
        &mut self,
        turn: u64,
        all: bool,
        mut serve: impl FnMut(TerminusKey, bool) -> bool,
    ) -> bool {
        let mut busy = false;
        // Strict priority: a lower level is served only once every terminus above it is
        // known to be idle, so above the lowest level in use no terminus is left cold
        // (looking at it is what proves it idle). The cold saving applies to the lowest
        // level in use, which is every terminus when all share one priority.
        let lowest = (0..PRIORITY_LEVELS)
            .rev()
            .find(|&l| self.level_len(l) > 0)
            .unwrap_or(0);
        for level in 0..PRIORITY_LEVELS {
            let n = self.level_len(level);
            if n == 0 {
                continue;
            }
            for i in 0..n {
                let Some(place) = self.place(level, i) else {
                    continue;
                };
                if level == lowest && !self.due(level, place, turn, all) {
                    continue;
                }
                if let Some(key) = self.at(level, place) {
                    let had_work = serve(key, level < lowest);
                    self.record(level, place, had_work);
                    busy |= had_work;
                }
            }
            self.rotate(level);
            if busy {
                break;
            }
        }
        busy
    }

    /// Termini at priority `level` (0 for a level that does not exist).
    #[inline]
    pub(crate) fn level_len(&self, level: usize) -> usize {
        self.levels.get(level).map_or(0, Vec::len)
    }

    /// The `i`-th terminus of `level` in this turn's order (which starts at the level's
    /// cursor and wraps around).
    #[cfg(test)]
    pub(crate) fn nth(&self, level: usize, i: usize) -> Option<TerminusKey> {
        self.at(level, self.place(level, i)?)
    }

    /// The terminus at `place` of `level` (a place from [`Scheduler::place`]).
    #[inline]
    pub(crate) fn at(&self, level: usize, place: usize) -> Option<TerminusKey> {
        self.levels.get(level)?.get(place).copied()
    }

    /// Where the `i`-th terminus of `level` in this turn's order sits in the level.
    #[inline]
    pub(crate) fn place(&self, level: usize, i: usize) -> Option<usize> {
        let n = self.levels.get(level)?.len();
        if i >= n {
            return None;
        }
        let at = self.start(level, n) + i;
        Some(if at >= n { at - n } else { at })
    }

    /// Whether the terminus at `place` of `level` is to be looked at on turn `turn`: when
    /// it is hot, when `all` (the first turn after a sleep), or on its share of the cold
    /// turns.
    #[inline]
    pub(crate) fn due(&self, level: usize, place: usize, turn: u64, all: bool) -> bool {
        let idle = self
            .idle
            .get(level)
            .and_then(|v| v.get(place))
            .copied()
            .unwrap_or(0);
        all || idle < HOT_TURNS || (turn.wrapping_add(place as u64)) % COLD_STRIDE == 0
    }

    /// Records whether the terminus at `place` of `level` had work when looked at.
    #[inline]
    pub(crate) fn record(&mut self, level: usize, place: usize, busy: bool) {
        if let Some(idle) = self.idle.get_mut(level).and_then(|v| v.get_mut(place)) {
            *idle = if busy { 0 } else { idle.saturating_add(1) };
        }
    }

    /// Moves the start of `level`'s order on by one, so no terminus is always first.
    #[inline]
    pub(crate) fn rotate(&mut self, level: usize) {
        let n = self.level_len(level);
        if n == 0 {
            return;
        }
        let next = self.start(level, n) + 1;
        if let Some(c) = self.cursor.get_mut(level) {
            *c = if next == n { 0 } else { next };
        }
    }

    /// Where `level`'s order starts (its cursor, kept below `n` as termini come and go);
    /// `n` is not 0.
    #[inline]
    fn start(&self, level: usize, n: usize) -> usize {
        let c = self.cursor.get(level).copied().unwrap_or(0);
        if c < n {
            c
        } else {
            c % n.max(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_is_fair_within_a_level() {
        let mut s = Scheduler::new();
        for t in 0..3 {
            s.add((1, t), 0);
        }
        let mut served = [0u32; 3];
        for turn in 0..300 {
            s.turn(turn, false, |k, _| {
                served[usize::from(k.1)] += 1;
                true
            });
        }
        assert_eq!(served, [300, 300, 300]);
        let mut first = Vec::new();
        for turn in 300..303 {
            let mut seen = None;
            s.turn(turn, false, |k, _| {
                seen.get_or_insert(k);
                true
            });
            first.extend(seen);
        }
        first.sort();
        first.dedup();
        assert_eq!(first.len(), 3, "the first terminus served rotates");
    }

    #[test]
    fn an_idle_terminus_turns_cold_and_hot_again() {
        let mut s = Scheduler::new();
        s.add((1, 0), 0);
        s.add((2, 0), 0);
        let place = |s: &Scheduler, key: TerminusKey| {
            (0..2)
                .find(|&i| s.nth(0, i) == Some(key))
                .and_then(|i| s.place(0, i))
                .expect("scheduled")
        };
        let p = place(&s, (1, 0));
        for turn in 0..u64::from(HOT_TURNS) {
            assert!(s.due(0, p, turn, false), "hot while it idled {turn} turns");
            s.record(0, p, false);
        }
        // Cold now: looked at on one turn in COLD_STRIDE, and on every turn after a sleep.
        let due: Vec<u64> = (0..2 * COLD_STRIDE)
            .filter(|&t| s.due(0, p, t, false))
            .collect();
        assert_eq!(due.len(), 2, "{due:?}");
        assert!((0..2 * COLD_STRIDE).all(|t| s.due(0, p, t, true)));
        // The other terminus, never idle, is untouched.
        let q = place(&s, (2, 0));
        assert!((0..2 * COLD_STRIDE).all(|t| s.due(0, q, t, false)));
        // Work makes it hot at once.
        s.record(0, p, true);
        assert!((0..2 * COLD_STRIDE).all(|t| s.due(0, p, t, false)));
        // Removing a terminus keeps the counts with their termini.
        for _ in 0..HOT_TURNS {
            s.record(0, q, false);
        }
        s.remove((1, 0));
        let q = place(&s, (2, 0));
        assert_eq!(
            (0..COLD_STRIDE).filter(|&t| s.due(0, q, t, false)).count(),
            1
        );
    }

    /// A high-priority terminus that went cold is still served before a busy lower one
    /// (a cold terminus is skipped only at the lowest level in use).
    #[test]
    fn a_cold_high_priority_terminus_is_never_overtaken() {
        let mut s = Scheduler::new();
        s.add((1, 0), 0);
        s.add((2, 0), 1);
        s.add((3, 0), 2);
        // The top level goes cold while level 1 stays busy (hot).
        for turn in 0..u64::from(HOT_TURNS) + 1 {
            s.turn(turn, false, |k, _| k.0 == 2);
        }
        // Now level 0 gets work too: on every later turn (not only its cold share of
        // them), the highest level with work is the one served.
        for turn in 2001..2001 + 2 * COLD_STRIDE {
            let mut served = Vec::new();
            s.turn(turn, false, |k, _| {
                let work = k.0 <= 2;
                if work {
                    served.push(k.0);
                }
                work
            });
            assert_eq!(served, [1], "turn {turn}: only the top level, cold or not");
        }
    }

    #[test]
    fn lower_priority_waits_while_higher_has_work() {
        let mut s = Scheduler::new();
        s.add((1, 0), 0);
        s.add((2, 0), 3);
        let mut high_work = 5;
        let mut low_served = 0;
        for turn in 0..10 {
            s.turn(turn, false, |k, _| {
                if k.0 == 1 {
                    if high_work > 0 {
                        high_work -= 1;
                        return true;
                    }
                    return false;
                }
                low_served += 1;
                true
            });
        }
        assert_eq!(high_work, 0);
        assert_eq!(
            low_served, 5,
            "served only in the 5 turns where priority 0 was idle"
        );
        s.remove_client(1);
        assert_eq!(s.len(), 1);
    }
}
