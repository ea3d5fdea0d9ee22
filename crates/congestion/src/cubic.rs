//! CUBIC congestion avoidance (RFC 9438).
//!
//! Floating point is used only with basic IEEE-754 operations (add, multiply, divide), which are
//! correctly rounded and therefore identical on every platform; the cube root is computed by
//! Newton's method rather than the platform `cbrt`, whose last bit may vary between libms.

use onionlab_engine::time::{SimDuration, SimTime, NANOS_PER_SEC};

const C: f64 = 0.4;
const BETA: f64 = 0.7;
const NO_EPOCH: SimTime = u64::MAX;

#[derive(Clone, Debug)]
pub(super) struct Cubic {
    /// Window (segments) just before the last reduction.
    w_max: f64,
    /// Time (s) the cubic function needs to climb back to `w_max` (single precision is ample
    /// and keeps connections small).
    k: f32,
    /// Start of the current congestion-avoidance epoch.
    epoch_start: SimTime,
    /// Plateau the cubic function is centred on.
    origin: f64,
    /// Reno-equivalent window estimate for the TCP-friendly region.
    w_est: f64,
    /// Window before the last reduction (cwnd_prior), to switch alpha to 1 once reached.
    cwnd_prior: f32,
}

impl Cubic {
    pub(super) fn new() -> Self {
        Cubic {
            w_max: 0.0,
            k: 0.0,
            epoch_start: NO_EPOCH,
            origin: 0.0,
            w_est: 0.0,
            cwnd_prior: 0.0,
        }
    }

    pub(super) fn on_ack(
        &mut self,
        cwnd: &mut u64,
        acked: u64,
        mss: u64,
        now: SimTime,
        srtt: SimDuration,
    ) {
        let mss_f = mss as f64;
        let cwnd_seg = *cwnd as f64 / mss_f;
        if self.epoch_start == NO_EPOCH {
            self.epoch_start = now;
            if cwnd_seg < self.w_max {
                self.k = cube_root((self.w_max - cwnd_seg) / C) as f32;
                self.origin = self.w_max;
            } else {
                self.k = 0.0;
                self.origin = cwnd_seg;
            }
            self.w_est = cwnd_seg;
        }
        let acked_seg = acked as f64 / mss_f;
        // RFC 9438 4.2: aim at where the curve will be one RTT from now.
        let t = (now - self.epoch_start + srtt) as f64 / NANOS_PER_SEC as f64;
        let d = t - f64::from(self.k);
        let w_cubic = self.origin + C * d * d * d;

        // RFC 9438 4.3: Reno-friendly estimate with alpha chosen so that its average matches Reno.
        let alpha = if self.w_est >= f64::from(self.cwnd_prior) {
            1.0
        } else {
            3.0 * (1.0 - BETA) / (1.0 + BETA)
        };
        self.w_est += alpha * acked_seg / cwnd_seg;

        let new_seg = if w_cubic < self.w_est {
            self.w_est
        } else {
            let target = w_cubic.min(1.5 * cwnd_seg);
            if target > cwnd_seg {
                cwnd_seg + (target - cwnd_seg) / cwnd_seg * acked_seg
            } else {
                cwnd_seg
            }
        };
        let new_bytes = (new_seg * mss_f) as u64;
        if new_bytes > *cwnd {
            *cwnd = new_bytes;
        }
    }

    pub(super) fn reset_epoch(&mut self) {
        self.epoch_start = NO_EPOCH;
    }

    /// Records the reduction point (with fast convergence) and returns the new ssthresh.
    pub(super) fn on_congestion(&mut self, cwnd: u64, mss: u64) -> u64 {
        let cwnd_seg = cwnd as f64 / mss as f64;
        self.epoch_start = NO_EPOCH;
        self.cwnd_prior = cwnd_seg as f32;
        self.w_max = if cwnd_seg < self.w_max {
            // Fast convergence: release bandwidth to newer flows.
            cwnd_seg * (1.0 + BETA) / 2.0
        } else {
            cwnd_seg
        };
        ((cwnd as f64 * BETA) as u64).max(2 * mss)
    }
}

/// Deterministic cube root for x >= 0.
fn cube_root(x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    let mut y = 1.0;
    while y * y * y < x {
        y *= 2.0;
    }
    for _ in 0..100 {
        let next = y - (y * y * y - x) / (3.0 * y * y);
        if (next - y).abs() <= 1e-12 * y {
            return next;
        }
        y = next;
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionlab_engine::time::NANOS_PER_MILLI;

    #[test]
    fn cube_root_is_accurate() {
        for x in [1e-6, 0.5, 1.0, 8.0, 27.0, 1000.0, 12345.678] {
            let y = cube_root(x);
            assert!((y * y * y - x).abs() < 1e-9 * x.max(1.0), "{x} -> {y}");
        }
    }

    #[test]
    fn recovers_to_w_max_after_k() {
        let mss = 1000;
        let mut c = Cubic::new();
        let mut cwnd = 100 * mss;
        let ss = c.on_congestion(cwnd, mss);
        assert_eq!(ss, 70 * mss);
        cwnd = ss;
        // K = cbrt(30 / 0.4) ~ 4.22 s. Ack a window every 100 ms for 5 s.
        let rtt = 100 * NANOS_PER_MILLI;
        let mut now = 0;
        for _ in 0..42 {
            let w = cwnd;
            c.on_ack(&mut cwnd, w, mss, now, rtt);
            now += rtt;
        }
        let seg = cwnd / mss;
        assert!((95..=105).contains(&seg), "cwnd {seg} segments at K");
    }
}
