//! PHOLD, the standard synthetic benchmark for parallel discrete-event engines.
//!
//! Every host starts with a few jobs. Handling a job forwards it after an exponential delay
//! (shifted by the lookahead so no delay is below it), to a uniformly chosen other host with
//! probability `remote`, else back to itself. The event population stays constant, so the
//! run measures the engine's own cost per event.

use rand::RngExt;

use crate::sim::{Context, EngineConfig, Host, Simulation};
use crate::time::{SimDuration, SimTime};
use crate::HostId;

/// The shape of a PHOLD benchmark run.
#[derive(Clone, Debug)]
pub struct PholdConfig {
    /// Hosts in the simulation.
    pub hosts: usize,
    /// Initial jobs per host.
    pub jobs_per_host: usize,
    /// Fraction of jobs forwarded to another host.
    pub remote: f64,
    /// Least delay of any job (and the engine's round width), in nanoseconds of simulated
    /// time.
    pub lookahead: SimDuration,
    /// Mean of the exponential part of the delay, in nanoseconds of simulated time.
    pub mean_delay: SimDuration,
}

/// A job; `hops` counts how often it has been forwarded.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    /// Times the job has been forwarded, to another host or back to its own.
    pub hops: u32,
}

/// A PHOLD host: forwards every job it is handed and counts what it did.
pub struct PholdHost {
    hosts: u32,
    remote: f64,
    lookahead: SimDuration,
    mean_delay: f64,
    /// Jobs this host has handled.
    pub handled: u64,
    /// Jobs this host forwarded to another host rather than to itself.
    pub sent_remote: u64,
}

impl Host for PholdHost {
    type Event = Job;

    #[inline]
    fn handle(&mut self, ctx: &mut Context<'_, Job>, job: Job) {
        self.handled += 1;
        let now = ctx.now();
        let me = ctx.host();
        let rng = ctx.rng();
        let u: f64 = rng.random();
        let delay = self.lookahead + (-self.mean_delay * (1.0 - u).ln()) as SimDuration;
        let next = Job { hops: job.hops + 1 };
        let at: SimTime = now.saturating_add(delay);
        if self.hosts > 1 && rng.random::<f64>() < self.remote {
            // Uniform over the other hosts.
            let mut dst = rng.random_range(0..self.hosts - 1);
            if dst >= me {
                dst += 1;
            }
            self.sent_remote += 1;
            ctx.send(dst as HostId, at, next);
        } else {
            ctx.schedule_at(at, next);
        }
    }
}

/// Builds a PHOLD simulation with its initial jobs spread over the first mean delay.
pub fn build(config: &PholdConfig, engine: EngineConfig) -> Simulation<PholdHost> {
    let models = (0..config.hosts)
        .map(|_| PholdHost {
            hosts: config.hosts as u32,
            remote: config.remote,
            lookahead: config.lookahead,
            mean_delay: config.mean_delay as f64,
            handled: 0,
            sent_remote: 0,
        })
        .collect();
    let mut sim = Simulation::new(engine, models);
    for host in 0..config.hosts {
        for j in 0..config.jobs_per_host {
            // Deterministic spread of start times without touching the hosts' random streams.
            let t = (host as u64 * 7919 + j as u64 * 104_729) % config.mean_delay.max(1);
            sim.schedule(host as HostId, t, Job { hops: 0 });
        }
    }
    sim
}
