//! Statistics behind the plots and the comparison table.
//!
//! # Methods
//!
//! **Empirical CDF.** For the sorted samples `x_(1) <= ... <= x_(n)`, `F(x_(i)) = i/n`, a step
//! function that jumps at every sample. Where values tie, only the last of them (the largest
//! `i`) is kept, so `F(x)` is the fraction of samples `<= x`. Plots with many samples draw the
//! ECDF through at most [`PLOT_POINTS`] of its points, picked evenly by rank (the first and the
//! last are always kept), which keeps SVG files small without moving any point.
//!
//! **Percentiles** are nearest-rank everywhere (as in the run summary): the `q`-quantile of `n`
//! sorted values is `x_(ceil(q n))` (rank at least 1), always a measured value.
//!
//! **Confidence intervals across trials.** A statistic computed once per trial (a median TTLB,
//! an error rate, the goodput in one second) gives `K` values `s_1..s_K`. We report their mean
//! `m` and the 95% Student-t interval `m ± t_{0.975, K-1} · sd / sqrt(K)`, where `sd` is the
//! sample standard deviation (divisor `K-1`). This treats trials (distinct seeds) as
//! independent replications and assumes the statistic is roughly normal across them, which
//! holds well for medians and means of many downloads. The t quantile is exact to the
//! printed digits from a table for 1-30 degrees of freedom and a fourth-order Cornish-Fisher
//! expansion beyond (error below 1e-4). With `K = 1` there is no interval: one trial says
//! nothing about trial-to-trial spread, and reports say "no interval (1 trial)".
//!
//! **Mean CDF band.** For trials, a CDF is averaged horizontally: at each probability level
//! `q` of the grid `0.005, 0.010, ..., 0.995` ([`band_levels`]) each trial's nearest-rank
//! `q`-quantile is computed, and the curve is drawn through the mean of those `K` values with
//! the shaded band spanning their t-interval. Averaging quantiles (rather than CDF heights at
//! fixed `x`) keeps the curve a valid CDF and needs no choice of x grid when trials differ in
//! scale; the band reads as "where the q-th percentile download time lies". Levels 0 and 1 are
//! left out because the minimum and maximum of a sample are too noisy to average.

/// Most points drawn for one ECDF curve.
pub const PLOT_POINTS: usize = 1000;

/// The points `(x_(i), i/n)` of the empirical CDF of `samples`, ascending in `x`, one per
/// distinct value. NaN samples are ignored, since they are missing measurements.
pub fn ecdf(samples: &[f64]) -> Vec<(f64, f64)> {
    let mut sorted: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len() as f64;
    let mut points: Vec<(f64, f64)> = Vec::with_capacity(sorted.len());
    for (i, &x) in sorted.iter().enumerate() {
        let f = (i + 1) as f64 / n;
        match points.last_mut() {
            Some(last) if last.0 == x => last.1 = f,
            _ => points.push((x, f)),
        }
    }
    points
}

/// At most `max` of `points`, evenly spread by index, always including the first and last.
pub fn thin(points: &[(f64, f64)], max: usize) -> Vec<(f64, f64)> {
    if points.len() <= max || max < 2 {
        return points.to_vec();
    }
    let last = points.len() - 1;
    (0..max)
        .map(|k| points[k * last / (max - 1)])
        .collect::<Vec<_>>()
}

/// Nearest-rank `q`-quantile of an ascending slice; NaN when empty.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let n = sorted.len();
    let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

/// Nearest-rank `q`-quantile of `values` in any order.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    quantile_sorted(&sorted, q)
}

/// Two-sided 95% Student-t critical value `t_{0.975, df}`; `None` for `df = 0`.
pub fn t_975(df: usize) -> Option<f64> {
    // Exact values (to 9 digits) for small df, where no short expansion is accurate.
    const TABLE: [f64; 30] = [
        12.706204736,
        4.302652730,
        3.182446305,
        2.776445105,
        2.570581836,
        2.446911851,
        2.364624252,
        2.306004135,
        2.262157163,
        2.228138852,
        2.200985160,
        2.178812830,
        2.160368656,
        2.144786688,
        2.131449546,
        2.119905299,
        2.109815578,
        2.100922040,
        2.093024054,
        2.085963447,
        2.079613845,
        2.073873068,
        2.068657610,
        2.063898562,
        2.059538553,
        2.055529439,
        2.051830516,
        2.048407142,
        2.045229642,
        2.042272456,
    ];
    match df {
        0 => None,
        1..=30 => Some(TABLE[df - 1]),
        _ => {
            // Cornish-Fisher expansion of the t quantile around the normal one.
            let z: f64 = 1.959_963_984_540_054;
            let v = df as f64;
            let z2 = z * z;
            let z3 = z2 * z;
            let z5 = z3 * z2;
            let z7 = z5 * z2;
            let z9 = z7 * z2;
            let g1 = (z3 + z) / 4.0;
            let g2 = (5.0 * z5 + 16.0 * z3 + 3.0 * z) / 96.0;
            let g3 = (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / 384.0;
            let g4 = (79.0 * z9 + 776.0 * z7 + 1482.0 * z5 - 1920.0 * z3 - 945.0 * z) / 92160.0;
            Some(z + g1 / v + g2 / (v * v) + g3 / (v * v * v) + g4 / (v * v * v * v))
        }
    }
}

/// A mean over trials with its 95% t-interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeanCi {
    /// The mean of the values (NaN when there were none).
    pub mean: f64,
    /// Half the width of the 95% interval; `None` with fewer than two values.
    pub half_width: Option<f64>,
    /// Number of values (trials) the mean is over.
    pub k: usize,
}

impl MeanCi {
    /// Lower end of the 95% interval; `None` without one.
    pub fn low(&self) -> Option<f64> {
        self.half_width.map(|h| self.mean - h)
    }

    /// Upper end of the 95% interval; `None` without one.
    pub fn high(&self) -> Option<f64> {
        self.half_width.map(|h| self.mean + h)
    }
}

/// Mean and 95% Student-t interval of `values`, ignoring NaNs (a trial where the statistic is
/// undefined, e.g. no successful download, contributes nothing rather than poisoning the mean).
pub fn mean_ci(values: &[f64]) -> MeanCi {
    let v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    let k = v.len();
    if k == 0 {
        return MeanCi {
            mean: f64::NAN,
            half_width: None,
            k,
        };
    }
    let mean = v.iter().sum::<f64>() / k as f64;
    let half_width = t_975(k - 1).map(|t| {
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (k - 1) as f64;
        t * (var / k as f64).sqrt()
    });
    MeanCi {
        mean,
        half_width,
        k,
    }
}

/// The probability levels of the mean-CDF band: `0.005, 0.010, ..., 0.995`.
pub fn band_levels() -> Vec<f64> {
    (1..200).map(|k| k as f64 / 200.0).collect()
}

/// One level of a mean CDF across trials.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BandPoint {
    /// The probability level `q`, from 0.005 to 0.995.
    pub level: f64,
    /// Mean and interval over the trials of their `q`-quantiles.
    pub ci: MeanCi,
}

/// Mean CDF of several trials' samples with its pointwise 95% band (see the module doc).
/// Trials without samples are left out; with none left the result is empty.
pub fn mean_cdf_band(trials: &[Vec<f64>]) -> Vec<BandPoint> {
    let sorted: Vec<Vec<f64>> = trials
        .iter()
        .map(|t| {
            let mut s: Vec<f64> = t.iter().copied().filter(|x| !x.is_nan()).collect();
            s.sort_by(f64::total_cmp);
            s
        })
        .filter(|s| !s.is_empty())
        .collect();
    if sorted.is_empty() {
        return Vec::new();
    }
    band_levels()
        .into_iter()
        .map(|level| {
            let per_trial: Vec<f64> = sorted.iter().map(|s| quantile_sorted(s, level)).collect();
            BandPoint {
                level,
                ci: mean_ci(&per_trial),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64: a tiny, fixed generator so the coverage test is reproducible without a
    /// dependency.
    struct Rng(u64);

    impl Rng {
        fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        /// Uniform in (0, 1], never 0 so logarithms are finite.
        fn uniform(&mut self) -> f64 {
            ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
        }

        fn normal(&mut self) -> f64 {
            let (u1, u2) = (self.uniform(), self.uniform());
            (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        }

        fn exponential(&mut self) -> f64 {
            -self.uniform().ln()
        }
    }

    #[test]
    fn ecdf_matches_hand_computation() {
        // Sorted: 1, 2, 2, 3, 5 -> F(1) = 1/5, F(2) = 3/5 (the tie keeps its last rank),
        // F(3) = 4/5, F(5) = 1.
        let points = ecdf(&[3.0, 2.0, 5.0, 1.0, 2.0, f64::NAN]);
        assert_eq!(points, [(1.0, 0.2), (2.0, 0.6), (3.0, 0.8), (5.0, 1.0)]);
        assert_eq!(ecdf(&[4.0]), [(4.0, 1.0)]);
        assert!(ecdf(&[]).is_empty());
    }

    #[test]
    fn thinning_keeps_the_ends() {
        let points: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, i as f64 / 9.0)).collect();
        let thinned = thin(&points, 4);
        assert_eq!(
            thinned.iter().map(|p| p.0).collect::<Vec<_>>(),
            [0.0, 3.0, 6.0, 9.0]
        );
        assert_eq!(thin(&points, 100), points);
    }

    #[test]
    fn nearest_rank_quantiles() {
        let v = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(quantile(&v, 0.5), 3.0);
        assert_eq!(quantile(&v, 0.2), 1.0);
        assert_eq!(quantile(&v, 0.21), 2.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 1.0), 5.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn t_quantiles_are_accurate() {
        assert_eq!(t_975(0), None);
        // Reference values of the 0.975 quantile of Student's t.
        for (df, want) in [
            (1, 12.7062),
            (4, 2.7764),
            (30, 2.0423),
            (31, 2.0395),
            (40, 2.0211),
            (60, 2.0003),
            (120, 1.9799),
            (1000, 1.9623),
        ] {
            let got = t_975(df).unwrap();
            assert!((got - want).abs() < 1e-3, "df {df}: {got} vs {want}");
        }
        // The expansion joins the table smoothly and decreases towards z.
        let mut prev = t_975(1).unwrap();
        for df in 2..500 {
            let t = t_975(df).unwrap();
            assert!(t < prev && t > 1.959_96, "df {df}");
            prev = t;
        }
    }

    #[test]
    fn mean_ci_by_hand() {
        // Values 1, 2, 3: mean 2, sd 1, half width t(2) / sqrt(3).
        let ci = mean_ci(&[1.0, 2.0, 3.0]);
        assert_eq!(ci.mean, 2.0);
        let want = 4.302652730 / 3f64.sqrt();
        assert!((ci.half_width.unwrap() - want).abs() < 1e-12);
        assert_eq!(ci.k, 3);
        let one = mean_ci(&[7.0, f64::NAN]);
        assert_eq!((one.mean, one.half_width, one.k), (7.0, None, 1));
        assert!(mean_ci(&[]).mean.is_nan());
    }

    /// The t-interval for the mean of normal samples covers the true mean at its nominal 95%
    /// (within ±2% over 4000 repetitions, where the binomial standard error is 0.34%).
    #[test]
    fn ci_coverage_of_normal_means_is_nominal() {
        let mut rng = Rng(20_240_601);
        for k in [2usize, 5, 10] {
            let reps = 4000;
            let mut covered = 0;
            for _ in 0..reps {
                let values: Vec<f64> = (0..k).map(|_| 10.0 + 3.0 * rng.normal()).collect();
                let ci = mean_ci(&values);
                if ci.low().unwrap() <= 10.0 && 10.0 <= ci.high().unwrap() {
                    covered += 1;
                }
            }
            let rate = covered as f64 / reps as f64;
            assert!((rate - 0.95).abs() < 0.02, "K = {k}: coverage {rate}");
        }
    }

    /// The use the reports make of it: K = 5 trials, each reporting the median of 200
    /// exponential download times. The target is the mean of the per-trial median's sampling
    /// distribution, estimated from 100,000 extra trials with a different stream.
    #[test]
    fn ci_coverage_of_trial_medians_is_nominal() {
        let median_of = |rng: &mut Rng| {
            let v: Vec<f64> = (0..200).map(|_| rng.exponential()).collect();
            quantile(&v, 0.5)
        };
        let mut truth_rng = Rng(7);
        let n_truth = 100_000;
        let truth = (0..n_truth).map(|_| median_of(&mut truth_rng)).sum::<f64>() / n_truth as f64;
        // Close to ln 2, the population median (nearest rank biases it slightly low).
        assert!((truth - std::f64::consts::LN_2).abs() < 0.01, "{truth}");

        let mut rng = Rng(99);
        let reps = 2000;
        let mut covered = 0;
        for _ in 0..reps {
            let medians: Vec<f64> = (0..5).map(|_| median_of(&mut rng)).collect();
            let ci = mean_ci(&medians);
            if ci.low().unwrap() <= truth && truth <= ci.high().unwrap() {
                covered += 1;
            }
        }
        let rate = covered as f64 / reps as f64;
        assert!((rate - 0.95).abs() < 0.02, "coverage {rate}");
    }

    #[test]
    fn mean_cdf_band_averages_quantiles() {
        let a: Vec<f64> = (1..=100).map(f64::from).collect();
        let b: Vec<f64> = a.iter().map(|x| x + 2.0).collect();
        let band = mean_cdf_band(&[a.clone(), b, Vec::new()]);
        assert_eq!(band.len(), 199);
        // Level 0.5: quantiles 50 and 52 -> mean 51, sd sqrt(2), half width t(1) * 1.
        let mid = band.iter().find(|p| p.level == 0.5).unwrap();
        assert_eq!(mid.ci.mean, 51.0);
        assert!((mid.ci.half_width.unwrap() - 12.706204736).abs() < 1e-9);
        let single = mean_cdf_band(&[a]);
        assert!(single.iter().all(|p| p.ci.half_width.is_none()));
        assert!(mean_cdf_band(&[Vec::new()]).is_empty());
    }
}
