//! Bandwidth-weighted relay and path selection (path-spec sections 2.2 and 2.4).

use rand::{Rng, RngExt};

use crate::consensus::{Consensus, Relay, RelayClass};
use crate::flags::RelayFlags;
use crate::weights::{BandwidthWeights, WEIGHT_SCALE};

/// A hop of a three-hop circuit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// First hop: the client's entry guard, the only relay that sees the client's address.
    Guard,
    /// Second hop, between guard and exit.
    Middle,
    /// Last hop, which opens streams to destinations outside Tor.
    Exit,
}

impl Position {
    /// Every position, in circuit order (guard, middle, exit).
    pub const ALL: [Position; 3] = [Position::Guard, Position::Middle, Position::Exit];

    fn index(self) -> usize {
        match self {
            Position::Guard => 0,
            Position::Middle => 1,
            Position::Exit => 2,
        }
    }
}

/// How many weighted draws `choose` spends rejecting excluded relays before switching to an
/// exact scan. Exclusions in practice (a path's other two hops and their /16s and families)
/// cover a small share of the weight, so a draw almost always succeeds on the first try.
const REJECTION_TRIES: usize = 32;

/// Cumulative weights of the relays eligible for one position.
#[derive(Clone, Debug, Default)]
struct Table {
    relays: Vec<usize>,
    /// `cum[i]` = sum of the weights of `relays[..=i]`; strictly increasing since zero-weight
    /// relays are left out.
    cum: Vec<u64>,
}

impl Table {
    fn total(&self) -> u64 {
        self.cum.last().copied().unwrap_or(0)
    }

    fn weight_at(&self, i: usize) -> u64 {
        let below = if i == 0 { 0 } else { self.cum[i - 1] };
        self.cum[i] - below
    }
}

/// Weighted relay choice for each position over one consensus.
///
/// Weights are integers (consensus bandwidth x position weight, the `/ 10000` dropped because it
/// cancels in every ratio), so choices are exact and identical on every platform. A relay's
/// weight for a position:
///
/// * eligible at all only if Running, Valid and Fast (path-spec: clients require Fast for every
///   hop of a general circuit);
/// * Guard: needs the Guard flag (and not MiddleOnly); Wgd if also a usable exit, else Wgg;
/// * Middle: any eligible relay; Wmd, Wmg, Wme or Wmm by its class;
/// * Exit: needs Exit and not BadExit (and not MiddleOnly) and a policy allowing some port;
///   Wed if also a Guard, else Wee.
///
/// Stable and per-port requirements vary per circuit, so they are applied at choice time
/// through the `exclude` predicate rather than baked into the tables.
#[derive(Clone, Debug)]
pub struct PathSelector {
    tables: [Table; 3],
    /// Per relay (index into `consensus.relays`), its integer weight for each position, after
    /// the right shift by `shift`.
    weights: Vec<[u64; 3]>,
    /// Right shift applied to every weight so each position's total fits in `u64`. Zero for any
    /// real network (totals there are around 1e14); only absurd inputs (bandwidths near
    /// `u64::MAX`) need it, at the cost of rounding tiny weights away. `u64` rather than `u128`
    /// arithmetic makes draws several times faster.
    shift: u32,
}

impl PathSelector {
    /// Builds the per-position weight tables for `consensus`'s relays and position weights.
    pub fn new(consensus: &Consensus) -> Self {
        let w = &consensus.weights;
        let raw: Vec<[u128; 3]> = consensus
            .relays
            .iter()
            .map(|r| Position::ALL.map(|pos| relay_weight(r, pos, w)))
            .collect();
        let mut shift = 0u32;
        while shift < 128
            && Position::ALL.iter().any(|p| {
                raw.iter()
                    .map(|x| x[p.index()] >> shift)
                    .try_fold(0u64, |acc, x| u64::try_from(x).ok()?.checked_add(acc))
                    .is_none()
            })
        {
            shift += 1;
        }
        let mut tables: [Table; 3] = Default::default();
        let mut weights = vec![[0u64; 3]; raw.len()];
        for (i, x) in raw.iter().enumerate() {
            for pos in Position::ALL {
                // Fits: the loop above found a shift at which every total does.
                let wt = u64::try_from(x[pos.index()] >> shift).unwrap_or(u64::MAX);
                if wt == 0 {
                    continue;
                }
                weights[i][pos.index()] = wt;
                let t = &mut tables[pos.index()];
                let prev = t.total();
                t.relays.push(i);
                t.cum.push(prev.saturating_add(wt));
            }
        }
        PathSelector {
            tables,
            weights,
            shift,
        }
    }

    /// Selection weight of relay `relay` for `position`, in bandwidth units (consensus bandwidth
    /// x weight / 10000); 0 when ineligible or out of range.
    pub fn weight(&self, relay: usize, position: Position) -> f64 {
        self.weights.get(relay).map_or(0.0, |w| {
            w[position.index()] as f64 * 2f64.powi(self.shift as i32) / f64::from(WEIGHT_SCALE)
        })
    }

    /// Sum of [`weight`](Self::weight) over all relays eligible for `position`.
    pub fn total_weight(&self, position: Position) -> f64 {
        self.tables[position.index()].total() as f64 * 2f64.powi(self.shift as i32)
            / f64::from(WEIGHT_SCALE)
    }

    /// Number of relays with non-zero weight for `position`.
    pub fn eligible_count(&self, position: Position) -> usize {
        self.tables[position.index()].relays.len()
    }

    /// One relay for `position`, chosen with probability proportional to its weight among the
    /// eligible relays for which `exclude` is false; `None` when there are none.
    ///
    /// A draw is a binary search over cumulative weights (O(log n)). If it lands on an excluded
    /// relay it is redrawn, up to a bound; rejection sampling keeps the choice exactly weighted
    /// among allowed relays. When exclusions cover most of the weight the bound is hit and an
    /// exact linear scan over the allowed relays finishes the job, which is equally exact, so
    /// the result never depends on which route was taken except through the RNG stream.
    pub fn choose<R: Rng + ?Sized>(
        &self,
        position: Position,
        rng: &mut R,
        exclude: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let t = &self.tables[position.index()];
        let total = t.total();
        if total == 0 {
            return None;
        }
        for _ in 0..REJECTION_TRIES {
            let x = rng.random_range(0..total);
            let k = t.cum.partition_point(|&c| c <= x);
            let relay = t.relays[k.min(t.relays.len() - 1)];
            if !exclude(relay) {
                return Some(relay);
            }
        }
        let allowed: u64 = (0..t.relays.len())
            .filter(|&i| !exclude(t.relays[i]))
            .map(|i| t.weight_at(i))
            .sum();
        if allowed == 0 {
            return None;
        }
        let mut x = rng.random_range(0..allowed);
        for i in 0..t.relays.len() {
            if exclude(t.relays[i]) {
                continue;
            }
            let w = t.weight_at(i);
            if x < w {
                return Some(t.relays[i]);
            }
            x -= w;
        }
        None
    }

    /// A path `[guard, middle, exit]` for a stream to `port` (path-spec order: exit first, then
    /// guard, then middle).
    ///
    /// * Exit: weighted among exits whose policy allows `port`, Stable if `need_stable`.
    /// * Guard: the first of `guards` (the client's primary guards, in order) that does not
    ///   conflict with the exit; with `guards` empty, a weighted choice (Stable if
    ///   `need_stable`, as tor did before guard lists). A primary guard is not checked for
    ///   Stable: tor's guard filter does not, since the Guard flag already demands uptime.
    ///   Indices outside the consensus are skipped.
    /// * Middle: weighted, not conflicting with either, Stable if `need_stable`.
    ///
    /// No two hops may be the same relay, share a /16, or share a family.
    ///
    /// If every listed guard conflicts with the chosen exit (e.g. a single guard that is also
    /// the exit picked), the exit is redrawn among exits compatible with the first listed guard
    /// that has any, so a client never leaves its guard set; tor would instead fall back to
    /// further guards in its sample, which this API does not carry.
    ///
    /// Returns `None` when no valid path exists, or when `consensus` is not the one this
    /// selector was built from (detected by relay count).
    pub fn choose_path<R: Rng + ?Sized>(
        &self,
        consensus: &Consensus,
        guards: &[usize],
        port: u16,
        need_stable: bool,
        rng: &mut R,
    ) -> Option<[usize; 3]> {
        let relays = &consensus.relays;
        if relays.len() != self.weights.len() {
            return None;
        }
        let stable_ok = |i: usize| !need_stable || relays[i].flags.contains(RelayFlags::STABLE);
        let exit_ok = |i: usize| relays[i].exit_policy.allows_port(port) && stable_ok(i);
        let clash = |a: usize, b: usize| a == b || relays[a].conflicts_with(&relays[b]);
        let guards: Vec<usize> = guards
            .iter()
            .copied()
            .filter(|&g| g < relays.len())
            .collect();

        let (exit, guard) = if guards.is_empty() {
            let exit = self.choose(Position::Exit, rng, |i| !exit_ok(i))?;
            let guard = self.choose(Position::Guard, rng, |i| clash(i, exit) || !stable_ok(i))?;
            (exit, guard)
        } else {
            let exit = self.choose(Position::Exit, rng, |i| !exit_ok(i))?;
            match guards.iter().copied().find(|&g| !clash(g, exit)) {
                Some(g) => (exit, g),
                None => guards.iter().copied().find_map(|g| {
                    self.choose(Position::Exit, rng, |i| !exit_ok(i) || clash(i, g))
                        .map(|e| (e, g))
                })?,
            }
        };
        let middle = self.choose(Position::Middle, rng, |i| {
            clash(i, exit) || clash(i, guard) || !stable_ok(i)
        })?;
        Some([guard, middle, exit])
    }

    /// Primary guards for a new client: up to `n` distinct guards chosen in turn by guard
    /// weight, none sharing a /16 or family with an earlier pick (so any two of them can serve
    /// the same client interchangeably). Fewer than `n` when the network runs out.
    pub fn choose_guards<R: Rng + ?Sized>(
        &self,
        consensus: &Consensus,
        n: usize,
        rng: &mut R,
    ) -> Vec<usize> {
        let relays = &consensus.relays;
        let mut chosen: Vec<usize> = Vec::with_capacity(n);
        if relays.len() != self.weights.len() {
            return chosen;
        }
        while chosen.len() < n {
            let pick = self.choose(Position::Guard, rng, |i| {
                chosen
                    .iter()
                    .any(|&g| g == i || relays[g].conflicts_with(&relays[i]))
            });
            match pick {
                Some(g) => chosen.push(g),
                None => break,
            }
        }
        chosen
    }
}

/// Integer weight of relay `r` for `pos` (bandwidth x W), 0 when not eligible.
fn relay_weight(r: &Relay, pos: Position, w: &BandwidthWeights) -> u128 {
    let f = r.flags;
    if !f.is_usable() || !f.contains(RelayFlags::FAST) {
        return 0;
    }
    let middle_only = f.contains(RelayFlags::MIDDLE_ONLY);
    let class = r.class();
    let factor = match pos {
        Position::Guard => {
            if middle_only {
                return 0;
            }
            match class {
                RelayClass::GuardExit => w.wgd,
                RelayClass::GuardOnly => w.wgg,
                _ => return 0,
            }
        }
        Position::Middle => match class {
            RelayClass::GuardExit => w.wmd,
            RelayClass::GuardOnly => w.wmg,
            RelayClass::ExitOnly => w.wme,
            RelayClass::Middle => w.wmm,
        },
        Position::Exit => {
            if middle_only || !r.exit_policy.allows_any() {
                return 0;
            }
            match class {
                RelayClass::GuardExit => w.wed,
                RelayClass::ExitOnly => w.wee,
                _ => return 0,
            }
        }
    };
    u128::from(r.bandwidth) * u128::from(factor)
}
