//! One client downloading through three relays: the model end to end.

mod common;

use common::*;
use onionlab_engine::time::{as_secs_f64, secs};
use onionlab_tor::measure::DownloadOutcome;
use onionlab_torcore::{FlowControl, TorParams};
use onionlab_traffic::Workload;

const MIB: u64 = 1 << 20;

fn one_bulk_download(flow: FlowControl) -> f64 {
    let params = TorParams {
        flow_control: flow,
        ..TorParams::default()
    };
    // Relays limited to 2 MiB/s on 100 Mbit/s links: the relays' token buckets are the
    // bottleneck.
    let bulk = Workload::Bulk {
        size_bytes: 5 * MIB,
        timeout: secs(120),
    };
    let mut sim = three_relays(params, 2 * MIB, 100 * MBIT, vec![bulk], 1);
    sim.run_until(secs(60));
    let c = client(&sim, 4);
    let first = &c.finished[0];
    assert_eq!(first.outcome, DownloadOutcome::Ok, "{first:?}");
    // The circuit went guard, middle, exit (consensus indices 0, 1, 2).
    assert_eq!(first.path, Some([0, 1, 2]));
    // Every byte the server sent arrived: the exit read exactly the requested bytes.
    let served = match sim.host(3) {
        onionlab_tor::TorHost::Server(s) => s.bytes_served,
        _ => unreachable!(),
    };
    assert!(served >= 5 * MIB);
    let took = as_secs_f64(first.last_byte.unwrap() - first.start);
    let build = as_secs_f64(first.circuit_build.unwrap());
    eprintln!("{flow:?}: 5 MiB in {took:.3} s, circuit built in {build:.3} s");
    // Circuit build: three round trips to successive hops (20, 40, 60 ms) at least.
    assert!(build >= 0.12, "build {build}");
    // Transfer: each relay writes 543 bytes (cell + TLS) per 498 payload bytes, at most
    // rate x t + burst (the bucket starts full with a 2 MiB burst). So the download cannot
    // take less than (wire - burst) / rate, and a model that keeps the bottleneck busy takes
    // little more than wire / rate.
    let wire = 5.0 * 543.0 / 498.0;
    let lower = (wire - 2.0) / 2.0;
    let upper = wire / 2.0 + 1.0;
    assert!(
        took >= lower,
        "took {took}, faster than the rate limit allows ({lower})"
    );
    assert!(
        took <= upper,
        "took {took}, far slower than the bottleneck allows ({upper})"
    );
    took
}

#[test]
fn a_5_mib_download_goes_guard_middle_exit_and_arrives_whole_under_vegas() {
    one_bulk_download(FlowControl::Vegas);
}

#[test]
fn a_5_mib_download_goes_guard_middle_exit_and_arrives_whole_under_sendme() {
    one_bulk_download(FlowControl::Sendme);
}
