//! What can go wrong in a job.

/// A job could not start, or a collective operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// The launcher's variables are missing or do not make sense.
    #[error("job environment: {0}")]
    Environment(String),
    /// The Hamlyn library refused or failed.
    #[error(transparent)]
    Hamlyn(#[from] hamlyn::Error),
    /// A send was refused (the error completion's reason, or back-pressure that did not
    /// clear).
    #[error("send: {0}")]
    Send(#[from] hamlyn::SendError),
    /// A send finished as failed.
    #[error("{what} failed: {status:?}")]
    Failed {
        /// The operation.
        what: &'static str,
        /// How it ended.
        status: hamlyn::Status,
    },
    /// Another rank did not do its part in time (it died, or was never started).
    #[error("timed out after {after_ms} ms waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        after_ms: u128,
    },
    /// A rank published something that is not what the job expects.
    #[error("rank {rank} published a bad seed: {why}")]
    BadSeed {
        /// The rank.
        rank: u32,
        /// What is wrong.
        why: String,
    },
}
