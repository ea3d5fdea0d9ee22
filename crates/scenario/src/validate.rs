//! Checks that need more than one key, or knowledge of Tor, to judge.
//!
//! Serde already refused unknown keys and wrong types; what is left are values that are
//! well-formed but impossible (a pause whose minimum exceeds its maximum), inconsistent with
//! each other (bootstrap after the end of the run) or referring to something that does not
//! exist (a server group or a file). Checks run in file order so the first error reported is
//! the first one a reader would reach.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use onionlab_netdir::ExitPolicy;

use crate::data;
use crate::model::*;
use crate::units::{Duration, Rate};
use crate::ScenarioError;

/// Tor refuses to run a relay whose `BandwidthRate` is below 75 KiB/s.
pub(crate) const MIN_RELAY_RATE_BYTES: u64 = 75 * 1024;

/// A relay must be able to carry one circuit hop; three distinct relays make a path.
const MIN_RELAYS_FOR_PATHS: u64 = 3;

type Check = Result<(), ScenarioError>;

struct Ctx<'a> {
    source: &'a Path,
}

impl Ctx<'_> {
    fn err(&self, field: impl Into<String>, message: impl Into<String>) -> ScenarioError {
        ScenarioError::new(self.source, field, message)
    }
}

pub(crate) fn check(s: &Scenario) -> Check {
    let cx = Ctx { source: &s.source };
    name(&cx, "name", &s.name, false)?;
    run(&cx, &s.run)?;
    network(&cx, s)?;
    s.tor.validate().map_err(|(field, expected)| {
        cx.err(format!("tor.{field}"), format!("expected {expected}"))
    })?;
    authorities(&cx, s)?;
    relays(&cx, s)?;
    servers(&cx, s)?;
    clients(&cx, s)?;
    Ok(())
}

/// Names end up in host names, file names and result tables, so they stay plain.
fn name(cx: &Ctx, field: &str, n: &str, nickname: bool) -> Check {
    if nickname {
        if n.is_empty() || n.len() > 19 || !n.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(cx.err(
                field,
                format!("expected a Tor nickname: 1 to 19 letters and digits, got {n:?}"),
            ));
        }
        return Ok(());
    }
    let ok_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.';
    if n.is_empty() || !n.chars().all(ok_char) {
        return Err(cx.err(
            field,
            format!("expected a name of letters, digits, '-', '_' or '.', got {n:?}"),
        ));
    }
    Ok(())
}

fn run(cx: &Ctx, r: &RunSection) -> Check {
    if r.stop_time.0 == 0 {
        return Err(cx.err("run.stop_time", "expected a positive duration, got 0s"));
    }
    if r.bootstrap >= r.stop_time {
        return Err(cx.err(
            "run.bootstrap",
            format!(
                "bootstrap ({}) must end before stop_time ({}), or no download would count",
                r.bootstrap, r.stop_time
            ),
        ));
    }
    if r.threads == Some(0) {
        return Err(cx.err("run.threads", "expected at least 1 thread"));
    }
    Ok(())
}

fn positive_rate(cx: &Ctx, field: String, r: Option<Rate>) -> Check {
    if r == Some(Rate(0)) {
        return Err(cx.err(field, "expected a positive rate, got 0"));
    }
    Ok(())
}

fn fraction(cx: &Ctx, field: &str, v: f64) -> Check {
    if !(0.0..=1.0).contains(&v) {
        return Err(cx.err(
            field,
            format!("expected a probability between 0 and 1, got {v}"),
        ));
    }
    Ok(())
}

fn network(cx: &Ctx, s: &Scenario) -> Check {
    let n = &s.network;
    if n.graph == "builtin" {
        let b = n.builtin.clone().unwrap_or_default();
        if b.latency.0 == 0 {
            return Err(cx.err(
                "network.builtin.latency",
                "expected a positive latency (it bounds the simulation's parallel rounds)",
            ));
        }
        fraction(cx, "network.builtin.loss", b.loss)?;
        positive_rate(cx, "network.builtin.bandwidth".into(), Some(b.bandwidth))?;
    } else {
        if n.builtin.is_some() {
            return Err(cx.err(
                "network.builtin",
                format!(
                    "only allowed with `graph: builtin` (graph is {:?}); remove it or set graph: builtin",
                    n.graph
                ),
            ));
        }
        data::resolve_file(&n.graph, cx.source, data::GRAPH_ALIASES).map_err(|m| {
            cx.err(
                "network.graph",
                format!("expected builtin or a graph file: {m}"),
            )
        })?;
    }
    if n.down_queue.0 == 0 {
        return Err(cx.err("network.down_queue", "expected a positive duration"));
    }
    Ok(())
}

/// Countries are ISO 3166 alpha-2 codes, as in the graph files; whether the graph has a node
/// there is checked when placing hosts.
fn country(cx: &Ctx, s: &Scenario, field: String, c: &Option<String>) -> Check {
    let Some(c) = c else { return Ok(()) };
    if c.len() != 2 || !c.chars().all(|ch| ch.is_ascii_alphabetic()) {
        return Err(cx.err(
            field,
            format!("unknown country {c:?}: expected a two-letter ISO 3166 code such as \"US\""),
        ));
    }
    if s.network.graph == "builtin" {
        return Err(cx.err(
            field,
            format!(
                "unknown country {c:?}: the builtin single-switch graph has no countries \
                 (use graph: internet-2018 or a graph with country codes)"
            ),
        ));
    }
    Ok(())
}

fn link(cx: &Ctx, s: &Scenario, prefix: &str, l: &Link) -> Check {
    positive_rate(cx, format!("{prefix}.bandwidth"), l.bandwidth)?;
    positive_rate(cx, format!("{prefix}.bandwidth_up"), l.bandwidth_up)?;
    positive_rate(cx, format!("{prefix}.bandwidth_down"), l.bandwidth_down)?;
    country(cx, s, format!("{prefix}.country"), &l.country)
}

fn authorities(cx: &Ctx, s: &Scenario) -> Check {
    if s.authorities.0.count == 0 {
        return Err(cx.err(
            "authorities",
            "expected at least 1 directory authority (clients need a consensus)",
        ));
    }
    link(cx, s, "authorities", &s.authorities.link())
}

fn burst_factor(cx: &Ctx, field: &str, f: Option<f64>) -> Check {
    if let Some(f) = f {
        if !(f.is_finite() && f >= 1.0) {
            return Err(cx.err(
                field,
                format!(
                    "expected a factor of at least 1.0 (burst below rate is meaningless), got {f}"
                ),
            ));
        }
    }
    Ok(())
}

fn relay_rate(cx: &Ctx, field: String, r: Rate) -> Check {
    if r.bytes_per_sec() < MIN_RELAY_RATE_BYTES {
        return Err(cx.err(
            field,
            format!("expected at least 75 KiB/s (Tor refuses slower relays), got {r}"),
        ));
    }
    Ok(())
}

fn policy(cx: &Ctx, field: String, p: &Option<String>) -> Check {
    if let Some(p) = p {
        ExitPolicy::parse(p).map_err(|m| {
            cx.err(
                field,
                format!("expected an exit policy summary such as \"accept 80,443\" or \"reject 25\": {m}"),
            )
        })?;
    }
    Ok(())
}

fn relays(cx: &Ctx, s: &Scenario) -> Check {
    let need_exit = !s.clients.is_empty();
    match &s.relays {
        RelaysSection::Generate(g) => {
            let total = u64::from(g.guard)
                + u64::from(g.exit)
                + u64::from(g.guard_exit)
                + u64::from(g.middle);
            if total == 0 {
                return Err(cx.err(
                    "relays.generate",
                    "expected at least one relay (guard, exit, guard_exit or middle)",
                ));
            }
            if need_exit && g.exit == 0 && g.guard_exit == 0 {
                return Err(cx.err(
                    "relays.generate.exit",
                    "expected at least one exit or guard_exit relay: clients exist and \
                     without an exit no circuit can reach a server",
                ));
            }
            if need_exit && total < MIN_RELAYS_FOR_PATHS {
                return Err(cx.err(
                    "relays.generate",
                    format!("expected at least {MIN_RELAYS_FOR_PATHS} relays for 3-hop circuits, got {total}"),
                ));
            }
            match &g.bandwidth {
                BandwidthModel::FromFile(f) => {
                    data::resolve_file(f, cx.source, data::RELAYS_ALIASES).map_err(|m| {
                        cx.err(
                            "relays.generate.bandwidth.from_file",
                            format!("expected a relays CSV: {m}"),
                        )
                    })?;
                }
                BandwidthModel::Lognormal(l) => {
                    relay_rate(
                        cx,
                        "relays.generate.bandwidth.lognormal.median".into(),
                        l.median,
                    )?;
                    if !(l.sigma.is_finite() && (0.0..=5.0).contains(&l.sigma)) {
                        return Err(cx.err(
                            "relays.generate.bandwidth.lognormal.sigma",
                            format!("expected a spread between 0 and 5, got {}", l.sigma),
                        ));
                    }
                }
                BandwidthModel::Fixed(r) => {
                    relay_rate(cx, "relays.generate.bandwidth.fixed".into(), *r)?
                }
            }
            burst_factor(cx, "relays.generate.burst_factor", g.burst_factor)?;
            positive_rate(cx, "relays.generate.link".into(), g.link)?;
            country(cx, s, "relays.generate.country".into(), &g.country)?;
            policy(cx, "relays.generate.exit_policy".into(), &g.exit_policy)?;
        }
        RelaysSection::List(list) => {
            if list.is_empty() {
                return Err(cx.err("relays.list", "expected at least one relay"));
            }
            let mut names = HashSet::new();
            let mut addresses = HashMap::new();
            let mut total = 0u64;
            let mut exits = 0u64;
            for (i, r) in list.iter().enumerate() {
                let p = format!("relays.list[{i}]");
                name(cx, &format!("{p}.name"), &r.name, true)?;
                if r.count == 0 {
                    return Err(cx.err(format!("{p}.count"), "expected at least 1"));
                }
                let expanded: Vec<String> = if r.count == 1 {
                    vec![r.name.clone()]
                } else {
                    (1..=r.count).map(|k| format!("{}{k}", r.name)).collect()
                };
                if expanded.last().is_some_and(|n| n.len() > 19) {
                    return Err(cx.err(
                        format!("{p}.name"),
                        format!(
                            "with count {} the numbered nicknames exceed Tor's 19 characters",
                            r.count
                        ),
                    ));
                }
                for n in expanded {
                    if is_authority_name(&n, s.authorities.0.count) || !names.insert(n.clone()) {
                        return Err(cx.err(
                            format!("{p}.name"),
                            format!("relay name {n:?} is used twice (authorities are auth1, auth2, ...)"),
                        ));
                    }
                }
                relay_rate(cx, format!("{p}.bandwidth_rate"), r.bandwidth_rate)?;
                if let Some(b) = r.bandwidth_burst {
                    if b < r.bandwidth_rate {
                        return Err(cx.err(
                            format!("{p}.bandwidth_burst"),
                            format!(
                                "expected at least bandwidth_rate ({}), got {b}",
                                r.bandwidth_rate
                            ),
                        ));
                    }
                }
                if let Some(rr) = r.relay_bandwidth_rate {
                    relay_rate(cx, format!("{p}.relay_bandwidth_rate"), rr)?;
                    if let Some(rb) = r.relay_bandwidth_burst {
                        if rb < rr {
                            return Err(cx.err(
                                format!("{p}.relay_bandwidth_burst"),
                                format!("expected at least relay_bandwidth_rate ({rr}), got {rb}"),
                            ));
                        }
                    }
                } else if r.relay_bandwidth_burst.is_some() {
                    return Err(cx.err(
                        format!("{p}.relay_bandwidth_burst"),
                        "only meaningful together with relay_bandwidth_rate",
                    ));
                }
                if r.consensus_weight == Some(0) {
                    return Err(cx.err(
                        format!("{p}.consensus_weight"),
                        "expected a positive weight (a zero-weight relay is never chosen)",
                    ));
                }
                policy(cx, format!("{p}.exit_policy"), &r.exit_policy)?;
                if let Some(f) = &r.family {
                    name(cx, &format!("{p}.family"), f, false)?;
                }
                country(cx, s, format!("{p}.country"), &r.country)?;
                positive_rate(cx, format!("{p}.link"), r.link)?;
                positive_rate(cx, format!("{p}.link_up"), r.link_up)?;
                positive_rate(cx, format!("{p}.link_down"), r.link_down)?;
                if let Some(a) = r.address {
                    for k in 0..r.count {
                        let Some(addr) = u32::from(a).checked_add(k) else {
                            return Err(cx.err(
                                format!("{p}.address"),
                                "addresses run past 255.255.255.255",
                            ));
                        };
                        if let Some(prev) = addresses.insert(addr, i) {
                            return Err(cx.err(
                                format!("{p}.address"),
                                format!(
                                    "address {} is also given to relays.list[{prev}]",
                                    std::net::Ipv4Addr::from(addr)
                                ),
                            ));
                        }
                    }
                }
                total += u64::from(r.count);
                let allows_exit = r
                    .exit_policy
                    .as_deref()
                    .and_then(|p| ExitPolicy::parse(p).ok())
                    .is_none_or(|p| p.allows_any());
                if r.flags.contains(&FlagName::Exit) && allows_exit {
                    exits += u64::from(r.count);
                }
            }
            if need_exit && exits == 0 {
                return Err(cx.err(
                    "relays.list",
                    "expected at least one relay with the exit flag and a policy that accepts \
                     some port: clients exist and without an exit no circuit can reach a server",
                ));
            }
            if need_exit && total < MIN_RELAYS_FOR_PATHS {
                return Err(cx.err(
                    "relays.list",
                    format!("expected at least {MIN_RELAYS_FOR_PATHS} relays for 3-hop circuits, got {total}"),
                ));
            }
        }
        RelaysSection::Sample(sm) => {
            data::resolve_file(&sm.consensus, cx.source, data::CONSENSUS_ALIASES).map_err(|m| {
                cx.err(
                    "relays.sample.consensus",
                    format!("expected a consensus file: {m}"),
                )
            })?;
            let min = if need_exit { MIN_RELAYS_FOR_PATHS } else { 1 };
            if u64::from(sm.count) < min {
                return Err(cx.err(
                    "relays.sample.count",
                    format!("expected at least {min} relays, got {}", sm.count),
                ));
            }
            if let Some(r) = sm.bandwidth_rate {
                relay_rate(cx, "relays.sample.bandwidth_rate".into(), r)?;
            }
            burst_factor(cx, "relays.sample.burst_factor", sm.burst_factor)?;
            positive_rate(cx, "relays.sample.link".into(), sm.link)?;
            country(cx, s, "relays.sample.country".into(), &sm.country)?;
        }
    }
    Ok(())
}

pub(crate) fn is_authority_name(n: &str, count: u32) -> bool {
    n.strip_prefix("auth")
        .and_then(|d| d.parse::<u32>().ok())
        .is_some_and(|k| k >= 1 && k <= count)
}

fn servers(cx: &Ctx, s: &Scenario) -> Check {
    let mut names = HashSet::new();
    for (i, g) in s.servers.iter().enumerate() {
        let p = format!("servers[{i}]");
        name(cx, &format!("{p}.name"), &g.name, false)?;
        if !names.insert(g.name.as_str()) {
            return Err(cx.err(
                format!("{p}.name"),
                format!("server group {:?} is defined twice", g.name),
            ));
        }
        if g.count == 0 {
            return Err(cx.err(format!("{p}.count"), "expected at least 1 server"));
        }
        if g.port == 0 {
            return Err(cx.err(format!("{p}.port"), "expected a port between 1 and 65535"));
        }
        link(cx, s, &p, &g.link())?;
    }
    Ok(())
}

fn positive(cx: &Ctx, field: String, d: Duration) -> Check {
    if d.0 == 0 {
        return Err(cx.err(field, "expected a positive duration, got 0s"));
    }
    Ok(())
}

fn range(cx: &Ctx, field: String, r: DurationRange) -> Check {
    if r.min > r.max {
        return Err(cx.err(
            field,
            format!(
                "expected [min, max] with min <= max, got [{}, {}]",
                r.min, r.max
            ),
        ));
    }
    Ok(())
}

fn clients(cx: &Ctx, s: &Scenario) -> Check {
    let mut names = HashSet::new();
    for (i, g) in s.clients.iter().enumerate() {
        let p = format!("clients[{i}]");
        name(cx, &format!("{p}.name"), &g.name, false)?;
        if !names.insert(g.name.as_str()) {
            return Err(cx.err(
                format!("{p}.name"),
                format!("client group {:?} is defined twice", g.name),
            ));
        }
        if g.count == 0 {
            return Err(cx.err(format!("{p}.count"), "expected at least 1 client"));
        }
        let w = format!("{p}.workload");
        let size_ok = |field: String, size: crate::units::Size| {
            if size.0 == 0 {
                Err(cx.err(field, "expected a positive size, got 0"))
            } else {
                Ok(())
            }
        };
        match &g.workload {
            Workload::Web(web) => {
                size_ok(format!("{w}.web.size"), web.size)?;
                range(cx, format!("{w}.web.pause"), web.pause)?;
                positive(cx, format!("{w}.web.timeout"), web.timeout)?;
            }
            Workload::Bulk(b) => {
                size_ok(format!("{w}.bulk.size"), b.size)?;
                range(cx, format!("{w}.bulk.pause"), b.pause)?;
                positive(cx, format!("{w}.bulk.timeout"), b.timeout)?;
            }
            Workload::Perf(pf) => {
                size_ok(format!("{w}.perf.size"), pf.size)?;
                positive(cx, format!("{w}.perf.interval"), pf.interval)?;
                if let Some(t) = pf.timeout {
                    positive(cx, format!("{w}.perf.timeout"), t)?;
                }
            }
        }
        match &g.servers {
            Some(target) if !s.servers.iter().any(|sg| &sg.name == target) => {
                let defined: Vec<&str> = s.servers.iter().map(|sg| sg.name.as_str()).collect();
                return Err(cx.err(
                    format!("{p}.servers"),
                    format!(
                        "no server group named {target:?} (defined: {})",
                        if defined.is_empty() {
                            "none".to_string()
                        } else {
                            defined.join(", ")
                        }
                    ),
                ));
            }
            None if s.servers.is_empty() => {
                return Err(cx.err(
                    format!("{p}.servers"),
                    "clients need servers to download from, but no `servers:` are defined",
                ));
            }
            _ => {}
        }
        range(cx, format!("{p}.start"), g.start)?;
        // Clients whose start falls after the stop time simply never start; a range that
        // lies wholly after it is a mistake.
        if g.start.min >= s.run.stop_time {
            return Err(cx.err(
                format!("{p}.start"),
                format!(
                    "clients must start before stop_time ({}), got from {}",
                    s.run.stop_time, g.start.min
                ),
            ));
        }
        link(cx, s, &p, &g.link())?;
    }
    Ok(())
}
