//! Active messages as GRIM builds them (seed 003 §4.3, §5), on the public API of
//! `hamlyn` and the Rats protocols:
//!
//! - **Handlers named by string, numbered cluster-wide.** A process registers handlers
//!   locally ([`AmEndpoint::register`]) with the [`fingerprint`] of their argument
//!   layout; [`AmEndpoint::synch`] sends its list to the cluster's registry node, which
//!   gives every name a dense id that is the same everywhere and never reused, and
//!   refuses a name live with another layout ([`AmError::Collision`]);
//!   [`AmEndpoint::handler_by_name`] resolves from the local copy
//!   ([`AmEndpoint::refresh`] fetches it, for late joiners). Unregistering moves a
//!   name's epoch on once nobody has it; a message for a handler that is gone, or for an
//!   old epoch, is refused at the receiver and its sender gets an error naming it
//!   ([`AmError::Refused`]).
//! - **Messages**: *short* (handler, logical channel, four u64 arguments; one packet),
//!   *bulk* (the same and a payload, 64 KiB by default, into receive buffers the
//!   receiver granted: sender-based credit, [`AmError::Full`] as back-pressure, counted
//!   back together by the engine's packet counting, seen by the handler as a view of the
//!   buffer), *memory* (a block copy into a region's range, no handler:
//!   [`AmEndpoint::memory_region`], [`MemoryTarget::write`]).
//! - **Execution** in [`AmEndpoint::poll`] on the endpoint's thread (which sleeps on the
//!   port's event descriptor while nothing arrives); a handler replies at most once
//!   through its token ([`Ctx::reply`]); a sender waits for the reply or for remote
//!   completion ([`Want`], [`AmEndpoint::wait`]).
//! - **Logical channels** (seed 003 §4.2): [`AmEndpoint::open_channel`] gives the
//!   endpoint a terminus of its own at a priority; a message is sent through its
//!   channel's terminus, and the channel number travels with it ([`Ctx::channel`]).
//!
//! Every header a peer sends goes through [`header::parse`] (typed [`HeaderError`]s for
//! lying lengths, unknown kinds, flags or codes; fuzzed); a handler never runs on a
//! message that failed it, and what was refused is counted ([`AmCounters`]).
#![forbid(unsafe_code)]

mod endpoint;
mod error;
pub mod header;
mod link;
mod table;

pub use endpoint::{
    Addr, AmCounters, AmEndpoint, AmOptions, CallId, Ctx, Failure, MemoryRegion, MemoryTarget,
    Outcome, Want, MAX_FAILURES,
};
pub use error::AmError;
pub use header::{HeaderError, Refusal};
pub use table::{fingerprint, Handler, HandlerCounters, HandlerId};
