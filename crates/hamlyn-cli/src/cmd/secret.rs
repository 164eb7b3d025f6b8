//! The cluster secret: where `hamlyn node` finds it, and `hamlyn secret` to make one or
//! show where the per-user one lives.
//!
//! A node with `--listen` authenticates every link with the cluster secret (the TCP
//! fabric's `secure` module). It comes from, in this order: `--danger-insecure` (no
//! secret, links in clear), `--secret-file PATH`, `$HAMLYN_SECRET` (64 hexadecimal
//! digits), else the per-user file [`default_path`], created on first use readable by
//! its owner only (as Erlang's cookie), so nodes of one user on one machine share it with
//! no step at all. Between machines, copy that file (or set `HAMLYN_SECRET`) on each.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use hamlyn_fabric::tcp::ClusterSecret;

/// The environment variable holding a cluster secret.
pub const SECRET_ENV: &str = "HAMLYN_SECRET";

/// `hamlyn secret` arguments.
#[derive(Debug, Args)]
pub struct SecretArgs {
    #[command(subcommand)]
    what: SecretCommand,
}

#[derive(Debug, Subcommand)]
enum SecretCommand {
    /// Print a new random cluster secret (64 hexadecimal digits), for `--secret-file`
    /// or `HAMLYN_SECRET` on every machine of a cluster.
    Generate,
    /// Print the path of the per-user secret file `hamlyn node` uses by default.
    Path,
}

/// The per-user secret file: `$XDG_CONFIG_HOME/hamlyn/cluster-secret`, else
/// `$HOME/.config/hamlyn/cluster-secret`.
pub fn default_path() -> Result<PathBuf, String> {
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let base = match xdg {
        Some(p) => p,
        None => std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .map(|h| h.join(".config"))
            .ok_or("no HOME or XDG_CONFIG_HOME for the cluster secret: pass --secret-file")?,
    };
    Ok(base.join("hamlyn").join("cluster-secret"))
}

/// Where a node's secret comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSource {
    /// `--danger-insecure`: none.
    Insecure,
    /// `--secret-file`: this file, which must exist.
    File(PathBuf),
    /// `$HAMLYN_SECRET`.
    Env(String),
    /// The per-user file, created if missing.
    Default(PathBuf),
}

impl SecretSource {
    /// The source the flags and the environment (`env`: the value of `HAMLYN_SECRET`)
    /// name.
    pub fn choose(
        insecure: bool,
        file: Option<&Path>,
        env: Option<String>,
    ) -> Result<SecretSource, String> {
        Ok(match (insecure, file, env) {
            (true, Some(_), _) => {
                return Err("--danger-insecure and --secret-file: choose one".into())
            }
            (true, None, _) => SecretSource::Insecure,
            (false, Some(f), _) => SecretSource::File(f.to_path_buf()),
            (false, None, Some(v)) => SecretSource::Env(v),
            (false, None, None) => SecretSource::Default(default_path()?),
        })
    }

    /// The secret (`None` for [`SecretSource::Insecure`]).
    pub fn load(&self) -> Result<Option<ClusterSecret>, String> {
        match self {
            SecretSource::Insecure => Ok(None),
            SecretSource::File(p) => ClusterSecret::read_file(p)
                .map(Some)
                .map_err(|e| format!("--secret-file: {e}")),
            SecretSource::Env(v) => ClusterSecret::parse(v)
                .map(Some)
                .map_err(|e| format!("${SECRET_ENV}: {e}")),
            SecretSource::Default(p) => {
                let (s, created) =
                    ClusterSecret::load_or_create(p).map_err(|e| format!("cluster secret: {e}"))?;
                if created {
                    tracing::info!(path = %p.display(), "created this user's cluster secret (copy it to other machines of the cluster)");
                }
                Ok(Some(s))
            }
        }
    }
}

/// Runs `hamlyn secret`.
pub fn run(args: SecretArgs) -> Result<(), String> {
    match args.what {
        SecretCommand::Generate => {
            let s = ClusterSecret::generate().map_err(|e| e.to_string())?;
            println!("{}", s.to_hex());
        }
        SecretCommand::Path => println!("{}", default_path()?.display()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_in_order() {
        let f = Path::new("/x/secret");
        assert_eq!(
            SecretSource::choose(true, None, Some("e".into())),
            Ok(SecretSource::Insecure)
        );
        assert!(SecretSource::choose(true, Some(f), None).is_err());
        assert_eq!(
            SecretSource::choose(false, Some(f), Some("e".into())),
            Ok(SecretSource::File(f.to_path_buf()))
        );
        assert_eq!(
            SecretSource::choose(false, None, Some("e".into())),
            Ok(SecretSource::Env("e".into()))
        );
        assert!(SecretSource::Env("not hex".into())
            .load()
            .unwrap_err()
            .contains("HAMLYN_SECRET"));
        assert_eq!(SecretSource::Insecure.load(), Ok(None));
    }
}
