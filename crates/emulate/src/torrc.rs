//! The configuration of every tor in an emulation, written so that the private network matches
//! what the simulator models: the scenario's flags, rates and consensus weights, and the
//! scenario's Tor parameters published as consensus parameters.

use std::fmt::Write;
use std::path::Path;

use onionlab_netdir::RelayFlags;
use onionlab_torcore::params::{FlowControl, SchedulerKind};
use onionlab_torcore::TorParams;

use crate::plan::{Layout, Role, CONTROL_PORT, DIR_PORT, OR_PORT, SOCKS_PORT};

/// Identity facts of one tor, known once its keys exist.
#[derive(Clone, Debug, Default)]
pub struct Identity {
    /// RSA identity fingerprint, 40 upper-case hex digits.
    pub fingerprint: String,
    /// For authorities: the fingerprint of the authority identity key (`v3ident`).
    pub v3ident: Option<String>,
}

/// Voting period of the private network's authorities. Tor's minimum outside test networks is
/// five minutes; a short period lets relays that registered late join the consensus within a
/// minute, and the consensus stays valid for two periods.
pub const VOTING_INTERVAL_S: u32 = 60;
/// The first consensus comes sooner still, so the network bootstraps in well under a minute.
pub const INITIAL_VOTING_INTERVAL_S: u32 = 20;

/// Where each authority finds the relays' consensus weights, in its own directory.
pub const BANDWIDTH_FILE: &str = "bandwidth-file";

/// The scenario's Tor parameters that have a consensus parameter of the same meaning.
pub fn consensus_params(p: &TorParams) -> Vec<(&'static str, i64)> {
    let cc_alg = match p.flow_control {
        FlowControl::Sendme => 0,
        FlowControl::Vegas => 2,
    };
    vec![
        ("KISTSchedRunInterval", p.kist_run_interval_ms as i64),
        (
            "CircuitPriorityHalflifeMsec",
            (p.circuit_priority_halflife_s * 1000.0).round() as i64,
        ),
        ("circ_max_cell_queue_size", p.max_circuit_queue_cells as i64),
        ("circwindow", p.circuit_window as i64),
        ("cc_alg", cc_alg),
        ("cc_sendme_inc", p.cc_sendme_inc as i64),
        ("cc_cwnd_init", p.cc_cwnd_init as i64),
        ("cc_cwnd_min", p.cc_cwnd_min as i64),
        ("cc_cwnd_max", p.cc_cwnd_max.min(i32::MAX as u32) as i64),
        ("cc_cwnd_inc", p.cc_cwnd_inc as i64),
        ("cc_cwnd_inc_rate", p.cc_cwnd_inc_rate as i64),
        ("cc_cwnd_inc_pct_ss", p.cc_cwnd_inc_pct_ss as i64),
        ("cc_cwnd_full_gap", p.cc_cwnd_full_gap as i64),
        ("cc_cwnd_full_minpct", p.cc_cwnd_full_minpct as i64),
        ("cc_cwnd_full_per_cwnd", p.cc_cwnd_full_per_cwnd as i64),
        ("cc_ewma_cwnd_pct", p.cc_ewma_cwnd_pct as i64),
        ("cc_ewma_max", p.cc_ewma_max as i64),
        ("cc_ewma_ss", p.cc_ewma_ss as i64),
        ("cc_rtt_reset_pct", p.cc_rtt_reset_pct as i64),
        ("cc_sscap_exit", p.cc_ss_max as i64),
        ("cc_sscap_onion", p.cc_sscap_onion as i64),
        ("cc_ss_max", p.cc_ss_cwnd_max as i64),
        ("cc_vegas_alpha_exit", p.vegas_alpha as i64),
        ("cc_vegas_beta_exit", p.vegas_beta as i64),
        ("cc_vegas_gamma_exit", p.vegas_gamma as i64),
        ("cc_vegas_delta_exit", p.vegas_delta as i64),
        ("cc_xoff_client", p.xoff_threshold_cells as i64),
        ("cc_xoff_exit", p.xoff_threshold_cells as i64),
        ("cbtmincircs", p.cbt_min_circuits_to_observe as i64),
        ("cbtquantile", (p.cbt_quantile * 100.0).round() as i64),
        (
            "cbtclosequantile",
            (p.cbt_close_quantile * 100.0).round() as i64,
        ),
        ("cbtnummodes", p.cbt_num_xm_modes as i64),
        ("cbtmintimeout", p.cbt_min_timeout_ms as i64),
        (
            "cbtinitialtimeout",
            (p.cbt_initial_timeout_s * 1000.0).round() as i64,
        ),
        ("guard-n-primary-guards", p.num_primary_guards as i64),
    ]
}

/// The torrc of node `i`. `dir` is the node's own directory (data, logs, pid file).
pub fn torrc(
    layout: &Layout,
    ids: &[Identity],
    params: &TorParams,
    i: usize,
    dir: &Path,
) -> String {
    let node = &layout.nodes[i];
    let mut t = String::new();
    let mut line = |s: String| {
        t.push_str(&s);
        t.push('\n');
    };
    line(format!(
        "# onionlab emulation: {} ({})",
        node.name, node.group
    ));
    line("TestingTorNetwork 1".into());
    line(format!("DataDirectory {}", dir.join("data").display()));
    line(format!("PidFile {}", dir.join("tor.pid").display()));
    line(format!(
        "Log notice file {}",
        dir.join("notice.log").display()
    ));
    line(format!("Nickname {}", node.nickname(i)));
    line(format!("Address {}", node.address));
    line(format!("OutboundBindAddress {}", node.address));
    line("ContactInfo onionlab-emulation".into());
    line(format!("ControlPort 127.0.0.1:{CONTROL_PORT}"));
    line("ShutdownWaitLength 0".into());
    line("SafeLogging 0".into());
    line("ClientUseIPv6 0".into());
    line("V3AuthNIntervalsValid 2".into());
    for a in layout.indices(|r| matches!(r, Role::Authority)) {
        let auth = &layout.nodes[a];
        line(format!(
            "DirAuthority {} orport={OR_PORT} no-v2 v3ident={} {}:{DIR_PORT} {}",
            auth.nickname(a),
            ids[a].v3ident.as_deref().unwrap_or_default(),
            auth.address,
            ids[a].fingerprint
        ));
    }
    match &node.role {
        Role::Authority => {
            line(format!("ORPort {}:{OR_PORT}", node.address));
            line(format!("DirPort {}:{DIR_PORT}", node.address));
            authority(layout, ids, params, dir, &mut line)
        }
        Role::Relay {
            bandwidth_rate,
            bandwidth_burst,
            relay_bandwidth_rate,
            relay_bandwidth_burst,
            exit,
            family,
            ..
        } => {
            line("SocksPort 0".into());
            line(format!("ORPort {}:{OR_PORT}", node.address));
            line("AssumeReachable 1".into());
            line(format!("Schedulers {}", scheduler(params)));
            line(format!(
                "TokenBucketRefillInterval {} msec",
                params.token_bucket_refill_ms
            ));
            // Tor refuses rates below 75 KiB/s for relays; the scenario checks allow less.
            line(format!(
                "BandwidthRate {} bytes",
                bandwidth_rate.max(&76_800)
            ));
            line(format!(
                "BandwidthBurst {} bytes",
                bandwidth_burst.max(bandwidth_rate).max(&76_800)
            ));
            if let Some(r) = relay_bandwidth_rate {
                line(format!("RelayBandwidthRate {} bytes", r.max(&76_800)));
                let b = relay_bandwidth_burst.unwrap_or(*r).max(*r);
                line(format!("RelayBandwidthBurst {} bytes", b.max(76_800)));
            }
            if *exit {
                // Namespaces have no route off the machine, so accepting everything is safe;
                // a policy naming only private addresses would be summarised as "reject all".
                line("ExitRelay 1".into());
                line("ExitPolicyRejectPrivate 0".into());
                line("ExitPolicy accept *:*".into());
            } else {
                line("ExitRelay 0".into());
                line("ExitPolicy reject *:*".into());
            }
            if let Some(f) = family {
                let members: Vec<String> = layout
                    .nodes
                    .iter()
                    .enumerate()
                    .filter(|(j, n)| {
                        *j != i && matches!(n.role, Role::Relay { family: Some(g), .. } if g == *f)
                    })
                    .map(|(j, _)| format!("${}", ids[j].fingerprint))
                    .collect();
                if !members.is_empty() {
                    line(format!("MyFamily {}", members.join(",")));
                }
            }
        }
        Role::Client {
            use_entry_guards,
            max_circuit_dirtiness,
            ..
        } => {
            line(format!("SocksPort 127.0.0.1:{SOCKS_PORT}"));
            line("ClientOnly 1".into());
            // The model has no conflux (multipath circuits, on by default since tor 0.4.8):
            // like for like, every download uses one ordinary three-hop circuit.
            line("ConfluxEnabled 0".into());
            let dirtiness_s = max_circuit_dirtiness
                .map_or(params.max_circuit_dirtiness_s, |ns| ns / 1_000_000_000);
            line(format!("MaxCircuitDirtiness {dirtiness_s} seconds"));
            if !use_entry_guards {
                line("UseEntryGuards 0".into());
            }
            line(format!(
                "NewCircuitPeriod {} seconds",
                params.new_circuit_period_s
            ));
            line(format!(
                "MaxClientCircuitsPending {}",
                params.max_client_circuits_pending
            ));
            // Authorities relay only in test networks; the simulator's clients never use
            // them, so neither do the emulated ones.
            let auths: Vec<String> = layout
                .indices(|r| matches!(r, Role::Authority))
                .into_iter()
                .map(|a| format!("${}", ids[a].fingerprint))
                .collect();
            line(format!("ExcludeNodes {}", auths.join(",")));
        }
        Role::Server { .. } => unreachable!("servers run no tor"),
    }
    t
}

fn scheduler(p: &TorParams) -> &'static str {
    match p.scheduler {
        SchedulerKind::Kist => "KIST",
        SchedulerKind::KistLite => "KISTLite",
        SchedulerKind::Vanilla => "Vanilla",
    }
}

fn authority(
    layout: &Layout,
    ids: &[Identity],
    params: &TorParams,
    dir: &Path,
    line: &mut impl FnMut(String),
) {
    line("SocksPort 0".into());
    line("AuthoritativeDirectory 1".into());
    line("V3AuthoritativeDirectory 1".into());
    line("AssumeReachable 1".into());
    line("ExitPolicy reject *:*".into());
    line(format!("V3AuthVotingInterval {VOTING_INTERVAL_S}"));
    line("V3AuthVoteDelay 4".into());
    line("V3AuthDistDelay 4".into());
    line(format!(
        "TestingV3AuthInitialVotingInterval {INITIAL_VOTING_INTERVAL_S}"
    ));
    line("TestingV3AuthInitialVoteDelay 4".into());
    line("TestingV3AuthInitialDistDelay 4".into());
    line("TestingV3AuthVotingStartOffset 0".into());
    line("TestingMinExitFlagThreshold 0".into());
    line("TestingMinFastFlagThreshold 0".into());
    line("TestingDirAuthVoteHSDir *".into());
    line(format!(
        "V3BandwidthsFile {}",
        dir.join(BANDWIDTH_FILE).display()
    ));
    // The scenario decides which relays are guards and exits, not uptime or bandwidth.
    let with = |flag: RelayFlags| -> Vec<String> {
        layout
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| match &n.role {
                Role::Relay { flags, exit, .. } => {
                    flags.contains(flag) && (flag != RelayFlags::EXIT || *exit)
                }
                _ => false,
            })
            .map(|(j, _)| format!("${}", ids[j].fingerprint))
            .collect()
    };
    for (option, flag) in [
        ("TestingDirAuthVoteGuard", RelayFlags::GUARD),
        ("TestingDirAuthVoteExit", RelayFlags::EXIT),
    ] {
        let relays = with(flag);
        if relays.is_empty() {
            // An empty list would mean "no opinion"; name a node that cannot get the flag.
            line(format!(
                "{option} $0000000000000000000000000000000000000000"
            ));
        } else {
            line(format!("{option} {}", relays.join(",")));
        }
        line(format!("{option}IsStrict 1"));
    }
    let params = consensus_params(params)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>();
    line(format!("ConsensusParams {}", params.join(" ")));
}

/// The authorities' bandwidth file: every relay measured at its scenario consensus weight, so
/// path selection weighs relays as the simulator does. Authorities get the smallest weight:
/// clients exclude them anyway, and they should not shift the bandwidth-weights.
pub fn bandwidth_file(layout: &Layout, ids: &[Identity], unix_now: u64) -> String {
    // Version 1.0.0 of the format: a timestamp line, then one line per relay.
    let mut t = format!("{unix_now}\n");
    for (i, n) in layout.nodes.iter().enumerate() {
        let bw = match &n.role {
            Role::Relay {
                consensus_weight, ..
            } => (*consensus_weight).max(1),
            Role::Authority => 1,
            _ => continue,
        };
        let _ = writeln!(t, "node_id=${} bw={bw}", ids[i].fingerprint);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan;

    /// The built-in minimal scenario laid out, with made-up fingerprints: `F<i>` padded.
    fn minimal() -> (Layout, Vec<Identity>) {
        let text = onionlab_scenario::builtin_text("emulation-minimal").unwrap();
        let s =
            onionlab_scenario::parse(text, Path::new("builtin:emulation-minimal.yaml")).unwrap();
        let graph = onionlab_scenario::load_graph(&s).unwrap();
        let p = onionlab_scenario::resolve(&s, &graph).unwrap();
        let layout = plan::layout(&p, &graph).unwrap();
        let ids = (0..layout.nodes.len())
            .map(|i| Identity {
                fingerprint: format!("{i:040X}"),
                v3ident: matches!(layout.nodes[i].role, Role::Authority)
                    .then(|| format!("{:040X}", 0xA000 + i)),
            })
            .collect();
        (layout, ids)
    }

    fn config(layout: &Layout, ids: &[Identity], name: &str) -> String {
        let i = layout.nodes.iter().position(|n| n.name == name).unwrap();
        torrc(layout, ids, &TorParams::default(), i, Path::new("/lab/x"))
    }

    fn lines<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| l.split_whitespace().next() == Some(key))
            .collect()
    }

    #[test]
    fn every_tor_knows_the_three_authorities() {
        let (layout, ids) = minimal();
        for name in ["auth1", "guard1", "exit", "client-perf-1"] {
            let t = config(&layout, &ids, name);
            let auths = lines(&t, "DirAuthority");
            assert_eq!(auths.len(), 3, "{name}");
            assert!(
                auths[0].contains(&format!("v3ident={:040X}", 0xA000)),
                "{}",
                auths[0]
            );
            assert!(auths[0].ends_with(&format!("10.0.0.11:{DIR_PORT} {:040X}", 0)));
        }
    }

    #[test]
    fn authorities_vote_the_scenario_flags_and_weights() {
        let (layout, ids) = minimal();
        let fp = |name: &str| {
            let i = layout.nodes.iter().position(|n| n.name == name).unwrap();
            format!("${}", ids[i].fingerprint)
        };
        let t = config(&layout, &ids, "auth2");
        assert_eq!(
            lines(&t, "TestingDirAuthVoteGuard"),
            [format!(
                "TestingDirAuthVoteGuard {},{}",
                fp("guard1"),
                fp("guard2")
            )]
        );
        assert_eq!(
            lines(&t, "TestingDirAuthVoteExit"),
            [format!("TestingDirAuthVoteExit {}", fp("exit"))]
        );
        assert_eq!(
            lines(&t, "TestingDirAuthVoteExitIsStrict"),
            ["TestingDirAuthVoteExitIsStrict 1"]
        );
        assert_eq!(
            lines(&t, "V3BandwidthsFile"),
            ["V3BandwidthsFile /lab/x/bandwidth-file"]
        );
        let params = lines(&t, "ConsensusParams")[0];
        for kv in [
            "cc_alg=2",
            "KISTSchedRunInterval=3",
            "circwindow=1000",
            "cc_vegas_alpha_exit=186",
        ] {
            assert!(
                params.split_whitespace().any(|w| w == kv),
                "{kv} in {params}"
            );
        }
        // Relays at their consensus weight; authorities at the minimum.
        let file = bandwidth_file(&layout, &ids, 1_700_000_000);
        assert!(file.starts_with("1700000000\n"));
        let weight = |name: &str| {
            let Role::Relay {
                consensus_weight, ..
            } = layout.nodes.iter().find(|n| n.name == name).unwrap().role
            else {
                unreachable!()
            };
            consensus_weight
        };
        assert!(file.contains(&format!(
            "node_id={} bw={}\n",
            fp("middle"),
            weight("middle")
        )));
        assert!(file.contains(&format!("node_id={} bw=1\n", fp("auth1"))));
        assert_eq!(
            file.lines().count(),
            1 + 3 + 4,
            "timestamp, authorities, relays"
        );
    }

    #[test]
    fn relays_and_clients_get_their_roles() {
        let (layout, ids) = minimal();
        let exit = config(&layout, &ids, "exit");
        assert_eq!(lines(&exit, "ExitPolicy"), ["ExitPolicy accept *:*"]);
        assert_eq!(
            lines(&exit, "BandwidthRate"),
            ["BandwidthRate 2097152 bytes"]
        );
        assert_eq!(lines(&exit, "SocksPort"), ["SocksPort 0"]);
        let middle = config(&layout, &ids, "middle");
        assert_eq!(lines(&middle, "ExitPolicy"), ["ExitPolicy reject *:*"]);
        let client = config(&layout, &ids, "client-perf-1");
        assert_eq!(
            lines(&client, "SocksPort"),
            [format!("SocksPort 127.0.0.1:{SOCKS_PORT}")]
        );
        assert_eq!(lines(&client, "ConfluxEnabled"), ["ConfluxEnabled 0"]);
        let excluded = lines(&client, "ExcludeNodes")[0];
        assert_eq!(excluded.matches('$').count(), 3, "{excluded}");
        assert!(lines(&client, "ORPort").is_empty());
    }
}
