//! What the application tests share: starting the ranks of a job.
#![allow(clippy::unwrap_used, dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};

/// How a launcher tells a process its rank and the job's size (the variables
/// `hamlyn_job::Launch::from_env` reads).
#[derive(Clone, Copy, Debug)]
pub enum Launcher {
    /// `hamlyn run`: `HAMLYN_RANK`, `HAMLYN_SIZE`, `HAMLYN_JOB`.
    Hamlyn,
    /// Slurm's `srun`: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_JOB_ID`.
    Slurm,
    /// A PMI launcher: `PMI_RANK`, `PMI_SIZE`, `PMI_JOBID`.
    Pmi,
    /// Open MPI's `mpirun`: `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`,
    /// `OMPI_MCA_ess_base_jobid`.
    OpenMpi,
}

impl Launcher {
    fn vars(self) -> [&'static str; 3] {
        match self {
            Launcher::Hamlyn => ["HAMLYN_RANK", "HAMLYN_SIZE", "HAMLYN_JOB"],
            Launcher::Slurm => ["SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"],
            Launcher::Pmi => ["PMI_RANK", "PMI_SIZE", "PMI_JOBID"],
            Launcher::OpenMpi => [
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_MCA_ess_base_jobid",
            ],
        }
    }
}

/// Runs `bin ARGS` as `sockets.len()` ranks of job `job`, rank r attached to the engine at
/// `sockets[r]`, and waits for all of them to succeed.
pub fn run_ranks(bin: &str, args: &[String], sockets: &[&Path], job: &str) {
    run_ranks_as(Launcher::Hamlyn, bin, args, sockets, job);
}

/// [`run_ranks`], with rank and size in the variables `launcher` sets.
pub fn run_ranks_as(launcher: Launcher, bin: &str, args: &[String], sockets: &[&Path], job: &str) {
    let size = sockets.len().to_string();
    let [rank_var, size_var, job_var] = launcher.vars();
    let children: Vec<_> = sockets
        .iter()
        .enumerate()
        .map(|(r, socket)| {
            Command::new(bin)
                .args(args)
                .env_remove("HAMLYN_RANK")
                .env_remove("HAMLYN_SIZE")
                .env_remove("HAMLYN_JOB")
                .env(rank_var, r.to_string())
                .env(size_var, &size)
                .env(job_var, job)
                .env("HAMLYN_SOCKET", socket)
                .env("HAMLYN_JOB_TIMEOUT_MS", "120000")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(
            c.wait().unwrap().success(),
            "a rank of {job} ({launcher:?}) failed"
        );
    }
}
