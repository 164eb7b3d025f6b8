//! How much each figure is measured: iteration counts for `--quick`, the full run, and the
//! test suite's smoke run.

/// Message sizes of the latency ping-pongs and reads.
pub const LATENCY_SIZES: [usize; 7] = [8, 64, 512, 4096, 64 * 1024, 1 << 20, 4 << 20];
/// Message sizes of the loopback latency (a process sending to itself).
pub const LOOPBACK_SIZES: [usize; 1] = [8];
/// Message sizes of the bandwidth stream (and of the memcpy floor).
pub const BANDWIDTH_SIZES: [usize; 6] = [64, 512, 4096, 64 * 1024, 1 << 20, 4 << 20];
/// Message size of the message-rate stream.
pub const RATE_SIZE: usize = 8;

/// Iteration counts for one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Name shown in the report.
    pub name: &'static str,
    /// Round trips before latency samples are recorded.
    pub warmup: u64,
    /// Round trips recorded per latency size.
    pub latency_iters: u64,
    /// Bytes streamed per bandwidth repetition (clamped to [`Plan::bw_msgs`]'s bounds).
    pub bw_bytes: u64,
    /// Fewest and most messages per bandwidth repetition.
    pub bw_msgs: (u64, u64),
    /// Bytes streamed once, untimed, before a size's repetitions (faults pages in).
    pub bw_warm_bytes: u64,
    /// Repetitions of each bandwidth and message-rate measurement (the median is kept).
    pub reps: usize,
    /// Messages per message-rate repetition.
    pub rate_msgs: u64,
    /// Floor ping-pong: untimed round trips, then batches of timed ones.
    pub floor_warmup: u64,
    /// Floor ping-pong batches (the median batch is kept).
    pub floor_batches: usize,
    /// Round trips per floor batch.
    pub floor_rounds: u64,
    /// Round trips per batch of the relayed floor (each may cost microseconds, not tens of
    /// nanoseconds).
    pub sleep_floor_rounds: u64,
    /// Bytes copied per memcpy batch.
    pub memcpy_bytes: u64,
    /// memcpy batches per size (the median is kept).
    pub memcpy_batches: usize,
}

const MIB: u64 = 1 << 20;

impl Plan {
    /// The full run (what docs/PERFORMANCE.md reports).
    pub fn full() -> Plan {
        Plan {
            name: "full",
            warmup: 2_000,
            latency_iters: 20_000,
            bw_bytes: 1024 * MIB,
            bw_msgs: (64, 100_000),
            bw_warm_bytes: 64 * MIB,
            reps: 5,
            rate_msgs: 1_000_000,
            floor_warmup: 20_000,
            floor_batches: 41,
            floor_rounds: 10_000,
            sleep_floor_rounds: 1_000,
            memcpy_bytes: 1024 * MIB,
            memcpy_batches: 9,
        }
    }

    /// `--quick`: a few seconds, for a first look on a fresh machine.
    pub fn quick() -> Plan {
        Plan {
            name: "quick",
            warmup: 500,
            latency_iters: 2_000,
            bw_bytes: 128 * MIB,
            bw_msgs: (32, 20_000),
            bw_warm_bytes: 16 * MIB,
            reps: 3,
            rate_msgs: 200_000,
            floor_warmup: 5_000,
            floor_batches: 21,
            floor_rounds: 2_000,
            sleep_floor_rounds: 200,
            memcpy_bytes: 128 * MIB,
            memcpy_batches: 5,
        }
    }

    /// The test suite's run: every code path, tiny counts (numbers are rough).
    pub fn smoke() -> Plan {
        Plan {
            name: "smoke",
            warmup: 20,
            latency_iters: 200,
            bw_bytes: 8 * MIB,
            bw_msgs: (4, 2_000),
            bw_warm_bytes: 4 * MIB,
            reps: 1,
            rate_msgs: 5_000,
            floor_warmup: 500,
            floor_batches: 5,
            floor_rounds: 500,
            sleep_floor_rounds: 50,
            memcpy_bytes: 8 * MIB,
            memcpy_batches: 3,
        }
    }

    /// Untimed and timed rounds of a latency measurement of `size`-byte messages: the
    /// plan's counts up to 64 KiB, fewer above in proportion to the size (at least 20
    /// timed rounds), so that a 4 MiB ping-pong does not take minutes.
    pub fn latency_counts(&self, size: usize) -> (u64, u64) {
        let scale = (size as u64 / (64 * 1024)).max(1);
        let iters = (self.latency_iters / scale).max(self.latency_iters.min(20));
        let warmup = (self.warmup / scale).max(self.warmup.min(5));
        (warmup, iters)
    }

    /// Messages per bandwidth repetition for `size`-byte messages.
    pub fn bw_count(&self, size: usize) -> u64 {
        (self.bw_bytes / size as u64).clamp(self.bw_msgs.0, self.bw_msgs.1)
    }

    /// Untimed messages streamed before `size`'s repetitions.
    pub fn bw_warm_count(&self, size: usize) -> u64 {
        (self.bw_warm_bytes / size as u64).clamp(2, self.bw_msgs.1)
    }
}

/// The median of `v` (the mean of the middle two for an even count); `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        let q = Plan::quick();
        assert_eq!(q.bw_count(4096), 20_000, "clamped to the most");
        assert_eq!(q.bw_count(4 << 20), 32);
        assert_eq!(q.bw_count(1 << 20), 128);
        let f = Plan::full();
        assert_eq!(f.latency_counts(8), (2_000, 20_000));
        assert_eq!(f.latency_counts(64 * 1024), (2_000, 20_000));
        assert_eq!(f.latency_counts(4 << 20), (31, 312));
        let s = Plan::smoke();
        assert_eq!(
            s.latency_counts(4 << 20),
            (5, 20),
            "never fewer than 20 timed rounds"
        );
    }
}
