//! Counts, not times, for the Rats bench's goal ratio (issue 10): runs the bench's own
//! raw 64 KiB sends and 64 KiB stream records (`hamlyn bench --layers rats`' functions,
//! on an embedded engine started as the bench starts it), in turns, and prints per
//! message what progress by the waiting thread did (`Driver::stats`) and the process's
//! page faults, beside each repetition's bandwidth and the paired ratio. Context
//! switches and system calls come from running it under `perf stat` or `strace -f -c`
//! (docs/PERFORMANCE.md, "Rats (issue 10)").
//!
//! `cargo run --release -p hamlyn-bench --example rats_stream_counts [REPS] [MIB] [raw|stream]`
//! (defaults: 5 repetitions of 32 MiB each, as `--quick`, of both; one side alone for
//! `perf stat` of that side).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hamlyn_engine::{DriveStats, Driver, EngineConfig, EngineHandle};

/// The process's minor page faults so far (all its threads, ended ones included).
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Field 10; the fields after the command's closing parenthesis start at field 3.
    stat.rsplit(')')
        .next()
        .and_then(|r| r.split_whitespace().nth(7))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn drive_stats(e: &EngineHandle) -> DriveStats {
    Driver::for_socket(e.socket_path())
        .expect("the engine is drivable")
        .stats()
        .expect("the engine runs")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let reps: usize = args.next().map_or(5, |s| s.parse().expect("REPS"));
    let mib: u64 = args.next().map_or(32, |s| s.parse().expect("MIB"));
    let only = args.next();
    // `RECORDS=copied`: records copied in (`write_record`) instead of the bench's
    // zero-copy ones.
    let how = if std::env::var("RECORDS").is_ok_and(|v| v == "copied") {
        hamlyn_bench::rats::StreamWrite::Records
    } else {
        hamlyn_bench::rats::StreamWrite::Buffers
    };
    let total = mib << 20;
    let msgs = (total / 65_536) as f64;
    let engine = EngineHandle::start(EngineConfig::embedded()).expect("engine");
    let socket = engine.socket_path().to_path_buf();
    let observer = hamlyn::Node::connect(&socket).expect("an observer attaches");
    let counters = || observer.stats().expect("the engine's statistics").engine;
    let mut ratios = Vec::new();
    for _ in 0..reps {
        let mut pair = [0.0; 2];
        for (i, kind) in ["raw", "stream"].into_iter().enumerate() {
            if only.as_deref().is_some_and(|o| o != kind) {
                continue;
            }
            let (a, fa, ca) = (drive_stats(&engine), minor_faults(), counters());
            pair[i] = if i == 0 {
                hamlyn_bench::rats::raw_bandwidth(&socket, total).expect("raw sends")
            } else {
                hamlyn_bench::rats::stream(&socket, 65_536, how, total).expect("stream")
            };
            let (b, fb, cb) = (drive_stats(&engine), minor_faults(), counters());
            let per = |x: u64, y: u64| (y - x) as f64 / msgs;
            println!(
                "{kind:6} {:6.2} GB/s | per message: page faults {:.2}, turns by waiting \
                 threads {:.2} (of them by senders {:.2}), engine thread let go {:.3}, \
                 engine sleeps {:.2} (for nothing {:.2})",
                pair[i],
                per(fa, fb),
                per(a.turns_by_waiters, b.turns_by_waiters),
                per(a.turns_by_senders, b.turns_by_senders),
                per(a.engine_thread_let_go, b.engine_thread_let_go),
                per(ca.sleeps, cb.sleeps),
                per(ca.idle_wakes, cb.idle_wakes),
            );
        }
        ratios.push(pair[1] / pair[0]);
    }
    if only.is_some() {
        engine.stop().expect("engine stops");
        return;
    }
    let mut sorted = ratios.clone();
    sorted.sort_by(f64::total_cmp);
    let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    println!(
        "stream ÷ raw, each pair: {}; median {:.2}",
        shown.join(" "),
        sorted[sorted.len() / 2]
    );
    engine.stop().expect("engine stops");
}
