//! Where the node daemon's control socket is by default: the library's constants, so
//! `hamlyn node` binds where [`hamlyn::Node::connect_default`] looks.
//!
//! [`DEFAULT_SOCKET`] is the control socket `hamlyn node` binds and `hamlyn stat`
//! connects to when neither `--socket` nor `$HAMLYN_SOCKET` ([`SOCKET_ENV`]) says
//! otherwise.

pub use hamlyn::{DEFAULT_SOCKET, SOCKET_ENV};
