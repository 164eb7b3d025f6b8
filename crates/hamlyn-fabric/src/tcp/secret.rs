//! The cluster secret: 32 random bytes every member of a cluster shares, from which the
//! TCP fabric's links are authenticated ([`super::secure`]). Written as 64 hex digits,
//! in a file readable only by its owner (as Erlang's cookie) or an environment variable.
//! A node's private key ([`super::node_key`]) is kept in such a file too, by the same code.

use std::fmt;
use std::io::Write;
use std::path::Path;

/// Bytes of a cluster secret.
pub const SECRET_LEN: usize = 32;

/// A cluster's shared secret (the Noise pre-shared key). Its `Debug` form never shows
/// the bytes.
#[derive(Clone)]
pub struct ClusterSecret([u8; SECRET_LEN]);

/// Why a cluster secret could not be read, parsed, made or stored.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The text is not 64 hexadecimal digits.
    #[error("a cluster secret is 64 hexadecimal digits (hamlyn secret generate makes one)")]
    Format,
    /// The text is not a node key: 64 hexadecimal digits.
    #[error("a node key is 64 hexadecimal digits (hamlyn key generate makes one)")]
    KeyFormat,
    /// The system gave no random bytes.
    #[error("no random bytes for a secret: {0}")]
    Random(String),
    /// A secret file could not be read, created or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The system's reason.
        source: std::io::Error,
    },
    /// A secret file can be read or written by users other than its owner.
    #[error("{path}: readable by others (mode {mode:o}); chmod 600 it")]
    Permissions {
        /// The file.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
}

impl ClusterSecret {
    /// A secret of these bytes.
    pub fn from_bytes(bytes: [u8; SECRET_LEN]) -> ClusterSecret {
        ClusterSecret(bytes)
    }

    /// The secret's bytes (the pre-shared key).
    pub fn as_bytes(&self) -> &[u8; SECRET_LEN] {
        &self.0
    }

    /// A new random secret.
    pub fn generate() -> Result<ClusterSecret, SecretError> {
        let mut b = [0u8; SECRET_LEN];
        for chunk in b.chunks_mut(8) {
            let k =
                hamlyn_shm::keys::random_key().map_err(|e| SecretError::Random(e.to_string()))?;
            chunk.copy_from_slice(&k.to_le_bytes());
        }
        Ok(ClusterSecret(b))
    }

    /// Parses 64 hexadecimal digits (surrounding white space ignored).
    pub fn parse(text: &str) -> Result<ClusterSecret, SecretError> {
        parse_hex32(text)
            .map(ClusterSecret)
            .ok_or(SecretError::Format)
    }

    /// The secret as 64 lowercase hexadecimal digits.
    pub fn to_hex(&self) -> String {
        to_hex32(&self.0)
    }

    /// Reads the secret in `path`, refusing a file others may read or write.
    pub fn read_file(path: &Path) -> Result<ClusterSecret, SecretError> {
        read_private_file(path, PrivateKind::Secret).map(ClusterSecret)
    }

    /// Reads the secret in `path`, or, if there is no such file, makes a new one there
    /// (mode 0600, its directory 0700 if it has to be created). Returns the secret and
    /// whether it was created. Two processes racing to create it agree: the file is
    /// created exclusively, and the loser reads the winner's.
    pub fn load_or_create(path: &Path) -> Result<(ClusterSecret, bool), SecretError> {
        load_or_create_private(path, PrivateKind::Secret, &|| {
            ClusterSecret::generate().map(|s| s.0)
        })
        .map(|(b, created)| (ClusterSecret(b), created))
    }
}

/// What a private file holds (for its error messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PrivateKind {
    /// A cluster secret.
    Secret,
    /// A node's static private key ([`super::node_key::NodeKey`]).
    NodeKey,
}

impl PrivateKind {
    fn format_error(self) -> SecretError {
        match self {
            PrivateKind::Secret => SecretError::Format,
            PrivateKind::NodeKey => SecretError::KeyFormat,
        }
    }
}

/// 64 hexadecimal digits (surrounding white space ignored) as 32 bytes.
pub(crate) fn parse_hex32(text: &str) -> Option<[u8; SECRET_LEN]> {
    let t = text.trim().as_bytes();
    if t.len() != 2 * SECRET_LEN {
        return None;
    }
    let mut b = [0u8; SECRET_LEN];
    for (i, pair) in t.chunks_exact(2).enumerate() {
        b[i] = hex_digit(pair[0])? << 4 | hex_digit(pair[1])?;
    }
    Some(b)
}

/// 32 bytes as 64 lowercase hexadecimal digits.
pub(crate) fn to_hex32(bytes: &[u8; SECRET_LEN]) -> String {
    use fmt::Write as _;
    let mut s = String::with_capacity(2 * SECRET_LEN);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Reads 32 bytes written as 64 hexadecimal digits in `path`, refusing a file others may
/// read or write (a cluster secret, a node's private key).
pub(crate) fn read_private_file(
    path: &Path,
    kind: PrivateKind,
) -> Result<[u8; SECRET_LEN], SecretError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |source| SecretError::Io {
        path: path.display().to_string(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.len() > 4096 {
        return Err(kind.format_error());
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(SecretError::Permissions {
            path: path.display().to_string(),
            mode,
        });
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
    parse_hex32(&text).ok_or_else(|| kind.format_error())
}

/// Reads the private bytes in `path` ([`read_private_file`]), or, if there is no such
/// file, writes `make()`'s there (mode 0600, its directory 0700 if it has to be
/// created). Returns them and whether the file was created. Two processes racing to
/// create it agree: the file is written whole to a private temporary file and linked
/// into place only if nothing is there, and the loser reads the winner's.
pub(crate) fn load_or_create_private(
    path: &Path,
    kind: PrivateKind,
    make: &dyn Fn() -> Result<[u8; SECRET_LEN], SecretError>,
) -> Result<([u8; SECRET_LEN], bool), SecretError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let io = |source| SecretError::Io {
        path: path.display().to_string(),
        source,
    };
    match read_private_file(path, kind) {
        Err(SecretError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
        other => return other.map(|s| (s, false)),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
    }
    let bytes = make()?;
    // Written whole into a private temporary file, then linked into place only if
    // nothing is there: a reader never sees half a file.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    let written = f
        .write_all(format!("{}\n", to_hex32(&bytes)).as_bytes())
        .and_then(|()| f.sync_all());
    drop(f);
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok((bytes, true)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read_private_file(path, kind).map(|s| (s, false))
        }
        Err(e) => Err(io(e)),
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

impl PartialEq for ClusterSecret {
    /// Compares every byte (no early exit), so a comparison tells no prefix.
    fn eq(&self, other: &ClusterSecret) -> bool {
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl Eq for ClusterSecret {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn hex_round_trip_and_refusals() {
        let s = ClusterSecret::generate().unwrap();
        assert_eq!(ClusterSecret::parse(&s.to_hex()).unwrap(), s);
        assert_eq!(
            ClusterSecret::parse(&format!("  {}\n", s.to_hex().to_uppercase())).unwrap(),
            s
        );
        assert!(ClusterSecret::parse("abc").is_err());
        assert!(ClusterSecret::parse(&"g".repeat(64)).is_err());
        assert_ne!(ClusterSecret::generate().unwrap(), s);
        assert_eq!(format!("{s:?}"), "ClusterSecret(..)");
    }

    #[test]
    fn file_is_created_private_and_read_back() {
        let dir = std::env::temp_dir().join(format!("hamlyn-secret-{}", std::process::id()));
        let path = dir.join("sub").join("cluster-secret");
        let (a, created) = ClusterSecret::load_or_create(&path).unwrap();
        assert!(created);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (b, created) = ClusterSecret::load_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(a, b);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            ClusterSecret::read_file(&path),
            Err(SecretError::Permissions { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
