//! The one atomics facade of this crate.
//!
//! Every other module takes its atomics, fences and spin hint from here and nowhere else,
//! so that `RUSTFLAGS="--cfg loom"` swaps the whole crate onto [loom]'s model-checked
//! versions at once (DESIGN §7, as in iceoryx2). Only `fence(SeqCst)` is used for
//! sequential consistency: loom models SeqCst fences exactly but treats SeqCst accesses
//! more weakly, so the crate never relies on a SeqCst load, store or read-modify-write.
//!
//! [loom]: https://docs.rs/loom

//!
//! The rest of the workspace takes its atomics from here too (`hamlyn_shm::sync`):
//! clippy's `disallowed-types` (`clippy.toml`) refuses `std::sync::atomic` types
//! anywhere else, so no atomic escapes the facade unnoticed. Outside this crate the
//! facade is std's atomics (loom builds only this crate).

#[cfg(not(loom))]
pub use std::hint::spin_loop;
#[cfg(not(loom))]
pub use std::sync::atomic::Ordering;

// Aliases, not re-exports: clippy resolves a re-export to std's own type and would refuse
// every use; an alias is named by its own path, so only these lines name std's atomics.

/// An atomic `bool` (std's, or loom's under `cfg(loom)`).
#[cfg(not(loom))]
#[allow(
    clippy::disallowed_types,
    reason = "the atomics facade: the one place std's atomics are named"
)]
pub type AtomicBool = std::sync::atomic::AtomicBool;
/// An atomic `u32` (std's, or loom's under `cfg(loom)`).
#[cfg(not(loom))]
#[allow(
    clippy::disallowed_types,
    reason = "the atomics facade: the one place std's atomics are named"
)]
pub type AtomicU32 = std::sync::atomic::AtomicU32;
/// An atomic `u64` (std's, or loom's under `cfg(loom)`).
#[cfg(not(loom))]
#[allow(
    clippy::disallowed_types,
    reason = "the atomics facade: the one place std's atomics are named"
)]
pub type AtomicU64 = std::sync::atomic::AtomicU64;

/// A memory fence (std's, or loom's under `cfg(loom)`): say in a comment at each call
/// which accesses it orders and what it pairs with.
#[cfg(not(loom))]
#[inline(always)]
pub fn fence(order: Ordering) {
    #[allow(
        clippy::disallowed_methods,
        reason = "the atomics facade: the one place std's fence is called"
    )]
    std::sync::atomic::fence(order);
}

#[cfg(loom)]
pub use loom::hint::spin_loop;
#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
