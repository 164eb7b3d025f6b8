//! Hamlyn wire format v1.
//!
//! Everything that crosses a process or machine boundary has its exact byte layout here:
//! the 64-byte packet [`header`], [`ticket`]s (capabilities to write a slot) and their
//! ASCII [`seed`] form, and the [`entry`] layouts (128-byte metadata entries and 32-byte
//! notification entries) shared between the engine and applications, the terminus
//! [`request`] entries and the [`control`] protocol between a client and its engine, with
//! the engine's typed [`stats`] it carries.
//!
//! Every parser validates lengths first and returns a typed [`WireError`]; none panics on
//! any input (the fuzz targets in `fuzz/` hold it to that). `docs/spec/wire.md` gives every
//! byte and the fixed test vectors that `tests/vectors.rs` checks.
#![forbid(unsafe_code)]

pub mod base32;
pub mod codec;
pub mod control;
pub mod crc;
pub mod endpoint;
pub mod entry;
pub mod error;
pub mod header;
pub mod ids;
pub mod request;
pub mod rma;
pub mod seed;
pub mod stats;
pub mod ticket;

pub use entry::{MetaEntry, NotifEntry, NotifKind, META_ENTRY_LEN, NOTIF_ENTRY_LEN};
pub use error::WireError;
pub use header::{Flags, Header, Op, RequestId, FAST_META_INDEX, HEADER_LEN, MAX_META_LEN};
pub use ids::{NodeId, SlotId};
pub use seed::Seed;
pub use ticket::{SplitError, Ticket, TicketFlags, FULL_SHARE, MIN_SPLIT_SHARE};
