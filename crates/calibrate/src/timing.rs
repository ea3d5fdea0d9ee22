//! Repeated timings of an operation, and what is reported from them.
//!
//! One timing of a single operation would mostly measure the clock (reading it costs tens of
//! nanoseconds, several AES calls' worth), so each timing runs a batch long enough that the
//! clock's cost and resolution vanish in it, and the batch is timed many times so that one
//! interrupted or frequency-shifted timing moves a percentile, not the median.

use std::time::{Duration, Instant};

/// How long and how often to time each operation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timer {
    /// How long one timing should last: long enough to drown the clock, short enough that a
    /// timer interrupt or a context switch lands in few of them.
    pub target: Duration,
    /// Timings taken per operation.
    pub runs: u32,
}

/// The longest batch tried while sizing one: an operation that takes no time at all (the
/// optimizer found a way round `black_box`) must not make the search run forever.
const MAX_BATCH: u64 = 1 << 34;

/// Nanoseconds per operation of `n` operations run by `f`.
fn ns_per_op(f: &mut impl FnMut(u64), n: u64) -> f64 {
    let start = Instant::now();
    f(n);
    start.elapsed().as_nanos() as f64 / n as f64
}

impl Timer {
    /// Operations per timing for `f` to last about [`Timer::target`], found by doubling a
    /// batch until it lasts an eighth of the target and scaling from there (doubling all the
    /// way would spend as long searching as measuring). The search also warms caches, branch
    /// predictors and the CPU's clock frequency up, so one more full batch is run and dropped.
    fn batch(&self, f: &mut impl FnMut(u64)) -> u64 {
        let mut n = 1u64;
        let n = loop {
            let start = Instant::now();
            f(n);
            let took = start.elapsed();
            if took >= self.target / 8 || n >= MAX_BATCH {
                let per_op = took.as_secs_f64() / n as f64;
                let fit = self.target.as_secs_f64() / per_op.max(1e-12);
                break (fit as u64).clamp(1, MAX_BATCH);
            }
            n *= 2;
        };
        f(n);
        n
    }

    /// [`Timer::runs`] timings of `f`, in nanoseconds per operation; `f(n)` runs `n`
    /// operations.
    pub(crate) fn samples(&self, mut f: impl FnMut(u64)) -> Vec<f64> {
        let n = self.batch(&mut f);
        (0..self.runs).map(|_| ns_per_op(&mut f, n)).collect()
    }

    /// Timings of `a` and `b` taken in turns, as pairs, for costs derived from the two
    /// together: a pair shares the machine's state (frequency, other load), so the difference
    /// within a pair is steadier than the difference of two separate medians.
    pub(crate) fn paired(&self, mut a: impl FnMut(u64), mut b: impl FnMut(u64)) -> Vec<(f64, f64)> {
        let na = self.batch(&mut a);
        let nb = self.batch(&mut b);
        (0..self.runs)
            .map(|_| (ns_per_op(&mut a, na), ns_per_op(&mut b, nb)))
            .collect()
    }
}

/// The `q` quantile (0 to 1) of `values`, interpolated linearly between the two nearest
/// order statistics, so that few timings (quick mode takes 7) still give distinct p10, p50
/// and p90 rather than three repeats of the same sample.
pub(crate) fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// One cost: its median, and its 10th and 90th percentiles.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Summary {
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
    pub runs: u32,
}

impl Summary {
    pub(crate) fn of(values: &[f64]) -> Summary {
        Summary {
            median: quantile(values, 0.5),
            p10: quantile(values, 0.1),
            p90: quantile(values, 0.9),
            runs: values.len() as u32,
        }
    }
}

/// `x` to `digits` significant digits. Timings on a shared machine vary by more than a
/// percent from run to run, so further digits would be noise that makes files hard to read
/// and compare.
pub(crate) fn round_sig(x: f64, digits: i32) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(digits - 1 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate() {
        let v = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(quantile(&v, 0.5), 3.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 1.0), 5.0);
        assert!((quantile(&v, 0.1) - 1.4).abs() < 1e-12);
        assert!((quantile(&v, 0.9) - 4.6).abs() < 1e-12);
        assert_eq!(quantile(&[7.0], 0.9), 7.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn rounding_keeps_significant_digits() {
        assert_eq!(round_sig(123_456.0, 4), 123_500.0);
        assert_eq!(round_sig(0.061_234_5, 4), 0.061_23);
        assert_eq!(round_sig(0.0, 4), 0.0);
        assert_eq!(round_sig(-12.345_6, 3), -12.3);
    }

    #[test]
    fn timings_last_about_the_target() {
        let timer = Timer {
            target: Duration::from_millis(2),
            runs: 3,
        };
        let mut acc = 0u64;
        let start = Instant::now();
        let s = timer.samples(|n| {
            for i in 0..n {
                acc = std::hint::black_box(acc.wrapping_mul(31).wrapping_add(i));
            }
        });
        assert_eq!(s.len(), 3);
        assert!(s.iter().all(|v| v.is_finite() && *v >= 0.0));
        // Search, warm-up and three timings of ~2 ms: far below a second even on a slow,
        // shared machine, unless the batch sizing ran away.
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
