//! Fabrics: how Hamlyn engines move packets between nodes (DESIGN §2 "Fabrics").
//!
//! - [`fabric`]: the [`Fabric`] trait every fabric implements (zero-copy gather sends,
//!   two-phase receive through a [`PacketSink`], announced peer events) and its typed
//!   [`FabricError`].
//! - [`sim`]: the simulated network, N nodes in one process with seeded reordering
//!   delays, bounded links and announced faults (cut links, crashes, restarts).
//! - [`rng`]: the tiny seeded generator behind the simulation.
//! - [`tcp`]: the TCP fabric, several striped connections ("rails") per peer, over
//!   non-blocking sockets driven by a `mio` poller.
//!
//! Everything but [`tcp`] is sans-IO: time is passed in, nothing blocks, no threads. The
//! TCP fabric does socket I/O but never blocks either, still takes time as an argument,
//! and keeps its framing ([`tcp::frame`]) as pure, separately tested state machines.
//!
//! The test harnesses over these fabrics (the simulated cluster driver and the fabric
//! conformance suite) live in the `hamlyn-testkit` crate, a dev-dependency only.
#![forbid(unsafe_code)]

pub mod fabric;
pub mod rng;
pub mod sim;
pub mod tcp;

pub use fabric::{
    Fabric, FabricError, Landing, PacketSink, PeerEvent, SharedBytes, SharedBytesMut,
};
pub use rng::SimRng;
pub use sim::{SimConfig, SimError, SimFabric, SimNet, SimStats};
pub use tcp::{TcpConfig, TcpError, TcpFabric};
