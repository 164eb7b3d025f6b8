//! What can fail in the applications.

/// What can fail in a parallel application.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    /// The job layer failed (a rank died, a timeout).
    #[error(transparent)]
    Job(#[from] hamlyn_job::JobError),
    /// The Hamlyn library failed.
    #[error(transparent)]
    Hamlyn(#[from] hamlyn::Error),
    /// A remote write was refused.
    #[error(transparent)]
    Send(#[from] hamlyn::SendError),
    /// A remote write finished as failed.
    #[error("a boundary row could not be written: {0:?}")]
    Failed(hamlyn::Status),
    /// The parameters do not fit the job.
    #[error("{0}")]
    Params(String),
    /// What another rank had to send did not arrive in time.
    #[error("{0}")]
    Timeout(String),
}
