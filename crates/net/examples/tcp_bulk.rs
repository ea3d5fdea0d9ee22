//! Speed of the network model for one TCP bulk flow (or with `--quic`, one QUIC stream):
//! `cargo run --release -p onionlab-net --example tcp_bulk -- --mbit 100 --rtt-ms 50 --sim-seconds 60`.
//!
//! Prints the goodput and, as its last line, `sim_seconds_per_wall_second=<number>`.

use clap::Parser;
use onionlab_engine::time::{secs_f64, NANOS_PER_MILLI};
use onionlab_net::iperf::{at, build, quic_sender, sender, sink, switch_graph, total_received};
use onionlab_net::NetworkConfig;

#[derive(Parser)]
struct Args {
    /// Bottleneck (receiver downstream) rate in Mbit/s; the sender's link is 10x faster.
    #[arg(long, default_value_t = 100)]
    mbit: u64,
    #[arg(long, default_value_t = 50)]
    rtt_ms: u64,
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    #[arg(long, default_value_t = 60.0)]
    sim_seconds: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// One stream of a QUIC connection instead of a TCP connection.
    #[arg(long)]
    quic: bool,
    /// Segmentation offload (`NetworkConfig::segment_offload`), as `linux_tcp --offload`.
    #[arg(long)]
    offload: bool,
}

fn main() {
    let a = Args::parse();
    let graph = switch_graph(a.rtt_ms as f64 / 2.0, a.loss, 0.0);
    let mbit = 1_000_000;
    let places = [
        at(10 * a.mbit * mbit, 10 * a.mbit * mbit),
        at(10 * a.mbit * mbit, a.mbit * mbit),
    ];
    let send = if a.quic { quic_sender } else { sender };
    let roles = vec![send(1, None, 64 * 1024), sink(64 * 1024)];
    let config = NetworkConfig {
        segment_offload: a.offload,
        ..NetworkConfig::default()
    };
    let mut sim = build(&graph, &places, config, roles, 1, a.seed);
    let stats = sim.run_until(secs_f64(a.sim_seconds));
    let wall = stats.wall.as_secs_f64();
    let bytes = total_received(&sim, 1);
    let info = sim.host(0).stack.stats();
    println!(
        "transport={} offload={} bottleneck_mbit={} rtt_ms={} loss={} sim_s={} goodput_mbit={:.3} \
         events={} packets={} wall_s={:.3} events_per_sec={:.0} lookahead_ms={}",
        if a.quic { "quic" } else { "tcp" },
        a.offload,
        a.mbit,
        a.rtt_ms,
        a.loss,
        a.sim_seconds,
        bytes as f64 * 8.0 / a.sim_seconds / 1e6,
        stats.events,
        info.packets_sent,
        wall,
        stats.events as f64 / wall,
        sim.config().lookahead / NANOS_PER_MILLI,
    );
    println!("sim_seconds_per_wall_second={:.2}", a.sim_seconds / wall);
}
