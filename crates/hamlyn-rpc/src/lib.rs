//! RPC over remote memory, as seed 004 §3.1 builds it, on the public API of `hamlyn`.
//!
//! - The server publishes its service by name in the registry; a client connects by
//!   name, and the server exports to it [`FRAMES`] *call frames* (the paper's stacks),
//!   each a slot of its own.
//! - A call: the client stub writes the call frame (procedure, arguments) with a remote
//!   write whose notification activates the server; the server write-inhibits the frame
//!   while the procedure runs (a client scribbling over it meanwhile is refused with
//!   `Inhibited`, and counted), then writes the result into the client's reply slot with
//!   a remote write, and lifts the inhibition.
//! - Several calls per client are outstanding at once (one per frame); every call has a
//!   timeout; a server that is gone is an error at the client ([`RpcError::ServerGone`]:
//!   its frames refuse the call, or its service name left the registry with it, looked
//!   for every half second while a call waits);
//!   a client that is gone has its frames freed (its registry name leaves with it, and
//!   the server looks every half second; or a reply cannot be delivered).
//! - Call by reference: a call may name a segment of the client's memory (its ticket
//!   travels in the frame); the procedure reads and writes it through its [`Ctx`] with
//!   remote reads and writes, which the engine checks against the ticket.
//! - Procedures are registered by name in the cluster's active-message handler table
//!   (`rpc/SERVICE/NAME`), whose dense cluster-wide id is the number a call carries;
//!   [`typed`] gives fixed-layout arguments and
//!   results (`zerocopy`), so a user writes a procedure and calls it without
//!   hand-marshalling.
//!
//! The frame and reply layouts are in [`frame`] (sans-IO, checked against lying lengths).

mod client;
mod error;
pub mod frame;
mod server;
pub mod typed;

pub use client::{Call, RpcClient, Segment};
pub use error::RpcError;
pub use frame::{FRAMES, FRAME_BYTES, MAX_ARGS, MAX_RESULT, REPLY_BYTES};
pub use server::{Ctx, Procedure, RpcServer, ServerCounters, PROCEDURE_FINGERPRINT};
