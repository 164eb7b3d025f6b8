//! `hamlyn run -n P -- PROGRAM ARGS`: starts a parallel job of P processes on this node,
//! each told its rank, the job's size and name (`HAMLYN_RANK`, `HAMLYN_SIZE`,
//! `HAMLYN_JOB`) and its engine (`HAMLYN_SOCKET`), as `mpirun` does; the `hamlyn-job`
//! crate reads them. The engine is a running `hamlyn node` (`--socket` or
//! `$HAMLYN_SOCKET`), or, when neither is given, one this command runs for the job.
//! If a process fails, the others are stopped and the job fails.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use hamlyn_engine::{EngineConfig, EngineHandle};
use hamlyn_shm::sync::{AtomicBool, Ordering};

use crate::socket::SOCKET_ENV;

/// `hamlyn run` arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Processes to start (ranks 0..P).
    #[arg(short = 'n', long = "np", value_name = "P")]
    pub processes: u32,
    /// The engine's control socket (a running `hamlyn node`). Default: an engine this
    /// command runs for the job.
    #[arg(long, value_name = "PATH", env = SOCKET_ENV)]
    pub socket: Option<PathBuf>,
    /// The job's name in the registry (default: made up from this process's id and the
    /// clock, so jobs never meet).
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,
    /// The program and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    pub command: Vec<String>,
}

/// Why a job failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Zero processes.
    #[error("a job needs at least one process")]
    Empty,
    /// The engine for the job could not start.
    #[error("cannot start the job's engine: {0}")]
    Engine(#[from] hamlyn_engine::EngineError),
    /// A process could not be started.
    #[error("cannot start rank {rank} ({program}): {source}")]
    Spawn {
        /// Its rank.
        rank: u32,
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// A process failed; the others were stopped.
    #[error("rank {rank} failed ({status}); the job was stopped")]
    RankFailed {
        /// Its rank.
        rank: u32,
        /// How it ended.
        status: ExitStatus,
    },
    /// Interrupted; the processes were stopped.
    #[error("interrupted; the job was stopped")]
    Interrupted,
    /// The interrupt handler could not be installed.
    #[error("cannot install the SIGINT/SIGTERM handler: {0}")]
    Signal(String),
}

/// Runs the job to its end.
pub fn run(args: RunArgs) -> Result<(), RunError> {
    if args.processes == 0 {
        return Err(RunError::Empty);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || {
        // Release: pairs with the Acquire load in the wait loop.
        flag.store(true, Ordering::Release);
    })
    .map_err(|e| RunError::Signal(e.to_string()))?;
    // The job's own engine, unless one was named.
    let (socket, engine) = match args.socket {
        Some(s) => (s, None),
        None => {
            let path = std::env::temp_dir().join(format!("hamlyn-run-{}.sock", std::process::id()));
            let engine = EngineHandle::start(EngineConfig::daemon(&path))?;
            (path, Some(engine))
        }
    };
    let job = args.job.unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        format!(
            "run-{}-{}",
            std::process::id(),
            t.as_nanos() % 1_000_000_000
        )
    });
    let (program, rest) = match args.command.split_first() {
        Some(p) => p,
        None => return Err(RunError::Empty),
    };
    let mut children: Vec<(u32, Child)> = Vec::new();
    let outcome = (|| {
        for rank in 0..args.processes {
            let child = Command::new(program)
                .args(rest)
                .env("HAMLYN_RANK", rank.to_string())
                .env("HAMLYN_SIZE", args.processes.to_string())
                .env("HAMLYN_JOB", &job)
                .env(SOCKET_ENV, &socket)
                .spawn()
                .map_err(|source| RunError::Spawn {
                    rank,
                    program: program.clone(),
                    source,
                })?;
            children.push((rank, child));
        }
        wait_all(&mut children, &stop)
    })();
    // Whatever happened, no process of the job outlives it.
    for (_, child) in &mut children {
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    if let Some(engine) = engine {
        let _ = engine.stop();
    }
    outcome
}

/// Waits for every process; the first failure (or an interrupt) ends the wait.
fn wait_all(children: &mut [(u32, Child)], stop: &AtomicBool) -> Result<(), RunError> {
    let mut running = children.len();
    while running > 0 {
        // Acquire: pairs with the signal handler's Release store.
        if stop.load(Ordering::Acquire) {
            return Err(RunError::Interrupted);
        }
        running = 0;
        for (rank, child) in children.iter_mut() {
            match child.try_wait() {
                Ok(Some(status)) if !status.success() => {
                    return Err(RunError::RankFailed {
                        rank: *rank,
                        status,
                    })
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => running += 1,
            }
        }
        if running > 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Ok(())
}
