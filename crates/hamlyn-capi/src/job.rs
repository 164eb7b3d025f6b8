//! Parallel jobs (hamlyn-job): a process learns its rank and the job's size from whoever
//! started it (`hamlyn run -n P`, Slurm, PMI, Open MPI), waits at barriers, and
//! all-gathers seeds (as text) through the registry.

use std::ffi::c_char;

use ::hamlyn_job::{Job, JobError, Launch, Launcher};
use hamlyn::Node;

use crate::{
    free_box, guard, hamlyn_node, hamlyn_result, handle, lock, non_null, put, remember, text,
    text_out, Life,
};

/// `hamlyn_job_launcher`: nobody started the process as part of a job (a job of one).
pub const HAMLYN_LAUNCHER_ALONE: u32 = 0;
/// `hamlyn_job_launcher`: `hamlyn run` (`HAMLYN_RANK`, `HAMLYN_SIZE`, `HAMLYN_JOB`).
pub const HAMLYN_LAUNCHER_HAMLYN: u32 = 1;
/// `hamlyn_job_launcher`: Slurm's `srun` (`SLURM_PROCID`, `SLURM_NTASKS`).
pub const HAMLYN_LAUNCHER_SLURM: u32 = 2;
/// `hamlyn_job_launcher`: a PMI launcher (`PMI_RANK`, `PMI_SIZE`).
pub const HAMLYN_LAUNCHER_PMI: u32 = 3;
/// `hamlyn_job_launcher`: Open MPI's `mpirun` (`OMPI_COMM_WORLD_RANK`,
/// `OMPI_COMM_WORLD_SIZE`).
pub const HAMLYN_LAUNCHER_OPENMPI: u32 = 4;

/// This process's place in a parallel job (`hamlyn_job_init`, `hamlyn_job_join`; freed
/// by `hamlyn_job_free`). Collective calls (barrier, all-gather) must be made by every
/// rank in the same order.
pub struct hamlyn_job {
    /// The node it was joined through, if any (`hamlyn_job_join`): freeing that node
    /// closes the job.
    life: Option<std::sync::Arc<Life>>,
    inner: std::sync::Mutex<JobInner>,
}

struct JobInner {
    job: Job,
    /// The seed texts of the last all-gather, by rank.
    gathered: Vec<String>,
}

// The handle is used from any thread: what it holds must be `Send`.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Job>();
};

impl From<JobError> for hamlyn_result {
    fn from(e: JobError) -> hamlyn_result {
        use hamlyn_result as R;
        let code = match &e {
            JobError::Hamlyn(_) | JobError::Send(_) => {
                let text = e.to_string();
                let code = match e {
                    JobError::Hamlyn(inner) => R::from(inner),
                    JobError::Send(inner) => R::from(inner),
                    _ => R::Refused,
                };
                return remember(code, &text);
            }
            JobError::Environment(_) => R::InvalidArgument,
            JobError::Failed { .. } => R::Rejected,
            JobError::Timeout { .. } => R::Timeout,
            JobError::BadSeed { .. } => R::BadSeed,
            _ => R::Refused,
        };
        remember(code, &e)
    }
}

impl hamlyn_job {
    fn with<T>(
        &self,
        f: impl FnOnce(&mut JobInner) -> Result<T, hamlyn_result>,
    ) -> Result<T, hamlyn_result> {
        if let Some(l) = &self.life {
            l.check()?;
        }
        f(&mut *lock(&self.inner)?)
    }
}

fn give(job: Job, life: Option<std::sync::Arc<Life>>, out: *mut *mut hamlyn_job) {
    let h = Box::into_raw(Box::new(hamlyn_job {
        life,
        inner: std::sync::Mutex::new(JobInner {
            job,
            gathered: Vec::new(),
        }),
    }));
    // SAFETY: `out` was checked non-NULL by the caller; C passes a writable pointer.
    unsafe { put(out, h) };
}

/// Joins the job this process was started in (rank and size from `hamlyn run`, Slurm,
/// PMI or Open MPI variables; a job of one when none are set), through the engine at
/// `HAMLYN_SOCKET` (or the default socket). Returns once every rank has joined
/// (`HAMLYN_RESULT_TIMEOUT` if one never does; `HAMLYN_JOB_TIMEOUT_MS` sets how long).
/// `HAMLYN_RESULT_INVALID_ARGUMENT` for launcher variables that make no sense.
///
/// # Safety
///
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_job_init(out: *mut *mut hamlyn_job) -> hamlyn_result {
    guard(|| {
        non_null(out)?;
        give(Job::init()?, None, out);
        Ok(())
    })
}

/// As `hamlyn_job_init`, through `node`'s engine (a connection of its own, with the
/// node's options); freeing `node` closes the job.
///
/// # Safety
///
/// `node` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_job_join(
    node: *const hamlyn_node,
    out: *mut *mut hamlyn_job,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let n = unsafe { handle(node) }?;
        let base = n.get()?;
        non_null(out)?;
        let own = Node::connect_with(base.socket_path(), base.options().clone())?;
        give(
            Job::join(Launch::from_env()?, own)?,
            Some(n.life.clone()),
            out,
        );
        Ok(())
    })
}

/// This process's rank, `0..size`.
///
/// # Safety
///
/// `job` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_job_rank(job: *const hamlyn_job, out: *mut u32) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let j = unsafe { handle(job) }?;
        non_null(out)?;
        let r = j.with(|i| Ok(i.job.rank()))?;
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, r) };
        Ok(())
    })
}

/// The number of processes in the job.
///
/// # Safety
///
/// `job` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_job_size(job: *const hamlyn_job, out: *mut u32) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let j = unsafe { handle(job) }?;
        non_null(out)?;
        let s = j.with(|i| Ok(i.job.size()))?;
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, s) };
        Ok(())
    })
}

/// Who started the process: `HAMLYN_LAUNCHER_*` (treat values not listed as unknown).
///
/// # Safety
///
/// `job` is NULL or live; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_job_launcher(
    job: *const hamlyn_job,
    out: *mut u32,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let j = unsafe { handle(job) }?;
        non_null(out)?;
        let l = j.with(|i| {
            Ok(match i.job.launch().launcher {
                Launcher::Alone => HAMLYN_LAUNCHER_ALONE,
                Launcher::Hamlyn => HAMLYN_LAUNCHER_HAMLYN,
                Launcher::Slurm => HAMLYN_LAUNCHER_SLURM,
                Launcher::Pmi => HAMLYN_LAUNCHER_PMI,
                Launcher::OpenMpi => HAMLYN_LAUNCHER_OPENMPI,
                _ => u32::MAX,
            })
        })?;
        // SAFETY: `out` is non-NULL and writable.
        unsafe { put(out, l) };
        Ok(())
    })
}

/// How long a collective call waits for the other ranks from now on (`timeout_ms` > 0).
///
/// # Safety
///
/// `job` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_job_set_timeout(
    job: *const hamlyn_job,
    timeout_ms: u64,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let j = unsafe { handle(job) }?;
        if timeout_ms == 0 {
            return Err(hamlyn_result::InvalidArgument);
        }
        j.with(|i| {
            i.job
                .set_timeout(std::time::Duration::from_millis(timeout_ms));
            Ok(())
        })
    })
}

/// Waits until every rank has called it (`HAMLYN_RESULT_TIMEOUT` if one does not within
/// the job's timeout: it died, or was never started).
///
/// # Safety
///
/// `job` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_job_barrier(job: *const hamlyn_job) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let j = unsafe { handle(job) }?;
        j.with(|i| Ok(i.job.barrier()?))
    })
}

/// All-gathers seeds: every rank gives the seed text `seed_text` (one or more tickets,
/// as `hamlyn_ticket_to_seed` or `hamlyn_seed_from_tickets` write it) and, once every
/// rank has, this one holds them all, in rank order: read them with
/// `hamlyn_job_gathered` (until the next all-gather). `HAMLYN_RESULT_BAD_SEED` if the
/// text does not decode (nothing is sent then).
///
/// # Safety
///
/// `job` is NULL or live; `seed_text` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_job_all_gather(
    job: *const hamlyn_job,
    seed_text: *const c_char,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let j = unsafe { handle(job) }?;
        // SAFETY: the function's contract.
        let s = unsafe { text(seed_text) }?;
        let seed = hamlyn::seed::from_text(s.trim()).map_err(|_| hamlyn_result::BadSeed)?;
        j.with(|i| {
            let all = i.job.all_gather(&seed)?;
            let texts = all
                .iter()
                .map(hamlyn::seed::to_text)
                .collect::<Result<Vec<_>, _>>()?;
            i.gathered = texts;
            Ok(())
        })
    })
}

/// Rank `rank`'s seed text from the last all-gather and a NUL, into `buf` (capacity
/// `cap`); `*out_needed` (may be NULL) is the length it needs, also written with
/// `HAMLYN_RESULT_BUFFER_TOO_SMALL`. `HAMLYN_RESULT_OUT_OF_RANGE` for a rank not in the
/// job, `HAMLYN_RESULT_STATE` before the first all-gather.
///
/// # Safety
///
/// `job` is NULL or live; `buf` is NULL or writable for `cap` bytes; `out_needed` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_job_gathered(
    job: *const hamlyn_job,
    rank: u32,
    buf: *mut c_char,
    cap: usize,
    out_needed: *mut usize,
) -> hamlyn_result {
    guard(|| {
        // SAFETY: the function's contract.
        let j = unsafe { handle(job) }?;
        let s = j.with(|i| {
            if i.gathered.is_empty() {
                return Err(hamlyn_result::State);
            }
            i.gathered
                .get(rank as usize)
                .cloned()
                .ok_or(hamlyn_result::OutOfRange)
        })?;
        // SAFETY: the function's contract.
        unsafe { text_out(&s, buf, cap, out_needed) }
    })
}

/// Leaves the job (NULL: nothing): its connection closes; the other ranks' collectives
/// that still need this one time out.
///
/// # Safety
///
/// `job` is NULL or live, not used after, and no call on it is running.
#[no_mangle]
pub unsafe extern "C" fn hamlyn_job_free(job: *mut hamlyn_job) {
    // SAFETY: the function's contract.
    unsafe { free_box(job) }
}
