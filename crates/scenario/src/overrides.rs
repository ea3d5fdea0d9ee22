//! Scenarios with settings replaced by dotted paths, for experiments that compare variants of
//! one scenario.
//!
//! An experiment names a base scenario and, per variant, a few settings to change
//! (`tor.scheduler: vanilla`). Writing a modified copy of the scenario per variant would let the
//! copies drift apart in everything else; instead the overrides are applied to the YAML tree of
//! the one base file before it is read, so every variant goes through exactly the parsing and
//! validation a scenario file does: a misspelt key (`tor.shceduler`) is refused as unknown, a
//! value out of range is refused with its range, just as if it had been written in the file.

use std::path::Path;

use serde_json::{Map, Value};

use crate::{parse, Scenario, ScenarioError};

/// The most segments one override path may have: the deepest scenario key
/// (`relays.list[0].flags[0]`) has five, so anything near this is a mistake.
const MAX_PATH_SEGMENTS: usize = 32;

/// Reads a scenario file (bounded as [`crate::load`] bounds it) and parses it with
/// `overrides` applied; see [`parse_with_overrides`].
pub fn load_with_overrides(
    path: &Path,
    overrides: &[(String, String)],
) -> Result<Scenario, ScenarioError> {
    let text = crate::read_text(path)?;
    parse_with_overrides(&text, path, overrides)
}

/// Parses and validates scenario text after setting each `(path, value)` of `overrides`, in
/// order.
///
/// A path is a dotted list of keys from the top of the scenario (`tor.scheduler`,
/// `network.builtin.latency`); missing mappings on the way are created. Items of a list are
/// picked by number, as `clients.0.count` or `clients[0].count`. A value is YAML text, so
/// `vanilla`, `10`, `20 Mbit` and `{ web: { size: 1 MiB } }` all mean what they would in the
/// file. With no overrides this is exactly [`parse`].
///
/// Errors name `source` and the override path. A problem the overrides did not cause is
/// reported as [`parse`] reports it for the unmodified text, with its line; one they did is
/// reported at the field without a line (the lines of the modified scenario are nowhere to be
/// seen) and says which override set it.
pub fn parse_with_overrides(
    text: &str,
    source: &Path,
    overrides: &[(String, String)],
) -> Result<Scenario, ScenarioError> {
    if overrides.is_empty() {
        return parse(text, source);
    }
    let mut tree: Value = match serde_saphyr::from_str(text) {
        Ok(tree) => tree,
        // The file itself is broken: say so as reading it alone would, with its line.
        Err(e) => {
            return Err(parse(text, source).err().unwrap_or_else(|| {
                ScenarioError::new(
                    source,
                    "",
                    format!("cannot apply overrides: the file cannot be read as a YAML tree: {e}"),
                )
            }))
        }
    };
    if !tree.is_object() {
        // Nothing can be set in a scenario that is not a mapping; let `parse` describe it.
        return Err(parse(text, source).err().unwrap_or_else(|| {
            ScenarioError::new(source, "", "cannot apply overrides: not a mapping")
        }));
    }
    let mut paths = Vec::with_capacity(overrides.len());
    for (path, value) in overrides {
        let segments = split_path(path).map_err(|m| ScenarioError::new(source, path, m))?;
        let value: Value = serde_saphyr::from_str(value).map_err(|e| {
            ScenarioError::new(
                source,
                path,
                format!(
                    "the override's value is not valid YAML: {}",
                    without_position(&e)
                ),
            )
        })?;
        set(&mut tree, &segments, value).map_err(|m| ScenarioError::new(source, path, m))?;
        paths.push((path.as_str(), field_form(path, &segments)));
    }
    // JSON is YAML, so the modified tree goes back through the one parser every scenario takes.
    let modified = serde_json::to_string(&tree)
        .map_err(|e| ScenarioError::new(source, "", format!("cannot apply overrides: {e}")))?;
    match parse(&modified, source) {
        Ok(scenario) => Ok(scenario),
        Err(mut e) => {
            let blamed = paths
                .iter()
                .rev()
                .find(|(_, field)| related(field, &e.field));
            match blamed {
                Some((path, _)) => {
                    e.line = None;
                    e.message = format!("{} (set by the override `{path}`)", e.message);
                    Err(e)
                }
                // Not the overrides' doing: report it as the file alone would, with its line.
                None => Err(parse(text, source).err().unwrap_or_else(|| {
                    e.line = None;
                    e
                })),
            }
        }
    }
}

/// One step of an override path.
#[derive(Clone, Debug, PartialEq)]
enum Segment {
    /// A key, or a list position written as a plain number (`clients.0`).
    Key(String),
    /// A list position written in brackets (`clients[0]`).
    Index(usize),
}

/// Splits `tor.scheduler` or `clients[0].workload` into segments.
fn split_path(path: &str) -> Result<Vec<Segment>, String> {
    let bad = |why: &str| {
        format!(
            "not a usable override path ({why}); write keys joined by dots, such as \
             `tor.scheduler` or `clients.0.count`"
        )
    };
    let mut segments = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if key.is_empty() && (rest.is_empty() || segments.is_empty()) {
            return Err(bad("an empty key"));
        }
        if !key.is_empty() {
            segments.push(Segment::Key(key.to_string()));
        }
        while !rest.is_empty() {
            let close = rest.find(']').ok_or_else(|| bad("a `[` without `]`"))?;
            let index = rest[1..close]
                .parse::<usize>()
                .map_err(|_| bad("a list position must be a whole number, such as `[0]`"))?;
            segments.push(Segment::Index(index));
            rest = &rest[close + 1..];
            if !rest.is_empty() && !rest.starts_with('[') {
                return Err(bad("text after `]` must start a new key with `.`"));
            }
        }
    }
    if segments.len() > MAX_PATH_SEGMENTS {
        return Err(bad(&format!("more than {MAX_PATH_SEGMENTS} keys")));
    }
    Ok(segments)
}

/// The path as the scenario's errors write fields (`clients[0].count`), to tell whether an
/// error is about what an override set.
fn field_form(path: &str, segments: &[Segment]) -> String {
    let mut out = String::with_capacity(path.len());
    for s in segments {
        match s {
            Segment::Key(k) if k.parse::<usize>().is_ok() && !out.is_empty() => {
                out.push_str(&format!("[{k}]"))
            }
            Segment::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Whether an error at `field` concerns what was set at `set`: the same key, a key inside the
/// value set, or the mapping that received it (a key the mapping does not know is reported at
/// the mapping when serde cannot name the key).
fn related(set: &str, field: &str) -> bool {
    let within = |outer: &str, inner: &str| {
        inner == outer
            || inner
                .strip_prefix(outer)
                .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
    };
    within(set, field) || (!field.is_empty() && within(field, set))
}

/// What a YAML value is, in the file's words.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "empty",
        Value::Bool(_) => "true or false",
        Value::Number(_) => "a number",
        Value::String(_) => "a single value",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// Sets `value` at `segments` in `tree`, creating mappings where keys are missing.
fn set(tree: &mut Value, segments: &[Segment], value: Value) -> Result<(), String> {
    let mut node = tree;
    let mut walked = String::new();
    for segment in segments {
        let here = if walked.is_empty() {
            "the scenario".to_string()
        } else {
            format!("`{walked}`")
        };
        if node.is_null() && matches!(segment, Segment::Key(_)) {
            // A key that is absent (or written with no value) holds its defaults: a mapping
            // with nothing set yet.
            *node = Value::Object(Map::new());
        }
        let index = match segment {
            Segment::Index(i) => Some(*i),
            Segment::Key(key) if node.is_array() => key.parse::<usize>().ok(),
            Segment::Key(_) => None,
        };
        node = match node {
            Value::Object(map) => match segment {
                Segment::Key(key) => {
                    walked = join(&walked, key);
                    map.entry(key.clone()).or_insert(Value::Null)
                }
                Segment::Index(_) => {
                    return Err(format!("{here} is a mapping, not a list; name its keys"))
                }
            },
            Value::Array(items) => {
                let Some(i) = index else {
                    return Err(format!(
                        "{here} is a list, so the next key must be a \
                         position in it (a number from 0), such as `{}`",
                        join(&walked, "0")
                    ));
                };
                walked = match segment {
                    Segment::Key(key) => join(&walked, key),
                    Segment::Index(_) => format!("{walked}[{i}]"),
                };
                let len = items.len();
                items.get_mut(i).ok_or_else(|| no_item(&here, i, len))?
            }
            other => {
                let wanted = match segment {
                    Segment::Key(_) => "a mapping",
                    Segment::Index(_) => "a list",
                };
                return Err(format!(
                    "{here} is {}, not {wanted}; set {here} as a whole instead",
                    kind(other)
                ));
            }
        };
    }
    *node = value;
    Ok(())
}

fn no_item(list: &str, i: usize, len: usize) -> String {
    format!(
        "{list} has {len} item{}, so there is no item {i} (items are \
         counted from 0)",
        if len == 1 { "" } else { "s" }
    )
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// The YAML library's message without its "at line X column Y", which counts lines of the
/// override's value, not of any file.
fn without_position(e: &serde_saphyr::Error) -> String {
    let mut m = e.without_snippet().to_string();
    if let Some(i) = m.rfind(" at line ") {
        m.truncate(i);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn toy() -> &'static str {
        crate::builtin_text("toy").unwrap()
    }

    fn src() -> PathBuf {
        PathBuf::from("base.yaml")
    }

    fn set_all(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(p, v)| (p.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn no_overrides_is_plain_parse() {
        assert_eq!(
            parse_with_overrides(toy(), &src(), &[]).unwrap(),
            parse(toy(), &src()).unwrap()
        );
    }

    #[test]
    fn the_tree_round_trip_changes_nothing() {
        // An override that sets what the file already says must give the same scenario: the
        // detour through a JSON tree loses nothing of any shipped scenario.
        for name in crate::BUILTIN_NAMES {
            let text = crate::builtin_text(name).unwrap();
            let direct = parse(text, &src()).unwrap();
            let seed = direct.run.seed.to_string();
            let via = parse_with_overrides(text, &src(), &set_all(&[("run.seed", &seed)]));
            assert_eq!(via.unwrap(), direct, "{name}");
        }
    }

    #[test]
    fn every_example_survives_the_round_trip() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let direct = parse(&text, &path).unwrap();
            let seed = direct.run.seed.to_string();
            let via = load_with_overrides(&path, &set_all(&[("run.seed", &seed)]));
            assert_eq!(via.unwrap(), direct, "{}", path.display());
        }
    }

    #[test]
    fn values_are_yaml() {
        let s = parse_with_overrides(
            toy(),
            &src(),
            &set_all(&[
                ("tor.scheduler", "vanilla"),
                ("tor.kist_run_interval_ms", "10"),
                ("network.builtin.latency", "40ms"),
                ("clients[1].count", "7"),
                ("clients.0.workload", "{ web: { size: 1 MiB } }"),
                ("run.threads", "2"),
            ]),
        )
        .unwrap();
        let base = parse(toy(), &src()).unwrap();
        assert_ne!(s.tor, base.tor);
        assert_eq!(s.clients[1].count, 7);
        assert_eq!(s.run.threads, Some(2));
        assert_eq!(
            s.network.builtin.as_ref().unwrap().latency,
            crate::Duration::from_millis(40)
        );
        assert_ne!(s.clients[0].workload, base.clients[0].workload);
        assert_eq!(s.relays, base.relays);
    }

    #[test]
    fn missing_mappings_are_created() {
        let text =
            "run: { stop_time: 5m }\nrelays: { generate: { guard: 2, exit: 2, middle: 2 } }\n";
        let s = parse_with_overrides(text, &src(), &set_all(&[("network.builtin.loss", "0.01")]))
            .unwrap();
        assert_eq!(s.network.builtin.unwrap().loss, 0.01);
    }

    #[test]
    fn a_misspelt_key_is_refused_naming_the_override() {
        let e = parse_with_overrides(toy(), &src(), &set_all(&[("tor.shceduler", "vanilla")]))
            .unwrap_err();
        assert_eq!(e.field, "tor.shceduler");
        assert!(e.message.contains("unknown field `shceduler`"), "{e}");
        assert!(e.message.contains("override `tor.shceduler`"), "{e}");
        assert_eq!(e.line, None);
        let e = parse_with_overrides(toy(), &src(), &set_all(&[("tor.scheduler", "fast")]))
            .unwrap_err();
        assert_eq!(e.field, "tor.scheduler");
        assert!(e.message.contains("kist, kist_lite, vanilla"), "{e}");
    }

    #[test]
    fn paths_through_lists_and_values_are_refused() {
        let e =
            parse_with_overrides(toy(), &src(), &set_all(&[("clients.count", "1")])).unwrap_err();
        assert_eq!(e.field, "clients.count");
        assert!(e.message.contains("`clients` is a list"), "{e}");
        let e =
            parse_with_overrides(toy(), &src(), &set_all(&[("clients.5.count", "1")])).unwrap_err();
        assert!(e.message.contains("has 2 items"), "{e}");
        let e = parse_with_overrides(toy(), &src(), &set_all(&[("authorities.count", "1")]))
            .unwrap_err();
        assert!(e.message.contains("`authorities` is a number"), "{e}");
        for bad in ["", "tor.", ".tor", "clients[x]", "clients[0", "clients[0]x"] {
            let e = parse_with_overrides(toy(), &src(), &set_all(&[(bad, "1")])).unwrap_err();
            assert!(
                e.message.contains("not a usable override path"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn problems_of_the_file_itself_keep_their_line() {
        let text = "run: { stop_time: 5m }\nrelays: { generate: { guard: 2, exit: 2, middle: 2 } }\nbogus: 1\n";
        let e = parse_with_overrides(text, &src(), &set_all(&[("run.seed", "3")])).unwrap_err();
        assert_eq!(e.field, "bogus");
        assert_eq!(e.line, Some(3));
    }

    #[test]
    fn later_overrides_win() {
        let s = parse_with_overrides(
            toy(),
            &src(),
            &set_all(&[
                ("tor", "{ scheduler: vanilla }"),
                ("tor.scheduler", "kist_lite"),
            ]),
        )
        .unwrap();
        let expect =
            parse_with_overrides(toy(), &src(), &set_all(&[("tor.scheduler", "kist_lite")]))
                .unwrap();
        assert_eq!(s, expect);
    }
}
