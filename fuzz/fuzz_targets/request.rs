//! Terminus work-queue entries and completions on arbitrary bytes (what a scribbling
//! client can put in its ring): never panic, and what decodes re-encodes and decodes
//! to the same request; a view of any entry, checked or not, reads within it.
#![no_main]

use hamlyn_wire::request::{Completion, RequestView, SendRequest, REQUEST_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = SendRequest::decode(data) {
        let mut buf = [0u8; REQUEST_LEN];
        req.encode(&mut buf);
        assert_eq!(SendRequest::decode(&buf), Ok(req));
        assert!(req.metadata().len() <= 60);
    }
    if let Some(entry) = data.first_chunk::<REQUEST_LEN>() {
        let v = RequestView::unchecked(entry);
        let _ = (v.metadata(), v.inline_data(), v.gathers().iter().count());
        let _ = v.to_request();
        if let Ok(v) = RequestView::check(entry) {
            assert_eq!(
                v.gathers().iter().map(|g| g.len).sum::<u64>(),
                if v.is_gather() { v.len() } else { 0 }
            );
            assert_eq!(
                v.inline_data().len() as u64,
                if v.is_gather() { 0 } else { v.len() }
            );
        }
    }
    if let Ok(c) = Completion::decode(data) {
        assert_eq!(Completion::decode(&c.encode()), Ok(c));
    }
});
