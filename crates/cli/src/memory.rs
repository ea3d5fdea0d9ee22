//! Keeping a run within the machine's memory: the limit `--max-memory` sets on resident
//! memory, the one `ulimit -v` sets on address space, and what happens when an allocation
//! fails anyway.
//!
//! A [`Watch`] thread looks at the process's memory every [`CHECK_EVERY`] from before the
//! network is built until the run ends, and interrupts the run's [`RunControl`] once resident
//! memory passes the limit or the address space comes within [`RESERVE_BYTES`] of
//! `RLIMIT_AS`. Construction looks at the control between hosts and the engine within rounds,
//! so either stops within a few MiB of growth, and the results up to then are written.
//!
//! The address space grows in steps the allocator chooses (mimalloc maps arenas of up to a
//! GiB at a time), so a step can still fail an allocation before the watch sees it coming.
//! For that the [`Allocator`] keeps a reserve of address space, mapped at start and never
//! touched: the first allocation that fails gives the reserve back, marks the failure for the
//! watch, and tries again, so the run has room to stop and write what it measured instead of
//! aborting on the spot.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use onionlab_engine::RunControl;

/// How often the watch reads the process's memory: growth between two looks is what a limit
/// can be overshot by (a million-host network grows by about 0.4 GiB a wall-clock second
/// while it starts, so by about 20 MiB here). Each look reads `/proc/self/status`.
pub(crate) const CHECK_EVERY: Duration = Duration::from_millis(50);

/// Address space mapped at start and given back when an allocation fails: room to stop the
/// run and write its results.
pub(crate) const RESERVE_BYTES: usize = 256 << 20;

/// The allocator: mimalloc, with the reserve described in the module documentation.
pub(crate) struct Allocator;

static RESERVE: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Size of the first allocation that failed (0: none has).
static FAILED: AtomicUsize = AtomicUsize::new(0);

/// Maps the reserve. Without it (the mapping itself refused) an allocation failure aborts the
/// process as it would anyway.
pub(crate) fn keep_reserve() {
    // SAFETY: a fresh anonymous mapping with no access rights touches no existing memory;
    // MAP_NORESERVE keeps it out of the kernel's commit accounting (it is address space only).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            RESERVE_BYTES,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p != libc::MAP_FAILED {
        RESERVE.store(p, Ordering::Relaxed);
    }
}

/// The size of the first allocation that failed, if one has.
pub(crate) fn failed_allocation() -> Option<usize> {
    Some(FAILED.load(Ordering::Relaxed)).filter(|&n| n > 0)
}

/// After a failed allocation of `size` bytes: records it, and gives the reserve back if it is
/// still held. Returns whether it was (then the allocation is worth trying again).
#[cold]
fn release_reserve(size: usize) -> bool {
    let _ = FAILED.compare_exchange(0, size.max(1), Ordering::Relaxed, Ordering::Relaxed);
    let p = RESERVE.swap(std::ptr::null_mut(), Ordering::Relaxed);
    if p.is_null() {
        say_out_of_memory(size);
        return false;
    }
    // SAFETY: `p` is the reserve's mapping, taken out of `RESERVE` so no one else unmaps it.
    unsafe { libc::munmap(p, RESERVE_BYTES) };
    true
}

/// The last word of a process whose memory ran out with the reserve spent: written without
/// allocating, before Rust's handler aborts.
fn say_out_of_memory(size: usize) {
    let mut buf = [0u8; 256];
    let mut len = 0;
    let mut put = |bytes: &[u8]| {
        let n = bytes.len().min(buf.len() - len);
        buf[len..len + n].copy_from_slice(&bytes[..n]);
        len += n;
    };
    put(b"error: out of memory: an allocation of ");
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = size;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    put(&digits[i..]);
    put(
        b" bytes failed (a memory or address-space limit, such as ulimit -v); the results \
          files hold what was measured up to their last write\n",
    );
    // SAFETY: writes `len` initialised bytes of `buf` to standard error.
    unsafe { libc::write(2, buf.as_ptr().cast(), len) };
}

// SAFETY: every call goes to mimalloc, which upholds `GlobalAlloc`'s contract; a null result
// is only retried (after unmapping memory that no allocation uses) or passed on.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees for `alloc` are passed on as they are.
        let p = unsafe { mimalloc::MiMalloc.alloc(layout) };
        if p.is_null() && release_reserve(layout.size()) {
            // SAFETY: as above.
            return unsafe { mimalloc::MiMalloc.alloc(layout) };
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) };
        if p.is_null() && release_reserve(layout.size()) {
            // SAFETY: as for `alloc`.
            return unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) };
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `alloc`.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `alloc`; a failed realloc leaves `ptr` valid, so it may be retried.
        let p = unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
        if p.is_null() && release_reserve(new_size) {
            // SAFETY: as above.
            return unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
        }
        p
    }
}

/// The process's address-space limit (`ulimit -v`), if it has one.
fn address_space_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given and nothing else.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } == 0;
    (ok && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// Why the watch stopped a run.
#[derive(Clone, Copy, Debug)]
pub(crate) enum MemoryStop {
    /// Resident memory passed `--max-memory`.
    Resident { rss: u64, limit: u64 },
    /// The address space came within the reserve of `ulimit -v`.
    AddressSpace { size: u64, limit: u64 },
    /// An allocation of this many bytes failed (the reserve was given back to go on).
    AllocationFailed { size: usize },
}

impl MemoryStop {
    /// What happened, for `run.json`'s `interrupted_reason` and the error: "resident memory
    /// reached 6.0 GiB, above --max-memory 6.0 GiB".
    pub(crate) fn describe(&self) -> String {
        match *self {
            MemoryStop::Resident { rss, limit } => format!(
                "resident memory reached {}, above --max-memory {}",
                format_bytes(rss),
                format_bytes(limit)
            ),
            MemoryStop::AddressSpace { size, limit } => format!(
                "the address space reached {}, near its limit of {} (ulimit -v; the last {} \
                 are kept for stopping cleanly)",
                format_bytes(size),
                format_bytes(limit),
                format_bytes(RESERVE_BYTES as u64)
            ),
            MemoryStop::AllocationFailed { size } => format!(
                "an allocation of {size} bytes failed (a memory or address-space limit, such as \
                 ulimit -v)"
            ),
        }
    }
}

/// A memory size for messages: GiB or MiB with one decimal.
pub(crate) fn format_bytes(bytes: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    let mib = bytes as f64 / MIB;
    if mib >= 1024.0 {
        format!("{:.1} GiB", mib / 1024.0)
    } else {
        format!("{mib:.1} MiB")
    }
}

/// The thread that watches the process's memory for one run (or one `check`). Dropped
/// without [`Watch::finish`] (a run refused on the way), it ends by itself within a look.
pub(crate) struct Watch {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<Option<MemoryStop>>>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

impl Watch {
    /// Starts watching: `control` is interrupted at the first sign of trouble (see the module
    /// documentation); `max_rss` is `--max-memory`.
    pub(crate) fn start(control: RunControl, max_rss: Option<u64>) -> Watch {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let max_space = address_space_limit().map(|l| l.saturating_sub(RESERVE_BYTES as u64));
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                if let Some(stop) = look(max_rss, max_space) {
                    control.interrupt();
                    return Some(stop);
                }
                std::thread::sleep(CHECK_EVERY);
            }
            None
        });
        Watch {
            done,
            thread: Some(thread),
        }
    }

    /// Stops watching; what stopped the run, if the watch did.
    pub(crate) fn finish(mut self) -> Option<MemoryStop> {
        self.done.store(true, Ordering::Relaxed);
        self.thread.take()?.join().unwrap_or_default()
    }
}

/// One look at the process's memory.
fn look(max_rss: Option<u64>, max_space: Option<u64>) -> Option<MemoryStop> {
    if let Some(size) = failed_allocation() {
        return Some(MemoryStop::AllocationFailed { size });
    }
    if let Some(limit) = max_rss {
        let rss = onionlab_report::rss_bytes();
        if rss > limit {
            return Some(MemoryStop::Resident { rss, limit });
        }
    }
    if let Some(limit) = max_space {
        let size = onionlab_report::address_space_bytes();
        if size > limit {
            return Some(MemoryStop::AddressSpace {
                size,
                limit: limit + RESERVE_BYTES as u64,
            });
        }
    }
    None
}
