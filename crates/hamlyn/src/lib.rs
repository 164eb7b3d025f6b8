//! Hamlyn: protected, zero-copy, sender-managed messaging between processes (the
//! application library).
//!
//! In the repository: `README.md` for a first run, `docs/ARCHITECTURE.md` for how the
//! crates fit together (the engine, the port, direct slots, one-sided operations) and
//! `docs/spec/wire.md` for every byte that crosses a process boundary.
//!
//! A process talks to its engine (the trusted "interface", embedded in the process or a
//! per-node daemon) only through a **port** in shared memory and a control socket; this
//! crate wraps both:
//!
//! - [`Node`]: one control connection and one port ([`Node::connect_default`] to the
//!   node's daemon, `hamlyn node`, at `$HAMLYN_SOCKET` or [`DEFAULT_SOCKET`];
//!   [`Node::connect`] to a daemon elsewhere; [`Node::embedded`] to start an engine
//!   thread in this process).
//! - [`Area`]: registered memory (a sealed memfd) that messages land in or are sent from;
//!   [`MetaArea`]: an area of 128-byte metadata entries.
//! - [`Slot`] ([`Node::slot`] → [`SlotBuilder`]): names part of an area with a 64-bit
//!   key and a mode; [`Slot::ticket`] hands out the capability to write it, [`seed`]s
//!   carry tickets as text.
//! - [`Terminus`] ([`Node::terminus`]): a private send work queue; [`Terminus::send`]
//!   returns a [`SendHandle`] whose [`Status`] goes pending → sent (or failed, with the
//!   engine's reason); a full terminus is [`SendError::Full`], never a drop. Remote
//!   reads and atomics ([`Terminus::read`] with [`ReadArgs`], [`Terminus::compare_swap`],
//!   [`Terminus::fetch_add`]) are answered by a notification naming the request
//!   ([`Notification::request`]).
//! - [`NotifyQueue`] ([`Node::queue`]): where message arrivals are reported; poll, wait
//!   (spin, then sleep on a futex: no core burnt), or use [`Node::event_fd`] with epoll.
//! - [`Endpoint`] ([`Node::endpoint`] → [`EndpointBuilder`]): a receive endpoint (FLIPC):
//!   messages land in buffers the receiver posted, chosen by the engine; a message that
//!   finds none is discarded and counted ([`Endpoint::take_discards`], wait-free).
//! - [`EndpointGroup`]: receive-any across endpoints by priority without starvation,
//!   blocking on the group's notification queue; [`SharedGroup`] for several waiting
//!   threads, the highest-priority waiter served first.
//! - Direct slots, for processes of one trusted job on one node: a receiver opts in with
//!   [`SlotBuilder::danger_direct`]; a ticket holder maps the slot with
//!   [`Node::open_direct`] and its [`DirectTarget::send`] deposits, counts and notifies
//!   in the sender's own process, one hop, with the engine's own counting code. What the
//!   receiver gives up for that is listed at [`SlotBuilder::danger_direct`].
//!
//! ```no_run
//! use hamlyn::{Data, Node, SendOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let node = Node::embedded()?;
//! let inbox = node.area(4096)?;
//! let meta = node.meta_area(8)?;
//! let slot = node.slot(&inbox).meta(&meta).queue(0).create()?;
//! let ticket = slot.ticket(0..4096, 0..8)?;
//! let mut queue = node.queue(0)?;
//! let mut terminus = node.terminus(0)?;
//! let handle = terminus.send(&ticket, &SendOptions::new().tag(7), Data::Inline(b"hello"))?;
//! let arrival = queue.wait(None)?;
//! # let _ = (handle, arrival);
//! # Ok(())
//! # }
//! ```
//!
//! Errors: [`Error`] for every call but the terminus's, [`SendError`] for those; the
//! error types inside them ([`ControlErrorCode`], [`WireError`], [`SplitError`],
//! [`SegmentError`], ...) are re-exported here and convert into [`Error`], so `?`
//! works throughout.
//!
//! Nothing here uses `unsafe`: shared memory is reached only through `hamlyn-shm`'s checked
//! accessors, and nothing read from the engine or the port is trusted without a check.
#![forbid(unsafe_code)]

mod area;
mod completion;
mod control;
mod direct;
mod embedded;
mod endpoint;
mod error;
mod group;
mod keys;
mod node;
mod one_packet;
mod queue;
mod request;
pub mod seed;
mod slot;
mod terminus;
#[cfg(test)]
mod testing;

pub use area::{Area, MetaArea, Span};
pub use completion::Status;
pub use direct::{DirectTarget, DIRECT_PACKET_BYTES};
pub use endpoint::{Buffer, Endpoint, EndpointBuilder, Received};
pub use error::{Error, SendError};
pub use group::{EndpointGroup, SharedGroup, DEFAULT_STARVATION_BOUND};
pub use node::{default_socket_path, Node, NodeOptions, DEFAULT_SOCKET, SOCKET_ENV};
pub use queue::{Notification, NotificationKind, NotifyQueue, ADAPTIVE_SPIN_ENV, SPIN_REACH};
pub use request::{Data, MetaIndex, SendOptions, BUDGET_PACKET_BYTES};
pub use slot::{Slot, SlotBuilder};
pub use terminus::{CompareSwapArgs, FetchAddArgs, ReadArgs, RequestRef, SendHandle, Terminus};

pub use hamlyn_core::{RateLimit, RejectReason, SegmentError, SlotMode, SlotPerms};
pub use hamlyn_wire::request::{MAX_GATHER, MAX_INLINE};
pub use hamlyn_wire::stats::{self, Stats};
pub use hamlyn_wire::{MetaEntry, NodeId, Seed, SlotId, Ticket, TicketFlags, MAX_META_LEN};

// The error types found inside `Error` and `SendError`, so callers can name and match
// them without depending on the crates below.
pub use hamlyn_shm::fdpass::FdPassError;
pub use hamlyn_shm::memory::LayoutError;
pub use hamlyn_shm::region::RegionError;
pub use hamlyn_shm::wake::WakeError;
pub use hamlyn_wire::control::{
    am_engine, AmCounts, AmHandlerEntry, ControlErrorCode, MAX_AM_HANDLERS_PER_REQUEST,
    MAX_AM_HANDLER_NAME, MAX_AM_REPORT,
};
pub use hamlyn_wire::{SplitError, WireError};
