//! `Seed::from_bytes` and `Seed::from_text` on arbitrary input: never panic, and what
//! parses round-trips through both forms.
#![no_main]

use hamlyn_wire::Seed;
use libfuzzer_sys::fuzz_target;

fn round_trip(s: &Seed) {
    let bytes = s.to_bytes().expect("a parsed seed re-emits");
    assert_eq!(Seed::from_bytes(&bytes).as_ref(), Ok(s));
    let text = s.to_text().expect("a parsed seed re-emits as text");
    assert!(text.starts_with("hmseed1-"));
    assert_eq!(Seed::from_text(&text).as_ref(), Ok(s));
}

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = Seed::from_bytes(data) {
        // The binary form has one encoding: the input itself.
        assert_eq!(s.to_bytes().as_deref(), Ok(data));
        round_trip(&s);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(s) = Seed::from_text(text) {
            round_trip(&s);
        }
    }
});
