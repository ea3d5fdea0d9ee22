//! The latency, jitter and loss model of the user-space switch, kept free of sockets and clocks
//! so that it can be tested (and reasoned about) without root.
//!
//! The kernel this runs on has no `netem` qdisc, so every delay between namespaces is added by
//! the forwarder: it asks a [`DelayLine`] when each frame may leave, and holds it until then.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha12Rng;

/// One direction of a path between two ports.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PathSpec {
    /// Fixed one-way delay.
    pub latency_ns: u64,
    /// Extra delay drawn uniformly from `[0, jitter_ns]` per frame, so the mean one-way delay is
    /// `latency_ns + jitter_ns / 2`.
    pub jitter_ns: u64,
    /// Probability in `[0, 1]` that a frame is dropped.
    pub loss: f64,
}

/// Decides, per frame, whether it is lost and when it may be released.
///
/// All pairs share one random stream: the order in which frames of different pairs arrive is
/// itself not reproducible in an emulation, so per-pair streams would buy nothing, and one
/// stream keeps the state small. Equal seeds and equal call sequences give equal answers.
#[derive(Clone, Debug)]
pub struct DelayLine {
    ports: usize,
    /// Row-major `ports × ports`: `paths[src * ports + dst]`.
    paths: Vec<PathSpec>,
    /// Latest release time handed out per pair, for FIFO order.
    last_release: Vec<u64>,
    allow_reorder: bool,
    rng: ChaCha12Rng,
}

impl DelayLine {
    /// Builds the line from a square matrix (row = source port, column = destination port).
    ///
    /// Without `allow_reorder`, a frame never overtakes an earlier one of the same pair: real
    /// links keep order, and TCP reads reordering as loss, so a jittered path would otherwise
    /// look far lossier than configured. The price is that jitter then mostly stretches gaps
    /// instead of shuffling frames when frames are closer together than the jitter.
    pub fn new(paths: &[Vec<PathSpec>], seed: u64, allow_reorder: bool) -> Result<Self, String> {
        let ports = paths.len();
        let mut flat = Vec::with_capacity(ports * ports);
        for (src, row) in paths.iter().enumerate() {
            if row.len() != ports {
                return Err(format!(
                    "path matrix is not square: row {src} has {} entries, expected {ports}",
                    row.len()
                ));
            }
            for (dst, p) in row.iter().enumerate() {
                if !(0.0..=1.0).contains(&p.loss) {
                    return Err(format!(
                        "path {src}->{dst}: loss {} is not in [0, 1]",
                        p.loss
                    ));
                }
            }
            flat.extend_from_slice(row);
        }
        Ok(DelayLine {
            ports,
            paths: flat,
            last_release: vec![0; ports * ports],
            allow_reorder,
            rng: ChaCha12Rng::seed_from_u64(seed),
        })
    }

    /// Number of ports (the matrix is `ports × ports`).
    pub fn ports(&self) -> usize {
        self.ports
    }

    /// The configured path from `src` to `dst`.
    pub fn path(&self, src: usize, dst: usize) -> PathSpec {
        self.paths[src * self.ports + dst]
    }

    /// A frame from `src` to `dst` arrived at `now_ns`: returns when it may leave, or `None` if
    /// it is lost. Lost frames leave no trace in the FIFO state.
    pub fn admit(&mut self, src: usize, dst: usize, now_ns: u64) -> Option<u64> {
        let i = src * self.ports + dst;
        let p = self.paths[i];
        // Draw only what the path uses, so a loss-free, jitter-free path costs no randomness.
        if p.loss > 0.0 && self.rng.random::<f64>() < p.loss {
            return None;
        }
        let jitter = if p.jitter_ns > 0 {
            self.rng.random_range(0..=p.jitter_ns)
        } else {
            0
        };
        let mut release = now_ns.saturating_add(p.latency_ns).saturating_add(jitter);
        if !self.allow_reorder {
            release = release.max(self.last_release[i]);
            self.last_release[i] = release;
        }
        Some(release)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn line(spec: PathSpec, seed: u64, allow_reorder: bool) -> DelayLine {
        DelayLine::new(&[vec![spec; 2], vec![spec; 2]], seed, allow_reorder).unwrap()
    }

    #[test]
    fn exact_latency_without_jitter() {
        let mut d = line(
            PathSpec {
                latency_ns: 20 * MS,
                jitter_ns: 0,
                loss: 0.0,
            },
            1,
            false,
        );
        for k in 0..1000 {
            let now = k * 17_000;
            assert_eq!(d.admit(0, 1, now), Some(now + 20 * MS));
            assert_eq!(d.admit(1, 0, now), Some(now + 20 * MS));
        }
    }

    #[test]
    fn jitter_bounds_and_mean() {
        let spec = PathSpec {
            latency_ns: 10 * MS,
            jitter_ns: 4 * MS,
            loss: 0.0,
        };
        // Reordering allowed so the FIFO clamp does not bias the draws.
        let mut d = line(spec, 7, true);
        let n = 100_000u64;
        let mut sum = 0u128;
        let (mut lo, mut hi) = (u64::MAX, 0);
        for k in 0..n {
            let now = k * MS;
            let delay = d.admit(0, 1, now).unwrap() - now;
            assert!((10 * MS..=14 * MS).contains(&delay), "delay {delay}");
            lo = lo.min(delay);
            hi = hi.max(delay);
            sum += delay as u128;
        }
        let mean = sum as f64 / n as f64;
        // Uniform on [0, J]: sd J/sqrt(12); allow 4 standard errors.
        let se = 4.0 * MS as f64 / 12f64.sqrt() / (n as f64).sqrt();
        assert!((mean - 12.0 * MS as f64).abs() < 4.0 * se, "mean {mean}");
        // The whole range is used.
        assert!(lo < 10 * MS + MS / 100 && hi > 14 * MS - MS / 100);
    }

    #[test]
    fn loss_rate_matches() {
        let p = 0.02;
        let mut d = line(
            PathSpec {
                latency_ns: MS,
                jitter_ns: 0,
                loss: p,
            },
            42,
            false,
        );
        let n = 100_000;
        let lost = (0..n)
            .filter(|&k| d.admit(1, 0, k * 1000).is_none())
            .count();
        let rate = lost as f64 / n as f64;
        let se = (p * (1.0 - p) / n as f64).sqrt();
        assert!((rate - p).abs() < 4.0 * se, "loss rate {rate}");
    }

    #[test]
    fn no_loss_and_full_loss_are_exact() {
        let mut none = line(PathSpec::default(), 3, false);
        let mut all = line(
            PathSpec {
                loss: 1.0,
                ..PathSpec::default()
            },
            3,
            false,
        );
        for k in 0..10_000 {
            assert!(none.admit(0, 1, k).is_some());
            assert!(all.admit(0, 1, k).is_none());
        }
    }

    fn count_inversions(d: &mut DelayLine) -> usize {
        let mut last = 0;
        let mut inversions = 0;
        // Frames 100 µs apart, jitter 5 ms: without the clamp most neighbours would swap.
        for k in 0..10_000u64 {
            let r = d.admit(0, 1, k * 100_000).unwrap();
            if r < last {
                inversions += 1;
            }
            last = last.max(r);
        }
        inversions
    }

    #[test]
    fn fifo_per_pair_unless_reordering_allowed() {
        let spec = PathSpec {
            latency_ns: 10 * MS,
            jitter_ns: 5 * MS,
            loss: 0.0,
        };
        assert_eq!(count_inversions(&mut line(spec, 9, false)), 0);
        assert!(count_inversions(&mut line(spec, 9, true)) > 1000);
    }

    #[test]
    fn fifo_is_per_pair_only() {
        let mut d = DelayLine::new(
            &[
                vec![
                    PathSpec::default(),
                    PathSpec {
                        latency_ns: 50 * MS,
                        ..PathSpec::default()
                    },
                ],
                vec![
                    PathSpec {
                        latency_ns: MS,
                        ..PathSpec::default()
                    },
                    PathSpec::default(),
                ],
            ],
            0,
            false,
        )
        .unwrap();
        assert_eq!(d.admit(0, 1, 0), Some(50 * MS));
        // The slow 0->1 path must not hold back the fast 1->0 one.
        assert_eq!(d.admit(1, 0, 0), Some(MS));
    }

    #[test]
    fn same_seed_same_answers() {
        let spec = PathSpec {
            latency_ns: 5 * MS,
            jitter_ns: 3 * MS,
            loss: 0.1,
        };
        let run = |seed| {
            let mut d = line(spec, seed, true);
            (0..5000u64)
                .map(|k| d.admit((k % 2) as usize, 1 - (k % 2) as usize, k * 1000))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(11), run(11));
        assert_ne!(run(11), run(12));
    }

    #[test]
    fn rejects_bad_matrices() {
        assert!(DelayLine::new(&[vec![PathSpec::default(); 2]], 0, false).is_err());
        let bad = PathSpec {
            loss: 1.5,
            ..PathSpec::default()
        };
        assert!(DelayLine::new(&[vec![bad]], 0, false).is_err());
    }
}
