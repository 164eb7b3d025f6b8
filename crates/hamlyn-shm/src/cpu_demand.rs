//! Whether more threads want a CPU than this process has: what an adaptive spin
//! ([`crate::wake::AdaptiveSpin`]) asks before it spins beyond its floor, so that a
//! spin never holds a core that a runnable thread (perhaps the very one that is to send)
//! is waiting for. KVM's halt polling asks the same of the scheduler
//! (`single_task_running`); a user-level spinner has to ask the kernel's counters.
//!
//! Linux prints the number of threads running or runnable at this instant, machine-wide,
//! as the fourth field of `/proc/loadavg` (`R/T`: runnable / all). [`oversubscribed`]
//! reads it with one `pread` of a descriptor opened once (about 0.7 µs on the 2-vCPU
//! machine the benchmarks run on) and compares it with the machine's online CPUs
//! (`/sys/devices/system/cpu/online`; at least the CPUs this process may use,
//! `available_parallelism`): the count is machine-wide, so its measure is too. Against
//! the CPUs of the process's affinity instead, a process bound to one CPU (an MPI rank,
//! `hamlyn bench --pin`) found the machine oversubscribed whenever any other thread ran
//! anywhere, and never spun beyond its floor. The count includes the asking thread, so a
//! waiter and the one peer it waits for on a 2-CPU machine count 2, not oversubscribed;
//! a third busy thread makes it so.
//!
//! A machine without the file (or a text that does not parse) gives `None`: the caller
//! decides what an unknown demand means.

#[cfg(not(loom))]
mod imp {
    use std::fs::File;
    use std::os::unix::fs::FileExt;
    use std::sync::OnceLock;

    /// `/proc/loadavg` kept open, and the machine's CPUs ([`machine_cpus`]); `None` if
    /// either is unknown.
    fn source() -> Option<&'static (File, u32)> {
        static SOURCE: OnceLock<Option<(File, u32)>> = OnceLock::new();
        SOURCE
            .get_or_init(|| {
                let file = File::open("/proc/loadavg").ok()?;
                Some((file, machine_cpus()?))
            })
            .as_ref()
    }

    /// The CPUs the machine has online, and never fewer than this process may use;
    /// the process's own count where the list cannot be read; `None` if neither is
    /// known.
    pub fn machine_cpus() -> Option<u32> {
        let mine = std::thread::available_parallelism()
            .ok()
            .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX));
        let online = std::fs::read("/sys/devices/system/cpu/online")
            .ok()
            .and_then(|text| super::parse_cpu_list(&text));
        match (online, mine) {
            (Some(o), Some(m)) => Some(o.max(m)),
            (o, m) => o.or(m),
        }
    }

    pub fn runnable_and_cpus() -> Option<(u32, u32)> {
        let (file, cpus) = source()?;
        let mut buf = [0u8; 128];
        // A seq_file read at offset 0 generates the text afresh; pread has no file
        // position, so threads may share the descriptor.
        let n = file.read_at(&mut buf, 0).ok()?;
        let runnable = super::parse_runnable(buf.get(..n)?)?;
        Some((runnable, *cpus))
    }
}

#[cfg(loom)]
mod imp {
    /// Under loom nothing is read: the demand is unknown.
    pub fn runnable_and_cpus() -> Option<(u32, u32)> {
        None
    }
}

/// How many CPUs a kernel CPU list names (`/sys/devices/system/cpu/online`: `"0-63\n"`,
/// `"0,2-5,7\n"`); `None` if the text is not of that form (or a range runs backwards).
pub fn parse_cpu_list(text: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(text).ok()?.trim();
    if text.is_empty() {
        return None;
    }
    let mut count: u32 = 0;
    for part in text.split(',') {
        let n = match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                b.checked_sub(a)?.checked_add(1)?
            }
            None => {
                let _: u32 = part.parse().ok()?;
                1
            }
        };
        count = count.checked_add(n)?;
    }
    Some(count)
}

/// The threads running or runnable machine-wide, from the text of `/proc/loadavg`
/// (`"0.52 0.58 0.59 3/219 12345\n"` gives 3); `None` if the text is not of that form.
pub fn parse_runnable(text: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(text).ok()?;
    let field = text.split_ascii_whitespace().nth(3)?;
    let (runnable, _all) = field.split_once('/')?;
    runnable.parse().ok()
}

/// Whether more threads are running or runnable machine-wide (this one included) than
/// the machine has CPUs: a spin now would keep one of them off a core. `None` if
/// unknown.
pub fn oversubscribed() -> Option<bool> {
    let (runnable, cpus) = imp::runnable_and_cpus()?;
    Some(runnable > cpus)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_runnable_count_is_the_fourth_field_before_the_slash() {
        assert_eq!(parse_runnable(b"0.52 0.58 0.59 3/219 12345\n"), Some(3));
        assert_eq!(parse_runnable(b"10.00 9.00 8.00 17/1024 1\n"), Some(17));
    }

    #[test]
    fn a_cpu_list_counts_its_ranges_and_single_cpus() {
        assert_eq!(parse_cpu_list(b"0-1\n"), Some(2));
        assert_eq!(parse_cpu_list(b"0\n"), Some(1));
        assert_eq!(parse_cpu_list(b"0-63"), Some(64));
        assert_eq!(parse_cpu_list(b"0,2-5,7\n"), Some(6));
        for bad in [
            &b""[..],
            b"\n",
            b"x",
            b"0-",
            b"3-1",
            b"0,,1",
            b"-1",
            b"0-1-2",
        ] {
            assert_eq!(parse_cpu_list(bad), None, "{bad:?}");
        }
    }

    /// The machine's CPUs are never fewer than this process may use (a process bound to
    /// one CPU still measures the machine-wide count against the whole machine).
    #[test]
    fn the_machine_has_at_least_the_cpus_this_process_may_use() {
        let Some(machine) = imp::machine_cpus() else {
            eprintln!("skipped: no CPU count on this machine");
            return;
        };
        let mine = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(machine as usize >= mine, "{machine} < {mine}");
    }

    #[test]
    fn text_of_another_form_is_unknown() {
        for bad in [
            &b""[..],
            b"0.52 0.58 0.59",
            b"0.52 0.58 0.59 3 12345",
            b"0.52 0.58 0.59 x/219 1",
            b"0.52 0.58 0.59 -1/219 1",
            b"\xff\xfe 1 2 3/4 5",
        ] {
            assert_eq!(parse_runnable(bad), None, "{bad:?}");
        }
    }

    /// This machine has the file: the count includes the asking thread (so it is at
    /// least 1), and a crowd of spinning threads, more than the CPUs, makes the machine
    /// oversubscribed.
    #[test]
    fn a_crowd_of_busy_threads_oversubscribes_the_machine() {
        let Some((runnable, cpus)) = imp::runnable_and_cpus() else {
            eprintln!("skipped: /proc/loadavg is not readable here");
            return;
        };
        assert!(runnable >= 1, "the asking thread runs: {runnable}");
        let crowd = Crowd::start();
        assert!(
            crowd.counted(),
            "{} spinning threads on {cpus} CPUs never counted",
            cpus + 2
        );
    }
}

/// Threads that spin until dropped, two more than the machine has CPUs: a machine made
/// oversubscribed, for tests.
#[cfg(all(test, not(loom)))]
pub(crate) struct Crowd {
    stop: std::sync::Arc<crate::sync::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

#[cfg(all(test, not(loom)))]
impl Crowd {
    pub(crate) fn start() -> Crowd {
        use crate::sync::{AtomicBool, Ordering};
        let cpus = imp::machine_cpus().map_or(1, |n| n as usize);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let threads = (0..cpus + 2)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Crowd { stop, threads }
    }

    /// Whether [`oversubscribed`] counts the crowd, asked for up to about half a second
    /// (a scheduler may be slow to start the threads); `false` also where the count
    /// cannot be read.
    pub(crate) fn counted(&self) -> bool {
        (0..500).any(|_| {
            let yes = oversubscribed() == Some(true);
            if !yes {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            yes
        })
    }
}

#[cfg(all(test, not(loom)))]
impl Drop for Crowd {
    fn drop(&mut self) {
        self.stop.store(true, crate::sync::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
