//! `hamlyn bench --fabric tcp`: two engines joined by the TCP fabric over loopback, and
//! the floor for that path, raw TCP between the same two processes.
//!
//! - [`SplitTcpEngines`] (the interface's `tcp` modes): node 0 embedded in the driver
//!   process and node 1 in the peer process ([`PeerNode`], the peer's `tcp-node`
//!   command), each with its own [`TcpFabric`] on an ephemeral 127.0.0.1 port (node 0,
//!   the lower id, dials node 1 on every rail). The driver attaches to node 0 and the
//!   peer to node 1, so every message crosses both engines and a TCP connection, and
//!   each process's waiting threads drive its own engine, as two applications on two
//!   machines would.
//! - [`TcpEngines`] (the layers' TCP rows): both engines threads of the driver process;
//!   the layers' clients attach from there.
//! - The raw TCP floor ([`RawTcp`]): the driver listens, the peer connects
//!   (`TCP_NODELAY` on both ends), and over that one connection:
//!   - ping-pong: the driver writes `size` bytes and reads `size` back; the peer reads
//!     them and writes them back. Each round trip is timed into the same histogram as
//!     Hamlyn's; one-way = RTT / 2. Measured twice: with blocking reads (each side sleeps
//!     in the kernel until its data arrives) and with spinning non-blocking reads (each
//!     side polls `read` until it has its data: no sleep, no wake-up, but a core each).
//!     On a virtual machine an idle vCPU halts, and waking a sleeping reader can cost
//!     tens of microseconds; spinning shows what TCP itself costs.
//!   - stream: the peer writes `count` messages of `size` bytes (one `write` each, as far
//!     as the socket takes it), the driver reads them with reads of up to 1 MiB and
//!     divides the bytes after the first read by the time from the first read to the
//!     last, as Hamlyn's stream counts the messages after the first notification. Also
//!     measured twice, blocking and spinning: a blocked writer or reader pays the same
//!     wake-ups.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_fabric::tcp::{ClusterSecret, TcpConfig, TcpFabric};
use hamlyn_wire::NodeId;

use super::child::PeerProcess;
use super::engine_stats::{observer, EngineStats};
use super::error::BenchError;
use super::latency::{timed_rounds, Latency};
use super::pin::pin_to;

/// Longest wait for a connection, a byte, or the engines to see each other.
pub const TCP_WAIT: Duration = Duration::from_secs(20);
/// Bytes asked of one read of the raw stream.
pub const STREAM_READ: usize = 1 << 20;
/// The two engines' incarnation (fresh fabrics on fresh ports each run).
const INCARNATION: u32 = 1;

/// How the two engines are set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpSetup {
    /// Connections per peer session (node 0 dials with this many).
    pub rails: usize,
    /// Busy-poll both the engines and their fabrics.
    pub busy_poll: bool,
    /// Payload bytes per packet between the engines (`None`: the engine's default).
    pub remote_mtu: Option<u64>,
    /// Links in clear, unauthenticated (to measure what authentication and encryption
    /// cost); otherwise the engines share a fresh random secret.
    pub danger_insecure: bool,
}

/// Engine 0 and engine 1, threads of this process, joined over TCP loopback.
#[derive(Debug)]
pub struct TcpEngines {
    /// Node 0 (the driver attaches here).
    pub driver_side: EngineHandle,
    /// Node 1 (the peer process attaches here).
    pub peer_side: EngineHandle,
}

impl TcpEngines {
    /// Starts both engines set up as `engine` (busy-poll from `setup`), each with its
    /// own fabric naming the other, and waits until each sees the other up.
    pub fn start(engine: &EngineConfig, setup: &TcpSetup) -> Result<TcpEngines, BenchError> {
        let secret = setup.secret()?;
        let mut f0 = node_fabric(setup, 0, secret.clone())?;
        let mut f1 = node_fabric(setup, 1, secret)?;
        let (a0, a1) = (f0.local_addr(), f1.local_addr());
        let named = f0
            .add_peer(NodeId(1), a1)
            .and_then(|()| f1.add_peer(NodeId(0), a0));
        named.map_err(|e| BenchError::Fabric(e.to_string()))?;
        let driver_side = start_node(engine, setup, 0, f0)?;
        let engines = TcpEngines {
            driver_side,
            peer_side: start_node(engine, setup, 1, f1)?,
        };
        wait_peer_up(engines.driver_side.socket_path(), 1)?;
        wait_peer_up(engines.peer_side.socket_path(), 0)?;
        Ok(engines)
    }

    /// Stops both engines at once (one stopping first would see the other's connections
    /// close, and log the peer down).
    pub fn stop(self) -> Result<(), BenchError> {
        let TcpEngines {
            driver_side,
            peer_side,
        } = self;
        let (a, b) = std::thread::scope(|s| {
            let other = s.spawn(move || peer_side.stop());
            let a = driver_side.stop();
            (a, other.join())
        });
        a?;
        b.unwrap_or_else(|_| Err(hamlyn_engine::EngineError::Shm("stopping panicked".into())))?;
        Ok(())
    }
}

impl TcpSetup {
    /// A fresh random secret for the two engines (never the user's file), or `None` for
    /// links in clear.
    fn secret(&self) -> Result<Option<ClusterSecret>, BenchError> {
        if self.danger_insecure {
            return Ok(None);
        }
        ClusterSecret::generate()
            .map(Some)
            .map_err(|e| BenchError::Fabric(e.to_string()))
    }
}

/// The fabric of node `node` (its listener bound on an ephemeral loopback port), set up
/// as `setup` says, with `secret` (`None`: in clear).
fn node_fabric(
    setup: &TcpSetup,
    node: u32,
    secret: Option<ClusterSecret>,
) -> Result<TcpFabric, BenchError> {
    let mut cfg = TcpConfig::new(NodeId(node), SocketAddr::from(([127, 0, 0, 1], 0)));
    cfg.danger_insecure = secret.is_none();
    cfg.secret = secret;
    cfg.rails = setup.rails;
    cfg.busy_poll = setup.busy_poll;
    cfg.incarnation = INCARNATION;
    TcpFabric::new(cfg).map_err(|e| BenchError::Fabric(e.to_string()))
}

/// Starts the engine of node `node` on `fabric`, set up as `engine` and `setup` say.
fn start_node(
    engine: &EngineConfig,
    setup: &TcpSetup,
    node: u32,
    fabric: TcpFabric,
) -> Result<EngineHandle, BenchError> {
    let mut c = super::fresh_engine(engine);
    c.node = node;
    c.incarnation = INCARNATION;
    // One registry for the pair (the active-message layer's handler names).
    c.registry = Some(0);
    c.busy_poll = setup.busy_poll;
    if let Some(mtu) = setup.remote_mtu {
        c.remote_mtu = mtu;
    }
    Ok(EngineHandle::start_with_fabric(c, Some(Box::new(fabric)))?)
}

/// Node 0 in the driver process and node 1 in the peer process, each engine embedded in
/// the process that uses it, as an application on each of two machines would run them:
/// a thread of each process that waits for its engine runs the engine's turns itself
/// (progress by the waiting thread), so a ping-pong has one busy thread per node, as raw
/// TCP has. (With both engines threads of the driver, the peer could drive neither, and
/// engine 1's thread was woken for every arrival.)
#[derive(Debug)]
pub struct SplitTcpEngines {
    /// Node 0, in this process (the driver attaches here).
    pub driver_side: EngineHandle,
    /// The control socket of node 1, in the peer process (the peer attaches there).
    pub peer_socket: PathBuf,
}

impl SplitTcpEngines {
    /// Binds node 0's fabric, has the peer start node 1 ([`PeerNode`]), starts node 0
    /// and waits until each sees the other up. With `cpus` (A, B), engine 0 is pinned to
    /// A (the peer process, and so its engine, was pinned to B), and the calling thread
    /// is left on A.
    pub fn start(
        engine: &EngineConfig,
        setup: &TcpSetup,
        cpus: Option<(usize, usize)>,
        peer: &mut PeerProcess,
    ) -> Result<SplitTcpEngines, BenchError> {
        let secret = setup.secret()?;
        let mut f0 = node_fabric(setup, 0, secret.clone())?;
        let spec = PeerNode {
            setup: setup.clone(),
            secret,
            node0: f0.local_addr(),
            spin_turns: engine.spin_turns,
            spin: engine.spin,
            intra_mtu: engine.intra_mtu,
        };
        peer.send(&spec.command())?;
        let answer = peer.expect("tcp-node", super::ANSWER_WAIT)?;
        let mut words = answer.splitn(2, ' ');
        let bad = || BenchError::Peer(format!("bad answer to tcp-node: {answer}"));
        let node1: SocketAddr = words.next().and_then(|w| w.parse().ok()).ok_or_else(bad)?;
        let peer_socket = PathBuf::from(words.next().ok_or_else(bad)?);
        f0.add_peer(NodeId(1), node1)
            .map_err(|e| BenchError::Fabric(e.to_string()))?;
        if let Some((a, _)) = cpus {
            pin_to(a)?;
        }
        let driver_side = start_node(engine, setup, 0, f0)?;
        let engines = SplitTcpEngines {
            driver_side,
            peer_socket,
        };
        wait_peer_up(engines.driver_side.socket_path(), 1)?;
        wait_peer_up(&engines.peer_socket, 0)?;
        Ok(engines)
    }

    /// Stops both engines at once: the peer's (`tcp-node-stop`) and this one.
    pub fn stop(self, peer: &mut PeerProcess) -> Result<(), BenchError> {
        peer.send("tcp-node-stop")?;
        let a = self.driver_side.stop();
        peer.expect("ok", super::ANSWER_WAIT)?;
        Ok(a?)
    }
}

/// What the peer process needs to host node 1 (`tcp-node`): the fabric's setup and
/// secret, node 0's address, and the engine settings of the driver's command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerNode {
    /// Rails, busy-poll, remote MTU, in clear or not.
    pub setup: TcpSetup,
    /// The pair's secret (`None`: in clear).
    pub secret: Option<ClusterSecret>,
    /// Where node 0 listens.
    pub node0: SocketAddr,
    /// The engine's idle spin, in turns.
    pub spin_turns: u32,
    /// The engine's idle spin, in time (whole microseconds).
    pub spin: Duration,
    /// The engine's intra-node MTU.
    pub intra_mtu: u64,
}

impl PeerNode {
    /// The command line: `tcp-node ADDR SECRET RAILS BUSY MTU SPIN_TURNS SPIN_US INTRA`,
    /// SECRET `insecure` for links in clear, MTU `-` for the engine's default.
    pub fn command(&self) -> String {
        let secret = self
            .secret
            .as_ref()
            .map_or_else(|| "insecure".to_string(), ClusterSecret::to_hex);
        let mtu = self
            .setup
            .remote_mtu
            .map_or_else(|| "-".to_string(), |m| m.to_string());
        format!(
            "tcp-node {} {secret} {} {} {mtu} {} {} {}",
            self.node0,
            self.setup.rails,
            u8::from(self.setup.busy_poll),
            self.spin_turns,
            self.spin.as_micros(),
            self.intra_mtu
        )
    }

    /// Parses the words after `tcp-node` (`None`: not one).
    pub fn parse<'a>(mut words: impl Iterator<Item = &'a str>) -> Option<PeerNode> {
        let node0 = words.next()?.parse().ok()?;
        let secret = match words.next()? {
            "insecure" => None,
            hex => Some(ClusterSecret::parse(hex).ok()?),
        };
        let rails = words.next()?.parse().ok()?;
        let busy_poll = match words.next()? {
            "0" => false,
            "1" => true,
            _ => return None,
        };
        let remote_mtu = match words.next()? {
            "-" => None,
            m => Some(m.parse().ok()?),
        };
        let spin_turns = words.next()?.parse().ok()?;
        let spin = Duration::from_micros(words.next()?.parse().ok()?);
        let intra_mtu = words.next()?.parse().ok()?;
        if words.next().is_some() {
            return None;
        }
        Some(PeerNode {
            setup: TcpSetup {
                rails,
                busy_poll,
                remote_mtu,
                danger_insecure: secret.is_none(),
            },
            secret,
            node0,
            spin_turns,
            spin,
            intra_mtu,
        })
    }

    /// Peer: binds node 1's fabric, names node 0 to it and starts its engine in this
    /// process; returns the engine and the fabric's address.
    pub fn start(&self) -> Result<(EngineHandle, SocketAddr), BenchError> {
        let mut f1 = node_fabric(&self.setup, 1, self.secret.clone())?;
        f1.add_peer(NodeId(0), self.node0)
            .map_err(|e| BenchError::Fabric(e.to_string()))?;
        let addr = f1.local_addr();
        let mut engine = EngineConfig::embedded();
        engine.busy_poll = self.setup.busy_poll;
        engine.spin_turns = self.spin_turns;
        engine.spin = self.spin;
        engine.intra_mtu = self.intra_mtu;
        Ok((start_node(&engine, &self.setup, 1, f1)?, addr))
    }
}

/// Waits until the engine at `socket` reports node `peer` up (sends before that fail
/// with `PeerDown`).
fn wait_peer_up(socket: &Path, peer: u32) -> Result<(), BenchError> {
    let node = observer(socket)?;
    let deadline = Instant::now() + TCP_WAIT;
    loop {
        if EngineStats::of(&node)?.peer_up(peer) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(BenchError::Timeout(
                TCP_WAIT,
                "the engines to connect over TCP",
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// How a raw TCP ping-pong side waits for the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Blocking reads: the thread sleeps in the kernel until data arrives.
    Block,
    /// Non-blocking reads retried in a loop: the thread never sleeps (each side needs a
    /// core).
    Spin,
}

impl Wait {
    /// Both, in the order measured.
    pub const ALL: [Wait; 2] = [Wait::Block, Wait::Spin];

    /// The word used in the peer's command.
    pub fn word(self) -> &'static str {
        match self {
            Wait::Block => "block",
            Wait::Spin => "spin",
        }
    }

    /// The mode a command word names.
    pub fn from_word(w: &str) -> Option<Wait> {
        Wait::ALL.into_iter().find(|m| m.word() == w)
    }
}

/// One side of the raw TCP connection between the two processes.
#[derive(Debug)]
pub struct RawTcp {
    stream: TcpStream,
}

impl RawTcp {
    /// Driver: a listener on an ephemeral loopback port.
    pub fn listen() -> Result<(TcpListener, SocketAddr), BenchError> {
        let l = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| BenchError::io("listening for the raw TCP floor", e))?;
        let addr = l
            .local_addr()
            .map_err(|e| BenchError::io("raw TCP floor address", e))?;
        Ok((l, addr))
    }

    /// Driver: accepts the peer's connection, waiting at most [`TCP_WAIT`].
    pub fn accept(listener: &TcpListener) -> Result<RawTcp, BenchError> {
        listener
            .set_nonblocking(true)
            .map_err(|e| BenchError::io("raw TCP floor listener", e))?;
        let deadline = Instant::now() + TCP_WAIT;
        loop {
            match listener.accept() {
                Ok((s, _)) => return RawTcp::new(s),
                Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    return Err(BenchError::Timeout(TCP_WAIT, "the raw TCP connection"));
                }
                Err(e) => return Err(BenchError::io("accepting the raw TCP connection", e)),
            }
        }
    }

    /// Peer: connects to the driver's listener.
    pub fn connect(addr: SocketAddr) -> Result<RawTcp, BenchError> {
        let s = TcpStream::connect_timeout(&addr, TCP_WAIT)
            .map_err(|e| BenchError::io("connecting the raw TCP floor", e))?;
        RawTcp::new(s)
    }

    /// Blocking, Nagle off, every wait bounded by [`TCP_WAIT`].
    fn new(stream: TcpStream) -> Result<RawTcp, BenchError> {
        let set = |r: std::io::Result<()>| r.map_err(|e| BenchError::io("raw TCP socket", e));
        set(stream.set_nonblocking(false))?;
        set(stream.set_nodelay(true))?;
        set(stream.set_read_timeout(Some(TCP_WAIT)))?;
        set(stream.set_write_timeout(Some(TCP_WAIT)))?;
        Ok(RawTcp { stream })
    }

    /// Blocking (`Wait::Block`) or not (`Wait::Spin`).
    fn set_wait(&mut self, wait: Wait) -> Result<(), BenchError> {
        self.stream
            .set_nonblocking(wait == Wait::Spin)
            .map_err(|e| BenchError::io("raw TCP socket", e))
    }

    /// Runs `op` (one read or write) until it does not fail with `WouldBlock` or
    /// `Interrupted`, spinning in between; gives up after [`TCP_WAIT`]. A blocking
    /// socket's `WouldBlock` is its time limit running out.
    fn retry(
        &mut self,
        wait: Wait,
        what: &'static str,
        mut op: impl FnMut(&mut TcpStream) -> std::io::Result<usize>,
    ) -> Result<usize, BenchError> {
        let mut spins: u32 = 0;
        let mut deadline = None;
        loop {
            match op(&mut self.stream) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock && wait == Wait::Spin => {
                    std::hint::spin_loop();
                    spins = spins.wrapping_add(1);
                    if spins % (1 << 16) == 0 {
                        let d = *deadline.get_or_insert_with(|| Instant::now() + TCP_WAIT);
                        if Instant::now() > d {
                            return Err(BenchError::Timeout(TCP_WAIT, "the raw TCP peer"));
                        }
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(BenchError::Timeout(TCP_WAIT, "the raw TCP peer"));
                }
                Err(e) => return Err(BenchError::io(what, e)),
            }
        }
    }

    /// Moves all `len` bytes with `op` (reads or writes from the offset given), waiting as
    /// `wait` says.
    fn move_all(
        &mut self,
        len: usize,
        wait: Wait,
        what: &'static str,
        mut op: impl FnMut(&mut TcpStream, usize) -> std::io::Result<usize>,
    ) -> Result<(), BenchError> {
        let mut done = 0;
        while done < len {
            match self.retry(wait, what, |s| op(s, done))? {
                0 => {
                    return Err(BenchError::Peer(format!(
                        "closed the raw TCP connection ({what})"
                    )))
                }
                n => done += n,
            }
        }
        Ok(())
    }

    /// Sends `buf` whole, waiting as `wait` says.
    fn send_msg(&mut self, buf: &[u8], wait: Wait) -> Result<(), BenchError> {
        self.move_all(buf.len(), wait, "raw TCP write", |s, at| {
            s.write(&buf[at..])
        })
    }

    /// Fills `buf`, waiting as `wait` says.
    fn recv_msg(&mut self, buf: &mut [u8], wait: Wait) -> Result<(), BenchError> {
        self.move_all(buf.len(), wait, "raw TCP read", |s, at| {
            s.read(&mut buf[at..])
        })
    }

    /// Driver: `warmup` untimed round trips of `size` bytes, then `iters` timed ones
    /// (the peer runs [`RawTcp::pong`] for `warmup + iters`), both sides waiting as
    /// `wait` says. One-way = RTT / 2.
    pub fn ping(
        &mut self,
        size: usize,
        warmup: u64,
        iters: u64,
        wait: Wait,
    ) -> Result<Latency, BenchError> {
        let mut out = vec![0x5Au8; size];
        let mut back = vec![0u8; size];
        self.set_wait(wait)?;
        let lat = timed_rounds(warmup, iters, 2, |r| {
            stamp(&mut out, r);
            self.send_msg(&out, wait)?;
            self.recv_msg(&mut back, wait)?;
            if read_stamp(&back) != read_stamp(&out) {
                return Err(BenchError::Unexpected(format!(
                    "raw TCP echo out of step in round {r}"
                )));
            }
            Ok(())
        });
        self.set_wait(Wait::Block)?;
        lat
    }

    /// Peer: echoes `rounds` messages of `size` bytes, waiting as `wait` says.
    pub fn pong(&mut self, size: usize, rounds: u64, wait: Wait) -> Result<(), BenchError> {
        let mut buf = vec![0u8; size];
        self.set_wait(wait)?;
        for _ in 0..rounds {
            self.recv_msg(&mut buf, wait)?;
            self.send_msg(&buf, wait)?;
        }
        self.set_wait(Wait::Block)
    }

    /// Peer: writes `count` messages of `size` bytes, each with as few writes as the
    /// socket takes it in, waiting as `wait` says.
    pub fn send_stream(&mut self, size: usize, count: u64, wait: Wait) -> Result<(), BenchError> {
        let buf: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        self.set_wait(wait)?;
        for _ in 0..count {
            self.send_msg(&buf, wait)?;
        }
        self.set_wait(Wait::Block)
    }

    /// Driver: reads `count` messages of `size` bytes with reads of up to
    /// [`STREAM_READ`], waiting as `wait` says, and returns GB/s (10^9 bytes/s) of the
    /// bytes after the first read, from the first read to the last.
    pub fn receive_stream(
        &mut self,
        size: usize,
        count: u64,
        wait: Wait,
    ) -> Result<f64, BenchError> {
        let total = size as u64 * count;
        let mut buf = vec![0u8; STREAM_READ];
        let mut got = 0u64;
        let mut first: Option<(Instant, u64)> = None;
        let mut last = Instant::now();
        self.set_wait(wait)?;
        while got < total {
            let want = usize::try_from(total - got).map_or(buf.len(), |w| w.min(buf.len()));
            let n = self.retry(wait, "raw TCP stream read", |s| s.read(&mut buf[..want]))?;
            if n == 0 {
                return Err(BenchError::Peer("closed the raw TCP stream early".into()));
            }
            got += n as u64;
            last = Instant::now();
            first.get_or_insert((last, n as u64));
        }
        self.set_wait(Wait::Block)?;
        Ok(match first {
            Some((t0, n0)) => (got - n0) as f64 / (last - t0).as_secs_f64().max(1e-9) / 1e9,
            None => 0.0,
        })
    }
}

/// Writes the round number into the first bytes of `buf` (as many as fit).
fn stamp(buf: &mut [u8], round: u64) {
    let b = round.to_le_bytes();
    let n = buf.len().min(b.len());
    buf[..n].copy_from_slice(&b[..n]);
}

/// The round number [`stamp`] wrote.
fn read_stamp(buf: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = buf.len().min(8);
    b[..n].copy_from_slice(&buf[..n]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The peer's `tcp-node` command carries every setting through text and back.
    #[test]
    fn a_peer_node_command_parses_back_to_itself() {
        let secret = ClusterSecret::generate().expect("random bytes");
        for (secret, mtu) in [(Some(secret), Some(65_536)), (None, None)] {
            let spec = PeerNode {
                setup: TcpSetup {
                    rails: 3,
                    busy_poll: true,
                    remote_mtu: mtu,
                    danger_insecure: secret.is_none(),
                },
                secret,
                node0: SocketAddr::from(([127, 0, 0, 1], 4321)),
                spin_turns: 77,
                spin: Duration::from_micros(250),
                intra_mtu: 8192,
            };
            let line = spec.command();
            let words = line.strip_prefix("tcp-node ").expect("the command word");
            let back = PeerNode::parse(words.split_whitespace()).expect("parses");
            assert_eq!(back.command(), line);
            assert_eq!(back.setup, spec.setup);
        }
    }

    /// A command missing a word, with one too many, or with a bad value is refused.
    #[test]
    fn a_bad_peer_node_command_is_refused() {
        let good = "127.0.0.1:1 insecure 2 0 - 20000 1000 262144";
        assert!(PeerNode::parse(good.split_whitespace()).is_some());
        for bad in [
            "127.0.0.1:1 insecure 2 0 - 20000 1000",
            "127.0.0.1:1 insecure 2 0 - 20000 1000 262144 9",
            "nowhere insecure 2 0 - 20000 1000 262144",
            "127.0.0.1:1 notasecret 2 0 - 20000 1000 262144",
            "127.0.0.1:1 insecure 2 yes - 20000 1000 262144",
        ] {
            assert!(PeerNode::parse(bad.split_whitespace()).is_none(), "{bad}");
        }
    }

    #[test]
    fn raw_ping_pong_and_stream_over_loopback() {
        let (l, addr) = RawTcp::listen().unwrap();
        let peer = std::thread::spawn(move || {
            let mut p = RawTcp::connect(addr).unwrap();
            p.pong(64, 30, Wait::Block).unwrap();
            p.pong(70_000, 30, Wait::Spin).unwrap();
            p.send_stream(4096, 300, Wait::Block).unwrap();
            p.send_stream(100_000, 30, Wait::Spin).unwrap();
        });
        let mut d = RawTcp::accept(&l).unwrap();
        let lat = d.ping(64, 10, 20, Wait::Block).unwrap();
        assert!(lat.p50_us > 0.0 && lat.p99_us >= lat.p50_us);
        let lat = d.ping(70_000, 10, 20, Wait::Spin).unwrap();
        assert!(lat.p50_us > 0.0 && lat.p99_us >= lat.p50_us);
        assert!(d.receive_stream(4096, 300, Wait::Block).unwrap() >= 0.0);
        assert!(d.receive_stream(100_000, 30, Wait::Spin).unwrap() >= 0.0);
        peer.join().unwrap();
    }

    #[test]
    fn wait_words_round_trip() {
        for w in Wait::ALL {
            assert_eq!(Wait::from_word(w.word()), Some(w));
        }
        assert_eq!(Wait::from_word("nap"), None);
    }

    #[test]
    fn stamps_fit_any_size() {
        let mut b = [0u8; 3];
        stamp(&mut b, 0x0102_0304);
        assert_eq!(read_stamp(&b), 0x02_0304);
        let mut b = [0u8; 16];
        stamp(&mut b, u64::MAX - 1);
        assert_eq!(read_stamp(&b), u64::MAX - 1);
    }
}
