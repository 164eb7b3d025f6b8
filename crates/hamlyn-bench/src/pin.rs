//! CPU pinning for `hamlyn bench --pin`.

use rustix::process::Pid;
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

use super::error::BenchError;

/// The CPUs this thread may run on, in order.
pub fn allowed_cpus() -> Result<Vec<usize>, BenchError> {
    let set = sched_getaffinity(None).map_err(|e| BenchError::io("sched_getaffinity", e))?;
    Ok(cpus_in(&set))
}

/// The CPUs of `set`, in order.
fn cpus_in(set: &CpuSet) -> Vec<usize> {
    (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()
}

/// The set of `cpu` alone.
fn only(cpu: usize) -> Result<CpuSet, BenchError> {
    if cpu >= CpuSet::MAX_CPU {
        return Err(BenchError::Usage("CPU number out of range"));
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    Ok(set)
}

/// Pins the calling thread to `cpu`.
pub fn pin_to(cpu: usize) -> Result<(), BenchError> {
    sched_setaffinity(None, &only(cpu)?).map_err(|e| BenchError::io("sched_setaffinity", e))
}

/// Pins process `pid`'s main thread (a child this bench started, before it starts more
/// threads) to `cpu`.
pub fn pin_process(pid: u32, cpu: usize) -> Result<(), BenchError> {
    // 0 would name the calling thread; a pid past i32 names nobody.
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| BenchError::io("pinning a process", rustix::io::Errno::SRCH))?;
    sched_setaffinity(Some(pid), &only(cpu)?).map_err(|e| BenchError::io("sched_setaffinity", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::thread::sched_getaffinity;

    /// A child pinned by its process id runs on that CPU alone (what `--pin` does to
    /// sockperf's server and client); a process id that names nobody is an error.
    #[test]
    fn a_child_pinned_by_its_id_runs_on_that_cpu_alone() {
        let cpus = allowed_cpus().unwrap();
        let Some(&last) = cpus.last() else {
            panic!("no CPU allowed");
        };
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let pinned = pin_process(child.id(), last);
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
        let set = sched_getaffinity(Some(pid));
        let _ = child.kill();
        let _ = child.wait();
        pinned.unwrap();
        let set = set.unwrap();
        assert_eq!(cpus_in(&set), vec![last]);
        // An id that names nobody, and 0 (which would name the calling thread), are
        // refused; so is a CPU past the set.
        let nobody = i32::MAX as u32;
        assert!(matches!(
            pin_process(nobody, last),
            Err(BenchError::Io { .. })
        ));
        assert!(matches!(pin_process(0, last), Err(BenchError::Io { .. })));
        assert!(matches!(
            pin_process(std::process::id(), CpuSet::MAX_CPU),
            Err(BenchError::Usage(_))
        ));
    }
}
