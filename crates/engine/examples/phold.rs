//! PHOLD benchmark: `cargo run --release -p onionlab-engine --example phold -- --hosts H
//! --remote F --threads T --sim-seconds S [--seed N]`.
//!
//! The last two lines of output are `trace_hash=<hex>` and `events_per_sec=<number>`; scripts
//! rely on them.

use clap::Parser;
use onionlab_engine::phold::{self, PholdConfig};
use onionlab_engine::time::{secs_f64, NANOS_PER_MICRO};
use onionlab_engine::{default_threads, EngineConfig};

#[derive(Parser)]
#[command(about = "PHOLD benchmark of the onionlab engine")]
struct Args {
    /// Number of hosts.
    #[arg(long, default_value_t = 10_000)]
    hosts: usize,
    /// Fraction of events sent to another host (0..=1).
    #[arg(long, default_value_t = 0.1)]
    remote: f64,
    /// Worker threads (default: the machine's cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Simulated seconds to run.
    #[arg(long, default_value_t = 10.0)]
    sim_seconds: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Initial jobs per host.
    #[arg(long, default_value_t = 4)]
    jobs_per_host: usize,
    /// Lookahead (least delay, and round width) in microseconds.
    #[arg(long, default_value_t = 1000)]
    lookahead_us: u64,
    /// Mean of the exponential part of each delay, in microseconds.
    #[arg(long, default_value_t = 1000)]
    mean_delay_us: u64,
}

fn main() {
    let args = Args::parse();
    if !(0.0..=1.0).contains(&args.remote) {
        eprintln!(
            "error: --remote must be between 0 and 1, got {}",
            args.remote
        );
        std::process::exit(2);
    }
    if args.hosts == 0
        || args.lookahead_us == 0
        || args.sim_seconds.is_nan()
        || args.sim_seconds <= 0.0
    {
        eprintln!("error: --hosts, --lookahead-us and --sim-seconds must be positive");
        std::process::exit(2);
    }
    let threads = args.threads.unwrap_or_else(default_threads).max(1);
    let config = PholdConfig {
        hosts: args.hosts,
        jobs_per_host: args.jobs_per_host,
        remote: args.remote,
        lookahead: args.lookahead_us * NANOS_PER_MICRO,
        mean_delay: args.mean_delay_us * NANOS_PER_MICRO,
    };
    let engine = EngineConfig {
        seed: args.seed,
        threads,
        lookahead: config.lookahead,
        trace: true,
        work_stealing: true,
    };
    let mut sim = phold::build(&config, engine);
    let stats = sim.run_until(secs_f64(args.sim_seconds));
    let wall = stats.wall.as_secs_f64();
    println!(
        "hosts={} remote={} threads={} sim_seconds={} events={} rounds={} messages={} wall_s={:.3}",
        args.hosts,
        args.remote,
        threads,
        args.sim_seconds,
        stats.events,
        stats.rounds,
        stats.messages,
        wall
    );
    for (i, w) in stats.workers.iter().enumerate() {
        println!(
            "worker={i} hosts={} events={} busy_s={:.3} blocked_s={:.3}",
            w.hosts,
            w.events,
            w.busy.as_secs_f64(),
            w.blocked.as_secs_f64()
        );
    }
    println!("trace_hash={:016x}", sim.trace_hash());
    println!("events_per_sec={:.0}", stats.events as f64 / wall);
}
