//! The statistics page decoder on arbitrary bytes, behind a `StatsPage` reply's tag so
//! every input reaches it: never panics, and what decodes survives a re-encoding.
#![no_main]

use hamlyn_wire::control::Reply;
use libfuzzer_sys::fuzz_target;

/// `Reply::StatsPage`'s tag on the control socket.
const STATS_PAGE_TAG: u8 = 9;

fuzz_target!(|data: &[u8]| {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(STATS_PAGE_TAG);
    bytes.extend_from_slice(data);
    if let Ok(rep) = Reply::decode(&bytes) {
        assert_eq!(Reply::decode(&rep.encode()).as_ref(), Ok(&rep));
    }
});
