//! The TCP fabric's authenticated links (`hamlyn_fabric::tcp::secure`,
//! `Noise_XXpsk0`) on arbitrary bytes: what a stranger can send to a listener before the
//! handshake (the first handshake message), what a dialer can be answered (the second),
//! what an acceptor that answered a real first message can be sent as the third, and
//! records of a real session cut anywhere, with one byte flipped or not. Never panic,
//! never loop; nothing opens that was not sealed, an altered record never opens, and no
//! handshake completes with a stranger.
#![no_main]

use hamlyn_fabric::tcp::secure::{Link, Opened, ReplayGuard, MAX_PLAIN};
use hamlyn_fabric::tcp::{ClusterSecret, NodeKey};
use libfuzzer_sys::fuzz_target;

/// Feeds `bytes` to `link` in chunks of `step` and opens after each; returns the
/// plaintext opened, or `None` once the link failed.
fn feed(link: &mut Link, bytes: &[u8], step: usize) -> Option<Vec<u8>> {
    feed_guarded(link, bytes, step, None)
}

/// [`feed`], an acceptor's first message checked against `guard`.
fn feed_guarded(
    link: &mut Link,
    bytes: &[u8],
    step: usize,
    mut guard: Option<&mut ReplayGuard>,
) -> Option<Vec<u8>> {
    let mut out = vec![0u8; MAX_PLAIN];
    let mut plain = Vec::new();
    for chunk in bytes.chunks(step.max(1)) {
        let mut rest = chunk;
        // Each push takes bytes or the buffer holds a whole message that open consumes.
        for _ in 0..=2 * chunk.len() + 4 {
            let n = link.push(rest);
            rest = &rest[n..];
            loop {
                match link.open_guarded(&mut out, guard.as_deref_mut()) {
                    Ok(Opened::NeedMore) => break,
                    Ok(Opened::Plain(k)) => {
                        assert!(k > 0 && k <= out.len());
                        plain.extend_from_slice(&out[..k]);
                    }
                    Ok(Opened::Secured) => assert!(link.is_secured()),
                    Ok(Opened::Reply) => assert!(!link.is_secured()),
                    Err(_) => return None,
                }
            }
            if rest.is_empty() {
                break;
            }
        }
    }
    Some(plain)
}

/// Runs a real handshake between `d` and `a` (the dialer's first message `first`).
fn handshake(d: &mut Link, a: &mut Link, first: &[u8]) {
    assert_eq!(feed(a, first, 7), Some(Vec::new()));
    assert!(!a.is_secured());
    assert_eq!(feed(d, &a.take_handshake_out(), 5), Some(Vec::new()));
    assert!(d.is_secured());
    assert_eq!(feed(a, &d.take_handshake_out(), 3), Some(Vec::new()));
    assert!(a.is_secured());
}

fuzz_target!(|data: &[u8]| {
    let [mode, step, rest @ ..] = data else {
        return;
    };
    let secret = ClusterSecret::from_bytes([0x5e; 32]);
    let (Ok(dk), Ok(ak)) = (
        NodeKey::from_private([0x11; 32]),
        NodeKey::from_private([0x22; 32]),
    ) else {
        return;
    };
    let step = usize::from(*step);
    match mode % 4 {
        // A stranger's bytes at a listener: without the secret nothing opens.
        0 => {
            let Ok(mut acceptor) = Link::acceptor(&secret, &ak) else {
                return;
            };
            let mut guard = ReplayGuard::new(4);
            if let Some(plain) = feed_guarded(&mut acceptor, rest, step, Some(&mut guard)) {
                assert!(plain.is_empty(), "a stranger's bytes opened");
                assert!(!acceptor.is_secured(), "a stranger's handshake completed");
            }
        }
        // What a dialer can be answered.
        1 => {
            let Ok((mut dialer, _first)) = Link::dialer(&secret, &dk) else {
                return;
            };
            if let Some(plain) = feed(&mut dialer, rest, step) {
                assert!(plain.is_empty(), "a stranger's answer opened");
                assert!(!dialer.is_secured(), "a stranger's answer completed");
            }
        }
        // A third message (and records) after a real first one: only the dialer that
        // sent the first could make it.
        3 => {
            let (Ok((_, first)), Ok(mut a)) =
                (Link::dialer(&secret, &dk), Link::acceptor(&secret, &ak))
            else {
                return;
            };
            assert_eq!(feed(&mut a, &first, 11), Some(Vec::new()));
            if let Some(plain) = feed(&mut a, rest, step) {
                assert!(plain.is_empty(), "a stranger's third message opened");
                assert!(!a.is_secured(), "a stranger's third message completed");
            }
        }
        // A real session's records, one byte flipped if the first two bytes say where.
        _ => {
            let [hi, lo, payload @ ..] = rest else {
                return;
            };
            let flip = usize::from(u16::from_le_bytes([*hi, *lo]));
            let (Ok((mut d, first)), Ok(mut a)) =
                (Link::dialer(&secret, &dk), Link::acceptor(&secret, &ak))
            else {
                return;
            };
            handshake(&mut d, &mut a, &first);
            let cut = payload.len() / 2;
            let Ok(r1) = d.seal_bytes(&payload[..cut]).map(<[u8]>::to_vec) else {
                return;
            };
            let Ok(r2) = d.seal_bytes(&payload[cut..]).map(<[u8]>::to_vec) else {
                return;
            };
            let mut wire = [r1, r2].concat();
            let flipped = flip < wire.len();
            if flipped {
                wire[flip] ^= 0x20;
            }
            match feed(&mut a, &wire, step) {
                Some(plain) => {
                    assert!(payload.starts_with(&plain), "opened bytes were sealed");
                    if !flipped {
                        assert_eq!(plain, payload, "everything opens");
                    } else {
                        // A flipped length prefix may leave the stream waiting for
                        // more; a flipped body never opens.
                        assert!(plain.len() < payload.len() || payload.is_empty());
                    }
                }
                None => assert!(flipped, "an unaltered stream fails"),
            }
        }
    }
});
