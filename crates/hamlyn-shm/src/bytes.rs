//! Bytes that another process may write while we use them, held by raw parts, never as a
//! Rust reference (the way `vm-memory` reaches guest memory).
//!
//! A [`SharedBytes`] is a source of bytes (a payload a fabric sends), a
//! [`SharedBytesMut`] a destination (the place a fabric reads a payload into). Either
//! points into a live [`ShmRegion`](crate::region::ShmRegion) mapping
//! ([`ShmRegion::bytes`](crate::region::ShmRegion::bytes),
//! [`ShmRegion::bytes_mut`](crate::region::ShmRegion::bytes_mut), bounds-checked) or into
//! ordinary memory (`From<&[u8]>`, `From<&mut [u8]>`), so that one type carries both
//! through the fabric interface. The lifetime is the owner's borrow: the bytes stay mapped
//! for as long as the view lives.
//!
//! What can be done with them is what is sound when another process writes the same
//! bytes concurrently: copy out or in through raw pointers (a concurrent writer can only
//! make the copy torn), or lend them to a vectored system call ([`SharedBytes::io_slice`],
//! [`SharedBytesMut::io_slice_mut`]: the only places a slice is formed, each one audited
//! function, for the kernel to read or fill).

use std::io::{IoSlice, IoSliceMut};
use std::marker::PhantomData;
use std::ptr::NonNull;

/// A read-only view of `len` bytes that may be shared with another process.
#[derive(Clone, Copy)]
pub struct SharedBytes<'a> {
    ptr: NonNull<u8>,
    len: usize,
    _owner: PhantomData<&'a [u8]>,
}

/// A writable view of `len` bytes that may be shared with another process.
pub struct SharedBytesMut<'a> {
    ptr: NonNull<u8>,
    len: usize,
    _owner: PhantomData<&'a mut [u8]>,
}

impl std::fmt::Debug for SharedBytes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.len)
    }
}

impl std::fmt::Debug for SharedBytesMut<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedBytesMut({} bytes)", self.len)
    }
}

impl<'a> From<&'a [u8]> for SharedBytes<'a> {
    fn from(s: &'a [u8]) -> SharedBytes<'a> {
        SharedBytes {
            ptr: NonNull::from(s).cast::<u8>(),
            len: s.len(),
            _owner: PhantomData,
        }
    }
}

impl<'a, const N: usize> From<&'a [u8; N]> for SharedBytes<'a> {
    fn from(s: &'a [u8; N]) -> SharedBytes<'a> {
        SharedBytes::from(&s[..])
    }
}

impl<'a> From<&'a Vec<u8>> for SharedBytes<'a> {
    fn from(s: &'a Vec<u8>) -> SharedBytes<'a> {
        SharedBytes::from(&s[..])
    }
}

impl<'a> From<&'a mut [u8]> for SharedBytesMut<'a> {
    fn from(s: &'a mut [u8]) -> SharedBytesMut<'a> {
        let len = s.len();
        SharedBytesMut {
            ptr: NonNull::from(s).cast::<u8>(),
            len,
            _owner: PhantomData,
        }
    }
}

impl<'a> SharedBytes<'a> {
    /// A view of `len` bytes at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr..ptr + len` must be mapped and readable for all of `'a`, and nothing may
    /// write it through a Rust reference while the view lives (other processes, and
    /// raw-pointer or atomic writes in this one, may).
    pub unsafe fn from_raw_parts(ptr: NonNull<u8>, len: usize) -> SharedBytes<'a> {
        SharedBytes {
            ptr,
            len,
            _owner: PhantomData,
        }
    }

    /// No bytes.
    pub fn empty() -> SharedBytes<'static> {
        SharedBytes::from(&[][..])
    }

    /// How many bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes from `at` on (empty if `at` is past the end).
    pub fn tail(self, at: usize) -> SharedBytes<'a> {
        let at = at.min(self.len);
        // SAFETY: `at <= len`, so the result is inside the same live range.
        let ptr = unsafe { self.ptr.add(at) };
        SharedBytes {
            ptr,
            len: self.len - at,
            _owner: PhantomData,
        }
    }

    /// The first `len` bytes (all of them if there are fewer).
    pub fn head(self, len: usize) -> SharedBytes<'a> {
        SharedBytes {
            ptr: self.ptr,
            len: len.min(self.len),
            _owner: PhantomData,
        }
    }

    /// Copies the first `dst.len()` bytes into `dst`.
    ///
    /// # Panics
    ///
    /// If `dst` is longer than the view.
    pub fn copy_to(&self, dst: &mut [u8]) {
        assert!(dst.len() <= self.len, "copy_to: destination too long");
        // SAFETY: the source is live and readable for `'a` (the constructors' promise)
        // and at least `dst.len()` long (checked); `dst` is an exclusive Rust buffer, so
        // it cannot overlap bytes a shared view names. No reference to the source is
        // formed: a concurrent writer can only make the copy torn.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), dst.as_mut_ptr(), dst.len()) };
    }

    /// Appends all the bytes to `out` (one copy, no zero-filling first).
    pub fn append_to(&self, out: &mut Vec<u8>) {
        out.reserve(self.len);
        let spare = out.spare_capacity_mut();
        // SAFETY: `reserve` made room for `len` more bytes, so the destination is inside
        // `out`'s allocation, which cannot overlap the source (an exclusive Vec and a
        // shared view). The source is live and readable for `'a`, read through a raw
        // pointer only.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), spare.as_mut_ptr().cast(), self.len)
        };
        // SAFETY: the `len` bytes past the old length were just initialised.
        unsafe { out.set_len(out.len() + self.len) };
    }

    /// The bytes as an `IoSlice`, to hand to a vectored write (`writev`).
    ///
    /// This is the one place a read-only slice of shared bytes is formed, for the kernel
    /// to copy out. Use it only for that: the bytes may change under the slice.
    pub fn io_slice(&self) -> IoSlice<'a> {
        // SAFETY: the range is mapped and readable for `'a` (the constructors' promise),
        // so the slice is valid memory for its whole life; no Rust reference writes it
        // meanwhile (the constructors' promise again). Another process may write it
        // concurrently, which the Rust model does not see: the slice exists to be handed
        // to `writev`, whose kernel-side copy is what reads it, and a concurrent writer
        // can only make that copy torn (its own buffer, changed before its send
        // completed).
        let s = unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) };
        IoSlice::new(s)
    }
}

impl<'a> SharedBytesMut<'a> {
    /// A writable view of `len` bytes at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr..ptr + len` must be mapped and writable for all of `'a`, and no Rust
    /// reference to it may exist while the view lives (other processes, and raw-pointer
    /// or atomic access in this one, may touch it).
    pub unsafe fn from_raw_parts(ptr: NonNull<u8>, len: usize) -> SharedBytesMut<'a> {
        SharedBytesMut {
            ptr,
            len,
            _owner: PhantomData,
        }
    }

    /// How many bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes from `at` on (empty if `at` is past the end), borrowing this view.
    pub fn tail(&mut self, at: usize) -> SharedBytesMut<'_> {
        let at = at.min(self.len);
        // SAFETY: `at <= len`, so the result is inside the same live range.
        let ptr = unsafe { self.ptr.add(at) };
        SharedBytesMut {
            ptr,
            len: self.len - at,
            _owner: PhantomData,
        }
    }

    /// Copies `src` in at byte `at`.
    ///
    /// # Panics
    ///
    /// If `at + src.len()` is past the end.
    pub fn copy_from(&mut self, at: usize, src: &[u8]) {
        assert!(
            at.checked_add(src.len()).is_some_and(|end| end <= self.len),
            "copy_from: {} bytes at {at} do not fit in {}",
            src.len(),
            self.len
        );
        // SAFETY: the destination `at..at + src.len()` is inside the live, writable range
        // (checked); `src` is a Rust reference, so it cannot be the bytes of this view
        // (which no reference may name while it lives). No reference to the destination
        // is formed: a concurrent writer can only make the result torn.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(at), src.len())
        };
    }

    /// The bytes as an `IoSliceMut`, to hand to a vectored read (`readv`), for as long as
    /// this view is borrowed.
    ///
    /// This is the one place a mutable slice of shared bytes is formed, for the kernel to
    /// fill. Use it only for that: never read back through it.
    pub fn io_slice_mut(&mut self) -> IoSliceMut<'_> {
        // SAFETY: the range is mapped and writable for `'a`, which outlives the borrow of
        // `self`, and no Rust reference to it exists (the constructors' promise); the
        // `&mut self` borrow keeps this view from making another slice meanwhile. Another
        // process may touch the bytes concurrently, which the Rust model does not see:
        // the slice exists to be handed to `readv`, whose kernel-side copy is what writes
        // it, and the owner of the bytes only reads them after the packet is counted.
        let s = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) };
        IoSliceMut::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_in_and_out_and_lends_io_slices() {
        let src = *b"hello world";
        let s = SharedBytes::from(&src);
        assert_eq!(s.len(), 11);
        let mut out = [0u8; 5];
        s.copy_to(&mut out);
        assert_eq!(&out, b"hello");
        let mut v = b">".to_vec();
        s.tail(6).append_to(&mut v);
        assert_eq!(v, b">world");
        assert!(s.tail(99).is_empty());
        let mut v = Vec::new();
        s.tail(2).head(3).append_to(&mut v);
        s.head(99).append_to(&mut v);
        assert_eq!(v, b"llohello world");
        assert!(s.head(0).is_empty());
        assert_eq!(&*s.io_slice(), b"hello world");

        let mut dst = [0u8; 8];
        let mut d = SharedBytesMut::from(&mut dst[..]);
        d.copy_from(2, b"abc");
        d.tail(5).io_slice_mut()[0] = b'z';
        assert_eq!(d.tail(7).len(), 1);
        assert_eq!(&dst, b"\0\0abcz\0\0");
    }

    #[test]
    #[should_panic(expected = "do not fit")]
    fn copy_from_checks_the_end() {
        let mut dst = [0u8; 4];
        SharedBytesMut::from(&mut dst[..]).copy_from(2, b"abc");
    }
}
