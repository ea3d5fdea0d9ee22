//! Quantities with units: the one number parser of onionlab's inputs, and the grammar of
//! Shadow's graph attributes.
//!
//! Magnitudes are handled as exact decimals rather than `f64` so that `"22.585 ms"` becomes
//! exactly 22 585 000 ns on every machine; rounding happens once, half up, at the final
//! nanosecond, bit or byte. Graph files (Shadow's grammar: a sign, an exponent in some
//! attributes, long unit names) and scenario files (the scenario crate's durations, sizes
//! and rates: digit groups like `1_000`, units always written) read their numbers with the
//! same [`leading_decimal`], each with its own [`NumberSyntax`], and their times with the
//! same [`time_unit`].

const NS_PER_SEC: u128 = 1_000_000_000;

/// Largest mantissa kept while reading digits; beyond this, extra digits only shift the exponent,
/// which keeps every later multiplication comfortably inside `u128`.
const MANTISSA_LIMIT: u128 = 10u128.pow(30);

/// A non-negative decimal number `mantissa × 10^exponent`, plus whether a minus sign was written
/// (kept separately so callers can say "negative" instead of "malformed").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decimal {
    /// A minus sign was written before the digits (only where [`NumberSyntax::sign`] allows one).
    pub negative: bool,
    /// The digits read, as an integer (at most about 10^30; further digits move the exponent).
    pub mantissa: u128,
    /// The power of ten the mantissa is multiplied by: negative after a decimal point.
    pub exponent: i32,
}

impl Decimal {
    /// Whether the number is zero, whatever its sign or exponent (`-0.0` is zero too).
    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// `self × factor`, rounded half-up to an integer; `None` when it does not fit a `u64`.
    pub fn scale(&self, factor: u128) -> Option<u64> {
        if self.negative && !self.is_zero() {
            return None;
        }
        let product = self.mantissa.checked_mul(factor)?;
        let value = if self.exponent >= 0 {
            let pow = 10u128.checked_pow(self.exponent as u32)?;
            if product == 0 {
                0
            } else {
                product.checked_mul(pow)?
            }
        } else {
            let shift = self.exponent.unsigned_abs();
            if shift > 38 {
                // Even the largest u128 product rounds to zero after this many divisions by ten.
                0
            } else {
                let div = 10u128.pow(shift);
                product / div + u128::from(product % div >= div.div_ceil(2))
            }
        };
        u64::try_from(value).ok()
    }
}

/// What a number may look like besides digits and one decimal point.
#[derive(Clone, Copy, Debug)]
pub struct NumberSyntax {
    /// A leading `+` or `-` (a `-` is reported in [`Decimal::negative`]).
    pub sign: bool,
    /// An exponent after the digits, `1.5e-3`.
    pub exponent: bool,
    /// Underscores between digits, as YAML groups them: `1_000_000`.
    pub digit_groups: bool,
}

/// Reads the number at the front of `text` and returns it with the rest of the text; `None`
/// if there is no digit, or the exponent is malformed or out of range.
pub fn leading_decimal(text: &str, syntax: NumberSyntax) -> Option<(Decimal, &str)> {
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut negative = false;
    if let Some(&c) = bytes.first() {
        if syntax.sign && (c == b'+' || c == b'-') {
            negative = c == b'-';
            i = 1;
        }
    }
    let mut mantissa: u128 = 0;
    let mut exponent: i32 = 0;
    let mut digits = 0usize;
    let mut seen_dot = false;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_digit() {
            digits += 1;
            if mantissa < MANTISSA_LIMIT {
                mantissa = mantissa * 10 + u128::from(c - b'0');
                if seen_dot {
                    exponent -= 1;
                }
            } else if !seen_dot {
                exponent = exponent.checked_add(1)?;
            }
        } else if c == b'.' && !seen_dot {
            seen_dot = true;
        } else if c == b'_' && syntax.digit_groups && digits > 0 {
            // A digit group's separator.
        } else {
            break;
        }
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    if syntax.exponent && i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
        let rest = &text[i + 1..];
        let end = rest
            .char_indices()
            .find(|&(k, c)| !(c.is_ascii_digit() || (k == 0 && (c == '+' || c == '-'))))
            .map_or(rest.len(), |(k, _)| k);
        let exp: i32 = rest[..end]
            .strip_prefix('+')
            .unwrap_or(&rest[..end])
            .parse()
            .ok()?;
        if !(-10_000..=10_000).contains(&exp) {
            return None;
        }
        exponent = exponent.checked_add(exp)?;
        i += 1 + end;
    }
    Some((
        Decimal {
            negative,
            mantissa,
            exponent,
        },
        &text[i..],
    ))
}

/// Reads a decimal number, optionally with an exponent (`1.5e-3`) when `allow_exponent` is set.
/// The whole string must be consumed.
pub(crate) fn parse_decimal(text: &str, allow_exponent: bool) -> Option<Decimal> {
    let syntax = NumberSyntax {
        sign: true,
        exponent: allow_exponent,
        digit_groups: false,
    };
    match leading_decimal(text, syntax)? {
        (d, "") => Some(d),
        _ => None,
    }
}

/// Splits `"100 Mbit"` / `"5Mbit"` into the magnitude text and the (trimmed) unit text, the way
/// Shadow does: the magnitude is the leading run of sign, digit and dot characters.
fn split_quantity(text: &str) -> (&str, &str) {
    let text = text.trim();
    let end = text
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .map_or(text.len(), |(i, _)| i);
    (text[..end].trim(), text[end..].trim())
}

/// Nanoseconds per time unit: short and long forms as Shadow writes them (case-sensitive),
/// with the microsecond's `µ` either the micro sign or the Greek letter.
pub fn time_unit(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" | "nanosecond" | "nanoseconds" => 1,
        "us" | "μs" | "µs" | "microsecond" | "microseconds" => 1_000,
        "ms" | "millisecond" | "milliseconds" => 1_000_000,
        "s" | "sec" | "secs" | "second" | "seconds" => NS_PER_SEC,
        "m" | "min" | "mins" | "minute" | "minutes" => 60 * NS_PER_SEC,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3600 * NS_PER_SEC,
        _ => return None,
    })
}

/// Parses a time such as `"50 ms"` into nanoseconds. The unit is required: Shadow reads a
/// unit-less string as seconds, but a graph's times are usually milliseconds, and a guess either
/// way would silently scale every path.
pub(crate) fn parse_time(text: &str) -> Result<u64, String> {
    let (number, unit) = split_quantity(text);
    if unit.is_empty() && !number.is_empty() {
        return Err(format!(
            "\"{text}\" has no unit; write the time with its unit, such as \"10 ms\""
        ));
    }
    let factor = time_unit(unit).ok_or_else(|| {
        format!(
            "unknown time unit '{unit}' in \"{text}\" (expected ns, us, μs, ms, s, sec, m, min, \
             h, hr or their long forms)"
        )
    })?;
    let value = parse_decimal(number, false)
        .ok_or_else(|| format!("expected a time such as \"50 ms\", found \"{text}\""))?;
    if value.negative && !value.is_zero() {
        return Err(format!("time must not be negative, found \"{text}\""));
    }
    value
        .scale(factor)
        .ok_or_else(|| format!("time \"{text}\" is too large"))
}

/// Bits per unit prefix; Shadow accepts SI and IEC prefixes, short or spelled out.
fn bandwidth_prefix_factor(prefix: &str) -> Option<u128> {
    Some(match prefix {
        "" => 1,
        "K" | "kilo" => 1_000,
        "Ki" | "kibi" => 1 << 10,
        "M" | "mega" => 1_000_000,
        "Mi" | "mebi" => 1 << 20,
        "G" | "giga" => 1_000_000_000,
        "Gi" | "gibi" => 1 << 30,
        "T" | "tera" => 1_000_000_000_000,
        "Ti" | "tebi" => 1 << 40,
        _ => return None,
    })
}

/// Parses a bandwidth such as `"100 Mbit"` into bits per second. Shadow expresses bandwidth in
/// bits only, so byte units are refused with a hint instead of being silently multiplied by 8.
pub(crate) fn parse_bandwidth(text: &str) -> Result<u64, String> {
    let (number, unit) = split_quantity(text);
    let prefix = ["bits", "bit"]
        .iter()
        .find_map(|suffix| unit.strip_suffix(suffix))
        .or_else(|| unit.is_empty().then_some(""));
    let Some(prefix) = prefix else {
        let is_bytes = ["bytes", "byte", "B"].iter().any(|suffix| {
            unit.strip_suffix(suffix)
                .is_some_and(|p| bandwidth_prefix_factor(p).is_some())
        });
        return Err(if is_bytes {
            format!("bandwidth must be given in bits (e.g. \"100 Mbit\"), not bytes: \"{text}\"")
        } else {
            format!(
                "unknown bandwidth unit '{unit}' in \"{text}\" (expected bit with an optional \
                 prefix K, Ki, M, Mi, G, Gi, T, Ti or kilo, kibi, mega, ...)"
            )
        });
    };
    let factor = bandwidth_prefix_factor(prefix).ok_or_else(|| {
        format!(
            "unknown bandwidth prefix '{prefix}' in \"{text}\" (prefixes are case-sensitive: K, \
             Ki, M, Mi, G, Gi, T, Ti or kilo, kibi, mega, mebi, giga, gibi, tera, tebi)"
        )
    })?;
    let value = parse_decimal(number, false)
        .ok_or_else(|| format!("expected a bandwidth such as \"100 Mbit\", found \"{text}\""))?;
    if value.negative && !value.is_zero() {
        return Err(format!("bandwidth must not be negative, found \"{text}\""));
    }
    value
        .scale(factor)
        .ok_or_else(|| format!("bandwidth \"{text}\" is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(parse_time("50 ms"), Ok(50_000_000));
        assert_eq!(parse_time("1 s"), Ok(1_000_000_000));
        assert_eq!(parse_time("200 us"), Ok(200_000));
        assert_eq!(parse_time("200 μs"), Ok(200_000));
        assert_eq!(parse_time("10 ns"), Ok(10));
        assert_eq!(parse_time("10ns"), Ok(10));
        assert!(parse_time("2").unwrap_err().contains("has no unit"));
        assert!(parse_time("0.5").unwrap_err().contains("has no unit"));
        assert_eq!(parse_time("22.585 ms"), Ok(22_585_000));
        assert_eq!(parse_time("1.5 min"), Ok(90_000_000_000));
        assert_eq!(parse_time("1 hour"), Ok(3_600_000_000_000));
        assert_eq!(parse_time("3 milliseconds"), Ok(3_000_000));
        assert_eq!(parse_time("0.0000000004 s"), Ok(0));
        assert_eq!(parse_time("0.0000000006 s"), Ok(1));
        assert!(parse_time("-5 ms").unwrap_err().contains("negative"));
        assert!(parse_time("5 MS")
            .unwrap_err()
            .contains("unknown time unit"));
        assert!(parse_time("ms").is_err());
        assert!(parse_time("1.2.3 ms").is_err());
        assert!(parse_time("99999999999999999999 h")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_time("").is_err());
    }

    #[test]
    fn bandwidths() {
        assert_eq!(parse_bandwidth("100 Mbit"), Ok(100_000_000));
        assert_eq!(parse_bandwidth("100 Mbits"), Ok(100_000_000));
        assert_eq!(parse_bandwidth("1 Gbit"), Ok(1_000_000_000));
        assert_eq!(parse_bandwidth("10 Kibit"), Ok(10_240));
        assert_eq!(parse_bandwidth("500 kilobit"), Ok(500_000));
        assert_eq!(parse_bandwidth("10 kilobits"), Ok(10_000));
        assert_eq!(parse_bandwidth("2 mebibits"), Ok(2 << 20));
        assert_eq!(parse_bandwidth("128 bits"), Ok(128));
        assert_eq!(parse_bandwidth("5Mbit"), Ok(5_000_000));
        assert_eq!(parse_bandwidth("1.5 Kibit"), Ok(1536));
        assert_eq!(parse_bandwidth("1 Tibit"), Ok(1 << 40));
        assert_eq!(parse_bandwidth("4096"), Ok(4096));
        assert!(parse_bandwidth("12 MiB").unwrap_err().contains("not bytes"));
        assert!(parse_bandwidth("10 kbit")
            .unwrap_err()
            .contains("unknown bandwidth prefix"));
        assert!(parse_bandwidth("10 Mbps")
            .unwrap_err()
            .contains("unknown bandwidth unit"));
        assert!(parse_bandwidth("-1 Mbit").unwrap_err().contains("negative"));
        assert!(parse_bandwidth("Mbit").is_err());
    }

    #[test]
    fn decimals() {
        let d = parse_decimal("1.5e-3", true).unwrap();
        assert_eq!(d.scale(1_000_000_000), Some(1_500_000));
        assert_eq!(parse_decimal("1e5", false), None);
        assert_eq!(parse_decimal("1e", true), None);
        assert_eq!(parse_decimal(".", true), None);
        assert_eq!(parse_decimal("1e99999", true), None);
        assert_eq!(parse_decimal("1e5x", true), None);
        assert_eq!(
            parse_decimal("1_000", false),
            None,
            "no digit groups in graphs"
        );
        let big = parse_decimal("123456789012345678901234567890123456789012345", true).unwrap();
        assert_eq!(big.scale(1), None);
        let tiny = parse_decimal("1e-9000", true).unwrap();
        assert_eq!(tiny.scale(u128::from(u64::MAX)), Some(0));
    }
}
