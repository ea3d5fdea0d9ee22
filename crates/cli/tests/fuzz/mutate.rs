//! Mutations: byte- and line-level ones for every format, structure-aware ones for YAML, and
//! the proptest strategies that draw (and shrink) them.
//!
//! A mutation holds plain numbers (positions, dictionary indices) that are reduced modulo what
//! the input offers when applied, so every drawn mutation applies to every input and shrinking
//! a number only moves the mutation elsewhere.

use proptest::collection::vec;
use proptest::prelude::*;

use crate::yaml::{string_scalar, Node};

/// Values a structure-aware mutation writes into a scenario: the extremes of every type, and
/// ordinary values of the wrong kind for most fields.
pub(crate) const VALUES: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "3",
    "65535",
    "65536",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "1000000000",
    "-9223372036854775808",
    "1e308",
    "-1e308",
    "1e-308",
    "0.0",
    "-0.0",
    "0.5",
    "1.5",
    ".inf",
    "-.inf",
    ".nan",
    "\"\"",
    "null",
    "~",
    "true",
    "false",
    "..",
    ".",
    "/",
    "\"..\"",
    "../../etc/passwd",
    "/dev/zero",
    "/dev/null",
    "/tmp",
    "0s",
    "1ns",
    "1us",
    "1ms",
    "1s",
    "5s",
    "60s",
    "1h",
    "1000000h",
    "18446744073709551615ns",
    "18446744073709551615s",
    "99999999999999999999h",
    "1.5s",
    "0.0000000001s",
    "1h30m",
    "-1s",
    "[0s, 0s]",
    "[1ns, 1ns]",
    "[0s, 1000000h]",
    "[1s]",
    "[1s, 2s, 3s]",
    "0 B",
    "1",
    "1 B",
    "1 KiB",
    "320 KiB",
    "5 MiB",
    "1 TiB",
    "18446744073709551615 B",
    "1000000 TiB",
    "1 bit",
    "0 Mbit",
    "1 Mbit",
    "50 Mbit",
    "1 Gbit",
    "1000000 Tbit",
    "18446744073709551615 Tbit",
    "1 B/s",
    "75 KiB/s",
    "1 MiB/s",
    "2 MiB/s",
    "1 GiB/s",
    "1e308 GiB/s",
    "builtin",
    "internet-2018",
    "internet-geo",
    "fidelity.gml",
    "g.gml",
    "g.graphml",
    "c.consensus",
    "data:topology/internet-2018-183-nodes.graphml.xml",
    "data:relays/relays-2018-1998.csv",
    "data:consensus/2019-12-15-13-00-00-microdesc-consensus",
    "consensus-2023",
    "consensus-2022",
    "consensus-2019-microdesc",
    "relays-2018",
    "nonexistent.gml",
    "kist",
    "kist_lite",
    "vanilla",
    "vegas",
    "sendme",
    "guard",
    "exit",
    "fast",
    "stable",
    "running",
    "valid",
    "[guard, exit]",
    "[]",
    "{}",
    "[exit]",
    "[guard]",
    "accept 80",
    "accept 443",
    "accept 1-65535",
    "reject 1-65535",
    "reject 80",
    "accept 0",
    "accept 65535-1",
    "accept 80,443",
    "DE",
    "US",
    "ZZ",
    "de",
    "web",
    "bulk",
    "perf",
    "{ web: {} }",
    "{ bulk: {} }",
    "{ perf: {} }",
    "{ perf: { interval: 1ns } }",
    "{ web: { pause: 0s } }",
    "{ fixed: 1 MiB/s }",
    "{ lognormal: { median: 1 MiB/s, sigma: 5 } }",
    "{ from_file: relays-2018 }",
    "10.0.0.1",
    "255.255.255.255",
    "0.0.0.0",
    "127.0.0.1",
    "a",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "\"a b\"",
    "\"\\u0000\"",
    "\"\\n\"",
    "x:y",
    "&a [1, 2]",
    "*a",
    "!!str 1",
    "!!binary aGVsbG8=",
    "!custom x",
];

/// Top-level and nested keys of the scenario schema (the fuzzer adds the keys of its seeds and
/// every `tor:` parameter at start-up).
pub(crate) const KEYS: &[&str] = &[
    "name",
    "run",
    "seed",
    "stop_time",
    "bootstrap",
    "threads",
    "network",
    "graph",
    "builtin",
    "latency",
    "loss",
    "bandwidth",
    "lookahead_floor",
    "down_queue",
    "tor",
    "authorities",
    "count",
    "relays",
    "generate",
    "list",
    "sample",
    "guard",
    "exit",
    "guard_exit",
    "middle",
    "burst_factor",
    "link",
    "link_up",
    "link_down",
    "country",
    "exit_policy",
    "flags",
    "bandwidth_rate",
    "bandwidth_burst",
    "relay_bandwidth_rate",
    "relay_bandwidth_burst",
    "consensus_weight",
    "family",
    "address",
    "consensus",
    "servers",
    "port",
    "bandwidth_up",
    "bandwidth_down",
    "clients",
    "workload",
    "web",
    "bulk",
    "perf",
    "size",
    "pause",
    "timeout",
    "interval",
    "start",
    "from_file",
    "lognormal",
    "fixed",
    "median",
    "sigma",
    "<<",
    "unknown_key",
    "",
];

/// Byte sequences worth inserting, per format.
pub(crate) fn tokens(kind: Format) -> &'static [&'static str] {
    match kind {
        Format::Yaml => &[
            ": ",
            "- ",
            "[",
            "]",
            "{",
            "}",
            ",",
            "&a ",
            "*a",
            "!!str ",
            "!!map ",
            "<<: *a\n",
            "---\n",
            "...\n",
            "#",
            "\"",
            "'",
            "|\n",
            ">\n",
            "\t",
            "~",
            ".inf",
            "-.inf",
            ".nan",
            "1e308",
            "18446744073709551616",
            "\u{feff}",
            "\0",
            "\r",
            "? ",
            "%YAML 1.2\n",
            "%TAG ! tag:x:\n",
            "\n  ",
            "\n",
            " ",
            "\\",
            "\u{2028}",
            "é",
            "0x10",
            "0o7",
            "1_000",
            "null",
            "{a: 1, a: 2}",
            "[[[[[[[[[[[[[[[[",
            "]]]]]]]]]]]]]]]]",
        ],
        Format::Gml => &[
            "[",
            "]",
            " [ ",
            " ] ",
            "node [",
            "edge [",
            "graph [",
            "id ",
            "source ",
            "target ",
            "latency ",
            "jitter ",
            "packet_loss ",
            "host_bandwidth_up ",
            "host_bandwidth_down ",
            "country_code ",
            "label ",
            "directed 1",
            "directed 0",
            "\"",
            "\"\"",
            "-1",
            "0",
            "18446744073709551615",
            "18446744073709551616",
            "1e308",
            "nan",
            "inf",
            "-0",
            "\"1000000 h\"",
            "\"0 ms\"",
            "\"1 ns\"",
            "\"18446744073709551615 s\"",
            "\"1e308 ms\"",
            "\"100 Mbit\"",
            "\"0 bit\"",
            "\"1000000 Tbit\"",
            "\"-1 ms\"",
            "1.5",
            "#",
            "\n",
            " ",
            "\0",
            "\u{feff}",
            "é",
            "&amp;",
            "&quot;",
        ],
        Format::GraphMl => &[
            "<",
            ">",
            "/>",
            "</",
            "</node>",
            "</edge>",
            "</graph>",
            "<node id=\"x\">",
            "<node id=\"poi-1\"/>",
            "<edge source=\"poi-1\" target=\"poi-1\">",
            "<edge source=\"x\" target=\"y\"/>",
            "<data key=\"d7\">",
            "<data key=\"d3\">",
            "</data>",
            "<key attr.name=\"latency\" for=\"edge\" id=\"d7\"/>",
            "<key attr.name=\"latency\" for=\"edge\" id=\"dz\"><default>1</default></key>",
            "<graph edgedefault=\"directed\">",
            "&amp;",
            "&#0;",
            "&#x110000;",
            "&lt;",
            "<!DOCTYPE x [<!ENTITY e \"eeeeeeeeee\">]>",
            "&e;",
            "<![CDATA[",
            "]]>",
            "<!--",
            "-->",
            "<?xml version=\"1.0\"?>",
            "NaN",
            "nan",
            "inf",
            "-1",
            "1e308",
            "0",
            "18446744073709551615",
            "18446744073709551616",
            "\"",
            "'",
            "=",
            " ",
            "\n",
            "\0",
            "é",
            "poi-1",
            "",
        ],
        Format::Consensus => &[
            "r ",
            "s ",
            "w ",
            "p ",
            "m ",
            "v ",
            "pr ",
            "a ",
            "\nr ",
            "\ns ",
            "\nw ",
            "\np ",
            "w Bandwidth=",
            "Bandwidth=",
            "Unmeasured=1",
            "p accept ",
            "p reject ",
            "accept",
            "reject",
            "directory-footer\n",
            "bandwidth-weights ",
            "Wgg=",
            "Wee=",
            "Wed=",
            "Wmd=",
            "-----BEGIN SIGNATURE-----\n",
            "-----END SIGNATURE-----\n",
            "Guard ",
            "Exit ",
            "BadExit ",
            "MiddleOnly ",
            "Fast ",
            "Running ",
            "Valid ",
            "Stable ",
            "=",
            "-",
            ",",
            " ",
            "\t",
            "\n",
            "4294967295",
            "4294967296",
            "18446744073709551615",
            "18446744073709551616",
            "-1",
            "0",
            "65535",
            "65536",
            "0-0",
            "1-65535",
            "65535-1",
            "params ",
            "CircuitPriorityHalflifeMsec=",
            "network-status-version 3\n",
            "network-status-version 3 microdesc\n",
            "valid-after ",
            "0.0.0.0",
            "255.255.255.255",
            "999.1.1.1",
            "AAAA",
            "====",
            "\0",
            "é",
            "\u{feff}",
        ],
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Yaml,
    Gml,
    GraphMl,
    Consensus,
}

/// A byte- or line-level change. Positions are taken modulo the input's length (or line
/// count), token indices modulo the format's token list.
#[derive(Clone, Debug)]
pub(crate) enum TextOp {
    DeleteLine(u32),
    DuplicateLine(u32),
    SwapLines(u32, u32),
    Truncate(u32),
    InsertBytes(u32, Vec<u8>),
    SetByte(u32, u8),
    InsertToken(u32, u16),
    /// Replace the word (run of non-space bytes) at this position by a token.
    ReplaceWord(u32, u16),
    DeleteRange(u32, u16),
    /// Repeat the bytes `[at, at + len)` this many times in place.
    Repeat(u32, u8, u16),
}

/// A change to a YAML tree. Node selectors are taken modulo the tree's size.
#[derive(Clone, Debug)]
pub(crate) enum TreeOp {
    /// Replace a node by one of [`VALUES`] (parsed as YAML when it is a collection).
    SetValue(u32, u16),
    /// Replace a node by another shape: 0 `{}`, 1 `[]`, 2 `null`, 3 `[node]`, 4 `{x: node}`,
    /// 5 a map's values as a list, 6 a collection's first scalar, 7 `""`.
    Reshape(u32, u8),
    /// Delete a map entry or list item.
    Delete(u32),
    /// Duplicate a map entry (the same key twice) or list item.
    Duplicate(u32),
    /// Add `key: value` to the map at or above the node.
    Insert(u32, u16, u16),
    /// Put a copy of another subtree of this tree in place of a node.
    Splice(u32, u32),
    /// Multiply a number found in a scalar (counts, rates, durations) by a large factor, or
    /// set it to zero.
    Scale(u32, u8),
    /// Wrap a node in this many levels of lists.
    Nest(u32, u16),
    /// Replace a scalar by a value of the same kind (duration, rate, size, whole number,
    /// number, flag, word), mostly ones at or just past the limits a field may have.
    SetSimilar(u32, u16),
}

/// Values of each kind for [`TreeOp::SetSimilar`]: the edges of the ranges onionlab's
/// validation allows, one past them, and the extremes of the type.
const DURATIONS: &[&str] = &[
    "0s",
    "1ns",
    "1us",
    "999us",
    "1ms",
    "2ms",
    "10ms",
    "100ms",
    "999ms",
    "1s",
    "2s",
    "5s",
    "59s",
    "60s",
    "1m",
    "10m",
    "1h",
    "24h",
    "720h",
    "721h",
    "1000h",
    "1000000h",
    "5124095h",
    "18446744073709551615ns",
    "1.5s",
    "0.001ms",
    "1h30m",
    "0.5ns",
];
const RATES: &[&str] = &[
    "1 bit",
    "8 bit",
    "1 B/s",
    "75 KiB/s",
    "76799 B/s",
    "76800 B/s",
    "1 Mbit",
    "10 Mbit",
    "100 Mbit",
    "1 Gbit",
    "10 Gbit",
    "1 Tbit",
    "1000 Tbit",
    "1 TiB/s",
    "1 GiB/s",
    "1.5 Mbit",
    "18446744073709551615 bit",
    "2305843009213693951 B/s",
];
const SIZES: &[&str] = &[
    "0",
    "1",
    "1 B",
    "497",
    "498",
    "499",
    "1 KiB",
    "50 KiB",
    "51201",
    "1 MiB",
    "1048577",
    "5 MiB",
    "1 GiB",
    "1 TiB",
    "1000 TiB",
    "18446744073709551615",
    "18446744073709551615 B",
];
const INTEGERS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "4",
    "7",
    "8",
    "10",
    "14",
    "15",
    "31",
    "32",
    "100",
    "101",
    "124",
    "1000",
    "1024",
    "1025",
    "3000",
    "65535",
    "65536",
    "1000000",
    "1000001",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "-1",
];
const FLOATS: &[&str] = &[
    "0.0",
    "-0.0",
    "1e-300",
    "1e-9",
    "0.001",
    "0.01",
    "0.5",
    "0.99",
    "0.999999",
    "1.0",
    "1.0000001",
    "1.67",
    "2.0",
    "5.0",
    "5.0001",
    "100.0",
    "100.5",
    "1e9",
    "1e308",
    "-1.0",
];
const WORDS: &[&str] = &[
    "kist",
    "kist_lite",
    "vanilla",
    "vegas",
    "sendme",
    "guard",
    "exit",
    "fast",
    "stable",
    "running",
    "valid",
    "builtin",
    "internet-2018",
    "internet-geo",
    "consensus-2023",
    "relays-2018",
    "DE",
    "US",
    "FR",
    "NL",
    "web",
    "bulk",
    "perf",
    "accept 80",
    "accept 1-65535",
    "reject 80",
    "a",
    "web1",
];

/// The kind of a scalar, as the pool its replacements come from.
fn similar_pool(scalar: &str) -> &'static [&'static str] {
    let s = scalar.trim_matches('"');
    let lower = s.to_ascii_lowercase();
    let starts_numeric = s.starts_with(|c: char| c.is_ascii_digit() || c == '-' || c == '.');
    if lower == "true" || lower == "false" {
        &["true", "false"]
    } else if starts_numeric
        && (lower.contains("bit") || lower.contains("bps") || lower.ends_with("/s"))
    {
        RATES
    } else if starts_numeric && lower.ends_with('b') {
        SIZES
    } else if starts_numeric
        && (lower.ends_with('s')
            || lower.ends_with('m')
            || lower.ends_with('h')
            || lower.ends_with("min"))
    {
        DURATIONS
    } else if s.parse::<i128>().is_ok() {
        INTEGERS
    } else if s.parse::<f64>().is_ok() {
        FLOATS
    } else {
        WORDS
    }
}

/// What a fuzz case does to a seed.
#[derive(Clone, Debug)]
pub(crate) struct Mutation {
    pub seed: usize,
    pub tree: Vec<TreeOp>,
    pub text: Vec<TextOp>,
}

fn text_op() -> impl Strategy<Value = TextOp> {
    prop_oneof![
        2 => any::<u32>().prop_map(TextOp::DeleteLine),
        2 => any::<u32>().prop_map(TextOp::DuplicateLine),
        1 => (any::<u32>(), any::<u32>()).prop_map(|(a, b)| TextOp::SwapLines(a, b)),
        1 => any::<u32>().prop_map(TextOp::Truncate),
        1 => (any::<u32>(), vec(any::<u8>(), 1..8)).prop_map(|(a, b)| TextOp::InsertBytes(a, b)),
        2 => (any::<u32>(), any::<u8>()).prop_map(|(a, b)| TextOp::SetByte(a, b)),
        3 => (any::<u32>(), any::<u16>()).prop_map(|(a, b)| TextOp::InsertToken(a, b)),
        3 => (any::<u32>(), any::<u16>()).prop_map(|(a, b)| TextOp::ReplaceWord(a, b)),
        1 => (any::<u32>(), 1u16..64).prop_map(|(a, b)| TextOp::DeleteRange(a, b)),
        1 => (any::<u32>(), 1u8..32, prop_oneof![2..16u16, 1000..20000u16])
            .prop_map(|(a, b, c)| TextOp::Repeat(a, b, c)),
    ]
}

fn tree_op() -> impl Strategy<Value = TreeOp> {
    prop_oneof![
        10 => (any::<u32>(), any::<u16>()).prop_map(|(a, b)| TreeOp::SetSimilar(a, b)),
        4 => (any::<u32>(), any::<u16>()).prop_map(|(a, b)| TreeOp::SetValue(a, b)),
        1 => (any::<u32>(), 0u8..8).prop_map(|(a, b)| TreeOp::Reshape(a, b)),
        2 => any::<u32>().prop_map(TreeOp::Delete),
        1 => any::<u32>().prop_map(TreeOp::Duplicate),
        3 => (any::<u32>(), any::<u16>(), any::<u16>()).prop_map(|(a, b, c)| TreeOp::Insert(a, b, c)),
        1 => (any::<u32>(), any::<u32>()).prop_map(|(a, b)| TreeOp::Splice(a, b)),
        3 => (any::<u32>(), any::<u8>()).prop_map(|(a, b)| TreeOp::Scale(a, b)),
        1 => (any::<u32>(), prop_oneof![1..8u16, 100..3000u16]).prop_map(|(a, b)| TreeOp::Nest(a, b)),
    ]
}

/// Changes that mostly keep a scenario valid: values of the same kind at and around their
/// limits. The check → run target uses these, as its cases are worth most when they run.
fn gentle_tree_op() -> impl Strategy<Value = TreeOp> {
    prop_oneof![
        12 => (any::<u32>(), any::<u16>()).prop_map(|(a, b)| TreeOp::SetSimilar(a, b)),
        3 => (any::<u32>(), any::<u8>()).prop_map(|(a, b)| TreeOp::Scale(a, b)),
        2 => any::<u32>().prop_map(TreeOp::Delete),
        1 => any::<u32>().prop_map(TreeOp::Duplicate),
        1 => (any::<u32>(), any::<u16>(), any::<u16>()).prop_map(|(a, b, c)| TreeOp::Insert(a, b, c)),
        1 => (any::<u32>(), any::<u16>()).prop_map(|(a, b)| TreeOp::SetValue(a, b)),
        1 => (any::<u32>(), any::<u32>()).prop_map(|(a, b)| TreeOp::Splice(a, b)),
    ]
}

/// Mutations of a YAML seed: mostly structural (one change more often than several, so that
/// many cases still pass validation and reach the simulation), sometimes byte-level on top.
/// `valid` seeds (the first ones) are drawn three times as often as the rest.
pub(crate) fn yaml_mutation(seeds: usize, valid: usize) -> impl Strategy<Value = Mutation> {
    (
        seed_index(seeds, valid),
        prop_oneof![
            4 => vec(tree_op(), 1..=1),
            2 => vec(tree_op(), 2..=3),
            1 => vec(tree_op(), 4..=7),
        ],
        prop_oneof![6 => Just(Vec::new()), 1 => vec(text_op(), 1..3)],
    )
        .prop_map(|(seed, tree, text)| Mutation { seed, tree, text })
}

fn seed_index(seeds: usize, valid: usize) -> BoxedStrategy<usize> {
    if valid == 0 || valid >= seeds {
        (0..seeds.max(1)).boxed()
    } else {
        prop_oneof![3 => 0..valid, 1 => 0..seeds].boxed()
    }
}

/// Byte- and line-level mutations of any seed: one change more often than several.
pub(crate) fn text_mutation(seeds: usize) -> impl Strategy<Value = Mutation> {
    (
        0..seeds.max(1),
        prop_oneof![
            4 => vec(text_op(), 1..=1),
            2 => vec(text_op(), 2..=3),
            1 => vec(text_op(), 4..=8),
        ],
    )
        .prop_map(|(seed, text)| Mutation {
            seed,
            tree: Vec::new(),
            text,
        })
}

/// The mutations of the check → run target: the scenario (gently, mostly) and, now and then,
/// the graph and consensus files next to it.
pub(crate) fn scenario_case(
    seeds: usize,
    valid: usize,
    graphs: usize,
    consensuses: usize,
) -> impl Strategy<Value = ScenarioCase> {
    let gentle = (
        seed_index(seeds, valid),
        prop_oneof![
            5 => vec(gentle_tree_op(), 1..=1),
            2 => vec(gentle_tree_op(), 2..=3),
            1 => vec(gentle_tree_op(), 4..=6),
        ],
    )
        .prop_map(|(seed, tree)| Mutation {
            seed,
            tree,
            text: Vec::new(),
        });
    (
        prop_oneof![
            6 => gentle,
            2 => yaml_mutation(seeds, valid),
            1 => text_mutation(seeds),
        ],
        prop_oneof![6 => Just(None), 1 => text_mutation(graphs).prop_map(Some)],
        prop_oneof![6 => Just(None), 1 => text_mutation(consensuses).prop_map(Some)],
    )
        .prop_map(|(scenario, graph, consensus)| ScenarioCase {
            scenario,
            graph,
            consensus,
        })
}

#[derive(Clone, Debug)]
pub(crate) struct ScenarioCase {
    pub scenario: Mutation,
    /// Replaces `g.gml` next to the scenario (a mutated GML seed).
    pub graph: Option<Mutation>,
    /// Replaces `c.consensus` next to the scenario (a mutated consensus seed).
    pub consensus: Option<Mutation>,
}

/// Applies byte- and line-level changes.
pub(crate) fn apply_text(mut bytes: Vec<u8>, ops: &[TextOp], format: Format) -> Vec<u8> {
    let toks = tokens(format);
    for op in ops {
        let len = bytes.len();
        let pos = |x: u32| if len == 0 { 0 } else { x as usize % (len + 1) };
        match op {
            TextOp::DeleteLine(i) | TextOp::DuplicateLine(i) => {
                let lines = line_spans(&bytes);
                if lines.is_empty() {
                    continue;
                }
                let (s, e) = lines[*i as usize % lines.len()];
                if matches!(op, TextOp::DeleteLine(_)) {
                    bytes.drain(s..e);
                } else {
                    let line = bytes[s..e].to_vec();
                    bytes.splice(s..s, line);
                }
            }
            TextOp::SwapLines(a, b) => {
                let lines = line_spans(&bytes);
                if lines.len() < 2 {
                    continue;
                }
                let (mut x, mut y) = (*a as usize % lines.len(), *b as usize % lines.len());
                if x == y {
                    continue;
                }
                if x > y {
                    std::mem::swap(&mut x, &mut y);
                }
                let (xs, xe) = lines[x];
                let (ys, ye) = lines[y];
                let mut out = bytes[..xs].to_vec();
                out.extend_from_slice(&bytes[ys..ye]);
                out.extend_from_slice(&bytes[xe..ys]);
                out.extend_from_slice(&bytes[xs..xe]);
                out.extend_from_slice(&bytes[ye..]);
                bytes = out;
            }
            TextOp::Truncate(at) => bytes.truncate(pos(*at)),
            TextOp::InsertBytes(at, b) => {
                let p = pos(*at);
                bytes.splice(p..p, b.iter().copied());
            }
            TextOp::SetByte(at, b) => {
                if len > 0 {
                    bytes[*at as usize % len] = *b;
                }
            }
            TextOp::InsertToken(at, t) => {
                let p = pos(*at);
                let tok = toks[*t as usize % toks.len()].as_bytes();
                bytes.splice(p..p, tok.iter().copied());
            }
            TextOp::ReplaceWord(at, t) => {
                if len == 0 {
                    continue;
                }
                let p = *at as usize % len;
                let is_space = |c: u8| c == b' ' || c == b'\n' || c == b'\t';
                let mut s = p;
                while s > 0 && !is_space(bytes[s - 1]) {
                    s -= 1;
                }
                let mut e = p;
                while e < len && !is_space(bytes[e]) {
                    e += 1;
                }
                let tok = toks[*t as usize % toks.len()].as_bytes();
                bytes.splice(s..e, tok.iter().copied());
            }
            TextOp::DeleteRange(at, n) => {
                let p = pos(*at).min(len);
                let e = (p + *n as usize).min(len);
                bytes.drain(p..e);
            }
            TextOp::Repeat(at, n, times) => {
                let p = pos(*at).min(len);
                let e = (p + *n as usize).min(len);
                if e > p {
                    let piece = bytes[p..e].to_vec();
                    let mut rep = Vec::with_capacity(piece.len() * *times as usize);
                    for _ in 0..*times {
                        rep.extend_from_slice(&piece);
                    }
                    bytes.splice(e..e, rep);
                }
            }
        }
    }
    bytes
}

/// `(start, end)` of every line, its newline included.
fn line_spans(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut s = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\n' {
            out.push((s, i + 1));
            s = i + 1;
        }
    }
    if s < bytes.len() {
        out.push((s, bytes.len()));
    }
    out
}

/// Applies structural changes to a YAML tree; `keys` is the key dictionary.
pub(crate) fn apply_tree(mut root: Node, ops: &[TreeOp], keys: &[String]) -> Node {
    for op in ops {
        let paths = root.paths();
        let pick = |x: u32| paths[x as usize % paths.len()].clone();
        match op {
            TreeOp::SetValue(at, v) => {
                let path = pick(*at);
                let value = value_node(VALUES[*v as usize % VALUES.len()]);
                if let Some(n) = root.get_mut(&path) {
                    *n = value;
                }
            }
            TreeOp::Reshape(at, kind) => {
                let path = pick(*at);
                if let Some(n) = root.get_mut(&path) {
                    let old = std::mem::replace(n, Node::Scalar("null".into()));
                    *n = match kind % 8 {
                        0 => Node::Map(Vec::new()),
                        1 => Node::Seq(Vec::new()),
                        2 => Node::Scalar("null".into()),
                        3 => Node::Seq(vec![old]),
                        4 => Node::Map(vec![("x".into(), old)]),
                        5 => match old {
                            Node::Map(entries) => {
                                Node::Seq(entries.into_iter().map(|(_, v)| v).collect())
                            }
                            other => other,
                        },
                        6 => {
                            let mut s = Vec::new();
                            old.scalars(&mut s);
                            Node::Scalar(s.into_iter().next().unwrap_or_else(|| "null".into()))
                        }
                        _ => Node::Scalar("\"\"".into()),
                    };
                }
            }
            TreeOp::Delete(at) | TreeOp::Duplicate(at) => {
                let path = pick(*at);
                let Some((&last, parent)) = path.split_last() else {
                    continue;
                };
                let dup = matches!(op, TreeOp::Duplicate(_));
                match root.get_mut(parent) {
                    Some(Node::Seq(items)) => {
                        if dup {
                            let item = items[last].clone();
                            items.insert(last + 1, item);
                        } else {
                            items.remove(last);
                        }
                    }
                    Some(Node::Map(entries)) => {
                        if dup {
                            let entry = entries[last].clone();
                            entries.insert(last + 1, entry);
                        } else {
                            entries.remove(last);
                        }
                    }
                    _ => {}
                }
            }
            TreeOp::Insert(at, k, v) => {
                let mut path = pick(*at);
                let key = string_scalar(&keys[*k as usize % keys.len()]);
                let value = value_node(VALUES[*v as usize % VALUES.len()]);
                loop {
                    if let Some(Node::Map(entries)) = root.get_mut(&path) {
                        let i = *v as usize % (entries.len() + 1);
                        entries.insert(i, (key, value));
                        break;
                    }
                    if path.pop().is_none() {
                        break;
                    }
                }
            }
            TreeOp::Splice(from, to) => {
                let src = pick(*from);
                let dst = pick(*to);
                // A node copied into its own subtree would grow without bound over many ops;
                // copies into a descendant are still allowed, the tree is bounded by the ops.
                if let Some(copy) = root.get(&src).cloned() {
                    if copy.size() > 2000 {
                        continue;
                    }
                    if let Some(n) = root.get_mut(&dst) {
                        *n = copy;
                    }
                }
            }
            TreeOp::Scale(at, how) => {
                let path = pick(*at);
                if let Some(Node::Scalar(s)) = root.get_mut(&path) {
                    *s = scale_number(s, *how);
                }
            }
            TreeOp::SetSimilar(at, v) => {
                let scalars: Vec<Vec<usize>> = paths
                    .iter()
                    .filter(|p| matches!(root.get(p), Some(Node::Scalar(_))))
                    .cloned()
                    .collect();
                if scalars.is_empty() {
                    continue;
                }
                let path = &scalars[*at as usize % scalars.len()];
                if let Some(Node::Scalar(s)) = root.get_mut(path) {
                    let pool = similar_pool(s);
                    *s = string_scalar(pool[*v as usize % pool.len()]);
                    if s.starts_with('"') && pool != WORDS {
                        // Numbers stay numbers: `string_scalar` quotes what looks numeric.
                        *s = pool[*v as usize % pool.len()].to_string();
                    }
                }
            }
            TreeOp::Nest(at, depth) => {
                let path = pick(*at);
                if let Some(n) = root.get_mut(&path) {
                    let mut node = std::mem::replace(n, Node::Scalar("null".into()));
                    for _ in 0..*depth {
                        node = Node::Seq(vec![node]);
                    }
                    *n = node;
                }
            }
        }
        if root.size() > 20_000 {
            break;
        }
    }
    root
}

/// A dictionary value as a node: collections parsed, everything else a raw scalar.
fn value_node(text: &str) -> Node {
    if text.starts_with(['[', '{']) {
        if let Some(n) = Node::parse(text) {
            return n;
        }
    }
    Node::Scalar(text.to_string())
}

/// Replaces the first number in `s` (keeping its unit) by zero or a much larger one.
fn scale_number(s: &str, how: u8) -> String {
    let start = s.find(|c: char| c.is_ascii_digit());
    let Some(start) = start else {
        return s.to_string();
    };
    let end = s[start..]
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or(s.len(), |e| start + e);
    let number = match how % 8 {
        0 => "0".to_string(),
        1 => "1".to_string(),
        2 => "1000000000".to_string(),
        3 => "4294967295".to_string(),
        4 => "18446744073709551615".to_string(),
        5 => format!("{}000000", &s[start..end]),
        6 => "0.000001".to_string(),
        _ => "99999999999999999999999999".to_string(),
    };
    format!("{}{}{}", &s[..start], number, &s[end..])
}
