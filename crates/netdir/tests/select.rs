//! Weighted relay choice and path construction on the 2023 consensus.

mod common;

use common::{load, C2023};
use onionlab_netdir::{Consensus, PathSelector, Position, RelayFlags};
use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;

/// Draw `n` relays for `pos` and compare each relay's observed count with its expected share.
/// Returns (max relative deviation, max deviation in standard errors, relays checked, relays
/// off by more than 5% relative) over the relays whose share exceeds `min_share`.
fn draw_and_compare(
    sel: &PathSelector,
    n_relays: usize,
    pos: Position,
    n: usize,
    seed: u64,
    min_share: f64,
) -> (f64, f64, usize, usize) {
    let mut rng = ChaCha12Rng::seed_from_u64(seed);
    let mut counts = vec![0u64; n_relays];
    for _ in 0..n {
        let r = sel.choose(pos, &mut rng, |_| false).expect("a relay");
        counts[r] += 1;
    }
    let total = sel.total_weight(pos);
    let (mut max_rel, mut max_sigma, mut checked, mut over5) = (0.0f64, 0.0f64, 0, 0);
    for (i, &c) in counts.iter().enumerate() {
        let p = sel.weight(i, pos) / total;
        if p == 0.0 {
            assert_eq!(c, 0, "ineligible relay {i} chosen for {pos:?}");
            continue;
        }
        if p <= min_share {
            continue;
        }
        let expected = p * n as f64;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        let dev = (c as f64 - expected).abs();
        max_rel = max_rel.max(dev / expected);
        if dev / expected > 0.05 {
            over5 += 1;
        }
        max_sigma = max_sigma.max(dev / sd);
        checked += 1;
    }
    (max_rel, max_sigma, checked, over5)
}

/// The acceptance test as specified: 100,000 draws per position, every relay with share above
/// 0.1% compared with its weighted share.
///
/// A fixed 5% relative bound cannot be met honestly at this size: a relay with share p gets
/// N*p = 100 expected draws at p = 0.1%, whose relative standard error sqrt((1-p)/(N*p)) is
/// about 10%, so half of such relays would miss 5% by chance alone; 5% is a 4-sigma bound only
/// for p >= 6.4%. This test therefore asserts the statistically sound bound of 5 standard errors
/// for every relay, and reports the relative deviation; the 5% relative bound is asserted by
/// [`choose_matches_weighted_shares_within_5_percent`] with enough draws to make it meaningful.
#[test]
fn choose_matches_weighted_shares_100k() {
    let c = load(C2023);
    let sel = PathSelector::new(&c);
    for (k, pos) in Position::ALL.into_iter().enumerate() {
        let (rel, sigma, checked, over5) =
            draw_and_compare(&sel, c.relays.len(), pos, 100_000, 100 + k as u64, 0.001);
        eprintln!(
            "100k draws {pos:?}: {checked} relays above 0.1% share, max relative deviation {:.1}% ({over5} beyond 5%), max {sigma:.2} sigma",
            rel * 100.0
        );
        assert!(checked > 50, "{pos:?}: only {checked} relays above 0.1%");
        assert!(
            sigma < 5.0,
            "{pos:?}: deviation of {sigma:.2} standard errors"
        );
    }
}

/// 5% relative accuracy for every relay with share above 0.1%, with N = 10 million draws per
/// position: at p = 0.1% the relative standard error is 1%, so 5% is a 5-sigma bound and a
/// correct sampler fails it with probability below 1e-3 over all ~500 relays checked.
/// Ignored in unoptimised builds, where 30 million ChaCha draws take over a minute.
#[test]
#[cfg_attr(debug_assertions, ignore = "30M draws: run with --release")]
fn choose_matches_weighted_shares_within_5_percent() {
    let c = load(C2023);
    let sel = PathSelector::new(&c);
    std::thread::scope(|s| {
        let handles: Vec<_> = Position::ALL
            .into_iter()
            .enumerate()
            .map(|(k, pos)| {
                let sel = &sel;
                let n_relays = c.relays.len();
                s.spawn(move || {
                    (
                        pos,
                        draw_and_compare(sel, n_relays, pos, 10_000_000, 200 + k as u64, 0.001),
                    )
                })
            })
            .collect();
        for h in handles {
            let (pos, (rel, sigma, checked, over5)) = h.join().unwrap();
            eprintln!(
                "10M draws {pos:?}: {checked} relays above 0.1% share, max relative deviation {:.2}% ({over5} beyond 5%), max {sigma:.2} sigma",
                rel * 100.0
            );
            assert!(
                rel < 0.05,
                "{pos:?}: relative deviation {:.2}%",
                rel * 100.0
            );
        }
    });
}

#[test]
fn weights_follow_flags_and_position_weights() {
    let c = load(C2023);
    let sel = PathSelector::new(&c);
    let idx = |nick: &str| c.relays.iter().position(|r| r.nickname == nick).unwrap();

    // titamon3: Exit Fast Guard, Bandwidth=25000 -> Wgd = Wmd = 83, Wed = 9834.
    let t = idx("titamon3");
    assert_eq!(sel.weight(t, Position::Guard), 25000.0 * 83.0 / 10000.0);
    assert_eq!(sel.weight(t, Position::Middle), 25000.0 * 83.0 / 10000.0);
    assert_eq!(sel.weight(t, Position::Exit), 25000.0 * 9834.0 / 10000.0);

    // freedomrunner: Fast Guard (no Exit), Bandwidth=90000 -> Wgg 5858, Wmg 4142, no exit.
    let f = idx("freedomrunner");
    assert_eq!(sel.weight(f, Position::Guard), 90000.0 * 0.5858);
    assert_eq!(sel.weight(f, Position::Middle), 90000.0 * 0.4142);
    assert_eq!(sel.weight(f, Position::Exit), 0.0);

    // seele: Fast, neither Guard nor Exit -> middle only at Wmm.
    let s = idx("seele");
    assert_eq!(sel.weight(s, Position::Guard), 0.0);
    assert_eq!(sel.weight(s, Position::Middle), 360.0);
    assert_eq!(sel.weight(s, Position::Exit), 0.0);

    // HotSpot lacks Fast: never chosen anywhere.
    let h = idx("HotSpot");
    for pos in Position::ALL {
        assert_eq!(sel.weight(h, pos), 0.0);
    }

    for (i, r) in c.relays.iter().enumerate() {
        let f = r.flags;
        if f.contains(RelayFlags::BAD_EXIT) || f.contains(RelayFlags::MIDDLE_ONLY) {
            assert_eq!(sel.weight(i, Position::Exit), 0.0, "{}", r.nickname);
        }
        if !f.contains(RelayFlags::GUARD) {
            assert_eq!(sel.weight(i, Position::Guard), 0.0, "{}", r.nickname);
        }
        // Exit-only relays are kept out of the middle by Wme = 0.
        if f.contains(RelayFlags::EXIT)
            && !f.contains(RelayFlags::GUARD)
            && !f.contains(RelayFlags::BAD_EXIT)
        {
            assert_eq!(sel.weight(i, Position::Middle), 0.0, "{}", r.nickname);
        }
    }
    // Out-of-range indices are simply ineligible.
    assert_eq!(sel.weight(usize::MAX, Position::Middle), 0.0);
}

/// Heavy exclusion forces the exact fallback; the choice must still be weighted among the
/// relays left.
#[test]
fn choose_is_exact_under_heavy_exclusion() {
    let c = load(C2023);
    let sel = PathSelector::new(&c);
    let mut allowed: Vec<usize> = (0..c.relays.len())
        .filter(|&i| sel.weight(i, Position::Exit) > 0.0)
        .collect();
    allowed.sort_by(|&a, &b| {
        sel.weight(a, Position::Exit)
            .total_cmp(&sel.weight(b, Position::Exit))
    });
    // Three mid-sized exits, a negligible share of the total exit weight.
    let keep = [
        allowed[allowed.len() / 2],
        allowed[allowed.len() / 2 + 10],
        allowed[allowed.len() / 2 + 20],
    ];
    let w: Vec<f64> = keep
        .iter()
        .map(|&i| sel.weight(i, Position::Exit))
        .collect();
    let wsum: f64 = w.iter().sum();
    let mut rng = ChaCha12Rng::seed_from_u64(3);
    let n = 30_000;
    let mut counts = [0u64; 3];
    for _ in 0..n {
        let r = sel
            .choose(Position::Exit, &mut rng, |i| !keep.contains(&i))
            .unwrap();
        counts[keep.iter().position(|&k| k == r).unwrap()] += 1;
    }
    for j in 0..3 {
        let p = w[j] / wsum;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        let dev = (counts[j] as f64 - p * n as f64).abs();
        assert!(
            dev < 5.0 * sd,
            "relay {j}: {} vs {}",
            counts[j],
            p * n as f64
        );
    }
    // Excluding everything yields nothing.
    assert_eq!(sel.choose(Position::Exit, &mut rng, |_| true), None);
}

/// Give the real relays artificial families: relay i is in family i % 500, so ~14 relays per
/// family scattered over the list and family conflicts are common.
fn with_families() -> Consensus {
    let mut c = load(C2023);
    for (i, r) in c.relays.iter_mut().enumerate() {
        r.family = Some((i % 500) as u32);
    }
    c
}

fn check_path(c: &Consensus, path: [usize; 3], port: u16, need_stable: bool) {
    let [g, m, e] = path;
    assert!(g != m && m != e && g != e, "{path:?}");
    let rs = [&c.relays[g], &c.relays[m], &c.relays[e]];
    for a in 0..3 {
        for b in a + 1..3 {
            assert_ne!(rs[a].subnet16(), rs[b].subnet16(), "same /16 in {path:?}");
            if rs[a].family.is_some() {
                assert_ne!(rs[a].family, rs[b].family, "same family in {path:?}");
            }
        }
    }
    assert!(rs[0].flags.contains(RelayFlags::GUARD));
    assert!(rs[2].flags.contains(RelayFlags::EXIT) && !rs[2].flags.contains(RelayFlags::BAD_EXIT));
    assert!(
        rs[2].exit_policy.allows_port(port),
        "exit refuses port {port}"
    );
    for r in rs {
        assert!(r.flags.contains(RelayFlags::FAST) && r.flags.is_usable());
    }
    if need_stable {
        assert!(
            rs[1].flags.contains(RelayFlags::STABLE) && rs[2].flags.contains(RelayFlags::STABLE)
        );
    }
}

#[test]
fn choose_path_respects_constraints() {
    let c = with_families();
    let sel = PathSelector::new(&c);
    let mut rng = ChaCha12Rng::seed_from_u64(42);
    let ports = [443u16, 80, 22, 6667, 5222];
    let mut guards = Vec::new();
    let mut guard_fallbacks = 0;
    for k in 0..20_000 {
        if k % 50 == 0 {
            // A new client every 50 paths, with three primary guards.
            guards = sel.choose_guards(&c, 3, &mut rng);
            assert_eq!(guards.len(), 3);
        }
        let port = ports[k % ports.len()];
        let need_stable = k % 3 == 0;
        let path = sel
            .choose_path(&c, &guards, port, need_stable, &mut rng)
            .expect("a path");
        check_path(&c, path, port, need_stable);
        assert!(
            guards.contains(&path[0]),
            "guard {} not among {guards:?}",
            path[0]
        );
        if path[0] != guards[0] {
            guard_fallbacks += 1;
        }
    }
    eprintln!("paths whose first guard conflicted with the exit: {guard_fallbacks} of 20000");
    assert!(
        guard_fallbacks > 0,
        "family conflicts should sometimes skip the first guard"
    );

    // Without a guard list the guard is chosen by weight.
    for k in 0..2_000 {
        let port = ports[k % ports.len()];
        let path = sel
            .choose_path(&c, &[], port, k % 2 == 0, &mut rng)
            .expect("a path");
        check_path(&c, path, port, k % 2 == 0);
    }
}

#[test]
fn choose_path_keeps_a_lone_conflicting_guard() {
    let c = load(C2023);
    let sel = PathSelector::new(&c);
    // The heaviest Guard+Exit relay as the only guard: whenever it is also drawn as the exit,
    // the exit must be redrawn, not the guard abandoned.
    let ge = (0..c.relays.len())
        .filter(|&i| sel.weight(i, Position::Exit) > 0.0 && sel.weight(i, Position::Guard) > 0.0)
        .max_by(|&a, &b| {
            sel.weight(a, Position::Exit)
                .total_cmp(&sel.weight(b, Position::Exit))
        })
        .unwrap();
    let mut rng = ChaCha12Rng::seed_from_u64(5);
    for _ in 0..5_000 {
        let p = sel.choose_path(&c, &[ge], 443, false, &mut rng).unwrap();
        assert_eq!(p[0], ge);
        check_path(&c, p, 443, false);
    }
}

#[test]
fn choose_guards_are_distinct_and_weighted() {
    let c = with_families();
    let sel = PathSelector::new(&c);
    let mut rng = ChaCha12Rng::seed_from_u64(9);
    for _ in 0..500 {
        let g = sel.choose_guards(&c, 5, &mut rng);
        assert_eq!(g.len(), 5);
        for a in 0..g.len() {
            assert!(sel.weight(g[a], Position::Guard) > 0.0);
            for b in a + 1..g.len() {
                assert_ne!(g[a], g[b]);
                assert!(!c.relays[g[a]].conflicts_with(&c.relays[g[b]]));
            }
        }
    }
    // Asking for more guards than the network can supply returns what there is.
    let tiny = c.sample(20, &mut rng);
    let tsel = PathSelector::new(&tiny);
    let all = tsel.choose_guards(&tiny, 1000, &mut rng);
    assert!(all.len() <= tsel.eligible_count(Position::Guard));
}

#[test]
fn selection_is_deterministic_for_a_seed() {
    let c = with_families();
    let sel = PathSelector::new(&c);
    let run = |seed: u64| {
        let mut rng = ChaCha12Rng::seed_from_u64(seed);
        let guards = sel.choose_guards(&c, 2, &mut rng);
        (0..500)
            .map(|_| sel.choose_path(&c, &guards, 443, false, &mut rng).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

#[test]
fn mismatched_consensus_gives_no_path() {
    let c = load(C2023);
    let sel = PathSelector::new(&c);
    let mut rng = ChaCha12Rng::seed_from_u64(1);
    let other = c.sample(100, &mut rng);
    assert_eq!(sel.choose_path(&other, &[], 443, false, &mut rng), None);
    assert!(sel.choose_guards(&other, 3, &mut rng).is_empty());
}

/// Absurd bandwidths (a fuzzed or hand-made document) must not overflow the weight tables.
#[test]
fn huge_bandwidths_do_not_overflow() {
    let mut c = load(C2023);
    for r in c.relays.iter_mut().take(50) {
        r.bandwidth = u64::MAX;
    }
    let c = Consensus::from_relays(c.relays);
    let sel = PathSelector::new(&c);
    let mut rng = ChaCha12Rng::seed_from_u64(1);
    for pos in Position::ALL {
        assert!(sel.total_weight(pos).is_finite());
        let r = sel.choose(pos, &mut rng, |_| false).unwrap();
        assert!(sel.weight(r, pos) > 0.0);
    }
    assert!(sel.choose_path(&c, &[], 443, true, &mut rng).is_some());
}
