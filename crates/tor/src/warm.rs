//! The channels between relays that a live network has open when a run starts.
//!
//! tor keeps a channel between two relays until it has carried no circuit for 3/4 to 5/4 of
//! the consensus's `nf_conntimeout_relays` (an hour by default), so on the live network two
//! relays are connected wherever a circuit passed between them lately. A simulated network
//! starts with no channel at all, and the first circuits through each pair of relays wait for
//! a TCP connection and a link handshake that the live network's would not; the larger the
//! network, the more pairs, and the longer its extends stay cold.
//!
//! With `tor.warm_channels`, each relay opens at its start the channels that the run's own
//! clients would have left open. Circuits are drawn as the clients draw them (exit, guard and
//! middle by their weights, with tor's /16 and family rules), as many as the clients build at
//! their rate over the window in which a circuit's channels can still be open at the start: a
//! circuit lives about its client's `MaxCircuitDirtiness` and then its channels idle for
//! their timeout. A pair of relays is connected if one of the drawn circuits passed between
//! them and closed less than that pair's timeout (drawn as tor draws it) before the start.
//! The relay that extended the first such circuit opens the channel, as it would have.
//!
//! What this leaves out: the guard a circuit starts at is drawn by guard weight for every
//! circuit, where each live user keeps its own guards (over many users the two come to the
//! same shares), and circuits that relays build themselves (reachability tests, bandwidth
//! scanners' measurements) add no pairs.

use std::collections::HashMap;

use onionlab_engine::time::NANOS_PER_SEC;
use onionlab_netdir::{Consensus, PathSelector};
use onionlab_traffic::{Workload, CIRCUITS_PER_USER_PER_10_MIN};
use rand::{Rng, RngExt};

use crate::world::HTTP_PORT;

/// Clients that build circuits at the same rate and keep each for the same time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CircuitSource {
    /// Circuits these clients build per second, together.
    pub circuits_per_second: f64,
    /// How long each of their circuits stays open, in seconds: tor closes a used circuit
    /// once it is older than `MaxCircuitDirtiness` and carries no stream.
    pub lifetime_s: f64,
}

impl CircuitSource {
    /// The circuits a client host running `workload` builds, with `dirtiness_s` its
    /// `MaxCircuitDirtiness`. A `markov` host's users each start [`CIRCUITS_PER_USER_PER_10_MIN`]
    /// sessions every 10 minutes, each on a circuit of its own; a `perf` client builds a
    /// circuit for each download at most once per dirtiness period; the other workloads keep
    /// one circuit busy and replace it once it is dirty.
    pub fn of_client(workload: &Workload, dirtiness_s: f64) -> Self {
        let dirtiness_s = dirtiness_s.max(1.0);
        let circuits_per_second = match workload {
            Workload::Markov(m) => f64::from(m.users) * CIRCUITS_PER_USER_PER_10_MIN / 600.0,
            Workload::Perf { interval, .. } => {
                1.0 / (*interval as f64 / NANOS_PER_SEC as f64).max(dirtiness_s)
            }
            Workload::Web { .. } | Workload::Bulk { .. } | Workload::Upload { .. } => {
                1.0 / dirtiness_s
            }
        };
        CircuitSource {
            circuits_per_second,
            lifetime_s: dirtiness_s,
        }
    }
}

/// Which relays each relay opens a channel to at its start (indices into
/// `consensus.relays`, each list sorted): every pair of relays that a circuit of `sources`
/// passed between and that would still be connected, with `idle_timeout_s` tor's
/// `nf_conntimeout_relays` (see the module documentation).
pub fn warm_channels<R: Rng + ?Sized>(
    consensus: &Consensus,
    selector: &PathSelector,
    sources: &[CircuitSource],
    idle_timeout_s: f64,
    rng: &mut R,
) -> Vec<Vec<u32>> {
    // For each pair (lower index, higher index): the shortest time any drawn circuit through
    // it had been closed at the start (0 while still open), and the relay that extended the
    // first one drawn.
    let mut pairs: HashMap<(u32, u32), (f64, u32)> = HashMap::new();
    let longest_timeout = 1.25 * idle_timeout_s;
    for source in sources {
        let window = source.lifetime_s + longest_timeout;
        let circuits = (source.circuits_per_second * window).round() as u64;
        for _ in 0..circuits {
            let age = rng.random::<f64>() * window;
            let closed_for = (age - source.lifetime_s).max(0.0);
            let Some([guard, middle, exit]) =
                selector.choose_path(consensus, &[], HTTP_PORT, false, rng)
            else {
                // No path exists at all (no exit, say): the clients build no circuit either,
                // so nothing would have warmed the relays.
                return vec![Vec::new(); consensus.relays.len()];
            };
            for (from, to) in [(guard, middle), (middle, exit)] {
                let (from, to) = (from as u32, to as u32);
                let key = (from.min(to), from.max(to));
                let entry = pairs.entry(key).or_insert((f64::INFINITY, from));
                entry.0 = entry.0.min(closed_for);
            }
        }
    }
    // Each pair's idle timeout is drawn in the pairs' order, so that the outcome does not
    // depend on the map's.
    let mut pairs: Vec<((u32, u32), (f64, u32))> = pairs.into_iter().collect();
    pairs.sort_unstable_by_key(|&(key, _)| key);
    let mut opens = vec![Vec::new(); consensus.relays.len()];
    for ((a, b), (closed_for, from)) in pairs {
        let timeout = idle_timeout_s * (0.75 + 0.5 * rng.random::<f64>());
        if closed_for < timeout {
            let to = if from == a { b } else { a };
            opens[from as usize].push(to);
        }
    }
    opens
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::testing::descriptor;
    use onionlab_engine::host_rng;
    use onionlab_netdir::{ExitPolicy, RelayFlags};

    fn consensus(guards: u8, middles: u8, exits: u8) -> Consensus {
        let mut relays = Vec::new();
        let mut n = 0u8;
        let mut add = |count: u8, flags: RelayFlags, policy: &str| {
            for _ in 0..count {
                n += 1;
                relays.push(descriptor(
                    &format!("r{n}"),
                    n,
                    flags,
                    ExitPolicy::parse(policy).unwrap(),
                ));
            }
        };
        add(guards, RelayFlags::GUARD, "reject 1-65535");
        add(middles, RelayFlags::empty(), "reject 1-65535");
        add(exits, RelayFlags::EXIT, "accept 80,443");
        Consensus::from_relays(relays)
    }

    fn source(per_hour: f64, lifetime_s: f64) -> CircuitSource {
        CircuitSource {
            circuits_per_second: per_hour / 3600.0,
            lifetime_s,
        }
    }

    #[test]
    fn a_busy_three_relay_network_starts_with_both_pairs_connected_by_the_extending_relay() {
        let c = consensus(1, 1, 1);
        let s = PathSelector::new(&c);
        let opens = warm_channels(
            &c,
            &s,
            &[source(60.0, 600.0)],
            3600.0,
            &mut host_rng(1, 0, 0),
        );
        assert_eq!(opens, vec![vec![1], vec![2], vec![]]);
    }

    #[test]
    fn no_circuits_leave_every_relay_cold() {
        let c = consensus(1, 1, 1);
        let s = PathSelector::new(&c);
        let opens = warm_channels(
            &c,
            &s,
            &[source(0.0, 600.0)],
            3600.0,
            &mut host_rng(1, 0, 0),
        );
        assert!(opens.iter().all(Vec::is_empty));
    }

    /// With one guard, one exit and `m` equal middles, a circuit takes a given middle with
    /// probability 1/m. A pair guard–middle is connected if a circuit through it closed less
    /// than its timeout T ago or is still open: over a Poisson stream of rate λ/m through the
    /// pair, with circuits open for L, the chance is 1 − exp(−λ/m · (L + T)); T is uniform
    /// on [3/4, 5/4] of the timeout, so the expectation is the mean of that over T.
    #[test]
    fn the_share_of_pairs_connected_follows_the_closed_form() {
        let middles = 200u8;
        let c = consensus(1, middles, 1);
        let s = PathSelector::new(&c);
        let (per_hour, lifetime, timeout) = (150.0, 600.0, 3600.0);
        let m = f64::from(middles);
        let steps = 1000;
        let expected = (0..steps)
            .map(|i| {
                let t = timeout * (0.75 + 0.5 * (i as f64 + 0.5) / steps as f64);
                1.0 - (-(per_hour / 3600.0) / m * (lifetime + t)).exp()
            })
            .sum::<f64>()
            / steps as f64;
        let mut connected = 0usize;
        let trials = 20;
        for seed in 0..trials {
            let opens = warm_channels(
                &c,
                &s,
                &[source(per_hour, lifetime)],
                timeout,
                &mut host_rng(seed, 0, 0),
            );
            connected += opens[0].len();
        }
        let share = connected as f64 / (trials as f64 * m);
        // About 0.58 of 4,000 pairs: the standard error of the share is under 0.01.
        assert!(
            (share - expected).abs() < 0.03,
            "{share:.3} of the guard's pairs connected, closed form {expected:.3}"
        );
    }

    #[test]
    fn the_rate_of_each_workload() {
        let perf = Workload::Perf {
            size_bytes: 1,
            interval: 60 * NANOS_PER_SEC,
            timeout: NANOS_PER_SEC,
        };
        assert_eq!(
            CircuitSource::of_client(&perf, 60.0).circuits_per_second,
            1.0 / 60.0
        );
        assert_eq!(
            CircuitSource::of_client(&perf, 600.0).circuits_per_second,
            1.0 / 600.0
        );
        let web = Workload::web_default();
        let s = CircuitSource::of_client(&web, 600.0);
        assert_eq!((s.circuits_per_second, s.lifetime_s), (1.0 / 600.0, 600.0));
    }
}
