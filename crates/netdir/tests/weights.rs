//! Position weights: published values and the dir-spec 3.8.3 computation.

mod common;

use std::net::Ipv4Addr;

use common::{load, C2022, C2023};
use onionlab_netdir::{
    BandwidthWeights, Consensus, ExitPolicy, PathSelector, Position, Relay, RelayFlags, WeightCase,
};

/// A relay of the given class and bandwidth; each gets its own /16 so paths are never blocked.
fn relay(i: usize, guard: bool, exit: bool, bw: u64) -> Relay {
    let mut flags = RelayFlags::parse("Fast Running Stable Valid");
    if guard {
        flags.insert(RelayFlags::GUARD);
    }
    if exit {
        flags.insert(RelayFlags::EXIT);
    }
    Relay {
        nickname: format!("r{i}"),
        fingerprint: format!("{i:040X}"),
        address: Ipv4Addr::new(10 + (i / 256) as u8, (i % 256) as u8, 0, 1),
        or_port: 9001,
        flags,
        bandwidth: bw,
        unmeasured: false,
        exit_policy: if exit {
            ExitPolicy::accept_all()
        } else {
            ExitPolicy::reject_all()
        },
        family: None,
    }
}

/// A network with total bandwidths G (guard only), M (middle), E (exit only), D (both),
/// each class split over ten relays.
fn network(g: u64, m: u64, e: u64, d: u64) -> Vec<Relay> {
    let mut v = Vec::new();
    for (guard, exit, total) in [
        (true, false, g),
        (false, false, m),
        (false, true, e),
        (true, true, d),
    ] {
        for _ in 0..10 {
            if total > 0 {
                let i = v.len();
                v.push(relay(i, guard, exit, total / 10));
            }
        }
    }
    v
}

/// The per-class sums dir-spec requires of every solution, within tor's own margin of 10:
/// all of a class's bandwidth is assigned to some position.
fn assert_sums(w: &BandwidthWeights) {
    let near = |a: u32, b: u32| a.abs_diff(b) <= 10;
    assert!(near(w.wgg + w.wmg, 10000), "Wgg + Wmg = {}", w.wgg + w.wmg);
    assert!(near(w.wee + w.wme, 10000), "Wee + Wme = {}", w.wee + w.wme);
    assert!(
        near(w.wgd + w.wmd + w.wed, 10000),
        "Wgd + Wmd + Wed = {}",
        w.wgd + w.wmd + w.wed
    );
    assert_eq!((w.wgm, w.wem, w.weg, w.wmm), (w.wgg, w.wee, w.wed, 10000));
}

/// Weighted bandwidth available to each position (guard, middle, exit).
fn position_totals(g: u64, m: u64, e: u64, d: u64, w: &BandwidthWeights) -> [f64; 3] {
    let f = |x: u64, wt: u32| x as f64 * f64::from(wt) / 10000.0;
    [
        f(g, w.wgg) + f(d, w.wgd),
        f(m, w.wmm) + f(g, w.wmg) + f(e, w.wme) + f(d, w.wmd),
        f(e, w.wee) + f(d, w.wed),
    ]
}

fn assert_balanced(totals: [f64; 3], t: f64) {
    for x in totals {
        assert!(
            (x - t / 3.0).abs() <= 0.002 * t,
            "unbalanced {totals:?} of {t}"
        );
    }
}

#[test]
fn case_1_neither_scarce_balances_all_positions() {
    let (g, m, e, d) = (400_000, 100_000, 400_000, 100_000);
    let (w, case) = BandwidthWeights::compute_with_case(&network(g, m, e, d));
    assert_eq!(case, WeightCase::Case1);
    assert_sums(&w);
    assert_eq!((w.wgd, w.wmd, w.wed), (3333, 3333, 3333));
    assert_balanced(position_totals(g, m, e, d, &w), (g + m + e + d) as f64);
}

#[test]
fn case_3b_exit_scarce_like_the_real_network() {
    // The 2023 network's shape: exits scarce, guards plentiful, Guard+Exit relays large.
    let (g, m, e, d) = (500_000, 150_000, 100_000, 250_000);
    let (w, case) = BandwidthWeights::compute_with_case(&network(g, m, e, d));
    assert_eq!(case, WeightCase::Case3b);
    assert_sums(&w);
    assert_eq!((w.wee, w.wme), (10000, 0));
    assert_eq!(w.wgd, w.wmd);
    assert_balanced(position_totals(g, m, e, d, &w), (g + m + e + d) as f64);
}

#[test]
fn case_3b_guard_scarce() {
    let (g, m, e, d) = (100_000, 150_000, 500_000, 250_000);
    let (w, case) = BandwidthWeights::compute_with_case(&network(g, m, e, d));
    assert_eq!(case, WeightCase::Case3b);
    assert_sums(&w);
    assert_eq!((w.wgg, w.wmg), (10000, 0));
    assert_eq!(w.wed, w.wmd);
    assert_balanced(position_totals(g, m, e, d, &w), (g + m + e + d) as f64);
}

#[test]
fn case_3a_exit_scarce_even_with_guard_exits() {
    let (g, m, e, d) = (600_000, 250_000, 100_000, 50_000);
    let (w, case) = BandwidthWeights::compute_with_case(&network(g, m, e, d));
    assert_eq!(case, WeightCase::Case3a);
    assert_sums(&w);
    // All scarce exit capacity stays in the exit position.
    assert_eq!((w.wee, w.wed, w.wme, w.wmd, w.wgd), (10000, 10000, 0, 0, 0));
    // Guards give the middle enough to match it, not more: Wmg = (G - M) / 2G.
    assert_eq!(w.wmg, 10000 * (g - m) as u32 / (2 * g) as u32);
}

#[test]
fn case_2a_both_scarce_and_d_small() {
    let (g, m, e, d) = (200_000, 650_000, 100_000, 50_000);
    let (w, case) = BandwidthWeights::compute_with_case(&network(g, m, e, d));
    assert_eq!(case, WeightCase::Case2a);
    assert_sums(&w);
    assert_eq!((w.wgg, w.wee, w.wmg, w.wme, w.wmd), (10000, 10000, 0, 0, 0));
    // Exits are the rarer, so D goes entirely to the exit position.
    assert_eq!((w.wed, w.wgd), (10000, 0));
}

#[test]
fn case_2b_both_scarce_and_d_large() {
    let (g, m, e, d) = (250_000, 300_000, 200_000, 250_000);
    let (w, case) = BandwidthWeights::compute_with_case(&network(g, m, e, d));
    assert!(
        matches!(
            case,
            WeightCase::Case2b1 | WeightCase::Case2b2 | WeightCase::Case2b3
        ),
        "{case:?}"
    );
    assert_sums(&w);
    assert_eq!(w.wgg, 10000);
    let totals = position_totals(g, m, e, d, &w);
    let t = (g + m + e + d) as f64;
    // Guard and exit positions balance; the middle keeps at least its own bandwidth.
    assert!((totals[0] - totals[2]).abs() <= 0.002 * t, "{totals:?}");
    assert!(totals[1] >= m as f64);
}

#[test]
fn degenerate_networks_get_usable_weights() {
    // No Guard+Exit relays (tor itself would publish no weights here).
    let (w, _) = BandwidthWeights::compute_with_case(&network(400_000, 200_000, 400_000, 0));
    assert_sums(&w);
    assert!(w.wgg > 0 && w.wee > 0);
    // Nothing at all.
    let (w, case) = BandwidthWeights::compute_with_case(&[]);
    assert_eq!(case, WeightCase::Empty);
    assert_eq!(w, BandwidthWeights::uniform());
    // Only middles: every relay still usable in the middle.
    let c = Consensus::from_relays(network(0, 100_000, 0, 0));
    let sel = PathSelector::new(&c);
    assert_eq!(sel.eligible_count(Position::Middle), 10);
    assert_eq!(sel.eligible_count(Position::Guard), 0);
}

/// Recomputing from the relays of a real consensus reproduces the published line exactly: the
/// authorities computed from the same `w` values, so this checks the case analysis, the class
/// definitions (BadExit counted as non-exit) and tor's integer rounding at once.
#[test]
fn compute_reproduces_published_weights() {
    for (file, expected_case) in [(C2023, WeightCase::Case3b), (C2022, WeightCase::Case3a)] {
        let c = load(file);
        let (w, case) = BandwidthWeights::compute_with_case(&c.relays);
        assert_eq!(case, expected_case, "{file}");
        assert_eq!(w, c.weights, "{file}");
    }
}

#[test]
fn live_weights_are_the_documented_ones() {
    let w = BandwidthWeights::live();
    assert_eq!(
        (w.wgg, w.wgm, w.wgd, w.wmg, w.wmm, w.wme, w.wmd),
        (5875, 5875, 1113, 4125, 10000, 0, 1113)
    );
    assert_eq!((w.wee, w.wed, w.weg, w.wem), (10000, 7774, 7774, 10000));
    assert_sums(&w);
}

#[test]
fn from_relays_computes_weights() {
    let relays = network(500_000, 150_000, 100_000, 250_000);
    let c = Consensus::from_relays(relays.clone());
    assert_eq!(c.weights, BandwidthWeights::compute(&relays));
    assert_eq!(c.relays.len(), relays.len());
}
