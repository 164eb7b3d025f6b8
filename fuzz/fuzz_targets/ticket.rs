//! `Ticket::from_bytes` on arbitrary bytes (round trip on success) and `Ticket::split(n)`
//! of what parses, with `n` taken from the two bytes after the ticket: never panics, and
//! on success the parts conserve the share, the byte range and everything else.
#![no_main]

use hamlyn_wire::ticket::TICKET_LEN;
use hamlyn_wire::{SplitError, Ticket, MIN_SPLIT_SHARE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(t) = Ticket::from_bytes(data) else {
        return;
    };
    let bytes = t.to_bytes();
    assert_eq!(&bytes[..], &data[..TICKET_LEN]);
    assert_eq!(Ticket::from_bytes(&bytes), Ok(t));

    // Any n, up to usize::MAX: split must refuse huge counts before allocating.
    let n = match &data[TICKET_LEN..] {
        [] => 2,
        [a] => usize::from(*a),
        rest => {
            let mut b = [0u8; 8];
            let k = rest.len().min(8);
            b[..k].copy_from_slice(&rest[..k]);
            u64::from_le_bytes(b) as usize
        }
    };
    match t.split(n) {
        Ok(parts) => {
            assert_eq!(parts.len(), n);
            let share: u64 = parts.iter().map(|p| p.share).sum();
            assert_eq!(share, t.share);
            let y = parts.iter().map(Ticket::y).fold(0u32, u32::wrapping_add);
            assert_eq!(y, t.y());
            let mut at = t.offset;
            for p in &parts {
                assert!(p.share >= MIN_SPLIT_SHARE);
                assert_eq!(p.offset, at);
                at += p.len;
                let same = Ticket {
                    offset: t.offset,
                    len: t.len,
                    share: t.share,
                    ..*p
                };
                assert_eq!(same, t);
                assert_eq!(Ticket::from_bytes(&p.to_bytes()), Ok(*p));
            }
            assert_eq!(at, t.offset + t.len);
        }
        Err(SplitError::NoParts) => assert_eq!(n, 0),
        Err(SplitError::ShareTooSmall { .. }) => {
            assert!(n > 0 && t.share / (n as u64) < MIN_SPLIT_SHARE);
        }
        Err(e) => panic!("split({n}) of a valid ticket: {e}"),
    }
});
