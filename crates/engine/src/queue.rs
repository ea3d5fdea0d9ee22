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

/// Packs (source host, source sequence) into one totally ordered key.
#[inline]
pub(crate) fn order_key(src: HostId, seq: u64) -> u64 {
    debug_assert!(
        seq < (1 << SEQ_BITS),
        "host {src} created more than 2^40 events"
    );
    ((src as u64) << SEQ_BITS) | seq
}

/// Events up to this size are kept in the heap itself; larger ones in a slab beside it.
const INLINE_EVENT_BYTES: usize = 16;

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
        if out_of_line::<E>() {
            self.heap.peek().map(|e| e.time)
        } else {
            self.inline.peek().map(|e| e.time)
        }
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
        Some(Due { time, key, event })
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len() + self.inline.len()
    }
}
