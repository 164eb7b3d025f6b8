//! Terminus scheduling: strict priority between levels, round robin within a level,
//! one packet per terminus per turn (seed 000 §2.3, seed 002 priorities).
//!
//! The scheduler knows termini only by an opaque key; the engine asks it for the order in
//! which to visit termini this turn and tells it which ones had work.

/// Opaque terminus key: (client id, terminus index).
pub type TerminusKey = (u32, u16);

/// Priority levels: 0 is served first.
pub const PRIORITY_LEVELS: usize = 4;

/// Round robin within priority levels.
#[derive(Debug, Default)]
pub struct Scheduler {
    levels: [Vec<TerminusKey>; PRIORITY_LEVELS],
    /// Where the next turn starts in each level (rotates so no terminus is always first).
    cursor: [usize; PRIORITY_LEVELS],
}

impl Scheduler {
    /// No termini.
    pub fn new() -> Scheduler {
        Scheduler::default()
    }

    /// Adds a terminus at `priority` (clamped to the lowest level).
    pub fn add(&mut self, key: TerminusKey, priority: u8) {
        self.remove(key);
        let level = usize::from(priority).min(PRIORITY_LEVELS - 1);
        self.levels[level].push(key);
    }

    /// Removes a terminus.
    pub fn remove(&mut self, key: TerminusKey) {
        for level in &mut self.levels {
            level.retain(|k| *k != key);
        }
    }

    /// Removes every terminus of a client.
    pub fn remove_client(&mut self, client: u32) {
        for level in &mut self.levels {
            level.retain(|k| k.0 != client);
        }
    }

    /// Number of termini.
    pub fn len(&self) -> usize {
        self.levels.iter().map(Vec::len).sum()
    }

    /// Whether no terminus is scheduled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One turn: visits the levels from highest priority down; within a level, every
    /// terminus once in rotating order, calling `serve` (which sends at most one packet
    /// and says whether the terminus had work). A lower level is visited only if no
    /// terminus of a higher level had work. Returns whether anything had work.
    ///
    /// The engine walks the same order itself with [`Scheduler::level_len`],
    /// [`Scheduler::nth`] and [`Scheduler::rotate`], so that its `serve` may borrow the
    /// whole engine state.
    pub fn turn(&mut self, mut serve: impl FnMut(TerminusKey) -> bool) -> bool {
        for level in 0..PRIORITY_LEVELS {
            let n = self.level_len(level);
            if n == 0 {
                continue;
            }
            let mut busy = false;
            for i in 0..n {
                if let Some(key) = self.nth(level, i) {
                    busy |= serve(key);
                }
            }
            self.rotate(level);
            if busy {
                return true;
            }
        }
        false
    }

    /// Termini at priority `level` (0 for a level that does not exist).
    #[inline]
    pub fn level_len(&self, level: usize) -> usize {
        self.levels.get(level).map_or(0, Vec::len)
    }

    /// The `i`-th terminus of `level` in this turn's order (which starts at the level's
    /// cursor and wraps around).
    #[inline]
    pub fn nth(&self, level: usize, i: usize) -> Option<TerminusKey> {
        let keys = self.levels.get(level)?;
        let n = keys.len();
        if i >= n {
            return None;
        }
        let start = self.start(level, n);
        let at = start + i;
        keys.get(if at >= n { at - n } else { at }).copied()
    }

    /// Moves the start of `level`'s order on by one, so no terminus is always first.
    #[inline]
    pub fn rotate(&mut self, level: usize) {
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
        for _ in 0..300 {
            s.turn(|k| {
                served[usize::from(k.1)] += 1;
                true
            });
        }
        assert_eq!(served, [300, 300, 300]);
        let mut first = Vec::new();
        for _ in 0..3 {
            let mut seen = None;
            s.turn(|k| {
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
    fn lower_priority_waits_while_higher_has_work() {
        let mut s = Scheduler::new();
        s.add((1, 0), 0);
        s.add((2, 0), 3);
        let mut high_work = 5;
        let mut low_served = 0;
        for _ in 0..10 {
            s.turn(|k| {
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
