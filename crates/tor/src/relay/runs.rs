//! The circuit scheduler's own state: its work list, when it runs, and the stamp of each run.
//!
//! The scheduler is always in one of three [`RunState`]s:
//!
//! ```text
//!            arm                         a run finds no room anywhere
//!   Idle ───────────▶ Armed ──fires──▶ (run) ─────────────────────────▶ Parked
//!    ▲                  ▲                │                                 │
//!    └── nothing left ──┼────────────────┘                                 │
//!                       └──── a watched socket gives room, or new work ────┘
//! ```
//!
//! - **Idle**: no run is due. The old scheduler (`scheduler: vanilla`) is always idle: it runs
//!   whenever the relay has handled what arrived and something is pending, with no timer.
//! - **Armed**: a KIST run is set on the relay's timer, at the end of the run interval counted
//!   from the last run (at once if that is longer ago), as tor's `kist_scheduler_schedule`
//!   sets it.
//! - **Parked**: KIST's last run found no connection of its pending channels with room. Every
//!   run until one of their sockets moves would find the same and write nothing, so none is
//!   armed; the relay watches those sockets instead ([`Scheduler::park`]). When one moves so
//!   that a pending channel has room, or new work arrives, [`Scheduler::unpark`] counts the
//!   runs skipped since the last one (advancing the stamp and the last run's time as if they
//!   had run) and arms the next on the same grid of run intervals.
//!
//! The rules live here, apart from the relay; the relay does the I/O they call for (arming
//! the timer, watching sockets), so these rules are tested without one.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{ChannelId, CircuitId, ConnId};
use onionlab_engine::time::{SimDuration, SimTime};
use onionlab_net::SocketId;

/// Where the scheduler stands between runs; see the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RunState {
    Idle,
    Armed,
    Parked,
}

/// The lists one scheduler run works through, empty between runs; kept so that their
/// buffers are reused rather than allocated for every run.
#[derive(Default)]
pub(super) struct SchedScratch {
    /// Channels that may still send in this run, quietest circuit first.
    pub heap: BinaryHeap<Reverse<(u64, ChannelId)>>,
    /// Channels with cells left for a later run.
    pub deferred: Vec<ChannelId>,
    /// Channels with circuits whose connection was full.
    pub parked: Vec<ChannelId>,
    /// Connections written in this run, to flush at its end.
    pub touched: Vec<ConnId>,
    /// Exit circuits whose queue fell low enough to read from their streams again.
    pub unblocked: Vec<CircuitId>,
    /// The pending channels this run started with.
    pub pending: Vec<ChannelId>,
}

/// The circuit scheduler's state: the relay's part that decides when runs happen and keeps
/// their work lists. What a run does is the relay's (`Relay::run_scheduler`): it reads and
/// writes channels, connections and circuits.
pub(super) struct Scheduler {
    state: RunState,
    /// KIST's run interval; never 0, or a run that leaves work would re-arm itself at the
    /// same instant forever.
    interval: SimDuration,
    /// When the last run happened (or, after parking, the last run it stands for): new work
    /// waits only for the rest of the run interval since then, and an idle relay's scheduler
    /// runs at once, as in tor.
    last_run: Option<SimTime>,
    /// Counts runs, so that a connection's write limit is read once per run, when first
    /// needed (a multi-connection channel may hold hundreds and use a few in one run).
    stamp: u32,
    /// The sockets a parked scheduler waits on: those of its pending channels' connections.
    waits_on: Vec<SocketId>,
    /// Channels with cells to send (the scheduler's work list); each is marked `pending`.
    pub pending: Vec<ChannelId>,
    /// The run's working lists, kept empty between runs (see `Relay::run_scheduler`).
    pub scratch: SchedScratch,
    /// Reused by IMUX's EWMA mapping to rank a channel's circuits in each run.
    pub rank_scratch: Vec<(f64, CircuitId)>,
}

impl Scheduler {
    /// A scheduler whose runs are `interval` apart (at least 1 ns).
    pub(super) fn new(interval: SimDuration) -> Self {
        Scheduler {
            state: RunState::Idle,
            interval: interval.max(1),
            last_run: None,
            stamp: 0,
            waits_on: Vec::new(),
            pending: Vec::new(),
            scratch: SchedScratch::default(),
            rank_scratch: Vec::new(),
        }
    }

    pub(super) fn state(&self) -> RunState {
        self.state
    }

    #[inline]
    pub(super) fn is_parked(&self) -> bool {
        self.state == RunState::Parked
    }

    /// The current run's stamp (or the last run's, between runs).
    #[inline]
    pub(super) fn stamp(&self) -> u32 {
        self.stamp
    }

    #[cfg(test)]
    pub(super) fn last_run(&self) -> Option<SimTime> {
        self.last_run
    }

    /// Arms the next run, unless one is armed already: returns when it is due, the end of the
    /// run interval counted from the last run, which is `now` if the last run is that long
    /// ago (or there was none). A parked scheduler is woken with [`Scheduler::unpark`]
    /// instead.
    pub(super) fn arm(&mut self, now: SimTime) -> Option<SimTime> {
        debug_assert!(self.state != RunState::Parked, "arming a parked scheduler");
        if self.state == RunState::Armed {
            return None;
        }
        self.state = RunState::Armed;
        let since = self
            .last_run
            .map_or(self.interval, |t| now.saturating_sub(t));
        Some(now.saturating_add(self.interval.saturating_sub(since)))
    }

    /// The armed run's timer fired.
    pub(super) fn fired(&mut self) {
        debug_assert!(
            self.state == RunState::Armed,
            "a run fired that was not armed"
        );
        self.state = RunState::Idle;
    }

    /// A run starts at `now`. Tor stamps a run when it ends; in simulated time that is this
    /// same instant, and stamping first keeps work queued during the run from re-arming it at
    /// once.
    #[inline]
    pub(super) fn begin_run(&mut self, now: SimTime) {
        self.last_run = Some(now);
        self.stamp = self.stamp.wrapping_add(1);
    }

    /// Parks an idle scheduler at the end of a run that found no room: `sockets_of` adds a
    /// pending channel's connections' sockets to the list it is given. Returns the sockets
    /// to watch.
    pub(super) fn park(
        &mut self,
        mut sockets_of: impl FnMut(ChannelId, &mut Vec<SocketId>),
    ) -> &[SocketId] {
        debug_assert!(
            self.state == RunState::Idle,
            "parking a scheduler with a run armed"
        );
        debug_assert!(self.waits_on.is_empty());
        self.state = RunState::Parked;
        for &ch in &self.pending {
            sockets_of(ch, &mut self.waits_on);
        }
        &self.waits_on
    }

    /// Wakes a parked scheduler at `now`: brings it up to the present and returns when its
    /// next run is due (to arm, as a leading timer) and the sockets to stop watching.
    ///
    /// The runs it skipped are those due since the last one, each a run interval after the
    /// one before; the stamp and the last run's time advance over them as if they had run and
    /// written nothing. The run due at the very instant `now` is one of the skipped ones only
    /// if it would have come before the waking event (`due_run_first`; asked only then), as
    /// the relay's leading timers do.
    pub(super) fn unpark(
        &mut self,
        now: SimTime,
        due_run_first: impl FnOnce() -> bool,
    ) -> (SimTime, std::vec::Drain<'_, SocketId>) {
        debug_assert!(self.state == RunState::Parked);
        let last = self
            .last_run
            .expect("a scheduler parks only at the end of a run");
        let since = now.saturating_sub(last);
        let mut skipped = since / self.interval;
        if skipped > 0 && since.is_multiple_of(self.interval) && !due_run_first() {
            // The run due now would have come after this event, which may give it work.
            skipped -= 1;
        }
        if skipped > 0 {
            self.last_run = Some(last + skipped * self.interval);
            self.stamp = self.stamp.wrapping_add(skipped as u32);
        }
        self.state = RunState::Armed;
        let next = last.saturating_add(self.interval.saturating_mul(skipped + 1));
        (next, self.waits_on.drain(..))
    }
}

#[cfg(test)]
mod tests {
    use onionlab_engine::slab::Key;

    use super::*;

    const MS: u64 = 1_000_000;

    fn sock(slot: u32) -> SocketId {
        SocketId {
            slot,
            generation: 0,
        }
    }

    #[test]
    fn a_first_run_is_due_at_once_and_later_ones_an_interval_after_the_last() {
        let mut s = Scheduler::new(10 * MS);
        assert_eq!(s.state(), RunState::Idle);
        assert_eq!(s.arm(5 * MS), Some(5 * MS), "no run yet: at once");
        assert_eq!(s.arm(6 * MS), None, "armed already");
        s.fired();
        s.begin_run(5 * MS);
        assert_eq!(s.stamp(), 1);
        assert_eq!(s.arm(8 * MS), Some(15 * MS), "the rest of the interval");
        s.fired();
        s.begin_run(15 * MS);
        assert_eq!(
            s.arm(40 * MS),
            Some(40 * MS),
            "the last run is long ago: at once"
        );
        assert_eq!(s.state(), RunState::Armed);
    }

    #[test]
    fn an_interval_of_zero_is_one_nanosecond() {
        let mut s = Scheduler::new(0);
        s.begin_run(7);
        assert_eq!(s.arm(7), Some(8));
    }

    #[test]
    fn parking_watches_the_pending_channels_sockets_and_waking_unwatches_them() {
        let mut s = Scheduler::new(10 * MS);
        s.pending
            .extend([ChannelId::from_parts(3, 0), ChannelId::from_parts(1, 0)]);
        s.begin_run(100 * MS);
        let watched = s.park(|ch, out| {
            out.extend([sock(ch.slot() * 10), sock(ch.slot() * 10 + 1)]);
        });
        assert_eq!(watched, &[sock(30), sock(31), sock(10), sock(11)]);
        assert!(s.is_parked());
        // Woken within the interval: nothing skipped, the next run on the grid.
        let (next, unwatch) = s.unpark(104 * MS, || unreachable!("not at a run's instant"));
        assert_eq!(
            unwatch.collect::<Vec<_>>(),
            [sock(30), sock(31), sock(10), sock(11)]
        );
        assert_eq!(next, 110 * MS);
        assert_eq!(
            (s.state(), s.stamp(), s.last_run()),
            (RunState::Armed, 1, Some(100 * MS))
        );
    }

    #[test]
    fn waking_counts_the_runs_skipped_on_the_grid_of_intervals() {
        let mut s = Scheduler::new(10 * MS);
        s.begin_run(100 * MS);
        s.park(|_, _| {});
        // Three runs (110, 120, 130 ms) would have written nothing before 135 ms.
        let (next, _) = s.unpark(135 * MS, || unreachable!());
        assert_eq!(next, 140 * MS);
        assert_eq!((s.stamp(), s.last_run()), (4, Some(130 * MS)));
    }

    #[test]
    fn a_run_due_at_the_waking_instant_is_skipped_only_if_it_came_first() {
        for (first, skipped) in [(true, 3), (false, 2)] {
            let mut s = Scheduler::new(10 * MS);
            s.begin_run(100 * MS);
            s.park(|_, _| {});
            let (next, _) = s.unpark(130 * MS, || first);
            assert_eq!(s.last_run(), Some(100 * MS + skipped * 10 * MS));
            assert_eq!(next, 100 * MS + (skipped + 1) * 10 * MS);
            assert_eq!(s.stamp(), 1 + skipped as u32);
        }
    }
}
