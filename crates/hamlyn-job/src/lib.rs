//! Parallel jobs over Hamlyn (seed 004 §3.2's programs need one): a process learns its
//! rank and the job's size, synchronises with a barrier, and exchanges seeds with an
//! all-gather, all through the public API of `hamlyn` — the registry for names, a
//! fetch-and-add and notifications for the barrier.
//!
//! ```no_run
//! let mut job = hamlyn_job::Job::init()?;
//! println!("rank {} of {}", job.rank(), job.size());
//! job.barrier()?;
//! # Ok::<(), hamlyn_job::JobError>(())
//! ```
//!
//! Who starts the processes ([`Launch::from_env`]): `hamlyn run -n P -- PROGRAM` on one
//! node, or a launcher across machines that each run `hamlyn node` — Slurm's `srun`, a
//! PMI launcher, Open MPI's `mpirun` — whose rank and size variables are read.

mod barrier;
mod error;
mod gather;
mod job;
mod launch;

pub use error::JobError;
pub use job::Job;
pub use launch::{Launch, Launcher};
