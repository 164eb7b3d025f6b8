//! What the tests of the `hamlyn` binary share: a temporary directory, and running the
//! binary to completion within a time limit.

#![allow(dead_code)] // each test crate uses part of it

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_hamlyn");

/// A fresh directory for one test (removed on drop).
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("hamlyn-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test directory");
        TempDir(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `hamlyn ARGS` to completion within `limit`, capturing its output.
pub fn run(args: &[&str], limit: Duration) -> Output {
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

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
