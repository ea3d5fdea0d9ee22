//! Segmentation offload (`NetworkConfig::segment_offload`): a socket's back-to-back segments
//! (TCP) or datagrams (QUIC, as `UDP_SEGMENT` batches) travel as one packet, so the model
//! handles far fewer events for the same transfer, while the transport sees the same bytes,
//! the path loses each segment on its own, and the figures a researcher checks TCP against
//! still hold (Mathis's formula and determinism with offload are in `tcp_behaviour.rs`).

use onionlab_engine::time::secs;
use onionlab_net::iperf::*;
use onionlab_net::tcp::{CongestionControl, TcpConfig};
use onionlab_net::NetworkConfig;

const MBIT: u64 = 1_000_000;

fn config(cc: CongestionControl, segment_offload: bool) -> NetworkConfig {
    NetworkConfig {
        segment_offload,
        tcp: TcpConfig {
            congestion: cc,
            ..TcpConfig::default()
        },
        ..NetworkConfig::default()
    }
}

/// A TCP or a QUIC sender (one stream) of `total` bytes in messages of `message` bytes.
fn sender_over(quic: bool, dst: u32, total: Option<u64>, message: u64) -> Role {
    if quic {
        quic_sender(dst, total, message)
    } else {
        sender(dst, total, message)
    }
}

/// One bulk flow into a bottleneck downstream, 50 ms RTT: goodput, events in one second and
/// the sender's counters.
fn bulk_flow(quic: bool, bottleneck: u64, offload: bool) -> (f64, u64, onionlab_net::NetStats) {
    let graph = switch_graph(25.0, 0.0, 0.0);
    let places = [at(1000 * MBIT, 1000 * MBIT), at(1000 * MBIT, bottleneck)];
    let message = if quic { 514 } else { 64 * 1024 };
    let roles = vec![sender_over(quic, 1, None, message), sink(message)];
    let mut sim = build(
        &graph,
        &places,
        config(CongestionControl::Cubic, offload),
        roles,
        1,
        1,
    );
    let rate = goodput(&mut sim, 1, secs(5), secs(30));
    let events = sim.run_until(secs(31)).events;
    (rate, events, sim.host(0).stack.stats())
}

/// With offload a bulk flow fills the link as without (within 3%; the 500 Mbit/s flow is
/// held to about 90% by its buffers either way), in fewer events, with as many wire packets
/// for its bytes (a batch's are counted one by one). Linux sizes a TCP burst to about a
/// millisecond of the flow's rate, and QUIC's batches are sized the same way, so a 10 Mbit/s
/// flow sends two segments at a time and a 500 Mbit/s one tens.
#[test]
fn offload_fills_a_bottleneck_in_fewer_events() {
    for quic in [false, true] {
        for (mbit, most_events) in [(10, 0.8), (500, 0.2)] {
            let link = (mbit * MBIT) as f64;
            let (plain, plain_events, plain_stats) = bulk_flow(quic, mbit * MBIT, false);
            let (offloaded, events, stats) = bulk_flow(quic, mbit * MBIT, true);
            eprintln!(
                "{} {mbit} Mbit/s: goodput {:.3} / {:.3} Mbit/s; events in one second \
                 {plain_events} / {events}; {plain_stats:?} / {stats:?}",
                if quic { "QUIC" } else { "TCP" },
                plain / 1e6,
                offloaded / 1e6
            );
            assert!(offloaded >= 0.85 * link && offloaded <= link, "{offloaded}");
            assert!(
                (offloaded - plain).abs() <= 0.03 * plain,
                "{offloaded} against {plain}"
            );
            assert!(
                (events as f64) < most_events * plain_events as f64,
                "{events} events against {plain_events}"
            );
            // Wire packets are counted per segment either way: as many for as many bytes.
            let per_byte = |s: &onionlab_net::NetStats| s.packets_sent as f64 / s.bytes_sent as f64;
            let ratio = per_byte(&stats) / per_byte(&plain_stats);
            assert!(
                (0.97..1.03).contains(&ratio),
                "{stats:?} against {plain_stats:?}"
            );
            // Without offload every packet leaves on its own; with it, in batches of several
            // (fewer per batch on the slow link, whose window per round trip is smaller).
            assert_eq!(plain_stats.batches_sent, plain_stats.packets_sent);
            let per_batch = stats.packets_sent as f64 / stats.batches_sent as f64;
            assert!(per_batch > 1.5, "{per_batch} packets per batch: {stats:?}");
        }
    }
}

/// The path loses each segment of an offloaded packet on its own: the share of segments lost
/// is the path's loss, and a lost segment in the middle of a packet is repaired like any other.
#[test]
fn offloaded_segments_are_lost_one_by_one_and_every_byte_arrives_in_order() {
    for quic in [false, true] {
        // 2% loss each way and up to 10 ms of jitter on a 40 ms RTT path.
        let graph = switch_graph(20.0, 0.02, 10.0);
        let places = [at(20 * MBIT, 20 * MBIT), at(20 * MBIT, 20 * MBIT)];
        let total = 20_000_000;
        // Odd message sizes so that message ends fall anywhere inside segments.
        let roles = vec![sender_over(quic, 1, Some(total), 777), sink(777)];
        let mut sim = build(
            &graph,
            &places,
            config(CongestionControl::Cubic, true),
            roles,
            2,
            9,
        );
        sim.run_until(secs(600));
        let got = received(&sim, 1);
        assert_eq!(got.len(), 1);
        let r = &got[0];
        assert_eq!(r.error, None);
        assert_eq!(r.bytes, total);
        assert_eq!(r.messages, total.div_ceil(777));
        if !quic {
            assert!(r.closed, "the FIN arrived after all data");
        }
        let stats = sim.host(0).stack.stats();
        let lost = stats.path_losses as f64 / stats.packets_sent as f64;
        eprintln!("{stats:?}: {:.4} of segments lost (QUIC {quic})", lost);
        assert!(stats.packets_sent > 10_000, "{stats:?}");
        assert!((0.016..0.024).contains(&lost), "{lost}");
    }
}
