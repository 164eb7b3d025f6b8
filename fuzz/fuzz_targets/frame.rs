//! The TCP fabric's stream decoder on arbitrary bytes cut at arbitrary places (what a
//! peer, or anyone who reaches a listener, can send): never panic, never loop, account
//! for every byte, and the handshake parsers never panic on the headers it yields.
#![no_main]

use hamlyn_fabric::tcp::frame::{decode_members, FrameDecoder, Hello, JoinQuery, Token};
use hamlyn_wire::NodeId;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte chooses where the stream is cut into reads, the rest is the stream.
    let Some((&cut, stream)) = data.split_first() else {
        return;
    };
    let step = usize::from(cut).max(1);
    let mut dec = FrameDecoder::new(1 << 16);
    let mut payload_bytes = 0usize;
    for chunk in stream.chunks(step) {
        let mut rest = chunk;
        // Each call consumes bytes or changes state; bound the calls per chunk anyway.
        for _ in 0..=2 * chunk.len() + 4 {
            match dec.next(rest) {
                Ok((used, token)) => {
                    assert!(used <= rest.len());
                    rest = &rest[used..];
                    match token {
                        Token::NeedMore => break,
                        Token::Frame(h) => {
                            let _ = Hello::from_header(&h);
                            let _ = JoinQuery::from_header(&h);
                            let _ = hamlyn_fabric::tcp::frame::check_join_reply(&h, NodeId(1));
                            assert!(dec.meta().len() == usize::from(h.meta_len));
                        }
                        Token::Payload { bytes, .. } => {
                            payload_bytes += bytes.len();
                            let _ = decode_members(bytes);
                        }
                        Token::End => {}
                    }
                }
                Err(_) => return, // the decoder is stuck: the connection would close
            }
        }
    }
    assert!(payload_bytes <= stream.len());
    let _ = dec.finish();
});
