//! Hamlyn's interface logic, sans-IO (seed 000 §2, DESIGN §2–3).
//!
//! This crate is what the Hamlyn paper put in the interface card: the [`slot`] table and
//! its protection checks, the [`receive`] decision for each arriving packet (reject with a
//! reason, or where to deposit it, how to count it and whether to notify), [`segment`]ation
//! of a send into packet headers with packet-counting deltas, and [`nack`]s that tell a
//! sender why a packet was refused, the [`peers`] a node knows, what it [`expected`]s back from them, (and which partly received
//! messages a lost peer breaks). Areas are reached through the small [`memory`] trait,
//! so the engine backs them with shared memory and tests with plain buffers.
//!
//! No threads, clocks, syscalls or randomness: time ([`Instant`]) and keys are passed in.
#![forbid(unsafe_code)]

pub mod endpoint;
pub mod expected;
pub mod memory;
pub mod nack;
pub mod peers;
pub mod rate;
pub mod receive;
pub mod reject;
pub mod segment;
pub mod slot;
pub mod time;

pub use expected::{Answer, ExpectFull, Expected, Nacked, Unexpected};
pub use memory::{AreaId, Areas, EntryIn, EntryMemory, Memory, OutOfRange, VecAreas};
pub use peers::{peer_down_notification, Contributors, PartialMessage, PeerState, PeerTable};
pub use rate::{RateLimit, TokenBucket};
pub use receive::{
    count_packet, notification_entry, Access, Committed, Interface, InterfaceStats, MessageDone,
    Notification, Placement, QueueId,
};
pub use reject::{Reject, RejectCounts, RejectReason};
pub use segment::{Segment, SegmentError, Segmenter, SendSpec};
pub use slot::{MetaRange, OwnerId, Slot, SlotConfig, SlotError, SlotMode, SlotPerms, SlotTable};
pub use time::Instant;
