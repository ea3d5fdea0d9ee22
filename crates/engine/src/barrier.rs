//! A reusable barrier for the round loop.
//!
//! Rounds are short (often tens of microseconds of work), so parking threads on a condition
//! variable at every barrier would cost more than the work itself. Workers spin briefly and then
//! yield, which keeps latency low when cores are free and stays polite on a shared machine.
//!
//! A worker that dies (a panic outside the part of the round where the engine catches model
//! panics) poisons the barrier; every worker waiting at it, now or later, then returns at once
//! instead of waiting forever for a party that will never arrive.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct SpinBarrier {
    parties: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
    poisoned: AtomicBool,
}

const SPINS_BEFORE_YIELD: u32 = 2_000;

/// The barrier was poisoned: a worker will never arrive.
#[derive(Debug)]
pub(crate) struct Poisoned;

impl SpinBarrier {
    pub(crate) fn new(parties: usize) -> Self {
        Self {
            parties,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            poisoned: AtomicBool::new(false),
        }
    }

    /// Makes every current and future `wait` return `Err(Poisoned)`.
    pub(crate) fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    /// Blocks until all parties have arrived; returns the time spent waiting, or `Poisoned`
    /// if a party will never arrive.
    pub(crate) fn wait(&self) -> Result<Duration, Poisoned> {
        if self.parties == 1 {
            return Ok(Duration::ZERO);
        }
        let start = Instant::now();
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.parties {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
        } else {
            let mut spins = 0u32;
            while self.generation.load(Ordering::Acquire) == generation {
                if self.poisoned.load(Ordering::Acquire) {
                    return Err(Poisoned);
                }
                if spins < SPINS_BEFORE_YIELD {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        Ok(start.elapsed())
    }
}
