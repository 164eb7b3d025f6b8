//! Random keys for paranoid metadata entries: the generator the engine uses too
//! (`hamlyn_shm::keys`).

use crate::error::Error;

/// A fresh random key, never 0.
pub(crate) fn random_key() -> Result<u64, Error> {
    hamlyn_shm::keys::random_key().map_err(|e| Error::Io {
        op: "drawing a random key",
        source: e.0,
    })
}
