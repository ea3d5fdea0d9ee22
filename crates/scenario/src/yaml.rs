//! The YAML library's errors in our words.
//!
//! serde-saphyr and serde describe problems in their own terms ("expected mapping start",
//! "externally tagged enum", "use `Option<String>`", "set `DuplicateKeyPolicy` in
//! `Options`"), which name Rust types and parser states rather than what to write in the file. Here each kind of
//! error becomes a plain sentence about the field, using what the field expects: its quantity,
//! its choices or its range.

use std::path::Path;

use onionlab_data::clip;
use onionlab_torcore::TorParams;
use serde_saphyr::Error;

use crate::limits::{MAX_HOSTS, MAX_THREADS};
use crate::ScenarioError;

const DURATION: &str = "a duration with a unit, such as \"90s\", \"250ms\" or \"10m\"";
const DURATION_OR_RANGE: &str = "a duration such as \"5s\" or a range [min, max] such as [1s, 60s]";
const SIZE: &str = "a size such as \"320 KiB\" or \"5 MiB\"";
const RATE: &str = "a rate such as \"100 Mbit\" or \"10 MiB/s\"";

/// The enum-valued fields: their choices, and whether a choice carries settings
/// (`{ web: {} }`) or is a plain word (`kist`).
fn choices(field: &str) -> Option<(&'static str, bool)> {
    let leaf = leaf(field);
    Some(match leaf {
        "scheduler" if field == "tor.scheduler" => ("kist, kist_lite, vanilla", false),
        "flow_control" if field == "tor.flow_control" => ("vegas, sendme", false),
        "relays" if field == "relays" => ("generate, list, sample", true),
        "bandwidth" if field == "relays.generate.bandwidth" => {
            ("from_file, lognormal, fixed", true)
        }
        "workload" => ("web, bulk, perf, upload, markov", true),
        _ if field.starts_with("relays.list[") && parent(field).ends_with("].flags") => {
            ("guard, exit, fast, stable, running, valid", false)
        }
        _ => return None,
    })
}

fn example(field: &str) -> &'static str {
    match field {
        "relays" => "`relays: { generate: { guard: 2, exit: 2, middle: 2 } }`",
        "relays.generate.bandwidth" => "`bandwidth: { fixed: 10 MiB/s }`",
        _ => "`workload: { web: {} }` ({} takes every default)",
    }
}

/// The last segment of a field path: `clients[0].workload.web` → `web`, `flags[1]` → `flags`.
fn leaf(field: &str) -> &str {
    let last = field.rsplit('.').next().unwrap_or(field);
    last.split('[').next().unwrap_or(last)
}

/// The path without its last segment (an index counts as a segment).
fn parent(field: &str) -> &str {
    if field.ends_with(']') {
        if let Some(i) = field.rfind('[') {
            return &field[..i];
        }
    }
    field.rfind('.').map_or("", |i| &field[..i])
}

/// What a field expects, in words, for messages about a value of the wrong kind; where the
/// field has no words of its own, `kind`, the kind of value the reader wanted there (`a
/// mapping`, `a list`, `a single value`).
fn expected(field: &str, kind: &str) -> String {
    expected_opt(field).unwrap_or_else(|| kind.into())
}

/// The words for a field that holds a single value (a number, a word, true or false) when
/// the field has none of its own.
const SINGLE: &str = "a single value (a number, a word, or true or false)";
/// ... that holds a mapping.
const MAPPING: &str = "a mapping of `key: value` lines";
/// ... that holds a list.
const LIST: &str = "a list";
/// ... whose kind the error does not say.
const VALUE: &str = "a value";

fn expected_opt(field: &str) -> Option<String> {
    if let Some((list, settings)) = choices(field) {
        return Some(if settings {
            format!(
                "exactly one of {list} as a mapping, such as {}",
                example(field)
            )
        } else {
            format!("one of {list}")
        });
    }
    let leaf = leaf(field);
    if let Some(tor) = field.strip_prefix("tor.") {
        if let Some(r) = TorParams::range_of(tor) {
            return Some(r.expected());
        }
        if matches!(
            tor,
            "cc_cwnd_full_per_cwnd" | "link_handshake" | "warm_channels" | "directory_traffic"
        ) {
            return Some("true or false".into());
        }
    }
    let hosts = || format!("a whole number from 1 to {MAX_HOSTS}");
    Some(match leaf {
        "" => "a mapping with at least `run:` and `relays:`".into(),
        "name" if field == "name" => "a name of letters, digits, '-', '_' or '.'".into(),
        "name" if field.starts_with("relays.list") => "a Tor nickname (1 to 19 letters and digits)".into(),
        "name" => "a group name of letters, digits, '-', '_' or '.'".into(),
        "graph" => "builtin, internet-geo, internet-2018, data:<file> or a graph file path".into(),
        "consensus" => "consensus-2023, data:<file> or a consensus file path".into(),
        "from_file" => "relays-2018, data:<file> or a relays CSV path".into(),
        "servers" if field.starts_with("clients") => "the name of a server group".into(),
        "servers" | "clients" => "a list of groups, each a mapping such as `{ name: web }`".into(),
        "list" => "a list of relays, each a mapping such as `{ name: r, bandwidth_rate: 1 MiB/s }`".into(),
        "country" => "a two-letter country code such as \"US\"".into(),
        "exit_policy" => "an exit policy summary such as \"accept 80,443\"".into(),
        "family" => "a family name".into(),
        "address" => "an IPv4 address such as 20.0.0.1".into(),
        "flags" => "a list of flags such as [guard, fast, stable]".into(),
        "stop_time" | "bootstrap" | "latency" | "lookahead_floor" | "down_queue" | "timeout"
        | "interval" | "max_circuit_dirtiness" => DURATION.into(),
        "pause" | "start" => DURATION_OR_RANGE.into(),
        "size" => SIZE.into(),
        "bandwidth" | "bandwidth_up" | "bandwidth_down" | "link" | "link_up" | "link_down"
        | "bandwidth_rate" | "bandwidth_burst" | "relay_bandwidth_rate"
        | "relay_bandwidth_burst" | "median" | "fixed" => RATE.into(),
        "loss" | "edge_loss" => "a probability between 0 and 1, such as 0.01".into(),
        "sigma" => "a number between 0 and 5".into(),
        "burst_factor" => "a number of at least 1.0, such as 1.67".into(),
        "rate_per_weight" => "bytes per second per unit of weight, from 1 to 1000000, such as 1000".into(),
        "count" | "authorities" => hosts(),
        "guard" | "exit" | "guard_exit" | "middle" => format!("a whole number from 0 to {MAX_HOSTS}"),
        "threads" => format!("a whole number from 1 to {MAX_THREADS}"),
        "seed" => "a whole number from 0 to 18446744073709551615".into(),
        "port" => "80 (the only port the model serves)".into(),
        "consensus_weight" => "a whole number from 1 to 4294967295".into(),
        "run" => "a mapping such as `{ stop_time: 10m }`".into(),
        "network" => "a mapping such as `{ graph: builtin }`".into(),
        "builtin" => "a mapping such as `{ latency: 25ms, loss: 0.0, bandwidth: 1 Gbit }`".into(),
        "tor" => "a mapping of tor parameters such as `{ scheduler: kist }`".into(),
        "generate" => "a mapping such as `{ guard: 2, exit: 2, middle: 2 }`".into(),
        "sample" => "a mapping such as `{ consensus: consensus-2023, count: 100 }`".into(),
        "lognormal" => "a mapping such as `{ median: 5 MiB/s, sigma: 1.0 }`".into(),
        "web" | "bulk" | "perf" => {
            "a mapping of the workload's settings, such as `{ size: 320 KiB }` (`{}` takes every default)".into()
        }
        _ => return None,
    })
}

/// The YAML library's names for the scalar types it failed to read.
fn type_words(ty: &str) -> &'static str {
    match ty {
        "boolean" => "true or false",
        "floating point" | "f32" | "f64" => "a number",
        _ => "a whole number",
    }
}

/// serde's names for the kinds of YAML value, in the words of the file.
fn kind(unexpected: &str) -> String {
    match unexpected {
        "unit value" => "an empty value (null)".into(),
        "sequence" => "a list".into(),
        "map" => "a mapping".into(),
        other => other
            .replace("floating point", "number")
            .replace("integer", "number"),
    }
}

/// Splits serde's "unknown field `a`b`, expected …" into the quoted name (which may hold
/// backticks itself) and what follows its closing backtick.
fn quoted(message: &str, prefix: &str) -> Option<(String, String)> {
    let rest = message.strip_prefix(prefix)?;
    let end = [", expected", ", there are no"]
        .iter()
        .filter_map(|tail| rest.find(&format!("`{tail}")))
        .min()
        .or_else(|| rest.rfind('`'))?;
    Some((rest[..end].to_string(), rest[end + 1..].to_string()))
}

/// The error at the root of an alias or snippet wrapper.
fn root(e: &Error) -> &Error {
    match e.without_snippet() {
        Error::AliasError { error, .. } => root(error),
        other => other,
    }
}

/// Cleans serde_path_to_error's path: `.` is the root, and `?` marks a position it could not
/// name (a map key being read).
fn clean_path(path: &str) -> String {
    if path == "." {
        return String::new();
    }
    let kept: Vec<&str> = path.split('.').filter(|s| *s != "?").collect();
    kept.join(".")
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// Turns a YAML/serde error into ours: the path from `serde_path_to_error`, the line from the
/// parser, and a message in the file's terms instead of the library's.
pub(crate) fn error(source: &Path, path: &str, e: &Error) -> ScenarioError {
    let inner = root(e);
    let line = inner
        .location()
        .or_else(|| e.location())
        .map(|l| l.line() as usize)
        .filter(|&l| l > 0);
    let mut field = clean_path(path);
    // serde_path_to_error marks a map key it is reading with `?`.
    let at_key = path == "?" || path.ends_with(".?");
    let message = match inner {
        Error::Unexpected { .. } if at_key => {
            "expected a plain key such as `run`, found a list or a mapping used as a key".into()
        }
        Error::DuplicateMappingKey { key, .. } => {
            if let Some(k) = key {
                field = join(&field, k);
            }
            "this key appears twice in the same mapping; keep one (which of the values was \
             meant is ambiguous)"
                .to_string()
        }
        Error::NullIntoString { .. } => format!(
            "expected {}, found an empty value (null); remove the key to use its default",
            expected(&field, SINGLE)
        ),
        Error::NonFiniteFloat { value, .. } => format!(
            "expected {}, found {value}, which is not a finite number",
            expected(&field, "a finite number")
        ),
        Error::ExternallyTaggedEnumExpectedScalarOrMapping { .. }
        | Error::ExpectedStringKeyForExternallyTaggedEnum { .. } => {
            format!(
                "expected {}, found a list",
                expected(&field, "one choice as a mapping")
            )
        }
        Error::UnexpectedValueForUnitEnumVariant { .. } => {
            field = parent(&field).to_string();
            format!(
                "expected {}, written as a plain word, not a mapping",
                expected(&field, "one of the field's choices")
            )
        }
        Error::ExpectedMappingEndAfterEnumVariantValue { .. } => {
            if choices(&field).is_none() {
                field = parent(&field).to_string();
            }
            match choices(&field) {
                Some((list, _)) => format!("expected exactly one of {list}, found more than one"),
                None => "expected exactly one key here, found more than one".into(),
            }
        }
        // A choice that needs settings written as a bare word (`workload: web`,
        // `bandwidth: fixed`) reaches the variant's contents and finds none.
        Error::UnexpectedMappingEnd { .. } | Error::Unexpected { .. }
            if choices(parent(&field)).is_some_and(|(_, settings)| settings) =>
        {
            let variant = leaf(&field).to_string();
            field = parent(&field).to_string();
            format!(
                "expected {}; `{variant}` alone is not enough, it is a key whose value holds its \
                 settings",
                expected(&field, MAPPING)
            )
        }
        Error::Unexpected { expected: what, .. } => match *what {
            "mapping start" => format!(
                "expected {}, found a single value or a list",
                expected(&field, MAPPING)
            ),
            "sequence start" => format!(
                "expected {}, found a single value or a mapping",
                expected(&field, LIST)
            ),
            "string scalar" => format!(
                "expected {}, found a list or a mapping",
                expected(&field, SINGLE)
            ),
            other => format!("the YAML is malformed here: expected {other}"),
        },
        Error::UnexpectedMappingEnd { .. } | Error::UnexpectedSequenceEnd { .. } => {
            format!("expected {}, found nothing", expected(&field, VALUE))
        }
        Error::InvalidScalar { ty, .. } => format!(
            "expected {}",
            expected_opt(&field).unwrap_or_else(|| type_words(ty).into())
        ),
        Error::InvalidBooleanStrict { .. } => "expected true or false".into(),
        Error::SerdeInvalidType {
            unexpected,
            expected: what,
            ..
        } => format!("expected {what}, found {}", kind(unexpected)),
        Error::MultipleDocuments { .. } => {
            "the file holds more than one YAML document (a `---` line starts another); a \
             scenario is a single document"
                .into()
        }
        Error::UnknownAnchor { .. } => {
            "an alias (*name) refers to an anchor (&name) that is not defined before it".into()
        }
        Error::Budget { .. }
        | Error::AliasReplayLimitExceeded { .. }
        | Error::AliasExpansionLimitExceeded { .. }
        | Error::AliasReplayStackDepthExceeded { .. }
        | Error::AliasReplayCounterOverflow { .. } => {
            "the YAML is too large or nested too deeply (a scenario is a few dozen lines; \
             anchors and aliases must not multiply it)"
                .into()
        }
        Error::Eof { .. } => "the file ends in the middle of a value".into(),
        Error::UnsupportedTag { tag, .. } => {
            format!("the YAML tag `{tag}` is not supported; remove it")
        }
        Error::TaggedScalarCannotDeserializeIntoString { .. }
        | Error::BinaryNotUtf8 { .. }
        | Error::InvalidBinaryBase64 { .. } => {
            format!(
                "expected {}, found a tagged value; remove the tag",
                expected(&field, VALUE)
            )
        }
        // The standard library's reason ("invalid IPv4 address syntax") adds nothing to ours.
        Error::Message { .. } if leaf(&field) == "address" => {
            format!(
                "expected {} (four numbers from 0 to 255 joined by dots)",
                expected(&field, VALUE)
            )
        }
        other => {
            let mut m = other.to_string();
            // The parser appends its own "at line X column Y"; the line is reported separately.
            if let Some(i) = m.rfind(" at line ") {
                m.truncate(i);
            }
            m
        }
    };
    let (field, message) = refine(field, message);
    ScenarioError {
        file: source.display().to_string(),
        field: clip(field),
        line,
        message: clip(message),
    }
}

/// Adjustments common to serde's own messages: ranges for out-of-range integers, and unknown or
/// missing keys located at the key itself rather than at its parent.
fn refine(mut field: String, mut message: String) -> (String, String) {
    if let Some(ty) = message.strip_prefix("invalid ") {
        if matches!(ty, "u16" | "u32" | "u64") {
            message = format!("expected {}", expected(&field, "a whole number"));
        }
    }
    // serde's "unknown field `k`, expected one of …" and "missing field `k`" read well; the
    // key joins the field path (a key may hold backticks itself).
    let key = quoted(&message, "unknown field `").or_else(|| quoted(&message, "missing field `"));
    if let Some((key, _)) = key {
        if field != key && !field.ends_with(&format!(".{key}")) {
            field = join(&field, &key);
        }
    }
    if let Some((variant, rest)) = quoted(&message, "unknown variant `") {
        let choices = match choices(&field) {
            Some((list, _)) => list.to_string(),
            None => rest
                .strip_prefix(", expected one of ")
                .or_else(|| rest.strip_prefix(", expected "))
                .unwrap_or_default()
                .replace('`', ""),
        };
        message = if matches!(variant.as_str(), "null" | "~" | "") {
            format!("expected one of {choices}, found an empty value (null)")
        } else {
            format!("expected one of {choices}, found `{variant}`")
        };
    } else if let Some(rest) = message.strip_prefix("invalid length ") {
        // serde: "invalid length 0, expected a range [min, max]".
        if let Some((n, what)) = rest.split_once(", expected ") {
            let items = if n == "1" { "item" } else { "items" };
            message = format!(
                "expected {}, found a list of {n} {items}",
                expected(&field, what)
            );
        }
    } else if let Some(rest) = message.strip_prefix("invalid value: ") {
        // serde: "invalid value: integer `-1`, expected …".
        if let Some((found, what)) = rest.split_once(", expected ") {
            message = format!("expected {}, found {}", expected(&field, what), kind(found));
        }
    }
    // The scanner quotes a character as `c'.
    if let Some(c) = message
        .strip_prefix("unexpected character: `")
        .and_then(|rest| rest.strip_suffix('\''))
    {
        message = format!(
            "the YAML syntax is broken here: `{c}` cannot start a key or a value (it is \
             reserved in YAML); put the text in quotes"
        );
    }
    // Syntax errors come from the scanner with its own terse wording; say that it is the YAML
    // itself that is broken, not a value.
    let syntax = [
        "while parsing",
        "while scanning",
        "did not find expected",
        "simple key expected",
        "mapping values are not allowed",
        "found character that cannot start",
        "unexpected end of",
        "tabs disallowed",
        "invalid indentation",
        "unexpected character",
    ];
    if syntax.iter().any(|s| message.contains(s)) && !message.starts_with("the YAML syntax") {
        message = format!(
            "the YAML syntax is broken here: {message}; check the indentation (spaces, not \
             tabs), colons and brackets"
        );
    }
    (field, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(leaf("clients[0].workload.web"), "web");
        assert_eq!(leaf("relays.list[1].flags[0]"), "flags");
        assert_eq!(parent("clients[0].workload.web"), "clients[0].workload");
        assert_eq!(parent("relays.list[1].flags[0]"), "relays.list[1].flags");
        assert_eq!(parent("run"), "");
        assert_eq!(clean_path("."), "");
        assert_eq!(clean_path("?"), "");
        assert_eq!(clean_path("run.?"), "run");
    }

    #[test]
    fn long_words_are_clipped() {
        let m = clip(format!("got \"{}\" here", "9".repeat(100_000)));
        assert!(m.len() < 100, "{m}");
        assert!(m.ends_with("…\" (100002 characters) here"), "{m}");
        assert_eq!(clip("short words stay".into()), "short words stay");
    }

    #[test]
    fn every_tor_number_has_its_range_in_messages() {
        assert_eq!(
            expected_opt("tor.kist_run_interval_ms").unwrap(),
            "a whole number from 1 to 100"
        );
        assert_eq!(
            expected_opt("tor.scheduler").unwrap(),
            "one of kist, kist_lite, vanilla"
        );
        assert_eq!(
            expected_opt("clients[3].count").unwrap(),
            "a whole number from 1 to 1000000"
        );
    }
}
