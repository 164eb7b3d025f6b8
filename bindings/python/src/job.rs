//! `hamlyn.Job` (crate hamlyn-job): a process's rank and size in a parallel job started
//! by `hamlyn run -n P -- PROGRAM`, Slurm, PMI or Open MPI; a barrier; an all-gather of
//! seeds.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hamlyn_job::{Job, JobError, Launch, Launcher};
use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::errors::{self, job_check};
use crate::node::PyNode;
use crate::Life;

/// A launcher's name.
fn launcher_name(l: Launcher) -> &'static str {
    match l {
        Launcher::Hamlyn => "hamlyn",
        Launcher::Slurm => "slurm",
        Launcher::Pmi => "pmi",
        Launcher::OpenMpi => "open_mpi",
        Launcher::Alone => "alone",
        _ => "unknown",
    }
}

/// One process of a parallel job: `Job.init()` joins the job this process was started
/// in (rank and size from `hamlyn run`'s `HAMLYN_RANK`/`HAMLYN_SIZE`, Slurm's
/// `SLURM_PROCID`/`SLURM_NTASKS`, PMI's `PMI_RANK`/`PMI_SIZE`, Open MPI's
/// `OMPI_COMM_WORLD_RANK`/`OMPI_COMM_WORLD_SIZE`; alone, a job of one) and returns once
/// every rank has. `barrier()` and `all_gather(seed)` wait without the GIL, up to the
/// job's timeout (`TimeoutError`). The job keeps its node's first notification queue
/// and terminus: give the application a node of its own.
#[pyclass(module = "hamlyn._hamlyn", name = "Job", frozen)]
pub struct PyJob {
    life: Arc<Life>,
    job: Mutex<Option<Job>>,
    rank: u32,
    size: u32,
    launcher: &'static str,
    name: String,
    /// The collectives' timeout in seconds, as last set.
    timeout: Mutex<f64>,
}

impl PyJob {
    fn new(life: Arc<Life>, job: Job, timeout: Duration) -> PyJob {
        let launch = job.launch().clone();
        PyJob {
            timeout: Mutex::new(timeout.as_secs_f64()),
            life,
            rank: launch.rank,
            size: launch.size,
            launcher: launcher_name(launch.launcher),
            name: launch.job,
            job: Mutex::new(Some(job)),
        }
    }

    /// Runs `f` on the job without the GIL.
    fn with_unlocked<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Job) -> Result<T, JobError> + Send,
    ) -> PyResult<T> {
        self.life.check()?;
        let mut g = crate::lock(py, &self.job)?;
        let j = g
            .as_mut()
            .ok_or_else(|| errors::closed("the job handle is closed"))?;
        job_check(py.allow_threads(|| f(j)))
    }
}

/// The collectives' timeout: `seconds`, else `$HAMLYN_JOB_TIMEOUT_MS`, else two
/// minutes (what `Job::join` reads).
fn job_timeout(seconds: Option<f64>) -> PyResult<Duration> {
    Ok(match crate::timeout(seconds)? {
        Some(t) => t,
        None => std::env::var("HAMLYN_JOB_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_secs(120), Duration::from_millis),
    })
}

#[pymethods]
impl PyJob {
    /// Joins the job this process was started in, through `node` (None: a connection to
    /// the engine at `$HAMLYN_SOCKET`, as `hamlyn run` sets it). Collectives wait up to
    /// `timeout` seconds (default: two minutes, or `$HAMLYN_JOB_TIMEOUT_MS`), joining
    /// too. `InvalidArgumentError` for launcher variables that make no sense.
    #[classmethod]
    #[pyo3(signature = (node=None, *, timeout=None))]
    fn init(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        node: Option<&PyNode>,
        timeout: Option<f64>,
    ) -> PyResult<PyJob> {
        let launch = job_check(Launch::from_env())?;
        Self::join_with(py, node, launch, timeout)
    }

    /// Joins job `job` as `rank` of `size` (no launcher: for programs that start their
    /// processes themselves), through `node` (None: `$HAMLYN_SOCKET`).
    #[classmethod]
    #[pyo3(signature = (rank, size, job="default", *, node=None, timeout=None))]
    fn join(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        rank: u32,
        size: u32,
        job: &str,
        node: Option<&PyNode>,
        timeout: Option<f64>,
    ) -> PyResult<PyJob> {
        let vars = [
            ("HAMLYN_RANK", rank.to_string()),
            ("HAMLYN_SIZE", size.to_string()),
            ("HAMLYN_JOB", job.to_owned()),
        ];
        let launch = job_check(Launch::from_vars(|k| {
            vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        }))?;
        Self::join_with(py, node, launch, timeout)
    }

    /// This process's rank, `0..size`.
    #[getter]
    fn rank(&self) -> u32 {
        self.rank
    }

    /// Processes in the job.
    #[getter]
    fn size(&self) -> u32 {
        self.size
    }

    /// Who started the process: 'hamlyn', 'slurm', 'pmi', 'open_mpi' or 'alone'.
    #[getter]
    fn launcher(&self) -> &'static str {
        self.launcher
    }

    /// The job's name in the registry (every process of a job sees the same one).
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// How long collectives wait for the other ranks, in seconds (settable).
    #[getter]
    fn timeout(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(*crate::lock(py, &self.timeout)?)
    }

    #[setter]
    fn set_timeout(&self, py: Python<'_>, seconds: f64) -> PyResult<()> {
        let t = crate::timeout(Some(seconds))?.unwrap_or(Duration::ZERO);
        self.with_unlocked(py, |j| {
            j.set_timeout(t);
            Ok(())
        })?;
        *crate::lock(py, &self.timeout)? = seconds;
        Ok(())
    }

    /// Returns once every rank has called it (a fetch-and-add on rank 0's counter; the
    /// last to arrive releases the others with a message each).
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        self.with_unlocked(py, |j| j.barrier())
    }

    /// Every rank's seed text, by rank, once every rank has given its own (`seed`: seed
    /// text, or a `Ticket`), through the cluster's name registry.
    fn all_gather(&self, py: Python<'_>, seed: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
        let seed = match seed.extract::<crate::ticket::PyTicket>() {
            Ok(t) => hamlyn::Seed::single(t.ticket),
            Err(_) => crate::ticket::seed_from_text(&seed.extract::<String>()?)?,
        };
        let all = self.with_unlocked(py, |j| j.all_gather(&seed))?;
        all.iter().map(crate::ticket::seed_to_text).collect()
    }

    /// Leaves the job's connection. Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let j = crate::lock(py, &self.job)?.take();
        py.allow_threads(|| drop(j));
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<PyObject>,
        _v: Option<PyObject>,
        _tb: Option<PyObject>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<hamlyn.Job {:?} rank {} of {} ({})>",
            self.name, self.rank, self.size, self.launcher
        )
    }
}

impl PyJob {
    fn join_with(
        py: Python<'_>,
        node: Option<&PyNode>,
        launch: Launch,
        timeout: Option<f64>,
    ) -> PyResult<PyJob> {
        let timeout = job_timeout(timeout)?;
        let (life, n) = match node {
            Some(n) => (n.life(), n.get(py)?),
            None => {
                let n = crate::errors::check(py.allow_threads(hamlyn::Node::connect_default))?;
                (Arc::new(Life::default()), n)
            }
        };
        // The join is a collective too: the timeout applies to it, as to the later ones.
        let job = py.allow_threads(|| Job::join_with_timeout(launch, n, timeout));
        Ok(PyJob::new(life, job_check(job)?, timeout))
    }
}
