//! `hamlyn bench` as a user runs it: reduced (`--smoke`) runs through one engine and
//! through two engines over TCP, writing their JSON reports and plots, and the options it
//! refuses. Built with the `bench` feature only.
//!
//! Every wait is bounded; the only processes killed are the ones a test started, by their
//! pid.

mod common;

use std::time::Duration;

use common::{run, text, TempDir};
use serde_json::Value;

/// Runs `hamlyn bench --smoke --json FILE` with `extra` arguments in `dir`; returns the
/// table printed and the parsed report.
fn bench_smoke(dir: &TempDir, extra: &[&str]) -> (String, Value) {
    let report = dir.path("bench.json");
    let mut args = vec![
        "bench",
        "--smoke",
        "--json",
        report.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    let out = run(&args, Duration::from_secs(240));
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "bench {extra:?}: {}\n{stdout}",
        text(&out.stderr)
    );
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("the report exists"))
            .expect("the report is JSON");
    (stdout, v)
}

fn positive(x: Option<&Value>) -> bool {
    x.and_then(Value::as_f64).is_some_and(|f| f > 0.0)
}

const LATENCY_SIZES: [u64; 7] = [8, 64, 512, 4096, 65536, 1 << 20, 4 << 20];
const BANDWIDTH_SIZES: [u64; 6] = [64, 512, 4096, 65536, 1 << 20, 4 << 20];

/// The (op, size) rows a mode must report, in the order measured.
fn expected_rows(mode: &str) -> Vec<(String, u64)> {
    let mut rows = Vec::new();
    for op in ["polled_write", "tagged_write", "datagram"] {
        rows.extend(LATENCY_SIZES.map(|s| (op.to_string(), s)));
    }
    if mode != "direct" {
        rows.extend(LATENCY_SIZES.map(|s| ("read".to_string(), s)));
        rows.push(("fetch_add".to_string(), 8));
    }
    rows.extend(BANDWIDTH_SIZES.map(|s| ("bandwidth".to_string(), s)));
    rows.push(("msg_rate".to_string(), 8));
    rows
}

/// Checks the report's shape: the floor's common keys, and every result row of `modes`
/// with positive figures where they apply and nulls elsewhere, in the documented order.
fn check_report(v: &Value, modes: &[&str]) {
    let top: Vec<&str> = v
        .as_object()
        .expect("an object")
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(
        top,
        [
            "floor",
            "results",
            "loopback",
            "fairness",
            "scaling",
            "peers",
            "targets",
            "layers",
            "placement"
        ]
    );
    let floor = v.get("floor").expect("floor");
    assert!(positive(floor.get("shm_pingpong_oneway_us")));
    let memcpy = floor.get("memcpy_gbps").expect("memcpy_gbps");
    for size in BANDWIDTH_SIZES {
        assert!(
            positive(memcpy.get(size.to_string())),
            "memcpy_gbps[{size}]"
        );
    }

    let results = v.get("results").and_then(Value::as_array).expect("results");
    let mut seen: Vec<(String, String, u64)> = Vec::new();
    for r in results {
        let mode = r.get("mode").and_then(Value::as_str).expect("mode");
        let op = r.get("op").and_then(Value::as_str).expect("op");
        let size = r.get("size").and_then(Value::as_u64).expect("size");
        let (fields, nulls): (&[&str], &[&str]) = match op {
            "tagged_write" | "polled_write" | "datagram" | "read" | "fetch_add" => {
                (&["p50_us", "p99_us", "p999_us"], &["gbps", "msgs_per_s"])
            }
            "bandwidth" => (&["gbps"], &["p50_us", "p99_us", "p999_us", "msgs_per_s"]),
            "msg_rate" => (&["msgs_per_s"], &["p50_us", "p99_us", "p999_us", "gbps"]),
            other => panic!("unknown op {other:?}"),
        };
        for f in fields {
            assert!(
                positive(r.get(f)),
                "{mode} {op} {size}: {f} must be positive"
            );
        }
        for f in nulls {
            assert_eq!(
                r.get(f),
                Some(&Value::Null),
                "{mode} {op} {size}: {f} must be null"
            );
        }
        seen.push((mode.to_string(), op.to_string(), size));
    }
    let expect: Vec<(String, String, u64)> = modes
        .iter()
        .flat_map(|m| {
            expected_rows(m)
                .into_iter()
                .map(|(op, size)| (m.to_string(), op, size))
        })
        .collect();
    assert_eq!(seen, expect);
}

#[test]
fn bench_smoke_measures_every_mode_and_writes_json_and_plots() {
    let dir = TempDir::new("bench");
    let plots = dir.path("plots");
    let (stdout, v) = bench_smoke(&dir, &["--plot", plots.to_str().expect("utf-8 path")]);
    for want in [
        "floor",
        "tagged write",
        "write, polled",
        "datagram",
        "read (RTT)",
        "fetch-add (RTT)",
        "bandwidth",
        "message rate",
        "÷ floor",
        "raw TCP",
        "Fairness",
        "Jain's index",
        "Scaling",
        "Targets",
    ] {
        assert!(stdout.contains(want), "{want:?} missing from\n{stdout}");
    }
    check_report(&v, &["direct", "mediated", "tcp"]);
    let tcp = v
        .get("floor")
        .and_then(|f| f.get("tcp_floor"))
        .expect("floor.tcp_floor");
    for key in [
        "pingpong_oneway_us",
        "pingpong_blocking_oneway_us",
        "pingpong_spinning_oneway_us",
    ] {
        let by_size = tcp.get(key).expect(key);
        for size in LATENCY_SIZES {
            assert!(positive(by_size.get(size.to_string())), "{key}[{size}]");
        }
    }
    for key in [
        "stream_gbps",
        "stream_blocking_gbps",
        "stream_spinning_gbps",
    ] {
        let by_size = tcp.get(key).expect(key);
        for size in BANDWIDTH_SIZES {
            assert!(positive(by_size.get(size.to_string())), "{key}[{size}]");
        }
    }
    assert!(positive(
        tcp.get("stream_msgs_per_s").and_then(|r| r.get("8"))
    ));

    let loopback = v
        .get("loopback")
        .and_then(Value::as_array)
        .expect("loopback");
    assert_eq!(loopback.len(), 1);
    assert!(positive(loopback[0].get("p50_us")));

    // Fairness: every terminus got a share, and the index is one of a real share.
    let fairness = v
        .get("fairness")
        .and_then(Value::as_array)
        .expect("fairness");
    assert_eq!(fairness.len(), 2);
    for f in fairness {
        let shares = f
            .get("per_terminus_gbps")
            .and_then(Value::as_array)
            .expect("shares");
        assert_eq!(shares.len(), 4);
        assert!(shares.iter().all(|g| positive(Some(g))), "{shares:?}");
        let jain = f.get("jain").and_then(Value::as_f64).expect("jain");
        assert!((0.25..=1.0).contains(&jain), "Jain's index {jain}");
    }
    // Scaling: every point of both series, with the idle state they name.
    let points = v
        .get("scaling")
        .and_then(|s| s.get("points"))
        .and_then(Value::as_array)
        .expect("scaling.points");
    let named: Vec<(u64, u64)> = points
        .iter()
        .map(|p| {
            assert!(positive(p.get("p50_us")));
            (
                p.get("ports").and_then(Value::as_u64).expect("ports"),
                p.get("slots").and_then(Value::as_u64).expect("slots"),
            )
        })
        .collect();
    assert!(
        named.contains(&(1, 0)) && named.contains(&(1, 1)),
        "{named:?}"
    );
    assert_eq!(v.get("peers"), Some(&Value::Null), "only with --peers");
    let targets = v.get("targets").and_then(Value::as_array).expect("targets");
    assert!(targets.len() >= 5, "{targets:?}");

    for (name, line) in [
        ("latency.svg", "Hamlyn mediated"),
        ("latency-polled.svg", "Hamlyn direct"),
        ("bandwidth.svg", "Hamlyn tcp"),
        ("latency-direct.svg", "tagged write"),
        ("latency-mediated.svg", "fetch-add"),
        ("latency-tcp.svg", "read"),
    ] {
        let svg = std::fs::read_to_string(plots.join(name)).expect(name);
        assert!(svg.starts_with("<svg"), "{name}");
        assert!(svg.contains(line), "{name} has the line {line:?}");
    }
}

#[test]
fn bench_of_one_mode_measures_only_that_mode() {
    let dir = TempDir::new("bench-mediated");
    let (_, v) = bench_smoke(&dir, &["--modes", "mediated", "--no-extras"]);
    check_report(&v, &["mediated"]);
    let floor = v.get("floor").expect("floor");
    assert_eq!(
        floor.get("tcp_floor"),
        None,
        "raw TCP only with the tcp mode"
    );
    assert_eq!(
        v.get("fairness").and_then(Value::as_array).map(|a| a.len()),
        Some(0)
    );
    assert_eq!(v.get("scaling"), Some(&Value::Null));
}

/// `--pin` on a machine of two CPUs or more: every figure of both modes is measured, and
/// the report's placement (the CPUs each process's thread reported as it was about to be
/// measured) shows the two processes of each mode on two CPUs, the same two (since
/// 2026-12-07 the mediated mode's too: its engine's thread stays with the process that
/// hosts it, no longer alone on the other CPU). Skipped on one CPU, where `--pin` is
/// refused.
#[test]
fn bench_pinned_measures_both_modes_one_process_per_cpu() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        eprintln!("skipped: --pin needs two CPUs, this machine has {cpus}");
        return;
    }
    let dir = TempDir::new("bench-pinned");
    let (stdout, v) = bench_smoke(
        &dir,
        &["--pin", "--modes", "direct,mediated", "--no-extras"],
    );
    check_report(&v, &["direct", "mediated"]);
    assert!(stdout.contains(", pinned: direct, "), "{stdout}");
    // Where each phase ran, as the two processes' threads reported it.
    let cpus = |p: &Value, who: &str| -> Vec<u64> {
        p.get(who)
            .and_then(Value::as_array)
            .expect("a list of CPUs")
            .iter()
            .map(|c| c.as_u64().expect("a CPU number"))
            .collect()
    };
    let placement = v
        .get("placement")
        .and_then(Value::as_array)
        .expect("placement");
    let phase = |name: &str| {
        placement
            .iter()
            .find(|p| p.get("phase").and_then(Value::as_str) == Some(name))
            .unwrap_or_else(|| panic!("no placement for {name}: {placement:?}"))
    };
    let (direct, mediated) = (phase("direct"), phase("mediated"));
    let a = cpus(direct, "this_process");
    assert_eq!(a.len(), 1, "this process pinned to one CPU: {a:?}");
    let b = cpus(direct, "peer");
    assert_eq!(b.len(), 1, "the peer pinned to one CPU: {b:?}");
    assert_ne!(a, b, "direct: one process per CPU");
    assert_eq!(cpus(mediated, "this_process"), a);
    assert_eq!(cpus(mediated, "peer"), b, "mediated: placed as direct");
}

/// The (layer, mode, op, size) rows `--layers am,endpoints,rats,rpc` must report, in order.
fn expected_layer_rows() -> Vec<(String, String, String, u64)> {
    let mut rows = Vec::new();
    let mut add = |layer: &str, mode: &str, op: &str, size: u64| {
        rows.push((layer.into(), mode.into(), op.into(), size));
    };
    for mode in ["mediated", "tcp"] {
        add("am", mode, "short_rtt", 32);
        add("am", mode, "short_rate", 32);
        for size in [4096, 16384, 65536] {
            add("am", mode, "bulk_bandwidth", size);
        }
        for _ in [1, 2, 4, 8, 16, 32, 64, 128, 256] {
            add("am", mode, "channels_rtt", 32);
        }
    }
    for mode in ["direct", "mediated"] {
        for op in ["one_way", "msg_rate"] {
            for size in [64, 128, 256, 512] {
                add("endpoints", mode, op, size);
            }
        }
    }
    add("endpoints", "mediated", "priority_alone", 64);
    add("endpoints", "mediated", "priority_loaded", 64);
    add("endpoints", "mediated", "token_bucket_msgs", 512);
    add("endpoints", "mediated", "token_bucket_bytes", 512);
    for op in [
        "raw_tagged_write",
        "tagged_write",
        "simple_datagram_rtt",
        "request_response_rtt",
    ] {
        add("rats", "mediated", op, 16);
    }
    add("rats", "mediated", "raw_bandwidth", 65536);
    for size in [64, 1024, 65536] {
        add("rats", "mediated", "stream_records", size);
    }
    add("rats", "mediated", "stream_bytes", 65536);
    for mode in ["mediated", "tcp"] {
        for size in [0, 32, 256, 512, 1024] {
            add("rpc", mode, "rpc_rtt", size);
        }
        if mode == "mediated" {
            add("rpc", mode, "local_call", 0);
        }
        for _ in [1, 2, 4, 8, 16, 32] {
            add("rpc", mode, "rpc_rate", 0);
        }
    }
    rows
}

#[test]
fn bench_layers_measure_active_messages_endpoints_rats_and_rpc() {
    let dir = TempDir::new("bench-layers");
    let (stdout, v) = bench_smoke(
        &dir,
        &[
            "--layers",
            "am,endpoints,rats,rpc",
            "--modes",
            "direct,mediated,tcp",
        ],
    );
    for want in [
        "Active messages",
        "FLIPC endpoints",
        "Rats",
        "13 µs (seed 003",
        "FLIPC: 15.45 µs + 6.25 ns/B",
        "logical channels",
        "token bucket",
        "≥ 0.9× the raw send bandwidth",
        "Table 4",
        "local null function call",
    ] {
        assert!(stdout.contains(want), "{want:?} missing from\n{stdout}");
    }
    // Only the layers: no interface rows.
    assert_eq!(
        v.get("results").and_then(Value::as_array).map(Vec::len),
        Some(0)
    );
    let rows = v
        .get("layers")
        .and_then(|l| l.get("results"))
        .and_then(Value::as_array)
        .expect("layers.results");
    let mut seen = Vec::new();
    let mut channels = Vec::new();
    let mut rpc_outstanding = Vec::new();
    for r in rows {
        let s = |k: &str| r.get(k).and_then(Value::as_str).expect(k).to_string();
        let (layer, mode, op) = (s("layer"), s("mode"), s("op"));
        let size = r.get("size").and_then(Value::as_u64).expect("size");
        let figures = ["p50_us", "p99_us", "gbps", "msgs_per_s"];
        assert!(
            figures.iter().any(|f| positive(r.get(*f))),
            "{layer} {mode} {op} {size}: no figure in {r}"
        );
        if op == "channels_rtt" {
            channels.push(r.get("count").and_then(Value::as_u64).expect("channels"));
        }
        if op == "rpc_rate" {
            rpc_outstanding.push(r.get("count").and_then(Value::as_u64).expect("outstanding"));
        }
        if op.starts_with("token_bucket") {
            assert!(positive(r.get("count")), "the rate set: {r}");
        }
        seen.push((layer, mode, op, size));
    }
    assert_eq!(seen, expected_layer_rows());
    assert_eq!(
        channels,
        [1, 2, 4, 8, 16, 32, 64, 128, 256, 1, 2, 4, 8, 16, 32, 64, 128, 256]
    );
    assert_eq!(rpc_outstanding, [1, 2, 4, 8, 16, 32, 1, 2, 4, 8, 16, 32]);
    let goals: Vec<&str> = v
        .get("targets")
        .and_then(Value::as_array)
        .expect("targets")
        .iter()
        .filter_map(|t| t.get("goal").and_then(Value::as_str))
        .collect();
    for want in [
        "logical channels",
        "low-priority flood",
        "token bucket",
        "Rats stream",
        "cross-machine null round trip",
    ] {
        assert!(
            goals.iter().any(|g| g.contains(want)),
            "{want:?} not in {goals:?}"
        );
    }
}

#[test]
fn bench_refuses_options_that_do_not_apply() {
    let out = run(
        &["bench", "--smoke", "--modes", "mediated", "--rails", "2"],
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("tcp mode"),
        "{}",
        text(&out.stderr)
    );
    let out = run(
        &["bench", "--smoke", "--modes", "mediated,bogus"],
        Duration::from_secs(20),
    );
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("bogus"), "{}", text(&out.stderr));
}
