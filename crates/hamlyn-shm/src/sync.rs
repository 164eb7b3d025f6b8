//! The one atomics facade of this crate.
//!
//! Every other module takes its atomics, fences and spin hint from here and nowhere else,
//! so that `RUSTFLAGS="--cfg loom"` swaps the whole crate onto [loom]'s model-checked
//! versions at once (DESIGN §7, as in iceoryx2). Only `fence(SeqCst)` is used for
//! sequential consistency: loom models SeqCst fences exactly but treats SeqCst accesses
//! more weakly, so the crate never relies on a SeqCst load, store or read-modify-write.
//!
//! [loom]: https://docs.rs/loom

#[cfg(not(loom))]
pub use std::hint::spin_loop;
#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

#[cfg(loom)]
pub use loom::hint::spin_loop;
#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
