//! Issue 17, at full scale: each attack of a hostile local client against a real
//! `hamlyn node` daemon process, while a second, well-behaved pair of clients exchanges
//! messages through the same daemon all along. Every test checks that the pair completes
//! rounds during the attack and after it (rounds, never a time), that the daemon refused
//! or contained what it had to (typed errors, counters), and that it is still alive.
//!
//! The resources the daemon holds are read from `/proc/PID` (descriptors, resident
//! memory, CPU time). Resources are bounds checked against what was measured before the
//! attack; CPU is printed, never asserted (a timing figure on a shared machine).
#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../hamlyn-engine/tests/common/mod.rs"]
mod raw;

use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hamlyn_shm::sync::{AtomicBool, AtomicU64, Ordering};
use hamlyn_wire::control::{mode, perm, ControlErrorCode, Reply, Request};
use hamlyn_wire::request::{Gather, Payload, MAX_GATHER};
use hamlyn_wire::NotifKind;
use raw::{call, connect, inline, receiver_slot, RawClient};

/// How long any one thing the test waits for may take before the test fails: a bound
/// that ends a hang, far above what any healthy run needs.
const BOUND: Duration = Duration::from_secs(60);

/// A `hamlyn node` daemon process of this test (SIGKILLed and reaped on drop).
struct Daemon {
    child: Child,
    socket: PathBuf,
    _dir: common::TempDir,
}

impl Daemon {
    fn start(name: &str, flags: &[&str]) -> Daemon {
        let dir = common::TempDir::new(&format!("attack-{name}"));
        let socket = dir.path("node.sock");
        let mut cmd = Command::new(common::BIN);
        // SAFETY: the closure runs in the forked child before exec and only makes one
        // async-signal-safe system call (prctl). It makes the daemon die with this test's
        // thread, so a test that aborts leaves no daemon behind.
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::KILL,
                ))
                .map_err(std::io::Error::from)
            });
        }
        let child = cmd
            .arg("node")
            .arg("--socket")
            .arg(&socket)
            .args(flags)
            .env_remove("HAMLYN_SOCKET")
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start hamlyn node");
        let deadline = Instant::now() + BOUND;
        while raw::try_connect(&socket).is_err() {
            assert!(Instant::now() < deadline, "the daemon never listened");
            std::thread::sleep(Duration::from_millis(10));
        }
        Daemon {
            child,
            socket,
            _dir: dir,
        }
    }

    fn path(&self) -> &Path {
        &self.socket
    }

    fn proc_path(&self, what: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/{what}", self.child.id()))
    }

    /// Whether the process still runs (not exited, not a zombie).
    fn alive(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }

    /// Open descriptors of the daemon.
    fn fds(&self) -> usize {
        std::fs::read_dir(self.proc_path("fd")).map_or(0, |d| d.count())
    }

    /// Resident memory of the daemon, in KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(self.proc_path("status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// CPU time the daemon used so far (user + system), in clock ticks.
    fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(self.proc_path("stat")).unwrap_or_default();
        // Fields after the command name (which ends with the last ')'): state is the
        // first, utime the 12th, stime the 13th.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        n(11) + n(12)
    }

    /// `hamlyn stat` against the daemon works (the control path answers).
    fn stat_answers(&self) {
        let out = common::run(&["stat", "--socket", self.socket.to_str().unwrap()], BOUND);
        assert!(
            out.status.success(),
            "hamlyn stat: {}",
            common::text(&out.stderr)
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A well-behaved sender and receiver in a thread of their own: one message per round,
/// checked byte for byte, a millisecond apart, until stopped.
struct Pinger {
    rounds: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pinger {
    fn start(daemon: &Daemon) -> Pinger {
        let rounds = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let path = daemon.path().to_path_buf();
        let thread = {
            let (rounds, stop) = (rounds.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rx = RawClient::attach(&path, 1, 1, 256);
                let mut tx = RawClient::attach(&path, 1, 1, 256);
                tx.open(0, 0);
                let (slot, key, region) = receiver_slot(&rx, 4096, 1);
                let mut r = 0u64;
                // Acquire: pairs with the Release store in `stop`.
                while !stop.load(Ordering::Acquire) {
                    let msg = r.to_le_bytes();
                    tx.push(0, inline(tx.node, slot, key, 0, 64, &msg, r))
                        .unwrap();
                    let n = rx.wait_notif(0).expect("the good message arrives");
                    assert_eq!(n.word.get(), r);
                    let mut b = [0u8; 8];
                    region.read(64, &mut b).unwrap();
                    assert_eq!(u64::from_le_bytes(b), r, "byte-exact");
                    assert!(tx.errors().is_empty());
                    r += 1;
                    // Release: pairs with the Acquire load in `progresses`.
                    rounds.store(r, Ordering::Release);
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        let p = Pinger {
            rounds,
            stop,
            thread: Some(thread),
        };
        p.progresses("at start");
        p
    }

    /// Waits until the pair completes a few more rounds (bounded; a failed round fails the
    /// test with the pair's own message).
    fn progresses(&self, when: &str) {
        // Acquire: pairs with the Release store of the pinger thread.
        let from = self.rounds.load(Ordering::Acquire);
        let deadline = Instant::now() + BOUND;
        while self.rounds.load(Ordering::Acquire) < from + 3 {
            if self.thread.as_ref().is_some_and(|t| t.is_finished()) {
                panic!("the well-behaved pair stopped {when}");
            }
            assert!(
                Instant::now() < deadline,
                "the well-behaved pair made no progress {when}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn stop(mut self) -> u64 {
        // Release: pairs with the Acquire load in the pinger's loop.
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            if let Err(e) = t.join() {
                std::panic::resume_unwind(e);
            }
        }
        // Acquire: pairs with the pinger's Release stores of its count (joined anyway).
        self.rounds.load(Ordering::Acquire)
    }
}

/// Registers an area of `len` bytes backed by a fresh memfd that this process never maps
/// (so a test can offer terabytes); the memfd is closed again at once.
fn register_unmapped(c: &RawClient, len: u64) -> Result<u32, (Option<ControlErrorCode>, String)> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let fd = rustix::fs::memfd_create(
        "attack-area",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )
    .unwrap();
    rustix::fs::ftruncate(&fd, len).unwrap();
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
        .unwrap();
    let (reply, _) = call(
        c.sock.as_fd(),
        &Request::RegisterArea { len },
        &[fd.as_fd()],
    );
    match reply {
        Reply::Area { area } => Ok(area),
        Reply::Error { code, message } => Err((ControlErrorCode::from_u16(code), message)),
        other => panic!("{other:?}"),
    }
}

fn cheap_slot(c: &RawClient, area: u32) -> Result<u32, (Option<ControlErrorCode>, String)> {
    match c.call(Request::CreateSlot {
        area,
        base: 0,
        len: 64,
        mode: mode::FAST,
        perms: perm::WRITE,
        meta_area: 0,
        meta_base: 0,
        meta_count: 0,
        queue: u32::MAX,
    }) {
        Reply::Slot { slot, .. } => Ok(slot),
        Reply::Error { code, message } => Err((ControlErrorCode::from_u16(code), message)),
        other => panic!("{other:?}"),
    }
}

/// Raises this process's descriptor limit as far as it may go; returns the soft limit.
fn raise_fd_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    l.current = l.maximum;
    let _ = setrlimit(Resource::Nofile, l);
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Waits (bounded) until `ok` holds, re-checking every few milliseconds.
fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !ok() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Terabyte areas, registered until the daemon cannot map another (its mapping budget is
/// set past the address space so that mmap itself fails): each refusal is a typed error
/// to that client, never fatal; then a 256 KiB send out of one of those areas is
/// delivered byte-exact.
#[test]
fn terabyte_areas_until_mapping_fails_then_a_send() {
    const TIB: u64 = 1 << 40;
    let pib = (1u64 << 50).to_string();
    let mut d = Daemon::start("tib", &["--max-area-bytes", &pib, "--max-mapped", &pib]);
    let pinger = Pinger::start(&d);
    let mut bad = RawClient::attach(d.path(), 1, 1, 64);
    let mut areas = Vec::new();
    let refusal = loop {
        match register_unmapped(&bad, TIB) {
            Ok(a) => areas.push(a),
            Err(e) => break e,
        }
        assert!(areas.len() < 512, "512 TiB registered: nothing bounds it");
        if areas.len() % 16 == 0 {
            pinger.progresses("while terabyte areas are mapped");
        }
    };
    eprintln!(
        "{} areas of 1 TiB registered; then refused: {refusal:?}",
        areas.len()
    );
    assert!(refusal.0.is_some(), "a typed refusal: {refusal:?}");
    assert!(d.alive(), "the daemon survived");
    pinger.progresses("after mapping failed");
    // A 256 KiB send out of the last terabyte area, written there by a second mapping of
    // ... nothing: the area is a fresh sparse file, so its bytes are zero; the receiver's
    // slot is filled with 0xAA first to see them land.
    let (slot, key, dst) = receiver_slot(&bad, 256 << 10, 1);
    dst.write(0, &vec![0xAA; 256 << 10]).unwrap();
    bad.open(0, 0);
    let mut req = inline(bad.node, slot, key, 0, 0, b"", 7);
    let mut list = [Gather::default(); MAX_GATHER];
    list[0] = Gather {
        area: *areas.last().expect("at least one area"),
        offset: TIB - (256 << 10),
        len: 256 << 10,
    };
    req.payload = Payload::Gather { list, count: 1 };
    let pos = bad.push(0, req).unwrap();
    let n = bad
        .wait_notif(0)
        .expect("the send out of a terabyte area arrives");
    assert_eq!((n.kind(), n.word.get()), (Some(NotifKind::Message), 7));
    bad.wait_finished(0, pos + 1);
    assert!(bad.errors().is_empty());
    let mut got = vec![0xFFu8; 256 << 10];
    dst.read(0, &mut got).unwrap();
    assert!(got.iter().all(|b| *b == 0), "the area's bytes landed");
    d.stat_answers();
    drop(bad);
    pinger.progresses("after the client left");
    pinger.stop();
    assert!(d.alive());
}

/// A client that makes its wake-up descriptors blocking and fills them (its doorbell, and
/// the port descriptor the daemon pokes while the client asks to be poked and never
/// reads) cannot make the daemon block: the pair and `hamlyn stat` go on.
#[test]
fn blocking_wake_up_descriptors_do_not_block_the_daemon() {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    let mut d = Daemon::start("blocking", &[]);
    let pinger = Pinger::start(&d);
    let mut bad = RawClient::attach(d.path(), 1, 1, 64);
    let (slot, key, _) = receiver_slot(&bad, 4096, 1);
    bad.open(0, 0);
    for fd in [bad.doorbell.as_fd(), bad.port_eventfd.as_fd()] {
        for _ in 0..100_000 {
            if rustix::io::write(fd, &1u64.to_ne_bytes()).is_err() {
                break;
            }
        }
        let flags = fcntl_getfl(fd).unwrap();
        fcntl_setfl(fd, flags - OFlags::NONBLOCK).unwrap();
    }
    for round in 0..200u64 {
        let _ = bad.queues[0].arm_eventfd();
        // Messages to itself: each notification makes the daemon poke the full socket.
        if bad
            .push(0, inline(bad.node, slot, key, 0, 0, b"poke", round))
            .is_err()
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        if round % 50 == 0 {
            pinger.progresses("while the descriptors are blocking and full");
            d.stat_answers();
        }
    }
    pinger.progresses("after the flood");
    drop(bad);
    pinger.progresses("after the client left");
    pinger.stop();
    assert!(d.alive());
}

/// Descriptor exhaustion: one client registering 20,000 small areas is refused past its
/// quota; 5,000 control connections are refused past the per-user share. Others keep
/// their places, and when the attackers leave the daemon's descriptors come back.
#[test]
fn descriptor_exhaustion_by_areas_and_by_connections() {
    let limit = raise_fd_limit();
    let mut d = Daemon::start("fds", &["--max-clients-per-user", "512"]);
    let pinger = Pinger::start(&d);
    let fds_before = d.fds();
    let bad = RawClient::attach(d.path(), 1, 1, 64);
    let mut refused = 0u32;
    for i in 0..20_000u32 {
        match register_unmapped(&bad, 4096) {
            Ok(_) => {}
            Err((code, msg)) => {
                assert_eq!(code, Some(ControlErrorCode::Quota), "{msg}");
                refused += 1;
            }
        }
        if i % 2000 == 0 {
            pinger.progresses("while areas are registered");
        }
    }
    eprintln!(
        "areas: {refused} of 20000 refused; daemon fds {fds_before} -> {}",
        d.fds()
    );
    assert!(refused > 0, "20,000 areas and no refusal");
    drop(bad);
    pinger.progresses("after the area client left");
    eventually("the area client's descriptors are closed", || {
        d.fds() <= fds_before + 4
    });

    // Connections: as many as this process may open, up to 5,000. A connection opened
    // before them (an attached client's) keeps getting answers; new ones from this user
    // are refused past its share, which is the defence.
    let probe = connect(d.path());
    let want = 5_000.min(limit.saturating_sub(200) as usize);
    let mut conns = Vec::with_capacity(want);
    for i in 0..want {
        conns.push(connect(d.path()));
        if i % 1000 == 0 {
            pinger.progresses("while connections pile up");
        }
    }
    pinger.progresses("with every connection open");
    let s = raw::stats(probe.as_fd());
    assert!(s.engine.connections_refused > 0, "{:?}", s.engine);
    eprintln!("{want} connections open; daemon fds {}", d.fds());
    drop(conns);
    pinger.progresses("after the connections closed");
    eventually("the connections' descriptors are closed", || {
        d.fds() <= fds_before + 4
    });
    let late = RawClient::attach(d.path(), 1, 1, 64);
    drop(late);
    let s = raw::stats(probe.as_fd());
    assert!(
        s.engine.quota_refusals >= u64::from(refused),
        "{:?}",
        s.engine
    );
    d.stat_answers();
    pinger.stop();
    assert!(d.alive());
}

/// Slots by the hundred thousand: refused past the quota; the daemon's memory grows with
/// them and comes back down when the client leaves; statistics pages stay answerable.
#[test]
fn slots_by_the_hundred_thousand_and_their_memory_returns() {
    const QUOTA: u32 = 100_000;
    let mut d = Daemon::start("slots", &["--max-slots", &QUOTA.to_string()]);
    let pinger = Pinger::start(&d);
    let rss_before = d.rss_kib();
    let bad = RawClient::attach(d.path(), 1, 1, 64);
    let (area, _mem) = bad.area(4096);
    let mut made = 0u32;
    let refusal = loop {
        match cheap_slot(&bad, area) {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
        assert!(made <= QUOTA, "past the quota");
        if made % 20_000 == 0 {
            pinger.progresses("while slots are made");
        }
    };
    assert_eq!(made, QUOTA);
    assert_eq!(refusal.0, Some(ControlErrorCode::Quota), "{refusal:?}");
    let rss_peak = d.rss_kib();
    pinger.progresses("with every slot held");
    d.stat_answers();
    drop(bad);
    pinger.progresses("after the client left");
    let grown = rss_peak.saturating_sub(rss_before);
    eprintln!("daemon RSS: {rss_before} KiB before, {rss_peak} KiB with {QUOTA} slots");
    eventually("the slots' memory is returned", || {
        d.rss_kib() <= rss_before + grown / 4 + 1024
    });
    eprintln!(
        "daemon RSS: {rss_before} KiB before, {rss_peak} KiB with {QUOTA} slots, {} KiB after",
        d.rss_kib()
    );
    d.stat_answers();
    pinger.stop();
    assert!(d.alive());
}

/// A client scribbling random bytes over its whole port and ringing its doorbell in a
/// loop: the pair goes on, the daemon counts what it refused, and once the scribbler
/// stops (still attached, its port left garbage) the daemon goes back to sleep.
#[test]
fn a_scribbled_port_and_a_doorbell_rung_in_a_loop() {
    let mut d = Daemon::start("scribble", &[]);
    let pinger = Pinger::start(&d);
    let bad = RawClient::attach(d.path(), 4, 2, 64);
    for t in 0..4 {
        bad.open(t, 0);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let ticks0 = d.cpu_ticks();
    let t0 = Instant::now();
    let scribbler = {
        let (port, doorbell) = (
            bad.port.clone(),
            bad.doorbell.as_fd().try_clone_to_owned().unwrap(),
        );
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            let mut page = vec![0u8; 4096];
            let mut rings = 0u64;
            // Acquire: pairs with the Release store below.
            while !stop.load(Ordering::Acquire) {
                for b in page.chunks_mut(8) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
                }
                let at = (x as usize % port.len().max(1)) & !4095;
                let n = page.len().min(port.len() - at);
                let _ = port.write(at, &page[..n]);
                let _ = rustix::io::write(&doorbell, &1u64.to_ne_bytes());
                rings += 1;
            }
            rings
        })
    };
    for _ in 0..5 {
        pinger.progresses("while the port is scribbled and the doorbell rung");
    }
    d.stat_answers();
    // Release: pairs with the Acquire load in the scribbler.
    stop.store(true, Ordering::Release);
    let rings = scribbler.join().unwrap();
    let busy = d.cpu_ticks() - ticks0;
    eprintln!(
        "scribbler: {rings} rings; daemon CPU {busy} ticks over {:?}",
        t0.elapsed()
    );
    pinger.progresses("after the scribbling");
    // Idle again: with the pair stopped and the scribbled port still attached, the
    // daemon sleeps (its sleep counter moves) instead of spinning.
    let rounds = pinger.stop();
    assert!(rounds > 0);
    let probe = connect(d.path());
    let s0 = raw::stats(probe.as_fd());
    std::thread::sleep(Duration::from_millis(300));
    let ticks_idle0 = d.cpu_ticks();
    std::thread::sleep(Duration::from_millis(500));
    let idle_ticks = d.cpu_ticks() - ticks_idle0;
    let s1 = raw::stats(probe.as_fd());
    eprintln!(
        "idle after scribbling: {idle_ticks} ticks in 500 ms; {:?}",
        s1.engine
    );
    assert!(
        s1.engine.sleeps > s0.engine.sleeps,
        "the daemon went back to sleep: {:?}",
        s1.engine
    );
    drop(bad);
    assert!(d.alive());
}

/// A client that sends thousands of refused requests and never reads its error ring (as
/// if stopped): the daemon holds its terminus instead of spinning on it or dropping the
/// errors; when the client reads again, every refusal is there, once.
#[test]
fn an_error_ring_left_full_by_a_stopped_client() {
    let mut d = Daemon::start("errring", &[]);
    let pinger = Pinger::start(&d);
    let mut bad = RawClient::attach(d.path(), 1, 1, 64);
    let (slot, key, _) = receiver_slot(&bad, 4096, 1);
    bad.open(0, 0);
    const SENDS: u64 = 20_000;
    let mut pushed = 0u64;
    // Phase 1: refused requests, and the errors never read, until the daemon holds the
    // terminus (the error ring is full; its requests wait, none is lost).
    let deadline = Instant::now() + BOUND;
    loop {
        match bad.push(0, inline(bad.node, slot, key ^ 1, 0, 0, b"bad key", pushed)) {
            Ok(_) => pushed += 1,
            Err(_) => {
                if bad.stats().engine.termini_held > 0 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the terminus was never held: {pushed} pushed; daemon CPU {} ticks; {:?}",
                    d.cpu_ticks(),
                    bad.stats().engine
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert!(
            pushed < SENDS,
            "{SENDS} refusals and the error ring never filled"
        );
    }
    pinger.progresses("while the error ring is full");
    // Held, not spun: with the pair stopped, the daemon goes to sleep again and again
    // while the client's requests wait (its sleep counter moves; a spinning engine's
    // would not).
    pinger.stop();
    let s0 = bad.stats().engine;
    let c0 = d.cpu_ticks();
    std::thread::sleep(Duration::from_millis(500));
    let s1 = bad.stats().engine;
    eprintln!(
        "error ring full, pair stopped: daemon CPU {} ticks in 500 ms; {s1:?}",
        d.cpu_ticks() - c0
    );
    assert!(s1.sleeps > s0.sleeps, "the daemon spins: {s1:?}");
    assert!(s1.termini_held > 0, "counted: {s1:?}");
    let pinger = Pinger::start(&d);
    // Phase 2: the client reads again, and sends the rest.
    let mut errors = 0u64;
    let deadline = Instant::now() + BOUND;
    while errors < SENDS {
        errors += bad.errors().len() as u64;
        if pushed < SENDS
            && bad
                .push(0, inline(bad.node, slot, key ^ 1, 0, 0, b"bad key", pushed))
                .is_ok()
        {
            pushed += 1;
        }
        assert!(
            Instant::now() < deadline,
            "{errors} of {SENDS} refusals came back"
        );
        std::thread::yield_now();
    }
    assert_eq!(errors, SENDS, "each refusal once");
    pinger.progresses("after the client read its errors");
    pinger.stop();
    assert!(d.alive());
}

/// 1,024 connections that never attach: they are closed after the attach timeout, and a
/// new client gets a place while the pair goes on.
#[test]
fn a_thousand_idle_connections() {
    raise_fd_limit();
    let mut d = Daemon::start("idle", &["--attach-timeout-ms", "300"]);
    let pinger = Pinger::start(&d);
    let observer = RawClient::attach(d.path(), 1, 1, 64);
    let idle: Vec<_> = (0..1024).map(|_| connect(d.path())).collect();
    pinger.progresses("with 1,024 idle connections");
    // Each was either closed after the timeout or refused at once (past the user's
    // share of places).
    eventually("the idle connections are closed", || {
        let e = observer.stats().engine;
        e.idle_closed + e.connections_refused >= 1024
    });
    let late = RawClient::attach(d.path(), 1, 1, 64);
    assert!(late.client < 1024);
    pinger.progresses("after the idle connections were closed");
    drop(idle);
    pinger.stop();
    assert!(d.alive());
}

/// The child side of `a_hundred_killed_senders_leave_every_receiver_told`: attaches,
/// starts one message of many packets into the slot it is given, and waits to be killed.
#[test]
fn child_dying_sender() {
    let Ok(spec) = std::env::var("HAMLYN_ATTACK_SENDER") else {
        return; // Not a child: nothing to do.
    };
    let v: Vec<&str> = spec.split(',').collect();
    let (path, node, slot, key, meta, mark) = (
        v[0],
        v[1].parse::<u32>().unwrap(),
        v[2].parse::<u32>().unwrap(),
        v[3].parse::<u64>().unwrap(),
        v[4].parse::<u32>().unwrap(),
        v[5].parse::<u64>().unwrap(),
    );
    const BIG: usize = 8 << 20;
    let mut c = RawClient::attach(Path::new(path), 1, 1, 64);
    c.open(0, 0);
    let (area, src) = c.area(BIG);
    src.write(0, &mark.to_le_bytes()).unwrap();
    let mut req = inline(node, slot, key, meta, 0, b"", mark);
    let mut list = [Gather::default(); MAX_GATHER];
    list[0] = Gather {
        area,
        offset: 0,
        len: BIG as u64,
    };
    req.payload = Payload::Gather { list, count: 1 };
    c.push(0, req).unwrap();
    std::thread::sleep(BOUND);
}

/// 100 sending processes SIGKILLed in the middle of a message of thousands of packets:
/// every receiver is told, one notification per message, `PeerDown` for a message left
/// partial (a `Message` only if it completed before the kill); the pair goes on and the
/// daemon's descriptors stay flat.
#[test]
fn a_hundred_killed_senders_leave_every_receiver_told() {
    const KILLS: u64 = 100;
    let mut d = Daemon::start("kills", &["--intra-mtu", "512"]);
    let pinger = Pinger::start(&d);
    let mut rx = RawClient::attach(d.path(), 1, 1, 256);
    let (slot, key, region) = receiver_slot(&rx, 8 << 20, KILLS as u32);
    let fds_before = d.fds();
    let exe = std::env::current_exe().unwrap();
    let (mut partial, mut whole) = (0u64, 0u64);
    for i in 0..KILLS {
        let mark = 0xA77A_0000_0000 + i;
        let spec = format!("{},{},{slot},{key},{i},{mark}", d.path().display(), rx.node);
        let mut child = Command::new(&exe)
            .args(["--exact", "child_dying_sender", "--nocapture"])
            .env("HAMLYN_ATTACK_SENDER", spec)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Kill it once its message has started landing.
        let deadline = Instant::now() + BOUND;
        loop {
            let mut b = [0u8; 8];
            region.read(0, &mut b).unwrap();
            if u64::from_le_bytes(b) == mark {
                break;
            }
            assert!(Instant::now() < deadline, "sender {i} never started");
            assert!(child.try_wait().unwrap().is_none(), "sender {i} exited");
            std::thread::yield_now();
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let n = rx.wait_notif(0).expect("the receiver is told");
        assert_eq!(
            (n.slot.get(), n.meta_index.get()),
            (slot, i as u32),
            "{n:?}"
        );
        match n.kind() {
            Some(NotifKind::PeerDown) => partial += 1,
            Some(NotifKind::Message) => whole += 1,
            other => panic!("{other:?}"),
        }
        if i % 25 == 0 {
            pinger.progresses("between kills");
        }
    }
    eprintln!("{KILLS} kills: {partial} messages partial (PeerDown), {whole} complete");
    assert!(partial > 0, "no kill landed mid-message");
    assert!(
        rx.queues[0].poll().is_none(),
        "one notification per message"
    );
    pinger.progresses("after the kills");
    eventually("the dead senders' descriptors are closed", || {
        d.fds() <= fds_before + 4
    });
    pinger.stop();
    assert!(d.alive());
}
