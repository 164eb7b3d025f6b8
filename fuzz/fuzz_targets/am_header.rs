//! The active-message header (hamlyn-am) on arbitrary bytes and arrival lengths (a peer
//! writes every byte a receiver parses): never panic, never read past the bytes, and
//! what parses re-encodes to the same bytes and the same meaning.
#![no_main]

use hamlyn_am::header::{parse, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (arrived, bytes) = match data.split_first_chunk::<4>() {
        Some((a, rest)) => (u64::from(u32::from_le_bytes(*a)), rest),
        None => (0, data),
    };
    if let Ok(h) = parse(bytes, arrived) {
        let again = h.encode();
        assert_eq!(&again[..], &bytes[..HEADER_LEN]);
        assert_eq!(parse(&again, arrived), Ok(h));
    }
});
