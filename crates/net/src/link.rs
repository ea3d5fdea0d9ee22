//! A host's access link in one direction: a FIFO serialising packets at a fixed rate.
//!
//! The queue is kept in virtual time (when the link will next be idle) rather than as a list of
//! packets, so a packet costs one subtraction and one division here and no event of its own.

use onionlab_engine::time::{SimDuration, SimTime, NANOS_PER_SEC};

/// One direction of a host's access link: its rate, queue bound and counters.
#[derive(Clone, Debug)]
pub struct Link {
    bits_per_sec: u64,
    /// Queue bound: a packet that would wait behind more than this many bytes is dropped.
    queue_bytes: u64,
    busy_until: SimTime,
    /// Packets dropped because the queue was past its bound.
    pub drops: u64,
    /// Packets the link accepted; a batch ([`Link::enqueue_batch`]) counts each of its packets.
    pub packets: u64,
    /// Wire bytes of the packets accepted.
    pub bytes: u64,
}

impl Link {
    /// An idle link sending `bits_per_sec` (positive) that drops a packet arriving while more
    /// than `queue_bytes` bytes wait.
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

    /// The link's rate, in bit/s.
    pub fn rate(&self) -> u64 {
        self.bits_per_sec
    }

    /// Time to put `bytes` on the wire.
    #[inline]
    pub fn serialisation(&self, bytes: u32) -> SimDuration {
        // Bits × nanoseconds fit 64 bits for anything under about 2.3 GB, every real packet;
        // a larger count (a u32 allows 4 GiB) takes 128 bits rather than wrapping. A bound on
        // the byte count keeps the common case the one multiplication by a constant it was.
        const MOST_IN_64_BITS: u64 = u64::MAX / (8 * NANOS_PER_SEC);
        if u64::from(bytes) <= MOST_IN_64_BITS {
            (u64::from(bytes) * 8 * NANOS_PER_SEC).div_ceil(self.bits_per_sec)
        } else {
            self.serialisation_wide(bytes)
        }
    }

    /// `serialisation` in 128 bits, out of the per-packet path's way.
    #[cold]
    #[inline(never)]
    fn serialisation_wide(&self, bytes: u32) -> SimDuration {
        let bit_nanos = u128::from(bytes) * 8 * u128::from(NANOS_PER_SEC);
        let nanos = bit_nanos.div_ceil(u128::from(self.bits_per_sec));
        SimDuration::try_from(nanos).unwrap_or(SimDuration::MAX)
    }

    /// Bytes waiting (or being sent) at `now`.
    #[inline]
    pub fn backlog_bytes(&self, now: SimTime) -> u64 {
        let wait = self.busy_until.saturating_sub(now);
        // In 64 bits whenever the product fits (a backlog under about 2 s at 10 Gbit/s): a
        // division by a constant is then a multiplication, where 128 bits call the library.
        match wait.checked_mul(self.bits_per_sec) {
            Some(bits) => bits / (8 * NANOS_PER_SEC),
            None => (wait as u128 * self.bits_per_sec as u128 / (8 * NANOS_PER_SEC as u128)) as u64,
        }
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
        if self.full(now) {
            self.drops += 1;
            return None;
        }
        Some(self.send(now, bytes, self.serialisation(bytes)))
    }

    /// Whether a packet reaching the link at `now` finds the queue past its bound.
    #[inline]
    fn full(&self, now: SimTime) -> bool {
        self.backlog_bytes(now) > self.queue_bytes
    }

    /// Puts a packet of `bytes` that takes `duration` on the wire behind what is queued;
    /// returns when its last bit leaves.
    #[inline]
    fn send(&mut self, now: SimTime, bytes: u32, duration: SimDuration) -> SimTime {
        let start = self.busy_until.max(now);
        self.busy_until = start + duration;
        self.packets += 1;
        self.bytes += bytes as u64;
        self.busy_until
    }

    /// Queues `n` packets that reach the link at the same instant (an offloaded packet's
    /// segments), of `bytes` each but the last, of `last_bytes` (a UDP batch's last datagram
    /// may be shorter), first in, first out: those that find the queue full are dropped and
    /// counted, the tail of the batch, as each waits behind the ones before it. Returns how
    /// many were kept and when the last kept one leaves.
    pub fn enqueue_batch(
        &mut self,
        now: SimTime,
        bytes: u32,
        n: u16,
        last_bytes: u32,
    ) -> (u16, Option<SimTime>) {
        // Segments of one size take one time each, worked out once for the batch.
        let duration = self.serialisation(bytes);
        let mut last = None;
        let mut kept = 0;
        while kept < n && !self.full(now) {
            last = Some(if kept + 1 == n && last_bytes != bytes {
                self.send(now, last_bytes, self.serialisation(last_bytes))
            } else {
                self.send(now, bytes, duration)
            });
            kept += 1;
        }
        // Nothing drains at one instant: the rest of the batch finds the queue full too.
        self.drops += u64::from(n - kept);
        (kept, last)
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

    #[test]
    fn a_backlog_too_long_for_64_bits_is_still_exact() {
        // 100 Gbit/s with an hour queued: wait × rate overflows 64 bits.
        let mut link = Link::new(100_000_000_000, u64::MAX);
        let hour_of_bytes = 100_000_000_000 / 8 * 3600;
        // 4 GiB less a byte is 343,597,383.6 ns at 100 Gbit/s, rounded up; its bits ×
        // nanoseconds overflow 64 bits too.
        assert_eq!(link.enqueue(0, u32::MAX), Some(343_597_384));
        link.busy_until = 3600 * NANOS_PER_SEC;
        assert_eq!(link.backlog_bytes(0), hour_of_bytes);
        // A nanosecond less is 12.5 bytes less, rounded down.
        assert_eq!(link.backlog_bytes(1), hour_of_bytes - 13);
    }

    #[test]
    fn a_batch_keeps_what_fits_and_drops_its_tail() {
        let mut link = Link::new(8_000_000, 3000);
        // Four of 1000 bytes fit (the fourth finds 3000 waiting, not more); the other two
        // find the queue full.
        assert_eq!(link.enqueue_batch(0, 1000, 6, 1000), (4, Some(4_000_000)));
        assert_eq!((link.drops, link.packets, link.bytes), (2, 4, 4000));
        // Nothing fits now.
        assert_eq!(link.enqueue_batch(0, 1000, 3, 1000), (0, None));
        assert_eq!(link.drops, 5);
        // As many packets one by one: the same times and counts.
        let mut one = Link::new(8_000_000, 3000);
        let singles: Vec<_> = (0..6).map(|_| one.enqueue(0, 1000)).collect();
        assert_eq!(singles[3], Some(4_000_000));
        assert_eq!(singles[4], None);
        assert_eq!((one.drops, one.packets), (2, 4));
    }

    #[test]
    fn a_batchs_shorter_last_packet_takes_its_own_time() {
        // 8 Mbit/s: one byte per microsecond.
        let mut link = Link::new(8_000_000, 100_000);
        assert_eq!(link.enqueue_batch(0, 1000, 3, 400), (3, Some(2_400_000)));
        assert_eq!((link.packets, link.bytes), (3, 2400));
        // A batch of one is its last packet.
        assert_eq!(link.enqueue_batch(0, 1000, 1, 400), (1, Some(2_800_000)));
    }
}
