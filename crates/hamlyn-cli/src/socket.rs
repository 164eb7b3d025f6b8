//! Where the node daemon's control socket is by default.

/// The control socket `hamlyn node` binds and `hamlyn stat` connects to when neither
/// `--socket` nor `$HAMLYN_SOCKET` says otherwise.
pub const DEFAULT_SOCKET: &str = "/tmp/hamlyn.sock";

/// The environment variable that overrides [`DEFAULT_SOCKET`].
pub const SOCKET_ENV: &str = "HAMLYN_SOCKET";
