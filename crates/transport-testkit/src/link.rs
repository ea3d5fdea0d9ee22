//! One direction of the path: a FIFO bottleneck with a drop-tail queue, propagation delay and
//! optional random loss and reordering.

use crate::rng::Rng;
use crate::SEC;
use onionlab_engine::time::{SimDuration, SimTime};

/// How a link behaves. Loss and reordering are off unless set.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    /// Transmission rate in bits per second.
    pub rate_bps: u64,
    /// Propagation delay after a packet has left the transmitter.
    pub delay: SimDuration,
    /// Bytes the queue holds behind the packet being sent (one more full-sized packet fits:
    /// the one on the wire).
    pub queue_bytes: u64,
    /// Probability that a packet is dropped at random.
    pub loss: f64,
    /// Probability that a packet gets up to `reorder_delay` extra delay.
    pub reorder: f64,
    /// The most extra delay a reordered packet gets (uniform below it).
    pub reorder_delay: SimDuration,
}

impl LinkConfig {
    /// A lossless, in-order link.
    pub fn new(rate_bps: u64, delay: SimDuration, queue_bytes: u64) -> Self {
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

/// A FIFO bottleneck and what went through it. The backlog is derived from when the
/// transmitter becomes idle, which is exact for a FIFO and needs no per-packet storage.
#[derive(Debug)]
pub struct Link {
    /// The link's behaviour; a test may change it between runs (to end a loss phase, say).
    pub cfg: LinkConfig,
    /// When the transmitter finishes the last packet accepted.
    busy_until: SimTime,
    /// Packets dropped because the queue was full.
    pub queue_drops: u64,
    /// Packets dropped at random (`cfg.loss`).
    pub random_drops: u64,
    /// Packets accepted for transmission.
    pub packets: u64,
    /// Bytes accepted for transmission.
    pub bytes: u64,
}

impl Link {
    /// An idle link.
    pub fn new(cfg: LinkConfig) -> Self {
        Link {
            cfg,
            busy_until: 0,
            queue_drops: 0,
            random_drops: 0,
            packets: 0,
            bytes: 0,
        }
    }

    /// Time to serialise `bytes` at the link's rate, rounded up.
    pub fn tx_time(&self, bytes: u64) -> SimDuration {
        (bytes * 8 * SEC).div_ceil(self.cfg.rate_bps)
    }

    /// Offers a packet of `bytes` at `now`: its arrival time at the far end, or None when the
    /// queue is full or the packet is lost. The queue check comes first, so a random loss
    /// draws from `rng` only for packets the queue would take.
    pub fn enqueue(&mut self, now: SimTime, bytes: u64, rng: &mut Rng) -> Option<SimTime> {
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
