//! The daemon-facing subcommands (`hamlyn bench` lives in [`crate::bench`]).

pub mod node;
pub mod stat;
