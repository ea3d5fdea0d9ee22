//! A worker's messages from hosts, filed by the slice of simulated time they are due in, and
//! handed out a round at a time, grouped by destination host.
//!
//! Why not each host's own queue: on a network of tens of thousands of hosts, filing a message
//! in its host's queue at the barrier misses the cache on the host's slot, on its queue and on
//! a slab entry, and taking it out in the round misses on all of them again. Filing it under
//! its time slice is an append to a vector; the round then sorts its due messages by host once,
//! and each host merges its run of messages with its own queue (which keeps only what the host
//! scheduled for itself).

use crate::time::{SimDuration, SimTime};
use crate::HostId;
use std::cell::UnsafeCell;

/// A message between hosts: an event for `dst`, due at `time`, ordered by `key` among events
/// due at the same time.
pub(crate) struct Message<E> {
    pub(crate) dst: HostId,
    pub(crate) time: SimTime,
    pub(crate) key: u64,
    pub(crate) event: E,
}

/// Time slices the ring covers. A message due further ahead than this many slices waits in an
/// overflow list (paths are rarely longer than a few hundred lookaheads).
const SLICES: u64 = 512;

/// Messages per chunk of a slice's storage.
pub(crate) const CHUNK: usize = 64;

/// A message's place in a chunk. The chunks of the slices due in a round are lent to the round
/// as they are, and each message is taken out where it lies by the worker that runs its host
/// (hence the cell): copying 136-byte messages out of the calendar into a list of the round's
/// messages cost two copies each, a measurable share of a large network's time.
pub(crate) type Slot<E> = UnsafeCell<Option<Message<E>>>;

/// Up to `CHUNK` slots, filled in order.
pub(crate) type Chunk<E> = Vec<Slot<E>>;

pub(crate) struct Calendar<E> {
    /// A slice's width: the lookahead, so that a round aligned to it takes whole slices.
    width: SimDuration,
    /// `slices[s % SLICES]`: the messages due in slice `s`, for `s` in `base..base + SLICES`,
    /// in chunks of at most `CHUNK`. Storage is lent in chunks from one pool: if each slot of
    /// the ring kept a growing buffer, every slot would grow to the busiest slice's size as
    /// the ring turns, hundreds of times what is in flight.
    slices: Vec<Vec<Chunk<E>>>,
    /// The earliest time in each slice (`SimTime::MAX` when empty).
    earliest: Vec<SimTime>,
    /// The lowest slice that may hold messages: the current round's first.
    base: u64,
    /// Messages due at or after slice `base + SLICES`.
    overflow: Vec<Message<E>>,
    overflow_earliest: SimTime,
    /// Empty chunks, reused most recent first (the one most likely still in the cache).
    spare: Vec<Chunk<E>>,
    len: usize,
}

impl<E> Calendar<E> {
    pub(crate) fn new(width: SimDuration) -> Self {
        assert!(width > 0, "a calendar needs a positive slice width");
        Self {
            width,
            slices: (0..SLICES).map(|_| Vec::new()).collect(),
            earliest: vec![SimTime::MAX; SLICES as usize],
            base: 0,
            overflow: Vec::new(),
            overflow_earliest: SimTime::MAX,
            spare: Vec::new(),
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Files a message. Its time must not lie before the current round's start.
    pub(crate) fn push(&mut self, message: Message<E>) {
        let slice = message.time / self.width;
        debug_assert!(slice >= self.base, "message filed before the current round");
        self.len += 1;
        if slice >= self.base + SLICES {
            self.overflow_earliest = self.overflow_earliest.min(message.time);
            self.overflow.push(message);
            return;
        }
        let i = (slice % SLICES) as usize;
        self.earliest[i] = self.earliest[i].min(message.time);
        let chunks = &mut self.slices[i];
        match chunks.last_mut() {
            Some(chunk) if chunk.len() < CHUNK => chunk.push(UnsafeCell::new(Some(message))),
            _ => {
                let mut chunk = self
                    .spare
                    .pop()
                    .unwrap_or_else(|| Vec::with_capacity(CHUNK));
                chunk.push(UnsafeCell::new(Some(message)));
                chunks.push(chunk);
            }
        }
    }

    /// The earliest time of any filed message (`SimTime::MAX` if none).
    pub(crate) fn next_time(&self) -> SimTime {
        if self.len == self.overflow.len() {
            return self.overflow_earliest;
        }
        (self.base..self.base + SLICES)
            .map(|s| (s % SLICES) as usize)
            .find(|&i| !self.slices[i].is_empty())
            .map_or(SimTime::MAX, |i| self.earliest[i])
            .min(self.overflow_earliest)
    }

    /// Hands every message due before `end` to `due`, in the chunks they lie in (in no
    /// particular order; slots left empty hold none), for the round that starts at `start`.
    /// No message may be due before `start`. A round that starts and ends on slice boundaries
    /// takes whole slices; any other refiles what it leaves. The chunks come back through
    /// [`Calendar::recycle`].
    pub(crate) fn take_due(&mut self, start: SimTime, end: SimTime, mut due: impl FnMut(Chunk<E>)) {
        debug_assert!(start < end);
        self.advance(start / self.width);
        if self.len == 0 {
            return;
        }
        for slice in start / self.width..=(end - 1) / self.width {
            if slice >= self.base + SLICES {
                break;
            }
            let i = (slice % SLICES) as usize;
            if self.earliest[i] >= end {
                continue;
            }
            let whole = (slice + 1).saturating_mul(self.width) <= end;
            self.earliest[i] = SimTime::MAX;
            let mut chunks = std::mem::take(&mut self.slices[i]);
            let mut later = Vec::new();
            for mut chunk in chunks.drain(..) {
                self.len -= chunk.len();
                if !whole {
                    let mut kept = 0;
                    for slot in &mut chunk {
                        if slot.get_mut().as_ref().is_some_and(|m| m.time >= end) {
                            later.extend(slot.get_mut().take());
                        } else {
                            kept += 1;
                        }
                    }
                    if kept == 0 {
                        self.recycle(chunk);
                        continue;
                    }
                }
                due(chunk);
            }
            // The slot's (empty) list of chunks goes back, to keep its capacity.
            self.slices[i] = chunks;
            for m in later {
                self.push(m);
            }
        }
    }

    /// Takes back a chunk lent by [`Calendar::take_due`], emptied of its messages.
    pub(crate) fn recycle(&mut self, mut chunk: Chunk<E>) {
        debug_assert!(chunk.iter_mut().all(|slot| slot.get_mut().is_none()));
        chunk.clear();
        self.spare.push(chunk);
    }

    /// Makes `base` the lowest slice, and files overflow messages that now fall in the ring.
    fn advance(&mut self, base: u64) {
        debug_assert!(base >= self.base);
        self.base = base;
        if self.overflow_earliest / self.width >= self.base + SLICES {
            return;
        }
        let overflow = std::mem::take(&mut self.overflow);
        self.overflow_earliest = SimTime::MAX;
        self.len -= overflow.len();
        for m in overflow {
            self.push(m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(dst: HostId, time: SimTime) -> Message<()> {
        Message {
            dst,
            time,
            key: time,
            event: (),
        }
    }

    fn take(c: &mut Calendar<()>, start: SimTime, end: SimTime) -> Vec<SimTime> {
        let mut t = Vec::new();
        let mut lent = Vec::new();
        c.take_due(start, end, |chunk| lent.push(chunk));
        for mut chunk in lent {
            t.extend(
                chunk
                    .iter_mut()
                    .filter_map(|s| s.get_mut().take())
                    .map(|m| m.time),
            );
            c.recycle(chunk);
        }
        t.sort();
        t
    }

    #[test]
    fn a_round_takes_exactly_the_messages_due_in_it() {
        let mut c = Calendar::new(10);
        for t in [5, 12, 19, 20, 25, 31, 10_000, 9_999_999] {
            c.push(msg(1, t));
        }
        assert_eq!(c.next_time(), 5);
        // A round not aligned with the slices spans two of them.
        assert_eq!(take(&mut c, 5, 15), [5, 12]);
        assert_eq!(c.next_time(), 19);
        assert_eq!(take(&mut c, 19, 29), [19, 20, 25]);
        assert_eq!(c.next_time(), 31);
        assert_eq!(take(&mut c, 31, 41), [31]);
        // Far messages wait in the overflow until the ring reaches them.
        assert_eq!(c.next_time(), 10_000);
        assert_eq!(take(&mut c, 10_000, 10_010), [10_000]);
        assert_eq!(c.len(), 1);
        assert_eq!(c.next_time(), 9_999_999);
        assert_eq!(take(&mut c, 9_999_990, 10_000_000), [9_999_999]);
        assert_eq!(c.len(), 0);
        assert_eq!(c.next_time(), SimTime::MAX);
    }
}
