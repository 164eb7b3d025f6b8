//! The engine's small public start API: an engine thread inside an application
//! (embedded), stopped when its handle is dropped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use hamlyn_shm::sync::{AtomicBool, Ordering};
use hamlyn_shm::wake::EventFd;

use crate::config::EngineConfig;
use crate::error::EngineError;
use crate::event_loop::Engine;
use crate::hosted::{self, Hosted};

/// A running engine thread. Dropping it stops the engine and waits for it.
#[derive(Debug)]
pub struct EngineHandle {
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    doorbell: EventFd,
    thread: Option<JoinHandle<Result<(), EngineError>>>,
}

impl EngineHandle {
    /// Binds the control socket and starts the engine on its own thread.
    pub fn start(cfg: EngineConfig) -> Result<EngineHandle, EngineError> {
        EngineHandle::start_with_fabric(cfg, None)
    }

    /// As [`EngineHandle::start`], with a fabric to other nodes.
    pub fn start_with_fabric(
        cfg: EngineConfig,
        fabric: Option<Box<dyn hamlyn_fabric::Fabric + Send>>,
    ) -> Result<EngineHandle, EngineError> {
        let socket = cfg.socket.clone();
        let driven = cfg.driven;
        let stop = Arc::new(AtomicBool::new(false));
        let (mut engine, mut io) = Engine::with_fabric(cfg, stop.clone(), fabric)?;
        engine.set_spin_unheld(driven);
        let fd = rustix::io::fcntl_dupfd_cloexec(engine.doorbell(), 0)
            .map_err(|e| EngineError::io("dup", e))?;
        let doorbell = EventFd::from_fd(fd);
        // The engine thread holds the only strong reference between drives: the engine
        // (its sockets, its clients' connections) ends with the thread.
        let hosted = Arc::new(Hosted::new(engine)?);
        if driven {
            hosted::register(&socket, &hosted);
        }
        let thread = std::thread::Builder::new()
            .name("hamlyn-engine".into())
            .spawn(move || hosted::run_engine_thread(&hosted, &mut io))
            .map_err(|e| EngineError::io("spawn engine thread", e))?;
        Ok(EngineHandle {
            socket,
            stop,
            doorbell,
            thread: Some(thread),
        })
    }

    /// Where clients connect.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// Stops the engine and returns how it ended.
    pub fn stop(mut self) -> Result<(), EngineError> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), EngineError> {
        // Release: pairs with the Acquire load of the stop flag in `Engine::run`.
        self.stop.store(true, Ordering::Release);
        let _ = self.doorbell.notify();
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(EngineError::Shm("engine thread panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        if let Err(e) = self.stop_and_join() {
            tracing::warn!(error = %e, "engine ended with an error");
        }
    }
}

/// Runs an engine on the calling thread until `stop` is set (the daemon). The process's
/// open-file limit is raised to its maximum first: every client costs the engine
/// descriptors (its socket, and one per area), which it divides among them.
pub fn run_daemon(cfg: EngineConfig, stop: Arc<AtomicBool>) -> Result<(), EngineError> {
    raise_fd_limit();
    let (engine, mut io) = Engine::new(cfg, stop)?;
    hosted::run_engine_thread(&Hosted::new(engine)?, &mut io)
}

/// Raises the soft open-file limit to the hard one (a daemon owns its process; an
/// embedded engine leaves its application's limits alone).
fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        let raised = Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => tracing::info!(limit = ?lim.maximum, "open-file limit raised"),
            Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
        }
    }
}

/// Runs an engine with a fabric to other nodes on the calling thread until `stop` is set.
pub fn run_daemon_with_fabric(
    cfg: EngineConfig,
    stop: Arc<AtomicBool>,
    fabric: Box<dyn hamlyn_fabric::Fabric + Send>,
) -> Result<(), EngineError> {
    raise_fd_limit();
    let (engine, mut io) = Engine::with_fabric(cfg, stop, Some(fabric))?;
    hosted::run_engine_thread(&Hosted::new(engine)?, &mut io)
}
