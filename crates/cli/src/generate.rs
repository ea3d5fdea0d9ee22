//! `onionlab generate`: write the scenario of a Tor network at a fraction of the real one's
//! size, with a realistic load.
//!
//! Load 1.0 is the live network's as the 2018 PrivCount measurements put it (Jansen, Traudt
//! and Hopper, CCS 2018), which is also what the largest published full-scale simulation ran
//! (Jansen et al., "Once is Never Enough", USENIX Security 2021: 792k simultaneously active
//! users on 6,489 relays): [`ACTIVE_USERS`] users active at once, each starting
//! `onionlab_traffic::CIRCUITS_PER_USER_PER_10_MIN` circuits every 10 minutes whose streams
//! follow the PrivCount models (the `markov` workload). A network at fraction F of the relays
//! and load L gets L × F × [`ACTIVE_USERS`] users, so every relay carries about the share of
//! users it carries in the real network.

use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;

use onionlab_netdir::Consensus;

use crate::Failure;

/// Simultaneously active users on the whole network at load 1.0: the 2018 PrivCount count of
/// active client IPs per 10 minutes, scaled to the whole network (791,935), as published.
pub(crate) const ACTIVE_USERS: f64 = 792_000.0;

/// Users each client host stands for: 792k users on about 15,800 hosts at full scale, which
/// keeps a full network's hosts in the tens of thousands (a tor client per host) while each
/// host still carries many users' independent sessions.
pub(crate) const USERS_PER_HOST: f64 = 50.0;

/// One user's access link (Mbit/s down, up): the median country of the 2020 speed data
/// (`data/workload/client-speed-by-country-2020-04.json.xz`), as in the shipped examples. A
/// host standing for N users gets N of them, so that its users do not share one home link
/// (which would make the host's link, not Tor, the bottleneck of every user behind it).
const USER_LINK_MBIT: (u64, u64) = (36, 20);

/// Shares of Tor users by country, from Tor Metrics' "Top-10 countries by directly connecting
/// users", 2013-05-30 to 2013-09-05 (the newest such table whose figures we could check; see
/// data/SOURCES.md). The rest of the users are placed anywhere.
pub(crate) const COUNTRY_SHARES: [(&str, f64); 10] = [
    ("US", 0.1239),
    ("DE", 0.0863),
    ("BR", 0.0631),
    ("FR", 0.0626),
    ("ES", 0.0474),
    ("IT", 0.0426),
    ("GB", 0.0360),
    ("PL", 0.0352),
    ("RU", 0.0340),
    ("IN", 0.0297),
];

/// Where the file servers are: countries with many exits and hosting providers, so that
/// exit-to-server paths have the spread of the real web.
const SERVER_COUNTRIES: [&str; 4] = ["US", "DE", "NL", "FR"];

/// Client hosts per file server, as tornettools' default server scale (0.1) has it.
const CLIENT_HOSTS_PER_SERVER: f64 = 10.0;

/// OnionPerf-like measurement clients per size at full scale (and at least one per site and
/// size).
const PERF_CLIENTS_FULL: f64 = 20.0;

/// Where Tor Metrics' OnionPerf instances measured from, by the era of the consensus: op-us,
/// op-nl and op-hk from March 2017 (metrics-web added them on 2017-03-18 and 2017-03-21; op-us
/// was a VPS on the US east coast, and the others are placed where their names say); op-de7a,
/// op-hk7a, op-nl7a and op-us7a later (the instances CollecTor held files of in March 2023).
/// op-ab, which also measured in 2019, is left out: no source says where it was.
fn onionperf_sites(era: onionlab_torcore::TorEra) -> &'static [&'static str] {
    match era {
        onionlab_torcore::TorEra::Tor045 => &["US", "NL", "HK"],
        onionlab_torcore::TorEra::Tor046 => &["US", "NL", "HK", "DE"],
    }
}

/// A measurement host's access link, both ways. OnionPerf runs on hosted servers whose link
/// speeds are not published; 1 Gbit/s is a common hosted link and lies far above any one
/// circuit's rate (the live network's 90th percentile of OnionPerf throughput in 2019 was
/// 10.2 Mbit/s), so the host's own link does not shape its downloads, as OnionPerf's does
/// not. An ordinary user's link (a random node's) would.
const PERF_LINK: &str = "1 Gbit";

/// The engine's narrowest round in a generated network, 1 ms. On `internet-geo` two hosts of
/// one small country are less than that apart (its distance rule gives Monaco 0.01 ms and Hong
/// Kong 0.18 ms), and the engine's rounds are as wide as the nearest pair of hosts: a 10%
/// network on rounds of a fraction of a millisecond runs much slower than on 1 ms
/// rounds, which hold back only the packets between such neighbours, by less than 1 ms.
const LOOKAHEAD_FLOOR: u64 = 1_000_000;

/// Every relay's ConnLimit in generated networks: each user of a host has its own connection
/// to its guard, so at load 1.0 a big guard holds thousands of client connections beside its
/// connections to other relays.
const GENERATED_CONN_LIMIT: u32 = 65_536;

#[derive(clap::Args)]
pub(crate) struct GenerateArgs {
    /// The consensus to take relays from: consensus-2023, consensus-2022,
    /// consensus-2019-microdesc, data:<path>, or a file.
    #[arg(long, value_name = "FILE")]
    pub consensus: String,
    /// Fraction of the consensus's relays to keep, 0 < F <= 1 (1 keeps every relay).
    #[arg(long, value_name = "F")]
    pub scale: f64,
    /// Load relative to the live network, 0.001 to 10 (1.0 is the live load; see
    /// docs/src/user/generate.md).
    #[arg(long, value_name = "L", default_value_t = 1.0)]
    pub load: f64,
    /// Scenario file to write (default: net-<F as a percentage>pct.yaml).
    #[arg(short, long, value_name = "OUT.yaml")]
    pub output: Option<PathBuf>,
    /// The scenario's run.seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The scenario's run.stop_time (the bootstrap is 2 minutes, or half a shorter run).
    #[arg(long, value_name = "T", default_value = "5m")]
    pub stop_time: String,
    /// Replace an existing file.
    #[arg(long)]
    pub force: bool,
}

/// Splits `total` into parts proportional to `weights`, summing exactly to `total`: floors
/// first, then the largest remainders (ties by position), so the split is deterministic.
fn apportion(total: u64, weights: &[f64]) -> Vec<u64> {
    let sum: f64 = weights.iter().sum();
    let exact: Vec<f64> = weights.iter().map(|w| total as f64 * w / sum).collect();
    let mut parts: Vec<u64> = exact.iter().map(|x| x.floor() as u64).collect();
    let mut left = total - parts.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| {
        let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    for i in order {
        if left == 0 {
            break;
        }
        parts[i] += 1;
        left -= 1;
    }
    parts
}

pub(crate) fn generate(args: GenerateArgs) -> Result<(), Failure> {
    let output = args.output.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "net-{}pct.yaml",
            format!("{:.4}", args.scale * 100.0)
                .trim_end_matches('0')
                .trim_end_matches('.')
        ))
    });
    let text = scenario_for(&args)?;
    if output.exists() && !args.force {
        return Err(Failure::input(format!(
            "{}: exists; give --force to replace it",
            output.display()
        )));
    }
    fs::write(&output, text)
        .map_err(|e| Failure::input(format!("{}: cannot write: {e}", output.display())))?;
    // What was written must pass `check`; a failure here is onionlab's, not the user's.
    crate::run::check(&output.to_string_lossy()).map_err(|f| {
        Failure::internal(format!(
            "the generated scenario does not pass check: {}",
            f.message
        ))
    })
}

/// The text of the scenario `args` describe (`args.output` and `args.force` aside), after
/// checking the flags; the file is neither written nor checked here.
pub(crate) fn scenario_for(args: &GenerateArgs) -> Result<String, Failure> {
    if !(args.scale > 0.0 && args.scale <= 1.0) {
        return Err(Failure::input(format!(
            "--scale {}: expected a fraction of the consensus's relays, 0 < F <= 1",
            args.scale
        )));
    }
    if !(0.001..=10.0).contains(&args.load) {
        return Err(Failure::input(format!(
            "--load {}: expected 0.001 to 10 (1.0 is the live network's load)",
            args.load
        )));
    }
    let stop = onionlab_scenario::parse_duration(&args.stop_time)
        .map_err(|e| Failure::input(format!("--stop-time {}: {e}", args.stop_time)))?;
    if stop.0 < 60_000_000_000 || stop > onionlab_scenario::limits::MAX_STOP_TIME {
        return Err(Failure::input(format!(
            "--stop-time {}: expected 1m to 720h (a run needs a minute for its clients to start)",
            args.stop_time
        )));
    }
    // The consensus is read as the scenario will read it, so its relays can be counted; a
    // path is written absolute, since the scenario may be written elsewhere.
    let cwd = std::env::current_dir()
        .map_err(|e| Failure::internal(format!("the working directory: {e}")))?;
    let input = onionlab_scenario::consensus_input(&args.consensus, &cwd.join("generate"))
        .map_err(|e| Failure::input(format!("--consensus: {e}")))?;
    let consensus =
        Consensus::read(&input).map_err(|e| Failure::input(format!("--consensus: {e}")))?;
    let consensus_ref = if onionlab_scenario::is_shipped_consensus(&args.consensus) {
        args.consensus.clone()
    } else {
        input.to_string()
    };
    let period =
        onionlab_torcore::period_settings(&consensus.params, consensus.valid_after.as_deref());
    let capacity = capacity_of(&consensus)?;
    scenario_text(
        args,
        &consensus_ref,
        consensus.relays.len(),
        consensus.valid_after.as_deref(),
        &period,
        &capacity,
        stop,
    )
}

/// How the relays' capacity follows from their weights.
struct Capacity {
    /// The consensus's day (its valid-after date), if it has one.
    date: Option<String>,
    weight_sum: u64,
    /// What the live relays advertised that day, Gbit/s, where the shipped live data has it.
    advertised_gbit_s: Option<f64>,
}

impl Capacity {
    /// `relays.sample.rate_per_weight`: what makes the whole network's rates add up to the
    /// advertised bandwidth (bytes/s per unit of weight), rounded to a whole byte.
    fn rate_per_weight(&self) -> Option<f64> {
        let advertised = self.advertised_gbit_s?;
        (self.weight_sum > 0).then(|| (advertised * 1e9 / 8.0 / self.weight_sum as f64).round())
    }
}

/// Relay capacities as tornettools takes them, from what relays advertise in their descriptors
/// (the least of BandwidthRate, BandwidthBurst and observed bandwidth), at the level of the
/// whole network: Tor Metrics' daily sum of advertised bandwidth for the consensus's day, in
/// the shipped live data. Consensus weights are a measured share of the network, not a
/// capacity: read as kB/s, those of 2019-12-15 add up to 577 Gbit/s against the 415.5 Gbit/s
/// advertised that day.
fn capacity_of(consensus: &Consensus) -> Result<Capacity, Failure> {
    let date = (consensus.valid_after.as_deref()).and_then(|v| v.get(..10).map(str::to_string));
    let live = crate::live::live_data()?;
    let advertised_gbit_s = date.as_ref().and_then(|d| {
        (live.daily_relay_bandwidth_gbit_s.iter())
            .find(|day| &day.date == d)
            .map(|day| day.advertised)
    });
    Ok(Capacity {
        date,
        weight_sum: consensus.relays.iter().map(|r| r.bandwidth).sum(),
        advertised_gbit_s,
    })
}

fn scenario_text(
    args: &GenerateArgs,
    consensus: &str,
    consensus_relays: usize,
    valid_after: Option<&str>,
    period: &[onionlab_torcore::PeriodSetting],
    capacity: &Capacity,
    stop: onionlab_scenario::Duration,
) -> Result<String, Failure> {
    let relays = if args.scale >= 1.0 {
        consensus_relays
    } else {
        ((args.scale * consensus_relays as f64).round() as usize).max(3)
    };
    if relays > consensus_relays || consensus_relays < 3 {
        return Err(Failure::input(format!(
            "--consensus {consensus}: {consensus_relays} relays, too few for a network of {relays}"
        )));
    }
    let users = args.load * args.scale * ACTIVE_USERS;
    let hosts = ((users / USERS_PER_HOST).round() as u64).max(1);
    let per_host = ((users / hosts as f64).round() as u32).clamp(1, onionlab_traffic::MAX_USERS);
    let shares: Vec<f64> = COUNTRY_SHARES
        .iter()
        .map(|(_, s)| *s)
        .chain([1.0 - COUNTRY_SHARES.iter().map(|(_, s)| s).sum::<f64>()])
        .collect();
    let by_country = apportion(hosts, &shares);
    let servers = ((hosts as f64 / CLIENT_HOSTS_PER_SERVER).ceil() as u64).max(4);
    let by_server_country = apportion(servers, &[1.0; SERVER_COUNTRIES.len()]);
    let era = onionlab_torcore::TorEra::of(valid_after);
    let sites = onionperf_sites(era);
    let perf_per_site =
        ((PERF_CLIENTS_FULL * args.scale / sites.len() as f64).round() as u64).max(1);
    let bootstrap = (stop.0 / 2).min(120_000_000_000);

    let mut t = String::new();
    let w = &mut t;
    let _ = writeln!(
        w,
        "# Generated by onionlab generate; do not edit by hand, generate again:"
    );
    let _ = writeln!(
        w,
        "#   onionlab generate --consensus {consensus} --scale {} --load {} --seed {} --stop-time {}",
        args.scale, args.load, args.seed, args.stop_time
    );
    let _ = writeln!(
        w,
        "# Relays: {relays} of the consensus's {consensus_relays} (F = {}), sampled by class and bandwidth.",
        args.scale
    );
    let _ = writeln!(
        w,
        "# Load L = {}: L x F x 792,000 simultaneously active users = {:.0}, on {hosts} client hosts of {per_host} users",
        args.load, users
    );
    let _ = writeln!(
        w,
        "# each. Load 1.0 is the live network's: 792k active users (PrivCount 2018, Jansen et al. CCS 2018;"
    );
    let _ = writeln!(
        w,
        "# the 792k users on 6,489 relays of Jansen et al., USENIX Security 2021), each starting 1.88"
    );
    let _ = writeln!(
        w,
        "# circuits per 10 minutes whose streams follow the PrivCount models (the markov workload)."
    );
    let _ = writeln!(
        w,
        "# Clients by country: Tor Metrics' top-10 shares (2013-05-30..2013-09-05), the rest anywhere."
    );
    let _ = writeln!(
        w,
        "# Perf clients (OnionPerf-like): {perf_per_site} per size in each of {} where OnionPerf measured",
        sites.join(", ")
    );
    let _ = writeln!(
        w,
        "# from then, on hosted {PERF_LINK}/s links, fetching 50 KiB, 1 MiB and 5 MiB every minute from"
    );
    let _ = writeln!(
        w,
        "# a server at their own site (perf-<site>), as OnionPerf fetches from its own host."
    );
    let _ = writeln!(
        w,
        "run: {{ seed: {}, stop_time: {}, bootstrap: {} }}",
        args.seed,
        stop,
        onionlab_scenario::Duration(bootstrap)
    );
    let _ = writeln!(
        w,
        "# internet-2018's points of presence and access links, with latencies that follow geography"
    );
    let _ = writeln!(
        w,
        "# (distance between capitals x 2.1 at the speed of light in fibre) and no loss: internet-2018's"
    );
    let _ = writeln!(
        w,
        "# own latencies are one value per country summed, and its 0.5% loss on every edge was never measured."
    );
    let _ = writeln!(
        w,
        "# Rounds of at least 1 ms: two hosts of a small country are closer than that (Monaco's 0.01 ms),"
    );
    let _ = writeln!(
        w,
        "# and rounds as narrow as the nearest pair would make the run much slower; their packets arrive by the round's end."
    );
    let _ = writeln!(
        w,
        "network: {{ graph: internet-geo, lookahead_floor: {} }}",
        onionlab_scenario::Duration(LOOKAHEAD_FLOOR)
    );
    let _ = writeln!(
        w,
        "# Tor as the network of the consensus ({}) ran it: each value from the consensus's",
        valid_after.unwrap_or("no valid-after")
    );
    let _ = writeln!(
        w,
        "# params line, or where the line is silent, the code default of {}{}.",
        era.release(),
        match era {
            onionlab_torcore::TorEra::Tor045 => " (unchanged through 0.4.5)",
            onionlab_torcore::TorEra::Tor046 => "",
        }
    );
    let _ = writeln!(w, "tor:");
    let _ = writeln!(
        w,
        "  # Big relays hold a connection to most other relays and to thousands of users: file"
    );
    let _ = writeln!(
        w,
        "  # limits as Debian's tor service sets them (LimitNOFILE=65536), not a bare process's 4096."
    );
    let _ = writeln!(w, "  conn_limit: {GENERATED_CONN_LIMIT}");
    let _ = writeln!(
        w,
        "  # The live relays were connected wherever a circuit had passed within their channels' idle"
    );
    let _ = writeln!(
        w,
        "  # timeout (relay_channel_idle_timeout_s below): relays open those channels as the run starts."
    );
    let _ = writeln!(w, "  warm_channels: true");
    for s in period {
        let line = format!("  {}: {}", s.key, s.value);
        let _ = writeln!(w, "{line:<40} # {}", s.source);
    }
    let _ = writeln!(w, "authorities: 3");
    let rate_per_weight = capacity.rate_per_weight();
    let day = capacity.date.as_deref().unwrap_or("its day");
    match (rate_per_weight, capacity.advertised_gbit_s) {
        (Some(per), Some(advertised)) => {
            let _ = writeln!(
                w,
                "# Relay capacity: rate = consensus weight x {per} B/s, so that the whole network's"
            );
            let _ = writeln!(
                w,
                "# rates add up to the {advertised} Gbit/s its relays advertised on {day} (Tor Metrics, as"
            );
            let _ = writeln!(
                w,
                "# tornettools takes capacities from descriptors); its weights sum to {}.",
                capacity.weight_sum
            );
        }
        _ => {
            let _ = writeln!(
                w,
                "# Relay capacity: rate = consensus weight read as kB/s (the advertised bandwidth"
            );
            let _ = writeln!(w, "# of {day} does not ship with onionlab).");
        }
    }
    let _ = writeln!(
        w,
        "# The rate is each relay's link, both ways (limit: link): most of the live relays' capacity"
    );
    let _ = writeln!(
        w,
        "# was on relays whose BandwidthRate, if any, lay above what they were observed to carry."
    );
    let geoip = onionlab_scenario::nearest_geoip(valid_after);
    let _ = writeln!(
        w,
        "# Relay placement: each relay in the country its address lies in, by {geoip} (tor's country"
    );
    let _ = writeln!(
        w,
        "# table nearest the consensus's day that onionlab ships), on that country's graph node."
    );
    let _ = writeln!(w, "relays:");
    let rate = rate_per_weight.map_or(String::new(), |per| format!(", rate_per_weight: {per}"));
    let _ = writeln!(
        w,
        "  sample: {{ consensus: {consensus}, count: {relays}{rate}, limit: link, place: address, geoip: {geoip} }}"
    );
    let _ = writeln!(w, "servers:");
    for (country, n) in SERVER_COUNTRIES.iter().zip(&by_server_country) {
        if *n > 0 {
            let _ = writeln!(
                w,
                "  - {{ name: web-{}, count: {n}, country: {country}, bandwidth: 1 Gbit }}",
                country.to_lowercase()
            );
        }
    }
    // OnionPerf fetches from a TGen server on its own host, so the exit's leg of each
    // measurement goes to the measuring site; users do not fetch from it.
    for site in sites {
        let _ = writeln!(
            w,
            "  - {{ name: perf-{}, count: 1, country: {site}, bandwidth: {PERF_LINK}, dedicated: true }}",
            site.to_lowercase()
        );
    }
    let _ = writeln!(w, "clients:");
    for (i, n) in by_country.iter().enumerate() {
        if *n == 0 {
            continue;
        }
        let (name, country) = match COUNTRY_SHARES.get(i) {
            Some((c, _)) => (
                format!("users-{}", c.to_lowercase()),
                format!(", country: {c}"),
            ),
            None => ("users-other".to_string(), String::new()),
        };
        let _ = writeln!(
            w,
            "  - {{ name: {name}, count: {n}{country}, bandwidth_down: {} Mbit, bandwidth_up: {} Mbit, workload: {{ markov: {{ users: {per_host} }} }}, start: [0s, 30s] }}",
            USER_LINK_MBIT.0 * per_host as u64,
            USER_LINK_MBIT.1 * per_host as u64,
        );
    }
    // OnionPerf's tor runs without entry guards and with circuits dirty after 60 s (its
    // torrc since 2019), so most of its circuits open a connection to a new first hop.
    for (size, label) in [("50 KiB", "50k"), ("1 MiB", "1m"), ("5 MiB", "5m")] {
        for site in sites {
            let _ = writeln!(
                w,
                "  - {{ name: perf-{label}-{site_l}, count: {perf_per_site}, country: {site}, bandwidth_down: {PERF_LINK}, bandwidth_up: {PERF_LINK}, workload: {{ perf: {{ size: {size}, interval: 60s }} }}, servers: perf-{site_l}, start: [0s, 60s], use_entry_guards: false, max_circuit_dirtiness: 60s }}",
                site_l = site.to_lowercase()
            );
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apportion_sums_exactly_and_follows_the_weights() {
        assert_eq!(apportion(10, &[1.0, 1.0, 1.0]), vec![4, 3, 3]);
        assert_eq!(apportion(0, &[0.5, 0.5]), vec![0, 0]);
        let parts = apportion(15_840, &[0.1239, 0.0863, 0.7898]);
        assert_eq!(parts.iter().sum::<u64>(), 15_840);
        assert_eq!(parts[0], 1963);
    }
}
