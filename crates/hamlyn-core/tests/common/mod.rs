//! Helpers shared by hamlyn-core's integration tests: a seeded byte generator, a
//! "choice stream" for building random structures that shrink well, the three ways a
//! packet can be delivered to an [`Interface`], and area comparisons.
//!
//! Every test file uses only part of this module.
#![allow(dead_code)]

use std::ops::Range;

use hamlyn_core::{Areas, Interface, Memory, Notification, Reject, VecAreas};
use hamlyn_wire::entry::{meta_off, MetaEntry};
use hamlyn_wire::{Header, NodeId, META_ENTRY_LEN};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// The receiving node in every test.
pub const NODE: NodeId = NodeId(7);
/// The sending node, unless a test says otherwise.
pub const SRC: NodeId = NodeId(3);

/// splitmix64: a small, seeded, good-enough generator for bulk bytes (payloads, area
/// fill) that would be slow to draw element by element from proptest.
#[derive(Clone, Debug)]
pub struct SplitMix(u64);

impl SplitMix {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A value in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        let last = self.next_u64().to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&last[..n]);
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.fill(&mut v);
        v
    }
}

/// A stream of choices drawn from proptest: structures built by consuming it shrink
/// toward shorter streams and smaller values (an exhausted stream answers 0), so a
/// failing random tree shrinks toward a small, shallow one.
#[derive(Clone, Debug)]
pub struct Choices {
    values: Vec<u32>,
    next: usize,
}

impl Choices {
    /// A stream over `values`.
    pub fn new(values: Vec<u32>) -> Choices {
        Choices { values, next: 0 }
    }

    /// A value in `0..n` (`n > 0`); 0 once the stream is exhausted.
    pub fn below(&mut self, n: u32) -> u32 {
        let v = self.values.get(self.next).copied().unwrap_or(0);
        self.next += 1;
        v % n
    }

    /// Shuffles `items` (Fisher–Yates driven by the stream).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u32 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// How a packet reaches the interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// `Interface::receive`: admit, copy, commit in one call.
    Copy,
    /// `admit`, then the payload written in place (as a fabric does), then `commit`.
    TwoPhase,
    /// The whole packet as bytes through `Interface::receive_packet`.
    Bytes,
}

impl Path {
    /// All paths.
    pub const ALL: [Path; 3] = [Path::Copy, Path::TwoPhase, Path::Bytes];

    /// A path picked by a random number.
    pub fn pick(r: u64) -> Path {
        Path::ALL[(r % 3) as usize]
    }
}

/// Delivers one packet along `path`.
pub fn deliver(
    iface: &mut Interface,
    areas: &mut VecAreas,
    h: &Header,
    meta: &[u8],
    payload: &[u8],
    path: Path,
) -> Result<Option<Notification>, Reject> {
    match path {
        Path::Copy => iface.receive(h, meta, payload, areas),
        Path::TwoPhase => {
            let p = iface.admit(h, areas)?;
            assert_eq!(p.len as usize, payload.len(), "placement length");
            let mem = areas.area(p.area).expect("admitted area exists");
            mem.write(p.offset, payload)
                .expect("admitted range is inside the area");
            iface.commit(h, meta, areas).map(|c| c.notification)
        }
        Path::Bytes => {
            let pkt = h.to_packet(meta, payload).expect("packet builds");
            iface.receive_packet(&pkt, areas)
        }
    }
}

/// Fails unless `before` and `after` agree everywhere outside `allowed` (byte ranges).
pub fn only_changed_in(
    what: &str,
    before: &[u8],
    after: &[u8],
    allowed: &[Range<usize>],
) -> Result<(), TestCaseError> {
    prop_assert_eq!(before.len(), after.len(), "{} changed length", what);
    let mut ranges: Vec<Range<usize>> = allowed
        .iter()
        .map(|r| r.start.min(before.len())..r.end.min(before.len()))
        .filter(|r| !r.is_empty())
        .collect();
    ranges.sort_by_key(|r| r.start);
    let mut at = 0;
    for r in ranges
        .iter()
        .chain(std::iter::once(&(before.len()..before.len())))
    {
        if r.start > at && before[at..r.start] != after[at..r.start] {
            let first = (at..r.start).find(|&i| before[i] != after[i]).unwrap_or(at);
            return Err(TestCaseError::fail(format!(
                "{what}: byte {first} changed ({:#04x} -> {:#04x}) outside the allowed ranges \
                 {allowed:?}",
                before[first], after[first]
            )));
        }
        at = at.max(r.end);
    }
    Ok(())
}

/// Fails unless `before` and `after` agree everywhere outside `allowed`.
pub fn only_changed_within(
    what: &str,
    before: &[u8],
    after: &[u8],
    allowed: Range<usize>,
) -> Result<(), TestCaseError> {
    only_changed_in(what, before, after, std::slice::from_ref(&allowed))
}

/// The bytes of area `id`, copied.
pub fn snapshot(areas: &VecAreas, id: hamlyn_core::AreaId) -> Vec<u8> {
    areas.bytes(id).expect("area exists").to_vec()
}

/// Reads the metadata entry at byte `off` of area `id`.
pub fn entry_at(areas: &VecAreas, id: hamlyn_core::AreaId, off: u64) -> MetaEntry {
    let bytes = areas.bytes(id).expect("area exists");
    MetaEntry::read(&bytes[off as usize..]).expect("entry inside the area")
}

/// Writes the metadata entry `e` at byte `off` of area `id`.
pub fn put_entry(areas: &mut VecAreas, id: hamlyn_core::AreaId, off: u64, e: &MetaEntry) {
    let bytes = areas.bytes_mut(id).expect("area exists");
    bytes[off as usize..off as usize + META_ENTRY_LEN].copy_from_slice(e.as_bytes());
}

/// The entry a completed message leaves behind, modelled from the entry before it:
/// `meta_writes` are the metadata of the message's FIRST packets (with their source
/// nodes) in arrival order, each zero-padded to 60 bytes; the accumulator is back at 0, `completed` went up by one and
/// a paranoid_one_shot entry is disarmed. Nothing else changes.
pub fn expected_entry(
    before: &MetaEntry,
    meta_writes: &[(Vec<u8>, NodeId)],
    one_shot: bool,
    first_offset: u64,
) -> MetaEntry {
    let mut e = *before;
    // Assembly state is back to idle; the message's first offset is kept.
    e.assembling_bytes.set(0);
    e.assembling_low.set(0);
    e.message_offset.set(first_offset);
    for (meta, src) in meta_writes {
        e.user = [0; 60];
        e.user[..meta.len()].copy_from_slice(meta);
        e.meta_len.set(meta.len() as u16);
        e.src_node.set(src.0);
    }
    e.accumulator.set(0);
    e.completed.set(before.completed.get().wrapping_add(1));
    if one_shot {
        e.state.set(before.state.get() & !MetaEntry::ARMED);
    }
    e
}

/// Byte range of the accumulator of the entry at `off`.
pub fn accumulator_range(off: u64) -> Range<usize> {
    let a = off as usize + meta_off::ACCUMULATOR;
    a..a + 4
}
