//! A node's static key, which its secure links prove and its peers bind to its node id
//! (the TCP fabric's `node_key`, `roster` and `pins`): where `hamlyn node` keeps it, and
//! `hamlyn key` to make one, show one's public half (a roster line) or where it lives.
//!
//! `hamlyn node --listen` uses `--node-key PATH`, else the per-user file
//! [`default_path`] for its node id, next to the cluster secret's; either is created on
//! first use readable by its owner only, and kept across restarts: peers pin a node's
//! key on first contact and refuse the node under another one.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use hamlyn_fabric::tcp::NodeKey;

/// `hamlyn key` arguments.
#[derive(Debug, Args)]
pub struct KeyArgs {
    #[command(subcommand)]
    what: KeyCommand,
}

/// Which node's key file: `--node-key`, else this user's file for `--node-id`.
#[derive(Clone, Debug, Args)]
struct Which {
    /// The node whose per-user key file is meant.
    #[arg(long, value_name = "N")]
    node_id: Option<u32>,
    /// The key file (instead of the per-user one).
    #[arg(long, value_name = "PATH")]
    node_key: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum KeyCommand {
    /// Print a new random private key (64 hexadecimal digits), for a `--node-key` file
    /// (mode 0600).
    Generate,
    /// Print a node's public key as a roster line (`ID KEY`, or the key alone for a
    /// `--node-key` file without `--node-id`); the key file is created if missing, as
    /// `hamlyn node` would.
    Show(Which),
    /// Print the path of a node's per-user key file.
    Path {
        /// The node.
        #[arg(long, value_name = "N")]
        node_id: u32,
    },
}

/// The per-user key file of node `node`: `node-key-N` next to the per-user cluster
/// secret (`$XDG_CONFIG_HOME/hamlyn/`, else `$HOME/.config/hamlyn/`).
pub fn default_path(node: u32) -> Result<PathBuf, String> {
    let secret = super::secret::default_path()?;
    let dir = secret.parent().unwrap_or(Path::new("."));
    Ok(dir.join(format!("node-key-{node}")))
}

/// Node `node`'s key: from `file` if given, else from its per-user file; either is
/// created (mode 0600) if missing.
pub fn load(node: u32, file: Option<&Path>) -> Result<NodeKey, String> {
    let path = match file {
        Some(p) => p.to_path_buf(),
        None => default_path(node)?,
    };
    let (key, created) = NodeKey::load_or_create(&path).map_err(|e| format!("node key: {e}"))?;
    if created {
        tracing::info!(path = %path.display(), public = %key.public(), "created this node's key (peers pin it: keep it)");
    }
    Ok(key)
}

/// Runs `hamlyn key`.
pub fn run(args: KeyArgs) -> Result<(), String> {
    match args.what {
        KeyCommand::Generate => {
            let k = NodeKey::generate().map_err(|e| e.to_string())?;
            println!("{}", k.to_hex());
        }
        KeyCommand::Show(Which { node_id, node_key }) => {
            let key = match (node_id, node_key.as_deref()) {
                (None, None) => return Err("name the node: --node-id N or --node-key PATH".into()),
                (Some(n), file) => load(n, file)?,
                (None, Some(file)) => load(0, Some(file))?,
            };
            match node_id {
                Some(n) => println!("{n} {}", key.public()),
                None => println!("{}", key.public()),
            }
        }
        KeyCommand::Path { node_id } => println!("{}", default_path(node_id)?.display()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_is_made_once_and_kept() {
        let dir = std::env::temp_dir().join(format!("hamlyn-cli-key-{}", std::process::id()));
        let path = dir.join("n1.key");
        let a = load(1, Some(&path)).unwrap();
        let b = load(1, Some(&path)).unwrap();
        assert_eq!(a.public(), b.public());
        std::fs::write(&path, "nonsense").unwrap();
        assert!(load(1, Some(&path)).unwrap_err().contains("node key"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
