//! One rank of the parallel Ising model (`hamlyn run -n P -- hamlyn-ising N SWEEPS BETA
//! SEED [OUT]`): prints its time, and with OUT writes its rows to `OUT/rows-RANK`.
//! `hamlyn-ising --sequential N SWEEPS BETA SEED` times the sequential program instead
//! (the reference of `bench/apps.sh`'s speedups).

use std::time::Instant;

use hamlyn_apps::ising::{parallel, Params};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut a: Vec<String> = std::env::args().skip(1).collect();
    let sequential = a.first().is_some_and(|s| s == "--sequential");
    if sequential {
        a.remove(0);
    }
    let usage = "usage: hamlyn-ising [--sequential] N SWEEPS BETA SEED [OUT]";
    let get = |i: usize| a.get(i).ok_or(usage);
    let p = Params {
        n: get(0)?.parse()?,
        sweeps: get(1)?.parse()?,
        beta: get(2)?.parse()?,
        seed: get(3)?.parse()?,
    };
    if sequential {
        let t = Instant::now();
        let g = hamlyn_apps::ising::sequential(&p);
        let took = t.elapsed();
        println!(
            "ising {n}x{n}, {s} sweeps, sequential: {ms:.3} ms (energy {e})",
            n = p.n,
            s = p.sweeps,
            ms = took.as_secs_f64() * 1e3,
            e = hamlyn_apps::ising::energy(&g, p.n)
        );
        return Ok(());
    }
    let mut job = hamlyn_job::Job::init()?;
    let node = hamlyn::Node::connect_default()?;
    job.barrier()?;
    let t = Instant::now();
    let rows = parallel(&mut job, &node, &p)?;
    job.barrier()?;
    let took = t.elapsed();
    if let Some(out) = a.get(4) {
        let bytes: Vec<u8> = rows.iter().map(|s| *s as u8).collect();
        std::fs::write(format!("{out}/rows-{}", job.rank()), bytes)?;
    }
    if job.rank() == 0 {
        println!(
            "ising {n}x{n}, {s} sweeps, {size} process(es): {ms:.3} ms",
            n = p.n,
            s = p.sweeps,
            size = job.size(),
            ms = took.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
