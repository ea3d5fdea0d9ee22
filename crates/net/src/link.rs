//! A host's access link in one direction: a FIFO serialising packets at a fixed rate.
//!
//! The queue is kept in virtual time (when the link will next be idle) rather than as a list of
//! packets, so a packet costs one subtraction and one division here and no event of its own.

use onionlab_engine::time::{SimDuration, SimTime, NANOS_PER_SEC};

#[derive(Clone, Debug)]
pub struct Link {
    bits_per_sec: u64,
    /// Queue bound: a packet that would wait behind more than this many bytes is dropped.
    queue_bytes: u64,
    busy_until: SimTime,
    pub drops: u64,
    pub packets: u64,
    pub bytes: u64,
}

impl Link {
    pub fn new(bits_per_sec: u64, queue_bytes: u64) -> Self {
        assert!(bits_per_sec > 0, "link rate must be positive");
        Self {
            bits_per_sec,
            queue_bytes,
            busy_until: 0,
            drops: 0,
            packets: 0,
            bytes: 0,
        }
    }

    pub fn rate(&self) -> u64 {
        self.bits_per_sec
    }

    /// Time to put `bytes` on the wire.
    #[inline]
    pub fn serialisation(&self, bytes: u32) -> SimDuration {
        (bytes as u64 * 8 * NANOS_PER_SEC).div_ceil(self.bits_per_sec)
    }

    /// Bytes waiting (or being sent) at `now`.
    #[inline]
    pub fn backlog_bytes(&self, now: SimTime) -> u64 {
        let wait = self.busy_until.saturating_sub(now);
        (wait as u128 * self.bits_per_sec as u128 / (8 * NANOS_PER_SEC as u128)) as u64
    }

    /// When the backlog will have drained to `bytes`.
    pub fn time_backlog_falls_to(&self, bytes: u64) -> SimTime {
        let d = (bytes as u128 * 8 * NANOS_PER_SEC as u128 / self.bits_per_sec as u128) as u64;
        self.busy_until.saturating_sub(d)
    }

    /// Queues a packet at `now`; returns when its last bit leaves, or `None` if the queue was
    /// full and the packet was dropped.
    #[inline]
    pub fn enqueue(&mut self, now: SimTime, bytes: u32) -> Option<SimTime> {
        if self.backlog_bytes(now) > self.queue_bytes {
            self.drops += 1;
            return None;
        }
        let start = self.busy_until.max(now);
        self.busy_until = start + self.serialisation(bytes);
        self.packets += 1;
        self.bytes += bytes as u64;
        Some(self.busy_until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionlab_engine::time::millis;

    #[test]
    fn serialises_back_to_back_and_drops_past_the_bound() {
        // 8 Mbit/s: one byte per microsecond.
        let mut link = Link::new(8_000_000, 3000);
        assert_eq!(link.enqueue(0, 1000), Some(1_000_000));
        assert_eq!(link.enqueue(0, 1000), Some(2_000_000));
        assert_eq!(link.backlog_bytes(0), 2000);
        assert_eq!(link.enqueue(0, 1000), Some(3_000_000));
        assert_eq!(link.enqueue(0, 1000), Some(4_000_000));
        // 4000 bytes queued > 3000: the next is dropped and counted.
        assert_eq!(link.enqueue(0, 1000), None);
        assert_eq!(link.drops, 1);
        assert_eq!(link.time_backlog_falls_to(1000), 3_000_000);
        // An idle link starts sending at once.
        assert_eq!(link.enqueue(millis(10), 500), Some(millis(10) + 500_000));
    }
}
