//! Round-trip time estimation and the retransmission timeout (RFC 6298).

use onionlab_engine::time::{SimDuration, SimTime, NANOS_PER_MILLI};

/// Clock granularity G of RFC 6298; Linux ticks at 1 ms or finer.
const GRANULARITY: SimDuration = NANOS_PER_MILLI;
/// Sentinel for "no segment is being timed", kept in-band to keep the struct small.
const NOT_TIMING: u64 = u64::MAX;

#[derive(Clone, Debug)]
pub(crate) struct RttEstimator {
    pub srtt: SimDuration,
    pub rttvar: SimDuration,
    /// RTO before backoff.
    pub rto: SimDuration,
    pub min_rtt: SimDuration,
    /// Sequence number whose acknowledgement completes the current measurement. Only one
    /// segment per window is timed, and timing is abandoned when anything at or below it is
    /// retransmitted, which is how Karn's rule is enforced without per-segment send times.
    timed_ack: u64,
    timed_at: SimTime,
}

impl RttEstimator {
    pub fn new(rto_initial: SimDuration) -> Self {
        RttEstimator {
            srtt: 0,
            rttvar: 0,
            rto: rto_initial,
            min_rtt: 0,
            timed_ack: NOT_TIMING,
            timed_at: 0,
        }
    }

    /// Starts timing a segment sent now, unless one is already being timed.
    pub fn start_timing(&mut self, now: SimTime, ack_needed: u64) {
        if self.timed_ack == NOT_TIMING {
            self.timed_ack = ack_needed;
            self.timed_at = now;
        }
    }

    /// Karn's rule: a retransmission of anything the timed segment depends on makes the sample
    /// ambiguous.
    pub fn on_retransmit(&mut self, seq: u64) {
        if self.timed_ack != NOT_TIMING && seq < self.timed_ack {
            self.timed_ack = NOT_TIMING;
        }
    }

    pub fn cancel(&mut self) {
        self.timed_ack = NOT_TIMING;
    }

    /// Feeds a cumulative acknowledgement; takes a sample if it covers the timed segment.
    pub fn on_ack(&mut self, now: SimTime, ack: u64, rto_min: SimDuration, rto_max: SimDuration) {
        if self.timed_ack != NOT_TIMING && ack >= self.timed_ack {
            self.timed_ack = NOT_TIMING;
            self.sample(now.saturating_sub(self.timed_at), rto_min, rto_max);
        }
    }

    pub fn sample(&mut self, r: SimDuration, rto_min: SimDuration, rto_max: SimDuration) {
        let r = r.max(1);
        if self.has_sample() {
            let delta = self.srtt.abs_diff(r);
            self.rttvar = (3 * self.rttvar + delta) / 4;
            self.srtt = (7 * self.srtt + r) / 8;
            self.min_rtt = self.min_rtt.min(r);
        } else {
            self.srtt = r;
            self.rttvar = r / 2;
            self.min_rtt = r;
        }
        self.rto = (self.srtt + GRANULARITY.max(4 * self.rttvar)).clamp(rto_min, rto_max);
    }

    /// Samples are at least 1 ns, so a zero SRTT means none was taken yet.
    pub fn has_sample(&self) -> bool {
        self.srtt > 0
    }

    /// The timeout to arm after `backoff` consecutive expiries (the RTO doubles with each).
    pub fn current_rto(&self, backoff: u8, rto_max: SimDuration) -> SimDuration {
        let shift = u32::from(backoff.min(32));
        self.rto.saturating_mul(1u64 << shift).min(rto_max)
    }

    /// Best RTT guess for consumers that need one before any sample exists.
    pub fn srtt_or(&self, fallback: SimDuration) -> SimDuration {
        if self.has_sample() {
            self.srtt
        } else {
            fallback
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const MS: u64 = NANOS_PER_MILLI;

    #[test]
    fn first_sample_and_smoothing() {
        let mut r = RttEstimator::new(1000 * MS);
        r.sample(100 * MS, 200 * MS, 120_000 * MS);
        assert_eq!(r.srtt, 100 * MS);
        assert_eq!(r.rttvar, 50 * MS);
        assert_eq!(r.rto, 300 * MS);
        r.sample(100 * MS, 200 * MS, 120_000 * MS);
        assert_eq!(r.srtt, 100 * MS);
        assert_eq!(r.rttvar, 37_500_000);
        // Converges to the floor.
        for _ in 0..50 {
            r.sample(10 * MS, 200 * MS, 120_000 * MS);
        }
        assert_eq!(r.rto, 200 * MS);
        assert_eq!(r.min_rtt, 10 * MS);
    }

    #[test]
    fn karn_and_backoff() {
        let mut r = RttEstimator::new(1000 * MS);
        r.start_timing(0, 100);
        r.on_retransmit(50);
        r.on_ack(5000 * MS, 100, 200 * MS, 120_000 * MS);
        assert!(!r.has_sample());
        assert_eq!(r.current_rto(3, 120_000 * MS), 8000 * MS);
        assert_eq!(r.current_rto(20, 120_000 * MS), 120_000 * MS);
    }
}
