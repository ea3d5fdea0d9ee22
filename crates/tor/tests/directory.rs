//! Directory traffic: each user's tor fetches consensus diffs and microdescriptors from its
//! directory guard on tor's client schedule.

mod common;

use common::*;
use onionlab_engine::time::secs;
use onionlab_tor::directory::{
    DIFF_BYTES, MICRODESCS_PER_HOUR, MICRODESC_BYTES, RESPONSE_HEADER_BYTES,
};
use onionlab_torcore::TorParams;
use onionlab_traffic::Workload;

const USERS: u32 = 100;
const HOURS: u64 = 24;

/// Clients that download once, then only fetch directory documents.
fn quiet_clients() -> Vec<Workload> {
    (0..USERS)
        .map(|_| Workload::Perf {
            size_bytes: 1000,
            interval: secs(24 * 3600),
            timeout: secs(60),
        })
        .collect()
}

/// Directory bytes per user and hour in tor's steady state, from the schedule alone. A user
/// holding the consensus of hour V fetches at V + 6,300 s + X, X uniform over 3,937 whole
/// seconds. The fetch lands in hour V + 1 when X < 900 (a one-hour diff) and in V + 2
/// otherwise (two hours), and the next fetch follows from that hour. The phase of a fetch within
/// its hour is then (2,700 + X) mod 3,600 whatever came before, so the mean interval is
/// 6,300 + E[X] − E[phase].
fn closed_form_bytes_per_user_hour() -> f64 {
    let spread = 3937.0;
    let p1 = 900.0 / spread;
    let p2 = 1.0 - p1;
    let mean_x = (spread - 1.0) / 2.0;
    let sum_phase: f64 = (0..3937u64)
        .map(|x| ((2700 + x) % 3600) as f64)
        .sum::<f64>();
    let mean_interval = 6300.0 + mean_x - sum_phase / spread;
    assert!((mean_interval - 6377.0).abs() < 1.0, "{mean_interval}");
    let header = RESPONSE_HEADER_BYTES as f64;
    let md = MICRODESC_BYTES as f64;
    // One hour: about 24 new microdescriptors, one request; two hours: about 48, two
    // requests (tor asks for no fewer than 32 per request).
    let one = header + DIFF_BYTES[0] as f64 + header + MICRODESCS_PER_HOUR * md;
    let two = header + DIFF_BYTES[1] as f64 + 2.0 * header + 2.0 * MICRODESCS_PER_HOUR * md;
    (p1 * one + p2 * two) * 3600.0 / mean_interval
}

#[test]
fn directory_bytes_per_user_and_hour_match_tors_schedule() {
    let mut sim = three_relays(
        TorParams::default(),
        10 << 20,
        100 * MBIT,
        quiet_clients(),
        1,
    );
    sim.run_until(secs(HOURS * 3600));
    let mut bytes = 0;
    let mut fetches = 0;
    for host in 4..4 + USERS {
        let s = client(&sim, host).directory_stats();
        assert_eq!(s.failures, 0, "client {host}");
        bytes += s.bytes;
        fetches += s.fetches;
    }
    let per_user_hour = bytes as f64 / (USERS as u64 * HOURS) as f64;
    let expected = closed_form_bytes_per_user_hour();
    eprintln!("{fetches} fetches, {per_user_hour:.0} B per user-hour, closed form {expected:.0}");
    assert!(
        (per_user_hour / expected - 1.0).abs() < 0.03,
        "{per_user_hour:.0} against {expected:.0}"
    );
    // About one fetch per 6,377 s per user.
    let expected_fetches = (USERS as u64 * HOURS * 3600) as f64 / 6377.0;
    assert!(
        (fetches as f64 / expected_fetches - 1.0).abs() < 0.03,
        "{fetches}"
    );
}

#[test]
fn directory_circuits_stay_out_of_the_circuit_log_and_can_be_switched_off() {
    let run = |directory_traffic: bool| {
        let params = TorParams {
            directory_traffic,
            ..TorParams::default()
        };
        let mut sim = three_relays(params, 10 << 20, 100 * MBIT, quiet_clients(), 2);
        sim.run_until(secs(2 * 3600));
        let mut bytes = 0;
        for host in 4..4 + USERS {
            let c = client(&sim, host);
            bytes += c.directory_stats().bytes;
            assert_eq!(c.window_violations, 0);
            // Only the workload's three-hop circuits are logged.
            for log in &c.circuit_log {
                assert!(log.path.iter().all(|&r| r < 3), "{:?}", log.path);
            }
        }
        bytes
    };
    assert!(run(true) > 0);
    assert_eq!(run(false), 0);
}

#[test]
fn directory_traffic_is_deterministic_across_thread_counts() {
    let run = |threads| {
        let mut sim = three_relays(
            TorParams::default(),
            10 << 20,
            100 * MBIT,
            quiet_clients(),
            threads,
        );
        sim.run_until(secs(3600));
        (4..4 + USERS)
            .map(|h| client(&sim, h).directory_stats())
            .collect::<Vec<_>>()
    };
    assert_eq!(run(1), run(3));
}
