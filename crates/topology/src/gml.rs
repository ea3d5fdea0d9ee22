//! A small GML reader for Shadow-style network graphs.
//!
//! GML is parsed in two steps: a generic tree of `key value` pairs (every item remembering its
//! line), then an interpretation of that tree as a [`Graph`]. Keeping the generic step separate
//! lets unknown keys be skipped wholesale, as Shadow does, while the known ones get precise
//! errors.

use std::collections::HashMap;

use crate::units::{parse_bandwidth, parse_decimal, parse_time};
use crate::{Edge, Graph, Node, TopologyError, MAX_EDGE_DELAY};

/// Deeper nesting than this is refused, so that hostile input cannot exhaust the stack.
const MAX_DEPTH: usize = 64;

#[derive(Debug)]
enum Tok {
    Key(String),
    /// Kept as text: whether it is an integer, a float or a time in seconds depends on the key.
    Number(String),
    Str(String),
    Open,
    Close,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Key(k) => format!("key '{k}'"),
            Tok::Number(n) => format!("number {n}"),
            Tok::Str(s) => format!("string \"{s}\""),
            Tok::Open => "'['".to_string(),
            Tok::Close => "']'".to_string(),
        }
    }
}

struct Lexer<'a> {
    file: &'a str,
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
}

impl<'a> Lexer<'a> {
    fn new(text: &'a str, file: &'a str) -> Self {
        Lexer {
            file,
            chars: text.chars().peekable(),
            line: 1,
        }
    }

    fn err(&self, line: usize, message: String) -> TopologyError {
        TopologyError::at(self.file, line, message)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    /// Returns the next token and the line it starts on, or `None` at the end of the text.
    fn next_token(&mut self) -> Result<Option<(Tok, usize)>, TopologyError> {
        loop {
            match self.chars.peek() {
                None => return Ok(None),
                Some(c) if c.is_whitespace() => {
                    self.bump();
                }
                Some('#') => {
                    // Comment to the end of the line.
                    while let Some(c) = self.bump() {
                        if c == '\n' {
                            break;
                        }
                    }
                }
                Some(_) => break,
            }
        }
        let line = self.line;
        let Some(c) = self.bump() else {
            return Ok(None);
        };
        let tok = match c {
            '[' => Tok::Open,
            ']' => Tok::Close,
            '"' => {
                let mut s = String::new();
                loop {
                    match self.bump() {
                        None => {
                            return Err(self.err(
                                line,
                                "unterminated string: missing closing '\"'".to_string(),
                            ))
                        }
                        Some('"') => break,
                        Some(c) => s.push(c),
                    }
                }
                Tok::Str(decode_entities(&s))
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let mut s = String::from(c);
                while let Some(&c) = self.chars.peek() {
                    if c.is_ascii_alphanumeric() || c == '_' {
                        s.push(c);
                        self.bump();
                    } else {
                        break;
                    }
                }
                Tok::Key(s)
            }
            c if c.is_ascii_digit() || c == '-' || c == '+' || c == '.' => {
                let mut s = String::from(c);
                while let Some(&c) = self.chars.peek() {
                    if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '+' {
                        s.push(c);
                        self.bump();
                    } else {
                        break;
                    }
                }
                if parse_decimal(&s, true).is_none() {
                    let hint = if s.ends_with(|c: char| c.is_ascii_alphabetic()) {
                        " (a quantity with a unit is a quoted string, such as \"10 ms\")"
                    } else {
                        ""
                    };
                    return Err(self.err(line, format!("malformed number '{s}'{hint}")));
                }
                Tok::Number(s)
            }
            other => {
                return Err(self.err(
                    line,
                    format!(
                        "unexpected character '{}'; expected a key, a number, a quoted string, \
                         '[' or ']'",
                        other.escape_debug()
                    ),
                ))
            }
        };
        Ok(Some((tok, line)))
    }
}

/// GML strings carry no backslash escapes; quotes and ampersands are written as HTML entities.
fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    s.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

#[derive(Debug)]
enum Value {
    Number(String),
    Str(String),
    List(Vec<Item>),
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Number(_) => "a number",
            Value::Str(_) => "a string",
            Value::List(_) => "a list",
        }
    }
}

#[derive(Debug)]
struct Item {
    key: String,
    /// Line of the key, which is where a reader looks for the offending attribute.
    line: usize,
    value: Value,
}

/// Reads `key value` pairs until the end of the enclosing list (or of the text at top level).
fn parse_items(
    lex: &mut Lexer<'_>,
    open: Option<(&str, usize)>,
    depth: usize,
) -> Result<Vec<Item>, TopologyError> {
    let mut items = Vec::new();
    loop {
        let Some((tok, line)) = lex.next_token()? else {
            return match open {
                None => Ok(items),
                Some((key, open_line)) => Err(lex.err(
                    open_line,
                    format!("unterminated list: '[' after key '{key}' is never closed by ']'"),
                )),
            };
        };
        let key = match tok {
            Tok::Key(k) => k,
            Tok::Close if open.is_some() => return Ok(items),
            Tok::Close => {
                return Err(lex.err(line, "unexpected ']' without a matching '['".to_string()))
            }
            other => {
                return Err(lex.err(line, format!("expected a key, found {}", other.describe())))
            }
        };
        let value = match lex.next_token()? {
            None => {
                return Err(lex.err(
                    line,
                    format!("expected a value for key '{key}', found end of file"),
                ))
            }
            Some((Tok::Number(n), _)) => Value::Number(n),
            Some((Tok::Str(s), _)) => Value::Str(s),
            Some((Tok::Open, open_line)) => {
                if depth >= MAX_DEPTH {
                    return Err(lex.err(
                        open_line,
                        format!("lists nested more than {MAX_DEPTH} deep"),
                    ));
                }
                Value::List(parse_items(lex, Some((&key, open_line)), depth + 1)?)
            }
            Some((other, vline)) => {
                return Err(lex.err(
                    vline,
                    format!(
                        "expected a value for key '{key}', found {}",
                        other.describe()
                    ),
                ))
            }
        };
        items.push(Item { key, line, value });
    }
}

/// Typed access to one GML list, with errors that name the list and the line.
struct Fields<'a> {
    file: &'a str,
    what: &'static str,
    line: usize,
    items: &'a [Item],
}

impl<'a> Fields<'a> {
    fn err(&self, line: usize, message: String) -> TopologyError {
        TopologyError::at(self.file, line, message)
    }

    /// The single item with this key; repeating a known key is an error because the intended
    /// value would be ambiguous.
    fn get(&self, key: &str) -> Result<Option<&'a Item>, TopologyError> {
        let mut found = None;
        for item in self.items.iter().filter(|i| i.key == key) {
            if found.is_some() {
                return Err(self.err(item.line, format!("duplicate key '{key}' in {}", self.what)));
            }
            found = Some(item);
        }
        Ok(found)
    }

    fn require(&self, key: &str) -> Result<&'a Item, TopologyError> {
        self.get(key)?.ok_or_else(|| {
            self.err(
                self.line,
                format!("{} is missing required key '{key}'", self.what),
            )
        })
    }

    fn wrong_type(&self, item: &Item, expected: &str) -> TopologyError {
        self.err(
            item.line,
            format!(
                "{} key '{}' must be {expected}, found {}",
                self.what,
                item.key,
                item.value.kind()
            ),
        )
    }

    fn int(&self, item: &Item) -> Result<i64, TopologyError> {
        match &item.value {
            Value::Number(n) => n.parse::<i64>().map_err(|_| {
                self.err(
                    item.line,
                    format!(
                        "{} key '{}' must be an integer, found {n}",
                        self.what, item.key
                    ),
                )
            }),
            _ => Err(self.wrong_type(item, "an integer")),
        }
    }

    fn node_ref(&self, item: &Item) -> Result<u64, TopologyError> {
        let v = self.int(item)?;
        u64::try_from(v).map_err(|_| {
            self.err(
                item.line,
                format!(
                    "{} key '{}' must be a non-negative node id, found {v}",
                    self.what, item.key
                ),
            )
        })
    }

    fn string(&self, key: &str) -> Result<Option<String>, TopologyError> {
        match self.get(key)? {
            None => Ok(None),
            Some(Item {
                value: Value::Str(s),
                ..
            }) => Ok(Some(s.clone())),
            Some(item) => Err(self.wrong_type(item, "a quoted string")),
        }
    }

    /// `country_code`, when given: two letters, as [`crate::country_code`] checks.
    fn country_code(&self) -> Result<Option<String>, TopologyError> {
        let Some(code) = self.string("country_code")? else {
            return Ok(None);
        };
        let line = self.get("country_code")?.map_or(self.line, |i| i.line);
        crate::country_code(&code)
            .map_err(|m| self.err(line, format!("{} key 'country_code' {m}", self.what)))
    }

    fn probability(&self, key: &str) -> Result<f64, TopologyError> {
        let Some(item) = self.get(key)? else {
            return Ok(0.0);
        };
        let p = match &item.value {
            Value::Number(n) => n.parse::<f64>().ok(),
            Value::Str(s) => s.trim().parse::<f64>().ok(),
            Value::List(_) => return Err(self.wrong_type(item, "a number between 0 and 1")),
        };
        match p {
            Some(p) if crate::LOSS_RANGE.contains(&p) => Ok(p),
            _ => Err(self.err(
                item.line,
                format!(
                    "{} key '{key}' must be {}, found {}",
                    self.what,
                    crate::LOSS_EXPECTED,
                    display_value(&item.value)
                ),
            )),
        }
    }

    /// A time must be a quoted string with its unit: a bare `latency 1` could mean a second
    /// (Shadow's base unit for strings) or a millisecond (the GraphML models' unit), and a wrong
    /// guess shifts every path by a factor of a thousand without any other sign.
    fn time(&self, item: &Item) -> Result<u64, TopologyError> {
        let key = &item.key;
        let parsed = match &item.value {
            Value::Number(n) => Err(format!(
                "the bare number {n} has no unit; write the time in quotes with its unit, \
                 such as {key} \"10 ms\""
            )),
            Value::Str(s) => parse_time(s),
            Value::List(_) => return Err(self.wrong_type(item, "a time such as \"10 ms\"")),
        };
        let t = parsed.and_then(|t| {
            if t > MAX_EDGE_DELAY {
                Err(format!(
                    "{} is longer than the most an edge may take, 1 hour (the slowest real \
                     links take under a second; check the unit)",
                    display_value(&item.value)
                ))
            } else {
                Ok(t)
            }
        });
        t.map_err(|m| self.err(item.line, format!("{} key '{key}': {m}", self.what)))
    }

    fn bandwidth(&self, keys: &[&str]) -> Result<Option<u64>, TopologyError> {
        let mut found: Option<&Item> = None;
        for key in keys {
            if let Some(item) = self.get(key)? {
                if let Some(prev) = found {
                    return Err(self.err(
                        item.line,
                        format!(
                            "{} sets both '{}' and '{}'; use only one",
                            self.what, prev.key, item.key
                        ),
                    ));
                }
                found = Some(item);
            }
        }
        let Some(item) = found else {
            return Ok(None);
        };
        let parsed = match &item.value {
            Value::Str(s) => parse_bandwidth(s),
            // A bare number is in the base unit, bits per second.
            Value::Number(n) => n
                .parse::<u64>()
                .map_err(|_| format!("expected a whole number of bits per second, found {n}")),
            Value::List(_) => return Err(self.wrong_type(item, "a bandwidth such as \"10 Mbit\"")),
        };
        parsed
            .map(Some)
            .map_err(|m| self.err(item.line, format!("{} key '{}': {m}", self.what, item.key)))
    }
}

fn display_value(v: &Value) -> String {
    match v {
        Value::Number(n) => n.clone(),
        Value::Str(s) => format!("\"{s}\""),
        Value::List(_) => "a list".to_string(),
    }
}

/// An edge before its endpoint ids are resolved, since GML may list edges before nodes.
struct PendingEdge {
    source: (u64, usize),
    target: (u64, usize),
    latency: u64,
    jitter: u64,
    packet_loss: f64,
}

pub(crate) fn parse(text: &str, file: &str) -> Result<Graph, TopologyError> {
    let mut lex = Lexer::new(text, file);
    let top = parse_items(&mut lex, None, 0)?;
    let top_fields = Fields {
        file,
        what: "file",
        line: 1,
        items: &top,
    };
    let graph_item = top_fields.get("graph")?.ok_or_else(|| {
        TopologyError::at(
            file,
            lex.line,
            "no 'graph [ ... ]' list found in the file".to_string(),
        )
    })?;
    let Value::List(graph_items) = &graph_item.value else {
        return Err(top_fields.wrong_type(graph_item, "a list '[ ... ]'"));
    };
    let g = Fields {
        file,
        what: "graph",
        line: graph_item.line,
        items: graph_items,
    };
    let directed = match g.get("directed")? {
        None => false,
        Some(item) => match g.int(item)? {
            0 => false,
            1 => true,
            v => {
                return Err(g.err(
                    item.line,
                    format!("graph key 'directed' must be 0 or 1, found {v}"),
                ))
            }
        },
    };

    let mut nodes = Vec::new();
    let mut index_of: HashMap<u64, usize> = HashMap::new();
    let mut pending = Vec::new();
    for item in graph_items {
        let what = match item.key.as_str() {
            "node" => "node",
            "edge" => "edge",
            _ => continue,
        };
        let Value::List(items) = &item.value else {
            return Err(g.wrong_type(item, "a list '[ ... ]'"));
        };
        let f = Fields {
            file,
            what,
            line: item.line,
            items,
        };
        if what == "node" {
            let id_item = f.require("id")?;
            let id = f.node_ref(id_item)?;
            if index_of.insert(id, nodes.len()).is_some() {
                return Err(f.err(id_item.line, format!("duplicate node id {id}")));
            }
            nodes.push(Node {
                id,
                label: f.string("label")?,
                country_code: f.country_code()?,
                bandwidth_up: f.bandwidth(&["host_bandwidth_up", "bandwidth_up"])?,
                bandwidth_down: f.bandwidth(&["host_bandwidth_down", "bandwidth_down"])?,
                packet_loss: f.probability("packet_loss")?,
            });
        } else {
            let source = f.require("source")?;
            let target = f.require("target")?;
            let latency = f.require("latency")?;
            let jitter = match f.get("jitter")? {
                Some(j) => f.time(j)?,
                None => 0,
            };
            pending.push(PendingEdge {
                source: (f.node_ref(source)?, source.line),
                target: (f.node_ref(target)?, target.line),
                latency: f.time(latency)?,
                jitter,
                packet_loss: f.probability("packet_loss")?,
            });
        }
    }

    let resolve = |(id, line): (u64, usize), role: &str| {
        index_of.get(&id).copied().ok_or_else(|| {
            TopologyError::at(
                file,
                line,
                format!("edge {role} {id} does not refer to any node id defined in the graph"),
            )
        })
    };
    let mut edges = Vec::with_capacity(pending.len());
    for e in pending {
        edges.push(Edge {
            source: resolve(e.source, "source")?,
            target: resolve(e.target, "target")?,
            latency: e.latency,
            jitter: e.jitter,
            packet_loss: e.packet_loss,
        });
    }
    Ok(Graph {
        source: file.to_string(),
        directed,
        nodes,
        edges,
    })
}
