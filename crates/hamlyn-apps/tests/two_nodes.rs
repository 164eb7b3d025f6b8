//! The applications across two nodes: two engines joined by the TCP fabric (two rails,
//! authenticated links, loopback), the registry on node 0, four ranks — two on each
//! node. Each result must equal its sequential twin.
#![allow(clippy::unwrap_used)]

mod common;

use hamlyn_apps::circuit::{sequential as add_all, test_vectors, Circuit};
use hamlyn_apps::ising::{rows_of, sequential, Params};
use hamlyn_engine::EngineHandle;

fn two_nodes() -> (EngineHandle, EngineHandle) {
    let mut engines = hamlyn_engine::cluster::tcp_engines(2, 2).unwrap();
    let b = engines.pop().unwrap();
    (engines.pop().unwrap(), b)
}

/// Runs `bin ARGS` as four ranks, 0 and 1 on `a`, 2 and 3 on `b`.
fn run_ranks(bin: &str, args: &[String], a: &EngineHandle, b: &EngineHandle, job: &str) {
    let sockets = [
        a.socket_path(),
        a.socket_path(),
        b.socket_path(),
        b.socket_path(),
    ];
    common::run_ranks(bin, args, &sockets, job);
}

#[test]
fn ising_and_the_adder_across_two_nodes_equal_their_sequential_runs() {
    let (a, b) = two_nodes();
    let out = std::env::temp_dir().join(format!("hamlyn-apps-two-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();

    let p = Params {
        n: 24,
        sweeps: 6,
        beta: 0.44,
        seed: 5,
    };
    let args: Vec<String> = vec![
        p.n.to_string(),
        p.sweeps.to_string(),
        p.beta.to_string(),
        p.seed.to_string(),
        out.display().to_string(),
    ];
    run_ranks(
        env!("CARGO_BIN_EXE_hamlyn-ising"),
        &args,
        &a,
        &b,
        "ising-two",
    );
    let mut grid = Vec::new();
    for r in 0..4 {
        let bytes = std::fs::read(out.join(format!("rows-{r}"))).unwrap();
        assert_eq!(bytes.len(), rows_of(r, 4, p.n).len() * p.n);
        grid.extend(bytes.iter().map(|b| *b as i8));
    }
    assert!(grid == sequential(&p), "the spins differ across nodes");

    let args: Vec<String> = vec!["16".into(), "random:5".into(), out.display().to_string()];
    run_ranks(
        env!("CARGO_BIN_EXE_hamlyn-circuit"),
        &args,
        &a,
        &b,
        "adder-two",
    );
    let got: Vec<u64> = std::fs::read_to_string(out.join("results"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(got, add_all(&Circuit::adder32(), &test_vectors(16, 42)));
    let _ = std::fs::remove_dir_all(&out);
    a.stop().unwrap();
    b.stop().unwrap();
}
