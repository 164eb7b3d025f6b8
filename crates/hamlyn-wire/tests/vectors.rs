//! The fixed test vectors of `docs/spec/wire.md`, checked both ways.
//!
//! The vectors are not copied here: this test reads the spec itself (with `include_str!`)
//! and extracts every fenced block preceded by a line `vector: NAME` (see the spec's
//! "Marker convention"): ` ```hex ` blocks are bytes (two-digit hex tokens, optional
//! `OFFSET:` labels that must match, `#` comments), ` ```text ` blocks are one verbatim
//! line. The expected values are built below in Rust. A change to either the spec or the
//! code that makes them disagree fails this test; on a byte mismatch the message shows
//! the emitted bytes in the spec's format, ready to paste.
//!
//! When the environment variable `HAMLYN_FUZZ_SEEDS` names a directory,
//! `write_fuzz_seeds` also writes the vectors there as starting corpora for the `fuzz/`
//! targets (`.ci/run` uses this).

use std::collections::BTreeMap;

use hamlyn_wire::base32;
use hamlyn_wire::crc::crc32;
use hamlyn_wire::entry::{meta_off, notif_off};
use hamlyn_wire::{
    Flags, Header, MetaEntry, NodeId, NotifEntry, NotifKind, Op, RequestId, Seed, SlotId, Ticket,
    TicketFlags, WireError, FAST_META_INDEX, FULL_SHARE, HEADER_LEN, META_ENTRY_LEN,
    NOTIF_ENTRY_LEN,
};

const SPEC: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../docs/spec/wire.md"
));

/// Every vector the spec must contain, with its fence language.
const NAMES: &[(&str, &str)] = &[
    ("header-write", "hex"),
    ("packet-write", "hex"),
    ("header-fast", "hex"),
    ("ticket-delegate", "hex"),
    ("seed-bytes", "hex"),
    ("seed-text", "text"),
    ("meta-entry", "hex"),
    ("notif-message", "hex"),
    ("notif-fast", "hex"),
];

// ---------------------------------------------------------------------------------------
// Extraction from the spec

/// One marked block: its fence language and its raw lines.
struct Block {
    lang: String,
    lines: Vec<String>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// All `vector: NAME` blocks of the spec, by name. Panics on a malformed or duplicate one.
fn blocks() -> BTreeMap<String, Block> {
    let lines: Vec<&str> = SPEC.lines().collect();
    let mut out = BTreeMap::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(name) = lines[i].strip_prefix("vector: ") else {
            i += 1;
            continue;
        };
        let name = name.to_string();
        assert!(
            valid_name(&name),
            "line {}: bad vector name {name:?}",
            i + 1
        );
        i += 1;
        while i < lines.len() && lines[i].trim().is_empty() {
            i += 1;
        }
        let fence = lines.get(i).copied().unwrap_or("");
        let lang = fence.strip_prefix("```").unwrap_or_else(|| {
            panic!(
                "line {}: vector {name} must be followed by a fenced block",
                i + 1
            )
        });
        assert!(
            !lang.is_empty(),
            "line {}: vector {name}'s fence needs a language",
            i + 1
        );
        let lang = lang.to_string();
        i += 1;
        let start = i;
        while i < lines.len() && lines[i] != "```" {
            i += 1;
        }
        assert!(i < lines.len(), "vector {name}: unclosed fence");
        let block = Block {
            lang,
            lines: lines[start..i].iter().map(ToString::to_string).collect(),
        };
        assert!(
            out.insert(name.clone(), block).is_none(),
            "vector {name} appears twice"
        );
        i += 1;
    }
    out
}

/// Parses a ` ```hex ` block: optional `OFFSET:` label, hex byte tokens, `#` comments.
fn parse_hex(name: &str, lines: &[String]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for line in lines {
        let code = line.split('#').next().unwrap_or("");
        let mut tokens = code.split_whitespace().peekable();
        if let Some(label) = tokens.peek().and_then(|t| t.strip_suffix(':')) {
            let at = usize::from_str_radix(label, 16)
                .unwrap_or_else(|_| panic!("vector {name}: bad offset label {label:?}"));
            assert_eq!(
                at,
                bytes.len(),
                "vector {name}: label {label}: says offset {at:#x}, but {:#x} bytes precede it",
                bytes.len()
            );
            tokens.next();
        }
        for t in tokens {
            assert!(
                t.len() == 2,
                "vector {name}: {t:?} is not a two-digit hex byte"
            );
            let b = u8::from_str_radix(t, 16)
                .unwrap_or_else(|_| panic!("vector {name}: {t:?} is not hex"));
            bytes.push(b);
        }
    }
    bytes
}

/// The vectors, checked against [`NAMES`].
struct Vectors(BTreeMap<String, Block>);

impl Vectors {
    fn load() -> Vectors {
        let blocks = blocks();
        let found: Vec<&str> = blocks.keys().map(String::as_str).collect();
        let mut wanted: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
        wanted.sort_unstable();
        assert_eq!(
            found, wanted,
            "the spec's vectors differ from the ones this test knows"
        );
        for (name, lang) in NAMES {
            assert_eq!(
                blocks[*name].lang, *lang,
                "vector {name} should be a ```{lang} block"
            );
        }
        Vectors(blocks)
    }

    fn hex(&self, name: &str) -> Vec<u8> {
        let b = &self.0[name];
        assert_eq!(b.lang, "hex", "vector {name} is not hex");
        parse_hex(name, &b.lines)
    }

    fn text(&self, name: &str) -> String {
        let b = &self.0[name];
        assert_eq!(b.lang, "text", "vector {name} is not text");
        assert_eq!(b.lines.len(), 1, "vector {name} must be exactly one line");
        b.lines[0].clone()
    }
}

/// Bytes in the spec's dump format (8 per line, hex offset labels).
fn dump(bytes: &[u8]) -> String {
    bytes
        .chunks(8)
        .enumerate()
        .map(|(i, chunk)| {
            let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02x}")).collect();
            format!("{:02x}: {}\n", i * 8, hex.join(" "))
        })
        .collect()
}

/// Asserts that emitted bytes equal a vector, showing a pasteable dump when they do not.
fn assert_bytes(name: &str, emitted: &[u8], spec: &[u8]) {
    assert!(
        emitted == spec,
        "vector {name}: the code emits\n{}but the spec has\n{}",
        dump(emitted),
        dump(spec)
    );
}

// ---------------------------------------------------------------------------------------
// The expected values

const KEY: u64 = 0x0123_4567_89AB_CDEF;
const COOKIE: u64 = 0x0000_7F00_DEAD_BEEF;
const META: &[u8] = b"hello hamlyn";
const PAYLOAD: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

fn header_write() -> Header {
    Header {
        op: Op::Write,
        flags: Flags::FIRST | Flags::LAST | Flags::NOTIFY,
        meta_len: 12,
        src: NodeId(1),
        dst: NodeId(2),
        slot: SlotId(7),
        meta_index: 3,
        key: KEY,
        offset: 0x1000,
        payload_len: 16,
        delta: 0x8000_0000,
        word: 0x2A,
        request: RequestId {
            terminus: 5,
            seq: 9,
        },
    }
}

fn header_fast() -> Header {
    Header {
        op: Op::Write,
        flags: Flags::FIRST | Flags::LAST | Flags::NOTIFY_NOW | Flags::FAST | Flags::WAKE,
        meta_len: 0,
        src: NodeId(1),
        dst: NodeId(2),
        slot: SlotId(9),
        meta_index: FAST_META_INDEX,
        key: 0xFEDC_BA98_7654_3210,
        offset: 0x40,
        payload_len: 8,
        delta: 0,
        word: 0x1122_3344_5566_7788,
        request: RequestId {
            terminus: 5,
            seq: 10,
        },
    }
}

fn parent_ticket() -> Ticket {
    Ticket {
        node: NodeId(2),
        incarnation: 0x11,
        slot: SlotId(7),
        key: KEY,
        meta_first: 3,
        meta_count: 1,
        offset: 0,
        len: 0x2000,
        share: FULL_SHARE,
        flags: TicketFlags::WRITE | TicketFlags::READ,
    }
}

fn ticket_delegate() -> Ticket {
    Ticket {
        offset: 0x1000,
        len: 0x1000,
        share: 1 << 31,
        ..parent_ticket()
    }
}

fn seed() -> Seed {
    Seed {
        protocol: 7,
        tickets: vec![ticket_delegate()],
        data: b"reply".to_vec(),
    }
}

fn meta_entry() -> MetaEntry {
    let mut e = MetaEntry::zeroed();
    e.user[..META.len()].copy_from_slice(META);
    e.accumulator.set(0x8000_0000);
    e.paranoid_key.set(KEY);
    e.paranoid_low.set(0x1000);
    e.paranoid_high.set(0x2000);
    e.cookie.set(COOKIE);
    e.meta_len.set(12);
    e.state.set(MetaEntry::ARMED);
    e.completed.set(4);
    e.src_node.set(1);
    e
}

fn notif_message() -> NotifEntry {
    let mut n = NotifEntry::zeroed();
    n.seq.set(0x11);
    n.kind.set(NotifKind::Message as u16);
    n.flags.set((Flags::FIRST | Flags::LAST | Flags::NOTIFY).0);
    n.slot.set(7);
    n.meta_index.set(3);
    n.word.set(COOKIE);
    n.src_node.set(1);
    n.len.set(16);
    n
}

fn notif_fast() -> NotifEntry {
    let mut n = NotifEntry::zeroed();
    n.seq.set(0x12);
    n.kind.set(NotifKind::Fast as u16);
    n.flags.set(header_fast().flags.0);
    n.slot.set(9);
    n.meta_index.set(FAST_META_INDEX);
    n.word.set(0x1122_3344_5566_7788);
    n.src_node.set(1);
    n.len.set(8);
    n
}

// ---------------------------------------------------------------------------------------
// Both ways

#[test]
fn every_vector_is_present_and_well_formed() {
    let v = Vectors::load();
    for (name, lang) in NAMES {
        match *lang {
            "hex" => assert!(!v.hex(name).is_empty(), "vector {name} is empty"),
            _ => assert!(!v.text(name).is_empty(), "vector {name} is empty"),
        }
    }
}

#[test]
fn headers_both_ways() {
    let v = Vectors::load();
    for (name, expected) in [
        ("header-write", header_write()),
        ("header-fast", header_fast()),
    ] {
        let bytes = v.hex(name);
        assert_eq!(bytes.len(), HEADER_LEN, "vector {name}");
        assert_bytes(name, &expected.to_bytes(), &bytes);
        assert_eq!(Header::parse(&bytes), Ok(expected), "vector {name}");
    }
    assert!(header_fast().is_fast());
    assert!(!header_write().is_fast());
}

#[test]
fn packet_both_ways() {
    let v = Vectors::load();
    let bytes = v.hex("packet-write");
    assert_eq!(&bytes[..HEADER_LEN], &v.hex("header-write")[..]);
    let h = header_write();
    assert_bytes(
        "packet-write",
        &h.to_packet(META, &PAYLOAD).unwrap(),
        &bytes,
    );
    let (ph, meta, payload) = Header::parse_packet(&bytes).unwrap();
    assert_eq!((ph, meta, payload), (h, META, &PAYLOAD[..]));
    assert_eq!(h.packet_len(), bytes.len() as u64);
}

#[test]
fn ticket_both_ways() {
    let v = Vectors::load();
    let bytes = v.hex("ticket-delegate");
    let t = ticket_delegate();
    assert_bytes("ticket-delegate", &t.to_bytes(), &bytes);
    assert_eq!(Ticket::from_bytes(&bytes), Ok(t));
    // The vector is what the spec says it is: the second half of the parent's split.
    let halves = parent_ticket().split(2).unwrap();
    assert_eq!(halves[1], t);
    assert_eq!(t.y(), 0x8000_0000);
    assert_eq!(halves[0].y().wrapping_add(halves[1].y()), 0);
    // ... and the header-write packet is sent with it.
    let h = header_write();
    assert_eq!(
        (h.dst, h.slot, h.key, h.meta_index, h.offset, h.delta),
        (t.node, t.slot, t.key, t.meta_first, t.offset, t.y())
    );
}

#[test]
fn seed_both_ways() {
    let v = Vectors::load();
    let bytes = v.hex("seed-bytes");
    let text = v.text("seed-text");
    let s = seed();
    assert_bytes("seed-bytes", &s.to_bytes().unwrap(), &bytes);
    assert_eq!(Seed::from_bytes(&bytes), Ok(s.clone()));
    assert_eq!(s.to_text().unwrap(), text, "vector seed-text");
    assert_eq!(Seed::from_text(&text), Ok(s.clone()));
    // The text is the prefix and the base32 of the binary form; the trailer is the CRC.
    let body = text.strip_prefix("hmseed1-").unwrap();
    assert_eq!(base32::decode(body, 8).unwrap(), bytes);
    assert_eq!(body.len(), (bytes.len() * 8).div_ceil(5));
    let (data, sum) = bytes.split_at(bytes.len() - 4);
    assert_eq!(crc32(data).to_le_bytes(), sum);
    assert_eq!(crc32(data), 0xBCCC_A3EC);
    // The embedded ticket is the ticket vector.
    assert_eq!(&bytes[6..70], &v.hex("ticket-delegate")[..]);
}

#[test]
fn seed_text_forgives_what_the_spec_says() {
    let v = Vectors::load();
    let text = v.text("seed-text");
    let s = seed();
    let body = text.strip_prefix("hmseed1-").unwrap();
    assert!(body.contains('0') && body.contains('1'));
    let hyphenated: String = body
        .as_bytes()
        .chunks(5)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect::<Vec<_>>()
        .join("-");
    let forgiven = [
        text.to_uppercase(),
        format!(" \t{text}\r\n"),
        format!("hmseed1-{}", body.replace('1', "l").replace('0', "o")),
        format!("HmSeEd1-{}", body.replace('1', "I").replace('0', "O")),
        format!("hmseed1-{}", body.replace('1', "L")),
        format!("hmseed1-{hyphenated}"),
        format!("hmseed1--{hyphenated}-"),
    ];
    for f in &forgiven {
        assert_eq!(Seed::from_text(f), Ok(s.clone()), "{f:?}");
    }
}

#[test]
fn meta_entry_both_ways() {
    let v = Vectors::load();
    let bytes = v.hex("meta-entry");
    assert_eq!(bytes.len(), META_ENTRY_LEN);
    let e = meta_entry();
    assert_bytes("meta-entry", e.as_bytes(), &bytes);
    assert_eq!(MetaEntry::read(&bytes), Ok(e));
    assert_eq!(e.metadata(), META);
    assert!(e.armed());
    // The spec's offsets are the constants' offsets.
    let at = |off: usize, n: usize| &bytes[off..off + n];
    assert_eq!(at(meta_off::USER, 12), META);
    assert_eq!(at(meta_off::ACCUMULATOR, 4), 0x8000_0000u32.to_le_bytes());
    assert_eq!(at(meta_off::PARANOID_KEY, 8), KEY.to_le_bytes());
    assert_eq!(at(meta_off::PARANOID_LOW, 8), 0x1000u64.to_le_bytes());
    assert_eq!(at(meta_off::PARANOID_HIGH, 8), 0x2000u64.to_le_bytes());
    assert_eq!(at(meta_off::COOKIE, 8), COOKIE.to_le_bytes());
    assert_eq!(at(meta_off::META_LEN, 2), 12u16.to_le_bytes());
    assert_eq!(at(meta_off::STATE, 2), MetaEntry::ARMED.to_le_bytes());
    assert_eq!(at(meta_off::COMPLETED, 4), 4u32.to_le_bytes());
    assert_eq!(at(meta_off::SRC_NODE, 4), 1u32.to_le_bytes());
    assert_eq!(at(108, 20), [0u8; 20]);
}

#[test]
fn notif_entries_both_ways() {
    let v = Vectors::load();
    for (name, expected, kind) in [
        ("notif-message", notif_message(), NotifKind::Message),
        ("notif-fast", notif_fast(), NotifKind::Fast),
    ] {
        let bytes = v.hex(name);
        assert_eq!(bytes.len(), NOTIF_ENTRY_LEN, "vector {name}");
        assert_bytes(name, expected.as_bytes(), &bytes);
        assert_eq!(NotifEntry::read(&bytes), Ok(expected), "vector {name}");
        assert_eq!(expected.kind(), Some(kind));
        let at = |off: usize, n: usize| &bytes[off..off + n];
        assert_eq!(at(notif_off::SEQ, 4), expected.seq.get().to_le_bytes());
        assert_eq!(at(notif_off::KIND, 2), (kind as u16).to_le_bytes());
        assert_eq!(at(notif_off::FLAGS, 2), expected.flags.get().to_le_bytes());
        assert_eq!(at(notif_off::SLOT, 4), expected.slot.get().to_le_bytes());
        let mi = expected.meta_index.get().to_le_bytes();
        assert_eq!(at(notif_off::META_INDEX, 4), mi);
        assert_eq!(at(notif_off::WORD, 8), expected.word.get().to_le_bytes());
        let src = expected.src_node.get().to_le_bytes();
        assert_eq!(at(notif_off::SRC_NODE, 4), src);
        assert_eq!(at(notif_off::LEN, 4), expected.len.get().to_le_bytes());
    }
    // The message notification names the entry and echoes its cookie.
    assert_eq!(notif_message().word.get(), meta_entry().cookie.get());
}

// ---------------------------------------------------------------------------------------
// Corrupted copies are rejected

fn with(bytes: &[u8], at: usize, value: u8) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[at] = value;
    b
}

#[test]
fn corrupted_headers_are_rejected() {
    let v = Vectors::load();
    for name in ["header-write", "header-fast", "packet-write"] {
        let b = v.hex(name);
        assert_eq!(
            Header::parse(&with(&b, 0, 0x49)),
            Err(WireError::BadMagic(0x4D49)),
            "{name}"
        );
        assert_eq!(
            Header::parse(&with(&b, 1, 0x4E)),
            Err(WireError::BadMagic(0x4E48)),
            "{name}"
        );
        assert_eq!(
            Header::parse(&with(&b, 2, 2)),
            Err(WireError::UnsupportedVersion(2))
        );
        assert_eq!(Header::parse(&with(&b, 3, 0)), Err(WireError::UnknownOp(0)));
        assert_eq!(
            Header::parse(&with(&b, 3, 10)),
            Err(WireError::UnknownOp(10))
        );
        assert_eq!(
            Header::parse(&with(&b, 4, b[4] | 0x40)),
            Err(WireError::UnknownFlags(0x40))
        );
        assert_eq!(
            Header::parse(&with(&b, 5, 0x80)),
            Err(WireError::UnknownFlags(0x8000))
        );
        assert_eq!(
            Header::parse(&with(&b, 6, 61)),
            Err(WireError::MetaTooLong(61))
        );
        assert!(matches!(
            Header::parse(&with(&b, 4, b[4] ^ Flags::FAST.0.to_le_bytes()[0])),
            Err(WireError::InvalidField {
                field: "meta_index",
                ..
            })
        ));
        assert_eq!(
            Header::parse(&b[..HEADER_LEN - 1]),
            Err(WireError::Truncated {
                need: HEADER_LEN,
                have: HEADER_LEN - 1
            })
        );
    }
    // Metadata without FIRST.
    let b = v.hex("header-write");
    assert_eq!(
        Header::parse(&with(&b, 4, b[4] & !Flags::FIRST.0.to_le_bytes()[0])),
        Err(WireError::MetaNotFirst)
    );
    // A packet one byte short or long.
    let p = v.hex("packet-write");
    assert_eq!(
        Header::parse_packet(&p[..p.len() - 1]),
        Err(WireError::LengthMismatch {
            stated: p.len() as u64,
            actual: p.len() - 1
        })
    );
    let mut longer = p.clone();
    longer.push(0);
    assert!(matches!(
        Header::parse_packet(&longer),
        Err(WireError::LengthMismatch { .. })
    ));
}

#[test]
fn corrupted_tickets_are_rejected() {
    let v = Vectors::load();
    let b = v.hex("ticket-delegate");
    assert_eq!(
        Ticket::from_bytes(&with(&b, 0, 2)),
        Err(WireError::UnsupportedVersion(2))
    );
    let field = |r: Result<Ticket, WireError>| match r {
        Err(WireError::InvalidField { field, .. }) => field,
        other => panic!("expected InvalidField, got {other:?}"),
    };
    assert_eq!(field(Ticket::from_bytes(&with(&b, 1, 1))), "reserved");
    assert_eq!(field(Ticket::from_bytes(&with(&b, 63, 1))), "reserved");
    assert_eq!(field(Ticket::from_bytes(&with(&b, 2, 0x13))), "flags");
    // share 0, then share 2^32 + 2^31.
    assert_eq!(field(Ticket::from_bytes(&with(&b, 51, 0))), "share");
    assert_eq!(field(Ticket::from_bytes(&with(&b, 52, 1))), "share");
    // len = u64::MAX: offset + len overflows; meta_count = u32::MAX: meta_first + it does.
    let mut long = b.clone();
    long[40..48].fill(0xFF);
    assert_eq!(field(Ticket::from_bytes(&long)), "len");
    let mut many = b.clone();
    many[28..32].fill(0xFF);
    assert_eq!(field(Ticket::from_bytes(&many)), "meta_count");
    assert_eq!(
        Ticket::from_bytes(&b[..63]),
        Err(WireError::Truncated { need: 64, have: 63 })
    );
}

#[test]
fn corrupted_seeds_are_rejected() {
    let v = Vectors::load();
    let bytes = v.hex("seed-bytes");
    // Every single-bit flip anywhere fails the CRC.
    for at in 0..bytes.len() {
        for bit in 0..8 {
            let bad = with(&bytes, at, bytes[at] ^ (1 << bit));
            assert_eq!(
                Seed::from_bytes(&bad),
                Err(WireError::BadChecksum),
                "byte {at} bit {bit}"
            );
        }
    }
    assert_eq!(
        Seed::from_bytes(&bytes[..bytes.len() - 1]),
        Err(WireError::BadChecksum)
    );
    assert_eq!(
        Seed::from_bytes(&bytes[..9]),
        Err(WireError::Truncated { need: 10, have: 9 })
    );

    let text = v.text("seed-text");
    // A different prefix.
    for bad in ["hmseed2-", "hmseed1_", "xmseed1-"] {
        let t = format!("{bad}{}", &text[8..]);
        assert_eq!(Seed::from_text(&t), Err(WireError::BadSeedPrefix), "{t}");
    }
    // Every substituted character of the base32 part.
    let alphabet = b"0123456789abcdefghjkmnpqrstvwxyz";
    for at in 8..text.len() {
        for &c in alphabet {
            if c == text.as_bytes()[at] {
                continue;
            }
            let bad = String::from_utf8(with(text.as_bytes(), at, c)).unwrap();
            assert!(Seed::from_text(&bad).is_err(), "{bad}");
        }
    }
    // Non-zero padding bits: the last character carries 2 data bits and 3 padding bits,
    // so '0' -> '1' leaves the decoded bytes alone; only the padding rule catches it.
    assert!(text.ends_with('0'));
    let padded = format!("{}1", &text[..text.len() - 1]);
    assert_eq!(Seed::from_text(&padded), Err(WireError::BadChecksum));
    // A character outside the alphabet, white space inside, a cut.
    let u = String::from_utf8(with(text.as_bytes(), 20, b'u')).unwrap();
    assert_eq!(
        Seed::from_text(&u),
        Err(WireError::BadSeedChar { ch: 'u', pos: 20 })
    );
    let spaced = format!("{} {}", &text[..30], &text[30..]);
    assert_eq!(
        Seed::from_text(&spaced),
        Err(WireError::BadSeedChar { ch: ' ', pos: 30 })
    );
    for cut in [1, 2, 8] {
        assert!(Seed::from_text(&text[..text.len() - cut]).is_err());
    }
    assert_eq!(
        Seed::from_text(&format!("{text}0")),
        Err(WireError::BadChecksum)
    );
}

#[test]
fn corrupted_entries_are_caught() {
    // Entries carry no magic or checksum (only the engine and the owner write them), so
    // the parsers reject only short input; a corrupted copy reads as a different entry.
    let v = Vectors::load();
    let m = v.hex("meta-entry");
    assert_eq!(
        MetaEntry::read(&m[..META_ENTRY_LEN - 1]),
        Err(WireError::Truncated {
            need: META_ENTRY_LEN,
            have: META_ENTRY_LEN - 1
        })
    );
    let bad = MetaEntry::read(&with(&m, meta_off::ACCUMULATOR, 1)).unwrap();
    assert_ne!(bad, meta_entry());
    assert_eq!(bad.accumulator.get(), 0x8000_0001);

    for name in ["notif-message", "notif-fast"] {
        let n = v.hex(name);
        assert_eq!(
            NotifEntry::read(&n[..NOTIF_ENTRY_LEN - 1]),
            Err(WireError::Truncated {
                need: NOTIF_ENTRY_LEN,
                have: NOTIF_ENTRY_LEN - 1
            })
        );
        for kind in [0u8, 7, 0xFF] {
            let bad = NotifEntry::read(&with(&n, notif_off::KIND, kind)).unwrap();
            assert_eq!(bad.kind(), None, "{name} kind {kind}");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Fuzz seeds

/// Writes the vectors as fuzz corpora when `HAMLYN_FUZZ_SEEDS` names a directory.
#[test]
fn write_fuzz_seeds() {
    let Some(dir) = std::env::var_os("HAMLYN_FUZZ_SEEDS") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let v = Vectors::load();
    let mut ticket_split = v.hex("ticket-delegate");
    ticket_split.extend_from_slice(&2u16.to_le_bytes());
    let files: [(&str, &str, Vec<u8>); 7] = [
        ("header", "header-write", v.hex("header-write")),
        ("header", "header-fast", v.hex("header-fast")),
        ("header", "packet-write", v.hex("packet-write")),
        ("ticket", "ticket-delegate", v.hex("ticket-delegate")),
        ("ticket", "ticket-delegate-split2", ticket_split),
        ("seed", "seed-bytes", v.hex("seed-bytes")),
        ("seed", "seed-text", v.text("seed-text").into_bytes()),
    ];
    for (target, name, bytes) in files {
        let d = dir.join(target);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(name), bytes).unwrap();
    }
    // The core ingress target (`fuzz/fuzz_targets/ingress.rs`): length-prefixed packets
    // to its slots (normal slot 0 key 0x11, fast slot 1 key 0x22) and the answer it awaits.
    let packet = |op: Op, flags: Flags, slot: u32, key: u64, meta_index: u32, meta_len: usize| {
        let mut h = Header::new(op);
        h.flags = flags;
        h.src = NodeId(2);
        h.dst = NodeId(1);
        h.slot = SlotId(slot);
        h.key = key;
        h.meta_index = meta_index;
        h.offset = 16;
        h.delta = 1;
        h.request = RequestId {
            terminus: 0x100,
            seq: 1,
        };
        let bytes = h.to_packet(&vec![7; meta_len], &[0xAB; 32]).unwrap();
        let mut out = (bytes.len() as u16).to_le_bytes().to_vec();
        out.extend_from_slice(&bytes);
        out
    };
    let whole = Flags::FIRST | Flags::LAST | Flags::NOTIFY;
    let d = dir.join("ingress");
    std::fs::create_dir_all(&d).unwrap();
    for (name, bytes) in [
        ("write", packet(Op::Write, whole, 0, 0x11, 0, 8)),
        (
            "fast",
            packet(Op::Write, whole | Flags::FAST, 1, 0x22, u32::MAX, 0),
        ),
        ("answer", packet(Op::ReadResp, whole, 0, 0x11, 0, 0)),
        (
            "write-twice",
            [
                packet(Op::Write, Flags::FIRST, 0, 0x11, 1, 8),
                packet(Op::Write, Flags::LAST | Flags::NOTIFY, 0, 0x11, 1, 0),
            ]
            .concat(),
        ),
    ] {
        std::fs::write(d.join(name), bytes).unwrap();
    }
}
