//! The Hamlyn engine: the trusted interface (DESIGN §2).
//!
//! It alone holds the slot table and checks keys, bounds and modes; it alone writes into a
//! receiver's areas and notification queues. Clients reach it only through their port
//! (shared-memory rings) and the control socket. The same engine runs as a thread inside
//! an application ([`EngineHandle::start`] with [`EngineConfig::embedded`]) or as the
//! per-node daemon ([`run_daemon`], `hamlyn node`).
//!
//! The public API is the start/stop API above; everything else is the engine's own.
//! Its components, one job per file (docs/ARCHITECTURE.md has the map):
//!
//! - `event_loop`: turns, spinning, sleeping; control sockets accepted and read; clients
//!   that leave;
//! - `hosted`: progress by the waiting thread: an embedded engine run by the threads of
//!   its application that wait for it ([`Driver`]), its own thread asleep meanwhile;
//! - `engine`: the state (the components below) and one turn: termini served round robin,
//!   a request decoded, segmented and sent one packet per turn (small single-packet
//!   messages of one terminus a quantum per visit);
//! - `deliver`: a packet for this node is checked, deposited, committed and notified;
//! - `clients`: who is attached, their ports, error completions and notifications;
//! - `remote`, `fabric_rx`: the fabric, its peers (a sans-IO `hamlyn_core::PeerTable`),
//!   packets sent to and received from other nodes, NACKs;
//! - `one_sided`: reads and atomics executed here, and their answers;
//! - `registry`: the cluster-wide name registry;
//! - `control`: control requests (attach, areas, slots, termini, direct slots);
//! - `counters`, `stats`: what each component counted, and what `hamlyn stat` shows;
//! - `sched`: priorities and round robin; `areas`: registered areas; `port`: a client's
//!   port, engine side; `source`: where a packet's payload bytes come from.
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

mod am_engine;
mod am_table;
mod areas;
mod clients;
pub mod cluster;
mod config;
mod control;
mod counters;
mod deliver;
mod engine;
mod error;
mod event_loop;
mod fabric_rx;
mod handle;
mod hint_ports;
mod hosted;
mod landings;
mod one_sided;
mod port;
mod registry;
mod remote;
mod sched;
mod source;
mod stats;
mod step_clock;
mod wake_batch;

pub use config::{EngineConfig, Quotas};
pub use error::EngineError;
pub use handle::{run_daemon, run_daemon_with_fabric, EngineHandle};
pub use hosted::{DriveStats, Driver, Driving, Drove, DRIVE_ENV};
