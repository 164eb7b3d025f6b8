//! Forged and mutated packets (seed 000 §2.2, §2.7; DESIGN §2 "never lose, never
//! overrun, always say why").
//!
//! A receiving node with one slot of every kind (normal, paranoid, paranoid_one_shot,
//! fast, inhibited, revoked, read-only, area gone, metadata area gone, area shorter than
//! the slot, and a destroyed slot's hole) is sent valid packets with header fields
//! mutated independently and in combination, as wire bytes. For every packet:
//! - the outcome and the reject reason are the ones an independent model of the
//!   admission rules (written here from the design, not from the code) predicts;
//! - a reject is counted, globally and on the slot it names, and answered with a NACK
//!   to the packet's source carrying the reason code and the request id (none for a
//!   NACK, HELLO or HEARTBEAT, none for bytes that do not parse);
//! - a reject changes no byte of any area; an accepted packet changes only the bytes
//!   its header names inside the range its key grants, and its own metadata entry.
//!
//! Then targeted cases, one rule each, and raw byte strings that must never panic.

mod common;

use common::*;
use hamlyn_core::nack::nack_reason;
use hamlyn_core::{
    AreaId, Interface, MetaRange, OwnerId, QueueId, RejectCounts, RejectReason, SlotConfig,
    SlotMode, SlotPerms, VecAreas,
};
use hamlyn_wire::entry::MetaEntry;
use hamlyn_wire::{
    Flags, Header, NodeId, Op, RequestId, SlotId, FAST_META_INDEX, HEADER_LEN, META_ENTRY_LEN,
};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const MSG_AREA_LEN: usize = 16 * 1024;
const META_ENTRIES: usize = 24;

/// One slot of the fixture, as the test (not the interface) knows it.
#[derive(Clone, Debug)]
struct FSlot {
    id: SlotId,
    mode: SlotMode,
    area: AreaId,
    base: u64,
    len: u64,
    key: u64,
    /// (area, byte offset of entry 0, entry count)
    meta: Option<(AreaId, u64, u32)>,
    revoked: bool,
    inhibited: bool,
    write: bool,
}

/// A receiving node and what the test knows about it.
struct Fixture {
    iface: Interface,
    areas: VecAreas,
    msg: AreaId,
    meta: AreaId,
    slots: Vec<FSlot>,
    /// Slot numbers that exist nowhere (a destroyed slot's hole, past the end).
    unknown: Vec<SlotId>,
}

impl Fixture {
    fn new(rng: &mut SplitMix) -> Fixture {
        let mut iface = Interface::new(NODE);
        let mut areas = VecAreas::new();
        let msg = areas.add(MSG_AREA_LEN);
        rng.fill(areas.bytes_mut(msg).expect("area"));
        let meta = areas.add(META_ENTRIES * META_ENTRY_LEN);
        rng.fill(areas.bytes_mut(meta).expect("area"));
        let gone = areas.add(4096);
        let gone_meta = areas.add(4 * META_ENTRY_LEN);
        areas.remove(gone);
        areas.remove(gone_meta);

        // (mode, area, base, len, meta (area, first entry, count), inhibited, revoked, write)
        type Spec = (
            SlotMode,
            AreaId,
            u64,
            u64,
            Option<(AreaId, u64, u32)>,
            bool,
            bool,
            bool,
        );
        let e = |first: u64| first * META_ENTRY_LEN as u64;
        let specs: [Spec; 11] = [
            (
                SlotMode::Normal,
                msg,
                128,
                2048,
                Some((meta, e(0), 4)),
                false,
                false,
                true,
            ),
            (
                SlotMode::Paranoid,
                msg,
                2304,
                2048,
                Some((meta, e(4), 4)),
                false,
                false,
                true,
            ),
            (
                SlotMode::ParanoidOneShot,
                msg,
                4480,
                2048,
                Some((meta, e(8), 4)),
                false,
                false,
                true,
            ),
            (SlotMode::Fast, msg, 6656, 512, None, false, false, true),
            (
                SlotMode::Normal,
                msg,
                7296,
                1024,
                Some((meta, e(12), 2)),
                true,
                false,
                true,
            ),
            (
                SlotMode::Normal,
                msg,
                8448,
                1024,
                Some((meta, e(14), 2)),
                false,
                true,
                true,
            ),
            (
                SlotMode::Normal,
                msg,
                9600,
                1024,
                Some((meta, e(16), 2)),
                false,
                false,
                false,
            ),
            (
                SlotMode::Normal,
                gone,
                0,
                1024,
                Some((meta, e(18), 2)),
                false,
                false,
                true,
            ),
            // Destroyed below: its number becomes a hole.
            (
                SlotMode::Normal,
                msg,
                0,
                64,
                Some((meta, e(20), 1)),
                false,
                false,
                true,
            ),
            (
                SlotMode::Paranoid,
                msg,
                10752,
                1024,
                Some((gone_meta, 0, 2)),
                false,
                false,
                true,
            ),
            // The slot claims 1 KiB past the end of its area.
            (
                SlotMode::Normal,
                msg,
                15360,
                2048,
                Some((meta, e(22), 2)),
                false,
                false,
                true,
            ),
        ];
        let owner = OwnerId(1);
        let mut slots = Vec::new();
        for (mode, area, base, len, m, inhibited, revoked, write) in specs {
            let key = rng.next_u64();
            let config = SlotConfig {
                owner,
                area,
                base,
                len,
                mode,
                meta: m.map(|(area, base, count)| MetaRange { area, base, count }),
                queue: Some(QueueId(rng.below(4) as u32)),
                perms: SlotPerms {
                    write,
                    read: rng.below(2) == 0,
                    atomic: rng.below(2) == 0,
                },
            };
            let id = iface.slots_mut().create(config, key).expect("slot");
            let t = iface.slots_mut();
            t.inhibit(owner, id, inhibited).expect("inhibit");
            if revoked {
                t.revoke(owner, id).expect("revoke");
            }
            slots.push(FSlot {
                id,
                mode,
                area,
                base,
                len,
                key,
                meta: m,
                revoked,
                inhibited,
                write,
            });
        }
        let hole = slots.remove(8);
        iface.slots_mut().destroy(owner, hole.id).expect("destroy");
        let unknown = vec![hole.id, SlotId(11), SlotId(12), SlotId(u32::MAX)];

        // Paranoid entries: their own keys and ranges (sometimes empty or inverted);
        // one-shot entries mostly armed.
        for s in slots.iter().filter(|s| s.mode.is_paranoid()) {
            let Some((area, base, count)) = s.meta else {
                continue;
            };
            if area != meta {
                continue;
            }
            for i in 0..u64::from(count) {
                let off = base + i * META_ENTRY_LEN as u64;
                let mut en = entry_at(&areas, meta, off);
                en.paranoid_key.set(rng.next_u64());
                let (low, high) = match rng.below(8) {
                    0 => (0, s.len),
                    1 => {
                        let a = rng.between(1, s.len);
                        (a, rng.below(a))
                    }
                    _ => {
                        let a = rng.between(0, s.len);
                        let b = rng.between(0, s.len);
                        (a.min(b), a.max(b))
                    }
                };
                en.paranoid_low.set(low);
                en.paranoid_high.set(high);
                let armed = if rng.below(4) == 0 {
                    0
                } else {
                    MetaEntry::ARMED
                };
                en.state.set((en.state.get() & !MetaEntry::ARMED) | armed);
                put_entry(&mut areas, meta, off, &en);
            }
        }
        Fixture {
            iface,
            areas,
            msg,
            meta,
            slots,
            unknown,
        }
    }

    fn slot(&self, id: u32) -> Option<&FSlot> {
        self.slots.iter().find(|s| s.id.0 == id)
    }

    fn entry(&self, s: &FSlot, index: u32) -> Option<MetaEntry> {
        let (area, base, count) = s.meta?;
        if index >= count {
            return None;
        }
        let bytes = self.areas.bytes(area)?;
        MetaEntry::read(&bytes[(base + u64::from(index) * META_ENTRY_LEN as u64) as usize..]).ok()
    }
}

/// Every header field as raw wire numbers, so that values `Header` cannot hold (unknown
/// ops, undefined flags, bad magic) can be sent too.
#[derive(Clone, Copy, Debug)]
struct Raw {
    magic: u16,
    version: u8,
    op: u8,
    flags: u16,
    meta_len: u16,
    src: u32,
    dst: u32,
    slot: u32,
    meta_index: u32,
    key: u64,
    offset: u64,
    payload_len: u32,
    delta: u32,
    word: u64,
    request: u64,
}

impl Raw {
    /// The 64 header bytes, written from the DESIGN §4 table (not with `Header::emit`).
    fn emit(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&self.magic.to_le_bytes());
        b[2] = self.version;
        b[3] = self.op;
        b[4..6].copy_from_slice(&self.flags.to_le_bytes());
        b[6..8].copy_from_slice(&self.meta_len.to_le_bytes());
        b[8..12].copy_from_slice(&self.src.to_le_bytes());
        b[12..16].copy_from_slice(&self.dst.to_le_bytes());
        b[16..20].copy_from_slice(&self.slot.to_le_bytes());
        b[20..24].copy_from_slice(&self.meta_index.to_le_bytes());
        b[24..32].copy_from_slice(&self.key.to_le_bytes());
        b[32..40].copy_from_slice(&self.offset.to_le_bytes());
        b[40..44].copy_from_slice(&self.payload_len.to_le_bytes());
        b[44..48].copy_from_slice(&self.delta.to_le_bytes());
        b[48..56].copy_from_slice(&self.word.to_le_bytes());
        b[56..64].copy_from_slice(&self.request.to_le_bytes());
        b
    }

    /// The fields back from 64 bytes (after byte-level mutation).
    fn read(b: &[u8; HEADER_LEN]) -> Raw {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Raw {
            magic: u16_at(0),
            version: b[2],
            op: b[3],
            flags: u16_at(4),
            meta_len: u16_at(6),
            src: u32_at(8),
            dst: u32_at(12),
            slot: u32_at(16),
            meta_index: u32_at(20),
            key: u64_at(24),
            offset: u64_at(32),
            payload_len: u32_at(40),
            delta: u32_at(44),
            word: u64_at(48),
            request: u64_at(56),
        }
    }

    fn has(&self, f: Flags) -> bool {
        self.flags & f.0 == f.0
    }
}

/// What the model says must happen to a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Expect {
    /// The bytes are not a valid v1 packet: counted, not answered.
    Malformed,
    /// Refused for this reason; the slot (fixture index) is charged if named.
    Reject(Option<usize>, RejectReason),
    /// Accepted: `len` bytes at `at` of the message area, this metadata entry (byte
    /// offset in the metadata area), within the granted range `grant` (area offsets).
    Accept {
        area: AreaId,
        at: u64,
        len: u64,
        entry: Option<(AreaId, u64)>,
        grant: (u64, u64),
    },
}

/// The parse rules of DESIGN §4: lengths first, then magic, version, op, flags, the
/// metadata rules, fast-mode consistency, and the exact packet length.
fn model_parses(bytes: &[u8]) -> Option<Raw> {
    let head: &[u8; HEADER_LEN] = bytes.get(..HEADER_LEN)?.try_into().ok()?;
    let r = Raw::read(head);
    let valid = r.magic == 0x4D48
        && r.version == 1
        && Op::from_u8(r.op).is_some()
        && r.flags & !0x3F == 0
        && r.meta_len <= 60
        && (r.meta_len == 0 || r.has(Flags::FIRST))
        && (r.meta_index == u32::MAX) == r.has(Flags::FAST)
        && bytes.len() as u64 == 64 + u64::from(r.meta_len) + u64::from(r.payload_len);
    valid.then_some(r)
}

/// The admission rules, in the order the design gives them: what the packet is and
/// where it goes (op, node, slot), whether the slot is usable at all (revoked), the key
/// (slot-keyed modes check it before anything else about the slot, so a sender without
/// the key learns nothing; paranoid modes must find the entry to know its key), the form
/// the mode demands, permissions, write-inhibit, and only then the ranges.
fn model(fx: &Fixture, r: &Raw) -> Expect {
    use RejectReason::*;
    // Read and atomic answers (READ_RESP, ATOMIC_RESP) are deposits like writes.
    if ![Op::Write as u8, Op::ReadResp as u8, Op::AtomicResp as u8].contains(&r.op) {
        return Expect::Reject(None, Unsupported);
    }
    if r.dst != NODE.0 {
        return Expect::Reject(None, WrongNode);
    }
    let Some(si) = fx.slots.iter().position(|s| s.id.0 == r.slot) else {
        return Expect::Reject(None, UnknownSlot);
    };
    let s = &fx.slots[si];
    let no = |reason| Expect::Reject(Some(si), reason);
    if s.revoked {
        return no(Revoked);
    }
    let fast = r.meta_index == FAST_META_INDEX;
    let single = r.has(Flags::FIRST) && r.has(Flags::LAST);
    let mut paranoid_range = None;
    let mut entry = None;
    match s.mode {
        SlotMode::Fast => {
            if r.key != s.key {
                return no(BadKey);
            }
            if !fast || !single || r.meta_len != 0 {
                return no(BadMode);
            }
        }
        SlotMode::Normal => {
            if r.key != s.key {
                return no(BadKey);
            }
            if fast {
                return no(BadMode);
            }
            let Some((area, base, count)) = s.meta else {
                return no(BadMetaIndex);
            };
            if r.meta_index >= count {
                return no(BadMetaIndex);
            }
            if fx.areas.bytes(area).is_none() {
                return no(AreaGone);
            }
            entry = Some((area, base + u64::from(r.meta_index) * META_ENTRY_LEN as u64));
        }
        _ => {
            if fast {
                return no(BadMode);
            }
            let Some((area, base, count)) = s.meta else {
                return no(BadMetaIndex);
            };
            if r.meta_index >= count {
                return no(BadMetaIndex);
            }
            let Some(e) = fx.entry(s, r.meta_index) else {
                return no(AreaGone);
            };
            if r.key != e.paranoid_key.get() {
                return no(ParanoidKey);
            }
            if s.mode == SlotMode::ParanoidOneShot && e.state.get() & MetaEntry::ARMED == 0 {
                return no(Disarmed);
            }
            paranoid_range = Some((e.paranoid_low.get(), e.paranoid_high.get()));
            entry = Some((area, base + u64::from(r.meta_index) * META_ENTRY_LEN as u64));
        }
    }
    // NOTIFY_NOW: single packet; on counting slots also delta 0 (no early group end).
    if r.has(Flags::NOTIFY_NOW) && (!single || (s.mode != SlotMode::Fast && r.delta != 0)) {
        return no(BadMode);
    }
    if !s.write {
        return no(NotPermitted);
    }
    if s.inhibited {
        return no(Inhibited);
    }
    let end = u128::from(r.offset) + u128::from(r.payload_len);
    if end > u128::from(s.len) {
        return no(OutOfBounds);
    }
    let mut grant = (s.base, s.base + s.len);
    if let Some((low, high)) = paranoid_range {
        if u128::from(r.offset) < u128::from(low) || end > u128::from(high) {
            return no(ParanoidBounds);
        }
        grant = (s.base + low, s.base + high);
    }
    let at = s.base + r.offset;
    match fx.areas.bytes(s.area) {
        Some(a) if u128::from(at) + u128::from(r.payload_len) <= a.len() as u128 => {}
        _ => return no(AreaGone),
    }
    Expect::Accept {
        area: s.area,
        at,
        len: u64::from(r.payload_len),
        entry,
        grant,
    }
}

/// A packet that the fixture accepts: right key, entry, range and form for slot `si`.
fn valid_packet(fx: &Fixture, si: usize, rng: &mut SplitMix) -> (Raw, Vec<u8>, Vec<u8>) {
    let s = &fx.slots[si];
    let fast = s.mode == SlotMode::Fast;
    let index = s
        .meta
        .map_or(FAST_META_INDEX, |(_, _, n)| rng.below(u64::from(n)) as u32);
    let mut key = s.key;
    let (mut lo, mut hi) = (0, s.len);
    if s.mode.is_paranoid() {
        if let Some(e) = fx.entry(s, index) {
            key = e.paranoid_key.get();
            if e.paranoid_low.get() <= e.paranoid_high.get() {
                (lo, hi) = (e.paranoid_low.get(), e.paranoid_high.get());
            }
        }
    }
    let len = rng.between(0, (hi - lo).min(300));
    let offset = rng.between(lo, hi - len);
    let mut flags = Flags::empty();
    let shape = if fast { 0 } else { rng.below(5) };
    flags = flags
        | match shape {
            0 | 1 => Flags::FIRST | Flags::LAST,
            2 => Flags::FIRST,
            3 => Flags::LAST,
            _ => Flags::empty(),
        };
    if fast || (shape == 0 && rng.below(2) == 0) {
        flags = flags | Flags::NOTIFY_NOW;
    }
    if fast {
        flags = flags | Flags::FAST;
    }
    if rng.below(2) == 0 {
        flags = flags | Flags::NOTIFY;
    }
    if rng.below(2) == 0 {
        flags = flags | Flags::WAKE;
    }
    let meta_len = if !fast && flags.contains(Flags::FIRST) {
        rng.below(61) as u16
    } else {
        0
    };
    let raw = Raw {
        magic: 0x4D48,
        version: 1,
        op: Op::Write as u8,
        flags: flags.0,
        meta_len,
        src: rng.below(16) as u32,
        dst: NODE.0,
        slot: s.id.0,
        meta_index: index,
        key,
        offset,
        payload_len: len as u32,
        // A legitimate NOTIFY_NOW packet is a lone message: delta 0.
        delta: if flags.contains(Flags::NOTIFY_NOW) && !fast {
            0
        } else if rng.below(2) == 0 {
            1
        } else {
            rng.next_u64() as u32
        },
        word: rng.next_u64(),
        request: rng.next_u64(),
    };
    let meta = rng.bytes(usize::from(meta_len));
    let payload = rng.bytes(len as usize);
    (raw, meta, payload)
}

/// Mutates the fields whose bit is set in `mask` (and, for bit 11, random bytes of the
/// encoded header). Lengths of `meta`/`payload` follow `meta_len`/`payload_len`, except
/// under bit 9, which makes the packet's real length disagree with its header.
fn mutate(
    fx: &Fixture,
    raw: &mut Raw,
    meta: &mut Vec<u8>,
    payload: &mut Vec<u8>,
    mask: u32,
    rng: &mut SplitMix,
) -> Vec<u8> {
    let bit = |b: u32| mask >> b & 1 == 1;
    let other_slot = |rng: &mut SplitMix| &fx.slots[rng.below(fx.slots.len() as u64) as usize];
    if bit(0) {
        raw.dst = match rng.below(3) {
            0 => NODE.0 + 1,
            1 => NODE.0.wrapping_sub(1),
            _ => rng.next_u64() as u32,
        };
    }
    if bit(1) {
        raw.slot = match rng.below(3) {
            0 => other_slot(rng).id.0,
            1 => fx.unknown[rng.below(fx.unknown.len() as u64) as usize].0,
            _ => rng.next_u64() as u32,
        };
    }
    if bit(2) {
        raw.key = match rng.below(4) {
            0 => raw.key ^ (1 << rng.below(64)),
            1 => other_slot(rng).key,
            2 => {
                // Another entry's paranoid key (or a slot key where there is none).
                let s = other_slot(rng);
                match s.meta {
                    Some((_, _, n)) => fx
                        .entry(s, rng.below(u64::from(n)) as u32)
                        .map_or(s.key, |e| e.paranoid_key.get()),
                    None => s.key,
                }
            }
            _ => rng.next_u64(),
        };
    }
    if bit(3) {
        raw.meta_index = match rng.below(4) {
            0 => raw.meta_index.wrapping_add(1 + rng.below(4) as u32),
            1 => FAST_META_INDEX,
            2 => rng.below(4) as u32,
            _ => rng.next_u64() as u32,
        };
        if raw.meta_index == FAST_META_INDEX && rng.below(2) == 0 {
            raw.flags |= Flags::FAST.0;
        }
        if raw.meta_index != FAST_META_INDEX && rng.below(2) == 0 {
            raw.flags &= !Flags::FAST.0;
        }
    }
    if bit(4) {
        let slot = fx.slot(raw.slot);
        let s = slot.map_or(1024, |s| s.len);
        // A paranoid entry's range, for off-by-one mutations at its edges.
        let (low, high) = slot
            .filter(|s| s.mode.is_paranoid())
            .and_then(|s| fx.entry(s, raw.meta_index))
            .map_or((0, s), |e| (e.paranoid_low.get(), e.paranoid_high.get()));
        let len = u64::from(raw.payload_len);
        raw.offset = match rng.below(8) {
            0 => rng.next_u64(),
            1 => s - len.min(s) + 1 + rng.below(4),
            2 => s + rng.below(64),
            3 => u64::MAX - rng.below(len + 2),
            4 => raw.offset.wrapping_sub(1 + rng.below(64)),
            5 => (high + rng.below(2)).wrapping_sub(len),
            6 => low.wrapping_sub(rng.below(2)),
            _ => rng.below(s + 1),
        };
    }
    if bit(5) {
        raw.payload_len = match rng.below(3) {
            0 => raw.payload_len + 1 + rng.below(64) as u32,
            1 => rng.below(3000) as u32,
            _ => raw.payload_len.saturating_sub(1 + rng.below(8) as u32),
        };
        *payload = rng.bytes(raw.payload_len as usize);
    }
    if bit(6) {
        let f = [
            Flags::FIRST,
            Flags::LAST,
            Flags::NOTIFY_NOW,
            Flags::FAST,
            Flags::WAKE,
            Flags::NOTIFY,
        ];
        raw.flags = match rng.below(4) {
            0 => rng.next_u64() as u16,
            1 => raw.flags | 1 << rng.between(6, 15),
            _ => raw.flags ^ f[rng.below(f.len() as u64) as usize].0,
        };
    }
    if bit(7) {
        raw.op = if rng.below(2) == 0 {
            rng.between(0, 9) as u8
        } else {
            rng.next_u64() as u8
        };
    }
    if bit(8) {
        raw.meta_len = rng.below(70) as u16;
        *meta = rng.bytes(usize::from(raw.meta_len));
    }
    if bit(10) {
        if rng.below(2) == 0 {
            raw.magic = rng.next_u64() as u16;
        } else {
            raw.version = rng.next_u64() as u8;
        }
    }
    if bit(12) {
        raw.src = rng.next_u64() as u32;
        raw.delta = rng.next_u64() as u32;
        raw.word = rng.next_u64();
        raw.request = rng.next_u64();
    }
    let mut head = raw.emit();
    if bit(11) {
        for _ in 0..1 + rng.below(3) {
            let i = rng.below(HEADER_LEN as u64) as usize;
            head[i] ^= 1 << rng.below(8);
        }
        *raw = Raw::read(&head);
    }
    let mut bytes = head.to_vec();
    bytes.extend_from_slice(meta);
    bytes.extend_from_slice(payload);
    if bit(9) {
        if rng.below(2) == 0 || bytes.len() == HEADER_LEN {
            let n = 1 + rng.below(8) as usize;
            bytes.extend(rng.bytes(n));
        } else {
            let cut = rng.between(1, (bytes.len() - HEADER_LEN) as u64) as usize;
            bytes.truncate(bytes.len() - cut);
        }
    }
    bytes
}

/// Sends `bytes` and checks the outcome against `want`: result, reason, counters, NACK,
/// and which bytes of which areas changed.
fn send_and_check(fx: &mut Fixture, bytes: &[u8], want: &Expect) -> Result<(), TestCaseError> {
    let before_msg = snapshot(&fx.areas, fx.msg);
    let before_meta = snapshot(&fx.areas, fx.meta);
    let before_stats = *fx.iface.stats();
    let before_slot: Vec<RejectCounts> = fx
        .slots
        .iter()
        .map(|s| fx.iface.slots().get(s.id).expect("slot").rejects)
        .collect();
    let result = fx.iface.receive_packet(bytes, &mut fx.areas);
    let after_msg = snapshot(&fx.areas, fx.msg);
    let after_meta = snapshot(&fx.areas, fx.meta);
    let stats = *fx.iface.stats();
    let parsed = Header::parse(bytes).ok();

    match (want, &result) {
        (
            Expect::Accept {
                area,
                at,
                len,
                entry,
                grant,
            },
            Ok(_),
        ) => {
            prop_assert_eq!(*area, fx.msg, "the model accepted a write to another area");
            let (at, len) = (*at as usize, *len as usize);
            prop_assert!(
                grant.0 as usize <= at && at + len <= grant.1 as usize,
                "accepted write {}..{} outside the grant {:?}",
                at,
                at + len,
                grant
            );
            let payload = &bytes[bytes.len() - len..];
            prop_assert!(after_msg[at..at + len] == *payload, "payload not deposited");
            only_changed_within("message area", &before_msg, &after_msg, at..at + len)?;
            let allowed: Vec<_> = entry
                .iter()
                .filter(|(a, _)| *a == fx.meta)
                .map(|&(_, off)| off as usize..off as usize + META_ENTRY_LEN)
                .collect();
            only_changed_in("metadata area", &before_meta, &after_meta, &allowed)?;
            prop_assert_eq!(stats.packets, before_stats.packets + 1);
            prop_assert_eq!(stats.rejects, before_stats.rejects);
        }
        (Expect::Malformed, Err(rej)) => {
            prop_assert_eq!(rej.reason, RejectReason::Malformed);
            prop_assert_eq!(rej.slot, None);
            prop_assert!(rej.nack.is_none(), "a NACK for bytes that do not parse");
            prop_assert!(
                Header::parse_packet(bytes).is_err(),
                "the model calls a parseable packet malformed"
            );
            check_counted(
                fx,
                &before_stats,
                &before_slot,
                RejectReason::Malformed,
                None,
            )?;
            prop_assert!(before_msg == after_msg && before_meta == after_meta);
        }
        (Expect::Reject(slot, reason), Err(rej)) => {
            prop_assert_eq!(rej.reason, *reason, "header {:?}", parsed);
            prop_assert_eq!(rej.slot, slot.map(|i| fx.slots[i].id));
            let h = parsed.ok_or_else(|| TestCaseError::fail("rejected but unparseable"))?;
            // Answers to reads and atomics are not NACKed either: the requester fails its
            // own request (`hamlyn_core::nack::nack_for`).
            if matches!(
                h.op,
                Op::Nack | Op::Hello | Op::Heartbeat | Op::ReadResp | Op::AtomicResp
            ) {
                prop_assert!(rej.nack.is_none(), "answered a {:?}", h.op);
            } else {
                let n = rej.nack.ok_or_else(|| TestCaseError::fail("no NACK"))?;
                prop_assert_eq!(n.op, Op::Nack);
                prop_assert_eq!(n.src, NODE);
                prop_assert_eq!(n.dst, h.src);
                prop_assert_eq!(n.slot, h.slot);
                prop_assert_eq!(n.word, u64::from(reason.code()));
                prop_assert_eq!(n.request, h.request);
                prop_assert_eq!(nack_reason(&n), Some(*reason));
                prop_assert_eq!(Header::parse(&n.to_bytes()), Ok(n), "NACK round trip");
            }
            check_counted(fx, &before_stats, &before_slot, *reason, *slot)?;
            prop_assert!(before_msg == after_msg, "a reject changed the message area");
            prop_assert!(
                before_meta == after_meta,
                "a reject changed the metadata area"
            );
        }
        (want, got) => {
            return Err(TestCaseError::fail(format!(
                "model says {want:?}, interface says {:?} (header {parsed:?})",
                got.as_ref().map_err(|r| r.reason)
            )))
        }
    }
    Ok(())
}

/// The reject was counted once, globally and on the named slot only.
fn check_counted(
    fx: &Fixture,
    before: &hamlyn_core::InterfaceStats,
    before_slot: &[RejectCounts],
    reason: RejectReason,
    slot: Option<usize>,
) -> Result<(), TestCaseError> {
    let now = fx.iface.stats();
    prop_assert_eq!(now.rejects.total(), before.rejects.total() + 1);
    prop_assert_eq!(now.rejects.get(reason), before.rejects.get(reason) + 1);
    prop_assert_eq!(now.packets, before.packets);
    for (i, s) in fx.slots.iter().enumerate() {
        let c = fx.iface.slots().get(s.id).expect("slot").rejects;
        if Some(i) == slot {
            prop_assert_eq!(c.total(), before_slot[i].total() + 1);
            prop_assert_eq!(c.get(reason), before_slot[i].get(reason) + 1);
        } else {
            prop_assert_eq!(c, before_slot[i], "slot {} charged for another's reject", i);
        }
    }
    Ok(())
}

/// Which rule a targeted case breaks.
#[derive(Clone, Copy, Debug)]
enum Target {
    WrongKey,
    SlotKeyOnParanoid,
    WrongKeyAndMore,
    OffsetOutOfRange,
    UnknownSlot,
    BadMetaIndex,
    Disarmed,
    ParanoidBounds,
    Inhibited,
    Revoked,
    FastOnNormal,
    NormalOnFast,
    MultiPacketOnFast,
    NotifyNowNotSingle,
    ReadOnly,
    WrongNode,
    NotAWrite,
    AreaGone,
    MetaAreaGone,
}

const TARGETS: [Target; 19] = [
    Target::WrongKey,
    Target::SlotKeyOnParanoid,
    Target::WrongKeyAndMore,
    Target::OffsetOutOfRange,
    Target::UnknownSlot,
    Target::BadMetaIndex,
    Target::Disarmed,
    Target::ParanoidBounds,
    Target::Inhibited,
    Target::Revoked,
    Target::FastOnNormal,
    Target::NormalOnFast,
    Target::MultiPacketOnFast,
    Target::NotifyNowNotSingle,
    Target::ReadOnly,
    Target::WrongNode,
    Target::NotAWrite,
    Target::AreaGone,
    Target::MetaAreaGone,
];

/// Index of the fixture slot with `mode`, write-enabled, live area, not inhibited or
/// revoked (the "plain" slot of that mode).
fn plain(fx: &Fixture, mode: SlotMode) -> usize {
    fx.slots
        .iter()
        .position(|s| s.mode == mode && is_plain(fx, s))
        .expect("fixture has a plain slot of every mode")
}

fn is_plain(fx: &Fixture, s: &FSlot) -> bool {
    s.write
        && !s.inhibited
        && !s.revoked
        && s.area == fx.msg
        && s.meta.is_none_or(|(a, _, _)| a == fx.meta)
        && s.base + s.len <= MSG_AREA_LEN as u64
}

fn pick<T: Copy>(rng: &mut SplitMix, from: &[T]) -> T {
    from[rng.below(from.len() as u64) as usize]
}

/// Builds the targeted case: a packet breaking exactly the rule `t` names (plus, for
/// `WrongKeyAndMore`, others that must not show through), and the reason it must get.
fn targeted(
    fx: &mut Fixture,
    t: Target,
    rng: &mut SplitMix,
) -> (Raw, Vec<u8>, Vec<u8>, RejectReason) {
    use RejectReason as R;
    let modes = [
        SlotMode::Normal,
        SlotMode::Paranoid,
        SlotMode::ParanoidOneShot,
        SlotMode::Fast,
    ];
    let keyed = [SlotMode::Normal, SlotMode::Fast];
    let paranoid = [SlotMode::Paranoid, SlotMode::ParanoidOneShot];
    let with_meta = [
        SlotMode::Normal,
        SlotMode::Paranoid,
        SlotMode::ParanoidOneShot,
    ];
    let mode = match t {
        Target::WrongKey
        | Target::OffsetOutOfRange
        | Target::WrongNode
        | Target::NotAWrite
        | Target::UnknownSlot => pick(rng, &modes),
        Target::WrongKeyAndMore => pick(rng, &keyed),
        Target::SlotKeyOnParanoid | Target::ParanoidBounds => pick(rng, &paranoid),
        Target::Disarmed => SlotMode::ParanoidOneShot,
        Target::BadMetaIndex | Target::NotifyNowNotSingle => pick(rng, &with_meta),
        Target::NormalOnFast | Target::MultiPacketOnFast => SlotMode::Fast,
        _ => SlotMode::Normal,
    };
    let si = plain(fx, mode);
    // Arm every entry of the slot and open its range to the whole slot, so that only
    // the rule under test can fail.
    let s = fx.slots[si].clone();
    if let Some((area, base, count)) = s.meta {
        for i in 0..u64::from(count) {
            let off = base + i * META_ENTRY_LEN as u64;
            let mut e = entry_at(&fx.areas, area, off);
            e.state.set(e.state.get() | MetaEntry::ARMED);
            e.paranoid_low.set(0);
            e.paranoid_high.set(s.len);
            put_entry(&mut fx.areas, area, off, &e);
        }
    }
    let (mut raw, mut meta, mut payload) = valid_packet(fx, si, rng);
    let reason = match t {
        Target::WrongKey => {
            raw.key ^= 1 << rng.below(64);
            if mode.is_paranoid() {
                R::ParanoidKey
            } else {
                R::BadKey
            }
        }
        Target::SlotKeyOnParanoid => {
            raw.key = s.key;
            R::ParanoidKey
        }
        Target::WrongKeyAndMore => {
            // A sender without the key learns nothing else about the slot.
            raw.key = rng.next_u64();
            if raw.key == s.key {
                raw.key ^= 1;
            }
            let fault = match rng.below(4) {
                // On a fast slot a fast packet is no fault: send a non-fast one instead.
                1 if mode == SlotMode::Fast => 0,
                f => f,
            };
            match fault {
                0 => {
                    raw.meta_index = 1000 + rng.below(1000) as u32;
                    raw.flags &= !Flags::FAST.0;
                }
                1 => {
                    raw.meta_index = FAST_META_INDEX;
                    raw.flags |= Flags::FAST.0;
                }
                2 => raw.offset = s.len + rng.below(1 << 40),
                _ => {
                    raw.flags = (raw.flags | Flags::NOTIFY_NOW.0) & !Flags::LAST.0;
                    raw.meta_len = 0;
                    meta.clear();
                }
            }
            R::BadKey
        }
        Target::OffsetOutOfRange => {
            raw.offset = match rng.below(3) {
                0 => s.len - u64::from(raw.payload_len).min(s.len) + 1,
                1 => s.len + rng.below(1 << 40),
                _ => u64::MAX - rng.below(16),
            };
            if raw.payload_len == 0 && raw.offset <= s.len {
                raw.offset = s.len + 1;
            }
            R::OutOfBounds
        }
        Target::UnknownSlot => {
            raw.slot = pick(rng, &fx.unknown).0;
            R::UnknownSlot
        }
        Target::BadMetaIndex => {
            let count = s.meta.map_or(0, |(_, _, n)| n);
            raw.meta_index = count + rng.below(1 << 20) as u32;
            R::BadMetaIndex
        }
        Target::Disarmed => {
            let (area, base, _) = s.meta.expect("paranoid slots have entries");
            let off = base + u64::from(raw.meta_index) * META_ENTRY_LEN as u64;
            let mut e = entry_at(&fx.areas, area, off);
            e.state.set(e.state.get() & !MetaEntry::ARMED);
            put_entry(&mut fx.areas, area, off, &e);
            R::Disarmed
        }
        Target::ParanoidBounds => {
            let (area, base, _) = s.meta.expect("paranoid slots have entries");
            let off = base + u64::from(raw.meta_index) * META_ENTRY_LEN as u64;
            let mut e = entry_at(&fx.areas, area, off);
            // Shrink the entry's range so that the packet sticks out of one end.
            let (o, end) = (raw.offset, raw.offset + u64::from(raw.payload_len));
            if raw.payload_len == 0 || rng.below(2) == 0 {
                e.paranoid_low.set(o + 1);
                e.paranoid_high.set(s.len.max(o + 1));
            } else {
                e.paranoid_low.set(o);
                e.paranoid_high.set(end - 1);
            }
            put_entry(&mut fx.areas, area, off, &e);
            R::ParanoidBounds
        }
        Target::Inhibited => {
            fx.iface
                .slots_mut()
                .inhibit(OwnerId(1), s.id, true)
                .expect("inhibit");
            fx.slots[si].inhibited = true;
            R::Inhibited
        }
        Target::Revoked => {
            fx.iface
                .slots_mut()
                .revoke(OwnerId(1), s.id)
                .expect("revoke");
            fx.slots[si].revoked = true;
            R::Revoked
        }
        Target::FastOnNormal => {
            raw.meta_index = FAST_META_INDEX;
            raw.flags = Flags::FIRST.0 | Flags::LAST.0 | Flags::FAST.0 | Flags::NOTIFY_NOW.0;
            raw.meta_len = 0;
            meta.clear();
            R::BadMode
        }
        Target::NormalOnFast => {
            raw.meta_index = rng.below(4) as u32;
            raw.flags &= !Flags::FAST.0;
            R::BadMode
        }
        Target::MultiPacketOnFast => {
            raw.flags &= !(if rng.below(2) == 0 {
                Flags::FIRST.0
            } else {
                Flags::LAST.0
            });
            raw.flags &= !Flags::NOTIFY_NOW.0;
            R::BadMode
        }
        Target::NotifyNowNotSingle => {
            raw.flags = (raw.flags | Flags::NOTIFY_NOW.0) & !Flags::LAST.0;
            R::BadMode
        }
        Target::ReadOnly => {
            let si = fx
                .slots
                .iter()
                .position(|s| !s.write)
                .expect("read-only slot");
            (raw, meta, payload) = valid_packet(fx, si, rng);
            R::NotPermitted
        }
        Target::WrongNode => {
            raw.dst = NODE.0 ^ (1 + rng.below(1000) as u32);
            R::WrongNode
        }
        Target::NotAWrite => {
            raw.op = pick(rng, &[2u8, 4, 6, 7, 8]);
            R::Unsupported
        }
        Target::AreaGone => {
            let si = fx
                .slots
                .iter()
                .position(|s| s.area != fx.msg)
                .expect("gone slot");
            (raw, meta, payload) = valid_packet(fx, si, rng);
            R::AreaGone
        }
        Target::MetaAreaGone => {
            let si = fx
                .slots
                .iter()
                .position(|s| s.meta.is_some_and(|(a, _, _)| a != fx.meta))
                .expect("gone metadata slot");
            (raw, meta, payload) = valid_packet(fx, si, rng);
            R::AreaGone
        }
    };
    (raw, meta, payload, reason)
}

fn packet_bytes(raw: &Raw, meta: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut b = raw.emit().to_vec();
    b.extend_from_slice(meta);
    b.extend_from_slice(payload);
    b
}

/// Which fields to mutate: none, one, or several at once. Mutations that keep the
/// packet parseable (bits 0–5, 12) are common, those that usually break parsing (bits
/// 6–11) rarer, so that most packets reach the admission checks.
fn mutation_mask() -> impl Strategy<Value = u32> {
    const KEEPS_PARSE: u32 = 0b1_0000_0011_1111;
    const BREAKS_PARSE: u32 = 0b0_1111_1100_0000;
    prop_oneof![
        1 => Just(0u32),
        3 => (0u32..13).prop_map(|b| 1 << b),
        6 => (any::<u32>(), any::<u32>(), any::<[u32; 4]>()).prop_map(|(a, b, c)| {
            (a & b & KEEPS_PARSE) | (c[0] & c[1] & c[2] & c[3] & BREAKS_PARSE)
        }),
        1 => any::<u32>().prop_map(|m| m & 0x1FFF),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// Sequences of valid and mutated packets against one node: the model predicts
    /// every outcome, rejects change nothing, accepted packets stay in their grant.
    #[test]
    fn mutated_packets_get_the_right_verdict(
        seed: u64,
        packets in proptest::collection::vec(
            (0usize..10, mutation_mask(), any::<u64>()),
            1..8,
        ),
    ) {
        let mut rng = SplitMix::new(seed);
        let mut fx = Fixture::new(&mut rng);
        for (si, mask, pseed) in packets {
            let mut prng = SplitMix::new(pseed);
            let si = si % fx.slots.len();
            let (mut raw, mut meta, mut payload) = valid_packet(&fx, si, &mut prng);
            let bytes = mutate(&fx, &mut raw, &mut meta, &mut payload, mask, &mut prng);
            let want = match model_parses(&bytes) {
                None => Expect::Malformed,
                Some(r) => model(&fx, &r),
            };
            // Sanity of the generator: an unmutated packet to a plain normal or fast
            // slot is accepted (paranoid entries may be disarmed or have empty ranges).
            if mask == 0 && matches!(fx.slots[si].mode, SlotMode::Normal | SlotMode::Fast)
                && is_plain(&fx, &fx.slots[si])
            {
                prop_assert!(matches!(want, Expect::Accept { .. }), "{:?}", want);
            }
            send_and_check(&mut fx, &bytes, &want)?;
        }
    }

    /// One rule broken at a time: the reject carries exactly that rule's reason.
    #[test]
    fn each_rule_has_its_reason(seed: u64, t in proptest::sample::select(TARGETS.to_vec())) {
        let mut rng = SplitMix::new(seed);
        let mut fx = Fixture::new(&mut rng);
        let (raw, meta, payload, reason) = targeted(&mut fx, t, &mut rng);
        let bytes = packet_bytes(&raw, &meta, &payload);
        let parsed = model_parses(&bytes)
            .ok_or_else(|| TestCaseError::fail("targeted packet does not parse"))?;
        let want = model(&fx, &parsed);
        let slot = fx.slots.iter().position(|s| s.id.0 == raw.slot);
        let charged = match reason {
            RejectReason::Unsupported | RejectReason::WrongNode | RejectReason::UnknownSlot => None,
            _ => slot,
        };
        prop_assert_eq!(&want, &Expect::Reject(charged, reason), "the model disagrees with the rule");
        send_and_check(&mut fx, &bytes, &want)?;
    }

    /// A slot-keyed packet with the wrong key gets BadKey whatever else is wrong with it,
    /// and the same packet with the right key gets the other reason: the key is checked
    /// first, so a sender without it learns nothing about the slot.
    #[test]
    fn a_wrong_key_hides_every_other_fault(seed: u64) {
        let mut rng = SplitMix::new(seed);
        let mut fx = Fixture::new(&mut rng);
        let (raw, meta, payload, reason) = targeted(&mut fx, Target::WrongKeyAndMore, &mut rng);
        prop_assert_eq!(reason, RejectReason::BadKey);
        let bytes = packet_bytes(&raw, &meta, &payload);
        let r = fx.iface.receive_packet(&bytes, &mut fx.areas).map_err(|r| r.reason);
        prop_assert_eq!(r, Err(RejectReason::BadKey));
        let si = fx.slots.iter().position(|s| s.id.0 == raw.slot).expect("slot");
        let keyed = Raw { key: fx.slots[si].key, ..raw };
        let r = fx
            .iface
            .receive_packet(&packet_bytes(&keyed, &meta, &payload), &mut fx.areas)
            .map_err(|r| r.reason);
        prop_assert!(
            matches!(r, Err(RejectReason::BadMetaIndex | RejectReason::BadMode | RejectReason::OutOfBounds)),
            "with the key the other fault shows: {:?}",
            r
        );
    }

    /// Revocation refuses every packet until a rekey; after it the old key is refused
    /// and the new one works.
    #[test]
    fn revoke_then_rekey(seed: u64, new_key: u64) {
        let mut rng = SplitMix::new(seed);
        let mut fx = Fixture::new(&mut rng);
        let si = plain(&fx, SlotMode::Normal);
        let (raw, meta, payload) = valid_packet(&fx, si, &mut rng);
        let bytes = packet_bytes(&raw, &meta, &payload);
        let id = fx.slots[si].id;
        prop_assert_eq!(
            fx.iface.slots_mut().revoke(OwnerId(2), id),
            Err(hamlyn_core::SlotError::NotOwner)
        );
        fx.iface.slots_mut().revoke(OwnerId(1), id).expect("revoke");
        fx.slots[si].revoked = true;
        send_and_check(&mut fx, &bytes, &Expect::Reject(Some(si), RejectReason::Revoked))?;
        let new_key = if new_key == raw.key { !new_key } else { new_key };
        fx.iface.slots_mut().rekey(OwnerId(1), id, new_key).expect("rekey");
        fx.slots[si].revoked = false;
        fx.slots[si].key = new_key;
        send_and_check(&mut fx, &bytes, &Expect::Reject(Some(si), RejectReason::BadKey))?;
        let fresh = packet_bytes(&Raw { key: new_key, ..raw }, &meta, &payload);
        let want = model(&fx, &model_parses(&fresh).expect("parses"));
        prop_assert!(matches!(want, Expect::Accept { .. }), "new key refused: {:?}", want);
        send_and_check(&mut fx, &fresh, &want)?;
    }

    /// `Interface::receive` with metadata or payload slices that disagree with the
    /// header: Malformed, answered, counted, nothing written.
    #[test]
    fn receive_checks_slice_lengths(seed: u64, extra_meta in 0usize..3, extra_payload in 0usize..3) {
        prop_assume!(extra_meta + extra_payload > 0);
        let mut rng = SplitMix::new(seed);
        let mut fx = Fixture::new(&mut rng);
        let si = plain(&fx, SlotMode::Normal);
        let (raw, meta, payload) = valid_packet(&fx, si, &mut rng);
        let h = Header::parse(&raw.emit()).expect("valid header");
        let meta = [meta, vec![0; extra_meta]].concat();
        let payload = [payload, vec![0; extra_payload]].concat();
        let before = (snapshot(&fx.areas, fx.msg), snapshot(&fx.areas, fx.meta));
        let rej = fx.iface.receive(&h, &meta, &payload, &mut fx.areas).expect_err("refused");
        prop_assert_eq!(rej.reason, RejectReason::Malformed);
        let n = rej.nack.ok_or_else(|| TestCaseError::fail("no NACK"))?;
        prop_assert_eq!((n.dst, n.request, n.word), (h.src, h.request, u64::from(RejectReason::Malformed.code())));
        prop_assert_eq!(fx.iface.stats().rejects.get(RejectReason::Malformed), 1);
        prop_assert!(before == (snapshot(&fx.areas, fx.msg), snapshot(&fx.areas, fx.meta)));
    }

    /// Arbitrary bytes never panic the interface; what does not parse is counted as
    /// malformed, unanswered, and writes nothing.
    #[test]
    fn raw_bytes_never_panic(
        seed: u64,
        junk in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..200),
                // Junk behind a valid magic and version, to get past the first checks.
                proptest::collection::vec(any::<u8>(), 0..200).prop_map(|mut v| {
                    v.splice(0..v.len().min(3), [0x48, 0x4D, 1]);
                    v
                }),
            ],
            1..16,
        ),
    ) {
        let mut rng = SplitMix::new(seed);
        let mut fx = Fixture::new(&mut rng);
        for bytes in junk {
            let want = match model_parses(&bytes) {
                None => Expect::Malformed,
                Some(r) => model(&fx, &r),
            };
            send_and_check(&mut fx, &bytes, &want)?;
        }
    }
}

#[test]
fn a_nack_is_never_answered() {
    let mut rng = SplitMix::new(1);
    let mut fx = Fixture::new(&mut rng);
    for op in [Op::Nack, Op::Hello, Op::Heartbeat] {
        let mut h = Header::new(op);
        h.dst = NODE;
        h.src = NodeId(9);
        h.request = RequestId {
            terminus: 1,
            seq: 2,
        };
        let rej = fx
            .iface
            .receive(&h, &[], &[], &mut fx.areas)
            .expect_err("only writes are received here");
        assert_eq!(rej.reason, RejectReason::Unsupported);
        assert!(rej.nack.is_none(), "{op:?} answered");
    }
    assert_eq!(fx.iface.stats().rejects.get(RejectReason::Unsupported), 3);
}
