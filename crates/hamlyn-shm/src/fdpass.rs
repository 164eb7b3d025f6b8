//! Passing file descriptors (memfd areas, eventfds) between processes: one message plus
//! up to [`MAX_FDS`] descriptors per `SOCK_SEQPACKET` datagram, with `SCM_RIGHTS`.
//!
//! This is the control path (attaching a port, registering an area), so it may allocate.
//! Buffers are bounded: a message carries at most [`MAX_MESSAGE`] bytes and [`MAX_FDS`]
//! descriptors. A receive whose data or control part was truncated by the kernel is an
//! error, and any descriptors that did arrive with it are closed before returning.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

/// Most descriptors one message can carry.
pub const MAX_FDS: usize = 16;

/// Most bytes one message can carry.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// Control-buffer bytes for [`MAX_FDS`] descriptors.
const CMSG_SPACE: usize = rustix::cmsg_space!(ScmRights(MAX_FDS));

/// Why a message could not be sent or received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FdPassError {
    /// A system call failed.
    #[error("{op} failed: {source}")]
    Sys {
        /// The call that failed.
        op: &'static str,
        /// The error it returned.
        source: Errno,
    },
    /// Messages must have at least one byte (an empty read means the peer closed).
    #[error("cannot send an empty message")]
    EmptyMessage,
    /// The message is longer than [`MAX_MESSAGE`].
    #[error("message of {len} bytes exceeds the {MAX_MESSAGE}-byte limit")]
    MessageTooLong {
        /// The message's length.
        len: usize,
    },
    /// More than [`MAX_FDS`] descriptors were given.
    #[error("{count} descriptors exceed the limit of {MAX_FDS}")]
    TooManyFds {
        /// How many were given.
        count: usize,
    },
    /// The kernel accepted only part of the message (cannot happen on `SOCK_SEQPACKET`).
    #[error("sent {sent} of {len} bytes")]
    ShortSend {
        /// Bytes sent.
        sent: usize,
        /// Bytes in the message.
        len: usize,
    },
    /// The peer closed the socket.
    #[error("the peer closed the socket")]
    Closed,
    /// The message was longer than the receive buffer; its tail was lost.
    #[error("message truncated to the {buf_len}-byte receive buffer")]
    Truncated {
        /// The receive buffer's length.
        buf_len: usize,
    },
    /// The peer sent more descriptors than fit ([`MAX_FDS`]); the ones that arrived were
    /// closed.
    #[error("control message truncated; {closed} received descriptors were closed")]
    ControlTruncated {
        /// Descriptors that arrived and were closed.
        closed: usize,
    },
}

#[cold]
fn sys(op: &'static str, source: Errno) -> FdPassError {
    FdPassError::Sys { op, source }
}

/// A connected pair of close-on-exec `AF_UNIX` `SOCK_SEQPACKET` sockets.
pub fn seqpacket_pair() -> Result<(OwnedFd, OwnedFd), FdPassError> {
    rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| sys("socketpair", e))
}

/// A close-on-exec `SOCK_SEQPACKET` socket connected to the Unix socket at `path` (an
/// engine's control socket).
pub fn seqpacket_connect(path: &std::path::Path) -> Result<OwnedFd, FdPassError> {
    let addr = rustix::net::SocketAddrUnix::new(path).map_err(|e| sys("socket path", e))?;
    let sock = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| sys("socket", e))?;
    rustix::net::connect(&sock, &addr).map_err(|e| sys("connect", e))?;
    Ok(sock)
}

/// Sends `msg` with `fds` attached as one datagram. Blocks if the socket buffer is full.
pub fn send_with_fds(
    sock: impl AsFd,
    msg: &[u8],
    fds: &[BorrowedFd<'_>],
) -> Result<(), FdPassError> {
    if msg.is_empty() {
        return Err(FdPassError::EmptyMessage);
    }
    if msg.len() > MAX_MESSAGE {
        return Err(FdPassError::MessageTooLong { len: msg.len() });
    }
    if fds.len() > MAX_FDS {
        return Err(FdPassError::TooManyFds { count: fds.len() });
    }
    let mut space = [MaybeUninit::<u8>::uninit(); CMSG_SPACE];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        // The buffer is sized for MAX_FDS, checked above.
        return Err(FdPassError::TooManyFds { count: fds.len() });
    }
    let iov = [IoSlice::new(msg)];
    let sent = loop {
        match rustix::net::sendmsg(&sock, &iov, &mut control, SendFlags::NOSIGNAL) {
            Err(Errno::INTR) => continue,
            Err(Errno::PIPE) => return Err(FdPassError::Closed),
            Err(e) => return Err(sys("sendmsg", e)),
            Ok(n) => break n,
        }
    };
    if sent != msg.len() {
        return Err(FdPassError::ShortSend {
            sent,
            len: msg.len(),
        });
    }
    Ok(())
}

/// One received message: `len` bytes at the start of the caller's buffer, and the
/// descriptors that came with it (close-on-exec).
#[derive(Debug)]
pub struct Received {
    /// Bytes of the message, at the start of the receive buffer.
    pub len: usize,
    /// Descriptors attached to the message, in the order sent.
    pub fds: Vec<OwnedFd>,
}

/// Receives one datagram into `buf`, with any descriptors attached. Blocks until one
/// arrives (or the socket is non-blocking and returns `EAGAIN` as `Sys`).
pub fn recv_with_fds(sock: impl AsFd, buf: &mut [u8]) -> Result<Received, FdPassError> {
    let mut space = [MaybeUninit::<u8>::uninit(); CMSG_SPACE];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let buf_len = buf.len();
    let mut iov = [IoSliceMut::new(buf)];
    let got = loop {
        match rustix::net::recvmsg(&sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Err(Errno::INTR) => continue,
            Err(e) => return Err(sys("recvmsg", e)),
            Ok(got) => break got,
        }
    };
    // Take ownership of every descriptor that arrived before looking at the flags, so that
    // each one is closed (dropped) on every error path below.
    let mut fds = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = msg {
            fds.extend(rights);
        }
    }
    if got.flags.contains(ReturnFlags::CTRUNC) {
        return Err(FdPassError::ControlTruncated { closed: fds.len() });
    }
    if got.flags.contains(ReturnFlags::TRUNC) || got.bytes > buf_len {
        return Err(FdPassError::Truncated { buf_len });
    }
    if got.bytes == 0 && fds.is_empty() {
        return Err(FdPassError::Closed);
    }
    Ok(Received {
        len: got.bytes,
        fds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_message_and_fds() -> Result<(), Box<dyn std::error::Error>> {
        let (a, b) = seqpacket_pair()?;
        let (x, y) = std::os::unix::net::UnixStream::pair()?;
        send_with_fds(&a, b"hello", &[x.as_fd(), y.as_fd()])?;
        let mut buf = [0u8; 64];
        let got = recv_with_fds(&b, &mut buf)?;
        assert_eq!(&buf[..got.len], b"hello");
        assert_eq!(got.fds.len(), 2);
        // The received descriptors are live: write through one end, read the other.
        rustix::io::write(&got.fds[0], b"z")?;
        let mut one = [0u8; 1];
        assert_eq!(rustix::io::read(&y, &mut one)?, 1);
        assert_eq!(one, *b"z");
        // A message without descriptors.
        send_with_fds(&b, b"plain", &[])?;
        let got = recv_with_fds(&a, &mut buf)?;
        assert_eq!((&buf[..got.len], got.fds.len()), (&b"plain"[..], 0));
        Ok(())
    }

    #[test]
    fn refuses_bad_sends_and_reports_close() -> Result<(), Box<dyn std::error::Error>> {
        let (a, b) = seqpacket_pair()?;
        assert_eq!(send_with_fds(&a, b"", &[]), Err(FdPassError::EmptyMessage));
        let big = vec![0u8; MAX_MESSAGE + 1];
        assert!(matches!(
            send_with_fds(&a, &big, &[]),
            Err(FdPassError::MessageTooLong { .. })
        ));
        let many = vec![a.as_fd(); MAX_FDS + 1];
        assert!(matches!(
            send_with_fds(&a, b"x", &many),
            Err(FdPassError::TooManyFds { .. })
        ));
        send_with_fds(&a, b"0123456789", &[])?;
        let mut small = [0u8; 4];
        assert_eq!(
            recv_with_fds(&b, &mut small).err(),
            Some(FdPassError::Truncated { buf_len: 4 })
        );
        drop(a);
        assert_eq!(
            recv_with_fds(&b, &mut small).err(),
            Some(FdPassError::Closed)
        );
        Ok(())
    }

    #[test]
    fn truncated_control_closes_received_fds() -> Result<(), Box<dyn std::error::Error>> {
        let (a, b) = seqpacket_pair()?;
        // A pipe-like pair: when every copy of `w` is closed, `r` reads EOF.
        let (r, w) = std::os::unix::net::UnixStream::pair()?;
        r.set_nonblocking(true)?;
        // Send more descriptors than the receiver has room for, bypassing our own limit.
        let many = vec![w.as_fd(); MAX_FDS + 4];
        let mut space =
            vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS + 4))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        assert!(control.push(SendAncillaryMessage::ScmRights(&many)));
        rustix::net::sendmsg(&a, &[IoSlice::new(b"x")], &mut control, SendFlags::empty())?;
        drop(w);
        let mut buf = [0u8; 8];
        let err = recv_with_fds(&b, &mut buf).err();
        assert!(
            matches!(err, Some(FdPassError::ControlTruncated { .. })),
            "{err:?}"
        );
        // Every copy of `w` that arrived was closed: `r` sees end-of-file, not EAGAIN.
        let mut one = [0u8; 1];
        assert_eq!(rustix::io::read(&r, &mut one)?, 0);
        Ok(())
    }
}
