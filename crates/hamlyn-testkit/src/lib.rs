//! Test support for Hamlyn: harnesses that drive the fabrics and whole simulated clusters.
//!
//! This crate is only ever a `[dev-dependencies]` entry of other crates: no production
//! crate (wire, core, shm, fabric, engine, the `hamlyn` library, the CLI) depends on it
//! normally, so none of this code ships.
//!
//! - [`cluster`]: a deterministic driver that runs one `hamlyn_core::Interface` per node
//!   over the simulated network (`hamlyn_fabric::SimNet`), for whole-cluster tests.
//! - [`conformance`]: the suite every fabric must pass, written once over the
//!   `hamlyn_fabric::Fabric` trait.
//! - [`channel`]: an in-process channel fabric linking two engines in one test process.
//! - [`sim_engines`]: the seeded simulated network shared by real engines in one test
//!   process (each engine's fabric is one node's end of it).
//!
//! The seeded network, its generator and the fabrics themselves stay in `hamlyn-fabric`;
//! this crate uses only their public API.
#![forbid(unsafe_code)]

pub mod channel;
pub mod cluster;
pub mod conformance;
pub mod sim_engines;
