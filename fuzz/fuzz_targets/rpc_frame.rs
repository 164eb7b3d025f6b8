//! RPC call frames and replies on arbitrary bytes (a client writes the frame a server
//! reads; a server writes the reply a client reads): never panic, never read past the
//! bytes, and what decodes re-encodes to the same meaning.
#![no_main]

use hamlyn_rpc::frame::{
    decode_call, decode_reply, encode_call_by_ref, encode_reply_after_writes, SEGMENT,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = decode_call(data) {
        let segment: Option<[u8; SEGMENT]> = f.segment.map(|s| s.try_into().expect("64 bytes"));
        let again = encode_call_by_ref(f.procedure, f.call, f.args, segment.as_ref())
            .expect("decoded arguments fit");
        assert_eq!(decode_call(&again), Ok(f));
    }
    if let Some(r) = decode_reply(data) {
        let again = encode_reply_after_writes(r.status, r.call, r.body, r.writes);
        assert_eq!(decode_reply(&again), Some(r));
    }
});
