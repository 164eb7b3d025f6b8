//! The parallel applications of seed 004 §3.2 over Hamlyn's remote memory, each with a
//! sequential twin it must agree with exactly.
//!
//! - [`ising`]: the Ising model (§3.2.1): an N×N grid of spins split by rows among P
//!   processes, red/black Metropolis sweeps, the boundary rows written into the
//!   neighbours' ghost rows by remote writes.
//! - [`circuit`]: the circuit simulator (§3.2.2): a conservative simulation of a 32-bit
//!   adder whose gates are spread over P processes, remote inputs fed through event
//!   queues in exported slots.

pub mod circuit;
mod error;
pub mod ising;

pub use error::AppError;
