//! Ready hints: which termini of a port have requests the engine has not seen.
//!
//! Without them the engine finds work by looking at every terminus's ring on every turn:
//! a turn then costs one shared cache line per terminus, and a request waits for the
//! walk to come round to it, so the round trip grows with the termini a client has open
//! (seed 003 Figure 6, the latency against the number of logical channels, was 1.33× at
//! 64 channels on an idle machine). With them a client that pushes a request also sets
//! its terminus's bit in the port's ready words, and the engine takes the words once per
//! turn (one line per port) and looks at the termini they name.
//!
//! The bits are hints, never the only way to work: a client that does not set them (or
//! clears them: the words are its memory) still has its termini looked at by the
//! engine's sweep, a share of them on every turn, so it only slows itself down.
//!
//! **No lost hint.** The producer publishes its request (a Release store of the ring's
//! producer index), then sets its bit with a Release read-modify-write ([`announce`]),
//! then issues the SeqCst fence F2 and reads the doorbell ([`crate::wake`]'s protocol).
//! The engine takes a word with an Acquire swap ([`take`]): a swap that reads a bit
//! reads it from the producer's Release RMW (or a later RMW, which continues its release
//! sequence), so the engine's reads of the ring after it see the request. A bit set
//! after the swap stays for the next turn. Before the engine sleeps it arms the doorbell,
//! issues F1 and reads the ready words: either F2 came first in the fences' single
//! total order, and the bit (set before F2) is seen, or F1 did, and the producer's read
//! of the doorbell after F2 sees the arming and rings. The bit is set on every push,
//! found set or not: skipping the write when the bit looks set would need a fence
//! before that look as well. The loom models below check these cases.

use crate::sync::{AtomicU64, Ordering};

/// Ready words in a port: one bit per terminus, [`crate::port::MAX_TERMINI`] bits.
pub const READY_WORDS: usize = 4;

/// Ready words a port of `termini` termini uses (one per 64 termini, at most
/// [`READY_WORDS`]).
#[inline]
pub fn words_for(termini: usize) -> usize {
    termini.div_ceil(64).min(READY_WORDS)
}

/// The word and bit of terminus `t`.
#[inline]
pub fn word_and_bit(t: u16) -> (usize, u64) {
    (usize::from(t) / 64, 1u64 << (t % 64))
}

/// Producer side, right after publishing a request on the terminus whose bit is `bit`
/// in `word`, and before the fence F2 ([`wake::publish_fence`](crate::wake::publish_fence))
/// and the look at the doorbell: sets the bit.
#[inline]
pub fn announce(word: &AtomicU64, bit: u64) {
    // Release: pairs with the Acquire swap in `take`, so an engine that takes this bit
    // also sees the request published before it.
    word.fetch_or(bit, Ordering::Release);
}

/// Consumer (engine) side: the bits set since the last take, the word left zero. The
/// rings they name are read after this returns.
#[inline]
pub fn take(word: &AtomicU64) -> u64 {
    // Relaxed: a look before the swap, so that an idle port costs a read, not a write;
    // a bit this look misses stays set for the next call.
    if word.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    // Acquire: pairs with the Release `fetch_or` in `announce`.
    word.swap(0, Ordering::Acquire)
}

#[cfg(all(test, loom))]
mod loom_tests {
    use std::sync::Arc;

    use super::*;
    use crate::sync::{fence, AtomicU32};

    /// Two requests pushed one after the other on one terminus while the engine takes
    /// hints and reads the ring: once both sides are done the engine has seen every
    /// request, or the bit is set (its next turn sees the rest).
    #[test]
    fn loom_no_lost_hint() {
        crate::loom_model(|| {
            let word = Arc::new(AtomicU64::new(0));
            let prod = Arc::new(AtomicU64::new(0));
            let (w2, p2) = (word.clone(), prod.clone());
            let client = loom::thread::spawn(move || {
                for n in 1..=2 {
                    // Release: pairs with the engine's Acquire load of the index.
                    p2.store(n, Ordering::Release);
                    announce(&w2, 1);
                }
            });
            // The engine: one turn that takes the hints and, for a hinted terminus,
            // reads the ring (what it consumes is everything the index says).
            let mut seen = 0;
            if take(&word) & 1 != 0 {
                // Acquire: pairs with the client's Release store of the index.
                seen = prod.load(Ordering::Acquire);
            }
            client.join().expect("client");
            let left = word.load(Ordering::Relaxed) & 1 != 0;
            assert!(
                seen == 2 || left,
                "request(s) after {seen} neither seen nor announced"
            );
        });
    }

    /// The engine about to sleep arms the doorbell and looks at the ready word (F1);
    /// the client pushes, announces, issues F2 and looks at the doorbell. Either the
    /// engine sees the hint and stays awake, or the client sees the doorbell armed
    /// (and rings).
    #[test]
    fn loom_a_sleeping_engine_sees_the_hint_or_is_rung() {
        crate::loom_model(|| {
            let word = Arc::new(AtomicU64::new(0));
            let bell = Arc::new(AtomicU32::new(0));
            let (w2, b2) = (word.clone(), bell.clone());
            let client = loom::thread::spawn(move || {
                announce(&w2, 1);
                // F2, as `wake::publish_fence`.
                fence(Ordering::SeqCst);
                // Relaxed: ordered by F2.
                b2.load(Ordering::Relaxed) != 0
            });
            // Relaxed, then F1: as `wake::arm_eventfd`.
            bell.fetch_or(1, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            // Relaxed: ordered by F1.
            let hinted = word.load(Ordering::Relaxed) != 0;
            let rings = client.join().expect("client");
            assert!(hinted || rings, "the engine sleeps on an unannounced push");
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn bits_are_set_once_and_taken_once() {
        let w = AtomicU64::new(0);
        assert_eq!(take(&w), 0);
        let (i, b) = word_and_bit(70);
        assert_eq!((i, b), (1, 1 << 6));
        announce(&w, b);
        announce(&w, b);
        announce(&w, 1);
        assert_eq!(take(&w), b | 1);
        assert_eq!(take(&w), 0, "taken");
        assert_eq!(word_and_bit(255), (3, 1 << 63));
    }
}
