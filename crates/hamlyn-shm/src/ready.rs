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
//!
//! **Cold ports.** An engine with hundreds of ports, most of them idle, should not pay
//! for the idle ones on every turn, nor on every arming of the doorbells before it
//! sleeps or hands itself back to its thread (once per message when a waiting thread
//! drives it). So a port idle for long enough goes *cold* ([`go_cold`]): the engine
//! sets [`COLD`] with the doorbell's `EVENTFD_ARMED` in one read-modify-write, issues
//! F1 and looks at the port's ready words once more (a push before the arming is seen
//! then, and the port stays hot). From then on the engine reads its words only now and
//! then and leaves its doorbell armed while it is awake: a push on a cold port rings
//! the engine's eventfd (one system call, the first push after an idle spell), or, in
//! the process that hosts the engine, runs a turn itself (`hamlyn_engine::Driver::nudge`)
//! that it tells to read every port's words ([`cold_after_fence`]), where a push on a
//! hot port runs one that reads the hot ports'. The ring, or that turn, makes the
//! engine read every port's words, and the port is hot again ([`go_hot`]). Either the client's F2 comes first in
//! the fences' order, and the engine's look after F1 sees the hint (the port stays
//! hot), or F1 does, and the client's look at the doorbell after F2 sees both bits
//! (loom model `loom_a_push_on_a_cold_port_rings`; it fails without F1).

use crate::sync::{fence, AtomicU32, AtomicU64, Ordering};
use crate::wake::{EVENTFD_ARMED, HANDED_BACK};

/// Doorbell-word bit (beside [`crate::wake`]'s): the port is cold, its doorbell armed
/// while the engine is awake; a push that finds it armed rings, or runs a turn that
/// reads every port's ready words.
pub const COLD: u32 = 1 << 2;

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

/// Engine side, on a turn (the port hot: its doorbell not armed): the port whose doorbell
/// word is `bell` goes cold. Sets [`COLD`] and `EVENTFD_ARMED` (one write), issues F1,
/// then asks `hinted` whether the port's ready words hold a bit: if they do, a push
/// may have missed the arming, so both bits are withdrawn and the port stays hot
/// (`false`).
pub fn go_cold(bell: &AtomicU32, hinted: impl FnOnce() -> bool) -> bool {
    bell.fetch_or(COLD | EVENTFD_ARMED, Ordering::Relaxed);
    // F1: pairs with the client's F2 (`wake::publish_fence`): either `hinted` below sees
    // the bit it set before F2, or its look at the doorbell after F2 sees the arming.
    fence(Ordering::SeqCst);
    if hinted() {
        go_hot(bell);
        return false;
    }
    true
}

/// Engine side, on a turn: a cold port is hot again (its words are read every turn):
/// its clients need not ring while the engine is awake.
pub fn go_hot(bell: &AtomicU32) {
    // Relaxed: only spares clients an eventfd write while the engine is awake; the
    // engine arms the doorbell again (F1 and a re-check) before it sleeps.
    bell.fetch_and(!(COLD | EVENTFD_ARMED | HANDED_BACK), Ordering::Relaxed);
}

/// Client side, after F2 and a look at the doorbell that found it armed: whether the
/// port is cold, so a turn the push runs itself must read every port's ready words (or
/// the push rings, `wake::wake_after_fence`).
#[inline]
pub fn cold_after_fence(bell: &AtomicU32) -> bool {
    // Relaxed: ordered by F2, as the look at the doorbell.
    bell.load(Ordering::Relaxed) & COLD != 0
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

    /// A port goes cold on an engine turn while its client pushes: either the port
    /// stays hot (the engine's look after F1 saw the hint; a hot port's words are read
    /// every turn), or the client, looking at the doorbell after F2, sees it armed *and*
    /// cold, and rings or runs a turn that reads every port. A client that saw the
    /// arming without `COLD` would run a turn of its own that need not read this port
    /// (`Driver::nudge`): the push would wait for the engine's occasional look at cold
    /// ports, and an engine going to sleep after that turn would not see it.
    #[test]
    fn loom_a_push_on_a_cold_port_rings() {
        crate::loom_model(|| {
            let word = Arc::new(AtomicU64::new(0));
            let bell = Arc::new(AtomicU32::new(0));
            let (w2, b2) = (word.clone(), bell.clone());
            let client = loom::thread::spawn(move || {
                announce(&w2, 1);
                crate::wake::publish_fence();
                let armed = crate::wake::asleep_after_fence(&b2);
                // (armed, told cold: rings, or its turn reads every port)
                (armed, armed && cold_after_fence(&b2))
            });
            // Relaxed: ordered by F1 inside `go_cold`.
            let cold = go_cold(&bell, || word.load(Ordering::Relaxed) != 0);
            let (armed, rings) = client.join().expect("client");
            assert!(!cold || rings, "cold port, push not rung (armed: {armed})");
            // A port that stayed hot was left unarmed: its clients need not ring.
            if !cold {
                assert_eq!(bell.load(Ordering::Relaxed) & (COLD | EVENTFD_ARMED), 0);
            }
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
