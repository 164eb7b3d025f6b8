//! CPU pinning for `hamlyn bench --pin`.

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

use super::error::BenchError;

/// The CPUs this thread may run on, in order.
pub fn allowed_cpus() -> Result<Vec<usize>, BenchError> {
    let set = sched_getaffinity(None).map_err(|e| BenchError::io("sched_getaffinity", e))?;
    Ok((0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect())
}

/// Pins the calling thread to `cpu`.
pub fn pin_to(cpu: usize) -> Result<(), BenchError> {
    if cpu >= CpuSet::MAX_CPU {
        return Err(BenchError::Usage("CPU number out of range"));
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set).map_err(|e| BenchError::io("sched_setaffinity", e))
}
