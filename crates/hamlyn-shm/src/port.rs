//! The port: one client's communication buffer, shared with its engine (FLIPC's
//! communication buffer; seed 000 §2.3, §2.6).
//!
//! The engine creates a port's memfd when a client attaches and passes it over the
//! control socket; both sides compute the same [`PortLayout`] from the geometry in the
//! port header and attach the rings at its offsets. Offsets, never pointers.
//!
//! ```text
//! 0       header line (engine writes once): magic, version, geometry, total length
//! 64      engine doorbell wake word (engine arms, clients clear; see `wake`), and at
//!         +8 the ready words: one bit per terminus, set by the client that pushed to
//!         it, taken by the engine (`ready`)
//! 128     completion lines: one per terminus, a u64 "requests finished" count, engine-written,
//!         and at +8 the line's wake word (u32; clients waiting on the count set it)
//! ...     terminus rings: SPSC, 256-byte `SendRequest` entries, client → engine
//! ...     error ring: SPSC, 16-byte `Completion` entries, engine → client
//! ```
//!
//! The notification queues live in a second memfd, the port's *queue file*, each queue
//! starting on a page boundary ([`QUEUE_ALIGN`]):
//!
//! ```text
//! 0          queue 0: `NotifEntry` queue, engine (and direct senders) → client
//! stride     queue 1, ...   (stride = one queue's bytes rounded up to QUEUE_ALIGN)
//! ```
//!
//! They are apart because a direct sender (DESIGN §2, "Direct slots") is given the queue
//! file's descriptor and maps its queue's pages: that descriptor must not open the rest of
//! the port, whose terminus rings hold the client's requests and the keys in them, and
//! whose completion words and error ring the engine alone writes.
//!
//! Every field has one writer and its own cache line, except the wake words, which the
//! wake protocol shares by design (a waiter sets flags, a producer clears them): the
//! doorbell's on its own line, a completion word's beside it, on the line the engine
//! writes when it finishes a request and the waiter reads anyway.

use crate::memory::{LayoutError, RingMemory, CACHE_LINE};
use crate::notifq::NotifLayout;
use crate::spsc::SpscLayout;

/// First eight bytes of a port.
pub const PORT_MAGIC: u64 = u64::from_le_bytes(*b"HMPORT01");
/// Port layout version (2: notification queues in their own file; 3: ready words
/// beside the doorbell, up to 256 termini).
pub const PORT_VERSION: u32 = 3;
/// Alignment of each notification queue in the queue file: the x86-64 page, so that a
/// direct sender's mapping of one queue covers no other. (On machines with larger pages
/// the mapping also covers neighbouring queues; the queue file's descriptor opens them
/// all anyway.)
pub const QUEUE_ALIGN: usize = 4096;
/// Bytes of a terminus work-queue entry (`hamlyn_wire::request::REQUEST_LEN`).
pub const TERMINUS_ENTRY: usize = hamlyn_wire::request::REQUEST_LEN;
/// Bytes of an error-completion entry (`hamlyn_wire::request::COMPLETION_LEN`).
pub const COMPLETION_ENTRY: usize = 16;
/// Most termini a port may have (request ids carry a terminus in 8 bits; the ready
/// words have a bit for each).
pub const MAX_TERMINI: u16 = 256;
/// Most notification queues a port may have.
pub const MAX_QUEUES: u16 = 64;

/// Header field offsets.
pub mod header {
    /// u64 magic.
    pub const MAGIC: usize = 0;
    /// u32 version.
    pub const VERSION: usize = 8;
    /// u16 termini.
    pub const TERMINI: usize = 12;
    /// u16 queues.
    pub const QUEUES: usize = 14;
    /// u32 terminus ring capacity.
    pub const RING_CAP: usize = 16;
    /// u32 notification queue capacity.
    pub const QUEUE_CAP: usize = 20;
    /// u32 error ring capacity.
    pub const ERR_CAP: usize = 24;
    /// u64 total length.
    pub const TOTAL: usize = 32;
    /// u64 length of the queue file.
    pub const QUEUE_TOTAL: usize = 40;
    /// The engine doorbell wake word (u32: `wake::EVENTFD_ARMED`, `ready::COLD`), on a
    /// line shared only with the ready words.
    pub const DOORBELL: usize = 64;
    /// The ready words ([`crate::ready::READY_WORDS`] u64s): on the doorbell's line,
    /// which a client pushing a request reads anyway.
    pub const READY: usize = 72;
    /// First terminus completion line.
    pub const COMPLETIONS: usize = 128;
}

// The ready words fit the doorbell's line, and have a bit for every terminus.
const _: () = assert!(header::READY + crate::ready::READY_WORDS * 8 <= header::COMPLETIONS);
const _: () = assert!(MAX_TERMINI as usize <= crate::ready::READY_WORDS * 64);

/// A port's geometry: how many termini and queues, and their capacities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortGeometry {
    /// Termini (1..=256).
    pub termini: u16,
    /// Notification queues (1..=64).
    pub queues: u16,
    /// Entries per terminus ring (power of two ≥ 64).
    pub ring_cap: u32,
    /// Entries per notification queue (power of two ≥ 64).
    pub queue_cap: u32,
    /// Entries in the error ring (power of two ≥ 64).
    pub err_cap: u32,
}

/// Where everything in a port is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortLayout {
    /// The geometry it was computed from.
    pub geometry: PortGeometry,
    /// Terminus rings, by index.
    pub termini: Vec<SpscLayout>,
    /// The error ring.
    pub errors: SpscLayout,
    /// Notification queues, by index; offsets are in the queue file, each a multiple of
    /// [`QUEUE_ALIGN`].
    pub queues: Vec<NotifLayout>,
    /// Total bytes of the port file (a multiple of 4096).
    pub total: usize,
    /// Total bytes of the queue file (a multiple of [`QUEUE_ALIGN`]).
    pub queue_total: usize,
}

impl PortLayout {
    /// Computes the layout for a geometry.
    pub fn new(g: PortGeometry) -> Result<PortLayout, LayoutError> {
        if g.termini == 0 || g.termini > MAX_TERMINI || g.queues == 0 || g.queues > MAX_QUEUES {
            return Err(LayoutError::DoesNotFit {
                need: usize::MAX,
                have: 0,
            });
        }
        let mut at = header::COMPLETIONS + usize::from(g.termini) * CACHE_LINE;
        let mut termini = Vec::with_capacity(usize::from(g.termini));
        for _ in 0..g.termini {
            let l = SpscLayout::new(at, TERMINUS_ENTRY, g.ring_cap)?;
            at = l.next_offset();
            termini.push(l);
        }
        let errors = SpscLayout::new(at, COMPLETION_ENTRY, g.err_cap)?;
        at = errors.next_offset();
        let mut queues = Vec::with_capacity(usize::from(g.queues));
        let mut qat = 0usize;
        for _ in 0..g.queues {
            let l = NotifLayout::new(qat, g.queue_cap)?;
            qat = l.next_offset().next_multiple_of(QUEUE_ALIGN);
            queues.push(l);
        }
        Ok(PortLayout {
            geometry: g,
            termini,
            errors,
            queues,
            total: at.next_multiple_of(4096),
            queue_total: qat,
        })
    }

    /// Offset of the ready word that holds terminus `t`'s bit, and the bit
    /// ([`crate::ready`]).
    pub fn ready_word(&self, t: u16) -> Option<(usize, u64)> {
        (t < self.geometry.termini).then(|| {
            let (i, bit) = crate::ready::word_and_bit(t);
            (header::READY + i * 8, bit)
        })
    }

    /// Offset of terminus `t`'s completion word (u64, engine-written: requests finished).
    pub fn completion_word(&self, t: u16) -> Option<usize> {
        (t < self.geometry.termini).then(|| header::COMPLETIONS + usize::from(t) * CACHE_LINE)
    }

    /// Offset of terminus `t`'s completion wake word (u32): a client waiting for the
    /// completion word to move sleeps on it, and the engine wakes it after each move
    /// ([`crate::wake`]). A client that scribbles it costs the engine at most a wake-up
    /// call per request of its own.
    pub fn completion_wake_word(&self, t: u16) -> Option<usize> {
        self.completion_word(t).map(|off| off + 8)
    }

    /// Writes the header (engine side, once, before the port is shared).
    pub fn write_header(&self, mem: &impl RingMemory) -> bool {
        let g = &self.geometry;
        let mut h = [0u8; 48];
        h[0..8].copy_from_slice(&PORT_MAGIC.to_le_bytes());
        h[8..12].copy_from_slice(&PORT_VERSION.to_le_bytes());
        h[12..14].copy_from_slice(&g.termini.to_le_bytes());
        h[14..16].copy_from_slice(&g.queues.to_le_bytes());
        h[16..20].copy_from_slice(&g.ring_cap.to_le_bytes());
        h[20..24].copy_from_slice(&g.queue_cap.to_le_bytes());
        h[24..28].copy_from_slice(&g.err_cap.to_le_bytes());
        h[32..40].copy_from_slice(&(self.total as u64).to_le_bytes());
        h[40..48].copy_from_slice(&(self.queue_total as u64).to_le_bytes());
        mem.store_bytes(0, &h)
    }

    /// Reads and checks the header (client side) and computes the layout from it.
    pub fn read_header(mem: &impl RingMemory) -> Result<PortLayout, LayoutError> {
        let mut h = [0u8; 48];
        let bad = LayoutError::DoesNotFit {
            need: 48,
            have: mem.len(),
        };
        if !mem.load_bytes(0, &mut h) {
            return Err(bad);
        }
        let u16_at = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let u64_at = |i: usize| {
            let mut m = [0u8; 8];
            m.copy_from_slice(&h[i..i + 8]);
            u64::from_le_bytes(m)
        };
        if u64_at(0) != PORT_MAGIC || u32_at(8) != PORT_VERSION {
            return Err(bad);
        }
        let layout = PortLayout::new(PortGeometry {
            termini: u16_at(12),
            queues: u16_at(14),
            ring_cap: u32_at(16),
            queue_cap: u32_at(20),
            err_cap: u32_at(24),
        })?;
        if layout.total > mem.len() {
            return Err(LayoutError::DoesNotFit {
                need: layout.total,
                have: mem.len(),
            });
        }
        if u64_at(header::TOTAL) != layout.total as u64
            || u64_at(header::QUEUE_TOTAL) != layout.queue_total as u64
        {
            return Err(bad);
        }
        Ok(layout)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::region::ShmRegion;

    fn geometry(queues: u16, queue_cap: u32) -> PortGeometry {
        PortGeometry {
            termini: 3,
            queues,
            ring_cap: 64,
            queue_cap,
            err_cap: 64,
        }
    }

    #[test]
    fn queues_are_page_aligned_apart_in_their_own_file() {
        for (queues, cap) in [(1, 64), (4, 64), (4, 1024), (64, 256), (2, 1 << 16)] {
            let l = PortLayout::new(geometry(queues, cap)).expect("layout");
            assert_eq!(l.queues.len(), usize::from(queues));
            let mut end = 0;
            for q in &l.queues {
                assert_eq!(q.offset() % QUEUE_ALIGN, 0, "each queue starts a page");
                assert!(q.offset() >= end, "queues do not overlap");
                end = q.offset() + q.bytes();
            }
            assert!(end <= l.queue_total && l.queue_total % QUEUE_ALIGN == 0);
            // The port file holds the rings only.
            let last = l.errors.next_offset();
            assert!(l.total >= last && l.total - last < 4096);
        }
    }

    #[test]
    fn header_round_trips_and_is_checked() {
        let l = PortLayout::new(geometry(4, 128)).expect("layout");
        let port = ShmRegion::create("hamlyn-test-port", l.total).expect("port");
        assert!(l.write_header(&port));
        assert_eq!(PortLayout::read_header(&port), Ok(l.clone()));
        // A queue-file length that disagrees with the geometry is refused.
        port.write(header::QUEUE_TOTAL, &1u64.to_le_bytes())
            .expect("write");
        assert!(PortLayout::read_header(&port).is_err());
        assert!(l.write_header(&port));
        port.write(header::VERSION, &1u32.to_le_bytes())
            .expect("write");
        assert!(PortLayout::read_header(&port).is_err(), "version 1 ports");
    }
}
