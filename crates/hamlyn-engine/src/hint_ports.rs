//! Which ports' ready words ([`hamlyn_shm::ready`]) the engine reads on a turn, and
//! which ports' doorbells a waiting thread's hand-back arms and a turn clears.
//!
//! A port whose client pushed lately is *hot*: its words are read on every turn, and
//! its doorbell is armed when a waiting thread hands the engine back and cleared when
//! a turn runs again. One whose words stayed empty for [`HINT_HOT_TURNS`] turns and
//! [`COLD_AFTER`], and whose termini are all at the lowest priority level in use, goes
//! *cold* ([`ready::go_cold`]): its doorbell stays armed, with [`ready::COLD`], until it
//! is hot again, so its client's next push rings the engine's eventfd (or, from the
//! hosting process, runs a turn told to read every port), and the ring makes the next
//! turn read every port's words (`Engine`'s `read_all_hints`). Otherwise a turn reads
//! a share of the cold ports ([`ColdLook`]), a backstop. The two kinds are kept in two
//! compact lists, so neither a turn nor a hand-back's arming walks the idle ports (the
//! engine thread's own idle sleep still looks at every port, once per sleep): 256 idle
//! ports cost a few line reads a turn, and a hand-back arms and re-checks the hot ports
//! alone (issue 14: with every port armed and cleared on each hand-back, one hop
//! through the engine took 7.2 µs beside 256 idle ports, 0.53 µs beside one).
//! A port with a terminus above the lowest level in use is never cold: no lower level
//! may be served while a higher terminus's announced work waits unread. A busy-polling
//! engine's ports never go cold.

use std::sync::Arc;

use hamlyn_shm::memory::RingMemory;
use hamlyn_shm::port::header;
use hamlyn_shm::ready;
use hamlyn_shm::region::ShmRegion;
use hamlyn_shm::sync::{AtomicU32, Ordering};
use std::time::Instant;

/// Turns without a hint after which a port may turn cold (and [`COLD_AFTER`]).
pub(crate) const HINT_HOT_TURNS: u32 = 1024;
/// Time without a hint after which a port may turn cold (and [`HINT_HOT_TURNS`]): a
/// cold port's next push rings, so a port that sends every few hundred microseconds
/// must not go cold between two messages while the engine spins idle (1,024 idle turns
/// pass in about 50 µs).
pub(crate) const COLD_AFTER: std::time::Duration = std::time::Duration::from_millis(2);
/// The hint ports' clock is read once in this many turns.
const CLOCK_EVERY_TURNS: u64 = 64;
/// The engine's thread reads a cold port's words at least once in this many turns.
pub(crate) const COLD_PORT_STRIDE: usize = 16;
/// A waiting thread's turns read one cold port's words on every this many-th turn.
pub(crate) const COLD_BACKSTOP_EVERY: u64 = 16;

/// How much of the cold list a turn reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ColdLook {
    /// A `1/COLD_PORT_STRIDE` share: the engine's thread, awake, whose eventfd (which a
    /// cold port's push rings) it reads only every few hundred turns.
    Share,
    /// One port every [`COLD_BACKSTOP_EVERY`]-th turn: a waiting thread's turn, while
    /// the engine's thread sleeps in its poller and wakes for a cold port's ring (which
    /// makes the next turn read every port), or a push of this process that found its
    /// port cold and asks its own turn to read every port (`Driver::nudge`).
    Backstop,
}

/// One port's ready words, as the engine reads them.
#[derive(Debug)]
pub(crate) struct HintPort {
    /// The client.
    cid: u32,
    /// Its port (the ready words are at `header::READY`).
    region: Arc<ShmRegion>,
    /// Ready words in use (one per 64 termini).
    words: usize,
    /// Turns in a row its words held no hint.
    idle: u32,
    /// The highest priority level (smallest number) of its open termini.
    top_level: usize,
    /// When it last had a hint (the hint ports' coarse clock).
    last_hint: Instant,
}

impl HintPort {
    /// Its doorbell word.
    fn bell(&self) -> Option<&AtomicU32> {
        self.region.atomic_u32(header::DOORBELL)
    }

    /// Whether any of its words holds a bit (a look, nothing taken).
    pub(crate) fn hinted(&self) -> bool {
        (0..self.words).any(|i| {
            self.region
                .atomic_u64(header::READY + i * 8)
                .is_some_and(|w| {
                    // Relaxed: the callers order it after their arming with F1.
                    w.load(Ordering::Relaxed) != 0
                })
        })
    }

    /// Cold: its doorbell armed with `COLD`, unless a hint came (then `false`).
    fn go_cold(&self) -> bool {
        self.bell()
            .is_some_and(|b| ready::go_cold(b, || self.hinted()))
    }

    /// Hot again at `now` (as if it had just had a hint): its doorbell cleared.
    fn go_hot(&mut self, now: Instant) {
        self.idle = 0;
        self.last_hint = now;
        if let Some(b) = self.bell() {
            ready::go_hot(b);
        }
    }

    /// Takes its words, calling `found(cid, word, bits)` for each that held hints;
    /// whether any did.
    fn take(&mut self, found: &mut impl FnMut(u32, usize, u64)) -> bool {
        let mut any = false;
        for i in 0..self.words {
            let Some(word) = self.region.atomic_u64(header::READY + i * 8) else {
                continue;
            };
            let bits = ready::take(word);
            if bits != 0 {
                any = true;
                found(self.cid, i, bits);
            }
        }
        if any {
            self.idle = 0;
        } else {
            self.idle = self.idle.saturating_add(1);
        }
        any
    }
}

/// The ports whose ready words the engine reads, hot and cold.
#[derive(Debug)]
pub(crate) struct HintPorts {
    hot: Vec<HintPort>,
    cold: Vec<HintPort>,
    /// Where the next share of the cold list starts.
    cursor: usize,
    /// Turns taken (for [`ColdLook::Backstop`] and the clock).
    turns: u64,
    /// Now, read every [`CLOCK_EVERY_TURNS`] turns.
    clock: Instant,
    /// The lowest priority level in use at the last turn: when it drops (a larger
    /// number), cold ports above the new one turn hot at once.
    lowest: usize,
    /// Ports never go cold (a busy-polling engine never arms a doorbell: an armed cold
    /// port would make its client ring on every push).
    never_cold: bool,
    /// Doorbells these turns disarmed: ports that turned hot, and ports whose going cold
    /// a push withdrew (`ready::go_cold`). A push's turn that kept the doorbells armed
    /// (`Engine::sender_turn`) is not armed throughout if this moved.
    disarmed: u64,
}

impl HintPorts {
    /// No ports; `never_cold` for a busy-polling engine.
    pub(crate) fn new(never_cold: bool) -> HintPorts {
        HintPorts {
            hot: Vec::new(),
            cold: Vec::new(),
            cursor: 0,
            turns: 0,
            disarmed: 0,
            clock: Instant::now(),
            lowest: 0,
            never_cold,
        }
    }
}

impl HintPorts {
    /// A port attached, with `termini` termini (hot: its first requests are coming).
    /// `none_open` is the level to record while it has no terminus open.
    pub(crate) fn add(
        &mut self,
        cid: u32,
        region: Arc<ShmRegion>,
        termini: usize,
        none_open: usize,
    ) {
        self.remove(cid);
        self.hot.push(HintPort {
            cid,
            region,
            words: ready::words_for(termini),
            idle: 0,
            top_level: none_open,
            last_hint: self.clock,
        });
    }

    /// A port gone.
    pub(crate) fn remove(&mut self, cid: u32) {
        self.hot.retain(|p| p.cid != cid);
        self.cold.retain(|p| p.cid != cid);
    }

    /// Client `cid` opened a terminus at `level`.
    pub(crate) fn opened(&mut self, cid: u32, level: usize) {
        if let Some(i) = self.cold.iter().position(|p| p.cid == cid) {
            let mut p = self.cold.swap_remove(i);
            p.go_hot(self.clock);
            self.hot.push(p);
        }
        if let Some(p) = self.hot.iter_mut().find(|p| p.cid == cid) {
            p.top_level = p.top_level.min(level);
            p.idle = 0;
        }
    }

    /// Every port's last hint moved back by [`COLD_AFTER`] (tests: turns pass in
    /// microseconds there).
    #[cfg(test)]
    pub(crate) fn backdate(&mut self) {
        for p in self.hot.iter_mut().chain(self.cold.iter_mut()) {
            if let Some(t) = p.last_hint.checked_sub(COLD_AFTER) {
                p.last_hint = t;
            }
        }
    }

    /// Ports attached (hot and cold).
    #[cfg(test)]
    pub(crate) fn len(&self) -> (usize, usize) {
        (self.hot.len(), self.cold.len())
    }

    /// The hot ports' doorbell words and whether each has a hint (a look after F1):
    /// what an arming before a hand-back or a sleep covers beside the cold ports, whose
    /// doorbells are armed already.
    pub(crate) fn hot_bells(&self) -> impl Iterator<Item = (&AtomicU32, &HintPort)> + '_ {
        self.hot.iter().filter_map(|p| p.bell().map(|b| (b, p)))
    }

    /// One turn's reading: every hot port's words and the cold ones' that `look` says
    /// (every one when `all`: after a ring), calling `found(cid, word, bits)` for each word that held
    /// hints. `lowest` is the lowest priority level in use. Hot ports idle long enough
    /// go cold here (their number is returned); cold ports found with hints (or above
    /// `lowest`) hot.
    pub(crate) fn take(
        &mut self,
        all: bool,
        look: ColdLook,
        lowest: usize,
        mut found: impl FnMut(u32, usize, u64),
    ) -> u64 {
        let mut gone_cold = 0;
        self.turns = self.turns.wrapping_add(1);
        if self.turns % CLOCK_EVERY_TURNS == 0 {
            self.clock = Instant::now();
        }
        // The lowest level in use dropped: cold ports now above it are hot at once
        // (strict priority: none of their announced work may wait behind the new level).
        let all = all || lowest > self.lowest;
        self.lowest = lowest;
        let (clock, never_cold) = (self.clock, self.never_cold);
        let mut i = 0;
        while i < self.hot.len() {
            let Some(p) = self.hot.get_mut(i) else {
                break;
            };
            let any = p.take(&mut found);
            if any {
                p.last_hint = clock;
            }
            let idle = p.idle >= HINT_HOT_TURNS
                && clock.saturating_duration_since(p.last_hint) >= COLD_AFTER;
            if !any && !never_cold && idle && p.top_level >= lowest {
                if p.go_cold() {
                    let p = self.hot.swap_remove(i);
                    self.cold.push(p);
                    gone_cold += 1;
                    continue;
                }
                // A push came as it went: its hint is taken on the next turn.
                p.idle = 0;
                self.disarmed = self.disarmed.wrapping_add(1);
            }
            i += 1;
        }
        if all {
            // Every cold port, by index from the start: a port turned hot is replaced by
            // the last one (`swap_remove`), which is still to be read. (From the cursor,
            // wrapping, a replacement could be a port read already and a port skipped:
            // a push on it, announced and rung, left unseen.)
            let mut i = 0;
            while i < self.cold.len() {
                if !self.look_at_cold(i, lowest, &mut found) {
                    i += 1;
                }
            }
            self.cursor = 0;
            return gone_cold;
        }
        let share = match look {
            ColdLook::Share => self.cold.len().div_ceil(COLD_PORT_STRIDE),
            ColdLook::Backstop => usize::from(self.turns % COLD_BACKSTOP_EVERY == 0),
        };
        for _ in 0..share {
            if self.cold.is_empty() {
                break;
            }
            if self.cursor >= self.cold.len() {
                self.cursor = 0;
            }
            if !self.look_at_cold(self.cursor, lowest, &mut found) {
                self.cursor += 1;
            }
        }
        gone_cold
    }

    /// Whether any hot port's ready words hold a bit (a look, nothing taken): what a
    /// waiting thread's glance reads before it pays for a turn (`EngineState::quiet`).
    pub(crate) fn hot_hinted(&self) -> bool {
        self.hot.iter().any(HintPort::hinted)
    }

    /// Doorbells disarmed so far by ports turning hot or withdrawing their going cold
    /// (compared before and after a turn).
    pub(crate) fn disarmed(&self) -> u64 {
        self.disarmed
    }

    /// Takes cold port `i`'s words; if it had hints (or is above `lowest`), it is hot
    /// again and moves to the hot list, the last cold port taking its place (`true`).
    fn look_at_cold(
        &mut self,
        i: usize,
        lowest: usize,
        found: &mut impl FnMut(u32, usize, u64),
    ) -> bool {
        let Some(p) = self.cold.get_mut(i) else {
            return false;
        };
        if !(p.take(found) || p.top_level < lowest) {
            return false;
        }
        p.go_hot(self.clock);
        self.disarmed = self.disarmed.wrapping_add(1);
        let p = self.cold.swap_remove(i);
        self.hot.push(p);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn_shm::wake::EVENTFD_ARMED;

    fn port() -> Arc<ShmRegion> {
        Arc::new(ShmRegion::create("hint-test", 4096).expect("region"))
    }

    fn hint(r: &ShmRegion, t: u16) {
        let (i, bit) = ready::word_and_bit(t);
        let w = r.atomic_u64(header::READY + i * 8).expect("word");
        // Release: as `ready::announce`, pairs with the Acquire swap in `ready::take`.
        w.fetch_or(bit, Ordering::Release);
    }

    fn bell(r: &ShmRegion) -> u32 {
        r.atomic_u32(header::DOORBELL)
            .expect("doorbell")
            .load(Ordering::Relaxed)
    }

    /// Idle ports turn cold, their doorbells armed with COLD, and are then read on a
    /// share of the engine thread's turns; a hint makes a port hot again (its doorbell
    /// cleared) and is always found, within COLD_PORT_STRIDE turns.
    #[test]
    fn idle_ports_go_cold_and_come_back_at_their_first_hint() {
        let mut h = HintPorts::new(false);
        let regions: Vec<_> = (0..64).map(|_| port()).collect();
        for (cid, r) in regions.iter().enumerate() {
            h.add(cid as u32, r.clone(), 256, 0);
            h.opened(cid as u32, 0);
        }
        h.backdate();
        let mut gone = 0;
        for _ in 0..HINT_HOT_TURNS {
            assert_eq!(bell(&regions[5]), 0, "hot: not armed");
            gone += h.take(false, ColdLook::Share, 0, |_, _, _| panic!("no hints yet"));
        }
        assert_eq!(h.len(), (0, 64), "all cold");
        assert_eq!(gone, 64, "counted");
        assert_eq!(h.hot_bells().count(), 0);
        for r in &regions {
            assert_eq!(
                bell(r),
                ready::COLD | EVENTFD_ARMED,
                "cold ports stay armed"
            );
        }
        // A hint on port 40, terminus 200 (word 3), is found within the stride.
        hint(&regions[40], 200);
        let mut got = Vec::new();
        for _ in 0..COLD_PORT_STRIDE {
            h.take(false, ColdLook::Share, 0, |cid, w, bits| {
                got.push((cid, w, bits))
            });
            if !got.is_empty() {
                break;
            }
        }
        assert_eq!(got, [(40, 3, 1u64 << (200 % 64))]);
        assert_eq!(h.len(), (1, 63), "hot again");
        assert_eq!(bell(&regions[40]), 0, "hot: its clients need not ring");
        // After a ring every port is read at once.
        hint(&regions[7], 1);
        let mut got = Vec::new();
        h.take(true, ColdLook::Backstop, 0, |cid, _, _| got.push(cid));
        assert_eq!(got, [7]);
        h.remove(7);
        h.remove(40);
        assert_eq!(h.len().0 + h.len().1, 62);
    }

    /// Cold ports `n` (none hinted), the cursor left at `cursor` by Share reads.
    fn all_cold(n: usize, cursor: usize) -> (HintPorts, Vec<Arc<ShmRegion>>) {
        let mut h = HintPorts::new(false);
        let regions: Vec<_> = (0..n).map(|_| port()).collect();
        for (cid, r) in regions.iter().enumerate() {
            h.add(cid as u32, r.clone(), 1, 0);
            h.opened(cid as u32, 0);
        }
        h.backdate();
        for _ in 0..HINT_HOT_TURNS {
            h.take(false, ColdLook::Backstop, 0, |_, _, _| {});
        }
        assert_eq!(h.len(), (0, n));
        h.cursor = cursor;
        (h, regions)
    }

    /// A read of every cold port (after a ring) finds every hint, whatever the cursor
    /// and however many ports turn hot on the way (the review's case: from cursor 2
    /// of [A, B, X] with hints on A and B, a wrapping read skipped B).
    #[test]
    fn a_read_of_every_cold_port_misses_none() {
        for n in 1..6usize {
            for cursor in 0..n {
                for hinted in 1u32..(1 << n) {
                    let (mut h, regions) = all_cold(n, cursor);
                    for (i, r) in regions.iter().enumerate() {
                        if hinted & (1 << i) != 0 {
                            hint(r, 0);
                        }
                    }
                    let mut got = Vec::new();
                    h.take(true, ColdLook::Backstop, 0, |cid, _, _| got.push(cid));
                    got.sort_unstable();
                    let want: Vec<u32> = (0..n as u32).filter(|i| hinted & (1 << i) != 0).collect();
                    assert_eq!(got, want, "{n} ports, cursor {cursor}");
                    assert_eq!(h.len().0, want.len(), "hot again");
                }
            }
        }
    }

    /// A lower level comes into use: cold ports above it turn hot on that turn (strict
    /// priority), without waiting for their share.
    #[test]
    fn cold_ports_above_a_new_lowest_level_turn_hot_at_once() {
        let (mut h, _regions) = all_cold(8, 0);
        h.take(false, ColdLook::Backstop, 1, |_, _, _| {});
        assert_eq!(h.len(), (8, 0));
    }

    /// Hint ports (`never_cold` as given) with one port of one terminus, opened at level 0.
    fn one_open_port(never_cold: bool) -> (HintPorts, Arc<ShmRegion>) {
        let mut h = HintPorts::new(never_cold);
        let r = port();
        h.add(1, r.clone(), 1, 0);
        h.opened(1, 0);
        (h, r)
    }

    /// A busy-polling engine's ports never go cold (it arms no doorbell; an armed cold
    /// port would have its client ring on every push).
    #[test]
    fn a_busy_polling_engines_ports_stay_hot() {
        let (mut h, r) = one_open_port(true);
        h.backdate();
        for _ in 0..2 * HINT_HOT_TURNS {
            h.take(false, ColdLook::Share, 0, |_, _, _| {});
        }
        assert_eq!(h.len(), (1, 0));
        assert_eq!(bell(&r), 0);
    }

    /// A waiting thread's turns read one cold port on every COLD_BACKSTOP_EVERY-th
    /// turn only: a cold port's push rings, or asks its own turn to read every port.
    #[test]
    fn a_waiters_turn_reads_cold_ports_as_a_backstop_only() {
        let (mut h, regions) = all_cold(32, 0);
        for r in &regions {
            hint(r, 0);
        }
        let mut found = 0;
        for _ in 0..COLD_BACKSTOP_EVERY * 4 {
            h.take(false, ColdLook::Backstop, 0, |_, _, _| found += 1);
        }
        assert_eq!(found, 4, "one port per COLD_BACKSTOP_EVERY turns");
        h.take(true, ColdLook::Backstop, 0, |_, _, _| found += 1);
        assert_eq!(found, 32, "a ring reads them all");
        assert_eq!(h.len(), (32, 0));
    }

    /// A hint that comes as a port is about to go cold keeps it hot, unarmed.
    #[test]
    fn a_hint_at_the_arming_keeps_the_port_hot() {
        let (mut h, r) = one_open_port(false);
        for _ in 0..HINT_HOT_TURNS - 1 {
            h.take(false, ColdLook::Share, 0, |_, _, _| {});
        }
        // The last idle turn's `take` saw nothing; the hint lands before `go_cold`'s
        // look (what `HintPort::go_cold` does between the two).
        let p = &h.hot[0];
        assert_eq!(p.idle, HINT_HOT_TURNS - 1);
        hint(&r, 0);
        assert!(!p.go_cold(), "the look after F1 sees the hint");
        assert_eq!(bell(&r), 0, "withdrawn");
    }

    /// A port with a terminus above the lowest level in use stays hot.
    #[test]
    fn a_port_above_the_lowest_level_never_goes_cold() {
        let mut h = HintPorts::new(false);
        h.add(1, port(), 4, 3);
        h.opened(1, 0);
        h.add(2, port(), 4, 3);
        h.opened(2, 2);
        h.backdate();
        for _ in 0..2 * HINT_HOT_TURNS {
            h.take(false, ColdLook::Share, 2, |_, _, _| {});
        }
        assert_eq!(
            h.len(),
            (1, 1),
            "port 1 (level 0) hot, port 2 (the lowest) cold"
        );
    }
}
