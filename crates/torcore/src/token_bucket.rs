//! Relay bandwidth limiting with Tor's token buckets.
//!
//! Tor does not refill its buckets continuously: a periodic event adds `rate x interval` bytes
//! every `TokenBucketRefillInterval` (100 ms), capped at the burst. That granularity matters for
//! a packet-level model, because a relay that drains its bucket stalls until the next tick and
//! then sends a burst, which shapes queueing downstream. The buckets here therefore only change
//! at tick boundaries, aligned to the time the bucket was created.

use onionlab_engine::time::{SimDuration, SimTime, NANOS_PER_SEC};

/// One bucket of byte tokens.
///
/// Like Tor's, the level may go negative: a reader that was allowed `n` bytes may end up
/// spending a little more (TLS framing, a partial cell), and the debt is paid by later refills
/// instead of being forgiven.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    rate_bytes_per_s: u64,
    burst_bytes: u64,
    refill_interval: SimDuration,
    /// Tick 0; ticks fall at `origin + k * refill_interval`.
    origin: SimTime,
    /// Ticks already credited.
    ticks_applied: u64,
    tokens: i64,
}

impl TokenBucket {
    /// A full bucket whose refill ticks fall every `refill_interval` after `now`.
    pub fn new(
        rate_bytes_per_s: u64,
        burst_bytes: u64,
        refill_interval: SimDuration,
        now: SimTime,
    ) -> Self {
        assert!(
            refill_interval > 0,
            "token bucket refill interval must be positive"
        );
        Self {
            rate_bytes_per_s,
            burst_bytes,
            refill_interval,
            origin: now,
            ticks_applied: 0,
            tokens: clamp_i64(burst_bytes),
        }
    }

    /// Bytes credited by the first `ticks` ticks. Computing the cumulative credit (rather than a
    /// rounded per-tick amount) keeps the long-run rate exact when `rate x interval` is not a
    /// whole number of bytes.
    fn credit(&self, ticks: u64) -> u128 {
        (self.rate_bytes_per_s as u128) * (ticks as u128) * (self.refill_interval as u128)
            / (NANOS_PER_SEC as u128)
    }

    /// Applies every refill tick due at or before `now`.
    pub fn refill(&mut self, now: SimTime) {
        // Most calls fall within the tick already credited (a relay asks its four buckets at
        // every read and scheduler run); a product settles those without the division below.
        // Where it saturates, the division would find no tick due either.
        if now < self.next_refill() {
            return;
        }
        let due = now.saturating_sub(self.origin) / self.refill_interval;
        if due <= self.ticks_applied {
            return;
        }
        let added = self.credit(due) - self.credit(self.ticks_applied);
        self.ticks_applied = due;
        // Capping once is the same as capping at every tick because refills only add.
        let level = (self.tokens as i128 + added as i128).min(self.burst_bytes as i128);
        self.tokens = level as i64;
    }

    /// Bytes that may be spent now (0 while in debt).
    pub fn available(&self) -> u64 {
        self.tokens.max(0) as u64
    }

    /// The signed level, negative while in debt.
    pub fn level(&self) -> i64 {
        self.tokens
    }

    /// Spends `n` bytes; the level may go below zero (see the type's documentation).
    pub fn consume(&mut self, n: u64) {
        self.tokens = self.tokens.saturating_sub(clamp_i64(n));
    }

    /// When the next refill tick falls (`SimTime::MAX` if beyond the end of time).
    pub fn next_refill(&self) -> SimTime {
        self.origin.saturating_add(
            self.ticks_applied
                .saturating_add(1)
                .saturating_mul(self.refill_interval),
        )
    }

    /// Refill rate, in bytes per second of simulated time.
    pub fn rate_bytes_per_s(&self) -> u64 {
        self.rate_bytes_per_s
    }

    /// Capacity in bytes: refills never raise the level above it.
    pub fn burst_bytes(&self) -> u64 {
        self.burst_bytes
    }
}

fn clamp_i64(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

/// The four buckets of a relay: all traffic (BandwidthRate/Burst) and relayed traffic
/// (RelayBandwidthRate/Burst), each with a read and a write side.
///
/// Tor keeps the relayed buckets even when RelayBandwidth* is unset, configured like the global
/// ones; relayed traffic is a subset of all traffic, so they then never bind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayBuckets {
    /// Bytes read of all traffic (BandwidthRate/Burst).
    pub read: TokenBucket,
    /// Bytes written of all traffic (BandwidthRate/Burst).
    pub write: TokenBucket,
    /// Bytes read of relayed traffic (RelayBandwidthRate/Burst).
    pub relayed_read: TokenBucket,
    /// Bytes written of relayed traffic (RelayBandwidthRate/Burst).
    pub relayed_write: TokenBucket,
}

impl RelayBuckets {
    /// `relayed` is `(RelayBandwidthRate, RelayBandwidthBurst)`; `None` uses the global pair.
    pub fn new(
        rate_bytes_per_s: u64,
        burst_bytes: u64,
        relayed: Option<(u64, u64)>,
        refill_interval: SimDuration,
        now: SimTime,
    ) -> Self {
        let (rrate, rburst) = relayed.unwrap_or((rate_bytes_per_s, burst_bytes));
        Self {
            read: TokenBucket::new(rate_bytes_per_s, burst_bytes, refill_interval, now),
            write: TokenBucket::new(rate_bytes_per_s, burst_bytes, refill_interval, now),
            relayed_read: TokenBucket::new(rrate, rburst, refill_interval, now),
            relayed_write: TokenBucket::new(rrate, rburst, refill_interval, now),
        }
    }

    /// Applies every refill tick due at or before `now` to all four buckets.
    pub fn refill(&mut self, now: SimTime) {
        self.read.refill(now);
        self.write.refill(now);
        self.relayed_read.refill(now);
        self.relayed_write.refill(now);
    }

    /// Bytes that may be read now: the smallest of the buckets that apply.
    pub fn read_allowance(&mut self, now: SimTime, is_relayed: bool) -> u64 {
        self.refill(now);
        let mut a = self.read.available();
        if is_relayed {
            a = a.min(self.relayed_read.available());
        }
        a
    }

    /// Bytes that may be written now: the smallest of the buckets that apply.
    pub fn write_allowance(&mut self, now: SimTime, is_relayed: bool) -> u64 {
        self.refill(now);
        let mut a = self.write.available();
        if is_relayed {
            a = a.min(self.relayed_write.available());
        }
        a
    }

    /// Spends `n` bytes read from the read bucket, and from the relayed one if `relayed`.
    pub fn note_read(&mut self, n: u64, relayed: bool) {
        self.read.consume(n);
        if relayed {
            self.relayed_read.consume(n);
        }
    }

    /// Spends `n` bytes written from the write bucket, and from the relayed one if `relayed`.
    pub fn note_written(&mut self, n: u64, relayed: bool) {
        self.write.consume(n);
        if relayed {
            self.relayed_write.consume(n);
        }
    }

    /// All four buckets tick together, so this is when any allowance can next grow.
    pub fn next_refill(&self) -> SimTime {
        self.read.next_refill()
    }
}

/// How much one connection may read or write in one go out of `global_available` bytes
/// (Tor's `connection_bucket_get_share`): an eighth of the bucket rounded down to whole cells,
/// clamped to 4..32 cells (`high_priority`, i.e. OR and exit traffic) or 2..16 cells
/// (directory traffic), never more than the global bucket or the connection's own bucket.
/// It stops one busy connection from taking the whole refill.
pub fn bucket_share(
    cell_bytes: u64,
    high_priority: bool,
    global_available: i64,
    conn_bucket: Option<i64>,
) -> u64 {
    let base = cell_bytes as i64;
    let (lo, hi) = if high_priority { (4, 32) } else { (2, 16) };
    let mut at_most = global_available / 8;
    at_most -= at_most % base;
    if at_most > hi * base {
        at_most = hi * base;
    } else if at_most < lo * base {
        at_most = lo * base;
    }
    at_most = at_most.min(global_available);
    if let Some(c) = conn_bucket {
        if c >= 0 {
            at_most = at_most.min(c);
        }
    }
    at_most.max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionlab_engine::time::{millis, secs};

    use crate::test_rng::Rng;

    #[test]
    fn starts_full_and_refills_only_at_ticks() {
        let mut b = TokenBucket::new(1_000_000, 500_000, millis(100), 0);
        assert_eq!(b.available(), 500_000);
        b.consume(500_000);
        assert_eq!(b.available(), 0);
        b.refill(millis(99));
        assert_eq!(b.available(), 0, "no refill before the first tick");
        assert_eq!(b.next_refill(), millis(100));
        b.refill(millis(100));
        assert_eq!(b.available(), 100_000, "one tick adds rate x 100 ms");
        b.refill(millis(350));
        assert_eq!(b.available(), 300_000);
        assert_eq!(b.next_refill(), millis(400));
        b.refill(secs(10));
        assert_eq!(b.available(), 500_000, "capped at burst");
    }

    #[test]
    fn a_refill_credits_the_ticks_the_division_finds_due_also_at_the_ends_of_time() {
        for interval in [1, 7, millis(100), u64::MAX / 3, u64::MAX - 1, u64::MAX] {
            for origin in [0, 5, u64::MAX - 10] {
                let mut b = TokenBucket::new(1_000, 1_000_000, interval, origin);
                let mut expected = 0;
                let steps = [0, 1, 4, 6, 99, millis(100), millis(250), secs(7)];
                let times = steps.iter().map(|&t| origin.saturating_add(t)).chain([
                    u64::MAX / 2,
                    u64::MAX - 11,
                    u64::MAX - 1,
                    u64::MAX,
                ]);
                for now in times {
                    expected = expected.max(now.saturating_sub(origin) / interval);
                    b.refill(now);
                    assert_eq!(
                        b.ticks_applied, expected,
                        "interval {interval}, origin {origin}, now {now}"
                    );
                }
            }
        }
    }

    #[test]
    fn debt_is_repaid_by_refills() {
        let mut b = TokenBucket::new(10_000, 10_000, millis(100), 0);
        b.consume(12_000);
        assert_eq!(b.level(), -2_000);
        assert_eq!(b.available(), 0);
        b.refill(millis(300));
        assert_eq!(b.available(), 1_000);
    }

    #[test]
    fn consumption_in_any_window_is_bounded_by_rate_times_length_plus_burst() {
        for seed in 1..=40u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let rate = 200_000 + rng.below(5_000_000);
            let burst = rate / 4 + rng.below(2 * rate);
            let interval = millis(100);
            let mut b = TokenBucket::new(rate, burst, interval, 0);
            // (time, bytes) of every consumption.
            let mut log: Vec<(SimTime, u64)> = Vec::new();
            let mut now = 0;
            let end = secs(20);
            while now < end {
                b.refill(now);
                let avail = b.available();
                if avail > 0 && rng.below(3) > 0 {
                    let n = match rng.below(4) {
                        0 => avail,
                        _ => rng.below(avail + 1),
                    };
                    b.consume(n);
                    log.push((now, n));
                }
                // Irregular gaps, sometimes landing exactly on a tick.
                now += match rng.below(5) {
                    0 => interval - now % interval,
                    _ => 1 + rng.below(millis(150)),
                };
            }
            let total: u64 = log.iter().map(|e| e.1).sum();
            for start_tick in 0..(end / interval) {
                let start = start_tick * interval;
                for _ in 0..8 {
                    let len = rng.below(end - start + 1);
                    let used: u64 = log
                        .iter()
                        .filter(|(t, _)| *t >= start && *t <= start + len)
                        .map(|e| e.1)
                        .sum();
                    let bound =
                        (rate as u128 * len as u128 / NANOS_PER_SEC as u128) as u64 + burst + 1;
                    assert!(
                        used <= bound,
                        "seed {seed}: {used} bytes in [{start}, +{len}] > bound {bound}"
                    );
                }
            }
            assert!(total > 0);
        }
    }

    #[test]
    fn greedy_long_run_throughput_equals_rate() {
        // 333,333 B/s does not divide into 100 ms ticks; the cumulative credit keeps it exact.
        let rate = 333_333;
        let mut b = TokenBucket::new(rate, 50_000, millis(100), 0);
        let mut used = 0u64;
        let mut now = 0;
        while now <= secs(100) {
            b.refill(now);
            let a = b.available();
            b.consume(a);
            used += a;
            now += millis(7);
        }
        b.refill(secs(100));
        used += b.available();
        let expected = rate * 100 + 50_000;
        assert!(used.abs_diff(expected) <= 1, "{used} vs {expected}");
    }

    #[test]
    fn relay_buckets_take_the_tighter_limit() {
        let mut r = RelayBuckets::new(
            1_000_000,
            1_000_000,
            Some((100_000, 200_000)),
            millis(100),
            0,
        );
        assert_eq!(r.read_allowance(0, false), 1_000_000);
        assert_eq!(r.read_allowance(0, true), 200_000);
        r.note_read(150_000, true);
        assert_eq!(r.read_allowance(0, false), 850_000);
        assert_eq!(r.read_allowance(0, true), 50_000);
        r.note_written(900_000, false);
        assert_eq!(r.write_allowance(0, true), 100_000);
        assert_eq!(r.write_allowance(0, false), 100_000);
        assert_eq!(r.read_allowance(millis(100), true), 60_000);
        assert_eq!(r.next_refill(), millis(200));

        let mut same = RelayBuckets::new(500_000, 800_000, None, millis(100), 0);
        same.note_written(100_000, true);
        assert_eq!(same.write_allowance(0, true), 700_000);
    }

    #[test]
    fn share_is_an_eighth_in_whole_cells_clamped() {
        // 1/8 of 100,000 = 12,500 -> 24 cells of 514 = 12,336.
        assert_eq!(bucket_share(514, true, 100_000, None), 12_336);
        // Large buckets clamp to 32 cells, small ones rise to 4 cells (but not above the bucket).
        assert_eq!(bucket_share(514, true, 10_000_000, None), 32 * 514);
        assert_eq!(bucket_share(514, true, 5_000, None), 4 * 514);
        assert_eq!(bucket_share(514, true, 1_000, None), 1_000);
        assert_eq!(bucket_share(514, false, 10_000_000, None), 16 * 514);
        assert_eq!(bucket_share(514, true, 10_000_000, Some(3_000)), 3_000);
        assert_eq!(bucket_share(514, true, -50, None), 0);
    }
}
