//! Throughput, loss response and fairness on bulk transfers. Figures are printed so that
//! `cargo test -- --nocapture` shows what was measured.

use onionlab_tcp::{CongestionControl, TcpConfig};
use onionlab_transport_testkit::*;

/// Bulk flows from clients to servers over a bottleneck; returns bytes delivered per flow at
/// `from` and at `to`, plus the sim for further inspection.
fn bulk(
    cfg: &TcpConfig,
    flows: usize,
    fwd: LinkConfig,
    rev: LinkConfig,
    seed: u64,
    from: u64,
    to: u64,
) -> (Vec<u64>, Sim) {
    let mut s = Sim::tcp(cfg, flows, fwd, rev, seed);
    s.check = false;
    for f in 0..flows {
        s.eps[2 * f].app = App::source(u64::MAX, false);
    }
    s.start();
    s.run_until(from);
    let start: Vec<u64> = (0..flows).map(|f| s.delivered(2 * f + 1)).collect();
    s.run_until(to);
    let got = (0..flows)
        .map(|f| s.delivered(2 * f + 1) - start[f])
        .collect();
    (got, s)
}

#[test]
fn single_flow_fills_the_bottleneck() {
    let rate = 10_000_000;
    let one_way = 25 * MS;
    let queue = bdp(rate, 2 * one_way);
    let fwd = LinkConfig::new(rate, one_way, queue);
    let rev = LinkConfig::new(rate, one_way, 1 << 20);
    for cc in [CongestionControl::Cubic, CongestionControl::Reno] {
        let cfg = TcpConfig {
            congestion: cc,
            ..TcpConfig::default()
        };
        let (got, s) = bulk(&cfg, 1, fwd.clone(), rev.clone(), 7, 5 * SEC, 30 * SEC);
        let bps = goodput_bps(got[0], 5 * SEC, 30 * SEC);
        let info = s.tcp_conn(0).info();
        println!(
            "{cc:?}: goodput {:.2} Mbit/s = {:.1}% of link; drops {}; {info:?}",
            bps / 1e6,
            100.0 * bps / rate as f64,
            s.links[0].queue_drops
        );
        assert!(bps >= 0.9 * rate as f64, "{cc:?} goodput {bps}");
    }
}

#[test]
fn reno_follows_mathis_under_random_loss() {
    let p = 0.01;
    let rtt = 100 * MS;
    let mut fwd = LinkConfig::new(100_000_000, rtt / 2, 4 << 20);
    fwd.loss = p;
    let rev = LinkConfig::new(100_000_000, rtt / 2, 4 << 20);
    let cfg = TcpConfig {
        congestion: CongestionControl::Reno,
        ..TcpConfig::default()
    };
    let mut ratios = vec![];
    for seed in 1..=3 {
        let (got, s) = bulk(&cfg, 1, fwd.clone(), rev.clone(), seed, 10 * SEC, 110 * SEC);
        let bps = goodput_bps(got[0], 10 * SEC, 110 * SEC);
        let mathis = 1448.0 * 8.0 / (rtt as f64 / SEC as f64) * 1.22 / p.sqrt();
        let info = s.tcp_conn(0).info();
        println!(
            "Reno seed {seed}: {:.3} Mbit/s, Mathis {:.3} Mbit/s, ratio {:.2}; rto {} fr {}",
            bps / 1e6,
            mathis / 1e6,
            bps / mathis,
            info.rto_count,
            info.fast_recoveries
        );
        ratios.push(bps / mathis);
    }
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    assert!((0.5..=2.0).contains(&mean), "mean ratio {mean}");
}

/// A long fat pipe with rare random loss: CUBIC's window growth is independent of RTT
/// and it should clearly beat Reno, which needs thousands of RTTs to refill the pipe.
#[test]
fn cubic_not_slower_than_reno_on_long_fat_pipe() {
    let rate = 100_000_000;
    let rtt = 200 * MS;
    let mut fwd = LinkConfig::new(rate, rtt / 2, bdp(rate, rtt));
    fwd.loss = 1e-4;
    let rev = LinkConfig::new(rate, rtt / 2, 4 << 20);
    let mut res = vec![];
    for cc in [CongestionControl::Reno, CongestionControl::Cubic] {
        let cfg = TcpConfig {
            congestion: cc,
            ..TcpConfig::default()
        };
        let mut sum = 0.0;
        for seed in 1..=2 {
            let (got, s) = bulk(&cfg, 1, fwd.clone(), rev.clone(), seed, 10 * SEC, 60 * SEC);
            let bps = goodput_bps(got[0], 10 * SEC, 60 * SEC);
            let info = s.tcp_conn(0).info();
            println!(
                "{cc:?} seed {seed}: {:.2} Mbit/s cwnd {} rto {} fr {}",
                bps / 1e6,
                info.cwnd,
                info.rto_count,
                info.fast_recoveries
            );
            sum += bps;
        }
        res.push(sum / 2.0);
    }
    println!(
        "Reno {:.2} Mbit/s, CUBIC {:.2} Mbit/s",
        res[0] / 1e6,
        res[1] / 1e6
    );
    assert!(res[1] >= res[0], "CUBIC {} < Reno {}", res[1], res[0]);
}

#[test]
fn two_flows_share_fairly() {
    let rate = 10_000_000;
    let one_way = 25 * MS;
    let fwd = LinkConfig::new(rate, one_way, bdp(rate, 2 * one_way));
    let rev = LinkConfig::new(rate, one_way, 1 << 20);
    for cc in [CongestionControl::Cubic, CongestionControl::Reno] {
        let cfg = TcpConfig {
            congestion: cc,
            ..TcpConfig::default()
        };
        let (got, _) = bulk(&cfg, 2, fwd.clone(), rev.clone(), 3, 0, 60 * SEC);
        let j = jain(&got);
        let total = goodput_bps(got.iter().sum(), 0, 60 * SEC);
        println!(
            "{cc:?}: flows {:?} bytes, Jain {j:.3}, total {:.2} Mbit/s",
            got,
            total / 1e6
        );
        assert!(j >= 0.9, "{cc:?} Jain index {j}");
        assert!(total >= 0.85 * rate as f64);
    }
}

#[test]
fn buffers_autotune_on_high_bdp_path() {
    let rate = 100_000_000;
    let rtt = 100 * MS;
    let path_bdp = bdp(rate, rtt);
    let fwd = LinkConfig::new(rate, rtt / 2, path_bdp);
    let rev = LinkConfig::new(rate, rtt / 2, 4 << 20);
    let cfg = TcpConfig::default();
    let (got, s) = bulk(&cfg, 1, fwd, rev, 5, 5 * SEC, 15 * SEC);
    let bps = goodput_bps(got[0], 5 * SEC, 15 * SEC);
    let snd = s.tcp_conn(0).info();
    let rcv = s.tcp_conn(1).info();
    println!(
        "BDP {path_bdp}: send buffer {} recv buffer {} goodput {:.2} Mbit/s",
        snd.send_buffer,
        rcv.recv_buffer,
        bps / 1e6
    );
    assert!(
        snd.send_buffer > path_bdp,
        "send buffer {}",
        snd.send_buffer
    );
    assert!(
        rcv.recv_buffer > path_bdp,
        "recv buffer {}",
        rcv.recv_buffer
    );
    assert!(snd.send_buffer <= cfg.send_buffer_max);
    assert!(rcv.recv_buffer <= cfg.recv_buffer_max);
    assert!(bps >= 0.8 * rate as f64, "goodput {bps}");

    // Without autotuning the initial 128 KiB receive window caps the rate near 128 KiB/RTT.
    let cfg = TcpConfig {
        autotune: false,
        ..TcpConfig::default()
    };
    let fwd = LinkConfig::new(rate, rtt / 2, path_bdp);
    let rev = LinkConfig::new(rate, rtt / 2, 4 << 20);
    let (got, _) = bulk(&cfg, 1, fwd, rev, 5, 5 * SEC, 15 * SEC);
    let fixed = goodput_bps(got[0], 5 * SEC, 15 * SEC);
    println!("without autotuning: {:.2} Mbit/s", fixed / 1e6);
    assert!(fixed < 0.3 * bps);
}

/// TSO sizing (`TcpConnection::offload_segments`, Linux's `tcp_tso_autosize`): about a
/// millisecond of the flow's pacing rate per packet, so a flow at 10 Mbit/s sends a few
/// segments at a time and one at 500 Mbit/s the most the caller allows.
#[test]
fn offload_packets_hold_about_a_millisecond_of_the_flows_rate() {
    let cfg = TcpConfig::default();
    let sized = |rate: u64| {
        let one_way = 10 * MS;
        let fwd = LinkConfig::new(rate, one_way, bdp(rate, 2 * one_way));
        let rev = LinkConfig::new(rate, one_way, 1 << 20);
        let (got, s) = bulk(&cfg, 1, fwd, rev, 3, 5 * SEC, 10 * SEC);
        let bps = goodput_bps(got[0], 5 * SEC, 10 * SEC);
        let conn = s.tcp_conn(0);
        let info = conn.info();
        // What the pacing rate sends in 1/1024 s, from the window and the smoothed RTT.
        let pacing = info.cwnd as f64 * info.mss as f64 * 1.2 / (info.srtt as f64 / 1e9);
        let expect = pacing / 1024.0 / info.mss as f64;
        println!(
            "{} Mbit/s: goodput {:.1} Mbit/s, {} segments per packet (about {expect:.1}); {info:?}",
            rate / 1_000_000,
            bps / 1e6,
            conn.offload_segments(44)
        );
        (conn.offload_segments(44), conn.offload_segments(1), expect)
    };
    let (slow, _, expect) = sized(10_000_000);
    assert!(expect < 5.0, "{expect}");
    assert_eq!(slow, (expect.floor() as u16).max(2));
    let (fast, capped, expect) = sized(500_000_000);
    assert!(expect > 44.0, "{expect}");
    assert_eq!(fast, 44);
    assert_eq!(capped, 1, "never more than the caller allows");
}
