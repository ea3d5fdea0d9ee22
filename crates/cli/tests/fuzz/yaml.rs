//! A YAML document as a tree the fuzzer can mutate, and back to text.
//!
//! Scalars keep the text they are written with (`1 MiB/s`, `.inf`, `"quoted"`), maps are lists
//! of entries so that a key may repeat, and the writer emits block style, so any tree, however
//! odd, becomes a YAML document the scenario parser has to cope with.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Node {
    /// A scalar as written in YAML (already quoted when it has to be).
    Scalar(String),
    Seq(Vec<Node>),
    /// Entries in order; keys are written as YAML scalars too.
    Map(Vec<(String, Node)>),
}

impl Node {
    /// Parses YAML text into a tree; `None` when the text is not YAML the reader accepts.
    /// `.inf` and `.nan` are kept (as floats), and a repeated key keeps its last value.
    pub(crate) fn parse(text: &str) -> Option<Node> {
        let mut options = serde_saphyr::Options::default();
        options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::PassThrough;
        options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::LastWins;
        serde_saphyr::from_str_with_options::<Node>(text, options).ok()
    }

    /// The number of nodes, this one included.
    pub(crate) fn size(&self) -> usize {
        1 + match self {
            Node::Scalar(_) => 0,
            Node::Seq(items) => items.iter().map(Node::size).sum(),
            Node::Map(entries) => entries.iter().map(|(_, v)| v.size()).sum(),
        }
    }

    /// Paths (child positions from the root) of every node, in pre-order.
    pub(crate) fn paths(&self) -> Vec<Vec<usize>> {
        fn walk(n: &Node, prefix: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
            out.push(prefix.clone());
            let children: Vec<&Node> = match n {
                Node::Scalar(_) => Vec::new(),
                Node::Seq(items) => items.iter().collect(),
                Node::Map(entries) => entries.iter().map(|(_, v)| v).collect(),
            };
            for (i, c) in children.into_iter().enumerate() {
                prefix.push(i);
                walk(c, prefix, out);
                prefix.pop();
            }
        }
        let mut out = Vec::new();
        walk(self, &mut Vec::new(), &mut out);
        out
    }

    pub(crate) fn get(&self, path: &[usize]) -> Option<&Node> {
        let mut n = self;
        for &i in path {
            n = match n {
                Node::Scalar(_) => return None,
                Node::Seq(items) => items.get(i)?,
                Node::Map(entries) => &entries.get(i)?.1,
            };
        }
        Some(n)
    }

    pub(crate) fn get_mut(&mut self, path: &[usize]) -> Option<&mut Node> {
        let mut n = self;
        for &i in path {
            n = match n {
                Node::Scalar(_) => return None,
                Node::Seq(items) => items.get_mut(i)?,
                Node::Map(entries) => &mut entries.get_mut(i)?.1,
            };
        }
        Some(n)
    }

    /// Every key used anywhere in the tree.
    pub(crate) fn keys(&self, out: &mut Vec<String>) {
        match self {
            Node::Scalar(_) => {}
            Node::Seq(items) => items.iter().for_each(|i| i.keys(out)),
            Node::Map(entries) => {
                for (k, v) in entries {
                    out.push(k.clone());
                    v.keys(out);
                }
            }
        }
    }

    /// Every scalar in the tree.
    pub(crate) fn scalars(&self, out: &mut Vec<String>) {
        match self {
            Node::Scalar(s) => out.push(s.clone()),
            Node::Seq(items) => items.iter().for_each(|i| i.scalars(out)),
            Node::Map(entries) => entries.iter().for_each(|(_, v)| v.scalars(out)),
        }
    }

    /// Block-style YAML.
    pub(crate) fn to_yaml(&self) -> String {
        let mut out = String::new();
        match self {
            Node::Scalar(s) => {
                out.push_str(s);
                out.push('\n');
            }
            _ => emit_block(self, 0, &mut out),
        }
        out
    }
}

/// Writes a non-empty collection (or an inline empty one / scalar) starting at `indent`.
fn emit_block(n: &Node, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match n {
        Node::Scalar(s) => {
            out.push_str(&pad);
            out.push_str(s);
            out.push('\n');
        }
        Node::Seq(items) if items.is_empty() => {
            out.push_str(&pad);
            out.push_str("[]\n");
        }
        Node::Map(entries) if entries.is_empty() => {
            out.push_str(&pad);
            out.push_str("{}\n");
        }
        Node::Seq(items) => {
            for item in items {
                out.push_str(&pad);
                out.push('-');
                match item {
                    Node::Scalar(s) => {
                        out.push(' ');
                        out.push_str(s);
                        out.push('\n');
                    }
                    Node::Seq(v) if v.is_empty() => out.push_str(" []\n"),
                    Node::Map(v) if v.is_empty() => out.push_str(" {}\n"),
                    Node::Map(_) => {
                        // `- key: value` with the other keys aligned under the first.
                        let mut inner = String::new();
                        emit_block(item, indent + 2, &mut inner);
                        out.push(' ');
                        out.push_str(&inner[indent + 2..]);
                    }
                    Node::Seq(_) => {
                        out.push('\n');
                        emit_block(item, indent + 2, out);
                    }
                }
            }
        }
        Node::Map(entries) => {
            for (k, v) in entries {
                out.push_str(&pad);
                out.push_str(&key_text(k));
                out.push(':');
                match v {
                    Node::Scalar(s) => {
                        out.push(' ');
                        out.push_str(s);
                        out.push('\n');
                    }
                    Node::Seq(items) if items.is_empty() => out.push_str(" []\n"),
                    Node::Map(entries) if entries.is_empty() => out.push_str(" {}\n"),
                    _ => {
                        out.push('\n');
                        emit_block(v, indent + 2, out);
                    }
                }
            }
        }
    }
}

fn key_text(k: &str) -> String {
    // Keys hold the scalar text already (see `Node::deserialize`); an empty one needs quotes.
    if k.is_empty() {
        "\"\"".to_string()
    } else {
        k.to_string()
    }
}

/// The YAML text of a string value: plain when the plain form reads back as the same string,
/// double-quoted otherwise.
pub(crate) fn string_scalar(s: &str) -> String {
    if plain_is_safe(s) {
        s.to_string()
    } else {
        serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
    }
}

fn plain_is_safe(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if !(first.is_ascii_alphanumeric() || "._/+(".contains(first)) {
        return false;
    }
    if s.ends_with(' ') || s.ends_with(':') || s.contains(": ") || s.contains(" #") {
        return false;
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || " ._/+-,:=()*".contains(c))
    {
        return false;
    }
    // Anything a YAML reader could take for another type stays quoted.
    let lower = s.to_ascii_lowercase();
    if matches!(
        lower.as_str(),
        "true" | "false" | "null" | "~" | "yes" | "no" | "on" | "off" | "y" | "n"
    ) || lower.starts_with('.')
        || s.parse::<f64>().is_ok()
        || s.starts_with(|c: char| c.is_ascii_digit()) && !s.contains(|c: char| c.is_alphabetic())
    {
        return false;
    }
    true
}

fn float_scalar(v: f64) -> String {
    if v.is_nan() {
        ".nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { ".inf" } else { "-.inf" }.into()
    } else {
        let s = format!("{v:?}");
        if s.contains(['.', 'e', 'E']) {
            s
        } else {
            format!("{s}.0")
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<Node, E> {
                Ok(Node::Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Node, E> {
                Ok(Node::Scalar(float_scalar(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
                Ok(Node::Scalar(string_scalar(v)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
                Ok(Node::Scalar("null".into()))
            }
            fn visit_none<E: de::Error>(self) -> Result<Node, E> {
                Ok(Node::Scalar("null".into()))
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Node, D2::Error> {
                Node::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Node>()? {
                    items.push(item);
                }
                Ok(Node::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut entries = Vec::new();
                while let Some((k, v)) = map.next_entry::<Node, Node>()? {
                    let key = match k {
                        Node::Scalar(s) => s,
                        // A collection as a key: keep something the writer can print.
                        other => string_scalar(&format!("{other:?}")),
                    };
                    entries.push((key, v));
                }
                Ok(Node::Map(entries))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let text = "name: x\nrun: { stop_time: 1s }\nrelays:\n  list:\n    - { name: a, flags: [guard, exit], bandwidth_rate: 1 MiB/s }\nv: [[1, 2], []]\nm: {}\nf: 0.5\ng: .inf\ns: \"1\"\nn: ~\n";
        let tree = Node::parse(text).unwrap();
        let back = Node::parse(&tree.to_yaml()).unwrap();
        assert_eq!(tree, back, "{}", tree.to_yaml());
    }
}
