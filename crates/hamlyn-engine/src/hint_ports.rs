//! Which ports' ready words ([`hamlyn_shm::ready`]) the engine reads on a turn.
//!
//! A port whose client pushed lately is *hot*: its words are read on every turn. One
//! whose words stayed empty for [`HINT_HOT_TURNS`] turns, and whose termini are all at
//! the lowest priority level in use, is *cold*: a turn reads a `1/COLD_PORT_STRIDE`
//! share of the cold ports, in turn, so each is read at least every
//! [`COLD_PORT_STRIDE`] turns, and hot again at its first hint. The two kinds are kept
//! in two compact lists, so a turn's cost follows the hot ports, not every port
//! attached (256 idle ports cost a read of 16 lines a turn, not a walk of 256 clients).
//! A port with a terminus above the lowest level in use is never cold: no lower level
//! may be served while a higher terminus's announced work waits unread.

use std::sync::Arc;

use hamlyn_shm::memory::RingMemory;
use hamlyn_shm::port::header;
use hamlyn_shm::ready;
use hamlyn_shm::region::ShmRegion;

/// Turns without a hint after which a port may turn cold.
pub(crate) const HINT_HOT_TURNS: u32 = 1024;
/// A cold port's words are read at least once in this many turns.
pub(crate) const COLD_PORT_STRIDE: usize = 16;

/// One port's ready words, as the engine reads them.
#[derive(Debug)]
struct HintPort {
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
}

impl HintPort {
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
#[derive(Debug, Default)]
pub(crate) struct HintPorts {
    hot: Vec<HintPort>,
    cold: Vec<HintPort>,
    /// Where the next share of the cold list starts.
    cursor: usize,
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
            p.idle = 0;
            self.hot.push(p);
        }
        if let Some(p) = self.hot.iter_mut().find(|p| p.cid == cid) {
            p.top_level = p.top_level.min(level);
            p.idle = 0;
        }
    }

    /// Ports attached (hot and cold).
    #[cfg(test)]
    pub(crate) fn len(&self) -> (usize, usize) {
        (self.hot.len(), self.cold.len())
    }

    /// One turn's reading: every hot port's words and a share of the cold ones' (every
    /// one when `all`), calling `found(cid, word, bits)` for each word that held hints.
    /// `lowest` is the lowest priority level in use.
    pub(crate) fn take(
        &mut self,
        all: bool,
        lowest: usize,
        mut found: impl FnMut(u32, usize, u64),
    ) {
        let mut i = 0;
        while i < self.hot.len() {
            let Some(p) = self.hot.get_mut(i) else {
                break;
            };
            let any = p.take(&mut found);
            if !any && p.idle >= HINT_HOT_TURNS && p.top_level >= lowest {
                let p = self.hot.swap_remove(i);
                self.cold.push(p);
                continue;
            }
            i += 1;
        }
        let n = self.cold.len();
        let share = if all { n } else { n.div_ceil(COLD_PORT_STRIDE) };
        for _ in 0..share {
            if self.cold.is_empty() {
                break;
            }
            if self.cursor >= self.cold.len() {
                self.cursor = 0;
            }
            let Some(p) = self.cold.get_mut(self.cursor) else {
                break;
            };
            let any = p.take(&mut found);
            if any || p.top_level < lowest {
                p.idle = 0;
                let p = self.cold.swap_remove(self.cursor);
                self.hot.push(p);
            } else {
                self.cursor += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn_shm::sync::Ordering;

    fn port() -> Arc<ShmRegion> {
        Arc::new(ShmRegion::create("hint-test", 4096).expect("region"))
    }

    fn hint(r: &ShmRegion, t: u16) {
        let (i, bit) = ready::word_and_bit(t);
        let w = r.atomic_u64(header::READY + i * 8).expect("word");
        // Release: as `ready::announce`, pairs with the Acquire swap in `ready::take`.
        w.fetch_or(bit, Ordering::Release);
    }

    /// Idle ports turn cold and are then read on a share of the turns; a hint makes a
    /// port hot again and is always found, within COLD_PORT_STRIDE turns.
    #[test]
    fn idle_ports_go_cold_and_come_back_at_their_first_hint() {
        let mut h = HintPorts::default();
        let regions: Vec<_> = (0..64).map(|_| port()).collect();
        for (cid, r) in regions.iter().enumerate() {
            h.add(cid as u32, r.clone(), 256, 0);
            h.opened(cid as u32, 0);
        }
        for _ in 0..HINT_HOT_TURNS {
            h.take(false, 0, |_, _, _| panic!("no hints yet"));
        }
        assert_eq!(h.len(), (0, 64), "all cold");
        // A hint on port 40, terminus 200 (word 3), is found within the stride.
        hint(&regions[40], 200);
        let mut got = Vec::new();
        for _ in 0..COLD_PORT_STRIDE {
            h.take(false, 0, |cid, w, bits| got.push((cid, w, bits)));
            if !got.is_empty() {
                break;
            }
        }
        assert_eq!(got, [(40, 3, 1u64 << (200 % 64))]);
        assert_eq!(h.len(), (1, 63), "hot again");
        // After a sleep every port is read at once.
        hint(&regions[7], 1);
        let mut got = Vec::new();
        h.take(true, 0, |cid, _, _| got.push(cid));
        assert_eq!(got, [7]);
        h.remove(7);
        h.remove(40);
        assert_eq!(h.len().0 + h.len().1, 62);
    }

    /// A port with a terminus above the lowest level in use stays hot.
    #[test]
    fn a_port_above_the_lowest_level_never_goes_cold() {
        let mut h = HintPorts::default();
        h.add(1, port(), 4, 3);
        h.opened(1, 0);
        h.add(2, port(), 4, 3);
        h.opened(2, 2);
        for _ in 0..2 * HINT_HOT_TURNS {
            h.take(false, 2, |_, _, _| {});
        }
        assert_eq!(
            h.len(),
            (1, 1),
            "port 1 (level 0) hot, port 2 (the lowest) cold"
        );
    }
}
