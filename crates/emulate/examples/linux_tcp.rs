//! One bulk TCP flow of this machine's Linux between two namespaces, through the emulator's
//! switch and shaping: the real-kernel counterpart of `onionlab-net`'s `tcp_bulk` example, for
//! checking the TCP model against Linux on the same link, latency and loss.
//!
//! `cargo run --release -p onionlab-emulate --example linux_tcp -- --mbit 200 --rtt-ms 80 --loss 0.002 --seconds 60`
//! (needs root). Prints the goodput and the congestion control Linux used.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use clap::Parser;
use onionlab_emulate::delay::PathSpec;
use onionlab_emulate::forwarder::{self, ForwarderConfig, Port};
use onionlab_emulate::lab::Lab;
use onionlab_emulate::netns;

#[derive(Parser)]
struct Args {
    /// Link rate of both hosts, both directions.
    #[arg(long, default_value_t = 100)]
    mbit: u64,
    /// Round-trip time (half of it each way).
    #[arg(long, default_value_t = 50)]
    rtt_ms: u64,
    /// Loss probability of every packet, each way.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Leave TSO, GSO and GRO on at both hosts (the switch cuts super-frames into wire
    /// segments), as `onionlab emulate` does for `network.segment_offload`.
    #[arg(long)]
    offload: bool,
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    let mut lab = Lab::new()?;
    let hub = lab.hub();
    lab.add_namespace(&hub)?;
    let hosts: Vec<(Ipv4Addr, [u8; 6])> = (0..2u8)
        .map(|i| (Ipv4Addr::new(10, 0, 0, i + 1), [2, 0, 0, 0, 0, i + 1]))
        .collect();
    for (i, (address, mac)) in hosts.iter().enumerate() {
        let ns = lab.node_ns(i);
        lab.add_namespace(&ns)?;
        lab.add_link(i, *address, *mac, args.offload)?;
        lab.shape(
            &ns,
            "eth0",
            args.mbit * 1_000_000,
            Duration::from_millis(500),
        )?;
        lab.shape(
            &hub,
            &format!("p{i}"),
            args.mbit * 1_000_000,
            Duration::from_millis(100),
        )?;
    }
    for i in 0..2 {
        lab.add_neighbours(i, &hosts)?;
    }
    let path = PathSpec {
        latency_ns: args.rtt_ms * 500_000,
        jitter_ns: 0,
        loss: args.loss,
    };
    let switch = forwarder::start(
        &hub,
        ForwarderConfig {
            ports: hosts
                .iter()
                .enumerate()
                .map(|(i, (_, mac))| Port {
                    ifname: format!("p{i}"),
                    mac: *mac,
                })
                .collect(),
            paths: vec![vec![path; 2]; 2],
            seed: args.seed,
            allow_reorder: false,
        },
    )
    .map_err(|e| e.to_string())?;
    let server = SocketAddrV4::new(hosts[1].0, 5001);
    let listener = netns::run_in(&lab.node_ns(1), move || TcpListener::bind(server))
        .map_err(|e| e.to_string())?;
    let reader = std::thread::spawn(move || -> std::io::Result<(u64, f64)> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 16];
        let (mut total, started) = (0u64, Instant::now());
        loop {
            match s.read(&mut buf)? {
                0 => return Ok((total, started.elapsed().as_secs_f64())),
                n => total += n as u64,
            }
        }
    });
    let seconds = args.seconds;
    let cc = netns::run_in(&lab.node_ns(0), move || {
        let mut s = TcpStream::connect(server)?;
        let buf = vec![0u8; 1 << 16];
        let end = Instant::now() + Duration::from_secs(seconds);
        while Instant::now() < end {
            s.write_all(&buf)?;
        }
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
    })
    .map_err(|e| e.to_string())?;
    let (bytes, secs) = reader
        .join()
        .map_err(|_| "reader panicked")?
        .map_err(|e| e.to_string())?;
    let stats = switch.stop().map_err(|e| e.to_string())?;
    println!(
        "linux_tcp offload={} mbit={} rtt_ms={} loss={} seconds={:.1} goodput_mbit={:.3} cc={} \
         frames_lost={} frames_received={} gso_frames={} gso_segments={}",
        args.offload,
        args.mbit,
        args.rtt_ms,
        args.loss,
        secs,
        bytes as f64 * 8.0 / secs / 1e6,
        cc.trim(),
        stats.lost,
        stats.received,
        stats.gso_frames,
        stats.gso_segments,
    );
    Ok(())
}
