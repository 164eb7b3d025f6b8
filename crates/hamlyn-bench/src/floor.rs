//! The floor: what two processes get from shared memory with no engine in between.
//!
//! - Latency: a cache-line ping-pong over a memfd shared by the two processes. Each side
//!   writes only its own cache line and spins on the other's; one-way = RTT / 2.
//! - Latency through a relay: the same ping-pong, but each message goes through a third
//!   thread that forwards it (as the engine does, minus all checking and copying), and
//!   every party waits as Hamlyn's do (spin a budget of polls, then sleep on a futex until
//!   woken; `hamlyn_shm::wake`). With three busy parties on a two-core machine this is
//!   where the scheduler's cost shows; what Hamlyn adds above it is the engine's doing.
//! - Bandwidth: a single-threaded memcpy of each message size, buffer to buffer (the
//!   engine's one copy per message can at best match it).

use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use hamlyn_shm::region::ShmRegion;
use hamlyn_shm::sync::{AtomicU32, AtomicU64, Ordering};
use hamlyn_shm::wake::{wait_until, wake_after_publish, WaitOutcome};

use super::error::BenchError;
use super::plan::median;

/// Bytes of the shared region.
pub const FLOOR_LEN: usize = 4096;
/// The driver's line (it writes the round number here).
const PING: usize = 0;
/// The peer's line (it echoes the round number here). Two lines apart, so the adjacent-
/// line prefetcher does not couple them.
const PONG: usize = 128;
/// Relayed ping-pong: the driver's line to the relay.
const RELAY_IN_A: usize = 256;
/// Relayed ping-pong: the relay's line to the driver.
const RELAY_OUT_A: usize = 384;
/// Relayed ping-pong: the peer's line to the relay.
const RELAY_IN_B: usize = 512;
/// Relayed ping-pong: the relay's line to the peer.
const RELAY_OUT_B: usize = 640;
/// Relayed ping-pong: the driver's wake word.
const WAKE_A: usize = 768;
/// Relayed ping-pong: the peer's wake word.
const WAKE_B: usize = 896;
/// Relayed ping-pong: the relay's wake word.
const WAKE_RELAY: usize = 1024;
/// Written to the driver's line to end the peer's loop.
const STOP: u64 = u64::MAX;
/// Longest a side spins for the other before giving up.
const SPIN_LIMIT: Duration = Duration::from_secs(30);

/// The floor ping-pong's shared memory.
#[derive(Debug)]
pub struct FloorShm {
    region: ShmRegion,
}

impl FloorShm {
    /// A fresh zeroed region (driver side).
    pub fn create() -> Result<FloorShm, BenchError> {
        Ok(FloorShm {
            region: ShmRegion::create("hamlyn-bench-floor", FLOOR_LEN)?,
        })
    }

    /// The path under which another process of the same user can open the memfd.
    pub fn proc_path(&self) -> String {
        format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.region.fd().as_raw_fd()
        )
    }

    /// Maps the region created by another process, named by its [`FloorShm::proc_path`].
    pub fn open(path: &str) -> Result<FloorShm, BenchError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| BenchError::io("opening the floor's shared memory", e))?;
        Ok(FloorShm {
            region: ShmRegion::from_fd(OwnedFd::from(file), FLOOR_LEN)?,
        })
    }

    fn line(&self, off: usize) -> Result<&AtomicU64, BenchError> {
        Ok(self.region.atomic_u64(off)?)
    }

    fn wake_word(&self, off: usize) -> Result<&AtomicU32, BenchError> {
        Ok(self.region.atomic_u32(off)?)
    }

    /// Driver of the relayed ping-pong: the two processes exchange round numbers through a
    /// relay thread in this process, as messages go through the engine, and every party
    /// waits as Hamlyn's do. The processes spin `spin` polls and then sleep until woken
    /// (a Hamlyn receiver); the relay spins `relay_spin` polls between sleeps (the
    /// engine's idle turns; `u32::MAX`: it never sleeps, as with busy-poll). The peer runs
    /// [`FloorShm::pong_relayed`]. Returns the median batch's one-way time in µs.
    pub fn ping_relayed(
        &self,
        spin: u32,
        relay_spin: u32,
        warmup: u64,
        batches: usize,
        rounds: u64,
    ) -> Result<f64, BenchError> {
        let (to_relay, from_relay) = (self.line(RELAY_IN_A)?, self.line(RELAY_OUT_A)?);
        let (my_wake, relay_wake) = (self.wake_word(WAKE_A)?, self.wake_word(WAKE_RELAY)?);
        std::thread::scope(|scope| {
            let relay = scope.spawn(|| self.relay(relay_spin));
            let round = |n: u64| -> Result<(), BenchError> {
                // Release: pairs with the relay's Acquire load; the fence inside
                // `wake_after_publish` pairs with the one in its `wait_until`.
                to_relay.store(n, Ordering::Release);
                wake_after_publish(relay_wake, None);
                sleep_until(my_wake, spin, || from_relay.load(Ordering::Acquire) == n)
            };
            let result = (|| {
                let mut n = 0;
                for _ in 0..warmup {
                    n += 1;
                    round(n)?;
                }
                let mut one_way = Vec::with_capacity(batches);
                for _ in 0..batches {
                    let t0 = Instant::now();
                    for _ in 0..rounds {
                        n += 1;
                        round(n)?;
                    }
                    let us = t0.elapsed().as_secs_f64() * 1e6;
                    one_way.push(us / (2.0 * rounds.max(1) as f64));
                }
                median(&one_way).ok_or(BenchError::Usage("the floor needs at least one batch"))
            })();
            // Stops the relay, which passes the stop on to the peer.
            to_relay.store(STOP, Ordering::Release);
            wake_after_publish(relay_wake, None);
            let relayed = relay
                .join()
                .unwrap_or(Err(BenchError::Peer("the relay thread panicked".into())));
            let us = result?;
            relayed.map(|_| us)
        })
    }

    /// The relay: forwards the driver's round numbers to the peer and the peer's back,
    /// until the driver says stop (which it forwards too).
    fn relay(&self, relay_spin: u32) -> Result<(), BenchError> {
        let (in_a, out_a) = (self.line(RELAY_IN_A)?, self.line(RELAY_OUT_A)?);
        let (in_b, out_b) = (self.line(RELAY_IN_B)?, self.line(RELAY_OUT_B)?);
        let (wake_a, wake_b) = (self.wake_word(WAKE_A)?, self.wake_word(WAKE_B)?);
        let my_wake = self.wake_word(WAKE_RELAY)?;
        let (mut seen_a, mut seen_b) = (0, 0);
        loop {
            sleep_until(my_wake, relay_spin, || {
                in_a.load(Ordering::Acquire) != seen_a || in_b.load(Ordering::Acquire) != seen_b
            })?;
            let a = in_a.load(Ordering::Acquire);
            if a != seen_a {
                out_b.store(a, Ordering::Release);
                wake_after_publish(wake_b, None);
                seen_a = a;
                if a == STOP {
                    return Ok(());
                }
            }
            let b = in_b.load(Ordering::Acquire);
            if b != seen_b {
                out_a.store(b, Ordering::Release);
                wake_after_publish(wake_a, None);
                seen_b = b;
            }
        }
    }

    /// Peer of the relayed ping-pong: echoes what the relay brings, waiting as a Hamlyn
    /// receiver does. Returns the rounds.
    pub fn pong_relayed(&self, spin: u32) -> Result<u64, BenchError> {
        let (from_relay, to_relay) = (self.line(RELAY_OUT_B)?, self.line(RELAY_IN_B)?);
        let (my_wake, relay_wake) = (self.wake_word(WAKE_B)?, self.wake_word(WAKE_RELAY)?);
        let mut last = 0;
        loop {
            sleep_until(my_wake, spin, || from_relay.load(Ordering::Acquire) != last)?;
            let v = from_relay.load(Ordering::Acquire);
            if v == STOP {
                return Ok(last);
            }
            to_relay.store(v, Ordering::Release);
            wake_after_publish(relay_wake, None);
            last = v;
        }
    }

    /// Driver: `warmup` untimed round trips, then `batches` timed batches of `rounds`
    /// round trips; ends the peer's loop. Returns the median batch's one-way time in µs.
    pub fn ping(&self, warmup: u64, batches: usize, rounds: u64) -> Result<f64, BenchError> {
        let ping = self.line(PING)?;
        let pong = self.line(PONG)?;
        let mut n: u64 = 0;
        let round = |n: &mut u64| -> Result<(), BenchError> {
            *n += 1;
            // Release/Acquire: each side's store pairs with the other's spinning load;
            // only the value itself is communicated.
            ping.store(*n, Ordering::Release);
            spin_until(pong, |v| v == *n).map(|_| ())
        };
        for _ in 0..warmup {
            round(&mut n)?;
        }
        let mut one_way = Vec::with_capacity(batches);
        for _ in 0..batches {
            let t0 = Instant::now();
            for _ in 0..rounds {
                round(&mut n)?;
            }
            let us = t0.elapsed().as_secs_f64() * 1e6;
            one_way.push(us / (2.0 * rounds.max(1) as f64));
        }
        ping.store(STOP, Ordering::Release);
        median(&one_way).ok_or(BenchError::Usage("the floor needs at least one batch"))
    }

    /// Peer: echoes every round number until the driver says stop. Returns the rounds.
    pub fn pong(&self) -> Result<u64, BenchError> {
        let ping = self.line(PING)?;
        let pong = self.line(PONG)?;
        let mut last = 0;
        loop {
            let v = spin_until(ping, |v| v != last)?;
            if v == STOP {
                return Ok(last);
            }
            pong.store(v, Ordering::Release);
            last = v;
        }
    }
}

/// Waits as a Hamlyn receiver does until `ready` holds; gives up after [`SPIN_LIMIT`].
fn sleep_until(word: &AtomicU32, spin: u32, ready: impl FnMut() -> bool) -> Result<(), BenchError> {
    match wait_until(word, spin, Some(SPIN_LIMIT), ready) {
        Ok(WaitOutcome::TimedOut) => {
            Err(BenchError::Timeout(SPIN_LIMIT, "the floor ping-pong peer"))
        }
        Ok(_) => Ok(()),
        Err(e) => Err(BenchError::Peer(format!("floor wait: {e}"))),
    }
}

/// Spins until `word` holds a value `ok` accepts, and returns it; gives up after
/// [`SPIN_LIMIT`] (the other process died).
fn spin_until(word: &AtomicU64, ok: impl Fn(u64) -> bool) -> Result<u64, BenchError> {
    let mut spins: u32 = 0;
    let mut deadline = None;
    loop {
        // Acquire: pairs with the other side's Release store of its line.
        let v = word.load(Ordering::Acquire);
        if ok(v) {
            return Ok(v);
        }
        std::hint::spin_loop();
        spins = spins.wrapping_add(1);
        if spins % (1 << 20) == 0 {
            let d = *deadline.get_or_insert_with(|| Instant::now() + SPIN_LIMIT);
            if Instant::now() > d {
                return Err(BenchError::Timeout(SPIN_LIMIT, "the floor ping-pong peer"));
            }
        }
    }
}

/// A `len`-byte window of a fresh buffer, starting on a page boundary.
///
/// Hamlyn's areas are page-aligned mappings, so the engine's copies start page-aligned
/// too. Heap buffers of a few dozen KiB would otherwise sit at whatever offsets the
/// allocator picks, and a source and destination a little less than a multiple of 4 KiB
/// apart make the CPU's string copy take a false dependency on every store (4K
/// aliasing): an order of magnitude slower, and not what the engine sees.
struct PageAligned {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl PageAligned {
    fn new(len: usize, fill: u8) -> PageAligned {
        const PAGE: usize = 4096;
        let buf = vec![fill; len + PAGE];
        // The address is only inspected, never turned back into a pointer.
        let misalign = buf.as_ptr() as usize % PAGE;
        let start = (PAGE - misalign) % PAGE;
        PageAligned { buf, start, len }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

/// Single-threaded memcpy bandwidth for `size`-byte copies in GB/s (10^9 bytes/s), page-
/// aligned source and destination: the median of `batches` batches of about
/// `batch_bytes` bytes each, after one untimed batch.
pub fn memcpy_gbps(size: usize, batch_bytes: u64, batches: usize) -> f64 {
    let src = PageAligned::new(size, 0x5A);
    let mut dst = PageAligned::new(size, 1);
    let copies = (batch_bytes / size.max(1) as u64).max(1);
    let mut batch = || {
        let t0 = Instant::now();
        for _ in 0..copies {
            dst.bytes_mut()
                .copy_from_slice(std::hint::black_box(src.bytes()));
            std::hint::black_box(dst.bytes_mut());
        }
        t0.elapsed().as_secs_f64()
    };
    batch();
    let rates: Vec<f64> = (0..batches)
        .map(|_| (copies * size as u64) as f64 / batch().max(1e-9) / 1e9)
        .collect();
    median(&rates).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_pong_between_two_mappings() {
        let driver = FloorShm::create().unwrap();
        let peer = FloorShm::open(&driver.proc_path()).unwrap();
        let t = std::thread::spawn(move || peer.pong().unwrap());
        let us = driver.ping(10, 3, 100).unwrap();
        assert_eq!(t.join().unwrap(), 310);
        assert!(us > 0.0);
        // The relayed variant, the relay sleeping at once or never.
        for relay_spin in [0, u32::MAX] {
            let driver = FloorShm::create().unwrap();
            let peer = FloorShm::open(&driver.proc_path()).unwrap();
            let t = std::thread::spawn(move || peer.pong_relayed(0).unwrap());
            let us = driver.ping_relayed(0, relay_spin, 10, 3, 20).unwrap();
            assert_eq!(t.join().unwrap(), 70);
            assert!(us > 0.0);
        }
    }

    #[test]
    fn memcpy_measures_something_on_page_aligned_buffers() {
        assert!(memcpy_gbps(4096, 1 << 20, 3) > 0.0);
        let b = PageAligned::new(100, 7);
        assert_eq!(b.bytes().as_ptr() as usize % 4096, 0);
        assert_eq!(b.bytes(), &[7u8; 100][..]);
    }
}
