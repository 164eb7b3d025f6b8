//! The engine's control-protocol decoders on arbitrary bytes: never panic, and what
//! decodes re-encodes to the same bytes (the encoding is canonical).
#![no_main]

use hamlyn_wire::control::{Reply, Request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = Request::decode(data) {
        assert_eq!(req.encode(), data);
    }
    if let Ok(rep) = Reply::decode(data) {
        assert_eq!(Reply::decode(&rep.encode()).as_ref(), Ok(&rep));
    }
});
