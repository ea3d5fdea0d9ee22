//! Learned circuit build timeout (path-spec 2.4, circuitstats.c).
//!
//! A client times out slow circuit builds at the 80th percentile of its own recent build
//! times, so that it abandons the slowest fifth of paths instead of waiting on them. Tor fits a
//! Pareto distribution to the last 1000 builds: Xm from the most common 10 ms histogram bins
//! (the distribution is really Fréchet-like; only the tail matters), alpha by maximum likelihood
//! with abandoned builds right-censored. Until 100 builds are seen the timeout is 60 s.
//!
//! Tor's liveness tracking (no recording while the network seems down) and its reset after
//! many recent timeouts past the first hop are not modelled: simulated networks do not go
//! down unless a scenario says so, and then the caller can simply stop reporting builds.

use crate::params::TorParams;
use onionlab_engine::time::{SimDuration, NANOS_PER_MILLI};

/// Size of the build-time history.
pub const CBT_NCIRCUITS_TO_OBSERVE: usize = 1000;
/// Width of a histogram bin, in milliseconds.
pub const CBT_BIN_WIDTH_MS: u32 = 10;
/// Tor's largest `cbtnummodes`; bounds the fixed-size mode array.
const MAX_XM_MODES: usize = 20;
/// Marks a build abandoned at the close timeout (right-censored sample).
const ABANDONED: u32 = i32::MAX as u32 - 1;
/// Largest storable build time in milliseconds.
const BUILD_TIME_MAX: u32 = ABANDONED - 1;

/// One client's circuit build timeout, learned from the build times it has recorded.
#[derive(Clone, Debug)]
pub struct BuildTimeEstimator {
    /// Ring of build times in ms; 0 = empty slot, `ABANDONED` = censored. It grows to its
    /// full size only as builds come (a client builds a few circuits an hour, and a network
    /// has thousands of clients), so the slots not yet written are simply absent.
    times: Vec<u32>,
    next: usize,
    total: usize,
    min_circs: usize,
    quantile: f64,
    close_quantile: f64,
    num_modes: usize,
    initial_ms: f64,
    min_timeout_ms: f64,
    xm_ms: u32,
    alpha: f64,
    timeout_ms: f64,
    close_ms: f64,
    learned: bool,
    /// Scratch histogram reused across fits, so a fit allocates only when the longest build
    /// time grows.
    histogram: Vec<u32>,
}

impl BuildTimeEstimator {
    /// An estimator with no history, at the initial timeout (`cbt_initial_timeout_s`, never
    /// below `cbt_min_timeout_ms`) until `cbt_min_circuits_to_observe` builds are recorded.
    pub fn new(params: &TorParams) -> Self {
        let initial_ms = params.cbt_initial_timeout_s * 1000.0;
        let min_timeout_ms = params.cbt_min_timeout_ms as f64;
        Self {
            times: Vec::new(),
            next: 0,
            total: 0,
            min_circs: (params.cbt_min_circuits_to_observe as usize).max(1),
            quantile: params.cbt_quantile,
            // Tor raises a close quantile below the timeout quantile to it.
            close_quantile: params.cbt_close_quantile.max(params.cbt_quantile),
            num_modes: (params.cbt_num_xm_modes as usize).clamp(1, MAX_XM_MODES),
            initial_ms: initial_ms.max(min_timeout_ms),
            min_timeout_ms,
            xm_ms: 0,
            alpha: 0.0,
            timeout_ms: initial_ms.max(min_timeout_ms),
            close_ms: initial_ms.max(min_timeout_ms),
            learned: false,
            histogram: Vec::new(),
        }
    }

    fn push(&mut self, ms: u32) {
        if self.times.len() < CBT_NCIRCUITS_TO_OBSERVE {
            // Still filling: `next` is the end.
            self.times.push(ms);
        } else {
            self.times[self.next] = ms;
        }
        self.next = (self.next + 1) % CBT_NCIRCUITS_TO_OBSERVE;
        if self.total < CBT_NCIRCUITS_TO_OBSERVE {
            self.total += 1;
        }
    }

    /// A circuit finished building (reached its third hop) after `build_time`, and the
    /// timeout is re-fitted, as Tor does on every completed build.
    ///
    /// Times are rounded to whole milliseconds like Tor's; a build under half a millisecond
    /// counts as 1 ms (Tor would drop it as a bug, but simulated builds can be that fast).
    pub fn add(&mut self, build_time: SimDuration) {
        let ms = (build_time + NANOS_PER_MILLI / 2) / NANOS_PER_MILLI;
        self.push(ms.clamp(1, BUILD_TIME_MAX as u64) as u32);
        self.set_timeout();
    }

    /// A build was abandoned when it reached the close timeout. Like Tor, this records a
    /// censored sample but does not re-fit until the next completed build.
    pub fn add_timeout(&mut self) {
        self.push(ABANDONED);
    }

    /// How long a build may take before the client stops waiting on it: the fitted quantile
    /// once learned, the initial timeout before.
    pub fn timeout(&self) -> SimDuration {
        ms_to_duration(self.timeout_ms)
    }

    /// How long a build may run before it is abandoned; never below the initial timeout
    /// (Tor keeps slow builds measurable for at least a minute).
    pub fn close_timeout(&self) -> SimDuration {
        ms_to_duration(self.close_ms)
    }

    /// Whether a timeout has been fitted (enough builds seen), rather than the initial one.
    pub fn learned(&self) -> bool {
        self.learned
    }

    /// Fitted Pareto Xm in milliseconds (0 before the first fit).
    pub fn xm_ms(&self) -> u32 {
        self.xm_ms
    }

    /// Fitted Pareto alpha (0 before the first fit).
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Builds in the history, abandoned ones included.
    pub fn total(&self) -> usize {
        self.total
    }

    fn max_time(&self) -> u32 {
        self.times
            .iter()
            .copied()
            .filter(|&t| t != ABANDONED)
            .max()
            .unwrap_or(0)
    }

    /// Xm as Tor computes it: the count-weighted mean midpoint of the most common bins (one
    /// mode until the history is full, `cbtnummodes` after), in whole milliseconds. Keeps
    /// Tor's mode-selection loop, which is not an exact top-N but decides the result.
    fn xm(&mut self) -> u32 {
        let nbins = 1 + (self.max_time() / CBT_BIN_WIDTH_MS) as usize;
        self.histogram.clear();
        self.histogram.resize(nbins, 0);
        for &t in &self.times {
            if t != 0 && t != ABANDONED {
                self.histogram[(t / CBT_BIN_WIDTH_MS) as usize] += 1;
            }
        }
        let num_modes = if self.total < CBT_NCIRCUITS_TO_OBSERVE {
            1
        } else {
            self.num_modes
        };
        let h = &self.histogram;
        let mut nth = [0usize; MAX_XM_MODES];
        for i in 0..nbins {
            if h[i] >= h[nth[0]] {
                nth[0] = i;
            }
            for n in 1..num_modes {
                if h[i] >= h[nth[n]] && (h[nth[n - 1]] == 0 || h[i] < h[nth[n - 1]]) {
                    nth[n] = i;
                }
            }
        }
        let (mut weighted, mut counts) = (0u64, 0u64);
        for &b in &nth[..num_modes] {
            let midpoint = b as u64 * CBT_BIN_WIDTH_MS as u64 + CBT_BIN_WIDTH_MS as u64 / 2;
            weighted += midpoint * h[b] as u64;
            counts += h[b] as u64;
        }
        // No counts means every build in the history was abandoned: nothing to fit.
        weighted.checked_div(counts).map_or(0, |v| v as u32)
    }

    /// Fits Xm and alpha; false when there is nothing to fit (everything abandoned, or Xm is
    /// the largest time seen).
    fn update_alpha(&mut self) -> bool {
        let xm = self.xm();
        self.xm_ms = xm;
        if xm == 0 {
            return false;
        }
        let ln_xm = (xm as f64).ln();
        let (mut a, mut n, mut abandoned, mut max_time) = (0.0f64, 0u64, 0u64, 0u32);
        for &x in &self.times {
            if x == 0 {
                continue;
            }
            if x < xm {
                a += ln_xm;
            } else if x == ABANDONED {
                abandoned += 1;
            } else {
                a += (x as f64).ln();
                max_time = max_time.max(x);
            }
            n += 1;
        }
        if max_time == 0 {
            return false;
        }
        // Censored samples count as if they had ended at the longest observed build.
        a += abandoned as f64 * (max_time as f64).ln();
        a -= n as f64 * ln_xm;
        self.alpha = (n - abandoned) as f64 / a;
        true
    }

    /// The Pareto quantile function, clamped to i32::MAX ms as Tor does.
    fn quantile_ms(&self, q: f64) -> f64 {
        let mut ret = i32::MAX as f64;
        if self.alpha > 0.0 {
            let p = (1.0 - q).powf(1.0 / self.alpha);
            if p > 0.0 {
                ret = self.xm_ms as f64 / p;
            }
        }
        ret.min(i32::MAX as f64)
    }

    fn set_timeout(&mut self) {
        if self.total < self.min_circs || !self.update_alpha() {
            return;
        }
        let mut timeout = self.quantile_ms(self.quantile);
        let mut close = self.quantile_ms(self.close_quantile);
        let max_time = self.max_time() as f64;
        if timeout > max_time {
            timeout = max_time;
        }
        if max_time < (i32::MAX / 2) as f64 && close > 2.0 * max_time {
            close = 2.0 * max_time;
        }
        close = close.max(self.initial_ms);
        if timeout < self.min_timeout_ms {
            timeout = self.min_timeout_ms;
            if close < timeout {
                close = self.initial_ms;
            }
        }
        self.timeout_ms = timeout;
        self.close_ms = close;
        self.learned = true;
    }
}

fn ms_to_duration(ms: f64) -> SimDuration {
    (ms * NANOS_PER_MILLI as f64).round() as SimDuration
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionlab_engine::time::{millis, secs};

    use crate::test_rng::Rng;

    fn pareto_ms(rng: &mut Rng, xm: f64, alpha: f64) -> f64 {
        xm / (1.0 - rng.unit()).powf(1.0 / alpha)
    }

    #[test]
    fn initial_timeout_until_enough_builds() {
        let p = TorParams::default();
        let mut e = BuildTimeEstimator::new(&p);
        assert_eq!(e.timeout(), secs(60));
        assert_eq!(e.close_timeout(), secs(60));
        for _ in 0..99 {
            e.add(millis(500));
        }
        assert!(!e.learned());
        assert_eq!(e.timeout(), secs(60));
        e.add(millis(700));
        assert!(e.learned());
        assert!(e.timeout() < secs(1));
    }

    #[test]
    fn pareto_samples_give_the_true_80th_percentile() {
        let p = TorParams::default();
        let (xm, alpha) = (400.0, 2.5);
        let truth = xm / 0.2f64.powf(1.0 / alpha);
        for seed in 1..=20u64 {
            // Both regimes: one mode (history not yet full) and cbtnummodes = 10 (full).
            for n in [300usize, 1500] {
                let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
                let mut e = BuildTimeEstimator::new(&p);
                for _ in 0..n {
                    let ms = pareto_ms(&mut rng, xm, alpha);
                    e.add((ms * NANOS_PER_MILLI as f64) as u64);
                }
                let got = e.timeout() as f64 / NANOS_PER_MILLI as f64;
                let err = (got - truth).abs() / truth;
                assert!(
                    err < 0.10,
                    "seed {seed} n {n}: timeout {got:.0} ms vs {truth:.0} (xm {} alpha {:.2})",
                    e.xm_ms(),
                    e.alpha()
                );
            }
        }
    }

    #[test]
    fn xm_uses_the_modal_bin_midpoint() {
        let p = TorParams::default();
        let mut e = BuildTimeEstimator::new(&p);
        for i in 0..100u64 {
            // Mostly 503 ms (bin 500..510), a tail above it.
            let ms = if i % 4 == 0 { 600 + i * 10 } else { 503 };
            e.add(millis(ms));
        }
        assert_eq!(e.xm_ms(), 505);
        assert!(e.alpha() > 0.0);
        // Timeout at the fitted quantile, capped at the largest build seen.
        let q = 505.0 / 0.2f64.powf(1.0 / e.alpha());
        let want = q.min(1590.0);
        assert!((e.timeout() as f64 / 1e6 - want).abs() < 1e-6);
    }

    #[test]
    fn abandoned_builds_are_censored_and_lengthen_the_timeout() {
        let p = TorParams::default();
        let mut plain = BuildTimeEstimator::new(&p);
        let mut censored = BuildTimeEstimator::new(&p);
        let mut rng = Rng(7);
        for i in 0..400 {
            let ms = pareto_ms(&mut rng, 400.0, 2.5);
            let d = (ms * 1e6) as u64;
            plain.add(d);
            if i % 10 == 0 {
                censored.add_timeout();
            }
            censored.add(d);
        }
        assert!(
            censored.alpha() < plain.alpha(),
            "censoring fattens the tail"
        );
        assert!(censored.timeout() > plain.timeout());
        // The close timeout never goes below the initial timeout.
        assert_eq!(plain.close_timeout(), secs(60));
    }

    #[test]
    fn history_keeps_only_the_last_thousand() {
        let p = TorParams::default();
        let mut e = BuildTimeEstimator::new(&p);
        let mut rng = Rng(99);
        for _ in 0..1000 {
            e.add((pareto_ms(&mut rng, 2000.0, 2.0) * 1e6) as u64);
        }
        let slow = e.timeout();
        for _ in 0..1000 {
            e.add((pareto_ms(&mut rng, 300.0, 2.0) * 1e6) as u64);
        }
        assert_eq!(e.total(), CBT_NCIRCUITS_TO_OBSERVE);
        assert!(e.timeout() * 4 < slow, "old slow builds forgotten");
    }
}
