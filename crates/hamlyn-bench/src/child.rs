//! The driver's handle on the peer process: spawn it, send commands, read answers with a
//! time limit, and make sure it is gone at the end.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::error::BenchError;

/// The running peer process.
#[derive(Debug)]
pub struct PeerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<std::io::Result<String>>,
}

impl PeerProcess {
    /// Starts `hamlyn bench-peer` (this same executable, with [`crate::PEER_COMMAND`])
    /// with `args`.
    pub fn spawn(args: &[String]) -> Result<PeerProcess, BenchError> {
        let exe = std::env::current_exe().map_err(|e| BenchError::io("finding this program", e))?;
        let mut child = Command::new(exe)
            .arg(crate::PEER_COMMAND)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| BenchError::io("starting the bench peer process", e))?;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or(BenchError::Peer("no pipe from the peer".into()))?;
        let (tx, lines) = mpsc::channel();
        // Reads the peer's answers so that the driver can wait for them with a time limit.
        // It ends when the peer closes its output (exit), or when the driver is gone.
        std::thread::Builder::new()
            .name("bench-peer-reader".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let end = line.is_err();
                    if tx.send(line).is_err() || end {
                        break;
                    }
                }
            })
            .map_err(|e| BenchError::io("starting the reader thread", e))?;
        Ok(PeerProcess {
            child,
            stdin,
            lines,
        })
    }

    /// The peer's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Sends one command line.
    pub fn send(&mut self, line: &str) -> Result<(), BenchError> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or(BenchError::Peer("its input is closed".into()))?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| BenchError::io("sending a command to the bench peer", e))
    }

    /// Waits at most `timeout` for an answer starting with `word`; returns the rest of
    /// the line. An `error` answer, another answer, or the peer's exit is an error.
    pub fn expect(&mut self, word: &str, timeout: Duration) -> Result<String, BenchError> {
        match self.lines.recv_timeout(timeout) {
            Ok(Ok(line)) => {
                let (w, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
                if w == word {
                    Ok(rest.to_string())
                } else if w == "error" {
                    Err(BenchError::Peer(rest.to_string()))
                } else {
                    Err(BenchError::Peer(format!(
                        "answered {line:?} where {word:?} was expected"
                    )))
                }
            }
            Ok(Err(e)) => Err(BenchError::io("reading the bench peer's answer", e)),
            Err(RecvTimeoutError::Timeout) => Err(BenchError::Timeout(timeout, "the bench peer")),
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.reap(Duration::from_secs(1));
                Err(BenchError::Peer(format!("exited ({status})")))
            }
        }
    }

    /// Waits at most `limit` for the peer to exit, killing it if it does not; describes
    /// how it ended.
    fn reap(&mut self, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.to_string(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(None) => {
                    // Our own child, by its handle: nothing else is touched.
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return "killed: it did not exit in time".into();
                }
                Err(e) => return format!("unknown: {e}"),
            }
        }
    }

    /// Tells the peer to quit and waits for it; an unsuccessful exit is an error.
    pub fn finish(mut self) -> Result<(), BenchError> {
        let _ = self.send("quit");
        self.stdin = None;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) if s.success() => return Ok(()),
                Ok(Some(s)) => return Err(BenchError::Peer(format!("exited ({s})"))),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(None) => return Err(BenchError::Peer("did not exit after `quit`".into())),
                Err(e) => return Err(BenchError::io("waiting for the bench peer", e)),
            }
        }
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        // Closing its input ends the peer's command loop; if it is stuck, kill it.
        self.stdin = None;
        if let Ok(None) = self.child.try_wait() {
            self.reap(Duration::from_secs(2));
        }
    }
}
