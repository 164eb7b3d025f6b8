//! Engines joined by the TCP fabric (two rails, authenticated links, loopback), the
//! registry on node 0, and endpoints served on threads of their own.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use hamlyn::Node;
use hamlyn_am::{Addr, AmEndpoint, AmOptions};
use hamlyn_engine::EngineHandle;

pub const WAIT: Duration = Duration::from_secs(30);

/// `n` engines over TCP with two rails, the registry on node 0.
pub fn cluster(n: usize) -> Vec<EngineHandle> {
    hamlyn_engine::cluster::tcp_engines(n, 2).unwrap()
}

/// An endpoint on the engine at `path`.
pub fn endpoint(path: &Path) -> AmEndpoint {
    AmEndpoint::new(Node::connect(path).unwrap(), AmOptions::default()).unwrap()
}

/// An endpoint served on its own thread: `setup` registers and synchs; then it polls
/// until told to stop, and hands back what `done` makes of it.
pub struct Served<T> {
    pub addr: Addr,
    cmds: mpsc::Sender<Cmd>,
    thread: JoinHandle<T>,
}

type Cmd = Option<Box<dyn FnOnce(&mut AmEndpoint) + Send>>;

pub fn serve<T: Send + 'static>(
    path: &Path,
    setup: impl FnOnce(&mut AmEndpoint) + Send + 'static,
    done: impl FnOnce(&mut AmEndpoint) -> T + Send + 'static,
) -> Served<T> {
    let path: PathBuf = path.to_path_buf();
    let (addr_tx, addr_rx) = mpsc::channel();
    let (cmds, cmd_rx) = mpsc::channel::<Cmd>();
    let thread = std::thread::spawn(move || {
        let mut ep = endpoint(&path);
        setup(&mut ep);
        addr_tx.send(ep.addr()).unwrap();
        loop {
            match cmd_rx.try_recv() {
                Ok(Some(f)) => f(&mut ep),
                Ok(None) | Err(mpsc::TryRecvError::Disconnected) => break,
                Err(mpsc::TryRecvError::Empty) => {}
            }
            ep.poll(Some(Duration::from_millis(5))).unwrap();
        }
        done(&mut ep)
    });
    let addr = addr_rx.recv_timeout(WAIT).unwrap();
    Served { addr, cmds, thread }
}

impl<T> Served<T> {
    /// Runs `f` on the endpoint's thread, between polls, and returns what it made.
    pub fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut AmEndpoint) -> R + Send + 'static,
    ) -> R {
        let (tx, rx) = mpsc::channel();
        self.cmds
            .send(Some(Box::new(move |ep| tx.send(f(ep)).unwrap())))
            .unwrap();
        rx.recv_timeout(WAIT).unwrap()
    }

    /// Runs `f` on the endpoint's thread, between polls, without waiting for it.
    pub fn post(&self, f: impl FnOnce(&mut AmEndpoint) + Send + 'static) {
        self.cmds.send(Some(Box::new(f))).unwrap();
    }

    pub fn finish(self) -> T {
        self.cmds.send(None).unwrap();
        self.thread.join().unwrap()
    }
}
