//! GraphML import for the Internet models Shadow and its tooling (tornettools) distribute.
//!
//! Attributes are located through their `<key attr.name=...>` declarations rather than fixed
//! `d0`/`d1` ids, because GraphML writers number keys arbitrarily. The attribute names and units
//! are those of Shadow's classic Internet graphs: node `bandwidthup`/`bandwidthdown` in KiB/s,
//! `packetloss` and `countrycode`; edge `latency` and `jitter` in milliseconds and `packetloss`.

use std::collections::HashMap;

use roxmltree::{Document, Node as XmlNode};

use crate::units::parse_decimal;
use crate::{Edge, Graph, Node, TopologyError, MAX_EDGE_DELAY};

/// Bits per second in one KiB/s, the bandwidth unit of Shadow's GraphML models.
const BITS_PER_KIB: u128 = 8 * 1024;
/// Nanoseconds per millisecond, the latency unit of Shadow's GraphML models.
const NS_PER_MS: u128 = 1_000_000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum NodeAttr {
    PacketLoss,
    CountryCode,
    BandwidthUp,
    BandwidthDown,
    Label,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum EdgeAttr {
    Latency,
    Jitter,
    PacketLoss,
}

fn node_attr(name: &str) -> Option<NodeAttr> {
    Some(match name {
        "packetloss" | "packet_loss" => NodeAttr::PacketLoss,
        "countrycode" | "country_code" => NodeAttr::CountryCode,
        "bandwidthup" | "bandwidth_up" => NodeAttr::BandwidthUp,
        "bandwidthdown" | "bandwidth_down" => NodeAttr::BandwidthDown,
        "label" => NodeAttr::Label,
        _ => return None,
    })
}

fn edge_attr(name: &str) -> Option<EdgeAttr> {
    Some(match name {
        "latency" => EdgeAttr::Latency,
        "jitter" => EdgeAttr::Jitter,
        "packetloss" | "packet_loss" => EdgeAttr::PacketLoss,
        _ => return None,
    })
}

/// A declared `<key>`: which element kinds it applies to, its name, and its default, if any.
struct Key<'a> {
    for_node: bool,
    for_edge: bool,
    name: &'a str,
    default: Option<(&'a str, usize)>,
}

struct Ctx<'a> {
    file: &'a str,
    /// Byte offset at which each line starts. roxmltree's own position lookup rescans the
    /// text from the beginning on every call, which is quadratic over a large model.
    line_starts: Vec<usize>,
}

impl Ctx<'_> {
    fn line(&self, n: XmlNode<'_, '_>) -> usize {
        self.line_starts.partition_point(|&s| s <= n.range().start)
    }

    fn err(&self, n: XmlNode<'_, '_>, message: String) -> TopologyError {
        TopologyError::at(self.file, self.line(n), message)
    }

    fn attr<'n>(&self, n: XmlNode<'n, '_>, name: &str) -> Result<&'n str, TopologyError> {
        n.attribute(name).ok_or_else(|| {
            self.err(
                n,
                format!(
                    "<{}> is missing the required attribute '{name}'",
                    n.tag_name().name()
                ),
            )
        })
    }
}

fn elements<'a, 'input>(
    parent: XmlNode<'a, 'input>,
    name: &'static str,
) -> impl Iterator<Item = XmlNode<'a, 'input>> {
    parent
        .children()
        .filter(move |c| c.is_element() && c.tag_name().name() == name)
}

fn probability(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(p) if crate::LOSS_RANGE.contains(&p) => Ok(p),
        _ => Err(format!(
            "packet loss must be {}, found \"{text}\"",
            crate::LOSS_EXPECTED
        )),
    }
}

/// Converts a decimal in some unit to an integer in a smaller one (ms to ns, KiB/s to bit/s).
fn scaled(text: &str, factor: u128, what: &str) -> Result<u64, String> {
    let d = parse_decimal(text.trim(), true)
        .ok_or_else(|| format!("{what} must be a number, found \"{text}\""))?;
    if d.negative && !d.is_zero() {
        return Err(format!("{what} must not be negative, found \"{text}\""));
    }
    d.scale(factor)
        .ok_or_else(|| format!("{what} \"{text}\" is too large"))
}

/// An edge's latency or jitter in ms, within [`MAX_EDGE_DELAY`].
fn delay(text: &str, what: &str) -> Result<u64, String> {
    let ns = scaled(text, NS_PER_MS, what)?;
    if ns > MAX_EDGE_DELAY {
        return Err(format!(
            "{what} {} ms is longer than the most an edge may take, 1 hour (3600000 ms)",
            text.trim()
        ));
    }
    Ok(ns)
}

/// Derives the numeric id the rest of onionlab uses from a GraphML node id: plain integers are
/// taken as they are, and ids like `poi-112` contribute their trailing digits, so that host
/// configurations can name the same numbers that appear in the file.
fn numeric_id(id: &str) -> Option<u64> {
    let digits_start = id
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_digit())
        .last()
        .map(|(i, _)| i)?;
    id[digits_start..].parse().ok()
}

pub(crate) fn parse(text: &str, file: &str) -> Result<Graph, TopologyError> {
    let options = roxmltree::ParsingOptions {
        allow_dtd: false,
        ..Default::default()
    };
    let doc = Document::parse_with_options(text, options).map_err(|e| TopologyError {
        file: file.to_string(),
        // The parser gives no position for a DTD; its declaration is where to look.
        line: Some(match (&e, text.find("<!DOCTYPE")) {
            (roxmltree::Error::DtdDetected, Some(at)) => text[..at].matches('\n').count() + 1,
            _ => e.pos().row as usize,
        }),
        message: onionlab_data::clip(match e {
            roxmltree::Error::DtdDetected => "the file holds a document type declaration \
                (<!DOCTYPE ...>), which GraphML does not need and onionlab does not read (its \
                entities could expand without bound); remove it"
                .to_string(),
            roxmltree::Error::NodesLimitReached => {
                "the document holds more XML elements and texts than onionlab reads".to_string()
            }
            e => format!("malformed XML: {e}"),
        }),
    })?;
    let line_starts = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let cx = Ctx { file, line_starts };
    let root = doc.root_element();
    if root.tag_name().name() != "graphml" {
        return Err(cx.err(
            root,
            format!(
                "expected a <graphml> root element, found <{}>",
                root.tag_name().name()
            ),
        ));
    }

    let mut keys: HashMap<&str, Key<'_>> = HashMap::new();
    for k in elements(root, "key") {
        let id = cx.attr(k, "id")?;
        let name = cx.attr(k, "attr.name")?;
        let domain = k.attribute("for").unwrap_or("all");
        let default = elements(k, "default")
            .next()
            .map(|d| (d.text().unwrap_or(""), cx.line(d)));
        let key = Key {
            for_node: matches!(domain, "node" | "all"),
            for_edge: matches!(domain, "edge" | "all"),
            name,
            default,
        };
        if keys.insert(id, key).is_some() {
            return Err(cx.err(k, format!("duplicate <key> id '{id}'")));
        }
    }

    let graph = elements(root, "graph")
        .next()
        .ok_or_else(|| cx.err(root, "no <graph> element inside <graphml>".to_string()))?;
    let directed = match cx.attr(graph, "edgedefault")? {
        "directed" => true,
        "undirected" => false,
        other => {
            return Err(cx.err(
                graph,
                format!("edgedefault must be 'directed' or 'undirected', found '{other}'"),
            ))
        }
    };

    // Values for one element: declared defaults first, then its own <data> children.
    let collect = |el: XmlNode<'_, '_>, for_node: bool| {
        let mut values: Vec<(&str, String, usize)> = keys
            .values()
            .filter(|k| if for_node { k.for_node } else { k.for_edge })
            .filter_map(|k| k.default.map(|(v, line)| (k.name, v.to_string(), line)))
            .collect();
        for d in elements(el, "data") {
            let id = cx.attr(d, "key")?;
            let key = keys
                .get(id)
                .ok_or_else(|| cx.err(d, format!("<data> refers to undeclared key '{id}'")))?;
            if !(if for_node { key.for_node } else { key.for_edge }) {
                return Err(cx.err(
                    d,
                    format!(
                        "key '{id}' ({}) is not declared for <{}> elements",
                        key.name,
                        el.tag_name().name()
                    ),
                ));
            }
            let text = d.text().unwrap_or("").to_string();
            values.retain(|(name, _, _)| *name != key.name);
            values.push((key.name, text, cx.line(d)));
        }
        Ok::<_, TopologyError>(values)
    };

    let mut nodes = Vec::new();
    let mut index_of: HashMap<&str, usize> = HashMap::new();
    let mut numeric_ids: HashMap<u64, &str> = HashMap::new();
    for n in elements(graph, "node") {
        let name = cx.attr(n, "id")?;
        if index_of.insert(name, nodes.len()).is_some() {
            return Err(cx.err(n, format!("duplicate node id '{name}'")));
        }
        let id = numeric_id(name).ok_or_else(|| {
            cx.err(
                n,
                format!("node id '{name}' does not end in a number, which onionlab needs"),
            )
        })?;
        if let Some(other) = numeric_ids.insert(id, name) {
            return Err(cx.err(
                n,
                format!("node ids '{other}' and '{name}' both map to the number {id}"),
            ));
        }
        let mut node = Node {
            id,
            label: Some(name.to_string()),
            country_code: None,
            bandwidth_up: None,
            bandwidth_down: None,
            packet_loss: 0.0,
        };
        for (attr, text, line) in collect(n, true)? {
            let at = |m: String| TopologyError::at(file, line, format!("node '{name}': {m}"));
            match node_attr(attr) {
                Some(NodeAttr::PacketLoss) => node.packet_loss = probability(&text).map_err(at)?,
                Some(NodeAttr::CountryCode) => {
                    node.country_code =
                        crate::country_code(&text).map_err(|m| at(format!("countrycode {m}")))?;
                }
                Some(NodeAttr::BandwidthUp) => {
                    node.bandwidth_up =
                        Some(scaled(&text, BITS_PER_KIB, "bandwidthup").map_err(at)?)
                }
                Some(NodeAttr::BandwidthDown) => {
                    node.bandwidth_down =
                        Some(scaled(&text, BITS_PER_KIB, "bandwidthdown").map_err(at)?)
                }
                Some(NodeAttr::Label) => node.label = Some(text),
                None => {}
            }
        }
        nodes.push(node);
    }

    let mut edges = Vec::new();
    for e in elements(graph, "edge") {
        if let Some(d) = e.attribute("directed") {
            if (d == "true") != directed {
                return Err(cx.err(
                    e,
                    "edges that differ from the graph's edgedefault are not supported".to_string(),
                ));
            }
        }
        let end = |role: &str| -> Result<usize, TopologyError> {
            let id = cx.attr(e, role)?;
            index_of.get(id).copied().ok_or_else(|| {
                cx.err(
                    e,
                    format!("edge {role} '{id}' does not refer to any node defined in the graph"),
                )
            })
        };
        let (source, target) = (end("source")?, end("target")?);
        let mut latency = None;
        let mut edge = Edge {
            source,
            target,
            latency: 0,
            jitter: 0,
            packet_loss: 0.0,
        };
        for (attr, text, line) in collect(e, false)? {
            let at = |m: String| TopologyError::at(file, line, format!("edge: {m}"));
            match edge_attr(attr) {
                Some(EdgeAttr::Latency) => latency = Some(delay(&text, "latency").map_err(at)?),
                Some(EdgeAttr::Jitter) => edge.jitter = delay(&text, "jitter").map_err(at)?,
                Some(EdgeAttr::PacketLoss) => edge.packet_loss = probability(&text).map_err(at)?,
                None => {}
            }
        }
        edge.latency = latency.ok_or_else(|| {
            cx.err(
                e,
                "edge is missing required attribute 'latency'".to_string(),
            )
        })?;
        edges.push(edge);
    }

    Ok(Graph {
        source: file.to_string(),
        directed,
        nodes,
        edges,
    })
}

#[cfg(test)]
mod tests {
    use super::numeric_id;

    #[test]
    fn numeric_ids() {
        assert_eq!(numeric_id("poi-112"), Some(112));
        assert_eq!(numeric_id("7"), Some(7));
        assert_eq!(numeric_id("n07"), Some(7));
        assert_eq!(numeric_id("abc"), None);
        assert_eq!(numeric_id(""), None);
        assert_eq!(numeric_id("x99999999999999999999999"), None);
    }
}
