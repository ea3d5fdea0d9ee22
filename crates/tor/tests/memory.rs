//! A long run's memory stays flat after warm-up: nothing in the Tor model grows with the
//! length of a run, only with what it holds at once (circuits, channels, connections,
//! downloads in progress).
//!
//! This file is its own test binary so that its counting allocator sees only this test.

mod common;

use common::*;
use onionlab_engine::heap;
use onionlab_engine::time::{secs, SimTime};
use onionlab_engine::Simulation;
use onionlab_netdir::RelayFlags;
use onionlab_tor::build::HostRole;
use onionlab_tor::measure::DownloadLog;
use onionlab_tor::TorHost;
use onionlab_torcore::TorParams;
use onionlab_traffic::Workload;

#[global_allocator]
static HEAP: heap::Counting = heap::Counting;

const MIB: u64 = 1 << 20;

/// A toy-like network, small enough for a test: 12 relays (4 guards, 3 exits, one guard and
/// exit, 4 middles; 1 to 4 MiB/s) and 30 clients (20 web, 2 bulk, 8 perf) starting over the
/// first 5 minutes, as the toy network's do. Web and perf clients download small files often,
/// so that ten minutes hold thousands of downloads: a leak per download shows far above what
/// the network's live state varies by.
fn network() -> Simulation<TorHost> {
    let kinds = [
        (RelayFlags::GUARD, 4),
        (RelayFlags::EXIT, 3),
        (RelayFlags::GUARD.union(RelayFlags::EXIT), 1),
        (RelayFlags::default(), 4),
    ];
    let (mut relays, mut links) = (Vec::new(), Vec::new());
    let mut n = 0u8;
    for (flags, count) in kinds {
        for _ in 0..count {
            n += 1;
            let rate = (1 + u64::from(n) % 4) * MIB;
            relays.push(relay(&format!("relay{n}"), n, flags, rate >> 10));
            links.push((rate, 200 * MBIT));
        }
    }
    let web = Workload::Web {
        size_bytes: 100 << 10,
        pause_min: secs(1),
        pause_max: secs(10),
        timeout: secs(60),
    };
    let perf = Workload::Perf {
        size_bytes: 50 << 10,
        interval: secs(5),
        timeout: secs(15),
    };
    let clients = [(web, 20), (Workload::bulk_default(), 2), (perf, 8)]
        .into_iter()
        .flat_map(|(w, count)| std::iter::repeat_n(w, count))
        .collect();
    let mut spec = network_spec(TorParams::default(), relays, links, clients, 1);
    let hosts = spec.hosts.len() as u64;
    for (i, h) in spec.hosts.iter_mut().enumerate() {
        if let HostRole::Client { start, .. } = &mut h.role {
            *start = secs(300) * i as u64 / hosts;
        }
    }
    onionlab_tor::build::build(spec)
        .expect("the network builds")
        .0
}

/// Runs to `until` in legs of 10 simulated seconds, taking what the hosts recorded after
/// each, as `onionlab run` does (it writes the records to the files, keeps only the summary's
/// share and drops them); returns the downloads that finished.
fn run_draining(sim: &mut Simulation<TorHost>, until: SimTime) -> usize {
    let mut finished = 0;
    while sim.now() < until {
        sim.run_until((sim.now() + secs(10)).min(until));
        for h in 0..sim.host_count() as u32 {
            match sim.host_mut(h) {
                TorHost::Relay(r) => r.meter.samples.clear(),
                TorHost::Client(c) => {
                    finished += c.finished.len();
                    c.finished.clear();
                    c.circuit_log.clear();
                }
                _ => {}
            }
        }
    }
    finished
}

#[test]
fn memory_stays_flat_after_warm_up() {
    // Warm-up: every client has started (by 5 min) and its first circuits have passed
    // MaxCircuitDirtiness (10 min) and been replaced, so the network holds the mix of
    // circuits (in use, clean, dirty and draining) it holds from then on.
    const WARM: SimTime = secs(16 * 60);
    // Long enough to finish more downloads than the warm-up did: something kept per download
    // in one growing vector shows only when the vector reallocates, which it does by the time
    // its length has doubled. Twice the warm-up, because the engine's event slabs still reach
    // new high-water marks for a while after it (more so since the tail loss probe's timers):
    // the heap grew by 170 kB in the first 16 minutes, 267 kB in 32 and 268 kB in 48.
    const MEASURED: SimTime = secs(32 * 60);
    let mut sim = network();
    let warm_downloads = run_draining(&mut sim, WARM);
    let before = heap::live_bytes();
    let downloads = run_draining(&mut sim, WARM + MEASURED);
    let after = heap::live_bytes();
    let grown = after - before;
    // What a run legitimately keeps per finished download is what `onionlab run`'s summary
    // keeps (`RunSummary`): two f64 (16 bytes) in vectors that double as they grow, so at most
    // 32 bytes. The model itself should keep nothing per download once its records are
    // taken, only its live state, which a steady workload keeps steady, and tables it reuses
    // without shrinking them (the engine's event slabs, socket tables), whose high-water marks
    // still rise now and then. So the model may grow by what the summary keeps, and no more:
    // that covers those tables (about 25 bytes per download here), yet any record kept per
    // download fails, a `DownloadLog` (the smallest, what a client logs per download) being
    // several times larger.
    const SUMMARY_BYTES_PER_DOWNLOAD: usize = 2 * 2 * std::mem::size_of::<f64>();
    let allowance = downloads * SUMMARY_BYTES_PER_DOWNLOAD;
    eprintln!(
        "heap {before} -> {after} bytes ({grown:+}) over {downloads} downloads: {:.1} bytes \
         per download; allowance {allowance} ({SUMMARY_BYTES_PER_DOWNLOAD} per download; a \
         DownloadLog is {})",
        grown as f64 / downloads as f64,
        std::mem::size_of::<DownloadLog>()
    );
    assert!(
        downloads > 2000 && downloads >= warm_downloads,
        "{downloads} downloads ({warm_downloads} in the warm-up): too few to show a leak"
    );
    assert!(
        SUMMARY_BYTES_PER_DOWNLOAD < std::mem::size_of::<DownloadLog>(),
        "the allowance would let a client keep every download's log"
    );
    assert!(
        grown <= allowance as isize,
        "the heap grew by {grown} bytes in {} simulated minutes after warm-up, over {downloads} \
         finished downloads ({:.1} bytes each; allowance {SUMMARY_BYTES_PER_DOWNLOAD}): \
         something is kept for good",
        MEASURED / secs(60),
        grown as f64 / downloads as f64
    );
}
