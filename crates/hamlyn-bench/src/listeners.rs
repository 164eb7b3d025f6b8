//! Whether some socket listens on a TCP port, for the bench's wait until a peer's server
//! is ready: asked of the kernel's socket diagnostics over netlink (`NETLINK_SOCK_DIAG`,
//! the query `ss -tl` makes), which walks only the listening sockets.
//!
//! The bench read `/proc/net/tcp` and `/proc/net/tcp6` instead, every 5 ms until the
//! server listened. Each read walks the whole established-socket hash table (262,144
//! buckets on a 24 GiB machine: 4.6 ms of kernel time a read here), which kept a CPU
//! 10-50% busy between the peers' runs. Those files stay the fallback where netlink is
//! refused (some sandboxes).
//!
//! The request is `SOCK_DIAG_BY_FAMILY` with an `inet_diag_req_v2` for TCP in state
//! LISTEN, once for IPv4 and once for IPv6; the answers are `inet_diag_msg`s, whose
//! source port is read. Everything the kernel answers is length-checked: a short or
//! malformed answer is "could not tell" (`None`), never a panic.

use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::net::{
    netlink, recv, send, socket, sockopt, AddressFamily, RecvFlags, SendFlags, SocketType,
};

/// `struct nlmsghdr`: length, type, flags, sequence, port id.
const NLMSG_HDRLEN: usize = 16;
/// `struct inet_diag_req_v2`: family, protocol, extensions, pad, states, and a 48-byte
/// `inet_diag_sockid`.
const REQ_V2_LEN: usize = 56;
/// The whole request.
const REQUEST_LEN: usize = NLMSG_HDRLEN + REQ_V2_LEN;
/// `SOCK_DIAG_BY_FAMILY`.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLM_F_REQUEST | NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`).
const REQUEST_DUMP: u16 = 0x1 | 0x300;
/// `NLMSG_ERROR`, `NLMSG_DONE`.
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// `TCP_LISTEN` (the state number, and its bit in the request's state mask).
const TCP_LISTEN: u8 = 10;
/// `IPPROTO_TCP`, `AF_INET`, `AF_INET6`.
const IPPROTO_TCP: u8 = 6;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
/// Answers read per family at most: a dump of listeners fits in a few; more means
/// something is wrong, and the caller falls back.
const MAX_READS: usize = 64;
/// The longest wait for an answer (the kernel answers at once).
const ANSWER_WAIT: Duration = Duration::from_secs(1);

/// Whether some socket listens on TCP `port`, on any IPv4 or IPv6 address; `None` if
/// the kernel could not be asked or its answer could not be read.
pub fn listening(port: u16) -> Option<bool> {
    let fd = socket(
        AddressFamily::NETLINK,
        SocketType::RAW,
        Some(netlink::SOCK_DIAG),
    )
    .ok()?;
    sockopt::set_socket_timeout(&fd, sockopt::Timeout::Recv, Some(ANSWER_WAIT)).ok()?;
    let mut buf = vec![0u8; 32 * 1024];
    for (seq, family) in [(1, AF_INET), (2, AF_INET6)] {
        if ask(&fd, family, seq, port, &mut buf)? {
            return Some(true);
        }
    }
    Some(false)
}

/// The dump request for TCP listeners of `family`.
fn request(family: u8, seq: u32) -> [u8; REQUEST_LEN] {
    let mut b = [0u8; REQUEST_LEN];
    b[0..4].copy_from_slice(&(REQUEST_LEN as u32).to_ne_bytes());
    b[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b[6..8].copy_from_slice(&REQUEST_DUMP.to_ne_bytes());
    b[8..12].copy_from_slice(&seq.to_ne_bytes());
    // Port id 0: the kernel. Then the inet_diag_req_v2 (its sockid left zero: a dump
    // filters by nothing but the states).
    b[16] = family;
    b[17] = IPPROTO_TCP;
    b[20..24].copy_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    b
}

/// Sends the request for `family` and reads the dump to its end: whether a listener on
/// `port` was in it; `None` on an error answer, a malformed one, or none in time.
fn ask(fd: &OwnedFd, family: u8, seq: u32, port: u16, buf: &mut [u8]) -> Option<bool> {
    let req = request(family, seq);
    if send(fd, &req, SendFlags::empty()).ok()? != req.len() {
        return None;
    }
    let mut found = false;
    for _ in 0..MAX_READS {
        let (got, _) = recv(fd, &mut *buf, RecvFlags::empty()).ok()?;
        match scan(buf.get(..got)?, seq, port) {
            Scan::More(f) => found |= f,
            Scan::Done(f) => return Some(found | f),
            Scan::Bad => return None,
        }
    }
    // A dump longer than it can be: a listener seen is still one.
    found.then_some(true)
}

/// What one read of a dump held.
#[derive(Debug, PartialEq, Eq)]
enum Scan {
    /// More answers follow; whether this read had a listener on the port.
    More(bool),
    /// The dump ended in this read; whether this read had a listener on the port.
    Done(bool),
    /// An error answer, or bytes that are not netlink messages.
    Bad,
}

/// The netlink messages in `data` (one read): listeners on `port` among the answers to
/// request `seq`, and whether the dump ended.
fn scan(data: &[u8], seq: u32, port: u16) -> Scan {
    let mut found = false;
    let mut at = 0;
    while at < data.len() {
        let Some(hdr) = data.get(at..at + NLMSG_HDRLEN) else {
            return Scan::Bad;
        };
        let len = u32::from_ne_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]) as usize;
        let kind = u16::from_ne_bytes([hdr[4], hdr[5]]);
        let their_seq = u32::from_ne_bytes([hdr[8], hdr[9], hdr[10], hdr[11]]);
        let end = at.checked_add(len);
        let Some(body) = end
            .filter(|_| len >= NLMSG_HDRLEN)
            .and_then(|end| data.get(at + NLMSG_HDRLEN..end))
        else {
            return Scan::Bad;
        };
        if their_seq == seq {
            match kind {
                NLMSG_DONE => return Scan::Done(found),
                NLMSG_ERROR => return Scan::Bad,
                // inet_diag_msg: family, state, timer, retransmits, then the sockid,
                // whose first field is the source port, big-endian.
                SOCK_DIAG_BY_FAMILY => {
                    if let [_, state, _, _, hi, lo, ..] = *body {
                        found |= state == TCP_LISTEN && u16::from_be_bytes([hi, lo]) == port;
                    }
                }
                _ => {}
            }
        }
        // Messages are aligned to 4 bytes.
        at += (len + 3) & !3;
    }
    Scan::More(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A netlink message of `kind` for request `seq` with `body`, padded to 4 bytes.
    fn message(kind: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let len = NLMSG_HDRLEN + body.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&[0, 0]);
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&[0; 4]);
        m.extend_from_slice(body);
        m.resize((len + 3) & !3, 0);
        m
    }

    /// An inet_diag_msg's first bytes: a socket in `state` on source port `port`.
    fn diag(state: u8, port: u16) -> Vec<u8> {
        let mut b = vec![AF_INET, state, 0, 0];
        b.extend_from_slice(&port.to_be_bytes());
        b.extend_from_slice(&[0; 66]);
        b
    }

    #[test]
    fn a_dump_is_scanned_for_a_listener_on_the_port() {
        let mut data = message(SOCK_DIAG_BY_FAMILY, 7, &diag(TCP_LISTEN, 4000));
        assert_eq!(scan(&data, 7, 4000), Scan::More(true));
        assert_eq!(scan(&data, 7, 4001), Scan::More(false));
        // Another request's answers, and a socket on the port in another state, do not
        // count.
        assert_eq!(scan(&data, 8, 4000), Scan::More(false));
        let other = message(SOCK_DIAG_BY_FAMILY, 7, &diag(1, 4000));
        assert_eq!(scan(&other, 7, 4000), Scan::More(false));
        data.extend(message(NLMSG_DONE, 7, &[0; 4]));
        assert_eq!(scan(&data, 7, 4000), Scan::Done(true));
        assert_eq!(scan(&message(NLMSG_ERROR, 7, &[0; 20]), 7, 4000), Scan::Bad);
    }

    #[test]
    fn malformed_answers_are_bad_not_a_panic() {
        let good = message(SOCK_DIAG_BY_FAMILY, 7, &diag(TCP_LISTEN, 4000));
        // Cut anywhere inside: a header or a body that does not fit.
        for cut in 1..good.len() {
            assert_eq!(scan(&good[..cut], 7, 4000), Scan::Bad, "cut at {cut}");
        }
        // A length shorter than the header, and one past the data.
        let mut short = good.clone();
        short[0..4].copy_from_slice(&4u32.to_ne_bytes());
        assert_eq!(scan(&short, 7, 4000), Scan::Bad);
        let mut long = good;
        long[0..4].copy_from_slice(&10_000u32.to_ne_bytes());
        assert_eq!(scan(&long, 7, 4000), Scan::Bad);
        // A body too short for a port is no listener.
        assert_eq!(
            scan(
                &message(SOCK_DIAG_BY_FAMILY, 7, &[AF_INET, TCP_LISTEN]),
                7,
                4000
            ),
            Scan::More(false)
        );
    }

    /// Whether `port` is seen not to listen within a second: a process another test
    /// spawns meanwhile holds a copy of a closed listener until it executes.
    fn stops_listening(port: u16) -> bool {
        (0..100).any(|_| {
            let gone = listening(port) == Some(false);
            if !gone {
                std::thread::sleep(Duration::from_millis(10));
            }
            gone
        })
    }

    /// Against the kernel: a port with a listener (IPv4, then IPv6 where the machine
    /// has it) is found, and once closed it is not. Skipped where netlink's socket
    /// diagnostics are refused (the bench then reads `/proc/net/tcp`).
    #[test]
    fn the_kernel_says_which_ports_listen() {
        let Some(false) = listening(1) else {
            eprintln!("skipped: netlink sock_diag refused here (or port 1 listens)");
            return;
        };
        let v4 = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = v4.local_addr().unwrap().port();
        assert_eq!(listening(port), Some(true));
        drop(v4);
        assert!(stops_listening(port));
        if let Ok(v6) = TcpListener::bind("[::1]:0") {
            let port = v6.local_addr().unwrap().port();
            assert_eq!(listening(port), Some(true));
            drop(v6);
            assert!(stops_listening(port));
        }
        // Connected sockets on a port are not listeners: a client's local port.
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(server.local_addr().unwrap()).unwrap();
        let client_port = client.local_addr().unwrap().port();
        assert_eq!(listening(client_port), Some(false));
    }
}
