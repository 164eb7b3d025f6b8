//! The engine's own counters (beyond the core's per-slot and per-interface ones): what
//! each component did, for `hamlyn stat`. Plain numbers, bumped by whoever does the work.

/// Counters the engine keeps beyond the core's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct EngineCounters {
    /// Clients that attached.
    pub(crate) attaches: u64,
    /// Clients whose socket closed (exit or death).
    pub(crate) clients_lost: u64,
    /// Requests taken from termini.
    pub(crate) requests: u64,
    /// Requests that did not decode or segment.
    pub(crate) bad_requests: u64,
    /// Requests finished (successfully or not).
    pub(crate) completed: u64,
    /// Error completions handed to clients.
    pub(crate) error_completions: u64,
    /// Packets delivered.
    pub(crate) packets: u64,
    /// Payload bytes delivered.
    pub(crate) bytes: u64,
    /// Notifications posted.
    pub(crate) notifications: u64,
    /// Notifications refused by a full queue (counted in the queue too).
    pub(crate) queue_overflows: u64,
    /// Notifications for a queue whose client is gone.
    pub(crate) orphan_notifications: u64,
    /// Terminus rings found corrupt (and no longer served).
    pub(crate) corrupt_rings: u64,
    /// Control messages that did not decode.
    pub(crate) bad_control: u64,
    /// Times the engine went to sleep.
    pub(crate) sleeps: u64,
    /// Packets received from other nodes and committed.
    pub(crate) remote_packets: u64,
    /// Payload bytes received from other nodes.
    pub(crate) remote_bytes: u64,
    /// NACKs received from other nodes.
    pub(crate) nacks_received: u64,
    /// NACKs sent to other nodes.
    pub(crate) nacks_sent: u64,
    /// NACKs whose destination could not be reached.
    pub(crate) nacks_undeliverable: u64,
    /// Packets whose header named another source than the connection they came on.
    pub(crate) spoofed_packets: u64,
    /// Peers lost.
    pub(crate) peers_lost: u64,
    /// Remote atomics executed.
    pub(crate) atomics: u64,
    /// Registry answers that could not be sent back.
    pub(crate) registry_undeliverable: u64,
    /// Packets from the fabric addressed to another node.
    pub(crate) misaddressed_packets: u64,
    /// Direct slots mapped for a ticket holder (`OpenDirect` granted).
    pub(crate) direct_opens: u64,
    /// `OpenDirect` requests refused.
    pub(crate) direct_refusals: u64,
}
