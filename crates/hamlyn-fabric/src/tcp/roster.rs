//! A roster: which static public key each node id of a cluster has, so a node refuses a
//! link from anyone else, whatever secret it holds (`hamlyn node --roster FILE`).
//!
//! The file is text, one node per line: the node id, white space, its public key as 64
//! hexadecimal digits (what `hamlyn key show` prints); `#` starts a comment, blank lines
//! are ignored. A line that is not that, a node listed twice, or a file over
//! [`MAX_ROSTER_BYTES`] is an error naming its line.

use std::collections::BTreeMap;
use std::path::Path;

use hamlyn_wire::NodeId;

use super::node_key::PublicKey;

/// Largest roster file read (about 20,000 nodes).
pub const MAX_ROSTER_BYTES: u64 = 2 << 20;

/// Why a roster could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RosterError {
    /// A line is not `NODE_ID PUBLIC_KEY`.
    #[error("roster line {line}: {reason}")]
    Line {
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A node id is listed twice.
    #[error("roster line {line}: node {node} is listed twice")]
    Duplicate {
        /// The second line's number, from 1.
        line: usize,
        /// The node.
        node: NodeId,
    },
    /// The roster is larger than [`MAX_ROSTER_BYTES`].
    #[error("roster larger than {MAX_ROSTER_BYTES} bytes")]
    TooLarge,
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The system's reason.
        source: std::io::Error,
    },
}

/// Node ids and the public key each must present.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Roster {
    keys: BTreeMap<NodeId, PublicKey>,
}

impl Roster {
    /// A roster of these nodes (a later entry for the same node wins).
    pub fn from_keys(keys: impl IntoIterator<Item = (NodeId, PublicKey)>) -> Roster {
        Roster {
            keys: keys.into_iter().collect(),
        }
    }

    /// Parses a roster's text.
    pub fn parse(text: &str) -> Result<Roster, RosterError> {
        if text.len() as u64 > MAX_ROSTER_BYTES {
            return Err(RosterError::TooLarge);
        }
        let mut keys = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let bad = |reason: &str| RosterError::Line {
                line,
                reason: reason.into(),
            };
            let mut words = content.split_whitespace();
            let (Some(id), Some(key), None) = (words.next(), words.next(), words.next()) else {
                return Err(bad("expected a node id and a public key"));
            };
            let node = NodeId(
                id.parse::<u32>()
                    .map_err(|_| bad("the node id is not a number of 32 bits"))?,
            );
            let key = PublicKey::parse(key)
                .ok_or_else(|| bad("the public key is not 64 hexadecimal digits"))?;
            if keys.insert(node, key).is_some() {
                return Err(RosterError::Duplicate { line, node });
            }
        }
        Ok(Roster { keys })
    }

    /// Reads and parses the roster in `path`.
    pub fn read_file(path: &Path) -> Result<Roster, RosterError> {
        let io = |source| RosterError::Io {
            path: path.display().to_string(),
            source,
        };
        if std::fs::metadata(path).map_err(io)?.len() > MAX_ROSTER_BYTES {
            return Err(RosterError::TooLarge);
        }
        Roster::parse(&std::fs::read_to_string(path).map_err(io)?)
    }

    /// The key `node` must present (`None`: it is not in the roster).
    pub fn get(&self, node: NodeId) -> Option<PublicKey> {
        self.keys.get(&node).copied()
    }

    /// Nodes listed.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no node is listed.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The roster as text [`Roster::parse`] reads back.
    pub fn to_text(&self) -> String {
        self.keys
            .iter()
            .map(|(n, k)| format!("{} {k}\n", n.0))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(b: u8) -> PublicKey {
        PublicKey::from_bytes([b; 32])
    }

    #[test]
    fn parses_comments_blanks_and_round_trips() {
        let text = format!(
            "# the cluster\n\n1 {}   # node one\n  7\t{}\n",
            key(1).to_hex(),
            key(7).to_hex().to_uppercase()
        );
        let r = Roster::parse(&text).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r.get(NodeId(1)), Some(key(1)));
        assert_eq!(r.get(NodeId(7)), Some(key(7)));
        assert_eq!(r.get(NodeId(2)), None);
        assert_eq!(Roster::parse(&r.to_text()).unwrap(), r);
        assert!(Roster::parse("").unwrap().is_empty());
    }

    #[test]
    fn bad_rosters_name_their_line() {
        let k = key(3).to_hex();
        let cases = [
            (format!("1 {k}\n2\n"), 2, "a node id and a public key"),
            (format!("x {k}\n"), 1, "not a number"),
            (format!("4294967296 {k}\n"), 1, "not a number"),
            ("1 abcd\n".to_string(), 1, "64 hexadecimal"),
            (format!("1 {k} extra\n"), 1, "a node id and a public key"),
        ];
        for (text, line, what) in cases {
            let e = Roster::parse(&text).unwrap_err();
            let msg = e.to_string();
            assert!(
                matches!(e, RosterError::Line { line: l, .. } if l == line),
                "{msg}"
            );
            assert!(msg.contains(what), "{msg}");
        }
        let e = Roster::parse(&format!("1 {k}\n\n1 {k}\n")).unwrap_err();
        assert!(matches!(
            e,
            RosterError::Duplicate {
                line: 3,
                node: NodeId(1)
            }
        ));
        let big = "#".repeat(MAX_ROSTER_BYTES as usize + 1);
        assert!(matches!(Roster::parse(&big), Err(RosterError::TooLarge)));
        let missing = Roster::read_file(Path::new("/nonexistent/hamlyn-roster")).unwrap_err();
        assert!(missing.to_string().contains("/nonexistent/hamlyn-roster"));
    }
}
