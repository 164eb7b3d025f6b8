//! The `hamlyn` binary as a user runs it: a real daemon process, `stat` against it, and a
//! clean stop on SIGTERM (the benchmark's runs are in `bench.rs`).
//!
//! Every wait is bounded; the only processes signalled or killed are the ones a test
//! started, by their pid.

mod common;

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{run, text, TempDir, BIN};

use hamlyn_wire::stats::Stats;

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
    let json: serde_json::Value =
        serde_json::from_str(text(&out.stdout).trim()).expect("stat --json prints JSON");
    assert_eq!(json["node"].as_u64(), Some(7));
    assert!(json["incarnation"].as_u64().is_some());
    assert!(json["slots"].as_array().is_some());
    let stats: Stats = serde_json::from_str(text(&out.stdout).trim()).expect("the JSON of a Stats");
    assert_eq!(stats.node, 7);

    let out = run(&["stat", "--socket", sock], Duration::from_secs(20));
    assert!(out.status.success(), "stat: {}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.starts_with("node 7, incarnation "), "{table}");
    assert!(table.contains("messages delivered"), "{table}");

    // `hamlyn ping` is answered by the engine's resident `hamlyn.ping` handler, which
    // `hamlyn stat` then counts beside the handler table.
    let out = run(
        &[
            "ping",
            "--socket",
            sock,
            "-c",
            "2",
            "--interval-ms",
            "1",
            "7",
        ],
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "ping: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("2 of 2 answered"),
        "{}",
        text(&out.stdout)
    );
    let out = run(&["stat", "--socket", sock], Duration::from_secs(20));
    let table = text(&out.stdout);
    let ping_row = table
        .lines()
        .find(|l| l.contains("hamlyn.ping"))
        .unwrap_or_else(|| panic!("no handler table: {table}"));
    let cells: Vec<&str> = ping_row.split('|').map(str::trim).collect();
    assert_eq!(cells[1..4], ["0", "hamlyn.ping", "yes"], "{ping_row}");
    assert_eq!(cells[6], "2", "two pings answered: {ping_row}");

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

#[cfg(not(feature = "bench"))]
#[test]
fn bench_says_it_was_built_without_the_bench() {
    let out = run(&["bench", "--quick"], Duration::from_secs(20));
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("built without the benchmark"), "{err}");
}
