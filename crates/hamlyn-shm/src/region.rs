//! [`ShmRegion`]: a sealed memfd mapped shared, the memory every port, ring, queue and
//! area lives in.
//!
//! Areas (message, metadata and send areas) are just `ShmRegion`s. A region is created
//! by one process ([`ShmRegion::create`]) and handed to others as a file descriptor over a
//! Unix socket ([`crate::fdpass`]); the receiver maps it with [`ShmRegion::from_fd`], which
//! refuses any file whose owner could still shrink it: a peer that truncates a file you
//! have mapped makes your next access to the lost pages die with SIGBUS.
//! [`ShmRegion::from_fd_range`] maps only the pages around part of such a file (a direct
//! sender maps a receiver's slot and notification queue this way, DESIGN §2).
//!
//! All access is by byte offset and bounds-checked. Bytes are copied in and out through
//! raw pointers and never referenced in place (another process may be writing them, which
//! the Rust memory model cannot see). A fabric sends from and receives into a region
//! through [`ShmRegion::bytes`] and [`ShmRegion::bytes_mut`], views by raw parts
//! ([`crate::bytes`]) that copy or lend a slice to one system call.

use std::ffi::c_void;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::io::Errno;
use rustix::mm::{MapFlags, ProtFlags};

use crate::bytes::{SharedBytes, SharedBytesMut};
use crate::memory::RingMemory;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// Why a region could not be created, opened or accessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegionError {
    /// A system call failed.
    #[error("{op} failed: {source}")]
    Sys {
        /// The call that failed.
        op: &'static str,
        /// The error it returned.
        source: Errno,
    },
    /// A region must have at least one byte.
    #[error("a shared-memory region cannot be empty")]
    Empty,
    /// The memfd name contains a NUL byte.
    #[error("the region name contains a NUL byte")]
    BadName,
    /// The received file is not a regular file (memfds are).
    #[error("the file descriptor is not a regular file")]
    NotRegularFile,
    /// The received file is smaller than the caller expects to map.
    #[error("the file has {have} bytes, {need} are needed")]
    TooSmall {
        /// Bytes in the file.
        have: u64,
        /// Bytes the caller wants to map.
        need: usize,
    },
    /// The received file does not support seals (it is not a memfd).
    #[error("the file descriptor does not support seals (not a memfd)")]
    NotSealable,
    /// The received file lacks `F_SEAL_SHRINK`: its owner could truncate it under us.
    #[error("the file is not sealed against shrinking")]
    NotSealed,
    /// The byte range is outside the region.
    #[error("bytes {off}..{off}+{len} are outside the {region_len}-byte region")]
    OutOfBounds {
        /// Start of the range.
        off: usize,
        /// Length of the range.
        len: usize,
        /// Bytes in the region.
        region_len: usize,
    },
    /// The offset is not aligned for the requested atomic.
    #[error("offset {off} is not {align}-byte aligned")]
    Misaligned {
        /// The offending offset.
        off: usize,
        /// The alignment needed.
        align: usize,
    },
}

impl RegionError {
    #[cold]
    fn sys(op: &'static str, source: Errno) -> RegionError {
        RegionError::Sys { op, source }
    }
}

/// A memfd mapped `MAP_SHARED`, sealed so that it can never shrink.
///
/// Unmapped on drop. The file descriptor stays open as long as the region, so it can be
/// passed on to other processes ([`ShmRegion::fd`]).
///
/// A region addresses `len` bytes from offset 0. Usually they are the file's first bytes;
/// a region made by [`ShmRegion::from_fd_range`] addresses a range further in, and its
/// mapping covers the whole pages around that range.
#[derive(Debug)]
pub struct ShmRegion {
    fd: OwnedFd,
    /// Byte 0 of the region.
    ptr: NonNull<u8>,
    /// Bytes addressable from `ptr`.
    len: usize,
    /// The mapping as made by `mmap` (page-aligned, at or before `ptr`), for `munmap`.
    map: NonNull<u8>,
    /// Bytes mapped from `map` (covers `ptr..ptr + len`).
    map_len: usize,
}

// SAFETY: the region owns its mapping and file descriptor; nothing in it is tied to the
// creating thread. All access to the mapped bytes goes through atomics or raw-pointer
// copies that are sound from any thread.
unsafe impl Send for ShmRegion {}
// SAFETY: shared access from several threads only ever copies bytes through raw pointers
// or uses atomics; no reference to the bytes is formed but the slices `SharedBytes` and
// `SharedBytesMut` lend to one system call.
unsafe impl Sync for ShmRegion {}

impl ShmRegion {
    /// Creates a zero-filled memfd of `len` bytes named `name` (the name is only a debugging
    /// aid, visible in `/proc/<pid>/fd`), seals it against shrinking, growing and further
    /// sealing, and maps it shared, read-write.
    ///
    /// Sealing against growth too keeps the size every peer sees fixed; `F_SEAL_SEAL` means
    /// nobody, the creator included, can add seals later (such as `F_SEAL_WRITE`, which
    /// would make the peers' writable mappings fail).
    pub fn create(name: &str, len: usize) -> Result<ShmRegion, RegionError> {
        if len == 0 {
            return Err(RegionError::Empty);
        }
        if name.as_bytes().contains(&0) {
            return Err(RegionError::BadName);
        }
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .map_err(|e| RegionError::sys("memfd_create", e))?;
        let len64 = u64::try_from(len).map_err(|_| RegionError::sys("ftruncate", Errno::FBIG))?;
        rustix::fs::ftruncate(&fd, len64).map_err(|e| RegionError::sys("ftruncate", e))?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
            .map_err(|e| RegionError::sys("fcntl(F_ADD_SEALS)", e))?;
        Self::map(fd, 0, len, 0)
    }

    /// Maps the first `expected_len` bytes of a memfd received from another process.
    ///
    /// Verifies first that the descriptor is a regular file of at least `expected_len`
    /// bytes carrying `F_SEAL_SHRINK`, so the mapping can never lose pages under us. The
    /// file may be larger or still growable; only `expected_len` bytes are mapped.
    pub fn from_fd(fd: OwnedFd, expected_len: usize) -> Result<ShmRegion, RegionError> {
        Self::from_fd_range(fd, 0, expected_len)
    }

    /// Maps bytes `offset..offset + len` of a memfd received from another process: the
    /// region's byte 0 is the file's byte `offset`.
    ///
    /// Makes the checks of [`ShmRegion::from_fd`] (a regular file, sealed against
    /// shrinking, at least `offset + len` bytes long), then maps the whole pages that
    /// cover the range and nothing else of the file. Accesses through the region are
    /// bounds-checked against `len`, so the bytes of those pages outside the range are
    /// mapped but never reached. (The descriptor itself still opens the whole file: what
    /// is mapped is a matter of this process's own code, not a protection boundary.)
    pub fn from_fd_range(fd: OwnedFd, offset: u64, len: usize) -> Result<ShmRegion, RegionError> {
        if len == 0 {
            return Err(RegionError::Empty);
        }
        let end = u64::try_from(len)
            .ok()
            .and_then(|l| offset.checked_add(l))
            .ok_or(RegionError::TooSmall {
                have: 0,
                need: usize::MAX,
            })?;
        let st = rustix::fs::fstat(&fd).map_err(|e| RegionError::sys("fstat", e))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(RegionError::NotRegularFile);
        }
        let have = u64::try_from(st.st_size).unwrap_or(0);
        if have < end {
            return Err(RegionError::TooSmall {
                have,
                need: usize::try_from(end).unwrap_or(usize::MAX),
            });
        }
        let seals = match rustix::fs::fcntl_get_seals(&fd) {
            Ok(s) => s,
            Err(Errno::INVAL) => return Err(RegionError::NotSealable),
            Err(e) => return Err(RegionError::sys("fcntl(F_GET_SEALS)", e)),
        };
        if !seals.contains(SealFlags::SHRINK) {
            return Err(RegionError::NotSealed);
        }
        let page = rustix::param::page_size() as u64;
        let start = offset - offset % page;
        // `offset - start < page` and `len` was addable to `offset`: no overflow.
        let shift = (offset - start) as usize;
        let map_len = shift
            .checked_add(len)
            .ok_or(RegionError::sys("mmap", Errno::NOMEM))?;
        Self::map(fd, start, map_len, shift)
    }

    /// Maps `map_len` bytes of the file from `file_offset` (page-aligned); the region
    /// starts `shift` bytes into the mapping and ends with it.
    fn map(
        fd: OwnedFd,
        file_offset: u64,
        map_len: usize,
        shift: usize,
    ) -> Result<ShmRegion, RegionError> {
        // SAFETY: a fresh mapping (null hint, no MAP_FIXED) cannot alias any existing Rust
        // object. The file has at least `file_offset + map_len` bytes and cannot shrink
        // (sealed; checked by both callers), so every mapped page stays backed and no
        // access can SIGBUS. `file_offset` is a multiple of the page size.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                map_len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &fd,
                file_offset,
            )
        }
        .map_err(|e| RegionError::sys("mmap", e))?;
        let map = NonNull::new(p.cast::<u8>()).ok_or(RegionError::sys("mmap", Errno::NOMEM))?;
        // SAFETY: `shift <= map_len` (both callers), so the result is inside the mapping
        // or one past its end, and not null.
        let ptr = unsafe { map.add(shift) };
        Ok(ShmRegion {
            fd,
            ptr,
            len: map_len - shift,
            map,
            map_len,
        })
    }

    /// Faults every page of the mapping in now, writable (`MADV_POPULATE_WRITE`), so that
    /// no access on a fast path pays a first-touch page fault later: a page of the file
    /// allocated and zeroed, this process's page table filled, several microseconds on a
    /// virtual machine, and a wait on the page's lock when the other process faults on it
    /// at the same moment. For the mappings each message reaches a new part of: the
    /// notification queues and rings, metadata entries. A ping-pong crossed a fresh page of
    /// its 2 MiB queue every 128 messages, about 1% of them, on each side (2026-11-26).
    /// Not for message areas, which may be large and sparse. A kernel older than 5.14
    /// refuses (`EINVAL`): callers go on without, as before.
    pub fn populate(&self) -> Result<(), RegionError> {
        // SAFETY: the range is exactly this region's own mapping (`map`, `map_len`), alive
        // while `&self` is. MADV_POPULATE_WRITE faults the pages in as a write would,
        // without changing a byte, so nothing any process reads is affected.
        unsafe {
            rustix::mm::madvise(
                self.map.as_ptr().cast(),
                self.map_len,
                rustix::mm::Advice::LinuxPopulateWrite,
            )
        }
        .map_err(|e| RegionError::sys("madvise(MADV_POPULATE_WRITE)", e))
    }

    /// [`ShmRegion::populate`], best effort, for the mappings a fast path walks (rings,
    /// notification queues, metadata entries): a kernel that refuses (before 5.14) leaves
    /// the pages to fault on first touch, as they did before, and nothing else changes.
    pub fn fault_in(&self) {
        // Refused: the pages fault on first touch instead, which is all this saves.
        let _ = self.populate();
    }

    /// Bytes mapped.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes (never true: empty regions are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of the region's first byte, for a foreign-language binding that hands
    /// the memory to its caller (the C API's `hamlyn_area_memory`). The `len()` bytes from
    /// it stay mapped, readable and writable while `self` lives. Other processes may write
    /// them at any time: never form a Rust reference to them; copy through raw pointers.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The memfd, to pass to another process.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    #[inline]
    fn check(&self, off: usize, len: usize) -> Result<(), RegionError> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(self.out_of_bounds(off, len)),
        }
    }

    #[cold]
    fn out_of_bounds(&self, off: usize, len: usize) -> RegionError {
        RegionError::OutOfBounds {
            off,
            len,
            region_len: self.len,
        }
    }

    #[inline]
    fn check_atomic(&self, off: usize, size: usize) -> Result<*mut u8, RegionError> {
        self.check(off, size)?;
        // The address's alignment, not the offset's: a region made by `from_fd_range`
        // may start anywhere in a page.
        if (self.ptr.as_ptr() as usize).wrapping_add(off) % size != 0 {
            return Err(RegionError::Misaligned { off, align: size });
        }
        // SAFETY: `off + size <= len` was just checked, so the result stays inside the
        // mapping.
        Ok(unsafe { self.ptr.as_ptr().add(off) })
    }

    /// Copies `dst.len()` bytes at `off` out of the region.
    #[inline]
    pub fn read(&self, off: usize, dst: &mut [u8]) -> Result<(), RegionError> {
        self.check(off, dst.len())?;
        // SAFETY: the source range is inside the live mapping (checked) and cannot overlap
        // `dst`, a Rust buffer outside it. No reference to the shared bytes is formed; if
        // another process writes them concurrently, the copy may be torn, nothing worse.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }

    /// Copies `src` into the region at `off`.
    #[inline]
    pub fn write(&self, off: usize, src: &[u8]) -> Result<(), RegionError> {
        self.check(off, src.len())?;
        // SAFETY: the destination range is inside the live, writable mapping (checked) and
        // cannot overlap `src`. No Rust reference to those bytes exists (only the slices
        // lent to a system call by `bytes_mut` views, which the kernel fills).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(off), src.len())
        };
        Ok(())
    }

    /// Copies `len` bytes at `off` of this region to `dst_off` of `dst` (another region,
    /// or this one: the ranges may overlap), without an intermediate buffer: a direct
    /// sender copies from its own area into a receiver's slot this way.
    ///
    /// If two different regions map the same bytes of one file, the copy of an
    /// overlapping range may garble those bytes (it is still memory-safe: no reference to
    /// shared bytes is ever formed).
    pub fn copy_to(
        &self,
        off: usize,
        dst: &ShmRegion,
        dst_off: usize,
        len: usize,
    ) -> Result<(), RegionError> {
        self.check(off, len)?;
        dst.check(dst_off, len)?;
        // SAFETY: both ranges are inside live mappings (checked), the destination one is
        // writable. `copy` allows the ranges to overlap (the same region). No reference
        // to either range is formed, so a concurrent writer in another process can only
        // make the copy torn, as for `read` and `write`.
        unsafe {
            std::ptr::copy(
                self.ptr.as_ptr().add(off),
                dst.ptr.as_ptr().add(dst_off),
                len,
            )
        };
        Ok(())
    }

    /// The 32-bit atomic at `off` (bounds- and alignment-checked).
    #[inline]
    pub fn atomic_u32(&self, off: usize) -> Result<&AtomicU32, RegionError> {
        let p = self.check_atomic(off, 4)?;
        // SAFETY: `p` is 4-aligned and inside the mapping, which lives as long as `&self`.
        // Atomics in shared memory are address-free on the platforms rustix supports, and
        // every access to these bytes by this crate is atomic.
        Ok(unsafe { AtomicU32::from_ptr(p.cast::<u32>()) })
    }

    /// The 64-bit atomic at `off` (bounds- and alignment-checked).
    #[inline]
    pub fn atomic_u64(&self, off: usize) -> Result<&AtomicU64, RegionError> {
        let p = self.check_atomic(off, 8)?;
        // SAFETY: as in `atomic_u32`, with 8-byte alignment checked.
        Ok(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }

    /// Atomically adds `val` to the 32-bit word at `off` (wrapping), returning the old
    /// value. The packet accumulator update is one of these.
    #[inline]
    pub fn fetch_add_u32(&self, off: usize, val: u32, order: Ordering) -> Result<u32, RegionError> {
        Ok(self.atomic_u32(off)?.fetch_add(val, order))
    }

    /// Atomic compare-and-swap on the 64-bit word at `off`. The outer `Result` is the
    /// access check; the inner one is the CAS outcome (`Err` holds the value found).
    pub fn compare_exchange_u64(
        &self,
        off: usize,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Result<u64, u64>, RegionError> {
        Ok(self
            .atomic_u64(off)?
            .compare_exchange(current, new, success, failure))
    }

    /// A view of `off..off + len` to send from (bounds-checked): the engine hands a
    /// sender's send-area bytes to the fabric this way, which copies them out or lends
    /// them to `writev` ([`SharedBytes`]), never holding a reference to them.
    pub fn bytes(&self, off: usize, len: usize) -> Result<SharedBytes<'_>, RegionError> {
        self.check(off, len)?;
        // SAFETY: the range is inside the mapping (checked), which stays mapped and
        // readable as long as `&self` (unmapped only on drop). No Rust reference to the
        // region's bytes is ever formed but the `IoSlice`s such views lend to system
        // calls, which is `SharedBytes`'s own contract.
        Ok(unsafe { SharedBytes::from_raw_parts(self.byte_ptr(off), len) })
    }

    /// A view of `off..off + len` to receive into (bounds-checked): the engine hands the
    /// admitted place of an arriving payload to the fabric this way, which copies into it
    /// or lends it to `readv` ([`SharedBytesMut`]), never holding a reference to it.
    ///
    /// Views of overlapping ranges may coexist, as other processes' accesses do: each only
    /// copies through raw pointers or lends a slice to the kernel for one system call.
    pub fn bytes_mut(&self, off: usize, len: usize) -> Result<SharedBytesMut<'_>, RegionError> {
        self.check(off, len)?;
        // SAFETY: the range is inside the writable mapping (checked), which stays mapped
        // as long as `&self`. No Rust reference to the region's bytes is ever formed but
        // the slices such views lend to system calls (`SharedBytesMut::io_slice_mut`).
        Ok(unsafe { SharedBytesMut::from_raw_parts(self.byte_ptr(off), len) })
    }

    /// The address of byte `off`, which the caller has checked to be at most `len`.
    fn byte_ptr(&self, off: usize) -> NonNull<u8> {
        debug_assert!(off <= self.len);
        // SAFETY: `off <= len` (the callers check), so the address is inside the mapping
        // or one past its last addressable byte.
        unsafe { self.ptr.add(off) }
    }
}

impl Drop for ShmRegion {
    fn drop(&mut self) {
        // SAFETY: `map`/`map_len` are exactly the mapping created in `map`, unmapped only
        // here. Every reference into it borrows `self`, so none outlives this call.
        let r = unsafe { rustix::mm::munmap(self.map.as_ptr().cast::<c_void>(), self.map_len) };
        // munmap of a mapping we own cannot fail; if it somehow did, leaking the mapping
        // is the only safe outcome.
        debug_assert!(r.is_ok(), "munmap failed: {r:?}");
    }
}

impl RingMemory for ShmRegion {
    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
        ShmRegion::atomic_u32(self, off).ok()
    }

    #[inline]
    fn atomic_u64(&self, off: usize) -> Option<&AtomicU64> {
        ShmRegion::atomic_u64(self, off).ok()
    }

    #[inline]
    fn load_bytes(&self, off: usize, dst: &mut [u8]) -> bool {
        self.read(off, dst).is_ok()
    }

    #[inline]
    fn store_bytes(&self, off: usize, src: &[u8]) -> bool {
        self.write(off, src).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Minor page faults of this thread so far (field 10 of `/proc/thread-self/stat`),
    /// read into a buffer on the stack so that the reading itself faults nothing new.
    fn minor_faults() -> u64 {
        use std::io::Read;
        let mut buf = [0u8; 1024];
        let mut f = std::fs::File::open("/proc/thread-self/stat").expect("stat");
        let n = f.read(&mut buf).expect("read");
        let text = std::str::from_utf8(&buf[..n]).expect("text");
        // After the command's closing parenthesis: state is field 3, minflt field 10.
        let rest = &text[text.rfind(')').expect("comm") + 2..];
        rest.split(' ')
            .nth(7)
            .expect("minflt")
            .parse()
            .expect("number")
    }

    /// After `populate`, a write to every page of a fresh region takes no page fault;
    /// without it, one per page.
    #[test]
    fn a_populated_region_takes_no_fault_when_first_written() {
        const PAGES: usize = 64;
        let page = rustix::param::page_size();
        let touch = |r: &ShmRegion| {
            for p in 0..PAGES {
                r.write(p * page, &[1]).expect("in range");
            }
        };
        let cold = ShmRegion::create("test-cold", PAGES * page).expect("memfd");
        let before = minor_faults();
        touch(&cold);
        let cold_faults = minor_faults() - before;
        assert!(
            cold_faults >= PAGES as u64 - 4,
            "one fault a page: {cold_faults}"
        );

        let warm = ShmRegion::create("test-warm", PAGES * page).expect("memfd");
        warm.populate().expect("MADV_POPULATE_WRITE (Linux 5.14)");
        let before = minor_faults();
        touch(&warm);
        let warm_faults = minor_faults() - before;
        assert!(
            warm_faults <= 4,
            "populated: {warm_faults} faults for {PAGES} pages"
        );
    }

    #[test]
    fn create_read_write_atomics() -> Result<(), RegionError> {
        let r = ShmRegion::create("hamlyn-test-region", 4096)?;
        assert_eq!(r.len(), 4096);
        let mut buf = [0xFFu8; 8];
        r.read(100, &mut buf)?;
        assert_eq!(buf, [0; 8], "memfds start zeroed");
        r.write(100, b"hamlyn!!")?;
        r.read(100, &mut buf)?;
        assert_eq!(&buf, b"hamlyn!!");
        assert_eq!(r.fetch_add_u32(8, 5, Ordering::Relaxed)?, 0);
        assert_eq!(r.atomic_u32(8)?.load(Ordering::Relaxed), 5);
        assert_eq!(
            r.compare_exchange_u64(16, 0, 7, Ordering::Relaxed, Ordering::Relaxed)?,
            Ok(0)
        );
        assert_eq!(
            r.compare_exchange_u64(16, 0, 9, Ordering::Relaxed, Ordering::Relaxed)?,
            Err(7)
        );
        r.bytes_mut(200, 4)?.copy_from(0, &[1, 2, 3, 4]);
        r.read(200, &mut buf[..4])?;
        assert_eq!(&buf[..4], &[1, 2, 3, 4]);
        let mut back = [0u8; 3];
        r.bytes(201, 3)?.copy_to(&mut back);
        assert_eq!(back, [2, 3, 4]);
        Ok(())
    }

    #[test]
    fn accessors_check_bounds_and_alignment() -> Result<(), RegionError> {
        let r = ShmRegion::create("hamlyn-test-bounds", 64)?;
        let mut buf = [0u8; 8];
        assert!(matches!(
            r.read(60, &mut buf),
            Err(RegionError::OutOfBounds { .. })
        ));
        assert!(matches!(
            r.write(usize::MAX, &buf),
            Err(RegionError::OutOfBounds { .. })
        ));
        assert!(matches!(
            r.atomic_u32(58),
            Err(RegionError::Misaligned { .. })
        ));
        assert!(matches!(
            r.atomic_u64(4),
            Err(RegionError::Misaligned { .. })
        ));
        assert!(matches!(
            r.atomic_u64(64),
            Err(RegionError::OutOfBounds { .. })
        ));
        assert!(r.atomic_u64(56).is_ok());
        assert!(r.bytes_mut(32, 33).is_err());
        assert!(r.bytes(usize::MAX, 2).is_err());
        assert!(r.bytes(64, 0).is_ok());
        assert_eq!(ShmRegion::create("x", 0).err(), Some(RegionError::Empty));
        assert_eq!(
            ShmRegion::create("a\0b", 8).err(),
            Some(RegionError::BadName)
        );
        Ok(())
    }

    #[test]
    fn from_fd_maps_the_same_memory() -> Result<(), Box<dyn std::error::Error>> {
        let a = ShmRegion::create("hamlyn-test-share", 8192)?;
        let fd = a.fd().try_clone_to_owned()?;
        let b = ShmRegion::from_fd(fd, 8192)?;
        // Relaxed: one thread; the point is that both mappings show the same memory.
        a.atomic_u64(64)?.store(0xDEAD_BEEF, Ordering::Relaxed);
        assert_eq!(b.atomic_u64(64)?.load(Ordering::Relaxed), 0xDEAD_BEEF);
        // A smaller view of a larger file is fine.
        let c = ShmRegion::from_fd(a.fd().try_clone_to_owned()?, 100)?;
        assert_eq!(c.len(), 100);
        Ok(())
    }

    #[test]
    fn from_fd_range_maps_part_of_a_file() -> Result<(), Box<dyn std::error::Error>> {
        let page = rustix::param::page_size();
        let whole = ShmRegion::create("hamlyn-test-range", 3 * page)?;
        // A range that starts mid-page and crosses into the next one.
        let off = page + 100;
        let part = ShmRegion::from_fd_range(whole.fd().try_clone_to_owned()?, off as u64, page)?;
        assert_eq!(part.len(), page);
        part.write(0, b"start")?;
        part.write(page - 3, b"end")?;
        let mut buf = [0u8; 5];
        whole.read(off, &mut buf)?;
        assert_eq!(
            &buf, b"start",
            "byte 0 of the range is the file's byte `off`"
        );
        whole.read(off + page - 3, &mut buf[..3])?;
        assert_eq!(&buf[..3], b"end");
        // Bounds are the range's, not the mapped pages'.
        assert!(matches!(
            part.write(page - 2, b"xyz"),
            Err(RegionError::OutOfBounds { .. })
        ));
        // Atomics are aligned by address: offset 0 of the range is file byte `page + 100`,
        // 4- but not 8-aligned.
        assert!(part.atomic_u32(0).is_ok());
        assert!(matches!(
            part.atomic_u64(0),
            Err(RegionError::Misaligned { .. })
        ));
        assert!(part.atomic_u64(4).is_ok());
        // Relaxed: one thread; both mappings show the same word.
        part.fetch_add_u32(12, 7, Ordering::Relaxed)?;
        assert_eq!(whole.atomic_u32(off + 12)?.load(Ordering::Relaxed), 7);
        // The range must lie inside the file.
        let fd = || whole.fd().try_clone_to_owned();
        assert!(matches!(
            ShmRegion::from_fd_range(fd()?, (2 * page + 1) as u64, page),
            Err(RegionError::TooSmall { .. })
        ));
        assert!(matches!(
            ShmRegion::from_fd_range(fd()?, u64::MAX, 2),
            Err(RegionError::TooSmall { .. })
        ));
        assert_eq!(
            ShmRegion::from_fd_range(fd()?, 0, 0).err(),
            Some(RegionError::Empty)
        );
        let last = ShmRegion::from_fd_range(fd()?, (3 * page - 1) as u64, 1)?;
        assert_eq!(last.len(), 1);
        Ok(())
    }

    #[test]
    fn copy_to_between_and_within_regions() -> Result<(), RegionError> {
        let a = ShmRegion::create("hamlyn-test-copy-a", 256)?;
        let b = ShmRegion::create("hamlyn-test-copy-b", 256)?;
        a.write(10, b"0123456789")?;
        a.copy_to(10, &b, 200, 10)?;
        let mut buf = [0u8; 10];
        b.read(200, &mut buf)?;
        assert_eq!(&buf, b"0123456789");
        // Overlapping ranges of one region: a memmove.
        a.copy_to(10, &a, 13, 10)?;
        let mut buf = [0u8; 13];
        a.read(10, &mut buf)?;
        assert_eq!(&buf, b"0120123456789");
        assert!(matches!(
            a.copy_to(250, &b, 0, 10),
            Err(RegionError::OutOfBounds { .. })
        ));
        assert!(matches!(
            a.copy_to(0, &b, 250, 10),
            Err(RegionError::OutOfBounds { .. })
        ));
        a.copy_to(256, &b, 256, 0)?;
        Ok(())
    }

    #[test]
    fn from_fd_rejects_unsealed_memfd() -> Result<(), Box<dyn std::error::Error>> {
        let fd = rustix::fs::memfd_create(
            "hamlyn-unsealed",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        rustix::fs::ftruncate(&fd, 4096)?;
        assert_eq!(
            ShmRegion::from_fd(fd, 4096).err(),
            Some(RegionError::NotSealed)
        );
        // Without ALLOW_SEALING the memfd carries F_SEAL_SEAL only: still not SHRINK-sealed.
        let fd = rustix::fs::memfd_create("hamlyn-unsealable", MemfdFlags::CLOEXEC)?;
        rustix::fs::ftruncate(&fd, 4096)?;
        assert_eq!(
            ShmRegion::from_fd(fd, 4096).err(),
            Some(RegionError::NotSealed)
        );
        Ok(())
    }

    #[test]
    fn from_fd_rejects_too_small_and_non_memfds() -> Result<(), Box<dyn std::error::Error>> {
        let a = ShmRegion::create("hamlyn-test-small", 4096)?;
        assert_eq!(
            ShmRegion::from_fd(a.fd().try_clone_to_owned()?, 4097).err(),
            Some(RegionError::TooSmall {
                have: 4096,
                need: 4097
            })
        );
        let (sock, _peer) = std::os::unix::net::UnixStream::pair()?;
        assert_eq!(
            ShmRegion::from_fd(sock.into(), 1).err(),
            Some(RegionError::NotRegularFile)
        );
        let file = std::fs::File::open("/proc/self/exe")?;
        let got = ShmRegion::from_fd(file.into(), 1).err();
        assert!(
            matches!(got, Some(RegionError::NotSealable | RegionError::NotSealed)),
            "{got:?}"
        );
        Ok(())
    }
}
