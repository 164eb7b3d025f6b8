//! The simple datagram's metadata parser (`hamlyn_rats::simple_datagram::parse_meta`)
//! on arbitrary bytes: never panics; user bytes stay within the limit.
#![no_main]

use hamlyn_rats::simple_datagram::{parse_meta, MAX_OOB, MAX_OOB_WITH_REPLY};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((reply, oob)) = parse_meta(data) {
        let max = if reply.is_some() {
            MAX_OOB_WITH_REPLY
        } else {
            MAX_OOB
        };
        assert!(oob.len() <= max.max(data.len()));
    }
});
