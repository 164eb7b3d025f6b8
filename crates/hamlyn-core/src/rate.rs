//! Rate control per terminus (FLIPC's "capacity/bandwidth control", its future work): a
//! token bucket in bytes per second and one in messages per second, sans-IO (`now` is
//! passed in).
//!
//! A message may start when both buckets hold at least zero tokens; starting it takes its
//! bytes and one message out, which may leave a bucket in debt (so a message larger than
//! the burst still goes, and the long-run rate is exact). Buckets fill at their rate up to
//! their burst. A rate of 0 is unlimited.

use crate::time::Instant;

const NANOS: u128 = 1_000_000_000;

/// A terminus's limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// Payload bytes per second (0: unlimited).
    pub bytes_per_sec: u64,
    /// Messages per second (0: unlimited).
    pub msgs_per_sec: u64,
}

impl RateLimit {
    /// No limit.
    pub fn is_unlimited(&self) -> bool {
        self.bytes_per_sec == 0 && self.msgs_per_sec == 0
    }
}

/// One bucket: tokens kept in units of 1e-9 (so `elapsed_ns × rate` adds exactly).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Bucket {
    rate: u64,
    /// Tokens × 1e9; negative is debt.
    tokens: i128,
    burst: i128,
}

impl Bucket {
    fn new(rate: u64) -> Bucket {
        // Burst: 10 ms of the rate, at least one unit; the bucket starts full.
        let burst = (u128::from(rate) * NANOS / 100).max(NANOS) as i128;
        Bucket {
            rate,
            tokens: burst,
            burst,
        }
    }

    fn refill(&mut self, elapsed_ns: u64) {
        if self.rate == 0 {
            return;
        }
        let add =
            i128::try_from(u128::from(elapsed_ns) * u128::from(self.rate)).unwrap_or(i128::MAX);
        self.tokens = self.tokens.saturating_add(add).min(self.burst);
    }

    fn ready(&self) -> bool {
        self.rate == 0 || self.tokens >= 0
    }

    fn take(&mut self, units: u64) {
        if self.rate != 0 {
            self.tokens = self
                .tokens
                .saturating_sub(i128::from(units) * NANOS as i128);
        }
    }

    /// Nanoseconds until the bucket is out of debt (0 if it is).
    fn wait_ns(&self) -> u64 {
        if self.ready() {
            return 0;
        }
        let debt = self.tokens.unsigned_abs();
        u64::try_from(debt.div_ceil(u128::from(self.rate))).unwrap_or(u64::MAX)
    }
}

/// Both buckets of one terminus, with what they let through and held back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    limit: RateLimit,
    bytes: Bucket,
    msgs: Bucket,
    last: Instant,
    /// Messages let through.
    pub passed: u64,
    /// Payload bytes let through.
    pub passed_bytes: u64,
    /// Times a message was held back (once per turn it waited).
    pub held: u64,
}

impl TokenBucket {
    /// Buckets for `limit`, full, as of `now`.
    pub fn new(limit: RateLimit, now: Instant) -> TokenBucket {
        TokenBucket {
            limit,
            bytes: Bucket::new(limit.bytes_per_sec),
            msgs: Bucket::new(limit.msgs_per_sec),
            last: now,
            passed: 0,
            passed_bytes: 0,
            held: 0,
        }
    }

    /// The limits.
    pub fn limit(&self) -> RateLimit {
        self.limit
    }

    /// New limits from `now` on (the buckets start full again; the counts stay).
    pub fn set_limit(&mut self, limit: RateLimit, now: Instant) {
        let (passed, passed_bytes, held) = (self.passed, self.passed_bytes, self.held);
        *self = TokenBucket::new(limit, now);
        self.passed = passed;
        self.passed_bytes = passed_bytes;
        self.held = held;
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.0.saturating_sub(self.last.0);
        self.last = Instant(self.last.0.max(now.0));
        self.bytes.refill(elapsed);
        self.msgs.refill(elapsed);
    }

    /// Whether a message may start at `now` (counts a hold when not).
    pub fn ready(&mut self, now: Instant) -> bool {
        self.refill(now);
        let ok = self.bytes.ready() && self.msgs.ready();
        if !ok {
            self.held += 1;
        }
        ok
    }

    /// A message of `bytes` started: its tokens are taken.
    pub fn take(&mut self, bytes: u64) {
        self.bytes.take(bytes);
        self.msgs.take(1);
        self.passed += 1;
        self.passed_bytes += bytes;
    }

    /// When the next message may start, if it may not at `now`.
    pub fn next_ready(&self, now: Instant) -> Option<Instant> {
        let mut b = *self;
        b.refill(now);
        let wait = b.bytes.wait_ns().max(b.msgs.wait_ns());
        (wait > 0).then(|| Instant(now.0.saturating_add(wait)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `size`-byte messages as fast as the bucket allows for `secs` simulated
    /// seconds, looking every `step` ns; the messages and bytes let through per 2 s window.
    fn run(limit: RateLimit, size: u64, secs: u64, step: u64) -> Vec<(u64, u64)> {
        let mut b = TokenBucket::new(limit, Instant(0));
        let mut windows = vec![(0, 0); (secs / 2) as usize];
        let mut now = 0;
        while now < secs * 1_000_000_000 {
            while b.ready(Instant(now)) {
                b.take(size);
                let w = (now / 2_000_000_000) as usize;
                windows[w].0 += 1;
                windows[w].1 += size;
            }
            now += step;
        }
        windows
    }

    fn within(got: u64, want: u64, pct: u64) -> bool {
        got * 100 >= want * (100 - pct) && got * 100 <= want * (100 + pct)
    }

    #[test]
    fn achieved_rates_stay_within_five_percent_of_the_set_rates_over_two_second_windows() {
        for (limit, size) in [
            (
                RateLimit {
                    bytes_per_sec: 1_000_000,
                    msgs_per_sec: 0,
                },
                512,
            ),
            (
                RateLimit {
                    bytes_per_sec: 0,
                    msgs_per_sec: 10_000,
                },
                64,
            ),
            (
                RateLimit {
                    bytes_per_sec: 64 * 5_000,
                    msgs_per_sec: 20_000,
                },
                64,
            ),
            (
                RateLimit {
                    bytes_per_sec: 100,
                    msgs_per_sec: 0,
                },
                1000,
            ),
        ] {
            // Ten million looks per limit at the finest step: seconds natively, hours
            // under miri, which checks the same code at the coarsest step only.
            let steps: &[u64] = if cfg!(miri) {
                &[1_000_000]
            } else {
                &[1_000, 97_000, 1_000_000]
            };
            for &step in steps {
                let w = run(limit, size, 10, step);
                for (i, &(msgs, bytes)) in w.iter().enumerate().skip(1) {
                    if limit.bytes_per_sec > 0 {
                        let want = limit.bytes_per_sec * 2;
                        // One message of slack at very low rates (a 1000-byte message
                        // is five 2 s windows' worth of 100 B/s).
                        assert!(
                            within(bytes, want, 5) || bytes.abs_diff(want) <= size,
                            "{limit:?} step {step} window {i}: {bytes} B of {want}"
                        );
                    }
                    if limit.msgs_per_sec > 0 && limit.bytes_per_sec == 0 {
                        let want = limit.msgs_per_sec * 2;
                        assert!(
                            within(msgs, want, 5),
                            "{limit:?} window {i}: {msgs} of {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn an_unlimited_bucket_never_holds_and_a_debt_says_when_it_clears() {
        let mut b = TokenBucket::new(RateLimit::default(), Instant(0));
        for _ in 0..1000 {
            assert!(b.ready(Instant(0)));
            b.take(1 << 20);
        }
        assert_eq!(b.next_ready(Instant(0)), None);
        let mut b = TokenBucket::new(
            RateLimit {
                bytes_per_sec: 1000,
                msgs_per_sec: 0,
            },
            Instant(0),
        );
        assert!(b.ready(Instant(0)));
        b.take(3000 + 10);
        assert!(!b.ready(Instant(0)));
        // 10 B of burst were there; 3000 B of debt clear in 3 s.
        assert_eq!(b.next_ready(Instant(0)), Some(Instant(3_000_000_000)));
        assert!(!b.ready(Instant(2_999_999_999)));
        assert!(b.ready(Instant(3_000_000_000)));
        assert_eq!((b.passed, b.passed_bytes, b.held), (1, 3010, 2));
        b.set_limit(RateLimit::default(), Instant(4));
        assert!(b.ready(Instant(4)));
        assert_eq!(b.passed, 1, "counts survive a new limit");
    }
}
