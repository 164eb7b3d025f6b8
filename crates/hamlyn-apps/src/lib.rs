//! The parallel applications of seed 004 §3.2 over Hamlyn's remote memory, each with a
//! sequential twin it must agree with exactly.
//!
//! - [`ising`]: the Ising model (§3.2.1): an N×N grid of spins split by rows among P
//!   processes, red/black Metropolis sweeps, the boundary rows written into the
//!   neighbours' ghost rows by remote writes.

pub mod ising;
