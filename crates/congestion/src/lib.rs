//! Congestion window management shared by all algorithms and by every transport model (one
//! module serves TCP and QUIC, so the two differ only where their protocols do).
//!
//! This crate is part of onionlab, a simulator of Tor networks.
//!
//! # Overview
//!
//! The window is kept in bytes so that connections sending sub-MSS segments (Tor cells with
//! `TCP_NODELAY`) are governed by the bytes they put in flight. Slow start and the reductions
//! mandated by a transport's loss-recovery machinery live here; the algorithms (Reno and CUBIC,
//! chosen by [`CongestionControl`]) only decide congestion-avoidance growth and the
//! multiplicative decrease. "Segment" below is the transport's unit of sending: a TCP MSS, or a
//! QUIC maximum datagram size.
//!
//! # Not in this crate
//!
//! Deciding that a loss happened (SACK scoreboards, duplicate ACKs, probe and retransmission
//! timeouts, RTT estimation) is the transport's: `onionlab-tcp` and `onionlab-quic` call into
//! [`Congestion`] when they detect an ACK, a loss, a timeout or an idle period. Tor's own
//! circuit-level congestion control (Vegas, proposal 324) is `onionlab-torcore`'s.
//!
//! # Tests
//!
//! Unit tests in `lib.rs` and `cubic` check the window arithmetic. The algorithms' behaviour on
//! real transfers (throughput, loss response, fairness) is tested through the transports:
//! `crates/tcp/tests/performance.rs` and `crates/quic/tests/performance.rs`.

mod cubic;
mod reno;

use cubic::Cubic;
use onionlab_engine::time::{SimDuration, SimTime};
use reno::Reno;

/// Which congestion-avoidance algorithm governs window growth and reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CongestionControl {
    /// RFC 9438 CUBIC, Linux's default since 2.6.19.
    #[default]
    Cubic,
    /// RFC 5681 Reno (NewReno recovery when SACK is off).
    Reno,
}

#[derive(Clone, Debug)]
enum Algorithm {
    Reno(Reno),
    Cubic(Cubic),
}

/// One connection's congestion state: the window in bytes that bounds what may be in flight,
/// the slow-start threshold, and the chosen algorithm's own state. A TCP or QUIC connection
/// owns one and calls its `on_*` methods as it sees ACKs, losses, timeouts and idle periods.
#[derive(Clone, Debug)]
pub struct Congestion {
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Slow-start threshold, bytes; `u64::MAX` until the first loss.
    pub ssthresh: u64,
    algorithm: Algorithm,
}

impl Congestion {
    /// A connection's congestion state before anything is sent: the window at `initial_cwnd`
    /// bytes, in slow start with no threshold yet.
    #[inline]
    pub fn new(kind: CongestionControl, initial_cwnd: u64) -> Self {
        let algorithm = match kind {
            CongestionControl::Reno => Algorithm::Reno(Reno::default()),
            CongestionControl::Cubic => Algorithm::Cubic(Cubic::new()),
        };
        Congestion {
            cwnd: initial_cwnd,
            ssthresh: u64::MAX,
            algorithm,
        }
    }

    /// Whether the window is still below ssthresh, so every acknowledged byte grows it.
    #[inline]
    pub fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    /// Segments of `mss` bytes that a pacing sender moves as one burst now, as Linux sizes
    /// a TSO/GSO packet (`tcp_tso_autosize`): what the pacing rate sends in 1/1024 s, at
    /// least two and at most `max`. The pacing rate is the window per smoothed round trip
    /// `srtt` times 2 in slow start and 1.2 after (`tcp_pacing_ss_ratio`,
    /// `tcp_pacing_ca_ratio`), so a slow flow's bursts stay small and a fast one's reach
    /// 64 KiB. Before the first round trip is measured (`srtt` 0), two.
    pub fn burst_segments(&self, mss: u64, srtt: SimDuration, max: u16) -> u16 {
        if srtt == 0 {
            return max.min(2);
        }
        let percent = if self.in_slow_start() { 200 } else { 120 };
        // cwnd × percent/100 bytes per srtt nanoseconds, for 1/1024 s, in segments: one
        // division, in 64 bits for any real window and round trip (a 128-bit division, a
        // library call, was a visible part of sending when offload is on).
        let num = self.cwnd.checked_mul(percent * 10_000_000);
        let den = (1024 * mss.max(1)).checked_mul(srtt);
        let segments = match (num, den) {
            (Some(num), Some(den)) => num / den,
            _ => {
                let num = u128::from(self.cwnd) * u128::from(percent) * 10_000_000;
                let den = 1024 * u128::from(mss.max(1)) * u128::from(srtt);
                (num / den).min(u128::from(u64::MAX)) as u64
            }
        };
        segments.max(2).min(u64::from(max)) as u16
    }

    /// Growth on an ACK that newly acknowledged `acked` bytes outside loss recovery.
    /// Slow start counts every acknowledged byte (as Linux does, so delayed ACKs do not halve
    /// the growth rate); whatever overshoots ssthresh is handed to congestion avoidance.
    #[inline]
    pub fn on_ack(&mut self, now: SimTime, acked: u64, mss: u64, srtt: SimDuration) {
        let mut acked = acked;
        if self.in_slow_start() {
            let room = self.ssthresh - self.cwnd;
            let grow = acked.min(room);
            self.cwnd += grow;
            acked -= grow;
            if acked == 0 {
                return;
            }
        }
        match &mut self.algorithm {
            Algorithm::Reno(r) => r.on_ack(&mut self.cwnd, acked, mss),
            Algorithm::Cubic(c) => c.on_ack(&mut self.cwnd, acked, mss, now, srtt),
        }
    }

    /// Multiplicative decrease on entering fast recovery; cwnd is set to the new ssthresh.
    #[inline]
    pub fn on_congestion(&mut self, flight: u64, mss: u64) {
        let ssthresh = match &mut self.algorithm {
            Algorithm::Reno(_) => (flight / 2).max(2 * mss),
            Algorithm::Cubic(c) => c.on_congestion(self.cwnd, mss),
        };
        self.ssthresh = ssthresh;
        self.cwnd = ssthresh;
    }

    /// RFC 5681 (and RFC 6298 section 5): after a timeout, halve the flight into ssthresh and
    /// restart from one segment.
    #[inline]
    pub fn on_timeout(&mut self, flight: u64, mss: u64) {
        if let Algorithm::Cubic(c) = &mut self.algorithm {
            c.on_congestion(self.cwnd, mss);
        }
        if let Algorithm::Reno(r) = &mut self.algorithm {
            r.reset();
        }
        self.ssthresh = (flight / 2).max(2 * mss);
        self.cwnd = mss;
    }

    /// The window went unused: CUBIC starts a fresh epoch from the current window when growth
    /// resumes instead of jumping along a curve whose clock kept running.
    #[inline]
    pub fn on_idle(&mut self) {
        if let Algorithm::Cubic(c) = &mut self.algorithm {
            c.reset_epoch();
        }
    }

    /// Persistent congestion (RFC 9002 7.6.2): the window collapses to `min_window` and
    /// grows again from there in slow start, as after a TCP retransmission timeout; ssthresh
    /// keeps the value the loss that revealed it already set.
    #[inline]
    pub fn on_persistent_congestion(&mut self, min_window: u64) {
        match &mut self.algorithm {
            Algorithm::Cubic(c) => c.reset_epoch(),
            Algorithm::Reno(r) => r.reset(),
        }
        self.cwnd = min_window;
    }

    /// Leaves fast recovery with the window at the reduced ssthresh.
    #[inline]
    pub fn on_recovery_end(&mut self) {
        self.cwnd = self.ssthresh;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_then_avoidance() {
        let mss = 1000;
        let mut c = Congestion::new(CongestionControl::Reno, 10 * mss);
        c.on_ack(0, 10 * mss, mss, 100);
        assert_eq!(c.cwnd, 20 * mss);
        c.on_congestion(20 * mss, mss);
        assert_eq!(c.cwnd, 10 * mss);
        assert_eq!(c.ssthresh, 10 * mss);
        // One window of ACKs grows Reno by one segment.
        for _ in 0..10 {
            c.on_ack(0, mss, mss, 100);
        }
        assert_eq!(c.cwnd, 11 * mss);
        c.on_timeout(11 * mss, mss);
        assert_eq!(c.cwnd, mss);
        assert_eq!(c.ssthresh, 5500);
    }
}
