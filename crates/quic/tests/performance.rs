//! Throughput, loss response and fairness on bulk transfers, against the link and against the
//! TCP model on the same link. Figures are printed so that `cargo test -- --nocapture` shows
//! what was measured.

use onionlab_quic::{CongestionControl, QuicConfig};
use onionlab_tcp::TcpConfig;
use onionlab_transport_testkit::*;
use std::sync::Arc;

/// One bulk flow per protocol, clients sending; returns bytes delivered per flow between
/// `from` and `to`, and the sim.
fn bulk(
    protos: &[Proto],
    fwd: LinkConfig,
    rev: LinkConfig,
    seed: u64,
    from: u64,
    to: u64,
) -> (Vec<u64>, Sim) {
    let mut s = Sim::new(protos, fwd, rev, seed);
    s.check = false;
    for (f, p) in protos.iter().enumerate() {
        match p {
            Proto::Quic(_) => s.eps[2 * f].app.open = vec![(u64::MAX, false)],
            Proto::Tcp(_) => s.eps[2 * f].app.to_send = u64::MAX,
        }
    }
    s.start();
    s.run_until(from);
    let start: Vec<u64> = (0..protos.len()).map(|f| s.delivered(2 * f + 1)).collect();
    s.run_until(to);
    let got = (0..protos.len())
        .map(|f| s.delivered(2 * f + 1) - start[f])
        .collect();
    (got, s)
}

fn quic(cfg: QuicConfig) -> Proto {
    Proto::Quic(Arc::new(cfg))
}

fn tcp() -> Proto {
    Proto::Tcp(Arc::new(TcpConfig::default()))
}

#[test]
fn single_flow_fills_the_bottleneck() {
    let rate = 10_000_000;
    let one_way = 25 * MS;
    let fwd = LinkConfig::new(rate, one_way, bdp(rate, 2 * one_way));
    let rev = LinkConfig::new(rate, one_way, 1 << 20);
    for cc in [CongestionControl::Cubic, CongestionControl::Reno] {
        let cfg = QuicConfig {
            congestion: cc,
            ..QuicConfig::default()
        };
        let (got, s) = bulk(&[quic(cfg)], fwd.clone(), rev.clone(), 7, 5 * SEC, 30 * SEC);
        let bps = goodput_bps(got[0], 5 * SEC, 30 * SEC);
        let info = s.quic_conn(0).info();
        println!(
            "{cc:?}: goodput {:.2} Mbit/s = {:.1}% of link; drops {}; overhead {:.1}% (UDP payload / stream bytes); {info:?}",
            bps / 1e6,
            100.0 * bps / rate as f64,
            s.links[0].queue_drops,
            100.0 * (info.udp_bytes_sent as f64 / (info.stream_bytes_sent + info.stream_bytes_retransmitted) as f64 - 1.0),
        );
        assert!(bps >= 0.9 * rate as f64, "{cc:?} goodput {bps}");
    }
}

#[test]
fn shares_fairly_with_tcp() {
    let rate = 10_000_000;
    let one_way = 25 * MS;
    let fwd = LinkConfig::new(rate, one_way, bdp(rate, 2 * one_way));
    let rev = LinkConfig::new(rate, one_way, 1 << 20);
    let (got, s) = bulk(
        &[quic(QuicConfig::default()), tcp()],
        fwd,
        rev,
        3,
        10 * SEC,
        70 * SEC,
    );
    let j = jain(&got);
    let total = goodput_bps(got.iter().sum(), 10 * SEC, 70 * SEC);
    let qi = s.quic_conn(0).info();
    let ti = s.tcp_conn(2).info();
    println!(
        "QUIC {:.2} Mbit/s, TCP {:.2} Mbit/s, Jain {j:.3}, total {:.2} Mbit/s; QUIC lost {} events {}; TCP retransmits {} fr {}",
        goodput_bps(got[0], 10 * SEC, 70 * SEC) / 1e6,
        goodput_bps(got[1], 10 * SEC, 70 * SEC) / 1e6,
        total / 1e6,
        qi.packets_lost,
        qi.congestion_events,
        ti.retransmits,
        ti.fast_recoveries
    );
    assert!(j >= 0.9, "Jain index {j}");
    assert!(total >= 0.85 * rate as f64, "total {total}");
}

#[test]
fn random_loss_goodput_close_to_tcp() {
    let rate = 20_000_000;
    let one_way = 25 * MS;
    let mut fwd = LinkConfig::new(rate, one_way, bdp(rate, 2 * one_way));
    fwd.loss = 0.01;
    let rev = LinkConfig::new(rate, one_way, 1 << 20);
    let mut q = 0.0;
    let mut t = 0.0;
    for seed in 1..=3 {
        let (got, s) = bulk(
            &[quic(QuicConfig::default())],
            fwd.clone(),
            rev.clone(),
            seed,
            5 * SEC,
            35 * SEC,
        );
        let info = s.quic_conn(0).info();
        let qb = goodput_bps(got[0], 5 * SEC, 35 * SEC);
        let (got, _) = bulk(&[tcp()], fwd.clone(), rev.clone(), seed, 5 * SEC, 35 * SEC);
        let tb = goodput_bps(got[0], 5 * SEC, 35 * SEC);
        println!(
            "1% loss, seed {seed}: QUIC {:.2} Mbit/s (lost {}, PTOs {}, events {}), TCP {:.2} Mbit/s",
            qb / 1e6,
            info.packets_lost,
            info.ptos,
            info.congestion_events,
            tb / 1e6
        );
        q += qb;
        t += tb;
    }
    println!(
        "mean: QUIC {:.2} Mbit/s, TCP {:.2} Mbit/s, ratio {:.2}",
        q / 3e6,
        t / 3e6,
        q / t
    );
    assert!(q >= t / 2.0, "QUIC {q} below half of TCP {t}");
    assert!(q <= 2.0 * t, "QUIC {q} above twice TCP {t}");
}

/// On a long fat pipe the default 256 KiB stream window would cap a transfer near 21 Mbit/s;
/// autotuning lets it fill the link.
#[test]
fn receive_window_autotunes_on_long_fat_pipe() {
    let rate = 100_000_000;
    let rtt = 100 * MS;
    let path_bdp = bdp(rate, rtt);
    let fwd = LinkConfig::new(rate, rtt / 2, path_bdp);
    let rev = LinkConfig::new(rate, rtt / 2, 4 << 20);
    let cfg = QuicConfig::default();
    let (got, s) = bulk(
        &[quic(cfg.clone())],
        fwd.clone(),
        rev.clone(),
        5,
        5 * SEC,
        15 * SEC,
    );
    let bps = goodput_bps(got[0], 5 * SEC, 15 * SEC);
    let server = s.quic_conn(1);
    let stream = onionlab_quic::StreamId(0);
    let (conn_limit, stream_limit) = server.recv_limits(stream);
    let window = stream_limit - server.read_offset(stream);
    println!(
        "BDP {path_bdp}: stream window now {window} (limit {stream_limit}), connection limit {conn_limit}, goodput {:.2} Mbit/s",
        bps / 1e6
    );
    assert!(window > cfg.stream_window, "window {window}");
    assert!(window <= cfg.stream_window_max);
    assert!(bps >= 0.8 * rate as f64, "goodput {bps}");

    let fixed_cfg = QuicConfig {
        autotune: false,
        ..QuicConfig::default()
    };
    let (got, _) = bulk(&[quic(fixed_cfg)], fwd, rev, 5, 5 * SEC, 15 * SEC);
    let fixed = goodput_bps(got[0], 5 * SEC, 15 * SEC);
    println!("without autotuning: {:.2} Mbit/s", fixed / 1e6);
    assert!(fixed < 0.3 * bps, "fixed {fixed}");
}
