//! The engine's event loop: serve termini while there is work, spin a little when there
//! is none, then sleep in epoll on the control sockets and the doorbell until a client
//! needs something. Control sockets are Unix SOCK_SEQPACKET, one request per message.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering as StdOrdering;
use std::sync::Arc;
use std::time::Duration;

use hamlyn_shm::fdpass::{recv_with_fds, send_with_fds, FdPassError};
use hamlyn_shm::memory::RingMemory;
use hamlyn_shm::port::header;
use hamlyn_shm::sync::{AtomicBool, Ordering};
use hamlyn_shm::wake::{self, EventFd, EVENTFD_ARMED};
use hamlyn_wire::control::{Reply, Request, MAX_CONTROL_MSG};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::clients::Clients;
use crate::config::EngineConfig;
use crate::engine::EngineState;
use crate::error::EngineError;
use crate::remote::Remote;
use hamlyn_fabric::Fabric;

/// How long an idle engine sleeps at most while a queue owes an Overflow report.
const LOSS_REPORT_EVERY: Duration = Duration::from_millis(1);
const LISTENER: Token = Token(0);
const DOORBELL: Token = Token(1);
const FABRIC: Token = Token(2);
const FIRST_CLIENT: usize = 3;
/// Idle turns between two polls of the fabric while spinning (0 turns while busy).
const FABRIC_IDLE_EVERY: u32 = 32;
/// Busy turns between two looks at the control sockets.
const IO_EVERY: u32 = 256;
/// Idle turns between two looks at the clock while spinning before a sleep.
const CLOCK_EVERY: u32 = 16;

/// A running engine: its state, its control socket and its poller.
#[derive(Debug)]
pub(crate) struct Engine {
    state: EngineState,
    poll: Poll,
    events: Events,
    listener: OwnedFd,
    buf: Vec<u8>,
    /// When connections that never attached were last looked for.
    last_sweep: std::time::Instant,
}

impl Engine {
    /// Binds the control socket and prepares the engine (nothing runs until [`Engine::run`]).
    pub(crate) fn new(cfg: EngineConfig, stop: Arc<AtomicBool>) -> Result<Engine, EngineError> {
        Engine::with_fabric(cfg, stop, None)
    }

    /// As [`Engine::new`], with a fabric to other nodes.
    pub(crate) fn with_fabric(
        cfg: EngineConfig,
        stop: Arc<AtomicBool>,
        fabric: Option<Box<dyn Fabric + Send>>,
    ) -> Result<Engine, EngineError> {
        let path = cfg.socket.clone();
        let addr = SocketAddrUnix::new(&path).map_err(|_| {
            EngineError::SocketPath(path.display().to_string(), "too long for a Unix socket")
        })?;
        if path.exists() {
            // A socket nobody answers on is stale: a previous engine died. A live one is
            // left alone and binding fails below.
            if hamlyn_shm::fdpass::seqpacket_connect(&path).is_err() {
                let _ = std::fs::remove_file(&path);
            }
        }
        let listener = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )
        .map_err(|e| EngineError::io("socket", e))?;
        rustix::net::bind(&listener, &addr)
            .map_err(|e| EngineError::io("bind control socket", e))?;
        rustix::net::listen(&listener, 128).map_err(|e| EngineError::io("listen", e))?;
        // Clients (and the handle) poke one end; the engine waits on the other.
        let (doorbell_poker, doorbell) =
            EventFd::pair().map_err(|e| EngineError::Shm(e.to_string()))?;
        let poll = Poll::new().map_err(|e| EngineError::io("epoll", e))?;
        poll.registry()
            .register(
                &mut SourceFd(&listener.as_raw_fd()),
                LISTENER,
                Interest::READABLE,
            )
            .map_err(|e| EngineError::io("register listener", e))?;
        poll.registry()
            .register(
                &mut SourceFd(&doorbell.as_fd().as_raw_fd()),
                DOORBELL,
                Interest::READABLE,
            )
            .map_err(|e| EngineError::io("register doorbell", e))?;
        let incarnation = if cfg.incarnation != 0 {
            cfg.incarnation
        } else {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            (t.as_secs() as u32) | 1
        };
        tracing::info!(socket = %path.display(), node = cfg.node, incarnation, busy_poll = cfg.busy_poll, "engine ready");
        let remote = match fabric {
            Some(f) => {
                if let Some(fd) = f.wait_fd() {
                    poll.registry()
                        .register(&mut SourceFd(&fd.as_raw_fd()), FABRIC, Interest::READABLE)
                        .map_err(|e| EngineError::io("register fabric", e))?;
                }
                Some(Remote::new(f))
            }
            None => None,
        };
        let state = EngineState::new(cfg, incarnation, (doorbell_poker, doorbell), stop, remote);
        Ok(Engine {
            state,
            poll,
            events: Events::with_capacity(256),
            listener,
            buf: vec![0; MAX_CONTROL_MSG],
            last_sweep: std::time::Instant::now(),
        })
    }

    /// The doorbell, to wake the engine from another thread (e.g. after setting stop).
    pub(crate) fn doorbell(&self) -> BorrowedFd<'_> {
        self.state.doorbell_poker.as_fd()
    }

    /// Runs until the stop flag is set.
    pub(crate) fn run(&mut self) -> Result<(), EngineError> {
        let mut idle: u32 = 0;
        let mut idle_since = std::time::Instant::now();
        let mut turns: u32 = 0;
        // The last turn was the first after a sleep.
        let mut woke = false;
        // Acquire: pairs with the Release store of the stop flag in `EngineHandle::drop`
        // (or the daemon's signal handler).
        while !self.state.stop.load(StdOrdering::Acquire) {
            turns = turns.wrapping_add(1);
            let mut busy = self.state.turn();
            // Polling the fabric is a system call: every turn while there is traffic,
            // every FABRIC_IDLE_EVERY-th turn while spinning idle.
            if self.state.remote.is_some() && idle % FABRIC_IDLE_EVERY == 0 {
                busy |= self.state.poll_fabric();
            }
            if busy {
                idle = 0;
                woke = false;
                if turns % IO_EVERY == 0 {
                    self.poll_io(Some(Duration::ZERO))?;
                }
                continue;
            }
            let busy_poll = self.state.cfg.busy_poll;
            // Woken for nothing (a timer; a doorbell rung with no request behind it, as a
            // client ringing in a loop would): back to sleep without spinning, so such a
            // client costs the engine one turn per ring, not a spin.
            let woke_for_nothing = std::mem::take(&mut woke) && !busy_poll;
            if woke_for_nothing {
                self.state.counters.idle_wakes += 1;
            }
            if idle == 0 && !busy_poll {
                idle_since = std::time::Instant::now();
            }
            idle = idle.saturating_add(1);
            // A busy-polling engine never sleeps, so it never reads the clock; one that
            // spins before it sleeps reads it every CLOCK_EVERY-th idle turn only (reading
            // the clock costs more than an idle turn, and would delay the next request).
            let spinning = busy_poll
                || (!woke_for_nothing
                    && idle < self.state.cfg.spin_turns
                    && (idle % CLOCK_EVERY != 0 || idle_since.elapsed() < self.state.cfg.spin));
            if spinning {
                if idle % IO_EVERY == 0 {
                    self.poll_io(Some(Duration::ZERO))?;
                }
                std::hint::spin_loop();
                continue;
            }
            if self.arm_doorbells() {
                idle = 0;
                continue;
            }
            self.state.counters.sleeps += 1;
            // A fabric's sockets wake us through its descriptor; its timers (heartbeats,
            // reconnects) bound the sleep.
            let mut sleep = self
                .state
                .fabric_sleep_bound()
                .min(self.state.cfg.max_sleep);
            // A queue owes its owner an Overflow report: look again soon for room (a
            // consumer draining its queue does not ring the doorbell).
            if self.state.clients.has_unreported_losses() {
                sleep = sleep.min(LOSS_REPORT_EVERY);
            }
            self.poll_io(Some(sleep))?;
            self.disarm_doorbells();
            // Whoever rang may be a cold terminus: look at every one next turn.
            self.state.look_at_all = true;
            idle = 0;
            woke = true;
        }
        tracing::info!("engine stopping");
        Ok(())
    }

    /// Asks every client to ring the doorbell on its next push; true if work is already
    /// there (then the engine must not sleep).
    fn arm_doorbells(&mut self) -> bool {
        let mut work = false;
        for client in self.state.clients.iter_mut() {
            let Some(port) = client.port.as_mut() else {
                continue;
            };
            let region = port.region.clone();
            let Some(word) = region.atomic_u32(header::DOORBELL) else {
                continue;
            };
            let held = Clients::is_held(port);
            let termini = &mut port.termini;
            work |= wake::arm_eventfd(word, || termini.iter_mut().any(|t| t.has_work(held)));
        }
        work
    }

    fn disarm_doorbells(&mut self) {
        let _ = self.state.doorbell.drain();
        for client in self.state.clients.iter() {
            if let Some(word) = client
                .port
                .as_ref()
                .and_then(|p| p.region.atomic_u32(header::DOORBELL))
            {
                // Relaxed: only saves clients a needless eventfd write while we are awake.
                word.fetch_and(!EVENTFD_ARMED, Ordering::Relaxed);
            }
        }
    }

    fn poll_io(&mut self, timeout: Option<Duration>) -> Result<(), EngineError> {
        match self.poll.poll(&mut self.events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(()),
            Err(e) => return Err(EngineError::io("epoll_wait", e)),
        }
        let tokens: Vec<Token> = self.events.iter().map(|e| e.token()).collect();
        for token in tokens {
            match token {
                LISTENER => self.accept(),
                DOORBELL => {
                    let _ = self.state.doorbell.drain();
                }
                // The fabric is polled on every turn; waking is all this is for.
                FABRIC => {}
                Token(t) => self.client_readable((t - FIRST_CLIENT) as u32),
            }
        }
        // Off the busy path: this runs when the engine sleeps or every few hundred turns.
        let timeout = self.state.cfg.attach_timeout;
        if self.last_sweep.elapsed() >= timeout / 4 {
            self.last_sweep = std::time::Instant::now();
            for cid in self.state.clients.unattached_since(timeout) {
                self.state.counters.idle_closed += 1;
                self.drop_client(cid, "did not attach in time");
            }
        }
        Ok(())
    }

    fn accept(&mut self) {
        loop {
            let sock = match rustix::net::accept_with(
                &self.listener,
                SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            ) {
                Ok(s) => s,
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    return;
                }
            };
            let uid =
                rustix::net::sockopt::socket_peercred(&sock).map_or(u32::MAX, |c| c.uid.as_raw());
            let cfg = &self.state.cfg;
            let full = self.state.clients.live() >= cfg.max_clients as usize;
            if full || self.state.clients.of_user(uid) >= cfg.max_clients_per_user as usize {
                self.refused(uid, full);
                continue;
            }
            let raw = sock.as_raw_fd();
            let id = self.state.clients.insert(sock, uid);
            let token = Token(FIRST_CLIENT + id as usize);
            if let Err(e) =
                self.poll
                    .registry()
                    .register(&mut SourceFd(&raw), token, Interest::READABLE)
            {
                tracing::warn!(error = %e, "cannot watch client socket");
                self.state.clients.remove(id);
                continue;
            }
            // The client may have written before we registered (edge-triggered): read now.
            self.client_readable(id);
        }
    }

    /// A connection refused at accept: counted, and logged only now and then (a flood of
    /// connections must not become a flood of log lines).
    #[cold]
    fn refused(&mut self, uid: u32, all_full: bool) {
        let c = &mut self.state.counters.connections_refused;
        *c += 1;
        if c.is_power_of_two() {
            tracing::warn!(
                uid,
                refused = *c,
                why = if all_full {
                    "max_clients"
                } else {
                    "the user's share of max_clients"
                },
                "connection refused"
            );
        }
    }

    fn client_readable(&mut self, cid: u32) {
        loop {
            let Some(client) = self.state.clients.get_mut(cid) else {
                return;
            };
            let got = recv_with_fds(client.sock.as_fd(), &mut self.buf);
            let received = match got {
                Ok(r) => r,
                Err(FdPassError::Sys {
                    source: Errno::AGAIN,
                    ..
                }) => return,
                Err(FdPassError::Closed) => return self.drop_client(cid, "socket closed"),
                Err(e) => {
                    self.state.counters.bad_control += 1;
                    tracing::warn!(client = cid, error = %e, "bad control message");
                    return self.drop_client(cid, "bad control message");
                }
            };
            let (reply, fds) = match Request::decode(&self.buf[..received.len]) {
                Ok(
                    req @ (Request::Publish { .. }
                    | Request::Unpublish { .. }
                    | Request::Lookup { .. }
                    | Request::Ping { .. }
                    | Request::AmRegister { .. }
                    | Request::AmUnregister { .. }
                    | Request::AmTable { .. }
                    | Request::AmCall { .. }
                    | Request::AmReport { .. }
                    | Request::AmCounters),
                ) => {
                    let at = self.state.registry_place();
                    let remote = self.state.remote.as_mut();
                    match self.state.registry.client_request(cid, req, at, remote) {
                        Some(reply) => (reply, Vec::new()),
                        // Forwarded: the reply goes out when the registry node answers.
                        None => continue,
                    }
                }
                Ok(req) => self.state.handle(cid, req, received.fds),
                Err(e) => {
                    self.state.counters.bad_control += 1;
                    let code = hamlyn_wire::control::ControlErrorCode::BadRequest as u16;
                    (
                        Reply::Error {
                            code,
                            message: e.to_string(),
                        },
                        Vec::new(),
                    )
                }
            };
            let Some(client) = self.state.clients.get_mut(cid) else {
                return;
            };
            let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
            if let Err(e) = send_with_fds(client.sock.as_fd(), &reply.encode(), &borrowed) {
                tracing::warn!(client = cid, error = %e, "cannot reply");
                return self.drop_client(cid, "cannot reply");
            }
        }
    }

    /// A client is gone: its slots are destroyed (packets to them now fail with
    /// PeerDown), its termini unscheduled, its areas unmapped.
    fn drop_client(&mut self, cid: u32, why: &str) {
        let Some(client) = self.state.clients.remove(cid) else {
            return;
        };
        let _ = self
            .poll
            .registry()
            .deregister(&mut SourceFd(&client.sock.as_raw_fd()));
        let slots = self.state.delivery.bury_owner(cid);
        let at = self.state.registry_place();
        self.state
            .registry
            .forget_client(cid, at, self.state.remote.as_mut());
        if let Some(port) = &client.port {
            self.state.client_gone(port);
        }
        self.state.sched.remove_client(cid);
        let areas = self.state.delivery.areas.remove_owner(cid);
        if client.port.is_some() {
            if client.detached {
                self.state.counters.clients_detached += 1;
            } else {
                self.state.counters.clients_lost += 1;
            }
        }
        tracing::info!(
            client = cid,
            pid = client.pid,
            why,
            slots,
            areas,
            "client gone"
        );
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.state.cfg.socket);
    }
}
