//! Two real processes share a port: the parent creates a memfd, passes it to a child over
//! a `SOCK_SEQPACKET` socket with `SCM_RIGHTS`, and the child pushes entries into an SPSC
//! ring and posts a notification for each, in bursts with pauses between them. The parent
//! consumes everything in order, sleeping on the notification queue's futex between
//! bursts. A process-private futex would never deliver the child's wake, and every wait
//! would run into its 10-second timeout; the test requires the waits to end by wakeups.
//!
//! The child is this same test binary, re-executed with `--exact child_process` and
//! [`CHILD_ENV`] set; the socket is its stdin.
#![cfg(not(loom))]

use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hamlyn_shm::fdpass::{recv_with_fds, send_with_fds, seqpacket_pair};
use hamlyn_shm::notifq::{self, NotifLayout};
use hamlyn_shm::region::ShmRegion;
use hamlyn_shm::spsc::{self, PushError, SpscLayout};
use hamlyn_shm::wake::WaitOutcome;
use hamlyn_wire::{NotifEntry, NotifKind};

const CHILD_ENV: &str = "HAMLYN_SHM_TWO_PROCESS_CHILD";
const ENTRY: usize = 64;
const BURSTS: u64 = 12;
const PER_BURST: u64 = 40;
const TOTAL: u64 = BURSTS * PER_BURST;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn layouts() -> (NotifLayout, SpscLayout, usize) {
    let nl = NotifLayout::new(0, 64).expect("notif layout");
    let sl = SpscLayout::new(nl.next_offset(), ENTRY, 64).expect("ring layout");
    (nl, sl, sl.next_offset())
}

fn entry(i: u64) -> [u8; ENTRY] {
    let mut e = [0u8; ENTRY];
    for (k, w) in e.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&(i ^ ((k as u64) << 56)).to_le_bytes());
    }
    e
}

#[test]
fn two_processes_share_rings_and_futex() -> TestResult {
    let (nl, sl, total) = layouts();
    let region = ShmRegion::create("hamlyn-two-process", total)?;
    let (ours, theirs) = seqpacket_pair()?;
    let child = Command::new(std::env::current_exe()?)
        .args([
            "--exact",
            "child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::from(theirs))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    send_with_fds(&ours, b"port", &[region.fd()])?;

    let mut notes = notifq::Consumer::attach(&region, nl)?;
    let mut ring = spsc::Consumer::attach(&region, sl)?;
    let t0 = Instant::now();
    let (mut next, mut woken, mut sleeps_needed) = (0u64, 0u32, 0u32);
    let mut buf = [0u8; ENTRY];
    while next < TOTAL {
        match notes.wait_ready(200, Some(Duration::from_secs(10)))? {
            WaitOutcome::Ready { woken: w } => {
                woken += w;
                if w > 0 {
                    sleeps_needed += 1;
                }
            }
            WaitOutcome::TimedOut => {
                let _ = child.wait_with_output();
                return Err(format!("no wakeup after entry {next}: futex not shared?").into());
            }
            _ => return Err("unknown wait outcome".into()),
        }
        while let Some(n) = notes.poll() {
            assert_eq!(n.kind(), Some(NotifKind::Message));
            assert_eq!(n.word.get(), next, "notifications in order");
            assert_eq!(
                ring.pop(&mut buf),
                Ok(true),
                "ring entry {next} published first"
            );
            assert_eq!(buf, entry(next), "ring entries in order and whole");
            next += 1;
        }
    }
    let elapsed = t0.elapsed();
    let out = child.wait_with_output()?;
    assert!(
        out.status.success(),
        "child failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ring.pop(&mut buf), Ok(false));
    assert_eq!(notes.overflows(), 0);
    assert!(
        woken >= 1 && sleeps_needed >= 1,
        "the parent must have slept on the futex and been woken (woken {woken})"
    );
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    Ok(())
}

/// The child's half; does nothing unless re-executed by the test above.
#[test]
fn child_process() -> TestResult {
    if std::env::var_os(CHILD_ENV).is_none() {
        return Ok(());
    }
    let (nl, sl, total) = layouts();
    let stdin = std::io::stdin();
    let mut buf = [0u8; 16];
    let got = recv_with_fds(stdin.as_fd(), &mut buf)?;
    assert_eq!(&buf[..got.len], b"port");
    let fd = got.fds.into_iter().next().ok_or("no region fd")?;
    let region = ShmRegion::from_fd(fd, total)?;
    let notes = notifq::Producer::attach(&region, nl)?;
    let mut ring = spsc::Producer::attach(&region, sl)?;
    // If the parent dies, give up instead of waiting for room forever.
    let deadline = Instant::now() + Duration::from_secs(20);
    let backoff = || -> TestResult {
        if Instant::now() > deadline {
            return Err("parent stopped consuming".into());
        }
        std::thread::sleep(Duration::from_millis(1));
        Ok(())
    };
    let mut i = 0u64;
    for _ in 0..BURSTS {
        // Let the parent run out of spin budget and go to sleep.
        std::thread::sleep(Duration::from_millis(30));
        for _ in 0..PER_BURST {
            loop {
                match ring.try_push(&entry(i)) {
                    Ok(()) => break,
                    Err(PushError::Full) => backoff()?,
                    Err(e) => return Err(e.into()),
                }
            }
            let mut n = NotifEntry::zeroed();
            n.kind.set(NotifKind::Message as u16);
            n.word.set(i);
            while notes.post(&n).is_err() {
                backoff()?;
            }
            i += 1;
        }
    }
    Ok(())
}
