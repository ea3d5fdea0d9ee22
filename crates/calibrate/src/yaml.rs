//! The calibration file, written by hand: the format is small and fixed, and writing it
//! ourselves lets the file open with comments a reader needs (what each number is), keeps
//! costs in their natural order rather than a map's, and avoids a second YAML library beside
//! the one that reads scenarios.

use std::fmt::Write;

use onionlab_torcore::cpu::{CpuCalibration, Spread};

/// What each cost stands for, one line each, for the file's header.
const MEANINGS: [(&str, &str); 15] = [
    (
        "syscall",
        "one system call that moves little data (read, write, epoll_wait)",
    ),
    (
        "kernel_packet",
        "one TCP segment through the kernel, sent or received, beyond its system call",
    ),
    (
        "tls_record",
        "one TLS record's fixed cost (AES-128-GCM seal or open)",
    ),
    ("tls_byte", "one TLS record byte (AES-128-GCM)"),
    (
        "aes_call",
        "one AES-128-CTR call's fixed cost (relay crypto, one per cell per layer)",
    ),
    (
        "aes_byte",
        "one byte of AES-128-CTR, the library's counter mode (AES-NI if present)",
    ),
    (
        "soft_ctr_byte",
        "one byte of AES-128-CTR built on one-block AES calls (older tor)",
    ),
    (
        "sha1_byte",
        "one byte through the running SHA-1 digest at a circuit's edge",
    ),
    (
        "ntor",
        "the server side of one ntor handshake (X25519 and HMAC-SHA256)",
    ),
    (
        "link_responder",
        "a responding relay's public-key work in one link handshake",
    ),
    (
        "link_initiator",
        "an initiating relay's public-key work in one link handshake",
    ),
    (
        "cell_other",
        "tor's own work per cell (queues, scheduler, buffers): given, not measured",
    ),
    (
        "user_packet",
        "one packet through a user-space network stack (kernel bypass)",
    ),
    (
        "offload_call",
        "handing one cell to an on-chip crypto unit and taking it back",
    ),
    (
        "offload_byte",
        "the CPU's cost per byte left to it by a crypto unit",
    ),
];

/// `s` as a YAML double-quoted scalar. Anything that could end the string or the line, or that
/// a YAML reader might normalize (line and paragraph separators, a byte-order mark), is
/// escaped; other text is written as it is.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A mapping key: bare when it is a plain identifier that YAML cannot read as anything but a
/// string, quoted otherwise.
fn key(s: &str) -> String {
    let ident = s
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    let special = matches!(
        s,
        "null" | "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n"
    );
    if ident && !special {
        s.to_string()
    } else {
        quoted(s)
    }
}

/// A cost as a YAML float: Rust's shortest representation that reads back to the same `f64`
/// (so a file round-trips exactly), never in exponent form, with a `.0` where it would
/// otherwise look like an integer.
fn number(v: f64) -> String {
    if v.is_nan() {
        return ".nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        };
    }
    let s = v.to_string();
    if s.contains('.') {
        s
    } else {
        s + ".0"
    }
}

fn spread(s: &Spread) -> String {
    format!(
        "{{ p10: {}, p90: {}, runs: {} }}",
        number(s.p10),
        number(s.p90),
        s.runs
    )
}

/// The calibration as a YAML file, with a header of comments saying what the numbers are.
/// It reads back (`serde_saphyr::from_str::<CpuCalibration>`) to the same value.
pub fn to_yaml(c: &CpuCalibration) -> String {
    let mut y = String::new();
    y.push_str(
        "# onionlab CPU calibration (written by `onionlab calibrate`).\n\
         #\n\
         # Unit costs of a relay's work, in nanoseconds of one core's time per operation,\n\
         # measured on the machine below. Each measured cost is the median of repeated\n\
         # timings; `spread` gives their 10th and 90th percentiles and how many timings were\n\
         # taken, `notes` how each cost was measured or where it comes from.\n\
         #\n",
    );
    for (name, meaning) in MEANINGS {
        let _ = writeln!(y, "#   {name:<14} {meaning}");
    }
    y.push('\n');
    let _ = writeln!(y, "format: {}", c.format);
    let _ = writeln!(y, "machine: {}", quoted(&c.machine));
    let _ = writeln!(y, "measured: {}", quoted(&c.measured));
    y.push_str("costs:\n");
    for (name, v) in c.costs.named() {
        let _ = writeln!(y, "  {name}: {}", number(v));
    }
    if c.spread.is_empty() {
        y.push_str("spread: {}\n");
    } else {
        y.push_str("spread:\n");
        for (name, s) in &c.spread {
            let _ = writeln!(y, "  {}: {}", key(name), spread(s));
        }
    }
    if c.notes.is_empty() {
        y.push_str("notes: {}\n");
    } else {
        y.push_str("notes:\n");
        for (name, note) in &c.notes {
            let _ = writeln!(y, "  {}: {}", key(name), quoted(note));
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionlab_torcore::cpu::{UnitCosts, CALIBRATION_FORMAT};

    fn sample() -> CpuCalibration {
        let mut costs = UnitCosts::default();
        // Values of every shape the writer must get right: integers, tiny fractions, large
        // numbers, shortest-representation oddities.
        let values = [
            91.25,
            1234.5,
            0.1,
            0.000_012_34,
            3.0,
            1e-9,
            1.0 / 3.0,
            123_456_789.0,
            45_230.0,
            0.0,
            2.5e-5,
            17.0,
            999_999_999.0,
        ];
        for ((name, _), v) in costs.clone().named().into_iter().zip(values) {
            *costs.get_mut(name).unwrap() = v;
        }
        let mut cal = CpuCalibration {
            format: CALIBRATION_FORMAT,
            machine: "CPU \"quoted\" @ 2.0GHz, back\\slash, tab\there, ünïcödé, 2 cores".into(),
            measured: "2026-11-23, onionlab calibrate 0.1.0".into(),
            costs,
            spread: Default::default(),
            notes: Default::default(),
        };
        cal.spread.insert(
            "syscall".into(),
            Spread {
                p10: 90.0,
                p90: 0.1 + 0.2,
                runs: 31,
            },
        );
        cal.spread.insert(
            "odd key: yes".into(),
            Spread {
                p10: 1e-7,
                p90: 2.0,
                runs: 7,
            },
        );
        cal.notes
            .insert("syscall".into(), "read(2) → EAGAIN; # not a comment".into());
        cal.notes
            .insert("yes".into(), "line\nbreak and \u{1} control".into());
        cal
    }

    #[test]
    fn yaml_round_trips() {
        let cal = sample();
        let text = to_yaml(&cal);
        let back: CpuCalibration = serde_saphyr::from_str(&text).unwrap_or_else(|e| {
            panic!("{e}\n{text}");
        });
        assert_eq!(back, cal, "{text}");
    }

    #[test]
    fn empty_maps_round_trip() {
        let mut cal = sample();
        cal.spread.clear();
        cal.notes.clear();
        let back: CpuCalibration = serde_saphyr::from_str(&to_yaml(&cal)).unwrap();
        assert_eq!(back, cal);
    }

    #[test]
    fn header_explains_every_cost() {
        let cal = sample();
        let names: Vec<_> = cal.costs.named().iter().map(|(n, _)| *n).collect();
        let explained: Vec<_> = MEANINGS.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, explained);
        assert!(to_yaml(&cal).starts_with("# onionlab CPU calibration"));
    }

    #[test]
    fn numbers_read_as_floats() {
        assert_eq!(number(3.0), "3.0");
        assert_eq!(number(1e-9), "0.000000001");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(f64::INFINITY), ".inf");
    }
}
