//! A node's identity on secure links: a static X25519 key pair, made by `snow`, whose
//! public half peers pin to the node's id ([`super::roster`], [`super::pins`]). The
//! private half is kept like the cluster secret: 64 hexadecimal digits in a file
//! readable by its owner only, created on first use ([`super::secret`]'s code).

use std::fmt;
use std::path::Path;

use snow::params::DHChoice;
use snow::resolvers::{CryptoResolver, DefaultResolver};

use super::secret::{
    load_or_create_private, parse_hex32, read_private_file, to_hex32, PrivateKind, SecretError,
};
use super::secure::NOISE_PARAMS;

/// Bytes of a public or private X25519 key.
pub const KEY_LEN: usize = 32;

/// A node's static public key, as peers see it in the handshake and pin it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicKey([u8; KEY_LEN]);

impl PublicKey {
    /// The key of these bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> PublicKey {
        PublicKey(bytes)
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// Parses 64 hexadecimal digits (surrounding white space ignored).
    pub fn parse(text: &str) -> Option<PublicKey> {
        parse_hex32(text).map(PublicKey)
    }

    /// The key as 64 lowercase hexadecimal digits.
    pub fn to_hex(&self) -> String {
        to_hex32(&self.0)
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_hex())
    }
}

/// A node's static key pair. Its `Debug` form shows only the public key.
#[derive(Clone)]
pub struct NodeKey {
    private: [u8; KEY_LEN],
    public: PublicKey,
}

fn dh_error(e: impl fmt::Display) -> SecretError {
    SecretError::Random(format!("X25519: {e}"))
}

impl NodeKey {
    /// A new random key pair (snow's `Builder::generate_keypair`).
    pub fn generate() -> Result<NodeKey, SecretError> {
        let params = NOISE_PARAMS.parse().map_err(dh_error)?;
        let pair = snow::Builder::new(params)
            .generate_keypair()
            .map_err(dh_error)?;
        let private: [u8; KEY_LEN] = pair
            .private
            .as_slice()
            .try_into()
            .map_err(|_| dh_error("private key length"))?;
        NodeKey::from_private(private)
    }

    /// The key pair of this private key (its public half computed by snow's X25519).
    pub fn from_private(private: [u8; KEY_LEN]) -> Result<NodeKey, SecretError> {
        let mut dh = DefaultResolver
            .resolve_dh(&DHChoice::Curve25519)
            .ok_or_else(|| dh_error("no X25519 implementation"))?;
        dh.set(&private);
        let public: [u8; KEY_LEN] = dh
            .pubkey()
            .try_into()
            .map_err(|_| dh_error("public key length"))?;
        Ok(NodeKey {
            private,
            public: PublicKey(public),
        })
    }

    /// The public half: what peers pin.
    pub fn public(&self) -> PublicKey {
        self.public
    }

    /// The private half (the handshake's static key).
    pub(crate) fn private(&self) -> &[u8; KEY_LEN] {
        &self.private
    }

    /// Parses a private key written as 64 hexadecimal digits.
    pub fn parse(text: &str) -> Result<NodeKey, SecretError> {
        NodeKey::from_private(parse_hex32(text).ok_or(SecretError::KeyFormat)?)
    }

    /// The private key as 64 lowercase hexadecimal digits (what a key file holds).
    pub fn to_hex(&self) -> String {
        to_hex32(&self.private)
    }

    /// Reads the private key in `path`, refusing a file others may read or write.
    pub fn read_file(path: &Path) -> Result<NodeKey, SecretError> {
        NodeKey::from_private(read_private_file(path, PrivateKind::NodeKey)?)
    }

    /// Reads the private key in `path`, or, if there is no such file, makes a new one
    /// there (mode 0600, as the cluster secret's file). Returns the key and whether it
    /// was created.
    pub fn load_or_create(path: &Path) -> Result<(NodeKey, bool), SecretError> {
        let (private, created) = load_or_create_private(path, PrivateKind::NodeKey, &|| {
            NodeKey::generate().map(|k| k.private)
        })?;
        Ok((NodeKey::from_private(private)?, created))
    }
}

impl fmt::Debug for NodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeKey(public {})", self.public)
    }
}

impl PartialEq for NodeKey {
    /// Compares the public halves (the private half determines it).
    fn eq(&self, other: &NodeKey) -> bool {
        self.public == other.public
    }
}

impl Eq for NodeKey {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_key_round_trips_and_its_file_is_private() {
        let k = NodeKey::generate().unwrap();
        assert_ne!(k, NodeKey::generate().unwrap());
        let again = NodeKey::parse(&k.to_hex()).unwrap();
        assert_eq!(again.public(), k.public());
        assert_eq!(PublicKey::parse(&k.public().to_hex()), Some(k.public()));
        assert!(!format!("{k:?}").contains(&k.to_hex()), "Debug hides it");
        assert!(matches!(NodeKey::parse("xyz"), Err(SecretError::KeyFormat)));
        // RFC 7748 §6.1: Alice's private key and its public key.
        let alice =
            NodeKey::parse("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
                .unwrap();
        assert_eq!(
            alice.public().to_hex(),
            "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"
        );
        let dir = std::env::temp_dir().join(format!("hamlyn-node-key-{}", std::process::id()));
        let path = dir.join("node-key-3");
        let (a, created) = NodeKey::load_or_create(&path).unwrap();
        assert!(created);
        let (b, created) = NodeKey::load_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(a, b);
        std::fs::write(&path, "not a key").unwrap();
        assert!(matches!(
            NodeKey::read_file(&path),
            Err(SecretError::KeyFormat)
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
