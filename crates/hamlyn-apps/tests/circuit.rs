//! The parallel circuit simulator computes a + b (+ carry) for every vector, equal to the
//! sequential simulation, with 1, 2 and 4 processes and gates placed linearly or at
//! random (real processes of the `hamlyn-circuit` binary, one engine).
#![allow(clippy::unwrap_used)]

mod common;

use hamlyn_apps::circuit::{owner, sequential, test_vectors, Circuit, Kind, Placement};
use hamlyn_engine::{EngineConfig, EngineHandle};

#[test]
fn the_adder_has_225_elements_and_adds() {
    let c = Circuit::adder32();
    let probes = c
        .gates
        .iter()
        .filter(|g| matches!(g.kind, Kind::Output(_)))
        .count();
    assert_eq!((c.gates.len() - probes, probes), (225, 33));
    let v = test_vectors(40, 1);
    for (v, r) in v.iter().zip(sequential(&c, &v)) {
        assert_eq!(r, u64::from(v.0) + u64::from(v.1) + u64::from(v.2), "{v:?}");
    }
}

#[test]
fn placements_cover_every_rank_and_outputs_go_to_rank_0() {
    let c = Circuit::adder32();
    for placement in [Placement::Linear, Placement::Random(3)] {
        let mut used = [0usize; 4];
        for g in 0..c.gates.len() {
            let r = owner(&c, g, 4, placement);
            used[r as usize] += 1;
            if matches!(c.gates[g].kind, Kind::Output(_)) {
                assert_eq!(r, 0);
            }
        }
        assert!(used.iter().all(|n| *n > 10), "{placement:?}: {used:?}");
    }
}

#[test]
fn the_parallel_simulation_adds_like_the_sequential_one() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    let vectors = 20;
    let want = sequential(&Circuit::adder32(), &test_vectors(vectors, 42));
    for (procs, placement) in [
        (1u32, "linear"),
        (2, "linear"),
        (2, "random:7"),
        (4, "linear"),
        (4, "random:9"),
    ] {
        let out = std::env::temp_dir().join(format!(
            "hamlyn-circuit-{}-{procs}-{}",
            std::process::id(),
            placement.replace(':', "")
        ));
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        let job = format!("circuit-{procs}-{}", placement.replace(':', ""));
        let args = [
            vectors.to_string(),
            placement.to_string(),
            out.display().to_string(),
        ];
        let sockets = vec![engine.socket_path(); procs as usize];
        common::run_ranks(env!("CARGO_BIN_EXE_hamlyn-circuit"), &args, &sockets, &job);
        let got: Vec<u64> = std::fs::read_to_string(out.join("results"))
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(got, want, "{procs} processes, {placement}");
        let _ = std::fs::remove_dir_all(&out);
    }
    engine.stop().unwrap();
}
