//! What the application tests share: starting the ranks of a job.
#![allow(clippy::unwrap_used, dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `bin ARGS` as `sockets.len()` ranks of job `job`, rank r attached to the engine at
/// `sockets[r]`, and waits for all of them to succeed.
pub fn run_ranks(bin: &str, args: &[String], sockets: &[&Path], job: &str) {
    let size = sockets.len().to_string();
    let children: Vec<_> = sockets
        .iter()
        .enumerate()
        .map(|(r, socket)| {
            Command::new(bin)
                .args(args)
                .env("HAMLYN_RANK", r.to_string())
                .env("HAMLYN_SIZE", &size)
                .env("HAMLYN_JOB", job)
                .env("HAMLYN_SOCKET", socket)
                .env("HAMLYN_JOB_TIMEOUT_MS", "120000")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a rank of {job} failed");
    }
}
