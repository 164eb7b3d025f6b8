//! Rats: the protocol level of Hamlyn (seed 001 §3.2, seed 000 §3.3), built only on the
//! public API of the `hamlyn` library, so the compiler keeps the two levels apart.
//!
//! - [`Manager`]: one per node handle and thread. It hands out message space
//!   ([`Manager::alloc`], a best-fit allocator with coalescing, [`alloc`]) and metadata
//!   entries, owns a notification queue and a terminus, and dispatches arrivals to
//!   protocol instances in O(1) by the cookie of their metadata entry:
//!   [`Manager::next_ready`], [`Manager::poll`] and [`Manager::process_arrival`], with the
//!   port's event descriptor ([`Manager::event_fd`]) for event loops.
//! - Protocol instances, one file each, with a server and a client side, built from a
//!   [`hamlyn::Seed`] that names its protocol and version ([`protocol`]):
//!   [`tagged`] (tagged remote write), [`remote_write`], [`datagram`],
//!   [`simple_datagram`].
//!
//! Nothing a peer writes is trusted: metadata is parsed by [`protocol::Reader`] (a short
//! or lying field is [`RatsError::Forged`]), counted in [`RatsStats::forged`], and the
//! instance keeps working.
#![forbid(unsafe_code)]

pub mod alloc;
pub mod datagram;
mod error;
mod manager;
pub mod protocol;
pub mod remote_read;
pub mod remote_write;
pub mod request_response;
pub mod simple_datagram;
pub mod stream;
pub mod tagged;

pub use error::RatsError;
pub use manager::{
    Buffer, Endpoint, EndpointSpec, InstanceId, Manager, ManagerOptions, RatsStats, SendStatus,
    SPACE_GRANULE,
};
pub use protocol::ProtocolId;
