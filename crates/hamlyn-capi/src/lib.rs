//! Hamlyn's C API: `libhamlyn` and `include/hamlyn.h` (generated from this crate by
//! cbindgen, see `cbindgen.toml`), over the application library (`hamlyn`).
//!
//! The conventions are rustls-ffi's (`ABI.md` has the compatibility policy):
//!
//! - every fallible function returns a [`hamlyn_result`]; [`hamlyn_result_name`] names one;
//! - outputs come last and are written only when the call returns `HAMLYN_RESULT_OK`;
//! - objects are opaque handles made by `hamlyn_X_new` (or `hamlyn_node_embedded` /
//!   `hamlyn_node_connect`) and released by `hamlyn_X_free`, which accepts NULL;
//! - every pointer argument is checked for NULL (`HAMLYN_RESULT_NULL_ARGUMENT`), every
//!   enumeration value and length from C is checked (`HAMLYN_RESULT_INVALID_ARGUMENT`),
//!   never trusted as a Rust enum;
//! - every entry point is a panic boundary: a panic becomes `HAMLYN_RESULT_PANIC`, never
//!   an unwind into C.
//!
//! Handles and their node: every handle keeps the connection it came from alive, so
//! freeing a node never leaves a handle dangling. Freeing the node *closes* it for its
//! handles: from then on every call on a handle it made returns `HAMLYN_RESULT_CLOSED`
//! (and the handle must still be freed). The connection (and an embedded engine) ends
//! when the node and the last handle it made are freed.
//!
//! Thread safety: every handle may be used from any thread. A terminus and a queue are
//! single-consumer objects in Rust; here each carries a lock, so concurrent calls on one
//! of them are serialized, never a data race.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
// The C API depends only on `hamlyn` and `hamlyn-wire` (.ci/check-deps), not on the atomics
// facade in hamlyn-shm; its one flag is never model-checked under loom.
#[allow(clippy::disallowed_types)]
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

mod am;
mod area;
mod direct;
mod endpoint;
mod error;
mod job;
mod node;
mod queue;
mod rats;
mod rpc;
mod slot;
mod terminus;
mod ticket;

pub use am::*;
pub use area::*;
pub use direct::*;
pub use endpoint::*;
pub use error::*;
pub use job::*;
pub use node::*;
pub use queue::*;
pub use rats::*;
pub use rpc::*;
pub use slot::*;
pub use terminus::*;
pub use ticket::*;

/// The major version of the library this header came from: compare with
/// [`hamlyn_version_number`] at run time.
pub const HAMLYN_VERSION_MAJOR: u32 = 0;
/// The minor version of the library this header came from.
pub const HAMLYN_VERSION_MINOR: u32 = 1;
/// The patch version of the library this header came from.
pub const HAMLYN_VERSION_PATCH: u32 = 0;

/// The library's version as text ("hamlyn/0.1.0"): a static string, never freed.
#[no_mangle]
pub extern "C" fn hamlyn_version() -> *const c_char {
    c"hamlyn/0.1.0".as_ptr()
}

/// The library's version as numbers (0.1.0 is 0x000100: major << 16 | minor << 8 |
/// patch): what a program compares with the header's `HAMLYN_VERSION_*` macros.
#[no_mangle]
pub extern "C" fn hamlyn_version_number() -> u32 {
    (HAMLYN_VERSION_MAJOR << 16) | (HAMLYN_VERSION_MINOR << 8) | HAMLYN_VERSION_PATCH
}

/// Whether a node a handle was made from is still open: shared by the node handle and
/// every handle made from it.
#[derive(Debug, Default)]
#[allow(clippy::disallowed_types)] // See the `use` above.
pub(crate) struct Life {
    closed: AtomicBool,
}

impl Life {
    /// `Err(Closed)` once the node was freed.
    pub(crate) fn check(&self) -> Result<(), hamlyn_result> {
        // Acquire: pairs with the Release in `close`; nothing is published through it,
        // but a call that starts after `hamlyn_node_free` returned sees the flag.
        if self.closed.load(Ordering::Acquire) {
            Err(hamlyn_result::Closed)
        } else {
            Ok(())
        }
    }

    pub(crate) fn close(&self) {
        // Release: pairs with the Acquire in `check`.
        self.closed.store(true, Ordering::Release);
    }
}

thread_local! {
    /// The `Serial` objects this thread holds now (a callback of one of them may be
    /// running): a call back into one of them is `InHandler`, never a deadlock.
    static HELD: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// An object of a layer above the interface level (an active-message endpoint, an RPC
/// server) behind a lock that a callback it runs (a C handler or procedure) cannot take
/// again: such a call on the same thread is `HAMLYN_RESULT_IN_HANDLER`.
pub(crate) struct Serial<T> {
    inner: Mutex<T>,
}

impl<T> Serial<T> {
    pub(crate) fn new(value: T) -> Serial<T> {
        Serial {
            inner: Mutex::new(value),
        }
    }

    /// Runs `f` with the object locked and marked as held by this thread.
    pub(crate) fn with<R>(
        &self,
        f: impl FnOnce(&mut T) -> Result<R, hamlyn_result>,
    ) -> Result<R, hamlyn_result> {
        let me = std::ptr::from_ref(self) as usize;
        let held = HELD
            .try_with(|h| h.try_borrow().is_ok_and(|h| h.contains(&me)))
            .unwrap_or(false);
        if held {
            return Err(hamlyn_result::InHandler);
        }
        let mut inner = lock(&self.inner)?;
        let _ = HELD.try_with(|h| {
            if let Ok(mut h) = h.try_borrow_mut() {
                h.push(me);
            }
        });
        // Unmarks it even if `f` panics (the panic boundary is outside).
        struct Unmark(usize);
        impl Drop for Unmark {
            fn drop(&mut self) {
                let me = self.0;
                let _ = HELD.try_with(|h| {
                    if let Ok(mut h) = h.try_borrow_mut() {
                        if let Some(i) = h.iter().rposition(|&x| x == me) {
                            h.remove(i);
                        }
                    }
                });
            }
        }
        let _unmark = Unmark(me);
        f(&mut inner)
    }
}

/// Runs `f` as a panic boundary: its error or a panic becomes a result code.
pub(crate) fn guard(f: impl FnOnce() -> Result<(), hamlyn_result>) -> hamlyn_result {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => hamlyn_result::Ok,
        Ok(Err(code)) => code,
        Err(_) => hamlyn_result::Panic,
    }
}

/// Frees a boxed handle made by `Box::into_raw`, inside a panic boundary (a panic while
/// dropping is swallowed: a `_free` function has no result).
///
/// # Safety
///
/// `ptr` is NULL or came from `Box::into_raw(Box<T>)` and was not freed yet.
pub(crate) unsafe fn free_box<T>(ptr: *mut T) {
    if ptr.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's contract: `ptr` is a live `Box<T>` given to C, freed once.
        drop(unsafe { Box::from_raw(ptr) });
    }));
}

/// The handle behind `ptr`, or `NullArgument`.
///
/// # Safety
///
/// `ptr` is NULL or points to a live `T` handed to C by this library.
pub(crate) unsafe fn handle<'a, T>(ptr: *const T) -> Result<&'a T, hamlyn_result> {
    // SAFETY: the caller's contract: non-NULL means a live handle of this library.
    unsafe { ptr.as_ref() }.ok_or(hamlyn_result::NullArgument)
}

/// Writes `value` to the output `out` (checked for NULL first by the caller's `out`
/// helper).
///
/// # Safety
///
/// `out` is non-NULL, aligned and writable for a `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T) {
    // SAFETY: the caller's contract.
    unsafe { out.write(value) }
}

/// `Err(NullArgument)` if `ptr` is NULL.
pub(crate) fn non_null<T>(ptr: *const T) -> Result<(), hamlyn_result> {
    if ptr.is_null() {
        Err(hamlyn_result::NullArgument)
    } else {
        Ok(())
    }
}

/// The bytes `ptr..ptr + len` (an empty slice for `len == 0`, whatever `ptr`).
///
/// # Safety
///
/// If `len > 0`, `ptr` is non-NULL and readable for `len` bytes that no one writes
/// during the call.
pub(crate) unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8], hamlyn_result> {
    if len == 0 {
        return Ok(&[]);
    }
    non_null(ptr)?;
    // SAFETY: the caller's contract: `len` readable bytes at a non-NULL `ptr`.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A NUL-terminated UTF-8 string from C.
///
/// # Safety
///
/// `ptr` is NULL or points to a NUL-terminated string.
pub(crate) unsafe fn text<'a>(ptr: *const c_char) -> Result<&'a str, hamlyn_result> {
    non_null(ptr)?;
    // SAFETY: the caller's contract: a NUL-terminated string at a non-NULL `ptr`.
    let s = unsafe { CStr::from_ptr(ptr) };
    s.to_str().map_err(|_| hamlyn_result::InvalidArgument)
}

/// Locks a handle's mutex; a mutex poisoned by an earlier panic is `Panic` for good.
pub(crate) fn lock<T>(m: &Mutex<T>) -> Result<MutexGuard<'_, T>, hamlyn_result> {
    m.lock().map_err(|_| hamlyn_result::Panic)
}

/// A C timeout in milliseconds: negative waits forever.
pub(crate) fn timeout(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// Copies `text` and a terminating NUL into `buf` (capacity `cap`) if it fits; stores the
/// length it needs (NUL included) in `needed` either way.
///
/// # Safety
///
/// `buf` is NULL or writable for `cap` bytes; `needed` is NULL or writable.
pub(crate) unsafe fn text_out(
    text: &str,
    buf: *mut c_char,
    cap: usize,
    needed: *mut usize,
) -> Result<(), hamlyn_result> {
    let want = text.len() + 1;
    if !needed.is_null() {
        // SAFETY: `needed` is non-NULL and writable (the caller's contract). Written even
        // on `BufferTooSmall`: it is how the caller learns the size to allocate.
        unsafe { put(needed, want) };
    }
    if cap < want {
        return Err(hamlyn_result::BufferTooSmall);
    }
    non_null(buf)?;
    // SAFETY: `buf` is non-NULL and writable for `cap >= want` bytes; `text` is a Rust
    // string, not overlapping it.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        buf.add(text.len()).write(0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_macros_follow_the_package_version() {
        let v = env!("CARGO_PKG_VERSION");
        assert_eq!(
            format!("{HAMLYN_VERSION_MAJOR}.{HAMLYN_VERSION_MINOR}.{HAMLYN_VERSION_PATCH}"),
            v
        );
        // SAFETY: hamlyn_version returns a static NUL-terminated string.
        let s = unsafe { CStr::from_ptr(hamlyn_version()) };
        assert_eq!(s.to_str().ok(), Some(format!("hamlyn/{v}").as_str()));
    }
}
