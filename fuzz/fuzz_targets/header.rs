//! `Header::parse` and `Header::parse_packet` on arbitrary bytes: never panic, and what
//! parses emits the same bytes and parses again to the same value.
#![no_main]

use hamlyn_wire::{Header, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Header::parse(data) {
        let bytes = h.to_bytes();
        // Every field is kept verbatim, so emitting gives back the input's first 64 bytes.
        assert_eq!(&bytes[..], &data[..HEADER_LEN]);
        assert_eq!(Header::parse(&bytes), Ok(h));
        assert!(h.meta_len <= 60);
    }
    if let Ok((h, meta, payload)) = Header::parse_packet(data) {
        assert_eq!(Header::parse(data), Ok(h));
        assert_eq!(meta.len(), usize::from(h.meta_len));
        assert_eq!(payload.len() as u64, u64::from(h.payload_len));
        assert_eq!(h.packet_len(), data.len() as u64);
        let packet = h
            .to_packet(meta, payload)
            .expect("a parsed packet re-emits");
        assert_eq!(packet, data);
    } else if let Ok(h) = Header::parse(data) {
        // The header is fine, so only the length can be wrong.
        assert_ne!(h.packet_len(), data.len() as u64);
    }
});
