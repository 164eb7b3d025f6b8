//! Random keys for paranoid metadata entries: sparse 64-bit capabilities, never 0.

use std::io::Read;

use crate::error::Error;

/// A fresh random key from the kernel's generator (`getrandom`, falling back to
/// `/dev/urandom`); never 0, so a zeroed entry never matches a key.
pub(crate) fn random_key() -> Result<u64, Error> {
    loop {
        let mut b = [0u8; 8];
        fill(&mut b)?;
        let k = u64::from_le_bytes(b);
        if k != 0 {
            return Ok(k);
        }
    }
}

fn fill(b: &mut [u8; 8]) -> Result<(), Error> {
    // A short read or an error (old kernel, seccomp filter) falls back to the device.
    if let Ok(8) = rustix::rand::getrandom(&mut b[..], rustix::rand::GetRandomFlags::empty()) {
        return Ok(());
    }
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(b))
        .map_err(|source| Error::Io {
            op: "reading /dev/urandom",
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_nonzero_and_differ() {
        let a = random_key().unwrap();
        let b = random_key().unwrap();
        assert_ne!(a, 0);
        assert_ne!(a, b, "two 64-bit random keys collided");
    }
}
