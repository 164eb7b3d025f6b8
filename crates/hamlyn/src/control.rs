//! The control connection: one `SOCK_SEQPACKET` request, one reply, file descriptors
//! beside the bytes (`hamlyn_wire::control`).
//!
//! Slow path only (attach, areas, slots, termini, stats). Every reply is decoded and
//! checked against the request it answers; a receive timeout guards against an engine
//! that stops answering, after which the connection is marked broken rather than risk
//! pairing a late reply with the next request.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use hamlyn_shm::fdpass::{recv_with_fds, send_with_fds, FdPassError};
use hamlyn_wire::control::{ControlErrorCode, Reply, Request, MAX_CONTROL_MSG};
use rustix::io::Errno;

use crate::error::Error;

/// A connected control socket.
pub(crate) struct Control {
    sock: OwnedFd,
    buf: Vec<u8>,
    broken: bool,
}

impl std::fmt::Debug for Control {
    /// A summary: not the 64 KiB receive buffer.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("sock", &self.sock)
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

impl Control {
    /// Connects to the engine's socket at `path`; replies slower than `timeout` break the
    /// connection.
    pub(crate) fn connect(path: &Path, timeout: Duration) -> Result<Control, Error> {
        let sock = hamlyn_shm::fdpass::seqpacket_connect(path).map_err(|e| Error::Connect {
            path: path.display().to_string(),
            source: match e {
                hamlyn_shm::fdpass::FdPassError::Sys { source, .. } => source.into(),
                other => std::io::Error::other(other.to_string()),
            },
        })?;
        Control::from_socket(sock, timeout)
    }

    /// Wraps an already connected socket (tests use a socket pair).
    pub(crate) fn from_socket(sock: OwnedFd, timeout: Duration) -> Result<Control, Error> {
        if !timeout.is_zero() {
            rustix::net::sockopt::set_socket_timeout(
                &sock,
                rustix::net::sockopt::Timeout::Recv,
                Some(timeout),
            )
            .map_err(|e| Error::Io {
                op: "setsockopt(SO_RCVTIMEO)",
                source: e.into(),
            })?;
        }
        Ok(Control {
            sock,
            buf: vec![0u8; MAX_CONTROL_MSG],
            broken: false,
        })
    }

    /// Sends `req` with `fds` and returns the reply with the descriptors that came with it.
    /// An [`Reply::Error`] becomes [`Error::Refused`].
    pub(crate) fn call(
        &mut self,
        req: &Request,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(Reply, Vec<OwnedFd>), Error> {
        if self.broken {
            return Err(Error::Disconnected);
        }
        let r = self.exchange(req, fds);
        if matches!(
            r,
            Err(Error::Control(_) | Error::ControlTimeout | Error::BadReply(_))
        ) {
            self.broken = true;
        }
        let (reply, got) = r?;
        match reply {
            Reply::Error { code, message } => Err(Error::Refused {
                code: ControlErrorCode::from_u16(code),
                raw: code,
                message,
            }),
            other => Ok((other, got)),
        }
    }

    fn exchange(
        &mut self,
        req: &Request,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(Reply, Vec<OwnedFd>), Error> {
        send_with_fds(&self.sock, &req.encode(), fds)?;
        let got = match recv_with_fds(&self.sock, &mut self.buf) {
            Ok(got) => got,
            Err(FdPassError::Sys {
                source: Errno::AGAIN,
                ..
            }) => return Err(Error::ControlTimeout),
            Err(e) => return Err(e.into()),
        };
        let bytes = self
            .buf
            .get(..got.len)
            .ok_or(Error::Protocol("reply length"))?;
        let reply = Reply::decode(bytes).map_err(Error::BadReply)?;
        Ok((reply, got.fds))
    }

    /// [`Control::call`] for requests answered by [`Reply::Ok`] and no descriptors.
    /// A duplicate of the connection, to poll for a hang-up without the control lock.
    pub(crate) fn watch(&self) -> Result<OwnedFd, Error> {
        rustix::io::fcntl_dupfd_cloexec(&self.sock, 0).map_err(|e| Error::Io {
            op: "duplicating the control socket",
            source: e.into(),
        })
    }

    pub(crate) fn call_ok(&mut self, req: &Request) -> Result<(), Error> {
        match self.call(req, &[])? {
            (Reply::Ok, fds) if fds.is_empty() => Ok(()),
            _ => Err(self.violation("expected Ok")),
        }
    }

    /// [`Control::call`] for requests answered by [`Reply::Slot`].
    pub(crate) fn call_slot(&mut self, req: &Request) -> Result<(u32, u64), Error> {
        match self.call(req, &[])? {
            (Reply::Slot { slot, key }, fds) if fds.is_empty() => Ok((slot, key)),
            _ => Err(self.violation("expected Slot")),
        }
    }

    /// A reply of the wrong shape: the two sides disagree about the protocol, so the
    /// connection is not used again.
    #[cold]
    pub(crate) fn violation(&mut self, what: &'static str) -> Error {
        self.broken = true;
        Error::Protocol(what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hamlyn_shm::fdpass::seqpacket_pair;

    #[test]
    fn refusals_are_typed_and_timeouts_break_the_connection() {
        let (a, b) = seqpacket_pair().unwrap();
        let mut c = Control::from_socket(a, Duration::from_millis(50)).unwrap();
        let engine = std::thread::spawn(move || {
            let mut buf = vec![0u8; MAX_CONTROL_MSG];
            let got = recv_with_fds(&b, &mut buf).unwrap();
            assert_eq!(
                Request::decode(&buf[..got.len]).unwrap(),
                Request::Revoke { slot: 3 }
            );
            let reply = Reply::Error {
                code: ControlErrorCode::NotOwner as u16,
                message: "not yours".into(),
            };
            send_with_fds(&b, &reply.encode(), &[]).unwrap();
            // Read the next request and never answer it.
            let _ = recv_with_fds(&b, &mut buf).unwrap();
            b
        });
        match c.call_ok(&Request::Revoke { slot: 3 }) {
            Err(Error::Refused {
                code: Some(ControlErrorCode::NotOwner),
                raw: 5,
                message,
            }) => assert_eq!(message, "not yours"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            c.call_ok(&Request::Stats {
                section: hamlyn_wire::stats::StatsSection::Summary,
                start: 0
            }),
            Err(Error::ControlTimeout)
        ));
        assert!(matches!(
            c.call_ok(&Request::Stats {
                section: hamlyn_wire::stats::StatsSection::Summary,
                start: 0
            }),
            Err(Error::Disconnected)
        ));
        drop(engine.join().unwrap());
    }
}
