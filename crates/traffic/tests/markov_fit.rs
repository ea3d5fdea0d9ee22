//! Goodness of fit of the Markov workload's sampler against the PrivCount models.
//!
//! The distributions the sampler should follow are computed here from the model's
//! probabilities alone (absorbing-chain algebra, no sampling), and compared with what the
//! sampler draws by the Kolmogorov–Smirnov statistic D. With n draws from the right
//! distribution D stays below 1.95 / sqrt(n) in all but 1 run in 1000 (and the seeds are
//! fixed); a sampler that picks rows, states or directions wrongly lands far above.

use onionlab_engine::time::{secs, SimTime};
use onionlab_traffic::markov::{
    session_step, walk_packets, Delay, MarkovModel, ModelKind, Observation, SessionStep,
};
use onionlab_traffic::{
    Action, ClientSchedule, MarkovWorkload, Workload, CIRCUITS_PER_USER_PER_10_MIN,
    PACKET_PAYLOAD_BYTES,
};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

const STREAM_BEST: &str =
    include_str!("../../../data/workload/privcount-2018-stream-model-best.json");
const STREAM_INITIAL: &str =
    include_str!("../../../data/workload/privcount-2018-stream-model-initial.json");
const PACKET_BEST: &str =
    include_str!("../../../data/workload/privcount-2018-packet-model-best.json");
const PACKET_INITIAL: &str =
    include_str!("../../../data/workload/privcount-2018-packet-model-initial.json");

fn model(text: &str, kind: ModelKind) -> MarkovModel {
    MarkovModel::parse(text, kind).unwrap()
}

/// Solves `x (I - q) = b` for the row vector `x` (Gaussian elimination with pivoting).
fn solve_left(q: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
    let n = b.len();
    // Transposed system: (I - q)^T x^T = b^T.
    let mut a: Vec<Vec<f64>> = (0..n)
        .map(|i| {
            let mut row: Vec<f64> = (0..n)
                .map(|j| f64::from(u8::from(i == j)) - q[j][i])
                .collect();
            row.push(b[i]);
            row
        })
        .collect();
    for c in 0..n {
        let p = (c..n)
            .max_by(|&x, &y| a[x][c].abs().total_cmp(&a[y][c].abs()))
            .unwrap();
        a.swap(c, p);
        let d = a[c][c];
        for v in a[c].iter_mut() {
            *v /= d;
        }
        let pivot = a[c].clone();
        for (r, row) in a.iter_mut().enumerate() {
            let f = row[c];
            if r != c && f != 0.0 {
                for (v, pv) in row.iter_mut().zip(&pivot) {
                    *v -= f * pv;
                }
            }
        }
    }
    a.iter().map(|r| r[n]).collect()
}

/// The model as matrices: steps that count (`counted` observations) and steps that do not,
/// each an emission followed by a transition, and the probability of ending in each state.
struct Chain {
    start: Vec<f64>,
    quiet: Vec<Vec<f64>>,
    counted: Vec<Vec<f64>>,
    end: Vec<f64>,
    /// Ending right after a counted observation, in a state without transitions.
    end_counted: Vec<f64>,
}

fn chain(m: &MarkovModel, counts: Observation) -> Chain {
    let n = m.states.len();
    let mut c = Chain {
        start: m.start_probabilities(),
        quiet: vec![vec![0.0; n]; n],
        counted: vec![vec![0.0; n]; n],
        end: vec![0.0; n],
        end_counted: vec![0.0; n],
    };
    for s in 0..n {
        let mut prev = 0.0;
        for e in m.emissions_of(s as u32) {
            let p = e.cumulative - prev;
            prev = e.cumulative;
            if e.observation == Observation::End {
                c.end[s] += p;
                continue;
            }
            let mut any = false;
            for (to, t) in m.transitions_of(s as u32) {
                any = true;
                let row = if e.observation == counts {
                    &mut c.counted
                } else {
                    &mut c.quiet
                };
                row[s][to as usize] += p * t;
            }
            // A state without transitions ends the walk after its emission.
            if !any {
                if e.observation == counts {
                    c.end_counted[s] += p;
                } else {
                    c.end[s] += p;
                }
            }
        }
    }
    c
}

/// P(exactly k counted observations before the end), k = 0.., until `1 - tail` is covered.
fn count_distribution(c: &Chain, tail: f64) -> Vec<f64> {
    let n = c.start.len();
    // x_k: where the walk is, weighted, just after its k-th counted step, closed over the
    // quiet steps that follow: x_0 = start (I - quiet)^-1.
    let mut x = solve_left(&c.quiet, &c.start);
    let mut out = Vec::new();
    let mut covered = 0.0;
    let mut ended_counted = 0.0;
    while covered < 1.0 - tail && out.len() < 1_000_000 {
        let p: f64 = (0..n).map(|s| x[s] * c.end[s]).sum::<f64>() + ended_counted;
        ended_counted = (0..n).map(|s| x[s] * c.end_counted[s]).sum();
        out.push(p);
        covered += p;
        let moved: Vec<f64> = (0..n)
            .map(|j| (0..n).map(|i| x[i] * c.counted[i][j]).sum())
            .collect();
        x = solve_left(&c.quiet, &moved);
    }
    out
}

/// The distribution of the gap between consecutive streams of a session: the delay after a
/// `$` that the next observation is a `$` too, mixed over states by how often each makes one.
fn gap_mixture(m: &MarkovModel) -> Vec<(f64, Delay)> {
    let c = chain(m, Observation::Stream);
    let n = c.start.len();
    // Expected visits to each state: start (I - counted)^-1 (the stream model's steps all
    // count, apart from the end).
    let visits = solve_left(&c.counted, &c.start);
    let p_stream = |s: usize| -> f64 {
        let mut prev = 0.0;
        let mut p = 0.0;
        for e in m.emissions_of(s as u32) {
            if e.observation == Observation::Stream {
                p += e.cumulative - prev;
            }
            prev = e.cumulative;
        }
        p
    };
    (0..n)
        .filter_map(|s| {
            let e = m
                .emissions_of(s as u32)
                .iter()
                .find(|e| e.observation == Observation::Stream)?;
            let then_stream: f64 = m
                .transitions_of(s as u32)
                .map(|(to, t)| t * p_stream(to as usize))
                .sum();
            Some((visits[s] * p_stream(s) * then_stream, e.delay))
        })
        .collect()
}

fn ks_discrete(samples: &[u64], p: &[f64]) -> f64 {
    let n = samples.len() as f64;
    let max = *samples.iter().max().unwrap() as usize;
    let mut hist = vec![0u64; max.max(p.len()) + 1];
    for &s in samples {
        hist[s as usize] += 1;
    }
    let (mut emp, mut model, mut d) = (0.0, 0.0, 0.0f64);
    for (k, &h) in hist.iter().enumerate() {
        emp += h as f64 / n;
        model += p.get(k).copied().unwrap_or(0.0);
        d = d.max((emp - model).abs());
    }
    d
}

fn ks_continuous(mut samples: Vec<f64>, cdf: impl Fn(f64) -> f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let n = samples.len() as f64;
    samples
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let f = cdf(x);
            (f - i as f64 / n).abs().max(((i + 1) as f64 / n - f).abs())
        })
        .fold(0.0, f64::max)
}

fn critical(n: usize) -> f64 {
    1.95 / (n as f64).sqrt()
}

/// Walks `sessions` sessions with the schedule's step function (without the 10-minute limit
/// the schedule adds): streams per session and the gaps between consecutive streams (us).
fn walk_sessions(m: &MarkovModel, sessions: usize, seed: u64) -> (Vec<u64>, Vec<f64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut counts = Vec::with_capacity(sessions);
    let mut gaps = Vec::new();
    for _ in 0..sessions {
        let mut state = m.first_state(rng.random::<f64>());
        let mut streams = 0u64;
        let mut pending_gap = None;
        loop {
            match session_step(m, state, || rng.random::<f64>()) {
                SessionStep::End => break,
                SessionStep::Stream { delay_us, next } => {
                    streams += 1;
                    if let Some(g) = pending_gap.take() {
                        gaps.push(g);
                    }
                    pending_gap = Some(delay_us);
                    match next {
                        Some(s) => state = s,
                        None => break,
                    }
                }
            }
        }
        counts.push(streams);
    }
    (counts, gaps)
}

fn check_stream_model(text: &str, seed: u64) {
    let m = model(text, ModelKind::Stream);
    let sessions = 20_000;
    let (counts, gaps) = walk_sessions(&m, sessions, seed);
    let want = count_distribution(&chain(&m, Observation::Stream), 1e-9);
    let d = ks_discrete(&counts, &want);
    assert!(
        d < critical(sessions),
        "streams per session: D = {d:.4}, critical {:.4}",
        critical(sessions)
    );
    let mix = gap_mixture(&m);
    let total: f64 = mix.iter().map(|(w, _)| w).sum();
    let n = gaps.len();
    let d = ks_continuous(gaps, |x| {
        mix.iter().map(|(w, dl)| w / total * dl.cdf(x)).sum()
    });
    assert!(
        d < critical(n),
        "inter-stream gaps: D = {d:.4} over {n} gaps, critical {:.4}",
        critical(n)
    );
}

fn check_packet_model(text: &str, seed: u64) {
    let m = model(text, ModelKind::Packet);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let streams = 20_000;
    let walks: Vec<_> = (0..streams)
        .map(|_| walk_packets(&m, || rng.random::<f64>()))
        .collect();
    for (dir, obs) in [
        ("down", Observation::ToClient),
        ("up", Observation::ToServer),
    ] {
        let samples: Vec<u64> = walks
            .iter()
            .map(|w| {
                if obs == Observation::ToClient {
                    w.to_client
                } else {
                    w.to_server
                }
            })
            .collect();
        let want = count_distribution(&chain(&m, obs), 1e-9);
        let d = ks_discrete(&samples, &want);
        assert!(
            d < critical(streams),
            "packets {dir} per stream: D = {d:.4}, critical {:.4}",
            critical(streams)
        );
    }
}

#[test]
fn best_stream_model_fits() {
    check_stream_model(STREAM_BEST, 11);
}

#[test]
fn initial_stream_model_fits() {
    check_stream_model(STREAM_INITIAL, 12);
}

#[test]
fn best_packet_model_fits() {
    check_packet_model(PACKET_BEST, 13);
}

#[test]
fn initial_packet_model_fits() {
    check_packet_model(PACKET_INITIAL, 14);
}

/// The schedule itself: with the initial stream model (whose delays are seconds at most, so
/// the 10-minute session limit almost never binds), streams start at users x sessions per
/// user x streams per session, and their sizes are the packet model's download bytes.
#[test]
fn the_schedule_starts_streams_at_the_model_rate() {
    let stream = Arc::new(model(STREAM_INITIAL, ModelKind::Stream));
    let packet = Arc::new(model(PACKET_BEST, ModelKind::Packet));
    let per_session: f64 = count_distribution(&chain(&stream, Observation::Stream), 1e-12)
        .iter()
        .enumerate()
        .map(|(k, p)| k as f64 * p)
        .sum();
    let users = 200;
    let workload = Workload::Markov(MarkovWorkload {
        users,
        timeout: secs(60),
        stream_model: stream,
        packet_model: packet.clone(),
    });
    workload.validate().unwrap();
    let mut s = ClientSchedule::new(workload, secs(5));
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let end: SimTime = secs(6 * 3600);
    let mut now = 0;
    let mut sizes = Vec::new();
    while now < end {
        match s.poll(now, &mut rng) {
            Action::Start {
                size_bytes,
                timeout,
                isolation,
            } => {
                assert!(isolation > 0, "markov streams are isolated by session");
                assert_eq!(timeout, secs(60));
                assert!(now >= secs(5));
                sizes.push(size_bytes);
                s.on_finished(now);
            }
            Action::WaitUntil(t) => {
                assert!(t > now, "asked to wait until {t} at {now}");
                now = t;
            }
            Action::Idle => panic!("a markov schedule never idles"),
        }
    }
    let hours = (end - secs(5)) as f64 / 3.6e12;
    let want = f64::from(users) * CIRCUITS_PER_USER_PER_10_MIN * 6.0 * hours * per_session;
    let got = sizes.len() as f64;
    // Sessions are a Poisson process: about 13,500 here, so their count is within 3% of its
    // mean far more often than 999 times in 1000; streams per session add little spread.
    assert!(
        (got / want - 1.0).abs() < 0.04,
        "{got} streams, expected about {want:.0}"
    );
    // Sizes: whole packets of the packet model, at least one byte.
    let want = count_distribution(&chain(&packet, Observation::ToClient), 1e-9);
    let packets: Vec<u64> = sizes
        .iter()
        .map(|&b| {
            if b == 1 {
                0
            } else {
                assert_eq!(b % PACKET_PAYLOAD_BYTES, 0);
                b / PACKET_PAYLOAD_BYTES
            }
        })
        .collect();
    let d = ks_discrete(&packets, &want);
    assert!(d < critical(packets.len()), "stream sizes: D = {d:.4}");
}

/// Figures for the book's workload reference (run with `--ignored --nocapture`).
#[test]
#[ignore]
fn print_model_figures() {
    for (name, text) in [("best", STREAM_BEST), ("initial", STREAM_INITIAL)] {
        let m = model(text, ModelKind::Stream);
        let dist = count_distribution(&chain(&m, Observation::Stream), 1e-12);
        let mean: f64 = dist.iter().enumerate().map(|(k, p)| k as f64 * p).sum();
        let (_, mut gaps) = walk_sessions(&m, 100_000, 1);
        gaps.sort_by(f64::total_cmp);
        let q = |f: f64| gaps[(f * gaps.len() as f64) as usize] / 1e6;
        println!(
            "stream {name}: mean streams/circuit {mean:.2}, P(1) {:.3}; gap s: median {:.4} p90 {:.2} p99 {:.1}",
            dist[1],
            q(0.5),
            q(0.9),
            q(0.99)
        );
    }
    for (name, text) in [("best", PACKET_BEST), ("initial", PACKET_INITIAL)] {
        let m = model(text, ModelKind::Packet);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut down: Vec<u64> = Vec::new();
        let mut up = 0u64;
        for _ in 0..100_000 {
            let w = walk_packets(&m, || rng.random::<f64>());
            down.push(w.to_client);
            up += w.to_server;
        }
        let zero = down.iter().filter(|&&d| d == 0).count() as f64 / down.len() as f64;
        let mean = down.iter().sum::<u64>() as f64 / down.len() as f64;
        down.sort();
        let q = |f: f64| down[(f * down.len() as f64) as usize] * PACKET_PAYLOAD_BYTES;
        println!(
            "packet {name}: down mean {:.0} B, median {} B, p90 {} B, p99 {} B, zero {zero:.3}; up mean {:.0} B",
            mean * PACKET_PAYLOAD_BYTES as f64,
            q(0.5),
            q(0.9),
            q(0.99),
            up as f64 / 1e5 * PACKET_PAYLOAD_BYTES as f64
        );
    }
}
