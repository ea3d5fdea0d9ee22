//! Proposal 324 congestion control with TOR_VEGAS, as tor 0.4.8 implements it
//! (congestion_control_common.c, congestion_control_vegas.c).
//!
//! The sender keeps a congestion window of cells. Every `sendme_inc`-th cell's send time is
//! remembered; the SENDME it triggers gives an RTT sample. From the smoothed RTT and the minimum
//! RTT the sender estimates the bandwidth-delay product (`cwnd * min_rtt / ewma_rtt`) and treats
//! `cwnd - BDP` as the number of its own cells sitting in queues along the path. Vegas keeps that
//! queue between `alpha` and `beta` cells, cuts back to `delta` if it overshoots, and leaves slow
//! start once the queue passes `gamma`. A blocked local OR connection is an immediate congestion
//! signal. Integer arithmetic (and its truncation) follows Tor's; times are kept in nanoseconds
//! rather than Tor's microseconds.

use crate::params::TorParams;
use crate::sendme::SendmeError;
use onionlab_engine::time::{SimDuration, SimTime};
use std::collections::VecDeque;

/// Tor treats a new RTT sample this many times larger than the EWMA as a clock jump.
const DELTA_DISCREPANCY_RATIO_MAX: u64 = 5000;

/// One circuit's (or hop's) Vegas state.
#[derive(Clone, Debug)]
pub struct VegasCc {
    // Parameters, cached at creation as Tor does from the consensus.
    sendme_inc: u64,
    cwnd_min: u64,
    cwnd_max: u64,
    cwnd_inc: u64,
    cwnd_inc_rate: u64,
    cwnd_inc_pct_ss: u64,
    ss_cwnd_cap: u64,
    ss_cwnd_max: u64,
    alpha: u64,
    beta: u64,
    gamma: u64,
    delta: u64,
    full_gap: u64,
    full_minpct: u64,
    full_per_cwnd: bool,
    ewma_cwnd_pct: u64,
    ewma_max: u64,
    ewma_ss: u64,
    rtt_reset_pct: u64,

    cwnd: u64,
    inflight: u64,
    in_slow_start: bool,
    cwnd_full: bool,
    blocked_chan: bool,
    /// SENDMEs until the next steady-state cwnd update.
    next_cc_event: u64,
    /// SENDMEs until a full cwnd has been acknowledged.
    next_cwnd_event: u64,
    min_rtt: SimDuration,
    ewma_rtt: SimDuration,
    max_rtt: SimDuration,
    bdp: u64,
    /// Send times of the cells whose SENDMEs are still to come, oldest first.
    pending: VecDeque<SimTime>,
}

impl VegasCc {
    /// `is_exit` selects the exit thresholds and slow-start cap; otherwise the onion-service
    /// ones apply. `now` is accepted for symmetry with the rest of the API; a circuit's state
    /// starts the same whenever it is created.
    pub fn new(params: &TorParams, is_exit: bool, _now: SimTime) -> Self {
        let p = params;
        let (alpha, beta, gamma, delta, cap) = if is_exit {
            (
                p.vegas_alpha,
                p.vegas_beta,
                p.vegas_gamma,
                p.vegas_delta,
                p.cc_ss_max,
            )
        } else {
            (
                p.vegas_alpha_onion,
                p.vegas_beta_onion,
                p.vegas_gamma_onion,
                p.vegas_delta_onion,
                p.cc_sscap_onion,
            )
        };
        let sendme_inc = p.cc_sendme_inc.max(1) as u64;
        let mut cc = Self {
            sendme_inc,
            cwnd_min: p.cc_cwnd_min as u64,
            cwnd_max: p.cc_cwnd_max as u64,
            cwnd_inc: p.cc_cwnd_inc as u64,
            cwnd_inc_rate: p.cc_cwnd_inc_rate.max(1) as u64,
            cwnd_inc_pct_ss: p.cc_cwnd_inc_pct_ss as u64,
            ss_cwnd_cap: cap as u64,
            ss_cwnd_max: p.cc_ss_cwnd_max as u64,
            alpha: alpha as u64,
            beta: beta as u64,
            gamma: gamma as u64,
            delta: delta as u64,
            full_gap: p.cc_cwnd_full_gap as u64,
            full_minpct: p.cc_cwnd_full_minpct as u64,
            full_per_cwnd: p.cc_cwnd_full_per_cwnd,
            ewma_cwnd_pct: p.cc_ewma_cwnd_pct as u64,
            ewma_max: p.cc_ewma_max as u64,
            ewma_ss: p.cc_ewma_ss as u64,
            rtt_reset_pct: p.cc_rtt_reset_pct.min(100) as u64,
            cwnd: p.cc_cwnd_init as u64,
            inflight: 0,
            in_slow_start: true,
            cwnd_full: false,
            blocked_chan: false,
            next_cc_event: 0,
            next_cwnd_event: 0,
            min_rtt: 0,
            ewma_rtt: 0,
            max_rtt: 0,
            bdp: 0,
            // One slot per SENDME in the initial window; the deque grows (rarely, amortised)
            // as cwnd grows, never per cell.
            pending: VecDeque::with_capacity((p.cc_cwnd_init as usize) / sendme_inc as usize + 2),
        };
        cc.next_cc_event = cc.cwnd_update_rate();
        cc
    }

    /// SENDMEs between steady-state updates (every SENDME in slow start), rounded.
    fn cwnd_update_rate(&self) -> u64 {
        if self.in_slow_start {
            (self.cwnd + self.sendme_inc / 2) / self.sendme_inc
        } else {
            let per = self.cwnd_inc_rate * self.sendme_inc;
            (self.cwnd + per / 2) / per
        }
    }

    /// SENDMEs in one congestion window, rounded.
    fn sendme_per_cwnd(&self) -> u64 {
        (self.cwnd + self.sendme_inc / 2) / self.sendme_inc
    }

    /// RFC 3742 limited slow start: a full `sendme_inc` per SENDME below the cap, then
    /// increments that shrink as cwnd grows.
    fn ss_inc(&self) -> u64 {
        if self.cwnd <= self.ss_cwnd_cap {
            (self.cwnd_inc_pct_ss * self.sendme_inc + 50) / 100
        } else {
            ((self.sendme_inc * self.ss_cwnd_cap + self.cwnd) / (2 * self.cwnd)).max(1)
        }
    }

    /// N of the N-EWMA of RTT: short in slow start, where every SENDME is acted on, longer
    /// afterwards, where cwnd changes only once per update period.
    fn n_ewma_count(&self) -> u64 {
        let n = if self.in_slow_start {
            self.ewma_ss
        } else {
            (self.cwnd_update_rate() * self.ewma_cwnd_pct / 100).min(self.ewma_max)
        };
        n.max(2)
    }

    /// Whether one more DATA cell fits in the congestion window.
    pub fn can_send(&self) -> bool {
        self.inflight < self.cwnd
    }

    /// Cells that may still be sent (0 while inflight exceeds a just-reduced cwnd).
    pub fn package_window(&self) -> u64 {
        self.cwnd.saturating_sub(self.inflight)
    }

    /// One DATA cell sent at `now`.
    ///
    /// Tor skips the timestamp when inflight is 0, which only matters for `sendme_inc == 1`
    /// (where it would lose the first RTT sample); the model records it.
    pub fn on_cell_sent(&mut self, now: SimTime) {
        if (self.inflight + 1).is_multiple_of(self.sendme_inc) {
            self.pending.push_back(now);
        }
        self.inflight += 1;
    }

    /// A SENDME arrived at `now`. `or_conn_blocked` says whether the circuit's OR connection
    /// is currently over its outbuf high watermark (Tor's `circuit_blocked_on_*_chan`).
    ///
    /// A SENDME for cells that were never sent is a protocol violation (Tor closes the circuit).
    pub fn on_sendme(&mut self, now: SimTime, or_conn_blocked: bool) -> Result<(), SendmeError> {
        if self.inflight < self.sendme_inc {
            return Err(SendmeError::UnexpectedSendme);
        }
        let Some(sent_at) = self.pending.pop_front() else {
            return Err(SendmeError::UnexpectedSendme);
        };
        self.next_cc_event = self.next_cc_event.saturating_sub(1);
        self.next_cwnd_event = self.next_cwnd_event.saturating_sub(1);

        let rtt = self.update_rtt(now.saturating_sub(sent_at));
        if !self.update_bdp(rtt, or_conn_blocked) {
            self.inflight -= self.sendme_inc;
            return Ok(());
        }

        let queue_use = self.cwnd.saturating_sub(self.bdp);

        if self.inflight + self.full_gap * self.sendme_inc >= self.cwnd {
            self.cwnd_full = true;
        } else if 100 * self.inflight < self.full_minpct * self.cwnd {
            self.cwnd_full = false;
        }

        if self.in_slow_start {
            if queue_use < self.gamma && !self.blocked_chan {
                // No growth unless the window is actually in use.
                if self.cwnd_full {
                    let inc = self.ss_inc();
                    self.cwnd += inc;
                    // Leave once slow start would grow slower than steady state does.
                    if inc * self.sendme_per_cwnd() <= self.cwnd_inc * self.cwnd_inc_rate {
                        self.in_slow_start = false;
                    }
                }
            } else {
                self.cwnd = self.bdp + self.gamma;
                self.in_slow_start = false;
            }
            if self.cwnd >= self.ss_cwnd_max {
                self.cwnd = self.ss_cwnd_max;
                self.in_slow_start = false;
            }
        } else if self.next_cc_event == 0 {
            if queue_use > self.delta {
                self.cwnd = (self.bdp + self.delta).saturating_sub(self.cwnd_inc);
            } else if queue_use > self.beta || self.blocked_chan {
                self.cwnd = self.cwnd.saturating_sub(self.cwnd_inc);
            } else if self.cwnd_full && queue_use < self.alpha {
                self.cwnd += self.cwnd_inc;
            }
        }
        // Tor applies the floor only after steady-state updates; with any sane gamma the
        // slow-start exit value is above it anyway, so applying it always changes nothing real.
        self.cwnd = self.cwnd.max(self.cwnd_min).min(self.cwnd_max);

        if self.next_cwnd_event == 0 {
            self.next_cwnd_event = self.sendme_per_cwnd();
        }
        if self.next_cc_event == 0 {
            self.next_cc_event = self.cwnd_update_rate();
        }
        let reset_full = if self.full_per_cwnd {
            self.next_cwnd_event == self.sendme_per_cwnd()
        } else {
            self.next_cc_event == self.cwnd_update_rate()
        };
        if reset_full {
            self.cwnd_full = false;
        }

        self.inflight -= self.sendme_inc;
        Ok(())
    }

    /// Folds one RTT sample into the EWMA, minimum and maximum; returns the sample, or 0 when
    /// it looks like a stalled or jumping clock and was ignored.
    fn update_rtt(&mut self, rtt: SimDuration) -> SimDuration {
        if self.clock_stalled_or_jumped(rtt) {
            return 0;
        }
        let n = self.n_ewma_count();
        self.ewma_rtt = if self.ewma_rtt == 0 {
            rtt
        } else {
            ((2 * rtt as u128 + (n as u128 - 1) * self.ewma_rtt as u128) / (n as u128 + 1)) as u64
        };
        self.max_rtt = self.max_rtt.max(rtt);
        if self.min_rtt == 0 {
            self.min_rtt = self.ewma_rtt;
        } else if self.cwnd == self.cwnd_min && !self.in_slow_start {
            // Stuck at the floor, perhaps because min RTT was measured abnormally low: raise
            // it towards the current EWMA to get out of the wedge.
            let (hi, lo) = if self.ewma_rtt > self.min_rtt {
                (self.ewma_rtt, self.min_rtt)
            } else {
                (self.min_rtt, self.ewma_rtt)
            };
            self.min_rtt = self.rtt_reset_pct * hi / 100 + (100 - self.rtt_reset_pct) * lo / 100;
        } else if self.ewma_rtt < self.min_rtt {
            // The EWMA rather than the raw sample, to average out other traffic's effects.
            self.min_rtt = self.ewma_rtt;
        }
        rtt
    }

    fn clock_stalled_or_jumped(&self, rtt: SimDuration) -> bool {
        if rtt == 0 {
            return true;
        }
        // Only judged once past slow start with an EWMA to compare against.
        if self.in_slow_start || self.ewma_rtt == 0 {
            return false;
        }
        rtt > self.ewma_rtt.saturating_mul(DELTA_DISCREPANCY_RATIO_MAX)
    }

    /// Updates the BDP estimate and the blocked-channel signal; false when neither an RTT
    /// sample nor a blocked channel gives anything to act on.
    fn update_bdp(&mut self, rtt: SimDuration, blocked: bool) -> bool {
        if self.ewma_rtt == 0 {
            // The clock has never given a usable sample: fall back to cwnd as the BDP.
            self.bdp = self.cwnd;
            self.blocked_chan = blocked;
            return blocked;
        }
        self.bdp = (self.cwnd as u128 * self.min_rtt as u128 / self.ewma_rtt as u128) as u64;
        // Blocking and unblocking are congestion events of their own: act on the next SENDME.
        if blocked != self.blocked_chan {
            self.blocked_chan = blocked;
            self.next_cc_event = 0;
        }
        blocked || rtt != 0
    }

    /// The congestion window, in cells.
    pub fn cwnd(&self) -> u64 {
        self.cwnd
    }

    /// DATA cells sent and not yet acknowledged by a SENDME.
    pub fn inflight(&self) -> u64 {
        self.inflight
    }

    /// Whether the circuit is still in slow start.
    pub fn in_slow_start(&self) -> bool {
        self.in_slow_start
    }

    /// Whether the window counts as in use (inflight near cwnd), the condition for growing it.
    pub fn cwnd_full(&self) -> bool {
        self.cwnd_full
    }

    /// The minimum RTT estimate (taken from the smoothed RTT, not raw samples); 0 before the
    /// first sample.
    pub fn min_rtt(&self) -> SimDuration {
        self.min_rtt
    }

    /// The smoothed (N-EWMA) RTT; 0 before the first sample.
    pub fn ewma_rtt(&self) -> SimDuration {
        self.ewma_rtt
    }

    /// The largest RTT sample seen; 0 before the first sample.
    pub fn max_rtt(&self) -> SimDuration {
        self.max_rtt
    }

    /// The last BDP estimate, in cells.
    pub fn bdp(&self) -> u64 {
        self.bdp
    }

    /// Cells acknowledged by one SENDME (`cc_sendme_inc`, at least 1).
    pub fn sendme_inc(&self) -> u64 {
        self.sendme_inc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionlab_engine::time::{millis, secs, NANOS_PER_SEC};

    /// A saturating sender over a path whose SENDMEs come back after `rtt_of(send_time,
    /// queue)`; returns the cwnd after each SENDME.
    struct Path {
        cc: VegasCc,
        now: SimTime,
        sent: u64,
        /// Arrival times of SENDMEs in flight (FIFO: arrivals are monotonic).
        sendmes: VecDeque<SimTime>,
        /// Bottleneck: rate in cells/s (0 = infinite) and when it next becomes idle.
        rate: u64,
        busy_until: SimTime,
        base_rtt: SimDuration,
        /// Most cells the application offers in flight (u64::MAX = bulk).
        app_limit: u64,
    }

    impl Path {
        fn new(rate: u64, base_rtt: SimDuration) -> Self {
            Self {
                cc: VegasCc::new(&TorParams::default(), true, 0),
                now: 0,
                sent: 0,
                sendmes: VecDeque::new(),
                rate,
                busy_until: 0,
                base_rtt,
                app_limit: u64::MAX,
            }
        }

        fn fill(&mut self) {
            while self.cc.can_send() && self.cc.inflight() < self.app_limit {
                self.cc.on_cell_sent(self.now);
                self.sent += 1;
                let departs = match NANOS_PER_SEC.checked_div(self.rate) {
                    None => self.now,
                    Some(service) => {
                        self.busy_until = self.busy_until.max(self.now) + service;
                        self.busy_until
                    }
                };
                if self.sent.is_multiple_of(self.cc.sendme_inc()) {
                    self.sendmes.push_back(departs + self.base_rtt);
                }
            }
        }

        /// Cells queued at the bottleneck now.
        fn queue(&self) -> u64 {
            if self.rate == 0 {
                0
            } else {
                self.busy_until.saturating_sub(self.now) * self.rate / NANOS_PER_SEC
            }
        }

        /// Runs until `end`; calls `each` after every SENDME.
        fn run(&mut self, end: SimTime, blocked: bool, mut each: impl FnMut(&Self)) {
            self.fill();
            while let Some(at) = self.sendmes.pop_front() {
                if at > end {
                    self.sendmes.push_front(at);
                    break;
                }
                self.now = at;
                self.cc.on_sendme(at, blocked).unwrap();
                each(self);
                self.fill();
            }
        }
    }

    #[test]
    fn constant_rtt_grows_through_slow_start_then_slowly() {
        let mut p = Path::new(0, millis(50));
        let mut prev = p.cc.cwnd();
        let mut prev_ss = true;
        let mut left_at = None;
        p.run(secs(10), false, |s| {
            let c = s.cc.cwnd();
            assert!(c >= prev, "no congestion, no decrease: {prev} -> {c}");
            if prev_ss {
                // Full sendme_inc per SENDME below the 600-cell cap, limited increments above.
                let expect = if prev <= 600 {
                    31
                } else {
                    ((31 * 600 + prev) / (2 * prev)).max(1)
                };
                assert_eq!(c - prev, expect.min(5000 - prev), "at cwnd {prev}");
            } else {
                assert!(c - prev <= 1, "steady state grows by cwnd_inc at most");
            }
            if prev_ss && !s.cc.in_slow_start() {
                left_at = Some((c, s.now));
            }
            prev = c;
            prev_ss = s.cc.in_slow_start();
        });
        // No queueing means no gamma signal: slow start ends at the hard ceiling.
        let (at_cwnd, at_time) = left_at.expect("left slow start");
        assert_eq!(at_cwnd, 5000);
        assert!(at_time < secs(2), "slow start took {at_time} ns");
        assert!(!p.cc.in_slow_start());
        // Then linear growth: cwnd_inc per update, cwnd_inc_rate (31) updates per cwnd, so at
        // most about 31 cells per RTT.
        let rtts = (p.now - at_time) / millis(50) + 1;
        let grown = p.cc.cwnd() - 5000;
        assert!(
            grown > 0 && grown <= 32 * rtts,
            "grew {grown} in {rtts} RTTs"
        );
        assert_eq!(p.cc.min_rtt(), millis(50));
        assert_eq!(p.cc.ewma_rtt(), millis(50));
    }

    #[test]
    fn bottleneck_settles_near_bdp_plus_alpha_to_beta() {
        // 10,000 cells/s (about 5 MB/s) and 100 ms base RTT: BDP = 1000 cells.
        let rate = 10_000;
        let base = millis(100);
        let bdp = rate * base / NANOS_PER_SEC;
        let mut p = Path::new(rate, base);
        let mut stats = Vec::new();
        let warmup = secs(20);
        p.run(secs(80), false, |s| {
            if s.now >= warmup {
                stats.push((s.cc.cwnd(), s.queue()));
            }
        });
        assert!(!p.cc.in_slow_start());
        let params = TorParams::default();
        let (cmin, cmax) = stats
            .iter()
            .fold((u64::MAX, 0), |(a, b), (c, _)| (a.min(*c), b.max(*c)));
        let qmax = stats.iter().map(|s| s.1).max().unwrap();
        let qmin = stats.iter().map(|s| s.1).min().unwrap();
        let qmean = stats.iter().map(|s| s.1).sum::<u64>() / stats.len() as u64;
        eprintln!("cwnd {cmin}..{cmax} queue {qmin}..{qmax} mean {qmean} bdp {bdp}");
        // Vegas aims its own queue between alpha and beta cells, never far beyond delta.
        assert!(
            qmax <= params.vegas_delta as u64 + 31,
            "queue peaked at {qmax}"
        );
        assert!(qmean >= params.vegas_alpha as u64 / 2 && qmean <= params.vegas_beta as u64 + 31);
        assert!(qmin > 0, "the bottleneck never idles");
        assert!(
            cmin >= bdp + params.vegas_alpha as u64 / 2,
            "cwnd {cmin} too low"
        );
        assert!(
            cmax <= bdp + params.vegas_delta as u64 + 31,
            "cwnd {cmax} too high"
        );
        assert!(cmax - cmin <= 150, "cwnd oscillates {cmin}..{cmax}");
        // Throughput: the sender kept the bottleneck busy.
        let delivered_rate = p.sent as f64 / (p.now as f64 / NANOS_PER_SEC as f64);
        assert!(delivered_rate > 0.95 * rate as f64, "{delivered_rate}");
    }

    #[test]
    fn cwnd_never_below_min() {
        let params = TorParams::default();
        // A blocked OR connection signals congestion at every update.
        let mut p = Path::new(2_000, millis(200));
        let mut lowest = u64::MAX;
        p.run(secs(60), true, |s| lowest = lowest.min(s.cc.cwnd()));
        assert!(lowest >= params.cc_cwnd_min as u64);
        assert_eq!(p.cc.cwnd(), params.cc_cwnd_min as u64);

        // A tiny bottleneck behind a long path: a large queue drives cwnd down, not below min.
        let mut p = Path::new(200, millis(20));
        let mut lowest = u64::MAX;
        p.run(secs(120), false, |s| lowest = lowest.min(s.cc.cwnd()));
        assert!(lowest >= params.cc_cwnd_min as u64, "{lowest}");
    }

    #[test]
    fn app_limited_window_stops_growing() {
        // The window grows only while flagged full: set when inflight is within
        // cc_cwnd_full_gap SENDMEs of cwnd, cleared below cc_cwnd_full_minpct (25%) or once per
        // cwnd. An application keeping 62 cells in flight therefore stops at most one slow-start
        // step past 62 * 100 / 25 = 248.
        let mut p = Path::new(0, millis(50));
        p.app_limit = 62;
        let mut last = 0;
        p.run(secs(30), false, |s| last = s.cc.cwnd());
        assert!(last <= 248 + 31, "cwnd {last}");
        assert!(!p.cc.cwnd_full());
        let mut q = Path::new(0, millis(50));
        q.run(secs(2), false, |_| ());
        assert!(
            q.cc.cwnd() > 1000,
            "a bulk sender in the same time grows far beyond"
        );
    }

    #[test]
    fn sendme_without_pending_cells_is_a_violation() {
        let mut cc = VegasCc::new(&TorParams::default(), true, 0);
        assert_eq!(
            cc.on_sendme(millis(10), false),
            Err(SendmeError::UnexpectedSendme)
        );
        for _ in 0..31 {
            cc.on_cell_sent(0);
        }
        assert_eq!(cc.inflight(), 31);
        assert_eq!(cc.on_sendme(millis(10), false), Ok(()));
        assert_eq!(cc.inflight(), 0);
        assert_eq!(cc.min_rtt(), millis(10));
        assert!(cc.on_sendme(millis(20), false).is_err());
    }

    #[test]
    fn onion_circuits_use_onion_thresholds() {
        let p = TorParams::default();
        let exit = VegasCc::new(&p, true, 0);
        let onion = VegasCc::new(&p, false, 0);
        assert_eq!(exit.ss_cwnd_cap, 600);
        assert_eq!(onion.ss_cwnd_cap, 475);
        assert_eq!(onion.delta, 434);
        assert_eq!(exit.delta, 310);
    }
}
