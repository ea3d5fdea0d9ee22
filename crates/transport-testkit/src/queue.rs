//! The event loop's agenda: what happens next, in time order. Events at the same instant run
//! in the order they were scheduled, which, with the seeded RNG, makes every run repeatable.

use crate::transport::Pkt;
use onionlab_engine::time::SimTime;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Something the loop does at a given time.
pub(crate) enum Action {
    /// A packet reaches endpoint `.0`.
    Deliver(usize, Pkt),
    /// Endpoint `.0`'s connection timer, if still armed for this instant.
    Timer(usize),
    /// Endpoint `.0`'s application tick (rate-limited readers, paced writers).
    Tick(usize),
}

/// Actions ordered by `(at, order scheduled)`. The heap holds only those keys and the actions
/// wait in a map beside it, so that sifting moves 16 bytes rather than a packet.
#[derive(Default)]
pub(crate) struct Agenda {
    heap: BinaryHeap<Reverse<(SimTime, u64)>>,
    actions: HashMap<u64, Action>,
    scheduled: u64,
}

impl Agenda {
    /// Schedules `action` at `at`, after everything already scheduled for that instant.
    pub(crate) fn push(&mut self, at: SimTime, action: Action) {
        let seq = self.scheduled;
        self.scheduled += 1;
        self.actions.insert(seq, action);
        self.heap.push(Reverse((at, seq)));
    }

    /// Takes the next action if it is due by `until`.
    pub(crate) fn pop_due(&mut self, until: SimTime) -> Option<(SimTime, Action)> {
        let &Reverse((at, seq)) = self.heap.peek()?;
        if at > until {
            return None;
        }
        self.heap.pop();
        let action = self.actions.remove(&seq).expect("every key has its action");
        Some((at, action))
    }
}
