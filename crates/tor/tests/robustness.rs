//! Clients that can never get a circuit, streams whose BEGIN is never answered, limits on
//! circuits being built, absurd timer settings, and injected model failures: the model keeps
//! time moving and fails cleanly.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::*;
use onionlab_engine::time::{millis, secs};
use onionlab_engine::{SimTime, Simulation};
use onionlab_netdir::{ExitPolicy, RelayFlags};
use onionlab_tor::measure::{CircuitOutcome, DownloadOutcome};
use onionlab_tor::{inject_fault, TorHost, INJECTED_FAULT};
use onionlab_torcore::TorParams;
use onionlab_traffic::Workload;

const MIB: u64 = 1 << 20;

/// Runs `f` on a thread with a small stack and fails if it does not finish in time: a model
/// that recursed per download would overflow the stack, one that spun at one instant would
/// never finish.
fn bounded<T: Send + 'static>(stack: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::Builder::new()
        .stack_size(stack)
        .spawn(move || {
            let _ = tx.send(f());
        })
        .unwrap();
    rx.recv_timeout(Duration::from_secs(300))
        .expect("the run did not finish (it crashed, spun or hung)")
}

/// Two relays without the Guard flag and one exit, as in the scenario that crashed: no
/// client can choose a guard, so no path exists. Host ids: 0, 1 relays, 2 exit, 3 server,
/// 4.. clients.
fn no_guard(params: TorParams, clients: Vec<Workload>) -> Simulation<TorHost> {
    let relays = vec![
        relay("a1", 1, RelayFlags::default(), 1000),
        relay("a2", 2, RelayFlags::default(), 1000),
        relay("c", 3, RelayFlags::EXIT, 1000),
    ];
    network(params, relays, vec![(MIB, 50 * MBIT); 3], clients, 1)
}

/// A guard and a middle, and an exit whose policy rejects port 80.
fn no_exit_for_port_80(clients: Vec<Workload>) -> Simulation<TorHost> {
    let mut relays = guard_middle_exit_relays();
    relays[2].exit_policy = ExitPolicy::reject_all();
    network(
        TorParams::default(),
        relays,
        vec![(MIB, 50 * MBIT); 3],
        clients,
        1,
    )
}

fn bulk(timeout: SimTime) -> Workload {
    Workload::Bulk {
        size_bytes: 5 * MIB,
        timeout,
    }
}

/// Checks that a client that started at 1 s and can never get a circuit failed one download
/// per timeout, each as `outcome`, back to back, and launched no circuit.
fn fails_once_per_timeout(
    sim: &Simulation<TorHost>,
    host: u32,
    timeout: SimTime,
    stop: SimTime,
    outcome: DownloadOutcome,
) {
    let c = client(sim, host);
    // Failures at 1 s + k * timeout for k >= 1, strictly before the stop time.
    let expected = (stop - secs(1) - 1) / timeout;
    assert_eq!(c.finished.len() as u64, expected, "client {host}");
    for (k, d) in c.finished.iter().enumerate() {
        assert_eq!(d.outcome, outcome, "client {host}, download {k}");
        assert_eq!(d.start, secs(1) + k as u64 * timeout, "client {host}");
        assert_eq!((d.path, d.circuit, d.first_byte), (None, None, None));
    }
    assert!(c.circuit_log.is_empty(), "client {host} launched a circuit");
    // The next download is waiting.
    assert_eq!(c.unfinished().count(), 1);
}

#[test]
fn the_crashing_scenario_runs_to_its_end() {
    // The reported case: a bulk client, default workload (120 s timeout), no guard, 10 s.
    let (pending, finished, reached) = bounded(8 << 20, || {
        let mut sim = no_guard(TorParams::default(), vec![Workload::bulk_default()]);
        let stats = sim.run_until(secs(10));
        let c = client(&sim, 3 + 1);
        (c.unfinished().count(), c.finished.len(), stats.sim_time)
    });
    assert_eq!((pending, finished, reached), (1, 0, secs(10)));
}

#[test]
fn without_a_path_a_client_fails_one_download_per_timeout_as_no_path() {
    let timeout = secs(5);
    let stop = secs(60);
    let no_pause = Workload::Web {
        size_bytes: 320 * 1024,
        pause_min: 0,
        pause_max: 0,
        timeout,
    };
    let perf = Workload::Perf {
        size_bytes: 50 * 1024,
        interval: secs(2),
        timeout,
    };
    let sim = bounded(8 << 20, move || {
        let mut sim = no_guard(TorParams::default(), vec![bulk(timeout), no_pause, perf]);
        sim.run_until(stop);
        sim
    });
    fails_once_per_timeout(&sim, 4, timeout, stop, DownloadOutcome::Error("no path"));
    fails_once_per_timeout(&sim, 5, timeout, stop, DownloadOutcome::Error("no path"));
    // The perf client keeps its 2 s grid; each download fails 5 s after it started.
    let c = client(&sim, 6);
    let starts: Vec<SimTime> = c.finished.iter().map(|d| d.start).collect();
    let expected: Vec<SimTime> = (0..).map(|k| secs(1 + 2 * k)).take(27).collect();
    assert_eq!(starts, expected);
    assert!(c
        .finished
        .iter()
        .all(|d| d.outcome == DownloadOutcome::Error("no path")));
    assert_eq!(c.unfinished().count(), 3);

    // Exits that reject port 80 leave no path either.
    let sim = bounded(8 << 20, move || {
        let mut sim = no_exit_for_port_80(vec![bulk(timeout)]);
        sim.run_until(stop);
        sim
    });
    fails_once_per_timeout(&sim, 4, timeout, stop, DownloadOutcome::Error("no path"));
}

#[test]
fn failed_downloads_do_not_grow_the_stack() {
    // Thousands of downloads fail (a 1 ms timeout, no path), on a thread whose whole stack
    // is 1 MiB: a chain of calls per download, as the model had, cannot fit.
    let timeout = millis(1);
    let stop = secs(11);
    let sim = bounded(1 << 20, move || {
        let mut sim = no_guard(TorParams::default(), vec![bulk(timeout)]);
        sim.run_until(stop);
        sim
    });
    fails_once_per_timeout(&sim, 4, timeout, stop, DownloadOutcome::Error("no path"));
    assert_eq!(client(&sim, 4).finished.len(), 9_999);
}

#[test]
fn with_no_circuit_allowed_to_build_streams_wait_and_time_out() {
    let params = TorParams {
        max_client_circuits_pending: 0,
        ..TorParams::default()
    };
    let timeout = secs(5);
    let stop = secs(40);
    let web = Workload::Web {
        size_bytes: 1024,
        pause_min: 0,
        pause_max: 0,
        timeout,
    };
    let sim = bounded(8 << 20, move || {
        let mut sim = three_relays(params, MIB, 100 * MBIT, vec![bulk(timeout), web], 2);
        sim.run_until(stop);
        sim
    });
    // A path exists, so this is not "no path": the streams waited for a circuit that could
    // not be launched, and timed out.
    fails_once_per_timeout(&sim, 4, timeout, stop, DownloadOutcome::Timeout);
    fails_once_per_timeout(&sim, 5, timeout, stop, DownloadOutcome::Timeout);
}

#[test]
fn with_one_circuit_allowed_to_build_downloads_succeed_and_builds_never_overlap() {
    let params = TorParams {
        max_client_circuits_pending: 1,
        // Short-lived circuits, so that the clients build many.
        max_circuit_dirtiness_s: 2,
        ..TorParams::default()
    };
    let web = Workload::Web {
        size_bytes: 50 * 1024,
        pause_min: secs(1),
        pause_max: secs(2),
        timeout: secs(30),
    };
    let perf = Workload::Perf {
        size_bytes: 50 * 1024,
        interval: millis(700),
        timeout: secs(30),
    };
    let sim = bounded(8 << 20, move || {
        let mut sim = three_relays(params, 10 * MIB, 100 * MBIT, vec![web, perf], 2);
        sim.run_until(secs(60));
        let hosts: Vec<u32> = vec![4, 5];
        for h in &hosts {
            if let TorHost::Client(c) = sim.host_mut(*h) {
                c.close_log();
            }
        }
        sim
    });
    for host in [4, 5] {
        let c = client(&sim, host);
        let ok = c
            .finished
            .iter()
            .filter(|d| d.outcome == DownloadOutcome::Ok)
            .count();
        eprintln!(
            "client {host}: {ok} of {} downloads ok, {} circuits",
            c.finished.len(),
            c.circuit_log.len()
        );
        assert!(ok >= 20, "client {host}: only {ok} downloads succeeded");
        assert_eq!(ok, c.finished.len(), "client {host}: failures");
        assert!(c.circuit_log.len() >= 10, "client {host}");
        // At most one circuit was being built at any time.
        let mut builds: Vec<(SimTime, SimTime)> = c
            .circuit_log
            .iter()
            .map(|l| {
                let end = match (l.build, l.closed) {
                    (Some(b), _) => l.start + b,
                    (None, Some(closed)) => closed,
                    (None, None) => SimTime::MAX,
                };
                (l.start, end)
            })
            .collect();
        builds.sort();
        for w in builds.windows(2) {
            assert!(w[1].0 >= w[0].1, "client {host}: builds overlap: {w:?}");
        }
        // None timed out or was torn down (one may still be building at the end).
        assert!(c
            .circuit_log
            .iter()
            .all(|l| l.outcome == CircuitOutcome::Built || l.closed.is_none()));
    }
}

#[test]
fn absurd_timer_intervals_saturate_instead_of_spinning() {
    // A KIST run interval at the edge of u64 nanoseconds (the value that made runs hang: the
    // next run time wrapped round to the present, forever) and beyond it, and a token bucket
    // that never refills: the run reaches its stop time.
    for (kist, refill) in [
        (u64::MAX / 1_000_000, 100),
        (u64::MAX, 100),
        (3, u64::MAX / 1_000_000),
        (3, u64::MAX),
    ] {
        let params = TorParams {
            kist_run_interval_ms: kist,
            token_bucket_refill_ms: refill,
            ..TorParams::default()
        };
        let (reached, finished) = bounded(8 << 20, move || {
            let mut sim = three_relays(params, MIB, 100 * MBIT, vec![bulk(secs(5)); 2], 2);
            let stats = sim.run_until(secs(30));
            (stats.sim_time, client(&sim, 4).finished.len())
        });
        assert_eq!(reached, secs(30), "kist {kist} ms, refill {refill} ms");
        // Downloads went on finishing (mostly by timing out: relays that never schedule or
        // never refill forward little).
        assert!(finished >= 5, "kist {kist} ms, refill {refill} ms");
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Runs the three-relay network with a fault injected on `host` at `at`; returns the panic
/// message, the time reached, the trace hash and the first client's finished downloads.
fn run_with_fault(threads: usize, host: u32, at: SimTime) -> (String, SimTime, u64, usize) {
    bounded(8 << 20, move || {
        let bulk = Workload::Bulk {
            size_bytes: MIB,
            timeout: secs(60),
        };
        let mut sim = three_relays(
            TorParams::default(),
            2 * MIB,
            100 * MBIT,
            vec![bulk.clone(), bulk],
            threads,
        );
        inject_fault(&mut sim, host, at);
        let outcome = catch_unwind(AssertUnwindSafe(|| sim.run_until(secs(60))));
        let payload = outcome.expect_err("the injected fault must surface from run_until");
        let finished = client(&sim, 4).finished.len();
        (
            panic_message(&*payload),
            sim.now(),
            sim.trace_hash(),
            finished,
        )
    })
}

#[test]
fn an_injected_fault_surfaces_from_run_until_on_two_threads() {
    // Host 1 (the middle) is run by worker 1 of 2.
    let at = secs(7);
    let two = run_with_fault(2, 1, at);
    assert_eq!(two.0, INJECTED_FAULT);
    // The run stopped in the round of the fault: the time reached is that round's start,
    // less than one lookahead (the 10 ms latency) before the fault.
    assert!(two.1 <= at && two.1 > at - millis(10), "reached {}", two.1);
    // What was recorded before the failure is there (1 MiB downloads take well under 6 s).
    assert!(two.3 > 0);
    // The same failure leaves the same state on one thread.
    assert_eq!(run_with_fault(1, 1, at), two);
    // On worker 0's hosts too: a client and the guard.
    assert_eq!(run_with_fault(2, 4, at).0, INJECTED_FAULT);
    assert_eq!(run_with_fault(2, 0, at).0, INJECTED_FAULT);
}

/// A stream whose BEGIN goes unanswered moves to another circuit after 10 s, again after 10 s
/// and then every 15 s (tor's `connection_ap_expire_beginning`), each time closing the
/// circuit it left (no other stream uses it). Here the exit cannot reach the server: nearly
/// every packet between them is lost.
#[test]
fn a_stream_without_an_answer_to_its_begin_tries_other_circuits() {
    let bulk = Workload::Bulk {
        size_bytes: 50 * 1024,
        timeout: secs(60),
    };
    let relays = guard_middle_exit_relays();
    let mut spec = network_spec(
        TorParams::default(),
        relays,
        vec![(MIB, 100 * MBIT); 3],
        vec![bulk],
        1,
    );
    // Hosts: relays 0 to 2, the server 3, the client 4.
    spec.net.impairments = vec![onionlab_net::Impairment {
        a: vec![2],
        b: vec![3],
        loss: 0.999,
    }];
    let mut sim = onionlab_tor::build::build(spec).expect("network builds").0;
    sim.run_until(secs(60));
    let c = client(&sim, 4);
    assert!(c.finished.is_empty(), "{:?}", c.finished);
    let left: Vec<f64> = c
        .circuit_log
        .iter()
        .filter(|l| l.streams > 0)
        .filter_map(|l| l.closed)
        .map(|t| t as f64 / 1e9)
        .collect();
    assert_eq!(left.len(), 4, "circuits left: {left:?}");
    let gaps: Vec<f64> = left.windows(2).map(|w| w[1] - w[0]).collect();
    for (gap, want) in gaps.iter().zip([10.0, 15.0, 15.0]) {
        assert!((gap - want).abs() < 0.5, "gaps {gaps:?}");
    }
}
