//! Hamlyn: protected, zero-copy, sender-managed messaging between processes (the
//! application library, seed 000 §3.2; DESIGN §2, §5).
//!
//! A process talks to its engine (the trusted "interface", embedded in the process or a
//! per-node daemon) only through a **port** in shared memory and a control socket; this
//! crate wraps both:
//!
//! - [`Node`]: one control connection and one port ([`Node::connect`] to a daemon,
//!   [`Node::embedded`] to start an engine thread in this process).
//! - [`Area`]: registered memory (a sealed memfd) that messages land in or are sent from;
//!   [`MetaArea`]: an area of 128-byte metadata entries.
//! - [`Slot`] ([`Node::slot`] → [`SlotBuilder`]): names part of an area with a 64-bit
//!   key and a mode; [`Slot::ticket`] hands out the capability to write it, [`seed`]s
//!   carry tickets as text.
//! - [`Terminus`] ([`Node::terminus`]): a private send work queue; [`Terminus::send`]
//!   returns a [`SendHandle`] whose [`Status`] goes pending → sent (or failed, with the
//!   engine's reason); a full terminus is [`SendError::Full`], never a drop.
//! - [`NotifyQueue`] ([`Node::queue`]): where message arrivals are reported; poll, wait
//!   (spin, then sleep on a futex: no core burnt), or use [`Node::event_fd`] with epoll.
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
//! Nothing here uses `unsafe`: shared memory is reached only through `hamlyn-shm`'s checked
//! accessors, and nothing read from the engine or the port is trusted without a check.
#![forbid(unsafe_code)]

mod area;
mod completion;
mod control;
mod direct;
mod embedded;
mod error;
mod keys;
mod node;
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
pub use error::{Error, SendError};
pub use node::{Node, NodeOptions};
pub use queue::{Notification, NotificationKind, NotifyQueue};
pub use request::{Data, MetaIndex, SendOptions, BUDGET_PACKET_BYTES};
pub use slot::{Slot, SlotBuilder};
pub use terminus::{SendHandle, Terminus};

pub use hamlyn_core::{RejectReason, SegmentError, SlotMode, SlotPerms};
pub use hamlyn_wire::request::{MAX_GATHER, MAX_INLINE};
pub use hamlyn_wire::stats::{self, Stats};
pub use hamlyn_wire::{MetaEntry, NodeId, Seed, SlotId, Ticket, TicketFlags, MAX_META_LEN};
