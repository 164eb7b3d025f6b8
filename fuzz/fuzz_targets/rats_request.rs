//! The request/response request parser (`hamlyn_rats::request_response::
//! parse_request_meta`) and seed checking (`hamlyn_rats::protocol::check_seed`) on
//! arbitrary bytes: never panic.
#![no_main]

use hamlyn_rats::protocol::{check_seed, ProtocolId};
use hamlyn_rats::request_response::parse_request_meta;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse_request_meta(data);
    if let Ok(seed) = hamlyn_wire::Seed::from_bytes(data) {
        for p in [
            ProtocolId::RequestResponse,
            ProtocolId::Stream,
            ProtocolId::Datagram,
        ] {
            let _ = check_seed(&seed, p, 1);
        }
    }
});
