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
//! it: `onionlab` itself runs on the plain system allocator, so the count costs a run nothing.
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
