//! Talking to an engine over its control socket without attaching: counters, the name
//! registry and pings are answered on any connection.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hamlyn_shm::fdpass::{recv_with_fds, send_with_fds, FdPassError};
use hamlyn_wire::control::{Reply, Request, MAX_CONTROL_MSG};
use hamlyn_wire::stats::{fetch, FetchError, Stats};
use hamlyn_wire::WireError;

/// Why the counters could not be fetched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// Nothing answers at the socket path.
    #[error("no engine at {path}: {source} (is `hamlyn node` running? see --socket)")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Sending or receiving failed (including a timeout).
    #[error("control socket {path}: {source}")]
    Transfer {
        /// The socket path.
        path: PathBuf,
        /// The failure.
        source: FdPassError,
    },
    /// The reply did not decode.
    #[error("undecodable reply from the engine: {0}")]
    BadReply(#[from] WireError),
    /// The engine refused.
    #[error("the engine refused (code {code}): {message}")]
    Refused {
        /// Its code.
        code: u16,
        /// Its explanation.
        message: String,
    },
    /// The engine answered something else, or sent descriptors.
    #[error("the engine answered something unexpected")]
    Unexpected,
}

/// A control connection that never attaches: for stats, registry and ping requests.
#[derive(Debug)]
pub struct Control {
    path: PathBuf,
    sock: std::os::fd::OwnedFd,
    buf: Vec<u8>,
}

impl Control {
    /// Connects to the engine's control socket at `path`; replies are awaited at most
    /// `timeout`.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Control, ControlError> {
        let connect_err = |e: rustix::io::Errno| ControlError::Connect {
            path: path.to_path_buf(),
            source: e.into(),
        };
        let sock = hamlyn_shm::fdpass::seqpacket_connect(path).map_err(|e| match e {
            FdPassError::Sys { source, .. } => connect_err(source),
            other => ControlError::Connect {
                path: path.to_path_buf(),
                source: std::io::Error::other(other.to_string()),
            },
        })?;
        rustix::net::sockopt::set_socket_timeout(
            &sock,
            rustix::net::sockopt::Timeout::Recv,
            Some(timeout),
        )
        .map_err(connect_err)?;
        Ok(Control {
            path: path.to_path_buf(),
            sock,
            buf: vec![0u8; MAX_CONTROL_MSG],
        })
    }

    /// Sends one request and returns the engine's reply (an error reply becomes
    /// [`ControlError::Refused`]).
    pub fn call(&mut self, req: &Request) -> Result<Reply, ControlError> {
        let transfer = |source| ControlError::Transfer {
            path: self.path.clone(),
            source,
        };
        send_with_fds(&self.sock, &req.encode(), &[]).map_err(transfer)?;
        let got = recv_with_fds(&self.sock, &mut self.buf).map_err(transfer)?;
        if !got.fds.is_empty() {
            return Err(ControlError::Unexpected);
        }
        let bytes = self.buf.get(..got.len).ok_or(ControlError::Unexpected)?;
        match Reply::decode(bytes)? {
            Reply::Error { code, message } => Err(ControlError::Refused { code, message }),
            other => Ok(other),
        }
    }
}

/// The engine's statistics, fetched page by page from the control socket at `path`. Waits
/// at most `timeout` for each reply.
pub fn fetch_stats(path: &Path, timeout: Duration) -> Result<Stats, ControlError> {
    let mut control = Control::connect(path, timeout)?;
    fetch(|req| control.call(req)).map_err(|e| match e {
        FetchError::Ask(e) => e,
        FetchError::Refused { code, message } => ControlError::Refused { code, message },
        _ => ControlError::Unexpected,
    })
}
