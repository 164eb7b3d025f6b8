//! The subcommands, one module each (`hamlyn bench` runs the `hamlyn-bench` crate).

pub mod am_stat;
pub mod bench;
pub mod key;
pub mod node;
pub mod ping;
pub mod run;
pub mod secret;
pub mod seed;
pub mod soak;
pub mod stat;
