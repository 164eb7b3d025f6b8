//! Errors of the engine's own operation (a client's bad request is a control reply, not
//! one of these).

/// Why the engine could not start or keep running.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// A system call on the engine's own resources failed.
    #[error("{op}: {source}")]
    Io {
        /// What the engine was doing.
        op: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// Shared memory for a port could not be set up.
    #[error("shared memory: {0}")]
    Shm(String),
    /// The socket path is not usable.
    #[error("socket path {0}: {1}")]
    SocketPath(String, &'static str),
    /// The fabric could not be set up (an in-process cluster's TCP fabric).
    #[error("fabric: {0}")]
    Fabric(String),
}

impl EngineError {
    pub(crate) fn io(op: &'static str, e: impl Into<std::io::Error>) -> EngineError {
        EngineError::Io {
            op,
            source: e.into(),
        }
    }
}
