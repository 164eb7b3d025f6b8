//! A raw client for engine tests: speaks the control protocol and drives the port
//! directly, without the application library, so tests can also misbehave on purpose.
#![allow(dead_code, clippy::unwrap_used)]

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hamlyn_shm::fdpass::{recv_with_fds, send_with_fds};
use hamlyn_shm::memory::RingMemory;
use hamlyn_shm::notifq;
use hamlyn_shm::port::{header, PortLayout};
use hamlyn_shm::region::ShmRegion;
use hamlyn_shm::spsc;
use hamlyn_shm::sync::Ordering;
use hamlyn_shm::wake::{self, EventFd};
use hamlyn_wire::control::{Reply, Request, CONTROL_VERSION, MAX_CONTROL_MSG};
use hamlyn_wire::request::{Completion, Payload, SendRequest, REQUEST_LEN};
use hamlyn_wire::stats::Stats;
use hamlyn_wire::NotifEntry;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

pub struct RawClient {
    pub sock: OwnedFd,
    pub client: u32,
    pub node: u32,
    pub port: Arc<ShmRegion>,
    pub queue_file: Arc<ShmRegion>,
    pub layout: PortLayout,
    pub doorbell: EventFd,
    pub port_eventfd: EventFd,
    pub termini: Vec<spsc::Producer<Arc<ShmRegion>>>,
    pub errors: spsc::Consumer<Arc<ShmRegion>>,
    pub queues: Vec<notifq::Consumer<Arc<ShmRegion>>>,
    pub pushed: Vec<u64>,
}

pub fn connect(path: &Path) -> OwnedFd {
    try_connect(path).unwrap()
}

/// A connection to the engine's control socket, or why there is none (yet).
pub fn try_connect(path: &Path) -> rustix::io::Result<OwnedFd> {
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::connect(&fd, &SocketAddrUnix::new(path)?)?;
    Ok(fd)
}

pub fn call(sock: BorrowedFd<'_>, req: &Request, fds: &[BorrowedFd<'_>]) -> (Reply, Vec<OwnedFd>) {
    send_with_fds(sock, &req.encode(), fds).unwrap();
    let mut buf = vec![0u8; MAX_CONTROL_MSG];
    let r = recv_with_fds(sock, &mut buf).unwrap();
    (Reply::decode(&buf[..r.len]).unwrap(), r.fds)
}

/// The statistics of the engine at the other end of `sock`, every page of them.
pub fn stats(sock: BorrowedFd<'_>) -> Stats {
    hamlyn_wire::stats::fetch(|req| Ok::<_, ()>(call(sock, req, &[]).0)).unwrap()
}

impl RawClient {
    pub fn attach(path: &Path, termini: u16, queues: u16, queue_cap: u32) -> RawClient {
        let sock = connect(path);
        let req = Request::Attach {
            version: CONTROL_VERSION,
            pid: std::process::id(),
            termini,
            queues,
            queue_cap,
        };
        let (reply, mut fds) = call(sock.as_fd(), &req, &[]);
        let Reply::Attached {
            client,
            node,
            port_len,
            ..
        } = reply
        else {
            panic!("attach: {reply:?}")
        };
        assert_eq!(fds.len(), 4);
        let doorbell = EventFd::from_fd(fds.pop().unwrap());
        let port_eventfd = EventFd::from_fd(fds.pop().unwrap());
        let queue_fd = fds.pop().unwrap();
        let port = Arc::new(ShmRegion::from_fd(fds.pop().unwrap(), port_len as usize).unwrap());
        let layout = PortLayout::read_header(&*port).unwrap();
        let queue_file = Arc::new(ShmRegion::from_fd(queue_fd, layout.queue_total).unwrap());
        let termini = layout
            .termini
            .iter()
            .map(|l| spsc::Producer::attach(port.clone(), *l).unwrap())
            .collect();
        let errors = spsc::Consumer::attach(port.clone(), layout.errors).unwrap();
        let queues = layout
            .queues
            .iter()
            .map(|l| notifq::Consumer::attach(queue_file.clone(), *l).unwrap())
            .collect();
        let pushed = vec![0; layout.termini.len()];
        RawClient {
            sock,
            client,
            node,
            port,
            queue_file,
            layout,
            doorbell,
            port_eventfd,
            termini,
            errors,
            queues,
            pushed,
        }
    }

    pub fn call(&self, req: Request) -> Reply {
        call(self.sock.as_fd(), &req, &[]).0
    }

    /// The engine's statistics, every page of them.
    pub fn stats(&self) -> Stats {
        stats(self.sock.as_fd())
    }

    /// Creates and registers an area; returns (id, region).
    pub fn area(&self, len: usize) -> (u32, Arc<ShmRegion>) {
        let region = ShmRegion::create("test-area", len).unwrap();
        let (reply, _) = call(
            self.sock.as_fd(),
            &Request::RegisterArea { len: len as u64 },
            &[region.fd()],
        );
        let Reply::Area { area } = reply else {
            panic!("register: {reply:?}")
        };
        (area, Arc::new(region))
    }

    pub fn open(&self, t: u16, priority: u8) {
        assert_eq!(
            self.call(Request::OpenTerminus { index: t, priority }),
            Reply::Ok
        );
    }

    /// Pushes a request; returns its position, or Err if the ring is full.
    pub fn push(&mut self, t: usize, req: SendRequest) -> Result<u64, spsc::PushError> {
        let pos = self.push_quiet(t, req)?;
        // As the library does (`Shared::after_push`): the terminus's ready hint, F2, the
        // doorbell.
        let (off, bit) = self.layout.ready_word(t as u16).unwrap();
        hamlyn_shm::ready::announce(self.port.atomic_u64(off).unwrap(), bit);
        wake::publish_fence();
        wake::wake_after_fence(
            self.port.atomic_u32(header::DOORBELL).unwrap(),
            Some(&self.doorbell),
        );
        Ok(pos)
    }

    /// Pushes a request without ringing the doorbell or setting the terminus's ready
    /// hint (an engine asleep does not see it until it looks, an awake one finds it by
    /// its sweep); returns its position.
    pub fn push_quiet(&mut self, t: usize, mut req: SendRequest) -> Result<u64, spsc::PushError> {
        let pos = self.pushed[t];
        req.seq = pos as u32;
        let mut buf = [0u8; REQUEST_LEN];
        req.encode(&mut buf);
        self.termini[t].try_push(&buf)?;
        self.pushed[t] += 1;
        Ok(pos)
    }

    pub fn finished(&self, t: u16) -> u64 {
        // Acquire: pairs with the engine's Release store in `Port::finish`.
        self.port
            .atomic_u64(self.layout.completion_word(t).unwrap())
            .unwrap()
            .load(Ordering::Acquire)
    }

    /// Waits (bounded) until terminus `t` finished `n` requests.
    pub fn wait_finished(&self, t: u16, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.finished(t) < n {
            assert!(
                Instant::now() < deadline,
                "terminus {t}: {} of {n} finished",
                self.finished(t)
            );
            std::thread::yield_now();
        }
    }

    pub fn errors(&mut self) -> Vec<Completion> {
        let mut out = Vec::new();
        let mut buf = [0u8; 16];
        while self.errors.pop(&mut buf).unwrap() {
            out.push(Completion::decode(&buf).unwrap());
        }
        out
    }

    /// Reads the error ring, and only reads it, until `n` error completions came, each
    /// with status `status` (a reject reason's code); panics if they did not within 30 s.
    pub fn read_errors_until(&mut self, n: u64, status: u16) {
        let mut got = 0u64;
        let deadline = Instant::now() + Duration::from_secs(30);
        while got < n {
            assert!(Instant::now() < deadline, "{got} of {n} refusals came out");
            for c in self.errors() {
                assert_eq!(c.status, status);
                got += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(got, n);
    }

    pub fn wait_notif(&mut self, q: usize) -> Option<NotifEntry> {
        self.queues[q]
            .wait(1000, Some(Duration::from_secs(10)))
            .unwrap()
    }
}

pub fn inline(
    dst_node: u32,
    slot: u32,
    key: u64,
    meta_index: u32,
    offset: u64,
    bytes: &[u8],
    tag: u64,
) -> SendRequest {
    let mut data = [0u8; 128];
    data[..bytes.len()].copy_from_slice(bytes);
    SendRequest {
        op: hamlyn_wire::request::RequestOp::Write,
        seq: 0,
        dst_node,
        slot,
        meta_index,
        key,
        offset,
        y: 0,
        incarnation: 0,
        word: tag,
        flags: hamlyn_wire::request::send_flags::NOTIFY | hamlyn_wire::request::send_flags::WAKE,
        meta: [0; 60],
        meta_len: 0,
        payload: Payload::Inline {
            data,
            len: bytes.len() as u8,
        },
    }
}

/// A reply ticket for `slot` of `c` (one metadata entry, the whole `len`).
pub fn reply_ticket(c: &RawClient, slot: u32, key: u64, len: u64) -> hamlyn_wire::Ticket {
    hamlyn_wire::Ticket {
        node: hamlyn_wire::NodeId(c.node),
        incarnation: 0,
        slot: hamlyn_wire::SlotId(slot),
        key,
        meta_first: 0,
        meta_count: 1,
        offset: 0,
        len,
        share: hamlyn_wire::FULL_SHARE,
        flags: hamlyn_wire::TicketFlags::WRITE,
    }
}

fn with_body(
    mut req: SendRequest,
    op: hamlyn_wire::request::RequestOp,
    body: &[u8],
) -> SendRequest {
    let mut data = [0u8; 128];
    data[..body.len()].copy_from_slice(body);
    req.op = op;
    req.payload = Payload::Inline {
        data,
        len: body.len() as u8,
    };
    req
}

/// A remote read of `len` bytes at `offset` of (`dst_node`, `slot`) into `reply` at `reply_offset`.
#[allow(clippy::too_many_arguments)]
pub fn read_req(
    dst_node: u32,
    slot: u32,
    key: u64,
    offset: u64,
    len: u64,
    reply: hamlyn_wire::Ticket,
    reply_offset: u64,
) -> SendRequest {
    let body = hamlyn_wire::rma::ReadBody {
        reply,
        reply_offset,
    }
    .encode();
    let mut req = inline(dst_node, slot, key, 0, offset, b"", len);
    req = with_body(req, hamlyn_wire::request::RequestOp::Read, &body);
    req
}

/// A remote atomic on the word at `offset`; the old value goes to `reply` at `reply_offset`.
#[allow(clippy::too_many_arguments)]
pub fn atomic_req(
    dst_node: u32,
    slot: u32,
    key: u64,
    offset: u64,
    op: hamlyn_wire::rma::AtomicOp,
    compare: u64,
    operand: u64,
    reply: hamlyn_wire::Ticket,
    reply_offset: u64,
) -> SendRequest {
    let body = hamlyn_wire::rma::AtomicBody {
        reply,
        reply_offset,
        op,
        compare,
        operand,
    }
    .encode();
    let req = inline(dst_node, slot, key, 0, offset, b"", 0);
    with_body(req, hamlyn_wire::request::RequestOp::Atomic, &body)
}

/// A normal slot of `len` bytes in a fresh area of `c`, over `entries` metadata entries,
/// accepting `perms`, posting to queue 0: (slot, key, the area's memory).
pub fn slot_with_perms(
    c: &RawClient,
    len: usize,
    entries: u32,
    perms: u8,
) -> (u32, u64, Arc<ShmRegion>) {
    let (area, region) = c.area(len);
    let (meta_area, _) = c.area(128 * entries.max(1) as usize);
    let reply = c.call(Request::CreateSlot {
        area,
        base: 0,
        len: len as u64,
        mode: hamlyn_wire::control::mode::NORMAL,
        perms,
        meta_area,
        meta_base: 0,
        meta_count: entries,
        queue: 0,
    });
    let Reply::Slot { slot, key } = reply else {
        panic!("slot: {reply:?}")
    };
    (slot, key, region)
}

/// [`slot_with_perms`] for writes: a receiver's slot.
pub fn receiver_slot(c: &RawClient, len: usize, entries: u32) -> (u32, u64, Arc<ShmRegion>) {
    slot_with_perms(c, len, entries, hamlyn_wire::control::perm::WRITE)
}
