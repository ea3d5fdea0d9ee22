//! The pieces of the test networks that every transport's harness shares: a seeded
//! SplitMix64 and a FIFO bottleneck link with drop-tail queue, random loss and reordering.
//! `crates/quic/tests/harness` includes this file too, so both models are tested over the
//! same links.

use onionlab_engine::time::{SimDuration, SimTime, NANOS_PER_SEC};

const SEC: u64 = NANOS_PER_SEC;

/// SplitMix64: tiny, fast and good enough to decide losses reproducibly.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone, Debug)]
pub(crate) struct LinkConfig {
    pub rate_bps: u64,
    pub delay: SimDuration,
    pub queue_bytes: u64,
    /// Probability that a packet is dropped at random.
    pub loss: f64,
    /// Probability that a packet gets up to `reorder_delay` extra delay.
    pub reorder: f64,
    pub reorder_delay: SimDuration,
}

impl LinkConfig {
    pub(crate) fn new(rate_bps: u64, delay: SimDuration, queue_bytes: u64) -> Self {
        LinkConfig {
            rate_bps,
            delay,
            queue_bytes,
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: 0,
        }
    }
}

/// A FIFO bottleneck. Backlog is derived from when the transmitter becomes idle, which is
/// exact for a FIFO and needs no per-packet storage.
#[derive(Debug)]
pub(crate) struct Link {
    pub cfg: LinkConfig,
    busy_until: SimTime,
    pub queue_drops: u64,
    pub random_drops: u64,
    pub packets: u64,
    pub bytes: u64,
}

impl Link {
    pub(crate) fn new(cfg: LinkConfig) -> Self {
        Link {
            cfg,
            busy_until: 0,
            queue_drops: 0,
            random_drops: 0,
            packets: 0,
            bytes: 0,
        }
    }

    pub(crate) fn tx_time(&self, bytes: u64) -> SimDuration {
        (bytes * 8 * SEC).div_ceil(self.cfg.rate_bps)
    }

    /// Arrival time at the far end, or None when dropped.
    pub(crate) fn enqueue(&mut self, now: SimTime, bytes: u64, rng: &mut Rng) -> Option<SimTime> {
        let backlog_time = self.busy_until.saturating_sub(now);
        let backlog = (backlog_time as u128 * self.cfg.rate_bps as u128 / (8 * SEC) as u128) as u64;
        if backlog + bytes > self.cfg.queue_bytes + 1500 {
            self.queue_drops += 1;
            return None;
        }
        if self.cfg.loss > 0.0 && rng.next_f64() < self.cfg.loss {
            self.random_drops += 1;
            return None;
        }
        let start = now.max(self.busy_until);
        self.busy_until = start + self.tx_time(bytes);
        self.packets += 1;
        self.bytes += bytes;
        let mut at = self.busy_until + self.cfg.delay;
        if self.cfg.reorder > 0.0 && rng.next_f64() < self.cfg.reorder {
            at += (rng.next_f64() * self.cfg.reorder_delay as f64) as u64;
        }
        Some(at)
    }
}
