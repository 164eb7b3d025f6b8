//! The datagram protocol's metadata parser (`hamlyn_rats::datagram::parse_meta`) on
//! arbitrary bytes a peer could deposit: never panics; what parses keeps its user bytes
//! within the limit and its credit ticket re-encodes to the bytes it came from.
#![no_main]

use hamlyn_rats::datagram::{parse_meta, MAX_DATAGRAM_OOB};
use hamlyn_rats::protocol::{encode_compact, COMPACT_TICKET_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((_, _, credit, oob)) = parse_meta(data) {
        assert!(oob.len() <= MAX_DATAGRAM_OOB);
        let c = encode_compact(&credit).expect("a decoded ticket re-encodes");
        assert_eq!(&c[..], &data[13..13 + COMPACT_TICKET_LEN]);
    }
});
