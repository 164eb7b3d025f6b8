//! The port: one client's communication buffer, shared with its engine (FLIPC's
//! communication buffer; seed 000 §2.3, §2.6).
//!
//! The engine creates a port's memfd when a client attaches and passes it over the
//! control socket; both sides compute the same [`PortLayout`] from the geometry in the
//! port header and attach the rings at its offsets. Offsets, never pointers.
//!
//! ```text
//! 0       header line (engine writes once): magic, version, geometry, total length
//! 64      engine doorbell wake word (engine arms, clients clear; see `wake`)
//! 128     completion lines: one per terminus, a u64 "requests finished" count, engine-written
//! ...     terminus rings: SPSC, 256-byte `SendRequest` entries, client → engine
//! ...     error ring: SPSC, 16-byte `Completion` entries, engine → client
//! ...     notification queues: `NotifEntry` queues, engine (and direct senders) → client
//! ```
//!
//! Every field has one writer and its own cache line, except the doorbell word, which the
//! wake protocol shares by design (the engine sets flags, a producer clears them).

use crate::memory::{LayoutError, RingMemory, CACHE_LINE};
use crate::notifq::NotifLayout;
use crate::spsc::SpscLayout;

/// First eight bytes of a port.
pub const PORT_MAGIC: u64 = u64::from_le_bytes(*b"HMPORT01");
/// Port layout version.
pub const PORT_VERSION: u32 = 1;
/// Bytes of a terminus work-queue entry (`hamlyn_wire::request::REQUEST_LEN`).
pub const TERMINUS_ENTRY: usize = hamlyn_wire::request::REQUEST_LEN;
/// Bytes of an error-completion entry (`hamlyn_wire::request::COMPLETION_LEN`).
pub const COMPLETION_ENTRY: usize = 16;
/// Most termini a port may have.
pub const MAX_TERMINI: u16 = 64;
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
    /// The engine doorbell wake word (u32), on its own line.
    pub const DOORBELL: usize = 64;
    /// First terminus completion line.
    pub const COMPLETIONS: usize = 128;
}

/// A port's geometry: how many termini and queues, and their capacities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortGeometry {
    /// Termini (1..=64).
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
    /// Notification queues, by index.
    pub queues: Vec<NotifLayout>,
    /// Total bytes (a multiple of 4096).
    pub total: usize,
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
        for _ in 0..g.queues {
            let l = NotifLayout::new(at, g.queue_cap)?;
            at = l.next_offset();
            queues.push(l);
        }
        Ok(PortLayout {
            geometry: g,
            termini,
            errors,
            queues,
            total: at.next_multiple_of(4096),
        })
    }

    /// Offset of terminus `t`'s completion word (u64, engine-written: requests finished).
    pub fn completion_word(&self, t: u16) -> Option<usize> {
        (t < self.geometry.termini).then(|| header::COMPLETIONS + usize::from(t) * CACHE_LINE)
    }

    /// Writes the header (engine side, once, before the port is shared).
    pub fn write_header(&self, mem: &impl RingMemory) -> bool {
        let g = &self.geometry;
        let mut h = [0u8; 40];
        h[0..8].copy_from_slice(&PORT_MAGIC.to_le_bytes());
        h[8..12].copy_from_slice(&PORT_VERSION.to_le_bytes());
        h[12..14].copy_from_slice(&g.termini.to_le_bytes());
        h[14..16].copy_from_slice(&g.queues.to_le_bytes());
        h[16..20].copy_from_slice(&g.ring_cap.to_le_bytes());
        h[20..24].copy_from_slice(&g.queue_cap.to_le_bytes());
        h[24..28].copy_from_slice(&g.err_cap.to_le_bytes());
        h[32..40].copy_from_slice(&(self.total as u64).to_le_bytes());
        mem.store_bytes(0, &h)
    }

    /// Reads and checks the header (client side) and computes the layout from it.
    pub fn read_header(mem: &impl RingMemory) -> Result<PortLayout, LayoutError> {
        let mut h = [0u8; 40];
        let bad = LayoutError::DoesNotFit {
            need: 40,
            have: mem.len(),
        };
        if !mem.load_bytes(0, &mut h) {
            return Err(bad);
        }
        let u16_at = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let mut m = [0u8; 8];
        m.copy_from_slice(&h[0..8]);
        if u64::from_le_bytes(m) != PORT_MAGIC || u32_at(8) != PORT_VERSION {
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
        Ok(layout)
    }
}
