//! Rank, size and job id, from whoever started the process.

use crate::JobError;

/// Who started the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Launcher {
    /// `hamlyn run` (`HAMLYN_RANK`, `HAMLYN_SIZE`, `HAMLYN_JOB`).
    Hamlyn,
    /// Slurm's `srun` (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_JOB_ID`, `SLURM_STEP_ID`).
    Slurm,
    /// A PMI launcher (`PMI_RANK`, `PMI_SIZE`; the job id from `PMI_JOBID` if set).
    Pmi,
    /// Open MPI's `mpirun` (`OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`; the job id
    /// from `OMPI_MCA_ess_base_jobid` if set).
    OpenMpi,
    /// Nobody: a job of one process.
    Alone,
}

/// A process's place in its job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Who started it.
    pub launcher: Launcher,
    /// Its rank, `0..size`.
    pub rank: u32,
    /// Processes in the job.
    pub size: u32,
    /// Names the job in the registry, so two jobs on one cluster never meet. Every
    /// process of a job must see the same one.
    pub job: String,
}

/// The variables each launcher sets: rank, size, and job id candidates (the first set
/// one wins; none: "default").
const LAUNCHERS: &[(Launcher, &str, &str, &[&str])] = &[
    (
        Launcher::Hamlyn,
        "HAMLYN_RANK",
        "HAMLYN_SIZE",
        &["HAMLYN_JOB"],
    ),
    (
        Launcher::Slurm,
        "SLURM_PROCID",
        "SLURM_NTASKS",
        &["SLURM_JOB_ID", "SLURM_JOBID"],
    ),
    (Launcher::Pmi, "PMI_RANK", "PMI_SIZE", &["PMI_JOBID"]),
    (
        Launcher::OpenMpi,
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        &["OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"],
    ),
];

impl Launch {
    /// From this process's environment: the first launcher whose rank variable is set
    /// (in the order of [`Launcher`]); a job of one when none is.
    pub fn from_env() -> Result<Launch, JobError> {
        Launch::from_vars(|k| std::env::var(k).ok())
    }

    /// From the variables `get` returns (testable without touching the environment).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Launch, JobError> {
        for &(launcher, rank_var, size_var, job_vars) in LAUNCHERS {
            let Some(rank) = get(rank_var) else {
                continue;
            };
            let number = |var: &str, text: &str| {
                text.trim()
                    .parse::<u32>()
                    .map_err(|_| JobError::Environment(format!("{var}={text:?} is not a number")))
            };
            let rank = number(rank_var, &rank)?;
            let size = match get(size_var) {
                Some(s) => number(size_var, &s)?,
                None => {
                    return Err(JobError::Environment(format!(
                        "{rank_var} without {size_var}"
                    )))
                }
            };
            if size == 0 || rank >= size {
                return Err(JobError::Environment(format!(
                    "rank {rank} is not in a job of {size}"
                )));
            }
            let mut job = job_vars
                .iter()
                .find_map(|v| get(v))
                .unwrap_or_else(|| "default".to_owned());
            if launcher == Launcher::Slurm {
                if let Some(step) = get("SLURM_STEP_ID") {
                    job = format!("{job}.{step}");
                }
            }
            // Registry names are at most 255 bytes: keep the id short and plain.
            job.retain(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
            job.truncate(64);
            return Ok(Launch {
                launcher,
                rank,
                size,
                job,
            });
        }
        Ok(Launch {
            launcher: Launcher::Alone,
            rank: 0,
            size: 1,
            job: format!("alone-{}", std::process::id()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)]) -> Result<Launch, JobError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Launch::from_vars(|k| map.get(k).cloned())
    }

    #[test]
    fn each_launcher_is_read() {
        let l = with(&[
            ("HAMLYN_RANK", "2"),
            ("HAMLYN_SIZE", "4"),
            ("HAMLYN_JOB", "j1"),
        ])
        .unwrap();
        assert_eq!(
            (l.launcher, l.rank, l.size, l.job.as_str()),
            (Launcher::Hamlyn, 2, 4, "j1")
        );
        let l = with(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_ID", "77"),
            ("SLURM_STEP_ID", "3"),
        ])
        .unwrap();
        assert_eq!(
            (l.launcher, l.rank, l.size, l.job.as_str()),
            (Launcher::Slurm, 1, 2, "77.3")
        );
        let l = with(&[("PMI_RANK", "0"), ("PMI_SIZE", "3")]).unwrap();
        assert_eq!(
            (l.launcher, l.rank, l.size, l.job.as_str()),
            (Launcher::Pmi, 0, 3, "default")
        );
        let l = with(&[
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "6"),
            ("OMPI_MCA_ess_base_jobid", "4242/x"),
        ])
        .unwrap();
        assert_eq!(
            (l.launcher, l.rank, l.size, l.job.as_str()),
            (Launcher::OpenMpi, 5, 6, "4242x")
        );
        let l = with(&[]).unwrap();
        assert_eq!((l.launcher, l.rank, l.size), (Launcher::Alone, 0, 1));
    }

    #[test]
    fn hamlyn_run_wins_over_an_outer_launcher() {
        let l = with(&[
            ("HAMLYN_RANK", "0"),
            ("HAMLYN_SIZE", "2"),
            ("SLURM_PROCID", "7"),
            ("SLURM_NTASKS", "8"),
        ])
        .unwrap();
        assert_eq!((l.launcher, l.rank, l.size), (Launcher::Hamlyn, 0, 2));
    }

    #[test]
    fn nonsense_is_a_clear_error() {
        for vars in [
            &[("PMI_RANK", "x"), ("PMI_SIZE", "2")][..],
            &[("PMI_RANK", "2"), ("PMI_SIZE", "2")][..],
            &[("PMI_RANK", "0"), ("PMI_SIZE", "0")][..],
            &[("PMI_RANK", "0")][..],
        ] {
            let e = with(vars).unwrap_err();
            assert!(matches!(e, JobError::Environment(_)), "{vars:?}: {e}");
        }
    }
}
