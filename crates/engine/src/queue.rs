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

pub(crate) struct Entry<E> {
    pub(crate) time: SimTime,
    pub(crate) key: u64,
    pub(crate) event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.time == other.time && self.key == other.key
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    /// Reversed so that `BinaryHeap`, a max-heap, pops the earliest event first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time, other.key).cmp(&(self.time, self.key))
    }
}

pub(crate) struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
}

impl<E> EventQueue<E> {
    pub(crate) fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, time: SimTime, key: u64, event: E) {
        self.heap.push(Entry { time, key, event });
    }

    #[inline]
    pub(crate) fn next_time(&self) -> Option<SimTime> {
        self.heap.peek().map(|e| e.time)
    }

    /// Pops the earliest event if it is due strictly before `end`.
    #[inline]
    pub(crate) fn pop_before(&mut self, end: SimTime) -> Option<Entry<E>> {
        if self.heap.peek()?.time < end {
            self.heap.pop()
        } else {
            None
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}
