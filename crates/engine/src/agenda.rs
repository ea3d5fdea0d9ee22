//! A worker's hosts by the time of their next own event, filed by slice of simulated time.
//!
//! Each round takes the hosts whose own events fall due in it. A binary heap of (time, host)
//! did that at about 1.4% of web-6876's time: every pop sifts an entry down the whole heap,
//! thousands of entries deep, whose lower levels have left the cache since the last round. As
//! the message calendar does for messages, the agenda files each entry under the slice of
//! time it falls in (a slice is as wide as a run of the agenda's hosts), so a round takes the
//! entries of its slice as they lie; entries beyond the ring wait in a heap, which only the
//! far ones (a client's next download minutes ahead, a relay's sampling timer) go through.
//!
//! Entries are never removed early: one whose host has since moved its next event is stale,
//! and the round that takes it skips it (the caller checks). The earliest time the agenda
//! reports may therefore be a stale entry's, which can only make a round start earlier than
//! needed, never later; results do not depend on where rounds start.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::time::{SimDuration, SimTime};
use crate::HostId;

/// Slices the ring covers.
const SLICES: u64 = 512;

pub(crate) struct Agenda {
    width: SimDuration,
    /// The lowest slice the ring holds.
    base: u64,
    /// `slices[s % SLICES]`: the entries due in slice `s`, for `s` in `base..base + SLICES`.
    slices: Vec<Vec<(SimTime, HostId)>>,
    /// The earliest time filed in each slice (`SimTime::MAX` when empty).
    earliest: Vec<SimTime>,
    /// Entries due at or after slice `base + SLICES`.
    far: BinaryHeap<Reverse<(SimTime, HostId)>>,
}

impl Agenda {
    /// An empty agenda of slices `width` wide, whose first round starts at `start`.
    pub(crate) fn new(width: SimDuration, start: SimTime) -> Self {
        assert!(width > 0, "an agenda needs a positive slice width");
        Self {
            width,
            base: start / width,
            slices: (0..SLICES).map(|_| Vec::new()).collect(),
            earliest: vec![SimTime::MAX; SLICES as usize],
            far: BinaryHeap::new(),
        }
    }

    /// Files `host` under `time`, which must not lie before the current round's slice.
    pub(crate) fn push(&mut self, time: SimTime, host: HostId) {
        let slice = time / self.width;
        debug_assert!(
            slice >= self.base,
            "an entry filed before the current round"
        );
        if slice >= self.base + SLICES {
            self.far.push(Reverse((time, host)));
            return;
        }
        let i = (slice % SLICES) as usize;
        self.earliest[i] = self.earliest[i].min(time);
        self.slices[i].push((time, host));
    }

    /// Hands every entry due before `end` to `due`, for the round that starts at `start`
    /// (none may be due before `start`).
    pub(crate) fn take_due(
        &mut self,
        start: SimTime,
        end: SimTime,
        mut due: impl FnMut(SimTime, HostId),
    ) {
        debug_assert!(start < end);
        self.advance(start / self.width);
        for slice in self.base..=(end - 1) / self.width {
            if slice >= self.base + SLICES {
                break;
            }
            let i = (slice % SLICES) as usize;
            if self.earliest[i] >= end {
                continue;
            }
            if (slice + 1).saturating_mul(self.width) <= end {
                self.earliest[i] = SimTime::MAX;
                // The slice's storage goes with it: kept, every slice of the ring would grow
                // to the busiest one's size as the ring turns (timers of many hosts falling
                // in one slice), 17 MB more on web-6876; this costs an allocation per class
                // and round.
                for (time, host) in std::mem::take(&mut self.slices[i]) {
                    due(time, host);
                }
            } else {
                // The round ends inside the slice (a run cut short by the stop time): the
                // rest stays.
                let mut earliest = SimTime::MAX;
                self.slices[i].retain(|&(time, host)| {
                    if time < end {
                        due(time, host);
                        false
                    } else {
                        earliest = earliest.min(time);
                        true
                    }
                });
                self.earliest[i] = earliest;
            }
        }
    }

    /// The earliest time filed (`SimTime::MAX` if none), perhaps a stale entry's.
    pub(crate) fn next_time(&self) -> SimTime {
        (self.base..self.base + SLICES)
            .map(|s| self.earliest[(s % SLICES) as usize])
            .find(|&t| t != SimTime::MAX)
            .unwrap_or_else(|| self.far.peek().map_or(SimTime::MAX, |e| e.0 .0))
    }

    /// Makes `base` the lowest slice, and files far entries that now fall in the ring.
    fn advance(&mut self, base: u64) {
        debug_assert!(base >= self.base);
        if base == self.base {
            return;
        }
        self.base = base;
        while let Some(&Reverse((time, host))) = self.far.peek() {
            if time / self.width >= self.base + SLICES {
                break;
            }
            self.far.pop();
            self.push(time, host);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(a: &mut Agenda, start: SimTime, end: SimTime) -> Vec<(SimTime, HostId)> {
        let mut taken = Vec::new();
        a.take_due(start, end, |t, h| taken.push((t, h)));
        taken.sort();
        taken
    }

    #[test]
    fn a_round_takes_exactly_the_hosts_due_in_it() {
        let mut a = Agenda::new(10, 0);
        for (t, h) in [
            (5, 1),
            (12, 2),
            (19, 3),
            (20, 4),
            (25, 5),
            (10_000, 6),
            (9_999, 7),
        ] {
            a.push(t, h);
        }
        assert_eq!(a.next_time(), 5);
        assert_eq!(take(&mut a, 0, 10), [(5, 1)]);
        assert_eq!(a.next_time(), 12);
        assert_eq!(take(&mut a, 10, 20), [(12, 2), (19, 3)]);
        // A round that ends inside a slice (cut short by the stop time) leaves the rest.
        assert_eq!(take(&mut a, 20, 24), [(20, 4)]);
        assert_eq!(a.next_time(), 25);
        assert_eq!(take(&mut a, 24, 30), [(25, 5)]);
        // Far entries wait outside the ring until it reaches them, then come in order.
        assert_eq!(a.next_time(), 9_999);
        a.push(40, 8);
        assert_eq!(a.next_time(), 40);
        assert_eq!(take(&mut a, 40, 50), [(40, 8)]);
        assert_eq!(take(&mut a, 9_990, 10_000), [(9_999, 7)]);
        assert_eq!(a.next_time(), 10_000);
        assert_eq!(take(&mut a, 10_000, 10_010), [(10_000, 6)]);
        assert_eq!(a.next_time(), SimTime::MAX);
    }
}
