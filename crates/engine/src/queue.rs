//! The per-host event queue.
//!
//! Events are ordered by (time, order key). The order key packs the id of the host that created
//! the event and that host's private sequence number, so the position of every event is fixed by
//! who created it and when, never by the order in which workers happened to insert it.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::time::SimTime;
use crate::HostId;

/// Bits of the order key given to the creating host's sequence number.
const SEQ_BITS: u32 = 40;
/// Largest host id that fits beside the sequence number in an order key.
pub const MAX_HOSTS: usize = 1 << (64 - SEQ_BITS);

/// The sequence number of a host's leading event (`Context::schedule_leading_at`), which
/// orders before every other event the host creates for the same instant.
pub(crate) const LEADING_SEQ: u64 = 0;
/// The first sequence number of a host's other events.
pub(crate) const FIRST_SEQ: u64 = 1;

/// Packs (source host, source sequence) into one totally ordered key.
#[inline]
pub(crate) fn order_key(src: HostId, seq: u64) -> u64 {
    debug_assert!(
        seq < (1 << SEQ_BITS),
        "host {src} created more than 2^40 events"
    );
    ((src as u64) << SEQ_BITS) | seq
}

/// The host that created the event of order key `key`.
#[inline]
pub(crate) fn key_source(key: u64) -> HostId {
    (key >> SEQ_BITS) as HostId
}

/// Events up to this size are kept in the heap itself; larger ones in a slab beside it.
const INLINE_EVENT_BYTES: usize = 16;

/// Slots a slab keeps however empty its queue (see `EventQueue::compact`): a host with a few
/// events queued at a time never moves them.
const SLAB_FLOOR: usize = 16;

/// Whether events of type `E` are kept out of line (decided at compile time per type).
const fn out_of_line<E>() -> bool {
    std::mem::size_of::<E>() > INLINE_EVENT_BYTES
}

/// A heap entry for a large event: when, in which order, and where the event is kept.
///
/// Large events (a packet with its TCP header is over a hundred bytes) stay put in a slab while
/// the heap moves only these 24-byte entries around, which keeps sifting cheap. Small events
/// (PHOLD's jobs, timers) are cheaper to move than to look up, so they stay inline.
struct Entry {
    time: SimTime,
    key: u64,
    slot: u32,
}

/// A heap entry for a small event, kept inline.
struct InlineEntry<E> {
    time: SimTime,
    key: u64,
    event: E,
}

/// Both entry kinds order the same way: by (time, key), reversed so that `BinaryHeap`, a
/// max-heap, pops the earliest event first.
macro_rules! order_by_time_and_key {
    ($t:ty $(, $g:ident)?) => {
        impl$(<$g>)? PartialEq for $t {
            fn eq(&self, other: &Self) -> bool {
                self.time == other.time && self.key == other.key
            }
        }
        impl$(<$g>)? Eq for $t {}
        impl$(<$g>)? PartialOrd for $t {
            fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
                Some(self.cmp(other))
            }
        }
        impl$(<$g>)? Ord for $t {
            fn cmp(&self, other: &Self) -> Ordering {
                (other.time, other.key).cmp(&(self.time, self.key))
            }
        }
    };
}
order_by_time_and_key!(Entry);
order_by_time_and_key!(InlineEntry<E>, E);

/// An event due at `time`, with its order key, as handed out by the queue.
pub(crate) struct Due<E> {
    pub(crate) time: SimTime,
    pub(crate) key: u64,
    pub(crate) event: E,
}

pub(crate) struct EventQueue<E> {
    /// Small events.
    inline: BinaryHeap<InlineEntry<E>>,
    /// Large events: the heap of entries and the slab they point into. Freed slots are
    /// reused, so steady state allocates nothing.
    heap: BinaryHeap<Entry>,
    slots: Vec<Option<E>>,
    free: Vec<u32>,
}

impl<E> EventQueue<E> {
    pub(crate) fn new() -> Self {
        Self {
            inline: BinaryHeap::new(),
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, time: SimTime, key: u64, event: E) {
        if !out_of_line::<E>() {
            self.inline.push(InlineEntry { time, key, event });
            return;
        }
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some(event);
                slot
            }
            None => {
                self.slots.push(Some(event));
                (self.slots.len() - 1) as u32
            }
        };
        self.heap.push(Entry { time, key, slot });
    }

    #[inline]
    pub(crate) fn next_time(&self) -> Option<SimTime> {
        self.peek().map(|(time, _)| time)
    }

    /// The time and order key of the earliest event.
    #[inline]
    pub(crate) fn peek(&self) -> Option<(SimTime, u64)> {
        if out_of_line::<E>() {
            self.heap.peek().map(|e| (e.time, e.key))
        } else {
            self.inline.peek().map(|e| (e.time, e.key))
        }
    }

    /// Pops the earliest event if it is due strictly before `end`.
    #[inline]
    pub(crate) fn pop_before(&mut self, end: SimTime) -> Option<Due<E>> {
        if self.next_time()? >= end {
            return None;
        }
        if !out_of_line::<E>() {
            let InlineEntry { time, key, event } = self.inline.pop()?;
            return Some(Due { time, key, event });
        }
        let Entry { time, key, slot } = self.heap.pop()?;
        let event = self.slots[slot as usize]
            .take()
            .expect("a queued slot holds its event");
        self.free.push(slot);
        if self.slots.len() > SLAB_FLOOR && self.heap.len() < self.slots.len() / 4 {
            self.compact();
        }
        Some(Due { time, key, event })
    }

    /// Moves the queued large events to the front of a smaller slab.
    ///
    /// A slab otherwise keeps its host's busiest moment for the rest of the run: a relay's
    /// packets waiting in its downstream queue during one burst, hundreds of 170-byte events,
    /// summed over thousands of hosts. Compacting once the queue holds under a quarter of the
    /// slab keeps twice what it holds; the slab must grow fourfold again before the next
    /// compaction, so each event is moved O(1) times on average. Slots carry no meaning
    /// (events are ordered by time and key), so results do not change.
    #[cold]
    fn compact(&mut self) {
        let mut entries = std::mem::take(&mut self.heap).into_vec();
        let keep = (entries.len() * 2).max(SLAB_FLOOR);
        let mut slots = Vec::with_capacity(keep);
        for (i, entry) in entries.iter_mut().enumerate() {
            slots.push(self.slots[entry.slot as usize].take());
            entry.slot = i as u32;
        }
        entries.shrink_to(keep);
        self.heap = BinaryHeap::from(entries);
        self.slots = slots;
        self.free = Vec::new();
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len() + self.inline.len()
    }

    /// Asks the cache for the heap's top entry, which `prefetch_front` reads.
    #[inline]
    pub(crate) fn prefetch_top(&self) {
        if out_of_line::<E>() {
            crate::sim::prefetch(self.heap.as_slice().as_ptr(), std::mem::size_of::<Entry>());
        } else {
            crate::sim::prefetch(self.inline.as_slice().as_ptr(), 64);
        }
    }

    /// Asks the cache for the earliest event's slab slot. Called when a round is listed, long
    /// before the host runs: listing reads the heap's top anyway, and loads for many hosts
    /// overlap there, where at the host's turn the slot would be one more miss waited for.
    #[inline]
    pub(crate) fn prefetch_front(&self) {
        if out_of_line::<E>() {
            if let Some(e) = self.heap.peek() {
                crate::sim::prefetch(
                    self.slots.as_ptr().wrapping_add(e.slot as usize),
                    std::mem::size_of::<Option<E>>(),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// A burst grows the slab; once the queue drains to a few events the slab shrinks, and
    /// events come out in (time, key) order throughout, whatever slots they moved to.
    #[test]
    fn a_drained_slab_shrinks_and_order_is_kept() {
        let mut q: EventQueue<[u64; 4]> = EventQueue::new();
        let mut reference = BTreeSet::new();
        let mut push = |q: &mut EventQueue<[u64; 4]>, time: u64, key: u64| {
            q.push(time, key, [time, key, 0, 0]);
            reference.insert((time, key));
        };
        // Keys out of step with times, and ties on time, so order rests on both.
        for i in 0..1000u64 {
            push(&mut q, (i * 7919) % 500, 1000 - i);
        }
        assert_eq!(q.slots.len(), 1000);
        let mut popped = Vec::new();
        for _ in 0..990 {
            let due = q.pop_before(SimTime::MAX).unwrap();
            assert_eq!([due.time, due.key], due.event[..2]);
            popped.push((due.time, due.key));
        }
        assert!(
            q.slots.len() <= SLAB_FLOOR,
            "slab kept {} slots",
            q.slots.len()
        );
        assert!(q.slots.capacity() <= 2 * SLAB_FLOOR);
        // The compacted slab takes new events, before and after those left.
        push(&mut q, 0, 0);
        push(&mut q, 499, u64::MAX);
        while let Some(due) = q.pop_before(SimTime::MAX) {
            assert_eq!([due.time, due.key], due.event[..2]);
            popped.push((due.time, due.key));
        }
        // (0, 0) was pushed after 990 pops: it comes out first among the rest.
        let mut expected: Vec<_> = reference.iter().copied().filter(|&e| e != (0, 0)).collect();
        expected.insert(990, (0, 0));
        assert_eq!(popped, expected);
    }
}
