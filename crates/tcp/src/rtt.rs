//! Round-trip time estimation and the retransmission timeout, as Linux computes them.
//!
//! RFC 6298 sets RTO = SRTT + 4·RTTVAR and only then raises it to the 200 ms floor. Linux
//! instead adds a variance term that is itself at least the floor, so its RTO is never below
//! SRTT + 200 ms, and that term falls only a quarter of the way per round trip. The difference
//! decides whether a relay connection whose queueing delay swings by a few tens of ms times
//! out spuriously (RFC: RTO only a few ms above SRTT once the variance settles) or not (Linux),
//! and each spurious timeout drops the window to one segment.

use onionlab_engine::time::{SimDuration, SimTime};

/// Sentinel for "no segment is being timed", kept in-band to keep the struct small.
const NOT_TIMING: u64 = u64::MAX;

#[derive(Clone, Debug)]
pub(crate) struct RttEstimator {
    pub srtt: SimDuration,
    /// Smoothed mean deviation of the samples (RFC 6298's RTTVAR; a quarter of Linux's `mdev`).
    pub rttvar: SimDuration,
    /// The term added to SRTT for the RTO (Linux's `rttvar`): the largest 4·RTTVAR of the last
    /// round trip but at least the RTO floor; rises at once and decays by a quarter per round.
    /// Before the first sample, the initial RTO (SRTT is zero until then).
    var_term: SimDuration,
    pub min_rtt: SimDuration,
    /// Sequence number whose acknowledgement completes the current measurement. Only one
    /// segment per window is timed, and timing is abandoned when anything at or below it is
    /// retransmitted, which is how Karn's rule is enforced without per-segment send times.
    timed_ack: u64,
    timed_at: SimTime,
}

impl RttEstimator {
    pub(crate) fn new(rto_initial: SimDuration) -> Self {
        RttEstimator {
            srtt: 0,
            rttvar: 0,
            var_term: rto_initial,
            min_rtt: 0,
            timed_ack: NOT_TIMING,
            timed_at: 0,
        }
    }

    /// Starts timing a segment sent now, unless one is already being timed.
    pub(crate) fn start_timing(&mut self, now: SimTime, ack_needed: u64) {
        if self.timed_ack == NOT_TIMING {
            self.timed_ack = ack_needed;
            self.timed_at = now;
        }
    }

    /// Karn's rule: a retransmission of anything the timed segment depends on makes the sample
    /// ambiguous.
    pub(crate) fn on_retransmit(&mut self, seq: u64) {
        if self.timed_ack != NOT_TIMING && seq < self.timed_ack {
            self.timed_ack = NOT_TIMING;
        }
    }

    pub(crate) fn cancel(&mut self) {
        self.timed_ack = NOT_TIMING;
    }

    /// Feeds a cumulative acknowledgement; takes a sample if it covers the timed segment.
    pub(crate) fn on_ack(&mut self, now: SimTime, ack: u64, rto_min: SimDuration) {
        if self.timed_ack != NOT_TIMING && ack >= self.timed_ack {
            self.timed_ack = NOT_TIMING;
            self.sample(now.saturating_sub(self.timed_at), rto_min);
        }
    }

    /// Takes one sample. Only one segment per window is timed, so each sample closes a round
    /// trip of Linux's estimator, which keeps the window's largest deviation.
    pub(crate) fn sample(&mut self, r: SimDuration, rto_min: SimDuration) {
        let r = r.max(1);
        if self.has_sample() {
            let err = self.srtt.abs_diff(r);
            if r < self.srtt && err > self.rttvar {
                // Linux's variant of Eifel: a sample far below SRTT moves the deviation with an
                // eighth of the usual gain, so a sudden drop in delay does not inflate the RTO.
                self.rttvar += (err - self.rttvar) / 32;
            } else {
                self.rttvar = (3 * self.rttvar + err) / 4;
            }
            self.srtt = (7 * self.srtt + r) / 8;
            self.min_rtt = self.min_rtt.min(r);
            let round_max = (4 * self.rttvar).max(rto_min);
            if round_max >= self.var_term {
                self.var_term = round_max;
            } else {
                self.var_term -= (self.var_term - round_max) / 4;
            }
        } else {
            self.srtt = r;
            self.rttvar = r / 2;
            self.min_rtt = r;
            self.var_term = (4 * self.rttvar).max(rto_min);
        }
    }

    /// RTO before backoff.
    pub(crate) fn rto(&self, rto_max: SimDuration) -> SimDuration {
        (self.srtt + self.var_term).min(rto_max)
    }

    /// Samples are at least 1 ns, so a zero SRTT means none was taken yet.
    pub(crate) fn has_sample(&self) -> bool {
        self.srtt > 0
    }

    /// The timeout to arm after `backoff` consecutive expiries (the RTO doubles with each).
    pub(crate) fn current_rto(&self, backoff: u8, rto_max: SimDuration) -> SimDuration {
        let shift = u32::from(backoff.min(32));
        self.rto(rto_max).saturating_mul(1u64 << shift).min(rto_max)
    }

    /// Best RTT guess for consumers that need one before any sample exists.
    pub(crate) fn srtt_or(&self, fallback: SimDuration) -> SimDuration {
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
    use onionlab_engine::time::NANOS_PER_MILLI;
    const MS: u64 = NANOS_PER_MILLI;
    const MAX: u64 = 120_000 * MS;

    #[test]
    fn first_sample_and_smoothing() {
        let mut r = RttEstimator::new(1000 * MS);
        r.sample(100 * MS, 200 * MS);
        assert_eq!(r.srtt, 100 * MS);
        assert_eq!(r.rttvar, 50 * MS);
        assert_eq!(r.rto(MAX), 300 * MS);
        r.sample(100 * MS, 200 * MS);
        assert_eq!(r.srtt, 100 * MS);
        assert_eq!(r.rttvar, 37_500_000);
        // The variance term decays by a quarter per round, not at once.
        assert_eq!(r.rto(MAX), 100 * MS + 200 * MS);
        // Settles at SRTT plus the floor, never at the floor alone as RFC 6298 would.
        for _ in 0..80 {
            r.sample(10 * MS, 200 * MS);
        }
        assert!(r.srtt.abs_diff(10 * MS) < MS / 100, "srtt {}", r.srtt);
        assert!(
            r.rto(MAX).abs_diff(210 * MS) < MS / 100,
            "rto {}",
            r.rto(MAX)
        );
        assert_eq!(r.min_rtt, 10 * MS);
    }

    /// A relay connection's queueing delay swings by tens of ms; once the samples have been
    /// steady, RFC 6298 would leave the RTO a few ms above SRTT and time out on the next swing.
    #[test]
    fn a_delay_swing_does_not_reach_the_rto() {
        let mut r = RttEstimator::new(1000 * MS);
        for _ in 0..100 {
            r.sample(300 * MS, 200 * MS);
        }
        // RFC 6298 would have settled at 301 ms and timed out a segment delayed to 450 ms.
        assert!(
            r.rto(MAX).abs_diff(500 * MS) < MS / 100,
            "rto {}",
            r.rto(MAX)
        );
        // A swing raises the variance term at once and it decays over rounds, not at once.
        r.sample(700 * MS, 200 * MS);
        let after_swing = r.rto(MAX);
        assert_eq!(after_swing, 350 * MS + 4 * 100 * MS);
        r.sample(350 * MS, 200 * MS);
        assert!(r.rto(MAX) > 350 * MS + 300 * MS, "rto {}", r.rto(MAX));
    }

    #[test]
    fn karn_and_backoff() {
        let mut r = RttEstimator::new(1000 * MS);
        r.start_timing(0, 100);
        r.on_retransmit(50);
        r.on_ack(5000 * MS, 100, 200 * MS);
        assert!(!r.has_sample());
        assert_eq!(r.current_rto(3, 120_000 * MS), 8000 * MS);
        assert_eq!(r.current_rto(20, 120_000 * MS), 120_000 * MS);
    }
}
