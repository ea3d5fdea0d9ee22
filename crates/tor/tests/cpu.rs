//! The relay CPU model: a relay cannot do more work than its cores allow, relays on one
//! machine share its cores, the profiles order as their costs say, onion skins queue for the
//! worker threads, and runs stay deterministic.

mod common;

use common::*;
use onionlab_engine::time::{millis, secs, SimTime};
use onionlab_engine::Simulation;
use onionlab_netdir::RelayFlags;
use onionlab_tor::build::{build, HostRole, TorNetwork};
use onionlab_tor::cpu::{CpuConfig, DEFAULT_WINDOW};
use onionlab_tor::TorHost;
use onionlab_torcore::cpu::{CostTable, CpuProfile, UnitCosts};
use onionlab_torcore::{FlowControl, TorParams};
use onionlab_traffic::Workload;

const MIB: u64 = 1024 * 1024;

fn bulk() -> Workload {
    bulk_of(20 * MIB)
}

fn bulk_of(size_bytes: u64) -> Workload {
    Workload::Bulk {
        size_bytes,
        timeout: secs(120),
    }
}

/// Unit costs that are all zero but `cell_other` (ns per cell handled).
fn per_cell(ns: f64) -> UnitCosts {
    UnitCosts {
        cell_other: ns,
        ..UnitCosts::default()
    }
}

/// Costs of the order this project's calibration measured, with a bookkeeping cost that
/// makes the relay CPU-bound below its links.
fn measured_like() -> UnitCosts {
    UnitCosts {
        syscall: 200.0,
        kernel_packet: 2_000.0,
        tls_record: 60.0,
        tls_byte: 0.5,
        aes_call: 40.0,
        aes_byte: 0.4,
        soft_ctr_byte: 4.0,
        sha1_byte: 1.5,
        ntor: 60_000.0,
        link_responder: 1_200_000.0,
        link_initiator: 380_000.0,
        cell_other: 3_000.0,
        user_packet: 150.0,
        offload_call: 200.0,
        offload_byte: 0.0,
    }
}

fn cpu(
    costs: &UnitCosts,
    profile: CpuProfile,
    cores: u32,
    workers: u32,
    mates: Vec<u32>,
) -> CpuConfig {
    let (crypto, path) = profile.parts();
    CpuConfig {
        table: CostTable::new(costs, crypto, path),
        cores,
        workers,
        mates,
        window: DEFAULT_WINDOW,
    }
}

/// Fast relays (1 GiB/s buckets, 1 Gbit/s links, 2 ms apart) and `clients` bulk clients; `setup` gives
/// relays their CPUs. Host ids: relays in order, server, clients.
fn run(
    relays: Vec<onionlab_netdir::Relay>,
    clients: usize,
    rate: u64,
    setup: impl FnOnce(&mut TorNetwork),
    stop: SimTime,
    threads: usize,
) -> Simulation<TorHost> {
    run_with(relays, vec![bulk(); clients], rate, setup, stop, threads)
}

fn run_with(
    relays: Vec<onionlab_netdir::Relay>,
    workloads: Vec<Workload>,
    rate: u64,
    setup: impl FnOnce(&mut TorNetwork),
    stop: SimTime,
    threads: usize,
) -> Simulation<TorHost> {
    let n = relays.len();
    // Fixed SENDME windows keep enough cells in flight to load a relay whatever its delay;
    // Vegas would back off as the relay's queue grows (its purpose), which is not what these
    // tests are about.
    let params = TorParams {
        flow_control: FlowControl::Sendme,
        ..TorParams::default()
    };
    let mut spec = network_spec(
        params,
        relays,
        vec![(rate, 1000 * MBIT); n],
        workloads,
        threads,
    );
    // 2 ms between hosts: a few clients' windows are enough to load a relay.
    spec.graph = switch(2);
    for h in spec.hosts.iter_mut() {
        h.placement.bandwidth_up = Some(1000 * MBIT);
        h.placement.bandwidth_down = Some(1000 * MBIT);
    }
    setup(&mut spec);
    let mut sim = build(spec).expect("network builds").0;
    sim.run_until(stop);
    sim
}

fn set_cpu(spec: &mut TorNetwork, host: usize, cfg: CpuConfig) {
    if let HostRole::Relay { cpu, .. } = &mut spec.hosts[host].role {
        *cpu = Some(cfg);
    }
}

/// Cells a relay took in per second over seconds `from..to` (its samples' own counts).
fn cells_per_sec(sim: &Simulation<TorHost>, host: u32, from: u64, to: u64) -> f64 {
    let r = relay_host(sim, host);
    let seconds: Vec<u64> = r
        .meter
        .samples
        .iter()
        .filter(|s| s.second > from && s.second <= to)
        .map(|s| s.cells_in)
        .collect();
    assert!(
        !seconds.is_empty(),
        "relay {host} has no samples in ({from}, {to}]"
    );
    seconds.iter().sum::<u64>() as f64 / seconds.len() as f64
}

const MIDDLE: u32 = 1;

#[test]
fn a_relay_forwards_no_more_than_one_cell_per_cost_and_is_saturated_under_load() {
    // 20 µs per cell: at most 50,000 cells a second, far below what the links carry.
    let c_ns = 20_000.0;
    let sim = run(
        guard_middle_exit_relays(),
        12,
        1 << 30,
        |spec| {
            set_cpu(
                spec,
                1,
                cpu(&per_cell(c_ns), CpuProfile::NativeCtr, 1, 1, vec![]),
            )
        },
        secs(12),
        1,
    );
    let rate = cells_per_sec(&sim, MIDDLE, 4, 12);
    let ceiling = 1e9 / c_ns;
    assert!(
        rate <= ceiling * 1.01,
        "{rate} cells/s above the ceiling {ceiling}"
    );
    // Loaded, it runs near the ceiling; not at it, since its input comes in bursts: while
    // it works through one, its receive buffers fill and its peers wait for the window to
    // reopen, a round trip away.
    assert!(
        rate >= ceiling * 0.85,
        "{rate} cells/s: the loaded relay is not saturated"
    );
    let busy: Vec<f64> = relay_host(&sim, MIDDLE)
        .meter
        .samples
        .iter()
        .filter(|s| s.second > 4)
        .map(|s| s.cpu.expect("a relay with a CPU reports it").main_busy() as f64 / 1e9)
        .collect();
    let mean = busy.iter().sum::<f64>() / busy.len() as f64;
    assert!(mean > 0.85 && mean < 1.02, "busy fraction {mean}");
    assert!(
        (mean - rate / ceiling).abs() < 0.03,
        "busy fraction {mean} is not the work done, {rate} cells at {c_ns} ns"
    );
    // The relays without a CPU model report none.
    assert!(relay_host(&sim, 0)
        .meter
        .samples
        .iter()
        .all(|s| s.cpu.is_none()));
}

#[test]
fn below_saturation_a_relay_moves_what_it_moves_without_the_model() {
    // The guard's token bucket (2 MiB/s) is the bottleneck; a CPU 100× faster than that
    // needs changes nothing the clients see, beyond noise.
    let relays = guard_middle_exit_relays();
    let go = |with: bool| {
        run(
            relays.clone(),
            3,
            2 * MIB,
            |spec| {
                if with {
                    for h in 0..3 {
                        set_cpu(
                            spec,
                            h,
                            cpu(&per_cell(2_000.0), CpuProfile::NativeCtr, 2, 3, vec![]),
                        );
                    }
                }
            },
            secs(20),
            1,
        )
    };
    let (without, with) = (go(false), go(true));
    for h in 0..3 {
        let moved = |sim: &Simulation<TorHost>| {
            let r = relay_host(sim, h);
            let late: Vec<u64> = r
                .meter
                .samples
                .iter()
                .filter(|s| s.second > 5)
                .map(|s| s.cells_out)
                .collect();
            late.iter().sum::<u64>() as f64 / late.len() as f64
        };
        let (a, b) = (moved(&without), moved(&with));
        assert!(a > 1000.0, "relay {h} carried too little to compare: {a}");
        assert!(
            (a - b).abs() / a < 0.03,
            "relay {h}: {a} cells/s without, {b} with"
        );
    }
}

/// Guard, two middles, exit (hosts 0..4); the middles share one single-core machine.
fn two_middles() -> Vec<onionlab_netdir::Relay> {
    vec![
        relay("guard", 1, RelayFlags::GUARD, 1000),
        relay("middleA", 2, RelayFlags::default(), 1000),
        relay("middleB", 3, RelayFlags::default(), 1000),
        relay("exit", 4, RelayFlags::EXIT, 1000),
    ]
}

fn shared_machine(threads: usize) -> Simulation<TorHost> {
    let c = per_cell(20_000.0);
    run(
        two_middles(),
        12,
        1 << 30,
        |spec| {
            set_cpu(spec, 1, cpu(&c, CpuProfile::NativeCtr, 1, 1, vec![2]));
            set_cpu(spec, 2, cpu(&c, CpuProfile::NativeCtr, 1, 1, vec![1]));
        },
        secs(12),
        threads,
    )
}

#[test]
fn relays_on_one_single_core_machine_share_it() {
    let sim = shared_machine(1);
    let ceiling = 1e9 / 20_000.0;
    let a = cells_per_sec(&sim, 1, 4, 12);
    let b = cells_per_sec(&sim, 2, 4, 12);
    // Both saturated: each gets about half the core, together about the core. The shares
    // are set from the last window's demand, so they lag: when one relay's input pauses the
    // other speeds up a window late, and both may run fast for a window. That lets the two
    // exceed the core by a few percent (7% in this test when it was written).
    assert!(
        a + b <= ceiling * 1.10,
        "{a} + {b} cells/s exceed one core ({ceiling})"
    );
    assert!(
        a + b >= ceiling * 0.8,
        "{a} + {b} cells/s: the core is not used"
    );
    for x in [a, b] {
        assert!(
            x > ceiling * 0.35 && x < ceiling * 0.65,
            "{a} and {b}: not about half each"
        );
    }
}

#[test]
fn profiles_order_by_what_their_crypto_and_packets_cost() {
    // Sixteen bulk clients keep the middle's main thread busy under every profile but
    // kernel bypass, so its rate is set by what a cell costs it, not by flow control.
    let go = |profile: CpuProfile| {
        let sim = run(
            guard_middle_exit_relays(),
            16,
            1 << 30,
            |spec| set_cpu(spec, 1, cpu(&measured_like(), profile, 2, 3, vec![])),
            secs(10),
            1,
        );
        cells_per_sec(&sim, MIDDLE, 4, 10)
    };
    let soft = go(CpuProfile::SoftwareCtr);
    let native = go(CpuProfile::NativeCtr);
    let bypass = go(CpuProfile::KernelBypass);
    assert!(
        soft < native,
        "software_ctr {soft} cells/s, native_ctr {native}"
    );
    assert!(
        native < bypass,
        "native_ctr {native} cells/s, kernel_bypass {bypass}"
    );
}

#[test]
fn onion_skins_queue_for_the_worker_threads_and_delay_circuit_builds() {
    // 100 ms per onion skin at the middle: ten clients that build their first circuits at
    // the same moment are answered one after another by one worker, two at a time by two.
    let mut costs = per_cell(0.0);
    costs.ntor = 100e6;
    let builds = |workers: Option<u32>| {
        let sim = run_with(
            guard_middle_exit_relays(),
            vec![bulk_of(100 * 1024); 10],
            1 << 30,
            |spec| {
                if let Some(w) = workers {
                    set_cpu(spec, 1, cpu(&costs, CpuProfile::NativeCtr, w, w, vec![]));
                }
            },
            secs(5),
            1,
        );
        let mut b: Vec<u64> = (4..14)
            .filter_map(|h| {
                client(&sim, h)
                    .finished
                    .first()
                    .and_then(|d| d.circuit_build)
            })
            .collect();
        b.sort_unstable();
        assert_eq!(b.len(), 10, "every client finished a download");
        let skins: u64 = relay_host(&sim, MIDDLE)
            .meter
            .samples
            .iter()
            .filter_map(|s| s.cpu.map(|c| c.onion_skins))
            .sum();
        (b, skins)
    };
    let (plain, _) = builds(None);
    let (one, skins) = builds(Some(1));
    assert!(skins >= 10, "{skins} onion skins handed to the workers");
    // Every build waits at least one onion skin (on average, a queue of them); the last
    // waits for all ten.
    let mean = |b: &[u64]| b.iter().sum::<u64>() / b.len() as u64;
    assert!(
        mean(&one) >= mean(&plain) + millis(100),
        "{one:?} vs {plain:?}"
    );
    let spread = one[9] - one[0];
    assert!(
        spread >= millis(850),
        "builds not queued one after another: {one:?}"
    );
    let (two, _) = builds(Some(2));
    let spread2 = two[9] - two[0];
    assert!(
        spread2 < spread * 3 / 4,
        "two workers: {two:?}, one: {one:?}"
    );
}

/// A link handshake's public-key work keeps the relay's main thread busy: at 100 ms for each
/// handshake the middle answers, the first circuit through it (whose connection from the
/// guard is new) is built about 100 ms later than with the work free. The middle sends its
/// ServerHello as it starts the work, and the guard's next flight waits for the thread.
#[test]
fn link_handshakes_keep_the_main_thread_busy() {
    let build = |link_responder: f64| {
        let mut costs = per_cell(0.0);
        costs.link_responder = link_responder;
        let sim = run_with(
            guard_middle_exit_relays(),
            vec![bulk_of(100 * 1024)],
            1 << 30,
            |spec| {
                // No segment waits on Nagle's rule, so the difference is the thread's alone.
                spec.net.tcp.nodelay = true;
                set_cpu(
                    spec,
                    MIDDLE as usize,
                    cpu(&costs, CpuProfile::NativeCtr, 1, 1, vec![]),
                )
            },
            secs(5),
            1,
        );
        let first = &client(&sim, 4).finished[0];
        let crypto: u64 = relay_host(&sim, MIDDLE)
            .meter
            .samples
            .iter()
            .filter_map(|s| s.cpu.map(|c| c.crypto))
            .sum();
        (first.circuit_build.expect("built"), crypto)
    };
    let (free, free_crypto) = build(0.0);
    let (dear, dear_crypto) = build(100e6);
    assert_eq!(free_crypto, 0);
    // One handshake answered: the guard's.
    assert_eq!(dear_crypto, 100_000_000, "{dear_crypto} ns of crypto");
    assert!(
        dear >= free + millis(90) && dear <= free + millis(110),
        "{dear} vs {free}"
    );
}

fn fingerprint(sim: &Simulation<TorHost>) -> String {
    let mut out = String::new();
    for h in 0..sim.host_count() as u32 {
        match sim.host(h) {
            TorHost::Relay(r) => out.push_str(&format!("{:?}\n", r.meter.samples)),
            TorHost::Client(c) => out.push_str(&format!("{:?}{:?}\n", c.finished, c.circuit_log)),
            _ => {}
        }
    }
    out
}

#[test]
fn the_cpu_model_is_deterministic_across_thread_counts() {
    assert!(fingerprint(&shared_machine(1)) == fingerprint(&shared_machine(2)));
}
