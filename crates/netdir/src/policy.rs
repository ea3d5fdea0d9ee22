//! Exit policy summaries (the consensus `p` line).

use std::fmt;

/// A relay's exit policy summary: which destination ports it will connect to for clients.
///
/// The form of the `p` line (accept or reject, then a port list) is kept as published instead of
/// being normalised, so `to_string()` reproduces the summary; ranges are sorted and merged so
/// that lookups are a binary search. Two summaries that mean the same thing in different forms
/// ("reject 25" and "accept 1-24,26-65535") therefore compare unequal; compare with
/// [`ExitPolicy::allows_port`] when meaning matters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitPolicy {
    accept: bool,
    /// Sorted, disjoint, non-adjacent inclusive ranges within 1..=65535.
    ranges: Vec<(u16, u16)>,
}

impl ExitPolicy {
    /// Parse a summary such as `accept 80,443,1000-2000` or `reject 1-65535`.
    pub fn parse(summary: &str) -> Result<Self, String> {
        let mut words = summary.split_ascii_whitespace();
        let accept = match words.next() {
            Some("accept") => true,
            Some("reject") => false,
            Some(other) => return Err(format!("expected 'accept' or 'reject', found '{other}'")),
            None => return Err("empty exit policy summary".to_string()),
        };
        let list = words
            .next()
            .ok_or_else(|| "exit policy summary has no port list".to_string())?;
        if let Some(extra) = words.next() {
            return Err(format!("unexpected '{extra}' after the port list"));
        }
        let mut ranges = Vec::new();
        for item in list.split(',') {
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (parse_port(a, item)?, parse_port(b, item)?),
                None => {
                    let p = parse_port(item, item)?;
                    (p, p)
                }
            };
            if lo > hi {
                return Err(format!("port range '{item}' is reversed"));
            }
            ranges.push((lo, hi));
        }
        Ok(ExitPolicy {
            accept,
            ranges: normalise(ranges),
        })
    }

    /// Allows every port; for scenarios that want unrestricted exits.
    pub fn accept_all() -> Self {
        ExitPolicy {
            accept: true,
            ranges: vec![(1, u16::MAX)],
        }
    }

    /// Allows no port: the meaning of a missing `p` line (dir-spec: "reject 1-65535" is implied).
    pub fn reject_all() -> Self {
        ExitPolicy {
            accept: false,
            ranges: vec![(1, u16::MAX)],
        }
    }

    /// True for an accept-list summary, false for a reject-list one.
    pub fn is_accept(&self) -> bool {
        self.accept
    }

    /// The listed port ranges (inclusive), sorted and merged.
    pub fn ranges(&self) -> &[(u16, u16)] {
        &self.ranges
    }

    /// Whether a client may exit to `port`. Port 0 is never allowed: it is not a valid
    /// destination and summaries cannot mention it.
    pub fn allows_port(&self, port: u16) -> bool {
        if port == 0 {
            return false;
        }
        let listed = self.contains(port);
        listed == self.accept
    }

    /// Whether any port at all is allowed; a relay failing this cannot be an exit.
    pub fn allows_any(&self) -> bool {
        if self.accept {
            !self.ranges.is_empty()
        } else {
            self.ranges.as_slice() != [(1, u16::MAX)]
        }
    }

    fn contains(&self, port: u16) -> bool {
        // First range whose end is at or above the port; the port is listed iff it starts at or
        // below it.
        let i = self.ranges.partition_point(|&(_, hi)| hi < port);
        self.ranges.get(i).is_some_and(|&(lo, _)| lo <= port)
    }
}

fn parse_port(text: &str, item: &str) -> Result<u16, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("bad port '{text}' in '{item}'"));
    }
    match text.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("port '{text}' in '{item}' is outside 1-65535")),
        Ok(p) => Ok(p),
    }
}

/// Sort and merge overlapping or adjacent ranges so `contains` can binary-search.
fn normalise(mut ranges: Vec<(u16, u16)>) -> Vec<(u16, u16)> {
    ranges.sort_unstable();
    let mut out: Vec<(u16, u16)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match out.last_mut() {
            Some(last) if u32::from(lo) <= u32::from(last.1) + 1 => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

impl fmt::Display for ExitPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.accept { "accept " } else { "reject " })?;
        for (i, &(lo, hi)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}
