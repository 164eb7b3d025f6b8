//! Crockford base32 (lower case, no padding): the text form of seeds.
//!
//! Its alphabet has no characters a shell, an environment variable or a file treats
//! specially, and decoding forgives the usual misreadings (`i`/`l` → 1, `o` → 0, any
//! case). Hyphens may be inserted anywhere for readability and are ignored.

use crate::error::WireError;

const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// Encodes bytes as lower-case Crockford base32.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 8 / 5 + 1);
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    for &b in bytes {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((acc >> bits) & 31) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((acc << (5 - bits)) & 31) as usize] as char);
    }
    out
}

fn value(ch: char) -> Option<u32> {
    let c = ch.to_ascii_lowercase();
    Some(match c {
        '0' | 'o' => 0,
        '1' | 'i' | 'l' => 1,
        '2'..='9' => c as u32 - '0' as u32,
        'a'..='h' => c as u32 - 'a' as u32 + 10,
        'j' => 18,
        'k' => 19,
        'm' => 20,
        'n' => 21,
        'p'..='t' => c as u32 - 'p' as u32 + 22,
        'v'..='z' => c as u32 - 'v' as u32 + 27,
        _ => return None,
    })
}

/// Decodes Crockford base32; `offset` is added to reported character positions.
pub fn decode(text: &str, offset: usize) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(text.len() * 5 / 8);
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    for (i, ch) in text.chars().enumerate() {
        if ch == '-' {
            continue;
        }
        let v = value(ch).ok_or(WireError::BadSeedChar {
            ch,
            pos: offset + i,
        })?;
        acc = (acc << 5) | v;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
        acc &= (1 << bits) - 1;
    }
    // The unused low bits of the last character must be zero: otherwise a typo there
    // would decode to the same bytes and slip past the checksum.
    if acc != 0 || bits >= 5 {
        return Err(WireError::BadChecksum);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            prop_assert_eq!(decode(&encode(&bytes), 0).unwrap(), bytes);
        }
    }

    #[test]
    fn forgives_misreadings_and_rejects_strangers() {
        let s = encode(&[0x08, 0x42, 0x10]);
        let upper = s.to_uppercase();
        assert_eq!(decode(&upper, 0).unwrap(), vec![0x08, 0x42, 0x10]);
        assert_eq!(decode("lO", 0).unwrap(), decode("10", 0).unwrap());
        assert_eq!(decode("I0", 0).unwrap(), vec![0x08]);
        assert_eq!(
            decode("11", 0),
            Err(WireError::BadChecksum),
            "non-zero padding bits"
        );
        assert_eq!(
            decode("ab u", 5),
            Err(WireError::BadSeedChar { ch: ' ', pos: 7 })
        );
        assert_eq!(
            decode("u", 0),
            Err(WireError::BadSeedChar { ch: 'u', pos: 0 })
        );
    }
}
