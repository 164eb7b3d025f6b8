//! The job layer (issue 13): `hamlyn run -n P` starts P processes that find each other
//! through `hamlyn-job` — rank, size, an all-gather of seeds and a barrier — and the same
//! program started by hand with Slurm's, PMI's or Open MPI's variables does too. A rank
//! that fails stops its job.
//!
//! The ranks are this test binary itself, started with `--exact job_rank`: that test
//! does nothing unless `HAMLYN_JOB_TEST` names a directory to report in.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{run, text, TempDir, BIN};
use hamlyn::{Node, Seed};
use hamlyn_job::{Job, Launcher};

const ROUNDS: u32 = 20;

/// One rank of a test job (a no-op unless started as one).
#[test]
fn job_rank() {
    let Ok(dir) = std::env::var("HAMLYN_JOB_TEST") else {
        return;
    };
    let dir = PathBuf::from(dir);
    let mut job = Job::init().unwrap();
    let (rank, size) = (job.rank(), job.size());
    assert!(rank < size);
    if std::env::var("HAMLYN_JOB_FAIL_RANK").ok() == Some(rank.to_string()) {
        std::process::exit(3);
    }
    // An all-gather of seeds: each rank's names a slot of its own, and carries its rank.
    let node = Node::connect_default().unwrap();
    let area = node.area(4096).unwrap();
    let meta = node.meta_area(1).unwrap();
    let slot = node.slot(&area).meta(&meta).create().unwrap();
    let mut mine = Seed::single(slot.ticket_all().unwrap());
    mine.data = rank.to_le_bytes().to_vec();
    let all = job.all_gather(&mine).unwrap();
    assert_eq!(all.len(), size as usize);
    for (r, s) in all.iter().enumerate() {
        assert_eq!(
            s.data,
            (r as u32).to_le_bytes(),
            "rank {r}'s seed in its place"
        );
    }
    assert_eq!(all[rank as usize], mine);
    // Barriers: before barrier k every rank writes a line for round k; after it, every
    // rank must see all of round k's lines (no one left early).
    let log = dir.join("rounds");
    for k in 0..ROUNDS {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        f.write_all(format!("{k} {rank}\n").as_bytes()).unwrap();
        drop(f);
        job.barrier().unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        let arrived = text
            .lines()
            .filter(|l| l.starts_with(&format!("{k} ")))
            .count();
        assert_eq!(arrived, size as usize, "round {k}: left the barrier early");
    }
    std::fs::write(
        dir.join(format!("done-{rank}")),
        format!("{:?} {size}", job.launch().launcher),
    )
    .unwrap();
}

/// Starts `P` ranks by hand, with the variables `vars(rank)` returns, against the engine
/// at `socket`; waits for all and checks their reports.
fn by_hand(
    dir: &Path,
    socket: &Path,
    p: u32,
    vars: impl Fn(u32) -> Vec<(String, String)>,
) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..p)
        .map(|r| {
            Command::new(&exe)
                .args(["--exact", "job_rank", "--nocapture"])
                .envs(vars(r))
                .env("HAMLYN_JOB_TEST", dir)
                .env("HAMLYN_SOCKET", socket)
                .env("HAMLYN_JOB_TIMEOUT_MS", "60000")
                .env_remove("HAMLYN_RANK")
                .stdin(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a rank failed");
    }
    (0..p)
        .map(|r| std::fs::read_to_string(dir.join(format!("done-{r}"))).unwrap())
        .collect()
}

#[test]
fn hamlyn_run_starts_a_job_of_four_that_gathers_and_synchronises() {
    let dir = TempDir::new("job-run");
    let report = dir.path("report");
    std::fs::create_dir_all(&report).unwrap();
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(BIN)
        .args(["run", "-n", "4", "--"])
        .arg(&exe)
        .args(["--exact", "job_rank", "--nocapture"])
        .env("HAMLYN_JOB_TEST", &report)
        .env("HAMLYN_JOB_TIMEOUT_MS", "60000")
        .env_remove("HAMLYN_SOCKET")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "hamlyn run: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    for r in 0..4 {
        let said = std::fs::read_to_string(report.join(format!("done-{r}"))).unwrap();
        assert_eq!(said, format!("{:?} 4", Launcher::Hamlyn));
    }
    let rounds = std::fs::read_to_string(report.join("rounds")).unwrap();
    assert_eq!(rounds.lines().count(), 4 * ROUNDS as usize);
}

#[test]
fn a_failing_rank_stops_its_job() {
    let dir = TempDir::new("job-fail");
    let report = dir.path("report");
    std::fs::create_dir_all(&report).unwrap();
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(BIN)
        .args(["run", "-n", "3", "--"])
        .arg(&exe)
        .args(["--exact", "job_rank", "--nocapture"])
        .env("HAMLYN_JOB_TEST", &report)
        .env("HAMLYN_JOB_FAIL_RANK", "2")
        .env("HAMLYN_JOB_TIMEOUT_MS", "60000")
        .env_remove("HAMLYN_SOCKET")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("rank 2 failed"), "{err}");
    assert!(
        !report.join("done-0").exists(),
        "the others were stopped, not finished"
    );
}

/// A launcher's variables for a rank.
type Vars = fn(u32) -> Vec<(String, String)>;

#[test]
fn launcher_variables_start_the_same_job() {
    let engine =
        hamlyn_engine::EngineHandle::start(hamlyn_engine::EngineConfig::embedded()).unwrap();
    let socket = engine.socket_path().to_path_buf();
    let cases: [(&str, Launcher, Vars); 3] = [
        ("slurm", Launcher::Slurm, |r| {
            vec![
                ("SLURM_PROCID".into(), r.to_string()),
                ("SLURM_NTASKS".into(), "4".into()),
                ("SLURM_JOB_ID".into(), "900".into()),
            ]
        }),
        ("pmi", Launcher::Pmi, |r| {
            vec![
                ("PMI_RANK".into(), r.to_string()),
                ("PMI_SIZE".into(), "4".into()),
                ("PMI_JOBID".into(), "pmi-7".into()),
            ]
        }),
        ("ompi", Launcher::OpenMpi, |r| {
            vec![
                ("OMPI_COMM_WORLD_RANK".into(), r.to_string()),
                ("OMPI_COMM_WORLD_SIZE".into(), "4".into()),
                ("OMPI_MCA_ess_base_jobid".into(), "31337".into()),
            ]
        }),
    ];
    for (name, launcher, vars) in cases {
        let dir = TempDir::new(&format!("job-{name}"));
        let report = dir.path("report");
        std::fs::create_dir_all(&report).unwrap();
        let said = by_hand(&report, &socket, 4, vars);
        for s in said {
            assert_eq!(s, format!("{launcher:?} 4"), "{name}");
        }
    }
    // A job of one needs no launcher at all.
    let out = run(&["run", "-n", "0", "--", "true"], Duration::from_secs(30));
    assert!(!out.status.success(), "zero processes is refused");
    engine.stop().unwrap();
}
