//! A counting allocator, for programs and tests that measure how much heap a simulation holds
//! (`tcp_memory`, the Tor model's memory table and its test that long runs stay flat).
//!
//! It wraps the system allocator and keeps one process-wide count of the bytes currently
//! allocated. A program opts in with
//!
//! ```ignore
//! #[global_allocator]
//! static HEAP: onionlab_engine::heap::Counting = onionlab_engine::heap::Counting;
//! ```
//!
//! and reads [`live_bytes`] before and after what it measures. Nothing else in onionlab uses
//! it: `onionlab` itself runs on mimalloc without a count, so the count costs a run nothing.
//! The module also holds the two rules that keep long-lived storage near what it holds
//! ([`trim`] for queues, [`push_growing_by_eighths`] for tables).
//! The count is of requested sizes (what the program asked for), not of what the allocator
//! rounds them up to or its own bookkeeping, so it measures the model's data structures and is
//! the same on every machine; a process's resident size is larger.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// The system allocator, counting the bytes it has handed out and not yet had back.
pub struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded unchanged to `System`, which upholds `GlobalAlloc`'s
// contract; the counter only observes the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's guarantees for `alloc` are passed on as they are.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: as for `alloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Bytes allocated through [`Counting`] and not yet freed, process-wide (0 in a program that
/// did not install it as its global allocator).
pub fn live_bytes() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// The capacity [`trim`] never goes below: small queues keep their storage, so a queue that
/// holds a few items at a time never allocates again.
pub const TRIM_FLOOR: usize = 8;

/// Gives back most of a queue's spare storage once it holds less than a quarter of its
/// capacity (keeping twice what it holds, and at least [`TRIM_FLOOR`]). Call it after taking
/// items out.
///
/// Queues that live as long as a run (a channel's message pipe, a long-lived circuit's cell
/// queue) otherwise keep the capacity of their longest burst for good, which over a long run
/// becomes most of the model's memory. The thresholds make it cheap: after a trim the queue
/// must take in as many items as it holds, or give out half of them, before storage moves
/// again, so reallocations cost O(1) per item on average, and a queue in steady use, whose
/// length stays near its capacity, never reallocates.
///
/// An emptied queue also starts again at the front of its storage, so that its next items
/// go to the lines its last ones used (see `NetStack::poll_event`).
#[inline]
pub fn trim<T>(queue: &mut std::collections::VecDeque<T>) {
    if queue.is_empty() {
        // On an empty queue this only moves the head back to the start.
        queue.clear();
    }
    let cap = queue.capacity();
    if cap > TRIM_FLOOR && queue.len() < cap / 4 {
        queue.shrink_to((queue.len() * 2).max(TRIM_FLOOR));
    }
}

/// Pushes onto a table that lives as long as the run (a host's sockets, a relay's channels),
/// growing it by an eighth when full instead of doubling it.
///
/// A doubled table is on average a quarter empty, and these tables of large entries (a
/// socket slot holds a TCP connection inline, a relay's channel is hundreds of bytes) are
/// much of a big network's memory. Growing by an eighth moves each entry about eight times
/// over the table's life instead of once or twice, once per new high-water mark, which is
/// rare next to the events that use the entries; small tables grow one entry at a time, so
/// a client with one socket keeps no spare slots.
#[inline]
pub fn push_growing_by_eighths<T>(table: &mut Vec<T>, item: T) {
    if table.len() == table.capacity() {
        table.reserve_exact((table.len() / 8).max(1));
    }
    table.push(item);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn tables_grow_by_an_eighth() {
        let mut t: Vec<[u64; 8]> = Vec::new();
        for i in 0..1000u64 {
            push_growing_by_eighths(&mut t, [i; 8]);
            assert!(t.capacity() <= t.len() + t.len() / 8 + 1);
        }
        assert!(t.iter().enumerate().all(|(i, e)| e[0] == i as u64));
    }

    #[test]
    fn trim_keeps_small_queues_and_shrinks_drained_ones() {
        let mut q: VecDeque<u64> = VecDeque::new();
        q.extend(0..TRIM_FLOOR as u64);
        trim(&mut q);
        let small = q.capacity();
        assert!(small >= TRIM_FLOOR);
        q.clear();
        trim(&mut q);
        assert_eq!(
            q.capacity(),
            small,
            "a queue within the floor keeps its storage"
        );

        q.extend(0..10_000);
        while q.len() > 100 {
            q.pop_front();
            trim(&mut q);
        }
        assert!(
            q.capacity() <= 400,
            "capacity {} for 100 items",
            q.capacity()
        );
        assert!(
            q.iter().copied().eq(9_900..10_000),
            "trimming keeps the items in order"
        );
        q.clear();
        trim(&mut q);
        assert_eq!(q.capacity(), TRIM_FLOOR);
    }

    #[test]
    fn a_queue_in_steady_use_is_not_reallocated() {
        let mut q: VecDeque<u64> = VecDeque::with_capacity(1024);
        q.extend(0..1000);
        let cap = q.capacity();
        for i in 0..100_000 {
            // From 1000 items down to about 500, where it hovers.
            if q.len() > 500 && i % 3 != 0 {
                q.pop_front();
                trim(&mut q);
            } else {
                q.push_back(i);
            }
        }
        assert!(q.len() > 400);
        assert_eq!(q.capacity(), cap);
    }
}
