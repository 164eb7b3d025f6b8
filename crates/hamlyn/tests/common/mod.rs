//! Helpers for tests with real child processes.
//!
//! A parent test starts an engine thread in the test process and re-executes the test
//! binary to run one *child entry point*: a `#[test]` fn that returns at once unless the
//! environment variable [`ENV_CHILD`] names it (so in an ordinary `cargo test` run the
//! entry points pass without doing anything). The child reaches the engine only through
//! its control socket ([`ENV_SOCKET`]) and its port, like any other process.
//!
//! Parent and child talk in lines: the parent writes `command arguments` lines to the
//! child's stdin ([`Proc::tell`]); the child answers on stdout with lines carrying the
//! [`MARK`] prefix ([`ChildEnv::say`]). libtest may print `test name ... ` on the same
//! line before the child's first output, so the parent searches each line for the mark
//! rather than expecting it at the start. Every wait is bounded; a child is always reaped
//! (killed by its own `Child` handle if it has to be).

use std::io::{BufRead, BufReader, Lines, StdinLock, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hamlyn::{Area, Data, Node, SendHandle, SendOptions, Span, Terminus, Ticket, MAX_INLINE};

/// Names the child entry point a re-executed test binary is to run.
pub const ENV_CHILD: &str = "HAMLYN_MP_CHILD";
/// The engine's control socket, for the child.
pub const ENV_SOCKET: &str = "HAMLYN_MP_SOCKET";
/// Prefix of the lines a child writes for its parent.
pub const MARK: &str = "@@hamlyn-child ";

/// The longest any single step waits (a loaded 2-core machine can be slow; nothing
/// asserts on time, this only keeps a broken test from hanging).
pub const WAIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------
// Data both sides agree on.

/// Byte `i` of the reproducible pattern `seed`: distinct seeds give unrelated bytes.
pub fn pattern_byte(seed: u64, i: u64) -> u8 {
    let mut x = seed.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (x >> 56) as u8
}

/// Bytes `start..start + len` of pattern `seed`.
pub fn pattern_at(seed: u64, start: u64, len: usize) -> Vec<u8> {
    (start..start + len as u64)
        .map(|i| pattern_byte(seed, i))
        .collect()
}

/// Up to three gather spans covering `len` bytes of `area` from `offset` (so gather
/// sends really concatenate several pieces).
pub fn spans(area: &Area, offset: u64, len: u64) -> Vec<Span<'_>> {
    let third = len / 3;
    [
        (offset, third),
        (offset + third, third),
        (offset + 2 * third, len - 2 * third),
    ]
    .into_iter()
    .filter(|&(_, n)| n > 0)
    .map(|(o, n)| area.span(o, n))
    .collect()
}

/// Sends `data`: inline up to [`MAX_INLINE`] bytes, otherwise from a fresh area of this
/// node in three gather spans (the terminus keeps the area until the send is done).
pub fn send_bytes(
    node: &Node,
    t: &mut Terminus,
    ticket: &Ticket,
    opts: &SendOptions<'_>,
    data: &[u8],
) -> SendHandle {
    if data.len() <= MAX_INLINE {
        return t
            .send(ticket, opts, Data::Inline(data))
            .expect("inline send");
    }
    let area = node.area(data.len() as u64).expect("send area");
    area.write(0, data).expect("fill send area");
    t.send(
        ticket,
        opts,
        Data::Gather(&spans(&area, 0, data.len() as u64)),
    )
    .expect("gather send")
}

/// Parses whitespace-separated unsigned numbers, exactly `N` of them.
pub fn numbers<const N: usize>(text: &str) -> [u64; N] {
    let v: Vec<u64> = text
        .split_whitespace()
        .map(|w| w.parse().unwrap_or_else(|_| panic!("not a number: {w:?}")))
        .collect();
    v.try_into()
        .unwrap_or_else(|v: Vec<u64>| panic!("expected {N} numbers, got {v:?}"))
}

// ---------------------------------------------------------------------------------------
// The child's side.

/// What a child entry point gets when it is the one asked for.
pub struct ChildEnv {
    /// The engine's control socket.
    pub socket: PathBuf,
    lines: Lines<StdinLock<'static>>,
}

/// `Some` only in a child process started to run entry point `name`; an ordinary test run
/// gets `None` and the entry point returns at once.
pub fn child_env(name: &str) -> Option<ChildEnv> {
    if std::env::var(ENV_CHILD).ok()? != name {
        return None;
    }
    let socket = std::env::var_os(ENV_SOCKET).expect("the parent names the socket");
    Some(ChildEnv {
        socket: PathBuf::from(socket),
        lines: std::io::stdin().lock().lines(),
    })
}

impl ChildEnv {
    /// Tells the parent `key value` (one line, flushed).
    pub fn say(&self, key: &str, value: impl std::fmt::Display) {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{MARK}{key} {value}").expect("stdout");
        out.flush().expect("stdout");
    }

    /// The parent's next command and its arguments; `None` once the parent closed stdin.
    pub fn next_command(&mut self) -> Option<(String, String)> {
        let line = self.lines.next()?.expect("stdin");
        let line = line.trim();
        let (cmd, args) = line.split_once(' ').unwrap_or((line, ""));
        Some((cmd.to_string(), args.to_string()))
    }

    /// The arguments of the parent's next command, which must be `key`.
    pub fn hear(&mut self, key: &str) -> String {
        match self.next_command() {
            Some((cmd, args)) if cmd == key => args,
            other => panic!("expected {key} from the parent, got {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The parent's side.

/// A child process running one entry point of this test binary.
pub struct Proc {
    name: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    transcript: Vec<String>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    reaped: bool,
}

impl Proc {
    /// Starts entry point `name` in a new process, pointed at the engine at `socket`.
    pub fn spawn(name: &'static str, socket: &Path) -> Proc {
        let exe = std::env::current_exe().expect("current test binary");
        let mut child = Command::new(exe)
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(ENV_CHILD, name)
            .env(ENV_SOCKET, socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start child {name}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr_pipe = child.stderr.take().expect("piped stderr");
        let (tx, lines) = mpsc::channel();
        let out_reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let err_reader = std::thread::spawn({
            let stderr = stderr.clone();
            move || {
                for line in BufReader::new(stderr_pipe).lines() {
                    let Ok(line) = line else { break };
                    let mut s = stderr.lock().unwrap_or_else(|e| e.into_inner());
                    s.push_str(&line);
                    s.push('\n');
                }
            }
        });
        Proc {
            name,
            stdin: child.stdin.take(),
            child,
            lines,
            transcript: Vec::new(),
            stderr,
            readers: vec![out_reader, err_reader],
            reaped: false,
        }
    }

    /// Sends the child the command line `cmd args`.
    pub fn tell(&mut self, cmd: &str, args: impl std::fmt::Display) {
        let Some(stdin) = self.stdin.as_mut() else {
            self.fail(&format!("stdin already closed, cannot tell {cmd}"));
        };
        if let Err(e) = writeln!(stdin, "{cmd} {args}").and_then(|()| stdin.flush()) {
            self.fail(&format!("cannot tell {cmd}: {e}"));
        }
    }

    /// The value of the child's next `key` line (other lines are kept for the report),
    /// waiting at most `timeout`.
    pub fn expect(&mut self, key: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        let want = format!("{MARK}{key} ");
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.transcript.push(line.clone());
                    if let Some(at) = line.find(&want) {
                        return line[at + want.len()..].trim().to_string();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.fail(&format!("no `{key}` line within {timeout:?}"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.fail(&format!("exited before saying `{key}`"))
                }
            }
        }
    }

    /// Kills the child with SIGKILL (through its own handle) and reaps it.
    pub fn kill(&mut self) -> ExitStatus {
        self.child.kill().expect("kill child");
        let status = self.child.wait().expect("reap child");
        self.reaped = true;
        status
    }

    /// Closes the child's stdin and waits (bounded) for it to exit successfully.
    pub fn finish(mut self) {
        self.stdin = None;
        let deadline = Instant::now() + WAIT;
        loop {
            match self.child.try_wait().expect("try_wait") {
                Some(status) => {
                    self.reaped = true;
                    if !status.success() {
                        self.fail(&format!("exited with {status}"));
                    }
                    return;
                }
                None if Instant::now() >= deadline => self.fail("did not exit in time"),
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    /// Fails the test with everything the child said; the child is killed and reaped.
    pub fn fail(&mut self, why: &str) -> ! {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
            self.reaped = true;
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        while let Ok(line) = self.lines.try_recv() {
            self.transcript.push(line);
        }
        let stderr = self
            .stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        panic!(
            "child {} (pid {}): {why}\n--- stdout ---\n{}\n--- stderr ---\n{stderr}",
            self.name,
            self.child.id(),
            self.transcript.join("\n")
        );
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if !self.reaped {
            // Only this child, by its own handle.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Two nodes in this process.

/// Two engines of this process joined by the TCP fabric over loopback (`rails` rails,
/// node 0 holding the registry), each started from a configuration of `config` (its
/// `node` set), and a client of each; returns once each sees the other up. Bounded by
/// [`WAIT`].
pub fn tcp_pair(
    rails: usize,
    config: impl Fn() -> hamlyn_engine::EngineConfig,
) -> (
    hamlyn_engine::EngineHandle,
    hamlyn_engine::EngineHandle,
    Node,
    Node,
) {
    tcp_pair_with(rails, config, |_| {})
}

/// [`tcp_pair`] with the fabric's configuration changed by `tcp` first.
pub fn tcp_pair_with(
    rails: usize,
    config: impl Fn() -> hamlyn_engine::EngineConfig,
    tcp: impl FnOnce(&mut hamlyn_fabric::tcp::TcpConfig),
) -> (
    hamlyn_engine::EngineHandle,
    hamlyn_engine::EngineHandle,
    Node,
    Node,
) {
    use hamlyn_fabric::tcp::{tcp_cluster, TcpConfig};
    let mut cfg = TcpConfig::new(hamlyn::NodeId(0), "127.0.0.1:0".parse().expect("addr"));
    cfg.rails = rails;
    cfg.incarnation = 5;
    tcp(&mut cfg);
    let mut fabrics = tcp_cluster(2, &cfg).expect("cluster");
    let fb = fabrics.pop().expect("fabric");
    let fa = fabrics.pop().expect("fabric");
    let start = |node: u32, f| {
        let mut c = config();
        c.node = node;
        c.incarnation = 5;
        c.registry = Some(0);
        hamlyn_engine::EngineHandle::start_with_fabric(c, Some(Box::new(f))).expect("engine")
    };
    let (ea, eb) = (start(0, fa), start(1, fb));
    let a = Node::connect(ea.socket_path()).expect("connect");
    let b = Node::connect(eb.socket_path()).expect("connect");
    let deadline = Instant::now() + WAIT;
    for (n, peer) in [(&a, 1), (&b, 0)] {
        while !n.stats().expect("stats").peer(peer).is_some_and(|p| p.up) {
            assert!(Instant::now() < deadline, "peer {peer} never came up");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    (ea, eb, a, b)
}
