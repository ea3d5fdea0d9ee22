//! Relays and the network consensus: parsing both flavours, building and sampling networks.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;

use onionlab_data::Input;
use rand::{Rng, RngExt};

use crate::error::DirError;
use crate::flags::RelayFlags;
use crate::policy::ExitPolicy;
use crate::weights::{BandwidthWeights, WEIGHT_SCALE};

/// One relay as the consensus lists it, plus the scenario's family assignment.
#[derive(Clone, Debug, PartialEq)]
pub struct Relay {
    /// Operator-chosen name from the `r` line (1-19 letters or digits); not unique.
    pub nickname: String,
    /// RSA identity fingerprint as 40 upper-case hex digits (the form Tor Metrics and torrc
    /// use), decoded from the base64 identity on the `r` line. Generated relays may use any
    /// unique string.
    pub fingerprint: String,
    /// IPv4 address the relay accepts channels on, from the `r` line.
    pub address: Ipv4Addr,
    /// TCP port for OR (relay-to-relay and client) channels, from the `r` line; never 0.
    pub or_port: u16,
    /// Status flags voted by the authorities, from the `s` line.
    pub flags: RelayFlags,
    /// Consensus weight from `w Bandwidth=`, in the units published (nominally kB/s; for
    /// measured relays it is a bandwidth-authority estimate scaled relative to other relays,
    /// not a capacity).
    pub bandwidth: u64,
    /// The weight is the relay's self-report, not a measurement (`Unmeasured=1`).
    pub unmeasured: bool,
    /// Exit policy summary from the `p` line; `reject_all` when there is none (always the case
    /// in the microdesc flavour, see [`Consensus::assume_exit_policies`]).
    pub exit_policy: ExitPolicy,
    /// Relays with the same `Some(id)` are one family and never share a circuit. Consensus
    /// documents do not carry families (they live in descriptors), so parsed relays get `None`
    /// and scenarios assign ids.
    pub family: Option<u32>,
}

/// Which of the four bandwidth classes of dir-spec 3.8.3 a relay is in.
///
/// This is also the stratum used by [`Consensus::sample`], because the position weights are
/// computed from these four totals and a sample that keeps them in proportion keeps the
/// weights meaningful.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RelayClass {
    /// Guard flag, not a usable exit.
    GuardOnly,
    /// Exit flag (not BadExit), no Guard flag.
    ExitOnly,
    /// Both Guard and Exit (not BadExit).
    GuardExit,
    /// Neither.
    Middle,
}

impl RelayClass {
    /// Every class, in declaration order; per-class tables are indexed in this order.
    pub const ALL: [RelayClass; 4] = [
        RelayClass::GuardOnly,
        RelayClass::ExitOnly,
        RelayClass::GuardExit,
        RelayClass::Middle,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

impl Relay {
    /// The bandwidth class this relay's flags put it in (a BadExit relay counts as a non-exit).
    pub fn class(&self) -> RelayClass {
        let guard = self.flags.contains(RelayFlags::GUARD);
        let exit = self.flags.is_weighted_exit();
        match (guard, exit) {
            (true, true) => RelayClass::GuardExit,
            (true, false) => RelayClass::GuardOnly,
            (false, true) => RelayClass::ExitOnly,
            (false, false) => RelayClass::Middle,
        }
    }

    /// The /16 prefix, for the rule that a path never uses two relays from one /16.
    pub fn subnet16(&self) -> [u8; 2] {
        let o = self.address.octets();
        [o[0], o[1]]
    }

    /// Whether two distinct relays may not appear in the same circuit: same /16 or same family.
    /// (Identity is compared by index by the callers, since generated relays need not have
    /// unique fingerprints.)
    pub fn conflicts_with(&self, other: &Relay) -> bool {
        self.subnet16() == other.subnet16()
            || matches!((self.family, other.family), (Some(a), Some(b)) if a == b)
    }
}

/// The two consensus flavours Tor publishes, and networks made by the simulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// `ns` flavour: `r` lines carry a descriptor digest and `p` lines carry exit policies.
    Full,
    /// `microdesc` flavour: no descriptor digest on `r`, an `m` line instead, no `p` lines.
    Microdesc,
    /// Built by [`Consensus::from_relays`]; not from a document.
    Generated,
}

/// A network directory: the relays a client may build circuits through, and the weights it
/// uses to choose among them.
#[derive(Clone, Debug)]
pub struct Consensus {
    /// The `valid-after` time as written (`YYYY-MM-DD HH:MM:SS`), kept as text because the
    /// simulator only reports it.
    pub valid_after: Option<String>,
    /// Which document flavour this came from, or [`Flavour::Generated`].
    pub flavour: Flavour,
    /// Every relay in the order the document lists them; indices into this are relay ids.
    pub relays: Vec<Relay>,
    /// Published `bandwidth-weights`, or computed from the relays when the document has none.
    pub weights: BandwidthWeights,
    /// The `params` line; sorted map so iteration order never depends on hashing.
    pub params: BTreeMap<String, i64>,
}

/// A relay being read, with which per-relay lines have been seen, to reject duplicates and
/// missing mandatory lines.
struct Pending {
    relay: Relay,
    line: usize,
    seen_s: bool,
    seen_w: bool,
    seen_p: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Preamble,
    Routers,
    Footer,
}

impl Consensus {
    /// Parse a consensus document of either flavour.
    ///
    /// `source` names the document in errors. Lines with keywords this crate does not need are
    /// skipped, so newer documents still parse; anything it does read is checked, and the first
    /// problem is reported with its line. A document that ends before `directory-footer` is
    /// reported as truncated rather than accepted with missing relays.
    pub fn parse(text: &str, source: &str) -> Result<Consensus, DirError> {
        let mut flavour: Option<Flavour> = None;
        let mut valid_after = None;
        let mut params = BTreeMap::new();
        let mut weights: Option<BandwidthWeights> = None;
        let mut relays: Vec<Relay> = Vec::new();
        let mut pending: Option<Pending> = None;
        let mut section = Section::Preamble;
        let mut in_object: Option<usize> = None;

        for (i, raw) in text.lines().enumerate() {
            let lineno = i + 1;
            let line = raw.trim_end();
            if in_object.is_some() {
                if line.starts_with("-----END") {
                    in_object = None;
                }
                continue;
            }
            if line.starts_with("-----BEGIN") {
                in_object = Some(lineno);
                continue;
            }
            let (kw, rest) = match line.split_once([' ', '\t']) {
                Some((k, r)) => (k, r.trim()),
                None => (line, ""),
            };
            if kw.is_empty() {
                continue;
            }
            let err = |msg: String| DirError::at(source, lineno, msg);

            let Some(flav) = flavour else {
                if kw != "network-status-version" {
                    return Err(err(format!(
                        "expected 'network-status-version 3' as the first line, found '{kw}'"
                    )));
                }
                let mut words = rest.split_ascii_whitespace();
                if words.next() != Some("3") {
                    return Err(err(format!(
                        "expected network-status-version 3, found '{rest}'"
                    )));
                }
                flavour = Some(match words.next() {
                    None | Some("ns") => Flavour::Full,
                    Some("microdesc") => Flavour::Microdesc,
                    Some(other) => {
                        return Err(err(format!(
                            "unsupported consensus flavour '{other}' (expected ns or microdesc)"
                        )))
                    }
                });
                continue;
            };

            match kw {
                "valid-after" if section == Section::Preamble => {
                    valid_after = Some(rest.to_string());
                }
                "params" if section == Section::Preamble => {
                    params = parse_params(rest).map_err(err)?;
                }
                "r" => {
                    if section == Section::Footer {
                        return Err(err("'r' line after directory-footer".to_string()));
                    }
                    if let Some(p) = pending.take() {
                        relays.push(finish(p, source)?);
                    }
                    let relay = parse_r(rest, flav).map_err(err)?;
                    pending = Some(Pending {
                        relay,
                        line: lineno,
                        seen_s: false,
                        seen_w: false,
                        seen_p: false,
                    });
                    section = Section::Routers;
                }
                "s" | "w" | "p" | "m" | "v" | "pr" | "a" => {
                    let Some(p) = pending.as_mut().filter(|_| section == Section::Routers) else {
                        return Err(err(format!(
                            "'{kw}' line outside a router entry (expected an 'r' line first)"
                        )));
                    };
                    match kw {
                        "s" => {
                            if std::mem::replace(&mut p.seen_s, true) {
                                return Err(err("second 's' line for one relay".to_string()));
                            }
                            p.relay.flags = RelayFlags::parse(rest);
                        }
                        "w" => {
                            if std::mem::replace(&mut p.seen_w, true) {
                                return Err(err("second 'w' line for one relay".to_string()));
                            }
                            let (bw, unmeasured) = parse_w(rest).map_err(err)?;
                            p.relay.bandwidth = bw;
                            p.relay.unmeasured = unmeasured;
                        }
                        "p" => {
                            if std::mem::replace(&mut p.seen_p, true) {
                                return Err(err("second 'p' line for one relay".to_string()));
                            }
                            p.relay.exit_policy = ExitPolicy::parse(rest)
                                .map_err(|e| err(format!("bad exit policy 'p {rest}': {e}")))?;
                        }
                        // Descriptor digests, versions, protocols and IPv6 addresses do not
                        // affect the simulation.
                        _ => {}
                    }
                }
                "directory-footer" => {
                    if let Some(p) = pending.take() {
                        relays.push(finish(p, source)?);
                    }
                    section = Section::Footer;
                }
                "bandwidth-weights" => {
                    weights = Some(parse_weights(rest).map_err(err)?);
                }
                _ => {}
            }
        }

        if flavour.is_none() {
            return Err(DirError::whole(
                source,
                "empty document: expected 'network-status-version 3'",
            ));
        }
        if let Some(start) = in_object {
            return Err(DirError::whole(
                source,
                format!(
                    "unexpected end of file inside the object begun at line {start} (truncated?)"
                ),
            ));
        }
        if section != Section::Footer {
            let last = pending.as_ref().map(|p| p.line);
            return Err(DirError::whole(
                source,
                match last {
                    Some(l) => format!(
                        "unexpected end of file in the router entry begun at line {l}: expected 'directory-footer' (truncated?)"
                    ),
                    None => "unexpected end of file: expected router entries and 'directory-footer' (truncated?)".to_string(),
                },
            ));
        }
        let weights = weights.unwrap_or_else(|| BandwidthWeights::compute(&relays));
        Ok(Consensus {
            valid_after,
            flavour: flavour.unwrap_or(Flavour::Full),
            relays,
            weights,
            params,
        })
    }

    /// Read and parse a consensus file (xz-compressed when its name ends in `.xz`); errors
    /// name the path.
    pub fn load(path: &Path) -> Result<Consensus, DirError> {
        Consensus::read(&Input::File(path.to_path_buf()))
    }

    /// Read and parse a consensus from a file on disk or one shipped with onionlab.
    pub fn read(input: &Input) -> Result<Consensus, DirError> {
        let source = input.to_string();
        let bytes = input.read().map_err(|e| DirError::whole(&source, e))?;
        // Lossy because contact lines are free text that some operators write in Latin-1; the
        // fields this crate reads are ASCII, and a mangled byte there still fails validation.
        let text = String::from_utf8_lossy(&bytes);
        Consensus::parse(&text, &source)
    }

    /// A network from scenario-built relays, weighted as the authorities would weight it.
    pub fn from_relays(relays: Vec<Relay>) -> Consensus {
        let weights = BandwidthWeights::compute(&relays);
        Consensus {
            valid_after: None,
            flavour: Flavour::Generated,
            relays,
            weights,
            params: BTreeMap::new(),
        }
    }

    /// Relays a client may use: Running and Valid (with their indices into `relays`).
    pub fn usable(&self) -> impl Iterator<Item = (usize, &Relay)> + '_ {
        self.relays
            .iter()
            .enumerate()
            .filter(|(_, r)| r.flags.is_usable())
    }

    /// A `params` value, or `default` when the consensus does not set it.
    pub fn param(&self, name: &str, default: i64) -> i64 {
        self.params.get(name).copied().unwrap_or(default)
    }

    /// Give `policy` to every Exit-flagged relay that has no usable policy, returning how many
    /// changed.
    ///
    /// The microdesc flavour has no `p` lines (policies live in the microdescriptors, which are
    /// not in the data set), so without this every relay there would be useless as an exit. The
    /// Exit flag itself promises that the relay allows at least two of ports 80, 443 and 6667,
    /// so `accept 80,443` is a faithful minimal choice.
    pub fn assume_exit_policies(&mut self, policy: &ExitPolicy) -> usize {
        let mut changed = 0;
        for r in &mut self.relays {
            if r.flags.contains(RelayFlags::EXIT) && !r.exit_policy.allows_any() {
                r.exit_policy = policy.clone();
                changed += 1;
            }
        }
        changed
    }

    /// Sample `n` relays keeping the bandwidth and flag distributions.
    ///
    /// Stratified by [`RelayClass`]: each class gets a share of `n` proportional to its relay
    /// count (largest-remainder rounding, ties to the earlier class in [`RelayClass::ALL`]),
    /// then every class that has relays gets at least one when `n` allows, taken from the
    /// largest allotment. Within a class the relays are sorted by bandwidth and picked by
    /// systematic sampling: `k` picks from `m` relays at sorted positions
    /// `floor((i*m + o) / k)` for `i in 0..k`, with one random offset `o`. That spreads the
    /// picks evenly over the bandwidth distribution, so the sample's quantiles follow the full
    /// network's far more closely than a simple random sample of the same size would.
    ///
    /// The offset is drawn from the middle half of a stride (`m/4 .. 3m/4`) rather than all of
    /// it: pick `i` then stands for a rank within a quarter stride of the centre of its stratum,
    /// halving the worst-case quantile error. That matters for small strata of a steep
    /// distribution: with 15 exit-only relays in a 100-relay sample, a full-stride offset can
    /// shift the sample median by 1/30 in rank, which in the 2023 network is 9,100 to 13,000
    /// around a median of 11,000. The price, that relays at stride edges are never picked, is
    /// irrelevant for building a simulated network.
    ///
    /// The published position weights are kept rather than recomputed: they describe the real
    /// network's balance, which the sample is meant to reproduce. Relays keep their consensus
    /// order. With `n` at or above the relay count the whole consensus is returned.
    pub fn sample<R: Rng + ?Sized>(&self, n: usize, rng: &mut R) -> Consensus {
        let total = self.relays.len();
        if n >= total {
            return self.clone();
        }
        let mut by_class: [Vec<usize>; 4] = Default::default();
        for (i, r) in self.relays.iter().enumerate() {
            by_class[r.class().index()].push(i);
        }
        let counts: [usize; 4] = std::array::from_fn(|c| by_class[c].len());
        let alloc = allocate(n, &counts);

        let mut chosen = Vec::with_capacity(n);
        for (members, &k) in by_class.iter_mut().zip(alloc.iter()) {
            let m = members.len();
            if k == 0 || m == 0 {
                continue;
            }
            members.sort_by_key(|&i| (self.relays[i].bandwidth, i));
            // Offset within the middle half of a stride, see the doc comment.
            let (lo, hi) = (m / 4, (3 * m).div_ceil(4).max(m / 4 + 1));
            let o = rng.random_range(lo..hi) as u128;
            let (m128, k128) = (m as u128, k as u128);
            for i in 0..k128 {
                let pos = ((i * m128 + o) / k128) as usize;
                chosen.push(members[pos.min(m - 1)]);
            }
        }
        chosen.sort_unstable();
        chosen.dedup();
        Consensus {
            valid_after: self.valid_after.clone(),
            flavour: self.flavour,
            relays: chosen.iter().map(|&i| self.relays[i].clone()).collect(),
            weights: self.weights.clone(),
            params: self.params.clone(),
        }
    }
}

/// Split `n` over classes in proportion to `counts` (largest remainder), then make sure every
/// non-empty class has at least one when there are enough picks to go round.
fn allocate(n: usize, counts: &[usize; 4]) -> [usize; 4] {
    let total: usize = counts.iter().sum();
    let mut alloc = [0usize; 4];
    if total == 0 || n == 0 {
        return alloc;
    }
    let (n128, t128) = (n as u128, total as u128);
    let mut rem = [0u128; 4];
    for c in 0..4 {
        let q = n128 * counts[c] as u128;
        alloc[c] = (q / t128) as usize;
        rem[c] = q % t128;
    }
    let mut left = n - alloc.iter().sum::<usize>();
    let mut order = [0usize, 1, 2, 3];
    // Stable sort: equal remainders keep class order, so the result is fully determined.
    order.sort_by(|&a, &b| rem[b].cmp(&rem[a]));
    for &c in &order {
        if left == 0 {
            break;
        }
        if alloc[c] < counts[c] {
            alloc[c] += 1;
            left -= 1;
        }
    }
    let classes_present = counts.iter().filter(|&&c| c > 0).count();
    if n >= classes_present {
        for c in 0..4 {
            if counts[c] > 0 && alloc[c] == 0 {
                let donor = (0..4)
                    .filter(|&d| alloc[d] > 1)
                    .max_by_key(|&d| (alloc[d], std::cmp::Reverse(d)));
                if let Some(d) = donor {
                    alloc[d] -= 1;
                    alloc[c] = 1;
                }
            }
        }
    }
    alloc
}

/// Check the last relay entry is complete before accepting it.
fn finish(p: Pending, source: &str) -> Result<Relay, DirError> {
    if !p.seen_s {
        return Err(DirError::at(
            source,
            p.line,
            format!("relay '{}' has no 's' (flags) line", p.relay.nickname),
        ));
    }
    if !p.seen_w {
        return Err(DirError::at(
            source,
            p.line,
            format!("relay '{}' has no 'w' (bandwidth) line", p.relay.nickname),
        ));
    }
    Ok(p.relay)
}

fn parse_r(rest: &str, flavour: Flavour) -> Result<Relay, String> {
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    let (want, layout) = match flavour {
        Flavour::Microdesc => (
            7,
            "nickname identity date time address orport dirport (microdesc flavour)",
        ),
        _ => (
            8,
            "nickname identity digest date time address orport dirport",
        ),
    };
    if f.len() < want {
        return Err(format!(
            "'r' line has {} fields, expected {want}: {layout}",
            f.len()
        ));
    }
    let nickname = f[0];
    if nickname.is_empty()
        || nickname.len() > 19
        || !nickname.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return Err(format!(
            "bad nickname '{nickname}': expected 1-19 letters or digits"
        ));
    }
    let id = decode_base64(f[1])
        .filter(|b| b.len() == 20)
        .ok_or_else(|| format!("bad identity '{}': expected 27 base64 characters", f[1]))?;
    let fingerprint: String = id.iter().map(|b| format!("{b:02X}")).collect();
    let at = want - 3;
    let address: Ipv4Addr = f[at]
        .parse()
        .map_err(|_| format!("bad IPv4 address '{}'", f[at]))?;
    let or_port = match f[at + 1].parse::<u16>() {
        Ok(p) if p != 0 => p,
        _ => return Err(format!("bad OR port '{}': expected 1-65535", f[at + 1])),
    };
    f[at + 2]
        .parse::<u16>()
        .map_err(|_| format!("bad directory port '{}': expected 0-65535", f[at + 2]))?;
    Ok(Relay {
        nickname: nickname.to_string(),
        fingerprint,
        address,
        or_port,
        flags: RelayFlags::empty(),
        bandwidth: 0,
        unmeasured: false,
        exit_policy: ExitPolicy::reject_all(),
        family: None,
    })
}

fn parse_w(rest: &str) -> Result<(u64, bool), String> {
    let mut bandwidth = None;
    let mut unmeasured = false;
    for item in rest.split_ascii_whitespace() {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| format!("bad 'w' item '{item}': expected Key=Value"))?;
        match k {
            "Bandwidth" => {
                bandwidth = Some(v.parse::<u64>().map_err(|_| {
                    format!("bad Bandwidth value '{v}': expected a non-negative integer")
                })?)
            }
            "Unmeasured" => unmeasured = v == "1",
            _ => {}
        }
    }
    bandwidth
        .map(|b| (b, unmeasured))
        .ok_or_else(|| "'w' line has no Bandwidth=".to_string())
}

fn parse_params(rest: &str) -> Result<BTreeMap<String, i64>, String> {
    let mut out = BTreeMap::new();
    for item in rest.split_ascii_whitespace() {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| format!("bad parameter '{item}': expected Name=Integer"))?;
        let v: i64 = v
            .parse()
            .map_err(|_| format!("bad value for parameter '{k}': '{v}' is not an integer"))?;
        out.insert(k.to_string(), v);
    }
    Ok(out)
}

/// `bandwidth-weights` values. A weight the line lacks is taken as `WEIGHT_SCALE` (no
/// position preference) instead of failing, since only its absence, not a bad value, is
/// plausible in a real document.
fn parse_weights(rest: &str) -> Result<BandwidthWeights, String> {
    let mut map: BTreeMap<&str, u32> = BTreeMap::new();
    for item in rest.split_ascii_whitespace() {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| format!("bad bandwidth weight '{item}': expected Wxx=Integer"))?;
        let v: u32 = v.parse().map_err(|_| {
            format!("bad value for bandwidth weight '{k}': '{v}' is not a non-negative integer")
        })?;
        map.insert(k, v);
    }
    let get = |k: &str| map.get(k).copied().unwrap_or(WEIGHT_SCALE);
    let opt = |k: &str| map.get(k).copied();
    Ok(BandwidthWeights {
        wgg: get("Wgg"),
        wgm: get("Wgm"),
        wgd: get("Wgd"),
        wmg: get("Wmg"),
        wmm: get("Wmm"),
        wme: get("Wme"),
        wmd: get("Wmd"),
        weg: get("Weg"),
        wem: get("Wem"),
        wee: get("Wee"),
        wed: get("Wed"),
        wbd: opt("Wbd"),
        wbe: opt("Wbe"),
        wbg: opt("Wbg"),
        wbm: opt("Wbm"),
        wdb: opt("Wdb"),
        web: opt("Web"),
        wgb: opt("Wgb"),
        wmb: opt("Wmb"),
    })
}

/// Standard base64 (RFC 4648 alphabet), padding optional as in directory documents.
pub fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    for b in s.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_identity_to_hex() {
        let id = decode_base64("AAoQ1DAR6kkoo19hBAX5K0QztNw").unwrap();
        assert_eq!(id.len(), 20);
        let hex: String = id.iter().map(|b| format!("{b:02X}")).collect();
        assert_eq!(hex, "000A10D43011EA4928A35F610405F92B4433B4DC");
    }

    #[test]
    fn allocate_largest_remainder_and_minimum_one() {
        // Quotas 5, 3, 1.5, 0.5: the tied remainders go to the earlier class first, then the
        // class left empty is topped up from the largest allotment.
        assert_eq!(allocate(10, &[50, 30, 15, 5]), [4, 3, 2, 1]);
        assert_eq!(allocate(100, &[50, 30, 15, 5]), [50, 30, 15, 5]);
        assert_eq!(allocate(4, &[1000, 1, 1, 1]), [1, 1, 1, 1]);
        assert_eq!(allocate(2, &[1000, 1, 1, 0]), [2, 0, 0, 0]);
        assert_eq!(allocate(7, &[0, 0, 0, 7]), [0, 0, 0, 7]);
    }
}
