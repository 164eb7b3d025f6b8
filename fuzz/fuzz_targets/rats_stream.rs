//! The stream's metadata parser (`hamlyn_rats::stream::parse_meta`) on arbitrary bytes,
//! and its in-order delivery (`Reorder`) fed the parsed sequence numbers: never panics,
//! never delivers a sequence number twice or out of order.
#![no_main]

use hamlyn_rats::stream::{parse_meta, Reorder};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse_meta(data);
    let Ok(mut r) = Reorder::new(16) else {
        return;
    };
    let mut next = 0u32;
    for chunk in data.chunks(4) {
        let mut b = [0u8; 4];
        b[..chunk.len()].copy_from_slice(chunk);
        let _ = r.accept(u32::from_le_bytes(b) % 64, ());
        while r.pop().is_some() {
            next += 1;
        }
        assert_eq!(r.next_seq(), next);
    }
});
