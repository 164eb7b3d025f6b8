//! The Hamlyn engine: the trusted interface (DESIGN §2).
//!
//! It alone holds the slot table and checks keys, bounds and modes; it alone writes into a
//! receiver's areas and notification queues. Clients reach it only through their port
//! (shared-memory rings) and the control socket. The same engine runs as a thread inside
//! an application ([`EngineHandle::start`] with [`EngineConfig::embedded`]) or as the
//! per-node daemon ([`run_daemon`], `hamlyn node`).
//!
//! - [`server`]: the event loop, the control socket, client death;
//! - [`engine`]: the data path (termini served round robin, one packet per turn, the one
//!   copy, notifications, error completions);
//! - [`control`]: control requests (attach, areas, slots, termini);
//! - [`sched`]: priorities and round robin; [`areas`]: registered areas; [`port`]: a
//!   client's port, engine side; [`stats`]: counters and their JSON.

pub mod areas;
pub mod config;
pub mod control;
pub mod engine;
pub mod error;
pub mod handle;
pub mod port;
pub mod registry;
pub mod remote;
pub mod rma;
pub mod sched;
pub mod server;
pub mod source;
pub mod stats;

pub use config::EngineConfig;
pub use error::EngineError;
pub use handle::{run_daemon, run_daemon_with_fabric, EngineHandle};
