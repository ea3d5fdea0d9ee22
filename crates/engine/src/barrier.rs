//! A reusable barrier for the round loop.
//!
//! Rounds are short (often tens of microseconds of work), so parking threads on a condition
//! variable at every barrier would cost more than the work itself. Workers spin briefly and then
//! yield, which keeps latency low when cores are free and stays polite on a shared machine.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct SpinBarrier {
    parties: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
}

const SPINS_BEFORE_YIELD: u32 = 2_000;

impl SpinBarrier {
    pub(crate) fn new(parties: usize) -> Self {
        Self {
            parties,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    /// Blocks until all parties have arrived; returns the time spent waiting.
    pub(crate) fn wait(&self) -> Duration {
        if self.parties == 1 {
            return Duration::ZERO;
        }
        let start = Instant::now();
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.parties {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
        } else {
            let mut spins = 0u32;
            while self.generation.load(Ordering::Acquire) == generation {
                if spins < SPINS_BEFORE_YIELD {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        start.elapsed()
    }
}
