//! One rank of the parallel circuit simulator (`hamlyn run -n P -- hamlyn-circuit
//! VECTORS linear|random:SEED [OUT]`): rank 0 prints the time and checks every sum, and
//! with OUT writes the results (one per line) to `OUT/results`. `hamlyn-circuit
//! --sequential VECTORS` times the sequential evaluation instead (the reference of
//! `bench/apps.sh`'s speedups).

use std::time::Instant;

use hamlyn_apps::circuit::{parallel, test_vectors, Circuit, Placement};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut a: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: hamlyn-circuit [--sequential] VECTORS linear|random:SEED [OUT]";
    if a.first().is_some_and(|s| s == "--sequential") {
        a.remove(0);
        let count: usize = a.first().ok_or(usage)?.parse()?;
        let circuit = Circuit::adder32();
        let vectors = test_vectors(count, 42);
        let t = Instant::now();
        let results = hamlyn_apps::circuit::sequential(&circuit, &vectors);
        let took = t.elapsed();
        let right = vectors
            .iter()
            .zip(&results)
            .all(|(v, r)| *r == u64::from(v.0) + u64::from(v.1) + u64::from(v.2));
        if !right {
            return Err("the sequential adder is wrong".into());
        }
        println!(
            "adder of {} elements, {count} vectors, sequential: {:.3} ms",
            circuit.gates.len(),
            took.as_secs_f64() * 1e3
        );
        return Ok(());
    }
    let count: usize = a.first().ok_or(usage)?.parse()?;
    let placement = match a.get(1).map(String::as_str) {
        Some("linear") => Placement::Linear,
        Some(p) if p.starts_with("random:") => Placement::Random(p["random:".len()..].parse()?),
        _ => return Err(usage.into()),
    };
    let circuit = Circuit::adder32();
    let vectors = test_vectors(count, 42);
    let mut job = hamlyn_job::Job::init()?;
    job.barrier()?;
    let t = Instant::now();
    let results = parallel(&mut job, &circuit, &vectors, placement)?;
    let took = t.elapsed();
    if let Some(results) = results {
        for (v, r) in vectors.iter().zip(&results) {
            let want = u64::from(v.0) + u64::from(v.1) + u64::from(v.2);
            if *r != want {
                return Err(format!("{v:?}: {r} is not {want}").into());
            }
        }
        if let Some(out) = a.get(2) {
            let text: String = results.iter().map(|r| format!("{r}\n")).collect();
            std::fs::write(format!("{out}/results"), text)?;
        }
        println!(
            "adder of {} elements, {count} vectors, {} process(es), {placement:?}: {:.3} ms",
            circuit.gates.len(),
            job.size(),
            took.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
