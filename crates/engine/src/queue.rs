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

/// A heap entry: when, in which order, and where the event itself is kept.
///
/// Events (a packet with its TCP header is over a hundred bytes) stay put in a slab while the
/// heap moves only these 24-byte entries around, which keeps sifting cheap.
struct Entry {
    time: SimTime,
    key: u64,
    slot: u32,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.time == other.time && self.key == other.key
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// Reversed so that `BinaryHeap`, a max-heap, pops the earliest event first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.time, other.key).cmp(&(self.time, self.key))
    }
}

/// An event due at `time`, with its order key, as handed out by the queue.
pub(crate) struct Due<E> {
    pub(crate) time: SimTime,
    pub(crate) key: u64,
    pub(crate) event: E,
}

pub(crate) struct EventQueue<E> {
    heap: BinaryHeap<Entry>,
    /// Event storage; freed slots are reused, so steady state allocates nothing.
    slots: Vec<Option<E>>,
    free: Vec<u32>,
}

impl<E> EventQueue<E> {
    pub(crate) fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, time: SimTime, key: u64, event: E) {
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
        self.heap.peek().map(|e| e.time)
    }

    /// Pops the earliest event if it is due strictly before `end`.
    #[inline]
    pub(crate) fn pop_before(&mut self, end: SimTime) -> Option<Due<E>> {
        if self.heap.peek()?.time >= end {
            return None;
        }
        let Entry { time, key, slot } = self.heap.pop()?;
        let event = self.slots[slot as usize]
            .take()
            .expect("a queued slot holds its event");
        self.free.push(slot);
        Some(Due { time, key, event })
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}
