//! Quantities written with units: durations, sizes and rates.
//!
//! Scenario files are read by people, so every quantity must carry its unit: a bare `60` could
//! mean seconds or minutes, bits or bytes, and a silent misreading would waste a whole run.
//! Numbers are parsed as exact decimals (no `f64`) so that `"1.5 MiB"` means the same number of
//! bytes on every machine; rounding happens once, half up, at the final unit.
//!
//! Each quantity serializes back to a string this module parses to the same value, so a
//! scenario recorded in `run.json` can be fed back in unchanged.

use std::fmt;

use onionlab_topology::units::{leading_decimal, time_unit, Decimal, NumberSyntax};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

const NS_PER_US: u128 = 1_000;
const NS_PER_MS: u128 = 1_000_000;
const NS_PER_S: u128 = 1_000_000_000;

/// A span of simulated time in nanoseconds, written like `"90s"`, `"250ms"` or `"1h30m"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(pub u64);

/// A number of bytes, written like `"320 KiB"`, `"50 KB"` or a plain integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Size(pub u64);

/// A data rate in bits per second, written in bits (`"100 Mbit"`) or bytes (`"10 MiB/s"`).
///
/// Stored in bits because links are specified in bits; byte rates written in bytes convert
/// exactly (×8) and back exactly (÷8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Rate(pub u64);

impl Duration {
    /// A duration of `s` whole seconds.
    pub const fn from_secs(s: u64) -> Self {
        Duration(s * NS_PER_S as u64)
    }
    /// A duration of `ms` whole milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        Duration(ms * NS_PER_MS as u64)
    }
    /// The span in nanoseconds.
    pub const fn nanos(self) -> u64 {
        self.0
    }
}

impl Size {
    /// The size in bytes.
    pub const fn bytes(self) -> u64 {
        self.0
    }
}

impl Rate {
    /// The rate in bits per second, as stored.
    pub const fn bits_per_sec(self) -> u64 {
        self.0
    }
    /// Rounds down: a fraction of a byte per second cannot be configured in Tor anyway.
    pub const fn bytes_per_sec(self) -> u64 {
        self.0 / 8
    }
    /// A rate of `b` bytes per second, saturating at `u64::MAX` bits per second.
    pub const fn from_bytes_per_sec(b: u64) -> Self {
        Rate(b.saturating_mul(8))
    }
}

/// How numbers are written in scenario files: no sign (a negative quantity gets its own
/// error), no exponent, and YAML's digit groups (`1_000_000`).
const SCENARIO_NUMBERS: NumberSyntax = NumberSyntax {
    sign: false,
    exponent: false,
    digit_groups: true,
};

/// The number at the front of `s` and the rest of it.
fn leading_number(s: &str) -> Option<(Decimal, &str)> {
    leading_decimal(s, SCENARIO_NUMBERS)
}

const DURATION_HINT: &str =
    "a duration with a unit, such as \"90s\", \"250ms\", \"10m\", \"1h30m\" (units: ns, us, ms, s, m, h, or their long forms such as seconds)";

/// Parses durations such as `"90s"`, `"1.5 s"`, `"1h30m"`; a bare number is refused because
/// its unit would be a guess.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(format!(
            "expected {DURATION_HINT}; negative durations are not allowed, got {text:?}"
        ));
    }
    if t.is_empty() {
        return Err(format!("expected {DURATION_HINT}, got an empty string"));
    }
    let mut rest = t;
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let (num, after) = leading_number(rest)
            .ok_or_else(|| format!("expected {DURATION_HINT}, got {text:?}"))?;
        let after = after.trim_start();
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c.is_whitespace())
            .unwrap_or(after.len());
        let unit = &after[..unit_len];
        if unit.is_empty() {
            return Err(format!(
                "{DURATION_HINT}, got {text:?} (bare numbers are ambiguous)"
            ));
        }
        let factor = time_unit(unit).ok_or_else(|| {
            format!("expected {DURATION_HINT}; unknown unit {unit:?} in {text:?}")
        })?;
        let part = num
            .scale(factor)
            .ok_or_else(|| format!("duration {text:?} is too long"))?;
        total = total
            .checked_add(part)
            .ok_or_else(|| format!("duration {text:?} is too long"))?;
        rest = after[unit_len..].trim_start();
    }
    Ok(Duration(total))
}

fn size_unit(unit: &str) -> Option<u128> {
    Some(match unit {
        "" | "B" | "byte" | "bytes" => 1,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        _ => return None,
    })
}

const SIZE_HINT: &str =
    "a size such as \"320 KiB\", \"5 MiB\", \"50 KB\" or a whole number of bytes \
     (units: B, KB, MB, GB = powers of 1000; KiB, MiB, GiB = powers of 1024)";

/// Parses sizes: decimal (`KB` = 1000) and binary (`KiB` = 1024) units, or plain bytes.
pub fn parse_size(text: &str) -> Result<Size, String> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(format!(
            "expected {SIZE_HINT}; negative sizes are not allowed, got {text:?}"
        ));
    }
    let (num, unit) =
        leading_number(t).ok_or_else(|| format!("expected {SIZE_HINT}, got {text:?}"))?;
    let unit = unit.trim();
    let factor = size_unit(unit)
        .ok_or_else(|| format!("expected {SIZE_HINT}; unknown unit {unit:?} in {text:?}"))?;
    num.scale(factor)
        .map(Size)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

/// Bits per second for a rate unit. Byte units must say `/s` so a rate is never mistaken
/// for a size; bit units may add `/s` or `ps` (`Mbps`) or leave it out (`Mbit`, as Shadow).
fn rate_unit(unit: &str) -> Option<u128> {
    let bits = |u: &str| -> Option<u128> {
        Some(match u {
            "bit" | "b" => 1,
            "kbit" | "Kbit" | "kb" | "Kb" => 1_000,
            "Mbit" | "Mb" => 1_000_000,
            "Gbit" | "Gb" => 1_000_000_000,
            "Tbit" | "Tb" => 1_000_000_000_000,
            "Kibit" => 1 << 10,
            "Mibit" => 1 << 20,
            "Gibit" => 1 << 30,
            _ => return None,
        })
    };
    if let Some(u) = unit.strip_suffix("/s") {
        if let Some(b) = bits(u) {
            return Some(b);
        }
        let bytes = size_unit(u).filter(|_| !u.is_empty())?;
        return Some(bytes * 8);
    }
    if let Some(u) = unit.strip_suffix("ps") {
        return bits(u);
    }
    bits(unit)
}

const RATE_HINT: &str =
    "a rate such as \"100 Mbit\", \"1 Gbit\" (bits per second) or \"10 MiB/s\", \
     \"500 KB/s\" (bytes per second); bare numbers are ambiguous between bits and bytes";

/// Parses rates in bits (`"100 Mbit"`, `"1 Gbps"`) or bytes per second (`"10 MiB/s"`).
pub fn parse_rate(text: &str) -> Result<Rate, String> {
    let t = text.trim();
    if t.starts_with('-') {
        return Err(format!(
            "expected {RATE_HINT}; negative rates are not allowed, got {text:?}"
        ));
    }
    let (num, unit) =
        leading_number(t).ok_or_else(|| format!("expected {RATE_HINT}, got {text:?}"))?;
    let unit = unit.trim();
    if unit.is_empty() {
        return Err(format!("expected {RATE_HINT}, got {text:?}"));
    }
    let factor = rate_unit(unit)
        .ok_or_else(|| format!("expected {RATE_HINT}; unknown unit {unit:?} in {text:?}"))?;
    num.scale(factor)
        .map(Rate)
        .ok_or_else(|| format!("rate {text:?} is too large"))
}

impl fmt::Display for Duration {
    /// Writes the largest unit that represents the value exactly, so parsing it gives back
    /// the same number of nanoseconds.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = u128::from(self.0);
        for (unit, factor) in [
            ("h", 3600 * NS_PER_S),
            ("m", 60 * NS_PER_S),
            ("s", NS_PER_S),
            ("ms", NS_PER_MS),
            ("us", NS_PER_US),
        ] {
            if ns != 0 && ns.is_multiple_of(factor) {
                return write!(f, "{}{unit}", ns / factor);
            }
        }
        if ns == 0 {
            return f.write_str("0s");
        }
        write!(f, "{ns}ns")
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (unit, factor) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
            if b != 0 && b.is_multiple_of(factor) {
                return write!(f, "{} {unit}", b / factor);
            }
        }
        write!(f, "{b} B")
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b != 0 && b.is_multiple_of(8) {
            let bytes = b / 8;
            for (unit, factor) in [
                ("GiB/s", 1u64 << 30),
                ("MiB/s", 1 << 20),
                ("KiB/s", 1 << 10),
            ] {
                if bytes.is_multiple_of(factor) {
                    return write!(f, "{} {unit}", bytes / factor);
                }
            }
        }
        for (unit, factor) in [
            ("Gbit", 1_000_000_000u64),
            ("Mbit", 1_000_000),
            ("kbit", 1_000),
        ] {
            if b != 0 && b.is_multiple_of(factor) {
                return write!(f, "{} {unit}", b / factor);
            }
        }
        write!(f, "{b} bit")
    }
}

macro_rules! string_quantity {
    ($ty:ident, $parse:ident, $hint:expr, $int_ok:expr) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($hint)
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$ty, E> {
                        $parse(v).map_err(E::custom)
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<$ty, E> {
                        let int_ok: Option<fn(u64) -> $ty> = $int_ok;
                        match int_ok {
                            Some(make) => Ok(make(v)),
                            None => Err(E::custom(format!(
                                "expected {}, got the bare number {v}",
                                $hint
                            ))),
                        }
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<$ty, E> {
                        if v >= 0 {
                            return self.visit_u64(v as u64);
                        }
                        Err(E::custom(format!(
                            "expected {}, got the negative number {v}",
                            $hint
                        )))
                    }
                    fn visit_f64<E: de::Error>(self, v: f64) -> Result<$ty, E> {
                        Err(E::custom(format!(
                            "expected {}, got the bare number {v}",
                            $hint
                        )))
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

string_quantity!(Duration, parse_duration, DURATION_HINT, None);
string_quantity!(Size, parse_size, SIZE_HINT, Some(Size));
string_quantity!(Rate, parse_rate, RATE_HINT, None);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1h 30m 5s"), Ok(Duration::from_secs(5405)));
        assert_eq!(parse_duration("1.5 s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0s"), Ok(Duration(0)));
        assert!(parse_duration("90").is_err());
        assert!(parse_duration("-5s").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
        // The time units of graph files, long forms and both micro signs included.
        assert_eq!(parse_duration("2 minutes"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("5µs"), Ok(Duration(5_000)));
        assert_eq!(parse_duration("5μs"), Ok(Duration(5_000)));
        assert_eq!(parse_duration("1_000 ms"), Ok(Duration::from_secs(1)));
        assert!(parse_duration("1e3 ms").is_err(), "no exponents");
        assert!(parse_duration("+5s").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("320 KiB"), Ok(Size(320 * 1024)));
        assert_eq!(parse_size("5 MiB"), Ok(Size(5 << 20)));
        assert_eq!(parse_size("50 KB"), Ok(Size(50_000)));
        assert_eq!(parse_size("50kB"), Ok(Size(50_000)));
        assert_eq!(parse_size("1000"), Ok(Size(1000)));
        assert_eq!(parse_size("1.5 KiB"), Ok(Size(1536)));
        assert!(parse_size("5 parsecs").is_err());
        assert!(parse_size("-1 KiB").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("10 MiB/s"), Ok(Rate(10 * (1 << 20) * 8)));
        assert_eq!(parse_rate("100 Mbit"), Ok(Rate(100_000_000)));
        assert_eq!(parse_rate("100 Mbps"), Ok(Rate(100_000_000)));
        assert_eq!(parse_rate("1 Gbit/s"), Ok(Rate(1_000_000_000)));
        assert_eq!(parse_rate("500 KB/s"), Ok(Rate(4_000_000)));
        assert!(parse_rate("100").is_err());
        assert!(parse_rate("10 MiB").is_err());
        assert!(parse_rate("fast").is_err());
        assert_eq!(Rate(80).bytes_per_sec(), 10);
    }

    #[test]
    fn display_round_trips() {
        for d in [
            0u64,
            1,
            999,
            1_000,
            250_000_000,
            90_000_000_000,
            5_400_000_000_000,
        ] {
            let s = Duration(d).to_string();
            assert_eq!(parse_duration(&s), Ok(Duration(d)), "{s}");
        }
        for b in [0u64, 1, 1000, 1024, 327_680, 5 << 20, 3 << 30] {
            let s = Size(b).to_string();
            assert_eq!(parse_size(&s), Ok(Size(b)), "{s}");
        }
        for r in [1u64, 8, 1000, 100_000_000, 83_886_080, 7] {
            let s = Rate(r).to_string();
            assert_eq!(parse_rate(&s), Ok(Rate(r)), "{s}");
        }
    }
}
