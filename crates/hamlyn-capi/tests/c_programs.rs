//! The C test programs (tests/c/*.c), built with the system compiler against the header
//! and library as installed by install.sh into a scratch prefix (`pkg-config --cflags
//! --libs hamlyn`), run against a daemon engine started here: plain, under
//! AddressSanitizer and under valgrind memcheck (0 errors, 0 leaks), each when the tool
//! exists (a skipped one says why on stderr).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
// A socket-name counter: nothing to model-check, and hamlyn-shm's atomics facade is not a
// dependency of this crate.
#[allow(clippy::disallowed_types)]
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use hamlyn_engine::{EngineConfig, EngineHandle};

const PROGRAMS: [&str; 11] = [
    "errors",
    "pingpong",
    "group",
    "rma",
    "endpoints",
    "am",
    "rpc",
    "job",
    "rats",
    "rats_remote",
    "rpc_kill",
];

/// Longest a C program may run (valgrind is slow); a hung one is killed and fails.
const RUN_BOUND: Duration = Duration::from_secs(600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Plain,
    Asan,
    Valgrind,
}

/// The installed library and the programs built against it, once for every test.
struct Built {
    prefix: PathBuf,
    plain: PathBuf,
    /// Built with -fsanitize=address, if the compiler can.
    asan: Option<PathBuf>,
    valgrind: bool,
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where cargo put the libraries built for this test run: target/<profile>/deps, beside
/// the test binary. (Not target/<profile>: `cargo test` does not refresh the copies
/// there, so a stale library would be tested.)
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    exe.parent().expect("target/<profile>/deps").to_path_buf()
}

fn run_ok(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn pkg_config(prefix: &Path) -> Vec<String> {
    let out = Command::new("pkg-config")
        .args(["--cflags", "--libs", "hamlyn"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output()
        .expect("pkg-config (apt-get install pkg-config)");
    assert!(out.status.success(), "pkg-config: {out:?}");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Compiles every program into `dir` with `extra` flags; false if the first one fails
/// with a sanitizer the compiler does not have.
fn compile(dir: &Path, flags: &[String], extra: &[&str]) -> Result<(), String> {
    std::fs::create_dir_all(dir).expect("bin dir");
    let src = crate_dir().join("tests/c");
    for p in PROGRAMS {
        let out = Command::new("cc")
            .args([
                "-std=c11",
                "-D_GNU_SOURCE",
                "-g",
                "-Wall",
                "-Wextra",
                "-Werror",
            ])
            .args(extra)
            .arg("-I")
            .arg(&src)
            .arg(src.join(format!("{p}.c")))
            .args(flags)
            .arg("-o")
            .arg(dir.join(p))
            .output()
            .expect("cc (the system C compiler)");
        if !out.status.success() {
            return Err(format!(
                "cc {p}.c {extra:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(())
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hamlyn-capi-c");
        let _ = std::fs::remove_dir_all(&root);
        let prefix = root.join("prefix");
        run_ok(
            Command::new(crate_dir().join("install.sh"))
                .arg("--lib-dir")
                .arg(lib_dir())
                .arg(&prefix),
        );
        // The installed header is the committed one.
        assert_eq!(
            std::fs::read(prefix.join("include/hamlyn.h")).expect("installed header"),
            std::fs::read(crate_dir().join("include/hamlyn.h")).expect("header")
        );
        let flags = pkg_config(&prefix);
        let plain = root.join("plain");
        compile(&plain, &flags, &[]).unwrap_or_else(|e| panic!("{e}"));
        let asan = root.join("asan");
        let asan = match compile(
            &asan,
            &flags,
            &["-fsanitize=address", "-fno-omit-frame-pointer"],
        ) {
            Ok(()) => Some(asan),
            Err(e) => {
                eprintln!("AddressSanitizer runs skipped: the compiler cannot build them: {e}");
                None
            }
        };
        let valgrind = Command::new("valgrind")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !valgrind {
            eprintln!("valgrind runs skipped: no valgrind (apt-get install valgrind)");
        }
        Built {
            prefix,
            plain,
            asan,
            valgrind,
        }
    })
}

/// The modes this machine can run.
fn modes() -> Vec<Mode> {
    let b = built();
    let mut m = vec![Mode::Plain];
    if b.asan.is_some() {
        m.push(Mode::Asan);
    }
    if b.valgrind {
        m.push(Mode::Valgrind);
    }
    m
}

/// A daemon engine on a fresh socket, for one test.
struct Daemon {
    socket: PathBuf,
    _engine: EngineHandle,
}

#[allow(clippy::disallowed_types)] // See the `use` above.
fn daemon() -> Daemon {
    static N: AtomicU32 = AtomicU32::new(0);
    let socket = std::env::temp_dir().join(format!(
        "hamlyn-capi-{}-{}.sock",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let engine = EngineHandle::start(EngineConfig::daemon(&socket)).expect("daemon engine");
    Daemon {
        socket,
        _engine: engine,
    }
}

/// The command running C program `name` with `args` in `mode` against `daemon`.
fn program(mode: Mode, daemon: &Daemon, name: &str, args: &[&str]) -> Command {
    let b = built();
    let mut cmd = match mode {
        Mode::Plain => Command::new(b.plain.join(name)),
        Mode::Asan => {
            let mut c = Command::new(b.asan.as_ref().expect("asan build").join(name));
            c.env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:exitcode=1");
            c
        }
        Mode::Valgrind => {
            let mut c = Command::new("valgrind");
            c.args([
                "--error-exitcode=1",
                "--leak-check=full",
                "--errors-for-leak-kinds=definite,possible",
                "--quiet",
            ])
            .arg(b.plain.join(name));
            c
        }
    };
    cmd.args(args)
        .env("HAMLYN_SOCKET", &daemon.socket)
        .env("LD_LIBRARY_PATH", b.prefix.join("lib"))
        .env("HAMLYN_TEST_MODE", format!("{mode:?}"))
        .env("HAMLYN_TEST_MODE", format!("{mode:?}"))
        .stderr(Stdio::inherit());
    cmd
}

/// Waits for `child` at most `RUN_BOUND`; kills it if it takes longer.
fn finish(mut child: Child, what: &str) -> ExitStatus {
    let deadline = Instant::now() + RUN_BOUND;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {RUN_BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run(mut cmd: Command, what: &str) {
    let child = cmd.stdout(Stdio::inherit()).spawn().expect("spawn");
    let status = finish(child, what);
    assert!(status.success(), "{what}: {status}");
}

/// Starts `cmd` with its stdout piped and reads `lines` lines from it.
fn start_reading(mut cmd: Command, lines: usize) -> (Child, Vec<String>) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut got = Vec::new();
    for _ in 0..lines {
        let mut line = String::new();
        // Bounded: the program exits (closing stdout) if it fails before printing.
        let n = out.read_line(&mut line).expect("read a seed line");
        assert!(n > 0, "the program ended before printing its seeds");
        got.push(line.trim().to_owned());
    }
    // Keep draining what it prints after, so it never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut rest = String::new();
        while out.read_line(&mut rest).is_ok_and(|n| n > 0) {
            print!("{rest}");
            rest.clear();
        }
    });
    (child, got)
}

#[test]
fn version_macros_and_every_error_case_get_result_codes() {
    let d = daemon();
    for mode in modes() {
        run(
            program(mode, &d, "errors", &[]),
            &format!("errors ({mode:?})"),
        );
    }
}

#[test]
fn ping_pong_between_two_processes_with_the_seed_in_the_environment() {
    for mode in modes() {
        let d = daemon();
        let (pong, seed) = start_reading(program(mode, &d, "pingpong", &["pong"]), 1);
        let mut ping = program(mode, &d, "pingpong", &["ping"]);
        ping.env("HAMLYN_PEER_SEED", &seed[0]);
        if mode != Mode::Plain {
            ping.env("HAMLYN_ROUNDS", "20");
        }
        run(ping, &format!("ping ({mode:?})"));
        let status = finish(pong, "pong");
        assert!(status.success(), "pong ({mode:?}): {status}");
    }
}

#[test]
fn group_receive_with_split_tickets_across_processes() {
    const PARTS: usize = 3;
    let d = daemon();
    for mode in modes() {
        let parts = PARTS.to_string();
        let (receiver, seeds) =
            start_reading(program(mode, &d, "group", &["receive", &parts]), PARTS);
        let senders: Vec<Child> = seeds
            .iter()
            .enumerate()
            .map(|(i, seed)| {
                program(mode, &d, "group", &["send"])
                    .env("HAMLYN_SEED", seed)
                    .env("HAMLYN_PART", i.to_string())
                    .stdout(Stdio::inherit())
                    .spawn()
                    .expect("spawn a sender")
            })
            .collect();
        for (i, s) in senders.into_iter().enumerate() {
            let status = finish(s, "a sender");
            assert!(status.success(), "sender {i} ({mode:?}): {status}");
        }
        let status = finish(receiver, "the receiver");
        assert!(status.success(), "receiver ({mode:?}): {status}");
    }
}

#[test]
fn remote_read_compare_and_swap_and_fetch_add() {
    let d = daemon();
    for mode in modes() {
        run(program(mode, &d, "rma", &[]), &format!("rma ({mode:?})"));
    }
}

#[test]
fn receive_endpoints_and_rate_limits() {
    let d = daemon();
    for mode in modes() {
        run(
            program(mode, &d, "endpoints", &[]),
            &format!("endpoints ({mode:?})"),
        );
    }
}

/// RPC from C (issue 13): a C server process of C procedures and a C client process
/// that connects by the service's name: plain calls, every error, all frames
/// outstanding, a call by reference, a timeout.
#[test]
fn a_c_client_calls_a_c_server_by_service_name() {
    for mode in modes() {
        let d = daemon();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("rpc-{mode:?}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let service = format!("capi-rpc-{}-{mode:?}", std::process::id());
        let stall = dir.join("stalled");
        let mut serve = program(mode, &d, "rpc", &["serve"]);
        serve
            .env("HAMLYN_SERVICE", &service)
            .env("HAMLYN_STALL_FILE", &stall);
        let (server, ready) = start_reading(serve, 1);
        assert_eq!(ready[0], "ready");
        let mut call = program(mode, &d, "rpc", &["call"]);
        call.env("HAMLYN_SERVICE", &service)
            .env("HAMLYN_STALL_FILE", &stall);
        run(call, &format!("rpc call ({mode:?})"));
        let status = finish(server, "rpc serve");
        assert!(status.success(), "rpc serve ({mode:?}): {status}");
    }
}

/// The job layer from C (issue 13) with a launcher's variables set by hand, as `srun`
/// would: three ranks find rank and size, all-gather seeds and pass barriers. (Under
/// `hamlyn run`: crates/hamlyn-cli/tests/c_job.rs.)
#[test]
fn c_ranks_started_with_slurm_variables_gather_seeds_and_pass_barriers() {
    const RANKS: usize = 3;
    for mode in modes() {
        let d = daemon();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("job-{mode:?}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let job = format!("capi-{}-{mode:?}", std::process::id());
        let ranks: Vec<Child> = (0..RANKS)
            .map(|r| {
                program(mode, &d, "job", &[])
                    .env("SLURM_PROCID", r.to_string())
                    .env("SLURM_NTASKS", RANKS.to_string())
                    .env("SLURM_JOB_ID", &job)
                    .env("HAMLYN_EXPECT_LAUNCHER", "slurm")
                    .env("HAMLYN_JOB_DIR", &dir)
                    .env("HAMLYN_JOB_TIMEOUT_MS", "300000")
                    .stdout(Stdio::inherit())
                    .spawn()
                    .expect("spawn a rank")
            })
            .collect();
        for (r, child) in ranks.into_iter().enumerate() {
            let status = finish(child, "a rank");
            assert!(status.success(), "rank {r} ({mode:?}): {status}");
        }
    }
}

/// The protocol level from C (issue 10) across two processes, seeds as text: tagged
/// write and get_tag, datagrams with credits and release, a simple datagram answered
/// through its reply seed, a stream of records to its end, request/response found by
/// name.
#[test]
fn rats_protocols_between_two_c_processes() {
    for mode in modes() {
        let d = daemon();
        let service = format!("capi-rats-{}-{mode:?}", std::process::id());
        let mut serve = program(mode, &d, "rats", &["serve"]);
        serve.env("HAMLYN_SERVICE", &service);
        let (server, seeds) = start_reading(serve, 4);
        let mut call = program(mode, &d, "rats", &["call"]);
        call.env("HAMLYN_SERVICE", &service)
            .env("HAMLYN_SEEDS", seeds.join("\n"));
        run(call, &format!("rats call ({mode:?})"));
        let status = finish(server, "rats serve");
        assert!(status.success(), "rats serve ({mode:?}): {status}");
    }
}

/// Rats remote write and remote read from C (issue 10) across two processes: reads of
/// 0 B to 2 MiB, blocking and asynchronous, byte-exact; plain, scattered and gathered
/// writes of 0 B to 1 MiB + 5 that the server finds in its slot byte for byte (and
/// nothing else changed); seeds of the wrong protocol, reads too long or past the slot,
/// a write outside the slot: each its code.
#[test]
fn rats_remote_write_and_read_between_two_c_processes() {
    for mode in modes() {
        let d = daemon();
        let (server, seeds) = start_reading(program(mode, &d, "rats_remote", &["serve"]), 2);
        let mut call = program(mode, &d, "rats_remote", &["call"]);
        call.env("HAMLYN_SEEDS", seeds.join("\n"));
        run(call, &format!("rats_remote call ({mode:?})"));
        let status = finish(server, "rats_remote serve");
        assert!(status.success(), "rats_remote serve ({mode:?}): {status}");
    }
}

/// A program whose stdout is read line by line as it goes (what `start_reading` reads
/// all at once).
struct Lines {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Lines {
    fn start(mut cmd: Command) -> Lines {
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        Lines { child, out }
    }

    /// The next line; bounded: the program exits (closing stdout) if it fails first.
    fn expect(&mut self, want: &str) {
        let mut line = String::new();
        let n = self.out.read_line(&mut line).expect("read a line");
        assert!(n > 0, "the program ended before printing {want:?}");
        assert_eq!(line.trim(), want);
    }

    /// Kills the program by its pid and reaps it.
    fn kill(mut self) {
        self.child.kill().expect("kill by pid");
        let _ = self.child.wait();
    }

    /// Waits (bounded) for the program to succeed, printing what it prints meanwhile.
    fn finish(mut self, what: &str) {
        std::thread::spawn(move || {
            let mut rest = String::new();
            while self.out.read_line(&mut rest).is_ok_and(|n| n > 0) {
                print!("{rest}");
                rest.clear();
            }
        });
        let status = finish(self.child, what);
        assert!(status.success(), "{what}: {status}");
    }
}

/// Issue 13 from C: an RPC server process killed (by its pid) while its procedure runs;
/// the C client's call ends with `HAMLYN_RESULT_PEER_GONE` within its timeout (not
/// `HAMLYN_RESULT_TIMEOUT`, not a hang), and so does its next call.
#[test]
fn a_c_client_sees_a_server_killed_mid_call_as_gone() {
    for mode in modes() {
        let d = daemon();
        let service = format!("capi-rpc-kill-{}-{mode:?}", std::process::id());
        let mut serve = program(mode, &d, "rpc_kill", &["serve-hang"]);
        serve.env("HAMLYN_SERVICE", &service);
        let mut server = Lines::start(serve);
        server.expect("ready");
        let mut call = program(mode, &d, "rpc_kill", &["call-hang"]);
        call.env("HAMLYN_SERVICE", &service);
        let client = call.stdout(Stdio::inherit()).spawn().expect("spawn");
        server.expect("running");
        server.kill();
        let status = finish(client, "rpc_kill call-hang");
        assert!(status.success(), "rpc_kill call-hang ({mode:?}): {status}");
    }
}

/// Issue 13 from C: an RPC client process killed (by its pid) while the server runs its
/// call; the C server frees its frames: its counters say so (one client freed, none
/// connected) and the engine's slot count (`hamlyn_node_stats`, what `hamlyn stat`
/// shows) is back to what it was before the client came.
#[test]
fn a_c_server_frees_the_frames_of_a_client_killed_mid_call() {
    for mode in modes() {
        let d = daemon();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("rpc-kill-{mode:?}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let release = dir.join("release");
        let service = format!("capi-rpc-frees-{}-{mode:?}", std::process::id());
        let mut serve = program(mode, &d, "rpc_kill", &["serve-frees"]);
        serve
            .env("HAMLYN_SERVICE", &service)
            .env("HAMLYN_RELEASE_FILE", &release);
        let mut server = Lines::start(serve);
        server.expect("ready");
        let mut call = program(mode, &d, "rpc_kill", &["call-slow"]);
        call.env("HAMLYN_SERVICE", &service);
        let client = Lines::start(call);
        server.expect("running");
        client.kill();
        std::fs::write(&release, b"go").expect("release file");
        server.finish(&format!("rpc_kill serve-frees ({mode:?})"));
    }
}

/// FNV-1a, 64 bits: the checksum am.c's "c.sum" handler replies with.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Issue 12 item 5: handlers written in C register under names like Rust's, and a Rust
/// process and a C process call each other's handlers by name (short, on a channel, with
/// remote completion, failing, replying twice; bulk read in place; memory messages both
/// ways).
#[test]
fn a_rust_and_a_c_process_call_each_others_handlers_by_name() {
    use std::cell::Cell;
    use std::rc::Rc;

    use hamlyn_am::{fingerprint, AmEndpoint, AmOptions, Outcome, Want};

    for mode in modes() {
        let d = daemon();
        let node = hamlyn::Node::connect(&d.socket).expect("connect");
        let mut ep = AmEndpoint::new(node, AmOptions::default()).expect("endpoint");
        let checked = Rc::new(Cell::new(false));
        ep.register(
            "rust.mul",
            fingerprint("u64 a, u64 b -> u64 product, u64 channel"),
            |ctx| {
                let a = ctx.args();
                let channel = u64::from(ctx.channel());
                ctx.reply([a[0] * a[1], channel, 0, 0])
                    .map_err(|e| e.to_string())
            },
        )
        .expect("register rust.mul");
        let counted = Rc::new(Cell::new(0u32));
        {
            let counted = counted.clone();
            ep.register("rust.count", fingerprint("no arguments"), move |_| {
                counted.set(counted.get() + 1);
                Ok(())
            })
            .expect("register rust.count");
        }
        ep.register(
            "rust.fail",
            fingerprint("u64 a, u64 b -> u64 product, u64 channel"),
            |_| Err("this handler always fails".into()),
        )
        .expect("register rust.fail");
        let region = ep.memory_region(4096).expect("region");
        let region = Rc::new(region);
        {
            let (region, checked) = (region.clone(), checked.clone());
            ep.register(
                "rust.check_mem",
                fingerprint("u64 off, u64 len -> u64 ok"),
                move |ctx| {
                    let [off, len, ..] = ctx.args();
                    let mut got = vec![0u8; len as usize];
                    region.read(off, &mut got).map_err(|e| e.to_string())?;
                    let ok = got == b"written by C";
                    checked.set(true);
                    ctx.reply([u64::from(ok), 0, 0, 0])
                        .map_err(|e| e.to_string())
                },
            )
            .expect("register rust.check_mem");
        }
        ep.synch().expect("synch");
        let me = ep.addr();
        let seed = hamlyn::seed::to_text(&region.seed().expect("seed")).expect("seed text");

        let mut cmd = program(mode, &d, "am", &[]);
        cmd.env("HAMLYN_RUST_NODE", me.node.0.to_string())
            .env("HAMLYN_RUST_CLIENT", me.client.to_string())
            .env("HAMLYN_RUST_REGION", &seed);
        let (child, lines) = start_reading(cmd, 2);
        let mut addr = lines[0]
            .split_whitespace()
            .map(|v| v.parse::<u32>().expect("addr"));
        let c = hamlyn_am::Addr {
            node: hamlyn::NodeId(addr.next().expect("node")),
            client: addr.next().expect("client"),
        };
        let wait = Duration::from_secs(120);
        ep.refresh().expect("refresh");
        let add = ep.handler_by_name("c.add").expect("c.add");
        let sum = ep.handler_by_name("c.sum").expect("c.sum");
        let count = ep.handler_by_name("c.count").expect("c.count");
        let done = ep.handler_by_name("c.done").expect("c.done");

        // Short, with a reply.
        let r = ep.call(c, add, 0, [2, 3, 0, 0], wait).expect("call c.add");
        assert_eq!(r[0], 5);
        // Bulk: 64 KiB, summed in place by the C handler.
        let payload: Vec<u8> = (0..64 * 1024u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let call = ep
            .send_bulk(c, sum, 0, [9, 0, 0, 0], &payload, Want::Reply)
            .expect("send c.sum");
        match ep.wait(call, wait).expect("c.sum's reply") {
            Outcome::Reply(r) => assert_eq!(r[..2], [fnv(&payload), payload.len() as u64]),
            other => panic!("c.sum: {other:?}"),
        }
        // Remote completion, three times.
        for _ in 0..3 {
            let call = ep
                .send_short(c, count, 0, [0; 4], Want::Ack)
                .expect("send c.count");
            assert_eq!(ep.wait(call, wait).expect("c.count done"), Outcome::Done);
        }
        // A C handler that uses its reply token twice: an error at the sender.
        let twice = ep.handler_by_name("c.twice").expect("c.twice");
        match ep.call(c, twice, 0, [0; 4], wait) {
            Err(hamlyn_am::AmError::Refused { handler, .. }) => assert_eq!(handler, "c.twice"),
            other => panic!("c.twice: {other:?}"),
        }
        // A memory message into C's region.
        let target = ep
            .memory_target(&hamlyn::seed::from_text(&lines[1]).expect("C's region seed"))
            .expect("target");
        let sent = target.write(8, b"written by Rust").expect("memory message");
        // Serve C's calls (rust.check_mem comes last) until they are all done.
        let deadline = std::time::Instant::now() + wait;
        while !checked.get() || !sent.status().is_done() {
            assert!(
                std::time::Instant::now() < deadline,
                "C never called rust.check_mem"
            );
            ep.poll(Some(Duration::from_millis(20))).expect("poll");
        }
        assert!(!sent.status().is_failed(), "{:?}", sent.status());
        assert_eq!(
            counted.get(),
            1,
            "C's call of rust.count with remote completion"
        );
        // No acknowledgement wanted: the C process leaves as soon as its handler ran (an
        // ack could find it gone); its exit is the answer. This endpoint keeps serving
        // meanwhile (an answer of ours still waiting for credit goes out in a poll).
        ep.send_short(c, done, 0, [0; 4], Want::Nothing)
            .expect("send c.done");
        let mut child = child;
        let deadline = std::time::Instant::now() + RUN_BOUND;
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("am ({mode:?}) did not finish within {RUN_BOUND:?}");
            }
            ep.poll(Some(Duration::from_millis(20))).expect("poll");
        };
        assert!(status.success(), "am ({mode:?}): {status}");
    }
}

/// The README's C examples, as a user would take them: cut from the README, built with
/// the installed header and library through pkg-config, run; each prints what it is
/// listed with here (the first sends itself "hello", the second calls its own active
/// message handler, the third is a job of one through a daemon).
#[test]
fn the_readme_examples_build_and_run() {
    const EXPECTED: [&str; 3] = ["5 bytes", "6 * 7 = 42", "rank 0 of 1"];
    let b = built();
    let d = daemon();
    let readme = std::fs::read_to_string(crate_dir().join("../../README.md")).expect("README");
    let blocks: Vec<&str> = readme
        .split("```c\n")
        .skip(1)
        .map(|rest| &rest[..rest.find("```").expect("the C block's end")])
        .collect();
    assert_eq!(
        blocks.len(),
        EXPECTED.len(),
        "a C block in the README without its output here"
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hamlyn-capi-readme");
    std::fs::create_dir_all(&dir).expect("dir");
    for (i, (code, want)) in blocks.iter().zip(EXPECTED).enumerate() {
        let src = dir.join(format!("example{i}.c"));
        let exe = dir.join(format!("example{i}"));
        std::fs::write(&src, code).expect("example source");
        run_ok(
            Command::new("cc")
                .args(["-Wall", "-Werror"])
                .arg(&src)
                .args(pkg_config(&b.prefix))
                .arg("-o")
                .arg(&exe),
        );
        let out = Command::new(&exe)
            .env("LD_LIBRARY_PATH", b.prefix.join("lib"))
            .env("HAMLYN_SOCKET", &d.socket)
            .env_remove("HAMLYN_RANK")
            .env_remove("SLURM_PROCID")
            .env_remove("PMI_RANK")
            .env_remove("OMPI_COMM_WORLD_RANK")
            .output()
            .expect("run the example");
        assert!(out.status.success(), "example {i}: {out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            want,
            "example {i}"
        );
    }
}
