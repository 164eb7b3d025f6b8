//! The daemon-facing subcommands (`hamlyn bench` lives in [`crate::bench`]).

pub mod node;
pub mod ping;
pub mod seed;
pub mod stat;
