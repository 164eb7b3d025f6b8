//! Fabrics: how Hamlyn engines move packets between nodes (DESIGN §2 "Fabrics").
//!
//! - [`fabric`]: the [`Fabric`] trait every fabric implements (zero-copy gather sends,
//!   two-phase receive through a [`PacketSink`], announced peer events) and its typed
//!   [`FabricError`].
//! - [`sim`]: the simulated network, N nodes in one process with seeded reordering
//!   delays, bounded links and announced faults (cut links, crashes, restarts).
//! - [`cluster`]: a deterministic driver that runs one `hamlyn_core::Interface` per node
//!   over the simulated network, for whole-cluster tests.
//! - [`conformance`]: the suite every fabric must pass, written once over the trait.
//! - [`rng`]: the tiny seeded generator behind the simulation.
//!
//! Everything here is sans-IO: time is passed in, nothing blocks, no threads.
#![forbid(unsafe_code)]

pub mod cluster;
pub mod conformance;
pub mod fabric;
pub mod rng;
pub mod sim;

pub use fabric::{Fabric, FabricError, Landing, PacketSink, PeerEvent};
pub use rng::SimRng;
pub use sim::{SimConfig, SimError, SimFabric, SimNet, SimStats};
