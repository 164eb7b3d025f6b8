//! The `hamlyn` binary as a user runs it: a real daemon process, `stat` against it, a
//! clean stop on SIGTERM, and (reduced) `bench --quick` runs, through one engine and
//! through two engines over TCP, writing their JSON reports.
//!
//! Every wait is bounded; the only processes signalled or killed are the ones a test
//! started, by their pid.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../src/json.rs"]
mod json;

use json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_hamlyn");

/// A fresh directory for one test (removed on drop).
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("hamlyn-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test directory");
        TempDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process that is killed (by its pid) if the test ends before it does.
struct Started(Child);

impl Started {
    /// Waits at most `limit` for the process to exit.
    fn wait_for(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Runs `hamlyn ARGS` to completion within `limit`, capturing its output.
fn run(args: &[&str], limit: Duration) -> Output {
    let child = Command::new(BIN)
        .args(args)
        .env_remove("HAMLYN_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start hamlyn");
    let pid = child.id();
    // Reading the pipes to the end is what waits; a watchdog kills the process (by its
    // pid, which stays ours until it is reaped below) if it overruns.
    let done = std::sync::Arc::new(hamlyn_shm::sync::AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + limit;
            while Instant::now() < deadline {
                if done.load(std::sync::atomic::Ordering::Acquire) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
            true
        })
    };
    let out = child.wait_with_output().expect("wait for hamlyn");
    done.store(true, std::sync::atomic::Ordering::Release);
    let killed = watchdog.join().expect("watchdog");
    assert!(
        !killed,
        "`hamlyn {}` took longer than {limit:?}",
        args.join(" ")
    );
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn wait_for_path(p: &Path, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if p.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn node_daemon_answers_stat_and_stops_cleanly_on_sigterm() {
    let dir = TempDir::new("node");
    let socket = dir.path("node.sock");
    let sock = socket.to_str().expect("utf-8 path");
    let mut node = Started(
        Command::new(BIN)
            .args(["node", "--socket", sock, "--node-id", "7"])
            .env_remove("HAMLYN_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start hamlyn node"),
    );
    assert!(
        wait_for_path(&socket, Duration::from_secs(10)),
        "the daemon never bound its socket"
    );

    let out = run(
        &["stat", "--socket", sock, "--json"],
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "stat --json: {}", text(&out.stderr));
    let stats = json::parse(text(&out.stdout).trim()).expect("stat --json prints JSON");
    assert_eq!(stats.get("node").and_then(Value::as_u64), Some(7));
    assert!(stats.get("incarnation").and_then(Value::as_u64).is_some());
    assert!(stats.get("slots").and_then(Value::as_array).is_some());

    let out = run(&["stat", "--socket", sock], Duration::from_secs(20));
    assert!(out.status.success(), "stat: {}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.starts_with("node 7, incarnation "), "{table}");
    assert!(table.contains("messages delivered"), "{table}");

    let pid = rustix::process::Pid::from_child(&node.0);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let status = node
        .wait_for(Duration::from_secs(10))
        .expect("the daemon exits within 10 s of SIGTERM");
    let mut log = String::new();
    if let Some(mut e) = node.0.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut log);
    }
    assert!(status.success(), "exit status {status}; log:\n{log}");
    assert!(!socket.exists(), "the socket is removed on the way out");
    assert!(log.contains("engine ready"), "the daemon logs; got:\n{log}");
}

#[test]
fn stat_without_a_daemon_fails_with_a_clear_message() {
    let dir = TempDir::new("nodaemon");
    let socket = dir.path("absent.sock");
    let out = run(
        &["stat", "--socket", socket.to_str().expect("utf-8 path")],
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("no engine at"), "{err}");
}

/// Runs `hamlyn bench --smoke --json FILE` with `extra` arguments in `dir`; returns the
/// table printed and the parsed report.
fn bench_smoke(dir: &TempDir, extra: &[&str]) -> (String, Value) {
    let report = dir.path("bench.json");
    let mut args = vec![
        "bench",
        "--smoke",
        "--json",
        report.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    let out = run(&args, Duration::from_secs(240));
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "bench {extra:?}: {}\n{stdout}",
        text(&out.stderr)
    );
    let v = json::parse(&std::fs::read_to_string(&report).expect("the report exists"))
        .expect("the report is JSON");
    (stdout, v)
}

fn positive(x: Option<&Value>) -> bool {
    x.and_then(Value::as_f64).is_some_and(|f| f > 0.0)
}

const LATENCY_SIZES: [u64; 7] = [8, 64, 512, 4096, 65536, 1 << 20, 4 << 20];
const BANDWIDTH_SIZES: [u64; 6] = [64, 512, 4096, 65536, 1 << 20, 4 << 20];

/// The (op, size) rows a mode must report, in the order measured.
fn expected_rows(mode: &str) -> Vec<(String, u64)> {
    let mut rows = Vec::new();
    for op in ["polled_write", "tagged_write", "datagram"] {
        rows.extend(LATENCY_SIZES.map(|s| (op.to_string(), s)));
    }
    if mode != "direct" {
        rows.extend(LATENCY_SIZES.map(|s| ("read".to_string(), s)));
        rows.push(("fetch_add".to_string(), 8));
    }
    rows.extend(BANDWIDTH_SIZES.map(|s| ("bandwidth".to_string(), s)));
    rows.push(("msg_rate".to_string(), 8));
    rows
}

/// Checks the report's shape: the floor's common keys, and every result row of `modes`
/// with positive figures where they apply and nulls elsewhere, in the documented order.
fn check_report(v: &Value, modes: &[&str]) {
    let top: Vec<&str> = v
        .as_object()
        .expect("an object")
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(
        top,
        ["floor", "results", "loopback", "fairness", "scaling", "peers", "targets"]
    );
    let floor = v.get("floor").expect("floor");
    assert!(positive(floor.get("shm_pingpong_oneway_us")));
    let memcpy = floor.get("memcpy_gbps").expect("memcpy_gbps");
    for size in BANDWIDTH_SIZES {
        assert!(
            positive(memcpy.get(&size.to_string())),
            "memcpy_gbps[{size}]"
        );
    }

    let results = v.get("results").and_then(Value::as_array).expect("results");
    let mut seen: Vec<(String, String, u64)> = Vec::new();
    for r in results {
        let mode = r.get("mode").and_then(Value::as_str).expect("mode");
        let op = r.get("op").and_then(Value::as_str).expect("op");
        let size = r.get("size").and_then(Value::as_u64).expect("size");
        let (fields, nulls): (&[&str], &[&str]) = match op {
            "tagged_write" | "polled_write" | "datagram" | "read" | "fetch_add" => {
                (&["p50_us", "p99_us", "p999_us"], &["gbps", "msgs_per_s"])
            }
            "bandwidth" => (&["gbps"], &["p50_us", "p99_us", "p999_us", "msgs_per_s"]),
            "msg_rate" => (&["msgs_per_s"], &["p50_us", "p99_us", "p999_us", "gbps"]),
            other => panic!("unknown op {other:?}"),
        };
        for f in fields {
            assert!(
                positive(r.get(f)),
                "{mode} {op} {size}: {f} must be positive"
            );
        }
        for f in nulls {
            assert_eq!(
                r.get(f),
                Some(&Value::Null),
                "{mode} {op} {size}: {f} must be null"
            );
        }
        seen.push((mode.to_string(), op.to_string(), size));
    }
    let expect: Vec<(String, String, u64)> = modes
        .iter()
        .flat_map(|m| {
            expected_rows(m)
                .into_iter()
                .map(|(op, size)| (m.to_string(), op, size))
        })
        .collect();
    assert_eq!(seen, expect);
}

#[test]
fn bench_smoke_measures_every_mode_and_writes_json_and_plots() {
    let dir = TempDir::new("bench");
    let plots = dir.path("plots");
    let (stdout, v) = bench_smoke(&dir, &["--plot", plots.to_str().expect("utf-8 path")]);
    for want in [
        "floor",
        "tagged write",
        "write, polled",
        "datagram",
        "read (RTT)",
        "fetch-add (RTT)",
        "bandwidth",
        "message rate",
        "÷ floor",
        "raw TCP",
        "Fairness",
        "Jain's index",
        "Scaling",
        "Targets",
    ] {
        assert!(stdout.contains(want), "{want:?} missing from\n{stdout}");
    }
    check_report(&v, &["direct", "mediated", "tcp"]);
    let tcp = v
        .get("floor")
        .and_then(|f| f.get("tcp_floor"))
        .expect("floor.tcp_floor");
    for key in [
        "pingpong_oneway_us",
        "pingpong_blocking_oneway_us",
        "pingpong_spinning_oneway_us",
    ] {
        let by_size = tcp.get(key).expect(key);
        for size in LATENCY_SIZES {
            assert!(positive(by_size.get(&size.to_string())), "{key}[{size}]");
        }
    }
    for key in [
        "stream_gbps",
        "stream_blocking_gbps",
        "stream_spinning_gbps",
    ] {
        let by_size = tcp.get(key).expect(key);
        for size in BANDWIDTH_SIZES {
            assert!(positive(by_size.get(&size.to_string())), "{key}[{size}]");
        }
    }
    assert!(positive(
        tcp.get("stream_msgs_per_s").and_then(|r| r.get("8"))
    ));

    let loopback = v
        .get("loopback")
        .and_then(Value::as_array)
        .expect("loopback");
    assert_eq!(loopback.len(), 1);
    assert!(positive(loopback[0].get("p50_us")));

    // Fairness: every terminus got a share, and the index is one of a real share.
    let fairness = v
        .get("fairness")
        .and_then(Value::as_array)
        .expect("fairness");
    assert_eq!(fairness.len(), 2);
    for f in fairness {
        let shares = f
            .get("per_terminus_gbps")
            .and_then(Value::as_array)
            .expect("shares");
        assert_eq!(shares.len(), 4);
        assert!(shares.iter().all(|g| positive(Some(g))), "{shares:?}");
        let jain = f.get("jain").and_then(Value::as_f64).expect("jain");
        assert!((0.25..=1.0).contains(&jain), "Jain's index {jain}");
    }
    // Scaling: every point of both series, with the idle state they name.
    let points = v
        .get("scaling")
        .and_then(|s| s.get("points"))
        .and_then(Value::as_array)
        .expect("scaling.points");
    let named: Vec<(u64, u64)> = points
        .iter()
        .map(|p| {
            assert!(positive(p.get("p50_us")));
            (
                p.get("ports").and_then(Value::as_u64).expect("ports"),
                p.get("slots").and_then(Value::as_u64).expect("slots"),
            )
        })
        .collect();
    assert!(
        named.contains(&(1, 0)) && named.contains(&(1, 1)),
        "{named:?}"
    );
    assert_eq!(v.get("peers"), Some(&Value::Null), "only with --peers");
    let targets = v.get("targets").and_then(Value::as_array).expect("targets");
    assert!(targets.len() >= 5, "{targets:?}");

    for (name, line) in [
        ("latency.svg", "Hamlyn mediated"),
        ("latency-polled.svg", "Hamlyn direct"),
        ("bandwidth.svg", "Hamlyn tcp"),
        ("latency-direct.svg", "tagged write"),
        ("latency-mediated.svg", "fetch-add"),
        ("latency-tcp.svg", "read"),
    ] {
        let svg = std::fs::read_to_string(plots.join(name)).expect(name);
        assert!(svg.starts_with("<svg"), "{name}");
        assert!(svg.contains(line), "{name} has the line {line:?}");
    }
}

#[test]
fn bench_of_one_mode_measures_only_that_mode() {
    let dir = TempDir::new("bench-mediated");
    let (_, v) = bench_smoke(&dir, &["--modes", "mediated", "--no-extras"]);
    check_report(&v, &["mediated"]);
    let floor = v.get("floor").expect("floor");
    assert_eq!(
        floor.get("tcp_floor"),
        None,
        "raw TCP only with the tcp mode"
    );
    assert_eq!(
        v.get("fairness").and_then(Value::as_array).map(|a| a.len()),
        Some(0)
    );
    assert_eq!(v.get("scaling"), Some(&Value::Null));
}

#[test]
fn bench_refuses_options_that_do_not_apply() {
    let out = run(
        &["bench", "--smoke", "--modes", "mediated", "--rails", "2"],
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("tcp mode"),
        "{}",
        text(&out.stderr)
    );
    let out = run(
        &["bench", "--smoke", "--modes", "mediated,bogus"],
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("bogus"), "{}", text(&out.stderr));
}
