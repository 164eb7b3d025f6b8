//! Why a benchmark run failed.

use std::time::Duration;

/// Why a benchmark run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The library refused or failed.
    #[error("hamlyn: {0}")]
    Hamlyn(#[from] hamlyn::Error),
    /// A send was refused before it reached the engine.
    #[error("send refused: {0}")]
    Send(#[from] hamlyn::SendError),
    /// A send was finished with an error.
    #[error("a send ended as {0:?}")]
    SendFailed(hamlyn::Status),
    /// The active-message layer refused or failed (the `am` rows).
    #[error("active messages: {0}")]
    Am(#[from] hamlyn_am::AmError),
    /// An RPC failed (the `rpc` rows).
    #[error("RPC: {0}")]
    Rpc(#[from] hamlyn_rpc::RpcError),
    /// The Rats protocol layer refused or failed (the `rats` rows).
    #[error("rats: {0}")]
    Rats(#[from] hamlyn_rats::RatsError),
    /// The embedded engine could not start.
    #[error("engine: {0}")]
    Engine(#[from] hamlyn_engine::EngineError),
    /// The TCP fabric could not be set up.
    #[error("TCP fabric: {0}")]
    Fabric(String),
    /// The floor's shared memory failed.
    #[error("shared memory: {0}")]
    Region(#[from] hamlyn_shm::region::RegionError),
    /// A system call or pipe failed.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The failure.
        source: std::io::Error,
    },
    /// The peer process reported an error, broke the protocol or died.
    #[error("bench peer: {0}")]
    Peer(String),
    /// The peer's command line was not understood (a bug in the driving process).
    #[error("bench peer command {0:?} not understood")]
    BadCommand(String),
    /// Nothing arrived in time.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, &'static str),
    /// A notification other than the expected one arrived.
    #[error("unexpected notification: {0}")]
    Unexpected(String),
    /// The latency histogram refused a sample.
    #[error("histogram: {0}")]
    Histogram(String),
    /// The report could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: std::path::PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// A step of the run failed.
    #[error("{0}: {1}")]
    During(String, Box<BenchError>),
    /// An option does not make sense here.
    #[error("{0}")]
    Usage(&'static str),
    /// A thread of the benchmark panicked (named by the text).
    #[error("{0} panicked")]
    Panicked(&'static str),
}

impl BenchError {
    /// `source`, happened during `step` (named once: an error that already names its
    /// step is returned as it is).
    pub fn during(step: String, source: BenchError) -> BenchError {
        match source {
            e @ BenchError::During(..) => e,
            e => BenchError::During(step, Box::new(e)),
        }
    }

    /// An I/O failure while doing `op`.
    pub fn io(op: &'static str, source: impl Into<std::io::Error>) -> BenchError {
        BenchError::Io {
            op,
            source: source.into(),
        }
    }
}
