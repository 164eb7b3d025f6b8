//! Starting an engine inside this process ([`crate::Node::embedded`]) through the
//! engine's small public start API.

use std::path::PathBuf;

use hamlyn_engine::{EngineConfig, EngineHandle};

use crate::error::Error;

/// Keeps the embedded engine running; it stops (and its thread is joined) when this is
/// dropped, which happens when the last handle of the node that started it goes.
#[derive(Debug)]
pub(crate) struct EngineGuard {
    _handle: EngineHandle,
}

impl EngineGuard {
    /// Starts an engine thread and returns its guard and control socket path.
    pub(crate) fn start() -> Result<(EngineGuard, PathBuf), Error> {
        let handle = EngineHandle::start(EngineConfig::embedded())
            .map_err(|e| Error::Embedded(e.to_string()))?;
        let path = handle.socket_path().to_path_buf();
        Ok((EngineGuard { _handle: handle }, path))
    }
}
