//! Round-trip time estimation (RFC 9002 5).
//!
//! Unlike TCP, every acknowledged packet number is unambiguous (packet numbers are never
//! reused), so each ACK that newly acknowledges its largest packet gives a sample and no Karn's
//! rule is needed.

use onionlab_engine::time::{SimDuration, NANOS_PER_MILLI};

/// Timer granularity kGranularity of RFC 9002.
pub(crate) const GRANULARITY: SimDuration = NANOS_PER_MILLI;

#[derive(Clone, Debug)]
pub(crate) struct RttEstimator {
    pub latest: SimDuration,
    pub smoothed: SimDuration,
    pub var: SimDuration,
    /// Zero until the first sample.
    pub min: SimDuration,
}

impl RttEstimator {
    pub(crate) fn new(initial_rtt: SimDuration) -> Self {
        RttEstimator {
            latest: 0,
            smoothed: initial_rtt,
            var: initial_rtt / 2,
            min: 0,
        }
    }

    pub(crate) fn has_sample(&self) -> bool {
        self.min > 0
    }

    /// RFC 9002 5.3. `ack_delay` is the peer's reported delay, already limited to its
    /// `max_ack_delay` once the handshake is confirmed (and zero in the handshake spaces).
    pub(crate) fn sample(&mut self, latest: SimDuration, ack_delay: SimDuration) {
        let latest = latest.max(1);
        self.latest = latest;
        if !self.has_sample() {
            self.min = latest;
            self.smoothed = latest;
            self.var = latest / 2;
            return;
        }
        self.min = self.min.min(latest);
        // The ack delay is subtracted only where that keeps the sample at or above min_rtt.
        let adjusted = if latest >= self.min + ack_delay {
            latest - ack_delay
        } else {
            latest
        };
        self.var = (3 * self.var + self.smoothed.abs_diff(adjusted)) / 4;
        self.smoothed = (7 * self.smoothed + adjusted) / 8;
    }

    /// RFC 9002 6.2.1 without the max_ack_delay term and without backoff.
    pub(crate) fn pto_base(&self) -> SimDuration {
        self.smoothed + (4 * self.var).max(GRANULARITY)
    }

    /// RFC 9002 6.1.2: 9/8 of the larger of smoothed and latest RTT, at least kGranularity.
    pub(crate) fn loss_delay(&self) -> SimDuration {
        let rtt = self.smoothed.max(self.latest);
        (rtt + rtt / 8).max(GRANULARITY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const MS: u64 = NANOS_PER_MILLI;

    #[test]
    fn samples_follow_rfc_9002() {
        let mut r = RttEstimator::new(333 * MS);
        assert_eq!(r.pto_base(), 333 * MS + 4 * 166_500_000);
        r.sample(100 * MS, 20 * MS);
        // The first sample is taken as is.
        assert_eq!((r.smoothed, r.var, r.min), (100 * MS, 50 * MS, 100 * MS));
        // 130 - 20 = 110 >= min: the delay is subtracted.
        r.sample(130 * MS, 20 * MS);
        assert_eq!(r.smoothed, (700 + 110) * MS / 8);
        // 105 - 20 < min: it is not.
        let s = r.smoothed;
        r.sample(105 * MS, 20 * MS);
        assert_eq!(r.smoothed, (7 * s + 105 * MS) / 8);
        assert_eq!(r.min, 100 * MS);
        let m = r.smoothed.max(105 * MS);
        assert_eq!(r.loss_delay(), m + m / 8);
    }
}
