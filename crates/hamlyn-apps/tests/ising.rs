//! The parallel Ising model equals its sequential twin, spin for spin, with 1, 2 and 4
//! processes (real processes of the `hamlyn-ising` binary, one engine), for grids that
//! split evenly and unevenly.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use hamlyn_apps::ising::{energy, initial_spin, rows_of, sequential, Params};
use hamlyn_engine::{EngineConfig, EngineHandle};

fn run_parallel(socket: &Path, p: &Params, procs: u32, job: &str) -> Vec<i8> {
    let out = std::env::temp_dir().join(format!("hamlyn-ising-{}-{job}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let args = [
        p.n.to_string(),
        p.sweeps.to_string(),
        p.beta.to_string(),
        p.seed.to_string(),
        out.display().to_string(),
    ];
    let sockets = vec![socket; procs as usize];
    common::run_ranks(env!("CARGO_BIN_EXE_hamlyn-ising"), &args, &sockets, job);
    let mut grid = Vec::with_capacity(p.n * p.n);
    for r in 0..procs {
        let bytes = std::fs::read(out.join(format!("rows-{r}"))).unwrap();
        assert_eq!(
            bytes.len(),
            rows_of(r, procs, p.n).len() * p.n,
            "rank {r}'s rows"
        );
        grid.extend(bytes.iter().map(|b| *b as i8));
    }
    let _ = std::fs::remove_dir_all(&out);
    grid
}

#[test]
fn the_sequential_model_cools_down_and_is_reproducible() {
    let p = Params {
        n: 32,
        sweeps: 50,
        beta: 0.8,
        seed: 11,
    };
    let start: Vec<i8> = (0..p.n * p.n)
        .map(|k| initial_spin(p.seed, k / p.n, k % p.n))
        .collect();
    let end = sequential(&p);
    assert_eq!(end, sequential(&p), "the same seed, the same run");
    assert!(
        energy(&end, p.n) < energy(&start, p.n) / 2,
        "a cold grid orders: {} -> {}",
        energy(&start, p.n),
        energy(&end, p.n)
    );
    assert_ne!(
        sequential(&Params { seed: 12, ..p }),
        end,
        "another seed, another run"
    );
}

#[test]
fn the_rows_are_shared_out_whole() {
    for (n, size) in [(20usize, 1u32), (20, 4), (21, 4), (5, 5)] {
        let mut next = 0;
        for r in 0..size {
            let rows = rows_of(r, size, n);
            assert_eq!(rows.start, next);
            assert!(!rows.is_empty());
            next = rows.end;
        }
        assert_eq!(next, n);
    }
}

#[test]
fn the_parallel_model_equals_the_sequential_one_with_1_2_and_4_processes() {
    let engine = EngineHandle::start(EngineConfig::embedded()).unwrap();
    for (n, sweeps, procs) in [
        (20usize, 10u32, 1u32),
        (20, 10, 2),
        (20, 10, 4),
        (22, 6, 4),
        (40, 4, 2),
    ] {
        let p = Params {
            n,
            sweeps,
            beta: 0.44,
            seed: 7 + n as u64,
        };
        let want = sequential(&p);
        let got = run_parallel(engine.socket_path(), &p, procs, &format!("n{n}p{procs}"));
        assert_eq!(got.len(), want.len());
        assert!(got == want, "{n}x{n}, {procs} processes: the spins differ");
        assert_eq!(energy(&got, n), energy(&want, n));
    }
    engine.stop().unwrap();
}
