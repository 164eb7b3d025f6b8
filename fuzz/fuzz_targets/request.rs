//! Terminus work-queue entries and completions on arbitrary bytes (what a scribbling
//! client can put in its ring): never panic, and what decodes re-encodes and decodes
//! to the same request.
#![no_main]

use hamlyn_wire::request::{Completion, SendRequest, REQUEST_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = SendRequest::decode(data) {
        let mut buf = [0u8; REQUEST_LEN];
        req.encode(&mut buf);
        assert_eq!(SendRequest::decode(&buf), Ok(req));
        assert!(req.metadata().len() <= 60);
    }
    if let Ok(c) = Completion::decode(data) {
        assert_eq!(Completion::decode(&c.encode()), Ok(c));
    }
});
