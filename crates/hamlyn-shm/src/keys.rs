//! Random 64-bit keys, for the engine (slot keys) and the library (paranoid entries)
//! alike: sparse capabilities from the kernel's generator, never 0 (a zeroed entry never
//! matches a key). The generator can fail (an old kernel, a seccomp filter, no
//! `/dev/urandom`); then this says so instead of looping.

use std::io::Read;

/// No random bytes could be had.
#[derive(Debug, thiserror::Error)]
#[error("no random bytes for a key: getrandom failed and {0}")]
pub struct KeyError(#[source] pub std::io::Error);

/// Draws of an all-zero word before giving up (each has probability 2^-64).
const TRIES: usize = 4;

/// A fresh random key, never 0.
pub fn random_key() -> Result<u64, KeyError> {
    for _ in 0..TRIES {
        let mut b = [0u8; 8];
        fill(&mut b)?;
        let k = u64::from_le_bytes(b);
        if k != 0 {
            return Ok(k);
        }
    }
    Err(KeyError(std::io::Error::other(
        "the generator returned only zeros",
    )))
}

fn fill(b: &mut [u8; 8]) -> Result<(), KeyError> {
    // A short read or an error (old kernel, seccomp filter) falls back to the device.
    if let Ok(8) = rustix::rand::getrandom(&mut b[..], rustix::rand::GetRandomFlags::empty()) {
        return Ok(());
    }
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(b))
        .map_err(KeyError)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn keys_are_nonzero_and_differ() {
        let a = random_key().expect("randomness");
        let b = random_key().expect("randomness");
        assert_ne!(a, 0);
        assert_ne!(a, b, "two 64-bit random keys collided");
    }
}
