//! The peers measured beside Hamlyn in the same run (DESIGN §8): UCX's `ucx_perftest` over
//! its shared-memory and TCP transports, and raw TCP through `sockperf`.
//!
//! Each figure comes from a pair of processes started here: a server and a client on a
//! free loopback port. Every child is bounded by a time limit and killed and reaped at the
//! end; a peer that is not installed, fails or refuses a size is recorded in
//! [`Peers::missing`] and the rest goes on.
//!
//! - UCX, shared memory ([`PeerKind::UcxShm`]): the UCT tests (`am_lat`, `put_lat`,
//!   `put_bw`, `am_bw`) on `-x posix -d memory`; the UCP tests (`tag_lat`, `tag_bw`) with
//!   `UCX_TLS=shm` (UCX chooses among posix, sysv and cma, single-copy for large messages).
//! - UCX, TCP ([`PeerKind::UcxTcp`]): UCT on `-x tcp -d lo`; UCP with `UCX_TLS=tcp` and
//!   `UCX_NET_DEVICES=lo`.
//! - sockperf ([`PeerKind::Sockperf`]): `pp` (ping-pong, one-way latency percentiles) and
//!   `tp` (one-way stream, throughput), TCP over 127.0.0.1.
//!
//! UCX tests run at every size given (`ucx_perftest` costs about 0.1 s per run); a UCT test
//! uses the `short` layout and moves to `bcopy`, then `zcopy` when UCX refuses a size.
//! sockperf costs at least 3 s per run (it sleeps 2 s after connecting, then measures for
//! 1 s), so its runs overlap: the next client connects while the last one sleeps, and only
//! one measures at a time; it runs at a few sizes only.

use std::collections::HashMap;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::progress::Progress;

/// Which peer system produced a figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PeerKind {
    /// UCX over shared memory (UCT `posix`, UCP `UCX_TLS=shm`).
    UcxShm,
    /// UCX over TCP on the loopback device.
    UcxTcp,
    /// Raw TCP over loopback, measured by sockperf.
    Sockperf,
}

impl PeerKind {
    /// The name in reports: `ucx-shm`, `ucx-tcp`, `sockperf`.
    pub fn name(self) -> &'static str {
        match self {
            PeerKind::UcxShm => "ucx-shm",
            PeerKind::UcxTcp => "ucx-tcp",
            PeerKind::Sockperf => "sockperf",
        }
    }

    /// `ucx_perftest`'s UCT transport and device arguments.
    fn uct_args(self) -> [&'static str; 4] {
        match self {
            PeerKind::UcxTcp => ["-x", "tcp", "-d", "lo"],
            _ => ["-x", "posix", "-d", "memory"],
        }
    }

    /// The environment that selects the UCP transports.
    fn ucp_env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            PeerKind::UcxTcp => &[("UCX_TLS", "tcp"), ("UCX_NET_DEVICES", "lo")],
            _ => &[("UCX_TLS", "shm")],
        }
    }
}

/// One figure measured by a peer.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerResult {
    /// The peer.
    pub kind: PeerKind,
    /// The test: `am_lat`, `tag_lat`, `put_lat`, `put_bw`, `tag_bw`, `am_bw` (UCX),
    /// `pingpong`, `throughput` (sockperf).
    pub test: &'static str,
    /// The message size asked for (the row of the comparison).
    pub size: usize,
    /// The bytes the peer really sent per message: `size`, except where the peer cannot
    /// send that size (sockperf's messages are 14 to 1048575 bytes).
    pub actual_size: usize,
    /// One-way latency, median (UCX: its "typical" 50th percentile of half round trips;
    /// sockperf: its 50th percentile of half round trips), in µs.
    pub p50_us: Option<f64>,
    /// One-way latency, 99th percentile, in µs (sockperf only: UCX reports one percentile).
    pub p99_us: Option<f64>,
    /// One-way latency, mean, in µs.
    pub mean_us: Option<f64>,
    /// Bandwidth in GB/s (1e9 bytes per second).
    pub gbps: Option<f64>,
    /// Messages per second.
    pub msgs_per_s: Option<f64>,
    /// How it was measured (transport, layout, iterations), for the report's notes.
    pub detail: String,
}

/// What ran and what could not.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Peers {
    /// Every figure measured.
    pub results: Vec<PeerResult>,
    /// Peers or tests that did not run or failed, with the reason.
    pub missing: Vec<String>,
    /// Sizes changed or left out on purpose, with the reason.
    pub notes: Vec<String>,
}

/// Measures the peers: UCX latency tests at `sizes_lat`, bandwidth tests at `sizes_bw`,
/// message rate at `rate_size`; sockperf at a few of those sizes. About 15 s, or 5 s
/// with `quick` (fewer sizes and iterations), on an idle machine; on a busy one UCX stops
/// after 8.5 s per transport (3 s quick) and records what it left out, so at most some
/// 27 s (9 s quick). Names what runs on `progress` but counts no step (the caller counts
/// the peers as one). `cpus` (`--pin`): each server runs on the first CPU and each client
/// on the second, as the bench's own two processes do in the direct mode; `None`: where
/// they inherit from the calling thread.
pub fn measure(
    sizes_lat: &[usize],
    sizes_bw: &[usize],
    rate_size: usize,
    quick: bool,
    cpus: Option<(usize, usize)>,
    progress: &Progress,
) -> Peers {
    let mut peers = Peers::default();
    let (lat, bw) = if quick {
        (first(sizes_lat), key_bw(sizes_bw).into_iter().collect())
    } else {
        (sizes_lat.to_vec(), sizes_bw.to_vec())
    };
    // Measuring time per UCX run, and the time after which the remaining UCX tests are
    // left out, half for each transport (unloaded, UCX takes about 2 s quick and 7 s
    // full; a busy machine stretches every run, see `Ucx::slowdown`).
    let (budget, ucx_limit) = if quick {
        (Duration::from_millis(25), Duration::from_secs(4))
    } else {
        (Duration::from_millis(40), Duration::from_secs(15))
    };
    match find_program("ucx_perftest") {
        Some(exe) => {
            for kind in [PeerKind::UcxShm, PeerKind::UcxTcp] {
                let mut ucx = Ucx {
                    exe: &exe,
                    kind,
                    budget,
                    slowdown: 1.0,
                    stop_at: Instant::now() + ucx_limit / 2,
                    cpus,
                    peers: &mut peers,
                    progress,
                };
                ucx.run_all(&lat, &bw, rate_size);
            }
        }
        None => {
            peers
                .missing
                .push("ucx_perftest not installed: run bench/peers.sh".into());
        }
    }
    match find_program("sockperf") {
        Some(exe) => sockperf_all(
            &exe, sizes_lat, sizes_bw, rate_size, quick, cpus, &mut peers, progress,
        ),
        None => peers
            .missing
            .push("sockperf not installed: run bench/peers.sh".into()),
    }
    peers
}

/// UCX's active-message tests beside the rows of the layers above the interface:
/// `am_lat` at `lat_sizes` and `am_bw` at `bw_sizes`, over shared memory and over TCP,
/// the way [`measure`] runs them (bounded the same way; a missing `ucx_perftest` is
/// recorded in [`Peers::missing`]).
pub fn measure_am(
    lat_sizes: &[usize],
    bw_sizes: &[usize],
    quick: bool,
    progress: &Progress,
) -> Peers {
    let mut peers = Peers::default();
    let Some(exe) = find_program("ucx_perftest") else {
        peers
            .missing
            .push("ucx_perftest not installed: run bench/peers.sh".into());
        return peers;
    };
    // Up to 15 runs per transport: more time than `measure` gives its 5 tests (a busy
    // machine stretches every run; what does not fit is recorded as left out).
    let (budget, ucx_limit) = if quick {
        (Duration::from_millis(25), Duration::from_secs(20))
    } else {
        (Duration::from_millis(40), Duration::from_secs(40))
    };
    let mut jobs: Vec<(UcxTest, usize)> = lat_sizes.iter().map(|&s| (LAT_TESTS[0], s)).collect();
    jobs.extend(bw_sizes.iter().map(|&s| (AM_BW, s)));
    let mut seen = Vec::new();
    jobs.retain(|&(t, s)| {
        let new = !seen.contains(&(t.name, s));
        seen.push((t.name, s));
        new
    });
    for kind in [PeerKind::UcxShm, PeerKind::UcxTcp] {
        let mut ucx = Ucx {
            exe: &exe,
            kind,
            budget,
            slowdown: 1.0,
            stop_at: Instant::now() + ucx_limit / 2,
            // Where the calling thread is, as the layers' own processes and engines
            // (which `--pin` leaves on its first CPU).
            cpus: None,
            peers: &mut peers,
            progress,
        };
        ucx.run_jobs(&jobs);
    }
    peers
}

fn first(sizes: &[usize]) -> Vec<usize> {
    sizes.iter().copied().min().into_iter().collect()
}

/// The bandwidth size DESIGN §8 names (1 MiB), else the largest.
fn key_bw(sizes: &[usize]) -> Option<usize> {
    if sizes.contains(&(1 << 20)) {
        Some(1 << 20)
    } else {
        sizes.iter().copied().max()
    }
}

/// `name` found in a directory of `PATH`.
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

// ---------------------------------------------------------------------------------------
// Child processes.

/// A child process whose standard output and error are collected by reader threads;
/// killed (if still running) and reaped when dropped.
struct Proc {
    child: Child,
    chunks: Receiver<String>,
    text: String,
    /// Both reader threads are done (the process closed its output).
    closed: bool,
}

impl Proc {
    fn spawn(mut cmd: Command, what: &str) -> Result<Proc, String> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("{what}: could not start: {e}"))?;
        let (tx, chunks) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            forward(out, tx.clone());
        }
        if let Some(err) = child.stderr.take() {
            forward(err, tx);
        }
        Ok(Proc {
            child,
            chunks,
            text: String::new(),
            closed: false,
        })
    }

    /// Pins the process (its threads so far: sockperf's one) to `cpu` (`--pin`).
    fn pin_to(&self, cpu: usize) -> Result<(), String> {
        crate::pin::pin_process(self.child.id(), cpu)
            .map_err(|e| format!("pinning to CPU {cpu}: {e}"))
    }

    /// Collects output until `until` holds of everything so far, the output closes, or
    /// `deadline` passes; whether `until` held.
    fn read_until(&mut self, deadline: Instant, until: impl Fn(&str) -> bool) -> bool {
        loop {
            if until(&self.text) {
                return true;
            }
            if self.closed {
                return false;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.chunks.recv_timeout(left) {
                Ok(chunk) => self.text.push_str(&chunk),
                Err(RecvTimeoutError::Timeout) => return false,
                Err(RecvTimeoutError::Disconnected) => self.closed = true,
            }
        }
    }

    /// Whether the process has exited.
    fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for the process to end until `deadline` (then kills it); its exit status
    /// (`None` when it was killed) and everything it wrote.
    fn finish(mut self, deadline: Instant) -> (Option<ExitStatus>, String) {
        self.read_until(deadline, |_| false);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                _ => break None,
            }
        };
        // Drop kills the process if it is still running, and reaps it.
        (status, std::mem::take(&mut self.text))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // Ignored: it fails only when the process has already exited.
            let _ = self.child.kill();
        }
        // Reaps the process; nothing to do when it fails (already reaped).
        let _ = self.child.wait();
    }
}

/// Sends what `from` produces to `to`, in chunks as they arrive (sockperf writes its
/// progress without line ends), until the pipe closes.
fn forward(mut from: impl Read + Send + 'static, to: mpsc::Sender<String>) {
    let spawned = std::thread::Builder::new()
        .name("bench-peers-reader".into())
        .spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let chunk = String::from_utf8_lossy(buf.get(..n).unwrap_or_default());
                        if to.send(chunk.into_owned()).is_err() {
                            break;
                        }
                    }
                }
            }
        });
    // Without the thread the output is lost and its pipe fills; the time limits still end
    // the process.
    drop(spawned);
}

/// A loopback TCP port that was free a moment ago.
fn free_port() -> Result<u16, String> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| format!("finding a free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

/// Whether some socket listens on TCP `port` (any address): asked over netlink
/// ([`crate::listeners`]), or where that is refused read from `/proc/net/tcp{,6}`.
/// (Connecting to find out would use up a server that accepts one connection.)
fn listening(port: u16) -> bool {
    crate::listeners::listening(port).unwrap_or_else(|| listening_by_proc(port))
}

/// [`listening`] from `/proc/net/tcp{,6}`: each read walks the kernel's whole table of
/// established sockets (milliseconds on a machine with much memory).
fn listening_by_proc(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|file| {
        std::fs::read_to_string(file).is_ok_and(|text| {
            text.lines().skip(1).any(|line| {
                let mut fields = line.split_whitespace();
                let local = fields.nth(1).unwrap_or_default();
                let state = fields.nth(1).unwrap_or_default();
                local.ends_with(&want) && state == "0A"
            })
        })
    })
}

/// Starts a server with `cmd` on `port` and waits until it listens.
fn start_server(cmd: Command, port: u16, what: &str) -> Result<Proc, String> {
    let mut server = Proc::spawn(cmd, what)?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if listening(port) {
            return Ok(server);
        }
        if server.exited() {
            let (_, text) = server.finish(Instant::now() + Duration::from_millis(200));
            return Err(format!("{what} server exited: {}", error_line(&text)));
        }
        if Instant::now() >= deadline {
            // Netlink may answer wrongly in a sandbox: the files have the last word.
            if listening_by_proc(port) {
                return Ok(server);
            }
            return Err(format!(
                "{what} server did not listen on port {port} within 5 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The first line of `text` that reports an error, without UCX's time and place prefix;
/// else its last non-empty line.
fn error_line(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| l.contains("ERROR"))
        .or_else(|| text.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or("no output");
    let line = match line.find("ERROR") {
        Some(i) => line.get(i + "ERROR".len()..).unwrap_or(line),
        None => line,
    };
    let line = line.trim().trim_start_matches(':').trim();
    strip_ansi(line)
}

/// `s` without terminal colour sequences (`ESC [ ... m`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// UCX.

/// The numbers of `ucx_perftest`'s `Final:` line.
#[derive(Clone, Copy, Debug, PartialEq)]
struct UcxFinal {
    iterations: u64,
    /// Latency (one-way for the `*_lat` tests; "overhead" for the others) at the
    /// percentile asked for (`-R`, 50 by default), µs.
    lat_typical_us: f64,
    /// Mean latency over the whole run, µs.
    lat_overall_us: f64,
    /// Bandwidth over the whole run in UCX's MB/s (2^20 bytes per second).
    bw_overall_mib: f64,
    /// Messages per second over the whole run.
    msgrate_overall: f64,
}

/// Parses the `Final:` line of `ucx_perftest`'s table: iterations, latency (percentile,
/// average, overall), bandwidth (average, overall), message rate (average, overall).
fn parse_ucx_final(text: &str) -> Result<UcxFinal, String> {
    let line = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("Final:"))
        .ok_or_else(|| {
            format!(
                "no \"Final:\" line in ucx_perftest's output ({})",
                error_line(text)
            )
        })?;
    parse_ucx_row(line).map_err(|e| format!("ucx_perftest's \"Final:\" line: {e}"))
}

/// Parses the last progress line of `ucx_perftest`'s table (`[thread 0]` and the same
/// eight numbers as `Final:`, the overall ones so far; printed every second), for a run
/// stopped before its end.
fn parse_ucx_progress(text: &str) -> Result<UcxFinal, String> {
    let line = text
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("[thread")?;
            rest.split_once(']').map(|(_, row)| row)
        })
        .next_back()
        .ok_or("no progress line in ucx_perftest's output")?;
    parse_ucx_row(line).map_err(|e| format!("ucx_perftest's progress line: {e}"))
}

/// The eight numbers of a row of `ucx_perftest`'s table: iterations, latency (percentile,
/// average, overall), bandwidth (average, overall), message rate (average, overall).
fn parse_ucx_row(row: &str) -> Result<UcxFinal, String> {
    let fields: Vec<&str> = row.split_whitespace().collect();
    if fields.len() != 8 {
        return Err(format!("{} fields, not 8: {row:?}", fields.len()));
    }
    let mut v = [0.0f64; 8];
    for (slot, field) in v.iter_mut().zip(&fields) {
        *slot = match field.replace(',', "").parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => x,
            _ => return Err(format!("bad number {field:?}")),
        };
    }
    let [iterations, lat_typical_us, _, lat_overall_us, _, bw_overall_mib, _, msgrate_overall] = v;
    Ok(UcxFinal {
        iterations: iterations as u64,
        lat_typical_us,
        lat_overall_us,
        bw_overall_mib,
        msgrate_overall,
    })
}

/// Bytes per second in UCX's (and sockperf's) MB/s.
const MIB: f64 = 1_048_576.0;

/// Why a UCX run gave no figure.
#[derive(Debug)]
enum UcxFailure {
    /// UCX does not support this test, layout or size on this transport.
    Refused(String),
    /// Anything else.
    Failed(String),
}

/// Whether UCX refused the operation or size (rather than failing).
fn ucx_refused(text: &str) -> bool {
    text.contains("does not support operation")
        || text.contains("larger than max supported")
        || text.contains("Unsupported operation")
}

/// A UCX test as run here.
#[derive(Clone, Copy)]
struct UcxTest {
    name: &'static str,
    /// UCT (transport chosen by `-x`/`-d`, layouts) or UCP (transport chosen by UCX_TLS).
    uct: bool,
    /// A ping-pong (one iteration is a round trip).
    pingpong: bool,
}

const LAT_TESTS: [UcxTest; 3] = [
    UcxTest {
        name: "am_lat",
        uct: true,
        pingpong: true,
    },
    UcxTest {
        name: "tag_lat",
        uct: false,
        pingpong: true,
    },
    UcxTest {
        name: "put_lat",
        uct: true,
        pingpong: true,
    },
];

const BW_TESTS: [UcxTest; 2] = [
    UcxTest {
        name: "put_bw",
        uct: true,
        pingpong: false,
    },
    UcxTest {
        name: "tag_bw",
        uct: false,
        pingpong: false,
    },
];

const AM_BW: UcxTest = UcxTest {
    name: "am_bw",
    uct: true,
    pingpong: false,
};

/// What one UCX test has learnt across its sizes.
#[derive(Debug, Default)]
struct TestState {
    /// Index into [`LAYOUTS`] of the layout that last worked.
    layout: usize,
    /// The size run last.
    last_size: usize,
    /// Every layout refused this size (and so every larger one).
    refused_from: Option<usize>,
    /// The test failed: not run again.
    dead: bool,
}

/// UCT data layouts, tried in this order until UCX accepts one.
const LAYOUTS: [&str; 3] = ["short", "bcopy", "zcopy"];

/// Runs the UCX tests of one transport.
struct Ucx<'a> {
    exe: &'a Path,
    kind: PeerKind,
    /// Measuring time per run.
    budget: Duration,
    /// How much slower than [`per_iteration`]'s guess the last run was (at least 1): a
    /// busy machine preempts the spinning processes, and the runs shrink to match.
    slowdown: f64,
    /// When the remaining tests are left out.
    stop_at: Instant,
    /// `--pin`: the server's CPU and the client's (the two processes of the bench's own
    /// two-process figures sit the same way).
    cpus: Option<(usize, usize)>,
    peers: &'a mut Peers,
    progress: &'a Progress,
}

impl Ucx<'_> {
    /// Runs every test at every size, the figures DESIGN §8 names first (each test at
    /// its first size: the smallest latency size, 1 MiB or the largest bandwidth size, the
    /// message rate), then the other sizes, so that a busy machine that runs out of time
    /// leaves out the less important ones.
    fn run_all(&mut self, lat: &[usize], bw: &[usize], rate_size: usize) {
        self.run_jobs(&ucx_jobs(lat, bw, rate_size));
    }

    /// Runs `jobs` in order, until the transport's time limit.
    fn run_jobs(&mut self, jobs: &[(UcxTest, usize)]) {
        let mut states: HashMap<&'static str, TestState> = HashMap::new();
        for (i, &(test, size)) in jobs.iter().enumerate() {
            if Instant::now() >= self.stop_at {
                let left: Vec<String> = jobs
                    .get(i..)
                    .unwrap_or_default()
                    .iter()
                    .map(|(t, s)| format!("{} {}", t.name, size_text(*s)))
                    .collect();
                self.peers.missing.push(format!(
                    "{}: left out, UCX ran past its time limit (a busy machine?): {}",
                    self.kind.name(),
                    left.join(", ")
                ));
                return;
            }
            self.run_size(test, size, states.entry(test.name).or_default());
        }
    }

    /// Runs `test` at `size`, moving to the next layout when UCX refuses one; records a
    /// failure, or a size that every layout refuses (and skips the larger sizes then).
    fn run_size(&mut self, test: UcxTest, size: usize, state: &mut TestState) {
        let kind = self.kind.name();
        if state.dead {
            return;
        }
        if state.refused_from.is_some_and(|r| size >= r) {
            return;
        }
        // Refusals grow with the size: a smaller size starts again at `short`.
        if size < state.last_size {
            state.layout = 0;
        }
        state.last_size = size;
        self.progress
            .start(format!("peers: {kind} {} {}", test.name, size_text(size)));
        let outcome = loop {
            let layout = if test.uct {
                LAYOUTS.get(state.layout).copied()
            } else {
                None
            };
            match self.run_one(test, size, layout) {
                Err(UcxFailure::Refused(why)) if test.uct && state.layout + 1 < LAYOUTS.len() => {
                    tracing::debug!("{kind} {} {size} B {layout:?} refused: {why}", test.name);
                    state.layout += 1;
                }
                other => break other,
            }
        };
        match outcome {
            Ok(result) => self.peers.results.push(result),
            Err(UcxFailure::Refused(why)) => {
                state.refused_from = Some(size);
                self.peers.missing.push(format!(
                    "{kind} {} from {} up: refused: {why}",
                    test.name,
                    size_text(size)
                ));
            }
            Err(UcxFailure::Failed(why)) => {
                state.dead = true;
                self.peers.missing.push(format!(
                    "{kind} {} at {}: failed: {why} (not run at other sizes)",
                    test.name,
                    size_text(size)
                ));
            }
        }
    }

    /// One server and client pair: `test` at `size` with `layout` (UCT only).
    fn run_one(
        &mut self,
        test: UcxTest,
        size: usize,
        layout: Option<&'static str>,
    ) -> Result<PeerResult, UcxFailure> {
        let guess = per_iteration(self.kind, test.pingpong, size) * self.slowdown;
        let (iters, warmup) = ucx_iterations(guess, self.budget);
        // A free port can be taken by someone else before the server binds it: one retry.
        let mut tries = 0;
        let (server, port) = loop {
            tries += 1;
            let port = free_port().map_err(UcxFailure::Failed)?;
            let mut cmd = self.command(test);
            cmd.args(["-p", &port.to_string()]);
            if let Some((server_cpu, _)) = self.cpus {
                cmd.args(["-c", &server_cpu.to_string()]);
            }
            match start_server(cmd, port, "ucx_perftest") {
                Ok(server) => break (server, port),
                Err(e) if tries >= 2 => return Err(UcxFailure::Failed(e)),
                Err(_) => {}
            }
        };
        let mut cmd = self.command(test);
        cmd.arg("127.0.0.1").args(["-p", &port.to_string()]);
        cmd.args(["-t", test.name, "-s", &size.to_string()]);
        cmd.args(["-n", &iters.to_string(), "-w", &warmup.to_string()]);
        if let Some((_, client_cpu)) = self.cpus {
            cmd.args(["-c", &client_cpu.to_string()]);
        }
        if test.uct {
            cmd.args(self.kind.uct_args());
        }
        if let Some(layout) = layout {
            cmd.args(["-D", layout]);
        }
        let expected = guess * (iters + warmup) as f64;
        // Ten times what it should take, but not long past the transport's time limit.
        let limit = (Duration::from_secs(5) + Duration::from_secs_f64(expected.min(1e3) * 10.0))
            .min(self.stop_at.saturating_duration_since(Instant::now()) + Duration::from_secs(1));
        let started = Instant::now();
        let client = Proc::spawn(cmd, "ucx_perftest").map_err(UcxFailure::Failed)?;
        let (status, text) = client.finish(started + limit);
        let took = started.elapsed().as_secs_f64();
        // The server ends with the test; a little grace, then it is killed.
        let (_, server_text) = server.finish(Instant::now() + Duration::from_millis(500));
        let (fin, stopped) = match status {
            // Stopped at its time limit: the figures so far, if it printed any.
            None => match parse_ucx_progress(&text) {
                Ok(fin) => (fin, true),
                Err(_) => {
                    return Err(UcxFailure::Failed(format!(
                        "no result within {:.1} s, stopped (a busy machine?)",
                        limit.as_secs_f64()
                    )))
                }
            },
            Some(status) if !status.success() => {
                let all = format!("{text}\n{server_text}");
                let why = error_line(&all);
                return Err(if ucx_refused(&all) {
                    UcxFailure::Refused(why)
                } else {
                    UcxFailure::Failed(format!("{why} ({status})"))
                });
            }
            Some(_) => (parse_ucx_final(&text).map_err(UcxFailure::Failed)?, false),
        };
        // The time per iteration as UCX measured it (without its start and connection).
        let per_iter = if test.pingpong {
            2.0 * fin.lat_overall_us * 1e-6
        } else if fin.msgrate_overall > 0.0 {
            1.0 / fin.msgrate_overall
        } else {
            took / (iters + warmup) as f64
        };
        self.slowdown = (per_iter / per_iteration(self.kind, test.pingpong, size)).clamp(1.0, 1e4);
        let api = if test.uct {
            let [_, tl, _, dev] = self.kind.uct_args();
            format!("UCT {tl}/{dev}, {}", layout.unwrap_or("short"))
        } else {
            let env: Vec<String> = self
                .kind
                .ucp_env()
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!("UCP {}", env.join(" "))
        };
        let mut result = PeerResult {
            kind: self.kind,
            test: test.name,
            size,
            actual_size: size,
            p50_us: None,
            p99_us: None,
            mean_us: None,
            gbps: None,
            msgs_per_s: None,
            detail: if stopped {
                format!(
                    "{api}, stopped at its time limit after {} of {iters} iterations",
                    fin.iterations
                )
            } else {
                format!("{api}, {} iterations", fin.iterations)
            },
        };
        if test.pingpong {
            result.p50_us = Some(fin.lat_typical_us);
            result.mean_us = Some(fin.lat_overall_us);
        } else {
            result.gbps = Some(fin.bw_overall_mib * MIB / 1e9);
            result.msgs_per_s = Some(fin.msgrate_overall);
        }
        Ok(result)
    }

    /// `ucx_perftest` with the environment of `test` on this transport (the user's UCX
    /// transport choices removed).
    fn command(&self, test: UcxTest) -> Command {
        let mut cmd = Command::new(self.exe);
        cmd.env_remove("UCX_TLS")
            .env_remove("UCX_NET_DEVICES")
            .env("UCX_WARN_UNUSED_ENV_VARS", "n");
        if !test.uct {
            cmd.envs(self.kind.ucp_env().iter().copied());
        }
        cmd
    }
}

/// The UCX runs, in order: each test at its first size (the smallest latency size, 1 MiB
/// or the largest bandwidth size), the message rate (tag_bw and am_bw at `rate_size`),
/// then every other size, each once.
fn ucx_jobs(lat: &[usize], bw: &[usize], rate_size: usize) -> Vec<(UcxTest, usize)> {
    let sorted = |sizes: &[usize]| {
        let mut v = sizes.to_vec();
        v.sort_unstable();
        v.dedup();
        v
    };
    let (lat, bw) = (sorted(lat), sorted(bw));
    let mut jobs: Vec<(UcxTest, usize)> = Vec::new();
    if let Some(&s) = lat.first() {
        jobs.extend(LAT_TESTS.iter().map(|&t| (t, s)));
    }
    if let Some(s) = key_bw(&bw) {
        jobs.extend(BW_TESTS.iter().map(|&t| (t, s)));
    }
    // The message rate: tag_bw (unless measured at that size anyway) and am_bw.
    jobs.push((BW_TESTS[1], rate_size));
    jobs.push((AM_BW, rate_size));
    for test in LAT_TESTS {
        jobs.extend(lat.iter().map(|&s| (test, s)));
    }
    for test in BW_TESTS {
        jobs.extend(bw.iter().map(|&s| (test, s)));
    }
    let mut seen = Vec::new();
    jobs.retain(|&(t, s)| {
        let new = !seen.contains(&(t.name, s));
        seen.push((t.name, s));
        new
    });
    jobs
}

/// Rough seconds per iteration (a round trip for ping-pongs), to size the runs.
fn per_iteration(kind: PeerKind, pingpong: bool, size: usize) -> f64 {
    let (base_ns, bytes_per_ns) = match (kind, pingpong) {
        (PeerKind::UcxTcp, true) => (10_000.0, 1.0),
        (PeerKind::UcxTcp, false) => (1_000.0, 1.0),
        (_, true) => (300.0, 3.0),
        (_, false) => (50.0, 3.0),
    };
    let one = base_ns + size as f64 / bytes_per_ns;
    (if pingpong { 2.0 * one } else { one }) * 1e-9
}

/// Timed and untimed iterations for about `budget` of measuring, `per_iteration` seconds
/// each.
fn ucx_iterations(per_iteration: f64, budget: Duration) -> (u64, u64) {
    let iters = (budget.as_secs_f64() / per_iteration.max(1e-9)) as u64;
    let iters = iters.clamp(10, 2_000_000);
    (iters, (iters / 10).clamp(2, 20_000))
}

/// `sizes` as `8 B, 64 B, 4 KiB`.
fn sizes_text(sizes: &[usize]) -> String {
    sizes
        .iter()
        .map(|&s| size_text(s))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `size` as `8 B`, `4 KiB`, `1 MiB`.
fn size_text(size: usize) -> String {
    if size >= 1 << 20 && size % (1 << 20) == 0 {
        format!("{} MiB", size >> 20)
    } else if size >= 1 << 10 && size % (1 << 10) == 0 {
        format!("{} KiB", size >> 10)
    } else {
        format!("{size} B")
    }
}

// ---------------------------------------------------------------------------------------
// sockperf.

/// sockperf's smallest message (its header).
const SOCKPERF_MIN: usize = 14;
/// sockperf's largest TCP message.
const SOCKPERF_MAX: usize = (1 << 20) - 1;
/// From a sockperf client's start of sleep to the start of the next client (which begins
/// its own sleep some 0.15 s later): each measures 1 s, 2 s after connecting. The next
/// connects while the last sleeps, and the one after once the last has finished (see
/// [`sockperf_all`]).
const SOCKPERF_PERIOD: Duration = Duration::from_millis(1600);

/// sockperf's one-way latency.
#[derive(Clone, Copy, Debug, PartialEq)]
struct SockperfLatency {
    p50_us: f64,
    p99_us: Option<f64>,
    mean_us: Option<f64>,
    observations: Option<u64>,
}

/// sockperf's throughput.
#[derive(Clone, Copy, Debug, PartialEq)]
struct SockperfThroughput {
    msgs_per_s: f64,
    /// Bytes per second.
    bytes_per_s: f64,
}

/// The number after `key` in `line` (ignoring `=` and spaces).
fn number_after(line: &str, key: &str) -> Option<f64> {
    let rest = line.get(line.find(key)? + key.len()..)?;
    let rest = rest.trim_start_matches(|c: char| c == '=' || c.is_whitespace());
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    rest.get(..end)?
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
}

/// Parses `sockperf ping-pong`'s percentiles (half round trips, µs, the default without
/// `--full-rtt`).
fn parse_sockperf_pp(text: &str) -> Result<SockperfLatency, String> {
    let text = strip_ansi(text);
    let mut p50 = None;
    let mut p99 = None;
    let mut mean = None;
    let mut observations = None;
    for line in text.lines() {
        if line.contains("percentile 50.000") || line.contains("<MEDIAN>") {
            p50 = p50.or(number_after(line, "="));
        } else if line.contains("percentile 99.000") {
            p99 = number_after(line, "=");
        } else if line.contains("Summary: Latency is") {
            mean = number_after(line, "Latency is");
        } else if line.contains("observations;") || line.contains("observations ") {
            observations = observations.or(number_after(line, "Total").map(|v| v as u64));
        }
    }
    match p50 {
        Some(p50_us) => Ok(SockperfLatency {
            p50_us,
            p99_us: p99,
            mean_us: mean,
            observations,
        }),
        None => Err(format!(
            "no median latency in sockperf's output ({})",
            error_line(&text)
        )),
    }
}

/// Parses `sockperf throughput`'s summary: message rate, and bandwidth in its MBps
/// (2^20 bytes per second).
fn parse_sockperf_tp(text: &str) -> Result<SockperfThroughput, String> {
    let text = strip_ansi(text);
    let rate = text
        .lines()
        .find_map(|l| number_after(l, "Message Rate is"));
    let bw = text.lines().find_map(|l| number_after(l, "BandWidth is"));
    match (rate, bw) {
        (Some(msgs_per_s), Some(mbps)) => Ok(SockperfThroughput {
            msgs_per_s,
            bytes_per_s: mbps * MIB,
        }),
        _ => Err(format!(
            "no message rate and bandwidth in sockperf's output ({})",
            error_line(&text)
        )),
    }
}

/// One sockperf client run.
#[derive(Clone, Copy, Debug)]
struct SockperfJob {
    pingpong: bool,
    size: usize,
    actual: usize,
}

/// A sockperf client running (with its server), and when it started sleeping.
struct Running {
    job: SockperfJob,
    server: Proc,
    client: Proc,
    sleeping_since: Instant,
}

/// The sizes sockperf runs at, and notes on what was changed or left out.
fn sockperf_jobs(
    sizes_lat: &[usize],
    sizes_bw: &[usize],
    rate_size: usize,
    quick: bool,
) -> (Vec<SockperfJob>, Vec<String>) {
    let mut notes = Vec::new();
    let fits = |s: &usize| *s <= SOCKPERF_MAX + 1;
    let mut lat: Vec<usize> = sizes_lat.iter().copied().filter(fits).collect();
    lat.sort_unstable();
    lat.dedup();
    let mut bw: Vec<usize> = sizes_bw.iter().copied().filter(fits).collect();
    bw.sort_unstable();
    bw.dedup();
    let mut too_big: Vec<usize> = sizes_lat
        .iter()
        .chain(sizes_bw)
        .copied()
        .filter(|s| !fits(s))
        .collect();
    too_big.sort_unstable();
    too_big.dedup();
    if !too_big.is_empty() {
        notes.push(format!(
            "sockperf: not run at {} (its messages are at most {SOCKPERF_MAX} B)",
            sizes_text(&too_big)
        ));
    }
    // Each run costs 1.8 s (the first 3.3 s): the smallest, middle and largest latency
    // sizes, the largest bandwidth size and the message rate (quick: the smallest latency
    // size only).
    let pp: Vec<usize> = if quick {
        lat.first().copied().into_iter().collect()
    } else {
        let mut pick: Vec<usize> = [lat.first(), lat.get(lat.len() / 2), lat.last()]
            .into_iter()
            .flatten()
            .copied()
            .collect();
        pick.dedup();
        pick
    };
    let mut tp: Vec<usize> = Vec::new();
    if !quick {
        tp.extend(bw.last().copied());
        if !tp.contains(&rate_size) {
            tp.insert(0, rate_size);
        }
    }
    let left_out: Vec<String> = lat
        .iter()
        .filter(|s| !pp.contains(s))
        .map(|&s| size_text(s))
        .collect();
    if !left_out.is_empty() {
        notes.push(format!(
            "sockperf: ping-pong not run at {} (each run costs ~2 s)",
            left_out.join(", ")
        ));
    }
    let left_out: Vec<String> = bw
        .iter()
        .filter(|s| !tp.contains(s))
        .map(|&s| size_text(s))
        .collect();
    if !left_out.is_empty() {
        notes.push(format!(
            "sockperf: throughput not run at {} (each run costs ~2 s)",
            left_out.join(", ")
        ));
    }
    let mut jobs = Vec::new();
    for (pingpong, sizes) in [(true, pp), (false, tp)] {
        for size in sizes {
            let actual = size.clamp(SOCKPERF_MIN, SOCKPERF_MAX);
            let note = format!(
                "sockperf: {actual} B messages stand for {}",
                size_text(size)
            );
            if actual != size && !notes.contains(&note) {
                notes.push(note);
            }
            jobs.push(SockperfJob {
                pingpong,
                size,
                actual,
            });
        }
    }
    (jobs, notes)
}

/// Runs sockperf's clients one after another, overlapping: a client connects, sends a
/// few messages, sleeps 2 s, then measures for 1 s (the first 0.4 s and last 0.05 s not
/// counted). The next client is started 1.6 s after the last began sleeping, so it
/// connects while the last sleeps and starts measuring after the last has finished; the
/// one after that is started only once the last has exited.
#[allow(clippy::too_many_arguments)]
fn sockperf_all(
    exe: &Path,
    sizes_lat: &[usize],
    sizes_bw: &[usize],
    rate_size: usize,
    quick: bool,
    cpus: Option<(usize, usize)>,
    peers: &mut Peers,
    progress: &Progress,
) {
    let (jobs, notes) = sockperf_jobs(sizes_lat, sizes_bw, rate_size, quick);
    peers.notes.extend(notes);
    let mut last: Option<Running> = None;
    for job in jobs {
        if let Some(running) = &last {
            let at = running.sleeping_since + SOCKPERF_PERIOD;
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
        }
        progress.start(format!(
            "peers: sockperf {} {}",
            if job.pingpong {
                "ping-pong"
            } else {
                "throughput"
            },
            size_text(job.size)
        ));
        let started = sockperf_start(exe, job, cpus);
        if let Some(running) = last.take() {
            sockperf_finish(running, peers);
        }
        match started {
            Ok(running) => last = Some(running),
            Err(why) => peers.missing.push(format!(
                "sockperf {} at {}: {why}",
                sockperf_test(job),
                size_text(job.size)
            )),
        }
    }
    if let Some(running) = last.take() {
        sockperf_finish(running, peers);
    }
}

fn sockperf_test(job: SockperfJob) -> &'static str {
    if job.pingpong {
        "pingpong"
    } else {
        "throughput"
    }
}

/// Starts a server and a client for `job`, and waits until the client has connected and
/// begun its warm-up sleep.
fn sockperf_start(
    exe: &Path,
    job: SockperfJob,
    cpus: Option<(usize, usize)>,
) -> Result<Running, String> {
    let port = free_port()?;
    let port_text = port.to_string();
    let mut cmd = Command::new(exe);
    cmd.args(["sr", "--tcp", "-i", "127.0.0.1", "-p", &port_text]);
    cmd.args(["-m", &SOCKPERF_MAX.to_string()]);
    let server = start_server(cmd, port, "sockperf")?;
    // sockperf has no affinity option: its processes are pinned once started (the
    // client before its warm-up sleep ends, well before it measures).
    if let Some((server_cpu, _)) = cpus {
        server.pin_to(server_cpu)?;
    }
    let mut cmd = Command::new(exe);
    cmd.arg(if job.pingpong { "pp" } else { "tp" });
    cmd.args(["--tcp", "-i", "127.0.0.1", "-p", &port_text]);
    cmd.args(["-m", &job.actual.to_string(), "-t", "1"]);
    let mut client = Proc::spawn(cmd, "sockperf")?;
    if let Some((_, client_cpu)) = cpus {
        client.pin_to(client_cpu)?;
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    if client.read_until(deadline, |t| t.contains("Warmup stage")) {
        Ok(Running {
            job,
            server,
            client,
            sleeping_since: Instant::now(),
        })
    } else {
        let (_, text) = client.finish(Instant::now());
        Err(format!("the client did not start: {}", error_line(&text)))
    }
}

/// Waits for a sockperf client to finish, records its figure, and stops its server.
fn sockperf_finish(running: Running, peers: &mut Peers) {
    let Running {
        job,
        server,
        client,
        sleeping_since,
    } = running;
    let (status, text) = client.finish(sleeping_since + Duration::from_secs(6));
    drop(server);
    let what = format!("sockperf {} at {}", sockperf_test(job), size_text(job.size));
    if status.is_none() {
        peers
            .missing
            .push(format!("{what}: no result within 6 s, stopped"));
        return;
    }
    let mut result = PeerResult {
        kind: PeerKind::Sockperf,
        test: sockperf_test(job),
        size: job.size,
        actual_size: job.actual,
        p50_us: None,
        p99_us: None,
        mean_us: None,
        gbps: None,
        msgs_per_s: None,
        detail: format!("TCP over 127.0.0.1, {} B messages, 1 s", job.actual),
    };
    if job.pingpong {
        match parse_sockperf_pp(&text) {
            Ok(lat) => {
                result.p50_us = Some(lat.p50_us);
                result.p99_us = lat.p99_us;
                result.mean_us = lat.mean_us;
                if let Some(n) = lat.observations {
                    result.detail.push_str(&format!(", {n} round trips"));
                }
            }
            Err(why) => return peers.missing.push(format!("{what}: {why}")),
        }
    } else {
        match parse_sockperf_tp(&text) {
            Ok(tp) => {
                result.gbps = Some(tp.bytes_per_s / 1e9);
                result.msgs_per_s = Some(tp.msgs_per_s);
            }
            Err(why) => return peers.missing.push(format!("{what}: {why}")),
        }
    }
    peers.results.push(result);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `UCX_TLS=shm ucx_perftest 127.0.0.1 -t tag_lat -s 8 -n 100000 -w 1000` (client).
    const UCX_TAG_LAT: &str = "\
+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |        latency (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
Final:                100000      0.090     0.093     0.093       82.17      82.17    10769952    10769952
";

    /// `ucx_perftest 127.0.0.1 -t put_bw -x posix -d memory -s 1048576 -n 2000 -w 100`.
    const UCX_PUT_BW: &str = "\
+--------------+--------------+------------------------------+---------------------+-----------------------+
|              |              |       overhead (usec)        |   bandwidth (MB/s)  |  message rate (msg/s) |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
Final:                  2000     36.542    37.907    37.907    26380.35   26380.35       26394       26394
";

    /// `ucx_perftest 127.0.0.1 -t am_lat -x posix -d memory -s 4096` (exit status 255).
    const UCX_REFUSED: &str = "\
+--------------+--------------+------------------------------+---------------------+-----------------------+
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
[1795248106.051764] [vm:1134 :0]         libperf.c:536  UCX  ERROR Message size (4096) is larger than max supported (100)
[1795248106.054540] [vm:1134 :0]    perftest_run.c:334  UCX  ERROR Failed to run test: Unsupported operation
";

    /// `sockperf pp --tcp -i 127.0.0.1 -p PORT -m 14 -t 1`.
    const SOCKPERF_PP: &str = "\
sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m
sockperf[CLIENT] send on:sockperf: using recvfrom() to block on socket(s)

[ 0] IP = 127.0.0.1       PORT = 23346 # TCP
sockperf: Warmup stage (sending a few dummy messages)...
sockperf: Starting test...
sockperf: Test end (interrupted by timer)
sockperf: Test ended
sockperf: [Total Run] RunTime=1.000 sec; Warm up time=400 msec; SentMessages=51400; ReceivedMessages=51399
sockperf: ========= Printing statistics for Server No: 0
sockperf: [Valid Duration] RunTime=0.550 sec; SentMessages=28866; ReceivedMessages=28866
sockperf: \x1b[2;35m====> avg-latency=9.517 (std-dev=42.659)\x1b[0m
sockperf: # dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0
sockperf: Summary: Latency is 9.517 usec
sockperf: \x1b[2;35mTotal 28866 observations\x1b[0m; each percentile contains 288.66 observations
sockperf: ---> <MAX> observation = 2657.758
sockperf: ---> percentile 99.999 = 2657.758
sockperf: ---> percentile 99.990 = 2147.931
sockperf: ---> percentile 99.900 =  228.602
sockperf: ---> percentile 99.000 =   15.012
sockperf: ---> percentile 90.000 =    8.490
sockperf: ---> percentile 75.000 =    8.220
sockperf: ---> percentile 50.000 =    7.904
sockperf: ---> percentile 25.000 =    7.864
sockperf: ---> <MIN> observation =    7.754
";

    /// `sockperf tp --tcp -i 127.0.0.1 -p PORT -m 65536 -t 1`.
    const SOCKPERF_TP: &str = "\
sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m
sockperf[CLIENT] send on:
[ 0] IP = 127.0.0.1       PORT = 23346 # TCP
sockperf: Warmup stage (sending a few dummy messages)...
sockperf: Starting test...
sockperf: Test end (interrupted by timer)
sockperf: Test ended
sockperf: Total of 34289 messages sent in 1.001 sec

sockperf: \x1b[2;35mNOTE: test was performed, using msg-size=65536. For getting maximum throughput consider using --msg-size=1472\x1b[0m
sockperf: Summary: Message Rate is 34261 [msg/sec], Packet Rate is about 1541745 [pkt/sec] (45 ip frags / msg)
sockperf: Summary: BandWidth is 2141.312 MBps (17130.500 Mbps)
";

    /// A sockperf client with no server.
    const SOCKPERF_REFUSED: &str = "\
sockperf: \x1b[2;35m== version #3.7-no.git == \x1b[0m
sockperf: ERROR: Can`t connect socket (errno=111 Connection refused)
";

    #[test]
    fn ucx_final_latency() {
        let f = parse_ucx_final(UCX_TAG_LAT).unwrap();
        assert_eq!(f.iterations, 100_000);
        assert_eq!(f.lat_typical_us, 0.090);
        assert_eq!(f.lat_overall_us, 0.093);
        assert_eq!(f.bw_overall_mib, 82.17);
        assert_eq!(f.msgrate_overall, 10_769_952.0);
    }

    #[test]
    fn ucx_final_bandwidth_in_gb_per_s() {
        let f = parse_ucx_final(UCX_PUT_BW).unwrap();
        assert_eq!(f.iterations, 2000);
        let gbps = f.bw_overall_mib * MIB / 1e9;
        assert!((gbps - 27.662).abs() < 0.001, "{gbps}");
        assert_eq!(f.msgrate_overall, 26394.0);
    }

    #[test]
    fn ucx_refusal_is_an_error_with_the_reason() {
        let e = parse_ucx_final(UCX_REFUSED).unwrap_err();
        assert!(e.contains("larger than max supported (100)"), "{e}");
        assert!(ucx_refused(UCX_REFUSED));
        assert_eq!(
            error_line(UCX_REFUSED),
            "Message size (4096) is larger than max supported (100)"
        );
        assert!(!ucx_refused(UCX_TAG_LAT));
    }

    /// Progress lines of `ucx_perftest 127.0.0.1 -t tag_lat -s 8 -n 20000000` on a busy
    /// machine (printed every second).
    const UCX_PROGRESS: &str = "\
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
[thread 0]            198688      0.186     2.575     2.575        2.96       2.96      388317      388317
[thread 0]            198775      0.191  5724.167     5.079        0.00       1.50         175      196872
[thread 0]            521672      0.186     1.574     3.864        4.85       1.97      635444      258809
";

    #[test]
    fn ucx_progress_of_a_stopped_run() {
        let f = parse_ucx_progress(UCX_PROGRESS).unwrap();
        assert_eq!(f.iterations, 521_672);
        assert_eq!(f.lat_typical_us, 0.186);
        assert_eq!(f.lat_overall_us, 3.864);
        assert_eq!(f.msgrate_overall, 258_809.0);
        assert!(parse_ucx_progress(UCX_TAG_LAT).is_err());
        assert!(parse_ucx_progress("[thread 0] 1 2 3").is_err());
        assert!(parse_ucx_progress("[thread 0 1 2 3 4 5 6 7 8").is_err());
    }

    #[test]
    fn ucx_malformed_final_lines() {
        for bad in [
            "",
            "Final: 100 0.1 0.1",
            "Final: 100 0.1 0.1 0.1 x 82.1 100 100",
            "Final: 100 0.1 0.1 0.1 82.1 82.1 100 100 7",
            "Final: 100 -0.1 0.1 0.1 82.1 82.1 100 100",
            "Final: 100 NaN 0.1 0.1 82.1 82.1 100 100",
        ] {
            assert!(parse_ucx_final(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sockperf_pingpong() {
        let l = parse_sockperf_pp(SOCKPERF_PP).unwrap();
        assert_eq!(l.p50_us, 7.904);
        assert_eq!(l.p99_us, Some(15.012));
        assert_eq!(l.mean_us, Some(9.517));
        assert_eq!(l.observations, Some(28866));
    }

    #[test]
    fn sockperf_median_spelled_median() {
        let l = parse_sockperf_pp("sockperf: ---> <MEDIAN> observation =    4.321\n").unwrap();
        assert_eq!(l.p50_us, 4.321);
        assert_eq!(l.p99_us, None);
    }

    #[test]
    fn sockperf_throughput() {
        let t = parse_sockperf_tp(SOCKPERF_TP).unwrap();
        assert_eq!(t.msgs_per_s, 34261.0);
        // 34261 messages of 64 KiB a second is 2141.3 MiB/s.
        assert!((t.bytes_per_s / 1e9 - 2.2453).abs() < 0.0001, "{t:?}");
        assert!((t.bytes_per_s - 34261.0 * 65536.0).abs() / t.bytes_per_s < 0.001);
    }

    #[test]
    fn sockperf_failures_are_errors_with_the_reason() {
        let e = parse_sockperf_pp(SOCKPERF_REFUSED).unwrap_err();
        assert!(e.contains("Connection refused"), "{e}");
        let e = parse_sockperf_tp(SOCKPERF_REFUSED).unwrap_err();
        assert!(e.contains("Connection refused"), "{e}");
        assert!(parse_sockperf_tp(SOCKPERF_PP).is_err());
        assert!(parse_sockperf_pp(SOCKPERF_TP).is_err());
        assert!(parse_sockperf_pp("percentile 50.000 = x").is_err());
        assert!(parse_sockperf_tp("Message Rate is 5 [msg/sec]").is_err());
    }

    #[test]
    fn sockperf_sizes() {
        let lat = [8, 64, 512, 4096, 65536, 1 << 20, 4 << 20];
        let bw = [64, 512, 4096, 65536, 1 << 20, 4 << 20];
        let (jobs, notes) = sockperf_jobs(&lat, &bw, 8, false);
        let pp: Vec<(usize, usize)> = jobs
            .iter()
            .filter(|j| j.pingpong)
            .map(|j| (j.size, j.actual))
            .collect();
        assert_eq!(pp, [(8, 14), (4096, 4096), (1 << 20, SOCKPERF_MAX)]);
        let tp: Vec<(usize, usize)> = jobs
            .iter()
            .filter(|j| !j.pingpong)
            .map(|j| (j.size, j.actual))
            .collect();
        assert_eq!(tp, [(8, 14), (1 << 20, SOCKPERF_MAX)]);
        assert!(notes.iter().any(|n| n.contains("4 MiB")), "{notes:?}");
        let (jobs, _) = sockperf_jobs(&lat, &bw, 8, true);
        assert_eq!(jobs.len(), 1);
        let (jobs, _) = sockperf_jobs(&[], &[], 8, true);
        assert!(jobs.is_empty());
    }

    #[test]
    fn ucx_order() {
        let lat = [4096, 8, 64];
        let bw = [64, 4 << 20, 1 << 20];
        let jobs: Vec<(&str, usize)> = ucx_jobs(&lat, &bw, 8)
            .iter()
            .map(|(t, s)| (t.name, *s))
            .collect();
        let first = [
            ("am_lat", 8),
            ("tag_lat", 8),
            ("put_lat", 8),
            ("put_bw", 1 << 20),
            ("tag_bw", 1 << 20),
            ("tag_bw", 8),
            ("am_bw", 8),
            ("am_lat", 64),
            ("am_lat", 4096),
            ("tag_lat", 64),
        ];
        assert_eq!(jobs.get(..first.len()), Some(&first[..]));
        assert_eq!(jobs.len(), 3 * 3 + 2 * 3 + 2);
        assert_eq!(jobs.last(), Some(&("tag_bw", 4 << 20)));
        assert!(ucx_jobs(&[], &[], 8).len() == 2);
    }

    #[test]
    fn iteration_counts_are_bounded() {
        for kind in [PeerKind::UcxShm, PeerKind::UcxTcp] {
            for pingpong in [true, false] {
                for size in [8, 4096, 4 << 20] {
                    let guess = per_iteration(kind, pingpong, size);
                    let (n, w) = ucx_iterations(guess, Duration::from_millis(60));
                    assert!((10..=2_000_000).contains(&n) && w >= 2 && w <= n, "{n} {w}");
                }
            }
        }
    }

    #[test]
    fn helpers() {
        assert_eq!(size_text(8), "8 B");
        assert_eq!(size_text(65536), "64 KiB");
        assert_eq!(size_text(4 << 20), "4 MiB");
        assert_eq!(size_text(1000), "1000 B");
        assert_eq!(strip_ansi("a\x1b[2;35mb\x1b[0mc"), "abc");
        assert_eq!(number_after("x = 1.5 y", "x"), Some(1.5));
        assert_eq!(number_after("x = y", "x"), None);
        assert_eq!(PeerKind::UcxShm.name(), "ucx-shm");
    }

    /// The whole measurement on this machine (needs ucx-utils and sockperf; ~5 s):
    /// `cargo test -p hamlyn-cli --release peers -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn measure_here() {
        let progress = Progress::new(1);
        let quick = std::env::var_os("PEERS_FULL").is_none();
        let started = Instant::now();
        let peers = measure(
            &[8, 64, 512, 4096, 65536, 1 << 20, 4 << 20],
            &[64, 512, 4096, 65536, 1 << 20, 4 << 20],
            8,
            quick,
            None,
            &progress,
        );
        progress.finish();
        for r in &peers.results {
            println!("{r:?}");
        }
        for m in &peers.missing {
            println!("missing: {m}");
        }
        for n in &peers.notes {
            println!("note: {n}");
        }
        println!("took {:?}", started.elapsed());
        assert!(!peers.results.is_empty());
    }
}
