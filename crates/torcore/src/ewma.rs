//! EWMA circuit prioritisation (circuitmux_ewma.c).
//!
//! Each channel sends next from the active circuit that has sent the fewest cells recently,
//! where a cell's weight decays by half every `CircuitPriorityHalflife`. That lets interactive
//! circuits overtake bulk ones without starving the bulk ones for long.
//!
//! Decaying every circuit continuously would be expensive, so (like Tor) time is cut into ticks
//! (10 s) and counts are kept relative to a reference tick: a cell sent a fraction `f` into the
//! current tick adds `F^-f` (F = the per-tick decay factor), and the whole set is rescaled only
//! when the reference tick moves. Within one mux all active circuits share the reference, so
//! they compare without any arithmetic.

use crate::params::TorParams;
use onionlab_engine::time::{secs_f64, SimDuration, SimTime};

/// Tick arithmetic shared by every circuit on a relay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EwmaClock {
    origin: SimTime,
    tick: SimDuration,
    /// Per-tick decay factor, 0.5^(tick / halflife).
    factor: f64,
}

impl EwmaClock {
    /// Ticks start at `now`. Tor starts its tick count at a random offset; any fixed origin
    /// only shifts when rescaling happens, not the ordering.
    pub fn new(halflife_s: f64, tick_s: f64, now: SimTime) -> Self {
        assert!(
            halflife_s > 0.0 && tick_s > 0.0,
            "EWMA half-life and tick must be positive"
        );
        let tick = secs_f64(tick_s).max(1);
        Self {
            origin: now,
            tick,
            factor: (std::f64::consts::LN_2 * -(tick_s / halflife_s)).exp(),
        }
    }

    /// A clock with the half-life (`circuit_priority_halflife_s`) and tick (`ewma_tick_s`)
    /// of `params`, its ticks starting at `now`.
    pub fn from_params(params: &TorParams, now: SimTime) -> Self {
        Self::new(params.circuit_priority_halflife_s, params.ewma_tick_s, now)
    }

    /// The per-tick decay factor F.
    pub fn factor(&self) -> f64 {
        self.factor
    }

    /// The tick `now` falls in, and how far into it (0..1).
    pub fn tick_and_fraction(&self, now: SimTime) -> (u64, f64) {
        let since = now.saturating_sub(self.origin);
        let tick = since / self.tick;
        let frac = (since % self.tick) as f64 / self.tick as f64;
        (tick, frac)
    }

    /// The number of the tick `now` falls in, counted from the clock's origin.
    pub fn tick(&self, now: SimTime) -> u64 {
        now.saturating_sub(self.origin) / self.tick
    }

    /// What a cell sent at `now` adds to its circuit's count (see [`CellWeight`]).
    pub fn cell_weight(&self, now: SimTime) -> CellWeight {
        let (tick, frac) = self.tick_and_fraction(now);
        CellWeight {
            tick,
            unit: self.factor.powf(-frac),
        }
    }

    /// Multiplier converting a count referenced to `from` into one referenced to `to`.
    fn scale(&self, from: u64, to: u64) -> f64 {
        if from == to {
            1.0
        } else {
            self.factor.powf(to as f64 - from as f64)
        }
    }
}

/// What one cell sent at a given instant adds to its circuit's count (`unit`), and the tick
/// that count is referenced to. A scheduler run sends all its cells at one instant, so it
/// works this out once for all of them: a power per cell was 2% of a large network's
/// instructions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CellWeight {
    tick: u64,
    unit: f64,
}

/// One circuit's decayed cell count, referenced to `tick`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CircuitEwma {
    count: f64,
    tick: u64,
}

impl CircuitEwma {
    /// A circuit that has sent nothing yet, referenced to `now`'s tick.
    pub fn new(clock: &EwmaClock, now: SimTime) -> Self {
        Self {
            count: 0.0,
            tick: clock.tick(now),
        }
    }

    fn rescale_to(&mut self, clock: &EwmaClock, tick: u64) {
        self.count *= clock.scale(self.tick, tick);
        self.tick = tick;
    }

    /// Records `n` cells sent at `now`.
    pub fn note_cells(&mut self, clock: &EwmaClock, n: u32, now: SimTime) {
        self.note_weighted(clock, n, &clock.cell_weight(now));
    }

    /// As [`CircuitEwma::note_cells`], with the instant's weight already worked out by
    /// `clock`: what a scheduler run that writes many cells at one instant calls, so that a
    /// cell costs no power (IMUX counts every cell in its connection's EWMA).
    pub fn note_weighted(&mut self, clock: &EwmaClock, n: u32, weight: &CellWeight) {
        self.rescale_to(clock, weight.tick);
        self.count += n as f64 * weight.unit;
    }

    /// The count in units of cells sent at the start of `now`'s tick: comparable across
    /// circuits at the same `now`. Old cells decay in whole ticks, as in Tor.
    pub fn value(&self, clock: &EwmaClock, now: SimTime) -> f64 {
        self.count * clock.scale(self.tick, clock.tick(now))
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry<C> {
    circ: C,
    ewma: CircuitEwma,
}

/// One channel's circuit mux: which circuit with queued cells sends next.
///
/// Active circuits live in a `Vec` scanned linearly: a channel rarely has more than a handful
/// of circuits with cells queued at once, and a scan of a few entries beats a heap's
/// bookkeeping. Circuits that drained keep their history in a second `Vec` sorted by id, so a
/// bulk circuit whose queue briefly empties does not come back looking quiet.
///
/// `repr(C)` with the active list first: "has it anything queued?" is the first thing a
/// scheduler run asks of a channel, and this puts the answer in the channel's first cache line
/// (see the relay's `Channel`).
///
/// `C` names a circuit in its owner's table; ties go to the lower id.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct CircuitMux<C = u32> {
    active: Vec<Entry<C>>,
    /// The tick all active counts are referenced to.
    ref_tick: u64,
    clock: EwmaClock,
    idle: Vec<Entry<C>>,
}

impl<C: Copy + Ord> CircuitMux<C> {
    /// A mux with no circuits, using `clock`, its reference tick `now`'s.
    pub fn new(clock: &EwmaClock, now: SimTime) -> Self {
        Self {
            clock: *clock,
            ref_tick: clock.tick(now),
            active: Vec::new(),
            idle: Vec::new(),
        }
    }

    fn active_pos(&self, circ: C) -> Option<usize> {
        self.active.iter().position(|e| e.circ == circ)
    }

    /// The circuit now has cells queued. Unknown circuits start with a count of zero.
    pub fn add_active(&mut self, circ: C) {
        if self.active_pos(circ).is_some() {
            return;
        }
        let mut entry = match self.idle.binary_search_by_key(&circ, |e| e.circ) {
            Ok(i) => self.idle.remove(i),
            Err(_) => Entry {
                circ,
                ewma: CircuitEwma {
                    count: 0.0,
                    tick: self.ref_tick,
                },
            },
        };
        entry.ewma.rescale_to(&self.clock, self.ref_tick);
        self.active.push(entry);
    }

    /// The circuit's queue is empty: it leaves the active set but keeps its history.
    pub fn remove(&mut self, circ: C) {
        if let Some(i) = self.active_pos(circ) {
            let entry = self.active.swap_remove(i);
            self.insert_idle(entry);
        }
    }

    /// The circuit is gone from the channel: forget it entirely.
    pub fn detach(&mut self, circ: C) {
        if let Some(i) = self.active_pos(circ) {
            self.active.swap_remove(i);
        } else if let Ok(i) = self.idle.binary_search_by_key(&circ, |e| e.circ) {
            self.idle.remove(i);
        }
    }

    fn insert_idle(&mut self, entry: Entry<C>) {
        match self.idle.binary_search_by_key(&entry.circ, |e| e.circ) {
            Ok(i) => self.idle[i] = entry,
            Err(i) => self.idle.insert(i, entry),
        }
    }

    /// The active circuit to send from next: lowest count, ties to the lowest circuit id.
    /// `now` does not change the order, since all active counts share one reference tick.
    pub fn best(&self, _now: SimTime) -> Option<C> {
        self.best_entry().map(|e| e.circ)
    }

    fn best_entry(&self) -> Option<&Entry<C>> {
        let mut best: Option<&Entry<C>> = None;
        for e in &self.active {
            best = match best {
                None => Some(e),
                Some(b) => {
                    if e.ewma.count < b.ewma.count
                        || (e.ewma.count == b.ewma.count && e.circ < b.circ)
                    {
                        Some(e)
                    } else {
                        Some(b)
                    }
                }
            };
        }
        best
    }

    /// The best circuit and its count at the instant `weight` was worked out for, for
    /// comparing channels with each other (KIST picks the channel whose best circuit is
    /// quietest). A scheduler run has the weight at hand, so a cell written costs neither a
    /// division for the tick nor a second search for the circuit.
    pub fn best_at(&self, weight: &CellWeight) -> Option<(C, f64)> {
        let e = self.best_entry()?;
        Some((
            e.circ,
            e.ewma.count * self.clock.scale(e.ewma.tick, weight.tick),
        ))
    }

    /// Records `n` cells sent from `circ` at `now`.
    pub fn note_sent(&mut self, circ: C, n: u32, now: SimTime) {
        self.note_sent_weighted(circ, n, self.clock.cell_weight(now));
    }

    /// As [`CircuitMux::note_sent`], with the instant's weight already worked out by the
    /// clock this mux was made with.
    pub fn note_sent_weighted(&mut self, circ: C, n: u32, weight: CellWeight) {
        let tick = weight.tick;
        if tick != self.ref_tick {
            let f = self.clock.scale(self.ref_tick, tick);
            for e in &mut self.active {
                e.ewma.count *= f;
                e.ewma.tick = tick;
            }
            self.ref_tick = tick;
        }
        let inc = n as f64 * weight.unit;
        if let Some(i) = self.active_pos(circ) {
            self.active[i].ewma.count += inc;
        } else if let Ok(i) = self.idle.binary_search_by_key(&circ, |e| e.circ) {
            let ewma = &mut self.idle[i].ewma;
            ewma.rescale_to(&self.clock, tick);
            ewma.count += inc;
        } else {
            self.insert_idle(Entry {
                circ,
                ewma: CircuitEwma { count: inc, tick },
            });
        }
    }

    /// A circuit's count at `now` (active or idle), in units of the current tick.
    pub fn value(&self, circ: C, now: SimTime) -> Option<f64> {
        let e = match self.active_pos(circ) {
            Some(i) => &self.active[i],
            None => {
                let i = self.idle.binary_search_by_key(&circ, |e| e.circ).ok()?;
                &self.idle[i]
            }
        };
        Some(e.ewma.value(&self.clock, now))
    }

    /// Every circuit the mux knows (active or idle) with its count at `now`.
    pub fn values(&self, now: SimTime) -> impl Iterator<Item = (C, f64)> + '_ {
        self.active
            .iter()
            .chain(self.idle.iter())
            .map(move |e| (e.circ, e.ewma.value(&self.clock, now)))
    }

    /// Where `circ` stands among every circuit the mux knows (active or idle), quietest first:
    /// `(circuits quieter than it, circuits in all)`. For designs that place circuits by their
    /// rank (IMUX's EWMA mapping); linear in the circuits of the channel, so the model ranks
    /// them all at once with [`ranks`](Self::ranks) and this states what a rank is.
    #[cfg(test)]
    pub fn rank(&self, circ: C, now: SimTime) -> Option<(usize, usize)> {
        let own = self.value(circ, now)?;
        let all = self.active.iter().chain(self.idle.iter());
        let quieter = all
            .clone()
            .filter(|e| e.circ != circ && e.ewma.value(&self.clock, now) < own)
            .count();
        Some((quieter, self.active.len() + self.idle.len()))
    }

    /// Every circuit's rank at once (where it stands among every circuit the mux knows,
    /// quietest first), as `(circuit, circuits quieter than it)` sorted by circuit, into
    /// `out`; `scratch` is working space. O(n log n) for the channel, where ranking its
    /// circuits one by one costs O(n²).
    pub fn ranks(&self, now: SimTime, scratch: &mut Vec<(f64, C)>, out: &mut Vec<(C, u32)>) {
        scratch.clear();
        scratch.extend(
            self.active
                .iter()
                .chain(self.idle.iter())
                .map(|e| (e.ewma.value(&self.clock, now), e.circ)),
        );
        scratch.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        out.clear();
        let mut first_of_value = 0;
        for (i, &(value, circ)) in scratch.iter().enumerate() {
            if i > 0 && scratch[i - 1].0 < value {
                first_of_value = i;
            }
            out.push((circ, first_of_value as u32));
        }
        out.sort_unstable_by_key(|&(circ, _)| circ);
    }

    /// Whether `circ` has cells queued (is in the active set).
    pub fn is_active(&self, circ: C) -> bool {
        self.active_pos(circ).is_some()
    }

    /// Circuits with queued cells.
    pub fn active_len(&self) -> usize {
        self.active.len()
    }

    /// Whether no circuit has cells queued: the channel has nothing to send.
    pub fn is_empty(&self) -> bool {
        self.active.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionlab_engine::time::{millis, secs};

    #[test]
    fn ranking_all_circuits_at_once_agrees_with_ranking_each() {
        let clock = clock();
        let mut mux = CircuitMux::new(&clock, 0);
        // Circuits 0..8 sending different amounts, two of them equally (a tie), one idle.
        for circ in 0..8u32 {
            mux.add_active(circ);
        }
        for (circ, cells) in [
            (0, 5),
            (1, 1),
            (2, 9),
            (3, 5),
            (4, 0),
            (5, 30),
            (6, 2),
            (7, 12),
        ] {
            mux.note_sent(circ, cells, millis(10));
        }
        mux.remove(4);
        let now = millis(40);
        let (mut scratch, mut all) = (Vec::new(), Vec::new());
        mux.ranks(now, &mut scratch, &mut all);
        assert_eq!(all.len(), 8);
        for &(circ, rank) in &all {
            assert_eq!(
                mux.rank(circ, now),
                Some((rank as usize, 8)),
                "circuit {circ}"
            );
        }
        // The tie (circuits 0 and 3) shares a rank.
        let rank_of = |c: u32| all.iter().find(|e| e.0 == c).unwrap().1;
        assert_eq!(rank_of(0), rank_of(3));
        assert_eq!(rank_of(4), 0);
    }

    fn clock() -> EwmaClock {
        EwmaClock::from_params(&TorParams::default(), 0)
    }

    #[test]
    fn factor_is_half_per_half_life() {
        let c = clock();
        assert!(
            (c.factor().powi(3) - 0.5).abs() < 1e-12,
            "3 ticks of 10 s = 30 s"
        );
    }

    #[test]
    fn decay_halves_the_value_after_one_half_life() {
        let c = clock();
        let mut e = CircuitEwma::new(&c, 0);
        e.note_cells(&c, 100, secs(20));
        assert!((e.value(&c, secs(20)) - 100.0).abs() < 1e-9);
        assert!((e.value(&c, secs(50)) - 50.0).abs() < 1e-9);
        assert!((e.value(&c, secs(80)) - 25.0).abs() < 1e-9);
        // Decay is per tick: still 50 until the next tick starts.
        assert!((e.value(&c, secs(59)) - 50.0).abs() < 1e-9);
    }

    #[test]
    fn later_cells_in_a_tick_weigh_more() {
        let c = clock();
        let mut early = CircuitEwma::new(&c, 0);
        let mut late = CircuitEwma::new(&c, 0);
        early.note_cells(&c, 10, secs(10));
        late.note_cells(&c, 10, secs(15));
        let ratio = late.value(&c, secs(15)) / early.value(&c, secs(15));
        // Half a tick later: F^-0.5 = 2^(1/6).
        assert!((ratio - 2f64.powf(1.0 / 6.0)).abs() < 1e-12);
    }

    #[test]
    fn quiet_circuit_overtakes_busy_backlog() {
        let c = clock();
        let mut mux = CircuitMux::new(&c, 0);
        let busy = 7;
        let quiet = 9;
        mux.add_active(busy);
        // The busy circuit sent 1000 cells over the last second and still has a backlog.
        for i in 0..1000u64 {
            let t = secs(4) + millis(i);
            assert_eq!(mux.best(t), Some(busy));
            mux.note_sent(busy, 1, t);
        }
        // The quiet circuit wakes up with 10 cells.
        let mut quiet_left = 10;
        mux.add_active(quiet);
        let mut order = Vec::new();
        let mut t = secs(5);
        while quiet_left > 0 {
            let c = mux.best(t).unwrap();
            order.push(c);
            mux.note_sent(c, 1, t);
            if c == quiet {
                quiet_left -= 1;
                if quiet_left == 0 {
                    mux.remove(quiet);
                }
            }
            t += millis(1);
        }
        assert_eq!(
            order,
            vec![quiet; 10],
            "all quiet cells before the busy circuit's next"
        );
        assert_eq!(mux.best(t), Some(busy));
    }

    #[test]
    fn history_survives_idle_periods_and_decays() {
        let c = clock();
        let mut mux = CircuitMux::new(&c, 0);
        mux.add_active(1);
        mux.add_active(2);
        for _ in 0..100 {
            mux.note_sent(1, 1, 0);
        }
        mux.remove(1);
        assert!(!mux.is_active(1));
        mux.add_active(1);
        assert_eq!(
            mux.best(secs(1)),
            Some(2),
            "drained circuit keeps its count"
        );
        // Circuit 2 sends 30 cells 60 s later; circuit 1's 100 have decayed to 25.
        for _ in 0..30 {
            mux.note_sent(2, 1, secs(60));
        }
        assert_eq!(mux.best(secs(60)), Some(1));
        let v1 = mux.value(1, secs(60)).unwrap();
        assert!((v1 - 25.0).abs() < 1e-6, "{v1}");
        mux.detach(1);
        assert_eq!(mux.value(1, secs(60)), None);
        assert_eq!(mux.best(secs(60)), Some(2));
    }

    #[test]
    fn ties_go_to_the_lowest_circuit_id() {
        let c = clock();
        let mut mux = CircuitMux::new(&c, 0);
        for id in [30, 10, 20] {
            mux.add_active(id);
        }
        assert_eq!(mux.best(0), Some(10));
        mux.note_sent(10, 1, 0);
        assert_eq!(mux.best(0), Some(20));
        mux.remove(20);
        assert_eq!(mux.best(0), Some(30));
        assert_eq!(mux.active_len(), 2);
    }
}
