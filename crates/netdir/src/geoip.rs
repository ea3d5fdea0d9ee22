//! Where a relay is: tor's IPv4 country table.
//!
//! A consensus gives each relay's address, not its country; tor itself maps addresses to
//! countries with a table it ships (`src/config/geoip` in its sources, Debian's `tor-geoipdb`),
//! one line per range of addresses: `first,last,CC` with the addresses as 32-bit integers.
//! onionlab reads the same format, so that a network sampled from a consensus can put each
//! relay in the country its address says (most of the live network's weight sat in Germany,
//! France, the Netherlands and the United States), and a user can give it any table tor ships.

use std::net::Ipv4Addr;

/// The most ranges a table may hold: tor's tables hold under 400,000; a file of millions is
/// not one of them, and refusing it keeps memory bounded.
pub(crate) const MAX_RANGES: usize = 4_000_000;

/// An IPv4 country table: sorted, disjoint ranges, looked up by binary search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeoIp {
    first: Vec<u32>,
    last: Vec<u32>,
    country: Vec<[u8; 2]>,
}

impl GeoIp {
    /// Reads a table in tor's geoip format. Lines starting with `#` and blank lines are
    /// comments; every other line must be `first,last,CC` with `first <= last`, each range
    /// after the one before it, and `CC` two ASCII letters (`??`, tor's "unknown", is kept and
    /// looks up as no country). The error names the line.
    pub fn parse(text: &str) -> Result<GeoIp, String> {
        let mut t = GeoIp {
            first: Vec::new(),
            last: Vec::new(),
            country: Vec::new(),
        };
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |why: String| onionlab_data::clip(format!("line {}: {why}", i + 1));
            let mut f = line.split(',');
            let (Some(a), Some(b), Some(cc), None) = (f.next(), f.next(), f.next(), f.next())
            else {
                return Err(at(format!(
                    "expected first,last,CC (two addresses as integers and a country code), got {line:?}"
                )));
            };
            let addr = |s: &str| {
                s.trim().parse::<u32>().map_err(|_| {
                    at(format!(
                        "{s:?} is not an IPv4 address written as an integer (0 to 4294967295)"
                    ))
                })
            };
            let (a, b) = (addr(a)?, addr(b)?);
            if a > b {
                return Err(at(format!("the range {a}-{b} ends before it starts")));
            }
            if let Some(&prev) = t.last.last() {
                if a <= prev {
                    return Err(at(format!(
                        "the range {a}-{b} does not follow the one before it (which ends at \
                         {prev}); a table lists disjoint ranges in increasing order"
                    )));
                }
            }
            let cc = cc.trim().as_bytes();
            let code = match cc {
                [x, y]
                    if (x.is_ascii_alphabetic() && y.is_ascii_alphabetic())
                        || (*x == b'?' && *y == b'?') =>
                {
                    [x.to_ascii_uppercase(), y.to_ascii_uppercase()]
                }
                _ => {
                    return Err(at(format!(
                        "{:?} is not a two-letter country code",
                        String::from_utf8_lossy(cc)
                    )))
                }
            };
            if t.first.len() == MAX_RANGES {
                return Err(at(format!(
                    "more than {MAX_RANGES} ranges; tor's tables hold far fewer"
                )));
            }
            t.first.push(a);
            t.last.push(b);
            t.country.push(code);
        }
        if t.first.is_empty() {
            return Err("no ranges: expected lines of first,last,CC as in tor's geoip file".into());
        }
        Ok(t)
    }

    /// The country `addr` lies in, as an upper-case code; `None` when no range holds it or the
    /// table says `??`.
    pub fn country(&self, addr: Ipv4Addr) -> Option<&str> {
        let x = u32::from(addr);
        let i = self.first.partition_point(|&f| f <= x).checked_sub(1)?;
        if x > self.last[i] || self.country[i] == *b"??" {
            return None;
        }
        std::str::from_utf8(&self.country[i]).ok()
    }

    /// How many ranges the table holds.
    pub fn len(&self) -> usize {
        self.first.len()
    }

    /// Whether the table holds no range (never true of a parsed table).
    pub fn is_empty(&self) -> bool {
        self.first.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "# a comment\n\n16777216,16777471,AU\n16777472,16778239,cn\n\
                         16778240,16779263,??\n167772160,184549375,US\n";

    #[test]
    fn looks_up_the_range_an_address_lies_in() {
        let t = GeoIp::parse(TABLE).unwrap();
        assert_eq!(t.len(), 4);
        assert_eq!(t.country(Ipv4Addr::new(1, 0, 0, 0)), Some("AU"));
        assert_eq!(t.country(Ipv4Addr::new(1, 0, 0, 255)), Some("AU"));
        assert_eq!(t.country(Ipv4Addr::new(1, 0, 1, 0)), Some("CN"));
        // Tor's "unknown", a gap between ranges, and addresses before the first and after the
        // last range have no country.
        assert_eq!(t.country(Ipv4Addr::new(1, 0, 4, 0)), None);
        assert_eq!(t.country(Ipv4Addr::new(2, 0, 0, 0)), None);
        assert_eq!(t.country(Ipv4Addr::new(0, 0, 0, 1)), None);
        assert_eq!(t.country(Ipv4Addr::new(10, 255, 255, 255)), Some("US"));
        assert_eq!(t.country(Ipv4Addr::new(11, 0, 0, 0)), None);
    }

    #[test]
    fn refuses_what_is_not_a_table_and_names_the_line() {
        for (text, line, words) in [
            ("1,2\n", 1, "expected first,last,CC"),
            ("1,2,US,x\n", 1, "expected first,last,CC"),
            ("# c\n1,x,US\n", 2, "not an IPv4 address"),
            ("1,4294967296,US\n", 1, "not an IPv4 address"),
            ("5,4,US\n", 1, "ends before it starts"),
            ("1,5,US\n5,9,DE\n", 2, "does not follow"),
            ("1,5,USA\n", 1, "two-letter"),
            ("1,5,U1\n", 1, "two-letter"),
            ("1,5,U?\n", 1, "two-letter"),
        ] {
            let e = GeoIp::parse(text).unwrap_err();
            assert!(e.starts_with(&format!("line {line}: ")), "{text:?}: {e}");
            assert!(e.contains(words), "{text:?}: {e}");
        }
        assert!(GeoIp::parse("# only comments\n")
            .unwrap_err()
            .contains("no ranges"));
    }
}
