//! Remote read and atomic request bodies on arbitrary bytes (what a peer can put in a
//! READ_REQ or ATOMIC_REQ payload): never panic, and what decodes re-encodes to the same
//! bytes' meaning.
#![no_main]

use hamlyn_wire::rma::{AtomicBody, ReadBody};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(b) = ReadBody::decode(data) {
        assert_eq!(ReadBody::decode(&b.encode()), Ok(b));
    }
    if let Ok(b) = AtomicBody::decode(data) {
        assert_eq!(AtomicBody::decode(&b.encode()), Ok(b));
    }
});
