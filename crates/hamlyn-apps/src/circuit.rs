//! The circuit simulator of seed 004 §3.2.2: a conservative (Chandy–Misra) simulation of
//! a 32-bit ripple-carry adder of 225 elements — 65 inputs (a, b, carry in) and 32 full
//! adders of five gates — and 33 output probes (sum and carry out), distributed over the
//! ranks of a job, linearly or at random.
//!
//! Every gate fires once per input vector, when all its inputs for that vector are known,
//! and sends its output value, stamped with the vector, to every gate it feeds: each
//! message is also the Chandy–Misra null message that lets the receiver advance, so no
//! gate ever waits on a time that will not come (the circuit is acyclic). A gate on
//! another rank is fed by a remote write of the event (8 bytes) into that rank's event
//! queue for the sender — a slot the receiver exported, one ring per sending rank — with
//! a notification naming the ring position. Vectors go in batches, a barrier between
//! batches, so a ring never wraps over an event not yet read and no notification queue
//! overflows.

use std::collections::HashMap;
use std::time::Duration;

use hamlyn::{Data, Node, NodeOptions, SendError, SendOptions, Ticket};
use hamlyn_job::Job;

use crate::AppError;

/// A circuit element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Bit `i` of operand a (0..32), b (32..64), or the carry in (64).
    Input(u32),
    /// Exclusive or of two inputs.
    Xor,
    /// And of two inputs.
    And,
    /// Or of two inputs.
    Or,
    /// Output bit `i` of the sum (32: the carry out), from one input.
    Output(u32),
}

/// One element and the elements whose outputs are its inputs.
#[derive(Clone, Debug)]
pub struct Gate {
    /// What it computes.
    pub kind: Kind,
    /// Its inputs, in order.
    pub inputs: Vec<usize>,
}

/// A circuit: elements in an order where every input comes first.
#[derive(Clone, Debug)]
pub struct Circuit {
    /// The elements.
    pub gates: Vec<Gate>,
    /// For every element, the (element, input index) pairs it feeds.
    pub fanout: Vec<Vec<(usize, usize)>>,
}

impl Circuit {
    /// The 32-bit ripple-carry adder: 225 elements and 33 output probes.
    pub fn adder32() -> Circuit {
        let mut gates = Vec::new();
        let mut add = |kind, inputs: Vec<usize>| {
            gates.push(Gate { kind, inputs });
            gates.len() - 1
        };
        let a: Vec<usize> = (0..32).map(|i| add(Kind::Input(i), vec![])).collect();
        let b: Vec<usize> = (0..32).map(|i| add(Kind::Input(32 + i), vec![])).collect();
        let mut carry = add(Kind::Input(64), vec![]);
        let mut sums = Vec::new();
        for i in 0..32 {
            let x1 = add(Kind::Xor, vec![a[i], b[i]]);
            let s = add(Kind::Xor, vec![x1, carry]);
            let a1 = add(Kind::And, vec![a[i], b[i]]);
            let a2 = add(Kind::And, vec![x1, carry]);
            carry = add(Kind::Or, vec![a1, a2]);
            sums.push(s);
        }
        for (i, s) in sums.into_iter().enumerate() {
            add(Kind::Output(i as u32), vec![s]);
        }
        add(Kind::Output(32), vec![carry]);
        let mut fanout = vec![Vec::new(); gates.len()];
        for (g, gate) in gates.iter().enumerate() {
            for (k, &i) in gate.inputs.iter().enumerate() {
                fanout[i].push((g, k));
            }
        }
        Circuit { gates, fanout }
    }

    /// Every element's output for inputs (a, b, carry in), in order: the reference.
    fn evaluate(&self, v: Vector) -> Vec<bool> {
        let mut out = vec![false; self.gates.len()];
        for (g, gate) in self.gates.iter().enumerate() {
            let ins: Vec<bool> = gate.inputs.iter().map(|&i| out[i]).collect();
            out[g] = fire(gate.kind, &ins, v);
        }
        out
    }
}

/// An input vector: operands a and b, and the carry in.
pub type Vector = (u32, u32, bool);

fn fire(kind: Kind, ins: &[bool], v: Vector) -> bool {
    match kind {
        Kind::Input(i) if i < 32 => (v.0 >> i) & 1 == 1,
        Kind::Input(i) if i < 64 => (v.1 >> (i - 32)) & 1 == 1,
        Kind::Input(_) => v.2,
        Kind::Xor => ins[0] ^ ins[1],
        Kind::And => ins[0] & ins[1],
        Kind::Or => ins[0] | ins[1],
        Kind::Output(_) => ins[0],
    }
}

/// The 33-bit results (sum and carry out) read off the output elements.
fn results(c: &Circuit, outs: impl Fn(usize) -> bool) -> u64 {
    c.gates
        .iter()
        .enumerate()
        .filter_map(|(g, gate)| match gate.kind {
            Kind::Output(i) => Some(u64::from(outs(g)) << i),
            _ => None,
        })
        .sum()
}

/// The sequential simulation: every vector's 33-bit result.
pub fn sequential(c: &Circuit, vectors: &[Vector]) -> Vec<u64> {
    vectors
        .iter()
        .map(|&v| {
            let out = c.evaluate(v);
            results(c, |g| out[g])
        })
        .collect()
}

/// How elements are given to ranks (outputs always to rank 0, which collects them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Consecutive elements together: rank r gets the r-th block.
    Linear,
    /// Each element to a rank drawn from this seed.
    Random(u64),
}

/// The rank element `g` runs on.
pub fn owner(c: &Circuit, g: usize, size: u32, placement: Placement) -> u32 {
    if matches!(c.gates[g].kind, Kind::Output(_)) {
        return 0;
    }
    let n = c.gates.len();
    match placement {
        Placement::Linear => ((g * size as usize) / n) as u32,
        Placement::Random(seed) => {
            let mut x = seed ^ (g as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            x = (x ^ (x >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            ((x ^ (x >> 29)) % u64::from(size)) as u32
        }
    }
}

/// Vectors per batch (a barrier between batches).
const BATCH: usize = 8;
/// Events one rank's ring for one sender holds: more than a batch can make.
const RING: u64 = 4096;

/// An event: element `gate`'s input `input` is `value` for vector `vector` of the batch.
fn encode(gate: usize, input: usize, vector: usize, value: bool) -> u64 {
    ((gate as u64) << 24) | ((input as u64) << 20) | ((vector as u64) << 1) | u64::from(value)
}

fn decode(e: u64) -> (usize, usize, usize, bool) {
    (
        (e >> 24) as usize,
        ((e >> 20) & 0xF) as usize,
        ((e >> 1) & 0x7FFFF) as usize,
        e & 1 == 1,
    )
}

/// This rank's share of the parallel simulation; rank 0 returns every vector's result.
pub fn parallel(
    job: &mut Job,
    c: &Circuit,
    vectors: &[Vector],
    placement: Placement,
) -> Result<Option<Vec<u64>>, AppError> {
    let (rank, size) = (job.rank(), job.size());
    let node = Node::connect_with(
        hamlyn::default_socket_path(),
        NodeOptions {
            queue_cap: 16_384,
            ..NodeOptions::default()
        },
    )?;
    // The event queues other ranks write: one ring of RING 8-byte events per sender.
    let inbox = node.area(u64::from(size) * RING * 8)?;
    let meta = node.meta_area(1)?;
    let slot = node.slot(&inbox).meta(&meta).queue(0).create()?;
    let mut seed = hamlyn::Seed::single(slot.ticket_all()?);
    seed.data = rank.to_le_bytes().to_vec();
    // A seed always carries a ticket (`Seed::from_bytes` refuses one without).
    let rings: Vec<Ticket> = job
        .all_gather(&seed)?
        .iter()
        .filter_map(|s| s.tickets.first().copied())
        .collect();
    if rings.len() != size as usize {
        return Err(AppError::Params("a rank published no event ring".into()));
    }
    let mut queue = node.queue(0)?;
    let mut terminus = node.terminus(0)?;
    let mine: Vec<usize> = (0..c.gates.len())
        .filter(|&g| owner(c, g, size, placement) == rank)
        .collect();
    let mut next_pos = vec![0u64; size as usize];
    let mut results = Vec::new();
    for batch in vectors.chunks(BATCH) {
        // Inputs known so far: (gate, vector) → values by input index.
        let mut known: HashMap<(usize, usize), [Option<bool>; 2]> = HashMap::new();
        let mut outputs: HashMap<(usize, usize), bool> = HashMap::new();
        let mut fired = 0usize;
        let must_fire = mine.len() * batch.len();
        let mut work: Vec<u64> = Vec::new();
        // Inputs fire at once.
        for &g in &mine {
            if let Kind::Input(_) = c.gates[g].kind {
                for (k, &v) in batch.iter().enumerate() {
                    let out = fire(c.gates[g].kind, &[], v);
                    fired += 1;
                    for &(to, i) in &c.fanout[g] {
                        work.push(encode(to, i, k, out));
                    }
                }
            }
        }
        loop {
            // Deliver what is pending: local events here, remote ones by remote write.
            while let Some(e) = work.pop() {
                let (g, i, k, value) = decode(e);
                // An event names an element, one of its inputs and a vector of this
                // batch, or it is refused (a rank's ring holds whatever was written).
                let valid = c
                    .gates
                    .get(g)
                    .is_some_and(|gate| i < gate.inputs.len() && k < batch.len());
                if !valid {
                    return Err(AppError::Params(format!(
                        "rank {rank}: an event for element {g}, input {i}, vector {k} does not exist"
                    )));
                }
                let to = owner(c, g, size, placement);
                if to != rank {
                    let pos = next_pos[to as usize];
                    next_pos[to as usize] += 1;
                    let at = (u64::from(rank) * RING + pos % RING) * 8;
                    let opts = SendOptions::new()
                        .tag((u64::from(rank) << 32) | (pos % RING))
                        .offset(at);
                    loop {
                        match terminus.send(
                            &rings[to as usize],
                            &opts,
                            Data::Inline(&e.to_le_bytes()),
                        ) {
                            Ok(_) => break,
                            Err(SendError::Full) => {
                                terminus.wait_idle(Some(Duration::from_millis(10)));
                            }
                            Err(err) => return Err(err.into()),
                        }
                    }
                    continue;
                }
                let gate = &c.gates[g];
                let slot = known.entry((g, k)).or_insert([None; 2]);
                slot[i] = Some(value);
                let ins: Vec<bool> = slot
                    .iter()
                    .take(gate.inputs.len())
                    .flatten()
                    .copied()
                    .collect();
                if ins.len() == gate.inputs.len() {
                    known.remove(&(g, k));
                    let out = fire(gate.kind, &ins, batch[k]);
                    fired += 1;
                    if let Kind::Output(_) = gate.kind {
                        outputs.insert((g, k), out);
                    }
                    for &(to, i) in &c.fanout[g] {
                        work.push(encode(to, i, k, out));
                    }
                }
            }
            if fired == must_fire {
                break;
            }
            // Events from other ranks: read each out of its ring.
            match queue.wait(Some(Duration::from_secs(120)))? {
                Some(n) if n.slot == slot.id() => {
                    let (from, pos) = (n.word >> 32, n.word & 0xFFFF_FFFF);
                    let at = (from * RING + pos) * 8;
                    let bytes = inbox.read_vec(at, 8)?;
                    let mut e = [0u8; 8];
                    e.copy_from_slice(&bytes);
                    work.push(u64::from_le_bytes(e));
                }
                Some(_) => {}
                None => {
                    return Err(AppError::Timeout(format!(
                        "rank {rank}: {fired} of {must_fire} firings, then nothing for two minutes"
                    )))
                }
            }
        }
        terminus.wait_idle(Some(Duration::from_secs(120)));
        if rank == 0 {
            for k in 0..batch.len() {
                results.push(self::results(c, |g| {
                    outputs.get(&(g, k)).copied().unwrap_or(false)
                }));
            }
        }
        // Every ring read before the next batch writes it again.
        job.barrier()?;
    }
    Ok((rank == 0).then_some(results))
}

/// `count` test vectors: the edge cases first (zeros, all ones, carries rippling through
/// every bit), then pseudo-random ones from `seed`.
pub fn test_vectors(count: usize, seed: u64) -> Vec<Vector> {
    let edges = [
        (0, 0, false),
        (u32::MAX, 1, false),
        (u32::MAX, u32::MAX, true),
        (0x8000_0000, 0x8000_0000, false),
        (0x5555_5555, 0xAAAA_AAAA, true),
    ];
    let mut x = seed;
    let mut next = || {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    edges
        .into_iter()
        .chain(std::iter::repeat_with(|| {
            let r = next();
            (r as u32, (r >> 32) as u32, r & 0x100 != 0)
        }))
        .take(count)
        .collect()
}
