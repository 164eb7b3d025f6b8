//! The Ising model of seed 004 §3.2.1.
//!
//! An N×N grid of spins (±1) on a torus, updated by red/black Metropolis sweeps at
//! inverse temperature β: a sweep updates every "red" site (`(row + col)` even), then
//! every "black" one; a site of one colour depends only on sites of the other, so the
//! sites of a colour can be updated in any order, by any process. Every random draw is a
//! hash of (seed, sweep, row, column), not a stream, so the parallel run makes exactly the
//! sequential run's decisions and must end with the same spins and energy.
//!
//! The parallel run splits the rows among the job's ranks. Each rank keeps its rows and
//! four ghost rows (the rows above and below its block, twice: one pair for even phases,
//! one for odd, so a neighbour that runs ahead never writes a ghost row still being
//! read). After updating one colour (a *phase*), a rank writes its top row into its upper
//! neighbour's bottom ghost row and its bottom row into its lower neighbour's top ghost
//! row with remote writes tagged with the phase, and waits for the two writes of that
//! phase from its neighbours: the synchronisation is the arrival notifications, per
//! neighbour pair, with no global barrier (the paper used compare-and-swap flags for
//! the same purpose).

use std::collections::HashMap;
use std::ops::Range;
use std::time::Duration;

use hamlyn::{Area, Data, Node, SendOptions, Ticket};
use hamlyn_job::Job;

use crate::AppError;

/// A run's parameters; every rank must be given the same.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// The grid is `n` × `n`: even (on a torus of odd side a colour's sites would touch
    /// each other across the seam, and the update order would matter), at least 2.
    pub n: usize,
    /// Full sweeps (each a red and a black phase).
    pub sweeps: u32,
    /// Inverse temperature.
    pub beta: f64,
    /// Seed of the initial spins and of every random draw.
    pub seed: u64,
}

fn mix(mut x: u64) -> u64 {
    // splitmix64's finaliser.
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn draw(seed: u64, sweep: u64, row: usize, col: usize) -> u64 {
    mix(seed ^ mix(sweep.wrapping_add(1) ^ mix(((row as u64) << 32) | col as u64)))
}

/// The spin at (`row`, `col`) before the first sweep.
pub fn initial_spin(seed: u64, row: usize, col: usize) -> i8 {
    if draw(seed, u64::MAX, row, col) & 1 == 0 {
        1
    } else {
        -1
    }
}

/// The Metropolis acceptance thresholds for ΔE = 4 and 8 (others are always accepted),
/// as 64-bit integers a draw is compared with, so both runs decide alike.
fn thresholds(beta: f64) -> [u64; 2] {
    [4.0, 8.0].map(|de: f64| {
        let p = (-beta * de).exp().clamp(0.0, 1.0);
        (p * (u64::MAX as f64)) as u64
    })
}

/// Updates the sites of `color` in rows `rows` of a grid whose row `r` (global) is read
/// through `row(r)` and written through `set`.
fn flip(s: i8, sum: i32, u: u64, th: &[u64; 2]) -> i8 {
    let de = 2 * i32::from(s) * sum;
    let accept = match de {
        d if d <= 0 => true,
        4 => u < th[0],
        _ => u < th[1],
    };
    if accept {
        -s
    } else {
        s
    }
}

/// The whole run on one process: the reference.
pub fn sequential(p: &Params) -> Vec<i8> {
    let n = p.n;
    let mut g: Vec<i8> = (0..n * n)
        .map(|k| initial_spin(p.seed, k / n, k % n))
        .collect();
    let th = thresholds(p.beta);
    for sweep in 0..u64::from(p.sweeps) {
        for color in 0..2 {
            for r in 0..n {
                for c in 0..n {
                    if (r + c) % 2 != color {
                        continue;
                    }
                    let at = |rr: usize, cc: usize| i32::from(g[rr * n + cc]);
                    let sum = at((r + n - 1) % n, c)
                        + at((r + 1) % n, c)
                        + at(r, (c + n - 1) % n)
                        + at(r, (c + 1) % n);
                    g[r * n + c] = flip(g[r * n + c], sum, draw(p.seed, sweep, r, c), &th);
                }
            }
        }
    }
    g
}

/// The energy `-Σ s_i s_j` over nearest-neighbour pairs of an `n`×`n` torus.
pub fn energy(g: &[i8], n: usize) -> i64 {
    let mut e = 0i64;
    for r in 0..n {
        for c in 0..n {
            let s = i64::from(g[r * n + c]);
            e -= s * i64::from(g[((r + 1) % n) * n + c]);
            e -= s * i64::from(g[r * n + (c + 1) % n]);
        }
    }
    e
}

/// The rows rank `rank` of `size` owns (blocks, the first `n % size` one row longer).
pub fn rows_of(rank: u32, size: u32, n: usize) -> Range<usize> {
    let (rank, size) = (rank as usize, size as usize);
    let (base, extra) = (n / size, n % size);
    let start = rank * base + rank.min(extra);
    start..start + base + usize::from(rank < extra)
}

/// Where a ghost row lives, after the `local` rows: parity (of the phase that wrote it),
/// then top (0) or bottom (1).
fn ghost(local: usize, parity: u64, which: usize) -> usize {
    local + (parity as usize) * 2 + which
}

/// This rank's share of the parallel run: returns its rows (row-major) after `p.sweeps`
/// sweeps. `node` carries the boundary rows; `job` gives the rank and exchanges tickets.
pub fn parallel(job: &mut Job, node: &Node, p: &Params) -> Result<Vec<i8>, AppError> {
    let (rank, size, n) = (job.rank(), job.size(), p.n);
    if n < 2 || n % 2 == 1 || (size as usize) > n {
        return Err(AppError::Params(format!(
            "a {n}×{n} grid (even, at least 2) cannot be split among {size} processes"
        )));
    }
    let rows = rows_of(rank, size, n);
    let local = rows.len();
    let row_bytes = n as u64;
    // Local rows, then the four ghost rows, in one area; the ghost rows are a slot.
    let area: Area = node.area(((local + 4) * n) as u64)?;
    let meta = node.meta_area(4)?;
    let ghosts = node
        .slot(&area)
        .range(local as u64 * row_bytes..(local + 4) as u64 * row_bytes)
        .meta(&meta)
        .queue(0)
        .create()?;
    let mut queue = node.queue(0)?;
    let mut terminus = node.terminus(0)?;
    let mut seed = hamlyn::Seed::single(ghosts.ticket_all()?);
    seed.data = (local as u64).to_le_bytes().to_vec();
    let all = job.all_gather(&seed)?;
    let up = (rank + size - 1) % size;
    let down = (rank + 1) % size;
    let ticket = |r: u32| -> Result<Ticket, AppError> {
        all.get(r as usize)
            .and_then(|s| s.tickets.first().copied())
            .ok_or_else(|| AppError::Params(format!("rank {r} published no ghost rows")))
    };
    let (to_up, to_down) = (ticket(up)?, ticket(down)?);

    let mut g: Vec<i8> = Vec::with_capacity((local + 4) * n);
    for r in rows.clone() {
        g.extend((0..n).map(|c| initial_spin(p.seed, r, c)));
    }
    g.resize((local + 4) * n, 0);
    let as_bytes = |g: &[i8]| g.iter().map(|s| *s as u8).collect::<Vec<u8>>();
    let th = thresholds(p.beta);
    // Phase 0 hands out the initial boundary rows; phase k ≥ 1 updates colour (k-1) % 2
    // of sweep (k-1) / 2 with the ghost rows of phase k-1, then hands out its boundary.
    let mut arrived: HashMap<u64, u32> = HashMap::new();
    for phase in 0..=2 * u64::from(p.sweeps) {
        if phase > 0 {
            let (sweep, color) = ((phase - 1) / 2, ((phase - 1) % 2) as usize);
            let parity = (phase - 1) % 2;
            let top = ghost(local, parity, 0) * n;
            let bottom = ghost(local, parity, 1) * n;
            for li in 0..local {
                let gr = rows.start + li;
                for c in 0..n {
                    if (gr + c) % 2 != color {
                        continue;
                    }
                    let above = if li == 0 { top + c } else { (li - 1) * n + c };
                    let below = if li + 1 == local {
                        bottom + c
                    } else {
                        (li + 1) * n + c
                    };
                    let sum = i32::from(g[above])
                        + i32::from(g[below])
                        + i32::from(g[li * n + (c + n - 1) % n])
                        + i32::from(g[li * n + (c + 1) % n]);
                    let at = li * n + c;
                    g[at] = flip(g[at], sum, draw(p.seed, sweep, gr, c), &th);
                }
            }
        }
        // Hand out the boundary rows: written into the area first, then sent from it.
        area.write(0, &as_bytes(&g[..local * n]))?;
        let parity = phase % 2;
        let opts = |which: usize| {
            SendOptions::new()
                .tag(phase)
                .offset((ghost(0, parity, which)) as u64 * row_bytes)
        };
        let top_row = [area.span(0, row_bytes)];
        let bottom_row = [area.span((local as u64 - 1) * row_bytes, row_bytes)];
        let h_up = terminus.send(&to_up, &opts(1), Data::Gather(&top_row))?;
        let h_down = terminus.send(&to_down, &opts(0), Data::Gather(&bottom_row))?;
        for h in [h_up, h_down] {
            let s = h.wait(Some(Duration::from_secs(120)));
            if s != hamlyn::Status::Sent {
                return Err(AppError::Failed(s));
            }
        }
        // Wait for this phase's two rows from the neighbours.
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while arrived.get(&phase).copied().unwrap_or(0) < 2 {
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(AppError::Timeout(format!(
                    "phase {phase}: {} of 2 boundary rows arrived",
                    arrived.get(&phase).copied().unwrap_or(0)
                )));
            }
            if let Some(note) = queue.wait(Some(deadline - now))? {
                // Counted for this phase or the next only (a neighbour is at most one
                // ahead), so no writer can grow the map.
                if note.slot == ghosts.id() && (phase..=phase + 1).contains(&note.word) {
                    *arrived.entry(note.word).or_insert(0) += 1;
                }
            }
        }
        arrived.remove(&phase);
        // The ghost rows of this phase, into the working copy.
        for which in 0..2 {
            let at = ghost(local, parity, which) * n;
            let bytes = area.read_vec(at as u64, n)?;
            for (d, b) in g[at..at + n].iter_mut().zip(bytes) {
                *d = b as i8;
            }
        }
    }
    g.truncate(local * n);
    Ok(g)
}
