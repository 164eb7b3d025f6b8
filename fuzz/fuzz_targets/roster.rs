//! The TCP fabric's roster (`hamlyn_fabric::tcp::Roster`, `hamlyn node --roster FILE`)
//! on arbitrary text: never panic; what parses writes back as text that parses to the
//! same roster, and every node listed has the key of its line.
#![no_main]

use hamlyn_fabric::tcp::Roster;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(roster) = Roster::parse(text) else {
        return;
    };
    let again = Roster::parse(&roster.to_text()).expect("a roster's own text parses");
    assert_eq!(again, roster);
    assert!(roster.len() <= text.lines().count());
});
