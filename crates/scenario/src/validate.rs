//! Checks that need more than one key, or knowledge of Tor, to judge, and the ranges that keep
//! a run finite.
//!
//! Serde already refused unknown keys and wrong types; what is left are values that are
//! well-formed but impossible (a pause whose minimum exceeds its maximum), out of the range a
//! run can carry out in bounded time and memory ([`crate::limits`]), inconsistent with each
//! other (bootstrap after the end of the run) or referring to something that does not exist (a
//! server group or a file). Checks run in file order so the first error reported is the first
//! one a reader would reach, except that the total number of hosts is checked before anything
//! that works per host.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use onionlab_netdir::ExitPolicy;
use onionlab_torcore::format_real;

use crate::data;
use crate::limits::*;
use crate::model::*;
use crate::units::{Duration, Rate, Size};
use crate::{ScenarioError, ScenarioWarning};

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
    hosts(&cx, s)?;
    authorities(&cx, s)?;
    relays(&cx, s)?;
    servers(&cx, s)?;
    clients(&cx, s)?;
    attacks(&cx, s)?;
    processes(&cx, s)?;
    report(&cx, s)?;
    if let CpuSection::Model(spec) = &s.cpu {
        crate::cpu::check(cx.source, spec)?;
    }
    Ok(())
}

/// The most circuits an attacker may build per period (one event each, spread over the period).
const MAX_ATTACK_CIRCUITS: u32 = 100_000;

fn attacks(cx: &Ctx, s: &Scenario) -> Check {
    if s.attacks.len() > 64 {
        return Err(cx.err(
            "attacks",
            format!("expected at most 64 attacks, got {}", s.attacks.len()),
        ));
    }
    let mut names = HashSet::new();
    for (i, a) in s.attacks.iter().enumerate() {
        let p = format!("attacks[{i}]");
        if let Some(n) = &a.name {
            name(cx, &format!("{p}.name"), n, false)?;
        }
        let host = attacker_name(s, i);
        if !names.insert(host.clone()) {
            return Err(cx.err(
                format!("{p}.name"),
                format!("attacker {host:?} is defined twice; give each attack its own name"),
            ));
        }
        name(cx, &format!("{p}.victim"), &a.victim, false)?;
        duration_in(
            cx,
            &format!("{p}.start"),
            a.start,
            Duration(0),
            MAX_DURATION,
        )?;
        duration_in(cx, &format!("{p}.end"), a.end, Duration(0), MAX_DURATION)?;
        if a.end <= a.start {
            return Err(cx.err(
                format!("{p}.end"),
                format!("expected a time after start ({}), got {}", a.start, a.end),
            ));
        }
        duration_in(
            cx,
            &format!("{p}.every"),
            a.every,
            Duration::from_millis(100),
            MAX_DURATION,
        )?;
        if a.circuits == 0 || a.circuits > MAX_ATTACK_CIRCUITS {
            return Err(cx.err(
                format!("{p}.circuits"),
                format!(
                    "expected 1 to {MAX_ATTACK_CIRCUITS} circuits per burst, got {}",
                    a.circuits
                ),
            ));
        }
    }
    Ok(())
}

fn report(cx: &Ctx, s: &Scenario) -> Check {
    for (i, r) in s.report.relays.iter().enumerate() {
        name(cx, &format!("report.relays[{i}]"), r, false)?;
    }
    Ok(())
}

/// The host name of attack `i`: its own name, or `attacker` (numbered when several attacks
/// leave their names out).
pub(crate) fn attacker_name(s: &Scenario, i: usize) -> String {
    match &s.attacks[i].name {
        Some(n) => n.clone(),
        None if s.attacks.len() == 1 => "attacker".into(),
        None => format!("attacker{}", i + 1),
    }
}

/// A name as it may appear in a message: long ones are cut, so that a hostile name of a
/// megabyte does not become a megabyte of error.
pub(crate) fn shown(n: &str) -> String {
    const KEEP: usize = 40;
    if n.chars().count() <= KEEP {
        format!("{n:?}")
    } else {
        let head: String = n.chars().take(KEEP).collect();
        format!("{head:?}… ({} characters)", n.chars().count())
    }
}

fn plain_name_ok(n: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.';
    !n.is_empty() && n.len() <= MAX_NAME_LEN && n != "." && n != ".." && n.chars().all(ok_char)
}

/// Names end up in host names, file names, folder names and result tables, so they stay plain
/// file names: `name: ..` would otherwise make the default output folder the working directory.
fn name(cx: &Ctx, field: &str, n: &str, nickname: bool) -> Check {
    if nickname {
        if n.is_empty() || n.len() > 19 || !n.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(cx.err(
                field,
                format!(
                    "expected a Tor nickname: 1 to 19 letters and digits, got {}",
                    shown(n)
                ),
            ));
        }
        return Ok(());
    }
    if !plain_name_ok(n) {
        return Err(cx.err(
            field,
            format!(
                "expected a name of letters, digits, '-', '_' or '.', 1 to {MAX_NAME_LEN} \
                 characters and not \".\" or \"..\" (it names files and folders), got {}",
                shown(n)
            ),
        ));
    }
    Ok(())
}

/// The name a scenario gets from its file when it has none: the file stem reduced to the
/// characters [`name`] allows, so that every file name yields a valid name.
pub(crate) fn default_name(stem: &str) -> String {
    let plain: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NAME_LEN)
        .collect();
    if plain_name_ok(&plain) {
        plain
    } else {
        "scenario".into()
    }
}

/// `d` within `[min, max]`, or an error saying so.
fn duration_in(cx: &Ctx, field: &str, d: Duration, min: Duration, max: Duration) -> Check {
    if d < min || d > max {
        return Err(cx.err(
            field,
            format!("expected a duration from {min} to {max}, got {d}"),
        ));
    }
    Ok(())
}

fn run(cx: &Ctx, r: &RunSection) -> Check {
    if r.stop_time.0 == 0 {
        return Err(cx.err("run.stop_time", "expected a positive duration, got 0s"));
    }
    if r.stop_time > MAX_STOP_TIME {
        return Err(cx.err(
            "run.stop_time",
            format!(
                "expected at most {MAX_STOP_TIME} (30 days of simulated time), got {}",
                r.stop_time
            ),
        ));
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
    if let Some(t) = r.threads {
        if t == 0 || t > MAX_THREADS {
            return Err(cx.err(
                "run.threads",
                format!("expected at least 1 thread and at most {MAX_THREADS}, got {t}"),
            ));
        }
    }
    Ok(())
}

/// A host's or relay's link: between [`MIN_LINK_RATE`] and [`MAX_LINK_RATE`].
fn link_rate(cx: &Ctx, field: String, r: Option<Rate>) -> Check {
    let Some(r) = r else { return Ok(()) };
    if r < MIN_LINK_RATE || r > MAX_LINK_RATE {
        return Err(cx.err(
            field,
            format!(
                "expected a rate from {MIN_LINK_RATE} (below it a single packet takes \
                 seconds to send) to {MAX_LINK_RATE}, got {r}"
            ),
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
        duration_in(
            cx,
            "network.builtin.latency",
            b.latency,
            MIN_LATENCY,
            MAX_LATENCY,
        )?;
        if !(b.loss >= 0.0 && b.loss < 1.0) {
            return Err(cx.err(
                "network.builtin.loss",
                format!(
                    "expected a probability between 0 and 1, below 1 (a switch that loses \
                     every packet carries nothing), got {}",
                    format_real(b.loss)
                ),
            ));
        }
        link_rate(cx, "network.builtin.bandwidth".into(), Some(b.bandwidth))?;
    } else {
        if n.builtin.is_some() {
            return Err(cx.err(
                "network.builtin",
                format!(
                    "only allowed with `graph: builtin` (graph is {}); remove it or set graph: builtin",
                    shown(&n.graph)
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
    if n.lookahead_floor >= s.run.stop_time {
        return Err(cx.err(
            "network.lookahead_floor",
            format!(
                "lookahead_floor ({}) must be shorter than stop_time ({}): the simulation \
                 advances in rounds at least this long, so the whole run would be one round",
                n.lookahead_floor, s.run.stop_time
            ),
        ));
    }
    if n.lookahead_floor > MAX_LOOKAHEAD_FLOOR {
        return Err(cx.err(
            "network.lookahead_floor",
            format!(
                "expected at most {MAX_LOOKAHEAD_FLOOR} (0s: no floor); a floor above the \
                 network's latencies holds every packet until the end of its round, got {}",
                n.lookahead_floor
            ),
        ));
    }
    if !(n.edge_loss >= 0.0 && n.edge_loss < 1.0) {
        return Err(cx.err(
            "network.edge_loss",
            format!(
                "expected a probability between 0 and 1, below 1 (an edge that loses every \
                 packet carries nothing), got {}",
                format_real(n.edge_loss)
            ),
        ));
    }
    impairments(cx, n)?;
    if n.down_queue.0 == 0 || n.down_queue > MAX_DOWN_QUEUE {
        return Err(cx.err(
            "network.down_queue",
            format!(
                "expected a positive duration of at most {MAX_DOWN_QUEUE}, got {}",
                n.down_queue
            ),
        ));
    }
    Ok(())
}

/// The shape of `network.impairments`; which hosts the names stand for is settled once the
/// relays exist (`resolve`), since sampled relays are named only then.
fn impairments(cx: &Ctx, n: &NetworkSection) -> Check {
    if n.impairments.len() > MAX_IMPAIRMENTS {
        return Err(cx.err(
            "network.impairments",
            format!(
                "expected at most {MAX_IMPAIRMENTS} impairments, got {}",
                n.impairments.len()
            ),
        ));
    }
    for (i, imp) in n.impairments.iter().enumerate() {
        let p = format!("network.impairments[{i}]");
        if imp.between.len() != 2 {
            return Err(cx.err(
                format!("{p}.between"),
                format!(
                    "expected two names, [A, B] (a relay, a server or client group, or \
                     authorities), got {}",
                    imp.between.len()
                ),
            ));
        }
        for (k, side) in imp.between.iter().enumerate() {
            impairment_target(side).map_err(|m| cx.err(format!("{p}.between[{k}]"), m))?;
        }
        if !(imp.loss >= 0.0 && imp.loss < 1.0) {
            return Err(cx.err(
                format!("{p}.loss"),
                format!(
                    "expected a probability between 0 and 1, below 1 (a link that loses every \
                     packet carries nothing), got {}",
                    format_real(imp.loss)
                ),
            ));
        }
    }
    Ok(())
}

/// What a name in `network.impairments[i].between` may stand for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TargetKind {
    Relay,
    Servers,
    Clients,
    Authorities,
}

/// Splits an impairment's side into the kind its prefix asks for (`None`: any kind) and the
/// name, or says what was expected.
pub(crate) fn impairment_target(side: &str) -> Result<(Option<TargetKind>, &str), String> {
    let (kind, name) = match side.split_once(':') {
        None if side == "authorities" => (Some(TargetKind::Authorities), side),
        None => (None, side),
        Some(("relay", n)) => (Some(TargetKind::Relay), n),
        Some(("servers", n)) => (Some(TargetKind::Servers), n),
        Some(("clients", n)) => (Some(TargetKind::Clients), n),
        Some(_) => {
            return Err(format!(
                "expected a relay's nickname, a server or client group's name or \
                 `authorities`, optionally after relay:, servers: or clients:, got {}",
                shown(side)
            ))
        }
    };
    if !plain_name_ok(name) {
        return Err(format!(
            "expected a relay's nickname, a server or client group's name or `authorities`, \
             got {}",
            shown(side)
        ));
    }
    Ok((kind, name))
}

/// Every group's host count and the total, against [`MAX_HOSTS`], before any check or step that
/// works per host (numbered relay names, placement) can allocate for them.
fn hosts(cx: &Ctx, s: &Scenario) -> Check {
    let mut groups: Vec<(String, u64)> = vec![("authorities".into(), s.authorities.0.count.into())];
    match &s.relays {
        RelaysSection::Generate(g) => {
            for (key, n) in [
                ("guard", g.guard),
                ("exit", g.exit),
                ("guard_exit", g.guard_exit),
                ("middle", g.middle),
            ] {
                groups.push((format!("relays.generate.{key}"), n.into()));
            }
        }
        RelaysSection::List(list) => {
            for (i, r) in list.iter().enumerate() {
                groups.push((format!("relays.list[{i}].count"), r.count.into()));
            }
        }
        RelaysSection::Sample(sm) => groups.push(("relays.sample.count".into(), sm.count.into())),
    }
    for (i, g) in s.servers.iter().enumerate() {
        groups.push((format!("servers[{i}].count"), g.count.into()));
    }
    for (i, g) in s.clients.iter().enumerate() {
        groups.push((format!("clients[{i}].count"), g.count.into()));
    }
    for (i, g) in s.processes.iter().enumerate() {
        groups.push((format!("processes[{i}].count"), g.count.into()));
    }
    let mut total: u64 = 0;
    for (field, n) in groups {
        if n > MAX_HOSTS {
            return Err(cx.err(
                field,
                format!(
                    "expected at most {MAX_HOSTS} hosts (the limit for a whole scenario; a \
                     full Tor network has about 7,000 relays, and a client host may stand for \
                     many users), got {n}"
                ),
            ));
        }
        total = total.saturating_add(n);
        if total > MAX_HOSTS {
            return Err(cx.err(
                field,
                format!(
                    "this group brings the scenario to {total} hosts, more than the \
                     {MAX_HOSTS} allowed in all (authorities, relays, servers and clients \
                     together); a client host may stand for many users"
                ),
            ));
        }
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
            format!(
                "unknown country {}: expected a two-letter ISO 3166 code such as \"US\"",
                shown(c)
            ),
        ));
    }
    if s.network.graph == "builtin" {
        return Err(cx.err(
            field,
            format!(
                "unknown country {c:?}: the builtin single-switch graph has no countries \
                 (use graph: internet-geo, internet-2018 or a graph with country codes)"
            ),
        ));
    }
    Ok(())
}

fn link(cx: &Ctx, s: &Scenario, prefix: &str, l: &Link) -> Check {
    link_rate(cx, format!("{prefix}.bandwidth"), l.bandwidth)?;
    link_rate(cx, format!("{prefix}.bandwidth_up"), l.bandwidth_up)?;
    link_rate(cx, format!("{prefix}.bandwidth_down"), l.bandwidth_down)?;
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
        if !(1.0..=MAX_BURST_FACTOR).contains(&f) {
            return Err(cx.err(
                field,
                format!(
                    "expected a factor of at least 1.0 (burst below rate is meaningless) and \
                     at most {MAX_BURST_FACTOR}, got {}",
                    format_real(f)
                ),
            ));
        }
    }
    Ok(())
}

/// A relay's configured rate or burst: Tor's own range.
fn relay_rate(cx: &Ctx, field: String, r: Rate) -> Check {
    if r.bytes_per_sec() < MIN_RELAY_RATE_BYTES {
        return Err(cx.err(
            field,
            format!("expected at least 75 KiB/s (Tor refuses slower relays), got {r}"),
        ));
    }
    if r.bytes_per_sec() > MAX_RELAY_RATE_BYTES {
        return Err(cx.err(
            field,
            format!("expected at most 2 GiB/s (Tor's largest relay rate), got {r}"),
        ));
    }
    Ok(())
}

fn policy(
    cx: &Ctx,
    field: String,
    p: &Option<String>,
) -> Result<Option<ExitPolicy>, ScenarioError> {
    let Some(p) = p else { return Ok(None) };
    ExitPolicy::parse(p).map(Some).map_err(|m| {
        cx.err(
            field,
            onionlab_data::clip(format!(
                "expected an exit policy summary such as \"accept 80,443\" or \"reject 25\": {m}"
            )),
        )
    })
}

fn relays(cx: &Ctx, s: &Scenario) -> Check {
    let need_paths = !s.clients.is_empty();
    match &s.relays {
        RelaysSection::Generate(g) => {
            let total = u64::from(g.guard)
                + u64::from(g.exit)
                + u64::from(g.guard_exit)
                + u64::from(g.middle);
            if total == 0 && (need_paths || s.processes.is_empty()) {
                return Err(cx.err(
                    "relays.generate",
                    "expected at least one relay (guard, exit, guard_exit or middle); only a \
                     scenario of managed processes alone (`processes`, no clients) may have none",
                ));
            }
            if need_paths && g.exit == 0 && g.guard_exit == 0 {
                return Err(cx.err(
                    "relays.generate.exit",
                    "expected at least one exit or guard_exit relay: clients exist and \
                     without an exit no circuit can reach a server",
                ));
            }
            if need_paths && g.guard == 0 && g.guard_exit == 0 {
                return Err(cx.err(
                    "relays.generate.guard",
                    "expected at least one guard or guard_exit relay: clients exist and every \
                     circuit starts at a relay with the Guard flag",
                ));
            }
            if need_paths && total < MIN_RELAYS_FOR_PATHS {
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
                            format!(
                                "expected a spread between 0 and 5, got {}",
                                format_real(l.sigma)
                            ),
                        ));
                    }
                }
                BandwidthModel::Fixed(r) => {
                    relay_rate(cx, "relays.generate.bandwidth.fixed".into(), *r)?
                }
            }
            burst_factor(cx, "relays.generate.burst_factor", g.burst_factor)?;
            link_rate(cx, "relays.generate.link".into(), g.link)?;
            country(cx, s, "relays.generate.country".into(), &g.country)?;
            let p = policy(cx, "relays.generate.exit_policy".into(), &g.exit_policy)?;
            if let Some(p) = p {
                if need_paths && !p.allows_port(MODEL_PORT) {
                    return Err(cx.err(
                        "relays.generate.exit_policy",
                        format!(
                            "{} rejects port {MODEL_PORT}, the only port the model's clients \
                             use, so no exit could carry their traffic; accept port {MODEL_PORT}",
                            shown(g.exit_policy.as_deref().unwrap_or_default())
                        ),
                    ));
                }
            }
        }
        RelaysSection::List(list) => {
            if list.is_empty() {
                return Err(cx.err("relays.list", "expected at least one relay"));
            }
            let mut names = HashSet::new();
            let mut addresses = HashMap::new();
            let mut total = 0u64;
            let mut exits = 0u64;
            let mut guards = 0u64;
            for (i, r) in list.iter().enumerate() {
                let p = format!("relays.list[{i}]");
                name(cx, &format!("{p}.name"), &r.name, true)?;
                if r.count == 0 {
                    return Err(cx.err(format!("{p}.count"), "expected at least 1"));
                }
                if r.count > 1 && r.name.len() + r.count.to_string().len() > 19 {
                    return Err(cx.err(
                        format!("{p}.name"),
                        format!(
                            "with count {} the numbered nicknames exceed Tor's 19 characters",
                            r.count
                        ),
                    ));
                }
                for k in 1..=r.count {
                    let n = if r.count == 1 {
                        r.name.clone()
                    } else {
                        format!("{}{k}", r.name)
                    };
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
                    relay_rate(cx, format!("{p}.bandwidth_burst"), b)?;
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
                        relay_rate(cx, format!("{p}.relay_bandwidth_burst"), rb)?;
                    }
                } else if r.relay_bandwidth_burst.is_some() {
                    return Err(cx.err(
                        format!("{p}.relay_bandwidth_burst"),
                        "only meaningful together with relay_bandwidth_rate",
                    ));
                }
                if let Some(limit) = r.conn_limit {
                    if !(1..=1 << 20).contains(&limit) {
                        return Err(cx.err(
                            format!("{p}.conn_limit"),
                            format!(
                                "expected a whole number of sockets from 1 to 1048576 (tor's \
                                 ConnLimit, bounded by the process file limit), got {limit}"
                            ),
                        ));
                    }
                }
                if let Some(w) = r.consensus_weight {
                    if w == 0 || w > MAX_CONSENSUS_WEIGHT {
                        return Err(cx.err(
                            format!("{p}.consensus_weight"),
                            format!(
                                "expected a weight from 1 (a zero-weight relay is never chosen) \
                                 to {MAX_CONSENSUS_WEIGHT} (tor keeps weights in 32 bits), got {w}"
                            ),
                        ));
                    }
                }
                let pol = policy(cx, format!("{p}.exit_policy"), &r.exit_policy)?;
                if let Some(f) = &r.family {
                    name(cx, &format!("{p}.family"), f, false)?;
                }
                country(cx, s, format!("{p}.country"), &r.country)?;
                link_rate(cx, format!("{p}.link"), r.link)?;
                link_rate(cx, format!("{p}.link_up"), r.link_up)?;
                link_rate(cx, format!("{p}.link_down"), r.link_down)?;
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
                // Clients only use Fast relays, and only ask exits for the model's port.
                let fast = r.flags.contains(&FlagName::Fast);
                let serves_port = pol.is_none_or(|p| p.allows_port(MODEL_PORT));
                if fast && r.flags.contains(&FlagName::Exit) && serves_port {
                    exits += u64::from(r.count);
                }
                if fast && r.flags.contains(&FlagName::Guard) {
                    guards += u64::from(r.count);
                }
            }
            if need_paths && exits == 0 {
                return Err(cx.err(
                    "relays.list",
                    format!(
                        "expected at least one relay with the exit flag, the fast flag and a \
                         policy that accepts port {MODEL_PORT} (the only port the model's \
                         clients use): clients exist and without such an exit no circuit can \
                         reach a server"
                    ),
                ));
            }
            if need_paths && guards == 0 {
                return Err(cx.err(
                    "relays.list",
                    "expected at least one relay with the guard flag and the fast flag: \
                     clients exist and every circuit starts at a guard",
                ));
            }
            if need_paths && total < MIN_RELAYS_FOR_PATHS {
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
            let min = if need_paths { MIN_RELAYS_FOR_PATHS } else { 1 };
            if u64::from(sm.count) < min {
                return Err(cx.err(
                    "relays.sample.count",
                    format!("expected at least {min} relays, got {}", sm.count),
                ));
            }
            if let Some(r) = sm.bandwidth_rate {
                relay_rate(cx, "relays.sample.bandwidth_rate".into(), r)?;
            }
            if let Some(per) = sm.rate_per_weight {
                let field = "relays.sample.rate_per_weight";
                if sm.bandwidth_rate.is_some() {
                    return Err(cx.err(
                        field,
                        "expected either bandwidth_rate (one rate for every relay) or \
                         rate_per_weight (rates from the weights), not both"
                            .to_string(),
                    ));
                }
                if !RATE_PER_WEIGHT_RANGE.contains(&per) {
                    return Err(cx.err(
                        field,
                        format!(
                            "expected bytes per second per unit of consensus weight, from 1 to \
                             1000000 (1000 reads the weight as kB/s), got {}",
                            format_real(per)
                        ),
                    ));
                }
            }
            if let Some(spread) = sm.rate_spread {
                let field = "relays.sample.rate_spread";
                if sm.bandwidth_rate.is_some() {
                    return Err(cx.err(
                        field,
                        "expected either bandwidth_rate (one rate for every relay) or \
                         rate_spread (rates spread around the weights), not both",
                    ));
                }
                if !RATE_SPREAD_RANGE.contains(&spread) {
                    return Err(cx.err(
                        field,
                        format!(
                            "expected the standard deviation of the log of each relay's rate \
                             factor, from 0 to 2, got {}",
                            format_real(spread)
                        ),
                    ));
                }
            }
            burst_factor(cx, "relays.sample.burst_factor", sm.burst_factor)?;
            link_rate(cx, "relays.sample.link".into(), sm.link)?;
            if sm.limit == Some(RelayLimit::Link) {
                // The rate is the link under `limit: link`; a second link or a burst for
                // buckets that never bind would be set and then silently ignored.
                for (key, set) in [
                    ("link", sm.link.is_some()),
                    ("burst_factor", sm.burst_factor.is_some()),
                ] {
                    if set {
                        return Err(cx.err(
                            format!("relays.sample.{key}"),
                            format!(
                                "expected no {key} with `limit: link`, where each relay's \
                                 link runs at its rate and tor's token buckets at tor's \
                                 default; use `limit: bucket` to set it"
                            ),
                        ));
                    }
                }
            }
            country(cx, s, "relays.sample.country".into(), &sm.country)?;
            sample_placement(cx, s, sm)?;
        }
    }
    Ok(())
}

/// `relays.sample.place` and `geoip`: the table is read only to place relays by address, and
/// that placement needs a graph with countries and no single `country`.
fn sample_placement(cx: &Ctx, s: &Scenario, sm: &SampleRelays) -> Check {
    let by_address = sm.place == Some(RelayPlacement::Address);
    if by_address && sm.country.is_some() {
        return Err(cx.err(
            "relays.sample.place",
            "`place: address` puts each relay in the country its address lies in, and              `country` puts every relay in one country: expected one of them, not both",
        ));
    }
    if by_address && s.network.graph == "builtin" {
        return Err(cx.err(
            "relays.sample.place",
            "`place: address` needs a graph with countries (graph: internet-geo, internet-2018, or a \
             graph with country codes); the builtin single-switch graph has none",
        ));
    }
    if let Some(g) = &sm.geoip {
        if !by_address {
            return Err(cx.err(
                "relays.sample.geoip",
                "the country table is read only to place relays by address: expected                  `place: address` beside it",
            ));
        }
        data::resolve_file(g, cx.source, data::GEOIP_ALIASES).map_err(|m| {
            cx.err(
                "relays.sample.geoip",
                format!("expected an IPv4 country table in tor's geoip format: {m}"),
            )
        })?;
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
        if g.port != MODEL_PORT {
            return Err(cx.err(
                format!("{p}.port"),
                format!(
                    "expected {MODEL_PORT}: the model's web servers and exits serve port \
                     {MODEL_PORT} only, got {}",
                    g.port
                ),
            ));
        }
        link(cx, s, &p, &g.link())?;
    }
    Ok(())
}

/// The most hosts one `processes` group may have: each is a real process on this machine.
const MAX_PROCESSES: u32 = 10_000;
/// The range of `processes[].stall_limit`, in wall-clock time.
const STALL_LIMIT_RANGE: (Duration, Duration) =
    (Duration(1_000_000_000), Duration(3600 * 1_000_000_000));
/// Longest argument or environment value a process may be given.
const MAX_ARG_BYTES: usize = 4096;

/// The program a `processes` entry names, as a path: relative to the scenario file's folder
/// unless absolute.
pub fn process_program(s: &Scenario, g: &ProcessGroup) -> std::path::PathBuf {
    let path = Path::new(&g.path);
    if path.is_absolute() {
        return path.to_path_buf();
    }
    s.source
        .parent()
        .map_or_else(|| path.to_path_buf(), |dir| dir.join(path))
}

fn processes(cx: &Ctx, s: &Scenario) -> Check {
    let mut names = HashSet::new();
    for (i, g) in s.processes.iter().enumerate() {
        let p = format!("processes[{i}]");
        name(cx, &format!("{p}.name"), &g.name, false)?;
        if !names.insert(g.name.as_str()) {
            return Err(cx.err(
                format!("{p}.name"),
                format!("process group {:?} is defined twice", g.name),
            ));
        }
        if !(1..=MAX_PROCESSES).contains(&g.count) {
            return Err(cx.err(
                format!("{p}.count"),
                format!(
                    "expected 1 to {MAX_PROCESSES} processes (each is a real process on this                      machine), got {}",
                    g.count
                ),
            ));
        }
        if g.path.is_empty() {
            return Err(cx.err(format!("{p}.path"), "expected the program's path, got \"\""));
        }
        onionlab_process::check_binary(&process_program(s, g))
            .map_err(|e| cx.err(format!("{p}.path"), e))?;
        for (k, a) in g.args.iter().enumerate() {
            if a.len() > MAX_ARG_BYTES || a.contains('\0') {
                return Err(cx.err(
                    format!("{p}.args[{k}]"),
                    format!(
                        "expected at most {MAX_ARG_BYTES} bytes and no NUL, got {}",
                        shown(a)
                    ),
                ));
            }
        }
        for (k, v) in &g.env {
            let plain = !k.is_empty() && !k.contains('=') && !k.contains('\0');
            if !plain || v.len() > MAX_ARG_BYTES || v.contains('\0') {
                return Err(cx.err(
                    format!("{p}.env.{k}"),
                    format!(
                        "expected a variable name without '=' and a value of at most                          {MAX_ARG_BYTES} bytes without NUL, got {}={}",
                        shown(k),
                        shown(v)
                    ),
                ));
            }
            if k == "LD_PRELOAD" || k.starts_with("ONIONLAB_") {
                return Err(cx.err(
                    format!("{p}.env.{k}"),
                    format!("{k} is onionlab's own (it loads the shim); leave it out"),
                ));
            }
        }
        if g.start >= s.run.stop_time {
            return Err(cx.err(
                format!("{p}.start"),
                format!(
                    "expected a start before run.stop_time ({}), got {}",
                    s.run.stop_time, g.start
                ),
            ));
        }
        let (lo, hi) = STALL_LIMIT_RANGE;
        duration_in(cx, &format!("{p}.stall_limit"), g.stall_limit, lo, hi)?;
        link(cx, s, &p, &g.link())?;
    }
    Ok(())
}

fn size(cx: &Ctx, field: String, size: Size) -> Check {
    if size.0 == 0 {
        return Err(cx.err(field, "expected a positive size, got 0"));
    }
    if size > MAX_SIZE {
        return Err(cx.err(
            field,
            format!(
                "expected at most {} bytes (the model's requests carry the size in 32 bits), \
                 got {size}",
                MAX_SIZE.0
            ),
        ));
    }
    Ok(())
}

fn timeout(cx: &Ctx, field: String, d: Duration) -> Check {
    if d.0 == 0 {
        return Err(cx.err(field, "expected a positive duration, got 0s"));
    }
    duration_in(cx, &field, d, MIN_TIMEOUT, MAX_DURATION)
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
    if r.max > MAX_DURATION {
        return Err(cx.err(
            field,
            format!(
                "expected durations of at most {MAX_DURATION} (the longest run), got {}",
                r.max
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
        match &g.workload {
            Workload::Web(web) => {
                size(cx, format!("{w}.web.size"), web.size)?;
                range(cx, format!("{w}.web.pause"), web.pause)?;
                timeout(cx, format!("{w}.web.timeout"), web.timeout)?;
            }
            Workload::Bulk(b) => {
                size(cx, format!("{w}.bulk.size"), b.size)?;
                range(cx, format!("{w}.bulk.pause"), b.pause)?;
                timeout(cx, format!("{w}.bulk.timeout"), b.timeout)?;
            }
            Workload::Upload(u) => {
                size(cx, format!("{w}.upload.size"), u.size)?;
                timeout(cx, format!("{w}.upload.timeout"), u.timeout)?;
            }
            Workload::Markov(m) => {
                if !(1..=onionlab_traffic::MAX_USERS).contains(&m.users) {
                    return Err(cx.err(
                        format!("{w}.markov.users"),
                        format!(
                            "expected 1 to {} users per client host, found {}",
                            onionlab_traffic::MAX_USERS,
                            m.users
                        ),
                    ));
                }
                timeout(cx, format!("{w}.markov.timeout"), m.timeout)?;
            }
            Workload::Perf(pf) => {
                size(cx, format!("{w}.perf.size"), pf.size)?;
                duration_in(
                    cx,
                    &format!("{w}.perf.interval"),
                    pf.interval,
                    MIN_PERF_INTERVAL,
                    MAX_DURATION,
                )?;
                if let Some(t) = pf.timeout {
                    timeout(cx, format!("{w}.perf.timeout"), t)?;
                }
            }
        }
        if let Some(d) = g.max_circuit_dirtiness {
            // tor's own range for MaxCircuitDirtiness.
            duration_in(
                cx,
                &format!("{p}.max_circuit_dirtiness"),
                d,
                Duration::from_secs(10),
                MAX_DURATION,
            )?;
        }
        match &g.servers {
            Some(target) if !s.servers.iter().any(|sg| &sg.name == target) => {
                let defined: Vec<&str> = s.servers.iter().map(|sg| sg.name.as_str()).collect();
                return Err(cx.err(
                    format!("{p}.servers"),
                    format!(
                        "no server group named {} (defined: {})",
                        shown(target),
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
            None if s.servers.iter().all(|sg| sg.dedicated) => {
                return Err(cx.err(
                    format!("{p}.servers"),
                    "every server group is dedicated (serves only the clients that name it): \
                     expected the name of one here, or a server group without `dedicated`",
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

/// Legal but suspicious settings of a scenario that passed [`check`]: each is probably a
/// mistake, but a deliberate experiment may want it.
pub(crate) fn warnings(s: &Scenario) -> Vec<ScenarioWarning> {
    let mut out = Vec::new();
    let mut warn = |field: String, message: String| {
        out.push(ScenarioWarning {
            file: s.source.display().to_string(),
            field,
            message,
        })
    };
    if s.network.edge_loss > WARN_LOSS {
        warn(
            "network.edge_loss".into(),
            format!(
                "a loss of {} on every edge makes most connections fail (TCP backs off \
                 exponentially); real paths lose well under 1%",
                format_real(s.network.edge_loss)
            ),
        );
    }
    if let Some(b) = &s.network.builtin {
        if b.loss > WARN_LOSS {
            warn(
                "network.builtin.loss".into(),
                format!(
                    "a loss of {} on every path makes most connections fail (TCP backs off \
                     exponentially); real paths lose well under 1%",
                    format_real(b.loss)
                ),
            );
        }
    }
    let latency = match &s.network.builtin {
        Some(b) if s.network.graph == "builtin" => Some(b.latency),
        None if s.network.graph == "builtin" => Some(BuiltinNetwork::default().latency),
        _ => None,
    };
    if let Some(latency) = latency {
        if s.network.lookahead_floor > latency {
            warn(
                "network.lookahead_floor".into(),
                format!(
                    "{} is above the switch's latency ({latency}): packets arrive up to {} \
                     late, at the end of their round",
                    s.network.lookahead_floor,
                    Duration(s.network.lookahead_floor.0 - latency.0)
                ),
            );
        }
    }
    for (i, g) in s.servers.iter().enumerate() {
        if g.dedicated
            && !s
                .clients
                .iter()
                .any(|c| c.servers.as_ref() == Some(&g.name))
        {
            warn(
                format!("servers[{i}].dedicated"),
                format!(
                    "no client group names {} in its `servers`, so its dedicated servers serve \
                     nobody",
                    shown(&g.name)
                ),
            );
        }
    }
    if let RelaysSection::List(list) = &s.relays {
        for (i, r) in list.iter().enumerate() {
            if !r.flags.contains(&FlagName::Fast) {
                warn(
                    format!("relays.list[{i}].flags"),
                    "without the fast flag these relays are never chosen for a circuit \
                     (clients use only Fast relays)"
                        .into(),
                );
            }
            let rejects_port = r
                .exit_policy
                .as_deref()
                .and_then(|p| ExitPolicy::parse(p).ok())
                .is_some_and(|p| !p.allows_port(MODEL_PORT));
            if r.flags.contains(&FlagName::Exit) && rejects_port && !s.clients.is_empty() {
                warn(
                    format!("relays.list[{i}].exit_policy"),
                    format!(
                        "rejects port {MODEL_PORT}, the only port the model's clients use: \
                         these relays are never used as exits"
                    ),
                );
            }
        }
    }
    for (i, g) in s.clients.iter().enumerate() {
        if g.start.max >= s.run.stop_time {
            warn(
                format!("clients[{i}].start"),
                format!(
                    "the range reaches past stop_time ({}): clients drawn after it never start",
                    s.run.stop_time
                ),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_names_are_always_valid() {
        assert_eq!(default_name("toy"), "toy");
        assert_eq!(default_name("my scenario (2)"), "my_scenario__2_");
        assert_eq!(default_name(".."), "scenario");
        assert_eq!(default_name("."), "scenario");
        assert_eq!(default_name(""), "scenario");
        assert_eq!(default_name(&"x".repeat(300)).len(), MAX_NAME_LEN);
        for stem in ["..", "a/b", "ü", "...", &"é".repeat(200)] {
            assert!(plain_name_ok(&default_name(stem)), "{stem:?}");
        }
    }

    #[test]
    fn plain_names() {
        for ok in ["toy", "a.b-c_d", "...", &"x".repeat(MAX_NAME_LEN)] {
            assert!(plain_name_ok(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "a b",
            "ü",
            &"x".repeat(MAX_NAME_LEN + 1),
        ] {
            assert!(!plain_name_ok(bad), "{bad}");
        }
    }

    #[test]
    fn long_names_are_cut_in_messages() {
        let m = shown(&"y".repeat(1_000_000));
        assert!(m.len() < 100, "{m}");
        assert!(m.contains("1000000 characters"));
        assert_eq!(shown("web"), "\"web\"");
    }
}
